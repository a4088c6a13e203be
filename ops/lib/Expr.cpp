//===- Expr.cpp - Parser and type inference of map/filter expressions ----===//
//
// A hand-written lexer and recursive-descent parser, so that every error can
// name the character it is about, and a small type inference with "weak"
// literal types: `x * 2` on a u8 field stays u8 rather than widening to the
// i64 of the literal.
//
// Boolean literals are Number nodes (1 or 0) whose `name` is "true" or
// "false": consumers that only look at `number` still compute the right value.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Expr.h"
#include "Internal.h"
#include "sluice/ops/Registry.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <unordered_set>

namespace sluice {

const std::vector<ExprFunction> &exprFunctions() {
  static const std::vector<ExprFunction> kFunctions = {
      {"abs", 1},     {"ceil", 1},  {"clamp", 3}, {"cos", 1},
      {"exp", 1},     {"floor", 1}, {"log", 1},   {"log1p", 1},
      {"max", 2},     {"min", 2},   {"pow", 2},   {"round", 1},
      {"sigmoid", 1}, {"sin", 1},   {"sqrt", 1},  {"tanh", 1},
  };
  return kFunctions;
}

namespace {

const ExprFunction *findFunction(std::string_view name) {
  for (const ExprFunction &f : exprFunctions())
    if (f.name == name)
      return &f;
  return nullptr;
}

bool isKeyword(std::string_view s) {
  return s == "and" || s == "or" || s == "not" || s == "true" || s == "false";
}

//===----------------------------------------------------------------------===//
// Lexer
//===----------------------------------------------------------------------===//

enum class Tok { End, Number, Ident, Punct, Error };

struct Token {
  Tok kind = Tok::End;
  std::string text; ///< canonical operator spelling for Punct
  size_t offset = 0;
  double number = 0;
  bool isInt = false;
};

class Lexer {
public:
  Lexer(std::string_view text, ExprError &err) : text_(text), err_(err) {}

  /// Tokenizes everything up front; false on the first bad character.
  bool run(std::vector<Token> &out) {
    while (true) {
      while (pos_ < text_.size() &&
             std::isspace(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
      if (pos_ >= text_.size()) {
        Token t;
        t.offset = text_.size();
        out.push_back(t);
        return true;
      }
      Token t;
      if (!next(t))
        return false;
      out.push_back(std::move(t));
    }
  }

private:
  bool fail(size_t offset, std::string message) {
    err_.offset = offset;
    err_.message = std::move(message);
    return false;
  }

  bool next(Token &t) {
    size_t start = pos_;
    t.offset = start;
    char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && pos_ + 1 < text_.size() &&
         std::isdigit(static_cast<unsigned char>(text_[pos_ + 1]))))
      return number(t);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
              text_[pos_] == '_'))
        ++pos_;
      t.kind = Tok::Ident;
      t.text = std::string(text_.substr(start, pos_ - start));
      return true;
    }
    auto two = [&](std::string_view s) { return text_.substr(pos_, 2) == s; };
    t.kind = Tok::Punct;
    static const char *const kTwo[] = {"<=", ">=", "==", "!=", "&&", "||"};
    for (const char *op : kTwo) {
      if (two(op)) {
        pos_ += 2;
        t.text = op;
        if (t.text == "&&")
          t.text = "and";
        else if (t.text == "||")
          t.text = "or";
        return true;
      }
    }
    if (two("**"))
      return fail(start, "'**' is not an operator; use pow(a, b)");
    switch (c) {
    case '+':
    case '-':
    case '*':
    case '/':
    case '%':
    case '<':
    case '>':
    case '(':
    case ')':
    case '[':
    case ']':
    case ',':
    case '?':
    case ':':
      ++pos_;
      t.text = std::string(1, c);
      return true;
    case '!':
      ++pos_;
      t.text = "not";
      return true;
    case '=':
      return fail(start, "'=' is not an operator; use '==' to compare");
    case '&':
      return fail(start, "'&' is not an operator; use 'and' (or '&&')");
    case '|':
      return fail(start, "'|' is not an operator; use 'or' (or '||')");
    case '"':
    case '\'':
      return fail(start, "strings are not supported in expressions; "
                         "expressions compute on numbers");
    default:
      break;
    }
    if (static_cast<unsigned char>(c) >= 0x20 &&
        static_cast<unsigned char>(c) < 0x7f)
      return fail(start, std::string("unexpected character '") + c + "'");
    return fail(start, "unexpected non-ASCII character");
  }

  bool number(Token &t) {
    size_t start = pos_;
    bool isInt = true;
    auto digits = [&] {
      size_t b = pos_;
      while (pos_ < text_.size() &&
             std::isdigit(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
      return pos_ - b;
    };
    digits();
    if (pos_ < text_.size() && text_[pos_] == '.') {
      isInt = false;
      ++pos_;
      digits();
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      isInt = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
      if (digits() == 0)
        return fail(start, "malformed number '" +
                               std::string(text_.substr(start, pos_ - start)) +
                               "': expected digits after the exponent");
    }
    // "3x" or "1.2.3": a number glued to more name or number characters.
    if (pos_ < text_.size() &&
        (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
         text_[pos_] == '_' || text_[pos_] == '.')) {
      size_t end = pos_;
      while (end < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[end])) ||
              text_[end] == '_' || text_[end] == '.'))
        ++end;
      return fail(start, "malformed number '" +
                             std::string(text_.substr(start, end - start)) +
                             "'");
    }
    std::string s(text_.substr(start, pos_ - start));
    t.kind = Tok::Number;
    t.text = s;
    t.isInt = isInt;
    errno = 0;
    if (isInt) {
      char *end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (errno == ERANGE)
        return fail(start, "integer literal '" + s + "' is too large");
      t.number = static_cast<double>(v);
    } else {
      t.number = std::strtod(s.c_str(), nullptr);
      if (errno == ERANGE && (t.number > 1 || t.number < -1))
        return fail(start, "number '" + s + "' is too large");
    }
    return true;
  }

  std::string_view text_;
  ExprError &err_;
  size_t pos_ = 0;
};

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

