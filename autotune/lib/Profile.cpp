//===- Profile.cpp - Probe runs and what their counters say
//----------------===//
//
// A probe is an ordinary Pipeline (so its buffers count against the memory
// budget like any run) pulled by this thread while a sampler thread snapshots
// the counters every 50 ms. The first 30% of the window is warm-up (JIT,
// first files opened, buffers filling); the figures are the difference
// between the last snapshot and the first one after warm-up.
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Profile.h"
#include "sluice/autotune/Model.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/Switches.h"
#include "sluice/runtime/ElementOps.h"
#include "sluice/runtime/Source.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <thread>
#include <unistd.h>

namespace sluice::autotune {

using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

StepProfile describe(const runtime::Plan &plan, const runtime::PlanStep &st,
                     bool isSource,
                     const std::map<std::string, std::string> &specWhere) {
  StepProfile s;
  s.name = st.name;
  s.op = st.op;
  s.where = plan.where(st);
  s.source = isSource;
  s.specSteps = runtime::stepNamesIn(st.name);
  if (!isSource) {
    s.perRecord = runtime::isPerRecordStep(st);
    s.element = st.kind == OpKind::Element;
  }
  for (const std::string &part : s.specSteps) {
    const OpDef *d = Registry::instance().find(runtime::opOfStepName(part));
    if (d && d->stochastic)
      s.stochastic = true;
    auto w = specWhere.find(part);
    if (w != specWhere.end() && s.specSteps.size() > 1)
      s.where += " (" + part + " at " + w->second + ")";
  }
  if (const OpDef *d = Registry::instance().find(st.op); d && d->stochastic)
    s.stochastic = true;
  // A source with `shuffle: true` reads in a new order every epoch: no
  // cache may follow it (cacheOptions stops at the first random step).
  if (const Value &shuffle = st.params["shuffle"];
      isSource && shuffle.isBool() && shuffle.asBool())
    s.stochastic = true;
  const OpDef *def = Registry::instance().find(st.op);
  s.threadBoundary = def && def->traits.prefetchDepth;
  // As the runtime's static memory check counts them (Stages.cpp,
  // BatchStage.cpp).
  if (def && def->traits.heldRecords)
    s.heldRecords = def->traits.heldRecords(st.params);
  s.pinned = st.schedule;
  return s;
}

const runtime::StageStats *find(const runtime::RunStats &r,
                                const std::string &name) {
  for (const runtime::StageStats &s : r.stages)
    if (s.name == name)
      return &s;
  return nullptr;
}

double cv(const std::vector<double> &xs) {
  if (xs.size() < 3)
    return 0;
  double mean = 0;
  for (double x : xs)
    mean += x;
  mean /= static_cast<double>(xs.size());
  if (mean <= 0)
    return 0;
  double var = 0;
  for (double x : xs)
    var += (x - mean) * (x - mean);
  var /= static_cast<double>(xs.size() - 1);
  return std::sqrt(var) / mean;
}

/// Sequential write + read of a 16 MiB file in `dir`, bytes/s (0 on error).
double diskBandwidth(const std::string &dir) {
  std::string path = dir + "/sluice-tune-probe-" + std::to_string(::getpid());
  std::vector<char> buf(1 << 20, 'x');
  auto t = Clock::now();
  {
    std::ofstream f(path, std::ios::binary);
    if (!f)
      return 0;
    for (int i = 0; i < 16; ++i)
      f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (!f)
      return 0;
  }
  {
    std::ifstream f(path, std::ios::binary);
    while (f.read(buf.data(), static_cast<std::streamsize>(buf.size())))
      ;
  }
  double secs = since(t);
  std::remove(path.c_str());
  return secs > 0 ? 2.0 * 16 * (1 << 20) / secs : 0;
}

/// Seconds per byte to fault in fresh anonymous memory: 1 MiB mapped and
/// written a byte per page, three times, the median. Without transparent
/// huge pages for it (the runtime's buffers get none unless the host
/// forces them), as the runtime's fresh buffers are.
double freshMemoryCost() {
  const size_t n = 1 << 20;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<double> xs;
  for (int r = 0; r < 3; ++r) {
    void *m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      return 0;
    auto *b = static_cast<volatile char *>(m);
    auto t = Clock::now();
    for (size_t i = 0; i < n; i += page)
      b[i] = 1;
    xs.push_back(since(t) / static_cast<double>(n));
    ::munmap(m, n);
  }
  std::sort(xs.begin(), xs.end());
  return xs[1];
}

/// Cost of one step's counter updates per record: two clock reads and four
/// relaxed atomic adds, as the map stage does per step and record.
double counterCostSeconds() {
  std::atomic<int64_t> a{0}, b{0}, c{0}, d{0};
  const int n = 200000;
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) {
    int64_t t0 = Clock::now().time_since_epoch().count();
    a.fetch_add(1, std::memory_order_relaxed);
    b.fetch_add(i, std::memory_order_relaxed);
    int64_t t1 = Clock::now().time_since_epoch().count();
    c.fetch_add(t1 - t0, std::memory_order_relaxed);
    d.fetch_add(1, std::memory_order_relaxed);
  }
  return since(t) / n;
}

