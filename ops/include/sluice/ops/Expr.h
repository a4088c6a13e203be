//===- Expr.h - The expression language of map and filter -------*- C++ -*-===//
//
// `filter: {where: "label >= 0 and dense[0] < 5"}` and
// `map: {field: dense, expr: "log(max(x, 0) + 1)"}` share one small language:
// numbers, identifiers, + - * / %, comparisons, and/or/not, `c ? a : b`,
// indexing `f[i]` with a constant index, and calls to a fixed set of math
// functions. Parsed once by the front end (errors carry the character offset),
// interpreted by the runtime, and lowered to arith/math by the compiler.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_EXPR_H
#define SLUICE_OPS_EXPR_H

#include "sluice/ops/Types.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

/// One node of an expression.
struct Expr {
  enum class Kind {
    Number, ///< literal; isInt tells 3 from 3.0
    Var,    ///< identifier: a field name (filter) or `x` (map)
    Unary,  ///< op: "-", "not"
    Binary, ///< op: + - * / % < <= > >= == != and or
    Call,   ///< name(args...), see exprFunctions()
    Cond,   ///< args[0] ? args[1] : args[2]
    Index,  ///< args[0][index]
  };
  Kind kind = Kind::Number;
  double number = 0;
  bool isInt = false;
  std::string name; ///< Var name, Call function, Unary/Binary operator
  int64_t index = 0;
  std::vector<ExprPtr> args;
  size_t offset = 0; ///< character offset of this node in the source text

  /// Canonical text, operators fully parenthesized: "log((max(x, 0) + 1))".
  std::string str() const;
};

/// A parse error: what is wrong and where.
struct ExprError {
  size_t offset = 0;
  std::string message;
};

/// Parses `text`. On failure returns null and fills `err`.
ExprPtr parseExpr(std::string_view text, ExprError &err);

/// Names of the callable functions with their arity, e.g. {"log", 1}.
struct ExprFunction {
  std::string_view name;
  int arity;
};
const std::vector<ExprFunction> &exprFunctions();

/// Identifiers an expression reads (each once, in order of appearance).
std::vector<std::string> exprVariables(const Expr &e);

/// Result element type of `e` given the element types of its variables:
/// comparisons and logic give Bool, float functions give F32 (F64 if an
/// input is F64), integer arithmetic keeps the widest integer type.
/// `lookup` returns false for unknown names.
struct ExprTypeError {
  size_t offset = 0;
  std::string message;
};
bool inferExprType(const Expr &e,
                   const std::function<bool(const std::string &, ElemType &)> &lookup,
                   ElemType &result, ExprTypeError &err);

} // namespace sluice

#endif // SLUICE_OPS_EXPR_H
