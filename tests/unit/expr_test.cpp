//===- expr_test.cpp - Parsing and typing map/filter expressions ----------===//
#include "sluice/ops/Expr.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

using namespace sluice;

namespace {

//===----------------------------------------------------------------------===//
// Parsing: canonical text shows the tree (and so the precedence).
//===----------------------------------------------------------------------===//

struct ParseCase {
  const char *text;
  const char *canonical;
};

void PrintTo(const ParseCase &c, std::ostream *os) {
  *os << '"' << c.text << '"';
}

class ExprParseTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ExprParseTest, Canonical) {
  ExprError err;
  ExprPtr e = parseExpr(GetParam().text, err);
  ASSERT_NE(e, nullptr) << GetParam().text << ": " << err.message << " at "
                        << err.offset;
  EXPECT_EQ(e->str(), GetParam().canonical);
  // The canonical form parses back to itself.
  ExprPtr again = parseExpr(e->str(), err);
  ASSERT_NE(again, nullptr) << e->str() << ": " << err.message;
  EXPECT_EQ(again->str(), e->str());
}

INSTANTIATE_TEST_SUITE_P(
    Table, ExprParseTest,
    ::testing::Values(
        ParseCase{"log(max(x, 0) + 1)", "log((max(x, 0) + 1))"},
        ParseCase{"1 + 2 * 3", "(1 + (2 * 3))"},
        ParseCase{"(1 + 2) * 3", "((1 + 2) * 3)"},
        ParseCase{"a - b - c", "((a - b) - c)"},
        ParseCase{"a / b % c", "((a / b) % c)"},
        ParseCase{"-x * 2", "((-x) * 2)"}, ParseCase{"--x", "(-(-x))"},
        ParseCase{"-f[2]", "(-f[2])"}, ParseCase{"a < b + 1", "(a < (b + 1))"},
        ParseCase{"label >= 0 and dense[0] < 5",
                  "((label >= 0) and (dense[0] < 5))"},
        ParseCase{"a or b and c", "(a or (b and c))"},
        ParseCase{"a || b && c", "(a or (b and c))"},
        ParseCase{"not a == b", "(not (a == b))"},
        ParseCase{"!a && b", "((not a) and b)"},
        ParseCase{"not not a", "(not (not a))"},
        ParseCase{"c ? a : b", "(c ? a : b)"},
        ParseCase{"a > 0 ? x : -x", "((a > 0) ? x : (-x))"},
        ParseCase{"a ? b : c ? d : e", "(a ? b : (c ? d : e))"},
        ParseCase{"a or b ? 1 : 0", "((a or b) ? 1 : 0)"},
        ParseCase{"clamp(x, -1, 1)", "clamp(x, (-1), 1)"},
        ParseCase{"pow(x, 2) + sigmoid(x) * tanh(x)",
                  "(pow(x, 2) + (sigmoid(x) * tanh(x)))"},
        ParseCase{"1e-3", "0.001"}, ParseCase{"2.50", "2.5"},
        ParseCase{"3.0", "3.0"}, ParseCase{".5", "0.5"},
        ParseCase{"1E6", "1000000.0"}, ParseCase{"1e20", "1e+20"},
        ParseCase{"(a)[0]", "a[0]"}, ParseCase{"7", "7"},
        ParseCase{"true or false", "(true or false)"},
        ParseCase{"x != x", "(x != x)"}, ParseCase{"  _a1 \t", "_a1"},
        ParseCase{"log1p(abs(x))", "log1p(abs(x))"}));

