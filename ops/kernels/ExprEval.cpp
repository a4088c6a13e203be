//===- ExprEval.cpp - Bytecode compiler and chunked interpreter -----------===//

#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/MathImpl.h"

#include "Dispatch.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace sluice {
namespace kernels {

namespace {
/// Elements per interpreter chunk: large enough to amortize the dispatch,
/// small enough that all registers of a typical expression stay in L1.
constexpr int64_t kChunk = 256;

using Op = CompiledExpr::Op;

const char *opName(Op op) {
  static const char *const kNames[] = {
      "const.i", "const.f", "load.i",  "load.f",    "cvt.if",   "neg.i",
      "neg.f",   "not.i",   "truth.f", "add.i",     "sub.i",    "mul.i",
      "mod.i",   "min.i",   "max.i",   "abs.i",     "add.f",    "sub.f",
      "mul.f",   "div.f",   "mod.f",   "min.f",     "max.f",    "abs.f",
      "pow.f",   "lt.i",    "le.i",    "gt.i",      "ge.i",     "eq.i",
      "ne.i",    "lt.f",    "le.f",    "gt.f",      "ge.f",     "eq.f",
      "ne.f",    "and.i",   "or.i",    "select.i",  "select.f", "floor.f",
      "ceil.f",  "round.f", "exp.f",   "log.f",     "log1p.f",  "sqrt.f",
      "sin.f",   "cos.f",   "tanh.f",  "sigmoid.f",
  };
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
inline double nanMin(double a, double b) {
  return (a != a || b != b) ? std::numeric_limits<double>::quiet_NaN()
                            : (b < a ? b : a);
}
inline double nanMax(double a, double b) {
  return (a != a || b != b) ? std::numeric_limits<double>::quiet_NaN()
                            : (a < b ? b : a);
}
} // namespace

/// Turns an AST into bytecode: one register per node, integer or float.
class ExprCompiler {
public:
  struct Reg {
    bool isInt = false;
    int32_t r = -1;
  };

  ExprCompiler(CompiledExpr &ce, const RecordType *record)
      : ce_(ce), record_(record) {}

  Status status() const { return err_; }

  /// Types `expr` with `lookup` and compiles it into `ce`, which holds what
  /// the caller set up (map or record inputs).
  static Expected<CompiledExpr>
  build(CompiledExpr ce, const Expr &expr, const RecordType *record,
        const std::function<bool(const std::string &, ElemType &)> &lookup) {
    ExprTypeError terr;
    if (!inferExprType(expr, lookup, ce.result_, terr))
      return Status::error("expression: " + terr.message + " (at character " +
                           std::to_string(terr.offset) + ")");
    ExprCompiler c(ce, record);
    Reg r = c.compile(expr);
    if (!c.status())
      return c.status();
    ce.resultReg_ = r.r;
    ce.resultIsInt_ = r.isInt;
    return ce;
  }

  Reg compile(const Expr &e) {
    if (!err_.isOk())
      return {};
    switch (e.kind) {
    case Expr::Kind::Number:
      if (e.isInt || e.name == "true" || e.name == "false") {
        Reg d = newI();
        CompiledExpr::Instr in{Op::ConstI, d.r};
        in.imm = static_cast<int64_t>(e.number);
        ce_.code_.push_back(in);
        return d;
      } else {
        Reg d = newF();
        CompiledExpr::Instr in{Op::ConstF, d.r};
        in.fimm = e.number;
        ce_.code_.push_back(in);
        return d;
      }
    case Expr::Kind::Var:
      return load(e, e.name, 0, false);
    case Expr::Kind::Index:
      return load(e, e.args[0]->name, e.index, true);
    case Expr::Kind::Unary: {
      Reg a = compile(*e.args[0]);
      if (e.name == "not")
        return emit(Op::NotI, newI(), truth(a));
      if (a.isInt)
        return emit(Op::NegI, newI(), a.r);
      return emit(Op::NegF, newF(), a.r);
    }
    case Expr::Kind::Binary:
      return binary(e);
    case Expr::Kind::Cond: {
      Reg c = compile(*e.args[0]);
      Reg a = compile(*e.args[1]);
      Reg b = compile(*e.args[2]);
      int32_t cr = truth(c);
      if (a.isInt && b.isInt)
        return emit(Op::SelectI, newI(), cr, a.r, b.r);
      return emit(Op::SelectF, newF(), cr, toF(a), toF(b));
    }
    case Expr::Kind::Call:
      return call(e);
    }
    fail(e, "unsupported expression node");
    return {};
  }

private:
  void fail(const Expr &at, const std::string &msg) {
    if (err_.isOk())
      err_ = Status::error("expression: " + msg + " (at character " +
                           std::to_string(at.offset) + ")");
  }

