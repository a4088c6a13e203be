//===- CodegenInternal.h - Shared declarations of the code generator -*- C++
//-*-===//
//
// What the files of compiler/lib/Codegen pass to each other. The pipeline:
//
//   runtime::Plan ──collectKernels──► [KernelSpec]   (which steps, which field)
//        │
//        ▼ buildKernelModule (ValueKernels.cpp, ExprToArith.cpp)
//   func.func @sluice_kN(!llvm.ptr, !llvm.ptr, i64)  scf.for + arith/math
//        │
//        ▼ lowerToLLVMDialect (LowerToLLVM.cpp)
//   llvm.func                                         LLVM dialect only
//        │
//        ▼ translateKernels (LowerToLLVM.cpp): LLVM IR + `sluice_kernel_table`
//   llvm::Module ──emitObject──► object file bytes ──► JIT (Jit.cpp) or disk
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_CODEGEN_CODEGENINTERNAL_H
#define SLUICE_COMPILER_CODEGEN_CODEGENINTERNAL_H

#include "sluice/ops/Types.h"
#include "sluice/runtime/Plan.h"
#include "sluice/runtime/RemapChain.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
} // namespace llvm

namespace sluice::kernels {
class CompiledExpr;
} // namespace sluice::kernels

namespace sluice::compiler::codegen {

/// How the generator computes step `s`, asked of its op's entry
/// (OpTraits::valueForm); ValueForm::None for an op it does not compile.
inline ValueForm valueFormOf(const runtime::PlanStep &s) {
  const OpTraits *t = opTraits(s.op);
  return t ? t->valueForm : ValueForm::None;
}

/// One generated function: the value-wise steps `steps` (in order) applied
/// to every element of field `field` of stage `stage`, writing `outField`.
struct KernelSpec {
  std::string stage;    ///< PlanStep::name, the table's key
  std::string funcName; ///< sluice_k0, sluice_k1, ...
  std::string field, outField;
  ElemType inElem = ElemType::F32, outElem = ElemType::F32;
  std::vector<const runtime::PlanStep *> steps;
  /// Value chains with a per-channel `normalize`: its channel count C (the
  /// field's last dim), > 1. Element i is in channel i mod C, which the
  /// kernel's loop derives from i; the runtime binding sends a record whose
  /// last dim is not C to the unfused steps (which report the mismatch).
  /// 1: no step depends on the position.
  int64_t channels = 1;
  /// Set for a remap chain (sluice-fuse-remaps): the kernel is
  /// `void(const void *in, void *out, const int64_t *params)` over the
  /// chain's parameter block (runtime/RemapChain.h), `steps` unused.
  std::shared_ptr<const runtime::RemapChain> chain;
  /// Static size of each output dim (-1 unknown), for the loop order.
  std::vector<int64_t> outShape;
  /// Remap chains: the field's static shape at each step's input and at the
  /// output (kDynamic where unknown). Known sizes are compiled in as
  /// constants (a channel stride of 3 lets LLVM vectorize the pixel loop as
  /// interleaved loads); the runtime binding sends records of any other
  /// shape to the unfused steps.
  std::vector<std::vector<int64_t>> staticDims;
  /// Set for a `filter` step: the kernel is
  /// `void(const void *const *slots, int64_t *kept)`, one pointer per load
  /// slot of the condition's bytecode, `steps` unused.
  std::shared_ptr<const kernels::CompiledExpr> filter;
  /// With `filter`: the column form instead, for record runs
  /// (`void(const void *const *bases, const int64_t *strides,
  /// const uint32_t *rows, int64_t n, uint8_t *keep)`, "filter rows").
  bool rows = false;
  /// The table's signature string (see runtime/CompiledKernels.h).
  std::string signature() const;
};

/// The kernels to generate for `plan`: one per field chain of every stage
/// the generator covers, in plan order.
std::vector<KernelSpec> collectKernels(const runtime::Plan &plan);

/// True if `elem` has a scalar lowering (integers, bool, f16, bf16, f32,
/// f64).
bool supportedElem(ElemType elem);
/// The MLIR storage type of an element (u8 -> i8, f32 -> f32, bool -> i8,
/// f16 and bf16 -> i16: their bits, converted by the functions below).
mlir::Type storageType(mlir::MLIRContext *ctx, ElemType elem);

/// kernels::halfToFloat on the i16 bits `h`: an f32 (exact; a signaling NaN
/// stays signaling, as there), in integer operations.
mlir::Value halfToF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value h);
/// The f32 values a narrowing to f16 or bf16 must be right for: by default
/// every one. Where the values are known (a normalize of u8 pixels sees at
/// most 256 per channel, normalizeNarrowCases), the cases none of them
/// falls in are left out, and so are their compares and selects: for them
/// the remaining operations give floatToHalf's / floatToBf16's bits (each
/// case's operations only replace the general rounding's result where the
/// value is in that case; without ties, rounding half up is rounding to
/// nearest even).
struct NarrowCases {
  bool nan = true;       ///< NaN (f16 and bf16)
  bool overflow = true;  ///< f16: |v| >= 65520, infinities included
  bool subnormal = true; ///< f16: 0 < |v| < 2^-14
  bool zero = true;      ///< f16: +-0
  /// A tie: a value (not NaN; for f16 a normal one) exactly halfway
  /// between two of the narrow type's.
  bool tie = true;
};
/// kernels::floatToHalf of the f32 `f`: i16 bits, nearest even; right for
/// every f32 in `cases`.
mlir::Value f32ToHalf(mlir::OpBuilder &b, mlir::Location loc, mlir::Value f,
                      const NarrowCases &cases = {});
