//===- ValueKernels.cpp - Value-wise steps as loops of arith/math ---------===//
//
// Lowers the value-wise steps of a Plan (fill_missing, clamp, cast,
// hash_bucket, bucketize, map, and normalize inside a fused chain) to one
// function per field chain:
//
//   stage "fill_missing+map" on field dense (f32)
//                 │
//                 ▼
//   func.func @sluice_k0(%in: !llvm.ptr, %out: !llvm.ptr, %n: i64) {
//     scf.for %i = 0 to %n step 1 : i64 {
//       %x = llvm.load (gep %in[%i])         ── element i
//       %a = <fill_missing>(%x)              ── arith.cmpf uno + select
//       %r = <map: log(max(x, 0) + 1)>(%a)   ── ExprToArith.cpp
//       llvm.store %r, (gep %out[%i])
//     }
//   }
//
// A per-channel normalize in the chain needs each element's channel (its
// last index): the loop then runs in periods of a multiple of the channel
// count and reads the normalize's pair from period tables at the position
// in the period (buildValuesKernel).
//
// The loop is scalar on purpose: every step is a pure function of one
// element, so LLVM's loop vectorizer (O3, LowerToLLVM.cpp) widens it to the
// target's vectors, and the scalar form stays readable in `explain --ir
// kernels`. Each step follows its runtime kernel (ops/kernels) operation by
// operation, in the same precision and with the same conversions
// (ops/kernels/Scalar.h), so outputs are byte-identical to the runtime's.
//
//===----------------------------------------------------------------------===//
#include "CodegenInternal.h"

#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Scalar.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

using namespace mlir;

namespace sluice::compiler::codegen {

using mlir::Value;

namespace {

bool isSigned(ElemType e) {
  return e == ElemType::I8 || e == ElemType::I16 || e == ElemType::I32 ||
         e == ElemType::I64;
}
bool isIntElem(ElemType e) {
  return e == ElemType::U8 || e == ElemType::U16 || isSigned(e);
}
unsigned bits(ElemType e) { return elemTypeSize(e) * 8; }

Value constInt(OpBuilder &b, Location loc, Type t, int64_t v) {
  return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(t, v));
}
Value constFloat(OpBuilder &b, Location loc, Type t, double v) {
  return b.create<arith::ConstantOp>(loc, b.getFloatAttr(t, v));
}
/// A double constant with exactly these bits (NaN payloads included).
Value constF64Bits(OpBuilder &b, Location loc, uint64_t bits) {
  return b.create<arith::ConstantOp>(
      loc, FloatAttr::get(b.getF64Type(),
                          llvm::APFloat(llvm::APFloat::IEEEdouble(),
                                        llvm::APInt(64, bits))));
}

/// `v` with a signaling NaN made quiet (payload and sign kept), as the
/// hardware's float<->double conversions do. Spelled in integer operations
/// because LLVM may fold an fpext/fptrunc pair away around a sign flip or a
/// select (it does not promise NaN payloads), which would leave a signaling
/// NaN signaling where the interpreter's conversion quietened it.
Value quietNaN(OpBuilder &b, Location loc, Value v) {
  bool f32 = v.getType().isF32();
  Type it = f32 ? b.getI32Type() : b.getI64Type();
  uint64_t absMask = f32 ? 0x7FFFFFFFull : 0x7FFFFFFFFFFFFFFFull;
  uint64_t inf = f32 ? 0x7F800000ull : 0x7FF0000000000000ull;
  uint64_t quiet = f32 ? 0x00400000ull : 0x0008000000000000ull;
  Value bitsV = b.create<arith::BitcastOp>(loc, it, v);
  Value absV = b.create<arith::AndIOp>(loc, bitsV,
                                       constInt(b, loc, it, int64_t(absMask)));
  Value isNan = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, absV,
                                        constInt(b, loc, it, int64_t(inf)));
  Value set = b.create<arith::OrIOp>(loc, bitsV,
                                     constInt(b, loc, it, int64_t(quiet)));
  Value out = b.create<arith::SelectOp>(loc, isNan, set, bitsV);
  return b.create<arith::BitcastOp>(loc, v.getType(), out);
}

} // namespace

// --- f16 as bits --------------------------------------------------------===//
//
// An f16 element is carried as its i16 bits, and converted with integer
// operations that spell out ops/kernels/Scalar.h's halfToFloat and
// floatToHalf step for step (and doubleToHalf's correctly rounded result,
// narrowF64ToHalf). LLVM's fpext/fptrunc on `half` would give
// the same numbers but not the same NaNs: the hardware conversion quiets a
// signaling NaN that halfToFloat keeps signaling (and without F16C it is a
// library call). A bool element is its byte (i8): read as `!= 0`, written
// as 0 or 1, as Scalar.h's loads and stores do.

Value halfToF32(OpBuilder &b, Location loc, Value h) {
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto c = [&](uint32_t v) { return constInt(b, loc, i32, int64_t(v)); };
  Value x = b.create<arith::ExtUIOp>(loc, i32, h);
  Value sign = b.create<arith::ShLIOp>(
      loc, b.create<arith::AndIOp>(loc, x, c(0x8000)), c(16));
  Value exp = b.create<arith::AndIOp>(
      loc, b.create<arith::ShRUIOp>(loc, x, c(10)), c(0x1F));
  Value man = b.create<arith::AndIOp>(loc, x, c(0x3FF));
  Value manHigh = b.create<arith::ShLIOp>(loc, man, c(13));
  // exp 31: inf / NaN, the payload kept (a signaling NaN stays signaling).
  Value special = b.create<arith::OrIOp>(
      loc, b.create<arith::OrIOp>(loc, sign, c(0x7F800000)), manHigh);
  // 0 < exp < 31: rebias.
  Value rebiased = b.create<arith::ShLIOp>(
      loc, b.create<arith::AddIOp>(loc, exp, c(112)), c(23));
  Value normal = b.create<arith::OrIOp>(
      loc, b.create<arith::OrIOp>(loc, sign, rebiased), manHigh);
  // exp 0: man * 2^-24, exact in f32 (and +-0 for man 0).
  Value small = b.create<arith::MulFOp>(
      loc, b.create<arith::UIToFPOp>(loc, f32, man),
      constFloat(b, loc, f32, 0x1p-24));
  Value subnormal = b.create<arith::OrIOp>(
      loc, b.create<arith::BitcastOp>(loc, i32, small), sign);
  Value isSpecial =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, exp, c(0x1F));
  Value isZeroExp =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, exp, c(0));
  Value r = b.create<arith::SelectOp>(loc, isZeroExp, subnormal, normal);
  r = b.create<arith::SelectOp>(loc, isSpecial, special, r);
  return b.create<arith::BitcastOp>(loc, f32, r);
}

Value f32ToHalf(OpBuilder &b, Location loc, Value f) {
  Type i32 = b.getI32Type(), i16 = b.getI16Type(), f32 = b.getF32Type();
  auto c = [&](uint32_t v) { return constInt(b, loc, i32, int64_t(v)); };
  auto c16 = [&](uint16_t v) { return constInt(b, loc, i16, int64_t(v)); };
  auto lo16 = [&](Value v) { return b.create<arith::TruncIOp>(loc, i16, v); };
  Value bitsV = b.create<arith::BitcastOp>(loc, i32, f);
  Value sign = lo16(b.create<arith::AndIOp>(
      loc, b.create<arith::ShRUIOp>(loc, bitsV, c(16)), c(0x8000)));
  Value abs = b.create<arith::AndIOp>(loc, bitsV, c(0x7FFFFFFF));
  // NaN: quiet, the top 10 payload bits kept.
  Value nan = b.create<arith::OrIOp>(
      loc, c16(0x7E00),
      lo16(b.create<arith::AndIOp>(
          loc, b.create<arith::ShRUIOp>(loc, abs, c(13)), c(0x3FF))));
  // Below 2^-14: scaled so the subnormal unit is 1, rounded to nearest even
  // by the FPU (exact: a power-of-two scaling well within range).
  Value isSmall =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, abs, c(0x38800000));
  Value scaled = b.create<arith::MulFOp>(
      loc, b.create<arith::BitcastOp>(loc, f32, abs),
      constFloat(b, loc, f32, 0x1p24));
  Value rounded = b.create<mlir::math::RoundEvenOp>(loc, scaled);
  // (only converted where it is in range: fptoui of a large value is poison)
  rounded = b.create<arith::SelectOp>(loc, isSmall, rounded,
                                      constFloat(b, loc, f32, 0));
  Value sub = b.create<arith::FPToUIOp>(loc, i16, rounded);
  // Normal: rebias the exponent, round the mantissa to 10 bits (ties even).
  Value mant = b.create<arith::AddIOp>(loc, abs, c(0xC8000000u));
  Value odd = b.create<arith::AndIOp>(
      loc, b.create<arith::ShRUIOp>(loc, mant, c(13)), c(1));
  Value round = b.create<arith::AddIOp>(loc, c(0xFFF), odd);
  Value normal = lo16(b.create<arith::ShRUIOp>(
      loc, b.create<arith::AddIOp>(loc, mant, round), c(13)));
  Value isNan =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, abs, c(0x7F800000));
  Value isBig =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, abs, c(0x477FF000));
  Value r = b.create<arith::SelectOp>(loc, isSmall, sub, normal);
  r = b.create<arith::SelectOp>(loc, isBig, c16(0x7C00), r);
  r = b.create<arith::SelectOp>(loc, isNan, nan, r);
  return b.create<arith::OrIOp>(loc, sign, r);
}

