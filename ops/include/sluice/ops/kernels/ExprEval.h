//===- ExprEval.h - Interpreter for map and filter expressions --*- C++ -*-===//
//
// The runtime's (unfused) evaluator of the Expr language of map/filter. An
// AST is compiled once into flat, typed register bytecode; evaluation runs
// each instruction over a chunk of up to 256 elements, so the dispatch is
// paid once per chunk and the per-op loops are plain array loops. Names are
// resolved to slots at compile time: no string work per element.
//
// Semantics: numpy 2 with NEP 50, written down in sluice/ops/Expr.h (this
// interpreter is the reference the compiled kernels are tested against).
// Every node is typed by annotateExprTypes(); an integer node lives in an
// int64 register holding a value of its dtype (WrapI truncates after + - *
// neg abs pow //), a float node in a double register holding a value of its
// dtype (NarrowF rounds f32/f16 results after every operation, which for
// + - * / sqrt is exactly IEEE f32/f16 arithmetic). Literal-only
// subexpressions are folded by the type inference and arrive as constants
// already converted to the type they meet.
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
  /// filter on records held as columns: `columns[f]` holds field f of
  /// record i in row i ([rows, ...field shape]); tests the `n` rows listed
  /// in `rows` (null: rows 0..n-1) and sets keep[j] to 1 or 0, exactly as
  /// test() on each record.
  Status testRows(const std::vector<Tensor> &columns, const uint32_t *rows,
                  int64_t n, uint8_t *keep) const;

  /// The bytecode, one instruction per line (for `sluice explain` and tests).
  std::string dump() const;

  /// Instruction set; I = int64 registers, F = double registers. WrapI and
  /// NarrowF bring a register to `type` (see the file comment).
  enum class Op : uint8_t {
    ConstI,
    ConstF,
    LoadI,
    LoadF,
    CvtIF,
    WrapI,
    NarrowF,
    NegI,
    AbsI,
    AddI,
    SubI,
    MulI,
    FloorDivI,
    ModI,
    PowI,
    MinI,
    MaxI,
    NegF,
    AbsF,
    AddF,
    SubF,
    MulF,
    DivF,
    FloorDivF,
    ModF,
    PowF,
    MinF,
    MaxF,
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
    NotI,
    AndI,
    OrI,
    SelectI,
    SelectF,
    FloorF,
    CeilF,
    RintF,
    ExpF,
    LogF,
    Log1pF,
    SqrtF,
    SinF,
    CosF,
    TanhF,
  };
  struct Instr {
    Op op;
    int32_t dst = 0, a = 0, b = 0, c = 0; ///< register numbers / load slot
    ElemType type = ElemType::F64; ///< WrapI/NarrowF: the target; ModF and
                                   ///< FloorDivF: the precision (f64/f32)
    int64_t imm = 0;               ///< ConstI
    double fimm = 0;               ///< ConstF
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
