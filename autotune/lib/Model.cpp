//===- Model.cpp - Operational analysis: capacities, scaling, buffers -----===//
//
// See Model.h. All rates are in source records per second, so stages before
// and after a filter or a batch compare directly: a stage's work per source
// record is its work per element times the elements it sees per source
// record (its "visits", the product of the selectivities before it).
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Model.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/Switches.h"
#include "sluice/runtime/Memory.h"
#include "sluice/runtime/StageGroups.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>

namespace sluice::autotune {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
/// Bytes per second a memory cache replays at (a copy of the record's
/// bookkeeping; the tensors are shared). Deliberately conservative.
constexpr double kMemoryCacheBytesPerSecond = 4e9;
} // namespace

bool cacheTouchCostOn() { return !switchedOff("SLUICE_NO_CACHE_TOUCH_COST"); }
bool requestBurstsOn() { return !switchedOff("SLUICE_NO_REQUEST_BURSTS"); }

namespace {
/// The requests in flight Little's law gives a per-record remote source at
/// `rate` records/s, with headroom (kMaxInFlight for an unknown rate).
double littlesInFlight(const RemoteProfile &r, double rate) {
  return std::isfinite(rate) && rate > 0
             ? rate * r.requestsPerRecord * r.requestSeconds * kInFlightHeadroom
             : static_cast<double>(kMaxInFlight);
}
/// The fewest requests in flight it is given: kBurstInFlight for a per-file
/// source (about a request a record, its window of objects ahead sent in
/// bursts) while bursts are on, else 1.
int64_t inFlightFloor(const RemoteProfile &r) {
  return requestBurstsOn() && r.requestsPerRecord >= 0.5 ? kBurstInFlight : 1;
}
} // namespace

double Usl::speedup(double p) const {
  if (p <= 1)
    return std::max(p, 0.0);
  return p / (1 + sigma * (p - 1) + kappa * p * (p - 1));
}

double Usl::peak() const {
  if (kappa <= 0)
    return kInf;
  return std::sqrt(std::max(0.0, 1 - sigma) / kappa);
}

Usl fitUsl(const std::vector<ScalingSample> &samples) {
  Usl u;
  double s1 = 0;
  for (const ScalingSample &s : samples)
    if (s.parallelism == 1 && s.secondsPerRecord > 0)
      s1 = s.secondsPerRecord;
  if (s1 <= 0)
    return u;
  // p / speedup(p) - 1 = s_p / s_1 - 1 = sigma (p-1) + kappa p (p-1):
  // linear in (sigma, kappa).
  std::vector<std::pair<double, double>> pts; // (p, y)
  for (const ScalingSample &s : samples)
    if (s.parallelism > 1 && s.secondsPerRecord > 0)
      pts.emplace_back(static_cast<double>(s.parallelism),
                       s.secondsPerRecord / s1 - 1);
  if (pts.empty())
    return u;
  auto fitSigmaOnly = [&] {
    double num = 0, den = 0;
    for (auto [p, y] : pts) {
      num += (p - 1) * y;
      den += (p - 1) * (p - 1);
    }
    return den > 0 ? num / den : 0.0;
  };
  // Distinct parallelisms decide whether kappa can be told from sigma.
  std::vector<double> ps;
  for (auto [p, y] : pts)
    if (std::find(ps.begin(), ps.end(), p) == ps.end())
      ps.push_back(p);
  if (ps.size() >= 2) {
    Eigen::MatrixXd a(static_cast<Eigen::Index>(pts.size()), 2);
    Eigen::VectorXd b(static_cast<Eigen::Index>(pts.size()));
    for (size_t i = 0; i < pts.size(); ++i) {
      auto [p, y] = pts[i];
      a(static_cast<Eigen::Index>(i), 0) = p - 1;
      a(static_cast<Eigen::Index>(i), 1) = p * (p - 1);
      b(static_cast<Eigen::Index>(i)) = y;
    }
    Eigen::Vector2d x = a.colPivHouseholderQr().solve(b);
    u.sigma = x(0);
    u.kappa = x(1);
    if (u.kappa < 0) { // the least-squares optimum under kappa >= 0
      u.kappa = 0;
      u.sigma = fitSigmaOnly();
    } else if (u.sigma < 0) { // then sigma = 0, kappa alone
      double num = 0, den = 0;
      for (auto [p, y] : pts) {
        num += p * (p - 1) * y;
        den += p * (p - 1) * p * (p - 1);
      }
      u.sigma = 0;
      u.kappa = den > 0 ? std::max(0.0, num / den) : 0;
    }
  } else {
    u.sigma = fitSigmaOnly();
  }
  // Faster than linear is measurement noise; slower than serial (sigma > 1)
  // is contention the curve cannot express beyond "adding workers hurts".
  u.sigma = std::clamp(u.sigma, 0.0, 1.0);
  return u;
}

