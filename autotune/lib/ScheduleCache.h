//===- ScheduleCache.h - Tuned schedules kept for the next run --*- C++ -*-===//
//
// Internal to autotune/: applyAutoSchedule() stores what it tuned and a later
// run of the same plan, on the same host, over the same data, reuses it
// without probing (ScheduleCache.cpp says what the key holds).
// SLUICE_NO_SCHEDULE_CACHE=1 turns it off; the directory is
// $SLUICE_CACHE_DIR/schedules, else $XDG_CACHE_HOME/sluice/schedules, else
// ~/.cache/sluice/schedules (beside the kernel cache).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_LIB_SCHEDULECACHE_H
#define SLUICE_AUTOTUNE_LIB_SCHEDULECACHE_H

#include "sluice/autotune/Model.h"
#include "sluice/autotune/Profile.h"
#include "sluice/autotune/Solver.h"
#include "sluice/ops/Status.h"
#include "sluice/runtime/Plan.h"

#include <optional>
#include <string>

namespace sluice::autotune {

/// What a tuned `schedule: auto` leaves for the next run.
struct CachedSchedule {
  Schedule schedule;
  std::string explanation; ///< the tuning run's `--stats` paragraph
  Prediction prediction;   ///< throughput, wholeRun, outputs/s, bottleneck
  Profile profile;         ///< for the re-planner
  Budget budget;
  Config config;
  std::string tunedAt; ///< UTC time of the tuning run, for messages
  /// The tuning run lowered the schedule to fit the memory budget, so the
  /// re-planner (which would raise it again) stays off on reuse too.
  bool loweredForMemory = false;
};

std::string scheduleCacheDirectory();
/// False under SLUICE_NO_SCHEDULE_CACHE=1 or with no cache directory.
bool scheduleCacheEnabled();
/// The exact text an entry must match: plan, run options, host, data.
std::string scheduleCacheKey(const runtime::Plan &plan,
                             const runtime::RunOptions &opts, int64_t cores);
/// The entry for `key`, or nullopt (absent, damaged, another key). `path`
/// receives the entry's file name.
std::optional<CachedSchedule> loadCachedSchedule(const std::string &key,
                                                 std::string *path = nullptr);
Status storeCachedSchedule(const std::string &key, const CachedSchedule &c);

} // namespace sluice::autotune

#endif // SLUICE_AUTOTUNE_LIB_SCHEDULECACHE_H