Value narrowF64ToHalf(OpBuilder &b, Location loc, Value d, Value &halfBits) {
  // doubleToHalf rounds correctly (to nearest, ties to even: its f32 step
  // rounds to odd), so rounding the f64's bits straight to 10 mantissa bits
  // gives its bits, in fewer operations than its two steps; and the f64
  // of those bits is written directly rather than through halfToFloat.
  Type i64 = b.getI64Type(), i16 = b.getI16Type(), f64 = b.getF64Type();
  auto c = [&](uint64_t v) { return constInt(b, loc, i64, int64_t(v)); };
  auto and_ = [&](Value x, uint64_t m) {
    return b.create<arith::AndIOp>(loc, x, c(m)).getResult();
  };
  auto lo16 = [&](Value v) { return b.create<arith::TruncIOp>(loc, i16, v); };
  auto cmp = [&](arith::CmpIPredicate p, Value x, uint64_t v) {
    return b.create<arith::CmpIOp>(loc, p, x, c(v)).getResult();
  };
  Value x = b.create<arith::BitcastOp>(loc, i64, d);
  Value sign = and_(x, 0x8000000000000000ull);
  Value abs = and_(x, 0x7FFFFFFFFFFFFFFFull);
  Value isNan = cmp(arith::CmpIPredicate::ugt, abs, 0x7FF0000000000000ull);
  // >= 65520 rounds to inf (the tie between 65504 and 2^16 goes even).
  Value isBig = cmp(arith::CmpIPredicate::uge, abs, 0x40EFFE0000000000ull);
  // Below 2^-14: a subnormal half (or 0).
  Value isSmall = cmp(arith::CmpIPredicate::ult, abs, 0x3F10000000000000ull);
  // NaN: quiet, the top 10 payload bits kept (as float(d) then
  // floatToHalf keep them).
  Value payload = and_(b.create<arith::ShRUIOp>(loc, abs, c(42)), 0x3FF);
  Value nanH = b.create<arith::OrIOp>(loc, payload, c(0x7E00));
  Value nanD = b.create<arith::OrIOp>(loc, and_(abs, 0x7FFFFC0000000000ull),
                                      c(0x0008000000000000ull));
  // Normal: the mantissa rounded to 10 bits, ties to even (a carry moves
  // into the exponent), the exponent rebiased from 1023 to 15.
  Value odd = and_(b.create<arith::ShRUIOp>(loc, abs, c(42)), 1);
  Value rounded = b.create<arith::AddIOp>(
      loc, abs, b.create<arith::AddIOp>(loc, c((1ull << 41) - 1), odd));
  Value normD = and_(rounded, ~((1ull << 42) - 1));
  Value normH = b.create<arith::SubIOp>(
      loc, b.create<arith::ShRUIOp>(loc, rounded, c(42)), c(1008ull << 10));
  // Subnormal: m = nearbyint(|d| * 2^24) (an exact scaling), m * 2^-24.
  Value scaled = b.create<arith::MulFOp>(
      loc, b.create<arith::BitcastOp>(loc, f64, abs),
      constFloat(b, loc, f64, 0x1p24));
  Value m = b.create<mlir::math::RoundEvenOp>(loc, scaled);
  // (only converted where it is in range: fptoui of a large value is poison)
  m = b.create<arith::SelectOp>(loc, isSmall, m, constFloat(b, loc, f64, 0));
  Value subH = b.create<arith::FPToUIOp>(loc, i64, m);
  Value subD = b.create<arith::BitcastOp>(
      loc, i64,
      b.create<arith::MulFOp>(loc, m, constFloat(b, loc, f64, 0x1p-24)));
  auto pick = [&](Value nan, Value inf, Value sub, Value norm) {
    Value r = b.create<arith::SelectOp>(loc, isSmall, sub, norm);
    r = b.create<arith::SelectOp>(loc, isBig, inf, r);
    return b.create<arith::SelectOp>(loc, isNan, nan, r).getResult();
  };
  Value h = pick(nanH, c(0x7C00), subH, normH);
  halfBits = lo16(b.create<arith::OrIOp>(
      loc, h, b.create<arith::ShRUIOp>(loc, sign, c(48))));
  Value r = pick(nanD, c(0x7FF0000000000000ull), subD, normD);
  return b.create<arith::BitcastOp>(loc, f64,
                                    b.create<arith::OrIOp>(loc, r, sign));
}

namespace {

/// widen() of ops/kernels/Dispatch.h: integers to int64 (sign- or
/// zero-extended), bool to int64 0 or 1 (`!= 0`: any non-zero byte is true),
/// f16 to its exact f32, f32 and f64 unchanged.
Scalar widen(OpBuilder &b, Location loc, Scalar v) {
  Type i64 = b.getI64Type();
  if (v.elem == ElemType::Bool) {
    Value nz = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v.value,
                                       constInt(b, loc, v.value.getType(), 0));
    return {b.create<arith::ExtUIOp>(loc, i64, nz), ElemType::I64};
  }
  if (v.elem == ElemType::F16)
    return {halfToF32(b, loc, v.value), ElemType::F32};
  if (!isIntElem(v.elem) || v.elem == ElemType::I64)
    return v;
  Value w = isSigned(v.elem) ? b.create<arith::ExtSIOp>(loc, i64, v.value)
                                   .getResult()
                             : b.create<arith::ExtUIOp>(loc, i64, v.value)
                                   .getResult();
  return {w, ElemType::I64};
}

/// saturateCastInt<To>(int64).
Value saturateIntToInt(OpBuilder &b, Location loc, Value v, ElemType to) {
  if (bits(to) == 64)
    return v;
  auto [lo, hi] = integerRange(to);
  Type i64 = b.getI64Type();
  Value l = constInt(b, loc, i64, lo), h = constInt(b, loc, i64, hi);
  Value below = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, v, l);
  Value above = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, v, h);
  Value c = b.create<arith::SelectOp>(loc, below, l, v);
  c = b.create<arith::SelectOp>(loc, above, h, c);
  return b.create<arith::TruncIOp>(loc, storageType(b.getContext(), to), c);
}

/// saturateCast<To>(double): NaN -> 0, <= min -> min, >= max -> max, else
/// truncation toward zero.
Value saturateF64ToInt(OpBuilder &b, Location loc, Value d, ElemType to) {
  auto [lo, hi] = integerRange(to);
  Type f64 = b.getF64Type(), i64 = b.getI64Type();
  Value dlo = constFloat(b, loc, f64, static_cast<double>(lo));
  Value dhi = constFloat(b, loc, f64, static_cast<double>(hi));
  Value isNan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, d, d);
  Value le = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLE, d, dlo);
  Value ge = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGE, d, dhi);
  Value t = b.create<arith::FPToSIOp>(loc, i64, d);
  Value r = b.create<arith::SelectOp>(loc, ge, constInt(b, loc, i64, hi), t);
  r = b.create<arith::SelectOp>(loc, le, constInt(b, loc, i64, lo), r);
  r = b.create<arith::SelectOp>(loc, isNan, constInt(b, loc, i64, 0), r);
  if (bits(to) == 64)
    return r;
  return b.create<arith::TruncIOp>(loc, storageType(b.getContext(), to), r);
}

// --- steps --------------------------------------------------------------===//