class Parser {
public:
  Parser(std::vector<Token> toks, ExprError &err)
      : toks_(std::move(toks)), err_(err) {}

  ExprPtr parseAll() {
    if (peek().kind == Tok::End)
      return fail(0, "empty expression");
    ExprPtr e = ternary();
    if (!e)
      return nullptr;
    if (peek().kind != Tok::End)
      return fail(peek().offset, "expected an operator or the end of the "
                                 "expression, got " +
                                     describe(peek()));
    return e;
  }

private:
  static constexpr int kMaxDepth = 200;

  const Token &peek() const { return toks_[pos_]; }
  const Token &take() { return toks_[pos_++]; }
  bool isPunct(std::string_view p) const {
    return peek().kind == Tok::Punct && peek().text == p;
  }
  bool isIdent(std::string_view w) const {
    return peek().kind == Tok::Ident && peek().text == w;
  }

  ExprPtr fail(size_t offset, std::string message) {
    if (!failed_) {
      err_.offset = offset;
      err_.message = std::move(message);
      failed_ = true;
    }
    return nullptr;
  }

  static std::string describe(const Token &t) {
    if (t.kind == Tok::End)
      return "the end of the expression";
    return "'" + t.text + "'";
  }

  static ExprPtr make(Expr::Kind kind, std::string name, size_t offset,
                      std::vector<ExprPtr> args) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->name = std::move(name);
    e->offset = offset;
    e->args = std::move(args);
    return e;
  }

  // Guards against stack exhaustion on "((((((...".
  struct DepthGuard {
    Parser &p;
    explicit DepthGuard(Parser &p) : p(p) { ++p.depth_; }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr ternary() {
    DepthGuard g(*this);
    if (depth_ > kMaxDepth)
      return fail(peek().offset, "expression is nested too deeply");
    ExprPtr cond = orExpr();
    if (!cond || !isPunct("?"))
      return cond;
    size_t q = take().offset;
    ExprPtr a = ternary();
    if (!a)
      return nullptr;
    if (!isPunct(":"))
      return fail(peek().offset, "expected ':' to complete the '?' at offset " +
                                     std::to_string(q) + ", got " +
                                     describe(peek()));
    take();
    ExprPtr b = ternary();
    if (!b)
      return nullptr;
    return make(Expr::Kind::Cond, "?", q, {cond, a, b});
  }

  ExprPtr orExpr() {
    ExprPtr lhs = andExpr();
    while (lhs && (isIdent("or") || isPunct("or"))) {
      size_t at = take().offset;
      ExprPtr rhs = andExpr();
      if (!rhs)
        return nullptr;
      lhs = make(Expr::Kind::Binary, "or", at, {lhs, rhs});
    }
    return lhs;
  }

  ExprPtr andExpr() {
    ExprPtr lhs = notExpr();
    while (lhs && (isIdent("and") || isPunct("and"))) {
      size_t at = take().offset;
      ExprPtr rhs = notExpr();
      if (!rhs)
        return nullptr;
      lhs = make(Expr::Kind::Binary, "and", at, {lhs, rhs});
    }
    return lhs;
  }

  ExprPtr notExpr() {
    if (isIdent("not") || isPunct("not")) {
      DepthGuard g(*this);
      if (depth_ > kMaxDepth)
        return fail(peek().offset, "expression is nested too deeply");
      size_t at = take().offset;
      ExprPtr operand = notExpr();
      if (!operand)
        return nullptr;
      return make(Expr::Kind::Unary, "not", at, {operand});
    }
    return comparison();
  }

  static bool isComparison(const Token &t) {
    if (t.kind != Tok::Punct)
      return false;
    return t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=" ||
           t.text == "==" || t.text == "!=";
  }

  ExprPtr comparison() {
    ExprPtr lhs = additive();
    if (!lhs || !isComparison(peek()))
      return lhs;
    Token op = take();
    ExprPtr rhs = additive();
    if (!rhs)
      return nullptr;
    if (isComparison(peek()))
      return fail(peek().offset,
                  "comparisons cannot be chained; combine them with 'and', "
                  "e.g. 'a < b and b < c'");
    return make(Expr::Kind::Binary, op.text, op.offset, {lhs, rhs});
  }

  ExprPtr additive() {
    ExprPtr lhs = multiplicative();
    while (lhs && (isPunct("+") || isPunct("-"))) {
      Token op = take();
      ExprPtr rhs = multiplicative();
      if (!rhs)
        return nullptr;
      lhs = make(Expr::Kind::Binary, op.text, op.offset, {lhs, rhs});
    }
    return lhs;
  }

  ExprPtr multiplicative() {
    ExprPtr lhs = unary();
    while (lhs && (isPunct("*") || isPunct("/") || isPunct("%"))) {
      Token op = take();
      ExprPtr rhs = unary();
      if (!rhs)
        return nullptr;
      lhs = make(Expr::Kind::Binary, op.text, op.offset, {lhs, rhs});
    }
    return lhs;
  }

  ExprPtr unary() {
    if (isPunct("-")) {
      DepthGuard g(*this);
      if (depth_ > kMaxDepth)
        return fail(peek().offset, "expression is nested too deeply");
      size_t at = take().offset;
      ExprPtr operand = unary();
      if (!operand)
        return nullptr;
      return make(Expr::Kind::Unary, "-", at, {operand});
    }
    if (isPunct("+"))
      return fail(peek().offset, "unary '+' is not supported; drop it");
    return postfix();
  }

  ExprPtr postfix() {
    ExprPtr e = primary();
    while (e && isPunct("[")) {
      size_t open = take().offset;
      if (e->kind != Expr::Kind::Var)
        return fail(open, "only fields can be indexed, e.g. 'dense[0]'");
      if (isPunct("-"))
        return fail(peek().offset, "expected a constant non-negative integer "
                                   "index, got '-'");
      const Token &idx = peek();
      if (idx.kind != Tok::Number || !idx.isInt)
        return fail(idx.offset, "expected a constant non-negative integer "
                                "index, got " +
                                    describe(idx));
      take();
      if (!isPunct("]"))
        return fail(peek().offset, "expected ']' to close '[' at offset " +
                                       std::to_string(open) + ", got " +
                                       describe(peek()));
      take();
      auto node = std::make_shared<Expr>();
      node->kind = Expr::Kind::Index;
      node->index = static_cast<int64_t>(idx.number);
      node->offset = open;
      node->args = {e};
      e = node;
    }
    return e;
  }

  ExprPtr call(const Token &name) {
    size_t open = take().offset; // '('
    const ExprFunction *fn = findFunction(name.text);
    if (!fn) {
      std::vector<std::string> names;
      for (const ExprFunction &f : exprFunctions())
        names.emplace_back(f.name);
      std::string msg = "unknown function '" + name.text + "'";
      std::string best = closestMatch(name.text, names);
      if (!best.empty())
        msg += "; did you mean '" + best + "'?";
      else {
        msg += "; the functions are ";
        for (size_t i = 0; i < names.size(); ++i)
          msg += (i ? ", " : "") + names[i];
      }
      return fail(name.offset, msg);
    }
    std::vector<ExprPtr> args;
    if (!isPunct(")")) {
      while (true) {
        ExprPtr a = ternary();
        if (!a)
          return nullptr;
        args.push_back(a);
        if (isPunct(",")) {
          take();
          continue;
        }
        break;
      }
    }
    if (!isPunct(")"))
      return fail(peek().offset, "expected ',' or ')' to close '(' at offset " +
                                     std::to_string(open) + ", got " +
                                     describe(peek()));
    take();
    if (static_cast<int>(args.size()) != fn->arity)
      return fail(name.offset,
                  "'" + name.text + "' takes " + std::to_string(fn->arity) +
                      (fn->arity == 1 ? " argument" : " arguments") + ", got " +
                      std::to_string(args.size()));
    return make(Expr::Kind::Call, name.text, name.offset, std::move(args));
  }

  ExprPtr primary() {
    const Token &t = peek();
    switch (t.kind) {
    case Tok::Number: {
      take();
      auto e = std::make_shared<Expr>();
      e->kind = Expr::Kind::Number;
      e->number = t.number;
      e->isInt = t.isInt;
      e->offset = t.offset;
      return e;
    }
    case Tok::Ident: {
      Token name = take();
      if (name.text == "true" || name.text == "false") {
        auto e = std::make_shared<Expr>();
        e->kind = Expr::Kind::Number;
        e->number = name.text == "true" ? 1 : 0;
        e->isInt = false;
        e->name = name.text;
        e->offset = name.offset;
        return e;
      }
      if (isKeyword(name.text))
        return fail(name.offset,
                    "expected an operand before '" + name.text + "'");
      if (isPunct("("))
        return call(name);
      if (findFunction(name.text))
        return fail(name.offset, "'" + name.text +
                                     "' is a function; call it, e.g. '" +
                                     name.text + "(x)'");
      return make(Expr::Kind::Var, name.text, name.offset, {});
    }
    case Tok::Punct:
      if (t.text == "(") {
        size_t open = take().offset;
        ExprPtr e = ternary();
        if (!e)
          return nullptr;
        if (!isPunct(")"))
          return fail(peek().offset, "expected ')' to close '(' at offset " +
                                         std::to_string(open) + ", got " +
                                         describe(peek()));
        take();
        return e;
      }
      return fail(t.offset, "expected an operand, got '" + t.text + "'");
    case Tok::End:
      return fail(t.offset,
                  "expected an operand, got the end of the expression");
    case Tok::Error:
      break;
    }
    return fail(t.offset, "unexpected input");
  }

  std::vector<Token> toks_;
  ExprError &err_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool failed_ = false;
};

} // namespace

