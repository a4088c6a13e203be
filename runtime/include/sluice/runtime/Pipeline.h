//===- Pipeline.h - Running a Plan: iterator API and `sluice run` -*- C++
//-*-===//
//
// A Pipeline builds the stage graph of a Plan and pulls outputs from it:
//
//   auto p = sluice::runtime::Pipeline::create(plan, options);
//   sluice::runtime::Batch b;
//   while (true) {
//     auto more = (*p)->next(b);
//     if (!more) { report(more.status()); break; }
//     if (!*more) break;
//     const sluice::Tensor *image = b.field("image");
//   }
//
// Outputs are deterministic: the same Plan and seed give the same outputs,
// bit for bit, at any number of threads (every random choice derives from
// (seed, epoch, record index, step)). runPipeline() is `sluice run`: it
// drives a Pipeline into a sink, shows progress, and prints the accounting
// and (optionally) the per-stage statistics.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_PIPELINE_H
#define SLUICE_RUNTIME_PIPELINE_H

#include "sluice/ops/Schedule.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Types.h"
#include "sluice/runtime/ElementOps.h"
#include "sluice/runtime/Memory.h"
#include "sluice/runtime/Plan.h"
#include "sluice/runtime/Stats.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace sluice::runtime {

/// Where a run stands: enough to continue it later with exactly the outputs
/// it would have produced next, bit for bit (Pipeline::state(),
/// RunOptions::resume). A few hundred bytes of positions and counts, never
/// buffered data. Two ways to continue, chosen by the pipeline:
///  - positional: when the source is read by position (ranks, or a source
///    with `shuffle: true`) and every stage after it keeps one output row
///    per source record (per-record steps other than filter, batch,
///    prefetch), the rows delivered say which positions of the epoch's
///    global order are done; a resumed run starts reading after them, at any
///    world size. Costs nothing.
///  - replay: otherwise the resumed run starts the epoch again and drops
///    the first `outputs` outputs (shuffle buffers, filters, interleave and
///    caches hold state that positions cannot describe). Exact for any
///    pipeline, but costs the work of that part of the epoch, and needs the
///    same rank and world size.
struct PipelineState {
  /// Format version of toJson().
  static constexpr int kVersion = 1;
  /// Hash of everything in the Plan that decides the outputs (not the
  /// schedule, threads, epochs or budget): a state only resumes the
  /// pipeline it came from.
  uint64_t fingerprint = 0;
  uint64_t seed = 0;
  /// The epoch of the next output.
  int64_t epoch = 0;
  /// Outputs of `epoch` delivered already (replay).
  int64_t outputs = 0;
  int64_t rank = 0;
  int64_t worldSize = 1;
  /// Positional: the global position this epoch's share started at, and
  /// the rows (records) this rank delivered since; -1 when the pipeline
  /// cannot resume by position. All ranks of a job checkpoint after the
  /// same number of rows (as data-parallel training does), so positions
  /// [positionStart, positionStart + worldSize * rows) are done.
  int64_t positionStart = -1;
  int64_t rows = -1;

  /// A small JSON object.
  std::string toJson() const;
  static Expected<PipelineState> fromJson(const std::string &text);
};

/// The fingerprint PipelineState::fingerprint compares.
uint64_t planFingerprint(const Plan &plan);

class Pipeline;
class Source;

/// Watches a running pipeline and may change its knobs in flight
/// (Pipeline::setParallelism / setPrefetch): the autotuner's re-planner for
/// `schedule: auto` (autotune::applyAutoSchedule). The runtime knows only
/// this interface. The Pipeline calls tick() from a thread of its own every
/// interval() seconds, from its first next() until stop(); tick() may read
/// stats() and change knobs, never call next() or stop().
class RunController {
public:
  virtual ~RunController();
  virtual double interval() const { return 0.5; }
  virtual void tick(Pipeline &pipeline) = 0;
  /// What it did and why, for `--stats` (empty: nothing to say).
  virtual std::string report() const { return ""; }
};

