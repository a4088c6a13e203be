//===- autotune_bench.cpp - The autotuner against an oracle and a peer ----===//
//
// For each spec: `sluice tune`'s choice (timed), the naive configuration
// (one worker per stage, no prefetch, no cache), a tf.data-style hill climb
// (the peer: start every parallel stage at 1 worker, run, add a worker to the
// stage with the most work per worker, until the core budget is spent; no
// cache, default buffers), and an exhaustive grid over the same knobs the
// tuner chooses from (the oracle: every parallelism split within the cores x
// every allowed cache place, memory and disk, or none x prefetch 0 or the
// tuned depths). Every configuration runs the spec's whole epochs (so a
// cache's first, uncached epoch counts) once per round; rounds interleave all
// configurations so load from other processes spreads over them; figures are
// medians over rounds. The best of many noisy medians overstates the best
// configuration (selection bias), so the grid is a screening pass: its three
// best configurations then run again, with naive, the peer and tuned, in
// --final rounds (default 2x --rounds) of their own, and the table reports
// that final pass. Not a test: the machine is shared and noisy.
//
// usage: autotune_bench [--rounds N] [--final N] [--min-seconds S] [--verbose]
//                       [--no-jit] [--trace] [--phases N] SPEC...
// (--verbose: every configuration's median, per-round rates and the model's
// prediction of it on stderr; --no-jit: the runtime's kernels instead of the
// JIT ones `sluice run` uses; --min-seconds: whole runs repeat back to back
// until a measurement lasts S seconds, default 1; --phases N: instead of the
// grid, N interleaved pairs of the tuned cached schedule's first epoch and
// one epoch of the same plan split at the cache point without the cache,
// same knobs: wall and process CPU of each, and the tune's phase figures)
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Tune.h"
#include "sluice/compiler/Codegen.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Memory.h"
#include "sluice/runtime/Pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <sys/resource.h>

using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty())
    return 0;
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Candidate {
  std::string name;
  autotune::Schedule schedule;
  std::vector<double> rates; ///< source records/s per round (whole run)
  int64_t memoryPeak = 0;
  /// The configuration, for the model's prediction of it (--verbose).
  std::optional<autotune::Config> config;
  /// Process CPU seconds per source record, per final round (whole run).
  std::vector<double> cpuPerRecord;
  double median() const { return medianOf(rates); }
};

/// A schedule's knobs as text, with the defaults (prefetch 0, no cache)
/// left out, so two schedules that run the same configuration compare equal.
std::string scheduleKey(const autotune::Schedule &s) {
  std::string k;
  for (const auto &[step, o] : s) {
    std::string part;
    if (o.parallelism)
      part += " p=" + std::to_string(*o.parallelism);
    if (o.prefetch && *o.prefetch > 0)
      part += " f=" + std::to_string(*o.prefetch);
    if (o.cache && !o.cache->empty())
      part += " c=" + *o.cache;
    if (!part.empty())
      k += step + ":" + part + ";";
  }
  return k;
}

/// The kernel binder every run uses: `sluice run`'s JIT kernels unless
/// --no-jit (or SLUICE_NO_JIT=1), so the bench measures what users run.
runtime::KernelBinder gBinder;

double runWholeOnce(const runtime::Plan &plan, const autotune::Schedule &s,
                    int64_t cores, int64_t perEpoch, int64_t *peak,
                    double *records);
double processCpuSeconds();

/// Seconds one measurement lasts at least: whole runs are repeated back to
/// back until this much time has passed (a Criteo-sized run takes 0.1-0.4 s,
/// and one burst of load from another process decides a run that short).
double gMinSeconds = 1.0;

/// Runs the plan's whole epochs, again until gMinSeconds have passed;
/// source-record equivalents per second over all of them (each run pays its
/// own start-up, so this is still the whole-run rate).
double runWhole(const runtime::Plan &plan, const autotune::Schedule &s,
                int64_t cores, int64_t perEpoch, int64_t *peak,
                double *cpuPerRecord = nullptr) {
  double records = 0, seconds = 0;
  double c0 = processCpuSeconds();
  do {
    double n = 0;
    double rate = runWholeOnce(plan, s, cores, perEpoch, peak, &n);
    if (!(rate > 0))
      return 0;
    records += n;
    seconds += n / rate;
  } while (seconds < gMinSeconds);
  if (cpuPerRecord)
    *cpuPerRecord = (processCpuSeconds() - c0) / records;
  return records / seconds;
}

