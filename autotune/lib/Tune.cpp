//===- Tune.cpp - tune(): profile, solve, verify; and `schedule: auto` ----===//
//
// The one entry point. Budgets come from the command line first, then the
// spec, then the host; planning for more cores than this host has uses the
// fitted scaling curves and measures nothing afterwards (it cannot).
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Tune.h"
#include "sluice/ops/Switches.h"

#include "ScheduleCache.h"
#include "sluice/ops/Allocation.h"
#include "sluice/runtime/Memory.h"
#include "sluice/runtime/Source.h"

#include "Format.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

namespace sluice::autotune {

using detail::fmt;

namespace {

double loadAverage() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : 0;
}

/// What the bottleneck would need at `cores`: the parallelism that lifts it
/// to the next limit, or why no parallelism can.
std::string scaleAdviceAt(const Profile &p, const Solution &s, int64_t cores);

/// scaleAdvice, and for more workers than the probes ran, how sure it is:
/// the scaling curves are fitted to probes at a few parallelisms on this
/// host (two on two cores, where the fitted contention also holds the
/// sharing of those cores with the source's and consumer's threads), so
/// beyond them they extrapolate. The same configuration with every parallel
/// lane scaling linearly bounds the prediction from above.
std::string scaleAdvice(const Profile &p, const Solution &s, int64_t cores) {
  std::string out = scaleAdviceAt(p, s, cores);
  int64_t probed = 1;
  for (const Probe &pr : p.probes)
    probed = std::max(probed, pr.parallelism);
  if (cores <= probed)
    return out;
  Profile linear = p;
  for (auto &[step, samples] : linear.scaling)
    samples.erase(std::remove_if(samples.begin(), samples.end(),
                                 [](const ScalingSample &x) {
                                   return x.parallelism != 1;
                                 }),
                  samples.end());
  double upper = predict(linear, s.config, cores).throughput;
  double fitted = s.prediction.throughput;
  if (upper > fitted * 1.02)
    out += " Uncertain: the probes ran at most " + std::to_string(probed) +
           " worker" + (probed == 1 ? "" : "s") + " per stage, so the " +
           std::to_string(cores) +
           "-core figure extrapolates their fitted "
           "scaling; with linear scaling it would be " +
           fmt(upper) + " records/s (" +
           fmt((upper / fitted - 1) * 100, "%+.0f") +
           "%). The truth lies between; `sluice tune` on a host with the "
           "cores measures it.";
  return out;
}

std::string scaleAdviceAt(const Profile &p, const Solution &s, int64_t cores) {
  const Prediction &pr = s.prediction;
  std::string out = "At " + std::to_string(cores) + " cores the limit is " +
                    pr.bottleneckLabel + " at " + fmt(pr.throughput) +
                    " records/s.";
  double next = pr.cpuCapacity;
  for (size_t k = 0; k < pr.lanes.size(); ++k)
    if (static_cast<int>(k) != pr.bottleneck)
      next = std::min(next, pr.lanes[k].capacity);
  if (pr.bottleneck < 0) {
    double work = static_cast<double>(cores) / pr.cpuCapacity;
    out += " All cores are busy: reaching the next limit (" + fmt(next) +
           " records/s) would take " + fmt(std::ceil(work * next)) + " cores.";
    return out;
  }
  const LanePrediction &b = pr.lanes[static_cast<size_t>(pr.bottleneck)];
  if (!b.parallel) {
    out += " It runs on one thread (" + fmt(b.secondsPerRecord * 1e3, "%.3g") +
           " ms per record): no number of cores lifts it; split it with a "
           "prefetch, make it cheaper, or cache before it.";
    return out;
  }
  std::vector<Lane> us = lanes(p, s.config.cache.after);
  Usl usl = laneUsl(p, us[static_cast<size_t>(pr.bottleneck)]);
  if (!std::isfinite(next)) {
    out += " Nothing else limits it.";
    return out;
  }
  for (int64_t par = b.parallelism + 1; par <= 4096; ++par)
    if (usl.speedup(static_cast<double>(par)) / b.secondsPerRecord >= next) {
      out += " It would need " + std::to_string(par) +
             " workers to reach the next limit (" + fmt(next) + " records/s).";
      return out;
    }
  out += " Its measured scaling peaks at " +
         (std::isfinite(usl.peak()) ? fmt(usl.peak(), "%.0f") + " workers"
                                    : std::string("no finite parallelism")) +
         ", below the next limit (" + fmt(next) +
         " records/s): make it cheaper or cache before it.";
  return out;
}

/// A cache the spec did not pin must gain this much (the solver's rule,
/// Solver.cpp): also what a split of a fused stage must gain.
constexpr double kMinSplitGain = 0.05;

/// The plan stage index of a fused stage that holds the pipeline's first
/// random step after a deterministic prefix of its own (Plan.h
/// cacheSplitPoint), when a cache could go there: everything before it is
/// deterministic, the epoch's size is known, the run has more than one
/// epoch, and the spec pins no cache. nullopt otherwise, and with
/// SLUICE_NO_CACHE_SPLIT=1.
std::optional<size_t> fusedCachePoint(const runtime::Plan &plan,
                                      const Profile &p) {
  if (runtime::cacheSplitDisabledByEnvironment() || !p.sourceRecordsPerEpoch ||
      p.epochs == 1 || p.steps.size() != plan.steps.size() + 1)
    return std::nullopt;
  for (const StepProfile &s : p.steps)
    if (s.pinsCache())
      return std::nullopt;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile &s = p.steps[i];
    if (cacheStopsAt(s))
      return std::nullopt;
    if (!s.stochastic)
      continue;
    if (i > 0 && runtime::cacheSplitPoint(plan.steps[i - 1]))
      return i - 1;
    return std::nullopt;
  }
  return std::nullopt;
}