std::string laneLabel(const Profile &p, const Lane &u) {
  std::string s;
  for (size_t i : u.steps) {
    if (!s.empty())
      s += ", ";
    s += p.steps[i].name;
  }
  return s;
}

bool nextParallelism(const std::vector<Lane> &us, std::vector<int64_t> &par,
                     int64_t cores) {
  for (size_t k = 0; k < us.size(); ++k) {
    if (!us[k].parallel || us[k].pinned > 0)
      continue;
    if (par[k] < cores) {
      ++par[k];
      return true;
    }
    par[k] = 1;
  }
  return false;
}

std::vector<Lane> lanes(const Profile &p, int64_t cacheAfter) {
  // The runtime's grouping of steps into stages (runtime::groupSteps, which
  // Engine::build runs on the plan) with this configuration's cache, and the
  // lanes those stages run on (runtime::lanes): a map stage on the workers,
  // or the stages one thread runs up to the next hand-off.
  std::vector<runtime::StepShape> shapes;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile &s = p.steps[i];
    runtime::StepShape sh;
    sh.source = s.source;
    sh.perRecord = s.perRecord;
    sh.element = s.element;
    sh.pinned = s.pinned;
    sh.cacheAfter = static_cast<int64_t>(i) == cacheAfter || s.pinsCache();
    sh.threadBoundary = s.threadBoundary;
    shapes.push_back(sh);
  }
  std::vector<Lane> out = runtime::lanes(runtime::groupSteps(shapes));
  for (Lane &u : out)
    u.beforeCache =
        cacheAfter >= 0 && static_cast<int64_t>(u.steps.back()) <= cacheAfter;
  return out;
}

int64_t materializedBytes(const Profile &p, size_t i) {
  if (!p.sourceRecordsPerEpoch || i >= p.steps.size())
    return 0;
  const StepProfile &s = p.steps[i];
  double perSource = s.visits * s.selectivity;
  return static_cast<int64_t>(perSource * s.bytesOut *
                              static_cast<double>(*p.sourceRecordsPerEpoch));
}

int64_t concurrentWorkers(const Profile &p, const std::vector<Lane> &us,
                          const std::vector<int64_t> &par) {
  int64_t before = 0, after = 0;
  bool phases = p.epochs < 0 || p.epochs >= 2;
  for (size_t k = 0; k < us.size() && k < par.size(); ++k)
    if (us[k].parallel)
      (us[k].beforeCache && phases ? before : after) += par[k];
  return std::max(before, after);
}

bool cacheStopsAt(const StepProfile &s) {
  const OpDef *def = Registry::instance().find(s.op);
  return s.threadBoundary ||
         (def && (def->traits.materializes || def->traits.noCacheAfter));
}

std::vector<CacheOption> cacheOptions(const Profile &p) {
  std::vector<CacheOption> out;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile &s = p.steps[i];
    if (s.pinsCache()) {
      // The spec decided: that is the only option.
      return {CacheOption{static_cast<int64_t>(i), *s.pinned.cache,
                          materializedBytes(p, i)}};
    }
  }
  if (!p.sourceRecordsPerEpoch)
    return out;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const StepProfile &s = p.steps[i];
    // Never after a random op: the cache would replay one epoch's random
    // choices in every epoch. Nothing after it is deterministic either.
    if (s.stochastic || cacheStopsAt(s))
      break;
    if (s.pinned.cache) // "none" here (a pinned cache returned above)
      continue;
    int64_t bytes = materializedBytes(p, i);
    out.push_back({static_cast<int64_t>(i), "memory", bytes});
    out.push_back({static_cast<int64_t>(i), "disk", bytes});
  }
  return out;
}

double laneSeconds(const Profile &p, const Lane &u) {
  double s = 0;
  for (size_t i : u.steps)
    s += p.steps[i].visits * p.steps[i].secondsPerElement;
  return s;
}

Usl laneUsl(const Profile &p, const Lane &u) {
  std::map<int64_t, double> sum;
  std::map<int64_t, size_t> n;
  for (size_t i : u.steps) {
    auto it = p.scaling.find(i);
    if (it == p.scaling.end())
      continue;
    for (const ScalingSample &s : it->second) {
      sum[s.parallelism] += s.secondsPerRecord;
      ++n[s.parallelism];
    }
  }
  std::vector<ScalingSample> samples;
  for (auto [par, secs] : sum)
    if (n[par] == n.begin()->second)
      samples.push_back({par, secs});
  return fitUsl(samples);
}

int64_t windowSlots(int64_t p, int64_t prefetch) {
  return std::max<int64_t>(16, p * 16) + std::max<int64_t>(0, prefetch);
}

double laneSlotBytes(const Profile &p, const Lane &u) {
  const StepProfile &first = p.steps[u.steps.front()];
  const StepProfile &last = p.steps[u.steps.back()];
  return std::max(first.bytesIn, last.bytesOut);
}

