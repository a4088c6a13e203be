//===- ExprEval.cpp - Bytecode compiler and chunked interpreter -----------===//

#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/MathImpl.h"
#include "sluice/ops/kernels/NumpyArith.h"

#include "Dispatch.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace sluice {
namespace kernels {

namespace {
using math::floorDivF;
using math::modF;
using math::powI;
/// Elements per interpreter chunk: large enough to amortize the dispatch,
/// small enough that all registers of a typical expression stay in L1.
constexpr int64_t kChunk = 256;

using Op = CompiledExpr::Op;

const char *opName(Op op) {
  static const char *const kNames[] = {
      "const.i",    "const.f",  "load.i",   "load.f",  "cvt.if", "wrap.i",
      "narrow.f",   "neg.i",    "abs.i",    "add.i",   "sub.i",  "mul.i",
      "floordiv.i", "mod.i",    "pow.i",    "min.i",   "max.i",  "neg.f",
      "abs.f",      "add.f",    "sub.f",    "mul.f",   "div.f",  "floordiv.f",
      "mod.f",      "pow.f",    "min.f",    "max.f",   "lt.i",   "le.i",
      "gt.i",       "ge.i",     "eq.i",     "ne.i",    "lt.f",   "le.f",
      "gt.f",       "ge.f",     "eq.f",     "ne.f",    "not.i",  "and.i",
      "or.i",       "select.i", "select.f", "floor.f", "ceil.f", "rint.f",
      "exp.f",      "log.f",    "log1p.f",  "sqrt.f",  "sin.f",  "cos.f",
      "tanh.f",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) ==
                static_cast<size_t>(Op::TanhF) + 1);
  return kNames[static_cast<int>(op)];
}

inline int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) +
                              static_cast<uint64_t>(b));
}
inline int64_t wrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) -
                              static_cast<uint64_t>(b));
}
inline int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) *
                              static_cast<uint64_t>(b));
}
/// numpy's integer floor_divide: x // 0 == 0, MIN // -1 wraps to MIN.
inline int64_t floorDivI(int64_t a, int64_t b) {
  if (b == 0)
    return 0;
  if (b == -1)
    return wrapSub(0, a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}
/// numpy's integer remainder: the sign of the divisor, x % 0 == 0.
inline int64_t modI(int64_t a, int64_t b) {
  if (b == 0 || b == -1)
    return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0)))
    r += b;
  return r;
}
/// `v` with the quiet bit set (a NaN stays the same NaN, quieted; other
/// values are not passed here).
inline double quiet(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  b |= uint64_t(1) << 51;
  std::memcpy(&v, &b, 8);
  return v;
}
/// The result of a binary float operation `r = a op b`, made independent of
/// operand order when both are NaN: the first operand's NaN, quieted. x86
/// returns the first source operand's NaN, but compilers commute + and *
/// (and vectorized and scalar code may differ), so without this select the
/// payload of `NaN1 + NaN2` would depend on the loop path taken, and
/// fuse-map-batch on/off (batch vs record lengths) would differ in bytes.
inline double firstNaN(double a, double r) { return a != a ? quiet(a) : r; }

/// np.maximum / np.minimum: the first NaN is returned (quieted); ties
/// (-0, +0) give the second argument for f32/f64 (numpy's SIMD loops) and
/// the first for f16 (numpy's npy_half loop).
inline double maxF(double a, double b) {
  return a != a ? quiet(a) : b != b ? quiet(b) : (a > b ? a : b);
}
inline double minF(double a, double b) {
  return a != a ? quiet(a) : b != b ? quiet(b) : (a < b ? a : b);
}
inline double maxHalf(double a, double b) {
  return a != a ? quiet(a) : b != b ? quiet(b) : (a >= b ? a : b);
}
inline double minHalf(double a, double b) {
  return a != a ? quiet(a) : b != b ? quiet(b) : (a <= b ? a : b);
}
/// Rounds a double holding an f64 result to `t`'s precision.
inline double narrow(double v, ElemType t) {
  if (t == ElemType::F32)
    return static_cast<double>(static_cast<float>(v));
  return static_cast<double>(halfToFloat(doubleToHalf(v)));
}
} // namespace

/// Turns a typed AST into bytecode: one register per node, integer or float.
class ExprCompiler {
public:
  struct Reg {
    bool isInt = false;
    int32_t r = -1;
  };

  ExprCompiler(CompiledExpr &ce, const RecordType *record,
               const ExprTypes &types)
      : ce_(ce), record_(record), types_(types) {}

  Status status() const { return err_; }

