//===- ValueKernels.cpp - Value-wise steps as loops of arith/math ---------===//
//
// Lowers the value-wise steps of a Plan (fill_missing, clamp, cast,
// hash_bucket, map) to one function per field chain:
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
#include <limits>

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

/// widen(): integers to int64 (sign- or zero-extended), floats unchanged.
Scalar widen(OpBuilder &b, Location loc, Scalar v) {
  if (!isIntElem(v.elem) || v.elem == ElemType::I64)
    return v;
  Type i64 = b.getI64Type();
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
  if (v.elem != ElemType::F32 && v.elem != ElemType::F64)
    return v; // the kernel returns non-float input unchanged
  double value = paramDouble(s, "value", 0);
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

/// Whether the generator covers `s` as a single step, and its field IO.
bool coveredStep(const runtime::PlanStage &s, std::string &field,
                 std::string &out, ElemType &in, ElemType &outElem) {
  static const char *const kOps[] = {"fill_missing", "clamp", "cast",
                                     "hash_bucket", "map"};
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
      (!isIntElem(in) || !s.params["buckets"].isNumber() ||
       s.params["buckets"].asInt() < 1))
    return false;
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
  return isIntElem(elem) || elem == ElemType::F32 || elem == ElemType::F64;
}

Type storageType(MLIRContext *ctx, ElemType elem) {
  Builder b(ctx);
  switch (elem) {
  case ElemType::F32:
    return b.getF32Type();
  case ElemType::F64:
    return b.getF64Type();
  case ElemType::F16:
    return b.getF16Type();
  default:
    return b.getIntegerType(bits(elem));
  }
}

Scalar convertScalar(OpBuilder &b, Location loc, Scalar v, ElemType to) {
  if (v.elem == to)
    return v;
  Scalar w = widen(b, loc, v);
  Type toType = storageType(b.getContext(), to);
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
  return "values " + field + " " + std::string(elemTypeName(inElem)) +
         " -> " + outField + " " + std::string(elemTypeName(outElem));
}

/// The kernels of a `fused_map` stage: one chain per field, its steps in
/// stage order (steps on different fields commute: none has its own `as`).
/// All or nothing: a stage with a step the generator does not cover is left
/// to the runtime whole.
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
    it->steps.push_back(&step);
    it->outElem = outElem;
  }
  for (KernelSpec &k : chains) {
    k.funcName = "sluice_k" + std::to_string(out.size());
    out.push_back(std::move(k));
  }
  return !chains.empty();
}

std::vector<KernelSpec> collectKernels(const runtime::Plan &plan) {
  std::vector<KernelSpec> out;
  for (const runtime::PlanStage &s : plan.stages) {
    if (s.op == "fused_map") {
      fusedKernels(s, out);
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
  Location unknown = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(unknown);
  Type ptr = LLVM::LLVMPointerType::get(&ctx);
  Type i64 = b.getI64Type();
  for (const KernelSpec &k : kernels) {
    Location loc = NameLoc::get(b.getStringAttr(k.stage));
    b.setInsertionPointToEnd(module->getBody());
    auto fn = b.create<func::FuncOp>(
        loc, k.funcName, b.getFunctionType({ptr, ptr, i64}, {}));
    fn->setAttr("sluice.stage", b.getStringAttr(k.stage));
    fn->setAttr("sluice.signature", b.getStringAttr(k.signature()));
    Block *entry = fn.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value in = entry->getArgument(0), outPtr = entry->getArgument(1),
          n = entry->getArgument(2);
    Value zero = constInt(b, loc, i64, 0), one = constInt(b, loc, i64, 1);
    auto loop = b.create<scf::ForOp>(loc, zero, n, one);
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Type inT = storageType(&ctx, k.inElem), outT = storageType(&ctx, k.outElem);
    Value src = b.create<LLVM::GEPOp>(loc, ptr, inT, in, ValueRange{i});
    Scalar v{b.create<LLVM::LoadOp>(loc, inT, src), k.inElem};
    for (const runtime::PlanStage *s : k.steps) {
      std::string field, outField;
      ElemType se, so;
      if (!coveredStep(*s, field, outField, se, so) || se != v.elem) {
        error = "step '" + s->name + "' does not fit the chain of '" +
                k.stage + "'";
        return nullptr;
      }
      Location stepLoc = NameLoc::get(b.getStringAttr(s->name));
      if (!lowerStep(b, stepLoc, *s, v, so, error))
        return nullptr;
    }
    if (v.elem != k.outElem) {
      error = "kernel of '" + k.stage + "' ends in the wrong type";
      return nullptr;
    }
    Value dst = b.create<LLVM::GEPOp>(loc, ptr, outT, outPtr, ValueRange{i});
    b.create<LLVM::StoreOp>(loc, v.value, dst);
    b.setInsertionPointToEnd(entry);
    b.create<func::ReturnOp>(loc);
  }
  return module;
}

} // namespace sluice::compiler::codegen
