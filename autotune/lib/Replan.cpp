//===- Replan.cpp - Drift detection and re-solving during a run -----------===//
//
// See Replan.h. A look compares, per lane (the workers of a parallel map
// stage), the CPU its steps spent in the last interval with what the
// profile's CPU per element predicts for the elements they processed. A
// lane drifts when the ratio leaves [1 / (1 + threshold), 1 + threshold]
// and the change moves the pipeline's whole CPU per source record by at
// least a tenth (a 40 ns step costing 120 ns is no reason to re-plan).
// Only parallel lanes are judged: their workers' thread CPU is what a
// loaded host disturbs least.
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Replan.h"

#include "Format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sluice::autotune {

using detail::fmtRate;

namespace {

using Clock = std::chrono::steady_clock;

const runtime::StageStats *findStage(const runtime::RunStats &r,
                                     const std::string &name) {
  for (const runtime::StageStats &s : r.stages)
    if (s.name == name)
      return &s;
  return nullptr;
}

std::string fmtSeconds(double s) {
  char b[32];
  if (s >= 1e-3)
    std::snprintf(b, sizeof b, "%.3g ms", s * 1e3);
  else
    std::snprintf(b, sizeof b, "%.3g us", s * 1e6);
  return b;
}

std::string fmtRatio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, r >= 10 ? "%.0fx" : "%.2gx", r);
  return b;
}

} // namespace

Replanner::Replanner(Profile profile, Budget budget, Config current,
                     ReplanOptions options)
    : profile_(std::move(profile)), budget_(budget),
      current_(std::move(current)), options_(options) {
  predicted_ = predict(profile_, current_, budget_.cores).throughput;
  // Re-plans keep the buffers the run was built with: the cache where it
  // is (or none) and every prefetch queue.
  for (size_t i = 0; i < profile_.steps.size(); ++i) {
    StepProfile &s = profile_.steps[i];
    s.pinned.cache = static_cast<int64_t>(i) == current_.cache.after
                         ? current_.cache.to
                         : std::string("none");
    auto d = current_.prefetch.find(i);
    s.pinned.prefetch = d == current_.prefetch.end() ? 0 : d->second;
  }
}

std::vector<ReplanEvent> Replanner::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

int64_t Replanner::looks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return looks_;
}

void Replanner::tick(runtime::Pipeline &p) {
  runtime::RunStats now = p.stats();
  std::lock_guard<std::mutex> lock(mu_);
  auto t = Clock::now();
  if (!started_) {
    start_ = t;
    started_ = true;
  }
  ++looks_;
  if (!havePrev_) {
    prev_ = std::move(now);
    havePrev_ = true;
    return;
  }
  double secs = std::chrono::duration<double>(t - start_).count();
  size_t n = profile_.steps.size();
  std::vector<double> dIn(n, 0), dCpu(n, 0), ratio(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const StepProfile &s = profile_.steps[i];
    const runtime::StageStats *b = findStage(now, s.name);
    if (!b)
      continue;
    const runtime::StageStats *a = findStage(prev_, s.name);
    runtime::StageStats zero;
    if (!a)
      a = &zero;
    // The source's input is what it reads (= emits).
    dIn[i] = static_cast<double>(s.source ? b->elementsOut - a->elementsOut
                                          : b->elementsIn - a->elementsIn);
    dCpu[i] = b->cpuSeconds - a->cpuSeconds;
    if (dIn[i] >= static_cast<double>(options_.minElements) &&
        s.cpuPerElement > 0 && dCpu[i] > 0)
      ratio[i] = dCpu[i] / dIn[i] / s.cpuPerElement;
  }
  // The whole pipeline's CPU per source record, as planned.
  double total = 0;
  for (const StepProfile &s : profile_.steps)
    total += s.visits * s.cpuPerElement;
  bool anyData = false, drifted = false;
  double worst = 0;
  std::string why;
  double hi = 1 + options_.threshold;
  for (const Lane &u : lanes(profile_, current_.cache.after)) {
    // Inline stages are timed by the wall clock, which swings with the
    // host's load (a thread preempted mid-record); only workers' thread
    // CPU decides a drift. Inline costs are re-measured at a re-plan.
    if (!u.parallel)
      continue;
    double expected = 0, measured = 0, planned = 0;
    for (size_t i : u.steps) {
      if (ratio[i] <= 0)
        continue;
      expected += dIn[i] * profile_.steps[i].cpuPerElement;
      measured += dCpu[i];
      planned += profile_.steps[i].visits * profile_.steps[i].cpuPerElement;
    }
    if (expected <= 0)
      continue;
    anyData = true;
    double r = measured / expected;
    bool beyond = r > hi || r < 1 / hi;
    bool matters = std::abs(r - 1) * planned >= 0.1 * total;
    if (!beyond || !matters || std::abs(std::log(r)) <= worst)
      continue;
    drifted = true;
    worst = std::abs(std::log(r));
    // Name the step of the lane that moved most.
    size_t step = u.steps.front();
    for (size_t i : u.steps)
      if (ratio[i] > 0 &&
          (ratio[step] <= 0 ||
           std::abs(std::log(ratio[i])) > std::abs(std::log(ratio[step]))))
        step = i;
    const StepProfile &s = profile_.steps[step];
    why = "'" + s.name + "' costs " + fmtRatio(ratio[step]) +
          " the CPU per element it was planned with (" +
          fmtSeconds(s.cpuPerElement) + " -> " +
          fmtSeconds(s.cpuPerElement * ratio[step]) + ")";
  }
  if (!anyData)
    return; // too few elements yet: the next look covers a longer interval
  streak_ = drifted ? streak_ + 1 : 0;
  if (drifted && streak_ >= options_.persistence && secs >= quietUntil_) {
    replan(p, now, ratio, why);
    streak_ = 0;
    quietUntil_ = secs + options_.cooldown;
  }
  prev_ = std::move(now);
}