  /// Types `expr` with `lookup` and compiles it into `ce`, which holds what
  /// the caller set up (map or record inputs).
  static Expected<CompiledExpr>
  build(CompiledExpr ce, const Expr &expr, const RecordType *record,
        const std::function<bool(const std::string &, ElemType &)> &lookup) {
    ExprTypeError terr;
    ExprTypes types;
    if (!annotateExprTypes(expr, lookup, types, terr))
      return Status::error("expression: " + terr.message + " (at character " +
                           std::to_string(terr.offset) + ")");
    ce.result_ = types.at(&expr).elem;
    ExprCompiler c(ce, record, types);
    Reg r = c.value(expr, ce.result_);
    if (!c.status())
      return c.status();
    ce.resultReg_ = r.r;
    ce.resultIsInt_ = r.isInt;
    return ce;
  }

  /// `e` converted to `to` (a numeric type, or Bool for conditions).
  Reg value(const Expr &e, ElemType to) {
    if (!err_.isOk())
      return {};
    const ExprNodeType &t = types_.at(&e);
    if (t.isConst)
      return constant(t, to);
    Reg r = compile(e, t.elem);
    if (!err_.isOk() || isFloat(t.elem) == isFloat(to) || !isFloat(to))
      return r; // int -> wider int and float -> wider float are no-ops
    return emit(Op::CvtIF, newF(), r.r);
  }

private:
  Reg constant(const ExprNodeType &t, ElemType to) {
    if (!isFloat(to)) {
      Reg d = newI();
      CompiledExpr::Instr in{Op::ConstI, d.r};
      in.imm = t.ival; // fits: checked by the type inference
      ce_.code_.push_back(in);
      return d;
    }
    double v = t.elem == ElemType::F64 ? t.fval : static_cast<double>(t.ival);
    if (to != ElemType::F64)
      v = narrow(v, to);
    Reg d = newF();
    CompiledExpr::Instr in{Op::ConstF, d.r};
    in.fimm = v;
    ce_.code_.push_back(in);
    return d;
  }

  Reg compile(const Expr &e, ElemType type) {
    switch (e.kind) {
    case Expr::Kind::Number: // always constant
      return constant(types_.at(&e), type);
    case Expr::Kind::Var:
      return load(e, e.name, 0, false);
    case Expr::Kind::Index:
      return load(e, e.args[0]->name, e.index, true);
    case Expr::Kind::Unary: {
      if (e.name == "not")
        return emit(Op::NotI, newI(), value(*e.args[0], ElemType::Bool).r);
      Reg a = value(*e.args[0], type);
      return isFloat(type) ? emit(Op::NegF, newF(), a.r)
                           : wrap(emit(Op::NegI, newI(), a.r), type);
    }
    case Expr::Kind::Binary:
      return binary(e, type);
    case Expr::Kind::Cond: {
      Reg c = value(*e.args[0], ElemType::Bool);
      Reg a = value(*e.args[1], type);
      Reg b = value(*e.args[2], type);
      if (!isFloat(type))
        return emit(Op::SelectI, newI(), c.r, a.r, b.r);
      return emit(Op::SelectF, newF(), c.r, a.r, b.r);
    }
    case Expr::Kind::Call:
      return call(e, type);
    }
    fail(e, "unsupported expression node");
    return {};
  }

  void fail(const Expr &at, const std::string &msg) {
    if (err_.isOk())
      err_ = Status::error("expression: " + msg + " (at character " +
                           std::to_string(at.offset) + ")");
  }

  Reg newI() { return {true, ce_.numI_++}; }
  Reg newF() { return {false, ce_.numF_++}; }

  Reg emit(Op op, Reg dst, int32_t a = 0, int32_t b = 0, int32_t c = 0,
           ElemType type = ElemType::F64) {
    CompiledExpr::Instr in{op, dst.r, a, b, c, type};
    ce_.code_.push_back(in);
    return dst;
  }

  /// Brings an arithmetic result to its type: wrap integers narrower than
  /// 64 bits, round floats narrower than f64.
  Reg wrap(Reg r, ElemType type) {
    if (isFloat(type)) {
      if (type == ElemType::F64)
        return r;
      return emit(Op::NarrowF, newF(), r.r, 0, 0, type);
    }
    if (type == ElemType::I64 || type == ElemType::Bool)
      return r;
    return emit(Op::WrapI, newI(), r.r, 0, 0, type);
  }

