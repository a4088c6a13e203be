//===- StageGroups.h - Which steps run as one runtime stage -----*- C++ -*-===//
//
// The runtime runs a run of consecutive per-record steps as one map stage (on
// the workers when one of them is an element op, inline on the consumer's
// thread otherwise), every stream step as a stage of its own, and a prefetch
// or cache knob as a buffer stage after its step. Engine::build builds its
// graph from these groups, and lanes() says which of them share a thread; the
// autotuner models those lanes, so the two cannot disagree about what runs
// where.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_STAGEGROUPS_H
#define SLUICE_RUNTIME_STAGEGROUPS_H

#include "sluice/ops/Schedule.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::runtime {

struct Plan;

/// What the grouping reads of one step. Step 0 is the source.
struct StepShape {
  bool source = false;
  /// Works on one record at a time (isPerRecordStep): joins a map stage.
  bool perRecord = false;
  /// An element op: the map stage holding it runs on the workers.
  bool element = false;
  /// The knobs pinned on the step (PlanStep::schedule): its workers
  /// (unset: free) and its prefetch (unset or 0: none). Its cache is read
  /// from cacheAfter, which the tuner also sets for a cache it places.
  StepSchedule pinned;
  bool cacheAfter = false;     ///< a cache follows the step
  bool threadBoundary = false; ///< the op hands records to another thread
};

/// One stage of the runtime's graph, with the buffers right after it.
struct StageGroup {
  enum class Kind { Source, Map, Stream };
  Kind kind = Kind::Map;
  /// Step indices (0: the source, i + 1: Plan::steps[i]), in order.
  std::vector<size_t> steps;
  /// A map stage that runs on the workers (it holds an element op).
  bool parallel = false;
  /// The most workers any of its steps pins; 0: free.
  int64_t parallelism = 0;
  /// The deepest prefetch its steps pin (a map stage on the workers deepens
  /// its reorder window by it instead of adding a buffer); 0: none.
  int64_t prefetch = 0;
  /// A prefetch stage (a thread of its own) follows.
  bool prefetchAfter = false;
  /// A cache stage follows (after the prefetch stage, if any).
  bool cacheAfter = false;
  /// The records go to another thread after this group: a prefetch stage
  /// follows, or the group's step is a prefetch.
  bool threadAfter = false;
};

/// Groups steps into the runtime's stages.
std::vector<StageGroup> groupSteps(const std::vector<StepShape> &steps);

/// What one thread of the runtime runs, or the workers of one parallel map
/// stage: the autotuner's unit of capacity. A map stage on the workers is a
/// lane of its own; the other stages up to the next thread hand-off (a
/// prefetch stage after them, or a step that hands its records to another
/// thread) run one after the other on one thread, a serial lane.
struct Lane {
  /// Step indices (0: the source, i + 1: Plan::steps[i]), in order.
  std::vector<size_t> steps;
  /// The workers of a map stage; otherwise one thread.
  bool parallel = false;
  /// The workers a parallel lane's steps pin (StageGroup::parallelism); 0:
  /// free.
  int64_t pinned = 0;
  /// Entirely before the cache of the configuration the autotuner evaluates:
  /// it works in the first epoch only. lanes() leaves it false; the autotuner
  /// sets it for the cache it prices.
  bool beforeCache = false;
};

/// The lanes the stages `groups` (groupSteps()) run on, in stream order.
std::vector<Lane> lanes(const std::vector<StageGroup> &groups);

/// The shapes of `plan`'s steps (the source, then each stage) as the
/// runtime reads them: per-record and element from the op, the knobs from
/// the plan's schedule.
std::vector<StepShape> stepShapes(const Plan &plan);

/// groupSteps(stepShapes(plan)): the stages Engine::build makes of `plan`.
std::vector<StageGroup> stageGroups(const Plan &plan);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_STAGEGROUPS_H