double paramDouble(const runtime::PlanStage &s, const char *name,
                   double fallback) {
  const sluice::Value &v = s.params[name];
  return v.isNumber() ? v.asDouble() : fallback;
}

Scalar lowerFillMissing(OpBuilder &b, Location loc,
                        const runtime::PlanStage &s, Scalar v) {
  double value = paramDouble(s, "value", 0);
  if (v.elem == ElemType::F16) { // NaN bits: |h| > 0x7C00
    Type i16 = b.getI16Type();
    Value abs = b.create<arith::AndIOp>(loc, v.value, constInt(b, loc, i16, 0x7FFF));
    Value nan = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, abs,
                                        constInt(b, loc, i16, 0x7C00));
    Value c = constInt(
        b, loc, i16, kernels::floatToHalf(static_cast<float>(value)));
    return {b.create<arith::SelectOp>(loc, nan, c, v.value), v.elem};
  }
  if (v.elem != ElemType::F32 && v.elem != ElemType::F64)
    return v; // the kernel returns non-float input unchanged
  Type t = v.value.getType();
  Value c = v.elem == ElemType::F32
                ? constFloat(b, loc, t, static_cast<float>(value))
                : constFloat(b, loc, t, value);
  Value nan =
      b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, v.value, v.value);
  return {b.create<arith::SelectOp>(loc, nan, c, v.value), v.elem};
}

Scalar lowerClamp(OpBuilder &b, Location loc, const runtime::PlanStage &s,
                  Scalar v) {
  const sluice::Value &minV = s.params["min"], &maxV = s.params["max"];
  std::optional<double> lo, hi;
  if (minV.isNumber())
    lo = minV.asDouble();
  if (maxV.isNumber())
    hi = maxV.asDouble();
  Type t = v.value.getType();
  Value x = v.value;
  if (v.elem == ElemType::F16) {
    // kernels::clamp: bounds as f32, compared with the element's f32; a NaN
    // keeps its bits, any other element converts back to its own bits.
    Type f32 = b.getF32Type();
    Value f = halfToF32(b, loc, x);
    Value inner = x;
    if (hi) {
      float h = static_cast<float>(*hi);
      Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, f,
                                         constFloat(b, loc, f32, h));
      inner = b.create<arith::SelectOp>(
          loc, gt, constInt(b, loc, t, kernels::floatToHalf(h)), x);
    }
    if (lo) {
      float l = static_cast<float>(*lo);
      Value lt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, f,
                                         constFloat(b, loc, f32, l));
      inner = b.create<arith::SelectOp>(
          loc, lt, constInt(b, loc, t, kernels::floatToHalf(l)), inner);
    }
    return {inner, v.elem};
  }
  if (v.elem == ElemType::Bool) {
    // kernels::clamp on 0 or 1 in double, written back as `!= 0`: the two
    // results are known here.
    auto clampBool = [&](double d) {
      d = lo && d < *lo ? std::ceil(*lo) : d;
      d = hi && d > *hi ? std::floor(*hi) : d;
      return int64_t(d != 0);
    };
    Value nz = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, x,
                                       constInt(b, loc, t, 0));
    return {b.create<arith::SelectOp>(loc, nz, constInt(b, loc, t, clampBool(1)),
                                      constInt(b, loc, t, clampBool(0))),
            v.elem};
  }
  if (v.elem == ElemType::F32 || v.elem == ElemType::F64) {
    // dst = x < l ? l : (x > h ? h : x); NaN compares false and is kept.
    Value inner = x;
    if (hi) {
      Value h = v.elem == ElemType::F32
                    ? constFloat(b, loc, t, static_cast<float>(*hi))
                    : constFloat(b, loc, t, *hi);
      Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, x, h);
      inner = b.create<arith::SelectOp>(loc, gt, h, x);
    }
    if (lo) {
      Value l = v.elem == ElemType::F32
                    ? constFloat(b, loc, t, static_cast<float>(*lo))
                    : constFloat(b, loc, t, *lo);
      Value lt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, x, l);
      inner = b.create<arith::SelectOp>(loc, lt, l, inner);
    }
    return {inner, v.elem};
  }
  auto [minI, maxI] = integerRange(v.elem);
  auto sat = [&](double d) -> int64_t {
    switch (v.elem) {
    case ElemType::U8:
      return kernels::saturateCast<uint8_t>(d);
    case ElemType::I8:
      return kernels::saturateCast<int8_t>(d);
    case ElemType::U16:
      return kernels::saturateCast<uint16_t>(d);
    case ElemType::I16:
      return kernels::saturateCast<int16_t>(d);
    case ElemType::I32:
      return kernels::saturateCast<int32_t>(d);
    default:
      return kernels::saturateCast<int64_t>(d);
    }
  };
  int64_t l = lo ? sat(std::ceil(*lo)) : minI;
  int64_t h = hi ? sat(std::floor(*hi)) : maxI;
  bool sgn = isSigned(v.elem);
  Value lc = constInt(b, loc, t, l), hc = constInt(b, loc, t, h);
  Value gt = b.create<arith::CmpIOp>(
      loc, sgn ? arith::CmpIPredicate::sgt : arith::CmpIPredicate::ugt, x, hc);
  Value inner = b.create<arith::SelectOp>(loc, gt, hc, x);
  Value lt = b.create<arith::CmpIOp>(
      loc, sgn ? arith::CmpIPredicate::slt : arith::CmpIPredicate::ult, x, lc);
  return {b.create<arith::SelectOp>(loc, lt, lc, inner), v.elem};
}

Scalar lowerHashBucket(OpBuilder &b, Location loc, const runtime::PlanStage &s,
                       Scalar v) {
  int64_t buckets = s.params["buckets"].isNumber()
                        ? s.params["buckets"].asInt()
                        : 1;
  Type i64 = b.getI64Type();
  Value x = widen(b, loc, v).value;
  // hashInt(v) = mix64(uint64(v) + golden), SplitMix64's finalizer.
  x = b.create<arith::AddIOp>(loc, x,
                              constInt(b, loc, i64, int64_t(0x9E3779B97F4A7C15ull)));
  auto step = [&](int64_t shift, uint64_t mul) {
    Value sh = b.create<arith::ShRUIOp>(loc, x, constInt(b, loc, i64, shift));
    Value xr = b.create<arith::XOrIOp>(loc, x, sh);
    x = mul ? b.create<arith::MulIOp>(loc, xr, constInt(b, loc, i64, int64_t(mul)))
                  .getResult()
            : xr;
  };
  step(30, 0xBF58476D1CE4E5B9ull);
  step(27, 0x94D049BB133111EBull);
  step(31, 0);
  Value bc = constInt(b, loc, i64, buckets);
  if (buckets < (int64_t(1) << 14) || buckets >= (int64_t(1) << 62))
    return {b.create<arith::RemUIOp>(loc, x, bc), ElemType::I64};
  // x mod b without a 64-bit division, which no vector unit has: the
  // quotient estimated in f64 is off by at most one (x/b < 2^50, relative
  // error < 2^-51, so the absolute error is < 1), and one correction each way
  // gives the exact remainder. Vectorizes (AVX-512DQ converts u64 <-> f64).
  Type f64 = b.getF64Type();
  Value xf = b.create<arith::UIToFPOp>(loc, f64, x);
  Value p = b.create<arith::MulFOp>(
      loc, xf, constFloat(b, loc, f64, 1.0 / static_cast<double>(buckets)));
  Value q = b.create<arith::FPToUIOp>(loc, i64, p);
  Value r = b.create<arith::SubIOp>(loc, x,
                                    b.create<arith::MulIOp>(loc, q, bc));
  Value neg = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, r,
                                      constInt(b, loc, i64, 0));
  r = b.create<arith::SelectOp>(loc, neg, b.create<arith::AddIOp>(loc, r, bc),
                                r);
  Value big = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, r, bc);
  r = b.create<arith::SelectOp>(loc, big, b.create<arith::SubIOp>(loc, r, bc),
                                r);
  return {r, ElemType::I64};
}

/// Boundaries the generated bucketize covers: sorted, no NaN, few enough
/// to compare against each one (kernels::bucketize binary-searches).
bool bucketizeCovered(const runtime::PlanStage &s, std::vector<double> &b) {
  b = s.params["boundaries"].asDoubleList();
  if (b.size() > 64)
    return false;
  for (size_t i = 0; i < b.size(); ++i)
    if (std::isnan(b[i]) || (i > 0 && b[i] < b[i - 1]))
      return false;
  return true;
}