/// Where the batches of a pipeline's last batch step are made, when not in
/// the buffer pool's memory: a `sluice serve` worker on its trainer's host
/// hands in the trainer's shared-memory slots (remote/lib/Slots.h), so the
/// batch is made where the trainer reads it instead of being copied there.
/// Only full batches of a fixed row layout ask (a short last batch, a
/// padded_batch and pinned batches do not); the caller checks where each
/// output's buffers really are.
class OutputBuffers {
public:
  virtual ~OutputBuffers();
  /// Buffers for the step's batch number `batch` of its pass (0 for the
  /// first batch it makes after the pipeline starts or resumes): one per
  /// field, of `elems[f]` and `shapes[f]` (the batch dimension included),
  /// or an empty vector for ordinary ones. Charged and refused as
  /// Tensor::empty is.
  virtual std::vector<Tensor>
  allocate(uint64_t batch, const std::vector<ElemType> &elems,
           const std::vector<std::vector<int64_t>> &shapes) = 0;
};

/// How to run a Plan. Unset values fall back to the Plan.
struct RunOptions {
  /// Overrides Plan::epochs (`--epochs`).
  std::optional<int64_t> epochs;
  /// The first epoch to run (0-based; epochs before it are skipped without
  /// reading anything): the pipeline runs epochs [firstEpoch, epochs). Each
  /// epoch's random choices depend only on (seed, epoch, ...), so epoch n
  /// comes out the same whether the run started at 0 or at n
  /// (sluice.torch.Dataset.set_epoch).
  int64_t firstEpoch = 0;
  /// Continue a run from a state saved by Pipeline::state() (overrides
  /// firstEpoch). Pipeline::create() refuses a state of another pipeline or
  /// one it cannot continue exactly (a replay state at another rank or world
  /// size).
  std::optional<PipelineState> resume;
  /// This process's share of the data (torchrun's RANK / WORLD_SIZE): with
  /// worldSize > 1 the source is read by position, and rank r reads the
  /// positions p of each epoch's global order with p % worldSize == r
  /// (counted from where the epoch's share starts), so the ranks read
  /// disjoint shares that together cover every record once.
  int64_t rank = 0;
  int64_t worldSize = 1;
  /// Worker threads (`--threads`); 0 = the plan's budget.cores, or all
  /// cores of the host. Never more than budget.cores when that is set, nor
  /// more than the host's cores.
  int64_t threads = 0;
  /// Overrides Plan::memoryBytes (0 = keep the plan's).
  int64_t memoryBytes = 0;
  /// Per-step overrides keyed by step name; "default" applies to all steps
  /// (`--schedule FILE`, or the autotuner's trial schedules). A step the
  /// compiler fused ("a+b") takes the entries of its spec steps a, b in
  /// order, then its own; cache "none" means no cache. Each entry overrides
  /// the knobs it sets on the plan's (PlanStep) values.
  Schedule schedule;
  /// Binds per-record steps to compiled code (the JIT, or the kernels linked
  /// into a compiled executable) before the runtime's own kernels are tried:
  /// return a closure for the steps it compiled, or nullopt to let
  /// bindElementOp() handle the step. Steps of kind Element with an op the
  /// registry does not know (a fused kernel) must be bound here.
  std::function<std::optional<Expected<ElementFn>>(const PlanStep &)> binder;
  /// Binds `filter` steps to compiled column tests for record runs (an
  /// inline filter testing a run of rows held as columns, Stage::nextRun):
  /// a RowsFilterFn for the filters it compiled, nullopt to let
  /// bindRowsFilter() (the interpreter's CompiledExpr::testRows) test them.
  std::function<std::optional<Expected<RowsFilterFn>>(const PlanStep &)>
      rowsBinder;
  /// Batch row placement: the parallel map stage right before a `batch` of
  /// fixed-shape numeric records copies each record into its row of the
  /// batch buffer on the worker that produced it, so assembling a batch
  /// costs the consumer's thread almost nothing. It applies when the batch
  /// buffers are recycled memory (the tensor buffer pool is on, or they are
  /// under 1 MiB). false (or SLUICE_NO_BATCH_PLACEMENT=1 in the environment)
  /// leaves all copying to the batch stage. The outputs are the same bytes
  /// either way; the batch stage's `rowsInPlace` counter shows its effect.
  bool batchRowPlacement = true;
  /// Direct output (with batch row placement): the worker claims the
  /// record's batch row before running its steps, and the fused image step
  /// (decode + crop + epilogue) writes its result straight into that row:
  /// no per-image tensor is allocated or copied. false (or
  /// SLUICE_NO_DIRECT_OUTPUT=1) makes the step allocate its output and the
  /// worker copy it into the row. Same bytes either way.
  bool directOutput = true;
  /// Batched hand-offs between the threads of a parallel map stage: its
  /// consumer waits for a run of finished records (a quarter of the
  /// reorder window, at most 16) instead of being woken for each one, and
  /// wakes its feeder for as many free slots, so that large records
  /// (images) cost a few thread wake-ups per run instead of about three
  /// per record. false (or SLUICE_NO_BATCHED_HANDOFF=1) hands records over
  /// one at a time. Same records, order and counts either way.
  bool batchedHandoff = true;
  /// Arena slicing: the pipeline's oneTBB arena (one slot per thread) runs
  /// its tasks in the order they were enqueued, and a parallel step's
  /// worker that has run for a slice (1 ms) while another task waits for a
  /// slot re-enqueues itself behind it and gives its slot back, instead of
  /// keeping it as long as its step has input: a cheap step after a costly
  /// one (crop and flip after a cached map) runs beside it instead of
  /// waiting until the costly step's workers run dry, so the cores do not
  /// idle in turns. false (or SLUICE_NO_ARENA_SLICING=1) keeps each worker
  /// on its slot until its step has no input. Same records, order and
  /// counts either way. The stats count the slots given per step
  /// (`slots_given` in --stats-json).
  bool arenaSlicing = true;
  /// Arena slicing: how long a worker keeps its slot while another task
  /// waits for one, in microseconds.
  int64_t arenaSliceMicros = 1000;
  /// Parallel parsing: a csv/tsv source read without `interleave` cuts
  /// each file into blocks of whole records (about 1 MiB) and parses them
  /// on the worker threads, several at a time, while records, errors and
  /// their locations come out in file order exactly as from one thread.
  /// The blocks held ahead count against budget.memory. false (or
  /// SLUICE_NO_PARALLEL_PARSE=1 in the environment) parses them one at a
  /// time on the consumer's thread. Needs more than one thread.
  bool parallelParse = true;
  /// File read-ahead: a source with one file per record (image_folder,
  /// files) over local files reads the next files, two per thread, on the
  /// worker threads while the stage hands on the current one, instead of
  /// opening and copying every file on the source's one thread (at 16
  /// threads that thread capped the pipeline). Records, order, numbering,
  /// errors and counts are those of reading one file after another; a read
  /// ahead that budget.memory refused is read again alone. The files held
  /// ahead count in "<source> read-ahead". false (or
  /// SLUICE_NO_FILE_READ_AHEAD=1) reads on the source's thread. Needs more
  /// than one thread.
  bool fileReadAhead = true;
  /// Shuffle by position: a `shuffle` step right after a source of one
  /// record per file (image_folder, files) is not run as a buffer; the
  /// source reads the files in the order the step would emit them (its
  /// draws depend only on how many records its buffer holds, so the order
  /// is replayed over positions at the start of each pass). Nothing waits
  /// for the buffer to fill and no encoded file is held for it; records,
  /// order, numbering and counts are the buffer's. Not with `on_error:
  /// skip` on the source or a cache on it. false (or
  /// SLUICE_NO_POSITIONAL_SHUFFLE=1) runs the buffer.
  bool positionalShuffle = true;
  /// Record runs: a `batch` of fixed-shape numeric records fed by a csv/tsv
  /// source without text columns (and no `interleave`), through inline
  /// `filter`s only, takes runs of rows as columns: the filters test a run
  /// at once and the batch copies each run of kept rows with one memcpy
  /// per field, with no record built per row. false (or
  /// SLUICE_NO_RECORD_RUNS=1) builds every record. Same bytes, errors and
  /// counts either way; the batch stage's `rowsFromRuns` counter shows it.
  bool recordRuns = true;
  /// Pinned batches: the last batch step (one whose rows have a fixed
  /// layout, and not taken apart again by an unbatch) allocates its buffers
  /// page-locked through the process's HostRegistrar (Pinned.h), so a
  /// device copy reads them at the bus's speed with no copy into pinned
  /// memory first (sluice.Pipeline's pin_memory=True sets it).
  /// Pipeline::create fails when no registrar is installed.
  /// SLUICE_NO_PINNED_BATCHES=1 turns it off. Same bytes either way.
  bool pinBatches = false;
  /// The last batch step's buffers (OutputBuffers; ignored with
  /// pinBatches). Same bytes either way.
  std::shared_ptr<OutputBuffers> outputBuffers;
  /// Changes knobs while the pipeline runs (see RunController). With one,
  /// every parallel step's reorder window is sized for all `threads`, so
  /// its parallelism can rise in flight.
  std::shared_ptr<RunController> controller;
  /// Per-stage timing and byte counters (the `cpu s`, `wall s`, bytes
  /// columns of --stats, which the autotuner reads): two clock reads and a
  /// walk over the record's fields per step and record. Default: on, unless
  /// SLUICE_NO_STAGE_TIMING=1 is in the environment; Off leaves those
  /// columns at 0 for every step (record counts, the accounting and the
  /// source's bytes read from its files stay). The autotuner's
  /// probes and `schedule: auto` runs use On. bench/counter_overhead.py
  /// measures what they cost.
  enum class StageTiming { Default, On, Off };
  StageTiming stageTiming = StageTiming::Default;

