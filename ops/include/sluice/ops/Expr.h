//===- Expr.h - The expression language of map and filter -------*- C++ -*-===//
//
// `filter: {where: "label >= 0 and dense[0] < 5"}` and
// `map: {field: dense, expr: "log(max(x, 0) + 1)"}` share one small language:
// numbers, identifiers, + - * / // %, comparisons, and/or/not, `c ? a : b`,
// indexing `f[i]` with a constant index, and calls to a fixed set of math
// functions. Parsed once by the front end (errors carry the character offset),
// typed here, interpreted by the runtime (ops/kernels/ExprEval.cpp, the
// reference) and lowered to arith/math by the compiler.
//
// Semantics: numpy 2 with NEP 50 promotion. Every lowering must compute
// exactly this (transcendental functions excepted, see below):
//
// Types. Fields are strong dtypes; number literals are weak ("Python
// numbers"). annotateExprTypes() gives every node its dtype:
//  - strong op strong: numpy's promote_types. Integers: the smallest type
//    holding both (u8+i8 -> i16, u16+i16 -> i32, u8+i64 -> i64). Integer with
//    float: the float if it holds the integer exactly, else wider (f16 holds
//    u8/i8, f32 holds up to u16/i16, i32/i64 need f64): i64+f32 -> f64,
//    u8+f16 -> f16, i16+f16 -> f32. Floats: the wider.
//  - strong T op weak: an integer literal takes T; it must fit when T is an
//    integer type (u8 + 300 is a type error, as numpy 2 raises
//    OverflowError), except in comparisons, which compare the exact values
//    (u8 < 300 is true; numpy 2 does the same). A float literal takes T when
//    T is a float, and makes f64 with an integer T (u8 * 0.5 -> f64).
//    The literal is converted to T first: on f32 x, `x == 0.7` compares x
//    with float32(0.7).
//  - weak op weak: folded at compile time as Python computes it (ints exact,
//    overflow of i64 is an error; floats are doubles; `/` of ints is a
//    float; functions as Python's math module, round() half to even giving
//    an int; a domain error or a division by zero is a type error). The
//    result stays weak. A whole expression that is weak is i64 or f64.
//  - `c ? a : b` promotes a and b like an arithmetic op (two weak branches
//    under a non-constant condition give i64 or f64).
//  - `/` is true division: the promoted type if it is a float, else f64
//    (i32 / i32 -> f64, f16 / i8 -> f16).
//  - exp log log1p sqrt sin cos tanh sigmoid: a float T keeps T; an integer
//    gives the smallest float holding it (u8/i8 -> f16, u16/i16 -> f32,
//    i32/i64 -> f64), numpy's loop choice. pow(a, b) promotes; two integers
//    give an integer power.
//  - abs floor ceil round keep the type; on integers they are the identity
//    (abs wraps: abs(i8 -128) == -128). min max clamp promote.
//  - comparisons give bool; and/or/not need bools.
//
// Values. Each operation runs in its node's dtype: operands are converted
// to the promoted type (exactly, except i64 -> f64 which rounds to nearest),
// the result is rounded to that type (f32/f16 arithmetic is correctly
// rounded, not done in f64 and rounded once at the end).
//  - integers wrap on overflow (u8 200*2 == 144; -x of unsigned wraps).
//  - `%` and `//` floor: the remainder has the sign of the divisor (-7 % 3 ==
//    2, -7 // 3 == -3); floats follow numpy's npy_divmod (x % inf == x for
//    x >= 0, inf for x < 0; x % 0 == NaN). Integer x // 0 == 0 and x % 0 ==
//    0 (numpy returns 0 with a RuntimeWarning); MIN // -1 == MIN (wraps).
//  - round() is half to even (np.round / rint): round(2.5) == 2.
//  - min/max/clamp propagate NaN (np.maximum/np.minimum/np.clip): the first
//    NaN argument is returned as it is (payload kept); equal arguments
//    (-0 vs +0) return the second one, as numpy does on x86.
//  - integer pow wraps; a negative exponent gives 1/b^n truncated toward
//    zero (1 for b == 1, +-1 for b == -1, 0 otherwise) where numpy raises;
//    0^negative is 0.
//  - sigmoid(x) is 1 / (1 + exp(-x)), each step rounded to the node's type.
//  - + - * / sqrt floor ceil round abs min max are exact (bit-equal to
//    numpy). Transcendental functions (exp log1p sin cos tanh sigmoid,
//    pow of floats) are computed with the f64 libm function and rounded to
//    the node's type: for f64 that is numpy's libm result; for f32/f16 it is
//    within the ulp bound the numpy tests state (kernels_expr_numpy_test).
//    log is sluice's own f64 log (ops/kernels/MathImpl.h: fdlibm's
//    algorithm, within 1 ulp of libm's), rounded the same way: the
//    interpreter and the generated kernels share it, so they agree bit for
//    bit while the generated loop stays vectorized.
//  - NaN payloads (so that outputs are byte-identical whatever path or
//    vector width computes them): an operation on one NaN returns it with
//    its payload, quieted (-x and abs() only change its sign bit). When both
//    operands of a binary operation (+ - * / // % pow) are NaN the result is
//    the FIRST operand's NaN, quieted: hardware returns the first source
//    operand, but compilers commute + and *, so an implementation must
//    select explicitly (a != a ? quiet(a) : a op b). min/max/clamp return
//    their first NaN argument, quieted. A NaN made from non-NaN operands
//    (inf - inf, 0 * inf, log(-1)) is the default NaN of x86 and libm
//    (sign bit set). pow(NaN, 0) == 1 and pow(1, NaN) == 1, as libm. f16/f32
//    signaling NaNs are quieted when loaded (widened); an f64 value that no
//    operation touches is stored unchanged.
//  - Comparisons with NaN are false except !=; conditions are bools.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_EXPR_H
#define SLUICE_OPS_EXPR_H

