//===- Report.cpp - schedule.yaml, report.json, report.md, chart.svg, check
//===//
//
// Four views of one TuneResult. report.json is the machine-readable one (its
// schema is versioned and documented in docs/autotune.md) and what `--check`
// compares; report.md is what a person reads in a CI log or a PR comment;
// the SVG shows each stage's capacity against the pipeline's throughput on a
// log scale, the bottleneck in red.
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Tune.h"
#include "sluice/runtime/Memory.h"

#include "Format.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace sluice::autotune {

using detail::fmt;

using nlohmann::json;

namespace {

/// 91.6k, 2.06M, 512.
std::string human(double v) {
  if (v >= 1e6)
    return fmt(v / 1e6, "%.3gM");
  if (v >= 1e3)
    return fmt(v / 1e3, "%.3gk");
  return fmt(v, "%.3g");
}

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string xmlEscape(const std::string &s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

/// "file:line" of a lane's first step, for labels.
std::string laneWhere(const Profile &p, const LanePrediction &u) {
  if (u.steps.empty())
    return "";
  std::string w = p.steps[u.steps.front()].where;
  size_t paren = w.find(" (");
  return paren == std::string::npos ? w : w.substr(0, paren);
}

/// What the measurement is compared with: the whole-run average (start-up
/// included) when the whole run was measured, else the steady state.
double comparedPrediction(const TuneResult &r) {
  return r.measuredWholeRun ? r.solution.prediction.wholeRun
                            : r.solution.prediction.throughput;
}

double predictionError(const TuneResult &r) {
  if (!r.measured || r.measured->sourceRecordsPerSecond <= 0)
    return NAN;
  return (comparedPrediction(r) - r.measured->sourceRecordsPerSecond) /
         r.measured->sourceRecordsPerSecond;
}

} // namespace

std::string scheduleYaml(const TuneResult &r) {
  std::string s =
      "# Tuned by `sluice tune` for " + r.profile.specFile + ": " +
      std::to_string(r.budget.cores) + " cores, memory " +
      (r.budget.memoryBytes > 0 ? runtime::formatBytes(r.budget.memoryBytes)
                                : std::string("unlimited")) +
      ".\n# Replay: sluice run SPEC --schedule THIS_FILE; or paste "
      "the schedule: mapping into the spec\n# (the steps of a "
      "fused stage keep their fusion: their knobs agree).\n";
  s += "pipeline: " + r.profile.pipeline + "\nschedule:\n";
  if (r.schedule.empty())
    s += "  {}\n";
  // Fused plan stages ("a+b") are written under each spec step: parallelism
  // on all of them, prefetch and cache on the last (where they act).
  Schedule bySpec;
  for (const auto &[name, o] : r.schedule) {
    std::vector<std::string> parts;
    for (const StepProfile &st : r.profile.steps)
      if (st.name == name)
        parts = st.specSteps;
    if (parts.empty())
      parts = {name};
    for (size_t i = 0; i < parts.size(); ++i) {
      StepSchedule &t = bySpec[parts[i]];
      if (o.parallelism)
        t.parallelism = o.parallelism;
      if (i + 1 == parts.size()) {
        if (o.prefetch)
          t.prefetch = o.prefetch;
        if (o.cache)
          t.cache = o.cache;
      }
    }
  }
  for (const auto &[name, o] : bySpec) {
    std::string items;
    auto add = [&](const std::string &kv) {
      items += (items.empty() ? "" : ", ") + kv;
    };
    if (o.parallelism)
      add("parallelism: " + std::to_string(*o.parallelism));
    if (o.prefetch)
      add("prefetch: " + std::to_string(*o.prefetch));
    if (o.cache)
      add("cache: " + (o.cache->empty() ? std::string("none") : *o.cache));
    if (!items.empty())
      s += "  " + name + ": {" + items + "}" +
           (!r.profile.steps.empty() && name == r.profile.steps.front().name &&
                    o.parallelism
                ? "   # the source's requests in flight"
                : "") +
           "\n";
  }
  return s;
}

json reportJson(const TuneResult &r) {
  const Profile &p = r.profile;
  const Prediction &pr = r.solution.prediction;
  json j;
  j["schema"] = "sluice-tune-report";
  j["version"] = kReportVersion;
  j["pipeline"] = p.pipeline;
  j["spec"] = p.specFile;
  j["host"] = {{"cores", p.hostCores}, {"load_average", r.loadAverage}};
  if (!r.kernels.empty())
    j["kernels"] = r.kernels;
  j["budget"] = {{"cores", r.budget.cores},
                 {"cores_from", r.coresFrom},
                 {"memory_bytes", r.budget.memoryBytes},
                 {"memory_from", r.memoryFrom},
                 {"disk_bytes", r.budget.diskBytes},
                 {"other_host", r.otherHost}};
  json probes = json::array();
  for (const Probe &q : p.probes)
    probes.push_back({{"label", q.label},
                      {"parallelism", q.parallelism},
                      {"seconds", q.seconds},
                      {"source_records", q.sourceRecords},
                      {"records_per_second", q.sourceRecordsPerSecond},
                      {"outputs_per_second", q.outputsPerSecond},
                      {"memory_peak_bytes", q.memoryPeak}});
  json calByLevel = json::object();
  for (const auto &[level, k] : p.calibrationByLevel)
    calByLevel[std::to_string(level)] = k;
  j["profile"] = {
      {"seconds", p.seconds},
      {"epochs", p.epochs},
      {"source_records_per_epoch", p.sourceRecordsPerEpoch
                                       ? json(*p.sourceRecordsPerEpoch)
                                       : json(nullptr)},
      {"source_bytes_per_second", num(p.sourceBytesPerSecond)},
      {"outputs_per_source_record", p.outputsPerSourceRecord},
      {"fixed_memory_bytes", p.fixedMemoryBytes},
      {"disk_bytes_per_second", p.diskBytesPerSecond},
      {"fresh_memory_seconds_per_byte", p.freshMemorySecondsPerByte},
      {"counter_overhead", p.counterOverhead},
      {"startup_seconds", p.startupSeconds},
      {"estimated_source_records_per_epoch",
       p.estimatedRecordsPerEpoch ? json(*p.estimatedRecordsPerEpoch)
                                  : json(nullptr)},
      {"calibration", p.calibration},
      {"calibration_by_level", calByLevel},
      {"cached_calibration",
       p.cachedCalibration > 0 ? json(p.cachedCalibration) : json(nullptr)},
      {"cached_measured_records_per_second",
       p.cachedMeasured > 0 ? json(p.cachedMeasured) : json(nullptr)},
      {"first_epoch_calibration",
       p.firstCalibration > 0 ? json(p.firstCalibration) : json(nullptr)},
      {"first_epoch_measured_records_per_second",
       p.firstMeasured > 0 ? json(p.firstMeasured) : json(nullptr)},
      {"probes", probes}};
  json steps = json::array();
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile &s = p.steps[i];
    json st = {{"name", s.name},
               {"op", s.op},
               {"where", s.where},
               {"spec_steps", s.specSteps},
               {"stochastic", s.stochastic},
               {"visits", s.visits},
               {"selectivity", s.selectivity},
               {"bytes_in", s.bytesIn},
               {"bytes_out", s.bytesOut},
               {"seconds_per_element", s.secondsPerElement},
               {"cpu_seconds_per_element", s.cpuPerElement},
               {"pool_cpu_seconds_per_element", s.poolCpuPerElement},
               {"rate_cv", s.rateCv},
               {"occupancy_mean", s.occupancyMean},
               {"materialized_bytes_per_epoch", materializedBytes(p, i)}};
    auto sc = p.scaling.find(i);
    if (sc != p.scaling.end()) {
      json arr = json::array();
      for (const ScalingSample &x : sc->second)
        arr.push_back({{"parallelism", x.parallelism},
                       {"seconds_per_record", x.secondsPerRecord}});
      st["scaling"] = arr;
    }
    steps.push_back(st);
  }
  j["steps"] = steps;
  std::vector<Lane> us = lanes(p, r.solution.config.cache.after);
  json stages = json::array();
  for (size_t k = 0; k < pr.lanes.size(); ++k) {
    const LanePrediction &u = pr.lanes[k];
    json st = {{"steps", json::array()},
               {"label", u.label},
               {"where", laneWhere(p, u)},
               {"parallel", u.parallel},
               {"parallelism", u.parallelism},
               {"seconds_per_record", u.secondsPerRecord},
               {"capacity", num(u.capacity)},
               {"utilization", u.utilization},
               {"memory_bytes", u.memoryBytes},
               {"bottleneck", static_cast<int>(k) == pr.bottleneck}};
    for (size_t i : u.steps)
      st["steps"].push_back(p.steps[i].name);
    if (u.parallel && k < us.size()) {
      Usl usl = laneUsl(p, us[k]);
      st["usl"] = {{"sigma", usl.sigma}, {"kappa", usl.kappa}};
    }
    if (k < r.naive.lanes.size() && r.naive.lanes[k].label == u.label)
      st["capacity_naive"] = num(r.naive.lanes[k].capacity);
    stages.push_back(st);
  }
  j["stages"] = stages;
  j["bottleneck"] = {
      {"label", pr.bottleneckLabel},
      {"kind", pr.bottleneck == -2 ? "source_requests"
               : pr.bottleneck < 0 ? "cpu"
                                   : "stage"},
      {"where",
       pr.bottleneck < 0
           ? std::string()
           : laneWhere(p, pr.lanes[static_cast<size_t>(pr.bottleneck)])}};
  json knobs = json::array();
  for (const KnobChoice &k : r.solution.knobs)
    knobs.push_back({{"step", k.step},
                     {"knob", k.knob},
                     {"value", k.value},
                     {"pinned", k.pinned},
                     {"reason", k.reason}});
  j["knobs"] = knobs;
  j["notes"] = r.solution.notes;
  j["solver"] = {{"library", std::string("GLPK ") + "MILP"},
                 {"status", r.solution.status},
                 {"variables", r.solution.variables},
                 {"constraints", r.solution.constraints},
                 {"seconds", r.solution.seconds}};
  j["predicted"] = {{"records_per_second", num(pr.throughput)},
                    {"whole_run_records_per_second", num(pr.wholeRun)},
                    {"outputs_per_second", num(pr.outputsPerSecond)},
                    {"cpu_capacity", num(pr.cpuCapacity)},
                    {"contention_bound", num(pr.contentionBound)},
                    {"buffer_factor", pr.bufferFactor},
                    {"calibration", pr.calibration},
                    {"memory_bytes", pr.memoryBytes},
                    {"disk_bytes", pr.diskBytes},
                    {"naive_records_per_second", num(r.naive.throughput)},
                    {"first_epoch_records_per_second",
                     pr.firstEpoch > 0 ? num(pr.firstEpoch) : nullptr},
                    {"cached_epochs_records_per_second",
                     pr.cachedEpochs > 0 ? num(pr.cachedEpochs) : nullptr}};
  if (r.measured)
    j["measured"] = {{"records_per_second", r.measured->sourceRecordsPerSecond},
                     {"outputs_per_second", r.measured->outputsPerSecond},
                     {"seconds", r.measured->seconds},
                     {"whole_run", r.measuredWholeRun},
                     {"memory_peak_bytes", r.measured->memoryPeak},
                     // Process CPU per source record: what `--check` compares
                     // when the host's load moved the throughput.
                     {"cpu_seconds_per_record",
                      r.measured->sourceRecords > 0
                          ? json(r.measured->processCpuSeconds /
                                 static_cast<double>(r.measured->sourceRecords))
                          : json(nullptr)},
                     {"prediction_error", num(predictionError(r))}};
  else
    j["measured"] = nullptr;
  j["profile_cpu_seconds_per_record"] =
      p.processCpuPerRecord > 0 ? json(p.processCpuPerRecord) : json(nullptr);
  j["scale_advice"] = r.scaleAdvice;
  j["tune_seconds"] = r.seconds;
  if (r.consumerRun) {
    const runtime::RunStats::Consumer &c = r.consumerRun->consumer;
    j["consumer"] = {{"from", r.consumerRun->from},
                     {"outputs", c.outputs},
                     {"stalls", c.stalls},
                     {"wait_seconds", c.waitSeconds},
                     {"mean_wait_seconds", c.meanWaitSeconds()},
                     {"away_seconds", c.awaySeconds},
                     {"headspace_seconds", c.headspaceSeconds},
                     {"demand_records_per_second", num(consumerDemand(r))},
                     {"verdict", consumerVerdict(r)}};
  }
  if (r.workerAdvice) {
    const TuneResult::WorkerAdvice &a = *r.workerAdvice;
    j["workers"] = {
        {"demand_records_per_second", num(a.demand)},
        {"demand_from", a.demandFrom},
        {"local_cores", a.localCores},
        {"local_records_per_second", num(a.localRate)},
        {"cores_per_worker", a.coresPerWorker},
        {"worker_records_per_second", num(a.workerRate)},
        {"remote_workers", a.remoteWorkers},
        {"workers_without_local", a.workersAlone},
        {"cpu_cores", num(a.cpuCores)},
        {"wire_bytes_per_record", num(a.wireBytesPerRecord)},
        {"receive_seconds_per_byte", num(a.receiveSecondsPerByte)},
        {"receive_seconds_per_record", num(a.receiveSecondsPerRecord)},
        {"remote_records_per_second", num(a.remoteRate)},
        {"receive_cores", num(a.receiveCores)},
        {"receive_limit_records_per_second", num(a.receiveLimit)},
        {"advice", a.text}};
  }
  return j;
}