  // runPipeline() only.
  /// Stop after this many outputs (0: run to the end), e.g. to save a state
  /// and resume later (`--stop-after N`).
  int64_t stopAfter = 0;
  /// Write the state (PipelineState::toJson) here when the run ends,
  /// finished or not (`--save-state FILE`).
  std::string saveStatePath;
  /// "null" (count only) or "npy:DIR".
  std::string sink = "null";
  /// Clear a non-empty npy output folder first (`--overwrite`); without
  /// it such a folder is refused (Sink.h).
  bool overwrite = false;
  /// Catch SIGINT/SIGTERM while running: cancel() the output being built
  /// (a batch being filled stops after the records under way), keep the
  /// complete outputs, write index.json saying the run was interrupted,
  /// print the accounting and the reason, and return 130/143. A second
  /// signal ends the process at once (no index.json: incomplete). The
  /// previous handlers are restored when runPipeline() returns.
  bool handleSignals = false;
  /// Print the per-stage table after the run (`--stats`).
  bool stats = false;
  /// Also write the counters as JSON to this file (`--stats-json FILE`).
  std::string statsJsonPath;
  /// Serve the counters in Prometheus' text format at
  /// http://127.0.0.1:PORT/metrics while the run lasts (`--metrics-port`;
  /// 0: do not serve). Metrics.h lists them.
  int metricsPort = 0;
  /// Address the metrics server listens on (`--metrics-address`).
  std::string metricsAddress = "127.0.0.1";
  /// Write the same text to this file every metricsInterval seconds and at
  /// the end of the run (`--metrics-file`; replaced atomically, for
  /// node_exporter's textfile collector).
  std::string metricsFile;
  double metricsInterval = 5.0;
  enum class Progress { Auto, Bar, Lines, Off };
  /// Auto: a redrawn bar when file descriptor 2 is a terminal, else a plain
  /// line every few seconds. Off with `--quiet`.
  Progress progress = Progress::Auto;
  /// Seconds between plain progress lines (Lines mode).
  double progressInterval = 5.0;
  /// Where disk caches put their files when the step gives no `path`
  /// (empty: $TMPDIR, else /tmp).
  std::string tempDir;
  /// The plan's source, already made by Source::create with the plan's
  /// source op, params, output type and base directory (null: the pipeline
  /// makes its own). Its listing (an image folder's walk, an s3:// prefix's
  /// ListObjectsV2 pages, a glob) is then done once for the pipelines that
  /// share it: `schedule: auto` makes it for the schedule cache's key and
  /// hands it to its probes and to the run. Sources are read-only once
  /// made, but for a remote source's requests in flight, which each
  /// pipeline sets from its schedule as it starts (under the source's lock;
  /// readers already open keep theirs); its fetches ahead are keyed by
  /// shard, so pipelines that share it get the same bytes.
  std::shared_ptr<const Source> source;
  /// Explicit positions: every epoch reads exactly these global positions
  /// of the epoch's order (the sorted order, or the `shuffle: true`
  /// permutation), in this order, each record numbered by its position as
  /// positional reading numbers it (so its random choices are those of a
  /// run that reads it anywhere else), then ends; rank, world size and a
  /// resume do not choose positions then. For `sluice serve`, whose worker
  /// works out which positions a chunk of outputs holds (a shuffle step's
  /// order replayed from the seed, a filter's survivors) and makes just
  /// those (remote/lib/Replay.cpp). A source that is read front to back
  /// (csv, tfrecord, ...) is loaded into memory for it, as for
  /// `shuffle: true`.
  std::shared_ptr<const std::vector<int64_t>> positions;

