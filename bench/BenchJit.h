//===- BenchJit.h - Generated kernels for a benchmark's plan -----*- C++
//-*-===//
//
// The codegen benchmarks compile a small hand-built plan, bind its stages to
// the generated kernels (or to the runtime's, for the comparison) and time
// the bound functions. Each of them needs the same few steps with the same
// failure handling: compile without the object cache (so a run measures the
// code this build generates, never a stale object), bind a stage, and on any
// failure mark the benchmark skipped with the reason instead of timing
// something else. Header-only: each benchmark is its own executable.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_BENCH_BENCHJIT_H
#define SLUICE_BENCH_BENCHJIT_H

#include "sluice/compiler/Codegen.h"
#include "sluice/runtime/ElementOps.h"

#include <benchmark/benchmark.h>

#include <memory>
#include <optional>
#include <utility>

namespace sluice::bench {

/// `plan`'s kernels compiled with the object cache off; null (and `state`
/// skipped with the error) when the compile fails.
inline std::unique_ptr<compiler::JitKernels>
compileUncached(benchmark::State &state, const runtime::Plan &plan) {
  compiler::CodegenOptions opts;
  opts.useCache = false;
  auto k = compiler::JitKernels::compile(plan, opts);
  if (!k) {
    state.SkipWithError(k.status().message().c_str());
    return nullptr;
  }
  return k.take();
}

/// What a binder returned for a stage (ElementFn or RowsFilterFn), taken;
/// nullopt (and `state` skipped) when the stage has no generated kernel
/// (`missing` says so) or its binding failed.
template <typename Fn>
std::optional<Fn> takeBound(benchmark::State &state,
                            std::optional<Expected<Fn>> bound,
                            const char *missing) {
  if (!bound) {
    state.SkipWithError(missing);
    return std::nullopt;
  }
  if (!*bound) {
    state.SkipWithError(bound->status().message().c_str());
    return std::nullopt;
  }
  return bound->take();
}

/// `stage` bound to its generated kernel when `kernels` has one, else to
/// the runtime's kernel (runtime::bindElementOp); nullopt (and `state`
/// skipped) when binding fails.
inline std::optional<runtime::ElementFn>
bindStage(benchmark::State &state, const compiler::JitKernels *kernels,
          const runtime::PlanStep &stage, const runtime::Plan &plan) {
  std::optional<Expected<runtime::ElementFn>> bound;
  if (kernels)
    bound = kernels->binder()(stage);
  if (!bound)
    bound = runtime::bindElementOp(stage, plan);
  return takeBound(state, std::move(bound), "");
}

/// The plan's first stage bound to its generated kernel (`jit`; `kernels`
/// keeps it alive, and `state` is skipped with `missing` when the stage has
/// none) or to the runtime's; nullopt when `state` was skipped.
inline std::optional<runtime::ElementFn>
bindFirst(benchmark::State &state, const runtime::Plan &plan, bool jit,
          const char *missing, std::unique_ptr<compiler::JitKernels> &kernels) {
  if (!jit)
    return bindStage(state, nullptr, plan.steps[0], plan);
  if (!(kernels = compileUncached(state, plan)))
    return std::nullopt;
  return takeBound(state, kernels->binder()(plan.steps[0]), missing);
}

} // namespace sluice::bench

#endif // SLUICE_BENCH_BENCHJIT_H
