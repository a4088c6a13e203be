//===- CacheSplit.cpp - Cache points inside a fused stage -----------------===//
//
// The fusion passes group a deterministic prefix with the random steps
// after it into one stage, so the stream between them (what a cache would
// keep across epochs) never exists as a stage boundary. Splitting the fused
// stage after the prefix gives that boundary back. It is a Plan rewrite, not
// a re-lowering through the compiler, because compiled executables and the
// Python module run plans without one; the code generator compiles the
// split halves' kernels up front (cacheSplitSteps), so a split chosen at
// run time runs generated code too.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Switches.h"
#include "sluice/runtime/Plan.h"

#include <cstdlib>

namespace sluice::runtime {

namespace {

bool stochasticOp(const std::string &op) {
  const OpDef *def = Registry::instance().find(op);
  return def && def->stochastic;
}

/// One part of a split fused stage: steps [from, to) of `s`.
PlanStep part(const PlanStep &s, size_t from, size_t to) {
  if (to - from == 1)
    return s.fused[from];
  PlanStep p;
  p.op = "fused_map";
  p.kind = OpKind::Element;
  p.params = Value::map();
  std::vector<Value> names;
  for (size_t i = from; i < to; ++i) {
    p.name += (p.name.empty() ? "" : "+") + s.fused[i].name;
    names.push_back(Value::string(s.fused[i].name));
    p.fused.push_back(s.fused[i]);
  }
  p.params.set("steps", Value::list(std::move(names)));
  p.inputType = s.fused[from].inputType;
  p.outputType = s.fused[to - 1].outputType;
  p.loc = s.fused[from].loc;
  return p;
}

} // namespace

std::optional<size_t> cacheSplitPoint(const PlanStep &s) {
  if (s.op != "fused_map" || s.fused.size() < 2)
    return std::nullopt;
  for (size_t i = 0; i < s.fused.size(); ++i)
    if (stochasticOp(s.fused[i].op)) {
      if (i == 0)
        return std::nullopt;
      return i - 1;
    }
  return std::nullopt;
}

std::pair<PlanStep, PlanStep> splitFused(const PlanStep &s, size_t k) {
  PlanStep a = part(s, 0, k + 1), b = part(s, k + 1, s.fused.size());
  a.schedule = StepSchedule();
  a.schedule.parallelism = s.schedule.parallelism;
  b.schedule = s.schedule;
  return {std::move(a), std::move(b)};
}

bool splitFusedAfter(Plan &plan, const std::string &step) {
  std::string name = stepNamesIn(step).back();
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep &s = plan.steps[i];
    if (s.op != "fused_map")
      continue;
    for (size_t k = 0; k + 1 < s.fused.size(); ++k) {
      if (s.fused[k].name != name)
        continue;
      auto [a, b] = splitFused(s, k);
      plan.steps[i] = std::move(b);
      plan.steps.insert(plan.steps.begin() + static_cast<long>(i),
                        std::move(a));
      return true;
    }
  }
  return false;
}

std::vector<PlanStep> cacheSplitSteps(const Plan &plan) {
  std::vector<PlanStep> out;
  for (const PlanStep &s : plan.steps)
    if (std::optional<size_t> k = cacheSplitPoint(s)) {
      auto [a, b] = splitFused(s, *k);
      out.push_back(std::move(a));
      out.push_back(std::move(b));
    }
  return out;
}

bool cacheSplitDisabledByEnvironment() {
  return switchedOff("SLUICE_NO_CACHE_SPLIT");
}

} // namespace sluice::runtime