  Reg newI() { return {true, ce_.numI_++}; }
  Reg newF() { return {false, ce_.numF_++}; }

  Reg emit(Op op, Reg dst, int32_t a = 0, int32_t b = 0, int32_t c = 0) {
    CompiledExpr::Instr in{op, dst.r, a, b, c};
    ce_.code_.push_back(in);
    return dst;
  }

  int32_t toF(Reg r) {
    if (!r.isInt)
      return r.r;
    return emit(Op::CvtIF, newF(), r.r).r;
  }

  /// An integer 0/1-or-nonzero register for logic.
  int32_t truth(Reg r) {
    if (r.isInt)
      return r.r;
    return emit(Op::TruthF, newI(), r.r).r;
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

  Reg binary(const Expr &e) {
    const std::string &op = e.name;
    Reg a = compile(*e.args[0]);
    Reg b = compile(*e.args[1]);
    if (!err_.isOk())
      return {};
    if (op == "and")
      return emit(Op::AndI, newI(), truth(a), truth(b));
    if (op == "or")
      return emit(Op::OrI, newI(), truth(a), truth(b));
    bool ints = a.isInt && b.isInt;
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
        if (ints)
          return emit(r.i, newI(), a.r, b.r);
        return emit(r.f, newI(), toF(a), toF(b));
      }
    static const Row kArith[] = {{"+", Op::AddI, Op::AddF},
                                 {"-", Op::SubI, Op::SubF},
                                 {"*", Op::MulI, Op::MulF},
                                 {"%", Op::ModI, Op::ModF}};
    for (const Row &r : kArith)
      if (op == r.name) {
        if (ints)
          return emit(r.i, newI(), a.r, b.r);
        return emit(r.f, newF(), toF(a), toF(b));
      }
    if (op == "/")
      return emit(Op::DivF, newF(), toF(a), toF(b));
    fail(e, "unknown operator '" + op + "'");
    return {};
  }

