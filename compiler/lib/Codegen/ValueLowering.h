//===- ValueLowering.h - Lowerings the kernel builders share ----*- C++ -*-===//
//
// Private to compiler/lib/Codegen: what Conversions.cpp, ValueKernels.cpp
// and RemapKernels.cpp call across files (the generator's public pieces
// are in CodegenInternal.h).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_CODEGEN_VALUELOWERING_H
#define SLUICE_COMPILER_CODEGEN_VALUELOWERING_H

#include "CodegenInternal.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::compiler::codegen {

//===----------------------------------------------------------------------===//
// Conversions and constants (Conversions.cpp)
//===----------------------------------------------------------------------===//

bool isSigned(ElemType e);

bool isIntElem(ElemType e);

unsigned bits(ElemType e);

mlir::Value constInt(mlir::OpBuilder &b, mlir::Location loc, mlir::Type t,
                     int64_t v);

mlir::Value constFloat(mlir::OpBuilder &b, mlir::Location loc, mlir::Type t,
                       double v);

/// A double constant with exactly these bits (NaN payloads included).
mlir::Value constF64Bits(mlir::OpBuilder &b, mlir::Location loc, uint64_t bits);

/// `v` with a signaling NaN made quiet (payload and sign kept), as the
/// hardware's float<->double conversions do. Spelled in integer operations
/// because LLVM may fold an fpext/fptrunc pair away around a sign flip or a
/// select (it does not promise NaN payloads), which would leave a signaling
/// NaN signaling where the interpreter's conversion quietened it.
mlir::Value quietNaN(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v);

/// widen() of ops/kernels/Dispatch.h: integers to int64 (sign- or
/// zero-extended), bool to int64 0 or 1 (`!= 0`: any non-zero byte is true),
/// f16 to its exact f32, f32 and f64 unchanged.
Scalar widen(mlir::OpBuilder &b, mlir::Location loc, Scalar v);

//===----------------------------------------------------------------------===//
// Value steps (ValueKernels.cpp)
//===----------------------------------------------------------------------===//

/// Lowers one step on one element; `outElem` is the step's output type.
bool lowerStep(mlir::OpBuilder &b, mlir::Location loc,
               const runtime::PlanStep &s, Scalar &v, ElemType outElem,
               std::string &error);

/// normalize's channel count as a fused value loop needs it: 1 when one
/// mean/std pair serves every channel, else the lists' length (the runtime
/// kernel then requires the field's last dim to equal it, or reports an
/// error). 0 when the runtime would reject every record (an empty list,
/// lengths that disagree, a std that is not finite and positive): such a
/// step is left to the runtime, which reports it.
int64_t normalizeChannels(const runtime::PlanStep &s);

/// Whether the generator covers `s` as a single step, and its field IO.
/// (A normalize is covered inside a fused chain, which knows the channel;
/// a lone normalize stage is compiled as a chain of one, remapKernel.)
bool coveredStep(const runtime::PlanStep &s, std::string &field,
                 std::string &out, ElemType &in, ElemType &outElem);

/// The constant `value` stored as `elem` (storeFromDouble's conversion).
mlir::Value elemConstant(mlir::OpBuilder &b, mlir::Location loc, ElemType elem,
                         double value);

/// normalize's output element type (`dtype`: f32, f16, bf16).
ElemType normalizeOutElem(const runtime::PlanStep &s);
/// The cases a narrowing of normalize's f32 results to f16 / bf16 meets
/// when its input is of type `in` and its channel is `channel` (-1: any):
/// for integer inputs of at most 16 bits, from every value normalize
/// computes for them; else, or with SLUICE_NO_NARROW_RANGES=1, all cases.
NarrowCases normalizeNarrowCases(const runtime::PlanStep &s, ElemType in,
                                 int64_t channel);
/// A normalize's f32 result as its output type (rounded for f16 / bf16,
/// for the values an input of type `in` in channel `channel` (-1: any)
/// gives, normalizeNarrowCases).
Scalar normalizeResult(mlir::OpBuilder &b, mlir::Location loc,
                       const runtime::PlanStep &s, mlir::Value f32Value,
                       ElemType in, int64_t channel);

/// normalize on one element whose channel (last index) is `channel`:
/// float(x) as kernels::normalize converts it, then (x - m[c]) * scale[c].
/// One pair, or a constant channel (unrolled), takes its pair as
/// constants; any other channel reads its pair from two constant tables
/// indexed by the channel, for any number of channels.
Scalar lowerNormalize(mlir::OpBuilder &b, mlir::Location loc,
                      const runtime::PlanStep &s, Scalar v,
                      mlir::Value channel);

/// A lone normalize over several channels that are not unrolled (more than
/// 4, or a channel dim the type does not know): the runtime kernel's loop
/// (kernels::normalize), flat over the elements in periods of P = the least
/// multiple of the channel count that is a multiple of 16 floats (doubled
/// up to at least 128), with
/// P-entry constant tables, so the inner loop has a constant trip count and
/// contiguous loads that LLVM vectorizes:
///
///   for (b = 0; b < n / P; ++b) for (j = 0; j < P; ++j) out[bP+j] =
///   f(in[bP+j], j) for (i = n / P * P; i < n; ++i) out[i] = f(in[i], i - n / P
///   * P)
bool buildFlatNormalize(mlir::OpBuilder &b, const KernelSpec &k,
                        const std::vector<mlir::Value> &inDims, mlir::Value in,
                        mlir::Value outPtr);

/// Opens kernel `k`'s function (arguments `args`, no result; its stage and
/// signature as attributes) at the end of `module`, with `b` at the start
/// of its entry block, which it returns.
mlir::Block *beginKernel(mlir::OpBuilder &b, mlir::ModuleOp module,
                         const KernelSpec &k, llvm::ArrayRef<mlir::Type> args);

//===----------------------------------------------------------------------===//
// Remap chains (RemapKernels.cpp)
//===----------------------------------------------------------------------===//

/// The kernel of a remap chain, if `s` is one the generator covers.
bool remapKernel(const runtime::PlanStep &s, std::vector<KernelSpec> &out);

bool buildRemapKernel(mlir::OpBuilder &b, mlir::ModuleOp module,
                      const KernelSpec &k, std::string &error);

} // namespace sluice::compiler::codegen

#endif // SLUICE_COMPILER_CODEGEN_VALUELOWERING_H
