//===- spec_fuzzer.cpp - libFuzzer target for the YAML front end ----------===//
//
// Any byte string must yield either a checked spec or diagnostics: no crash,
// no hang, no uncaught exception, and a rendered error for every failure.
//
//===----------------------------------------------------------------------===//
#include "sluice/dsl/Spec.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  sluice::dsl::DiagnosticEngine diags("fuzz.yaml", text);
  std::unique_ptr<sluice::dsl::Spec> spec = sluice::dsl::parseSpec(diags);
  std::ostringstream os;
  diags.print(os);
  // A failed parse must say why; a successful one must render.
  if (!spec && os.str().find("error:") == std::string::npos)
    std::abort();
  if (spec)
    (void)sluice::dsl::renderTypedSteps(*spec);
  return 0;
}