ExprPtr parseExpr(std::string_view text, ExprError &err) {
  std::vector<Token> toks;
  Lexer lexer(text, err);
  if (!lexer.run(toks))
    return nullptr;
  Parser parser(std::move(toks), err);
  return parser.parseAll();
}

std::string Expr::str() const {
  switch (kind) {
  case Kind::Number:
    if (!name.empty())
      return name;
    if (isInt)
      return std::to_string(static_cast<int64_t>(number));
    return detail::formatDouble(number);
  case Kind::Var:
    return name;
  case Kind::Unary:
    return "(" + name + (name == "not" ? " " : "") + args[0]->str() + ")";
  case Kind::Binary:
    return "(" + args[0]->str() + " " + name + " " + args[1]->str() + ")";
  case Kind::Call: {
    std::string s = name + "(";
    for (size_t i = 0; i < args.size(); ++i)
      s += (i ? ", " : "") + args[i]->str();
    return s + ")";
  }
  case Kind::Cond:
    return "(" + args[0]->str() + " ? " + args[1]->str() + " : " +
           args[2]->str() + ")";
  case Kind::Index:
    return args[0]->str() + "[" + std::to_string(index) + "]";
  }
  return "";
}

std::vector<std::string> exprVariables(const Expr &e) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  std::function<void(const Expr &)> walk = [&](const Expr &n) {
    if (n.kind == Expr::Kind::Var && seen.insert(n.name).second)
      out.push_back(n.name);
    for (const ExprPtr &a : n.args)
      walk(*a);
  };
  walk(e);
  return out;
}

