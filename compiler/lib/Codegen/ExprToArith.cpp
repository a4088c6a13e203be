//===- ExprToArith.cpp - map expressions as arith/math on one element -----===//
//
// Lowers a `map` expression by lowering the interpreter's own bytecode
// (ops/kernels/ExprEval.h), one instruction at a time, so the generated code
// computes what the interpreter computes, bit for bit:
//
//   "log(max(x, 0) + 1)" ──CompiledExpr::compileMap──► bytecode
//     LoadF f0, x           ──► arith.extf %x : f32 to f64
//     ConstF f1, 0          ──► arith.constant 0.0 : f64
//     MaxF f0, f0, f1       ──► cmpf uno ×2, cmpf olt, select ×2 (NaN wins)
//     ConstF f1, 1          ──► arith.constant 1.0 : f64
//     AddF f0, f0, f1       ──► arith.addf
//     LogF f0, f0           ──► math::logImpl on arith ops (MathImpl.h)
//   result f0 -> f32        ──► arith.truncf (Scalar.h's conversion)
//
// Registers become SSA values (a register written twice simply names a new
// value). Integer registers are i64 with two's-complement wrap, float
// registers f64, exactly as in the interpreter. f16 arithmetic is f64
// arithmetic narrowed after every operation (NarrowF: doubleToHalf then
// halfToFloat, spelled in integer operations, narrowF64ToHalf); a bool
// field loads as 0 or 1 (`!= 0`). `log` is the one algorithm
// of ops/kernels/MathImpl.h, which the interpreter runs on doubles and this
// file instantiates on arith ops (the same operations, so the same bits,
// and no call, so the loop vectorizes). The other transcendental functions
// are calls into libm (through ops/kernels/MathCalls.h, names LLVM does not
// rewrite), so they round exactly as std::exp and friends do in the
// interpreter.
//
//===----------------------------------------------------------------------===//
#include "CodegenInternal.h"

#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/MathImpl.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include "llvm/ADT/DenseMap.h"

#include <cstring>
#include <limits>

using namespace mlir;
using sluice::kernels::CompiledExpr;

namespace sluice::compiler::codegen {

using mlir::Value;

namespace {

using Op = CompiledExpr::Op;

/// math::logImpl's backend that builds arith ops (f64 / i64 / i1): the
/// interpreter's log, operation for operation (ops/kernels/MathImpl.h).
struct ArithOps {
  using F = Value;
  using I = Value;
  using M = Value;
  OpBuilder &b;
  Location loc;
  F f(double c) {
    uint64_t v;
    std::memcpy(&v, &c, 8);
    return b.create<arith::ConstantOp>(
        loc, FloatAttr::get(b.getF64Type(),
                            llvm::APFloat(llvm::APFloat::IEEEdouble(),
                                          llvm::APInt(64, v))));
  }
  I i(int64_t c) {
    return b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(c));
  }
  I bits(F x) { return b.create<arith::BitcastOp>(loc, b.getI64Type(), x); }
  F fromBits(I v) { return b.create<arith::BitcastOp>(loc, b.getF64Type(), v); }
  F add(F a, F c) { return b.create<arith::AddFOp>(loc, a, c); }
  F sub(F a, F c) { return b.create<arith::SubFOp>(loc, a, c); }
  F mul(F a, F c) { return b.create<arith::MulFOp>(loc, a, c); }
  F div(F a, F c) { return b.create<arith::DivFOp>(loc, a, c); }
  F itof(I v) { return b.create<arith::SIToFPOp>(loc, b.getF64Type(), v); }
  I iadd(I a, I c) { return b.create<arith::AddIOp>(loc, a, c); }
  I isub(I a, I c) { return b.create<arith::SubIOp>(loc, a, c); }
  I iand(I a, I c) { return b.create<arith::AndIOp>(loc, a, c); }
  I ior(I a, I c) { return b.create<arith::OrIOp>(loc, a, c); }
  I ixor(I a, I c) { return b.create<arith::XOrIOp>(loc, a, c); }
  I ashr(I a, int n) { return b.create<arith::ShRSIOp>(loc, a, i(n)); }
  I shl(I a, int n) { return b.create<arith::ShLIOp>(loc, a, i(n)); }
  M ult(I a, I c) {
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, a, c);
  }
  M ilt(I a, I c) {
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, a, c);
  }
  M igt(I a, I c) {
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, a, c);
  }
  M ieq(I a, I c) {
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, a, c);
  }
  M funo(F a, F c) {
    return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, a, c);
  }
  F sel(M m, F a, F c) { return b.create<arith::SelectOp>(loc, m, a, c); }
  I isel(M m, I a, I c) { return b.create<arith::SelectOp>(loc, m, a, c); }
};

