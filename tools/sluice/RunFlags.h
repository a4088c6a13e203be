//===- RunFlags.h - Command-line flags that control a run -------*- C++ -*-===//
//
// The flags every command that runs a pipeline shares (`sluice run`,
// `sluice bench`, the executables `sluice compile` writes, the trials of
// `sluice tune`): registered once on a CLI11 (sub)command, checked once and
// turned into runtime::RunOptions. It depends only on the runtime (and the
// ops library's size parser), never on the front end or MLIR, so a compiled
// executable can link it.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TOOLS_RUNFLAGS_H
#define SLUICE_TOOLS_RUNFLAGS_H

#include "sluice/runtime/Pipeline.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace sluice::tool {

/// Exit codes of every sluice command.
constexpr int kExitOk = 0;
constexpr int kExitData = 1;
constexpr int kExitUsage = 2;
/// `sluice tune --check`: the pipeline ran, and it regressed against the
/// baseline (1 stays "could not run": a pipeline or data error).
constexpr int kExitRegressed = 3;

/// Prints "sluice: error: MSG" and a pointer to `--help`; returns kExitUsage.
/// `command` names the subcommand whose help to point at ("" for the root).
int usageError(const std::string &msg, const std::string &command = "");

/// The program usageError() names ("sluice" unless set): a compiled
/// executable names itself.
void setProgramName(std::string name);
/// The program name set by setProgramName() ("sluice" by default).
const std::string &programName();

/// The raw values of the run flags as given on the command line. Numbers
/// are kept as text so that they are checked (and reported) in one place.
struct RunFlags {
  std::string epochs;
  std::string threads;
  std::string memory;
  std::string sink = "null";
  std::string statsJson;
  std::string metricsPort;
  std::string metricsAddress;
  std::string metricsFile;
  bool stats = false;
  bool quiet = false;
  bool overwrite = false;
};

/// Registers --epochs, --threads, --memory, --sink, --overwrite, --stats,
/// --stats-json, --metrics-port, --metrics-address, --metrics-file and
/// --quiet/-q on `cmd`, bound to `flags`.
void addRunFlags(CLI::App &cmd, RunFlags &flags);

/// Checks `flags` and applies them to `opts` (and asks for SIGINT/SIGTERM
/// handling: a command-line run stops cleanly on Ctrl-C). On a bad value prints
/// a usage error (pointing at `command`'s help) and returns false.
bool applyRunFlags(const RunFlags &flags, runtime::RunOptions &opts,
                   const std::string &command);

/// CLI11's parse error `e` as a usage error pointing at `command`'s help
/// ("option '--threads' needs a value", "option '--quiet' takes no value",
/// else CLI11's message); returns kExitUsage. Help requests are not errors:
/// catch CLI::CallForHelp before.
int reportParseError(const CLI::ParseError &e, const std::string &command);

/// The arguments `cmd` (parsed with allow_extras) did not take: an unknown
/// option gets a usage error with a "did you mean" among `cmd`'s options,
/// another argument "unexpected argument 'X'" plus `unexpectedHint`.
/// Returns kExitUsage after printing, or -1 when nothing was left over.
int rejectExtras(const CLI::App &cmd, const std::string &command,
                 const std::string &unexpectedHint = "");

/// `sluice run`'s checkpoint flags: --resume STATE, --save-state FILE,
/// --stop-after N, --rank R, --world-size W.
struct ResumeFlags {
  std::string resume;
  std::string saveState;
  std::string stopAfter;
  std::string rank;
  std::string worldSize;
};
void addResumeFlags(CLI::App &cmd, ResumeFlags &flags);
/// Reads the state file and checks the values; decides the rank and world
/// size from the flags, the plan (the spec's `distributed:`) and the
/// environment (runtime::resolveRanks). Prints a usage error and returns
/// false on a bad one.
bool applyResumeFlags(const ResumeFlags &flags, const runtime::Plan &plan,
                      runtime::RunOptions &opts, const std::string &command);

/// Parses an integer >= `min` for option `opt`; prints a usage error and
/// returns false otherwise.
bool parseIntFlag(const std::string &opt, const std::string &value, int64_t min,
                  int64_t &out, const std::string &command);

} // namespace sluice::tool

#endif // SLUICE_TOOLS_RUNFLAGS_H