int64_t queueDepth(double cv, double itemsPerSecond, double window) {
  double items = 2 * std::max(0.0, cv) * std::max(0.0, itemsPerSecond) * window;
  if (!std::isfinite(items))
    return 64;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(items)) + 1, 1, 64);
}

namespace {

double effectiveEpochs(const Profile &p) {
  if (p.epochs < 0)
    return 1000; // endless: the cached prefix runs once, practically never
  return std::max<double>(1, static_cast<double>(p.epochs));
}

/// Which part of a run predictPhase() evaluates: every epoch's work averaged
/// (no cache, or the probes' configuration), a cached run's first epoch
/// (everything runs, and the cache is written), or its later epochs (only
/// the lanes after the cache run, fed by the cache).
enum class Phase { Averaged, First, Cached };

/// Seconds per source record the cache itself costs in `phase`: written in
/// the first epoch, read in the others, epoch-averaged in Phase::Averaged.
/// A memory cache keeps every record it holds alive, so the memory its
/// first epoch fills is fresh, never memory a freed record leaves for the
/// next: each of its pages is first touched once, at the host's measured
/// cost (Profile::freshMemorySecondsPerByte; 15 us a 4 KiB page on the
/// project's VM, where an 87 MiB cache of encoded photos costs 0.3 s of
/// CPU in its first epoch and a copy of the same bytes 0.02 s).
double cacheSeconds(const Profile &p, const CacheOption &c, Phase phase) {
  if (c.after < 0 || !p.sourceRecordsPerEpoch || *p.sourceRecordsPerEpoch <= 0)
    return 0;
  double e = effectiveEpochs(p);
  double perRecord = static_cast<double>(c.bytes) /
                     static_cast<double>(*p.sourceRecordsPerEpoch);
  // A disk cache is never faster than a memory cache: the bandwidth probe
  // (16 MiB, write then read) often measures the page cache, faster than
  // the cache stage's framed record files are read back.
  double bw = c.to == "disk" && p.diskBytesPerSecond > 0
                  ? std::min(p.diskBytesPerSecond, kMemoryCacheBytesPerSecond)
                  : kMemoryCacheBytesPerSecond;
  double touch =
      c.to == "memory" && cacheTouchCostOn() && p.freshMemorySecondsPerByte > 0
          ? p.freshMemorySecondsPerByte
          : 0;
  double write = perRecord * (1 / bw + touch), read = perRecord / bw;
  switch (phase) {
  case Phase::First:
    return write;
  case Phase::Cached:
    return read;
  case Phase::Averaged:
    break;
  }
  return write / e + read * (e - 1) / e;
}

} // namespace

double wholeRunThroughput(const Profile &p, double steady) {
  std::optional<int64_t> perEpoch = p.recordsPerEpoch();
  if (p.epochs <= 0 || !perEpoch || *perEpoch <= 0 || !(steady > 0) ||
      !std::isfinite(steady) || p.startupSeconds <= 0)
    return steady;
  double total = static_cast<double>(p.epochs) * static_cast<double>(*perEpoch);
  return total / (p.startupSeconds + total / steady);
}

int64_t configLevel(const Profile &p, const Config &c) {
  std::vector<Lane> us = lanes(p, c.cache.after);
  int64_t level = 0;
  for (size_t k = 0; k < us.size() && k < c.parallelism.size(); ++k)
    if (us[k].parallel && us[k].pinned == 0)
      level = std::max(level, c.parallelism[k]);
  return level;
}

