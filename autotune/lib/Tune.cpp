//===- Tune.cpp - tune(): profile, solve, verify; and `schedule: auto` ----===//
//
// The one entry point. Budgets come from the command line first, then the
// spec, then the host; planning for more cores than this host has uses the
// fitted scaling curves and measures nothing afterwards (it cannot).
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Tune.h"
#include "sluice/ops/Allocation.h"
#include "sluice/runtime/Memory.h"

#include "Format.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace sluice::autotune {

using detail::fmt;

namespace {

double loadAverage() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : 0;
}

/// What the bottleneck would need at `cores`: the parallelism that lifts it
/// to the next limit, or why no parallelism can.
std::string scaleAdvice(const Profile &p, const Solution &s, int64_t cores) {
  const Prediction &pr = s.prediction;
  std::string out = "At " + std::to_string(cores) + " cores the limit is " +
                    pr.bottleneckLabel + " at " + fmt(pr.throughput) +
                    " records/s.";
  double next = pr.cpuCapacity;
  for (size_t k = 0; k < pr.units.size(); ++k)
    if (static_cast<int>(k) != pr.bottleneck)
      next = std::min(next, pr.units[k].capacity);
  if (pr.bottleneck < 0) {
    double work = static_cast<double>(cores) / pr.cpuCapacity;
    out += " All cores are busy: reaching the next limit (" + fmt(next) +
           " records/s) would take " +
           fmt(std::ceil(work * next)) + " cores.";
    return out;
  }
  const UnitPrediction &b = pr.units[static_cast<size_t>(pr.bottleneck)];
  if (!b.parallel) {
    out += " It runs on one thread (" + fmt(b.secondsPerRecord * 1e3, "%.3g") +
           " ms per record): no number of cores lifts it; split it with a "
           "prefetch, make it cheaper, or cache before it.";
    return out;
  }
  std::vector<Unit> us = units(p, s.config.cache.after);
  Usl usl = unitUsl(p, us[static_cast<size_t>(pr.bottleneck)]);
  if (!std::isfinite(next)) {
    out += " Nothing else limits it.";
    return out;
  }
  for (int64_t par = b.parallelism + 1; par <= 4096; ++par)
    if (usl.speedup(static_cast<double>(par)) / b.secondsPerRecord >= next) {
      out += " It would need " + std::to_string(par) +
             " workers to reach the next limit (" + fmt(next) +
             " records/s).";
      return out;
    }
  out += " Its measured scaling peaks at " +
         (std::isfinite(usl.peak()) ? fmt(usl.peak(), "%.0f") + " workers"
                                    : std::string("no finite parallelism")) +
         ", below the next limit (" + fmt(next) +
         " records/s): make it cheaper or cache before it.";
  return out;
}

} // namespace

Expected<TuneResult> tune(const runtime::Plan &plan, const TuneOptions &opts) {
  auto t0 = std::chrono::steady_clock::now();
  TuneResult r;
  r.loadAverage = loadAverage();
  int64_t host = hostCores();
  if (opts.cores > 0) {
    r.budget.cores = opts.cores;
    r.coresFrom = "--cores";
  } else if (plan.cores > 0) {
    r.budget.cores = std::min(plan.cores, host);
    r.coresFrom = "budget.cores";
  } else {
    r.budget.cores = host;
    r.coresFrom = "host";
  }
  r.otherHost = r.budget.cores > host;
  if (opts.memoryBytes > 0) {
    r.budget.memoryBytes = opts.memoryBytes;
    r.memoryFrom = "--memory";
  } else if (plan.memoryBytes > 0) {
    r.budget.memoryBytes = plan.memoryBytes;
    r.memoryFrom = "budget.memory";
  } else {
    // The runtime never runs unbounded: without budget.memory it uses its
    // default share of the host's (or cgroup's) memory.
    r.budget.memoryBytes = defaultMemoryBudget();
    r.memoryFrom = "runtime default";
  }
  ProfileOptions po = opts.profile;
  po.cores = std::min(r.budget.cores, host);
  // Probes are plain runs from the start: no controller, no resume.
  po.base.controller.reset();
  po.base.resume.reset();
  // Probes run under the same memory budget as the result.
  if (r.budget.memoryBytes > 0)
    po.base.memoryBytes = r.budget.memoryBytes;
  Expected<Profile> prof = profilePipeline(plan, po);
  if (!prof)
    return prof.status();
  r.profile = prof.take();
  r.budget.diskBytes = r.profile.diskFreeBytes / 2;
  Expected<Solution> sol = solve(r.profile, r.budget);
  if (!sol)
    return sol.status();
  r.solution = sol.take();
  r.schedule = toSchedule(r.profile, r.solution.config);
  r.naive = predict(r.profile, naiveConfig(r.profile), r.budget.cores);
  r.scaleAdvice = scaleAdvice(r.profile, r.solution, r.budget.cores);
  if (opts.verify && !r.otherHost) {
    runtime::RunOptions o = opts.profile.base;
    o.epochs = r.profile.epochs < 0 ? -1 : 1000000;
    o.threads = r.budget.cores;
    o.progress = runtime::RunOptions::Progress::Off;
    if (r.budget.memoryBytes > 0)
      o.memoryBytes = r.budget.memoryBytes;
    o.schedule = r.schedule;
    o.controller.reset();
    o.resume.reset();
    // The model predicts the average over the spec's epochs (a cache pays
    // off from the second): measure the whole run when it is short enough,
    // else a steady-state window.
    // (csv and other sources that cannot count: the epoch estimated from
    // their files' size decides.)
    double predicted = r.solution.prediction.wholeRun;
    std::optional<int64_t> perEpoch = r.profile.sourceRecordsPerEpoch
                                          ? r.profile.sourceRecordsPerEpoch
                                          : r.profile.estimatedRecordsPerEpoch;
    if (r.profile.epochs > 0 && perEpoch && predicted > 0 &&
        static_cast<double>(r.profile.epochs * *perEpoch) / predicted <=
            opts.wholeRunSeconds) {
      o.epochs = r.profile.epochs;
      r.measuredWholeRun = true;
    }
    Expected<Probe> m =
        r.measuredWholeRun
            ? measure(plan, o, 1e9, std::numeric_limits<int64_t>::max())
            : measure(plan, o, opts.verifySeconds,
                      opts.profile.maxRecordsPerProbe * 4);
    // A whole run under a second is at the mercy of a moment's load from
    // other processes: two more, and the median.
    if (m && r.measuredWholeRun && m->seconds < 1) {
      std::vector<Probe> runs{*m};
      for (int i = 0; i < 2; ++i) {
        Expected<Probe> again =
            measure(plan, o, 1e9, std::numeric_limits<int64_t>::max());
        if (!again)
          return again.status().withContext("running the tuned schedule: ");
        runs.push_back(*again);
      }
      std::sort(runs.begin(), runs.end(), [](const Probe &a, const Probe &b) {
        return a.sourceRecordsPerSecond < b.sourceRecordsPerSecond;
      });
      m = runs[1];
    }
    if (!m)
      return m.status().withContext("running the tuned schedule: ");
    r.measured = *m;
    r.measured->label = "tuned";
    // In source-record equivalents (a cache stops the source).
    double v = r.profile.steps.empty() ? 1 : r.profile.steps.back().visits;
    if (v > 0 && m->seconds > 0 && m->lastStepInputs > 0)
      r.measured->sourceRecordsPerSecond =
          static_cast<double>(m->lastStepInputs) / m->seconds / v;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            t0)
                  .count();
  return r;
}

