//===- Interop.h - ops/ types and values <-> MLIR types and attributes -*- C++
//-*-===//
//
// The front end and the registry speak sluice::RecordType and sluice::Value;
// the dialect speaks !sluice.record and attributes. These conversions are
// exact in both directions except that attribute dictionaries sort their keys
// (map order never carries meaning in a parameter).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_INTEROP_H
#define SLUICE_COMPILER_INTEROP_H

#include "sluice/compiler/SluiceDialect.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <optional>
#include <string>

namespace sluice::compiler {

/// `u8` -> `ui8`, `i64` -> `i64`, `bool` -> `i1`, `bytes` -> `!sluice.bytes`.
mlir::Type convertElemType(mlir::MLIRContext *ctx, ElemType elem);
/// The inverse; nullopt for MLIR types that are no sluice element type.
std::optional<ElemType> convertElemType(mlir::Type type);

/// `u8[?,?,3]` -> `tensor<?x?x3xui8>`.
mlir::RankedTensorType convertFieldType(mlir::MLIRContext *ctx,
                                        const FieldType &field);
std::optional<FieldType> convertFieldType(mlir::Type type);

ir::RecordType convertRecordType(mlir::MLIRContext *ctx,
                                 const RecordType &record);
/// Always succeeds for a verified `!sluice.record`.
RecordType convertRecordType(ir::RecordType record);
ir::StreamType convertStreamType(mlir::MLIRContext *ctx,
                                 const RecordType &record);

/// A parameter value as an attribute: int -> i64, float -> f64, bool,
/// string, list -> array, map -> dictionary, null -> unit. `spec` (may be
/// null) makes Float parameters floats even when written as integers.
mlir::Attribute convertValue(mlir::MLIRContext *ctx, const Value &value,
                             const ParamSpec *spec = nullptr);
/// A parameter map as a dictionary, guided by the op's parameter specs.
mlir::DictionaryAttr convertParams(mlir::MLIRContext *ctx, const Value &params,
                                   const OpDef *def);
/// The inverse of convertValue. Returns false (with `error` set) for
/// attributes that are no parameter value.
bool convertAttribute(mlir::Attribute attr, Value &value, std::string &error);

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_INTEROP_H
