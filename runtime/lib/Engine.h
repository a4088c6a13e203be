//===- Engine.h - Stage graph internals -------------------------*- C++ -*-===//
//
// Not installed. The pull-based stages the engine wires together: each stage
// has next(Item&) -> more?, runs its pass over the stream between start()
// and stop(), and counts what it reads and what becomes of it. Cheap stages
// run in their consumer's thread; fused element steps run on a oneTBB arena
// behind an order-preserving window; prefetch runs a producer thread.
//
// Lifecycle of one pass (an epoch, or one repetition under `repeat`):
// start(epoch) starts the stage and then its upstream; next() until false
// or an error; stop() stops the stage's own threads first (they may be
// inside upstream->next()), counts what its buffers still hold as
// discarded, then stops the upstream.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_LIB_ENGINE_H
#define SLUICE_RUNTIME_LIB_ENGINE_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/ElementOps.h"
#include "sluice/runtime/Memory.h"
#include "sluice/runtime/Plan.h"
#include "sluice/runtime/Source.h"
#include "sluice/runtime/Stats.h"
#include "sluice/runtime/TaskHandoff.h"

#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::runtime {
class PinnedPool;
class OutputBuffers;
}

namespace sluice::runtime::detail {

/// Counts a bad record skipped under `on_error: skip`. An error after which
/// the rest of the file cannot be read (a TFRecord length CRC, truncation,
/// an I/O error) is counted under its own reason ("..., rest of the file
/// dropped") and named in a warning: the records lost with it are not
/// countable, but they must not vanish without a word.
void noteSkipped(StageCounters &c, const DataError &e);

/// Where a record came from, for error messages.
struct Origin {
  int64_t shard = -1;  ///< source shard, -1 after batch/unbatch
  int64_t record = -1; ///< index of the record within the shard
};

/// A record moving through the graph.
struct Item {
  Record rec;
  Origin origin;
};

/// A run of consecutive records of the stream held as columns (what
/// ShardReader::nextRun gives), with the rows still selected after filters.
/// Record i of the run has index firstIndex + i and comes from record
/// origin.record + i of shard origin.shard.
struct ItemRun {
  std::vector<Tensor> columns; ///< [rows, ...field shape] per field
  int64_t rows = 0;
  uint64_t firstIndex = 0;
  Origin origin;
  /// Whether `keep` lists the rows still in the stream (in order); when
  /// false every row is.
  bool selected = false;
  std::vector<uint32_t> keep;

  int64_t kept() const {
    return selected ? static_cast<int64_t>(keep.size()) : rows;
  }
  /// What recordBytes() says of one of the run's records read on its own
  /// (a record of views of one row per field).
  int64_t rowRecordBytes() const;
};

struct OrderReplay;

/// State shared by the stages of one pipeline.
struct Shared {
  const Plan *plan = nullptr;
  const Source *source = nullptr;
  MemoryBudget *memory = nullptr;
  /// How messages name the memory budget: "budget.memory" (the spec's), or
  /// the flag or argument that set it instead.
  std::string budgetName = "budget.memory";
  TaskArena *arena = nullptr;
  OnError onError = OnError::Fail;
  int64_t threads = 1;
  std::string tempDir;
  /// RunOptions::batchRowPlacement (and no SLUICE_NO_BATCH_PLACEMENT).
  bool batchRowPlacement = true;
  /// RunOptions::directOutput (and no SLUICE_NO_DIRECT_OUTPUT).
  bool directOutput = true;
  /// RunOptions::batchedHandoff (and no SLUICE_NO_BATCHED_HANDOFF).
  bool batchedHandoff = true;
  /// Arena slicing (RunOptions::arenaSlicing, TaskHandoff.h): a parallel
  /// step's worker gives its arena slot to a waiting task after this long
  /// (0: never; it keeps the slot while its step has input).
  int64_t arenaSliceNs = 0;
  /// RunOptions::parallelParse (and no SLUICE_NO_PARALLEL_PARSE).
  bool parallelParse = true;
  /// RunOptions::fileReadAhead (and no SLUICE_NO_FILE_READ_AHEAD).
  bool fileReadAhead = true;
  /// The epochs the run reads the source in (-1: endless; 0: not known,
  /// none named ahead), when no cache serves later epochs instead: a source
  /// over remote objects names the next epoch's first shards before the
  /// current pass ends, so that an epoch boundary costs no round trip. 0
  /// with SLUICE_NO_NEXT_PASS_AHEAD=1.
  int64_t sourceEpochs = 0;
  /// Whether the source is read again in the epoch after `epoch`
  /// (sourceEpochs): a pass may then name that epoch's first shards.
  bool sourceReadAfter(uint64_t epoch) const {
    return sourceEpochs < 0 ||
           (sourceEpochs > 0 && static_cast<int64_t>(epoch) + 1 < sourceEpochs);
  }
  /// A `repeat` step reads the source more than once an epoch: the pass
  /// after this one is then not known to be the next epoch's first (its
  /// order may be this epoch's), so a positional source names none of it.
  bool sourceRepeats = false;
  /// SLUICE_COARSE_BATCH_COUNT=1: `batch` counts a batch it builds in a new
  /// buffer by its records' bytes (tensor overhead included) instead of the
  /// buffer's own bytes, as before.
  bool coarseBatchCount = false;
  /// RunOptions::stageTiming: time steps and count their bytes.
  bool timing = true;
  /// `batch` pulls runs of records with nextMany() (no
  /// SLUICE_NO_BULK_PULL).
  bool bulkPull = true;
  /// RunOptions::recordRuns (and no SLUICE_NO_RECORD_RUNS): `batch` takes
  /// runs of rows as columns (Stage::nextRun) where its upstream can.
  bool recordRuns = true;