/// One run of the plan's whole epochs; source-record equivalents per second.
double runWholeOnce(const runtime::Plan &plan, const autotune::Schedule &s,
                    int64_t cores, int64_t perEpoch, int64_t *peak,
                    double *records) {
  runtime::RunOptions o;
  o.schedule = s;
  o.threads = cores;
  o.progress = runtime::RunOptions::Progress::Off;
  o.binder = gBinder;
  auto p = runtime::Pipeline::create(plan, o);
  if (!p) {
    std::cerr << "  run failed: " << p.status().message() << "\n";
    return 0;
  }
  auto t0 = Clock::now();
  runtime::Batch b;
  for (;;) {
    auto more = (*p)->next(b);
    if (!more) {
      std::cerr << "  run failed: " << more.status().message() << "\n";
      return 0;
    }
    if (!*more)
      break;
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  runtime::RunStats st = (*p)->stats();
  *peak = std::max(*peak, st.memoryPeak);
  *records = static_cast<double>(perEpoch * (*p)->epochs());
  return *records / secs;
}

/// The peer: tf.data-style hill climbing on measured work per worker.
autotune::Config hillClimb(const runtime::Plan &plan,
                           const autotune::Profile &prof, int64_t cores) {
  std::vector<runtime::Lane> us = autotune::lanes(prof, -1);
  std::vector<int64_t> par(us.size(), 1);
  int64_t used = 0;
  for (const runtime::Lane &u : us)
    used += u.parallel;
  auto config = [&] {
    autotune::Config c;
    c.parallelism = par;
    return c;
  };
  while (used < cores) {
    runtime::RunOptions o;
    o.schedule = autotune::toSchedule(prof, config());
    o.binder = gBinder;
    o.threads = cores;
    o.epochs = 1000000;
    std::vector<runtime::RunStats> samples;
    auto m = autotune::measure(plan, o, 1.0, 1 << 30, &samples);
    if (!m || samples.size() < 2)
      break;
    // Work per worker of each parallel stage in the window.
    double worst = -1;
    size_t pick = 0;
    for (size_t k = 0; k < us.size(); ++k) {
      if (!us[k].parallel || us[k].pinned)
        continue;
      double wall = 0;
      for (size_t i : us[k].steps)
        for (const runtime::StageStats &s : samples.back().stages)
          if (s.name == prof.steps[i].name)
            wall += s.wallSeconds;
      for (size_t i : us[k].steps)
        for (const runtime::StageStats &s : samples.front().stages)
          if (s.name == prof.steps[i].name)
            wall -= s.wallSeconds;
      double perWorker = wall / static_cast<double>(par[k]);
      if (perWorker > worst) {
        worst = perWorker;
        pick = k;
      }
    }
    if (worst < 0)
      break;
    ++par[pick];
    ++used;
  }
  return config();
}

/// The oracle's grid.
std::vector<Candidate> grid(const autotune::Profile &prof,
                            const autotune::Solution &tuned, int64_t cores) {
  std::vector<Candidate> out;
  std::vector<autotune::CacheOption> caches{autotune::CacheOption{}};
  for (const autotune::CacheOption &o : autotune::cacheOptions(prof))
    caches.push_back(o);
  for (const autotune::CacheOption &c : caches) {
    std::vector<runtime::Lane> us = autotune::lanes(prof, c.after);
    std::vector<int64_t> par(us.size(), 1);
    for (;;) {
      // Workers before a cache and after it count apart, as the solver
      // counts them (autotune::concurrentWorkers).
      int64_t used = autotune::concurrentWorkers(prof, us, par);
      int64_t nPar = autotune::concurrentWorkers(
          prof, us, std::vector<int64_t>(us.size(), 1));
      if (used <= std::max(cores, nPar))
        for (bool prefetch : {false, true}) {
          autotune::Config cfg;
          cfg.cache = c;
          cfg.parallelism = par;
          if (prefetch)
            cfg.prefetch = tuned.config.prefetch;
          Candidate cand;
          cand.schedule = autotune::toSchedule(prof, cfg);
          cand.config = cfg;
          std::string n = "p=";
          for (size_t k = 0; k < us.size(); ++k)
            if (us[k].parallel)
              n += std::to_string(par[k]) + ",";
          n.pop_back();
          n += c.after < 0 ? " nocache"
                           : " cache:" + c.to + "@" +
                                 prof.steps[static_cast<size_t>(c.after)].name;
          n += prefetch ? " +prefetch" : "";
          cand.name = n;
          out.push_back(cand);
        }
      if (!autotune::nextParallelism(us, par, cores))
        break;
    }
  }
  return out;
}

double processCpuSeconds() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/// --phases: what a cached schedule's first epoch costs against the same
/// epoch without the cache. Each pair runs (a) the tuned schedule for one
/// epoch (the cache is written, as in a whole run's first epoch) and (b)
/// the plan split where the tuned cache splits it, same knobs, no cache,
/// one epoch; which runs first alternates. Prints each pair's wall seconds
/// and process CPU seconds, then the medians and the ratio of rates.
void phasePairs(const runtime::Plan &plan, const autotune::TuneResult &r,
                int pairs) {
  std::string cacheStep;
  autotune::Schedule uncached = r.schedule;
  for (auto &[step, o] : uncached)
    if (o.cache && !o.cache->empty()) {
      cacheStep = step;
      o.cache.reset();
    }
  if (cacheStep.empty()) {
    std::printf("%s: the tuned schedule has no cache; --phases skipped\n",
                r.profile.pipeline.c_str());
    return;
  }
  runtime::Plan split = plan;
  runtime::splitFusedAfter(split, cacheStep);
  const autotune::Prediction &pd = r.solution.prediction;
  std::printf("%s: the tune's prediction: first epoch %.0f records/s "
              "(first-epoch calibration %.2f), cached epochs %.0f, whole "
              "run %.0f\n",
              r.profile.pipeline.c_str(), pd.firstEpoch,
              r.profile.firstCalibration, pd.cachedEpochs, pd.wholeRun);
  int64_t perEpoch = r.profile.sourceRecordsPerEpoch.value_or(0);
  auto oneEpoch = [&](const runtime::Plan &pl, const autotune::Schedule &s,
                      double *cpu) {
    runtime::RunOptions o;
    o.schedule = s;
    o.threads = r.budget.cores;
    o.binder = gBinder;
    o.epochs = 1;
    o.progress = runtime::RunOptions::Progress::Off;
    auto p = runtime::Pipeline::create(pl, o);
    if (!p)
      return 0.0;
    double c0 = processCpuSeconds();
    auto t0 = Clock::now();
    runtime::Batch b;
    for (;;) {
      auto more = (*p)->next(b);
      if (!more || !*more)
        break;
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    *cpu = processCpuSeconds() - c0;
    return secs;
  };
  std::vector<double> cw, cc, uw, uc;
  for (int i = 0; i < pairs; ++i) {
    double cpuC = 0, cpuU = 0, wallC, wallU;
    if (i % 2) {
      wallU = oneEpoch(split, uncached, &cpuU);
      wallC = oneEpoch(plan, r.schedule, &cpuC);
    } else {
      wallC = oneEpoch(plan, r.schedule, &cpuC);
      wallU = oneEpoch(split, uncached, &cpuU);
    }
    std::printf("  pair %d: cached first epoch %.4f s (%.0f records/s, CPU "
                "%.3f s) | uncached epoch %.4f s (%.0f records/s, CPU %.3f "
                "s)\n",
                i + 1, wallC, perEpoch / wallC, cpuC, wallU, perEpoch / wallU,
                cpuU);
    cw.push_back(wallC);
    cc.push_back(cpuC);
    uw.push_back(wallU);
    uc.push_back(cpuU);
  }
  std::vector<double> ratio;
  for (size_t i = 0; i < cw.size(); ++i)
    ratio.push_back(uw[i] / cw[i]);
  std::printf("%s: medians: cached first epoch %.0f records/s, CPU %.1f us "
              "per record; uncached %.0f records/s, CPU %.1f us per record; "
              "rate ratio (cached / uncached, median of pairs) %.3f\n",
              r.profile.pipeline.c_str(), perEpoch / medianOf(cw),
              medianOf(cc) / perEpoch * 1e6, perEpoch / medianOf(uw),
              medianOf(uc) / perEpoch * 1e6, medianOf(ratio));
}

} // namespace

int main(int argc, char **argv) {
  int rounds = 3, finalRounds = 0;
  bool verbose = false, noJit = compiler::jitDisabledByEnvironment();
  bool trace = false;
  int phases = 0;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (a == "--final" && i + 1 < argc)
      finalRounds = std::atoi(argv[++i]);
    else if (a == "--verbose")
      verbose = true;
    else if (a == "--no-jit")
      noJit = true;
    else if (a == "--trace")
      trace = true;
    else if (a == "--phases" && i + 1 < argc)
      phases = std::atoi(argv[++i]);
    else if (a == "--min-seconds" && i + 1 < argc)
      gMinSeconds = std::atof(argv[++i]);
    else
      specs.push_back(a);
  }
  double load[1] = {0};
  getloadavg(load, 1);
  double loadLo = load[0], loadHi = load[0];
  auto noteLoad = [&] {
    double l[1] = {0};
    if (getloadavg(l, 1) == 1) {
      loadLo = std::min(loadLo, l[0]);
      loadHi = std::max(loadHi, l[0]);
    }
  };
  if (phases == 0)
    std::printf(
        "| pipeline | naive | hill climb (peer) | tuned | oracle (best of "
        "grid) | tuned/oracle | tuned/peer | tuned/naive | tuned/naive at full "
        "cores | predicted steady | predicted whole run | pred. error | pred. "
        "error, paired (range) | tune s | peak accounted "
        "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|--"
        "-:|---:|\n");
  for (const std::string &path : specs) {
    std::string text, err;
    if (!dsl::readFile(path, text, err)) {
      std::cerr << err << "\n";
      return 2;
    }
    dsl::DiagnosticEngine diags(path, text);
    auto spec = dsl::parseSpec(diags);
    if (!spec) {
      diags.print(std::cerr, false);
      return 2;
    }
    auto plan = compiler::buildPlan(*spec, {}, std::cerr);
    if (!plan)
      return 1;
    std::unique_ptr<compiler::JitKernels> kernels;
    gBinder = nullptr;
    if (!noJit) {
      auto k = compiler::JitKernels::compile(*plan);
      if (!k) {
        std::cerr << path << ": " << k.status().message() << "\n";
        return 1;
      }
      kernels = k.take();
      gBinder = kernels->binder();
    }
    autotune::TuneOptions topts;
    topts.verify = false;
    topts.profile.base.binder = gBinder;
    auto t0 = Clock::now();
    auto r = autotune::tune(*plan, topts);
    double tuneSecs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r) {
      std::cerr << path << ": " << r.status().message() << "\n";
      return 1;
    }
    int64_t cores = r->budget.cores;
    if (trace) {
      // Where a whole run of the tuned schedule spends its time: the
      // counters every 50 ms (t, source records, outputs), then the probes'
      // steady rates for comparison.
      for (int rep = 0; rep < 3; ++rep) {
        runtime::RunOptions o;
        o.schedule = r->schedule;
        o.threads = cores;
        o.binder = gBinder;
        o.progress = runtime::RunOptions::Progress::Off;
        std::vector<runtime::RunStats> samples;
        auto m = autotune::measure(*plan, o, 1e9, int64_t(1) << 60, &samples);
        if (!m)
          break;
        std::printf("trace %d: whole run %.0f records/s in %.3f s\n", rep,
                    m->sourceRecordsPerSecond, m->seconds);
        int64_t prevSrc = 0;
        double prevT = 0;
        for (const runtime::RunStats &st : samples) {
          if (st.stages.empty())
            continue;
          int64_t src = st.stages.front().emitted;
          double dt = st.wallSeconds - prevT;
          std::printf("  t %.3f src %lld out %lld rate %.0f\n", st.wallSeconds,
                      static_cast<long long>(src),
                      static_cast<long long>(st.outputs),
                      dt > 0 ? static_cast<double>(src - prevSrc) / dt : 0.0);
          prevSrc = src;
          prevT = st.wallSeconds;
        }
      }
      for (const autotune::Probe &q : r->profile.probes)
        std::printf("probe %s: %.0f records/s over %.3f s\n", q.label.c_str(),
                    q.sourceRecordsPerSecond, q.seconds);
      continue;
    }
    if (phases > 0) {
      phasePairs(*plan, *r, phases);
      noteLoad();
      continue;
    }
    int64_t perEpoch = r->profile.sourceRecordsPerEpoch.value_or(0);
    if (perEpoch <= 0) {
      // A source that cannot tell (csv): count one epoch.
      runtime::RunOptions o;
      o.epochs = 1;
      o.progress = runtime::RunOptions::Progress::Off;
      o.binder = gBinder;
      auto p = runtime::Pipeline::create(*plan, o);
      runtime::Batch b;
      while (p) {
        auto more = (*p)->next(b);
        if (!more || !*more)
          break;
      }
      if (p)
        perEpoch = (*p)->stats().stages.front().emitted;
    }
    if (perEpoch <= 0) {
      std::cerr << path << ": the epoch size is unknown; skipped\n";
      continue;
    }
    std::vector<Candidate> cands;
    autotune::Config naiveCfg = autotune::naiveConfig(r->profile);
    autotune::Config peerCfg = hillClimb(*plan, r->profile, cores);
    Candidate naive{
        "naive", autotune::toSchedule(r->profile, naiveCfg), {}, 0, naiveCfg};
    Candidate peer{"hill climb",
                   autotune::toSchedule(r->profile, peerCfg),
                   {},
                   0,
                   peerCfg};
    Candidate tuned{"tuned", r->schedule, {}, 0, r->solution.config};
    cands.push_back(naive);
    cands.push_back(peer);
    cands.push_back(tuned);
    std::vector<Candidate> g = grid(r->profile, r->solution, cores);
    size_t gridStart = cands.size();
    // The grid point that is the tuned schedule is run once, as "tuned":
    // two noisy medians of one configuration would make tuned/oracle < 1
    // by chance alone (the oracle is the best of the grid and tuned).
    std::string tunedKey = scheduleKey(r->schedule);
    for (const Candidate &c : g)
      if (scheduleKey(c.schedule) != tunedKey)
        cands.push_back(c);
      else if (verbose)
        std::cerr << r->profile.pipeline << ": grid point " << c.name
                  << " is the tuned schedule\n";
    for (int round = 0; round < rounds; ++round) {
      noteLoad();
      for (Candidate &c : cands)
        c.rates.push_back(
            runWhole(*plan, c.schedule, cores, perEpoch, &c.memoryPeak));
    }
    // What the model says of a configuration, against its median.
    auto predicted = [&](const Candidate &c) -> std::string {
      if (!c.config)
        return "";
      double w = autotune::predict(r->profile, *c.config, cores).wholeRun;
      char buf[96];
      std::snprintf(buf, sizeof buf, " predicted %.0f (%+.0f%%)", w,
                    (w - c.median()) / c.median() * 100);
      return buf;
    };
    if (verbose) {
      std::cerr << r->profile.pipeline << ": screening pass\n";
      for (const Candidate &c : cands) {
        std::cerr << "  " << c.name << ": median " << c.median() << " (";
        for (double x : c.rates)
          std::cerr << " " << static_cast<int64_t>(x);
        std::cerr << " )" << predicted(c) << "\n";
      }
    }
    // The final pass: naive, peer, tuned and the screening's best three.
    std::vector<size_t> order;
    for (size_t i = gridStart; i < cands.size(); ++i)
      order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return cands[a].median() > cands[b].median();
    });
    order.resize(std::min<size_t>(order.size(), 3));
    std::vector<Candidate> fin(cands.begin(),
                               cands.begin() + static_cast<long>(gridStart));
    for (size_t i : order)
      fin.push_back(cands[i]);
    for (Candidate &c : fin) {
      c.rates.clear();
      c.cpuPerRecord.clear();
    }
    int nFinal = finalRounds > 0 ? finalRounds : 2 * rounds;
    // Paired prediction error: every final round profiles again right
    // before it runs the tuned schedule, so prediction and measurement see
    // the same load from other processes (the one-shot error compares a
    // prediction with runs minutes later).
    std::vector<double> paired;
    autotune::TuneOptions again = topts;
    again.cores = cores;
    for (int round = 0; round < nFinal; ++round) {
      noteLoad();
      auto re = autotune::tune(*plan, again);
      double pr = re ? autotune::predict(re->profile, r->solution.config, cores)
                           .wholeRun
                     : 0;
      // The tuned schedule first, right after its prediction.
      std::vector<size_t> runOrder{2};
      for (size_t i = 0; i < fin.size(); ++i)
        if (i != 2)
          runOrder.push_back(i);
      for (size_t i : runOrder) {
        Candidate &c = fin[i];
        double cpu = 0;
        c.rates.push_back(
            runWhole(*plan, c.schedule, cores, perEpoch, &c.memoryPeak, &cpu));
        c.cpuPerRecord.push_back(cpu);
      }
      double m = fin[2].rates.back();
      if (pr > 0 && m > 0)
        paired.push_back((pr - m) / m);
      if (verbose)
        std::cerr << r->profile.pipeline << ": final round " << round + 1
                  << ": predicted " << static_cast<int64_t>(pr) << ", measured "
                  << static_cast<int64_t>(m) << "\n";
    }
    size_t screened = cands.size();
    cands = fin;
    // The oracle: the best of the grid's finalists and the tuned schedule
    // (itself a grid point).
    size_t best = 2;
    for (size_t i = gridStart; i < cands.size(); ++i)
      if (cands[i].median() > cands[best].median())
        best = i;
    double oracle = cands[best].median();
    int64_t peak = 0;
    for (const Candidate &c : cands)
      peak = std::max(peak, c.memoryPeak);
    // The runs are whole runs (start-up included): compared with the
    // model's whole-run figure.
    double steady = r->solution.prediction.throughput;
    double pred = r->solution.prediction.wholeRun;
    std::string pairedText = "-";
    if (!paired.empty()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%+.0f%% (%+.0f..%+.0f%%)",
                    medianOf(paired) * 100,
                    *std::min_element(paired.begin(), paired.end()) * 100,
                    *std::max_element(paired.begin(), paired.end()) * 100);
      pairedText = buf;
    }
    // The most tuned/naive can be on this host for the tuned schedule's
    // work: its process CPU per record spread over every core with none
    // idle (naive's measured wall time against that floor).
    double tunedCpu = medianOf(cands[2].cpuPerRecord);
    double fullCores =
        tunedCpu > 0 && cands[0].median() > 0
            ? (tunedCpu / static_cast<double>(cores)) * cands[0].median()
            : 0;
    fullCores = fullCores > 0 ? 1 / fullCores : 0;
    std::printf(
        "| %s | %.0f | %.0f | %.0f | %.0f (%s) | %.2f | %.2f | %.2f | %.2f | "
        "%.0f | %.0f | %+.0f%% | %s | %.1f | %s |\n",
        r->profile.pipeline.c_str(), cands[0].median(), cands[1].median(),
        cands[2].median(), cands[best].median(), cands[best].name.c_str(),
        cands[2].median() / oracle, cands[2].median() / cands[1].median(),
        cands[2].median() / cands[0].median(), fullCores, steady, pred,
        (pred - cands[2].median()) / cands[2].median() * 100,
        pairedText.c_str(), tuneSecs, runtime::formatBytes(peak).c_str());
    std::fflush(stdout);
    if (verbose)
      std::cerr << r->profile.pipeline << ": final pass\n";
    if (verbose)
      for (const Candidate &c : cands) {
        std::cerr << "  " << c.name << ": median " << c.median() << " (";
        for (double x : c.rates)
          std::cerr << " " << static_cast<int64_t>(x);
        std::cerr << " )" << predicted(c) << "\n";
      }
    std::cerr << r->profile.pipeline << ": " << screened << " configurations x "
              << rounds << " rounds, then " << cands.size() << " x " << nFinal
              << " final rounds; tuned schedule:\n"
              << autotune::scheduleYaml(*r);
  }
  noteLoad();
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  if (phases > 0) {
    std::printf("\n--phases: kernels %s; load average %.2f at start, "
                "%.2f..%.2f\n",
                noJit ? "runtime (--no-jit)" : "JIT (as sluice run)", load[0],
                loadLo, loadHi);
    return 0;
  }
  std::printf("\nrecords/s are source records (equivalents) per second over "
              "the spec's whole epochs, median of the final pass (%d screening "
              "rounds, then the best three of the grid with naive, peer and "
              "tuned); pred. error: the first tune's prediction against the "
              "final median; paired: median over the final rounds of a fresh "
              "profile's prediction against the tuned run right after it; "
              "tuned/naive at full cores: naive's rate against the tuned "
              "runs' process CPU per record divided by the cores, the most "
              "the tuned schedule's work allows on this host; "
              "kernels: %s; load average %.2f at start, %.2f..%.2f during the "
              "rounds; process peak RSS %ld MiB\n",
              rounds, noJit ? "runtime (--no-jit)" : "JIT (as sluice run)",
              load[0], loadLo, loadHi, u.ru_maxrss / 1024);
  return 0;
}
