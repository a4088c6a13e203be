//===- Expr.cpp - Parser and type inference of map/filter expressions ----===//
//
// A hand-written lexer and recursive-descent parser, so that every error can
// name the character it is about, and the type inference of NEP 50 (numpy
// 2): literals are weak Python numbers that take the type of the field they
// meet (`x * 2` on a u8 field stays u8), and subexpressions of literals only
// are folded here with Python's semantics, so the runtime never sees them.
//
// Boolean literals are Number nodes (1 or 0) whose `name` is "true" or
// "false": consumers that only look at `number` still compute the right value.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Expr.h"
#include "Internal.h"
#include "sluice/ops/Registry.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
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
  int64_t intValue = 0;
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
    static const char *const kTwo[] = {
        "<=", ">=", "==", "!=", "&&", "||", "//"};
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
      t.intValue = v;
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

  // Every node is made here, so the bounds on the tree hold for every pass
  // that walks it recursively (type inference, folding, the interpreter,
  // the code generator, str(), the destructor): a flat chain `x+x+...+x` is
  // as deep as its operators are many, which the bracket depth above does
  // not see.
  ExprPtr make(Expr::Kind kind, std::string name, size_t offset,
               std::vector<ExprPtr> args) {
    int height = 1;
    for (const ExprPtr &a : args)
      height = std::max(height, a->height + 1);
    if (height > kMaxExprHeight)
      return fail(offset,
                  "the expression is nested more than " +
                      std::to_string(kMaxExprHeight) +
                      " operations deep here (each operator of a chain such "
                      "as 'a + b + c' adds a level); simplify it or split it "
                      "across several steps");
    if (++nodes_ > kMaxExprNodes)
      return fail(offset, "the expression has more than " +
                              std::to_string(kMaxExprNodes) +
                              " operators and operands; simplify it or split "
                              "it across several steps");
    auto e = std::make_shared<Expr>();
    e->height = height;
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
    while (lhs &&
           (isPunct("*") || isPunct("/") || isPunct("//") || isPunct("%"))) {
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
      node->index = idx.intValue;
      node->offset = open;
      node->args = {e};
      node->height = e->height + 1;
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
      e->intValue = t.intValue;
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
  size_t nodes_ = 0;
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
      return std::to_string(intValue);
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
// Type inference (NEP 50, see Expr.h)
//===----------------------------------------------------------------------===//

namespace {

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

bool isCmp(const std::string &op) {
  return op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" ||
         op == "!=";
}

// Python's floor division and modulo of exact integers (b != 0).
int64_t pyFloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}
int64_t pyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0)))
    r += b;
  return r;
}

// Python's float %: the sign of the divisor (b != 0).
double pyFMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0) {
    if ((b < 0) != (m < 0))
      m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}
double pyFFloorDiv(double a, double b) {
  double m = std::fmod(a, b);
  double div = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0)))
    div -= 1.0;
  if (div == 0)
    return std::copysign(0.0, a / b);
  double fl = std::floor(div);
  if (div - fl > 0.5)
    fl += 1.0;
  return fl;
}

class TypeInfer {
public:
  TypeInfer(const std::function<bool(const std::string &, ElemType &)> &lookup,
            ExprTypes &types, ExprTypeError &err)
      : lookup_(lookup), types_(types), err_(err) {}

  bool infer(const Expr &e, ExprNodeType &out) {
    if (!inferNode(e, out))
      return false;
    types_[&e] = out;
    return true;
  }

private:
  using T = ExprNodeType;