//===----------------------------------------------------------------------===//
// Type inference
//===----------------------------------------------------------------------===//

namespace {

// A literal's type is weak: it adapts to the typed operand it meets.
struct Ty {
  ElemType elem;
  bool weak = false;
};

unsigned bits(ElemType t) { return elemTypeSize(t) * 8; }
bool isUnsigned(ElemType t) { return t == ElemType::U8 || t == ElemType::U16; }

ElemType signedOfBits(unsigned b) {
  switch (b) {
  case 8:
    return ElemType::I8;
  case 16:
    return ElemType::I16;
  case 32:
    return ElemType::I32;
  default:
    return ElemType::I64;
  }
}

// Smallest integer type holding both (u8 + i8 -> i16).
ElemType promoteInts(ElemType a, ElemType b) {
  if (a == b)
    return a;
  bool ua = isUnsigned(a), ub = isUnsigned(b);
  if (ua == ub)
    return bits(a) >= bits(b) ? a : b;
  ElemType u = ua ? a : b, s = ua ? b : a;
  if (bits(s) > bits(u))
    return s;
  return signedOfBits(bits(u) * 2);
}

ElemType widerFloat(ElemType a, ElemType b) {
  return bits(a) >= bits(b) ? a : b;
}

// Arithmetic result of two numeric (non-bool) operands.
Ty promote(Ty a, Ty b) {
  bool fa = isFloat(a.elem), fb = isFloat(b.elem);
  if (a.weak && b.weak) {
    return {fa || fb ? ElemType::F32 : ElemType::I64, true};
  }
  if (a.weak || b.weak) {
    Ty strong = a.weak ? b : a, weak = a.weak ? a : b;
    if (isFloat(strong.elem) || !isFloat(weak.elem))
      return {strong.elem, false};
    return {ElemType::F32, false}; // int field with a float literal
  }
  if (fa && fb)
    return {widerFloat(a.elem, b.elem), false};
  if (fa || fb) {
    ElemType f = fa ? a.elem : b.elem;
    return {widerFloat(f, ElemType::F32), false};
  }
  return {promoteInts(a.elem, b.elem), false};
}

// Math functions compute in f32 unless an input is f64.
Ty floatResult(std::initializer_list<Ty> in) {
  for (const Ty &t : in)
    if (!t.weak && t.elem == ElemType::F64)
      return {ElemType::F64, false};
  bool allWeak = true;
  for (const Ty &t : in)
    allWeak = allWeak && t.weak;
  return {ElemType::F32, allWeak};
}

class TypeInfer {
public:
  TypeInfer(const std::function<bool(const std::string &, ElemType &)> &lookup,
            ExprTypeError &err)
      : lookup_(lookup), err_(err) {}