TEST(Expr, NodesCarryOffsetsAndKinds) {
  ExprError err;
  ExprPtr e = parseExpr("label >= 0 and dense[12] < 5", err);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind, Expr::Kind::Binary);
  EXPECT_EQ(e->name, "and");
  EXPECT_EQ(e->offset, 11u); // the operator
  const Expr &rhs = *e->args[1];
  EXPECT_EQ(rhs.offset, 25u); // '<'
  const Expr &idx = *rhs.args[0];
  EXPECT_EQ(idx.kind, Expr::Kind::Index);
  EXPECT_EQ(idx.index, 12);
  EXPECT_EQ(idx.offset, 20u); // '['
  EXPECT_EQ(idx.args[0]->kind, Expr::Kind::Var);
  EXPECT_EQ(idx.args[0]->offset, 15u);
  const Expr &zero = *e->args[0]->args[1];
  EXPECT_EQ(zero.kind, Expr::Kind::Number);
  EXPECT_TRUE(zero.isInt);
  EXPECT_EQ(zero.offset, 9u);

  ExprPtr t = parseExpr("true", err);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind, Expr::Kind::Number);
  EXPECT_EQ(t->number, 1);
  EXPECT_EQ(t->name, "true");
}

TEST(Expr, Variables) {
  ExprError err;
  ExprPtr e = parseExpr("b + a * b > c[1] ? log(a) : d", err);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(exprVariables(*e), (std::vector<std::string>{"b", "a", "c", "d"}));
  e = parseExpr("1 + 2", err);
  EXPECT_TRUE(exprVariables(*e).empty());
}

TEST(Expr, FunctionTable) {
  std::map<std::string, int> arity;
  for (const ExprFunction &f : exprFunctions())
    arity[std::string(f.name)] = f.arity;
  EXPECT_EQ(arity.size(), 16u);
  EXPECT_EQ(arity["clamp"], 3);
  EXPECT_EQ(arity["max"], 2);
  EXPECT_EQ(arity["pow"], 2);
  EXPECT_EQ(arity["log1p"], 1);
  // Every function parses with its arity.
  for (const auto &[name, n] : arity) {
    std::string text = name + "(";
    for (int i = 0; i < n; ++i)
      text += i ? ", x" : "x";
    text += ")";
    ExprError err;
    EXPECT_NE(parseExpr(text, err), nullptr) << text << ": " << err.message;
  }
}

//===----------------------------------------------------------------------===//
// Parse errors: where and what.
//===----------------------------------------------------------------------===//

struct ErrorCase {
  const char *text;
  size_t offset;
  const char *message; // a substring of the message
};

void PrintTo(const ErrorCase &c, std::ostream *os) {
  *os << '"' << c.text << '"';
}

class ExprErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ExprErrorTest, OffsetAndMessage) {
  ExprError err;
  ExprPtr e = parseExpr(GetParam().text, err);
  ASSERT_EQ(e, nullptr) << GetParam().text << " parsed as " << e->str();
  EXPECT_EQ(err.offset, GetParam().offset) << err.message;
  EXPECT_NE(err.message.find(GetParam().message), std::string::npos)
      << "message: " << err.message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ExprErrorTest,
    ::testing::Values(
        ErrorCase{"log((x + 1)", 11,
                  "expected ',' or ')' to close '(' at offset 3"},
        ErrorCase{"ab*(c - 1", 9, "expected ')' to close '(' at offset 3"},
        ErrorCase{"(a + b", 6, "expected ')' to close '(' at offset 0"},
        ErrorCase{"lgo(x)", 0, "unknown function 'lgo'; did you mean 'log'?"},
        ErrorCase{"1 + qqq(x)", 4, "unknown function 'qqq'; the functions are"},
        ErrorCase{"max(x)", 0, "'max' takes 2 arguments, got 1"},
        ErrorCase{"log(x, 2)", 0, "'log' takes 1 argument, got 2"},
        ErrorCase{"clamp(x, 0)", 0, "'clamp' takes 3 arguments, got 2"},
        ErrorCase{"max(x 0)", 6,
                  "expected ',' or ')' to close '(' at offset 3"},
        ErrorCase{"", 0, "empty expression"},
        ErrorCase{"   ", 0, "empty expression"},
        ErrorCase{"x +", 3, "expected an operand, got the end"},
        ErrorCase{"x + * 2", 4, "expected an operand, got '*'"},
        ErrorCase{"x y", 2,
                  "expected an operator or the end of the expression, "
                  "got 'y'"},
        ErrorCase{"x = 1", 2, "use '==' to compare"},
        ErrorCase{"a & b", 2, "use 'and'"}, ErrorCase{"a | b", 2, "use 'or'"},
        ErrorCase{"x ** 2", 2, "use pow(a, b)"},
        ErrorCase{"x $ 2", 2, "unexpected character '$'"},
        ErrorCase{"x == 'a'", 5, "strings are not supported"},
        ErrorCase{"1.2.3", 0, "malformed number '1.2.3'"},
        ErrorCase{"3x", 0, "malformed number '3x'"},
        ErrorCase{"1e+", 0, "expected digits after the exponent"},
        ErrorCase{"99999999999999999999", 0, "too large"},
        ErrorCase{"a < b < c", 6, "comparisons cannot be chained"},
        ErrorCase{"c ? a", 5, "expected ':' to complete the '?' at offset 2"},
        ErrorCase{"f[x]", 2, "expected a constant non-negative integer index"},
        ErrorCase{"f[-1]", 2, "non-negative"},
        ErrorCase{"f[1.5]", 2, "integer index"},
        ErrorCase{"f[1", 3, "expected ']' to close '[' at offset 1"},
        ErrorCase{"log(a)[0]", 6, "only fields can be indexed"},
        ErrorCase{"log + 1", 0, "'log' is a function"},
        ErrorCase{"and x", 0, "expected an operand before 'and'"},
        ErrorCase{"+x", 0, "unary '+'"},
        ErrorCase{"x \xc3\xa9", 2, "non-ASCII"}));

