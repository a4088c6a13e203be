//===- Pipeline.h - sluice's pipeline API: a spec or plan to batches -*- C++
//-*-===//
//
// The one entry point every front end calls: the `sluice` driver (run,
// bench, tune), the executables `sluice compile` writes, the Python module
// and programs that embed sluice (find_package(sluice), examples/cpp/). It
// holds the sequence they used to write each for themselves:
//
//   spec file --open()--> checked spec --graph passes--> runtime::Plan
//     --compileKernels()--> generated kernels (JIT, on-disk kernel cache)
//     --prepare()--> `schedule: auto` (schedule cache, probes) or a schedule
//     --start()/next()/run()/tune()--> batches, stats, state, a tuned schedule
//
//   auto p = sluice::Pipeline::open("imagenet.yaml");
//   if (!p) { std::cerr << p.status().message() << "\n"; return 1; }
//   sluice::runtime::Batch b;
//   if (Status s = (*p)->start(); !s) ...
//   while (true) {
//     Expected<bool> more = (*p)->next(b);
//     if (!more || !*more) break;
//     const sluice::Tensor *image = b.field("image");
//   }
//
// Why one class with phases instead of one call: each front end changes
// something between them (the Python module a seed and ranks, a compiled
// executable its data paths, the driver its resume state), and the
// autotuner must time the plan and kernels that finally run. So open()
// stops at the plan; plan() and options() may be changed until prepare(),
// which start(), run(), makeRunner() and tune() call once.
//
// This header includes no MLIR: the compiler is reached through its facades
// (compiler/Compiler.h, Codegen.h) in Open.cpp only. open() and openPlan()
// live in the `sluice_pipeline` library (it links the compiler and MLIR);
// everything else in `sluice_pipeline_core`, which compiled executables link
// without MLIR (fromPlan() with their linked-in kernel table).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_PIPELINE_H
#define SLUICE_PIPELINE_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/CompiledKernels.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace sluice {

namespace dsl {
struct Spec;
} // namespace dsl

namespace autotune {
struct AutoSchedule;
struct TuneOptions;
struct TuneResult;
} // namespace autotune

/// What an open() or a schedule file failed on, for front ends that map
/// failures to exit codes (the driver) or exception types (Python).
enum class ErrorKind {
  None,
  /// The spec or a schedule file cannot be read or does not check (located
  /// diagnostics). The driver exits 2; Python raises SpecError.
  Spec,
  /// A bad argument (an unknown pass name). Exit 2; ValueError.
  Usage,
  /// The checked spec did not compile (located errors). Exit 1; SpecError.
  Compile,
  /// The kernels could not be generated (an internal compiler failure), or
  /// a plan file cannot be read. Exit 1; PipelineError.
  Kernels,
};

/// How open() and openPlan() read and compile.
struct OpenOptions {
  /// Graph passes (CLI names, "sluice-fuse-maps") not to run.
  std::vector<std::string> disabledPasses;
  /// Compile the value-wise steps to native kernels (JIT, kept in the
  /// on-disk kernel cache) and build the plan for them. false, or
  /// SLUICE_NO_JIT=1 in the environment, runs the runtime's own kernels
  /// (`--no-jit`); the outputs are the same bytes.
  bool jit = true;
  /// Whether SLUICE_NO_JIT=1 in the environment turns `jit` off. It does
  /// for runs; `sluice compile` clears it: the kernels it writes are for
  /// the executable's runs, whose own environment decides.
  bool jitFromEnvironment = true;
  /// A schedule file (what `sluice tune` writes) to run with instead of
  /// the spec's schedule; its caches are materialization points the graph
  /// passes keep the stream at. Turns `schedule: auto` off.
  std::string scheduleFile;
  /// Where located diagnostics (file:line:col: error: ..., the line, a
  /// caret) are printed, with `color`. Null: they are part of the returned
  /// error's message.
  std::ostream *diagnostics = nullptr;
  bool color = false;
};