double calibrationAt(const Profile &p, double level) {
  double fallback = p.calibration > 0 ? p.calibration : 1;
  if (p.calibrationByLevel.empty() || level <= 0)
    return fallback;
  auto hi =
      p.calibrationByLevel.lower_bound(static_cast<int64_t>(std::ceil(level)));
  if (hi == p.calibrationByLevel.end())
    return std::prev(hi)->second;
  if (hi == p.calibrationByLevel.begin() ||
      static_cast<double>(hi->first) == level)
    return hi->second;
  auto lo = std::prev(hi);
  double t = (level - static_cast<double>(lo->first)) /
             static_cast<double>(hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

double tandemThroughput(double up, double down, double slots) {
  if (!(up > 0) || !(down > 0))
    return 0;
  if (!std::isfinite(up))
    return down;
  if (!std::isfinite(down))
    return up;
  double n = std::max(0.0, slots) + 1;
  double rho = up / down;
  if (std::abs(rho - 1) < 1e-9)
    return down * n / (n + 1);
  // up (1 - rho^n) / (1 - rho^(n+1)), written to stay finite for large n:
  // with rho > 1 divide through by rho^(n+1).
  if (rho < 1)
    return up * (1 - std::pow(rho, n)) / (1 - std::pow(rho, n + 1));
  double r = 1 / rho;
  return up * (std::pow(r, n + 1) - r) / (std::pow(r, n + 1) - 1);
}

std::vector<double> busyWorkers(double offered, int64_t servers) {
  size_t c = static_cast<size_t>(std::max<int64_t>(1, servers));
  std::vector<double> d(c + 1, 0.0);
  if (!(offered > 0)) {
    d[0] = 1;
    return d;
  }
  if (!(offered < static_cast<double>(c))) {
    d[c] = 1;
    return d;
  }
  // pi_n ~ a^n / n! below c; the states n >= c (all busy, some waiting)
  // sum to a^c / c! / (1 - a / c).
  double term = 1, sum = 0;
  for (size_t n = 0; n < c; ++n) {
    d[n] = term;
    sum += term;
    term *= offered / static_cast<double>(n + 1);
  }
  d[c] = term / (1 - offered / static_cast<double>(c));
  sum += d[c];
  for (double &x : d)
    x /= sum;
  return d;
}

double threadShare(const std::vector<std::vector<double>> &others,
                   double cores) {
  std::vector<double> n{1.0}; // P(N = n) over the others so far
  for (const std::vector<double> &d : others) {
    if (d.empty())
      continue;
    std::vector<double> next(n.size() + d.size() - 1, 0.0);
    for (size_t i = 0; i < n.size(); ++i)
      for (size_t j = 0; j < d.size(); ++j)
        next[i + j] += n[i] * d[j];
    n = std::move(next);
  }
  double share = 0;
  for (size_t i = 0; i < n.size(); ++i)
    share += n[i] * std::min(1.0, cores / static_cast<double>(i + 1));
  return share;
}

namespace {

/// A lane's share of its work per source record in `phase`.
double phaseFactor(const Lane &u, Phase phase, double e) {
  switch (phase) {
  case Phase::Averaged:
    return u.beforeCache ? 1 / e : 1;
  case Phase::First:
    return 1;
  case Phase::Cached:
    return u.beforeCache ? 0 : 1;
  }
  return 1;
}

/// The figures that follow from `r.throughput`: each lane's utilization,
/// outputs per second and the whole run's rate.
void finishRates(const Profile &p, Prediction &r) {
  for (LanePrediction &up : r.lanes)
    up.utilization = up.capacity > 0 && std::isfinite(up.capacity)
                         ? r.throughput / up.capacity
                         : 0;
  r.outputsPerSecond = r.throughput * p.outputsPerSourceRecord;
  r.wholeRun = wholeRunThroughput(p, r.throughput);
}

Prediction predictPhase(const Profile &p, const Config &c, int64_t cores,
                        Phase phase) {
  Prediction r;
  std::vector<Lane> us = lanes(p, c.cache.after);
  double e = effectiveEpochs(p);
  double cpu = 0;
  int64_t mem = p.fixedMemoryBytes;
  r.throughput = kInf;
  for (size_t k = 0; k < us.size(); ++k) {
    const Lane &u = us[k];
    LanePrediction up;
    up.label = laneLabel(p, u);
    up.steps = u.steps;
    up.parallel = u.parallel;
    up.parallelism =
        u.parallel ? (k < c.parallelism.size() ? c.parallelism[k] : 1) : 1;
    double f = phaseFactor(u, phase, e);
    up.secondsPerRecord = laneSeconds(p, u) * f;
    double speed =
        u.parallel ? laneUsl(p, u).speedup(static_cast<double>(up.parallelism))
                   : 1.0;
    up.capacity = up.secondsPerRecord > 0 ? speed / up.secondsPerRecord : kInf;
    double laneCpuPerRecord = 0, poolCpuPerRecord = 0;
    for (size_t i : u.steps) {
      laneCpuPerRecord += p.steps[i].visits * p.steps[i].cpuPerElement * f;
      poolCpuPerRecord += p.steps[i].visits * p.steps[i].poolCpuPerElement * f;
    }
    cpu += laneCpuPerRecord;
    // A thread runs on one core at most: p workers cannot do more CPU work
    // per second than p cores (the counters' CPU can exceed their wall time
    // for a cheap stage, and a re-plan scales both by the CPU's drift).
    // Work a serial lane had done on the pool (the source's read-ahead) is
    // not its thread's.
    double ownCpu = u.parallel
                        ? laneCpuPerRecord
                        : std::max(0.0, laneCpuPerRecord - poolCpuPerRecord);
    if (ownCpu > 0)
      up.capacity =
          std::min(up.capacity, static_cast<double>(up.parallelism) / ownCpu);
    if (u.parallel) {
      auto pf = c.prefetch.find(u.steps.back());
      int64_t depth = pf != c.prefetch.end() ? pf->second : 0;
      up.memoryBytes = static_cast<int64_t>(
          static_cast<double>(windowSlots(up.parallelism, depth)) *
          laneSlotBytes(p, u));
    }
    mem += up.memoryBytes;
    if (up.capacity < r.throughput) {
      r.throughput = up.capacity;
      r.bottleneck = static_cast<int>(k);
    }
    r.lanes.push_back(std::move(up));
  }
  // Prefetch stages (buffers not at the end of a parallel lane).
  for (auto [i, depth] : c.prefetch) {
    bool inWindow = false;
    for (const Lane &u : us)
      if (u.parallel && u.steps.back() == i)
        inWindow = true;
    if (!inWindow && depth > 0)
      mem += static_cast<int64_t>(static_cast<double>(depth) *
                                  p.steps[i].bytesOut);
  }
  // A remote source's requests in flight bound it by Little's law (in the
  // phases where the source reads: not in a cached run's later epochs).
  r.remoteCapacity = kInf;
  if (p.remote.present() && c.sourceInFlight > 0 && !us.empty()) {
    double f = phaseFactor(us.front(), phase, e);
    if (f > 0) {
      r.remoteCapacity = remoteCapacity(p, c.sourceInFlight) / f;
      mem += p.remote.windowed()
                 ? windowedBytes(p, c.sourceInFlight)
                 : static_cast<int64_t>(static_cast<double>(c.sourceInFlight) *
                                        p.remote.bytesPerRequest);
      if (r.remoteCapacity < r.throughput) {
        r.throughput = r.remoteCapacity;
        r.bottleneck = -2;
      }
    }
  }
  double cacheCost = cacheSeconds(p, c.cache, phase);
  if (c.cache.after >= 0) {
    LanePrediction up;
    up.label = "cache (" + c.cache.to + ") after " +
               p.steps[static_cast<size_t>(c.cache.after)].name;
    up.secondsPerRecord = cacheCost;
    up.capacity = cacheCost > 0 ? 1 / cacheCost : kInf;
    cpu += cacheCost;
    if (up.capacity < r.throughput) {
      r.throughput = up.capacity;
      r.bottleneck = static_cast<int>(r.lanes.size());
    }
    r.lanes.push_back(std::move(up));
    if (c.cache.to == "memory")
      mem += c.cache.bytes;
    else
      r.diskBytes = c.cache.bytes;
  }
  double overhead = std::max(1.0, p.cpuOverheadFactor);
  cpu *= overhead;
  r.cpuCapacity = cpu > 0 ? static_cast<double>(cores) / cpu : kInf;
  if (r.cpuCapacity < r.throughput) {
    r.throughput = r.cpuCapacity;
    r.bottleneck = -1;
  }

  // Contention for the cores: a parallel lane's p workers run only on the
  // cores the other threads (the source's, the consumer's, other stages'
  // workers) leave free at throughput T: T s_k <= speedup(min(p, cores -
  // T x their CPU per record)). With linear scaling this is the CPU bound;
  // with the measured sub-linear scaling it binds below both (two stages
  // that each reach their rate alone do not reach it together on shared
  // cores). The largest T meeting every such bound, by bisection.
  r.contentionBound = kInf;
  {
    // laneCpu: all the lane's work; threadCpu: what loads the lane's own
    // threads (a serial lane's pool work, the source's files read ahead,
    // runs on the workers).
    std::vector<double> laneCpu(us.size(), 0), threadCpu(us.size(), 0);
    double allCpu = 0;
    for (size_t k = 0; k < us.size(); ++k) {
      double f = phaseFactor(us[k], phase, e);
      double pool = 0;
      for (size_t i : us[k].steps) {
        laneCpu[k] += p.steps[i].visits * p.steps[i].cpuPerElement * f;
        pool += p.steps[i].visits * p.steps[i].poolCpuPerElement * f;
      }
      threadCpu[k] =
          us[k].parallel ? laneCpu[k] : std::max(0.0, laneCpu[k] - pool);
      laneCpu[k] *= overhead;
      threadCpu[k] *= overhead;
      allCpu += laneCpu[k];
    }
    allCpu += cacheCost * overhead;
    // Threads that compete for the cores: one per serial lane (the feeder
    // of the parallel lane after it, a prefetch thread, or the consumer),
    // each parallel lane's workers, and the cache's (it runs on the thread
    // that pulls from it) as one more serial thread. Lanes idle in this
    // phase (before the cache, in the cached epochs) hold none. Index
    // us.size() is the cache.
    const size_t cacheIdx = us.size();
    const bool cached = c.cache.after >= 0 && cacheCost > 0;
    auto active = [&](size_t k) {
      return k == cacheIdx ? cached : r.lanes[k].secondsPerRecord > 0;
    };
    auto parallelAt = [&](size_t k) { return k < us.size() && us[k].parallel; };
    auto secondsAt = [&](size_t k) {
      return k == cacheIdx ? cacheCost : r.lanes[k].secondsPerRecord;
    };
    auto cpuAt = [&](size_t k) {
      return k == cacheIdx ? cacheCost * overhead : threadCpu[k];
    };
    int64_t threads = 0;
    for (size_t k = 0; k <= cacheIdx; ++k)
      if (active(k))
        threads += parallelAt(k) ? r.lanes[k].parallelism : 1;
    // How many of lane k's threads are busy at throughput t.
    auto busy = [&](size_t k, double t) -> std::vector<double> {
      double offered = active(k) ? t * cpuAt(k) : 0;
      if (parallelAt(k))
        return busyWorkers(offered, r.lanes[k].parallelism);
      double b = std::clamp(offered, 0.0, 1.0);
      return {1 - b, b};
    };
    auto fits = [&](double t, size_t *limiting) {
      // A serial lane's one thread gets a whole core only while no more
      // threads than cores are runnable; with more (a parallel lane's
      // workers busy at once beside it) the scheduler shares the cores, and
      // a serial bottleneck slows by its lost share. With no more threads
      // than cores nothing is shared.
      if (threads > cores)
        for (size_t j = 0; j <= cacheIdx; ++j) {
          if (parallelAt(j) || !active(j))
            continue;
          double need = t * secondsAt(j);
          if (need <= static_cast<double>(cores) / static_cast<double>(threads))
            continue; // fits even at the smallest share
          std::vector<std::vector<double>> others;
          for (size_t k = 0; k <= cacheIdx; ++k)
            if (k != j && active(k))
              others.push_back(busy(k, t));
          if (need >
              threadShare(others, static_cast<double>(cores)) * (1 + 1e-12)) {
            if (limiting)
              *limiting = j;
            return false;
          }
        }
      for (size_t k = 0; k < us.size(); ++k) {
        const LanePrediction &up = r.lanes[k];
        if (!us[k].parallel || !(up.secondsPerRecord > 0))
          continue;
        double free = static_cast<double>(cores) - t * (allCpu - laneCpu[k]);
        double par = static_cast<double>(up.parallelism);
        if (free >= par)
          continue;
        Usl usl = laneUsl(p, us[k]);
        double speed =
            std::min(usl.speedup(par), usl.speedup(std::max(0.0, free)));
        if (t * up.secondsPerRecord > speed * (1 + 1e-12)) {
          if (limiting)
            *limiting = k;
          return false;
        }
      }
      return true;
    };
    size_t limiting = 0;
    if (std::isfinite(r.throughput) && !fits(r.throughput, &limiting)) {
      double lo = 0, hi = r.throughput;
      for (int it = 0; it < 60; ++it) {
        double mid = (lo + hi) / 2;
        (fits(mid, nullptr) ? lo : hi) = mid;
      }
      r.contentionBound = lo;
      if (lo < r.throughput * (1 - 1e-9)) {
        r.throughput = lo;
        r.bottleneck = static_cast<int>(limiting);
      }
    }
  }

  // Buffers: the probes ran with the runtime's windows (16 slots per
  // worker) and Profile::probePrefetch; a configuration with deeper buffers
  // loses less to blocking between the stages on either side of each, by
  // the tandem formula's ratio (1 when it buffers as the probes did).
  r.bufferFactor = 1;
  {
    // Capacity of everything up to lane k, and after it.
    auto minCap = [&](size_t from, size_t to) {
      double m = kInf;
      for (size_t j = from; j < to && j < r.lanes.size(); ++j)
        m = std::min(m, r.lanes[j].capacity);
      return m;
    };
    auto probeDepth = [&](size_t step) -> int64_t {
      auto it = p.probePrefetch.find(step);
      return it != p.probePrefetch.end() ? it->second : 0;
    };
    for (size_t k = 0; k < us.size(); ++k) {
      size_t last = us[k].steps.back();
      auto pf = c.prefetch.find(last);
      int64_t depth = pf != c.prefetch.end() ? pf->second : 0;
      int64_t ref = probeDepth(last);
      if (depth == ref)
        continue;
      double slots, refSlots;
      if (us[k].parallel) {
        slots = static_cast<double>(windowSlots(r.lanes[k].parallelism, depth));
        refSlots =
            static_cast<double>(windowSlots(r.lanes[k].parallelism, ref));
      } else {
        slots = static_cast<double>(depth);
        refSlots = static_cast<double>(ref);
      }
      double a = minCap(0, k + 1), b = minCap(k + 1, us.size());
      double x = tandemThroughput(a, b, slots);
      double x0 = tandemThroughput(a, b, refSlots);
      if (x > 0 && x0 > 0 && std::isfinite(x) && std::isfinite(x0))
        r.bufferFactor *= x / x0;
    }
    r.throughput *= r.bufferFactor;
  }

  // The probes' calibration at this configuration's level scales every
  // capacity alike (a cached run's first epoch and its cached epochs: their
  // own, when measured).
  double k = phase == Phase::Cached && p.cachedCalibration > 0
                 ? p.cachedCalibration
             : phase == Phase::First && p.firstCalibration > 0
                 ? p.firstCalibration
                 : calibrationAt(p, static_cast<double>(configLevel(p, c)));
  r.calibration = k;
  r.throughput *= k;
  r.cpuCapacity *= k;
  r.contentionBound *= k;
  for (LanePrediction &up : r.lanes)
    up.capacity *= k;
  r.remoteCapacity *= k;
  r.bottleneckLabel =
      r.bottleneck >= 0 ? r.lanes[static_cast<size_t>(r.bottleneck)].label
      : r.bottleneck == -2
          ? "source requests (" + std::to_string(c.sourceInFlight) +
                " in flight)"
          : "cpu (all " + std::to_string(cores) + " cores busy)";
  finishRates(p, r);
  r.memoryBytes = mem;
  return r;
}

} // namespace

namespace {
/// A windowed source's window at `inFlight`: that many chunks (at least 1).
double chunkWindow(const Profile &p, int64_t inFlight) {
  return static_cast<double>(std::max<int64_t>(1, inFlight)) *
         p.remote.chunkBytes;
}
/// Whether that window holds a whole (mean) shard.
bool windowIsWholeShard(const Profile &p, int64_t inFlight) {
  return p.remote.objectBytes > 0 &&
         chunkWindow(p, inFlight) >= p.remote.objectBytes;
}
} // namespace

double remoteCapacity(const Profile &p, int64_t inFlight) {
  if (!p.remote.present() || inFlight <= 0)
    return kInf;
  if (p.remote.windowed()) {
    // Little's law in bytes: what is asked for ahead over the time a
    // request takes, and never more than the bandwidth received at.
    const double bpr = p.remote.bytesPerRecord();
    const double t = windowedRequestSeconds(p, inFlight);
    if (!(bpr > 0) || !(t > 0))
      return kInf;
    double bytesPerSecond = static_cast<double>(windowedBytes(p, inFlight)) / t;
    if (p.remote.receiveBytesPerSecond > 0)
      bytesPerSecond = std::min(bytesPerSecond, p.remote.receiveBytesPerSecond);
    // The rest of a shard larger than its first window is asked for when
    // the reader opens it: the reader waits for it unless the window lasts
    // a round trip, so it reads at most a window per latency.
    if (!windowIsWholeShard(p, inFlight))
      bytesPerSecond = std::min(bytesPerSecond,
                                chunkWindow(p, inFlight) / unloadedLatency(p));
    return bytesPerSecond / bpr;
  }
  return static_cast<double>(inFlight) /
         (p.remote.requestsPerRecord * p.remote.requestSeconds);
}

double windowedRequestBytes(const Profile &p, int64_t inFlight) {
  const double window = chunkWindow(p, inFlight);
  return p.remote.objectBytes > 0 ? std::min(window, p.remote.objectBytes)
                                  : window;
}

double unloadedLatency(const Profile &p) {
  return p.remote.unloadedLatencySeconds > 0 ? p.remote.unloadedLatencySeconds
                                             : p.remote.latencySeconds;
}

double windowedRequestSeconds(const Profile &p, int64_t inFlight) {
  const RemoteProfile &r = p.remote;
  const double latency = unloadedLatency(p);
  const double transfer =
      r.receiveBytesPerSecond > 0
          ? windowedRequestBytes(p, inFlight) / r.receiveBytesPerSecond
          : 0;
  return latency + transfer;
}

int64_t windowedBytes(const Profile &p, int64_t inFlight) {
  const double window = chunkWindow(p, inFlight);
  const double ahead = static_cast<double>(std::max<int64_t>(1, inFlight / 2));
  return static_cast<int64_t>(window +
                              ahead * windowedRequestBytes(p, inFlight));
}

int64_t windowedInFlightFor(const Profile &p, double rate,
                            int64_t memoryBytes) {
  if (!p.remote.windowed())
    return 0;
  int64_t n = kMinWindowedInFlight;
  if (!(std::isfinite(rate) && rate > 0)) {
    n = kMaxInFlight;
  } else {
    const double demand = rate * p.remote.bytesPerRecord();
    // Enough asked for ahead for the time a request takes, and a first
    // window that is the whole shard or lasts the reader a round trip (the
    // rest of the shard is asked for as it opens).
    auto enough = [&](int64_t k) {
      const bool covers =
          windowIsWholeShard(p, k) ||
          chunkWindow(p, k) >= demand * unloadedLatency(p) * kInFlightHeadroom;
      return covers &&
             static_cast<double>(windowedBytes(p, k)) >=
                 demand * windowedRequestSeconds(p, k) * kInFlightHeadroom;
    };
    while (n < kMaxInFlight && !enough(n))
      ++n;
  }
  if (memoryBytes > 0)
    while (n > 1 && windowedBytes(p, n) > memoryBytes)
      --n;
  return n;
}

std::string describeInFlight(const Profile &p, double rate, int64_t chosen,
                             int64_t wanted, const std::string &rateNote) {
  const RemoteProfile &r = p.remote;
  char buf[800];
  const char *memoryNote = chosen < wanted
                               ? "; fewer: a quarter of the memory the "
                                 "budget leaves holds no more"
                               : "";
  if (r.windowed()) {
    const double demand = rate * r.bytesPerRecord();
    const double t = windowedRequestSeconds(p, chosen);
    auto bytes = [](double b) {
      return runtime::formatBytes(static_cast<int64_t>(b));
    };
    const double latency = unloadedLatency(p);
    std::snprintf(
        buf, sizeof buf,
        "source: %lld requests in flight, %.0f ms median latency (%.0f ms "
        "without queueing; Little's law in bytes: the rest reads %s/s, %.0f "
        "records/s x %s; a request of %s takes %.1f ms at the %s/s "
        "received, so %s ahead are needed, x%.1f headroom; %lld in flight "
        "ask for %s ahead: a window of %s chunks and %lld shards' first "
        "windows; a first window of %s %s%s%s)",
        static_cast<long long>(chosen), r.latencySeconds * 1e3, latency * 1e3,
        bytes(demand).c_str(), rate, bytes(r.bytesPerRecord()).c_str(),
        bytes(windowedRequestBytes(p, chosen)).c_str(), t * 1e3,
        bytes(r.receiveBytesPerSecond).c_str(), bytes(demand * t).c_str(),
        kInFlightHeadroom, static_cast<long long>(chosen),
        bytes(static_cast<double>(windowedBytes(p, chosen))).c_str(),
        bytes(r.chunkBytes).c_str(),
        static_cast<long long>(std::max<int64_t>(1, chosen / 2)),
        bytes(chunkWindow(p, chosen)).c_str(),
        windowIsWholeShard(p, chosen)
            ? ("is the whole shard of " + bytes(r.objectBytes)).c_str()
            : "lasts the reader the latency x1.5 (the rest of a shard is "
              "asked for as it opens)",
        chosen == kMinWindowedInFlight && chosen == wanted
            ? "; at least 4: two shards ahead"
            : "",
        memoryNote);
    return buf;
  }
  const int64_t least = inFlightFloor(r);
  const std::string burstNote =
      least > 1 && wanted == least &&
              std::ceil(littlesInFlight(r, rate)) < static_cast<double>(least)
          ? "; at least " + std::to_string(least) + ", so requests go in bursts"
          : "";
  std::snprintf(
      buf, sizeof buf,
      "source: %lld requests in flight, %.0f ms median latency (%.0f ms "
      "per request of %s, %.3g requests per record): Little's law gives "
      "%.1f in flight for the %.0f records/s the rest sustains%s, x%.1f "
      "headroom%s%s",
      static_cast<long long>(chosen), r.latencySeconds * 1e3,
      r.requestSeconds * 1e3,
      runtime::formatBytes(static_cast<int64_t>(r.bytesPerRequest)).c_str(),
      r.requestsPerRecord, rate * r.requestsPerRecord * r.requestSeconds, rate,
      rateNote.c_str(), kInFlightHeadroom, burstNote.c_str(), memoryNote);
  return buf;
}

int64_t inFlightFor(const Profile &p, double rate, int64_t memoryBytes) {
  if (!p.remote.present())
    return 0;
  if (p.remote.windowed())
    return windowedInFlightFor(p, rate, memoryBytes);
  int64_t n = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(littlesInFlight(p.remote, rate))),
      inFlightFloor(p.remote), kMaxInFlight);
  if (memoryBytes > 0 && p.remote.bytesPerRequest > 0)
    n = std::clamp<int64_t>(
        static_cast<int64_t>(static_cast<double>(memoryBytes) /
                             p.remote.bytesPerRequest),
        1, n);
  return n;
}