struct Lowering {
  OpBuilder &b;
  Location loc;
  Scalar x;
  llvm::DenseMap<int32_t, Value> iregs, fregs;
  std::string &error;
  /// filter: the value of each load slot (empty for map, which loads x).
  std::vector<Scalar> slots = {};
  /// The f16 bits behind each f64 value NarrowF made (halfToFloat of them),
  /// so an f16 result is stored as those bits: floatToHalf(halfToFloat(h))
  /// is h for every h doubleToHalf gives (NaNs come out of it quiet).
  llvm::DenseMap<Value, Value> halfBits{};

  Type i64() { return b.getI64Type(); }
  Type f64() { return b.getF64Type(); }
  Value ci(int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(i64(), v));
  }
  Value cf(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    return b.create<arith::ConstantOp>(
        loc, FloatAttr::get(f64(), llvm::APFloat(llvm::APFloat::IEEEdouble(),
                                                 llvm::APInt(64, bits))));
  }
  Value boolToI64(Value c) { return b.create<arith::ExtUIOp>(loc, i64(), c); }
  Value cmpi(arith::CmpIPredicate p, Value a, Value c) {
    return b.create<arith::CmpIOp>(loc, p, a, c);
  }
  Value cmpf(arith::CmpFPredicate p, Value a, Value c) {
    return b.create<arith::CmpFOp>(loc, p, a, c);
  }
  Value sel(Value c, Value a, Value d) {
    return b.create<arith::SelectOp>(loc, c, a, d);
  }
  Value I(int32_t r) { return iregs.lookup(r); }
  Value F(int32_t r) { return fregs.lookup(r); }

  /// The map element (or the filter's slot) as the interpreter's load
  /// lambda reads it (loadAsDouble / loadAsInt).
  Scalar slot(int32_t i) { return slots.empty() ? x : slots[size_t(i)]; }
  Value loadF(int32_t i) {
    return convertScalar(b, loc, slot(i), ElemType::F64).value;
  }
  Value loadI(int32_t i) {
    // Floats saturate, integers widen (Scalar.h's conversion).
    return convertScalar(b, loc, slot(i), ElemType::I64).value;
  }
  /// `v` with its quiet bit set (the interpreter's quiet()).
  Value quiet(Value v) {
    Value bitsV = b.create<arith::BitcastOp>(loc, i64(), v);
    Value q = b.create<arith::OrIOp>(loc, bitsV, ci(int64_t(1) << 51));
    return b.create<arith::BitcastOp>(loc, f64(), q);
  }
  Value isNan(Value v) { return cmpf(arith::CmpFPredicate::UNO, v, v); }
  /// firstNaN(a, r): a NaN first operand wins, quieted.
  Value firstNaN(Value a, Value r) { return sel(isNan(a), quiet(a), r); }
  /// maxF/minF: the first NaN (quieted), else the larger/smaller; ties give
  /// the second operand (maxHalf/minHalf, for f16: the first).
  Value nanMinMax(Value a, Value c, bool isMax, bool firstOnTie) {
    using FP = arith::CmpFPredicate;
    Value pick = isMax ? sel(cmpf(firstOnTie ? FP::OGE : FP::OGT, a, c), a, c)
                       : sel(cmpf(firstOnTie ? FP::OLE : FP::OLT, a, c), a, c);
    return sel(isNan(a), quiet(a), sel(isNan(c), quiet(c), pick));
  }
  /// wrapTo(): truncate to the integer type and widen back.
  Value wrap(Value v, ElemType t) {
    if (t == ElemType::I64)
      return v;
    Type narrow = storageType(b.getContext(), t);
    Value tr = b.create<arith::TruncIOp>(loc, narrow, v);
    bool sgn = t == ElemType::I8 || t == ElemType::I16 || t == ElemType::I32;
    return sgn ? b.create<arith::ExtSIOp>(loc, i64(), tr).getResult()
               : b.create<arith::ExtUIOp>(loc, i64(), tr).getResult();
  }
  /// A float binary op of precision `t` computed by a MathCalls.h helper.
  Value preciseCall(llvm::StringRef f64Name, llvm::StringRef f32Name,
                    ElemType t, Value a, Value c) {
    if (t == ElemType::F64)
      return callLibm(b, loc, f64Name, {a, c});
    Type f32 = b.getF32Type();
    Value r = callLibm(b, loc, f32Name,
                       {b.create<arith::TruncFOp>(loc, f32, a).getResult(),
                        b.create<arith::TruncFOp>(loc, f32, c).getResult()});
    return b.create<arith::ExtFOp>(loc, f64(), r);
  }

  bool lower(const CompiledExpr::Instr &in) {
    using P = arith::CmpIPredicate;
    using FP = arith::CmpFPredicate;
    switch (in.op) {
    case Op::ConstI:
      iregs[in.dst] = ci(in.imm);
      return true;
    case Op::ConstF:
      fregs[in.dst] = cf(in.fimm);
      return true;
    case Op::LoadI:
      if (!slots.empty() && size_t(in.a) >= slots.size())
        break;
      iregs[in.dst] = loadI(in.a);
      return true;
    case Op::LoadF:
      if (!slots.empty() && size_t(in.a) >= slots.size())
        break;
      fregs[in.dst] = loadF(in.a);
      return true;
    case Op::CvtIF:
      fregs[in.dst] = b.create<arith::SIToFPOp>(loc, f64(), I(in.a));
      return true;
    case Op::WrapI: // to an integer type (never to bool)
      if (!isInteger(in.type) || in.type == ElemType::Bool)
        break;
      iregs[in.dst] = wrap(I(in.a), in.type);
      return true;
    case Op::NarrowF: {
      if (in.type == ElemType::F64) {
        fregs[in.dst] = F(in.a);
        return true;
      }
      if (in.type == ElemType::F16) { // halfToFloat(doubleToHalf(v))
        Value h;
        Value d = narrowF64ToHalf(b, loc, F(in.a), h);
        fregs[in.dst] = d;
        halfBits[d] = h;
        return true;
      }
      if (in.type != ElemType::F32)
        break;
      Value t = b.create<arith::TruncFOp>(loc, b.getF32Type(), F(in.a));
      fregs[in.dst] = b.create<arith::ExtFOp>(loc, f64(), t);
      return true;
    }
    case Op::NegI:
      iregs[in.dst] = b.create<arith::SubIOp>(loc, ci(0), I(in.a));
      return true;
    case Op::AbsI: {
      Value a = I(in.a);
      iregs[in.dst] = sel(cmpi(P::slt, a, ci(0)),
                          b.create<arith::SubIOp>(loc, ci(0), a), a);
      return true;
    }
    case Op::NotI:
      iregs[in.dst] = boolToI64(cmpi(P::eq, I(in.a), ci(0)));
      return true;
    case Op::NegF:
      fregs[in.dst] = b.create<arith::NegFOp>(loc, F(in.a));
      return true;
    case Op::AbsF:
      fregs[in.dst] = b.create<mlir::math::AbsFOp>(loc, F(in.a));
      return true;
    case Op::FloorF:
      fregs[in.dst] = b.create<mlir::math::FloorOp>(loc, F(in.a));
      return true;
    case Op::CeilF:
      fregs[in.dst] = b.create<mlir::math::CeilOp>(loc, F(in.a));
      return true;
    case Op::RintF: // nearbyint in the default mode: ties to even
      fregs[in.dst] = b.create<mlir::math::RoundEvenOp>(loc, F(in.a));
      return true;
    case Op::SqrtF:
      fregs[in.dst] = b.create<mlir::math::SqrtOp>(loc, F(in.a));
      return true;
    case Op::ExpF:
      fregs[in.dst] = callLibm(b, loc, "sluice_exp", {F(in.a)});
      return true;
    case Op::LogF: { // sluice's own log, inline and vectorizable
      ArithOps ops{b, loc};
      fregs[in.dst] = sluice::math::logImpl(ops, F(in.a));
      return true;
    }
    case Op::Log1pF:
      fregs[in.dst] = callLibm(b, loc, "sluice_log1p", {F(in.a)});
      return true;
    case Op::SinF:
      fregs[in.dst] = callLibm(b, loc, "sluice_sin", {F(in.a)});
      return true;
    case Op::CosF:
      fregs[in.dst] = callLibm(b, loc, "sluice_cos", {F(in.a)});
      return true;
    case Op::TanhF:
      fregs[in.dst] = callLibm(b, loc, "sluice_tanh", {F(in.a)});
      return true;
    case Op::AddI:
      iregs[in.dst] = b.create<arith::AddIOp>(loc, I(in.a), I(in.b));
      return true;
    case Op::SubI:
      iregs[in.dst] = b.create<arith::SubIOp>(loc, I(in.a), I(in.b));
      return true;
    case Op::MulI:
      iregs[in.dst] = b.create<arith::MulIOp>(loc, I(in.a), I(in.b));
      return true;
    case Op::FloorDivI: { // 0 for y == 0, -x for y == -1, else floored
      Value x = I(in.a), y = I(in.b);
      Value zero = cmpi(P::eq, y, ci(0)), minus1 = cmpi(P::eq, y, ci(-1));
      Value safe = sel(b.create<arith::OrIOp>(loc, zero, minus1), ci(1), y);
      Value q = b.create<arith::DivSIOp>(loc, x, safe);
      Value r = b.create<arith::RemSIOp>(loc, x, safe);
      Value adjust = b.create<arith::AndIOp>(
          loc, cmpi(P::ne, r, ci(0)),
          b.create<arith::XOrIOp>(loc, cmpi(P::slt, x, ci(0)),
                                  cmpi(P::slt, safe, ci(0))));
      q = sel(adjust, b.create<arith::SubIOp>(loc, q, ci(1)), q);
      q = sel(minus1, b.create<arith::SubIOp>(loc, ci(0), x), q);
      iregs[in.dst] = sel(zero, ci(0), q);
      return true;
    }
    case Op::ModI: { // the divisor's sign; 0 for y == 0 or -1
      Value x = I(in.a), y = I(in.b);
      Value bad = b.create<arith::OrIOp>(loc, cmpi(P::eq, y, ci(0)),
                                         cmpi(P::eq, y, ci(-1)));
      Value safe = sel(bad, ci(1), y);
      Value r = b.create<arith::RemSIOp>(loc, x, safe);
      Value fix = b.create<arith::AndIOp>(
          loc, cmpi(P::ne, r, ci(0)),
          b.create<arith::XOrIOp>(loc, cmpi(P::slt, r, ci(0)),
                                  cmpi(P::slt, safe, ci(0))));
      r = sel(fix, b.create<arith::AddIOp>(loc, r, safe), r);
      iregs[in.dst] = sel(bad, ci(0), r);
      return true;
    }
    case Op::PowI:
      iregs[in.dst] = callLibm(b, loc, "sluice_powi", {I(in.a), I(in.b)});
      return true;
    case Op::MinI: {
      Value a = I(in.a), c = I(in.b);
      iregs[in.dst] = sel(cmpi(P::slt, c, a), c, a);
      return true;
    }
    case Op::MaxI: {
      Value a = I(in.a), c = I(in.b);
      iregs[in.dst] = sel(cmpi(P::slt, a, c), c, a);
      return true;
    }
    case Op::LtI:
      iregs[in.dst] = boolToI64(cmpi(P::slt, I(in.a), I(in.b)));
      return true;
    case Op::LeI:
      iregs[in.dst] = boolToI64(cmpi(P::sle, I(in.a), I(in.b)));
      return true;
    case Op::GtI:
      iregs[in.dst] = boolToI64(cmpi(P::sgt, I(in.a), I(in.b)));
      return true;
    case Op::GeI:
      iregs[in.dst] = boolToI64(cmpi(P::sge, I(in.a), I(in.b)));
      return true;
    case Op::EqI:
      iregs[in.dst] = boolToI64(cmpi(P::eq, I(in.a), I(in.b)));
      return true;
    case Op::NeI:
      iregs[in.dst] = boolToI64(cmpi(P::ne, I(in.a), I(in.b)));
      return true;
    case Op::AndI:
      iregs[in.dst] = boolToI64(b.create<arith::AndIOp>(
          loc, cmpi(P::ne, I(in.a), ci(0)), cmpi(P::ne, I(in.b), ci(0))));
      return true;
    case Op::OrI:
      iregs[in.dst] = boolToI64(b.create<arith::OrIOp>(
          loc, cmpi(P::ne, I(in.a), ci(0)), cmpi(P::ne, I(in.b), ci(0))));
      return true;
    case Op::AddF:
      fregs[in.dst] =
          firstNaN(F(in.a), b.create<arith::AddFOp>(loc, F(in.a), F(in.b)));
      return true;
    case Op::SubF:
      fregs[in.dst] =
          firstNaN(F(in.a), b.create<arith::SubFOp>(loc, F(in.a), F(in.b)));
      return true;
    case Op::MulF:
      fregs[in.dst] =
          firstNaN(F(in.a), b.create<arith::MulFOp>(loc, F(in.a), F(in.b)));
      return true;
    case Op::DivF:
      fregs[in.dst] =
          firstNaN(F(in.a), b.create<arith::DivFOp>(loc, F(in.a), F(in.b)));
      return true;
    case Op::FloorDivF:
      if (in.type != ElemType::F64 && in.type != ElemType::F32)
        break;
      fregs[in.dst] = firstNaN(F(in.a), preciseCall("sluice_floordiv_f64",
                                                    "sluice_floordiv_f32",
                                                    in.type, F(in.a), F(in.b)));
      return true;
    case Op::ModF:
      if (in.type != ElemType::F64 && in.type != ElemType::F32)
        break;
      fregs[in.dst] =
          firstNaN(F(in.a), preciseCall("sluice_mod_f64", "sluice_mod_f32",
                                        in.type, F(in.a), F(in.b)));
      return true;
    case Op::PowF:
      fregs[in.dst] =
          firstNaN(F(in.a), callLibm(b, loc, "sluice_pow", {F(in.a), F(in.b)}));
      return true;
    case Op::MinF:
      fregs[in.dst] = nanMinMax(F(in.a), F(in.b), /*isMax=*/false,
                                /*firstOnTie=*/in.type == ElemType::F16);
      return true;
    case Op::MaxF:
      fregs[in.dst] = nanMinMax(F(in.a), F(in.b), /*isMax=*/true,
                                /*firstOnTie=*/in.type == ElemType::F16);
      return true;
    case Op::LtF:
      iregs[in.dst] = boolToI64(cmpf(FP::OLT, F(in.a), F(in.b)));
      return true;
    case Op::LeF:
      iregs[in.dst] = boolToI64(cmpf(FP::OLE, F(in.a), F(in.b)));
      return true;
    case Op::GtF:
      iregs[in.dst] = boolToI64(cmpf(FP::OGT, F(in.a), F(in.b)));
      return true;
    case Op::GeF:
      iregs[in.dst] = boolToI64(cmpf(FP::OGE, F(in.a), F(in.b)));
      return true;
    case Op::EqF:
      iregs[in.dst] = boolToI64(cmpf(FP::OEQ, F(in.a), F(in.b)));
      return true;
    case Op::NeF:
      iregs[in.dst] = boolToI64(cmpf(FP::UNE, F(in.a), F(in.b)));
      return true;
    case Op::SelectI:
      iregs[in.dst] = sel(cmpi(P::ne, I(in.a), ci(0)), I(in.b), I(in.c));
      return true;
    case Op::SelectF:
      fregs[in.dst] = sel(cmpi(P::ne, I(in.a), ci(0)), F(in.b), F(in.c));
      return true;
    }
    error = "expression instruction " + std::to_string(int(in.op)) +
            " has no lowering for " + std::string(elemTypeName(in.type));
    return false;
  }
};

} // namespace

