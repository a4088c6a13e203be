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
// Element conversions (f16 as bits, saturating casts) are in
// Conversions.cpp; index-remap chains (crop, flip, transpose, pad with value
// steps) in RemapKernels.cpp.
//
//===----------------------------------------------------------------------===//
#include "ValueLowering.h"
#include "sluice/ops/Switches.h"

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
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

using namespace mlir;

namespace sluice::compiler::codegen {

using mlir::Value;

// --- steps --------------------------------------------------------------===//

namespace {

double paramDouble(const runtime::PlanStep &s, const char *name,
                   double fallback) {
  const sluice::Value &v = s.params[name];
  return v.isNumber() ? v.asDouble() : fallback;
}

Scalar lowerFillMissing(OpBuilder &b, Location loc, const runtime::PlanStep &s,
                        Scalar v) {
  double value = paramDouble(s, "value", 0);
  if (v.elem == ElemType::F16 || v.elem == ElemType::BF16) {
    // NaN bits: |h| above the infinity's (0x7C00 f16, 0x7F80 bf16)
    bool half = v.elem == ElemType::F16;
    Type i16 = b.getI16Type();
    Value abs =
        b.create<arith::AndIOp>(loc, v.value, constInt(b, loc, i16, 0x7FFF));
    Value nan =
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ugt, abs,
                                constInt(b, loc, i16, half ? 0x7C00 : 0x7F80));
    float f = static_cast<float>(value);
    Value c = constInt(
        b, loc, i16, half ? kernels::floatToHalf(f) : kernels::floatToBf16(f));
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

Scalar lowerClamp(OpBuilder &b, Location loc, const runtime::PlanStep &s,
                  Scalar v) {
  const sluice::Value &minV = s.params["min"], &maxV = s.params["max"];
  std::optional<double> lo, hi;
  if (minV.isNumber())
    lo = minV.asDouble();
  if (maxV.isNumber())
    hi = maxV.asDouble();
  Type t = v.value.getType();
  Value x = v.value;
  if (v.elem == ElemType::F16 || v.elem == ElemType::BF16) {
    // kernels::clamp: bounds as f32, compared with the element's f32; a NaN
    // keeps its bits, any other element converts back to its own bits.
    Type f32 = b.getF32Type();
    bool half = v.elem == ElemType::F16;
    auto bitsOf = [&](float f) {
      return half ? kernels::floatToHalf(f) : kernels::floatToBf16(f);
    };
    Value f = widen(b, loc, v).value;
    Value inner = x;
    if (hi) {
      float h = static_cast<float>(*hi);
      Value gt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, f,
                                         constFloat(b, loc, f32, h));
      inner =
          b.create<arith::SelectOp>(loc, gt, constInt(b, loc, t, bitsOf(h)), x);
    }
    if (lo) {
      float l = static_cast<float>(*lo);
      Value lt = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, f,
                                         constFloat(b, loc, f32, l));
      inner = b.create<arith::SelectOp>(loc, lt, constInt(b, loc, t, bitsOf(l)),
                                        inner);
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
    return {b.create<arith::SelectOp>(loc, nz,
                                      constInt(b, loc, t, clampBool(1)),
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

Scalar lowerHashBucket(OpBuilder &b, Location loc, const runtime::PlanStep &s,
                       Scalar v) {
  int64_t buckets =
      s.params["buckets"].isNumber() ? s.params["buckets"].asInt() : 1;
  Type i64 = b.getI64Type();
  Value x = widen(b, loc, v).value;
  // hashInt(v) = mix64(uint64(v) + golden), SplitMix64's finalizer.
  x = b.create<arith::AddIOp>(
      loc, x, constInt(b, loc, i64, int64_t(0x9E3779B97F4A7C15ull)));
  auto step = [&](int64_t shift, uint64_t mul) {
    Value sh = b.create<arith::ShRUIOp>(loc, x, constInt(b, loc, i64, shift));
    Value xr = b.create<arith::XOrIOp>(loc, x, sh);
    x = mul ? b.create<arith::MulIOp>(loc, xr,
                                      constInt(b, loc, i64, int64_t(mul)))
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
  Value r =
      b.create<arith::SubIOp>(loc, x, b.create<arith::MulIOp>(loc, q, bc));
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
bool bucketizeCovered(const runtime::PlanStep &s, std::vector<double> &b) {
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
Scalar lowerBucketize(OpBuilder &b, Location loc, const runtime::PlanStep &s,
                      Scalar v) {
  std::vector<double> bounds;
  bucketizeCovered(s, bounds);
  Type i32 = b.getI32Type();
  Value count = constInt(b, loc, i32, 0);
  auto add = [&](Value bit) {
    count = b.create<arith::AddIOp>(loc, count,
                                    b.create<arith::ExtUIOp>(loc, i32, bit));
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
      auto pred =
          fb < bd ? arith::CmpIPredicate::sgt : arith::CmpIPredicate::sge;
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

} // namespace

bool lowerStep(OpBuilder &b, Location loc, const runtime::PlanStep &s,
               Scalar &v, ElemType outElem, std::string &error) {
  ValueForm form = valueFormOf(s);
  if (form == ValueForm::FillNaN)
    v = lowerFillMissing(b, loc, s, v);
  else if (form == ValueForm::Clamp)
    v = lowerClamp(b, loc, s, v);
  else if (form == ValueForm::Convert)
    v = convertScalar(b, loc, v, outElem);
  else if (form == ValueForm::HashBucket)
    v = lowerHashBucket(b, loc, s, v);
  else if (form == ValueForm::Bucketize)
    v = lowerBucketize(b, loc, s, v);
  else if (form == ValueForm::Expression) {
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

namespace {

/// The element type of field `name` in `type`, if it is a numeric field.
std::optional<ElemType> fieldElem(const RecordType &type,
                                  const std::string &name) {
  int i = type.indexOf(name);
  if (i < 0)
    return std::nullopt;
  return type.fields()[size_t(i)].type.elem;
}

} // namespace

int64_t normalizeChannels(const runtime::PlanStep &s) {
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

bool coveredStep(const runtime::PlanStep &s, std::string &field,
                 std::string &out, ElemType &in, ElemType &outElem) {
  ValueForm form = valueFormOf(s);
  if (s.kind != OpKind::Element || form == ValueForm::None)
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
  if (form == ValueForm::Clamp && s.params["min"].isNumber() &&
      s.params["max"].isNumber() &&
      s.params["min"].asDouble() > s.params["max"].asDouble())
    return false; // the runtime reports the error per record
  if (form == ValueForm::HashBucket &&
      (!(isIntElem(in) || in == ElemType::Bool) ||
       !s.params["buckets"].isNumber() || s.params["buckets"].asInt() < 1))
    return false;
  if (form == ValueForm::ScaleShift &&
      (normalizeChannels(s) == 0 || !kernels::isNormalizeOutput(outElem)))
    return false;
  if (form == ValueForm::Bucketize) {
    std::vector<double> bounds;
    if (!bucketizeCovered(s, bounds) || outElem != ElemType::I32)
      return false;
  }
  if (form == ValueForm::Expression) {
    if (!s.params["expr"].isString())
      return false;
    ExprError perr;
    ExprPtr e = parseExpr(s.params["expr"].asString(), perr);
    if (!e)
      return false;
    Expected<kernels::CompiledExpr> c =
        kernels::CompiledExpr::compileMap(*e, in);
    if (!c || !exprLowerable(*c))
      return false;
  }
  return true;
}

std::string KernelSpec::signature() const {
  if (filter)
    return rows ? "condition rows" : "condition";
  if (chain)
    return "remap " + field + " " + std::string(elemTypeName(inElem)) + " -> " +
           outField + " " + std::string(elemTypeName(outElem));
  return "values " + field + " " + std::string(elemTypeName(inElem)) + " -> " +
         outField + " " + std::string(elemTypeName(outElem)) +
         (channels > 1 ? " channels " + std::to_string(channels) : "");
}

/// The kernels of a `fused_map` stage: one chain per field, its steps in
/// stage order (steps on different fields commute: none has its own `as`).
/// All or nothing: a stage with a step the generator does not cover is left
/// to the runtime whole. A chain with a per-channel normalize records the
/// channel count its records must have (KernelSpec::channels); two such
/// steps that disagree would fail every record, so the runtime keeps them.
static bool fusedKernels(const runtime::PlanStep &s,
                         std::vector<KernelSpec> &out) {
  std::vector<KernelSpec> chains;
  for (const runtime::PlanStep &step : s.fused) {
    std::string field, outField;
    ElemType in, outElem;
    if (!coveredStep(step, field, outField, in, outElem) || outField != field)
      return false;
    auto it =
        std::find_if(chains.begin(), chains.end(),
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
    if (valueFormOf(step) == ValueForm::ScaleShift) {
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

namespace {

/// normalize's per-channel constants for `s` (kernels::normalizeTables),
/// one pair per channel (n of them, 1 for a single pair).
void normalizeConstants(const runtime::PlanStep &s, std::vector<float> &m,
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
  if (v.elem == ElemType::F16 || v.elem == ElemType::BF16 ||
      v.elem == ElemType::Bool)
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

} // namespace

ElemType normalizeOutElem(const runtime::PlanStep &s) {
  const sluice::Value &d = s.params["dtype"];
  std::optional<ElemType> t =
      d.isString() ? parseElemType(d.asString()) : std::nullopt;
  return t && kernels::isNormalizeOutput(*t) ? *t : ElemType::F32;
}

namespace {

bool narrowRangesDisabled() { return switchedOff("SLUICE_NO_NARROW_RANGES"); }

} // namespace

NarrowCases normalizeNarrowCases(const runtime::PlanStep &s, ElemType in,
                                 int64_t channel) {
  NarrowCases all;
  // The input types of at most 65,536 values (bool: widen() reads any
  // non-zero byte as 1, so 0 and 1).
  switch (in) {
  case ElemType::Bool:
  case ElemType::U8:
  case ElemType::I8:
  case ElemType::U16:
  case ElemType::I16:
    break;
  default:
    return all;
  }
  auto [lo, hi] = integerRange(in);
  if (narrowRangesDisabled())
    return all;
  std::vector<float> m, sc;
  normalizeConstants(s, m, sc);
  int64_t n = static_cast<int64_t>(m.size());
  int64_t channels = channel >= 0 ? 1 : n;
  if (channel >= n || (hi - lo + 1) * channels > (int64_t(1) << 22))
    return all; // (a million values or more: not worth the compile time)
  bool half = normalizeOutElem(s) == ElemType::F16;
  NarrowCases seen{false, false, false, false, false};
  for (int64_t c = channel >= 0 ? channel : 0;
       c < (channel >= 0 ? channel + 1 : n); ++c)
    for (int64_t x = lo; x <= hi; ++x) {
      // What the kernel computes (normalizeInput, then lowerNormalize's
      // subtract and multiply in f32, no contraction).
      float v =
          kernels::normalizeValue(static_cast<float>(static_cast<double>(x)),
                                  m[size_t(c)], sc[size_t(c)]);
      uint32_t bitsV;
      std::memcpy(&bitsV, &v, 4);
      uint32_t abs = bitsV & 0x7FFFFFFFu;
      seen.nan |= abs > 0x7F800000u;
      seen.overflow |= abs >= 0x477FF000u && abs <= 0x7F800000u;
      seen.subnormal |= abs > 0 && abs < 0x38800000u;
      seen.zero |= abs == 0;
      if (half)
        seen.tie |= abs >= 0x38800000u && abs < 0x477FF000u &&
                    (abs & 0x1FFFu) == 0x1000u;
      else
        seen.tie |= abs <= 0x7F800000u && (abs & 0xFFFFu) == 0x8000u;
    }
  return seen;
}

Scalar normalizeResult(OpBuilder &b, Location loc, const runtime::PlanStep &s,
                       Value f32Value, ElemType in, int64_t channel) {
  ElemType out = normalizeOutElem(s);
  if (out == ElemType::F16 || out == ElemType::BF16) {
    NarrowCases cases = normalizeNarrowCases(s, in, channel);
    return {out == ElemType::F16 ? f32ToHalf(b, loc, f32Value, cases)
                                 : f32ToBf16(b, loc, f32Value, cases),
            out};
  }
  return convertScalar(b, loc, {f32Value, ElemType::F32}, out);
}

Scalar lowerNormalize(OpBuilder &b, Location loc, const runtime::PlanStep &s,
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
    Value d =
        b.create<arith::SubFOp>(loc, x, constFloat(b, loc, f32, m[known]));
    return normalizeResult(
        b, loc, s,
        b.create<arith::MulFOp>(loc, d, constFloat(b, loc, f32, sc[known])),
        v.elem, n == 1 ? -1 : known);
  }
  Value mTable = constTable(b, loc, m), scTable = constTable(b, loc, sc);
  return normalizeResult(
      b, loc, s, normalizeFromTables(b, loc, x, mTable, scTable, channel),
      v.elem, -1);
}

namespace {

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
                                     const runtime::PlanStep &s,
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

} // namespace

bool buildFlatNormalize(OpBuilder &b, const KernelSpec &k,
                        const std::vector<Value> &inDims, Value in,
                        Value outPtr) {
  const runtime::PlanStep &s = *k.chain->steps()[0].stage;
  Location loc = NameLoc::get(b.getStringAttr(k.stage));
  MLIRContext *ctx = b.getContext();
  Type ptr = LLVM::LLVMPointerType::get(ctx), i64 = b.getI64Type();
  int64_t period = normalizePeriod(normalizeChannels(s));
  // Named values rather than structured bindings: a lambda below captures
  // them (capturing bindings is C++20).
  std::pair<Value, Value> tables = periodTables(b, loc, s, period);
  Value mTable = tables.first, scTable = tables.second;
  Value total = constInt(b, loc, i64, 1);
  for (Value d : inDims)
    total = b.create<arith::MulIOp>(loc, total, d);
  Type inT = storageType(ctx, k.inElem), outT = storageType(ctx, k.outElem);
  return periodLoops(b, loc, total, period, [&](Value i, Value at) {
    Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{i});
    Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
    Scalar r =
        normalizeResult(b, loc, s,
                        normalizeFromTables(b, loc, normalizeInput(b, loc, v),
                                            mTable, scTable, at),
                        v.elem, -1);
    Value dst = b.create<LLVM::GEPOp>(loc, ptr, outT, outPtr, ValueRange{i});
    b.create<LLVM::StoreOp>(loc, r.value, dst);
    return true;
  });
}

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

namespace {

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
///   for (b = 0; b < n / P; ++b) for (j = 0; j < P; ++j) out[bP+j] =
///   f(in[bP+j], j) for (i = n / P * P; i < n; ++i) out[i] = f(in[i], i - n / P
///   * P)
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
    const runtime::PlanStep &s = *k.steps[st];
    if (valueFormOf(s) != ValueForm::ScaleShift || normalizeChannels(s) < 2)
      continue;
    if (normalizeChannels(s) != k.channels || period % k.channels != 0) {
      error = "step '" + s.name + "' does not fit the channels of '" + k.stage +
              "'";
      return false;
    }
    tables[st] =
        periodTables(b, NameLoc::get(b.getStringAttr(s.name)), s, period);
  }

  // out[i] = f(in[i]); `at`: i's position in the period.
  auto element = [&](Value i, Value at) {
    Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{i});
    Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
    for (size_t st = 0; st < k.steps.size(); ++st) {
      const runtime::PlanStep *s = k.steps[st];
      std::string field, outField;
      ElemType se, so;
      if (!coveredStep(*s, field, outField, se, so) || se != v.elem) {
        error = "step '" + s->name + "' does not fit the chain of '" + k.stage +
                "'";
        return false;
      }
      Location stepLoc = NameLoc::get(b.getStringAttr(s->name));
      if (valueFormOf(*s) == ValueForm::ScaleShift) {
        ElemType in = v.elem;
        v = tables[st].first
                ? normalizeResult(b, stepLoc, *s,
                                  normalizeFromTables(
                                      b, stepLoc, normalizeInput(b, stepLoc, v),
                                      tables[st].first, tables[st].second, at),
                                  in, -1)
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
  for (const runtime::PlanStep &s : plan.steps) {
    if (s.op == "fused_map") {
      // A chain that moves values (sluice-fuse-remaps) is one remap kernel;
      // a value-wise run (sluice-fuse-maps) one loop per field, flat over
      // the elements, also when a normalize makes it a chain of one field
      // that RemapChain would take too.
      bool moves = std::any_of(s.fused.begin(), s.fused.end(),
                               [](const runtime::PlanStep &st) {
                                 return runtime::isRemapOp(st.op);
                               });
      if (moves && !remapKernel(s, out))
        fusedKernels(s, out);
      else if (!moves && !fusedKernels(s, out))
        remapKernel(s, out);
      continue;
    }
    const OpDef *def = Registry::instance().find(s.op);
    if (const char *param = def ? def->traits.condition : nullptr) {
      if (!s.params[param].isString())
        continue;
      ExprError perr;
      ExprPtr e = parseExpr(s.params[param].asString(), perr);
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
    if (valueFormOf(s) == ValueForm::ScaleShift) { // a chain of one step
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
                  scf::SCFDialect, cf::ControlFlowDialect, LLVM::LLVMDialect>();
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