  /// These options with the environment's off switches applied
  /// (SLUICE_NO_BATCH_PLACEMENT, SLUICE_NO_DIRECT_OUTPUT,
  /// SLUICE_NO_BATCHED_HANDOFF, SLUICE_NO_ARENA_SLICING,
  /// SLUICE_NO_PARALLEL_PARSE, SLUICE_NO_FILE_READ_AHEAD,
  /// SLUICE_NO_POSITIONAL_SHUFFLE, SLUICE_NO_RECORD_RUNS): what a run given
  /// them does. The run, the tuner's profile and the schedule cache's key
  /// all ask this one function.
  RunOptions inEffect() const;
};

/// A rank and world size chosen by the caller (Python's
/// Pipeline(rank=, world_size=), `--rank` / `--world-size`), each unset when
/// not given, and how messages name them.
struct RankArgs {
  std::optional<int64_t> rank, worldSize;
  std::string rankName = "rank", worldSizeName = "world_size";
  /// The process group the caller runs in, when it has one (Python's
  /// torch.distributed once init_process_group was called): below the
  /// spec, above the environment, since it is what the job really runs
  /// and a launcher other than torchrun may not set RANK / WORLD_SIZE.
  std::optional<int64_t> groupRank, groupWorldSize;
  std::string groupName = "torch.distributed";
};

