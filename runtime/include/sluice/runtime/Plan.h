//===- Plan.h - What the runtime executes -----------------------*- C++ -*-===//
//
// A Plan is the plain, MLIR-free description of a pipeline that compiler/
// derives from the optimized `sluice` module: the source and the steps in
// stream order, each with its registry op, validated parameters, record types
// and schedule knobs. The runtime groups the steps into the stages it runs
// (StageGroups.h) and builds its stage graph from them; a
// compiled executable embeds one (see serialize()).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_PLAN_H
#define SLUICE_RUNTIME_PLAN_H

#include "sluice/ops/Registry.h"
#include "sluice/ops/Schedule.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::runtime {

/// One step: the source, an element op, or a record op (or a fused step the
/// compiler made of several).
struct PlanStep {
  std::string name; ///< unique step name ("decode_image", "map.2")
  std::string op;   ///< registry op name
  OpKind kind = OpKind::Element;
  Value params;         ///< Map, validated and defaulted
  RecordType inputType; ///< empty for the source
  RecordType outputType;
  SourceLoc loc; ///< position in the spec, for error messages

  /// The schedule knobs the plan pins on the step (the spec's
  /// `schedule:`, a schedule file, the autotuner's choice): workers for an
  /// element step (a remote source: requests in flight), buffered outputs
  /// after it, a cache after it ("memory" or "disk" when set: "none" is
  /// unset here). An unset knob is decided at run time (the autotuner, or
  /// the runtime's default). The plan JSON keeps its encoding: 0 / -1 / ""
  /// for unset (serialize()).
  StepSchedule schedule;

  /// For a fused step (op `fused_map`, sluice-fuse-maps): the value-wise
  /// steps it runs, in order, each with its own name, parameters, types and
  /// spec position. Empty for every other step.
  std::vector<PlanStep> fused;

  /// The op that messages about this step's records name: `op`, except for
  /// a step the compiler fused from several (named "a+b+...", '+' never
  /// being part of a step name), whose data errors are those of the first
  /// of them: "decode_image" for "decode_image+random_resized_crop".
  std::string reportedOp() const;
};

/// The spec steps a plan step name stands for, in order: "a+b+c" (a step
/// the compiler fused from several; '+' is never part of a step name) ->
/// {"a", "b", "c"}; a plain name -> {name}.
std::vector<std::string> stepNamesIn(const std::string &name);
/// The registry op a spec step is named after: a step is named after its op,
/// or op.N for a later occurrence ("map.2" -> "map", "map" -> "map").
std::string opOfStepName(const std::string &step);

/// A whole pipeline.
struct Plan {
  std::string name;     ///< `pipeline:` name
  std::string specFile; ///< for messages ("spec.yaml:12:5")
  std::string baseDir;  ///< relative data paths resolve against this
  uint64_t seed = 0;
  int64_t epochs = 1;
  int64_t cores = 0;       ///< budget; 0 = all cores of the host
  int64_t memoryBytes = 0; ///< budget; 0 = no limit given
  /// The spec says `schedule: auto`: whoever runs the plan (`sluice run`,
  /// a compiled executable, the Python module) profiles it briefly and
  /// applies the autotuner's schedule (autotune::applyAutoSchedule), and
  /// re-plans while it runs when the measured rates drift.
  bool scheduleAuto = false;
  /// The spec's `distributed: {rank, world_size}`, each unset when not
  /// written there (resolveRanks() in Pipeline.h decides a run's values),
  /// and where each is written, for messages.
  std::optional<int64_t> rank, worldSize;
  SourceLoc rankLoc, worldSizeLoc;
  PlanStep source;
  std::vector<PlanStep> steps;

  const RecordType &outputType() const {
    return steps.empty() ? source.outputType : steps.back().outputType;
  }
  /// "spec.yaml:12:5" for a step, or the spec file alone.
  std::string where(const PlanStep &s) const;
  /// "spec.yaml:12:5" for a position in the spec, or the spec file alone.
  std::string where(SourceLoc loc) const;

  /// A self-contained text form (JSON) that deserialize() reads back exactly;
  /// compiled executables embed it.
  std::string serialize() const;
  static Expected<Plan> deserialize(const std::string &text);
};

/// Cache points inside a fused step. The compiler fuses a deterministic
/// prefix with the random steps after it (sluice-fuse-remaps makes
/// `cast+map+normalize+random_crop+random_flip` one step), which leaves no
/// step boundary where a cache could keep the costly deterministic work of
/// one epoch for the next. A cache on a step inside such a fused step (from
/// a schedule file, `schedule: auto` or the autotuner) splits it right
/// after that step into two fused steps, as the fusion passes would have
/// grouped the steps with a `cache:` step there; the runtime does this
/// (Pipeline applies the schedule), so every runner (`sluice run`, compiled
/// executables, Python) runs the same split. Random draws are keyed by
/// source position, so the bytes do not change.

/// The index in `s.fused` of the last step of the deterministic prefix of
/// fused step `s` when a random step follows it inside `s` (the one inner
/// boundary worth a cache); nullopt for any other step.
std::optional<size_t> cacheSplitPoint(const PlanStep &s);

/// The two steps fused step `s` becomes when split after its step
/// `s.fused[k]` (k + 1 < s.fused.size()): each part of one step is that
/// step, of more a `fused_map` named by its steps joined with '+'. The
/// first part keeps the group's parallelism, the second also its prefetch
/// and cache.
std::pair<PlanStep, PlanStep> splitFused(const PlanStep &s, size_t k);

/// Splits the fused step holding the step named `step` (a spec step name,
/// or a fused name whose last part it is) right after that step, unless it
/// is its last step. Returns true when it split.
bool splitFusedAfter(Plan &plan, const std::string &step);

/// The steps splitting every fused step of `plan` at its
/// cacheSplitPoint() would create, so that code generators compile their
/// kernels up front (a split chosen at run time then finds them).
std::vector<PlanStep> cacheSplitSteps(const Plan &plan);

/// Whether SLUICE_NO_CACHE_SPLIT=1 turns off cache points inside fused
/// steps (the autotuner then offers none; a cache pinned on an inner step
/// still splits, since a cache after the random steps would change bytes).
bool cacheSplitDisabledByEnvironment();

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_PLAN_H
