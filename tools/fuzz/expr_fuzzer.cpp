//===- expr_fuzzer.cpp - libFuzzer target for the expression parser -------===//
//
// `map`/`filter` expressions come from specs people write and share: any
// text must parse or give an error with a position, and a parsed
// expression must type-check or say why, without crashing.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Expr.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace sluice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  std::string text(reinterpret_cast<const char *>(data), size);
  ExprError err;
  ExprPtr e = parseExpr(text, err);
  if (!e && err.message.empty())
    std::abort();
  if (e)
    (void)exprVariables(*e);
  return 0;
}