  bool infer(const Expr &e, Ty &out) {
    switch (e.kind) {
    case Expr::Kind::Number:
      if (e.name == "true" || e.name == "false")
        out = {ElemType::Bool, false};
      else
        out = {e.isInt ? ElemType::I64 : ElemType::F32, true};
      return true;
    case Expr::Kind::Var:
    case Expr::Kind::Index: {
      const Expr &var = e.kind == Expr::Kind::Var ? e : *e.args[0];
      ElemType t;
      if (!lookup_(var.name, t))
        return fail(var, "unknown name '" + var.name + "'");
      if (!isNumeric(t))
        return fail(var, "'" + var.name + "' is " +
                             std::string(elemTypeName(t)) +
                             "; expressions compute on numbers and bools");
      out = {t, false};
      return true;
    }
    case Expr::Kind::Unary: {
      Ty a;
      if (!infer(*e.args[0], a))
        return false;
      if (e.name == "not") {
        if (a.elem != ElemType::Bool)
          return fail(e, "'not' needs a condition (bool), but " +
                             quoted(*e.args[0]) + " is " + name(a) +
                             "; compare it, e.g. '" + e.args[0]->str() +
                             " == 0'");
        out = a;
        return true;
      }
      if (a.elem == ElemType::Bool)
        return fail(e, "cannot negate a condition (bool); use 'not'");
      out = a;
      return true;
    }
    case Expr::Kind::Binary:
      return binary(e, out);
    case Expr::Kind::Cond: {
      Ty c, a, b;
      if (!infer(*e.args[0], c) || !infer(*e.args[1], a) ||
          !infer(*e.args[2], b))
        return false;
      if (c.elem != ElemType::Bool)
        return fail(*e.args[0],
                    "the condition before '?' must be a bool, but " +
                        quoted(*e.args[0]) + " is " + name(c));
      bool ba = a.elem == ElemType::Bool, bb = b.elem == ElemType::Bool;
      if (ba != bb)
        return fail(e, "the two branches of '?' must both be numbers or both "
                       "be bools, got " +
                           name(a) + " and " + name(b));
      out = ba ? a : promote(a, b);
      return true;
    }
    case Expr::Kind::Call:
      return call(e, out);
    }
    return fail(e, "unsupported expression");
  }

private:
  bool fail(const Expr &at, std::string message) {
    err_.offset = at.offset;
    err_.message = std::move(message);
    return false;
  }