  Reg load(const Expr &at, const std::string &name, int64_t index,
           bool indexed) {
    CompiledExpr::Slot slot;
    slot.name = name;
    slot.index = index;
    slot.indexed = indexed;
    if (!record_) {
      if (name != "x") {
        fail(at,
             "map expressions read only 'x' (the element), not '" + name + "'");
        return {};
      }
      if (indexed) {
        fail(at, "'x' is one element and cannot be indexed");
        return {};
      }
      slot.elem = ce_.inElem_;
    } else {
      int fi = record_->indexOf(name);
      if (fi < 0) {
        fail(at, "unknown field '" + name + "'");
        return {};
      }
      const FieldType &ft = record_->fields()[fi].type;
      if (!isNumeric(ft.elem)) {
        fail(at, "field '" + name + "' is " + ft.str() +
                     "; expressions compute on numbers and bools");
        return {};
      }
      std::optional<int64_t> n = ft.numElements();
      if (!indexed && (!n || *n != 1)) {
        fail(at, "field '" + name + "' is " + ft.str() +
                     ", not a scalar; index it, e.g. '" + name + "[0]'");
        return {};
      }
      if (indexed && n && index >= *n) {
        fail(at, "index " + std::to_string(index) + " is out of range for '" +
                     name + "' of type " + ft.str());
        return {};
      }
      slot.field = fi;
      slot.elem = ft.elem;
    }
    int32_t si = -1;
    for (size_t i = 0; i < ce_.slots_.size(); ++i)
      if (ce_.slots_[i].field == slot.field &&
          ce_.slots_[i].index == slot.index)
        si = int32_t(i);
    if (si < 0) {
      si = int32_t(ce_.slots_.size());
      ce_.slots_.push_back(slot);
    }
    if (isInteger(slot.elem))
      return emit(Op::LoadI, newI(), si);
    return emit(Op::LoadF, newF(), si);
  }

  /// The type both operands of a comparison are converted to: integers
  /// compare exactly in int64 (so `u8 < 300` needs no conversion).
  ElemType comparisonType(const Expr &e) {
    const ExprNodeType &a = types_.at(e.args[0].get());
    const ExprNodeType &b = types_.at(e.args[1].get());
    if (a.elem == ElemType::Bool)
      return ElemType::Bool;
    if (a.weak && b.weak)
      return ElemType::F64; // folded by the type inference; not reached
    if (a.weak || b.weak) {
      const ExprNodeType &strong = a.weak ? b : a, &weak = a.weak ? a : b;
      if (isFloat(strong.elem))
        return strong.elem;
      return weak.elem == ElemType::F64 ? ElemType::F64 : ElemType::I64;
    }
    ElemType p = promoteElemTypes(a.elem, b.elem);
    return isFloat(p) ? p : ElemType::I64;
  }

  Reg binary(const Expr &e, ElemType type) {
    const std::string &op = e.name;
    if (op == "and" || op == "or") {
      Reg a = value(*e.args[0], ElemType::Bool);
      Reg b = value(*e.args[1], ElemType::Bool);
      return emit(op == "and" ? Op::AndI : Op::OrI, newI(), a.r, b.r);
    }
    struct Row {
      const char *name;
      Op i, f;
    };
    static const Row kCmp[] = {
        {"<", Op::LtI, Op::LtF},  {"<=", Op::LeI, Op::LeF},
        {">", Op::GtI, Op::GtF},  {">=", Op::GeI, Op::GeF},
        {"==", Op::EqI, Op::EqF}, {"!=", Op::NeI, Op::NeF}};
    for (const Row &r : kCmp)
      if (op == r.name) {
        ElemType ct = comparisonType(e);
        Reg a = value(*e.args[0], ct);
        Reg b = value(*e.args[1], ct);
        return emit(isFloat(ct) ? r.f : r.i, newI(), a.r, b.r);
      }
    Reg a = value(*e.args[0], type);
    Reg b = value(*e.args[1], type);
    if (!err_.isOk())
      return {};
    bool f = isFloat(type);
    ElemType prec = type == ElemType::F64 ? ElemType::F64 : ElemType::F32;
    if (op == "+")
      return f ? wrap(emit(Op::AddF, newF(), a.r, b.r), type)
               : wrap(emit(Op::AddI, newI(), a.r, b.r), type);
    if (op == "-")
      return f ? wrap(emit(Op::SubF, newF(), a.r, b.r), type)
               : wrap(emit(Op::SubI, newI(), a.r, b.r), type);
    if (op == "*")
      return f ? wrap(emit(Op::MulF, newF(), a.r, b.r), type)
               : wrap(emit(Op::MulI, newI(), a.r, b.r), type);
    if (op == "/") // integers were converted to f64 by value()
      return wrap(emit(Op::DivF, newF(), a.r, b.r), type);
    if (op == "//")
      return f ? wrap(emit(Op::FloorDivF, newF(), a.r, b.r, 0, prec), type)
               : wrap(emit(Op::FloorDivI, newI(), a.r, b.r), type);
    if (op == "%")
      return f ? wrap(emit(Op::ModF, newF(), a.r, b.r, 0, prec), type)
               : emit(Op::ModI, newI(), a.r, b.r);
    fail(e, "unknown operator '" + op + "'");
    return {};
  }

