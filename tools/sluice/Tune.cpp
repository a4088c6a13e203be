//===- Tune.cpp - `sluice tune` and `schedule: auto` for `sluice run` -----===//
//
// The driver's side of the autotuner: flags, spec and plan, then
// autotune::tune() and its writers. The autotuner itself lives in autotune/
// (MLIR-free); this file only wires it up, so runtime/ never depends on it.
//
//===----------------------------------------------------------------------===//
#include "Tune.h"

#include "sluice/autotune/Tune.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Memory.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace sluice::tools {

namespace {

constexpr const char *kTuneUsage =
    R"(usage: sluice tune SPEC [--cores N] [--memory SIZE] [--report DIR]
                   [--check BASELINE.json [--tolerance P%]] [--seconds S]
                   [--disable-pass NAME] [--quiet]

Profiles the pipeline briefly, models each stage's capacity, solves for the
parallelism, prefetch depths and cache that maximize throughput within the
core and memory budgets, runs the chosen schedule and compares.

  --cores N        plan for N cores (default: budget.cores, else this host);
                   more than this host has plans for another machine
  --memory SIZE    memory budget (default: budget.memory)
  --report DIR     write schedule.yaml, report.json, report.md, chart.svg
  --check FILE     compare with a baseline report.json: exit 1 when the
                   throughput fell by more than the tolerance, the bottleneck
                   moved, or a budget would be broken
  --tolerance P    allowed throughput drop for --check (default 10%)
  --seconds S      seconds per profiling probe (default 1.5)
)";

int usage(const std::string &msg) {
  std::cerr << "sluice: error: " << msg << "\n"
            << "run 'sluice tune --help' for usage\n";
  return 2;
}

bool colorStderr() {
  const char *noColor = std::getenv("NO_COLOR");
  return isatty(2) && !(noColor && *noColor);
}

std::map<std::string, std::string> specWhere(const dsl::Spec &spec) {
  std::map<std::string, std::string> m;
  auto add = [&](const dsl::Step &s) {
    m[s.name] = spec.file + ":" + std::to_string(s.loc.line) + ":" +
                std::to_string(s.loc.col);
  };
  add(spec.source);
  for (const dsl::Step &s : spec.steps)
    add(s);
  return m;
}

} // namespace