/// Prices a cache inside the fused stage plan.steps[at]: profiles the plan
/// split after the stage's deterministic prefix and solves it; when
/// chooseFusedCache() prefers it, it replaces r's profile and solution (the
/// schedule's cache on the prefix's last step splits the stage again when
/// it runs).
Status priceFusedCachePoint(const runtime::Plan &plan, size_t at,
                            const ProfileOptions &po, TuneResult &r) {
  const runtime::PlanStep &fused = plan.steps[at];
  size_t k = *runtime::cacheSplitPoint(fused);
  const std::string after = fused.fused[k].name;
  runtime::Plan split = plan;
  runtime::splitFusedAfter(split, after);
  std::optional<Profile> sp;
  std::optional<Solution> ss;
  FusedCacheChoice c;
  // Profiles and solves the split plan, and compares it with the fused one.
  auto price = [&](const std::string &again) -> Status {
    Expected<Profile> p = profilePipeline(split, po);
    if (!p)
      return p.status().withContext("profiling the plan split after '" + after +
                                    "'" + again + ": ");
    Expected<Solution> s = solve(*p, r.budget);
    if (!s)
      return s.status().withContext("solving the plan split after '" + after +
                                    "'" + again + ": ");
    sp = p.take();
    ss = s.take();
    c = chooseFusedCache(r.solution, *ss, *sp, at + 1, fused.name);
    return Status::ok();
  };
  if (Status s = price(""); !s)
    return s;
  double extraSeconds = 0;
  if (!c.consistent) {
    // The two comparisons disagree: the profiles saw the host differently.
    // Profile the split plan once more, right after, and decide on that.
    const std::string first = c.note;
    extraSeconds = sp->seconds;
    if (Status s = price(" again"); !s)
      return s;
    c.note += "; decided on a second profile of the split plan: on the "
              "first, its own calibration and the comparison at one "
              "calibration disagreed (" +
              first.substr(std::min(first.find("predicted"), first.size())) +
              ")";
  }
  if (!c.split) {
    r.solution.notes.push_back(c.note);
    return Status::ok();
  }
  Solution chosen = std::move(*ss);
  for (KnobChoice &kc : chosen.knobs)
    if (kc.knob == "cache" && kc.step == split.steps[at].name)
      kc.reason +=
          std::string(kc.reason.empty() || kc.reason.back() == '.' ? "" : ".") +
          " The compiler had fused '" + fused.name +
          "'; the cache splits it after '" + after + "' (the rest is random).";
  chosen.notes.insert(chosen.notes.begin(), r.solution.notes.begin(),
                      r.solution.notes.end());
  chosen.notes.push_back(c.note);
  chosen.seconds += r.solution.seconds;
  double fusedSeconds = r.profile.seconds;
  r.fusedProbes = r.profile.probes.size();
  r.profile = std::move(*sp);
  r.profile.seconds += fusedSeconds + extraSeconds; // every profile's time
  r.solution = std::move(chosen);
  return Status::ok();
}

/// What measureCachedEpochs() saw: the first epoch's seconds (from the
/// first next() to its last output) and the cached epochs' rate (0: the
/// first epoch did not end in time, or nothing was measured after it).
struct CachedRun {
  double firstSeconds = 0;
  double cachedRate = 0;
};

/// Runs `plan` under `o` (a cached schedule, endless epochs) past its first
/// epoch and measures both phases: how long the first epoch took, and the
/// cached epochs' source-record equivalents per second (counted at the
/// plan's last step, `lastVisits` of its inputs per source record) from the
/// end of the first epoch until `seconds` and one more whole epoch have
/// passed; nothing when the first epoch does not end within `capSeconds`.
Expected<CachedRun> measureCachedEpochs(const runtime::Plan &plan,
                                        runtime::RunOptions o, double seconds,
                                        double capSeconds, double lastVisits) {
  o.stageTiming = runtime::RunOptions::StageTiming::On;
  Expected<std::unique_ptr<runtime::Pipeline>> made =
      runtime::Pipeline::create(plan, o);
  if (!made)
    return made.status();
  std::unique_ptr<runtime::Pipeline> p = made.take();
  const std::string &last =
      plan.steps.empty() ? plan.source.name : plan.steps.back().name;
  auto lastInputs = [&](const runtime::RunStats &st) -> int64_t {
    for (const runtime::StageStats &x : st.stages)
      if (x.name == last)
        return plan.steps.empty() ? x.elementsOut : x.elementsIn;
    return 0;
  };
  auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
        .count();
  };
  runtime::Batch b;
  double t0 = -1, lastLook = -1, lastOut = 0;
  int64_t in0 = 0, epochs0 = 0;
  CachedRun run;
  for (;;) {
    Expected<bool> more = p->next(b);
    if (!more) {
      p->stop();
      return more.status();
    }
    if (!*more)
      break;
    double t = since(start);
    // Until the first epoch ends, look at every output a little apart (its
    // end is timed by the output before the one that shows it done);
    // afterwards every 5 ms.
    if (t - lastLook < (t0 < 0 ? 0.0005 : 0.005)) {
      lastOut = t;
      continue;
    }
    lastLook = t;
    runtime::RunStats st = p->stats();
    if (t0 < 0) {
      if (st.epochsDone >= 1) {
        t0 = t;
        run.firstSeconds = lastOut > 0 ? lastOut : t;
        in0 = lastInputs(st);
        epochs0 = st.epochsDone;
      } else if (t > capSeconds) {
        break;
      }
      lastOut = t;
      continue;
    }
    lastOut = t;
    if (t - t0 >= seconds && st.epochsDone >= epochs0 + 1) {
      double n = static_cast<double>(lastInputs(st) - in0);
      run.cachedRate = lastVisits > 0 ? n / (t - t0) / lastVisits : 0;
      break;
    }
    if (t - t0 > capSeconds)
      break;
  }
  p->stop();
  if (!(run.cachedRate > 0))
    run.firstSeconds = 0;
  return run;
}