  Reg call(const Expr &e, ElemType type) {
    const std::string &f = e.name;
    bool fl = isFloat(type);
    if (f == "abs" || f == "floor" || f == "ceil" || f == "round") {
      Reg a = value(*e.args[0], type);
      if (!fl)
        return f == "abs" ? wrap(emit(Op::AbsI, newI(), a.r), type) : a;
      Op op = f == "abs"     ? Op::AbsF
              : f == "floor" ? Op::FloorF
              : f == "ceil"  ? Op::CeilF
                             : Op::RintF;
      return emit(op, newF(), a.r); // exact in every float type
    }
    if (f == "min" || f == "max" || f == "pow") {
      Reg a = value(*e.args[0], type);
      Reg b = value(*e.args[1], type);
      if (f == "pow")
        return fl ? wrap(emit(Op::PowF, newF(), a.r, b.r), type)
                  : wrap(emit(Op::PowI, newI(), a.r, b.r), type);
      bool isMin = f == "min";
      if (fl)
        return emit(isMin ? Op::MinF : Op::MaxF, newF(), a.r, b.r, 0, type);
      return emit(isMin ? Op::MinI : Op::MaxI, newI(), a.r, b.r);
    }
    if (f == "clamp") {
      Reg a = value(*e.args[0], type);
      Reg lo = value(*e.args[1], type);
      Reg hi = value(*e.args[2], type);
      if (fl) {
        Reg m = emit(Op::MaxF, newF(), a.r, lo.r, 0, type);
        return emit(Op::MinF, newF(), m.r, hi.r, 0, type);
      }
      Reg m = emit(Op::MaxI, newI(), a.r, lo.r);
      return emit(Op::MinI, newI(), m.r, hi.r);
    }
    Reg a = value(*e.args[0], type);
    if (f == "sigmoid") {
      // 1 / (1 + exp(-x)), every step in `type`.
      Reg n = emit(Op::NegF, newF(), a.r);
      Reg ex = wrap(emit(Op::ExpF, newF(), n.r), type);
      Reg one = newF();
      CompiledExpr::Instr c{Op::ConstF, one.r};
      c.fimm = 1.0;
      ce_.code_.push_back(c);
      Reg den = wrap(emit(Op::AddF, newF(), one.r, ex.r), type);
      return wrap(emit(Op::DivF, newF(), one.r, den.r), type);
    }
    static const std::pair<const char *, Op> kUnary[] = {
        {"exp", Op::ExpF},   {"log", Op::LogF}, {"log1p", Op::Log1pF},
        {"sqrt", Op::SqrtF}, {"sin", Op::SinF}, {"cos", Op::CosF},
        {"tanh", Op::TanhF}};
    for (auto &[name, op] : kUnary)
      if (f == name)
        return wrap(emit(op, newF(), a.r), type);
    fail(e, "unknown function '" + f + "'");
    return {};
  }

  CompiledExpr &ce_;
  const RecordType *record_;
  const ExprTypes &types_;
  Status err_;
};

Expected<CompiledExpr> CompiledExpr::compileMap(const Expr &expr,
                                                ElemType inElem) {
  if (!isNumeric(inElem))
    return Status::error("map: expects a numeric field, got " +
                         std::string(elemTypeName(inElem)));
  CompiledExpr ce;
  ce.isMap_ = true;
  ce.inElem_ = inElem;
  return ExprCompiler::build(std::move(ce), expr, nullptr,
                             [&](const std::string &name, ElemType &t) {
                               if (name != "x")
                                 return false;
                               t = inElem;
                               return true;
                             });
}

Expected<CompiledExpr> CompiledExpr::compileRecord(const Expr &expr,
                                                   const RecordType &type) {
  return ExprCompiler::build(CompiledExpr(), expr, &type,
                             [&](const std::string &name, ElemType &t) {
                               const Field *f = type.find(name);
                               if (!f)
                                 return false;
                               t = f->type.elem;
                               return true;
                             });
}