/// kernels::bucketize: the number of boundaries <= x (NaN: all of them),
/// compared exactly for i64 and in double for every other type.
Scalar lowerBucketize(OpBuilder &b, Location loc, const runtime::PlanStage &s,
                      Scalar v) {
  std::vector<double> bounds;
  bucketizeCovered(s, bounds);
  Type i32 = b.getI32Type();
  Value count = constInt(b, loc, i32, 0);
  auto add = [&](Value bit) {
    count = b.create<arith::AddIOp>(
        loc, count, b.create<arith::ExtUIOp>(loc, i32, bit));
  };
  if (v.elem == ElemType::I64) {
    for (double bd : bounds) {
      if (bd >= 0x1p63)
        continue; // never <= an int64
      if (bd < -0x1p63) {
        count = b.create<arith::AddIOp>(loc, count, constInt(b, loc, i32, 1));
        continue;
      }
      double fb = std::floor(bd);
      int64_t ib = static_cast<int64_t>(fb);
      // b <= a  <=>  !(a < b): a >= ib for an integral b, a > ib otherwise.
      auto pred = fb < bd ? arith::CmpIPredicate::sgt : arith::CmpIPredicate::sge;
      add(b.create<arith::CmpIOp>(loc, pred, v.value,
                                  constInt(b, loc, b.getI64Type(), ib)));
    }
    return {count, ElemType::I32};
  }
  Value d = convertScalar(b, loc, v, ElemType::F64).value;
  for (double bd : bounds)
    add(b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLE,
                                constFloat(b, loc, b.getF64Type(), bd), d));
  Value nan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, d, d);
  Value all = constInt(b, loc, i32, int64_t(bounds.size()));
  return {b.create<arith::SelectOp>(loc, nan, all, count), ElemType::I32};
}

/// Lowers one step on one element; `outElem` is the step's output type.
bool lowerStep(OpBuilder &b, Location loc, const runtime::PlanStage &s,
               Scalar &v, ElemType outElem, std::string &error) {
  if (s.op == "fill_missing")
    v = lowerFillMissing(b, loc, s, v);
  else if (s.op == "clamp")
    v = lowerClamp(b, loc, s, v);
  else if (s.op == "cast")
    v = convertScalar(b, loc, v, outElem);
  else if (s.op == "hash_bucket")
    v = lowerHashBucket(b, loc, s, v);
  else if (s.op == "bucketize")
    v = lowerBucketize(b, loc, s, v);
  else if (s.op == "map") {
    Scalar r;
    if (!lowerMapExpr(b, loc, s, v, r, error))
      return false;
    // bindMap casts the expression's result to the field's type.
    v = convertScalar(b, loc, r, outElem);
  } else {
    error = "no lowering for op '" + s.op + "'";
    return false;
  }
  if (v.elem != outElem) {
    error = "step '" + s.name + "' lowered to " +
            std::string(elemTypeName(v.elem)) + ", its output is " +
            std::string(elemTypeName(outElem));
    return false;
  }
  return true;
}

/// The element type of field `name` in `type`, if it is a numeric field.
std::optional<ElemType> fieldElem(const RecordType &type,
                                  const std::string &name) {
  int i = type.indexOf(name);
  if (i < 0)
    return std::nullopt;
  return type.fields()[size_t(i)].type.elem;
}

/// normalize's channel count as a fused value loop needs it: 1 when one
/// mean/std pair serves every channel, else the lists' length (the runtime
/// kernel then requires the field's last dim to equal it, or reports an
/// error). 0 when the runtime would reject every record (an empty list,
/// lengths that disagree, a std that is not finite and positive): such a
/// step is left to the runtime, which reports it.
int64_t normalizeChannels(const runtime::PlanStage &s) {
  std::vector<double> mean = s.params["mean"].asDoubleList();
  std::vector<double> sd = s.params["std"].asDoubleList();
  if (mean.empty() || sd.empty() ||
      (mean.size() != sd.size() && mean.size() != 1 && sd.size() != 1))
    return 0;
  for (double v : sd)
    if (!(v > 0) || !std::isfinite(v))
      return 0;
  return static_cast<int64_t>(std::max(mean.size(), sd.size()));
}

/// Whether the generator covers `s` as a single step, and its field IO.
/// (A normalize is covered inside a fused chain, which knows the channel;
/// a lone normalize stage is compiled as a chain of one, remapKernel.)
bool coveredStep(const runtime::PlanStage &s, std::string &field,
                 std::string &out, ElemType &in, ElemType &outElem) {
  static const char *const kOps[] = {"fill_missing", "clamp", "cast",
                                     "hash_bucket", "bucketize", "map",
                                     "normalize"};
  if (s.kind != OpKind::Element ||
      std::find(std::begin(kOps), std::end(kOps), s.op) == std::end(kOps))
    return false;
  const sluice::Value &f = s.params["field"], &as = s.params["as"];
  if (!f.isString())
    return false;
  field = f.asString();
  out = as.isString() ? as.asString() : field;
  std::optional<ElemType> i = fieldElem(s.inputType, field);
  std::optional<ElemType> o = fieldElem(s.outputType, out);
  if (!i || !o || !supportedElem(*i) || !supportedElem(*o))
    return false;
  int outIndex = s.outputType.indexOf(out);
  if (static_cast<size_t>(outIndex) > s.inputType.size())
    return false;
  in = *i;
  outElem = *o;
  if (s.op == "clamp" && s.params["min"].isNumber() &&
      s.params["max"].isNumber() &&
      s.params["min"].asDouble() > s.params["max"].asDouble())
    return false; // the runtime reports the error per record
  if (s.op == "hash_bucket" &&
      (!(isIntElem(in) || in == ElemType::Bool) ||
       !s.params["buckets"].isNumber() ||
       s.params["buckets"].asInt() < 1))
    return false;
  if (s.op == "normalize" &&
      (normalizeChannels(s) == 0 || outElem != ElemType::F32))
    return false;
  if (s.op == "bucketize") {
    std::vector<double> bounds;
    if (!bucketizeCovered(s, bounds) || outElem != ElemType::I32)
      return false;
  }
  if (s.op == "map") {
    if (!s.params["expr"].isString())
      return false;
    ExprError perr;
    ExprPtr e = parseExpr(s.params["expr"].asString(), perr);
    if (!e)
      return false;
    Expected<kernels::CompiledExpr> c = kernels::CompiledExpr::compileMap(*e, in);
    if (!c || !exprLowerable(*c))
      return false;
  }
  return true;
}

} // namespace

bool supportedElem(ElemType elem) {
  return isIntElem(elem) || elem == ElemType::F16 || elem == ElemType::F32 ||
         elem == ElemType::F64 || elem == ElemType::Bool;
}

Type storageType(MLIRContext *ctx, ElemType elem) {
  Builder b(ctx);
  switch (elem) {
  case ElemType::F32:
    return b.getF32Type();
  case ElemType::F64:
    return b.getF64Type();
  case ElemType::F16: // its bits (see halfToF32)
    return b.getI16Type();
  default:
    return b.getIntegerType(bits(elem));
  }
}

Scalar convertScalar(OpBuilder &b, Location loc, Scalar v, ElemType to) {
  if (v.elem == to)
    return v;
  Scalar w = widen(b, loc, v);
  if (w.elem == to) // f16 -> f32 (exact), bool -> i64
    return w;
  Type toType = storageType(b.getContext(), to);
  if (to == ElemType::Bool) { // `!= 0`: NaN is true, -0 false
    Value nz =
        w.elem == ElemType::I64
            ? b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, w.value,
                                      constInt(b, loc, w.value.getType(), 0))
                  .getResult()
            : b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, w.value,
                                      constFloat(b, loc, w.value.getType(), 0))
                  .getResult();
    return {b.create<arith::ExtUIOp>(loc, toType, nz), to};
  }
  if (to == ElemType::F16) { // floatToHalf(static_cast<float>(w))
    Value f = w.value;
    if (w.elem == ElemType::I64)
      f = b.create<arith::SIToFPOp>(loc, b.getF32Type(), w.value);
    else if (w.elem == ElemType::F64)
      f = b.create<arith::TruncFOp>(loc, b.getF32Type(),
                                    quietNaN(b, loc, w.value));
    return {f32ToHalf(b, loc, f), to};
  }
  if (to == ElemType::F32 || to == ElemType::F64) {
    if (w.elem == ElemType::I64)
      return {b.create<arith::SIToFPOp>(loc, toType, w.value), to};
    Value q = quietNaN(b, loc, w.value);
    if (w.elem == ElemType::F32) // to F64
      return {b.create<arith::ExtFOp>(loc, toType, q), to};
    return {b.create<arith::TruncFOp>(loc, toType, q), to};
  }
  if (w.elem == ElemType::F32)
    w = {b.create<arith::ExtFOp>(loc, b.getF64Type(), w.value), ElemType::F64};
  if (w.elem == ElemType::F64)
    return {saturateF64ToInt(b, loc, w.value, to), to};
  return {saturateIntToInt(b, loc, w.value, to), to};
}