  /// RunOptions::pinBatches (Pinned.h): the pool of
  /// page-locked buffers the batch step named `pinnedStep` (the last batch,
  /// no unbatch after it) allocates its batches from (null: none).
  std::shared_ptr<PinnedPool> pinned;
  std::string pinnedStep;
  /// RunOptions::outputBuffers, for the batch step named `outputStep` (the
  /// last batch, as pinnedStep).
  std::shared_ptr<OutputBuffers> outputBuffers;
  std::string outputStep;

  /// Positional reading (RunOptions::rank/worldSize, a source with
  /// `shuffle: true`, or a positional resume): the source stage reads the
  /// positions of each epoch's global order (a permutation of all records
  /// derived from (seed, epoch) with `shuffle: true`, else the sorted
  /// order) that belong to this rank, and numbers each record by its
  /// global position, so a record's random choices do not depend on the
  /// world size.
  struct Positional {
    bool on = false;
    bool permute = false;
    int64_t rank = 0;
    int64_t world = 1;
    /// The first pass of this epoch starts at `resumeStart` instead of 0.
    int64_t resumeEpoch = -1;
    int64_t resumeStart = 0;
    /// RunOptions::positions: read these positions, in this order.
    std::shared_ptr<const std::vector<int64_t>> positions;
    /// Shuffle by position (RunOptions::positionalShuffle): the reordering
    /// step right after the source whose order the source reads in (each
    /// pass, the step's order replayed over this rank's walk), and its
    /// replay; the step's own stage then passes records through.
    const PlanStep *order = nullptr;
    const OrderReplay *replay = nullptr;
    /// Number records as the sequential source does, whose numbering goes
    /// on across the passes of a `repeat` (pass k's record at position p
    /// is k * count + p): set when shuffle by position replaced it.
    bool numberPasses = false;
  } positional;

  /// The source stage's counters, and the source records that passes
  /// served from caches stand for (summed over caches; owned by the
  /// engine): a cache measures how many source records its recording pass
  /// went through as the change of their sum (RunStats::records()).
  StageCounters *sourceCounters = nullptr;
  std::atomic<int64_t> *replayedSourceRecords = nullptr;
  /// RunStats::records() so far.
  int64_t recordsSoFar() const;

  /// Set by Pipeline::cancel() (from any thread): every stage's next()
  /// fails with cancelledError() from then on, and waits for other threads'
  /// results give up (Stage::wake()), so the thread in Pipeline::next()
  /// returns after at most the record each thread is working on, also in
  /// the middle of filling a batch or a shuffle buffer.
  std::atomic<bool> cancelled{false};