template <typename Load>
void CompiledExpr::run(int64_t len, const Load &load,
                       std::vector<int64_t> &iregs,
                       std::vector<double> &fregs) const {
  iregs.resize(size_t(std::max(numI_, 1)) * kChunk);
  fregs.resize(size_t(std::max(numF_, 1)) * kChunk);
  int64_t *I = iregs.data();
  double *F = fregs.data();
  auto ir = [&](int32_t r) { return I + size_t(r) * kChunk; };
  auto fr = [&](int32_t r) { return F + size_t(r) * kChunk; };

// Loops over the chunk for one instruction; each is a plain array loop.
#define SLUICE_LOOP(DST, EXPR)                                                 \
  for (int64_t j = 0; j < len; ++j)                                            \
    DST[j] = EXPR;
#define SLUICE_I_BIN(EXPR)                                                     \
  {                                                                            \
    int64_t *d = ir(in.dst);                                                   \
    const int64_t *x = ir(in.a), *y = ir(in.b);                                \
    SLUICE_LOOP(d, EXPR)                                                       \
    break;                                                                     \
  }
#define SLUICE_F_BIN(EXPR)                                                     \
  {                                                                            \
    double *d = fr(in.dst);                                                    \
    const double *x = fr(in.a), *y = fr(in.b);                                 \
    SLUICE_LOOP(d, EXPR)                                                       \
    break;                                                                     \
  }
#define SLUICE_F_CMP(EXPR)                                                     \
  {                                                                            \
    int64_t *d = ir(in.dst);                                                   \
    const double *x = fr(in.a), *y = fr(in.b);                                 \
    SLUICE_LOOP(d, EXPR)                                                       \
    break;                                                                     \
  }
#define SLUICE_F_UN(EXPR)                                                      \
  {                                                                            \
    double *d = fr(in.dst);                                                    \
    const double *x = fr(in.a);                                                \
    SLUICE_LOOP(d, EXPR)                                                       \
    break;                                                                     \
  }

  for (const Instr &in : code_) {
    switch (in.op) {
    case Op::ConstI: {
      int64_t *d = ir(in.dst);
      SLUICE_LOOP(d, in.imm)
      break;
    }
    case Op::ConstF: {
      double *d = fr(in.dst);
      SLUICE_LOOP(d, in.fimm)
      break;
    }
    case Op::LoadI:
      load(in.a, ir(in.dst), nullptr);
      break;
    case Op::LoadF:
      load(in.a, nullptr, fr(in.dst));
      break;
    case Op::CvtIF: {
      double *d = fr(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, static_cast<double>(x[j]))
      break;
    }
    case Op::WrapI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      switch (in.type) {
      case ElemType::U8:
        SLUICE_LOOP(d, int64_t(uint8_t(x[j])))
        break;
      case ElemType::I8:
        SLUICE_LOOP(d, int64_t(int8_t(x[j])))
        break;
      case ElemType::U16:
        SLUICE_LOOP(d, int64_t(uint16_t(x[j])))
        break;
      case ElemType::I16:
        SLUICE_LOOP(d, int64_t(int16_t(x[j])))
        break;
      case ElemType::I32:
        SLUICE_LOOP(d, int64_t(int32_t(x[j])))
        break;
      default:
        SLUICE_LOOP(d, x[j])
        break;
      }
      break;
    }
    case Op::NarrowF: {
      double *d = fr(in.dst);
      const double *x = fr(in.a);
      if (in.type == ElemType::F32) {
        SLUICE_LOOP(d, double(float(x[j])))
      } else {
        SLUICE_LOOP(d, narrow(x[j], in.type))
      }
      break;
    }
    case Op::NegI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, wrapSub(0, x[j]))
      break;
    }
    case Op::AbsI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, x[j] < 0 ? wrapSub(0, x[j]) : x[j])
      break;
    }
    case Op::NotI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, int64_t(x[j] == 0))
      break;
    }
    case Op::NegF:
      SLUICE_F_UN(-x[j])
    case Op::AbsF:
      SLUICE_F_UN(std::fabs(x[j]))
    case Op::FloorF:
      SLUICE_F_UN(std::floor(x[j]))
    case Op::CeilF:
      SLUICE_F_UN(std::ceil(x[j]))
    case Op::RintF:
      SLUICE_F_UN(std::nearbyint(x[j]))
    case Op::ExpF:
      SLUICE_F_UN(std::exp(x[j]))
    case Op::LogF: {
      // MathImpl.h: the JIT's log too; vectorized over the chunk.
      math::logArray(fr(in.a), fr(in.dst), len);
      break;
    }
    case Op::Log1pF:
      SLUICE_F_UN(std::log1p(x[j]))
    case Op::SqrtF:
      SLUICE_F_UN(std::sqrt(x[j]))
    case Op::SinF:
      SLUICE_F_UN(std::sin(x[j]))
    case Op::CosF:
      SLUICE_F_UN(std::cos(x[j]))
    case Op::TanhF:
      SLUICE_F_UN(std::tanh(x[j]))
    case Op::AddI:
      SLUICE_I_BIN(wrapAdd(x[j], y[j]))
    case Op::SubI:
      SLUICE_I_BIN(wrapSub(x[j], y[j]))
    case Op::MulI:
      SLUICE_I_BIN(wrapMul(x[j], y[j]))
    case Op::FloorDivI:
      SLUICE_I_BIN(floorDivI(x[j], y[j]))
    case Op::ModI:
      SLUICE_I_BIN(modI(x[j], y[j]))
    case Op::PowI:
      SLUICE_I_BIN(powI(x[j], y[j]))
    case Op::MinI:
      SLUICE_I_BIN(y[j] < x[j] ? y[j] : x[j])
    case Op::MaxI:
      SLUICE_I_BIN(x[j] < y[j] ? y[j] : x[j])
    case Op::LtI:
      SLUICE_I_BIN(int64_t(x[j] < y[j]))
    case Op::LeI:
      SLUICE_I_BIN(int64_t(x[j] <= y[j]))
    case Op::GtI:
      SLUICE_I_BIN(int64_t(x[j] > y[j]))
    case Op::GeI:
      SLUICE_I_BIN(int64_t(x[j] >= y[j]))
    case Op::EqI:
      SLUICE_I_BIN(int64_t(x[j] == y[j]))
    case Op::NeI:
      SLUICE_I_BIN(int64_t(x[j] != y[j]))
    case Op::AndI:
      SLUICE_I_BIN(int64_t((x[j] != 0) & (y[j] != 0)))
    case Op::OrI:
      SLUICE_I_BIN(int64_t((x[j] != 0) | (y[j] != 0)))
    case Op::AddF:
      SLUICE_F_BIN(firstNaN(x[j], x[j] + y[j]))
    case Op::SubF:
      SLUICE_F_BIN(firstNaN(x[j], x[j] - y[j]))
    case Op::MulF:
      SLUICE_F_BIN(firstNaN(x[j], x[j] * y[j]))
    case Op::DivF:
      SLUICE_F_BIN(firstNaN(x[j], x[j] / y[j]))
    case Op::FloorDivF:
      if (in.type == ElemType::F64) {
        SLUICE_F_BIN(firstNaN(x[j], floorDivF<double>(x[j], y[j])))
      } else {
        SLUICE_F_BIN(
            firstNaN(x[j], double(floorDivF<float>(float(x[j]), float(y[j])))))
      }
    case Op::ModF:
      if (in.type == ElemType::F64) {
        SLUICE_F_BIN(firstNaN(x[j], modF<double>(x[j], y[j])))
      } else {
        SLUICE_F_BIN(
            firstNaN(x[j], double(modF<float>(float(x[j]), float(y[j])))))
      }
    case Op::MinF:
      if (in.type == ElemType::F16) {
        SLUICE_F_BIN(minHalf(x[j], y[j]))
      } else {
        SLUICE_F_BIN(minF(x[j], y[j]))
      }
    case Op::MaxF:
      if (in.type == ElemType::F16) {
        SLUICE_F_BIN(maxHalf(x[j], y[j]))
      } else {
        SLUICE_F_BIN(maxF(x[j], y[j]))
      }
    case Op::PowF:
      SLUICE_F_BIN(firstNaN(x[j], std::pow(x[j], y[j])))
    case Op::LtF:
      SLUICE_F_CMP(int64_t(x[j] < y[j]))
    case Op::LeF:
      SLUICE_F_CMP(int64_t(x[j] <= y[j]))
    case Op::GtF:
      SLUICE_F_CMP(int64_t(x[j] > y[j]))
    case Op::GeF:
      SLUICE_F_CMP(int64_t(x[j] >= y[j]))
    case Op::EqF:
      SLUICE_F_CMP(int64_t(x[j] == y[j]))
    case Op::NeF:
      SLUICE_F_CMP(int64_t(x[j] != y[j]))
    case Op::SelectI: {
      int64_t *d = ir(in.dst);
      const int64_t *c = ir(in.a), *x = ir(in.b), *y = ir(in.c);
      SLUICE_LOOP(d, c[j] != 0 ? x[j] : y[j])
      break;
    }
    case Op::SelectF: {
      double *d = fr(in.dst);
      const int64_t *c = ir(in.a);
      const double *x = fr(in.b), *y = fr(in.c);
      SLUICE_LOOP(d, c[j] != 0 ? x[j] : y[j])
      break;
    }
    }
  }
