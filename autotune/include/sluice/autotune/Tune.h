//===- Tune.h - The autotuner's entry point and its reports -----*- C++ -*-===//
//
// One entry point, like Halide's autoschedulers: tune() profiles a Plan,
// solves for the budgets, runs the chosen schedule to measure it, and returns
// everything the reports need. The writers turn a result into schedule.yaml
// (replayable with `sluice run --schedule`, pasteable into the spec),
// report.json (schema in docs/autotune.md), report.md and an SVG chart of
// per-stage capacity against the pipeline's throughput. check() compares a
// result against a baseline report.json for CI.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_TUNE_H
#define SLUICE_AUTOTUNE_TUNE_H

#include "sluice/autotune/Replan.h"
#include "sluice/autotune/Solver.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace sluice::autotune {

/// Version of report.json's schema (docs/autotune.md).
constexpr int kReportVersion = 1;

struct TuneOptions {
  ProfileOptions profile;
  /// Plan for this many cores / this memory (0: the spec's budget, else the
  /// host). More cores than the host has: nothing is measured after solving.
  int64_t cores = 0;
  int64_t memoryBytes = 0;
  /// Run the chosen schedule and measure it (`sluice tune` does).
  bool verify = true;
  double verifySeconds = 2.5;
  /// Measure the whole run (all epochs) when it is predicted to take at most
  /// this long; a steady-state window of verifySeconds otherwise.
  double wholeRunSeconds = 8;
  /// When the chosen schedule caches and the run has two or more epochs:
  /// run it past its first epoch, timing that epoch
  /// (Profile::firstCalibration), and measure the cached epochs for
  /// cachedEpochsSeconds (Profile::cachedCalibration), if the first epoch
  /// is predicted to take at most firstEpochSeconds. cachedProbeRuns such
  /// runs (fewer when the first epoch is predicted to take over a second),
  /// each with its share of cachedEpochsSeconds; each phase's median is
  /// kept, so one run hit by a burst of other processes' load does not set
  /// the prediction.
  bool probeCachedEpochs = true;
  double cachedEpochsSeconds = 0.6;
  double firstEpochSeconds = 5;
  int cachedProbeRuns = 3;
  /// When the solver reports a close call (Solution::closeCall: another
  /// parallelism predicted within 2%): run the chosen configuration and
  /// the close call alternately, whole runs when one is predicted to take
  /// at most closeCallSeconds / 4 (and wholeRunSeconds), else steady-state
  /// windows of closeCallWindowSeconds (with a cache and two or more
  /// epochs: whole runs up to closeCallSeconds / 2, else not measured), in
  /// at least 3 and at most 7 pairs until closeCallSeconds have passed, and
  /// keep the close call when it measured faster by more than
  /// closeCallMargin (closeCallWins). SLUICE_NO_CLOSE_CALLS=1 turns it off.
  bool measureCloseCalls = true;
  double closeCallSeconds = 2;
  double closeCallWindowSeconds = 0.4;
  double closeCallMargin = 0.02;
};