/// What Pipeline::explain() prints (`sluice explain`).
struct ExplainOptions {
  /// "graph" (the sluice dialect after the graph passes), "plan" (the
  /// runtime plan as JSON), "kernels" (the generated kernel functions,
  /// MLIR) or "llvm" (their optimized LLVM IR).
  std::string ir = "graph";
  /// Print the module after every graph pass.
  bool printIrAfterAll = false;
  /// Print a remark, located in the spec, for every change a graph pass
  /// makes.
  bool remarks = false;
  /// Print each op's location (the spec line it came from); the output
  /// parses back, and its plan is the same.
  bool locations = false;
};

/// A pipeline from a spec or a compiled plan: compiled, scheduled, run.
class Pipeline {
public:
  /// Reads and checks the spec at `specPath`, reads opts.scheduleFile, and
  /// compiles the spec to its plan (graph passes). Kernels are generated
  /// later (compileKernels(), or the first prepare()). On failure the
  /// message is the text the driver prints last ("2 errors in spec.yaml",
  /// "sluice: error: ..."), after the diagnostics (see
  /// OpenOptions::diagnostics); `kind` (optional) says which step failed.
  static Expected<std::unique_ptr<Pipeline>> open(const std::string &specPath,
                                                  const OpenOptions &opts = {},
                                                  ErrorKind *kind = nullptr);
  /// open() of a spec already read and checked (loadSpec()): `sluice
  /// check` prints its record types first.
  static Expected<std::unique_ptr<Pipeline>>
  fromSpec(std::unique_ptr<dsl::Spec> spec, const OpenOptions &opts = {},
           ErrorKind *kind = nullptr);
  /// A plan written by Plan::serialize() (`sluice explain SPEC --ir plan`),
  /// with generated kernels unless opts.jit is off. opts.scheduleFile is
  /// not read (it needs the spec's step names).
  static Expected<std::unique_ptr<Pipeline>>
  openPlan(const std::string &planPath, const OpenOptions &opts = {},
           ErrorKind *kind = nullptr);
  /// A plan in memory with the kernel table compiled into the program
  /// (`sluice compile`'s sluice_kernel_table), or null for the runtime's own
  /// kernels. The table must outlive the pipeline. Needs no compiler.
  static std::unique_ptr<Pipeline>
  fromPlan(runtime::Plan plan, const SluiceKernelInfo *kernels = nullptr);

  /// Reads and checks a spec without compiling it (`sluice check`,
  /// Python's sluice.check). Diagnostics as for open().
  static Expected<std::unique_ptr<dsl::Spec>>
  loadSpec(const std::string &specPath, std::ostream *diagnostics = nullptr,
           bool color = false);

  /// `sluice explain`: reads and checks the spec, compiles it as open()
  /// would (opts.disabledPasses, the code generator's choice from opts.jit)
  /// and prints the form `what.ir` to `out`. Diagnostics, remarks and
  /// errors go to opts.diagnostics (std::cerr when null). Returns the exit
  /// code: 0, 1 (the spec did not compile), 2 (it does not read or check,
  /// an unknown --ir or pass name).
  static int explain(const std::string &specPath, const OpenOptions &opts,
                     const ExplainOptions &what, std::ostream &out);

  ~Pipeline();
  Pipeline(const Pipeline &) = delete;
  Pipeline &operator=(const Pipeline &) = delete;

  /// Where later diagnostics go (a schedule file's), as
  /// OpenOptions::diagnostics, and the program their error lines name
  /// ("sluice: error: ..."; a compiled executable's own name).
  void setDiagnostics(std::ostream *diagnostics, bool color,
                      const std::string &program = "sluice");

  /// The checked spec; null for a pipeline made from a plan.
  const dsl::Spec *spec() const;
  /// The plan the spec compiles to with the same passes for runs without
  /// generated kernels (`--no-jit`: image epilogues folded into the
  /// hand-written resize): what a compiled executable runs with
  /// SLUICE_NO_JIT=1. An error for a pipeline made from a plan; a compile
  /// error's message holds its located diagnostics.
  Expected<runtime::Plan> noJitPlan() const;
  /// `sluice check`'s look at the data: makes the runtime pipeline of the
  /// plan under options() without running it (files listed, headers read,
  /// nothing decoded) and returns its warnings (an empty file); an error
  /// says why `sluice run` would fail now (a path that does not exist).
  Expected<std::vector<std::string>> checkData() const;
  /// The plan that runs, and how it runs: change them before prepare()
  /// (a seed, ranks, data paths, a resume state, threads, a sink).
  runtime::Plan &plan();
  const runtime::Plan &plan() const;
  runtime::RunOptions &options();
  const runtime::RunOptions &options() const;