double consumerDemand(const TuneResult &r) {
  if (!r.consumerRun)
    return 0;
  const runtime::RunStats::Consumer &c = r.consumerRun->consumer;
  if (c.outputs < 2 || c.awaySeconds <= 0)
    return 0;
  return static_cast<double>(c.outputs - 1) * r.consumerRun->recordsPerOutput /
         c.awaySeconds;
}

std::string consumerVerdict(const TuneResult &r) {
  if (!r.consumerRun)
    return "";
  const runtime::RunStats::Consumer &c = r.consumerRun->consumer;
  int64_t n = c.outputs - 1;
  if (n < 2)
    return "The consumer run (" + r.consumerRun->from + ") has " +
           std::to_string(c.outputs) +
           " outputs: too few to judge its waits; run it longer.";
  double stalled = static_cast<double>(c.stalls) / static_cast<double>(n);
  std::string s =
      "In the consumer run (" + r.consumerRun->from + ") the " +
      "consumer waited " + fmt(c.meanWaitSeconds() * 1e3, "%.3f") +
      " ms per output after the first (" + std::to_string(c.stalls) + " of " +
      std::to_string(n) + " outputs stalled over " +
      fmt(runtime::RunStats::Consumer::kStallSeconds * 1e3, "%.0f") + " ms; " +
      fmt(c.waitSeconds, "%.2f") + " s waiting, " + fmt(c.awaySeconds, "%.2f") +
      " s in its own work). ";
  double demand = consumerDemand(r);
  double predicted = r.solution.prediction.throughput;
  if (stalled <= 0.05)
    s += "It did not wait for data: the pipeline kept up, so more cores "
         "would not make that consumer faster";
  else
    s += "It waited for data: the pipeline was its bottleneck";
  if (demand > 0) {
    s += "; on its own it takes " + fmt(demand) +
         " records/s, and the tuned schedule is predicted to make " +
         fmt(predicted) + " records/s";
    if (predicted >= demand)
      s += " (" + fmt(predicted / demand, "%.2f") +
           "x its pace: enough, with headroom for a faster consumer)";
    else
      s += " (" + fmt(predicted / demand, "%.2f") +
           "x its pace: not enough; more cores, a cache or cheaper steps "
           "are needed to stop the waits)";
  }
  return s + ".";
}