/// Sets opts.rank and opts.worldSize, each value on its own, from the first
/// of: `args`; the plan's (the spec's `distributed: {rank, world_size}`);
/// the caller's process group (args.groupRank / groupWorldSize); the
/// environment torchrun sets (RANK, WORLD_SIZE), or for the rank a
/// Kubernetes Indexed Job's JOB_COMPLETION_INDEX; else rank 0 of 1. The
/// spec outranks the environment because it is written for this pipeline,
/// while the environment is set for every program of the job:
/// `distributed: {rank: 0, world_size: 1}` makes every rank read all the
/// data (an evaluation set), and `world_size: W` alone pairs with the
/// index an Indexed Job sets. Errors name where each value came from: an
/// environment variable that is not an integer (>= 0 for a rank, >= 1 for a
/// world size), or a rank not below the world size.
Status resolveRanks(const Plan &plan, const RankArgs &args, RunOptions &opts);

/// One output of a pipeline: the fields of a record or of a batch. The
/// tensors share their buffers with the pipeline (no copy) and stay valid
/// for as long as the Batch (or a copy of a Tensor) is alive.
class Batch {
public:
  const RecordType &type() const { return *type_; }
  size_t numFields() const { return fields_.size(); }
  const Tensor &field(size_t i) const { return fields_[i]; }
  /// The field called `name`, or null.
  const Tensor *field(std::string_view name) const;
  const std::vector<Tensor> &fields() const { return fields_; }
  /// Leading dimension of the first field (the batch size), or 1 for a
  /// record of scalars.
  int64_t rows() const;
  /// 0-based position of this output in the run.
  int64_t sequence() const { return sequence_; }
  /// 0-based epoch the output belongs to.
  int64_t epoch() const { return epoch_; }
  /// The index that keys the output's random choices: for a record (no
  /// batch) of a pipeline read by position, its global position in the
  /// epoch's order (which `sluice serve` uses to learn which positions a
  /// filter kept).
  uint64_t recordIndex() const { return index_; }

private:
  friend class Pipeline;
  const RecordType *type_ = nullptr;
  std::vector<Tensor> fields_;
  int64_t sequence_ = 0;
  int64_t epoch_ = 0;
  uint64_t index_ = 0;
};

class Engine;

/// A running pipeline.
class Pipeline {
public:
  /// Builds the stage graph: opens the source (lists and checks its files),
  /// binds every step to its kernels, and refuses a plan whose buffers
  /// cannot fit in budget.memory. Nothing is read yet.
  static Expected<std::unique_ptr<Pipeline>>
  create(const Plan &plan, const RunOptions &opts = {});
  /// What create() would say about `plan` under `opts` up to and including
  /// its check that the buffers fit budget.memory (the same Status, the same
  /// advice), without making the pipeline: for a tuner that must choose a
  /// schedule create() accepts. Lists the source like create().
  static Status checkFits(const Plan &plan, const RunOptions &opts);
  ~Pipeline();
  Pipeline(const Pipeline &) = delete;
  Pipeline &operator=(const Pipeline &) = delete;