/// The cached-epochs probe (TuneOptions::probeCachedEpochs): runs the chosen
/// cached schedule past its first epoch, sets the profile's
/// firstCalibration and cachedCalibration from what the two phases
/// measured in those runs (TuneOptions::cachedProbeRuns), and predicts the
/// solution again.
Status probeCachedEpochs(const runtime::Plan &plan, const TuneOptions &opts,
                         TuneResult &r) {
  const Config &c = r.solution.config;
  Profile &p = r.profile;
  if (c.cache.after < 0 || !(p.epochs < 0 || p.epochs >= 2) ||
      !p.sourceRecordsPerEpoch)
    return Status::ok();
  p.cachedCalibration = p.cachedMeasured = 0;
  p.firstCalibration = p.firstMeasured = 0;
  Prediction before = predict(p, c, r.budget.cores);
  if (!(before.firstEpoch > 0) || !(before.cachedEpochs > 0))
    return Status::ok();
  double records = static_cast<double>(*p.sourceRecordsPerEpoch);
  double firstSeconds = records / before.firstEpoch;
  if (firstSeconds > opts.firstEpochSeconds) {
    r.cachedProbeNote =
        "cached epochs not probed: the first epoch is predicted to take " +
        fmt(firstSeconds, "%.1f") + " s (over " +
        fmt(opts.firstEpochSeconds, "%.0f") +
        " s); they are predicted with the probes' calibration";
    return Status::ok();
  }
  runtime::RunOptions o = opts.profile.base;
  o.epochs = p.epochs < 0 ? -1 : 1000000;
  o.threads = r.budget.cores;
  o.progress = runtime::RunOptions::Progress::Off;
  o.stats = false;
  o.statsJsonPath.clear();
  if (r.budget.memoryBytes > 0)
    o.memoryBytes = r.budget.memoryBytes;
  o.schedule = r.schedule;
  o.controller.reset();
  o.resume.reset();
  double v = p.steps.empty() ? 1 : p.steps.back().visits;
  // A few runs, each phase's median: one run's first epoch is a fraction
  // of a second, and a burst of load from other processes during it would
  // set the whole prediction. A first epoch predicted over a second is
  // long enough to ride out a burst: fewer runs then.
  int runs = std::clamp(
      static_cast<int>(std::ceil(1.0 / std::max(firstSeconds, 1e-3))), 1,
      std::max(1, opts.cachedProbeRuns));
  std::vector<double> firsts, rates;
  for (int i = 0; i < runs; ++i) {
    Expected<CachedRun> one =
        measureCachedEpochs(plan, o, opts.cachedEpochsSeconds / runs,
                            std::max(10.0, 3 * firstSeconds), v);
    if (!one)
      return one.status().withContext("probing the cached epochs: ");
    if (!(one->cachedRate > 0))
      break;
    firsts.push_back(one->firstSeconds);
    rates.push_back(one->cachedRate);
  }
  if (rates.empty()) {
    r.cachedProbeNote = "cached epochs not probed: the first epoch did not "
                        "end in time";
    return Status::ok();
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    size_t n = x.size();
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
  };
  const CachedRun run{median(firsts), median(rates)};
  // Both phases' model rates without calibration, and what the runs
  // measured of each: the first epoch's records over its time less the start-up
  // the whole-run average adds on its own (wholeRunThroughput).
  double cachedModel = before.cachedEpochs / before.calibration;
  double firstModel = before.firstEpoch / before.calibration;
  double firstRun =
      std::max(run.firstSeconds - p.startupSeconds, 0.5 * run.firstSeconds);
  double firstRate = records / firstRun;
  p.cachedMeasured = run.cachedRate;
  p.cachedCalibration = std::clamp(run.cachedRate / cachedModel, 0.02, 2.0);
  if (firstModel > 0 && run.firstSeconds > 0) {
    p.firstMeasured = firstRate;
    p.firstCalibration = std::clamp(firstRate / firstModel, 0.02, 2.0);
  }
  r.solution.prediction = predict(p, c, r.budget.cores);
  r.cachedProbeNote =
      "cached epochs probed (median of " + std::to_string(rates.size()) +
      (rates.size() == 1 ? " run" : " runs") + "): " + fmt(run.cachedRate) +
      " records/s against " + fmt(cachedModel) + " modelled (calibration " +
      fmt(p.cachedCalibration, "%.2f") + ", the probes' level " +
      fmt(before.calibration, "%.2f") + ")";
  if (p.firstCalibration > 0)
    r.cachedProbeNote +=
        "; its first epoch, in the same runs: " + fmt(firstRate) +
        " records/s against " + fmt(firstModel) + " modelled (calibration " +
        fmt(p.firstCalibration, "%.2f") + "; the probes' level predicted " +
        fmt(before.firstEpoch) + ", " +
        fmt((before.firstEpoch / firstRate - 1) * 100, "%+.0f") + "%)";
  r.cachedProbeNote += ": predicted " + fmt(before.throughput) + " -> " +
                       fmt(r.solution.prediction.throughput) +
                       " records/s over the run";
  r.solution.notes.push_back(r.cachedProbeNote);
  return Status::ok();
}

