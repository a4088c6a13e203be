//===- PlanGen.h - The runtime Plan of an optimized module ------*- C++ -*-===//
//
// The last step of the graph compiler: the `sluice.pipeline` after the graph
// passes, read back into the plain runtime::Plan the runtime executes. The
// module alone decides: which steps run with which parameters (attributes),
// and what the spec wrote that the runtime's messages show (the file name,
// the order in which parameters were written, the position of every value:
// the locations MLIRGen gives, see MLIRGen.h). A module printed with its
// locations and parsed back gives the same Plan.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_PLANGEN_H
#define SLUICE_COMPILER_PLANGEN_H

#include "sluice/runtime/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>

namespace sluice::compiler {

/// Derives the Plan of the single `sluice.pipeline` in `module`, in stream
/// order: one PlanStep per step op, with parameters converted back to
/// Values, record types from the stream types, the op's spec position, and
/// the knobs of the pipeline's fixed schedule (the step's own entry, then
/// `default`, knob by knob). Problems (a pipeline that is not a chain, an
/// attribute that is no parameter value) are emitted as errors on the
/// offending op.
mlir::FailureOr<runtime::Plan> derivePlan(mlir::ModuleOp module);

/// The directory relative data paths of `specFile` resolve against, by the
/// front end's rule: the file's directory, "." for a bare file name, "/" for
/// a file in the root.
std::string specBaseDir(const std::string &specFile);

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_PLANGEN_H