  static std::string name(Ty t) { return std::string(elemTypeName(t.elem)); }
  static std::string quoted(const Expr &e) { return "'" + e.str() + "'"; }

  bool numeric(const Expr &at, const Expr &operand, Ty t,
               const std::string &what) {
    if (t.elem == ElemType::Bool)
      return fail(at, what + " needs numbers, but " + quoted(operand) +
                          " is a bool");
    return true;
  }

  bool binary(const Expr &e, Ty &out) {
    Ty a, b;
    if (!infer(*e.args[0], a) || !infer(*e.args[1], b))
      return false;
    const std::string &op = e.name;
    if (op == "and" || op == "or") {
      for (int i = 0; i < 2; ++i) {
        Ty t = i ? b : a;
        if (t.elem != ElemType::Bool)
          return fail(e, "'" + op + "' needs conditions (bools), but " +
                             quoted(*e.args[i]) + " is " + name(t) +
                             "; compare it, e.g. '" + e.args[i]->str() +
                             " != 0'");
      }
      out = {ElemType::Bool, false};
      return true;
    }
    bool isCmp = op == "<" || op == "<=" || op == ">" || op == ">=" ||
                 op == "==" || op == "!=";
    if (isCmp) {
      bool ba = a.elem == ElemType::Bool, bb = b.elem == ElemType::Bool;
      if ((op == "==" || op == "!=") && ba && bb) {
        out = {ElemType::Bool, false};
        return true;
      }
      if (!numeric(e, *e.args[0], a, "'" + op + "'") ||
          !numeric(e, *e.args[1], b, "'" + op + "'"))
        return false;
      out = {ElemType::Bool, false};
      return true;
    }
    if (!numeric(e, *e.args[0], a, "'" + op + "'") ||
        !numeric(e, *e.args[1], b, "'" + op + "'"))
      return false;
    if (op == "/") {
      // True division, as in Python: 7 / 2 is 3.5 whatever the operands.
      Ty p = promote(a, b);
      out = isFloat(p.elem) ? p : floatResult({a, b});
      return true;
    }
    out = promote(a, b);
    return true;
  }

  bool call(const Expr &e, Ty &out) {
    std::vector<Ty> in(e.args.size());
    for (size_t i = 0; i < e.args.size(); ++i) {
      if (!infer(*e.args[i], in[i]))
        return false;
      if (!numeric(e, *e.args[i], in[i], "'" + e.name + "'"))
        return false;
    }
    const std::string &f = e.name;
    if (f == "abs" || f == "floor" || f == "ceil" || f == "round") {
      out = in[0];
      return true;
    }
    if (f == "min" || f == "max") {
      out = promote(in[0], in[1]);
      return true;
    }
    if (f == "clamp") {
      out = promote(promote(in[0], in[1]), in[2]);
      return true;
    }
    // log exp sqrt pow sin cos tanh sigmoid log1p
    out = in.size() == 1 ? floatResult({in[0]}) : floatResult({in[0], in[1]});
    if (in.size() == 1 && isFloat(in[0].elem) && !in[0].weak &&
        in[0].elem != ElemType::F16)
      out = in[0];
    return true;
  }

  const std::function<bool(const std::string &, ElemType &)> &lookup_;
  ExprTypeError &err_;
};

} // namespace

bool inferExprType(
    const Expr &e,
    const std::function<bool(const std::string &, ElemType &)> &lookup,
    ElemType &result, ExprTypeError &err) {
  TypeInfer ti(lookup, err);
  Ty t;
  if (!ti.infer(e, t))
    return false;
  result = t.elem;
  return true;
}

} // namespace sluice
