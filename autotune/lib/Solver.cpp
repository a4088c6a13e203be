//===- Solver.cpp - The knob-choosing MILP, solved with GLPK --------------===//
//
// See Solver.h for the program. Big-M rows tie every capacity constraint to
// its cache option's binary: with y_o = 0 the row is slack. M is the largest
// throughput any configuration could reach, so it is as tight as it can be
// without cutting off a solution.
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Solver.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/Switches.h"
#include "sluice/runtime/Memory.h"

#include "Format.h"

#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace sluice::autotune {

using detail::fmtRate;

namespace {

/// Prefetch candidates: the last step of every parallel lane (its window
/// runs ahead) and the pipeline's last step (decouples the consumer). Not
/// a lane that feeds a batch of rows laid out up front (OpTraits::fixedRows:
/// `batch`) while batch row placement is on: its workers
/// write each record into its row of the batch buffer (the fused image step
/// decodes straight into it), and a prefetch there makes them write every
/// record into a tensor of its own for the batch to copy. Measured on the
/// README's pipeline (2,000 pictures, 2 epochs, 2 threads): with
/// `select.prefetch: 47` the fused flip+normalize+transpose took 129 us per
/// record instead of 50 and the run 1.54 s instead of 1.39.
std::vector<size_t> prefetchCandidates(const Profile &p) {
  const bool placement = p.batchRowPlacement;
  std::vector<size_t> out;
  for (const Lane &u : lanes(p, -1)) {
    if (!u.parallel)
      continue;
    size_t last = u.steps.back();
    const OpDef *next = last + 1 < p.steps.size()
                            ? Registry::instance().find(p.steps[last + 1].op)
                            : nullptr;
    if (placement && next && next->traits.fixedRows &&
        !p.steps[last].pinned.prefetch)
      continue;
    out.push_back(last);
  }
  // The last step, unless it already is a prefetch buffer.
  if (!p.steps.empty() && p.steps.size() > 1 &&
      !p.steps.back().threadBoundary) {
    size_t last = p.steps.size() - 1;
    if (std::find(out.begin(), out.end(), last) == out.end())
      out.push_back(last);
  }
  return out;
}

/// Bytes one prefetched element at step i holds.
double slotBytes(const Profile &p, size_t i) {
  for (const Lane &u : lanes(p, -1))
    if (u.parallel && u.steps.back() == i)
      return laneSlotBytes(p, u);
  return p.steps[i].bytesOut;
}

/// The buffer depth after step i: from the variability of the rate that
/// produces into it (the step's own, sampled every 50 ms) and how many items
/// pass per second at the measured rate.
int64_t recommendedDepth(const Profile &p, size_t i) {
  double rate = p.probes.empty() ? 0 : p.probes.front().sourceRecordsPerSecond;
  double items = rate * p.steps[i].visits * p.steps[i].selectivity;
  return queueDepth(p.steps[i].rateCv, items);
}

/// The share of a run that first touching a prefetch queue's buffers may
/// take. Those pages are faulted in once per run (the queue's buffers are
/// reused after), which a long run never notices and a short one does:
/// bench/specs/criteo_bench.yaml's run takes 0.3 s on 2 cores, where 30
/// batches of 1.1 MB queued after its last step cost ~8,000 faults of
/// ~22 us each on the project's VM and the tuned run lost to plain
/// `--threads 2`.
constexpr double kFreshMemoryShare = 0.01;

/// The deepest prefetch after step i whose buffers' first touch costs at
/// most kFreshMemoryShare of the shortest run the probes predict (their
/// fastest rate, every record of every epoch); -1: no cap (an endless run,
/// an epoch of unknown size, or no measured fault cost). *runSeconds gets
/// that run's length.
int64_t freshMemoryDepthCap(const Profile &p, size_t i, double *runSeconds) {
  std::optional<int64_t> perEpoch = p.recordsPerEpoch();
  double rate = 0;
  for (const Probe &pr : p.probes)
    rate = std::max(rate, pr.sourceRecordsPerSecond);
  double bytes = slotBytes(p, i);
  if (p.epochs <= 0 || !perEpoch || *perEpoch <= 0 || !(rate > 0) ||
      !(p.freshMemorySecondsPerByte > 0) || !(bytes > 0))
    return -1;
  double run = p.startupSeconds + static_cast<double>(p.epochs) *
                                      static_cast<double>(*perEpoch) / rate;
  if (runSeconds)
    *runSeconds = run;
  double items =
      kFreshMemoryShare * run / (bytes * p.freshMemorySecondsPerByte);
  return items >= 64 ? -1 : static_cast<int64_t>(items);
}

} // namespace