  Reg call(const Expr &e) {
    std::vector<Reg> args;
    for (const ExprPtr &a : e.args)
      args.push_back(compile(*a));
    if (!err_.isOk())
      return {};
    const std::string &f = e.name;
    auto arity = [&](size_t n) {
      if (args.size() == n)
        return true;
      fail(e, "'" + f + "' takes " + std::to_string(n) + " arguments");
      return false;
    };
    bool ints = true;
    for (Reg r : args)
      ints &= r.isInt;
    if (f == "abs") {
      if (!arity(1))
        return {};
      return ints ? emit(Op::AbsI, newI(), args[0].r)
                  : emit(Op::AbsF, newF(), args[0].r);
    }
    if (f == "floor" || f == "ceil" || f == "round") {
      if (!arity(1))
        return {};
      if (ints)
        return args[0];
      Op op = f == "floor" ? Op::FloorF : f == "ceil" ? Op::CeilF : Op::RoundF;
      return emit(op, newF(), args[0].r);
    }
    if (f == "min" || f == "max") {
      if (!arity(2))
        return {};
      bool isMin = f == "min";
      if (ints)
        return emit(isMin ? Op::MinI : Op::MaxI, newI(), args[0].r, args[1].r);
      return emit(isMin ? Op::MinF : Op::MaxF, newF(), toF(args[0]),
                  toF(args[1]));
    }
    if (f == "clamp") {
      if (!arity(3))
        return {};
      if (ints) {
        Reg lo = emit(Op::MaxI, newI(), args[0].r, args[1].r);
        return emit(Op::MinI, newI(), lo.r, args[2].r);
      }
      Reg lo = emit(Op::MaxF, newF(), toF(args[0]), toF(args[1]));
      return emit(Op::MinF, newF(), lo.r, toF(args[2]));
    }
    if (f == "pow") {
      if (!arity(2))
        return {};
      return emit(Op::PowF, newF(), toF(args[0]), toF(args[1]));
    }
    static const std::pair<const char *, Op> kUnary[] = {
        {"exp", Op::ExpF},   {"log", Op::LogF},        {"log1p", Op::Log1pF},
        {"sqrt", Op::SqrtF}, {"sin", Op::SinF},        {"cos", Op::CosF},
        {"tanh", Op::TanhF}, {"sigmoid", Op::SigmoidF}};
    for (auto &[name, op] : kUnary)
      if (f == name) {
        if (!arity(1))
          return {};
        return emit(op, newF(), toF(args[0]));
      }
    fail(e, "unknown function '" + f + "'");
    return {};
  }

  CompiledExpr &ce_;
  const RecordType *record_;
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
    case Op::NegI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, wrapSub(0, x[j]))
      break;
    }
    case Op::NotI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, int64_t(x[j] == 0))
      break;
    }
    case Op::AbsI: {
      int64_t *d = ir(in.dst);
      const int64_t *x = ir(in.a);
      SLUICE_LOOP(d, x[j] < 0 ? wrapSub(0, x[j]) : x[j])
      break;
    }
    case Op::TruthF: {
      int64_t *d = ir(in.dst);
      const double *x = fr(in.a);
      SLUICE_LOOP(d, int64_t(x[j] != 0))
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
    case Op::RoundF:
      SLUICE_F_UN(std::round(x[j]))
    case Op::ExpF:
      SLUICE_F_UN(std::exp(x[j]))
    case Op::LogF:
      SLUICE_F_UN(math::log(x[j])) // MathImpl.h: the JIT's log too
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
    case Op::SigmoidF:
      SLUICE_F_UN(1.0 / (1.0 + std::exp(-x[j])))
    case Op::AddI:
      SLUICE_I_BIN(wrapAdd(x[j], y[j]))
    case Op::SubI:
      SLUICE_I_BIN(wrapSub(x[j], y[j]))
    case Op::MulI:
      SLUICE_I_BIN(wrapMul(x[j], y[j]))
    case Op::ModI:
      SLUICE_I_BIN((y[j] == 0 || y[j] == -1) ? 0 : x[j] % y[j])
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
      SLUICE_F_BIN(x[j] + y[j])
    case Op::SubF:
      SLUICE_F_BIN(x[j] - y[j])
    case Op::MulF:
      SLUICE_F_BIN(x[j] * y[j])
    case Op::DivF:
      SLUICE_F_BIN(x[j] / y[j])
    case Op::ModF:
      SLUICE_F_BIN(std::fmod(x[j], y[j]))
    case Op::MinF:
      SLUICE_F_BIN(nanMin(x[j], y[j]))
    case Op::MaxF:
      SLUICE_F_BIN(nanMax(x[j], y[j]))
    case Op::PowF:
      SLUICE_F_BIN(std::pow(x[j], y[j]))
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

std::string CompiledExpr::dump() const {
  std::ostringstream os;
  for (const Instr &in : code_) {
    bool dstInt = false;
    switch (in.op) {
    case Op::ConstI:
    case Op::LoadI:
    case Op::NegI:
    case Op::NotI:
    case Op::TruthF:
    case Op::AddI:
    case Op::SubI:
    case Op::MulI:
    case Op::ModI:
    case Op::MinI:
    case Op::MaxI:
    case Op::AbsI:
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
