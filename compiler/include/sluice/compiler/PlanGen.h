//===- PlanGen.h - The runtime Plan of an optimized module ------*- C++ -*-===//
//
// The last step of the graph compiler: the `sluice.pipeline` after the graph
// passes, read back into the plain runtime::Plan the runtime executes. Only
// the IR decides which stages run and with which parameters; the spec is
// consulted for what the IR does not keep (file name, the order in which
// parameters were written, and the spec position of every unchanged value).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_PLANGEN_H
#define SLUICE_COMPILER_PLANGEN_H

#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Plan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>

namespace sluice::compiler {

/// Derives the Plan of the single `sluice.pipeline` in `module`, in stream
/// order: one PlanStage per stage op, with parameters converted back to
/// Values, record types from the stream types, the op's spec position, and
/// the knobs of the pipeline's fixed schedule (the step's own entry, then
/// `default`, knob by knob). `spec` is the spec the module was generated
/// from. Problems (a pipeline that is not a chain, an attribute that is no
/// parameter value) are emitted as errors on the offending op.
mlir::FailureOr<runtime::Plan> derivePlan(mlir::ModuleOp module,
                                          const dsl::Spec &spec);

/// The directory relative data paths of `specFile` resolve against, by the
/// front end's rule: the file's directory, "." for a bare file name, "/" for
/// a file in the root.
std::string specBaseDir(const std::string &specFile);

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_PLANGEN_H
