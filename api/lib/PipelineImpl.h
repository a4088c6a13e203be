//===- PipelineImpl.h - The state behind sluice::Pipeline -------*- C++ -*-===//
//
// Shared by the two halves of the API: Pipeline.cpp (plan to batches, no
// compiler) and Open.cpp (spec to plan and generated kernels, through the
// compiler's MLIR-free facades). Not installed.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_API_PIPELINEIMPL_H
#define SLUICE_API_PIPELINEIMPL_H

#include "sluice/Pipeline.h"
#include "sluice/autotune/Tune.h"
#include "sluice/dsl/Spec.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace sluice {

/// Prints `diags` to `diagnostics` (with `color`) and returns "", or
/// returns them as text when `diagnostics` is null.
std::string renderDiagnostics(const dsl::DiagnosticEngine &diags,
                              std::ostream *diagnostics, bool color);

struct Pipeline::Impl {
  std::unique_ptr<dsl::Spec> spec;
  /// How the spec was compiled to `plan` (fromSpec()): its passes, the
  /// steps a schedule file caches, and whether for generated kernels; for
  /// compiling it again (noJitPlan()).
  std::vector<std::string> disabledPasses;
  std::vector<std::string> cachedSteps;
  runtime::Plan plan;
  runtime::RunOptions opts;
  std::ostream *diagnostics = nullptr;
  bool color = false;
  std::string program = "sluice";

  /// The kernel table the runs bind: linked into the program, or owned by
  /// `kernelOwner` (the JIT's compiled code). Null: the runtime's kernels.
  const SluiceKernelInfo *table = nullptr;
  std::shared_ptr<const void> kernelOwner;
  /// Generates the kernels of `plan` (set by Open.cpp when the JIT is on);
  /// fills table, kernelOwner, generated and summary.
  std::function<Status(Impl &)> generate;
  bool kernelsDone = false;
  int64_t generated = 0;
  std::string summary = "kernels: off (--no-jit)";

  /// Unset: the plan's `schedule: auto`.
  std::optional<bool> autoWanted;
  bool prepared = false;
  std::optional<autotune::AutoSchedule> autoResult;

  std::unique_ptr<runtime::Pipeline> runner;

  /// Prints located diagnostics to `diagnostics`, or returns them as text.
  std::string render(const dsl::DiagnosticEngine &diags) const;
};

} // namespace sluice

#endif // SLUICE_API_PIPELINEIMPL_H