  /// "data/x.csv: record 17" for an item's origin.
  std::string describe(const Origin &o) const;
};

/// What next() returns once the pipeline is cancelled.
Status cancelledError();

/// A bad record read from the source: under `on_error: skip` it is counted
/// (noteSkipped) and ok is returned; under `fail` the failure is counted and
/// the error names the source and its spec line.
Status sourceRecordError(const Shared &shared, StageCounters &c,
                         const DataError &e);

/// Reads the next record of `reader` (a shard of `file`) with what the
/// reader allocates for it (records, declared lengths it checks, buffers it
/// grows) counted in `limit`: an allocation refused there or failed is an
/// unrecoverable data error of the shard ("memory: record does not fit"),
/// never an exception escaping the thread.
ReadResult readCounted(AllocationLimit &limit, ShardReader &reader, Record &rec,
                       const std::string &file);

/// Buffer sizes a stage needs when records have a static size, for the
/// check before running.
struct StaticNeed {
  std::string what;    ///< "shuffle buffer of 4096 records"
  int64_t records = 0; ///< capacity in records
  RecordType type;     ///< type of the buffered records
  std::string knob;    ///< "shuffle.buffer", "prefetch of 'x'"
  /// Records held per unit of the knob (3 for a batch's size: the batch
  /// being filled, the next and the last), so advice is in the knob's units.
  int64_t recordsPerKnob = 1;
  std::string where; ///< spec location
};

inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
/// CPU time of the calling thread.
int64_t threadCpuNs();

/// Static bytes of one record of `t`, nullopt when a field is dynamic or
/// not numeric.
std::optional<int64_t> staticRecordBytes(const RecordType &t);

/// Lets the parallel map stage feeding a `batch` write each finished record
/// straight into its row of the batch buffer, on the worker that just
/// produced it (while it is in that core's cache), instead of the batch
/// stage copying every record on the consumer's thread. Implemented by the
/// batch stage (BatchStage.cpp), which still checks that every row it emits
/// holds its record and copies the ones that are not in place.
class RowPlacer {
public:
  virtual ~RowPlacer();
  /// Called by a worker with a finished record that is expected to become
  /// the `pos`-th (0-based) record the batch stage reads in this pass
  /// (exact unless an earlier record was dropped that the map stage has not
  /// seen yet). May copy the record's fields into the batch buffer and
  /// replace them with views of their rows; leaves `rec` alone otherwise.
  virtual void place(uint64_t pos, Record &rec) = 0;
  /// Direct output: before a worker processes the record expected at
  /// `pos`, claims its row and returns views of it, one per field
  /// (`rowViews`), and those the steps may write into (`targets`, for an
  /// OutputTargetScope: the fields whose type no other field has, so a
  /// result cannot land in another field's row); false (nothing claimed)
  /// when the row is not open or already taken.
  virtual bool claim(uint64_t pos, std::vector<Tensor> &rowViews,
                     std::vector<Tensor> &targets) {
    (void)pos;
    (void)rowViews;
    (void)targets;
    return false;
  }
  /// Finishes a claimed row with the processed record: copies the fields
  /// the steps did not write in place and makes them views of the row.
  virtual void placeClaimed(uint64_t pos, Record &rec,
                            const std::vector<Tensor> &rowViews) {
    (void)pos;
    (void)rec;
    (void)rowViews;
  }
};

class Stage {
public:
  Stage(Shared &shared, std::unique_ptr<Stage> upstream,
        StageCounters *counters)
      : shared_(shared), upstream_(std::move(upstream)), c_(counters) {}
  virtual ~Stage();

  /// Starts a pass of `epoch`.
  Status start(uint64_t epoch);
  /// The next item of the pass; false at its end.
  Expected<bool> next(Item &out);
  /// Appends up to `max` (> 0) items of the pass to `out` and returns how
  /// many; 0 only at its end. The same items, order, counts and errors as
  /// `max` calls of next() (an error met after some items is returned by
  /// the following call), but a stage on the per-record path (source,
  /// inline map) times and counts the run once instead of per record: on
  /// tabular pipelines the clock reads and counter updates per record cost
  /// as much as the steps. Used by `batch` (Shared::bulkPull).
  Expected<size_t> nextMany(std::vector<Item> &out, size_t max);
  /// Whether nextRun() may be used instead of next(): this stage and the
  /// ones above it can hand on runs of records as columns.
  virtual bool runs() const { return false; }
  /// The next run of records (ItemRun) with at most `max` (> 0) rows still
  /// selected; false at the end of the pass. A run may have no row left
  /// (all filtered). The same records, counts and errors as next(), but
  /// the records are never built one by one. Only when runs().
  Expected<bool> nextRun(ItemRun &run, int64_t max);
  /// Stops the pass (idempotent).
  void stop();