/// kernels::bf16ToFloat on the i16 bits `h`: an f32 (exact).
mlir::Value bf16ToF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value h);
/// kernels::floatToBf16 of the f32 `f`: i16 bits, nearest even, a NaN
/// quiet with its sign and the top of its payload; right for every f32 in
/// `cases`.
mlir::Value f32ToBf16(mlir::OpBuilder &b, mlir::Location loc, mlir::Value f,
                      const NarrowCases &cases = {});
/// The interpreter's NarrowF to f16 on the f64 `d`:
/// double(halfToFloat(doubleToHalf(d))); `halfBits` is set to the i16 bits
/// doubleToHalf(d).
mlir::Value narrowF64ToHalf(mlir::OpBuilder &b, mlir::Location loc,
                            mlir::Value d, mlir::Value &halfBits);

/// A scalar in a kernel body with its sluice element type (the MLIR type
/// alone cannot tell u8 from i8).
struct Scalar {
  mlir::Value value;
  ElemType elem = ElemType::F32;
};

/// True if every instruction of `expr` has a lowering.
bool exprLowerable(const kernels::CompiledExpr &expr);

/// True if a filter condition has a lowering (its fields' types too).
bool filterLowerable(const kernels::CompiledExpr &expr);

/// Builds the kernel of a `filter` KernelSpec (ExprToArith.cpp).
bool buildFilterKernel(mlir::OpBuilder &b, mlir::ModuleOp module,
                       const KernelSpec &k, std::string &error);

/// Lowers `map`'s expression on one element `x` (ExprToArith.cpp). Fails
/// (returns false, `error` set) for an expression it cannot lower.
bool lowerMapExpr(mlir::OpBuilder &b, mlir::Location loc,
                  const runtime::PlanStep &step, Scalar x, Scalar &result,
                  std::string &error);

/// Converts with the rules of ops/kernels/Scalar.h (convertOne).
Scalar convertScalar(mlir::OpBuilder &b, mlir::Location loc, Scalar v,
                     ElemType to);

/// Declares (once) and calls the libm function `name` on `args`.
mlir::Value callLibm(mlir::OpBuilder &b, mlir::Location loc,
                     llvm::StringRef name, mlir::ValueRange args);

/// Builds the module of all `kernels` (func/arith/math/scf/llvm dialects).
mlir::OwningOpRef<mlir::ModuleOp>
buildKernelModule(mlir::MLIRContext &ctx,
                  const std::vector<KernelSpec> &kernels, std::string &error);

/// Loads every dialect the generator and the lowering use.
void loadCodegenDialects(mlir::MLIRContext &ctx);

/// Merges the module's duplicate pure ops (CSE) so `explain --ir kernels`
/// reads well; the printed module is also the cache key's input.
bool tidyKernelModule(mlir::ModuleOp module, std::string &error);

/// Lowers the module to the LLVM dialect in place.
bool lowerToLLVMDialect(mlir::ModuleOp module, std::string &error);

/// Translates the lowered module to LLVM IR and adds `sluice_kernel_table`.
std::unique_ptr<llvm::Module>
translateKernels(mlir::ModuleOp module, const std::vector<KernelSpec> &kernels,
                 llvm::LLVMContext &llvmCtx, std::string &error);

/// A TargetMachine for `cpu` ("native", "x86-64-v2", ...).
std::unique_ptr<llvm::TargetMachine> makeTargetMachine(const std::string &cpu,
                                                       std::string &error);

/// Optimizes (O3, vectorizing) `module` for `tm` and emits an object file.
bool emitObject(llvm::Module &module, llvm::TargetMachine &tm,
                std::string &object, std::string &error);

/// Optimizes `module` for `tm` in place (what emitObject does first).
bool optimizeModule(llvm::Module &module, llvm::TargetMachine &tm,
                    std::string &error);

} // namespace sluice::compiler::codegen

#endif // SLUICE_COMPILER_CODEGEN_CODEGENINTERNAL_H