TEST(Expr, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '(');
  ExprError err;
  EXPECT_EQ(parseExpr(deep + "x", err), nullptr);
  EXPECT_NE(err.message.find("nested too deeply"), std::string::npos);
  std::string negs(100000, '-');
  EXPECT_EQ(parseExpr(negs + "x", err), nullptr);
  std::string nots;
  for (int i = 0; i < 50000; ++i)
    nots += "not ";
  EXPECT_EQ(parseExpr(nots + "x", err), nullptr);
}

// A flat chain nests as deep as it has operators (`x+x+x` is ((x+x)+x)),
// with no bracket for the depth guard to count: 20,000 terms crashed every
// recursive pass after the parser (type inference first).
TEST(Expr, LongOperatorChainsAreBoundedNotACrash) {
  for (const char *op : {"+", "*", " and ", " or ", "//"}) {
    std::string chain = "x";
    for (int i = 1; i < 20000; ++i)
      chain += std::string(op) + "x";
    ExprError err;
    EXPECT_EQ(parseExpr(chain, err), nullptr) << op;
    EXPECT_NE(err.message.find("nested more than 256 operations deep"),
              std::string::npos)
        << err.message;
    // Located at the operator that went past the limit: the 256th.
    EXPECT_GT(err.offset, 0u);
    EXPECT_LT(err.offset, 256 * (std::strlen(op) + 1)) << op;
  }
  // Up to the limit parses, and every pass over the tree runs.
  std::string ok = "x";
  for (int i = 1; i < kMaxExprHeight; ++i)
    ok += "+x";
  ExprError err;
  ExprPtr e = parseExpr(ok, err);
  ASSERT_TRUE(e) << err.message;
  EXPECT_EQ(e->height, kMaxExprHeight);
  ExprTypeError terr;
  ElemType t = ElemType::U8;
  ASSERT_TRUE(inferExprType(
      *e,
      [](const std::string &, ElemType &out) {
        out = ElemType::F32;
        return true;
      },
      t, terr))
      << terr.message;
  EXPECT_EQ(t, ElemType::F32);
  EXPECT_EQ(exprVariables(*e).size(), 1u);
  EXPECT_FALSE(e->str().empty());
  ok += "+x";
  EXPECT_EQ(parseExpr(ok, err), nullptr);
}