#undef SLUICE_LOOP
#undef SLUICE_I_BIN
#undef SLUICE_F_BIN
#undef SLUICE_F_CMP
#undef SLUICE_F_UN
}

namespace {
struct Scratch {
  std::vector<int64_t> iregs;
  std::vector<double> fregs;
};
Scratch &evalScratch() {
  thread_local Scratch s;
  return s;
}
} // namespace

Expected<Tensor> CompiledExpr::map(const Tensor &input) const {
  if (!isMap_)
    return Status::error("map: expression was compiled for records");
  if (!input.valid() || input.elem() != inElem_)
    return Status::error(
        "map: expression was compiled for " +
        std::string(elemTypeName(inElem_)) + " elements, got " +
        (input.valid() ? input.type().str() : std::string("nothing")));
  Tensor out = Tensor::empty(result_, input.shape());
  int64_t n = input.numElements();
  Scratch &s = evalScratch();
  for (int64_t base = 0; base < n; base += kChunk) {
    int64_t len = std::min(kChunk, n - base);
    auto load = [&](int32_t, int64_t *idst, double *fdst) {
      detail::visitNumeric(inElem_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T *src = reinterpret_cast<const T *>(input.raw()) + base;
        if (idst) {
          if constexpr (!detail::isFloatStorage<T>())
            for (int64_t j = 0; j < len; ++j)
              idst[j] = detail::widen(src[j]);
        } else {
          for (int64_t j = 0; j < len; ++j)
            fdst[j] = static_cast<double>(detail::widen(src[j]));
        }
      });
    };
    run(len, load, s.iregs, s.fregs);
    detail::visitNumeric(result_, [&](auto tag) {
      using To = typename decltype(tag)::type;
      To *dst = reinterpret_cast<To *>(out.mutableRaw()) + base;
      if (resultIsInt_) {
        const int64_t *r = s.iregs.data() + size_t(resultReg_) * kChunk;
        for (int64_t j = 0; j < len; ++j)
          dst[j] = detail::convertOne<int64_t, To>(r[j]);
      } else {
        const double *r = s.fregs.data() + size_t(resultReg_) * kChunk;
        for (int64_t j = 0; j < len; ++j)
          dst[j] = detail::convertOne<double, To>(r[j]);
      }
    });
  }
  return out;
}

