//===- SluiceOps.h - Ops of the sluice dialect ------------------*- C++ -*-===//
#ifndef SLUICE_COMPILER_SLUICEOPS_H
#define SLUICE_COMPILER_SLUICEOPS_H

#include "sluice/compiler/SluiceDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace sluice::ir {
namespace detail {
/// The inherent attributes of `op` except `name`: the registry parameters of
/// a dedicated step op.
mlir::DictionaryAttr collectInherentParams(mlir::Operation *op);
/// Names a step's result after it ("%decode_image", "%map.2").
void setStepResultName(mlir::Operation *op, mlir::OpAsmSetValueNameFn fn);
} // namespace detail
} // namespace sluice::ir

#include "sluice/compiler/SluiceInterfaces.h.inc"

#define GET_OP_CLASSES
#include "sluice/compiler/SluiceOps.h.inc"

#endif // SLUICE_COMPILER_SLUICEOPS_H
