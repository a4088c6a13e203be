//===- Conversions.cpp - Element conversions in arith
//-----------------------===//
//
// The conversions every generated kernel uses, spelled in arith/math the way
// ops/kernels/Scalar.h spells them in C++ (widening, saturating casts, f16
// carried as its i16 bits, quiet NaNs), so generated and runtime kernels
// agree to the byte; and the small constant and libm helpers.
//
//===----------------------------------------------------------------------===//
#include "ValueLowering.h"

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

Value constF64Bits(OpBuilder &b, Location loc, uint64_t bits) {
  return b.create<arith::ConstantOp>(
      loc,
      FloatAttr::get(b.getF64Type(), llvm::APFloat(llvm::APFloat::IEEEdouble(),
                                                   llvm::APInt(64, bits))));
}

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
  Value set =
      b.create<arith::OrIOp>(loc, bitsV, constInt(b, loc, it, int64_t(quiet)));
  Value out = b.create<arith::SelectOp>(loc, isNan, set, bitsV);
  return b.create<arith::BitcastOp>(loc, v.getType(), out);
}

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
  Value small =
      b.create<arith::MulFOp>(loc, b.create<arith::UIToFPOp>(loc, f32, man),
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

Value f32ToHalf(OpBuilder &b, Location loc, Value f, const NarrowCases &cases) {
  Type i32 = b.getI32Type(), i16 = b.getI16Type(), f32 = b.getF32Type();
  auto c = [&](uint32_t v) { return constInt(b, loc, i32, int64_t(v)); };
  auto c16 = [&](uint16_t v) { return constInt(b, loc, i16, int64_t(v)); };
  auto lo16 = [&](Value v) { return b.create<arith::TruncIOp>(loc, i16, v); };
  Value bitsV = b.create<arith::BitcastOp>(loc, i32, f);
  Value sign = lo16(b.create<arith::AndIOp>(
      loc, b.create<arith::ShRUIOp>(loc, bitsV, c(16)), c(0x8000)));
  Value abs = b.create<arith::AndIOp>(loc, bitsV, c(0x7FFFFFFF));
  // Below 2^-14: scaled so the subnormal unit is 1, rounded to nearest even
  // by the FPU (exact: a power-of-two scaling well within range).
  Value isSmall = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, abs,
                                          c(0x38800000));
  Value sub;
  if (cases.subnormal) {
    Value scaled =
        b.create<arith::MulFOp>(loc, b.create<arith::BitcastOp>(loc, f32, abs),
                                constFloat(b, loc, f32, 0x1p24));
    Value rounded = b.create<mlir::math::RoundEvenOp>(loc, scaled);
    // (only converted where it is in range: fptoui of a large value is
    // poison)
    rounded = b.create<arith::SelectOp>(loc, isSmall, rounded,
                                        constFloat(b, loc, f32, 0));
    sub = b.create<arith::FPToUIOp>(loc, i16, rounded);
  } else if (cases.zero) {
    sub = c16(0); // the only values below 2^-14 are +-0
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits (ties even;
  // without ties, half an ulp rounds the same).
  Value mant = b.create<arith::AddIOp>(loc, abs, c(0xC8000000u));
  Value round = c(0x1000);
  if (cases.tie)
    round = b.create<arith::AddIOp>(
        loc, c(0xFFF),
        b.create<arith::AndIOp>(loc, b.create<arith::ShRUIOp>(loc, mant, c(13)),
                                c(1)));
  Value r = lo16(b.create<arith::ShRUIOp>(
      loc, b.create<arith::AddIOp>(loc, mant, round), c(13)));
  if (sub)
    r = b.create<arith::SelectOp>(loc, isSmall, sub, r);
  if (cases.overflow) {
    Value isBig = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, abs,
                                          c(0x477FF000));
    r = b.create<arith::SelectOp>(loc, isBig, c16(0x7C00), r);
  }
  if (cases.nan) {
    // NaN: quiet, the top 10 payload bits kept.
    Value nan = b.create<arith::OrIOp>(
        loc, c16(0x7E00),
        lo16(b.create<arith::AndIOp>(
            loc, b.create<arith::ShRUIOp>(loc, abs, c(13)), c(0x3FF))));
    Value isNan = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, abs,
                                          c(0x7F800000));
    r = b.create<arith::SelectOp>(loc, isNan, nan, r);
  }
  return b.create<arith::OrIOp>(loc, sign, r);
}