void Replanner::replan(runtime::Pipeline &p, const runtime::RunStats &now,
                       const std::vector<double> &ratio,
                       const std::string &why) {
  ReplanEvent e;
  e.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  e.sourceRecords = now.stages.empty() ? 0 : now.stages.front().emitted;
  e.why = why;
  e.predictedBefore = predicted_;
  // The CPU no stage counter sees (hand-offs, wake-ups, allocation) is a
  // cost per record: it stays in seconds while the counted work drifts.
  double countedBefore = 0;
  for (const StepProfile &s : profile_.steps)
    countedBefore += s.visits * s.cpuPerElement;
  // The profile takes the measured costs. Of a scaling sample at p
  // workers, the work at one worker scales with the cost; what p workers
  // add beyond it (hand-offs, waits for the shared window: a cost per item,
  // not per unit of work) is kept in seconds. A lane that was too cheap to
  // scale when profiled (sigma near 1) scales once its work grows.
  for (size_t i = 0; i < profile_.steps.size(); ++i) {
    if (ratio[i] <= 0)
      continue;
    StepProfile &s = profile_.steps[i];
    s.secondsPerElement *= ratio[i];
    s.cpuPerElement *= ratio[i];
    auto sc = profile_.scaling.find(i);
    if (sc == profile_.scaling.end())
      continue;
    double one = 0;
    for (const ScalingSample &x : sc->second)
      if (x.parallelism == 1)
        one = x.secondsPerRecord;
    for (ScalingSample &x : sc->second)
      x.secondsPerRecord =
          one > 0 ? one * ratio[i] + std::max(0.0, x.secondsPerRecord - one)
                  : x.secondsPerRecord * ratio[i];
  }
  double countedAfter = 0;
  for (const StepProfile &s : profile_.steps)
    countedAfter += s.visits * s.cpuPerElement;
  if (countedAfter > 0 && profile_.cpuOverheadFactor > 1)
    profile_.cpuOverheadFactor =
        1 + (profile_.cpuOverheadFactor - 1) * countedBefore / countedAfter;
  Expected<Solution> sol = solve(profile_, budget_);
  if (!sol) {
    e.changes.push_back("no new schedule: " + sol.status().message());
    events_.push_back(std::move(e));
    return;
  }
  Config next = sol->config;
  std::vector<Lane> us = lanes(profile_, current_.cache.after);
  for (size_t k = 0; k < us.size() && k < next.parallelism.size() &&
                     k < current_.parallelism.size();
       ++k) {
    if (!us[k].parallel)
      continue;
    std::string step;
    for (size_t i : us[k].steps)
      if (profile_.steps[i].element) {
        step = profile_.steps[i].name;
        break;
      }
    int64_t from = current_.parallelism[k], to = next.parallelism[k];
    if (from == to || us[k].pinned > 0) {
      e.changes.push_back("parallelism of '" + step + "' " +
                          std::to_string(from) +
                          (us[k].pinned > 0 ? " (pinned)" : " (kept)"));
      next.parallelism[k] = from;
      continue;
    }
    Status s = p.setParallelism(step, to);
    if (!s) {
      e.changes.push_back("parallelism of '" + step + "' stays " +
                          std::to_string(from) + ": " + s.message());
      next.parallelism[k] = from;
      continue;
    }
    e.changes.push_back("parallelism of '" + step + "' " +
                        std::to_string(from) + " -> " + std::to_string(to));
  }
  // Prefetch queues keep their place; their depth follows the new rate,
  // within the capacity the run was created with.
  double rate = sol->prediction.throughput;
  next.prefetch = current_.prefetch;
  for (auto &[i, depth] : next.prefetch) {
    if (depth <= 0)
      continue;
    const StepProfile &s = profile_.steps[i];
    int64_t want = queueDepth(s.rateCv, rate * s.visits * s.selectivity);
    if (want == depth)
      continue;
    Expected<int64_t> applied = p.setPrefetch(s.name, want);
    if (applied && *applied != depth) {
      e.changes.push_back("prefetch after '" + s.name + "' " +
                          std::to_string(depth) + " -> " +
                          std::to_string(*applied));
      depth = *applied;
    }
  }
  next.cache = current_.cache;
  current_ = next;
  predicted_ = predict(profile_, current_, budget_.cores).throughput;
  e.predictedAfter = predicted_;
  events_.push_back(std::move(e));
}

std::string Replanner::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  char th[16];
  std::snprintf(th, sizeof th, "%.0f%%", options_.threshold * 100);
  if (events_.empty())
    return "schedule: auto: no re-plan: every stage's CPU per element stayed "
           "within " +
           std::string(th) + " of the plan (" + std::to_string(looks_) +
           " looks; SLUICE_NO_REPLAN=1 turns re-planning off)\n";
  std::string s = "schedule: auto: re-planned " +
                  std::to_string(events_.size()) +
                  (events_.size() == 1 ? " time" : " times") + " in " +
                  std::to_string(looks_) + " looks (drift threshold " + th +
                  "; SLUICE_NO_REPLAN=1 turns re-planning off)\n";
  for (const ReplanEvent &e : events_) {
    char at[96];
    std::snprintf(at, sizeof at,
                  "  at %.2f s (%lld source records): ", e.seconds,
                  static_cast<long long>(e.sourceRecords));
    s += at + e.why + "; predicted " + fmtRate(e.predictedAfter) +
         " records/s (was " + fmtRate(e.predictedBefore) + ")\n";
    for (const std::string &c : e.changes)
      s += "    " + c + "\n";
  }
  return s;
}

} // namespace sluice::autotune
