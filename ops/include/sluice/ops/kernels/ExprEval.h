//===- ExprEval.h - Interpreter for map and filter expressions --*- C++ -*-===//
//
// The runtime's (unfused) evaluator of the Expr language of map/filter. An
// AST is compiled once into flat, typed register bytecode; evaluation runs
// each instruction over a chunk of up to 256 elements, so the dispatch is
// paid once per chunk and the per-op loops are plain array loops. Names are
// resolved to slots at compile time: no string work per element.
//
// Semantics (the compiler's fused lowering should match them):
//  - Every node is integer (exact int64) or float (double). Integer
//    literals, integer/bool fields, comparisons and logic are integer;
//    `/` is true division (always float, as in Python); + - * % and
//    min/max/clamp/abs of integers stay integer (two's-complement wrap on
//    overflow); floor/ceil/round of an integer are the integer; any other
//    function is float. Mixed integer/float operands are converted to double.
//  - Integer literals are exact up to 2^53: the AST (Expr::number) carries
//    them as doubles. Integer fields are read exactly.
//  - Integer `%` truncates like C (-7 % 3 == -1); x % 0 == 0 (no trap).
//    Float `%` is fmod.
//  - log() is sluice::math::log (MathImpl.h: fdlibm's algorithm, < 1 ulp,
//    shared with generated kernels so both round alike); the other
//    functions are the C library's.
//  - round() rounds half away from zero (std::round, math.round);
//    sigmoid(x) = 1 / (1 + exp(-x)); min/max/clamp propagate NaN.
//  - Logic treats non-zero as true and yields 0/1; `c ? a : b` evaluates
//    both branches (they have no side effects).
//  - The result is converted once, at the end, to resultType() (from
//    inferExprType) with Scalar.h's saturating rules, so f32 results are
//    computed in double and rounded once.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_EXPREVAL_H
#define SLUICE_OPS_KERNELS_EXPREVAL_H

#include "sluice/ops/Expr.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Types.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {
namespace kernels {

/// An expression compiled for repeated evaluation. Immutable after
/// compilation: one instance may be used by many threads at once.
class CompiledExpr {
public:
  /// map: the expression's only variable is `x`, one element of a field of
  /// element type `inElem`. The result type is inferred (inferExprType).
  static Expected<CompiledExpr> compileMap(const Expr &expr, ElemType inElem);

  /// filter: variables are fields of `type`; a field must be a scalar, or
  /// be indexed with a constant (`dense[3]`, an index into its flattened
  /// elements, checked here when the shape is static, else per record).
  static Expected<CompiledExpr> compileRecord(const Expr &expr,
                                              const RecordType &type);

  /// Element type of the result.
  ElemType resultType() const { return result_; }

  /// map: applies the expression to every element of `input` (whose element
  /// type must be the one compiled for); same shape, type resultType().
  Expected<Tensor> map(const Tensor &input) const;

  /// filter: evaluates on one record (fields in the compiled RecordType's
  /// order); true when the result is non-zero. Fails only when an index is
  /// out of range for a dynamically shaped field.
  Expected<bool> test(const Record &record) const;
  /// The value on one record, as a double.
  Expected<double> evalRecord(const Record &record) const;

  /// The bytecode, one instruction per line (for `sluice explain` and tests).
  std::string dump() const;


  /// Instruction set; I = int64 registers, F = double registers.
  enum class Op : uint8_t {
    ConstI,
    ConstF,
    LoadI,
    LoadF,
    CvtIF,
    NegI,
    NegF,
    NotI,
    TruthF,
    AddI,
    SubI,
    MulI,
    ModI,
    MinI,
    MaxI,
    AbsI,
    AddF,
    SubF,
    MulF,
    DivF,
    ModF,
    MinF,
    MaxF,
    AbsF,
    PowF,
    LtI,
    LeI,
    GtI,
    GeI,
    EqI,
    NeI,
    LtF,
    LeF,
    GtF,
    GeF,
    EqF,
    NeF,
    AndI,
    OrI,
    SelectI,
    SelectF,
    FloorF,
    CeilF,
    RoundF,
    ExpF,
    LogF,
    Log1pF,
    SqrtF,
    SinF,
    CosF,
    TanhF,
    SigmoidF,
  };
  struct Instr {
    Op op;
    int32_t dst = 0, a = 0, b = 0, c = 0; ///< register numbers / load slot
    int64_t imm = 0;                      ///< ConstI
    double fimm = 0;                      ///< ConstF
  };
  /// A value read from the input: the map element, or field[index].
  struct Slot {
    int32_t field = -1; ///< -1: the map element x
    int64_t index = 0;  ///< flattened element index within the field
    bool indexed = false;
    ElemType elem = ElemType::F64;
    std::string name;
  };

  // The compiled program, for the code generator (compiler/lib/Codegen): it
  // lowers the bytecode instruction by instruction, so generated kernels
  // compute exactly what run() computes.
  const std::vector<Instr> &code() const { return code_; }
  const std::vector<Slot> &slots() const { return slots_; }
  int32_t resultRegister() const { return resultReg_; }
  bool resultIsInt() const { return resultIsInt_; }
  /// map: the element type the expression was compiled for.
  ElemType inputType() const { return inElem_; }

private:
  template <typename Load>
  void run(int64_t len, const Load &load, std::vector<int64_t> &iregs,
           std::vector<double> &fregs) const;
  Expected<double> evalScalar(const Record &record, bool &isInt,
                              int64_t &ival) const;

  std::vector<Instr> code_;
  std::vector<Slot> slots_;
  int32_t numI_ = 0, numF_ = 0;
  int32_t resultReg_ = 0;
  bool resultIsInt_ = false;
  ElemType result_ = ElemType::F32;
  ElemType inElem_ = ElemType::F32; ///< map only
  bool isMap_ = false;
  friend class ExprCompiler;
};

} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_EXPREVAL_H