  // Schedules.

  /// Reads a schedule file and applies its knobs (opts.schedule), checked
  /// against the spec's step names, or those of `names` for a pipeline made
  /// from a plan (a compiled executable rebuilds them from what `sluice
  /// compile` recorded). Turns `schedule: auto` off. Errors are located in
  /// the file (diagnostics as for open()).
  Status useScheduleFile(const std::string &file,
                         const dsl::Spec *names = nullptr);
  /// The names a schedule may give knobs for: "default", the source and
  /// spec steps, the plan's steps (a fused step is "a+b"), and the halves
  /// of fused steps a cache splits.
  std::vector<std::string> scheduleNames() const;
  /// Sets the knobs of one step (a name from scheduleNames()); turns
  /// `schedule: auto` off.
  void setStepSchedule(const std::string &step, const StepSchedule &knobs);
  /// Whether prepare() runs the autotuner: by default when the spec says
  /// `schedule: auto` and no schedule was given.
  void setAutoSchedule(bool on);
  bool autoScheduleWanted() const;

  // Kernels.

  /// Generates the kernels of the plan as it is now (once; a no-op for a
  /// pipeline without generated kernels) and binds them into options().
  /// prepare() calls it.
  Status compileKernels();
  /// Generated kernel functions (0 without generated kernels).
  int64_t generatedKernels() const;
  /// Whether the runs use generated or linked-in kernels.
  bool hasKernels() const;
  /// The `--stats` line: "kernels: 3 compiled in 41.2 ms (cache miss)",
  /// or "kernels: off (--no-jit)".
  std::string kernelSummary() const;

  // Running.

  /// Once: compileKernels(), then `schedule: auto` when wanted
  /// (autotune::applyAutoSchedule: the schedule cache, else short probes;
  /// the result lands in options()). An error's message says which.
  Status prepare();
  /// The autotuner's result once prepare() ran it and it applied (not with
  /// SLUICE_NO_AUTOTUNE=1); null otherwise.
  const autotune::AutoSchedule *autoSchedule() const;
  /// What the autotuner chose and why ("" when it did not run).
  std::string scheduleExplanation() const;

  /// prepare(), then a runtime pipeline of the plan under options(). The
  /// caller owns it and keeps this object alive while it runs (its kernels).
  Expected<std::unique_ptr<runtime::Pipeline>> makeRunner();
  /// `sluice run`: prepare() (printing the autotuner's explanation to `out`
  /// with options().stats), then runtime::runPipeline. Returns its exit code
  /// (1 with the error printed to `err` when prepare() fails).
  int run(std::ostream &out, std::ostream &err);

  /// Iterating in this object: start() makes the runtime pipeline (again:
  /// a fresh one from options().firstEpoch / resume), next() pulls outputs.
  Status start();
  /// The next output, or false after the last; starts first if needed.
  Expected<bool> next(runtime::Batch &out);
  /// The running pipeline (null before start()).
  runtime::Pipeline *runner();
  runtime::RunStats stats() const;
  runtime::PipelineState state() const;
  /// Continues from a saved state (options().resume) with a fresh runner.
  Status resume(const runtime::PipelineState &state);
  void stop();

  // Tuning.

  /// `sluice tune`: profiles the plan with its kernels (bound into
  /// opts.profile.base), solves, measures; the result says which kernels
  /// ran and where each step is written in the spec.
  Expected<autotune::TuneResult> tune(const autotune::TuneOptions &opts);

  struct Impl;

private:
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace sluice

#endif // SLUICE_PIPELINE_H