Prediction predict(const Profile &p, const Config &c, int64_t cores) {
  Prediction r = predictPhase(p, c, cores, Phase::Averaged);
  double e = effectiveEpochs(p);
  if (c.cache.after < 0 || !(e > 1))
    return r;
  // A cache splits the run in two phases: the first epoch runs everything
  // and writes the cache; the others run only what follows it, fed by the
  // cache. Each has its own bottleneck, and the run's average rate is the
  // epochs' records over the two phases' times (a fast cached phase does
  // not make up for a slow first epoch: averaging the work per record
  // first, as Phase::Averaged does, overstates it).
  Prediction first = predictPhase(p, c, cores, Phase::First);
  Prediction rest = predictPhase(p, c, cores, Phase::Cached);
  if (!(first.throughput > 0) || !(rest.throughput > 0))
    return r;
  double t1 = 1 / e / first.throughput;
  double t2 = (e - 1) / e / rest.throughput;
  r.firstEpoch = first.throughput;
  r.cachedEpochs = rest.throughput;
  r.throughput = 1 / (t1 + t2);
  const Prediction &dominant = t1 >= t2 ? first : rest;
  r.bottleneck = dominant.bottleneck;
  r.bottleneckLabel = dominant.bottleneckLabel +
                      (t1 >= t2 ? " (first epoch)" : " (cached epochs)");
  r.contentionBound = dominant.contentionBound;
  finishRates(p, r);
  return r;
}

} // namespace sluice::autotune