/// Every instruction has a lowering.
static bool codeLowerable(const CompiledExpr &expr) {
  for (const CompiledExpr::Instr &in : expr.code()) {
    switch (in.op) {
    case Op::WrapI:
      if (!isInteger(in.type) || in.type == ElemType::Bool)
        return false;
      break;
    case Op::NarrowF:
      if (!isFloat(in.type))
        return false;
      break;
    case Op::FloorDivF: // the precision: f16 arithmetic computes these in f32
    case Op::ModF:
      if (in.type != ElemType::F32 && in.type != ElemType::F64)
        return false;
      break;
    default:
      break;
    }
  }
  return true;
}

bool exprLowerable(const CompiledExpr &expr) {
  return codeLowerable(expr) && supportedElem(expr.resultType()) &&
         supportedElem(expr.inputType());
}

bool lowerMapExpr(OpBuilder &b, Location loc, const runtime::PlanStep &step,
                  Scalar x, Scalar &result, std::string &error) {
  ExprError perr;
  ExprPtr e = parseExpr(step.params["expr"].asString(), perr);
  if (!e) {
    error = "expression of '" + step.name + "': " + perr.message;
    return false;
  }
  Expected<CompiledExpr> compiled = CompiledExpr::compileMap(*e, x.elem);
  if (!compiled) {
    error = compiled.status().message();
    return false;
  }
  Lowering l{b,
             loc,
             x,
             llvm::DenseMap<int32_t, Value>(),
             llvm::DenseMap<int32_t, Value>(),
             error};
  for (const CompiledExpr::Instr &in : compiled->code())
    if (!l.lower(in))
      return false;
  Value r = compiled->resultIsInt() ? l.I(compiled->resultRegister())
                                    : l.F(compiled->resultRegister());
  if (!r) {
    error = "expression of '" + step.name + "' has no result register";
    return false;
  }
  if (compiled->resultType() == ElemType::F16 && !compiled->resultIsInt())
    if (Value h = l.halfBits.lookup(r)) {
      result = {h, ElemType::F16};
      return true;
    }
  Scalar raw{r, compiled->resultIsInt() ? ElemType::I64 : ElemType::F64};
  result = convertScalar(b, loc, raw, compiled->resultType());
  return true;
}

