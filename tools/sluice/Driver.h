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

#include "sluice/Pipeline.h"
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
/// `sluice serve` (Serve.cpp): a gRPC worker for remote trainers. In the
/// `sluice` executable itself (ServeExec.cpp) only its place in `--help`:
/// the command runs in `sluice-serve`, which serveElsewhere() executes.
CommandAction addServeCommand(CLI::App &root);
/// What `sluice --help` says of `serve`.
inline constexpr const char *kServeDescription =
    "run the pipeline's work for trainers on other hosts (gRPC worker; "
    "docs/distributed.md)";
/// Called first by main(): in the `sluice` executable, `sluice serve ...` and
/// `sluice help serve` replace the process with `sluice-serve` (same
/// arguments) and return only on failure, with the exit code; everything
/// else, and every call in `sluice-serve`, returns -1.
int serveElsewhere(int argc, char **argv);

/// The path of this program, from /proc/self/exe ("" when unreadable).
std::string selfPath();
/// The folder part of a path: "." without a slash, "/" for the root.
std::string dirName(const std::string &p);

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

/// How the driver's commands open a spec: the passes the command line
/// turned off, generated kernels unless --no-jit, located diagnostics on
/// stderr (colored on a terminal).
OpenOptions driverOpenOptions(const std::vector<std::string> &disabledPasses,
                              bool noJit);

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

/// The pipeline of a command that runs a spec: checked, compiled, its
/// kernels generated, with the run options the flags asked for.
struct RunSetup {
  std::unique_ptr<Pipeline> pipeline;
  runtime::Plan &plan() { return pipeline->plan(); }
  runtime::RunOptions &opts() { return pipeline->options(); }
  const dsl::Spec &spec() const { return *pipeline->spec(); }
};

/// Checks the flags, opens the spec (sluice::Pipeline::open: the schedule
/// file, the graph passes) and generates its kernels. Returns -1 on
/// success, else the exit code (errors printed).
int setupSpecRun(const SpecRunFlags &flags, const std::string &command,
                 RunSetup &rs);

/// Pipeline::prepare() for a command that runs the plan itself (`sluice
/// serve`): `schedule: auto` when the spec says so and no --schedule file
/// was given (`--stats` prints what and why to `out`; SLUICE_NO_AUTOTUNE=1
/// skips it). Returns -1 to go on, else an exit code (error printed).
int prepareRun(RunSetup &rs, std::ostream &out, std::ostream &err);

} // namespace sluice::tool

#endif // SLUICE_TOOLS_DRIVER_H