Expected<double> CompiledExpr::evalScalar(const Record &record, bool &isInt,
                                          int64_t &ival) const {
  if (isMap_)
    return Status::error("filter: expression was compiled for map");
  for (const Slot &slot : slots_) {
    if (slot.field >= int32_t(record.fields.size()))
      return Status::error("filter: record has " +
                           std::to_string(record.fields.size()) +
                           " fields, expected field '" + slot.name + "'");
    const Tensor &t = record.fields[slot.field];
    if (!t.valid() || !t.isNumeric() || t.elem() != slot.elem)
      return Status::error("filter: field '" + slot.name +
                           "' does not have the compiled type " +
                           std::string(elemTypeName(slot.elem)));
    if (slot.index >= t.numElements())
      return Status::error("filter: index " + std::to_string(slot.index) +
                           " is out of range for '" + slot.name + "' of type " +
                           t.type().str() + " in record " +
                           std::to_string(record.index));
  }
  Scratch &s = evalScratch();
  auto load = [&](int32_t si, int64_t *idst, double *fdst) {
    const Slot &slot = slots_[si];
    const Tensor &t = record.fields[slot.field];
    if (idst)
      idst[0] = loadAsInt(slot.elem, t.raw(), size_t(slot.index));
    else
      fdst[0] = loadAsDouble(slot.elem, t.raw(), size_t(slot.index));
  };
  run(1, load, s.iregs, s.fregs);
  isInt = resultIsInt_;
  if (resultIsInt_) {
    ival = s.iregs[size_t(resultReg_) * kChunk];
    return static_cast<double>(ival);
  }
  ival = 0;
  return s.fregs[size_t(resultReg_) * kChunk];
}

Expected<bool> CompiledExpr::test(const Record &record) const {
  bool isInt;
  int64_t ival;
  Expected<double> v = evalScalar(record, isInt, ival);
  if (!v)
    return v.status();
  return isInt ? ival != 0 : *v != 0;
}

