//===- exprsize_fuzzer.cpp - libFuzzer target for expression size ---------===//
//
// expr_fuzzer sees inputs of a few KiB, too short to reach the bounds on an
// expression's tree (its height and node count, sluice/ops/Expr.h) that keep
// every recursive pass from exhausting the stack. This target makes large
// expressions out of small inputs: the first two bytes are a repeat count N
// (little-endian), the rest is HEAD '\0' UNIT, and the expression is HEAD
// followed by UNIT repeated N times ("x" + "+x" * 20000). Whatever parses
// is then run through every pass over the tree: type inference, the
// interpreter (compiled and evaluated on a few elements), str() and
// exprVariables().
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/ExprEval.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3 || size > 512)
    return 0;
  size_t repeat = data[0] | (size_t(data[1]) << 8);
  std::string rest(reinterpret_cast<const char *>(data + 2), size - 2);
  size_t cut = rest.find('\0');
  std::string head = cut == std::string::npos ? rest : rest.substr(0, cut);
  std::string unit = cut == std::string::npos ? "" : rest.substr(cut + 1);
  // At most ~1 MiB of text: past the node bound whatever the unit.
  if (unit.size() * repeat > (1 << 20))
    repeat = (1 << 20) / (unit.size() + 1);
  std::string text = head;
  text.reserve(head.size() + unit.size() * repeat);
  for (size_t i = 0; i < repeat; ++i)
    text += unit;
  ExprError err;
  ExprPtr e = parseExpr(text, err);
  if (!e) {
    if (err.message.empty() || err.offset > text.size())
      std::abort();
    return 0;
  }
  if (e->height > kMaxExprHeight)
    std::abort();
  (void)exprVariables(*e);
  (void)e->str();
  ExprTypeError terr;
  ElemType t;
  (void)inferExprType(
      *e,
      [](const std::string &, ElemType &out) {
        out = ElemType::F32;
        return true;
      },
      t, terr);
  Expected<kernels::CompiledExpr> c =
      kernels::CompiledExpr::compileMap(*e, ElemType::F32);
  if (c) {
    Tensor in = Tensor::zeros(ElemType::F32, {4});
    (void)c->map(in);
  }
  return 0;
}