bool tiesToFewerWorkers() {
  return switchedOff("SLUICE_TIES_TO_FEWER_WORKERS");
}
bool prefetchTouchCapOn() {
  return !switchedOff("SLUICE_NO_PREFETCH_TOUCH_CAP");
}
bool uncalibratedInFlightOn() {
  return !switchedOff("SLUICE_NO_IN_FLIGHT_UNCALIBRATED");
}
std::string solverRulesKey() {
  return std::string("ties ") + (tiesToFewerWorkers() ? "fewer" : "more") +
         " touch-cap " + (prefetchTouchCapOn() ? "1" : "0") + " cache-touch " +
         (cacheTouchCostOn() ? "1" : "0") + " in-flight-raw " +
         (uncalibratedInFlightOn() ? "1" : "0") + " bursts " +
         (requestBurstsOn() ? "1" : "0");
}

namespace {

struct Lp {
  glp_prob *prob = glp_create_prob();
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  // GLPK keeps a per-thread environment (about 5 KB) from the first call
  // until glp_free_env(); the re-planner solves on threads that come and
  // go (each pipeline's controller thread), and LeakSanitizer reported it
  // (examples/schedule-auto.test). One Lp per thread at a time is alive
  // (this file is GLPK's only user), so the environment goes with it.
  ~Lp() {
    glp_delete_prob(prob);
    glp_free_env();
  }
  int col(const std::string &name, int kind, double lo, double hi, double obj) {
    int j = glp_add_cols(prob, 1);
    glp_set_col_name(prob, j, name.substr(0, 255).c_str());
    glp_set_col_kind(prob, j, kind);
    if (lo == hi)
      glp_set_col_bnds(prob, j, GLP_FX, lo, hi);
    else
      glp_set_col_bnds(prob, j, GLP_DB, lo, hi);
    glp_set_obj_coef(prob, j, obj);
    return j;
  }
  /// sum(coef * col) <= ub (or == when eq).
  void row(const std::vector<std::pair<int, double>> &terms, double bound,
           bool eq = false) {
    int i = glp_add_rows(prob, 1);
    glp_set_row_bnds(prob, i, eq ? GLP_FX : GLP_UP, bound, bound);
    for (auto [j, v] : terms) {
      ia.push_back(i);
      ja.push_back(j);
      ar.push_back(v);
    }
  }
};

} // namespace

Config naiveConfig(const Profile &p) {
  Config c;
  for (const CacheOption &o : cacheOptions(p))
    if (o.after >= 0 && p.steps[static_cast<size_t>(o.after)].pinned.cache)
      c.cache = o;
  for (const Lane &u : lanes(p, c.cache.after))
    c.parallelism.push_back(u.pinned > 0 ? u.pinned : 1);
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].pinned.prefetch)
      c.prefetch[i] = *p.steps[i].pinned.prefetch;
  return c;
}

Schedule toSchedule(const Profile &p, const Config &c) {
  Schedule s;
  std::vector<Lane> us = lanes(p, c.cache.after);
  for (size_t k = 0; k < us.size(); ++k) {
    if (!us[k].parallel)
      continue;
    for (size_t i : us[k].steps)
      if (p.steps[i].element)
        s[p.steps[i].name].parallelism = c.parallelism[k];
  }
  for (auto [i, depth] : c.prefetch)
    s[p.steps[i].name].prefetch = depth;
  if (c.cache.after >= 0)
    s[p.steps[static_cast<size_t>(c.cache.after)].name].cache = c.cache.to;
  // The source's parallelism is its requests in flight.
  if (c.sourceInFlight > 0 && !p.steps.empty())
    s[p.steps.front().name].parallelism = c.sourceInFlight;
  return s;
}

