//===- Solver.h - Choosing knobs under core and memory budgets --*- C++ -*-===//
//
// A mixed-integer program, solved with GLPK (Debian's libglpk), in the shape
// of Plumber's: maximize the pipeline's throughput T subject to T times each
// lane's work per record <= its capacity at the parallelism chosen for it
// (one binary per lane and parallelism, so the measured, non-linear scaling
// enters exactly), T times all CPU work per record <= the cores, the sum of
// parallelism <= the cores, and every buffer's bytes plus the memory cache
// <= the memory budget. The cache is a 0/1 choice per place (after a
// deterministic prefix, memory or disk, or none); since a cache changes which
// steps the runtime fuses, each choice carries its own lane variables and
// only the chosen one's are active (a disjunctive program). Prefetch depths
// are 0/1 choices among a few depths up to the queueing model's
// recommendation, worth a small bonus each, so memory pressure shrinks them
// first. Knobs pinned in the spec's `schedule:` are fixed variables.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_SOLVER_H
#define SLUICE_AUTOTUNE_SOLVER_H

#include "sluice/autotune/Model.h"

#include <optional>
#include <string>
#include <vector>

namespace sluice::autotune {

/// What the tuner may use.
struct Budget {
  int64_t cores = 1;
  int64_t memoryBytes = 0; ///< 0: no limit
  int64_t diskBytes = 0;   ///< free space for a disk cache (0: none)
};

/// Why a knob has its value, for reports and `--stats`: one line of the
/// tuner's explanation, not a schedule. The schedule the solver chose is
/// Solution::config (toSchedule() makes the one schedule type of it,
/// sluice::StepSchedule per step); a KnobChoice names one knob of one step
/// with its value as the report prints it ("none" for no cache), whether
/// the spec pinned it, and the reason, so the reports list the reasons
/// knob by knob. Nothing is copied from it into a schedule.
struct KnobChoice {
  std::string step;  ///< plan step the knob is written on
  std::string knob;  ///< "parallelism", "prefetch" or "cache"
  std::string value; ///< "4", "memory", "none"
  bool pinned = false;
  std::string reason;
};

/// The solver's answer.
struct Solution {
  Config config;
  Prediction prediction;
  std::vector<KnobChoice> knobs;
  /// What the budgets ruled out ("a memory cache after 'decode_image' (1.2
  /// GiB) does not fit budget.memory 512 MiB").
  std::vector<std::string> notes;
  std::string status; ///< "optimal", ...
  /// Another parallelism of the chosen configuration (the same cache and
  /// prefetch) that the model predicts within 2% of it: the best such one,
  /// a difference below what the model resolves (its contention and buffer
  /// terms are of that order, and the runtime's hand-offs, which no stage
  /// counter sees, are not in it). tune() settles it by running both
  /// (TuneOptions::measureCloseCalls). closeCallGain: its predicted
  /// throughput over the chosen one's, minus 1 (at one calibration).
  std::optional<Config> closeCall;
  double closeCallGain = 0;
  int variables = 0;
  int constraints = 0;
  double seconds = 0;
};

/// Solves for `budget`. Fails only when even the pinned knobs with the
/// smallest buffers break the memory budget (the error says by how much).
/// A cache the spec did not pin is kept only when it raises the predicted
/// throughput by more than 5% over the best schedule without one (a note
/// and the cache knob's reason say so otherwise).
/// A remote source's requests in flight are chosen last (Little's law on
/// the rest's predicted rate: chooseInFlight in Solver.cpp).
Expected<Solution> solve(const Profile &p, const Budget &budget);
/// solve() without choosing the requests in flight (Config::sourceInFlight
/// stays 0: the source's I/O unbounded).
Expected<Solution> solveConfig(const Profile &p, const Budget &budget);

/// The runtime form of a configuration: parallelism on every element step of
/// a parallel lane, prefetch and cache on their steps. Knobs equal to the
/// runtime's defaults are still written, so a replay is exact.
Schedule toSchedule(const Profile &p, const Config &c);

/// The naive configuration: parallelism 1 everywhere, no prefetch, no cache
/// (pinned knobs stay).
Config naiveConfig(const Profile &p);

/// The solver's rule switches in effect (SLUICE_TIES_TO_FEWER_WORKERS,
/// SLUICE_NO_PREFETCH_TOUCH_CAP, SLUICE_NO_IN_FLIGHT_UNCALIBRATED, and the
/// model's SLUICE_NO_CACHE_TOUCH_COST and SLUICE_NO_REQUEST_BURSTS), read
/// where the solver reads them and
/// spelled for the schedule cache's key: another rule is another key.
bool tiesToFewerWorkers();
bool prefetchTouchCapOn();
/// Whether a per-record remote source's requests in flight serve the larger
/// of the calibrated rate and the model's own (SLUICE_NO_IN_FLIGHT_
/// UNCALIBRATED=1: the calibrated rate alone, as before).
bool uncalibratedInFlightOn();
std::string solverRulesKey();

} // namespace sluice::autotune

#endif // SLUICE_AUTOTUNE_SOLVER_H