Value callLibm(OpBuilder &b, Location loc, llvm::StringRef name,
               ValueRange args) {
  auto module =
      b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  Type t = args.front().getType();
  auto fn = module.lookupSymbol<func::FuncOp>(name);
  if (!fn) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(module.getBody());
    SmallVector<Type> in(args.size(), t);
    fn = b.create<func::FuncOp>(loc, name, b.getFunctionType(in, {t}));
    fn.setPrivate();
  }
  return b.create<func::CallOp>(loc, fn, args).getResult(0);
}

std::string KernelSpec::signature() const {
  if (filter)
    return rows ? "filter rows" : "filter";
  if (chain)
    return "remap " + field + " " + std::string(elemTypeName(inElem)) +
           " -> " + outField + " " + std::string(elemTypeName(outElem));
  return "values " + field + " " + std::string(elemTypeName(inElem)) +
         " -> " + outField + " " + std::string(elemTypeName(outElem)) +
         (channels > 1 ? " channels " + std::to_string(channels) : "");
}

/// The kernels of a `fused_map` stage: one chain per field, its steps in
/// stage order (steps on different fields commute: none has its own `as`).
/// All or nothing: a stage with a step the generator does not cover is left
/// to the runtime whole. A chain with a per-channel normalize records the
/// channel count its records must have (KernelSpec::channels); two such
/// steps that disagree would fail every record, so the runtime keeps them.
static bool fusedKernels(const runtime::PlanStage &s, std::vector<KernelSpec> &out) {
  std::vector<KernelSpec> chains;
  for (const runtime::PlanStage &step : s.fused) {
    std::string field, outField;
    ElemType in, outElem;
    if (!coveredStep(step, field, outField, in, outElem) || outField != field)
      return false;
    auto it = std::find_if(chains.begin(), chains.end(),
                           [&](const KernelSpec &k) { return k.field == field; });
    if (it == chains.end()) {
      KernelSpec k;
      k.stage = s.name;
      k.field = k.outField = field;
      k.inElem = in;
      chains.push_back(k);
      it = chains.end() - 1;
    } else if (it->outElem != in) {
      return false;
    }
    if (step.op == "normalize") {
      int64_t c = normalizeChannels(step);
      if (c > 1 && it->channels > 1 && it->channels != c)
        return false;
      it->channels = std::max(it->channels, c);
    }
    it->steps.push_back(&step);
    it->outElem = outElem;
  }
  for (KernelSpec &k : chains) {
    k.funcName = "sluice_k" + std::to_string(out.size());
    out.push_back(std::move(k));
  }
  return !chains.empty();
}

// --- remap chains (sluice-fuse-remaps) ----------------------------------===//
//
//   func.func @sluice_kN(%in: !llvm.ptr, %out: !llvm.ptr, %params: !llvm.ptr)
//     scf.for %o0 ... scf.for %o1 ...          one loop per output dim
//       idx_n = (o0, o1, ...)                  output position
//       idx_k = remap_k^-1(idx_k+1)            back through every step:
//                                              crop +offset, flip D-1-i,
//                                              transpose permutes, pad -before
//       v = in[idx_0]                          (0 where a pad is outside)
//       v = step_k(v) for k = 0..n-1           value steps; pads select their
//                                              value where idx_k is outside
//       out[idx_n] = v
//
// Sizes, crop offsets and flip flags are loads from %params (the layout of
// runtime/RemapChain.h), so one function serves every record. An output
// dim that is the input's channel dim with a small static size (3 in HWC,
// or after a transpose to CHW) is unrolled innermost: the loop then walks
// the input's pixels in order with the channel a constant (normalize's
// per-channel constants fold), and a CHW result is one plane per channel,
// which LLVM vectorizes as an interleaved load (de-interleaving shuffles),
// not as gathers. A lone `normalize` is compiled the same way.

namespace {

/// The steps' value lowerings the remap kernel reuses must all be covered.
bool remapValueStepCovered(const runtime::RemapChain::Step &st) {
  if (!supportedElem(st.inElem) || !supportedElem(st.outElem))
    return false;
  const runtime::PlanStage &s = *st.stage;
  if (st.kind != runtime::RemapChain::Kind::Value)
    return true;
  if (s.op == "normalize") // any channel count (constant tables)
    return st.outElem == ElemType::F32 && normalizeChannels(s) > 0;
  std::string field, out;
  ElemType in, o;
  return coveredStep(s, field, out, in, o) && field == out &&
         in == st.inElem && o == st.outElem;
}

/// The constant `value` stored as `elem` (storeFromDouble's conversion).
Value elemConstant(OpBuilder &b, Location loc, ElemType elem, double value) {
  uint8_t bytes[8] = {0};
  kernels::storeFromDouble(elem, value, bytes, 0);
  Type t = storageType(b.getContext(), elem);
  if (elem == ElemType::F32) {
    uint32_t u;
    std::memcpy(&u, bytes, 4);
    return b.create<arith::ConstantOp>(
        loc, FloatAttr::get(t, llvm::APFloat(llvm::APFloat::IEEEsingle(),
                                             llvm::APInt(32, u))));
  }
  if (elem == ElemType::F64) {
    uint64_t u;
    std::memcpy(&u, bytes, 8);
    return constF64Bits(b, loc, u);
  }
  uint64_t u = 0;
  std::memcpy(&u, bytes, elemTypeSize(elem));
  return b.create<arith::ConstantOp>(
      loc, b.getIntegerAttr(t, llvm::APInt(bits(elem), u)));
}

/// normalize's per-channel constants for `s` (kernels::normalizeTables),
/// one pair per channel (n of them, 1 for a single pair).
void normalizeConstants(const runtime::PlanStage &s, std::vector<float> &m,
                        std::vector<float> &sc) {
  std::vector<double> mean = s.params["mean"].asDoubleList();
  std::vector<double> sd = s.params["std"].asDoubleList();
  if (mean.size() == 1 && sd.size() > 1)
    mean.assign(sd.size(), mean[0]);
  if (sd.size() == 1 && mean.size() > 1)
    sd.assign(mean.size(), sd[0]);
  int64_t n = static_cast<int64_t>(std::max(mean.size(), sd.size()));
  kernels::normalizeTables(mean, sd, n, m, sc);
}

/// A private constant array of f32 `values` in the kernel module (one per
/// call, named sluice_table<N>), and its address where `b` stands.
Value constTable(OpBuilder &b, Location loc, ArrayRef<float> values) {
  ModuleOp module =
      b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  Type f32 = b.getF32Type();
  auto arrayType = LLVM::LLVMArrayType::get(f32, values.size());
  size_t tables = 0;
  for (auto g : module.getOps<LLVM::GlobalOp>()) {
    (void)g;
    ++tables;
  }
  Operation *in = b.getInsertionBlock()->getParentOp();
  auto fn = isa<func::FuncOp>(in) ? cast<func::FuncOp>(in)
                                  : in->getParentOfType<func::FuncOp>();
  LLVM::GlobalOp global;
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(fn); // before its kernel, in the order made
    global = b.create<LLVM::GlobalOp>(
        loc, arrayType, /*isConstant=*/true, LLVM::Linkage::Private,
        "sluice_table" + std::to_string(tables),
        DenseElementsAttr::get(
            RankedTensorType::get({int64_t(values.size())}, f32), values),
        /*alignment=*/64);
  }
  return b.create<LLVM::AddressOfOp>(loc, global);
}