/// The options the tuned schedule runs with after solving (verify, the
/// close call): the profile's base at the budget, no controller or resume.
runtime::RunOptions runOptionsAfterSolving(const TuneOptions &opts,
                                           const TuneResult &r) {
  runtime::RunOptions o = opts.profile.base;
  o.epochs = r.profile.epochs < 0 ? -1 : 1000000;
  o.threads = r.budget.cores;
  o.progress = runtime::RunOptions::Progress::Off;
  if (r.budget.memoryBytes > 0)
    o.memoryBytes = r.budget.memoryBytes;
  o.schedule = r.schedule;
  o.controller.reset();
  o.resume.reset();
  return o;
}

/// Whether a run of the spec's whole epochs at `predicted` records/s takes
/// at most `seconds` (csv and other sources that cannot count: the epoch
/// estimated from their files' size decides).
bool wholeRunFits(const Profile &p, double predicted, double seconds) {
  std::optional<int64_t> perEpoch = p.recordsPerEpoch();
  return p.epochs > 0 && perEpoch && predicted > 0 &&
         static_cast<double>(p.epochs * *perEpoch) / predicted <= seconds;
}

/// Source-record equivalents per second of one measured run (counted where
/// the last step reads: a cache stops the source).
double sourceRate(const Profile &p, const Probe &m) {
  double v = p.steps.empty() ? 1 : p.steps.back().visits;
  if (v > 0 && m.seconds > 0 && m.lastStepInputs > 0)
    return static_cast<double>(m.lastStepInputs) / m.seconds / v;
  return m.sourceRecordsPerSecond;
}

/// "cast+map+normalize p=2, random_crop+random_flip p=1".
std::string parallelismText(const Profile &p, const Config &c) {
  std::vector<Lane> us = lanes(p, c.cache.after);
  std::string s;
  for (size_t k = 0; k < us.size() && k < c.parallelism.size(); ++k) {
    if (!us[k].parallel)
      continue;
    if (!s.empty())
      s += ", ";
    s += laneLabel(p, us[k]) + " p=" + std::to_string(c.parallelism[k]);
  }
  return s;
}

} // namespace