TEST(Expr, WideExpressionsAreBoundedInSize) {
  // Balanced, so never deep: ((x+x)+(x+x))+... doubling 15 times is 32,768
  // leaves, over the node limit.
  std::string wide = "x";
  for (int i = 0; i < 15; ++i)
    wide = "(" + wide + ")+(" + wide + ")";
  ExprError err;
  EXPECT_EQ(parseExpr(wide, err), nullptr);
  EXPECT_NE(err.message.find("more than 20000 operators and operands"),
            std::string::npos)
      << err.message;
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

struct TypeCase {
  const char *text;
  const char *vars;   // "x:u8 y:f64"
  const char *result; // element type name, or "error: <substring>"
};

void PrintTo(const TypeCase &c, std::ostream *os) {
  *os << '"' << c.text << "\" with " << c.vars;
}

class ExprTypeTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(ExprTypeTest, Infer) {
  const TypeCase &c = GetParam();
  std::map<std::string, ElemType> vars;
  std::string spec = c.vars;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(' ', pos);
    if (end == std::string::npos)
      end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    size_t colon = item.find(':');
    vars[item.substr(0, colon)] = *parseElemType(item.substr(colon + 1));
    pos = end + 1;
  }
  ExprError perr;
  ExprPtr e = parseExpr(c.text, perr);
  ASSERT_NE(e, nullptr) << perr.message;
  ElemType result;
  ExprTypeError err;
  bool ok = inferExprType(
      *e,
      [&](const std::string &n, ElemType &t) {
        auto it = vars.find(n);
        if (it == vars.end())
          return false;
        t = it->second;
        return true;
      },
      result, err);
  std::string expected = c.result;
  if (expected.rfind("error: ", 0) == 0) {
    ASSERT_FALSE(ok) << c.text << " typed as " << elemTypeName(result);
    EXPECT_NE(err.message.find(expected.substr(7)), std::string::npos)
        << err.message;
  } else {
    ASSERT_TRUE(ok) << c.text << ": " << err.message;
    EXPECT_EQ(elemTypeName(result), expected) << c.text;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ExprTypeTest,
    ::testing::Values(
        // The criteo example: float functions keep f32.
        TypeCase{"log(max(x, 0) + 1)", "x:f32", "f32"},
        TypeCase{"log(x)", "x:f64", "f64"}, TypeCase{"log(x)", "x:u8", "f16"},
        TypeCase{"sqrt(x)", "x:i64", "f64"}, TypeCase{"log(x)", "x:f16", "f16"},
        TypeCase{"log(x)", "x:i16", "f32"},
        TypeCase{"x * log(2)", "x:f32", "f32"},
        TypeCase{"pow(x, 2)", "x:f64", "f64"},
        TypeCase{"sigmoid(x) * 2", "x:f32", "f32"},
        // Literals adapt; integer arithmetic keeps the widest integer type.
        TypeCase{"x * 2", "x:u8", "u8"}, TypeCase{"x + 1", "x:i32", "i32"},
        TypeCase{"x + y", "x:u8 y:i8", "i16"},
        TypeCase{"x + y", "x:u16 y:i16", "i32"},
        TypeCase{"x + y", "x:u8 y:i32", "i32"},
        TypeCase{"x * y", "x:i16 y:i64", "i64"},
        TypeCase{"x + y", "x:u8 y:u16", "u16"},
        TypeCase{"x % 3", "x:i64", "i64"}, TypeCase{"1 + 2", "", "i64"},
        TypeCase{"1.5 * 2", "", "f64"}, TypeCase{"x // 2", "x:i8", "i8"},
        TypeCase{"x // 2.0", "x:f16", "f16"}, TypeCase{"x + 255", "x:u8", "u8"},
        TypeCase{"x + 256", "x:u8",
                 "error: the integer 256 does not fit in u8"},
        TypeCase{"x - -1", "x:u8", "error: the integer -1 does not fit in u8"},
        TypeCase{"x < 300", "x:u8", "bool"},
        TypeCase{"x + (300 - 299)", "x:u8", "u8"},
        TypeCase{"x * log(0)", "x:f32", "error: math domain error"},
        TypeCase{"x + 1 / 0", "x:f32", "error: division by zero"},
        // Mixed int/float and float widths.
        TypeCase{"x * 0.5", "x:u8", "f64"}, TypeCase{"x * 0.5", "x:f16", "f16"},
        TypeCase{"x + y", "x:i64 y:f32", "f64"},
        TypeCase{"x + y", "x:i16 y:f32", "f32"},
        TypeCase{"x + y", "x:u8 y:f16", "f16"},
        TypeCase{"x + y", "x:i16 y:f16", "f32"},
        TypeCase{"x + y", "x:f16 y:f16", "f16"},
        TypeCase{"x + y", "x:f16 y:i8", "f16"},
        TypeCase{"x + y", "x:f32 y:f64", "f64"},
        TypeCase{"x * 0.5", "x:f64", "f64"},
        // Division is true division.
        TypeCase{"x / 2", "x:i64", "f64"}, TypeCase{"x / 2", "x:u8", "f64"},
        TypeCase{"x / 2", "x:f32", "f32"},
        TypeCase{"x / y", "x:f64 y:i32", "f64"},
        // Rounding and min/max/abs/clamp keep the type.
        TypeCase{"floor(x)", "x:f32", "f32"},
        TypeCase{"round(x)", "x:i32", "i32"}, TypeCase{"abs(-x)", "x:i8", "i8"},
        TypeCase{"max(x, 0)", "x:u8", "u8"},
        TypeCase{"clamp(x, 0, 255)", "x:i32", "i32"},
        TypeCase{"clamp(x, 0, 1.5)", "x:i32", "f64"},
        TypeCase{"clamp(x, 0, 1.5)", "x:f32", "f32"},
        TypeCase{"pow(x, 2)", "x:i32", "i32"},
        // Comparisons and logic.
        TypeCase{"x > 0", "x:f32", "bool"},
        TypeCase{"label >= 0 and dense < 5", "label:i64 dense:f32", "bool"},
        TypeCase{"not (x == 1)", "x:i64", "bool"},
        TypeCase{"b == true", "b:bool", "bool"},
        TypeCase{"b and x > 1", "b:bool x:u8", "bool"},
        TypeCase{"x > 0 ? x : 0", "x:i16", "i16"},
        TypeCase{"x > 0 ? 1.0 : y", "x:i16 y:f64", "f64"},
        TypeCase{"x > 0 ? 1.0 : 0.0", "x:f32", "f64"},
        TypeCase{"x > 0 ? x : 0.5", "x:f32", "f32"},
        TypeCase{"x > 0 ? true : false", "x:i16", "bool"},
        TypeCase{"f[3] * 2", "f:f32", "f32"},
        // Errors.
        TypeCase{"y + 1", "x:f32", "error: unknown name 'y'"},
        TypeCase{"x + 1", "x:string", "error: 'x' is string"},
        TypeCase{"x > 0 + 1", "x:bytes", "error: 'x' is bytes"},
        TypeCase{"x and 1", "x:bool",
                 "error: 'and' needs conditions (bools), "
                 "but '1' is an integer literal"},
        TypeCase{"not x", "x:f32", "error: 'not' needs a condition"},
        TypeCase{"(x > 0) + 1", "x:f32",
                 "error: '+' needs numbers, but "
                 "'(x > 0)' is a bool"},
        TypeCase{"-(x > 0)", "x:f32", "error: cannot negate a condition"},
        TypeCase{"x ? 1 : 0", "x:f32",
                 "error: the condition before '?' must "
                 "be a bool"},
        TypeCase{"x > 0 ? 1 : x > 1", "x:f32",
                 "error: both be numbers or "
                 "both be bools"},
        TypeCase{"log(x > 0)", "x:f32", "error: 'log' needs numbers"},
        TypeCase{"b < 1", "b:bool", "error: '<' needs numbers"}));

TEST(ExprType, ErrorOffsetPointsAtTheProblem) {
  ExprError perr;
  ExprPtr e = parseExpr("x + (y > 0)", perr);
  ASSERT_NE(e, nullptr);
  ElemType result;
  ExprTypeError err;
  auto lookup = [](const std::string &n, ElemType &t) {
    t = ElemType::F32;
    return n == "x" || n == "y";
  };
  ASSERT_FALSE(inferExprType(*e, lookup, result, err));
  EXPECT_EQ(err.offset, 2u); // the '+'
  e = parseExpr("x + zz", perr);
  ASSERT_FALSE(inferExprType(*e, lookup, result, err));
  EXPECT_EQ(err.offset, 4u); // the unknown name
}

} // namespace
