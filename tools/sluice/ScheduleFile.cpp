//===- ScheduleFile.cpp - `--schedule FILE` for every command that runs ---===//
//
// One reading of schedule files for the driver and compiled executables, so
// both accept and refuse the same files with the same messages.
//
//===----------------------------------------------------------------------===//
#include "ScheduleFile.h"

#include "RunFlags.h"

#include <cstdlib>
#include <iostream>
#include <map>
#include <unistd.h>

namespace sluice::tool {

bool applyScheduleFile(const std::string &file, const dsl::Spec &spec,
                       runtime::RunOptions &opts) {
  std::string text, err;
  if (!dsl::readFile(file, text, err)) {
    std::cerr << programName() << ": error: " << err << "\n";
    return false;
  }
  dsl::DiagnosticEngine diags(file, std::move(text));
  std::map<std::string, dsl::StepSchedule> sched;
  bool ok = dsl::parseScheduleFile(diags, spec, sched);
  const char *noColor = std::getenv("NO_COLOR");
  diags.print(std::cerr, isatty(2) && !(noColor && *noColor));
  if (!ok)
    return false;
  for (const auto &[name, s] : sched) {
    runtime::ScheduleOverride o;
    o.parallelism = s.parallelism;
    o.prefetch = s.prefetch;
    o.cache = s.cache;
    opts.schedule[name] = o;
  }
  return true;
}

} // namespace sluice::tool