bool filterLowerable(const CompiledExpr &expr) {
  // The result only decides (non-zero keeps), so a bool result is fine.
  if (!codeLowerable(expr))
    return false;
  for (const CompiledExpr::Slot &slot : expr.slots())
    if (slot.field < 0 || !supportedElem(slot.elem))
      return false;
  return true;
}

namespace {

/// The condition of `code` on the slot values `slots`, as an i1: kept when
/// the result is non-zero (NaN is), as CompiledExpr::test decides.
Value lowerCondition(OpBuilder &b, Location loc, const CompiledExpr &code,
                     std::vector<Scalar> slots, const std::string &stage,
                     std::string &error) {
  Lowering l{b,
             loc,
             Scalar{},
             llvm::DenseMap<int32_t, Value>(),
             llvm::DenseMap<int32_t, Value>(),
             error,
             std::move(slots)};
  for (const CompiledExpr::Instr &in : code.code())
    if (!l.lower(in))
      return nullptr;
  Value r = code.resultIsInt() ? l.I(code.resultRegister())
                               : l.F(code.resultRegister());
  if (!r) {
    error = "the condition of '" + stage + "' has no result register";
    return nullptr;
  }
  return code.resultIsInt()
             ? b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, r,
                                       l.ci(0))
                   .getResult()
             : b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, r,
                                       l.cf(0.0))
                   .getResult();
}