/// The f32 normalize computes on: float(x) as kernels::normalize converts
/// an element of any type.
Value normalizeInput(OpBuilder &b, Location loc, Scalar v) {
  Type f32 = b.getF32Type();
  if (v.elem == ElemType::F32)
    return v.value;
  if (v.elem == ElemType::F64)
    return b.create<arith::TruncFOp>(loc, f32, quietNaN(b, loc, v.value));
  if (v.elem == ElemType::F16 || v.elem == ElemType::Bool)
    // static_cast<float>(loadAsDouble(...)): through double, so a
    // signaling NaN comes out quiet.
    return convertScalar(b, loc, convertScalar(b, loc, v, ElemType::F64),
                         ElemType::F32)
        .value;
  // static_cast<float>(double(int)), as loadAsDouble does
  return b.create<arith::TruncFOp>(
      loc, f32,
      b.create<arith::SIToFPOp>(loc, b.getF64Type(), widen(b, loc, v).value));
}

/// (x - table_m[at]) * table_sc[at], the tables' entries loaded.
Value normalizeFromTables(OpBuilder &b, Location loc, Value x, Value mTable,
                          Value scTable, Value at) {
  Type f32 = b.getF32Type();
  Type ptr = LLVM::LLVMPointerType::get(b.getContext());
  Value mv = b.create<LLVM::LoadOp>(
      loc, f32, b.create<LLVM::GEPOp>(loc, ptr, f32, mTable, ValueRange{at}));
  Value sv = b.create<LLVM::LoadOp>(
      loc, f32, b.create<LLVM::GEPOp>(loc, ptr, f32, scTable, ValueRange{at}));
  Value d = b.create<arith::SubFOp>(loc, x, mv);
  return b.create<arith::MulFOp>(loc, d, sv);
}

/// normalize on one element whose channel (last index) is `channel`:
/// float(x) as kernels::normalize converts it, then (x - m[c]) * scale[c].
/// One pair, or a constant channel (unrolled), takes its pair as
/// constants; any other channel reads its pair from two constant tables
/// indexed by the channel, for any number of channels.
Scalar lowerNormalize(OpBuilder &b, Location loc, const runtime::PlanStage &s,
                      Scalar v, Value channel) {
  std::vector<float> m, sc;
  normalizeConstants(s, m, sc);
  int64_t n = static_cast<int64_t>(m.size());
  Type f32 = b.getF32Type();
  Value x = normalizeInput(b, loc, v);
  int64_t known = n == 1 ? 0 : -1;
  if (auto c = channel.getDefiningOp<arith::ConstantOp>())
    if (auto attr = llvm::dyn_cast<IntegerAttr>(c.getValue()))
      if (attr.getInt() >= 0 && attr.getInt() < n)
        known = attr.getInt();
  if (known >= 0) {
    Value d = b.create<arith::SubFOp>(loc, x, constFloat(b, loc, f32, m[known]));
    return {b.create<arith::MulFOp>(loc, d, constFloat(b, loc, f32, sc[known])),
            ElemType::F32};
  }
  Value mTable = constTable(b, loc, m), scTable = constTable(b, loc, sc);
  return {normalizeFromTables(b, loc, x, mTable, scTable, channel),
          ElemType::F32};
}

/// The period of the loops over values in `c` channels: the least
/// multiple of c that is a multiple of 16 floats (one AVX-512 register),
/// doubled up to at least 128 elements (LLVM fully unrolls a shorter
/// constant inner loop and then vectorizes the outer one with gathers and
/// scatters: 16 elements for 8 channels ran 4x slower than the runtime's
/// loop); c itself when that would pass 65536.
int64_t normalizePeriod(int64_t c) {
  c = std::max<int64_t>(c, 1);
  int64_t period = c * (16 / std::gcd(c, int64_t(16)));
  while (period < 128)
    period *= 2;
  return period > 65536 ? c : period;
}

/// normalize's constants over one period of `period` elements (a multiple
/// of its channel count): two constant tables, entry j holding channel
/// (j mod C)'s mean and 1/std.
std::pair<Value, Value> periodTables(OpBuilder &b, Location loc,
                                     const runtime::PlanStage &s,
                                     int64_t period) {
  std::vector<float> m, sc;
  normalizeConstants(s, m, sc);
  size_t c = m.size();
  std::vector<float> mp(static_cast<size_t>(period)),
      sp(static_cast<size_t>(period));
  for (size_t j = 0; j < mp.size(); ++j) {
    mp[j] = m[j % c];
    sp[j] = sc[j % c];
  }
  return {constTable(b, loc, mp), constTable(b, loc, sp)};
}

/// Loops over `total` elements in periods of `period`, calling `element`
/// (i, i's position in its period) to build each loop's body:
///
///   for (b = 0; b < n / P; ++b) for (j = 0; j < P; ++j) element(bP+j, j)
///   for (i = n / P * P; i < n; ++i) element(i, i - n / P * P)
///
/// The inner loop has a constant trip count and contiguous accesses, which
/// LLVM vectorizes. False when `element` fails.
bool periodLoops(OpBuilder &b, Location loc, Value total, int64_t period,
                 llvm::function_ref<bool(Value, Value)> element) {
  Type i64 = b.getI64Type();
  Value zero = constInt(b, loc, i64, 0), one = constInt(b, loc, i64, 1);
  Value p = constInt(b, loc, i64, period);
  Value blocks = b.create<arith::DivUIOp>(loc, total, p);
  Value main = b.create<arith::MulIOp>(loc, blocks, p);
  OpBuilder::InsertionGuard guard(b);
  {
    OpBuilder::InsertionGuard inLoops(b);
    auto outer = b.create<scf::ForOp>(loc, zero, blocks, one);
    b.setInsertionPointToStart(outer.getBody());
    Value base = b.create<arith::MulIOp>(loc, outer.getInductionVar(), p);
    auto inner = b.create<scf::ForOp>(loc, zero, p, one);
    b.setInsertionPointToStart(inner.getBody());
    Value j = inner.getInductionVar();
    if (!element(b.create<arith::AddIOp>(loc, base, j), j))
      return false;
  }
  auto tail = b.create<scf::ForOp>(loc, main, total, one);
  b.setInsertionPointToStart(tail.getBody());
  Value i = tail.getInductionVar();
  return element(i, b.create<arith::SubIOp>(loc, i, main));
}

/// A lone normalize over several channels that are not unrolled (more than
/// 4, or a channel dim the type does not know): the runtime kernel's loop
/// (kernels::normalize), flat over the elements in periods of P = the least
/// multiple of the channel count that is a multiple of 16 floats (doubled
/// up to at least 128), with
/// P-entry constant tables, so the inner loop has a constant trip count and
/// contiguous loads that LLVM vectorizes:
///
///   for (b = 0; b < n / P; ++b) for (j = 0; j < P; ++j) out[bP+j] = f(in[bP+j], j)
///   for (i = n / P * P; i < n; ++i) out[i] = f(in[i], i - n / P * P)
bool buildFlatNormalize(OpBuilder &b, const KernelSpec &k,
                        const std::vector<Value> &inDims, Value in,
                        Value outPtr) {
  const runtime::PlanStage &s = *k.chain->steps()[0].stage;
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  MLIRContext *ctx = b.getContext();
  Type ptr = LLVM::LLVMPointerType::get(ctx), i64 = b.getI64Type();
  int64_t period = normalizePeriod(normalizeChannels(s));
  auto [mTable, scTable] = periodTables(b, loc, s, period);
  Value total = constInt(b, loc, i64, 1);
  for (Value d : inDims)
    total = b.create<arith::MulIOp>(loc, total, d);
  Type inT = storageType(ctx, k.inElem), f32 = b.getF32Type();
  return periodLoops(b, loc, total, period, [&](Value i, Value at) {
    Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{i});
    Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
    Value r = normalizeFromTables(b, loc, normalizeInput(b, loc, v), mTable,
                                  scTable, at);
    Value dst = b.create<LLVM::GEPOp>(loc, ptr, f32, outPtr, ValueRange{i});
    b.create<LLVM::StoreOp>(loc, r, dst);
    return true;
  });
}

/// Opens kernel `k`'s function (arguments `args`, no result; its stage and
/// signature as attributes) at the end of `module`, with `b` at the start
/// of its entry block, which it returns.
Block *beginKernel(OpBuilder &b, ModuleOp module, const KernelSpec &k,
                   ArrayRef<Type> args) {
  b.setInsertionPointToEnd(module.getBody());
  auto fn = b.create<func::FuncOp>(NameLoc::get(b.getStringAttr(k.stage)),
                                   k.funcName, b.getFunctionType(args, {}));
  fn->setAttr("sluice.stage", b.getStringAttr(k.stage));
  fn->setAttr("sluice.signature", b.getStringAttr(k.signature()));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  return entry;
}