struct TuneResult {
  Profile profile;
  Budget budget;
  std::string coresFrom;  ///< "--cores", "budget.cores", "host"
  std::string memoryFrom; ///< "--memory", "budget.memory", "none"
  bool otherHost = false; ///< planned for more cores than this host has
  Solution solution;
  Schedule schedule;
  /// The solver's schedule did not fit budget.memory by the runtime's own
  /// check (runtime::Pipeline::checkFits), so `schedule` has lower prefetch
  /// depths or fewer workers than `solution.config`, or is empty (the
  /// spec's own schedule); a note in `solution.notes` says which.
  bool loweredForMemory = false;
  Prediction naive;              ///< the naive configuration, predicted
  std::optional<Probe> measured; ///< the chosen schedule, run
  bool measuredWholeRun = false; ///< over all epochs, not a window
  double loadAverage = 0;        ///< 1-minute load when tuning started
  double seconds = 0;            ///< the whole tune
  /// When the budget is more cores than the host: what would limit and
  /// what it would need.
  std::string scaleAdvice;
  /// Probes run on the compiled (fused) plan when `profile` is that of the
  /// plan split for a cache inside a fused step (chooseFusedCache), else 0.
  size_t fusedProbes = 0;
  /// What the cached-epochs probe did or why it did not run ("" when the
  /// schedule has no cache).
  std::string cachedProbeNote;
  /// What the close-call runs measured and decided ("" when there was no
  /// close call or it was not measured).
  std::string closeCallNote;
  /// Which kernels the runs used, set by the caller that bound them:
  /// "generated" (the code generator's) or "runtime" (--no-jit: the
  /// interpreter and hand-written kernels); "" when not said. A baseline
  /// made in one mode compares poorly with a run in the other.
  std::string kernels;
  /// The stall meter of a run of the same pipeline with its real consumer
  /// (a training loop), given to `sluice tune --consumer STATS.json` (what
  /// `--stats-json`, Python's `stats()` or a torch Dataset's `stats()`
  /// wrote): the report says whether that consumer waited for data and
  /// whether the chosen schedule keeps up with it (consumerVerdict()).
  struct ConsumerRun {
    std::string from; ///< the file it came from
    runtime::RunStats::Consumer consumer;
    /// Source records per output in that run (to compare its consumer's
    /// pace with the predicted records/s).
    double recordsPerOutput = 0;
  };
  std::optional<ConsumerRun> consumerRun;
  /// How many `sluice serve` workers keep a trainer of a given demand fed
  /// (`sluice tune --demand`, or the --consumer run's demand):
  /// adviseWorkers().
  struct WorkerAdvice {
    double demand = 0;      ///< records/s the trainer takes
    std::string demandFrom; ///< "--demand", or the consumer run's file
    /// The trainer host's cores for input (the budget) and the records/s
    /// the tuned schedule is predicted to make on them.
    int64_t localCores = 0;
    double localRate = 0;
    /// One worker: its cores and the records/s the profile, solved for
    /// those cores, predicts (a worker runs the same pipeline).
    int64_t coresPerWorker = 0;
    double workerRate = 0;
    /// Workers of coresPerWorker cores besides a worker on the trainer's
    /// own host (the split: the local worker makes localRate, remote ones
    /// the rest), and the workers needed when the trainer host does no
    /// pipeline work at all.
    int64_t remoteWorkers = 0;
    int64_t workersAlone = 0;
    /// CPU cores the whole demand takes at the profile's CPU per record
    /// (the tuned run's measured CPU where there is one).
    double cpuCores = 0;
    /// The pipeline's output bytes per source record (what travels per
    /// record: docs/distributed.md) and the rate at the demand.
    double wireBytesPerRecord = 0;
    /// The trainer's CPU receiving outputs from remote workers: seconds
    /// per byte (receiveSecondsPerByte()), per record (the record's output
    /// bytes at that cost), the records/s the remote workers make in the
    /// split, the trainer host's cores receiving them takes (its own
    /// worker runs on the rest), and the most records/s its cores could
    /// receive doing nothing else.
    double receiveSecondsPerByte = 0;
    double receiveSecondsPerRecord = 0;
    double remoteRate = 0;
    double receiveCores = 0;
    double receiveLimit = 0;
    std::string text; ///< the advice in words
  };
  std::optional<WorkerAdvice> workerAdvice;
};

/// Fills r.workerAdvice for a trainer taking `demand` source records/s
/// (`demandFrom` says where the figure came from), with workers of
/// `coresPerWorker` cores (0: the budget's cores, the configuration the
/// profile measured). Pecan's AutoPlacement for one trainer: the trainer
/// host's cores make what the tuned schedule predicts for them, as a
/// worker of its own on 127.0.0.1, less the cores receiving the remote
/// workers' outputs takes, and remote workers make the rest; a worker's
/// rate is the profile solved for its cores. Errors: a demand that is not
/// a positive number, a solve that fails.
/// `receiveCost`: the trainer's CPU seconds per byte received (< 0: modelled
/// here, receiveSecondsPerByte()).
Status adviseWorkers(TuneResult &r, double demand,
                     const std::string &demandFrom, int64_t coresPerWorker,
                     double receiveCost = -1);

