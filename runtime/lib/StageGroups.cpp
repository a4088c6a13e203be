//===- StageGroups.cpp - Which plan steps run as one runtime stage --------===//
//
// See StageGroups.h.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/StageGroups.h"

#include "sluice/runtime/ElementOps.h"
#include "sluice/runtime/Plan.h"

#include <algorithm>

namespace sluice::runtime {

std::vector<StageGroup> groupSteps(const std::vector<StepShape> &steps) {
  std::vector<StageGroup> out;
  StageGroup map;
  auto flush = [&] {
    if (map.steps.empty())
      return;
    // An inline map stage with a prefetch gets a prefetch stage after it; one
    // on the workers runs ahead in its reorder window instead.
    map.prefetchAfter = !map.parallel && map.prefetch > 0;
    map.threadAfter = map.prefetchAfter;
    out.push_back(std::move(map));
    map = StageGroup();
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepShape &s = steps[i];
    if (s.perRecord && !s.source) {
      map.kind = StageGroup::Kind::Map;
      map.steps.push_back(i);
      if (s.element) {
        map.parallel = true;
        map.parallelism =
            std::max(map.parallelism, s.pinned.parallelism.value_or(0));
      }
      map.prefetch = std::max(map.prefetch, s.pinned.prefetch.value_or(0));
      if (s.cacheAfter) {
        // The cache goes right after this step: the map stage ends here.
        map.cacheAfter = true;
        flush();
      }
      continue;
    }
    flush();
    StageGroup g;
    g.kind = s.source ? StageGroup::Kind::Source : StageGroup::Kind::Stream;
    g.steps.push_back(i);
    g.parallelism = s.pinned.parallelism.value_or(0);
    g.prefetch = std::max<int64_t>(0, s.pinned.prefetch.value_or(0));
    g.prefetchAfter = g.prefetch > 0;
    g.cacheAfter = s.cacheAfter;
    g.threadAfter = s.threadBoundary || g.prefetchAfter;
    out.push_back(std::move(g));
  }
  flush();
  return out;
}

std::vector<Lane> lanes(const std::vector<StageGroup> &groups) {
  std::vector<Lane> out;
  Lane serial;
  auto endSerial = [&] {
    if (!serial.steps.empty())
      out.push_back(std::move(serial));
    serial = Lane();
  };
  for (const StageGroup &g : groups) {
    if (g.kind == StageGroup::Kind::Map && g.parallel) {
      endSerial();
      Lane l;
      l.steps = g.steps;
      l.parallel = true;
      l.pinned = g.parallelism;
      out.push_back(std::move(l));
      continue;
    }
    serial.steps.insert(serial.steps.end(), g.steps.begin(), g.steps.end());
    if (g.threadAfter)
      endSerial();
  }
  endSerial();
  return out;
}

std::vector<StepShape> stepShapes(const Plan &plan) {
  std::vector<StepShape> out;
  auto shape = [](const PlanStep &st, bool source) {
    StepShape s;
    s.source = source;
    s.perRecord = !source && isPerRecordStep(st);
    s.element = !source && st.kind == OpKind::Element;
    s.pinned = st.schedule;
    s.cacheAfter = st.schedule.cache.has_value();
    const OpDef *def = Registry::instance().find(st.op);
    s.threadBoundary = def && def->traits.prefetchDepth;
    return s;
  };
  out.push_back(shape(plan.source, true));
  for (const PlanStep &st : plan.steps)
    out.push_back(shape(st, false));
  return out;
}

std::vector<StageGroup> stageGroups(const Plan &plan) {
  return groupSteps(stepShapes(plan));
}

} // namespace sluice::runtime