std::string reportMarkdown(const TuneResult &r) {
  const Profile &p = r.profile;
  const Prediction &pr = r.solution.prediction;
  std::string s = "# sluice tune: " + p.pipeline + "\n\n";
  s += "Spec `" + p.specFile + "`; budget " + std::to_string(r.budget.cores) +
       " cores (" + r.coresFrom + "), memory " +
       (r.budget.memoryBytes > 0 ? runtime::formatBytes(r.budget.memoryBytes)
                                 : std::string("unlimited")) +
       " (" + r.memoryFrom + "). Host: " + std::to_string(p.hostCores) +
       " cores, load average " + fmt(r.loadAverage, "%.2f") +
       " (measurements on a loaded host are noisy)." +
       (r.kernels.empty() ? std::string() : " Kernels: " + r.kernels + ".") +
       "\n\n";
  s += "| | records/s | outputs/s |\n|---|---:|---:|\n";
  s += "| predicted (tuned, steady state) | " + fmt(pr.throughput) + " | " +
       fmt(pr.outputsPerSecond, "%.2f") + " |\n";
  if (pr.firstEpoch > 0 && pr.cachedEpochs > 0) {
    s += "| predicted (tuned, first epoch: everything runs, the cache is "
         "written) | " +
         fmt(pr.firstEpoch) + " | " +
         fmt(pr.firstEpoch * p.outputsPerSourceRecord, "%.2f") + " |\n";
    s += "| predicted (tuned, cached epochs) | " + fmt(pr.cachedEpochs) +
         " | " + fmt(pr.cachedEpochs * p.outputsPerSourceRecord, "%.2f") +
         " |\n";
  }
  if (pr.wholeRun != pr.throughput)
    s += "| predicted (tuned, whole run with " + fmt(p.startupSeconds, "%.2f") +
         " s start-up) | " + fmt(pr.wholeRun) + " | " +
         fmt(pr.wholeRun * p.outputsPerSourceRecord, "%.2f") + " |\n";
  if (r.measured)
    s += "| measured (tuned) | " + fmt(r.measured->sourceRecordsPerSecond) +
         " | " + fmt(r.measured->outputsPerSecond, "%.2f") + " |\n";
  s += "| predicted (naive: 1 worker, no prefetch, no cache) | " +
       fmt(r.naive.throughput) + " | " + fmt(r.naive.outputsPerSecond, "%.2f") +
       " |\n";
  for (const Probe &q : p.probes)
    s += "| measured probe " + q.label + " | " + fmt(q.sourceRecordsPerSecond) +
         " | " + fmt(q.outputsPerSecond, "%.2f") + " |\n";
  s += "\n";
  if (r.measured)
    s += "Prediction error: " + fmt(predictionError(r) * 100, "%+.1f") +
         "% of measured (measured " +
         (r.measuredWholeRun
              ? "over the whole run, " + std::to_string(p.epochs) + " epochs"
              : "over a " + fmt(r.measured->seconds) +
                    " s steady-state window") +
         ").\n\n";
  else if (r.otherHost)
    s += "Planned for " + std::to_string(r.budget.cores) +
         " cores on a host with " + std::to_string(p.hostCores) +
         ": not measured here.\n\n";
  s += "**Bottleneck:** " + pr.bottleneckLabel;
  if (pr.bottleneck >= 0)
    s +=
        " (" + laneWhere(p, pr.lanes[static_cast<size_t>(pr.bottleneck)]) + ")";
  s += ".\n\n" + r.scaleAdvice + "\n\n";
  if (r.consumerRun)
    s += "## Consumer\n\n" + consumerVerdict(r) + "\n\n";
  if (r.workerAdvice)
    s += "## Workers\n\n" + r.workerAdvice->text + "\n\n";
  s += "## Schedule\n\n| step | knob | value | why |\n|---|---|---|---|\n";
  for (const KnobChoice &k : r.solution.knobs)
    s += "| " + (k.step.empty() ? std::string("-") : "`" + k.step + "`") +
         " | " + k.knob + " | " + k.value + (k.pinned ? " (pinned)" : "") +
         " | " + k.reason + " |\n";
  if (!r.solution.notes.empty()) {
    s += "\n";
    for (const std::string &n : r.solution.notes)
      s += "- " + n + "\n";
  }
  s +=
      "\n## Stages\n\n| stage | where | workers | ms/record | capacity rec/s | "
      "utilization | memory |\n|---|---|---:|---:|---:|---:|---:|\n";
  for (size_t k = 0; k < pr.lanes.size(); ++k) {
    const LanePrediction &u = pr.lanes[k];
    s += "| " + std::string(static_cast<int>(k) == pr.bottleneck ? "**" : "") +
         u.label + (static_cast<int>(k) == pr.bottleneck ? "**" : "") + " | " +
         laneWhere(p, u) + " | " + std::to_string(u.parallelism) + " | " +
         fmt(u.secondsPerRecord * 1e3, "%.4g") + " | " +
         (std::isfinite(u.capacity) ? fmt(u.capacity) : std::string("-")) +
         " | " + fmt(u.utilization * 100, "%.0f") + "% | " +
         runtime::formatBytes(u.memoryBytes) + " |\n";
  }
  s +=
      "| all work on " + std::to_string(r.budget.cores) + " cores | | | | " +
      (std::isfinite(pr.cpuCapacity) ? fmt(pr.cpuCapacity) : std::string("-")) +
      " | | |\n";
  s +=
      "\n## Steps (per spec line)\n\n| step | where | selectivity | bytes in | "
      "bytes out | us/element | random | size after, one epoch |\n"
      "|---|---|---:|---:|---:|---:|---|---:|\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile &st = p.steps[i];
    int64_t m = materializedBytes(p, i);
    s += "| " + st.name + " | " + st.where + " | " +
         fmt(st.selectivity, "%.3f") + " | " + fmt(st.bytesIn, "%.0f") + " | " +
         fmt(st.bytesOut, "%.0f") + " | " +
         fmt(st.secondsPerElement * 1e6, "%.2f") + " | " +
         (st.stochastic ? "yes" : "no") + " | " +
         (m > 0 ? runtime::formatBytes(m) : std::string("-")) + " |\n";
  }
  s += "\nPredicted memory " + runtime::formatBytes(pr.memoryBytes);
  if (r.measured)
    s += ", measured peak " + runtime::formatBytes(r.measured->memoryPeak);
  s += ". Profile took " + fmt(p.seconds) + " s, the whole tune " +
       fmt(r.seconds) + " s; counter overhead " +
       fmt(p.counterOverhead * 100, "%.2f") + "% of the work. Solver: GLPK, " +
       r.solution.status + ", " + std::to_string(r.solution.variables) +
       " variables, " + std::to_string(r.solution.constraints) +
       " constraints.\n";
  return s;
}