  /// The next output, or false after the last epoch. An error is a data
  /// error (a bad record under `on_error: fail`, with its location) or a
  /// budget error; the pipeline is stopped after it.
  ///
  /// `out` is emptied first, before the next output is made (also when
  /// there is none): the budget counts the last output ("output") until
  /// the caller asks for the next, and a caller that passes the same Batch
  /// again (the usual loop) no longer holds it, so its buffers go back to
  /// the pool (counted as idle) or to the system while the next one is
  /// made. Without this the previous batch stayed resident, uncounted, for
  /// the whole making of the next (a 77 MB batch on
  /// bench/specs/photos_auto_bench.yaml, where `memory peak` was 0.80-0.91
  /// of peak RSS - baseline in 3 runs of 10). A caller that keeps a copy
  /// (another Batch or its Tensors) holds that memory itself, outside the
  /// budget. SLUICE_KEEP_LAST_OUTPUT=1 keeps `out` until the next output
  /// replaces it, as before (for comparing the accounting).
  Expected<bool> next(Batch &out);
  /// Stops background work now (before the end is fine); counters are final
  /// afterwards. Called by the destructor. Call it from the thread that
  /// calls next(), not concurrently with it.
  void stop();
  /// Asks the pipeline to give up, from any thread (a signal watcher while
  /// another thread waits in next()): next() then fails with "the pipeline
  /// was cancelled" after at most the record each worker is busy with, also
  /// in the middle of assembling a batch or filling a shuffle buffer, and
  /// every later next() returns false. Call stop() (on next()'s thread)
  /// afterwards to join the threads. Does not block.
  void cancel();
  /// Whether cancel() was called.
  bool cancelled() const;

  const RecordType &outputType() const;
  const Plan &plan() const;
  /// Epochs this pipeline runs.
  int64_t epochs() const;
  /// Worker threads it uses.
  int64_t threads() const;
  /// Total records over all epochs the source will read, when known.
  std::optional<int64_t> expectedSourceRecords() const;
  /// Total outputs over all epochs, when every step keeps a known count
  /// (no filter, unbatch or bad records), e.g. for a progress bar.
  std::optional<int64_t> expectedOutputs() const;
  /// Outputs of one epoch, when every step keeps a known count (also for a
  /// pipeline that runs forever): `len()` of a torch Dataset.
  std::optional<int64_t> expectedOutputsPerEpoch() const;

  /// Counters now (safe from any thread while next() runs).
  RunStats stats() const;

  /// Changes, while the pipeline runs (from any thread, e.g. a
  /// RunController), the workers of the parallel step `step` (a plan step;
  /// a fused step is found by any of its parts) to `parallelism`, within
  /// 1..threads(). Outputs stay the same bytes: the reorder window keeps
  /// their order whichever worker made them. An error names a step that is
  /// unknown or runs inline (no workers to change).
  Status setParallelism(const std::string &step, int64_t parallelism);
  /// Changes the depth of the prefetch queue after `step` (its `prefetch`
  /// knob) while the pipeline runs, within the depth the pipeline was
  /// created with (the capacity its memory check counted). Returns the
  /// depth applied; an error when `step` has no prefetch queue.
  Expected<int64_t> setPrefetch(const std::string &step, int64_t depth);

  /// Where the run stands after the outputs delivered so far.
  PipelineState state() const;

  /// The budget account for outputs the caller still holds (the Python
  /// module reserves each batch it hands out here and releases it when the
  /// last array over it dies), so held batches count against
  /// budget.memory. Valid as long as the Pipeline.
  MemoryAccount &heldOutputs();

private:
  explicit Pipeline(std::unique_ptr<Engine> engine);
  std::unique_ptr<Engine> engine_;
};

/// `sluice run`: runs `plan` into opts.sink with progress on `err`, then
/// prints the accounting (and the --stats table) to `out`. Returns the exit
/// code: 0 ok, 1 pipeline/data error (printed to `err`, located in the spec
/// or the data), 2 for a sink it cannot or may not write to, 128 + the
/// signal (130 SIGINT, 143 SIGTERM) when interrupted (opts.handleSignals).
int runPipeline(const Plan &plan, const RunOptions &opts, std::ostream &out,
                std::ostream &err);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_PIPELINE_H