/// CPU seconds per byte a trainer spends receiving outputs over gRPC/TCP,
/// modelled on this host: kReceiveCopies copies of each byte, a copy timed
/// here as a memcpy of 64 MiB (beyond the caches; the median of 5 after one
/// that faults its pages in).
double receiveSecondsPerByte();
/// What receiving a byte costs in memcpys of it: the kernel's copy out of
/// the socket, the client's copy into the output's buffer (Client.cpp), and
/// TCP's and gRPC's work per byte besides. bench/remote_loopback.py
/// --socket measures it against a memcpy of a batch on the same host: 4.5,
/// 4.9 and 6.9 for f32 batches of 77 MB on the 2-core host under load
/// (docs/distributed.md, "Performance").
constexpr double kReceiveCopies = 5.0;

/// What r.consumerRun says: "" without one; else whether that consumer
/// waited for data (its stalls, its mean wait), the pace it could take
/// outputs at when never waiting (outputs over its own time between them),
/// and whether the chosen schedule's predicted rate keeps up with that pace
/// (a pipeline never waited on needs no more cores).
std::string consumerVerdict(const TuneResult &r);
/// The pace r.consumerRun's consumer could take records at if it never
/// waited (records per second of its own time); 0 without one.
double consumerDemand(const TuneResult &r);

/// Profiles, solves, and (opts.verify) measures the chosen schedule.
Expected<TuneResult> tune(const runtime::Plan &plan, const TuneOptions &opts);

/// Settles `r.solution.closeCall` (tune() calls it after solving when
/// opts.measureCloseCalls): runs the chosen configuration and the close
/// call alternately as TuneOptions describes and, when closeCallWins(),
/// makes the close call the solution (its prediction, schedule and the
/// changed parallelism knobs with their reason). Either way a note in
/// r.solution.notes and r.closeCallNote says what was measured.
/// SLUICE_NO_CLOSE_CALLS=1: nothing runs, the note says so.
Status settleCloseCall(const runtime::Plan &plan, const TuneOptions &opts,
                       TuneResult &r);

/// The verdict on a close call from paired runs: `chosen[i]` and
/// `other[i]` (records/s) ran back to back. True (take the other
/// configuration) when the median of other[i] / chosen[i] exceeds
/// 1 + `margin`; the median of the per-pair ratios, so a burst of load
/// from other processes during one pair does not decide. False without a
/// complete pair. `ratio` (optional) receives that median (0 without one).
bool closeCallWins(const std::vector<double> &chosen,
                   const std::vector<double> &other, double margin,
                   double *ratio = nullptr);

/// A cache point inside a fused step (runtime/Plan.h cacheSplitPoint):
/// tune() profiles the plan split after the stage's deterministic prefix,
/// solves it, and compares with the fused plan's solution.
struct FusedCacheChoice {
  bool split = false; ///< run split, with the split solution's cache
  std::string note;   ///< what was compared, for the report
  /// Whether the plans' own calibrated predictions give the same verdict as
  /// the comparison at one calibration. They disagree when the two profiles
  /// saw the host differently (a load burst during one, or a profile whose
  /// counters and throughput disagree); tune() then profiles the split plan
  /// once more and decides on that profile.
  bool consistent = true;
};

/// Decides between `fused` (the compiled plan's solution) and `split` (the
/// solution of `splitProfile`, the plan split after the prefix that ends at
/// its step `prefixStep`; `fusedName` names the stage before the split):
/// split when `split` caches right after the prefix and predicts more than
/// 5% over `fused` (the gain any cache must earn).
FusedCacheChoice chooseFusedCache(const Solution &fused, const Solution &split,
                                  const Profile &splitProfile,
                                  size_t prefixStep,
                                  const std::string &fusedName);