std::string reportSvg(const TuneResult &r) {
  const Profile &p = r.profile;
  const Prediction &pr = r.solution.prediction;
  struct Bar {
    std::string label, where;
    double cap, naive;
    bool bottleneck;
  };
  std::vector<Bar> bars;
  for (size_t k = 0; k < pr.lanes.size(); ++k) {
    const LanePrediction &u = pr.lanes[k];
    double naive = NAN;
    if (k < r.naive.lanes.size() && r.naive.lanes[k].label == u.label)
      naive = r.naive.lanes[k].capacity;
    std::string label = u.label;
    if (label.size() > 48)
      label = label.substr(0, 45) + "...";
    label += u.parallel ? " (x" + std::to_string(u.parallelism) + ")" : "";
    bars.push_back({label, laneWhere(p, u), u.capacity, naive,
                    static_cast<int>(k) == pr.bottleneck});
  }
  bars.push_back({"all work on " + std::to_string(r.budget.cores) + " cores",
                  "", pr.cpuCapacity, r.naive.cpuCapacity,
                  pr.bottleneck == -1});
  if (std::isfinite(pr.remoteCapacity) && pr.remoteCapacity > 0)
    bars.push_back({"source requests (" +
                        std::to_string(r.solution.config.sourceInFlight) +
                        " in flight)",
                    "", pr.remoteCapacity, 0, pr.bottleneck == -2});
  double lo = pr.throughput, hi = pr.throughput;
  for (const Bar &b : bars)
    for (double v : {b.cap, b.naive})
      if (std::isfinite(v) && v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  double l0 = std::floor(std::log10(std::max(lo, 1e-3) / 2));
  double l1 = std::ceil(std::log10(std::max(hi, 1e-3) * 2));
  if (l1 <= l0)
    l1 = l0 + 1;
  const int left = 420, width = 480, rowH = 34, top = 70;
  int height = top + static_cast<int>(bars.size()) * rowH + 60;
  auto xOf = [&](double v) {
    double lv = std::log10(std::max(v, std::pow(10.0, l0)));
    return left + (lv - l0) / (l1 - l0) * width;
  };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  std::to_string(left + width + 40) + "\" height=\"" +
                  std::to_string(height) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">" +
       xmlEscape(p.pipeline) +
       ": stage capacity vs demand (source records/s, "
       "log scale)</text>\n";
  s += "<text x=\"10\" y=\"42\" fill=\"#555\">demand line = predicted "
       "throughput " +
       fmt(pr.throughput) +
       " records/s; grey = naive "
       "(1 worker); red = bottleneck</text>\n";
  for (double e = l0; e <= l1; e += 1) {
    double x = xOf(std::pow(10.0, e));
    s += "<line x1=\"" + fmt(x) + "\" y1=\"" + std::to_string(top - 8) +
         "\" x2=\"" + fmt(x) + "\" y2=\"" +
         std::to_string(top + static_cast<int>(bars.size()) * rowH) +
         "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + fmt(x) + "\" y=\"" +
         std::to_string(top + static_cast<int>(bars.size()) * rowH + 16) +
         "\" text-anchor=\"middle\" fill=\"#555\">" + human(std::pow(10.0, e)) +
         "</text>\n";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar &b = bars[i];
    int y = top + static_cast<int>(i) * rowH;
    s += "<text x=\"" + std::to_string(left - 8) + "\" y=\"" +
         std::to_string(y + 13) + "\" text-anchor=\"end\"" +
         (b.bottleneck ? " font-weight=\"bold\" fill=\"#b00\"" : "") + ">" +
         xmlEscape(b.label) + "</text>\n";
    if (!b.where.empty())
      s += "<text x=\"" + std::to_string(left - 8) + "\" y=\"" +
           std::to_string(y + 26) +
           "\" text-anchor=\"end\" fill=\"#777\" font-size=\"10\">" +
           xmlEscape(b.where) + "</text>\n";
    if (std::isfinite(b.naive) && b.naive > 0)
      s += "<rect x=\"" + std::to_string(left) + "\" y=\"" +
           std::to_string(y + 18) + "\" width=\"" + fmt(xOf(b.naive) - left) +
           "\" height=\"8\" fill=\"#bbb\"/>\n";
    double cap = std::isfinite(b.cap) ? b.cap : std::pow(10.0, l1);
    s += "<rect x=\"" + std::to_string(left) + "\" y=\"" +
         std::to_string(y + 2) + "\" width=\"" + fmt(xOf(cap) - left) +
         "\" height=\"15\" fill=\"" + (b.bottleneck ? "#d33" : "#4a7bd0") +
         "\"/>\n";
    s += "<text x=\"" + fmt(xOf(cap) + 4) + "\" y=\"" + std::to_string(y + 14) +
         "\" fill=\"#333\">" +
         (std::isfinite(b.cap) ? human(b.cap) : std::string("unbounded")) +
         (b.bottleneck ? "  bottleneck" : "") + "</text>\n";
  }
  double dx = xOf(pr.throughput);
  s += "<line x1=\"" + fmt(dx) + "\" y1=\"" + std::to_string(top - 12) +
       "\" x2=\"" + fmt(dx) + "\" y2=\"" +
       std::to_string(top + static_cast<int>(bars.size()) * rowH) +
       "\" stroke=\"#d33\" stroke-width=\"2\" stroke-dasharray=\"5,3\"/>\n";
  s += "<text x=\"" + fmt(dx + 4) + "\" y=\"" + std::to_string(top - 14) +
       "\" fill=\"#b00\">demand " + human(pr.throughput) + "</text>\n";
  if (r.measured)
    s += "<text x=\"10\" y=\"" + std::to_string(height - 12) +
         "\" fill=\"#333\">measured with this schedule: " +
         fmt(r.measured->sourceRecordsPerSecond) + " records/s (prediction " +
         fmt(predictionError(r) * 100, "%+.1f") + "%)</text>\n";
  s += "</svg>\n";
  return s;
}

Status prepareReportDir(const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir))
    return Status::error("cannot create the report directory '" + dir + "'" +
                         (ec ? ": " + ec.message() : std::string()) +
                         "; give --report a directory you can write to");
  // A directory that exists but is read-only should fail here, before a
  // tune, not after it.
  std::string probe = dir + "/.sluice-report-probe";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0)
    return Status::error("cannot write into the report directory '" + dir +
                         "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

Status writeReports(const TuneResult &r, const std::string &dir) {
  if (Status s = prepareReportDir(dir); !s)
    return s;
  // Each file is written beside its final name and renamed over it, so a
  // CI job never reads a half-written report.json or schedule.yaml (a
  // baseline from an earlier tune stays whole if this one is interrupted).
  auto write = [&](const std::string &name, const std::string &text) {
    std::string path = dir + "/" + name;
    std::string tmp = path + ".tmp";
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      return Status::error("cannot write '" + path + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::string why = std::strerror(errno);
      std::remove(tmp.c_str());
      return Status::error("cannot write '" + path + "': " + why);
    }
    return Status::ok();
  };
  for (auto [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"schedule.yaml", scheduleYaml(r)},
           {"report.json", reportJson(r).dump(2) + "\n"},
           {"report.md", reportMarkdown(r)},
           {"chart.svg", reportSvg(r)}})
    if (Status s = write(name, text); !s)
      return s;
  return Status::ok();
}

