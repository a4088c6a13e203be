//===- Driver.h - How sluice subcommands plug into the driver ---*- C++ -*-===//
//
// Each subcommand lives in its own function (or file) that registers its
// options on a CLI11 subcommand and returns the action to run once the
// command line has parsed. main.cpp only lists the registrations, so adding
// a command is one line there plus its own file. Commands that run a
// pipeline from a spec share addSpecRunFlags()/setupSpecRun(), which add the
// spec-level flags (--schedule, --disable-pass) on top of RunFlags.h.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TOOLS_DRIVER_H
#define SLUICE_TOOLS_DRIVER_H

#include "RunFlags.h"
#include "sluice/compiler/Codegen.h"

#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Plan.h"

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace sluice::tool {

/// What a registered subcommand does after a successful parse; returns the
/// process exit code.
using CommandAction = std::function<int()>;

/// Registers a subcommand on `root` and returns its action. The options are
/// bound to state the action owns (captured by the closure).
using CommandRegistration = CommandAction (*)(CLI::App &root);

CommandAction addCheckCommand(CLI::App &root);
CommandAction addExplainCommand(CLI::App &root);
CommandAction addOpsCommand(CLI::App &root);
CommandAction addRunCommand(CLI::App &root);
CommandAction addBenchCommand(CLI::App &root);
/// `sluice compile` (Compile.cpp).
CommandAction addCompileCommand(CLI::App &root);
/// `sluice tune` (Tune.cpp).
CommandAction addTuneCommand(CLI::App &root);
/// `sluice serve` (Serve.cpp): a gRPC worker for remote trainers.
CommandAction addServeCommand(CLI::App &root);

/// `schedule: auto` for `sluice run` (Tune.cpp): profiles briefly, solves,
/// and merges the chosen knobs into opts.schedule (`--stats` prints what and
/// why to `out`). SLUICE_NO_AUTOTUNE=1 skips it. Returns -1 to go on, else
/// an exit code.
int applyAutoSchedule(const runtime::Plan &plan, runtime::RunOptions &opts,
                      std::ostream &out, std::ostream &err);

/// Adds the SPEC positional(s) to `cmd`; checkOneSpec() then insists on one.
void addSpecArg(CLI::App &cmd, std::vector<std::string> &specs);
/// Prints "'sluice CMD' takes exactly one SPEC file, got N" unless
/// `specs.size() == 1`.
bool checkOneSpec(const std::vector<std::string> &specs,
                  const std::string &command);

/// Reads and checks a spec; prints located diagnostics. Null on failure.
std::unique_ptr<dsl::Spec> loadSpec(const std::string &path);

/// Whether diagnostics on stderr may use color.
bool colorStderr();

/// The flags of a command that runs a pipeline from a spec: the shared run
/// flags plus the spec-level ones.
struct SpecRunFlags {
  std::vector<std::string> specs;
  RunFlags run;
  std::string scheduleFile;
  std::vector<std::string> disabledPasses;
  /// --no-jit (or SLUICE_NO_JIT=1): the runtime's own kernels only.
  bool noJit = false;
};

/// Registers SPEC, the run flags, --schedule and --disable-pass on `cmd`.
void addSpecRunFlags(CLI::App &cmd, SpecRunFlags &flags);

/// A checked spec, its Plan and the run options the flags asked for.
struct RunSetup {
  std::unique_ptr<dsl::Spec> spec;
  runtime::Plan plan;
  runtime::RunOptions opts;
  /// Native kernels of the plan's value-wise steps (bound through
  /// opts.binder); null with --no-jit. Must outlive the pipeline.
  std::unique_ptr<compiler::JitKernels> kernels;

  /// The codegen line of `--stats` ("kernels: 3 generated in ...").
  std::string kernelSummary() const;
};

/// Checks the flags, loads the spec, applies the schedule file and builds
/// the Plan. Returns -1 on success, else the exit code (errors printed).
int setupSpecRun(const SpecRunFlags &flags, const std::string &command,
                 RunSetup &rs);

} // namespace sluice::tool

#endif // SLUICE_TOOLS_DRIVER_H