namespace {

/// The program's capacities are linear in the binaries; the full model is
/// not (the calibration of the configuration's level, cores shared with the
/// other threads, buffers). Every parallelism assignment of the chosen cache
/// option (when there are at most 20,000) is evaluated with predict() and
/// the best within the cores and memory kept. Throughputs within
/// kRefineTie of each other count as equal (the buffer term moves them by
/// fractions of a percent, far below what the model can tell). Ties go to
/// the configuration that still holds when any one free parallel lane costs
/// kModelMargin more than measured (a lane near the edge keeps a worker in
/// reserve), and then to more workers, up to what the all-threads schedule
/// (`--threads N`) gives each lane: where the model cannot tell, the tuned
/// schedule is the default one, not a guess below it. A worker the model
/// says adds nothing still shortens the wait of each item behind the
/// others' threads on a shared core: criteo_bench's per-batch map beside
/// its serial csv lane ran 1.6-2.2% faster with two workers than with one
/// (docs/autotune.md), and cached_prefix's crop/flip stage 6% faster.
/// SLUICE_TIES_TO_FEWER_WORKERS=1 breaks ties toward fewer workers instead.
constexpr double kRefineTie = 0.005;

/// How much costlier than measured a parallel lane may turn out before the
/// solver counts a configuration as fragile: the accuracy the model is held
/// to (predictions within 15% of measured; docs/autotune.md).
constexpr double kModelMargin = 0.15;

/// `p` with the lane `u` costing `factor` times its measured work (seconds,
/// CPU and scaling samples alike).
Profile costlier(const Profile &p, const Lane &u, double factor) {
  Profile q = p;
  for (size_t i : u.steps) {
    q.steps[i].secondsPerElement *= factor;
    q.steps[i].cpuPerElement *= factor;
    auto it = q.scaling.find(i);
    if (it != q.scaling.end())
      for (ScalingSample &s : it->second)
        s.secondsPerRecord *= factor;
  }
  return q;
}

/// The profiles in which one free parallel lane of `us` costs kModelMargin
/// more than measured, one per such lane.
std::vector<Profile> fragileProfiles(const Profile &p,
                                     const std::vector<Lane> &us) {
  std::vector<Profile> out;
  for (const Lane &u : us)
    if (u.parallel && u.pinned == 0)
      out.push_back(costlier(p, u, 1 + kModelMargin));
  return out;
}

/// The throughput `c` keeps when any one of its free parallel lanes turns
/// out kModelMargin costlier than measured (the least over the lanes).
double fragileThroughput(const std::vector<Profile> &fragile, const Config &c,
                         int64_t cores) {
  double t = std::numeric_limits<double>::infinity();
  for (const Profile &q : fragile)
    t = std::min(t, predict(q, c, cores).throughput);
  return fragile.empty() ? 0 : t;
}

int64_t workerCount(const std::vector<Lane> &us,
                    const std::vector<int64_t> &par) {
  int64_t n = 0;
  for (size_t k = 0; k < us.size() && k < par.size(); ++k)
    n += us[k].parallel ? par[k] : 0;
  return n;
}

/// How close (relative predicted throughput) another parallelism of the
/// chosen configuration must come for the solver to report it as a close
/// call (Solution::closeCall): the model's contention and buffer terms are
/// of this order, below what it can resolve.
constexpr double kCloseCallBand = 0.02;

void refine(const Profile &prof, Config &c,
            const std::vector<CacheOption> &options, int64_t cores,
            double memLimit, std::optional<Config> *closeCall,
            double *closeGain) {
  // Ranked on the model's structure with one calibration for all levels:
  // the per-level figures set the predicted level of the configuration
  // chosen, but a few noisy probe windows must not decide between levels
  // (on a loaded host two windows at the same level differ by up to 2x).
  Profile p = prof;
  p.calibrationByLevel.clear();
  if (lanes(p, c.cache.after).size() != c.parallelism.size())
    return;
  Config best = c;
  std::vector<Lane> bestLanes = lanes(p, c.cache.after);
  double bestT = predict(p, c, cores).throughput;
  // Every configuration evaluated, for the close call.
  struct Seen {
    Config config;
    double t;
  };
  std::vector<Seen> seen{{c, bestT}};
  const bool tiesToFewer = tiesToFewerWorkers();
  double bestF = fragileThroughput(fragileProfiles(p, bestLanes), c, cores);
  // Every cache option the program had, with every parallelism: the
  // program priced a cache with the work before it averaged over the
  // epochs; predict() runs the first epoch and the cached ones apart, which
  // can rank the places differently.
  for (const CacheOption &o : options) {
    std::vector<Lane> us = lanes(p, o.after);
    int64_t nPar = 0;
    double count = 1;
    for (const Lane &u : us)
      if (u.parallel) {
        ++nPar;
        if (u.pinned == 0)
          count *= static_cast<double>(cores);
      }
    if (count > 20000 || (nPar == 0 && o.after == c.cache.after))
      continue;
    std::vector<Profile> fragile = fragileProfiles(p, us);
    // Workers before a cache and after it count apart (Model.h), as in the
    // program's cores rows.
    int64_t allowed = std::max(
        cores, concurrentWorkers(p, us, std::vector<int64_t>(us.size(), 1)));
    auto better = [&](double t, double f, const std::vector<int64_t> &par) {
      if (t > bestT * (1 + kRefineTie))
        return true;
      if (t < bestT * (1 - kRefineTie))
        return false;
      if (f > bestF * (1 + kRefineTie))
        return true;
      if (f < bestF * (1 - kRefineTie))
        return false;
      int64_t n = workerCount(us, par);
      int64_t nBest = workerCount(bestLanes, best.parallelism);
      return tiesToFewer ? n < nBest : n > nBest;
    };
    std::vector<int64_t> par(us.size(), 1);
    for (size_t k = 0; k < us.size(); ++k)
      if (us[k].parallel && us[k].pinned > 0)
        par[k] = us[k].pinned;
    for (;;) {
      if (concurrentWorkers(p, us, par) <= allowed) {
        Config cand = c;
        cand.cache = o;
        cand.parallelism = par;
        Prediction pr = predict(p, cand, cores);
        bool fits = !std::isfinite(memLimit) ||
                    static_cast<double>(pr.memoryBytes) <= memLimit;
        if (fits) {
          seen.push_back({cand, pr.throughput});
          double f = fragileThroughput(fragile, cand, cores);
          if (better(pr.throughput, f, par)) {
            best = cand;
            bestLanes = us;
            bestT = pr.throughput;
            bestF = f;
          }
        }
      }
      if (!nextParallelism(us, par, cores))
        break;
    }
  }
  c = best;
  // The close call: the best other parallelism of the same cache option
  // the model puts within kCloseCallBand of the chosen one.
  if (closeCall) {
    closeCall->reset();
    double closeT = 0;
    for (const Seen &x : seen) {
      if (x.config.cache.after != best.cache.after ||
          x.config.cache.to != best.cache.to ||
          x.config.parallelism == best.parallelism ||
          x.t < bestT * (1 - kCloseCallBand) || x.t <= closeT)
        continue;
      *closeCall = x.config;
      closeT = x.t;
    }
    if (*closeCall && closeGain)
      *closeGain = closeT / bestT - 1;
  }
}

/// A cache the spec did not ask for must raise the predicted throughput by
/// at least this fraction: it costs memory or disk, its first epoch runs
/// uncached, and the model's error is larger than a gain of a few percent.
constexpr double kMinCacheGain = 0.05;

/// The program, with (`allowCache`) or without the cache options the spec
/// did not pin.
Expected<Solution> solveProgram(const Profile &p, const Budget &budget,
                                bool allowCache) {
  auto t0 = std::chrono::steady_clock::now();
  Solution sol;
  const int64_t cores = std::max<int64_t>(1, budget.cores);
  const double memLimit = budget.memoryBytes > 0
                              ? static_cast<double>(budget.memoryBytes)
                              : std::numeric_limits<double>::infinity();

  // Options: no cache, then every allowed place, minus what cannot fit.
  std::vector<CacheOption> options{CacheOption{}};
  bool cachePinned = false;
  for (const CacheOption &o : cacheOptions(p)) {
    bool pinned =
        p.steps[static_cast<size_t>(o.after)].pinned.cache.has_value();
    if (pinned) {
      options = {o};
      cachePinned = true;
      break;
    }
    const std::string &step = p.steps[static_cast<size_t>(o.after)].name;
    if (o.to == "memory" &&
        static_cast<double>(o.bytes + p.fixedMemoryBytes) > memLimit) {
      sol.notes.push_back("a memory cache after '" + step + "' (" +
                          runtime::formatBytes(o.bytes) +
                          ") does not fit budget.memory " +
                          runtime::formatBytes(budget.memoryBytes));
      continue;
    }
    if (o.to == "disk" && o.bytes > budget.diskBytes) {
      sol.notes.push_back("a disk cache after '" + step + "' (" +
                          runtime::formatBytes(o.bytes) +
                          ") does not fit the " +
                          runtime::formatBytes(budget.diskBytes) +
                          " free in the cache directory");
      continue;
    }
    options.push_back(o);
  }
  // Σ parallelism <= cores: a cache that splits a parallel group in two
  // would need a worker more than the budget has. Only when every option
  // has more parallel stages than cores do they share (one worker each).
  {
    auto nPar = [&](const CacheOption &o) {
      std::vector<Lane> us = lanes(p, o.after);
      return concurrentWorkers(p, us, std::vector<int64_t>(us.size(), 1));
    };
    int64_t least = nPar(options.front());
    for (const CacheOption &o : options)
      least = std::min(least, nPar(o));
    int64_t allowed = std::max(cores, least);
    std::vector<CacheOption> kept;
    for (const CacheOption &o : options) {
      if (nPar(o) <= allowed)
        kept.push_back(o);
      else if (o.to == "memory")
        sol.notes.push_back("a cache after '" +
                            p.steps[static_cast<size_t>(o.after)].name +
                            "' splits a parallel stage in two, needing " +
                            std::to_string(nPar(o)) + " workers on " +
                            std::to_string(cores) + " cores");
    }
    options = kept;
  }
  if (!allowCache && !cachePinned)
    options = {CacheOption{}};
  if (!p.sourceRecordsPerEpoch)
    sol.notes.push_back("no cache considered: the source cannot tell how many "
                        "records an epoch has, so a cache's size is unknown");
  else if (p.epochs == 1 && options.size() > 1)
    sol.notes.push_back("one epoch: a cache would only cost (it pays off from "
                        "the second epoch)");

  // The largest throughput any option reaches: every lane at full cores.
  double tmax = 0;
  for (const CacheOption &o : options) {
    Config c;
    c.cache = o;
    for (const Lane &u : lanes(p, o.after))
      c.parallelism.push_back(u.pinned > 0 ? u.pinned : cores);
    tmax = std::max(tmax, predict(p, c, cores).throughput);
  }
  if (!std::isfinite(tmax) || tmax <= 0)
    tmax = 1e9;
  tmax *= 1.5;
  const double eps = tmax * 1e-4;

  Lp lp;
  glp_set_prob_name(lp.prob, "sluice-schedule");
  glp_set_obj_dir(lp.prob, GLP_MAX);
  int tCol = lp.col("T", GLP_CV, 0, tmax, 1.0);

  struct LaneVars {
    Lane lane;
    std::vector<std::pair<int64_t, int>> x; // (parallelism, column)
  };
  struct OptionVars {
    int y = 0;
    std::vector<LaneVars> lanes;
  };
  std::vector<OptionVars> ov(options.size());
  std::vector<std::pair<int, double>> sumY, coresRow, memRow, diskRow;
  const double e = p.epochs < 0 ? 1000.0 : std::max<double>(1, p.epochs);
  const double cal = calibrationAt(p, static_cast<double>(cores));
  for (size_t o = 0; o < options.size(); ++o) {
    const CacheOption &opt = options[o];
    double penalty = opt.after < 0 ? 0 : eps * (opt.to == "disk" ? 2 : 1);
    ov[o].y = lp.col("y" + std::to_string(o), GLP_BV, 0, 1, -penalty);
    sumY.push_back({ov[o].y, 1});
    if (opt.to == "memory")
      memRow.push_back({ov[o].y, static_cast<double>(opt.bytes)});
    if (opt.to == "disk")
      diskRow.push_back({ov[o].y, static_cast<double>(opt.bytes)});
    std::vector<Lane> us = lanes(p, opt.after);
    int64_t nPar = concurrentWorkers(p, us, std::vector<int64_t>(us.size(), 1));
    const bool phases = p.epochs < 0 || p.epochs >= 2;
    // Workers before a cache and after it are counted apart
    // (concurrentWorkers): the former run in the first epoch only.
    std::vector<std::pair<int, double>> optCores, optCoresBefore;
    double cpu = 0;
    for (const Lane &u : us) {
      LaneVars uv{u, {}};
      double f = u.beforeCache ? 1 / e : 1;
      // Calibrated like predict(): capacities scale by the calibration of
      // the configuration's level; the program uses the level of all cores
      // (what it usually chooses) and refine() re-ranks with the full model.
      double secs = laneSeconds(p, u) * f / cal;
      for (size_t i : u.steps)
        cpu += p.steps[i].visits * p.steps[i].cpuPerElement * f;
      double m = tmax * secs;
      if (u.parallel) {
        Usl usl = laneUsl(p, u);
        int64_t lo = u.pinned > 0 ? u.pinned : 1;
        int64_t hi = u.pinned > 0 ? u.pinned : cores;
        std::vector<std::pair<int, double>> one{{ov[o].y, -1}};
        std::vector<std::pair<int, double>> cap{{tCol, secs}, {ov[o].y, m}};
        double slot = laneSlotBytes(p, u);
        for (int64_t par = lo; par <= hi; ++par) {
          int x = lp.col("x" + std::to_string(o) + "_" +
                             std::to_string(u.steps.front()) + "_" +
                             std::to_string(par),
                         // At equal predicted throughput, spend the cores:
                         // the CPU bound is an estimate, workers cost none.
                         GLP_BV, 0, 1, eps * 1e-2 * static_cast<double>(par));
          uv.x.push_back({par, x});
          one.push_back({x, 1});
          cap.push_back({x, -usl.speedup(static_cast<double>(par))});
          (u.beforeCache && phases ? optCoresBefore : optCores)
              .push_back({x, static_cast<double>(par)});
          memRow.push_back(
              {x, static_cast<double>(windowSlots(par, 0)) * slot});
        }
        lp.row(one, 0, true); // exactly one parallelism when chosen
        if (secs > 0)
          lp.row(cap, m); // T secs <= speedup(p), when chosen
      } else if (secs > 0) {
        lp.row({{tCol, secs}, {ov[o].y, m}}, 1 + m);
      }
      ov[o].lanes.push_back(std::move(uv));
    }
    // The cache itself, and all work on the cores.
    Config probe;
    probe.cache = opt;
    for (const Lane &u : us)
      probe.parallelism.push_back(u.pinned > 0 ? u.pinned : 1);
    Prediction pr = predict(p, probe, cores);
    if (opt.after >= 0 && !pr.lanes.empty()) {
      double secs = pr.lanes.back().secondsPerRecord / cal;
      if (secs > 0)
        lp.row({{tCol, secs}, {ov[o].y, tmax * secs}}, 1 + tmax * secs);
    }
    double cpuAll =
        std::isfinite(pr.cpuCapacity) && pr.cpuCapacity > 0
            ? static_cast<double>(cores) * pr.calibration / pr.cpuCapacity / cal
            : cpu;
    if (cpuAll > 0)
      lp.row({{tCol, cpuAll}, {ov[o].y, tmax * cpuAll}},
             static_cast<double>(cores) + tmax * cpuAll);
    // Σ parallelism <= cores (every parallel stage needs one worker, so a
    // pipeline with more parallel stages than cores gets one each).
    optCores.push_back(
        {ov[o].y, -static_cast<double>(std::max<int64_t>(cores, nPar))});
    lp.row(optCores, 0);
    if (!optCoresBefore.empty()) {
      optCoresBefore.push_back(
          {ov[o].y, -static_cast<double>(std::max<int64_t>(cores, nPar))});
      lp.row(optCoresBefore, 0);
    }
    if (nPar > cores)
      sol.notes.push_back(std::to_string(nPar) + " parallel stages on " +
                          std::to_string(cores) +
                          " cores: each gets one worker and they share the "
                          "cores");
  }
  lp.row(sumY, 1, true);

  // Prefetch depths.
  struct BufVars {
    size_t step;
    int64_t recommended;
    std::vector<std::pair<int64_t, int>> z;
    int64_t freshCap = -1; ///< freshMemoryDepthCap (-1: none)
    double runSeconds = 0;
  };
  std::vector<BufVars> bufs;
  const bool freshCapOn = prefetchTouchCapOn();
  for (size_t i : prefetchCandidates(p)) {
    BufVars b{i, recommendedDepth(p, i), {}};
    if (freshCapOn)
      b.freshCap = freshMemoryDepthCap(p, i, &b.runSeconds);
    std::vector<int64_t> depths;
    if (p.steps[i].pinned.prefetch) {
      depths = {*p.steps[i].pinned.prefetch};
    } else {
      int64_t most =
          b.freshCap >= 0 ? std::min(b.recommended, b.freshCap) : b.recommended;
      for (int64_t d : {0, 1, 2, 4, 8, 16, 32, 64})
        if (d < most)
          depths.push_back(d);
      depths.push_back(most);
    }
    std::vector<std::pair<int, double>> one;
    double bytes = slotBytes(p, i);
    for (int64_t d : depths) {
      double bonus =
          eps * std::min<double>(1, static_cast<double>(d) /
                                        static_cast<double>(b.recommended));
      int z = lp.col("z" + std::to_string(i) + "_" + std::to_string(d), GLP_BV,
                     0, 1, bonus);
      b.z.push_back({d, z});
      one.push_back({z, 1});
      memRow.push_back({z, static_cast<double>(d) * bytes});
    }
    lp.row(one, 1, true);
    bufs.push_back(std::move(b));
  }
  if (std::isfinite(memLimit))
    lp.row(memRow, memLimit - static_cast<double>(p.fixedMemoryBytes));
  if (!diskRow.empty())
    lp.row(diskRow, static_cast<double>(budget.diskBytes));

  glp_load_matrix(lp.prob, static_cast<int>(lp.ia.size()) - 1, lp.ia.data(),
                  lp.ja.data(), lp.ar.data());
  sol.variables = glp_get_num_cols(lp.prob);
  sol.constraints = glp_get_num_rows(lp.prob);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  parm.tm_lim = 10000;
  int rc = glp_intopt(lp.prob, &parm);
  int status = glp_mip_status(lp.prob);
  if (rc != 0 || (status != GLP_OPT && status != GLP_FEAS)) {
    // The only infeasibility is memory: report the smallest footprint.
    Prediction smallest = predict(p, naiveConfig(p), cores);
    return Status::error(
        "no schedule fits budget.memory " +
        runtime::formatBytes(budget.memoryBytes) +
        ": even one worker per stage, no prefetch and no cache needs " +
        runtime::formatBytes(smallest.memoryBytes) + " (" +
        runtime::formatBytes(p.fixedMemoryBytes) +
        " of it in shuffle and batch buffers); raise the budget or shrink "
        "those buffers");
  }
  sol.status = status == GLP_OPT ? "optimal" : "feasible (time limit)";

  size_t chosen = 0;
  for (size_t o = 0; o < ov.size(); ++o)
    if (glp_mip_col_val(lp.prob, ov[o].y) > 0.5)
      chosen = o;
  sol.config.cache = options[chosen];
  for (const LaneVars &uv : ov[chosen].lanes) {
    int64_t par = 1;
    for (auto [v, col] : uv.x)
      if (glp_mip_col_val(lp.prob, col) > 0.5)
        par = v;
    sol.config.parallelism.push_back(par);
  }
  for (const BufVars &b : bufs)
    for (auto [d, col] : b.z)
      if (glp_mip_col_val(lp.prob, col) > 0.5)
        sol.config.prefetch[b.step] = d;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].pinned.prefetch && !sol.config.prefetch.count(i))
      sol.config.prefetch[i] = *p.steps[i].pinned.prefetch;
  refine(p, sol.config, options, cores, memLimit, &sol.closeCall,
         &sol.closeCallGain);
  sol.prediction = predict(p, sol.config, cores);
  const Prediction &pr = sol.prediction;

  // Reasons, knob by knob.
  std::vector<Lane> us = lanes(p, sol.config.cache.after);
  std::string bneck = "the bottleneck (" + pr.bottleneckLabel + ", " +
                      fmtRate(pr.throughput) + " records/s)";
  for (size_t k = 0; k < us.size(); ++k) {
    if (!us[k].parallel)
      continue;
    const LanePrediction &up = pr.lanes[k];
    std::string firstStep;
    for (size_t i : us[k].steps)
      if (p.steps[i].element && firstStep.empty())
        firstStep = p.steps[i].name;
    KnobChoice kc{firstStep, "parallelism", std::to_string(up.parallelism),
                  us[k].pinned > 0, ""};
    Usl usl = laneUsl(p, us[k]);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%.3g ms of work per source record; %lld worker%s "
                  "%s records/s (measured scaling: sigma %.3f, kappa %.4f)",
                  up.secondsPerRecord * 1e3,
                  static_cast<long long>(up.parallelism),
                  up.parallelism == 1 ? " serves" : "s serve",
                  fmtRate(up.capacity).c_str(), usl.sigma, usl.kappa);
    kc.reason = buf;
    if (kc.pinned)
      kc.reason = "pinned in the spec's schedule; " + kc.reason;
    else if (static_cast<int>(k) == pr.bottleneck)
      kc.reason += "; this is the bottleneck and the core budget (" +
                   std::to_string(cores) + ") is spent";
    else {
      kc.reason += ", above " + bneck + ": more workers would not help";
      // What one worker more is predicted to do (the model's contention
      // term: a thread more beside the others on the cores).
      Config more = sol.config;
      ++more.parallelism[k];
      if (up.parallelism < cores &&
          concurrentWorkers(p, us, more.parallelism) <=
              std::max(cores, concurrentWorkers(
                                  p, us, std::vector<int64_t>(us.size(), 1)))) {
        // Compared as refine() ranks them: with one calibration for both
        // levels.
        Profile flat = p;
        flat.calibrationByLevel.clear();
        double t = predict(flat, more, cores).throughput;
        double t0 = predict(flat, sol.config, cores).throughput;
        double gain = t / t0 - 1;
        t = pr.throughput * (1 + gain); // at the chosen one's calibration
        char more_[320];
        std::snprintf(
            more_, sizeof more_,
            "; %lld workers are predicted %s records/s (%+.1f%%): %s",
            static_cast<long long>(up.parallelism + 1), fmtRate(t).c_str(),
            gain * 100,
            gain < -kRefineTie
                ? "the extra worker's thread would take the cores' share of "
                  "the other threads (contention)"
            : tiesToFewerWorkers()
                ? "no gain the model can tell, so the fewer threads are "
                  "kept (SLUICE_TIES_TO_FEWER_WORKERS=1)"
                : "no gain the model can tell, and it is not kept: it "
                  "would not fit the memory budget, or it holds up worse "
                  "were a lane 15% costlier than measured");
        kc.reason += more_;
      }
    }
    sol.knobs.push_back(kc);
  }
  for (const BufVars &b : bufs) {
    int64_t d = sol.config.prefetch[b.step];
    KnobChoice kc{p.steps[b.step].name, "prefetch", std::to_string(d),
                  p.steps[b.step].pinned.prefetch.has_value(), ""};
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "its rate varies (CV %.2f over 50 ms): %lld items ride out "
                  "a two-sigma dip",
                  p.steps[b.step].rateCv,
                  static_cast<long long>(b.recommended));
    kc.reason = buf;
    if (kc.pinned) {
      kc.reason = "pinned in the spec's schedule";
    } else if (b.freshCap >= 0 && b.freshCap < b.recommended &&
               d == b.freshCap) {
      std::snprintf(
          buf, sizeof buf,
          "; reduced to %lld: more would cost over %.0f%% of the predicted "
          "run (%.2f s) in first touches of its buffers (%s per item, fresh "
          "memory measured at %.2f us per 4 KiB page; "
          "SLUICE_NO_PREFETCH_TOUCH_CAP=1 lifts this)",
          static_cast<long long>(d), kFreshMemoryShare * 100, b.runSeconds,
          runtime::formatBytes(static_cast<int64_t>(slotBytes(p, b.step)))
              .c_str(),
          p.freshMemorySecondsPerByte * 4096 * 1e6);
      kc.reason += buf;
    } else if (d < b.recommended) {
      kc.reason +=
          "; reduced to " + std::to_string(d) + " to stay within budget.memory";
    }
    sol.knobs.push_back(kc);
  }
  {
    const CacheOption &c = sol.config.cache;
    KnobChoice kc;
    kc.knob = "cache";
    kc.pinned = cachePinned;
    if (c.after >= 0) {
      kc.step = p.steps[static_cast<size_t>(c.after)].name;
      kc.value = c.to;
      double before = 0;
      for (size_t i = 0; i <= static_cast<size_t>(c.after); ++i)
        before += p.steps[i].visits * p.steps[i].secondsPerElement;
      char buf[384];
      int n = std::snprintf(buf, sizeof buf,
                            "the deterministic prefix up to here costs %.3g "
                            "ms per record and runs once instead of %lld "
                            "times; one epoch materializes %s",
                            before * 1e3, static_cast<long long>(p.epochs),
                            runtime::formatBytes(c.bytes).c_str());
      // The first epoch's first touches of it (Model.cpp, cacheSeconds).
      if (c.to == "memory" && cacheTouchCostOn() &&
          p.freshMemorySecondsPerByte > 0 && n > 0 &&
          static_cast<size_t>(n) < sizeof buf)
        std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                      ", first touched in the first epoch (%.2g s of CPU at "
                      "%.3g us per 4 KiB page, counted)",
                      static_cast<double>(c.bytes) *
                          p.freshMemorySecondsPerByte,
                      p.freshMemorySecondsPerByte * 4096 * 1e6);
      kc.reason = cachePinned ? "pinned in the spec's schedule" : buf;
    } else {
      kc.step = "";
      kc.value = "none";
      kc.reason = options.size() == 1
                      ? "no place for a cache fits the budgets (or none is "
                        "allowed: a random op or shuffle comes first)"
                      : "no cache raises the predicted throughput";
    }
    sol.knobs.push_back(kc);
  }
  sol.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return sol;
}

} // namespace