Status validateBaseline(const json &baseline) {
  // Everything check() reads from the baseline, by JSON path, with its
  // type: a report of another schema or version, or one cut down by hand,
  // is refused up front instead of throwing mid-comparison.
  auto typeOf = [](const json &v) { return std::string(v.type_name()); };
  auto bad = [](const std::string &path, const std::string &what) {
    return Status::error("\"" + path + "\" " + what);
  };
  if (!baseline.is_object())
    return Status::error("the top level is " + typeOf(baseline) +
                         ", not an object");
  if (!baseline.contains("schema"))
    return bad("/schema", "is missing");
  const json &schema = baseline["schema"];
  if (!schema.is_string() || schema.get<std::string>() != "sluice-tune-report")
    return bad("/schema",
               "is " + schema.dump() + ", expected \"sluice-tune-report\"");
  if (!baseline.contains("version"))
    return bad("/version", "is missing");
  const json &version = baseline["version"];
  if (!version.is_number_integer())
    return bad("/version", "must be an integer, got " + version.dump());
  if (version.get<int64_t>() < 1 || version.get<int64_t>() > kReportVersion)
    return bad("/version", "is " + version.dump() +
                               "; this sluice reads report versions 1 to " +
                               std::to_string(kReportVersion));
  auto object = [&](const char *key, bool nullable) -> Status {
    if (!baseline.contains(key))
      return bad(std::string("/") + key, "is missing");
    const json &v = baseline[key];
    if (!v.is_object() && !(nullable && v.is_null()))
      return bad(std::string("/") + key, std::string("must be an object") +
                                             (nullable ? " or null" : "") +
                                             ", got " + typeOf(v));
    return Status::ok();
  };
  auto member = [&](const char *key, const char *name, bool number,
                    bool required) -> Status {
    const json &o = baseline[key];
    std::string path = std::string("/") + key + "/" + name;
    if (!o.contains(name))
      return required ? bad(path, "is missing") : Status::ok();
    const json &v = o[name];
    if (number ? !(v.is_number() || v.is_null()) : !v.is_string())
      return bad(path, std::string("must be ") +
                           (number ? "a number (or null)" : "a string") +
                           ", got " + typeOf(v) + " " + v.dump());
    return Status::ok();
  };
  for (Status s :
       {object("predicted", false),
        member("predicted", "records_per_second", true, true),
        object("bottleneck", false), member("bottleneck", "label", false, true),
        member("bottleneck", "kind", false, true)})
    if (!s)
      return s;
  if (baseline.contains("measured")) {
    if (Status s = object("measured", true); !s)
      return s;
    if (baseline["measured"].is_object())
      if (Status s = member("measured", "records_per_second", true, false); !s)
        return s;
  }
  if (baseline.contains("kernels") && !baseline["kernels"].is_string())
    return bad("/kernels",
               "must be a string, got " + typeOf(baseline["kernels"]));
  return Status::ok();
}