Expected<double> CompiledExpr::evalRecord(const Record &record) const {
  bool isInt;
  int64_t ival;
  return evalScalar(record, isInt, ival);
}

Status CompiledExpr::testRows(const std::vector<Tensor> &columns,
                              const uint32_t *rows, int64_t n,
                              uint8_t *keep) const {
  if (isMap_)
    return Status::error("filter: expression was compiled for map");
  // The same checks as evalScalar() makes per record, once per run.
  std::vector<int64_t> rowElems(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    if (slot.field >= int32_t(columns.size()))
      return Status::error("filter: record has " +
                           std::to_string(columns.size()) +
                           " fields, expected field '" + slot.name + "'");
    const Tensor &t = columns[size_t(slot.field)];
    if (!t.valid() || !t.isNumeric() || t.elem() != slot.elem || t.rank() == 0)
      return Status::error("filter: field '" + slot.name +
                           "' does not have the compiled type " +
                           std::string(elemTypeName(slot.elem)));
    rowElems[i] = t.dim(0) > 0 ? t.numElements() / t.dim(0) : 0;
    if (n > 0 && slot.index >= rowElems[i])
      return Status::error("filter: index " + std::to_string(slot.index) +
                           " is out of range for '" + slot.name + "'");
  }
  Scratch &s = evalScratch();
  for (int64_t base = 0; base < n; base += kChunk) {
    int64_t len = std::min(kChunk, n - base);
    auto load = [&](int32_t si, int64_t *idst, double *fdst) {
      const Slot &slot = slots_[size_t(si)];
      const uint8_t *raw = columns[size_t(slot.field)].raw();
      const int64_t stride = rowElems[size_t(si)];
      for (int64_t j = 0; j < len; ++j) {
        int64_t row = rows ? int64_t(rows[base + j]) : base + j;
        size_t at = size_t(row * stride + slot.index);
        if (idst)
          idst[j] = loadAsInt(slot.elem, raw, at);
        else
          fdst[j] = loadAsDouble(slot.elem, raw, at);
      }
    };
    run(len, load, s.iregs, s.fregs);
    if (resultIsInt_) {
      const int64_t *r = s.iregs.data() + size_t(resultReg_) * kChunk;
      for (int64_t j = 0; j < len; ++j)
        keep[base + j] = r[j] != 0;
    } else {
      const double *r = s.fregs.data() + size_t(resultReg_) * kChunk;
      for (int64_t j = 0; j < len; ++j)
        keep[base + j] = r[j] != 0;
    }
  }
  return Status::ok();
}

std::string CompiledExpr::dump() const {
  std::ostringstream os;
  for (const Instr &in : code_) {
    bool dstInt = false;
    switch (in.op) {
    case Op::ConstI:
    case Op::LoadI:
    case Op::WrapI:
    case Op::NegI:
    case Op::AbsI:
    case Op::AddI:
    case Op::SubI:
    case Op::MulI:
    case Op::FloorDivI:
    case Op::ModI:
    case Op::PowI:
    case Op::MinI:
    case Op::MaxI:
    case Op::LtI:
    case Op::LeI:
    case Op::GtI:
    case Op::GeI:
    case Op::EqI:
    case Op::NeI:
    case Op::LtF:
    case Op::LeF:
    case Op::GtF:
    case Op::GeF:
    case Op::EqF:
    case Op::NeF:
    case Op::NotI:
    case Op::AndI:
    case Op::OrI:
    case Op::SelectI:
      dstInt = true;
      break;
    default:
      break;
    }
    os << (dstInt ? "i" : "f") << in.dst << " = " << opName(in.op);
    if (in.op == Op::ConstI)
      os << " " << in.imm;
    else if (in.op == Op::ConstF)
      os << " " << in.fimm;
    else if (in.op == Op::WrapI || in.op == Op::NarrowF)
      os << " " << in.a << " to " << elemTypeName(in.type);
    else if (in.op == Op::LoadI || in.op == Op::LoadF)
      os << " " << slots_[in.a].name
         << (slots_[in.a].indexed
                 ? "[" + std::to_string(slots_[in.a].index) + "]"
                 : "");
    else
      os << " " << in.a << " " << in.b << " " << in.c;
    os << "\n";
  }
  os << "result " << (resultIsInt_ ? "i" : "f") << resultReg_ << " as "
     << elemTypeName(result_) << "\n";
  return os.str();
}

} // namespace kernels
} // namespace sluice