/// The "filter rows" kernel: the condition over a run of records held as
/// columns (runtime::RowsFilterFn),
///
///   void fn(const void *const *bases, const int64_t *strides,
///           const uint32_t *rows, int64_t n, uint8_t *keep)
///
/// where slot i's value of row r is element r * strides[i] of bases[i] (the
/// column's data, already offset by the slot's index); keep[j] = 1 if row
/// rows[j] (j itself when rows is null) is kept, else 0. The loop without a
/// selection is its own copy, so that LLVM can vectorize it.
bool buildFilterRowsKernel(OpBuilder &b, ModuleOp module, const KernelSpec &k,
                           std::string &error) {
  MLIRContext *ctx = b.getContext();
  const CompiledExpr &code = *k.filter;
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  Type i64 = b.getI64Type(), i32 = b.getI32Type(), i8 = b.getI8Type();
  b.setInsertionPointToEnd(module.getBody());
  auto fn = b.create<func::FuncOp>(
      loc, k.funcName, b.getFunctionType({ptr, ptr, ptr, i64, ptr}, {}));
  fn->setAttr("sluice.stage", b.getStringAttr(k.stage));
  fn->setAttr("sluice.signature", b.getStringAttr(k.signature()));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value basesPtr = entry->getArgument(0), stridesPtr = entry->getArgument(1),
        rows = entry->getArgument(2), n = entry->getArgument(3),
        keep = entry->getArgument(4);
  std::vector<Value> bases, strides;
  for (size_t i = 0; i < code.slots().size(); ++i) {
    Value at = b.create<LLVM::GEPOp>(loc, ptr, ptr, basesPtr,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    bases.push_back(b.create<LLVM::LoadOp>(loc, ptr, at));
    Value st = b.create<LLVM::GEPOp>(loc, ptr, i64, stridesPtr,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    strides.push_back(b.create<LLVM::LoadOp>(loc, i64, st));
  }
  Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(i64, 0));
  Value one = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(i64, 1));
  Value null = b.create<LLVM::ZeroOp>(loc, ptr);
  Value selected =
      b.create<LLVM::ICmpOp>(loc, LLVM::ICmpPredicate::ne, rows, null);
  bool ok = true;
  auto body = [&](bool useRows) {
    auto loop = b.create<scf::ForOp>(loc, zero, n, one);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = loop.getInductionVar();
    Value row = j;
    if (useRows) {
      Value at = b.create<LLVM::GEPOp>(loc, ptr, i32, rows, ValueRange{j});
      row = b.create<arith::ExtUIOp>(loc, i64,
                                     b.create<LLVM::LoadOp>(loc, i32, at));
    }
    std::vector<Scalar> slots;
    for (size_t i = 0; i < code.slots().size(); ++i) {
      const CompiledExpr::Slot &slot = code.slots()[i];
      Type t = storageType(ctx, slot.elem);
      Value idx = b.create<arith::MulIOp>(loc, row, strides[i]);
      Value p = b.create<LLVM::GEPOp>(loc, ptr, t, bases[i], ValueRange{idx});
      slots.push_back({b.create<LLVM::LoadOp>(loc, t, p), slot.elem});
    }
    Value kept = lowerCondition(b, loc, code, std::move(slots), k.stage, error);
    if (!kept) {
      ok = false;
      return;
    }
    Value dst = b.create<LLVM::GEPOp>(loc, ptr, i8, keep, ValueRange{j});
    b.create<LLVM::StoreOp>(loc, b.create<arith::ExtUIOp>(loc, i8, kept), dst);
  };
  auto branch = b.create<scf::IfOp>(loc, selected, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    body(true);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    body(false);
  }
  b.create<func::ReturnOp>(loc);
  return ok;
}

} // namespace

