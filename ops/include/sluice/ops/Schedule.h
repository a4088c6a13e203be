//===- Schedule.h - A step's schedule knobs: the one form ------*- C++ -*-===//
//
// The knobs a schedule sets on a step, each unset when the step leaves it to
// the runtime's default (or to the autotuner). One type for every place a
// schedule travels: the spec's `schedule:` (dsl::StepSchedule adds where an
// entry is written), schedule files, a run's overrides
// (runtime::RunOptions::schedule), the autotuner's schedules and the
// schedule cache, and the Python module's `schedule=` dict. It lives in
// ops/, the layer all of them include, so none copies it field by field
// into a shape of its own.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_SCHEDULE_H
#define SLUICE_OPS_SCHEDULE_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace sluice {

/// One step's knobs; std::nullopt = not set here.
struct StepSchedule {
  /// Workers for an element step (>= 1); for a remote source, its
  /// requests in flight.
  std::optional<int64_t> parallelism;
  /// Buffered outputs after the step (>= 0).
  std::optional<int64_t> prefetch;
  /// A cache after the step: "memory" or "disk"; "none" (or "") for none.
  std::optional<std::string> cache;
};

/// A pipeline's schedule, keyed by step name: a spec step ("map.2"), a stage
/// the compiler fused ("a+b"), or "default" for every step.
using Schedule = std::map<std::string, StepSchedule>;

/// Lays `over` onto `base`: every step `over` names takes `over`'s entry
/// whole (the autotuner's schedule over a run's, replacing what the run
/// had for that step); the other steps keep theirs.
inline void layOver(Schedule &base, const Schedule &over) {
  for (const auto &[step, knobs] : over)
    base[step] = knobs;
}

/// Sets on `step` the knobs `over` sets and keeps the others: a schedule
/// entry pinned on a plan stage over what its "default" entry set. A cache
/// of "none" (or "") takes the cache away, so a plan stage's cache, when
/// set, is "memory" or "disk".
inline void pinKnobs(StepSchedule &step, const StepSchedule &over) {
  if (over.parallelism)
    step.parallelism = over.parallelism;
  if (over.prefetch)
    step.prefetch = over.prefetch;
  if (over.cache) {
    if (over.cache->empty() || *over.cache == "none")
      step.cache.reset();
    else
      step.cache = over.cache;
  }
}

/// The larger of two knobs, either of which may be unset (a stage fused
/// from steps takes the most workers and the deepest prefetch any asks).
inline std::optional<int64_t> largerKnob(std::optional<int64_t> a,
                                         std::optional<int64_t> b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return *a < *b ? b : a;
}

} // namespace sluice

#endif // SLUICE_OPS_SCHEDULE_H