  Stage *upstream() const { return upstream_.get(); }
  /// Wakes this stage's waits for other threads' results after
  /// Shared::cancelled is set, so they see it (callable from any thread).
  virtual void wake() {}
  virtual void staticNeeds(std::vector<StaticNeed> &) const {}
  /// Asks this stage to hand its finished records to `placer` (null:
  /// stop). True when it will: only parallel map stages do.
  virtual bool attachRowPlacer(RowPlacer *) { return false; }

  // Knobs that change while the pipeline runs (Pipeline::setParallelism,
  // setPrefetch: the re-planning of `schedule: auto`). Safe from any thread
  // while the stage runs; the outputs do not depend on them.
  /// Whether this stage runs plan step `name` (a fused step's name, or
  /// "<step>/prefetch" for a prefetch queue).
  virtual bool runsStep(const std::string &name) const {
    return c_ && c_->name() == name;
  }
  /// Workers of a parallel map stage: sets them (1..threads) and returns
  /// true; false for a stage without workers.
  virtual bool setParallelism(int64_t) { return false; }
  /// Depth of a prefetch queue, within the capacity checked before running:
  /// returns the depth applied, -1 for a stage without a queue.
  virtual int64_t setDepth(int64_t) { return -1; }

protected:
  virtual Status onStart(uint64_t epoch);
  virtual Expected<bool> produce(Item &out) = 0;
  /// Stops own threads and counts held items as discarded.
  virtual void onStop() {}
  /// Pulls from upstream, counting `read` and input bytes.
  Expected<bool> pull(Item &in);
  /// pull() for a run of up to `max` items (upstream's nextMany()).
  Expected<size_t> pullMany(std::vector<Item> &out, size_t max);
  /// nextMany()'s work; the default calls produce() for each item. An
  /// override that meets an error after appending items keeps it with
  /// holdError() and returns the count.
  virtual Expected<size_t> produceMany(std::vector<Item> &out, size_t max);
  /// nextRun()'s work (only stages whose runs() can be true override it).
  virtual Expected<bool> produceRun(ItemRun &run, int64_t max);
  /// pull() for a run (upstream's nextRun()), counting its selected rows.
  Expected<bool> pullRows(ItemRun &run, int64_t max);
  void holdError(Status s) { held_ = std::move(s); }
  /// Time produce() spent waiting for other threads' work (not this
  /// stage's own): left out of its wall and CPU time, as time in pull() is.
  void excludeTime(int64_t ns) { pullNs_ += ns; }

  /// Number of times this stage was started in the current epoch, minus 1
  /// (a repetition under `repeat`); seeds per-pass randomness.
  uint64_t passInEpoch() const { return passInEpoch_; }
  uint64_t epoch() const { return epoch_; }

