//===- ScheduleFile.h - `--schedule FILE` for every command that runs ---*- C++
//-*-===//
//
// `sluice run --schedule`, `sluice bench --schedule` and a compiled
// executable's --schedule read the same YAML file the same way: checked
// against the spec's step names (a compiled executable rebuilds them from
// what `sluice compile` recorded), located errors, then applied as
// RunOptions::schedule overrides. The front end (yaml-cpp) but no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TOOLS_SCHEDULEFILE_H
#define SLUICE_TOOLS_SCHEDULEFILE_H

#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Pipeline.h"

#include <string>

namespace sluice::tool {

/// Reads the schedule file `file` for `spec` and puts its per-step settings
/// into opts.schedule. On an error (unreadable file, unknown step, bad
/// value) prints it, located in the file, and returns false (a usage error).
bool applyScheduleFile(const std::string &file, const dsl::Spec &spec,
                       runtime::RunOptions &opts);

} // namespace sluice::tool

#endif // SLUICE_TOOLS_SCHEDULEFILE_H
