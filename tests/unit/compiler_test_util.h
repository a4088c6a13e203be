//===- compiler_test_util.h - Spec -> Plan and Criteo data for unit tests -===//
//
// The compiler tests that run whole pipelines all need the same two things:
// a spec file turned into a runtime Plan through the front end and the graph
// passes (with some passes disabled), and a Criteo-style TSV day file.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TESTS_UNIT_COMPILER_TEST_UTIL_H
#define SLUICE_TESTS_UNIT_COMPILER_TEST_UTIL_H

#include "sluice/compiler/Compiler.h"
#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::testing {

/// The Plan of the spec at `path`, built without the graph passes named in
/// `disabled`. Spec or compile errors fail the test (and give an empty Plan).
inline runtime::Plan planOfSpecFile(const std::string &path,
                                    std::vector<std::string> disabled = {},
                                    bool codegen = false) {
  std::string text, error;
  EXPECT_TRUE(dsl::readFile(path, text, error)) << error;
  dsl::DiagnosticEngine diags(path, text);
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  std::ostringstream printed;
  diags.print(printed);
  EXPECT_TRUE(spec) << printed.str();
  if (!spec)
    return runtime::Plan();
  compiler::PlanOptions opts;
  opts.disabledPasses = std::move(disabled);
  opts.codegen = codegen;
  std::ostringstream err;
  Expected<runtime::Plan> plan = compiler::buildPlan(*spec, opts, err);
  EXPECT_TRUE(bool(plan)) << (plan ? "" : plan.status().message()) << "\n"
                          << err.str();
  return plan ? plan.take() : runtime::Plan();
}

/// A Criteo-style day file: label (-1 .. 5; -1 is for filters), 13
/// integer-valued dense columns with empty cells and negatives, 26 hex32
/// categorical columns with empty cells.
inline std::string criteoTsv(uint32_t seed, int rows) {
  std::mt19937 rng(seed);
  std::string out;
  char hex[16];
  for (int r = 0; r < rows; ++r) {
    out += std::to_string(static_cast<int>(rng() % 7) - 1);
    for (int i = 0; i < 13; ++i) {
      out += '\t';
      uint32_t roll = rng() % 10;
      if (roll == 0)
        continue; // missing
      int64_t v = static_cast<int64_t>(rng() % 100000) - (roll == 1 ? 100 : 0);
      out += std::to_string(roll == 2 ? v % 10 : v);
    }
    for (int i = 0; i < 26; ++i) {
      out += '\t';
      if (rng() % 12 == 0)
        continue;
      std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(rng()));
      out += hex;
    }
    out += '\n';
  }
  return out;
}

} // namespace sluice::testing

#endif // SLUICE_TESTS_UNIT_COMPILER_TEST_UTIL_H