/// Settles the solver's close call (Solution::closeCall) by running both
/// configurations alternately (TuneOptions::measureCloseCalls); switches
/// r.solution and r.schedule to the close call when it wins.
Status settleCloseCall(const runtime::Plan &plan, const TuneOptions &opts,
                       TuneResult &r) {
  if (!r.solution.closeCall)
    return Status::ok();
  const Config chosen = r.solution.config;
  Config other = *r.solution.closeCall;
  other.sourceInFlight = chosen.sourceInFlight;
  const Profile &p = r.profile;
  const std::string what =
      "close call: " + parallelismText(p, other) + " is predicted " +
      fmt(r.solution.closeCallGain * 100, "%+.1f") + "% against the chosen " +
      parallelismText(p, chosen) + " (within the 2% the model cannot resolve)";
  if (switchedOff("SLUICE_NO_CLOSE_CALLS")) {
    r.closeCallNote = what + "; not measured (SLUICE_NO_CLOSE_CALLS=1)";
    r.solution.notes.push_back(r.closeCallNote);
    return Status::ok();
  }
  runtime::RunOptions base = runOptionsAfterSolving(opts, r);
  // Whole runs when a run is predicted to take at most a quarter of the
  // time given, else steady-state windows. A cached run's first epoch and
  // its cached epochs run different stages, so only whole runs compare two
  // cached configurations: those get half the time given per run, and are
  // not measured when a run is longer.
  const bool cached =
      chosen.cache.after >= 0 && (p.epochs < 0 || p.epochs >= 2);
  const double wholeLimit =
      std::min(opts.wholeRunSeconds, opts.closeCallSeconds / (cached ? 2 : 4));
  const double predicted = std::max(r.solution.prediction.wholeRun, 1e-9);
  const bool whole = wholeRunFits(p, predicted, wholeLimit);
  if (cached && !whole) {
    r.closeCallNote = what +
                      "; not measured: only whole runs compare two cached "
                      "configurations, and one is predicted to take over " +
                      fmt(wholeLimit, "%.1f") + " s";
    r.solution.notes.push_back(r.closeCallNote);
    return Status::ok();
  }
  if (whole)
    base.epochs = p.epochs;
  auto runOnce = [&](const Config &c) -> Expected<double> {
    runtime::RunOptions o = base;
    o.schedule = toSchedule(p, c);
    Expected<Probe> m =
        whole ? measure(plan, o, 1e9, std::numeric_limits<int64_t>::max())
              : measure(plan, o, opts.closeCallWindowSeconds,
                        opts.profile.maxRecordsPerProbe);
    if (!m)
      return m.status().withContext("measuring the close call: ");
    return sourceRate(p, *m);
  };
  std::vector<double> a, b;
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 7; ++i) {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (i >= 3 && seconds >= opts.closeCallSeconds)
      break;
    // Alternate which runs first, so a drift in load favours neither.
    Expected<double> x = i % 2 ? runOnce(other) : runOnce(chosen);
    if (!x)
      return x.status();
    Expected<double> y = i % 2 ? runOnce(chosen) : runOnce(other);
    if (!y)
      return y.status();
    a.push_back(i % 2 ? *y : *x);
    b.push_back(i % 2 ? *x : *y);
  }
  double ratio = 0;
  bool wins = closeCallWins(a, b, opts.closeCallMargin, &ratio);
  r.closeCallNote =
      what + "; measured " + std::to_string(a.size()) +
      (whole ? " paired whole runs" : " paired windows") + ", median ratio " +
      fmt(ratio, "%.3f") + ": " +
      (wins ? "the close call is kept"
            : "the chosen one stays (the close call must gain " +
                  fmt(opts.closeCallMargin * 100, "%.0f") + "%)") +
      " (SLUICE_NO_CLOSE_CALLS=1 skips this)";
  r.solution.notes.push_back(r.closeCallNote);
  if (!wins)
    return Status::ok();
  r.solution.config = other;
  r.solution.prediction = predict(p, other, r.budget.cores);
  r.schedule = toSchedule(p, other);
  // The parallelism knobs that changed say why.
  std::vector<Lane> us = lanes(p, other.cache.after);
  for (size_t k = 0; k < us.size() && k < other.parallelism.size(); ++k) {
    if (!us[k].parallel || other.parallelism[k] == chosen.parallelism[k])
      continue;
    for (KnobChoice &kc : r.solution.knobs) {
      bool mine = false;
      for (size_t i : us[k].steps)
        mine = mine || kc.step == p.steps[i].name;
      if (!mine || kc.knob != "parallelism")
        continue;
      kc.value = std::to_string(other.parallelism[k]);
      kc.reason = "a close call the model could not resolve (" +
                  fmt(r.solution.closeCallGain * 100, "%+.1f") +
                  "% predicted against " +
                  std::to_string(chosen.parallelism[k]) +
                  "): measured faster, median ratio " + fmt(ratio, "%.3f") +
                  " over " + std::to_string(a.size()) + " paired runs";
    }
  }
  return Status::ok();
}

bool closeCallWins(const std::vector<double> &chosen,
                   const std::vector<double> &other, double margin,
                   double *ratio) {
  std::vector<double> q;
  for (size_t i = 0; i < chosen.size() && i < other.size(); ++i)
    if (chosen[i] > 0 && other[i] > 0)
      q.push_back(other[i] / chosen[i]);
  if (ratio)
    *ratio = 0;
  if (q.empty())
    return false;
  std::sort(q.begin(), q.end());
  double m = q.size() % 2 ? q[q.size() / 2]
                          : (q[q.size() / 2 - 1] + q[q.size() / 2]) / 2;
  if (ratio)
    *ratio = m;
  return m > 1 + margin;
}

FusedCacheChoice chooseFusedCache(const Solution &fused, const Solution &split,
                                  const Profile &splitProfile,
                                  size_t prefixStep,
                                  const std::string &fusedName) {
  FusedCacheChoice c;
  const StepProfile &prefix = splitProfile.steps.at(prefixStep);
  std::string rest = prefixStep + 1 < splitProfile.steps.size()
                         ? splitProfile.steps[prefixStep + 1].name
                         : std::string();
  std::string after =
      prefix.specSteps.empty() ? prefix.name : prefix.specSteps.back();
  std::string what = "cache point inside fused '" + fusedName + "' after '" +
                     after + "' (profiled split into '" + prefix.name +
                     "' and '" + rest + "'): ";
  const std::string off = " (SLUICE_NO_CACHE_SPLIT=1 skips this)";
  if (split.config.cache.after != static_cast<int64_t>(prefixStep)) {
    c.note = what + "the solver put no cache there; kept fused" + off;
    return c;
  }
  double fusedT = fused.prediction.throughput;
  double splitT = split.prediction.throughput;
  // The two plans were probed at different moments: on a loaded host their
  // calibrations (what other processes took) differ by up to 4x while the
  // work does not. They are compared on the model at one calibration (each
  // prediction over its own).
  double fusedU = fusedT / std::max(1e-9, fused.prediction.calibration);
  double splitU = splitT / std::max(1e-9, split.prediction.calibration);
  std::string cmp =
      "a " + split.config.cache.to + " cache after it is predicted " +
      fmt(splitT) + " records/s against " + fmt(fusedT) +
      " fused without one (" + fmt((splitU / fusedU - 1) * 100, "%+.1f") +
      "% at one calibration)";
  c.consistent = (splitT > fusedT * (1 + kMinSplitGain)) ==
                 (splitU > fusedU * (1 + kMinSplitGain));
  if (!(splitU > fusedU * (1 + kMinSplitGain))) {
    c.note = what + cmp + ": under the 5% a cache must gain; kept fused" + off;
    return c;
  }
  c.split = true;
  c.note = what + cmp + ": split and cached" + off;
  return c;
}

