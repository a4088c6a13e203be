//===- StepParams.h - Reading step parameters in graph passes ---*- C++ -*-===//
//
// Internal to compiler/lib/Transforms: small readers of the parameter
// dictionaries of sluice.element ops that several passes need.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H
#define SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H

#include "mlir/IR/BuiltinAttributes.h"

#include <optional>

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

} // namespace sluice::compiler::detail

#endif // SLUICE_COMPILER_LIB_TRANSFORMS_STEPPARAMS_H
