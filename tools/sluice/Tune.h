//===- Tune.h - The driver's entry points into the autotuner ----*- C++ -*-===//
#ifndef SLUICE_TOOLS_TUNE_H
#define SLUICE_TOOLS_TUNE_H

#include "sluice/runtime/Pipeline.h"

#include <ostream>

namespace sluice::tools {

/// `sluice tune ...` (argv[1] is "tune"); returns the exit code.
int cmdTune(int argc, char **argv);

/// `schedule: auto` for `sluice run`: profiles briefly, solves, and merges
/// the chosen knobs into opts.schedule (`--stats` prints what and why).
/// SLUICE_NO_AUTOTUNE=1 skips it. Returns -1 to go on, else an exit code.
int applyAutoSchedule(const runtime::Plan &plan, runtime::RunOptions &opts,
                      std::ostream &out, std::ostream &err);

} // namespace sluice::tools

#endif // SLUICE_TOOLS_TUNE_H