namespace {

/// Chooses the requests a remote source keeps in flight for the solved
/// configuration: by Little's law, enough to serve what the rest of the
/// pipeline is predicted to sustain (kInFlightHeadroom over the mean),
/// within what the memory budget leaves; the spec's remote.concurrency when
/// it pins one. Adds the knob (with its reason) and re-predicts.
void chooseInFlight(const Profile &p, const Budget &budget, Solution &sol) {
  if (!p.remote.present())
    return;
  Config &c = sol.config;
  c.sourceInFlight = 0;
  Prediction open = predict(p, c, budget.cores);
  KnobChoice kc;
  kc.step = p.steps.front().name;
  kc.knob = "requests in flight";
  char buf[400];
  const double latMs = p.remote.latencySeconds * 1e3;
  if (p.remote.pinned > 0) {
    c.sourceInFlight = p.remote.pinned;
    kc.pinned = true;
    std::snprintf(buf, sizeof buf,
                  "source: %lld requests in flight (remote.concurrency), "
                  "%.0f ms median latency",
                  static_cast<long long>(c.sourceInFlight), latMs);
    kc.reason = buf;
  } else {
    int64_t room = 0;
    if (budget.memoryBytes > 0)
      room = std::max<int64_t>(1, (budget.memoryBytes - open.memoryBytes) / 4);
    // A per-record source serves the larger of the calibrated rate and the
    // model's own (before calibration): too few requests in flight cap the
    // whole pipeline (image_folder at 20 ms, one core: 0.45x local at 16,
    // 0.78x at 32, 0.88x at 64), too many cost one object's bytes each, and
    // probes on a loaded host calibrate the rate down by 20-30% (two
    // workers measured no faster than one), which chose 27-31 where 40-64
    // were needed. A windowed source's requests are chunks of megabytes,
    // sized from the calibrated rate as before.
    double rate = open.throughput;
    std::string rateNote;
    if (!p.remote.windowed() && uncalibratedInFlightOn()) {
      Profile raw = p;
      raw.calibration = 1;
      raw.calibrationByLevel.clear();
      raw.cachedCalibration = raw.firstCalibration = 0;
      double model = predict(raw, c, budget.cores).throughput;
      if (std::isfinite(model) && model > rate * 1.005 && std::isfinite(rate) &&
          rate > 0) {
        char note[200];
        std::snprintf(note, sizeof note,
                      " (the model before calibration: the probes measured "
                      "%.2f of it, and too few requests in flight cost more "
                      "than too many)",
                      rate / model);
        rateNote = note;
        rate = model;
      }
    }
    c.sourceInFlight = inFlightFor(p, rate, room);
    int64_t wanted = inFlightFor(p, rate);
    kc.reason = describeInFlight(p, rate, c.sourceInFlight, wanted, rateNote);
  }
  kc.value = std::to_string(c.sourceInFlight);
  sol.knobs.push_back(kc);
  sol.prediction = predict(p, c, budget.cores);
}

} // namespace