  Shared &shared_;
  std::unique_ptr<Stage> upstream_;
  StageCounters *c_;
  /// Whether next() charges its own time (minus time in pull()) to c_.
  /// Threaded stages account for their workers themselves.
  bool inlineTiming_ = true;
  bool running_ = false;

private:
  int64_t pullNs_ = 0;
  /// An error met by produceMany() after it had appended items.
  std::optional<Status> held_;
  uint64_t epoch_ = 0;
  uint64_t passInEpoch_ = 0;
  bool startedOnce_ = false;
};

/// One step of a map stage, with its kernel bound.
struct BoundStep {
  const PlanStep *step = nullptr;
  ElementFn fn;
  /// A filter's compiled column test (RunOptions::rowsBinder); empty: the
  /// map stage binds the interpreter's (bindRowsFilter).
  RowsFilterFn rows;
  StageCounters *counters = nullptr;
};

// Factories (one per stage kind).
std::unique_ptr<Stage> makeSourceStage(Shared &shared, StageCounters *c,
                                       int64_t cycleLength,
                                       int64_t blockLength);
/// The source read by position (Shared::Positional).
std::unique_ptr<Stage> makePositionalSourceStage(Shared &shared,
                                                 StageCounters *c);
/// Fused per-record steps; `parallelism` 0 runs them inline, otherwise on
/// the arena with at most that many workers and a window of `window` records.
/// `perWorker` > 0: the window was sized for Shared::threads workers (a
/// controller may raise the parallelism in flight), and while fewer run the
/// feeder fills `perWorker` slots fewer per missing worker.
std::unique_ptr<Stage> makeMapStage(Shared &shared,
                                    std::unique_ptr<Stage> upstream,
                                    std::vector<BoundStep> ops,
                                    int64_t parallelism, int64_t window,
                                    int64_t perWorker = 0);
std::unique_ptr<Stage> makeIdentityStage(Shared &shared,
                                         std::unique_ptr<Stage> upstream,
                                         StageCounters *c);
std::unique_ptr<Stage> makePrefetchStage(Shared &shared,
                                         std::unique_ptr<Stage> upstream,
                                         StageCounters *c, int64_t buffer,
                                         RecordType type, std::string knob,
                                         std::string where);
/// `recordsPerPass`: an upper bound on the records that reach the shuffle in
/// one pass, when the source knows its size (bounds the static memory need).
std::unique_ptr<Stage> makeShuffleStage(Shared &shared,
                                        std::unique_ptr<Stage> upstream,
                                        StageCounters *c, const PlanStep &step,
                                        std::optional<int64_t> recordsPerPass);
std::unique_ptr<Stage> makeBatchStage(Shared &shared,
                                      std::unique_ptr<Stage> upstream,
                                      StageCounters *c, const PlanStep &step,
                                      bool padded);
std::unique_ptr<Stage> makeUnbatchStage(Shared &shared,
                                        std::unique_ptr<Stage> upstream,
                                        StageCounters *c);
std::unique_ptr<Stage> makeRepeatStage(Shared &shared,
                                       std::unique_ptr<Stage> upstream,
                                       StageCounters *c, int64_t count);
std::unique_ptr<Stage> makeTakeStage(Shared &shared,
                                     std::unique_ptr<Stage> upstream,
                                     StageCounters *c, int64_t count);
std::unique_ptr<Stage> makeSkipStage(Shared &shared,
                                     std::unique_ptr<Stage> upstream,
                                     StageCounters *c, int64_t count);
std::unique_ptr<Stage> makeShardStage(Shared &shared,
                                      std::unique_ptr<Stage> upstream,
                                      StageCounters *c, int64_t numShards,
                                      int64_t index);
/// `to` is "memory" or "disk"; `dir` the directory of the disk file.
std::unique_ptr<Stage> makeCacheStage(Shared &shared,
                                      std::unique_ptr<Stage> upstream,
                                      StageCounters *c, std::string to,
                                      std::string dir, RecordType type,
                                      std::string where);

/// What a record op's stage factory builds from, and the engine's running
/// account of the stream it updates by the op's count rule.
struct StageBuild {
  Shared &shared;
  const PlanStep &step;
  std::string where; ///< the step's spec location, for messages
  StageCounters *counters;
  std::unique_ptr<Stage> upstream;
  /// Records per pass at this point of the stream (nullopt: unknown).
  std::optional<int64_t> &count;
  /// False once `count` is only an upper bound (after a filter, or a take
  /// of a source of unknown size).
  bool &countExact;
  /// Source records one run reads, when known (a repeat multiplies them,
  /// a take may stop the source early).
  std::optional<int64_t> &sourceRecords;
  /// Static buffers the stage holds, for the memory check before running.
  std::vector<StaticNeed> &needs;
};

/// Makes the stage of one record op (batch, shuffle, take, ...) and applies
/// the op's rule for the number of records to `b.count`.
using StageFactory =
    std::function<Expected<std::unique_ptr<Stage>>(StageBuild &b)>;

/// How a reordering step's output order follows from its input's count
/// alone (its draws depend on how many records it holds, never on their
/// values): the order of `in` (any labels: positions, steps of a walk)
/// that the step gives in pass `pass` of epoch `epoch`. Lets the source
/// read in that order instead (shuffle by position, PositionalSource.cpp)
/// and `sluice serve` replay it over positions (remote/lib/Replay.cpp).
struct OrderReplay {
  std::function<std::vector<int64_t>(const PlanStep &step, uint64_t planSeed,
                                     uint64_t epoch, uint64_t pass,
                                     const std::vector<int64_t> &in)>
      order;
};

/// Registers the stage factory of record op `op` at static-initialization
/// time, in the file of its stage: the engine finds it by the step's op.
/// A reordering op whose order can be replayed registers its replay too.
struct StageRegistration {
  StageRegistration(std::string op, StageFactory make, OrderReplay replay = {});
};

/// The factory registered for `op`, or null.
const StageFactory *findStageFactory(std::string_view op);
/// The order replay registered for `op`, or null.
const OrderReplay *findOrderReplay(std::string_view op);

/// The reason an error is counted under: the op name and the message up to
/// its first ':' ("decode_image: corrupt JPEG data").
std::string skipReason(const std::string &op, const std::string &message);

} // namespace sluice::runtime::detail

#endif // SLUICE_RUNTIME_LIB_ENGINE_H