CheckResult check(const json &baseline, const json &current, double tolerance) {
  CheckResult c;
  auto line = [&](bool bad, const std::string &text) {
    c.text += (bad ? "FAIL " : "ok   ") + text + "\n";
    if (bad)
      c.ok = false;
  };
  if (!baseline.is_object() ||
      baseline.value("schema", "") != "sluice-tune-report") {
    line(true, "the baseline is not a sluice tune report.json");
    return c;
  }
  int bv = baseline.value("version", 0);
  if (bv > kReportVersion) {
    line(true, "the baseline has report version " + std::to_string(bv) +
                   ", newer than this sluice's " +
                   std::to_string(kReportVersion));
    return c;
  }
  auto rate = [](const json &j, const char *key) -> double {
    if (j.contains("measured") && j["measured"].is_object() &&
        j["measured"][key].is_number())
      return j["measured"][key].get<double>();
    if (j.contains("predicted") && j["predicted"].is_object() &&
        j["predicted"][key].is_number())
      return j["predicted"][key].get<double>();
    return 0;
  };
  // CPU seconds per source record: what the pipeline costs, whatever share
  // of the cores other processes left it. The measured run's when both
  // reports have one, else the profile's single-worker probe.
  auto cpuPerRecord = [](const json &j, bool measured) -> double {
    if (measured) {
      if (j.contains("measured") && j["measured"].is_object() &&
          j["measured"]["cpu_seconds_per_record"].is_number())
        return j["measured"]["cpu_seconds_per_record"].get<double>();
      return 0;
    }
    if (j.contains("profile_cpu_seconds_per_record") &&
        j["profile_cpu_seconds_per_record"].is_number())
      return j["profile_cpu_seconds_per_record"].get<double>();
    return 0;
  };
  std::string bkern = baseline.value("kernels", ""),
              nkern = current.value("kernels", "");
  if (!bkern.empty() && !nkern.empty() && bkern != nkern)
    c.text += "note kernels: " + nkern + ", the baseline's: " + bkern +
              " (compare reports made with the same --no-jit setting)\n";
  double b = rate(baseline, "records_per_second"),
         n = rate(current, "records_per_second");
  double bo = rate(baseline, "outputs_per_second"),
         no = rate(current, "outputs_per_second");
  double change = b > 0 ? (n - b) / b : 0;
  bool measuredBoth =
      cpuPerRecord(baseline, true) > 0 && cpuPerRecord(current, true) > 0;
  double bc = cpuPerRecord(baseline, measuredBoth),
         nc = cpuPerRecord(current, measuredBoth);
  double cpuChange = bc > 0 && nc > 0 ? (nc - bc) / bc : 0;
  bool slower = b > 0 && change < -tolerance;
  bool costlier = bc > 0 && nc > 0 && cpuChange > tolerance;
  std::string rates = fmt(n) + " source records/s (" + fmt(no) +
                      " outputs/s) vs baseline " + fmt(b) +
                      " source records/s (" + fmt(bo) +
                      " outputs/s): " + fmt(change * 100, "%+.1f") +
                      "%, tolerance -" + fmt(tolerance * 100, "%.0f") + "%";
  if (slower && bc > 0 && nc > 0 && !costlier) {
    // Fewer records per second for the same CPU per record: the host gave
    // the pipeline fewer cores (another process's load), the pipeline did
    // not get slower.
    line(false, "throughput " + rates + "; but CPU per source record " +
                    fmt(nc * 1e6) + " us vs " + fmt(bc * 1e6) + " us (" +
                    fmt(cpuChange * 100, "%+.1f") +
                    "%) is within tolerance, so the drop is the host's load "
                    "(load average " +
                    fmt(current["host"].value("load_average", 0.0), "%.1f") +
                    " now, " +
                    fmt(baseline["host"].value("load_average", 0.0), "%.1f") +
                    " then), not the pipeline");
  } else {
    line(slower, "throughput " + rates);
  }
  if (bc > 0 && nc > 0)
    line(slower && costlier,
         std::string("CPU per source record ") + fmt(nc * 1e6) + " us vs " +
             fmt(bc * 1e6) + " us (" + fmt(cpuChange * 100, "%+.1f") + "%, " +
             (measuredBoth ? "tuned runs" : "single-worker probes") + ")");
  // The bottleneck moved when the baseline's bottleneck is now clearly not
  // limiting: its capacity is more than the tolerance above the predicted
  // throughput (a near-tie between two stages is not a move).
  std::string bb = baseline["bottleneck"].value("label", "");
  std::string bk = baseline["bottleneck"].value("kind", "");
  std::string nb = current["bottleneck"].value("label", "");
  double thr = current["predicted"]["records_per_second"].is_number()
                   ? current["predicted"]["records_per_second"].get<double>()
                   : 0;
  double cap = -1;
  if (bk == "cpu") {
    if (current["predicted"]["cpu_capacity"].is_number())
      cap = current["predicted"]["cpu_capacity"].get<double>();
  } else {
    for (const json &st : current["stages"])
      if (st.value("label", "") == bb && st["capacity"].is_number())
        cap = st["capacity"].get<double>();
  }
  bool moved = bb != nb && (cap < 0 || cap > thr * (1 + tolerance));
  line(moved,
       "bottleneck " + nb +
           (bb == nb ? " (unchanged)"
            : moved  ? " (baseline: " + bb + ")"
                     : " (baseline: " + bb + ", still within " +
                          fmt(tolerance * 100, "%.0f") + "% of the limit)"));
  int64_t mem = current["budget"].value("memory_bytes", int64_t(0));
  int64_t pm = current["predicted"].value("memory_bytes", int64_t(0));
  int64_t mm = current["measured"].is_object()
                   ? current["measured"].value("memory_peak_bytes", int64_t(0))
                   : 0;
  if (mem > 0)
    line(pm > mem || mm > mem, "memory: predicted " + runtime::formatBytes(pm) +
                                   ", measured peak " +
                                   runtime::formatBytes(mm) + ", budget " +
                                   runtime::formatBytes(mem));
  else
    line(false, "memory: no budget");
  int64_t cores = current["budget"].value("cores", int64_t(0));
  int64_t used = 0;
  for (const json &st : current["stages"])
    if (st.value("parallel", false))
      used += st.value("parallelism", int64_t(0));
  int64_t nPar = 0;
  for (const json &st : current["stages"])
    nPar += st.value("parallel", false);
  line(used > std::max(cores, nPar), "cores: " + std::to_string(used) +
                                         " workers, budget " +
                                         std::to_string(cores));
  return c;
}

} // namespace sluice::autotune
