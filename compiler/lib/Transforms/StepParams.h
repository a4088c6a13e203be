//===- StepParams.h - Reading step parameters in graph passes ---*- C++ -*-===//
//
// Internal to compiler/lib/Transforms: small readers of the parameter
// dictionaries of sluice.element ops that several passes need, and the
// marking of a fused group that the fusion passes share.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H
#define SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H

#include "sluice/compiler/SluiceOps.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <optional>
#include <string>

namespace sluice::compiler::detail {

/// A string parameter, if the step has it.
inline std::optional<mlir::StringRef> stringParam(mlir::DictionaryAttr params,
                                                  mlir::StringRef name) {
  if (auto s = params.getAs<mlir::StringAttr>(name))
    return s.getValue();
  return std::nullopt;
}

/// The field a step writes: `as` when given, else `field`.
inline std::optional<mlir::StringRef> resultField(mlir::DictionaryAttr params) {
  std::optional<mlir::StringRef> field = stringParam(params, "field");
  if (!field)
    return std::nullopt;
  if (std::optional<mlir::StringRef> as = stringParam(params, "as"))
    return as;
  return field;
}

/// True if `schedule` caches the output of `step`: its own `cache` knob, or
/// the `default` one when it has none (`none` opts out).
inline bool cachedBySchedule(mlir::DictionaryAttr schedule,
                             llvm::StringRef step) {
  for (llvm::StringRef entry : {step, llvm::StringRef("default")})
    if (auto knobs = schedule.getAs<mlir::DictionaryAttr>(entry))
      if (auto cache = knobs.getAs<mlir::StringAttr>("cache"))
        return cache.getValue() != "none";
  return false;
}

/// Why a fixed schedule keeps step `before` from being fused with the step
/// `after` it feeds, or "". A prefetch or a cache written on `before` acts
/// between the two, so fusing would drop it; parallelisms written on both
/// must agree. Knobs that agree are kept: PlanGen applies the knobs of every
/// step of a fused stage ("a+b") to it, so a schedule `sluice tune` wrote
/// (parallelism on each step of a fused stage, prefetch and cache on its
/// last) keeps the fusion when it is pasted into the spec. The `default`
/// entry applies to every stage alike and splits nothing.
inline std::string scheduleSplits(std::optional<mlir::DictionaryAttr> schedule,
                                  mlir::StringRef before,
                                  mlir::StringRef after) {
  if (!schedule)
    return "";
  auto knobs = [&](mlir::StringRef step) {
    return schedule->getAs<mlir::DictionaryAttr>(step);
  };
  mlir::DictionaryAttr b = knobs(before), a = knobs(after);
  if (b) {
    if (auto prefetch = b.getAs<mlir::IntegerAttr>("prefetch");
        prefetch && prefetch.getInt() > 0)
      return "the schedule puts a prefetch after '" + before.str() + "'";
    if (auto cache = b.getAs<mlir::StringAttr>("cache");
        cache && cache.getValue() != "none")
      return "the schedule caches the output of '" + before.str() + "'";
  }
  if (a && b) {
    auto pa = a.getAs<mlir::IntegerAttr>("parallelism");
    auto pb = b.getAs<mlir::IntegerAttr>("parallelism");
    if (pa && pb && pa.getInt() != pb.getInt())
      return "the schedule gives '" + before.str() + "' and '" + after.str() +
             "' different parallelisms";
  }
  return "";
}

/// The attribute that names a step's fused group (PlanGen makes the steps
/// of one group one stage).
constexpr llvm::StringLiteral kFusedAttr = "sluice.fused";

/// Marks `stages` as one fused group, named by their step names joined with
/// '+', and returns that name.
inline std::string markFused(llvm::ArrayRef<ir::StepOpInterface> stages) {
  std::string name;
  for (ir::StepOpInterface s : stages)
    name += (name.empty() ? "" : "+") + s.getStepName().str();
  auto attr = mlir::StringAttr::get(stages.front()->getContext(), name);
  for (ir::StepOpInterface s : stages)
    s->setAttr(kFusedAttr, attr);
  return name;
}

} // namespace sluice::compiler::detail

#endif // SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H
