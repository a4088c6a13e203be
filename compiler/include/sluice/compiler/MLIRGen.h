//===- MLIRGen.h - A checked spec as a sluice module ------------*- C++ -*-===//
#ifndef SLUICE_COMPILER_MLIRGEN_H
#define SLUICE_COMPILER_MLIRGEN_H

#include "sluice/dsl/Spec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>
#include <vector>

namespace sluice::compiler {

/// Builds a module holding one `sluice.pipeline` for `spec`, with every op
/// located at its YAML node (`FileLineColLoc(spec.file, line, col)` wrapped
/// in a `NameLoc` of the step name). The module holds all the runtime Plan
/// needs (derivePlan reads nothing else): each step's location is
/// `NameLoc(step, FusedLoc<{op, params}>[FileLineColLoc])`, whose metadata
/// is the step's parameters as the spec wrote them (specLayout: key order,
/// unset optionals, the position of every value, for the runtime's
/// messages), and the pipeline's is `FusedLoc[spec start, NameLoc("rank",
/// ...), NameLoc("world_size", ...)]` where `distributed:` is written. The
/// module is verified; on failure the diagnostics have been emitted to the
/// context and null is returned. The context must have the sluice dialect
/// loaded.
mlir::OwningOpRef<mlir::ModuleOp> mlirGen(mlir::MLIRContext &context,
                                          const dsl::Spec &spec);

/// A parameter value as the spec wrote it, as a location's metadata: maps as
/// ["m", pos, key, value, ...] in the written order, lists as ["l", pos,
/// item, ...], scalars as ["s", pos, value] (convertValue), where pos is
/// [line, col, content offset].
mlir::Attribute specLayout(mlir::MLIRContext *ctx, const Value &value);
/// The inverse of specLayout; nullopt for an attribute it did not make.
std::optional<Value> readSpecLayout(mlir::Attribute attr);

/// The spec position of an op built by mlirGen: the first FileLineColLoc
/// inside `loc` (looking through NameLoc, CallSiteLoc and FusedLoc, so that
/// ops a pass fused or renamed keep pointing at the spec).
std::optional<mlir::FileLineColLoc> findFileLoc(mlir::Location loc);

/// Differences between the dedicated stage ops of the dialect and the op
/// registry: a dedicated op without registry entry, or a registry parameter
/// without an attribute of the same name (and the reverse). Empty when they
/// agree. `sluice-opt --sluice-check-registry` prints them; a lit test keeps
/// ops/ and SluiceOps.td from drifting apart.
/// `checked` (if given) receives the number of dedicated ops compared.
std::vector<std::string> registryMismatches(mlir::MLIRContext &context,
                                            size_t *checked = nullptr);

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_MLIRGEN_H
