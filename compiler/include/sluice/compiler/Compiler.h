//===- Compiler.h - MLIR-free entry points into the compiler ----*- C++ -*-===//
//
// The driver talks to compiler/ through this header only, so that the files
// that include it do not pay for MLIR's headers.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_COMPILER_H
#define SLUICE_COMPILER_COMPILER_H

#include "sluice/dsl/Spec.h"
#include "sluice/ops/Status.h"
#include "sluice/runtime/Plan.h"

#include <ostream>
#include <string>
#include <vector>

namespace sluice::compiler {

struct ExplainOptions {
  /// Which form to print: "graph" (the sluice dialect after graph passes),
  /// "plan" (the runtime::Plan derived from it, as JSON), "kernels", "llvm"
  /// as they become available.
  std::string ir = "graph";
  bool printIrAfterAll = false;
  /// Pass names (CLI form, e.g. "sluice-fuse-maps") not to run.
  std::vector<std::string> disabledPasses;
  /// Print a remark (to `err`, located in the spec) for every change a graph
  /// pass makes, e.g. each removed no-op stage.
  bool remarks = false;
  /// Print each op's location (`loc("map.2"(fused<{op, params}>[
  /// "spec.yaml":12:5]))`): which line of the spec every stage came from,
  /// with what the spec wrote there. The output parses back (sluice-opt),
  /// and derivePlan of it gives the same Plan.
  bool locations = false;
  /// Compile as `sluice run` does with the code generator on (see
  /// PlanOptions::codegen); false shows the `--no-jit` pipeline.
  bool codegen = true;
};

/// Builds the `sluice` module for `spec`, verifies it, runs the graph passes
/// and prints the requested form to `out`. Errors go to `err`, located in the
/// spec file. Returns 0 on success, 1 on an internal/verification failure, 2
/// on a usage error (unknown --ir or pass name).
int explain(const dsl::Spec &spec, const ExplainOptions &opts,
            std::ostream &out, std::ostream &err);

/// Names of the graph passes that can be disabled.
std::vector<std::string> graphPassNames();

/// An error naming the first entry of `disabledPasses` that is no graph pass
/// (with a "did you mean"), or ok. A usage error: the driver exits with 2.
Status checkPassNames(const std::vector<std::string> &disabledPasses);

struct PlanOptions {
  /// Pass names (CLI form, as for explain) not to run.
  std::vector<std::string> disabledPasses;
  /// Steps whose output a schedule given apart from the spec (a
  /// `--schedule` file) caches: the passes keep the stream there as written
  /// (sluice-hoist-shuffle does not move a shuffle above them).
  std::vector<std::string> cachedSteps;
  /// Print a remark (to `err`, located in the spec) for every change a graph
  /// pass makes.
  bool remarks = false;
  /// The run compiles kernels with the code generator (JIT, or a compiled
  /// executable's object). Then an image epilogue the generator compiles
  /// (flip, normalize, CHW after the fused decode + crop) is left to it
  /// instead of being folded into the hand-written resize, unless
  /// sluice-fuse-remaps is disabled or SLUICE_NO_GENERATED_EPILOGUE=1 (see
  /// codegenEpilogue()). Off (the default, and `--no-jit`), the fold stays.
  bool codegen = false;
};

/// Whether PlanOptions::codegen leaves image epilogues to the generated
/// kernel given the disabled passes and the environment: false when
/// sluice-fuse-crop-epilogue or sluice-fuse-remaps is disabled, or
/// SLUICE_NO_GENERATED_EPILOGUE=1 (an A/B switch: the hand-written fold,
/// same bytes).
bool codegenEpilogue(const std::vector<std::string> &disabledPasses);

/// Compiles `spec` as explain does (MLIRGen, verify, graph passes) and
/// derives the runtime::Plan of the optimized module: the source and every
/// stage the passes kept, in stream order, with the spec's parameters
/// (defaults filled, in the front end's layout), record types, spec
/// positions and fixed-schedule knobs. On failure, errors located in the
/// spec have been printed to `err` like the front end's, and the Status
/// message is the one line to print after them ("could not compile
/// spec.yaml (1 error)"); an unknown pass name is reported only in the
/// Status, with checkPassNames' message.
Expected<runtime::Plan> buildPlan(const dsl::Spec &spec,
                                  const PlanOptions &opts, std::ostream &err);

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_COMPILER_H