/// The writers.
std::string scheduleYaml(const TuneResult &r);
nlohmann::json reportJson(const TuneResult &r);
std::string reportMarkdown(const TuneResult &r);
std::string reportSvg(const TuneResult &r);
/// Creates `dir` (and its parents) if missing and checks that files can be
/// written there; `sluice tune` calls it before profiling.
Status prepareReportDir(const std::string &dir);
/// Writes the four files into `dir` (created with its parents if missing),
/// each through a temporary file renamed over the final name.
Status writeReports(const TuneResult &r, const std::string &dir);

/// `--check`: compares `current` (a report.json) against `baseline`.
struct CheckResult {
  bool ok = true;
  std::string text; ///< readable diff, one line per finding
};
CheckResult check(const nlohmann::json &baseline, const nlohmann::json &current,
                  double tolerance);
/// Whether `baseline` is a report.json check() can read: the schema, a
/// version this sluice knows, and every key check() uses with its type;
/// else an error naming the JSON path (`sluice tune --check` calls it
/// before profiling).
Status validateBaseline(const nlohmann::json &baseline);

/// What `schedule: auto` does in `sluice run`: a short profile, the solver,
/// the schedule to apply and a paragraph saying what it chose and why.
struct AutoSchedule {
  Schedule schedule;
  std::string explanation;
  Prediction prediction;
  /// False when SLUICE_NO_AUTOTUNE=1 turned `schedule: auto` off (nothing
  /// was profiled or applied).
  bool applied = true;
  /// The re-planner installed as RunOptions::controller (null when
  /// re-planning is off): its events() say what it changed during the run.
  std::shared_ptr<Replanner> replanner;
  /// The schedule came from the schedule cache: an earlier run tuned this
  /// plan on this host over the same data, and nothing was probed.
  bool reused = false;
  /// The cache entry read or written ("" when the cache is off).
  std::string cacheEntry;
};

/// How applyAutoSchedule() profiles and re-plans.
struct AutoOptions {
  /// Seconds of probing per probe level (two levels on two cores, in two
  /// interleaved windows each).
  double secondsPerProbe = 0.6;
  /// Wall seconds all the probes may take together, at any core count
  /// (ProfileOptions::totalSeconds): the first batch should not wait long.
  double maxProbeSeconds = 1.0;
  /// Re-plan while the pipeline runs when measured rates drift
  /// (SLUICE_NO_REPLAN=1 in the environment turns it off too).
  bool replan = true;
  ReplanOptions replanOptions;
  /// Reuse a schedule an earlier run tuned for the same plan, host and data,
  /// and keep this one for later runs (SLUICE_NO_SCHEDULE_CACHE=1 turns it
  /// off too).
  bool useCache = true;
  /// Print one line to stderr before probing ("probing ... for about N s"),
  /// so a terminal or a notebook is not silent while it probes.
  bool progressLine = true;
};

/// THE entry point for `schedule: auto`, for every runner of a Plan
/// (`sluice run`, compiled executables, the Python module): profiles `plan`
/// briefly under `opts` (its threads, budget, binder, temp dir), solves, and
/// applies the result to `opts`: the schedule into opts.schedule, and
/// (unless re-planning is off) a Replanner into opts.controller that changes
/// parallelism in flight when rates drift. Then run with `opts` as usual;
/// the outputs are the same bytes as under any schedule. The result's
/// explanation says what was chosen and why (print it for `--stats`; the
/// re-planner's report() comes with the run's statistics).
/// SLUICE_NO_AUTOTUNE=1 leaves `opts` alone (applied = false).
Expected<AutoSchedule> applyAutoSchedule(const runtime::Plan &plan,
                                         runtime::RunOptions &opts,
                                         const AutoOptions &auto_ = {});

} // namespace sluice::autotune

#endif // SLUICE_AUTOTUNE_TUNE_H