double processCpu() {
  struct rusage u;
  if (::getrusage(RUSAGE_SELF, &u) != 0)
    return 0;
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

} // namespace

Expected<Probe> measure(const runtime::Plan &plan,
                        const runtime::RunOptions &opts, double seconds,
                        int64_t maxRecords,
                        std::vector<runtime::RunStats> *samplesOut) {
  // The counters are what a probe reads: timing on, whatever the
  // environment says.
  runtime::RunOptions timed = opts;
  timed.stageTiming = runtime::RunOptions::StageTiming::On;
  Expected<std::unique_ptr<runtime::Pipeline>> made =
      runtime::Pipeline::create(plan, timed);
  if (!made)
    return made.status();
  std::unique_ptr<runtime::Pipeline> p = made.take();
  std::vector<runtime::RunStats> samples;
  std::vector<double> times, cpus;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> enough{false};
  std::atomic<bool> cancelled{false};
  auto start = Clock::now();
  double cpu0 = processCpu();
  double firstOut = -1;
  std::thread sampler([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!done) {
      cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done; });
      runtime::RunStats st = p->stats();
      double t = since(start);
      int64_t read = st.stages.empty() ? 0 : st.stages.front().emitted;
      samples.push_back(std::move(st));
      times.push_back(t);
      cpus.push_back(processCpu());
      // Long enough once `seconds` passed and outputs have flowed for most
      // of it (opening a large source can take longer than a probe), or
      // the record cap is hit, or a hard cap.
      if (firstOut < 0 && samples.back().outputs > 0)
        firstOut = t;
      // Two whole epochs without an output: an epoch has fewer records
      // than one batch keeps (`drop_remainder` over a small data set), and
      // waiting longer shows nothing more.
      const bool none =
          samples.back().outputs == 0 && samples.back().epochsDone >= 2;
      if (read >= maxRecords || t >= std::max(30.0, 10 * seconds) || none ||
          (firstOut >= 0 && t >= seconds && t - firstOut >= 0.7 * seconds)) {
        if (!enough.exchange(true)) {
          // The loop below may be inside next(), which returns only with
          // an output: ask the pipeline to give up so it comes back.
          cancelled = true;
          p->cancel();
        }
      }
    }
  });
  runtime::Batch batch;
  Status error = Status::ok();
  bool ended = false;
  // When the first output came and how many source records had been read
  // by then: what start-up cost beyond that work (see Probe::startupSeconds).
  double firstT = -1;
  int64_t firstSrc = 0;
  while (!enough.load()) {
    Expected<bool> more = p->next(batch);
    if (!more) {
      // The sampler's cancel() ends the probe; any other error is the
      // pipeline's.
      if (!cancelled.load())
        error = more.status();
      break;
    }
    if (!*more) {
      ended = true;
      break;
    }
    if (firstT < 0) {
      firstT = since(start);
      runtime::RunStats st = p->stats();
      firstSrc = st.stages.empty() ? 0 : st.stages.front().emitted;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  sampler.join();
  runtime::RunStats last = p->stats();
  double lastT = since(start);
  p->stop();
  if (!error)
    return error;
  samples.push_back(last);
  times.push_back(lastT);
  cpus.push_back(processCpu());
  // First snapshot after warm-up with some output.
  size_t w = 0;
  double warm =
      std::max(0.3 * std::min(seconds, lastT), firstOut >= 0 ? firstOut : 0.0);
  while (w + 1 < samples.size() && (times[w] < warm || samples[w].outputs == 0))
    ++w;
  if (w + 1 >= samples.size() || ended)
    w = 0; // a short run: measure it whole
  // A buffer that holds a whole epoch (a shuffle larger than the data set)
  // reads everything before the first output: when the source read nothing
  // after the warm-up, measure from the start.
  if (w != 0 && !samples[w].stages.empty() && !samples.back().stages.empty() &&
      samples.back().stages.front().emitted <=
          samples[w].stages.front().emitted)
    w = 0;
  const runtime::RunStats &a = samples[w], &b = samples.back();
  double t0 = w == 0 ? 0 : times[w];
  Probe pr;
  pr.seconds = times.back() - t0;
  int64_t srcA = w == 0 || a.stages.empty() ? 0 : a.stages.front().emitted;
  int64_t srcB = b.stages.empty() ? 0 : b.stages.front().emitted;
  pr.sourceRecords = srcB - srcA;
  int64_t outA = w == 0 ? 0 : a.outputs;
  if (pr.seconds > 0) {
    pr.sourceRecordsPerSecond =
        static_cast<double>(pr.sourceRecords) / pr.seconds;
    pr.outputsPerSecond = static_cast<double>(b.outputs - outA) / pr.seconds;
  }
  if (firstT >= 0 && pr.sourceRecordsPerSecond > 0)
    pr.startupSeconds = std::max(0.0, firstT - static_cast<double>(firstSrc) /
                                                   pr.sourceRecordsPerSecond);
  // The ramp does not end with the first output: buffers are first
  // touched, the pool grows, workers wake for the first time. Up to the
  // end of the warm-up the run took t0 for what the steady state reads in
  // srcA / rate; the difference is the whole start-up a run pays once.
  if (w != 0 && pr.sourceRecordsPerSecond > 0)
    pr.startupSeconds =
        std::max(pr.startupSeconds,
                 t0 - static_cast<double>(srcA) / pr.sourceRecordsPerSecond);
  pr.memoryPeak = b.memoryPeak;
  const std::string &lastName =
      plan.steps.empty() ? plan.source.name : plan.steps.back().name;
  const runtime::StageStats *la = w == 0 ? nullptr : find(a, lastName);
  const runtime::StageStats *lb = find(b, lastName);
  if (lb)
    pr.lastStepInputs =
        (plan.steps.empty() ? lb->elementsOut : lb->elementsIn) -
        (la ? (plan.steps.empty() ? la->elementsOut : la->elementsIn) : 0);
  pr.processCpuSeconds = cpus.back() - (w == 0 ? cpu0 : cpus[w]);
  if (samplesOut) {
    samplesOut->assign(samples.begin() + static_cast<long>(w), samples.end());
    if (w == 0) // the baseline is "nothing yet"
      samplesOut->insert(samplesOut->begin(), runtime::RunStats());
  }
  return pr;
}

/// The largest shuffle buffer a probe runs with (profilePipeline).
constexpr int64_t kProbeShuffleBuffer = 256;

/// Requests in flight a remote source's probes run with (profilePipeline).
constexpr int64_t kProbeInFlight = 32;

std::vector<StepProfile>
describeSteps(const runtime::Plan &plan,
              const std::map<std::string, std::string> &specWhere) {
  std::vector<StepProfile> out;
  out.push_back(describe(plan, plan.source, true, specWhere));
  for (const runtime::PlanStep &st : plan.steps)
    out.push_back(describe(plan, st, false, specWhere));
  return out;
}

Expected<Profile> profilePipeline(const runtime::Plan &plan,
                                  const ProfileOptions &opts) {
  auto t0 = Clock::now();
  Profile prof;
  prof.pipeline = plan.name;
  prof.specFile = plan.specFile;
  prof.hostCores = hostCores();
  prof.epochs = opts.base.epochs ? *opts.base.epochs : plan.epochs;
  prof.batchRowPlacement = opts.base.inEffect().batchRowPlacement;
  int64_t cores = opts.cores > 0   ? opts.cores
                  : plan.cores > 0 ? plan.cores
                                   : prof.hostCores;
  cores = std::min(cores, prof.hostCores);
  prof.steps = describeSteps(plan, opts.specWhere);

  std::vector<int64_t> levels = opts.parallelisms;
  if (levels.empty()) {
    levels = {1};
    if (cores > 4)
      levels.push_back(4);
    if (cores > 1)
      levels.push_back(cores);
  }

  // The probes measure rates, not an order: a shuffle buffer of thousands
  // of records (the README's 4096, often the whole epoch of a small data
  // set) would make every window read that many records before its first
  // output. They run with the buffer capped; what the buffer holds is
  // modelled from the plan's size (StepProfile::heldRecords) and the bytes
  // per record measured here.
  runtime::Plan probePlan = plan;
  for (runtime::PlanStep &st : probePlan.steps)
    if (const OpDef *def = Registry::instance().find(st.op);
        def && def->traits.orderWindow &&
        st.params[def->traits.orderWindow].isNumber() &&
        st.params[def->traits.orderWindow].asInt() > kProbeShuffleBuffer)
      st.params.set(def->traits.orderWindow,
                    Value::integer(kProbeShuffleBuffer));

  std::vector<Lane> us = lanes(prof, -1);
  struct Window {
    int64_t level;
    std::vector<runtime::RunStats> samples;
    Probe probe;
  };
  std::vector<Window> windows;
  // Levels interleave (1, cores, 1, cores): a burst of load from other
  // processes then spreads over all levels instead of skewing one.
  int rounds = std::max(1, opts.rounds);
  double windowSeconds = opts.secondsPerProbe / rounds;
  std::vector<int64_t> order;
  for (int r = 0; r < rounds; ++r)
    order.insert(order.end(), levels.begin(), levels.end());
  if (opts.totalSeconds > 0) {
    // What each window costs besides its measured seconds (a pipeline's
    // start, its first outputs) is paid once per window: leave a third of
    // the bound for it.
    double share =
        opts.totalSeconds * 2 / 3 / static_cast<double>(order.size());
    windowSeconds = std::min(windowSeconds, share);
  }
  std::set<int64_t> levelsDone;
  for (size_t n = 0; n < order.size(); ++n) {
    int64_t level = order[n];
    if (opts.totalSeconds > 0 && levelsDone.count(level) &&
        std::chrono::duration<double>(Clock::now() - t0).count() +
                windowSeconds >
            opts.totalSeconds)
      continue; // out of time: this level already has a window
    levelsDone.insert(level);
    runtime::RunOptions o = opts.base;
    o.epochs = prof.epochs < 0 ? -1 : 1000000;
    o.threads = cores;
    o.progress = runtime::RunOptions::Progress::Off;
    o.stats = false;
    o.statsJsonPath.clear();
    for (const Lane &u : us)
      if (u.parallel && u.pinned == 0)
        for (size_t i : u.steps)
          if (prof.steps[i].element)
            o.schedule[prof.steps[i].name].parallelism = level;
    // A source over remote objects probes with many requests in flight, so
    // that the rest of the pipeline, not the latency, sets the probes' pace
    // (the source's I/O is modelled from its requests: RemoteProfile). Local
    // sources ignore it; the spec's remote.concurrency overrides it.
    if (!o.schedule[plan.source.name].parallelism)
      o.schedule[plan.source.name].parallelism = kProbeInFlight;
    Window win;
    win.level = level;
    Expected<Probe> pr =
        measure(probePlan, o, windowSeconds, opts.maxRecordsPerProbe / rounds,
                &win.samples);
    if (!pr)
      return pr.status();
    win.probe = *pr;
    win.probe.label =
        "p=" + std::to_string(level) +
        (rounds > 1 ? " #" + std::to_string(n / levels.size() + 1) : "");
    win.probe.parallelism = level;
    if (win.probe.sourceRecords <= 0)
      return Status::error("the pipeline read no records during the " +
                           std::to_string(opts.secondsPerProbe) +
                           " s profile; is the source empty?");
    prof.probes.push_back(win.probe);
    windows.push_back(std::move(win));
  }

  // Per step figures from the p = 1 probe; scaling from all of them.
  const Window &base = windows.front();
  const runtime::RunStats &a = base.samples.front(), &b = base.samples.back();
  double src = static_cast<double>(base.probe.sourceRecords);
  for (size_t i = 0; i < prof.steps.size(); ++i) {
    StepProfile &s = prof.steps[i];
    const runtime::StageStats *sa = find(a, s.name), *sb = find(b, s.name);
    if (!sb)
      continue;
    runtime::StageStats zero;
    if (!sa)
      sa = &zero;
    double in = static_cast<double>(sb->elementsIn - sa->elementsIn);
    double out = static_cast<double>(sb->elementsOut - sa->elementsOut);
    if (s.source) {
      in = out; // the source reads what it emits
      s.visits = 1;
    } else {
      s.visits = src > 0 ? in / src : 0;
    }
    s.selectivity = in > 0 ? out / in : 1;
    s.bytesIn =
        in > 0 ? static_cast<double>(sb->bytesIn - sa->bytesIn) / in : 0;
    s.bytesOut =
        out > 0 ? static_cast<double>(sb->bytesOut - sa->bytesOut) / out : 0;
    double wall = sb->wallSeconds - sa->wallSeconds;
    double cpu = sb->cpuSeconds - sa->cpuSeconds;
    s.secondsPerElement = in > 0 ? wall / in : 0;
    s.cpuPerElement = in > 0 ? cpu / in : 0;
    s.poolCpuPerElement =
        in > 0 ? (sb->poolCpuSeconds - sa->poolCpuSeconds) / in : 0;
    s.occupancyMean = sb->occupancyMean;
    s.bufferCapacity = sb->bufferCapacity;
    if (s.source && wall > 0)
      prof.sourceBytesPerSecond =
          static_cast<double>(sb->bytesOut - sa->bytesOut) / wall;
    // Rate variability between sampling intervals.
    std::vector<double> rates;
    for (size_t k = 1; k < base.samples.size(); ++k) {
      const runtime::StageStats *x = find(base.samples[k - 1], s.name);
      const runtime::StageStats *y = find(base.samples[k], s.name);
      if (x && y)
        rates.push_back(static_cast<double>(y->elementsIn - x->elementsIn));
    }
    s.rateCv = cv(rates);
  }
  prof.outputsPerSourceRecord =
      src > 0 ? base.probe.outputsPerSecond * base.probe.seconds / src : 1;
  // Remote requests over all windows: per source record, and their times
  // (the client's medians over its recent requests, read at the end).
  {
    int64_t requests = 0, bytes = 0, records = 0;
    double receiving = 0;
    int64_t streams = 0, streamBytes = 0;
    for (const Window &w : windows) {
      const runtime::RunStats &wa = w.samples.front(), &wb = w.samples.back();
      requests += wb.remote.requests - wa.remote.requests;
      bytes += wb.remote.bytes - wa.remote.bytes;
      receiving += wb.remote.receiveSeconds - wa.remote.receiveSeconds;
      streams += wb.remote.streams - wa.remote.streams;
      streamBytes += wb.remote.streamBytes - wa.remote.streamBytes;
      records += w.probe.sourceRecords;
    }
    const runtime::RunStats::Remote &last =
        windows.back().samples.back().remote;
    RemoteProfile &r = prof.remote;
    if (requests > 0 && records > 0 && last.medianRequestMs > 0) {
      r.requests = requests;
      r.requestsPerRecord =
          static_cast<double>(requests) / static_cast<double>(records);
      r.bytesPerRequest =
          static_cast<double>(bytes) / static_cast<double>(requests);
      r.requestSeconds = last.medianRequestMs / 1e3;
      r.latencySeconds = last.medianLatencyMs / 1e3;
      r.probeInFlight = last.requestsInFlight;
      r.pinned = last.inFlightPinned ? last.requestsInFlight : 0;
      // A sequential source's window (its shards' first windows asked for
      // ahead as one response each) is modelled in bytes: its chunk, and
      // the bandwidth received at while responses arrived (neither depends
      // on the probes' requests in flight, as a whole response's time does).
      r.chunkBytes = static_cast<double>(last.chunkBytes);
      r.receiveBytesPerSecond =
          receiving > 0 ? static_cast<double>(bytes) / receiving : 0;
      r.unloadedLatencySeconds = last.unloadedLatencyMs / 1e3;
      r.objectBytes = streams > 0 ? static_cast<double>(streamBytes) /
                                        static_cast<double>(streams)
                                  : 0;
      // The source's thread waits for its objects; that wait is the I/O the
      // requests in flight hide (modelled by Little's law in predict()), not
      // work: its own cost is its CPU.
      StepProfile &s0 = prof.steps.front();
      s0.secondsPerElement = std::min(s0.secondsPerElement, s0.cpuPerElement);
    }
  }
  // Per step and parallelism: work per record summed over the windows of
  // that level, divided by their records.
  std::map<std::pair<size_t, int64_t>, std::pair<double, double>> levelWork;
  for (const Window &w : windows) {
    const runtime::RunStats &wa = w.samples.front(), &wb = w.samples.back();
    double wsrc = static_cast<double>(w.probe.sourceRecords);
    for (const Lane &u : us) {
      if (!u.parallel)
        continue;
      for (size_t i : u.steps) {
        const runtime::StageStats *sa = find(wa, prof.steps[i].name);
        const runtime::StageStats *sb = find(wb, prof.steps[i].name);
        if (!sb || wsrc <= 0)
          continue;
        double wall = sb->wallSeconds - (sa ? sa->wallSeconds : 0);
        int64_t par = u.pinned > 0 ? u.pinned : w.level;
        auto &acc = levelWork[{i, par}];
        acc.first += wall;
        acc.second += wsrc;
      }
    }
  }
  for (const auto &[key, acc] : levelWork)
    if (acc.second > 0)
      prof.scaling[key.first].push_back({key.second, acc.first / acc.second});
  // A pinned lane was measured at its pinned parallelism: its per-record
  // cost at p = 1 is unknown, so model it as linear from there.
  for (const Lane &u : us)
    if (u.parallel && u.pinned > 1)
      for (size_t i : u.steps) {
        std::vector<ScalingSample> &v = prof.scaling[i];
        if (!v.empty())
          v = {{1, v.front().secondsPerRecord}};
      }

  {
    std::vector<double> ups;
    for (const Window &w : windows)
      if (w.probe.startupSeconds >= 0)
        ups.push_back(w.probe.startupSeconds);
    if (!ups.empty()) {
      std::sort(ups.begin(), ups.end());
      size_t n = ups.size();
      prof.startupSeconds =
          n % 2 ? ups[n / 2] : (ups[n / 2 - 1] + ups[n / 2]) / 2;
    }
  }

  prof.sourceRecordsPerEpoch = std::nullopt;
  {
    Expected<std::unique_ptr<runtime::Pipeline>> p =
        runtime::Pipeline::create(plan, opts.base);
    if (p) {
      std::optional<int64_t> all = (*p)->expectedSourceRecords();
      int64_t e = (*p)->epochs();
      if (all && e > 0)
        prof.sourceRecordsPerEpoch = *all / e;
    }
  }
  // Memory the tuner does not size: the p = 1 probe's peak minus its
  // windows and prefetch queues.
  int64_t sized = 0;
  for (const Lane &u : us)
    if (u.parallel)
      sized += static_cast<int64_t>(
          static_cast<double>(windowSlots(
              u.pinned > 0 ? u.pinned : 1,
              std::max<int64_t>(
                  0,
                  prof.steps[u.steps.back()].pinned.prefetch.value_or(-1)))) *
          laneSlotBytes(prof, u));
  // A short probe may not fill a shuffle buffer: count held records in full,
  // but never more than one pass brings (the runtime's static check bounds
  // a shuffle buffer the same way): a 4096-record buffer over 138 images
  // holds 138.
  double held = 0;
  for (StepProfile &s : prof.steps) {
    const OpDef *def = Registry::instance().find(s.op);
    if (def && def->traits.orderWindow && prof.sourceRecordsPerEpoch) {
      double perPass = std::ceil(
          static_cast<double>(*prof.sourceRecordsPerEpoch) * s.visits);
      if (perPass < static_cast<double>(s.heldRecords))
        s.heldRecords = static_cast<int64_t>(perPass);
    }
    held += static_cast<double>(s.heldRecords) * s.bytesIn;
  }
  prof.fixedMemoryBytes =
      std::max<int64_t>(static_cast<int64_t>(held),
                        std::max<int64_t>(0, base.probe.memoryPeak - sized));

  std::string dir = opts.base.tempDir;
  if (dir.empty()) {
    const char *t = std::getenv("TMPDIR");
    dir = t && *t ? t : "/tmp";
  }
  prof.diskBytesPerSecond = diskBandwidth(dir);
  prof.freshMemorySecondsPerByte = freshMemoryCost();
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) == 0)
    prof.diskFreeBytes =
        static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);

  double accounted = 0, visits = 0;
  for (const StepProfile &s : prof.steps) {
    accounted += s.visits * s.cpuPerElement;
    visits += s.visits;
  }
  prof.processCpuPerRecord = base.probe.processCpuSeconds / src;
  prof.cpuOverheadFactor =
      accounted > 0 ? std::max(1.0, prof.processCpuPerRecord / accounted) : 1;
  double work = std::max(prof.processCpuPerRecord, accounted);
  prof.counterOverhead = work > 0 ? visits * counterCostSeconds() / work : 0;

  // What the probes buffered (the calibration includes it): the spec's
  // pinned prefetch depths, nothing more.
  for (size_t i = 0; i < prof.steps.size(); ++i)
    if (prof.steps[i].pinned.prefetch.value_or(0) > 0)
      prof.probePrefetch[i] = *prof.steps[i].pinned.prefetch;

  // A source that cannot count its records (csv, text, tfrecord): estimate
  // an epoch from its files' sizes and the bytes it read per record, so a
  // whole run's start-up can be counted (never used to size a cache).
  if (!prof.sourceRecordsPerEpoch && prof.steps.front().bytesIn > 0) {
    Expected<std::unique_ptr<runtime::Source>> src =
        runtime::Source::create(plan.source.op, plan.source.params,
                                plan.source.outputType, plan.baseDir);
    if (src) {
      double bytes = 0;
      for (size_t i = 0; i < (*src)->numShards(); ++i) {
        struct stat sb;
        if (::stat((*src)->shardName(i).c_str(), &sb) == 0 &&
            S_ISREG(sb.st_mode))
          bytes += static_cast<double>(sb.st_size);
      }
      double world = std::max<int64_t>(1, opts.base.worldSize);
      if (bytes > 0)
        prof.estimatedRecordsPerEpoch =
            static_cast<int64_t>(bytes / prof.steps.front().bytesIn / world);
    }
  }

  // Calibrate the model's level on the probes (see Profile::calibration),
  // overall and per probe level.
  std::vector<double> ratios;
  std::map<int64_t, std::vector<double>> levelRatios;
  for (const Window &w : windows) {
    Config c;
    for (size_t i = 0; i < prof.steps.size(); ++i)
      if (prof.steps[i].pinned.prefetch)
        c.prefetch[i] = *prof.steps[i].pinned.prefetch;
    for (const CacheOption &o : cacheOptions(prof))
      if (prof.steps[static_cast<size_t>(o.after)].pinned.cache)
        c.cache = o;
    for (const Lane &u : lanes(prof, c.cache.after))
      c.parallelism.push_back(u.pinned > 0 ? u.pinned : w.level);
    c.sourceInFlight = prof.remote.present() ? prof.remote.probeInFlight : 0;
    double model = predict(prof, c, cores).throughput;
    if (model > 0 && std::isfinite(model) &&
        w.probe.sourceRecordsPerSecond > 0) {
      ratios.push_back(w.probe.sourceRecordsPerSecond / model);
      levelRatios[w.level].push_back(ratios.back());
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // The bounds only keep a broken window from making nonsense: since arena
  // slicing the csv pipelines' probes run at over 2x their counters' model
  // (criteo_bench 5.7-6.4M records/s against under 2.9M), and a bound of 2
  // capped their prediction 20% under the measured rate.
  constexpr double kMaxCalibration = 10;
  if (!ratios.empty())
    prof.calibration = std::clamp(median(ratios), 0.02, kMaxCalibration);
  // Per level only where the level is a knob (a free parallel stage).
  bool free = false;
  for (const Lane &u : us)
    free = free || (u.parallel && u.pinned == 0);
  if (free)
    for (const auto &[level, rs] : levelRatios)
      prof.calibrationByLevel[level] =
          std::clamp(median(rs), 0.02, kMaxCalibration);
  prof.seconds = since(t0);
  return prof;
}

} // namespace sluice::autotune