/// The kernel of a remap chain, if `s` is one the generator covers.
bool remapKernel(const runtime::PlanStage &s, std::vector<KernelSpec> &out) {
  Expected<runtime::RemapChain> chain = runtime::RemapChain::build(s);
  if (!chain)
    return false;
  for (const runtime::RemapChain::Step &st : chain->steps())
    if (!remapValueStepCovered(st))
      return false;
  KernelSpec k;
  k.stage = s.name;
  k.funcName = "sluice_k" + std::to_string(out.size());
  k.field = k.outField = chain->field();
  k.inElem = chain->inElem();
  k.outElem = chain->outElem();
  int o = s.outputType.indexOf(k.field);
  if (o >= 0)
    k.outShape = s.outputType.fields()[size_t(o)].type.shape;
  k.outShape.resize(chain->rankAt(chain->steps().size()), -1);
  // The static shape at every step's input, and the output's.
  for (size_t st = 0; st <= chain->steps().size(); ++st) {
    const runtime::PlanStage *at =
        st < chain->steps().size() ? chain->steps()[st].stage : nullptr;
    const RecordType &type = at ? at->inputType : s.outputType;
    int f = type.indexOf(k.field);
    std::vector<int64_t> dims;
    if (f >= 0)
      dims = type.fields()[size_t(f)].type.shape;
    dims.resize(chain->rankAt(st), kDynamic);
    k.staticDims.push_back(std::move(dims));
  }
  k.chain = std::make_shared<const runtime::RemapChain>(chain.take());
  out.push_back(std::move(k));
  return true;
}

/// The output dim that is the input's last (channel) dim after the chain's
/// transposes, if it has a small static size.
std::optional<size_t> unrolledChannelDim(const KernelSpec &k) {
  const runtime::RemapChain &c = *k.chain;
  size_t outRank = c.rankAt(c.steps().size());
  size_t inRank = c.rankAt(0);
  if (inRank < 2 || outRank < 2)
    return std::nullopt;
  for (size_t j = 0; j < outRank; ++j) {
    if (k.outShape[j] < 1 || k.outShape[j] > 4)
      continue;
    size_t d = j;
    for (size_t s = c.steps().size(); s-- > 0;) {
      const runtime::RemapChain::Step &st = c.steps()[s];
      if (st.kind == runtime::RemapChain::Kind::Transpose)
        d = size_t(st.perm[d]);
    }
    if (d == inRank - 1)
      return j;
  }
  return std::nullopt;
}

bool buildRemapKernel(OpBuilder &b, ModuleOp module, const KernelSpec &k,
                      std::string &error) {
  using Kind = runtime::RemapChain::Kind;
  MLIRContext *ctx = b.getContext();
  const runtime::RemapChain &c = *k.chain;
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  Type i64 = b.getI64Type();
  Block *entry = beginKernel(b, module, k, {ptr, ptr, ptr});
  Value in = entry->getArgument(0), outPtr = entry->getArgument(1),
        params = entry->getArgument(2);
  auto param = [&](size_t i) -> Value {
    Value at = b.create<LLVM::GEPOp>(loc, ptr, i64, params,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    return b.create<LLVM::LoadOp>(loc, i64, at);
  };
  // Every size and draw, loaded once at the top.
  size_t n = c.steps().size();
  std::vector<std::vector<Value>> dims(n + 1);
  std::vector<std::vector<Value>> draws(n);
  for (size_t s = 0; s <= n; ++s) {
    for (size_t d = 0; d < c.rankAt(s); ++d) {
      int64_t known = s < k.staticDims.size() && d < k.staticDims[s].size()
                          ? k.staticDims[s][d]
                          : kDynamic;
      dims[s].push_back(known > 0 ? constInt(b, loc, i64, known)
                                  : param(c.dimsAt(s) + d));
    }
    if (s < n) {
      Kind kind = c.steps()[s].kind;
      size_t count = kind == Kind::CenterCrop || kind == Kind::RandomCrop ? 2
                     : kind == Kind::Flip                                 ? 1
                                                                          : 0;
      for (size_t j = 0; j < count; ++j)
        draws[s].push_back(param(c.drawAt(s) + j));
    }
  }
  std::optional<size_t> unrolled = unrolledChannelDim(k);
  if (n == 1 && c.steps()[0].kind == Kind::Value &&
      c.steps()[0].stage->op == "normalize" && !unrolled &&
      std::max(c.steps()[0].meanCount, c.steps()[0].stdCount) > 1) {
    buildFlatNormalize(b, k, dims[0], in, outPtr);
    b.setInsertionPointToEnd(entry);
    b.create<func::ReturnOp>(loc);
    return true;
  }
  Value zero = constInt(b, loc, i64, 0), one = constInt(b, loc, i64, 1);
  size_t outRank = c.rankAt(n);
  std::vector<Value> oIdx(outRank);
  // The loop nest over the output dims (the unrolled one left out).
  for (size_t j = 0; j < outRank; ++j) {
    if (unrolled && *unrolled == j)
      continue;
    auto loop = b.create<scf::ForOp>(loc, zero, dims[n][j], one);
    b.setInsertionPointToStart(loop.getBody());
    oIdx[j] = loop.getInductionVar();
  }
  int64_t copies = unrolled ? k.outShape[*unrolled] : 1;
  Type inT = storageType(ctx, k.inElem), outT = storageType(ctx, k.outElem);
  for (int64_t u = 0; u < copies; ++u) {
    if (unrolled)
      oIdx[*unrolled] = constInt(b, loc, i64, u);
    // Backward: the position at every step's input, and the bounds checks.
    std::vector<std::vector<Value>> at(n + 1);
    std::vector<Value> inside(n);
    at[n] = oIdx;
    for (size_t s = n; s-- > 0;) {
      const runtime::RemapChain::Step &st = c.steps()[s];
      std::vector<Value> idx = at[s + 1];
      auto checkAll = [&](const std::vector<size_t> &which) {
        Value ok;
        for (size_t d : which) {
          Value in = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult,
                                             idx[d], dims[s][d]);
          ok = ok ? b.create<arith::AndIOp>(loc, ok, in).getResult() : in;
        }
        return ok;
      };
      switch (st.kind) {
      case Kind::Value:
        break;
      case Kind::CenterCrop:
      case Kind::RandomCrop:
        idx[0] = b.create<arith::AddIOp>(loc, idx[0], draws[s][0]);
        idx[1] = b.create<arith::AddIOp>(loc, idx[1], draws[s][1]);
        if (st.kind == Kind::RandomCrop && st.padding > 0)
          inside[s] = checkAll({0, 1});
        break;
      case Kind::Flip: {
        size_t a = size_t(st.axis);
        Value last = b.create<arith::SubIOp>(loc, dims[s][a], one);
        Value mirrored = b.create<arith::SubIOp>(loc, last, idx[a]);
        Value flip = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne,
                                             draws[s][0], zero);
        idx[a] = b.create<arith::SelectOp>(loc, flip, mirrored, idx[a]);
        break;
      }
      case Kind::Transpose: {
        std::vector<Value> from(idx.size());
        for (size_t j = 0; j < idx.size(); ++j)
          from[size_t(st.perm[j])] = idx[j];
        idx = from;
        break;
      }
      case Kind::Pad: {
        std::vector<size_t> padded;
        for (size_t d = 0; d < idx.size(); ++d)
          if (st.pads[d].first || st.pads[d].second) {
            if (st.pads[d].first)
              idx[d] = b.create<arith::SubIOp>(
                  loc, idx[d], constInt(b, loc, i64, st.pads[d].first));
            padded.push_back(d);
          }
        if (!padded.empty())
          inside[s] = checkAll(padded);
        break;
      }
      }
      at[s] = idx;
    }
    // The input element (row-major), at position 0 when a pad is outside.
    Value lin = zero;
    for (size_t d = 0; d < at[0].size(); ++d) {
      lin = d ? b.create<arith::MulIOp>(loc, lin, dims[0][d]).getResult() : lin;
      lin = b.create<arith::AddIOp>(loc, lin, at[0][d]);
    }
    Value all;
    for (Value ok : inside)
      if (ok)
        all = all ? b.create<arith::AndIOp>(loc, all, ok).getResult() : ok;
    if (all)
      lin = b.create<arith::SelectOp>(loc, all, lin, zero);
    Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{lin});
    Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
    // Forward: the value steps, and the pads' values where they are outside.
    for (size_t s = 0; s < n; ++s) {
      const runtime::RemapChain::Step &st = c.steps()[s];
      Location stepLoc = NameLoc::get(b.getStringAttr(st.stage->name));
      if (inside[s]) {
        double fill = st.kind == Kind::Pad ? st.value : 0;
        Value pv = elemConstant(b, stepLoc, v.elem, fill);
        v.value = b.create<arith::SelectOp>(stepLoc, inside[s], v.value, pv);
      }
      if (st.kind != Kind::Value)
        continue;
      if (st.stage->op == "normalize") {
        Value ch = at[s].empty() ? zero : at[s].back();
        v = lowerNormalize(b, stepLoc, *st.stage, v, ch);
      } else if (!lowerStep(b, stepLoc, *st.stage, v, st.outElem, error)) {
        return false;
      }
      if (v.elem != st.outElem) {
        error = "step '" + st.stage->name + "' lowered to the wrong type";
        return false;
      }
    }
    Value olin = zero;
    for (size_t d = 0; d < outRank; ++d) {
      olin = d ? b.create<arith::MulIOp>(loc, olin, dims[n][d]).getResult()
               : olin;
      olin = b.create<arith::AddIOp>(loc, olin, oIdx[d]);
    }
    Value dst = b.create<LLVM::GEPOp>(loc, ptr, outT, outPtr, ValueRange{olin});
    b.create<LLVM::StoreOp>(loc, v.value, dst);
  }
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(loc);
  return true;
}