// --- bf16 as bits -------------------------------------------------------===//
//
// A bf16 element is carried as its i16 bits too: the top half of an f32,
// so widening is a shift, and narrowing is Scalar.h's floatToBf16 (add
// 0x7FFF plus the kept part's lowest bit, take the top half; a NaN keeps
// its sign and payload top, made quiet). LLVM's bfloat fptrunc would round
// the same but leaves NaN bits to the target.

Value bf16ToF32(OpBuilder &b, Location loc, Value h) {
  Type i32 = b.getI32Type();
  Value x = b.create<arith::ExtUIOp>(loc, i32, h);
  Value bitsV = b.create<arith::ShLIOp>(loc, x, constInt(b, loc, i32, 16));
  return b.create<arith::BitcastOp>(loc, b.getF32Type(), bitsV);
}

Value f32ToBf16(OpBuilder &b, Location loc, Value f, const NarrowCases &cases) {
  Type i32 = b.getI32Type(), i16 = b.getI16Type();
  auto c = [&](uint32_t v) { return constInt(b, loc, i32, int64_t(v)); };
  Value bitsV = b.create<arith::BitcastOp>(loc, i32, f);
  Value high = b.create<arith::ShRUIOp>(loc, bitsV, c(16));
  // Half an ulp less the kept part's lowest bit: ties go to even. Without
  // ties (no value has exactly 0x8000 below the kept bits), half an ulp
  // rounds every value the same.
  Value half = c(0x8000);
  if (cases.tie)
    half = b.create<arith::AddIOp>(
        loc, b.create<arith::AndIOp>(loc, high, c(1)), c(0x7FFF));
  Value rounded = b.create<arith::ShRUIOp>(
      loc, b.create<arith::AddIOp>(loc, bitsV, half), c(16));
  if (!cases.nan) // the rounding is exact for +-inf, denormals and 0 too
    return b.create<arith::TruncIOp>(loc, i16, rounded);
  Value nan = b.create<arith::OrIOp>(loc, high, c(0x40));
  Value abs = b.create<arith::AndIOp>(loc, bitsV, c(0x7FFFFFFF));
  Value isNan = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, abs,
                                        c(0x7F800000));
  Value r = b.create<arith::SelectOp>(loc, isNan, nan, rounded);
  return b.create<arith::TruncIOp>(loc, i16, r);
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
  Value scaled =
      b.create<arith::MulFOp>(loc, b.create<arith::BitcastOp>(loc, f64, abs),
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

Scalar widen(OpBuilder &b, Location loc, Scalar v) {
  Type i64 = b.getI64Type();
  if (v.elem == ElemType::Bool) {
    Value nz = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v.value,
                                       constInt(b, loc, v.value.getType(), 0));
    return {b.create<arith::ExtUIOp>(loc, i64, nz), ElemType::I64};
  }
  if (v.elem == ElemType::F16)
    return {halfToF32(b, loc, v.value), ElemType::F32};
  if (v.elem == ElemType::BF16)
    return {bf16ToF32(b, loc, v.value), ElemType::F32};
  if (!isIntElem(v.elem) || v.elem == ElemType::I64)
    return v;
  Value w = isSigned(v.elem)
                ? b.create<arith::ExtSIOp>(loc, i64, v.value).getResult()
                : b.create<arith::ExtUIOp>(loc, i64, v.value).getResult();
  return {w, ElemType::I64};
}

namespace {

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

} // namespace

bool supportedElem(ElemType elem) {
  return isIntElem(elem) || elem == ElemType::F16 || elem == ElemType::BF16 ||
         elem == ElemType::F32 || elem == ElemType::F64 ||
         elem == ElemType::Bool;
}

Type storageType(MLIRContext *ctx, ElemType elem) {
  Builder b(ctx);
  switch (elem) {
  case ElemType::F32:
    return b.getF32Type();
  case ElemType::F64:
    return b.getF64Type();
  case ElemType::F16:  // its bits (see halfToF32)
  case ElemType::BF16: // its bits (see bf16ToF32)
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
  if (to == ElemType::F16 || to == ElemType::BF16) {
    // floatToHalf / floatToBf16 (static_cast<float>(w))
    Value f = w.value;
    if (w.elem == ElemType::I64)
      f = b.create<arith::SIToFPOp>(loc, b.getF32Type(), w.value);
    else if (w.elem == ElemType::F64)
      f = b.create<arith::TruncFOp>(loc, b.getF32Type(),
                                    quietNaN(b, loc, w.value));
    return {to == ElemType::F16 ? f32ToHalf(b, loc, f) : f32ToBf16(b, loc, f),
            to};
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

} // namespace sluice::compiler::codegen