int cmdTune(int argc, char **argv) {
  std::string specPath, reportDir, checkPath;
  int64_t cores = 0, memory = 0;
  double tolerance = 0.10, seconds = 1.5;
  bool quiet = false;
  compiler::PlanOptions planOpts;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "-h" || a == "--help") {
      std::cout << kTuneUsage;
      return 0;
    }
    if (a == "--quiet" || a == "-q") {
      quiet = true;
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        v = a.substr(eq + 1);
        a = a.substr(0, eq);
      } else if (i + 1 < argc) {
        v = argv[++i];
      } else {
        return usage("option '" + a + "' needs a value");
      }
      if (a == "--cores") {
        char *end = nullptr;
        errno = 0;
        long long n = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end || errno || n < 1 || n > 4096)
          return usage("'--cores' needs an integer from 1 to 4096, got '" + v +
                       "'");
        cores = n;
      } else if (a == "--memory") {
        auto b = parseByteSize(v);
        if (!b || *b <= 0)
          return usage("'--memory' needs a size such as 512MiB or 4GiB, got '" +
                       v + "'");
        memory = *b;
      } else if (a == "--report") {
        reportDir = v;
      } else if (a == "--check") {
        checkPath = v;
      } else if (a == "--tolerance") {
        std::string t = v;
        bool pct = !t.empty() && t.back() == '%';
        if (pct)
          t.pop_back();
        char *end = nullptr;
        double d = std::strtod(t.c_str(), &end);
        if (t.empty() || *end || !(d >= 0) || (!pct && d > 1 && d > 100))
          return usage("'--tolerance' needs a percentage such as 10% (or a "
                       "fraction such as 0.1), got '" + v + "'");
        tolerance = pct || d > 1 ? d / 100 : d;
      } else if (a == "--seconds") {
        char *end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !(d > 0) || d > 600)
          return usage("'--seconds' needs a number of seconds (0-600], got '" +
                       v + "'");
        seconds = d;
      } else if (a == "--disable-pass") {
        planOpts.disabledPasses.push_back(v);
      } else {
        std::string m = closestMatch(
            a, {"--cores", "--memory", "--report", "--check", "--tolerance",
                "--seconds", "--disable-pass", "--quiet"});
        return usage("unknown option '" + a + "'" +
                     (m.empty() ? "" : "; did you mean '" + m + "'?"));
      }
      continue;
    }
    if (!specPath.empty())
      return usage("'sluice tune' takes exactly one SPEC file");
    specPath = a;
  }
  if (specPath.empty())
    return usage("'sluice tune' needs a SPEC file");

  // The baseline is read first: a typo in its path should not cost a tune.
  nlohmann::json baseline;
  if (!checkPath.empty()) {
    std::ifstream f(checkPath);
    if (!f) {
      std::cerr << "sluice: error: cannot read the baseline '" << checkPath
                << "'\n";
      return 2;
    }
    try {
      f >> baseline;
    } catch (const std::exception &e) {
      std::cerr << "sluice: error: " << checkPath
                << ": not a JSON report: " << e.what() << "\n";
      return 2;
    }
  }

  std::string text, err;
  if (!dsl::readFile(specPath, text, err)) {
    std::cerr << "sluice: error: " << err << "\n";
    return 2;
  }
  dsl::DiagnosticEngine diags(specPath, std::move(text));
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  diags.print(std::cerr, colorStderr());
  if (!spec)
    return 2;
  if (Status s = compiler::checkPassNames(planOpts.disabledPasses); !s)
    return usage(s.message());
  Expected<runtime::Plan> plan = compiler::buildPlan(*spec, planOpts, std::cerr);
  if (!plan) {
    if (!plan.status().message().empty())
      std::cerr << "sluice: error: " << plan.status().message() << "\n";
    return 1;
  }

  autotune::TuneOptions opts;
  opts.cores = cores;
  opts.memoryBytes = memory;
  opts.profile.secondsPerProbe = seconds;
  opts.profile.specWhere = specWhere(*spec);
  opts.verifySeconds = std::max(1.0, seconds * 1.5);
  if (!quiet)
    std::cerr << "sluice tune: profiling " << plan->name << "...\n";
  Expected<autotune::TuneResult> r = autotune::tune(*plan, opts);
  if (!r) {
    std::cerr << "sluice: error: " << r.status().message() << "\n";
    return 1;
  }
  nlohmann::json report = autotune::reportJson(*r);
  if (!reportDir.empty()) {
    if (Status s = autotune::writeReports(*r, reportDir); !s) {
      std::cerr << "sluice: error: " << s.message() << "\n";
      return 1;
    }
  }
  if (!quiet) {
    const autotune::Prediction &pr = r->solution.prediction;
    std::cout << "pipeline " << r->profile.pipeline << ": predicted "
              << std::llround(pr.throughput) << " records/s";
    if (r->measured)
      std::cout << ", measured " << std::llround(r->measured->sourceRecordsPerSecond)
                << " records/s";
    std::cout << "; bottleneck " << pr.bottleneckLabel << "\n"
              << r->scaleAdvice << "\n\n"
              << autotune::scheduleYaml(*r);
    if (!reportDir.empty())
      std::cout << "\nreports in " << reportDir
                << "/: schedule.yaml report.json report.md chart.svg\n";
  }
  if (!checkPath.empty()) {
    autotune::CheckResult c = autotune::check(baseline, report, tolerance);
    std::cout << "\ncheck against " << checkPath << ":\n" << c.text;
    if (!c.ok) {
      std::cout << "check FAILED\n";
      return 1;
    }
    std::cout << "check passed\n";
  }
  return 0;
}

int applyAutoSchedule(const runtime::Plan &plan, runtime::RunOptions &opts,
                      std::ostream &out, std::ostream &err) {
  const char *off = std::getenv("SLUICE_NO_AUTOTUNE");
  if (off && *off && std::string(off) != "0")
    return -1;
  autotune::TuneOptions t;
  t.profile.base = opts;
  t.profile.secondsPerProbe = 0.6;
  t.profile.base.sink = "null";
  t.profile.base.statsJsonPath.clear();
  t.memoryBytes = opts.memoryBytes;
  if (opts.threads > 0)
    t.cores = std::min<int64_t>(opts.threads, autotune::hostCores());
  Expected<autotune::AutoSchedule> a = autotune::autoSchedule(plan, t);
  if (!a) {
    err << "sluice: error: schedule: auto: " << a.status().message() << "\n";
    return 1;
  }
  for (const auto &[name, o] : a->schedule)
    opts.schedule[name] = o;
  if (opts.stats)
    out << a->explanation << "\n";
  return -1;
}

} // namespace sluice::tools