namespace {

/// `base` with `schedule` applied over it, as applyAutoSchedule applies it.
runtime::RunOptions withSchedule(const runtime::RunOptions &base,
                                 const Schedule &schedule) {
  runtime::RunOptions o = base;
  layOver(o.schedule, schedule);
  return o;
}

/// Makes the tuned `schedule` one the runtime accepts under `base` (its
/// budget.memory), and says what it changed in `s`; false when it had to be
/// changed. The model's memory prediction and the runtime's check before a
/// run can disagree (a prefetch deepens a parallel group's reorder window;
/// a batch prefetch sits on top of a large shuffle buffer), and a tuned
/// schedule must never be refused where the spec's own schedule runs, nor
/// lead to advice ("lower shuffle.buffer to <= N") that the next tune
/// breaks again. So the runtime's own check (Pipeline::checkFits) decides:
/// prefetch depths the tuner raised are halved toward the spec's, then the
/// workers it added, and when even that does not fit, the tuned schedule is
/// dropped and the spec's own schedule runs (with the runtime's advice if
/// that does not fit either).
bool fitScheduleToMemory(const runtime::Plan &plan,
                         const runtime::RunOptions &base, Schedule &schedule,
                         std::string &s) {
  Status first =
      runtime::Pipeline::checkFits(plan, withSchedule(base, schedule));
  if (first)
    return true;
  auto floorOf = [&](const std::string &name, bool prefetch) -> int64_t {
    auto it = base.schedule.find(name);
    if (it != base.schedule.end()) {
      const std::optional<int64_t> &v =
          prefetch ? it->second.prefetch : it->second.parallelism;
      if (v)
        return *v;
    }
    return prefetch ? 0 : 1;
  };
  // One knob kind at a time, every step's halved per round: the deepest
  // queues (the largest records' prefetch) shrink first in bytes.
  for (bool prefetch : {true, false}) {
    for (;;) {
      bool changed = false;
      for (auto &[name, k] : schedule) {
        std::optional<int64_t> &v = prefetch ? k.prefetch : k.parallelism;
        int64_t lo = floorOf(name, prefetch);
        if (v && *v > lo) {
          *v = std::max(lo, *v / 2);
          changed = true;
        }
      }
      if (!changed)
        break;
      if (runtime::Pipeline::checkFits(plan, withSchedule(base, schedule))) {
        std::string knobs;
        for (const auto &[name, k] : schedule) {
          const std::optional<int64_t> &v =
              prefetch ? k.prefetch : k.parallelism;
          if (v)
            knobs +=
                (knobs.empty() ? "" : ", ") + name + " " + std::to_string(*v);
        }
        s += std::string("  memory: the tuned schedule did not fit "
                         "budget.memory by the runtime's check, so its ") +
             (prefetch ? "prefetch depths" : "workers") +
             " were lowered to fit (" + knobs + "): " + first.message() + "\n";
        return false;
      }
    }
  }
  schedule.clear();
  s += "  memory: no tuned schedule fits budget.memory by the runtime's "
       "check, so the spec's own schedule runs: " +
       first.message() + "\n";
  return false;
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
  // A spec whose own schedule does not fit the budget is refused as a run
  // without the tuner refuses it: the same error and the same advice, which,
  // followed, then runs with and without the tuner (fitScheduleToMemory
  // keeps the tuned schedule within what the runtime accepts). The probes'
  // own errors would advise for their probe schedules instead.
  if (!r.otherHost)
    if (Status s = runtime::Pipeline::checkFits(plan, po.base); !s)
      return s;
  Expected<Profile> prof = profilePipeline(plan, po);
  if (!prof)
    return prof.status();
  r.profile = prof.take();
  r.budget.diskBytes = r.profile.diskFreeBytes / 2;
  Expected<Solution> sol = solve(r.profile, r.budget);
  if (!sol)
    return sol.status();
  r.solution = sol.take();
  // The naive configuration is the compiled plan's (fused, no cache).
  r.naive = predict(r.profile, naiveConfig(r.profile), r.budget.cores);
  if (std::optional<size_t> at = fusedCachePoint(plan, r.profile))
    if (Status s = priceFusedCachePoint(plan, *at, po, r); !s)
      return s;
  r.schedule = toSchedule(r.profile, r.solution.config);
  if (opts.measureCloseCalls && !r.otherHost)
    if (Status s = settleCloseCall(plan, opts, r); !s)
      return s;
  if (opts.probeCachedEpochs && !r.otherHost)
    if (Status s = probeCachedEpochs(plan, opts, r); !s)
      return s;
  // What is written, verified and applied is a schedule the runtime
  // accepts under this budget (fitScheduleToMemory).
  if (!r.otherHost) {
    runtime::RunOptions base = runOptionsAfterSolving(opts, r);
    base.schedule = opts.profile.base.schedule;
    std::string note;
    if (!fitScheduleToMemory(plan, base, r.schedule, note)) {
      r.loweredForMemory = true;
      const std::string head = "  memory: ";
      if (note.rfind(head, 0) == 0)
        note = note.substr(head.size());
      while (!note.empty() && note.back() == '\n')
        note.pop_back();
      r.solution.notes.push_back(note);
    }
  }
  r.scaleAdvice = scaleAdvice(r.profile, r.solution, r.budget.cores);
  if (opts.verify && !r.otherHost) {
    runtime::RunOptions o = runOptionsAfterSolving(opts, r);
    // The model predicts the average over the spec's epochs (a cache pays
    // off from the second): measure the whole run when it is short enough,
    // else a steady-state window.
    if (wholeRunFits(r.profile, r.solution.prediction.wholeRun,
                     opts.wholeRunSeconds)) {
      o.epochs = r.profile.epochs;
      r.measuredWholeRun = true;
    }
    Expected<Probe> m =
        r.measuredWholeRun
            ? measure(plan, o, 1e9, std::numeric_limits<int64_t>::max())
            : measure(plan, o, opts.verifySeconds,
                      opts.profile.maxRecordsPerProbe * 4);
    // A whole run under a second is at the mercy of a moment's load from
    // other processes: more runs, back to back, until they add up to a
    // second (at least three, at most 25; a run of a few milliseconds is one
    // scheduler time slice on a loaded host), and the median.
    if (m && r.measuredWholeRun && m->seconds < 1) {
      std::vector<Probe> runs{*m};
      double total = m->seconds;
      while (runs.size() < 3 || (total < 1 && runs.size() < 25)) {
        Expected<Probe> again =
            measure(plan, o, 1e9, std::numeric_limits<int64_t>::max());
        if (!again)
          return again.status().withContext("running the tuned schedule: ");
        total += again->seconds;
        runs.push_back(*again);
      }
      std::sort(runs.begin(), runs.end(), [](const Probe &a, const Probe &b) {
        return a.sourceRecordsPerSecond < b.sourceRecordsPerSecond;
      });
      m = runs[runs.size() / 2];
    }
    if (!m)
      return m.status().withContext("running the tuned schedule: ");
    r.measured = *m;
    r.measured->label = "tuned";
    // In source-record equivalents (a cache stops the source).
    r.measured->sourceRecordsPerSecond = sourceRate(r.profile, *m);
  }
  r.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return r;
}

namespace {

} // namespace

namespace {

/// Installs the in-flight re-planner (unless re-planning is off or its
/// windows would not fit the budget) and says so in `s`.
void installReplanner(const runtime::Plan &plan, const Profile &profile,
                      const Budget &budget, const Config &config,
                      runtime::RunOptions &opts, const AutoOptions &auto_,
                      AutoSchedule &a, std::string &s) {
  if (!auto_.replan || switchedOff("SLUICE_NO_REPLAN"))
    return;
  // Re-planning sizes every parallel window for all the cores (the
  // parallelism may rise in flight): only when that still fits.
  Config widest = config;
  std::vector<Lane> us = lanes(profile, widest.cache.after);
  for (size_t k = 0; k < us.size() && k < widest.parallelism.size(); ++k)
    if (us[k].parallel && us[k].pinned == 0)
      widest.parallelism[k] = budget.cores;
  int64_t need = predict(profile, widest, budget.cores).memoryBytes;
  if (budget.memoryBytes > 0 && need > budget.memoryBytes) {
    s += "  re-planning off: windows for " + std::to_string(budget.cores) +
         " workers per parallel stage would not fit the memory budget\n";
    return;
  }
  auto replanner =
      std::make_shared<Replanner>(profile, budget, config, auto_.replanOptions);
  // With a controller the runtime sizes every parallel window for all its
  // threads (Pipeline.cpp), and its own check decides whether that fits,
  // as for the tuned schedule (fitScheduleToMemory): the model's estimate
  // above can fall under it, and the run was then refused with advice the
  // spec's own schedule did not need (schedule-auto-memory.test, seen once
  // under load, when the profile made the model's estimate fit).
  runtime::RunOptions widened = opts;
  widened.controller = replanner;
  if (budget.memoryBytes > 0)
    if (Status fit = runtime::Pipeline::checkFits(plan, widened); !fit) {
      s += "  re-planning off: windows for " + std::to_string(budget.cores) +
           " workers per parallel stage would not fit budget.memory by the "
           "runtime's check\n";
      return;
    }
  a.replanner = replanner;
  opts.controller = a.replanner;
  // The re-planner reads the stage timers.
  opts.stageTiming = runtime::RunOptions::StageTiming::On;
  s += "  re-planning on: every " + fmt(auto_.replanOptions.interval, "%.2g") +
       " s the counters are compared with the plan (SLUICE_NO_REPLAN=1 "
       "turns it off)\n";
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

} // namespace

Expected<AutoSchedule> applyAutoSchedule(const runtime::Plan &plan,
                                         runtime::RunOptions &opts,
                                         const AutoOptions &auto_) {
  if (switchedOff("SLUICE_NO_AUTOTUNE")) {
    AutoSchedule a;
    a.applied = false;
    return a;
  }
  // The source is listed once for the cache key, the probes and the run
  // (an ImageNet-sized folder takes seconds to walk). A source that cannot
  // be made is left to the pipeline, which says why.
  if (!opts.source && !switchedOff("SLUICE_NO_SHARED_SOURCE")) {
    Expected<std::unique_ptr<runtime::Source>> made =
        runtime::Source::create(plan.source.op, plan.source.params,
                                plan.source.outputType, plan.baseDir);
    if (made)
      opts.source = std::shared_ptr<const runtime::Source>(made.take());
  }
  // A schedule an earlier run tuned for this plan, host and data.
  bool cache = auto_.useCache && scheduleCacheEnabled();
  std::string key, entry;
  if (cache) {
    key = scheduleCacheKey(plan, opts, hostCores());
    if (std::optional<CachedSchedule> c = loadCachedSchedule(key, &entry)) {
      AutoSchedule a;
      a.reused = true;
      a.cacheEntry = entry;
      a.schedule = c->schedule;
      a.prediction = c->prediction;
      std::string tuned = c->explanation;
      std::string first = tuned.substr(0, tuned.find('\n'));
      std::string rest = tuned.find('\n') == std::string::npos
                             ? ""
                             : tuned.substr(tuned.find('\n') + 1);
      // The tuning run's re-planning line is replaced by this run's.
      std::string kept;
      std::istringstream lines(rest);
      for (std::string l; std::getline(lines, l);)
        if (l.rfind("  re-planning", 0) != 0)
          kept += l + "\n";
      const std::string prefix = "schedule: auto: ";
      if (first.rfind(prefix, 0) == 0)
        first = first.substr(prefix.size());
      std::string s =
          "schedule: auto: reused the schedule tuned at " + c->tunedAt +
          " for this plan, host and data; nothing probed (" + entry +
          "; SLUICE_NO_SCHEDULE_CACHE=1 probes afresh)\n"
          "  tuned then: " +
          first + "\n" + kept;
      bool fits = fitScheduleToMemory(plan, opts, a.schedule, s);
      layOver(opts.schedule, a.schedule);
      // The re-planner would raise what was just lowered to fit (now, or
      // when it was tuned).
      if (fits && !c->loweredForMemory)
        installReplanner(plan, c->profile, c->budget, c->config, opts, auto_, a,
                         s);
      a.explanation = s;
      return a;
    }
  }
  TuneOptions t;
  t.profile.base = opts;
  t.profile.secondsPerProbe = auto_.secondsPerProbe;
  t.profile.rounds = 2; // 0.3 s windows: three would leave 0.2 s each
  t.profile.totalSeconds = auto_.maxProbeSeconds;
  t.profile.base.sink = "null";
  t.profile.base.statsJsonPath.clear();
  t.profile.base.stats = false;
  t.memoryBytes = opts.memoryBytes;
  if (opts.threads > 0)
    t.cores = std::min<int64_t>(opts.threads, hostCores());
  t.verify = false;
  // The run itself is about to start: no epoch spent probing a cache, no
  // runs settling a close call.
  t.probeCachedEpochs = false;
  t.measureCloseCalls = false;
  if (auto_.progressLine && opts.progress != runtime::RunOptions::Progress::Off)
    std::cerr << "sluice: schedule: auto: probing '" << plan.name
              << "' before its first batch"
              << (cache ? " (the result is kept for the next run)" : "")
              << "...\n"
              << std::flush;
  Expected<TuneResult> r = tune(plan, t);
  if (!r)
    return r.status();
  // What the probes freed into the heap: the run counts and refills it, or
  // with SLUICE_NO_HEAP_CARRY=1 it is trimmed here (Memory.h).
  bool trimmed = runtime::releaseFreeHeap();
  runtime::debugRssMark(trimmed ? "probes done, heap trimmed"
                                : "probes done, free heap left to the run");
  AutoSchedule a;
  a.schedule = r->schedule;
  a.prediction = r->solution.prediction;
  std::string s = "schedule: auto: profiled " +
                  std::to_string(r->profile.probes.size() + r->fusedProbes) +
                  " probes in " + fmt(r->profile.seconds) + " s; predicted " +
                  fmt(a.prediction.throughput) + " records/s, bottleneck " +
                  a.prediction.bottleneckLabel + "\n";
  for (const KnobChoice &k : r->solution.knobs)
    s += "  " + (k.step.empty() ? std::string("(pipeline)") : k.step) + "." +
         k.knob + " = " + k.value + ": " + k.reason + "\n";
  for (const std::string &n : r->solution.notes)
    s += "  note: " + n + "\n";
  // tune() fitted it already (a note above says so when it had to); the
  // re-planner would raise again what was lowered.
  bool fits = !r->loweredForMemory;
  layOver(opts.schedule, a.schedule);
  if (cache) {
    CachedSchedule c;
    c.schedule = a.schedule;
    c.explanation = s;
    c.prediction = a.prediction;
    c.profile = r->profile;
    c.budget = r->budget;
    c.config = r->solution.config;
    c.tunedAt = utcNow();
    c.loweredForMemory = !fits;
    if (Status st = storeCachedSchedule(key, c); !st)
      s += "  note: not kept for the next run: " + st.message() + "\n";
    else {
      a.cacheEntry = loadCachedSchedule(key, &entry) ? entry : "";
      s += "  kept for the next run of this plan on this host (" +
           (a.cacheEntry.empty() ? std::string("could not be read back")
                                 : a.cacheEntry) +
           ")\n";
    }
  }
  if (fits)
    installReplanner(plan, r->profile, r->budget, r->solution.config, opts,
                     auto_, a, s);
  a.explanation = s;
  return a;
}

} // namespace sluice::autotune
