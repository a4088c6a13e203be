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
/// in a `NameLoc` of the step name). The module is verified; on failure the
/// diagnostics have been emitted to the context and null is returned. The
/// context must have the sluice dialect loaded.
mlir::OwningOpRef<mlir::ModuleOp> mlirGen(mlir::MLIRContext &context,
                                          const dsl::Spec &spec);

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
