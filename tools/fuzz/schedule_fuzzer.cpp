//===- schedule_fuzzer.cpp - libFuzzer target for --schedule files --------===//
//
// Schedule files are written by `sluice tune` and edited by hand: any text
// must either apply to the spec or give located errors, no crash or hang.
//
//===----------------------------------------------------------------------===//
#include "sluice/dsl/Spec.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

using namespace sluice;

namespace {

const dsl::Spec &theSpec() {
  static std::unique_ptr<dsl::Spec> spec = [] {
    std::string yaml =
        "pipeline: s\nsource:\n  csv: {files: '*.csv', columns: [{name: x, "
        "type: f32}]}\nsteps:\n  - filter: \"x > 0\"\n"
        "  - map: {field: x, expr: \"x * 2\"}\n  - shuffle: 16\n"
        "  - batch: 4\n";
    dsl::DiagnosticEngine diags("spec.yaml", yaml);
    auto s = dsl::parseSpec(diags);
    if (!s)
      std::abort();
    return s;
  }();
  return *spec;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  dsl::DiagnosticEngine diags("schedule.yaml", text);
  std::map<std::string, dsl::StepSchedule> sched;
  bool ok = dsl::parseScheduleFile(diags, theSpec(), sched);
  std::ostringstream os;
  diags.print(os);
  if (!ok && os.str().find("error:") == std::string::npos)
    std::abort();
  return 0;
}