#include "sluice/ops/Types.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
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
    Binary, ///< op: + - * / // % < <= > >= == != and or
    Call,   ///< name(args...), see exprFunctions()
    Cond,   ///< args[0] ? args[1] : args[2]
    Index,  ///< args[0][index]
  };
  Kind kind = Kind::Number;
  double number = 0;
  bool isInt = false;
  int64_t intValue = 0; ///< Number with isInt: the exact value
  std::string name;     ///< Var name, Call function, Unary/Binary operator
  int64_t index = 0;
  std::vector<ExprPtr> args;
  size_t offset = 0; ///< character offset of this node in the source text
  /// Levels of the tree from this node down (a leaf is 1); at most
  /// kMaxExprHeight in a tree parseExpr made.
  int height = 1;

  /// Canonical text, operators fully parenthesized: "log((max(x, 0) + 1))".
  std::string str() const;
};

/// A parse error: what is wrong and where.
struct ExprError {
  size_t offset = 0;
  std::string message;
};

/// Bounds parseExpr puts on the tree it returns, so that every recursive
/// walk over it (type inference, evaluation, code generation, printing) has
/// a bounded depth: the height counts operators of a flat chain too, not
/// only brackets.
inline constexpr int kMaxExprHeight = 256;
inline constexpr size_t kMaxExprNodes = 20000;

/// Parses `text`. On failure returns null and fills `err`; a tree higher
/// than kMaxExprHeight or larger than kMaxExprNodes is an error.
ExprPtr parseExpr(std::string_view text, ExprError &err);

/// Names of the callable functions with their arity, e.g. {"log", 1}.
struct ExprFunction {
  std::string_view name;
  int arity;
};
const std::vector<ExprFunction> &exprFunctions();

/// Identifiers an expression reads (each once, in order of appearance).
std::vector<std::string> exprVariables(const Expr &e);

struct ExprTypeError {
  size_t offset = 0;
  std::string message;
};

/// The type of one node (see the rules at the top of this file).
struct ExprNodeType {
  /// The node's dtype. A weak node's is I64 (a Python int) or F64 (a Python
  /// float); a constant condition's is Bool.
  ElemType elem = ElemType::F64;
  /// A number literal, or a subexpression of literals only ("Python number").
  bool weak = false;
  /// The value is known at compile time: weak nodes and comparisons/logic of
  /// literals. `ival` holds integers and bools, `fval` floats.
  bool isConst = false;
  int64_t ival = 0;
  double fval = 0;
};

/// Types every node of `e` given the element types of its variables, with
/// the NEP 50 rules above, folding the literal-only subexpressions. `lookup`
/// returns false for unknown names. On failure returns false and fills err.
using ExprTypes = std::unordered_map<const Expr *, ExprNodeType>;
bool annotateExprTypes(
    const Expr &e,
    const std::function<bool(const std::string &, ElemType &)> &lookup,
    ExprTypes &types, ExprTypeError &err);

/// The dtype of `e`'s result (a weak result materializes as i64 or f64).
bool inferExprType(
    const Expr &e,
    const std::function<bool(const std::string &, ElemType &)> &lookup,
    ElemType &result, ExprTypeError &err);

/// Helpers of the rules above, for the interpreter and the code generator.
/// numpy's promote_types of two numeric, non-bool dtypes.
ElemType promoteElemTypes(ElemType a, ElemType b);
/// The float type numpy's math ufuncs compute an integer type in (u8 -> f16).
ElemType mathFloatType(ElemType t);

} // namespace sluice

#endif // SLUICE_OPS_EXPR_H