Expected<Solution> solve(const Profile &p, const Budget &budget) {
  Expected<Solution> s = solveConfig(p, budget);
  if (s)
    chooseInFlight(p, budget, *s);
  return s;
}

Expected<Solution> solveConfig(const Profile &p, const Budget &budget) {
  Expected<Solution> with = solveProgram(p, budget, true);
  if (!with || with->config.cache.after < 0)
    return with;
  for (const KnobChoice &k : with->knobs)
    if (k.knob == "cache" && k.pinned)
      return with;
  // A cache was chosen: is it worth it?
  Expected<Solution> without = solveProgram(p, budget, false);
  if (!without)
    return with;
  double a = with->prediction.throughput, b = without->prediction.throughput;
  if (!(b > 0) || a > b * (1 + kMinCacheGain))
    return with;
  const CacheOption &c = with->config.cache;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "a %s cache after '%s' would raise the predicted throughput "
                "by only %.1f%% (less than %.0f%%): not worth its %s",
                c.to.c_str(),
                p.steps[static_cast<size_t>(c.after)].name.c_str(),
                (a / b - 1) * 100, kMinCacheGain * 100,
                c.to == "disk" ? "disk space" : "memory");
  without->notes.push_back(buf);
  for (KnobChoice &k : without->knobs)
    if (k.knob == "cache")
      k.reason = buf;
  without->seconds += with->seconds;
  return without;
}

} // namespace sluice::autotune
