//===- Replan.h - Re-planning a `schedule: auto` run when rates drift -*- C++
//-*-===//
//
// The profile a `schedule: auto` run starts from is taken in its first
// seconds; the data may change later (larger images, longer lines, a filter
// that starts dropping). The Replanner is a runtime::RunController: every
// interval it reads the running pipeline's counters, compares each stage's
// CPU per element with what the model was solved with, and when a stage has
// drifted beyond the threshold for a few looks in a row it updates the
// profile with the measured costs, re-solves (the cache placement and the
// prefetch queues stay, since the runtime cannot add or remove buffers in
// flight) and applies the new parallelism (and prefetch depths within the
// queues' capacity) through Pipeline::setParallelism / setPrefetch. The
// outputs do not change: order and random draws never depend on the
// schedule. Every re-plan is kept with its reason for `--stats`.
//
// Thread CPU, not wall time, is compared, so only parallel stages (whose
// workers' thread CPU is counted) can trigger a re-plan: on a shared host
// wall time swings with other processes' load, CPU per element much less.
// Inline stages are timed by wall clock; a re-plan re-measures them too.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_REPLAN_H
#define SLUICE_AUTOTUNE_REPLAN_H

#include "sluice/autotune/Solver.h"
#include "sluice/runtime/Pipeline.h"

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::autotune {

struct ReplanOptions {
  /// Seconds between looks at the counters.
  double interval = 0.25;
  /// A stage drifts when its CPU per element is more than (1 + threshold)
  /// times, or less than 1 / (1 + threshold) of, what the plan assumed.
  double threshold = 0.5;
  /// Consecutive looks a drift must last before it triggers a re-plan.
  int persistence = 2;
  /// Elements a stage must have processed in a look for it to count.
  int64_t minElements = 32;
  /// Seconds after a re-plan before the next one may start.
  double cooldown = 1.0;
};

/// One re-plan.
struct ReplanEvent {
  double seconds = 0;        ///< since the run's first output was asked for
  int64_t sourceRecords = 0; ///< read by then
  std::string why;           ///< "'tokenize' costs 290x ... per element"
  std::vector<std::string> changes; ///< "parallelism of 'x' 1 -> 2"
  double predictedBefore = 0, predictedAfter = 0; ///< source records/s
};

class Replanner : public runtime::RunController {
public:
  /// `current` is the configuration the run was started with (solved for
  /// `profile` under `budget`).
  Replanner(Profile profile, Budget budget, Config current,
            ReplanOptions options = {});

  double interval() const override { return options_.interval; }
  void tick(runtime::Pipeline &pipeline) override;
  std::string report() const override;

  /// The re-plans so far (any thread).
  std::vector<ReplanEvent> events() const;
  /// Looks taken so far.
  int64_t looks() const;

private:
  void replan(runtime::Pipeline &p, const runtime::RunStats &now,
              const std::vector<double> &ratios, const std::string &why);

  Profile profile_;
  Budget budget_;
  Config current_;
  double predicted_ = 0;
  ReplanOptions options_;
  mutable std::mutex mu_;
  std::vector<ReplanEvent> events_;
  std::chrono::steady_clock::time_point start_;
  bool started_ = false;
  runtime::RunStats prev_;
  bool havePrev_ = false;
  int streak_ = 0;
  double quietUntil_ = 0;
  int64_t looks_ = 0;
};

} // namespace sluice::autotune

#endif // SLUICE_AUTOTUNE_REPLAN_H
