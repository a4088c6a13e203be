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

/// The attribute that names a step's fused group (PlanGen makes the steps
/// of one group one stage).
constexpr llvm::StringLiteral kFusedAttr = "sluice.fused";

/// Marks `stages` as one fused group, named by their step names joined with
/// '+', and returns that name.
inline std::string markFused(llvm::ArrayRef<ir::StageOpInterface> stages) {
  std::string name;
  for (ir::StageOpInterface s : stages)
    name += (name.empty() ? "" : "+") + s.getStageName().str();
  auto attr = mlir::StringAttr::get(stages.front()->getContext(), name);
  for (ir::StageOpInterface s : stages)
    s->setAttr(kFusedAttr, attr);
  return name;
}

} // namespace sluice::compiler::detail

#endif // SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H