  bool inferNode(const Expr &e, T &out) {
    switch (e.kind) {
    case Expr::Kind::Number:
      out = T();
      out.isConst = true;
      if (e.name == "true" || e.name == "false") {
        out.elem = ElemType::Bool;
        out.ival = e.name == "true";
      } else if (e.isInt) {
        out.elem = ElemType::I64;
        out.weak = true;
        out.ival = e.intValue;
      } else {
        out.elem = ElemType::F64;
        out.weak = true;
        out.fval = e.number;
      }
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
      if (t == ElemType::BF16)
        return fail(var, "'" + var.name +
                             "' is bf16, which numpy has no arithmetic for; "
                             "cast it to f32 first (- cast: {field: " +
                             var.name + ", dtype: f32})");
      if (e.kind == Expr::Kind::Index)
        types_[&var] = T{t};
      out = T{t};
      return true;
    }
    case Expr::Kind::Unary:
      return unary(e, out);
    case Expr::Kind::Binary:
      return binary(e, out);
    case Expr::Kind::Cond:
      return cond(e, out);
    case Expr::Kind::Call:
      return call(e, out);
    }
    return fail(e, "unsupported expression");
  }

  bool fail(const Expr &at, std::string message) {
    err_.offset = at.offset;
    err_.message = std::move(message);
    return false;
  }

  static std::string name(const T &t) {
    if (t.weak)
      return t.elem == ElemType::I64 ? "an integer literal" : "a float literal";
    return std::string(elemTypeName(t.elem));
  }
  static std::string quoted(const Expr &e) { return "'" + e.str() + "'"; }

  static T weakInt(int64_t v) {
    T t{ElemType::I64, true, true};
    t.ival = v;
    return t;
  }
  static T weakFloat(double v) {
    T t{ElemType::F64, true, true};
    t.fval = v;
    return t;
  }
  static T constBool(bool v) {
    T t{ElemType::Bool, false, true};
    t.ival = v;
    return t;
  }
  static double asF(const T &t) {
    return t.elem == ElemType::I64 ? static_cast<double>(t.ival) : t.fval;
  }

  bool numeric(const Expr &at, const Expr &operand, const T &t,
               const std::string &what) {
    if (t.elem == ElemType::Bool)
      return fail(at, what + " needs numbers, but " + quoted(operand) +
                          " is a bool");
    return true;
  }

  /// A weak integer meeting integer type `to`: numpy 2 raises OverflowError
  /// when it does not fit, and so do we, at check time.
  bool fits(const Expr &literal, const T &w, ElemType to) {
    if (!w.weak || w.elem != ElemType::I64 || !isInteger(to))
      return true;
    auto [lo, hi] = integerRange(to);
    if (w.ival >= lo && w.ival <= hi)
      return true;
    return fail(literal, "the integer " + std::to_string(w.ival) +
                             " does not fit in " +
                             std::string(elemTypeName(to)) + " (" +
                             std::to_string(lo) + " to " + std::to_string(hi) +
                             "), the type it takes next to " +
                             std::string(elemTypeName(to)) +
                             " values; numpy 2 raises OverflowError here too. "
                             "Use a literal in range, or compare (comparisons "
                             "take any integer)");
  }

  /// The promoted type of two non-bool operands (NEP 50). Checks that an
  /// integer literal fits a strong integer type unless `exactInts`.
  bool promote(const Expr &ea, const T &a, const Expr &eb, const T &b,
               ElemType &out, bool exactInts = false) {
    if (a.weak && b.weak) {
      out = a.elem == ElemType::F64 || b.elem == ElemType::F64 ? ElemType::F64
                                                               : ElemType::I64;
      return true;
    }
    if (a.weak || b.weak) {
      const T &strong = a.weak ? b : a, &weak = a.weak ? a : b;
      const Expr &weakExpr = a.weak ? ea : eb;
      if (isFloat(strong.elem)) {
        out = strong.elem;
        return true;
      }
      if (weak.elem == ElemType::F64) {
        out = ElemType::F64; // int dtype with a Python float
        return true;
      }
      out = strong.elem;
      return exactInts || fits(weakExpr, weak, strong.elem);
    }
    out = promoteElemTypes(a.elem, b.elem);
    return true;
  }

  bool unary(const Expr &e, T &out) {
    T a;
    if (!infer(*e.args[0], a))
      return false;
    if (e.name == "not") {
      if (a.elem != ElemType::Bool)
        return fail(e, "'not' needs a condition (bool), but " +
                           quoted(*e.args[0]) + " is " + name(a) +
                           "; compare it, e.g. '" + e.args[0]->str() +
                           " == 0'");
      out = a.isConst ? constBool(!a.ival) : T{ElemType::Bool};
      return true;
    }
    if (a.elem == ElemType::Bool)
      return fail(e, "cannot negate a condition (bool); use 'not'");
    if (a.weak) {
      if (a.elem == ElemType::I64) {
        if (a.ival == std::numeric_limits<int64_t>::min())
          return fail(e, "the constant " + e.str() + " overflows i64");
        out = weakInt(-a.ival);
      } else {
        out = weakFloat(-a.fval);
      }
      return true;
    }
    out = T{a.elem};
    return true;
  }

  bool cond(const Expr &e, T &out) {
    T c, a, b;
    if (!infer(*e.args[0], c) || !infer(*e.args[1], a) || !infer(*e.args[2], b))
      return false;
    if (c.elem != ElemType::Bool)
      return fail(*e.args[0], "the condition before '?' must be a bool, but " +
                                  quoted(*e.args[0]) + " is " + name(c));
    bool ba = a.elem == ElemType::Bool, bb = b.elem == ElemType::Bool;
    if (ba != bb)
      return fail(e, "the two branches of '?' must both be numbers or both "
                     "be bools, got " +
                         name(a) + " and " + name(b));
    if (c.isConst) { // folded: the chosen branch, weak or not
      const T &pick = c.ival ? a : b;
      if (pick.isConst) {
        out = pick;
        return true;
      }
    }
    if (ba) {
      out = T{ElemType::Bool};
      return true;
    }
    ElemType r;
    if (!promote(*e.args[1], a, *e.args[2], b, r))
      return false;
    out = T{r};
    return true;
  }

  bool logic(const Expr &e, const T &a, const T &b, T &out) {
    const std::string &op = e.name;
    for (int i = 0; i < 2; ++i) {
      const T &t = i ? b : a;
      if (t.elem != ElemType::Bool)
        return fail(e, "'" + op + "' needs conditions (bools), but " +
                           quoted(*e.args[i]) + " is " + name(t) +
                           "; compare it, e.g. '" + e.args[i]->str() +
                           " != 0'");
    }
    if (a.isConst && b.isConst)
      out = constBool(op == "and" ? (a.ival && b.ival) : (a.ival || b.ival));
    else
      out = T{ElemType::Bool};
    return true;
  }

  template <typename V> static bool compare(const std::string &op, V x, V y) {
    if (op == "<")
      return x < y;
    if (op == "<=")
      return x <= y;
    if (op == ">")
      return x > y;
    if (op == ">=")
      return x >= y;
    if (op == "==")
      return x == y;
    return x != y;
  }

  bool binary(const Expr &e, T &out) {
    T a, b;
    if (!infer(*e.args[0], a) || !infer(*e.args[1], b))
      return false;
    const std::string &op = e.name;
    if (op == "and" || op == "or")
      return logic(e, a, b, out);
    if (isCmp(op)) {
      bool ba = a.elem == ElemType::Bool, bb = b.elem == ElemType::Bool;
      if ((op == "==" || op == "!=") && ba && bb) {
        out = a.isConst && b.isConst ? constBool(compare(op, a.ival, b.ival))
                                     : T{ElemType::Bool};
        return true;
      }
      if (!numeric(e, *e.args[0], a, "'" + op + "'") ||
          !numeric(e, *e.args[1], b, "'" + op + "'"))
        return false;
      if (a.weak && b.weak) {
        bool r = a.elem == ElemType::I64 && b.elem == ElemType::I64
                     ? compare(op, a.ival, b.ival)
                     : compare(op, asF(a), asF(b));
        out = constBool(r);
        return true;
      }
      ElemType r;
      if (!promote(*e.args[0], a, *e.args[1], b, r, /*exactInts=*/true))
        return false;
      out = T{ElemType::Bool};
      return true;
    }
    if (!numeric(e, *e.args[0], a, "'" + op + "'") ||
        !numeric(e, *e.args[1], b, "'" + op + "'"))
      return false;
    if (a.weak && b.weak)
      return foldArith(e, op, a, b, out);
    ElemType r;
    if (!promote(*e.args[0], a, *e.args[1], b, r))
      return false;
    if (op == "/" && !isFloat(r))
      r = ElemType::F64; // true division of integers, as numpy
    out = T{r};
    return true;
  }

  /// Python arithmetic on two Python numbers.
  bool foldArith(const Expr &e, const std::string &op, const T &a, const T &b,
                 T &out) {
    bool ints = a.elem == ElemType::I64 && b.elem == ElemType::I64;
    auto overflow = [&] {
      return fail(e, "the constant " + e.str() +
                         " overflows i64; compute it with float literals");
    };
    auto zero = [&] {
      return fail(e, "division by zero in the constant " + e.str());
    };
    if (ints && op != "/") {
      int64_t x = a.ival, y = b.ival, r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r))
          return overflow();
      } else if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r))
          return overflow();
      } else if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r))
          return overflow();
      } else {
        if (y == 0)
          return zero();
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == "//")
            return overflow();
          r = 0;
        } else {
          r = op == "//" ? pyFloorDiv(x, y) : pyMod(x, y);
        }
      }
      out = weakInt(r);
      return true;
    }
    double x = asF(a), y = asF(b), r;
    if (op == "+")
      r = x + y;
    else if (op == "-")
      r = x - y;
    else if (op == "*")
      r = x * y;
    else {
      if (y == 0)
        return zero();
      r = op == "/" ? x / y : op == "//" ? pyFFloorDiv(x, y) : pyFMod(x, y);
    }
    out = weakFloat(r);
    return true;
  }

  bool call(const Expr &e, T &out) {
    std::vector<T> in(e.args.size());
    bool allWeak = true;
    for (size_t i = 0; i < e.args.size(); ++i) {
      if (!infer(*e.args[i], in[i]))
        return false;
      if (!numeric(e, *e.args[i], in[i], "'" + e.name + "'"))
        return false;
      allWeak = allWeak && in[i].weak;
    }
    const std::string &f = e.name;
    if (allWeak)
      return foldCall(e, in, out);
    if (f == "abs" || f == "floor" || f == "ceil" || f == "round") {
      out = T{in[0].elem};
      return true;
    }
    if (f == "min" || f == "max" || f == "pow") {
      ElemType r;
      if (!promote(*e.args[0], in[0], *e.args[1], in[1], r))
        return false;
      out = T{r};
      return true;
    }
    if (f == "clamp") {
      // np.clip(x, lo, hi) == minimum(maximum(x, lo), hi)
      ElemType r1, r2;
      if (!promote(*e.args[0], in[0], *e.args[1], in[1], r1))
        return false;
      T mid{r1};
      if (!promote(*e.args[0], mid, *e.args[2], in[2], r2))
        return false;
      out = T{r2};
      return true;
    }
    // exp log log1p sqrt sin cos tanh sigmoid
    out = T{isFloat(in[0].elem) ? in[0].elem : mathFloatType(in[0].elem)};
    return true;
  }

  /// A function of Python numbers: Python's builtins and math module.
  bool foldCall(const Expr &e, const std::vector<T> &in, T &out) {
    const std::string &f = e.name;
    auto domain = [&] {
      return fail(e, "math domain error in the constant " + e.str() +
                         " (Python's math." + f + " rejects it too)");
    };
    auto isInt = [](const T &t) { return t.elem == ElemType::I64; };
    if (f == "abs") {
      if (isInt(in[0])) {
        if (in[0].ival == std::numeric_limits<int64_t>::min())
          return fail(e, "the constant " + e.str() + " overflows i64");
        out = weakInt(in[0].ival < 0 ? -in[0].ival : in[0].ival);
      } else {
        out = weakFloat(std::fabs(in[0].fval));
      }
      return true;
    }
    if (f == "floor" || f == "ceil" || f == "round") {
      if (isInt(in[0])) {
        out = in[0];
        return true;
      }
      double v = in[0].fval;
      double r = f == "floor"  ? std::floor(v)
                 : f == "ceil" ? std::ceil(v)
                               : std::nearbyint(v); // half to even
      if (!(r >= -9223372036854775808.0 && r < 9223372036854775808.0))
        return fail(e, "the constant " + e.str() +
                           " is not an integer in i64 range (Python's " + f +
                           " gives an int)");
      out = weakInt(static_cast<int64_t>(r));
      return true;
    }
    if (f == "min" || f == "max" || f == "clamp") {
      auto pick = [&](const T &x, const T &y, bool isMax) {
        bool yWins;
        if (isInt(x) && isInt(y))
          yWins = isMax ? y.ival > x.ival : y.ival < x.ival;
        else
          yWins = isMax ? asF(y) > asF(x) : asF(y) < asF(x);
        return yWins ? y : x; // Python keeps the first on ties
      };
      out = f == "clamp" ? pick(pick(in[0], in[1], true), in[2], false)
                         : pick(in[0], in[1], f == "max");
      return true;
    }
    if (f == "pow") {
      if (isInt(in[0]) && isInt(in[1]) && in[1].ival >= 0) {
        int64_t r = 1, b = in[0].ival, n = in[1].ival;
        if (b == 0 || b == 1)
          r = n == 0 ? 1 : b;
        else if (b == -1)
          r = n % 2 ? -1 : 1;
        else // |b| >= 2 overflows within 63 steps
          for (; n > 0; --n)
            if (__builtin_mul_overflow(r, b, &r))
              return fail(e, "the constant " + e.str() + " overflows i64");
        out = weakInt(r);
        return true;
      }
      double x = asF(in[0]), y = asF(in[1]);
      if (x == 0 && y < 0)
        return fail(e, "division by zero in the constant " + e.str());
      double r = std::pow(x, y);
      if (std::isnan(r))
        return domain();
      out = weakFloat(r);
      return true;
    }
    double x = asF(in[0]), r;
    if (f == "exp")
      r = std::exp(x);
    else if (f == "log") {
      if (!(x > 0))
        return domain();
      r = std::log(x);
    } else if (f == "log1p") {
      if (!(x > -1))
        return domain();
      r = std::log1p(x);
    } else if (f == "sqrt") {
      if (x < 0)
        return domain();
      r = std::sqrt(x);
    } else if (f == "sin")
      r = std::sin(x);
    else if (f == "cos")
      r = std::cos(x);
    else if (f == "tanh")
      r = std::tanh(x);
    else // sigmoid
      r = 1.0 / (1.0 + std::exp(-x));
    if (std::isinf(r) && !std::isinf(x))
      return fail(e, "the constant " + e.str() +
                         " overflows a float (Python raises OverflowError)");
    out = weakFloat(r);
    return true;
  }

  const std::function<bool(const std::string &, ElemType &)> &lookup_;
  ExprTypes &types_;
  ExprTypeError &err_;
};

} // namespace