/// The kernel of a value chain (`void(in, out, n)`, out[i] = f(in[i])):
///
///   for (i = 0; i < n; ++i) out[i] = f(in[i])
///
/// With a per-channel normalize in the chain (k.channels = C > 1) element
/// i is in channel i mod C. The loop then runs in periods of P elements, P
/// a multiple of C chosen as buildFlatNormalize chooses it, and each such
/// normalize reads its pair from P-entry constant tables at the position in
/// the period, so no element needs a division:
///
///   for (b = 0; b < n / P; ++b) for (j = 0; j < P; ++j) out[bP+j] = f(in[bP+j], j)
///   for (i = n / P * P; i < n; ++i) out[i] = f(in[i], i - n / P * P)
bool buildValuesKernel(OpBuilder &b, ModuleOp module, const KernelSpec &k,
                       std::string &error) {
  MLIRContext *ctx = b.getContext();
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  Type ptr = LLVM::LLVMPointerType::get(ctx), i64 = b.getI64Type();
  Block *entry = beginKernel(b, module, k, {ptr, ptr, i64});
  Value in = entry->getArgument(0), outPtr = entry->getArgument(1),
        n = entry->getArgument(2);
  Value zero = constInt(b, loc, i64, 0), one = constInt(b, loc, i64, 1);
  Type inT = storageType(ctx, k.inElem), outT = storageType(ctx, k.outElem);

  int64_t period = k.channels > 1 ? normalizePeriod(k.channels) : 1;
  // Each per-channel normalize's tables, one entry per period position.
  std::vector<std::pair<Value, Value>> tables(k.steps.size());
  for (size_t st = 0; st < k.steps.size(); ++st) {
    const runtime::PlanStage &s = *k.steps[st];
    if (s.op != "normalize" || normalizeChannels(s) < 2)
      continue;
    if (normalizeChannels(s) != k.channels || period % k.channels != 0) {
      error = "step '" + s.name + "' does not fit the channels of '" +
              k.stage + "'";
      return false;
    }
    tables[st] = periodTables(b, NameLoc::get(b.getStringAttr(s.name)), s,
                              period);
  }

  // out[i] = f(in[i]); `at`: i's position in the period.
  auto element = [&](Value i, Value at) {
    Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{i});
    Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
    for (size_t st = 0; st < k.steps.size(); ++st) {
      const runtime::PlanStage *s = k.steps[st];
      std::string field, outField;
      ElemType se, so;
      if (!coveredStep(*s, field, outField, se, so) || se != v.elem) {
        error = "step '" + s->name + "' does not fit the chain of '" +
                k.stage + "'";
        return false;
      }
      Location stepLoc = NameLoc::get(b.getStringAttr(s->name));
      if (s->op == "normalize") {
        v = tables[st].first
                ? Scalar{normalizeFromTables(b, stepLoc,
                                             normalizeInput(b, stepLoc, v),
                                             tables[st].first,
                                             tables[st].second, at),
                         ElemType::F32}
                : lowerNormalize(b, stepLoc, *s, v, zero); // one pair
      } else if (!lowerStep(b, stepLoc, *s, v, so, error)) {
        return false;
      }
    }
    if (v.elem != k.outElem) {
      error = "kernel of '" + k.stage + "' ends in the wrong type";
      return false;
    }
    Value dst = b.create<LLVM::GEPOp>(loc, ptr, outT, outPtr, ValueRange{i});
    b.create<LLVM::StoreOp>(loc, v.value, dst);
    return true;
  };

  if (period == 1) {
    auto loop = b.create<scf::ForOp>(loc, zero, n, one);
    b.setInsertionPointToStart(loop.getBody());
    if (!element(loop.getInductionVar(), zero))
      return false;
  } else if (!periodLoops(b, loc, n, period, element)) {
    return false;
  }
  b.setInsertionPointToEnd(entry);
  b.create<func::ReturnOp>(loc);
  return true;
}

} // namespace

std::vector<KernelSpec> collectKernels(const runtime::Plan &plan) {
  std::vector<KernelSpec> out;
  for (const runtime::PlanStage &s : plan.stages) {
    if (s.op == "fused_map") {
      // A chain that moves values (sluice-fuse-remaps) is one remap kernel;
      // a value-wise run (sluice-fuse-maps) one loop per field, flat over
      // the elements, also when a normalize makes it a chain of one field
      // that RemapChain would take too.
      bool moves = std::any_of(s.fused.begin(), s.fused.end(),
                               [](const runtime::PlanStage &st) {
                                 return runtime::isRemapOp(st.op);
                               });
      if (moves && !remapKernel(s, out))
        fusedKernels(s, out);
      else if (!moves && !fusedKernels(s, out))
        remapKernel(s, out);
      continue;
    }
    if (s.op == "filter") {
      if (!s.params["where"].isString())
        continue;
      ExprError perr;
      ExprPtr e = parseExpr(s.params["where"].asString(), perr);
      if (!e)
        continue;
      Expected<kernels::CompiledExpr> c =
          kernels::CompiledExpr::compileRecord(*e, s.inputType);
      if (!c || !filterLowerable(*c))
        continue;
      KernelSpec k;
      k.stage = s.name;
      k.funcName = "sluice_k" + std::to_string(out.size());
      k.filter = std::make_shared<const kernels::CompiledExpr>(c.take());
      // Its column form, for record runs (Stage::nextRun).
      KernelSpec rows = k;
      rows.rows = true;
      rows.funcName = "sluice_k" + std::to_string(out.size() + 1);
      out.push_back(std::move(k));
      out.push_back(std::move(rows));
      continue;
    }
    if (s.op == "normalize") { // per channel: a chain of one step
      // Its constants fold (one pair, or a small static channel dim
      // unrolled), or come from period tables (buildFlatNormalize).
      remapKernel(s, out);
      continue;
    }
    KernelSpec k;
    if (!coveredStep(s, k.field, k.outField, k.inElem, k.outElem))
      continue;
    k.stage = s.name;
    k.funcName = "sluice_k" + std::to_string(out.size());
    k.steps.push_back(&s);
    out.push_back(std::move(k));
  }
  return out;
}

void loadCodegenDialects(MLIRContext &ctx) {
  ctx.loadDialect<arith::ArithDialect, func::FuncDialect, math::MathDialect,
                  scf::SCFDialect, cf::ControlFlowDialect,
                  LLVM::LLVMDialect>();
}

OwningOpRef<ModuleOp> buildKernelModule(MLIRContext &ctx,
                                        const std::vector<KernelSpec> &kernels,
                                        std::string &error) {
  loadCodegenDialects(ctx);
  OpBuilder b(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b.getUnknownLoc());
  for (const KernelSpec &k : kernels) {
    if (k.filter) {
      if (!buildFilterKernel(b, *module, k, error))
        return nullptr;
      continue;
    }
    if (k.chain) {
      if (!buildRemapKernel(b, *module, k, error))
        return nullptr;
      continue;
    }
    if (!buildValuesKernel(b, *module, k, error))
      return nullptr;
  }
  return module;
}

} // namespace sluice::compiler::codegen
