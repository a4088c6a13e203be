//===- Tune.cpp - `sluice tune`
//--------------------------------------------===//
//
// The driver's side of the autotuner: flags, baseline and consumer files,
// then sluice::Pipeline::tune() and autotune's writers. The autotuner itself
// lives in autotune/ (MLIR-free); this file only wires it up, so runtime/ never
// depends on it.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include "sluice/autotune/Tune.h"
#include "sluice/dsl/Spec.h"
#include "sluice/ops/ConfigFile.h"
#include "sluice/ops/Registry.h"
#include "sluice/runtime/Memory.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>

namespace sluice::tool {

namespace {

struct TuneFlags {
  std::vector<std::string> specs;
  std::string cores, memory, report, check, tolerance = "10%", seconds = "1.5";
  std::string consumer;
  std::string demand, workerCores, receiveCost;
  std::vector<std::string> disabledPasses;
  bool quiet = false;
  bool noJit = false;
};

int runTune(const TuneFlags &f) {
  if (!checkOneSpec(f.specs, "tune"))
    return kExitUsage;
  int64_t cores = 0, memory = 0;
  double tolerance = 0.10, seconds = 1.5;
  if (!f.cores.empty()) {
    if (!parseIntFlag("--cores", f.cores, 1, cores, "tune"))
      return kExitUsage;
    if (cores > 4096)
      return usageError("'--cores' needs an integer from 1 to 4096, got '" +
                            f.cores + "'",
                        "tune");
  }
  if (!f.memory.empty()) {
    auto b = parseByteSize(f.memory);
    if (!b || *b <= 0)
      return usageError(
          "'--memory' needs a size such as 512MiB or 4GiB, got '" + f.memory +
              "'",
          "tune");
    memory = *b;
  }
  {
    std::string t = f.tolerance;
    bool pct = !t.empty() && t.back() == '%';
    if (pct)
      t.pop_back();
    char *end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (t.empty() || *end || !(d >= 0) || d > 100)
      return usageError("'--tolerance' needs a percentage such as 10% (or a "
                        "fraction such as 0.1), got '" +
                            f.tolerance + "'",
                        "tune");
    tolerance = pct || d > 1 ? d / 100 : d;
  }
  {
    char *end = nullptr;
    double d = std::strtod(f.seconds.c_str(), &end);
    if (f.seconds.empty() || *end || !(d > 0) || d > 600)
      return usageError("'--seconds' needs a number of seconds (0-600], got '" +
                            f.seconds + "'",
                        "tune");
    seconds = d;
  }
  double demand = 0;
  if (!f.demand.empty()) {
    std::string t = f.demand;
    if (t.size() > 2 && t.compare(t.size() - 2, 2, "/s") == 0)
      t.resize(t.size() - 2);
    char *end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (t.empty() || *end || !(d > 0) || !std::isfinite(d))
      return usageError("'--demand' needs the records per second the trainer "
                        "takes, e.g. 13600 or 13600/s, got '" +
                            f.demand + "'",
                        "tune");
    demand = d;
  }
  int64_t workerCores = 0;
  if (!f.workerCores.empty() &&
      !parseIntFlag("--worker-cores", f.workerCores, 1, workerCores, "tune"))
    return kExitUsage;
  // Negative: modelled on this host (autotune::receiveSecondsPerByte).
  double receiveCost = -1;
  if (!f.receiveCost.empty()) {
    char *end = nullptr;
    double d = std::strtod(f.receiveCost.c_str(), &end);
    if (*end || !(d >= 0) || !std::isfinite(d))
      return usageError("'--receive-cost' needs the trainer's CPU "
                        "nanoseconds per byte received, e.g. 0.5 (0: free), "
                        "got '" +
                            f.receiveCost + "'",
                        "tune");
    receiveCost = d * 1e-9;
  }
  const std::string &checkPath = f.check;
  const std::string &reportDir = f.report;
  bool quiet = f.quiet;

  // The baseline is read first: a typo in its path should not cost a tune.
  nlohmann::json baseline;
  if (!checkPath.empty()) {
    std::string text;
    if (Status s = readConfigFile(checkPath, "a baseline report",
                                  size_t(64) << 20, text);
        !s) {
      std::cerr << "sluice: error: cannot read the baseline: " << s.message()
                << "\n";
      return kExitUsage;
    }
    try {
      baseline = nlohmann::json::parse(text);
    } catch (const std::exception &e) {
      std::cerr << "sluice: error: " << checkPath
                << ": not a JSON report: " << e.what() << "\n";
      return kExitUsage;
    }
    if (Status s = autotune::validateBaseline(baseline); !s) {
      std::cerr << "sluice: error: " << checkPath
                << ": not a sluice tune report.json this sluice can compare "
                   "with: "
                << s.message()
                << "\nmake a baseline with `sluice tune SPEC --report DIR` "
                   "(DIR/report.json)\n";
      return kExitUsage;
    }
  }

  // The consumer run, also read first.
  nlohmann::json consumerJson;
  if (!f.consumer.empty()) {
    std::string text;
    if (Status s =
            readConfigFile(f.consumer, "a stats file", size_t(64) << 20, text);
        !s) {
      std::cerr << "sluice: error: cannot read --consumer: " << s.message()
                << "\n";
      return kExitUsage;
    }
    try {
      consumerJson = nlohmann::json::parse(text);
    } catch (const std::exception &e) {
      std::cerr << "sluice: error: " << f.consumer
                << ": not a JSON stats file: " << e.what() << "\n";
      return kExitUsage;
    }
    auto isNum = [](const nlohmann::json &o, const char *k) {
      return o.is_object() && o.contains(k) && o[k].is_number();
    };
    const nlohmann::json *c =
        consumerJson.is_object() && consumerJson.contains("consumer")
            ? &consumerJson["consumer"]
            : nullptr;
    bool ok = c && isNum(consumerJson, "outputs") &&
              isNum(consumerJson, "records") &&
              consumerJson.contains("pipeline") &&
              consumerJson["pipeline"].is_string();
    for (const char *k :
         {"outputs", "stalls", "wait_seconds", "away_seconds",
          "headspace_seconds", "max_wait_seconds", "first_wait_seconds"})
      ok = ok && isNum(*c, k);
    if (!ok) {
      std::cerr << "sluice: error: " << f.consumer
                << ": not the stats of a run with a stall meter (a "
                   "\"consumer\" entry with outputs, stalls, wait_seconds, "
                   "...); write one with `sluice run SPEC --stats-json FILE` "
                   "or json.dump(pipe.stats()) from Python\n";
      return kExitUsage;
    }
  }

  // The plan `sluice run` executes: the same codegen decision, so probes,
  // model and the measured run time the generated kernels users get.
  OpenOptions o = driverOpenOptions(f.disabledPasses, f.noJit);
  ErrorKind kind;
  Expected<std::unique_ptr<Pipeline>> opened =
      Pipeline::open(f.specs[0], o, &kind);
  if (!opened) {
    const std::string &msg = opened.status().message();
    if (kind == ErrorKind::Usage)
      return usageError(msg, "tune");
    if (!msg.empty())
      std::cerr << msg << "\n";
    return kind == ErrorKind::Spec ? kExitUsage : kExitData;
  }
  std::unique_ptr<Pipeline> pipeline = opened.take();
  const dsl::Spec *spec = pipeline->spec();
  if (!f.consumer.empty() &&
      consumerJson["pipeline"].get<std::string>() != spec->pipeline) {
    std::cerr << "sluice: error: " << f.consumer
              << ": the stats are of pipeline '"
              << consumerJson["pipeline"].get<std::string>() << "', not '"
              << spec->pipeline << "' (" << f.specs[0] << ")\n";
    return kExitUsage;
  }
  // A baseline of another pipeline compares nothing: refuse it before
  // profiling.
  if (!checkPath.empty() && baseline.is_object() &&
      baseline.contains("pipeline") && baseline["pipeline"].is_string() &&
      baseline["pipeline"].get<std::string>() != spec->pipeline) {
    std::cerr << "sluice: error: " << checkPath
              << ": the baseline is for pipeline '"
              << baseline["pipeline"].get<std::string>() << "', not '"
              << spec->pipeline << "' (" << f.specs[0]
              << "); make a baseline of this pipeline with `sluice tune "
              << f.specs[0] << " --report DIR` and pass DIR/report.json\n";
    return kExitUsage;
  }

  // A report directory that cannot be written should not cost a tune either
  // (checked once the spec is known to be good, so a spec error leaves no
  // directory behind).
  if (!reportDir.empty())
    if (Status s = autotune::prepareReportDir(reportDir); !s) {
      std::cerr << "sluice: error: " << s.message() << "\n";
      return kExitUsage;
    }

  if (Status s = pipeline->compileKernels(); !s) {
    std::cerr << "sluice: error: " << s.message() << "\n";
    return kExitData;
  }
  autotune::TuneOptions opts;
  opts.cores = cores;
  opts.memoryBytes = memory;
  opts.profile.secondsPerProbe = seconds;
  opts.verifySeconds = std::max(1.0, seconds * 1.5);
  if (!quiet)
    std::cerr << "sluice tune: profiling " << pipeline->plan().name << " ("
              << pipeline->kernelSummary() << ")...\n";
  Expected<autotune::TuneResult> r = pipeline->tune(opts);
  if (!r) {
    std::cerr << "sluice: error: " << r.status().message() << "\n";
    return kExitData;
  }
  if (!f.consumer.empty()) {
    const nlohmann::json &c = consumerJson["consumer"];
    autotune::TuneResult::ConsumerRun cr;
    cr.from = f.consumer;
    cr.consumer.outputs = c["outputs"].get<int64_t>();
    cr.consumer.stalls = c["stalls"].get<int64_t>();
    cr.consumer.waitSeconds = c["wait_seconds"].get<double>();
    cr.consumer.maxWaitSeconds = c["max_wait_seconds"].get<double>();
    cr.consumer.firstWaitSeconds = c["first_wait_seconds"].get<double>();
    cr.consumer.awaySeconds = c["away_seconds"].get<double>();
    cr.consumer.headspaceSeconds = c["headspace_seconds"].get<double>();
    double outs = consumerJson["outputs"].get<double>();
    cr.recordsPerOutput =
        outs > 0 ? consumerJson["records"].get<double>() / outs : 0;
    r->consumerRun = cr;
  }
  // How many workers: from --demand, else the consumer run's pace.
  double want = demand > 0 ? demand : autotune::consumerDemand(*r);
  if (want > 0)
    if (Status s = autotune::adviseWorkers(
            *r, want,
            demand > 0 ? "--demand" : "the consumer run " + f.consumer,
            workerCores, receiveCost);
        !s) {
      std::cerr << "sluice: error: " << s.message() << "\n";
      return kExitData;
    }
  nlohmann::json report = autotune::reportJson(*r);
  if (!reportDir.empty()) {
    if (Status s = autotune::writeReports(*r, reportDir); !s) {
      std::cerr << "sluice: error: " << s.message() << "\n";
      return kExitData;
    }
  }
  if (!quiet) {
    const autotune::Prediction &pr = r->solution.prediction;
    std::cout << "pipeline " << r->profile.pipeline << ": predicted "
              << std::llround(pr.throughput) << " records/s";
    if (r->measured)
      std::cout << ", measured "
                << std::llround(r->measured->sourceRecordsPerSecond)
                << " records/s";
    std::cout << "; bottleneck " << pr.bottleneckLabel << "\n"
              << r->scaleAdvice << "\n\n"
              << autotune::scheduleYaml(*r);
    if (r->consumerRun)
      std::cout << "\n" << autotune::consumerVerdict(*r) << "\n";
    if (r->workerAdvice)
      std::cout << "\n" << r->workerAdvice->text << "\n";
    if (!reportDir.empty())
      std::cout << "\nreports in " << reportDir
                << "/: schedule.yaml report.json report.md chart.svg\n";
  }
  if (!checkPath.empty()) {
    autotune::CheckResult c = autotune::check(baseline, report, tolerance);
    std::cout << "\ncheck against " << checkPath << ":\n" << c.text;
    if (!c.ok) {
      std::cout << "check FAILED\n";
      return kExitRegressed;
    }
    std::cout << "check passed\n";
  }
  return 0;
}

} // namespace

CommandAction addTuneCommand(CLI::App &root) {
  auto st = std::make_shared<TuneFlags>();
  CLI::App *cmd = root.add_subcommand(
      "tune", "profile the pipeline, model each stage, solve for parallelism, "
              "prefetch and cache within the budgets, run the result and "
              "report");
  addSpecArg(*cmd, st->specs);
  cmd->add_option("--cores", st->cores,
                  "plan for N cores (default: budget.cores, else this host); "
                  "more than this host has plans for another machine")
      ->type_name("N");
  cmd->add_option("--memory", st->memory,
                  "memory budget (default: budget.memory, else the runtime's "
                  "default)")
      ->type_name("SIZE");
  cmd->add_option("--report", st->report,
                  "write schedule.yaml, report.json, report.md, chart.svg "
                  "into DIR")
      ->type_name("DIR");
  cmd->add_option("--check", st->check,
                  "compare with a baseline report.json of the same "
                  "pipeline: exit 3 when the throughput fell beyond the "
                  "tolerance and the CPU per source record rose beyond it "
                  "(a drop the host's load explains passes), the bottleneck "
                  "moved, or a budget would be broken; exit 1 when the "
                  "pipeline could not run, 2 for a baseline that cannot be "
                  "compared")
      ->type_name("BASELINE.json");
  cmd->add_option("--tolerance", st->tolerance,
                  "allowed throughput drop for --check (default 10%)")
      ->type_name("P%");
  cmd->add_option("--consumer", st->consumer,
                  "the stats of a run of this pipeline with its real consumer "
                  "(`sluice run --stats-json FILE`, or Python's stats() "
                  "saved as JSON): the report says whether that consumer "
                  "waited for data and whether the tuned schedule keeps up "
                  "with it")
      ->type_name("STATS.json");
  cmd->add_option("--demand", st->demand,
                  "the records per second a trainer takes: the report then "
                  "says how many `sluice serve` workers keep it fed, and how "
                  "the trainer's own cores and remote workers split the work "
                  "(default: the --consumer run's pace, if given)")
      ->type_name("RATE");
  cmd->add_option("--worker-cores", st->workerCores,
                  "cores of each remote worker for that advice (default: "
                  "the cores this tune plans for)")
      ->type_name("N");
  cmd->add_option("--receive-cost", st->receiveCost,
                  "the trainer's CPU per byte it receives from remote "
                  "workers, in nanoseconds, for that advice's split (default: "
                  "modelled from this host's memcpy rate; Python's "
                  "Dataset.stats() gives a running trainer's)")
      ->type_name("NS");
  cmd->add_option("--seconds", st->seconds,
                  "seconds per profiling probe (default 1.5)")
      ->type_name("S");
  cmd->add_option("--disable-pass", st->disabledPasses,
                  "do not run this graph pass (repeatable)")
      ->type_name("NAME");
  cmd->add_flag("--no-jit", st->noJit,
                "tune the pipeline `sluice run --no-jit` runs (the runtime's "
                "own kernels; also SLUICE_NO_JIT=1)");
  cmd->add_flag("-q,--quiet", st->quiet, "print only errors and the check");
  return [st] { return runTune(*st); };
}

} // namespace sluice::tool