namespace {

bool envOff(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

} // namespace

Expected<AutoSchedule> applyAutoSchedule(const runtime::Plan &plan,
                                         runtime::RunOptions &opts,
                                         const AutoOptions &auto_) {
  if (envOff("SLUICE_NO_AUTOTUNE")) {
    AutoSchedule a;
    a.applied = false;
    return a;
  }
  TuneOptions t;
  t.profile.base = opts;
  t.profile.secondsPerProbe = auto_.secondsPerProbe;
  t.profile.base.sink = "null";
  t.profile.base.statsJsonPath.clear();
  t.profile.base.stats = false;
  t.memoryBytes = opts.memoryBytes;
  if (opts.threads > 0)
    t.cores = std::min<int64_t>(opts.threads, hostCores());
  t.verify = false;
  Expected<TuneResult> r = tune(plan, t);
  if (!r)
    return r.status();
  AutoSchedule a;
  a.schedule = r->schedule;
  a.prediction = r->solution.prediction;
  std::string s = "schedule: auto: profiled " +
                  std::to_string(r->profile.probes.size()) + " probes in " +
                  fmt(r->profile.seconds) + " s; predicted " +
                  fmt(a.prediction.throughput) +
                  " records/s, bottleneck " + a.prediction.bottleneckLabel +
                  "\n";
  for (const KnobChoice &k : r->solution.knobs)
    s += "  " + (k.step.empty() ? std::string("(pipeline)") : k.step) + "." +
         k.knob + " = " + k.value + ": " + k.reason + "\n";
  for (const std::string &n : r->solution.notes)
    s += "  note: " + n + "\n";
  for (const auto &[name, o] : a.schedule)
    opts.schedule[name] = o;
  if (auto_.replan && !envOff("SLUICE_NO_REPLAN")) {
    // Re-planning sizes every parallel window for all the cores (the
    // parallelism may rise in flight): only when that still fits.
    Config widest = r->solution.config;
    std::vector<Unit> us = units(r->profile, widest.cache.after);
    for (size_t k = 0; k < us.size() && k < widest.parallelism.size(); ++k)
      if (us[k].parallel && us[k].pinned == 0)
        widest.parallelism[k] = r->budget.cores;
    int64_t need = predict(r->profile, widest, r->budget.cores).memoryBytes;
    if (r->budget.memoryBytes > 0 && need > r->budget.memoryBytes) {
      s += "  re-planning off: windows for " +
           std::to_string(r->budget.cores) +
           " workers per parallel stage would not fit the memory budget\n";
    } else {
      a.replanner = std::make_shared<Replanner>(r->profile, r->budget,
                                                r->solution.config,
                                                auto_.replanOptions);
      opts.controller = a.replanner;
      // The re-planner reads the stage timers.
      opts.stageTiming = runtime::RunOptions::StageTiming::On;
      s += "  re-planning on: every " + fmt(auto_.replanOptions.interval, "%.2g") +
           " s the counters are compared with the plan (SLUICE_NO_REPLAN=1 "
           "turns it off)\n";
    }
  }
  a.explanation = s;
  return a;
}

} // namespace sluice::autotune
