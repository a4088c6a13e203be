//===- Replay.h - How a worker serves a plan: by position or by replay ----===//
//
// A worker makes outputs [first, first + count) of a trainer's share from
// their numbers alone. For a pipeline that resumes by position (per-record
// steps and one batch) output i is the rows [i*B, (i+1)*B) of the share's
// positions, read straight away (Server.cpp). A `shuffle` step or a
// `filter` breaks that: which positions make up output i then depends on
// the stream before it. Both are still functions of the plan, the seed and
// the positions, so the worker replays them, once per epoch and share,
// without the per-record work where it can:
//  - a shuffle step's draws depend only on how many records its buffer
//    holds (Stages.cpp: a uniform index into the buffer, keyed by (seed,
//    epoch, step)), so its order is replayed over position numbers alone:
//    microseconds per thousand records, no data read;
//  - a filter keeps records by their values: the worker runs the steps up
//    to the filter over the share once (the filter pushdown pass puts
//    filters near the source, where that costs a read, not a decode) and
//    keeps the positions that pass.
// The result is the share's row order: the positions of output rows 0, 1,
// 2, ... A chunk then runs the plan without its shuffle steps over the
// explicit positions of its rows (RunOptions::positions); every record is
// numbered by its position, so its random choices, and the batch it lands
// in, are a local run's. The order is cached per (epoch, rank, world size):
// a cache, not state (any worker can make it again).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_REMOTE_REPLAY_H
#define SLUICE_REMOTE_REPLAY_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

namespace sluice::remote::detail {

/// How a worker serves one plan.
class ServePlan {
public:
  /// Classifies `plan` under `opts` (which it creates a pipeline with, so
  /// that the runtime's own refusals come first). An error names the step
  /// that cannot be served, why, and what to write instead.
  static Expected<std::unique_ptr<ServePlan>>
  make(const runtime::Plan &plan, const runtime::RunOptions &opts);

  /// True when outputs are made by replaying the order (a shuffle step or
  /// a filter); false for a pipeline that resumes by position.
  bool replay() const { return replay_; }
  /// What a chunk runs: the plan without its shuffle steps (replay), or
  /// the plan itself.
  const runtime::Plan &chunkPlan() const { return chunkPlan_; }
  /// Rows of a full output (the batch size; 1 without a batch).
  int64_t batchRows() const { return rows_; }
  /// Whether a short last batch is dropped.
  bool dropRemainder() const { return dropRemainder_; }
  /// Whether a local run knows an epoch's outputs in advance (no filter):
  /// its state after the epoch's last output then names the next epoch.
  bool countKnown() const { return countKnown_; }
  /// Source records of one epoch (all ranks).
  std::optional<int64_t> sourceRecords() const { return sourceRecords_; }
  /// Threads a chunk's pipeline runs.
  int64_t threads() const { return threads_; }

  /// The row order of the share (rank of world) of `epoch`: the positions
  /// of the rows its outputs hold, in order (replay only).
  Expected<std::shared_ptr<const std::vector<int64_t>>>
  order(int64_t epoch, int64_t rank, int64_t world);
  /// Outputs of a share whose row order holds `rows` rows.
  int64_t outputsFor(int64_t rows) const;

private:
  ServePlan(const runtime::Plan &plan, const runtime::RunOptions &opts)
      : plan_(plan), opts_(opts) {}
  Expected<std::vector<int64_t>>
  survivors(size_t lastStage, std::vector<int64_t> in, int64_t epoch) const;

  const runtime::Plan &plan_;
  const runtime::RunOptions &opts_;
  runtime::Plan chunkPlan_;
  bool replay_ = false;
  int64_t rows_ = 1;
  bool batched_ = false;
  bool dropRemainder_ = false;
  bool countKnown_ = true;
  std::optional<int64_t> sourceRecords_;
  int64_t threads_ = 1;

  using Key = std::tuple<int64_t, int64_t, int64_t>;
  std::mutex mu_;
  /// The orders made last, newest at the back (a few: one per trainer
  /// share and epoch in flight).
  std::vector<std::pair<Key, std::shared_ptr<const std::vector<int64_t>>>>
      cache_;
};

} // namespace sluice::remote::detail

#endif // SLUICE_REMOTE_REPLAY_H