ElemType promoteElemTypes(ElemType a, ElemType b) {
  bool fa = isFloat(a), fb = isFloat(b);
  if (fa && fb)
    return widerFloat(a, b);
  if (fa || fb) {
    ElemType f = fa ? a : b, i = fa ? b : a;
    return widerFloat(f, mathFloatType(i));
  }
  return promoteInts(a, b);
}

ElemType mathFloatType(ElemType t) {
  switch (t) {
  case ElemType::U8:
  case ElemType::I8:
  case ElemType::Bool:
    return ElemType::F16;
  case ElemType::U16:
  case ElemType::I16:
    return ElemType::F32;
  case ElemType::F16:
  case ElemType::F32:
    return t;
  default:
    return ElemType::F64;
  }
}

bool annotateExprTypes(
    const Expr &e,
    const std::function<bool(const std::string &, ElemType &)> &lookup,
    ExprTypes &types, ExprTypeError &err) {
  TypeInfer ti(lookup, types, err);
  ExprNodeType t;
  return ti.infer(e, t);
}

bool inferExprType(
    const Expr &e,
    const std::function<bool(const std::string &, ElemType &)> &lookup,
    ElemType &result, ExprTypeError &err) {
  ExprTypes types;
  if (!annotateExprTypes(e, lookup, types, err))
    return false;
  result = types.at(&e).elem;
  return true;
}

} // namespace sluice