bool buildFilterKernel(OpBuilder &b, ModuleOp module, const KernelSpec &k,
                       std::string &error) {
  if (k.rows)
    return buildFilterRowsKernel(b, module, k, error);
  MLIRContext *ctx = b.getContext();
  const CompiledExpr &code = *k.filter;
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  Type i64 = b.getI64Type();
  b.setInsertionPointToEnd(module.getBody());
  auto fn = b.create<func::FuncOp>(loc, k.funcName,
                                   b.getFunctionType({ptr, ptr}, {}));
  fn->setAttr("sluice.stage", b.getStringAttr(k.stage));
  fn->setAttr("sluice.signature", b.getStringAttr(k.signature()));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value slotPtrs = entry->getArgument(0), out = entry->getArgument(1);
  std::vector<Scalar> slots;
  for (size_t i = 0; i < code.slots().size(); ++i) {
    const CompiledExpr::Slot &slot = code.slots()[i];
    Value at = b.create<LLVM::GEPOp>(loc, ptr, ptr, slotPtrs,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    Value p = b.create<LLVM::LoadOp>(loc, ptr, at);
    Type t = storageType(ctx, slot.elem);
    slots.push_back({b.create<LLVM::LoadOp>(loc, t, p), slot.elem});
  }
  // CompiledExpr::test: kept when the result is non-zero (NaN is).
  Value kept = lowerCondition(b, loc, code, std::move(slots), k.stage, error);
  if (!kept)
    return false;
  Value v = b.create<arith::ExtUIOp>(loc, i64, kept);
  b.create<LLVM::StoreOp>(loc, v, out);
  b.create<func::ReturnOp>(loc);
  return true;
}

} // namespace sluice::compiler::codegen
