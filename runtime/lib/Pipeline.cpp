//===- Pipeline.cpp - Building the stage graph of a Plan and running it ---===//
//
// The builder walks the plan in stream order: consecutive per-record steps
// are fused into one map stage (parallel on the arena when it contains a
// real element op; select/rename/filter alone run inline), every record op
// becomes its stage, and the schedule's prefetch/cache knobs insert buffers
// after their step. Before anything runs, the static size of every buffer
// is checked against budget.memory.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Pipeline.h"
#include "Engine.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/Switches.h"
#include "sluice/runtime/Pinned.h"
#include "sluice/runtime/StageGroups.h"
#include "sources/Remote.h"
#include "sources/SourceImpl.h"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <sys/stat.h>
#include <thread>

namespace sluice::runtime {

using namespace detail;

const Tensor *Batch::field(std::string_view name) const {
  if (!type_)
    return nullptr;
  int i = type_->indexOf(name);
  if (i < 0 || static_cast<size_t>(i) >= fields_.size())
    return nullptr;
  return &fields_[static_cast<size_t>(i)];
}

int64_t Batch::rows() const {
  if (fields_.empty() || fields_[0].rank() == 0)
    return 1;
  return fields_[0].dim(0);
}

/// The stage graph of one pipeline and the epoch loop around it.
class Engine {
public:
  /// With `checkOnly`, stops after the memory check (Pipeline::checkFits):
  /// the engine returned must not be run.
  static Expected<std::unique_ptr<Engine>>
  create(const Plan &plan, const RunOptions &opts, bool checkOnly = false);
  ~Engine() {
    debugRssMark("pipeline ending");
    stopController();
    stop();
    if (poolLimit_)
      clearBufferPoolLimit(poolLimit_.get());
    debugRssMark("pipeline stopped");
  }

  Expected<bool> next(Item &out, int64_t &epoch);
  /// Stops counting the last output (the caller's from now on).
  void releaseOutput() {
    outputAccount_->release(outputHeld_);
    outputHeld_ = 0;
  }
  void stop();
  void cancel();
  RunStats stats() const;

  Plan plan_;
  RunOptions opts_;
  int64_t threads_ = 1;
  int64_t epochs_ = 1;
  std::optional<int64_t> expectedSourceRecords_; ///< per epoch
  std::optional<int64_t> expectedOutputs_;       ///< per epoch

  Status build();
  Status checkStaticMemory() const;
  /// Refuses a prefetch depth the budget could not hold even if each
  /// buffered record cost only its bookkeeping (the queues and reorder
  /// windows allocate their slots up front): `prefetch: 1000000000` is an
  /// error at the step instead of gigabytes of slots, then an abort.
  Status checkBufferCounts(const RunOptions &opts) const;
  /// The error for a budget a record already made took past its limit
  /// (MemoryBudget::overrun), located at the step whose buffer did it.
  Status overrunError() const;
  StageCounters *counters(const std::string &name, const std::string &op,
                          const std::string &kind, const std::string &where);
  Status applySchedule();
  /// Refuses a cache after a random stage (applySchedule's last check).
  Status checkCachePlacement() const;
  /// Refuses a resume state whose counts this plan cannot have produced.
  Status checkResumeState() const;

  std::shared_ptr<const Source> source_;
  /// The process's remote-request counters when the source was made
  /// (sources over s3:// or http(s):// only).
  std::optional<RemoteTotals> remoteBase_;
  ObjectCacheTotals cacheBase_;
  std::unique_ptr<MemoryBudget> memory_;
  /// Shared::replayedSourceRecords.
  std::atomic<int64_t> replayedSourceRecords_{0};
  /// Destroyed after the stages (declared before root_) and before the
  /// source: waits for the tasks still queued (TaskHandoff.h).
  std::unique_ptr<TaskArena> arena_;
  Shared shared_;
  std::vector<std::unique_ptr<StageCounters>> counters_;
  std::vector<StaticNeed> extraNeeds_;
  std::unique_ptr<Stage> root_;
  /// The buffer pool's idle buffers, reserved in this budget while the
  /// pipeline lives (BufferPool.h).
  std::unique_ptr<AccountAllocationLimit> poolLimit_;
  /// The idle page-locked batch buffers' reservation (RunOptions::pinBatches;
  /// the pool itself is shared_.pinned).
  std::unique_ptr<AccountAllocationLimit> pinnedLimit_;
  /// The objects a remote source fetched ahead, reserved until a reader
  /// takes them (SourceBase::setPrefetchLimit).
  std::unique_ptr<AccountAllocationLimit> aheadLimit_;
  /// The remote client's kept response buffers, counted while this
  /// pipeline reads remote objects (detail::setRemoteBodyLimit).
  std::unique_ptr<AccountAllocationLimit> bodyLimit_;
  /// The last output, counted until the caller asks for the next one.
  MemoryAccount *outputAccount_ = nullptr;
  int64_t outputHeld_ = 0;

  int64_t epoch_ = 0;
  /// Outputs of epoch_ to drop before delivering any (a replay resume).
  int64_t skip_ = 0;
  /// Outputs and rows of epoch_ delivered (or dropped by skip_), and the
  /// global position the epoch's share started at (PipelineState).
  int64_t outputsInEpoch_ = 0, rowsInEpoch_ = 0, epochStart_ = 0;
  /// Whether positions describe where a run stands (see PipelineState), and
  /// whether outputs are batches (rows = their first dim) or records.
  bool positionalExact_ = false;
  bool batched_ = false;
  Status setupPositions();
  /// Decides shuffle by position (Shared::Positional::order).
  void foldShuffle(int64_t cycle, int64_t block);
  int64_t outputRows(const Record &r) const;
  std::atomic<int64_t> epochsDone_{0};
  bool started_ = false;
  bool finished_ = false;
  std::atomic<int64_t> outputs_{0}, outputBytes_{0};
  std::atomic<int64_t> startNs_{0};
  /// CPU time of the threads in next() (RunStats::consumerCpuSeconds).
  std::atomic<int64_t> consumerCpuNs_{0};
  std::atomic<int64_t> endNs_{0};
  /// The caller's waits and the time between its calls (the stall meter).
  ConsumerMeter consumer_;
  mutable std::mutex stopMu_;
  MemoryAccount *held_ = nullptr;

  /// RunOptions::controller's thread, from the first next() to stop().
  std::thread controllerThread_;
  std::mutex controllerMu_;
  std::condition_variable controllerCv_;
  bool controllerStop_ = false;
  void stopController() {
    {
      std::lock_guard<std::mutex> lock(controllerMu_);
      controllerStop_ = true;
    }
    controllerCv_.notify_all();
    if (controllerThread_.joinable())
      controllerThread_.join();
  }
};

StageCounters *Engine::counters(const std::string &name, const std::string &op,
                                const std::string &kind,
                                const std::string &where) {
  counters_.push_back(std::make_unique<StageCounters>(name, op, kind, where));
  return counters_.back().get();
}

Status Engine::applySchedule() {
  auto apply = [&](PlanStep &s, const StepSchedule &o) {
    pinKnobs(s.schedule, o);
  };
  // A cache on a step inside a fused stage goes right after that step: the
  // stage is split there first (else the cache would follow the stage's
  // random steps and replay one epoch's draws). Plan.h, cacheSplitPoint.
  for (const auto &[name, o] : opts_.schedule)
    if (name != "default" && o.cache && *o.cache != "none" && !o.cache->empty())
      splitFusedAfter(plan_, name);
  // A stage fused some other way (decode_image+random_resized_crop) keeps
  // no steps to split: a cache on a step inside it before a random step
  // would replay the first epoch's draws, so it is refused.
  for (const auto &[name, o] : opts_.schedule) {
    if (name == "default" || !o.cache || *o.cache == "none" || o.cache->empty())
      continue;
    std::string step = stepNamesIn(name).back();
    for (const PlanStep &st : plan_.steps) {
      std::vector<std::string> parts = stepNamesIn(st.name);
      auto at = std::find(parts.begin(), parts.end(), step);
      if (parts.size() < 2 || at == parts.end() || at + 1 == parts.end())
        continue;
      for (auto later = at + 1; later != parts.end(); ++later) {
        const OpDef *def = Registry::instance().find(opOfStepName(*later));
        if (def && def->stochastic)
          return Status::error(
              plan_.where(st) + ": cannot cache after '" + step +
              "': the compiler fused it with the random step '" + *later +
              "' into '" + st.name +
              "', and a cache after that stage would "
              "replay the first epoch's random draws; to cache there, turn "
              "that fusion off with --disable-pass (`sluice explain "
              "--remarks SPEC` names the pass)");
      }
    }
  }
  // A key that joins steps ("a+b", a stage of a plan split at another cache
  // point) but names no stage of this plan stands for its steps: parallelism
  // on each, prefetch and cache on the last (where they act), as in a
  // schedule file; knobs that name a step directly come first.
  Schedule schedule = opts_.schedule;
  for (const auto &entry : opts_.schedule) {
    const std::string &name = entry.first;
    const StepSchedule &o = entry.second;
    if (name.find('+') == std::string::npos ||
        std::any_of(plan_.steps.begin(), plan_.steps.end(),
                    [&](const PlanStep &st) { return st.name == name; }))
      continue;
    std::vector<std::string> steps = stepNamesIn(name);
    for (const std::string &step : steps) {
      StepSchedule &t = schedule[step];
      if (!t.parallelism)
        t.parallelism = o.parallelism;
      if (&step == &steps.back()) {
        if (!t.prefetch)
          t.prefetch = o.prefetch;
        if (!t.cache)
          t.cache = o.cache;
      }
    }
  }
  auto def = schedule.find("default");
  for (PlanStep *s : [&] {
         std::vector<PlanStep *> all{&plan_.source};
         for (PlanStep &st : plan_.steps)
           all.push_back(&st);
         return all;
       }()) {
    if (def != schedule.end()) {
      // The source's parallelism is its requests in flight (remote
      // objects): a default meant for the workers does not set it.
      StepSchedule d = def->second;
      if (s == &plan_.source)
        d.parallelism.reset();
      apply(*s, d);
    }
    // A step the compiler fused from several ("a+b") takes the knobs of
    // its spec steps in order (a schedule file names spec steps), then its
    // own.
    if (s->name.find('+') != std::string::npos)
      for (const std::string &step : stepNamesIn(s->name)) {
        auto part = schedule.find(step);
        if (part != schedule.end())
          apply(*s, part->second);
      }
    auto it = schedule.find(s->name);
    if (it != schedule.end())
      apply(*s, it->second);
  }
  return checkCachePlacement();
}

Status Engine::checkCachePlacement() const {
  // The rule the autotuner keeps and the spec checker enforces with lines
  // (dsl, checkCachePlacement): nothing is cached after a random step, or
  // every later epoch replays the first epoch's draws and order. Checked
  // again here on the plan as it will run, for the caches that come another
  // way (a Python schedule dict, an embedder's RunOptions).
  auto random = [](const PlanStep &st) {
    auto randomOp = [](const std::string &op, const Value &params) {
      const OpDef *def = Registry::instance().find(op);
      if (!def || !def->stochastic)
        return false;
      return !(def->traits.sameEachEpoch && def->traits.sameEachEpoch(params));
    };
    if (randomOp(st.op, st.params))
      return true;
    for (const PlanStep &f : st.fused)
      if (randomOp(f.op, f.params))
        return true;
    // Stages fused another way keep only their steps' names ("a+b"), all
    // of them per-record steps, whose draws differ in every epoch.
    for (const std::string &step : stepNamesIn(st.name)) {
      const OpDef *def = Registry::instance().find(opOfStepName(step));
      if (def && def->stochastic && def->traits.perRecord)
        return true;
    }
    return false;
  };
  auto materializes = [](const PlanStep &st) {
    const OpDef *def = Registry::instance().find(st.op);
    return def && def->traits.materializes;
  };
  auto caches = [&](const PlanStep &st) {
    return st.schedule.cache.has_value() || materializes(st);
  };
  // A source with `shuffle: true` reads in a new order every epoch: no
  // cache may follow it.
  const Value &sourceShuffle = plan_.source.params["shuffle"];
  if (sourceShuffle.isBool() && sourceShuffle.asBool()) {
    const PlanStep *cached = caches(plan_.source) ? &plan_.source : nullptr;
    for (const PlanStep &st : plan_.steps)
      if (!cached && caches(st))
        cached = &st;
    if (!cached)
      return Status::ok();
    return Status::error(
        plan_.where(*cached) + ": cannot cache after '" + cached->name +
        "': the source '" + plan_.source.name +
        "' reads in a new random order every epoch (`shuffle: true`), so a "
        "cache would replay the first epoch's order in every later epoch; "
        "drop the source's `shuffle: true` and shuffle after the cache");
  }
  const PlanStep *firstRandom = nullptr;
  const PlanStep *lastFixed = &plan_.source;
  for (const PlanStep &st : plan_.steps) {
    if (!firstRandom && random(st))
      firstRandom = &st;
    if (!firstRandom)
      lastFixed = &st;
    if (firstRandom && caches(st))
      return Status::error(
          plan_.where(st) + ": cannot cache " +
          (materializes(st) ? std::string("here") : "after '" + st.name + "'") +
          ": '" + firstRandom->name + "' (" + plan_.where(*firstRandom) +
          ") is random, so a cache after it would record the first epoch's "
          "random draws and order and replay them in every later epoch; "
          "cache after '" +
          lastFixed->name +
          "', the last step before the first random one, or leave the "
          "choice to `schedule: auto`");
  }
  return Status::ok();
}

namespace {

std::string defaultTempDir() {
  const char *t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

} // namespace

RunOptions RunOptions::inEffect() const {
  RunOptions o = *this;
  o.batchRowPlacement =
      batchRowPlacement && !switchedOff("SLUICE_NO_BATCH_PLACEMENT");
  o.directOutput = directOutput && !switchedOff("SLUICE_NO_DIRECT_OUTPUT");
  o.batchedHandoff =
      batchedHandoff && !switchedOff("SLUICE_NO_BATCHED_HANDOFF");
  o.arenaSlicing = arenaSlicing && !switchedOff("SLUICE_NO_ARENA_SLICING");
  o.parallelParse = parallelParse && !switchedOff("SLUICE_NO_PARALLEL_PARSE");
  o.fileReadAhead = fileReadAhead && !switchedOff("SLUICE_NO_FILE_READ_AHEAD");
  o.positionalShuffle =
      positionalShuffle && !switchedOff("SLUICE_NO_POSITIONAL_SHUFFLE");
  o.recordRuns = recordRuns && !switchedOff("SLUICE_NO_RECORD_RUNS");
  return o;
}

Expected<std::unique_ptr<Engine>>
Engine::create(const Plan &plan, const RunOptions &opts, bool checkOnly) {
  auto e = std::make_unique<Engine>();
  e->plan_ = plan;
  // The environment's off switches are read once, here; the engine asks
  // opts_ for what is in effect.
  e->opts_ = opts.inEffect();
  if (Status s = e->applySchedule(); !s)
    return s;
  if (Status s = e->checkBufferCounts(opts); !s)
    return s;
  // The cores this process may use (affinity mask, cgroup quota), not
  // every CPU of the machine.
  int64_t hw = hostCores();
  int64_t cores = plan.cores > 0 ? plan.cores : hw;
  // More workers than cores only time-slice (and oneTBB would refuse them,
  // see below).
  e->threads_ =
      std::min(opts.threads > 0 ? std::min(opts.threads, cores) : cores, hw);
  e->epochs_ = opts.epochs ? *opts.epochs : plan.epochs;
  if (opts.firstEpoch < 0)
    return Status::error("the first epoch must be >= 0, got " +
                         std::to_string(opts.firstEpoch));
  e->epoch_ = opts.firstEpoch;
  Status ps = e->setupPositions();
  if (!ps)
    return ps;
  // Without `budget: {memory: ...}` the budget is a share of the host's (or
  // the cgroup's) memory, never unlimited (Allocation.h).
  int64_t limit = opts.memoryBytes > 0   ? opts.memoryBytes
                  : plan.memoryBytes > 0 ? plan.memoryBytes
                                         : defaultMemoryBudget();
  e->memory_ = std::make_unique<MemoryBudget>(limit);
  // oneTBB's default worker pool is one thread short of the host's cores
  // (it expects the main thread to join), but the stages only enqueue tasks
  // and never join the arena: allow one worker per core, once per process
  // (the active limit is the minimum over all live controls, so per-pipeline
  // controls would cap each other). Each pipeline's arena then caps its own
  // concurrency at `threads`. Never destroyed: oneTBB may be torn down
  // before static destructors run.
  static oneapi::tbb::global_control *control = new oneapi::tbb::global_control(
      oneapi::tbb::global_control::max_allowed_parallelism,
      static_cast<size_t>(hw + 1));
  (void)control;
  // Turns (TaskHandoff.h): the arena runs its tasks in order and parallel
  // steps' workers give their slot to a waiting task after a slice.
  e->arena_ = std::make_unique<TaskArena>(static_cast<int>(e->threads_), 0,
                                          e->opts_.arenaSlicing);
  // Building allocates the stages' rings and windows: sizes that passed
  // the checks but that no allocator can give are the run's error, not an
  // abort.
  Status s;
  try {
    s = e->build();
  } catch (const std::bad_alloc &) {
    s = Status::error(
        "building the pipeline's buffers failed (std::bad_alloc): "
        "lower the schedule's prefetch and parallelism or the "
        "steps' sizes to what budget.memory can hold");
  } catch (const std::length_error &) {
    s = Status::error("a buffer of the pipeline is too large to allocate: "
                      "lower the schedule's prefetch and parallelism or the "
                      "steps' sizes to what budget.memory can hold");
  }
  if (!s)
    return s;
  s = e->checkResumeState();
  if (!s)
    return s;
  s = e->checkStaticMemory();
  if (!s)
    return s;
  if (checkOnly)
    return e;
  noteProcessBaseline();
  e->outputAccount_ = e->memory_->account("output");
  e->poolLimit_ = std::make_unique<AccountAllocationLimit>(
      e->memory_->account("buffer pool (idle)"));
  setBufferPoolLimit(e->poolLimit_.get());
  // Objects a remote per-file source fetches ahead are reserved from when
  // they are requested until a reader takes them (Source::setPrefetchLimit).
  if (auto *src = dynamic_cast<const SourceBase *>(e->source_.get());
      src && src->prefetchDepth() > 0) {
    e->aheadLimit_ = std::make_unique<AccountAllocationLimit>(
        e->memory_->account(e->plan_.source.name + " objects ahead"));
    src->setPrefetchLimit(e->aheadLimit_.get());
  }
  // The remote client's kept response buffers, while this pipeline reads
  // remote objects (with or without fetches ahead).
  if (auto *src = dynamic_cast<const SourceBase *>(e->source_.get());
      src && src->remote()) {
    e->bodyLimit_ = std::make_unique<AccountAllocationLimit>(
        e->memory_->account("remote bodies (idle)"));
    detail::setRemoteBodyLimit(e->bodyLimit_.get());
  }
  // What earlier pipelines of this process left free in the heap (the
  // probes of `schedule: auto`), which this one refills (Memory.h).
  e->memory_->carryFreeHeap(e->memory_->account("heap left free"));
  debugRssMark("pipeline created");
  return e;
}

Status Engine::build() {
  const PlanStep &src = plan_.source;
  if (opts_.source && opts_.source->kind() == src.op &&
      opts_.source->recordType() == src.outputType) {
    source_ = opts_.source; // listed once by the caller
  } else {
    Expected<std::unique_ptr<Source>> made =
        Source::create(src.op, src.params, src.outputType, plan_.baseDir);
    if (!made)
      return made.status().withContext(plan_.where(src) + ": source '" +
                                       src.name + "': ");
    source_ = made.take();
  }
  // A schedule's parallelism on the source is the number of requests a
  // source over remote objects keeps in flight (the tuner's Little's-law
  // choice); the spec's remote.concurrency overrides it.
  source_->setRequestsInFlight(
      std::max<int64_t>(0, src.schedule.parallelism.value_or(0)));
  remoteBase_ = remoteTotals();
  cacheBase_ = objectCacheTotals();
  resetRemotePeak();
  shared_.plan = &plan_;
  shared_.source = source_.get();
  shared_.memory = memory_.get();
  // Messages name the budget where it was set: a flag overrides the spec.
  if (opts_.memoryBytes > 0)
    shared_.budgetName = "the memory budget (--memory, memory= in Python)";
  shared_.arena = arena_.get();
  shared_.onError = source_->onError();
  shared_.threads = threads_;
  shared_.tempDir = opts_.tempDir.empty() ? defaultTempDir() : opts_.tempDir;
  // The last batch step makes the outputs, if its rows have a fixed
  // layout (padded_batch builds each batch at its own size); a batch an
  // unbatch takes apart again is not an output. Pinned batches and
  // RunOptions::outputBuffers go to that step.
  auto outputBatchStep = [&] {
    std::string name;
    for (const PlanStep &st : plan_.steps) {
      const OpTraits *t = opTraits(st.op);
      if (!t)
        continue;
      if (t->count == Cardinality::Groups && t->fixedRows)
        name = st.name;
      else if (t->count == Cardinality::Groups || t->splitsRecords)
        name.clear();
    }
    return name;
  };
  if (opts_.outputBuffers && !opts_.pinBatches) {
    shared_.outputStep = outputBatchStep();
    shared_.outputBuffers = opts_.outputBuffers;
  }
  if (opts_.pinBatches && !switchedOff("SLUICE_NO_PINNED_BATCHES")) {
    std::shared_ptr<HostRegistrar> registrar = hostRegistrar();
    if (!registrar)
      return Status::error(
          "pinned batches asked for (pin_memory), but no host memory "
          "registrar is installed (sluice.torch installs one over the CUDA "
          "runtime when torch sees a CUDA device)");
    shared_.pinnedStep = outputBatchStep();
    pinnedLimit_ = std::make_unique<AccountAllocationLimit>(
        memory_->account("pinned batches (idle)"));
    shared_.pinned =
        std::make_shared<PinnedPool>(std::move(registrar), pinnedLimit_.get());
  }
  shared_.batchRowPlacement = opts_.batchRowPlacement;
  shared_.directOutput = opts_.directOutput;
  shared_.batchedHandoff = opts_.batchedHandoff;
  shared_.arenaSliceNs =
      arena_->turns() ? std::max<int64_t>(1, opts_.arenaSliceMicros) * 1000 : 0;
  shared_.parallelParse = opts_.parallelParse;
  shared_.fileReadAhead = opts_.fileReadAhead;
  {
    // A cache (or a step that materializes) serves the epochs after the
    // first without the source: nothing is named ahead for them.
    auto caches = [](const PlanStep &st) {
      const OpTraits *t = opTraits(st.op);
      return st.schedule.cache.has_value() || (t && t->materializes);
    };
    bool cached = caches(plan_.source);
    for (const PlanStep &st : plan_.steps)
      cached = cached || caches(st);
    shared_.sourceEpochs =
        cached || switchedOff("SLUICE_NO_NEXT_PASS_AHEAD") ? 0 : epochs_;
    for (const PlanStep &st : plan_.steps)
      if (const OpTraits *t = opTraits(st.op); t && t->rerunsSource)
        shared_.sourceRepeats = true;
  }
  shared_.timing = opts_.stageTiming == RunOptions::StageTiming::On ||
                   (opts_.stageTiming == RunOptions::StageTiming::Default &&
                    !switchedOff("SLUICE_NO_STAGE_TIMING"));
  shared_.bulkPull = !switchedOff("SLUICE_NO_BULK_PULL");
  shared_.coarseBatchCount = switchedOff("SLUICE_COARSE_BATCH_COUNT");
  shared_.recordRuns = opts_.recordRuns;

  // interleave configures how the source reads its shards, so it may only
  // be preceded by per-record steps.
  int64_t cycle = 1, block = 1;
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep &st = plan_.steps[i];
    const OpDef *def = Registry::instance().find(st.op);
    if (!def || !def->traits.configuresSource)
      continue;
    for (size_t j = 0; j < i; ++j)
      if (!isPerRecordStep(plan_.steps[j]))
        return Status::error(
            plan_.where(st) +
            ": interleave reads the source's files round-robin, so it must "
            "come before '" +
            plan_.steps[j].name + "' (" + plan_.where(plan_.steps[j]) +
            "); move it right after the source");
    if (cycle != 1 || block != 1)
      return Status::error(plan_.where(st) +
                           ": only one interleave step is supported");
    cycle = st.params["cycle_length"].isNumber()
                ? st.params["cycle_length"].asInt()
                : 4;
    block = st.params["block_length"].isNumber()
                ? st.params["block_length"].asInt()
                : 1;
    if (cycle < 1 || block < 1)
      return Status::error(plan_.where(st) +
                           ": cycle_length and block_length must be >= 1");
  }

  StageCounters *sc = counters(src.name, src.op, "source", plan_.where(src));
  shared_.sourceCounters = sc;
  shared_.replayedSourceRecords = &replayedSourceRecords_;
  for (const std::string &w : source_->warnings())
    sc->addWarning(plan_.where(src) + ": source '" + src.name + "': " + w);
  foldShuffle(cycle, block);
  if (shared_.positional.on && (cycle != 1 || block != 1))
    return Status::error(plan_.where(src) +
                         ": interleave cannot be combined with ranks, "
                         "`shuffle: true` or a positional resume, which "
                         "read the source by position; remove it");
  std::unique_ptr<Stage> cur = shared_.positional.on
                                   ? makePositionalSourceStage(shared_, sc)
                                   : makeSourceStage(shared_, sc, cycle, block);

  // Records per pass at each point of the stream (for the memory cache
  // check, the progress ETA and the shuffle buffer's static size).
  std::optional<int64_t> count = source_->sizeHint();
  if (shared_.positional.positions) {
    count = static_cast<int64_t>(shared_.positional.positions->size());
  } else if (count && shared_.positional.world > 1) {
    int64_t w = shared_.positional.world, r = shared_.positional.rank;
    count = std::max<int64_t>(0, (*count - r + w - 1) / w);
  }
  expectedSourceRecords_ = count;
  // After a filter (or a take of a source of unknown size) `count` is only
  // an upper bound: still what bounds a shuffle buffer, but not what the
  // memory cache check and the expected outputs need.
  bool countExact = true;

  // The prefetch stage after step `st`: `depth` records on a thread of
  // its own.
  auto addPrefetch = [&](const PlanStep &st, int64_t depth) {
    StageCounters *c =
        counters(st.name + "/prefetch", "prefetch", "buffer", plan_.where(st));
    cur =
        makePrefetchStage(shared_, std::move(cur), c, depth, st.outputType,
                          "the prefetch of '" + st.name + "'", plan_.where(st));
  };
  // The cache stage after step `st`.
  auto addCache = [&](const PlanStep &st) -> Status {
    const std::string to = st.schedule.cache.value_or("");
    if (to != "memory" && to != "disk")
      return Status::error(plan_.where(st) + ": cache after '" + st.name +
                           "' must be memory or disk, got '" + to + "'");
    StageCounters *c =
        counters(st.name + "/cache", "cache", "buffer", plan_.where(st));
    if (to == "memory" && count && countExact) {
      StaticNeed n;
      n.what = "the memory cache after '" + st.name + "' of " +
               std::to_string(*count) + " records";
      n.records = *count;
      n.type = st.outputType;
      n.knob = "cache: disk";
      n.where = plan_.where(st);
      extraNeeds_.push_back(n);
    }
    cur = makeCacheStage(shared_, std::move(cur), c, to, shared_.tempDir,
                         st.outputType, plan_.where(st));
    return Status::ok();
  };
  auto stepAt = [&](size_t i) -> const PlanStep & {
    return i == 0 ? src : plan_.steps[i - 1];
  };

  // The stages, as the runtime groups the steps (StageGroups.h, which the
  // autotuner models too).
  for (const StageGroup &g : stageGroups(plan_)) {
    const PlanStep &last = stepAt(g.steps.back());
    if (g.kind == StageGroup::Kind::Map) {
      std::vector<BoundStep> group;
      for (size_t i : g.steps) {
        const PlanStep &st = stepAt(i);
        std::string where = plan_.where(st);
        std::optional<Expected<ElementFn>> bound;
        if (opts_.binder)
          bound = opts_.binder(st);
        Expected<ElementFn> fn =
            bound ? std::move(*bound) : bindElementOp(st, plan_);
        if (!fn)
          return fn.status().withContext(where + ": ");
        BoundStep op;
        op.step = &st;
        op.fn = fn.take();
        const OpDef *def = Registry::instance().find(st.op);
        if (def && def->rowsKernel && opts_.rowsBinder) {
          std::optional<Expected<RowsFilterFn>> rows = opts_.rowsBinder(st);
          if (rows && !*rows)
            return rows->status().withContext(where + ": ");
          if (rows)
            op.rows = rows->take();
        }
        op.counters =
            counters(st.name, st.op,
                     st.kind == OpKind::Element ? "element" : "record", where);
        if (def && def->traits.dropReason) {
          op.counters->setFilterReason(def->traits.dropReason);
          countExact = false;
        }
        group.push_back(std::move(op));
      }
      int64_t par = 0;
      if (g.parallel)
        par = g.parallelism > 0 ? std::min(g.parallelism, threads_) : threads_;
      // With a controller the parallelism may rise to all threads in
      // flight: the window is sized for that from the start. A prefetch knob
      // on a step deepens the window (which already runs ahead of its
      // consumer) instead of splitting the group.
      constexpr int64_t kSlotsPerWorker = 16;
      int64_t windowPar = par > 0 && opts_.controller ? threads_ : par;
      int64_t window =
          std::max<int64_t>(kSlotsPerWorker, windowPar * kSlotsPerWorker) +
          g.prefetch;
      // Filled only as far as the workers running now need
      // (kSlotsPerWorker each), raised with the parallelism;
      // SLUICE_NO_ACTIVE_WINDOW=1 fills all of it from the start.
      const bool activeOff = switchedOff("SLUICE_NO_ACTIVE_WINDOW");
      int64_t perWorker =
          par > 0 && opts_.controller && threads_ > 1 && !activeOff
              ? kSlotsPerWorker
              : 0;
      cur = makeMapStage(shared_, std::move(cur), std::move(group), par, window,
                         perWorker);
      if (g.prefetchAfter)
        addPrefetch(last, g.prefetch);
      if (g.cacheAfter) {
        Status s = addCache(last);
        if (!s)
          return s;
      }
      continue;
    }
    if (g.kind == StageGroup::Kind::Stream) {
      // The stage of a record op comes from the table its stage's file
      // registers into (StageRegistration), which also applies the op's
      // count rule to `count`.
      std::string where = plan_.where(last);
      const StageFactory *make = findStageFactory(last.op);
      if (!make)
        return Status::error(where + ": the runtime does not implement the " +
                             "record op '" + last.op + "'");
      StageCounters *c = counters(last.name, last.op, "record", where);
      StageBuild b{shared_,        last,  where,      c,
                   std::move(cur), count, countExact, expectedSourceRecords_,
                   extraNeeds_};
      Expected<std::unique_ptr<Stage>> made = (*make)(b);
      if (!made)
        return made.status();
      cur = made.take();
    }
    if (g.prefetchAfter)
      addPrefetch(last, last.schedule.prefetch.value_or(0));
    if (g.cacheAfter) {
      Status s = addCache(last);
      if (!s)
        return s;
    }
  }
  root_ = std::move(cur);
  expectedOutputs_ = countExact ? count : std::nullopt;
  return Status::ok();
}

void Engine::foldShuffle(int64_t cycle, int64_t block) {
  // Shuffle by position (RunOptions::positionalShuffle): a reordering step
  // right after a source of one record per file whose draws depend only on
  // how many records it holds (a `shuffle`, usually put there by
  // sluice-hoist-shuffle) gives an order that is a function of the seed,
  // the epoch and the count alone. The source then reads the files in that
  // order, as the step would have emitted them, and the step passes its
  // records through: nothing is buffered, no pass waits for the buffer to
  // fill before its first record, and the reads can run ahead on the
  // workers. Every record keeps its position, which keys its random
  // choices downstream, so outputs are the same bytes. Not where a record
  // may be dropped before the step (`on_error: skip` on the source: the
  // buffer would count one fewer), a cache on the source (it would replay
  // the first pass's order), interleave, or explicit positions (`sluice
  // serve` replays the step itself).
  Shared::Positional &P = shared_.positional;
  if (!opts_.positionalShuffle || opts_.positions || plan_.steps.empty() ||
      cycle != 1 || block != 1 || plan_.source.schedule.cache ||
      shared_.onError == OnError::Skip || !source_->oneRecordPerShard())
    return;
  const PlanStep &first = plan_.steps.front();
  const OrderReplay *replay = findOrderReplay(first.op);
  if (!replay || first.schedule.cache)
    return;
  // The walk and its order: two int64 per record; only where that is a
  // small share of the budget.
  int64_t bytes = static_cast<int64_t>(source_->numShards()) * 16;
  if (bytes > memory_->limit() / 16)
    return;
  P.numberPasses = !P.on;
  P.on = true;
  P.order = &first;
  P.replay = replay;
}

int64_t Engine::outputRows(const Record &r) const {
  if (!batched_ || r.fields.empty() || r.fields[0].rank() == 0)
    return 1;
  return r.fields[0].dim(0);
}

Status Engine::setupPositions() {
  Shared::Positional &P = shared_.positional;
  P.rank = opts_.rank;
  P.world = opts_.worldSize;
  if (P.world < 1 || P.rank < 0 || P.rank >= P.world)
    return Status::error("rank " + std::to_string(P.rank) +
                         " is out of range for world size " +
                         std::to_string(P.world) + " (0 <= rank < world size)");
  const Value &shuffle = plan_.source.params["shuffle"];
  P.permute = shuffle.isBool() && shuffle.asBool();
  // Positions say where a run stands when every output row is one source
  // record, in order: no stage that drops, reorders, repeats or holds
  // records across epochs.
  const Value &onError = plan_.source.params["on_error"];
  bool exact = !(onError.isString() && onError.asString() == "skip") &&
               !plan_.source.schedule.cache;
  int batches = 0;
  for (const PlanStep &st : plan_.steps) {
    if (st.schedule.cache)
      exact = false;
    // Asked of the op's traits: a batch groups rows; anything that drops,
    // adds, reorders or replays records ends exact positions.
    const OpDef *def = Registry::instance().find(st.op);
    const OpTraits *t = def ? &def->traits : nullptr;
    bool passes = t && t->count == Cardinality::Same;
    if (t && t->count == Cardinality::Groups)
      ++batches;
    else if (t && (t->reorders || t->materializes ||
                   (t->count != Cardinality::OneToOne && !passes)))
      exact = false;
    else if (!isPerRecordStep(st) && !passes)
      exact = false;
  }
  positionalExact_ = exact && batches <= 1;
  batched_ = batches > 0;
  P.on = P.world > 1 || P.permute;
  if (opts_.positions) {
    P.on = true;
    P.positions = opts_.positions;
  }

  if (!opts_.resume)
    return Status::ok();
  const PipelineState &st = *opts_.resume;
  if (st.fingerprint != planFingerprint(plan_))
    return Status::error(
        "the state was saved by another pipeline (its steps, parameters or "
        "source differ from " +
        plan_.specFile + "'s); resume with the spec it came from");
  if (st.seed != plan_.seed)
    return Status::error("the state was saved with seed " +
                         std::to_string(st.seed) + ", this pipeline has seed " +
                         std::to_string(plan_.seed));
  epoch_ = st.epoch;
  if (positionalExact_ && st.positionStart >= 0 && st.rows >= 0) {
    P.on = true;
    P.resumeEpoch = st.epoch;
    P.resumeStart = st.positionStart + st.worldSize * st.rows;
    epochStart_ = P.resumeStart;
    return Status::ok();
  }
  if (st.rank != P.rank || st.worldSize != P.world)
    return Status::error(
        "the state was saved at rank " + std::to_string(st.rank) + " of " +
        std::to_string(st.worldSize) + " and cannot continue at rank " +
        std::to_string(P.rank) + " of " + std::to_string(P.world) +
        ": this pipeline resumes by replaying the epoch (its shuffle buffer, "
        "filter or cache hold state that positions cannot describe), which "
        "needs the same share; to change the world size, read the source by "
        "position: `shuffle: true` on the source instead of a shuffle step");
  skip_ = st.outputs;
  return Status::ok();
}

Status Engine::checkResumeState() const {
  // fromJson() checks a state on its own (types, signs, rank < world size);
  // here every field is held against this plan. A state whose counts are
  // impossible here (damaged, edited, or from another data set of the same
  // shape) would otherwise silently skip an epoch or more.
  if (!opts_.resume)
    return Status::ok();
  const PipelineState &st = *opts_.resume;
  auto bad = [&](const std::string &what) {
    return Status::error(
        "the state to resume from (--resume, load_state_dict()) does not "
        "fit this pipeline: " +
        what +
        "; it is damaged or was edited: resume from a state this pipeline "
        "saved, or start without --resume");
  };
  if (epochs_ >= 0 && st.epoch > epochs_)
    return bad("\"epoch\" is " + std::to_string(st.epoch) +
               ", but the pipeline runs " + std::to_string(epochs_) +
               " epochs (epochs count from 0)");
  if (expectedOutputs_ && st.outputs > *expectedOutputs_)
    return bad("\"outputs\" says " + std::to_string(st.outputs) +
               " outputs of epoch " + std::to_string(st.epoch) +
               " were delivered, but an epoch has " +
               std::to_string(*expectedOutputs_));
  if ((st.positionStart < 0) != (st.rows < 0) || st.positionStart < -1 ||
      st.rows < -1)
    return bad("\"position_start\" (" + std::to_string(st.positionStart) +
               ") and \"rows\" (" + std::to_string(st.rows) +
               ") must both be -1 (no position) or both >= 0");
  if (st.positionStart >= 0) {
    std::optional<int64_t> total = source_->sizeHint();
    int64_t limit = total ? *total : std::numeric_limits<int64_t>::max();
    if (st.positionStart > limit)
      return bad("\"position_start\" is " + std::to_string(st.positionStart) +
                 ", past the epoch's " + std::to_string(limit) +
                 " source records");
    // Ranks checkpoint after the same number of rows, so the last round
    // may reach up to world_size - 1 positions past the end.
    int64_t w = st.worldSize;
    int64_t left = limit - st.positionStart;
    int64_t most = left / w + (left % w != 0 ? 1 : 0);
    if (st.rows > most)
      return bad("\"rows\" is " + std::to_string(st.rows) + ": from position " +
                 std::to_string(st.positionStart) + ", " + std::to_string(w) +
                 " rank(s) can deliver at most " + std::to_string(most) +
                 " rows each of the epoch's " +
                 (total ? std::to_string(*total) : std::string("(unknown)")) +
                 " source records");
  }
  return Status::ok();
}

/// Prefetch depths up to this are never refused before building (their
/// rings are small whatever the budget).
constexpr int64_t kSmallPrefetch = 64;

Status Engine::checkBufferCounts(const RunOptions &opts) const {
  int64_t limit = opts.memoryBytes > 0    ? opts.memoryBytes
                  : plan_.memoryBytes > 0 ? plan_.memoryBytes
                                          : defaultMemoryBudget();
  int64_t most = std::max<int64_t>(1, limit / kMinBufferedRecordBytes);
  // Where the budget was set, as the later checks name it (create() sets
  // shared_.budgetName after this check).
  std::string budget = opts.memoryBytes > 0
                           ? "the memory budget (--memory, memory= in Python)"
                           : "budget.memory";
  for (const PlanStep &st : plan_.steps) {
    // The schedule's prefetch knob, or a `prefetch: N` step's buffer.
    int64_t depth = st.schedule.prefetch.value_or(-1);
    const OpDef *def = Registry::instance().find(st.op);
    if (const char *param = def ? def->traits.prefetchDepth : nullptr;
        param && st.params[param].isNumber())
      depth = std::max(depth, st.params[param].asInt());
    // Only depths whose rings could not even be allocated are refused
    // here, before anything is built; a few records over a tiny budget are
    // left to the checks after building, which say what does not fit (the
    // records themselves) and by how much.
    if (depth > most && depth > kSmallPrefetch)
      return Status::error(
          plan_.where(st) + ": error: the prefetch of '" + st.name + "' (" +
          std::to_string(depth) + " records) cannot fit in " + budget + " " +
          formatBytes(limit) + " even at " +
          std::to_string(kMinBufferedRecordBytes) +
          " bytes a record (what a buffered record costs at least); lower "
          "it to <= " +
          std::to_string(std::max(most, kSmallPrefetch)) +
          " (a few records ride out a slow moment) or raise " + budget);
  }
  return Status::ok();
}

Status Engine::checkStaticMemory() const {
  if (!memory_->limited())
    return Status::ok();
  // A step whose output type is static and larger than the whole budget
  // cannot process a single record (`sluice check` reports the same).
  int64_t limit = memory_->limit();
  for (const PlanStep &st : plan_.steps)
    if (std::string why = recordTypeTooLarge(
            st.outputType, limit,
            Registry::instance().find(st.op) &&
                Registry::instance().find(st.op)->traits.count ==
                    Cardinality::Groups);
        !why.empty()) {
      // recordTypeTooLarge() speaks of the spec's budget.memory; name the
      // flag instead when it set the budget.
      if (size_t at = why.rfind("budget.memory");
          at != std::string::npos && shared_.budgetName != "budget.memory")
        why.replace(at, std::string("budget.memory").size(),
                    shared_.budgetName);
      return Status::error(
          plan_.where(st) + ": error: the output of '" + st.name + "': " + why +
          "; make the step's output smaller or raise " + shared_.budgetName);
    }
  std::vector<StaticNeed> needs = extraNeeds_;
  for (const Stage *st = root_.get(); st; st = st->upstream())
    st->staticNeeds(needs);
  struct Sized {
    const StaticNeed *need;
    int64_t each, total;
  };
  std::vector<Sized> sized;
  int64_t sum = 0;
  for (const StaticNeed &n : needs) {
    std::optional<int64_t> b = staticRecordBytes(n.type);
    if (!b || *b <= 0)
      continue; // dynamic sizes are measured while running
    int64_t total = *b * n.records;
    sized.push_back({&n, *b, total});
    sum += total;
  }
  if (sum <= limit)
    return Status::ok();
  auto largest = std::max_element(
      sized.begin(), sized.end(),
      [](const Sized &a, const Sized &b) { return a.total < b.total; });
  const StaticNeed &n = *largest->need;
  int64_t others = sum - largest->total;
  const std::string &budget = shared_.budgetName;
  int64_t perKnob = largest->each * std::max<int64_t>(1, n.recordsPerKnob);
  int64_t fit = std::max<int64_t>(0, (limit - others) / perKnob);
  std::string advice;
  if (n.knob == "cache: disk")
    advice = "cache to disk instead (`cache: disk`) or raise " + budget;
  else if (fit >= 1)
    advice = "lower " + n.knob + " to <= " + std::to_string(fit) +
             " or raise " + budget;
  else
    // Lowering the knob to 0 is no advice: the budget is what is too small.
    advice = "with the other buffers not even " + n.knob + " = 1 fits: raise " +
             budget + " to at least " + formatBytes(others + perKnob);
  std::string msg = n.where + ": error: " + n.what + " of {" + n.type.str() +
                    "} (" + formatBytes(largest->each) + " each) needs " +
                    formatBytes(largest->total);
  if (largest->total > limit) {
    msg += ", more than " + budget + " " + formatBytes(limit);
  } else {
    msg += "; with the other buffers (";
    bool first = true;
    for (const Sized &s : sized) {
      if (s.need == &n)
        continue;
      msg += (first ? "" : ", ") + s.need->what + " " + formatBytes(s.total);
      first = false;
    }
    msg += ") the pipeline needs " + formatBytes(sum) + ", more than " +
           budget + " " + formatBytes(limit);
  }
  return Status::error(msg + "; " + advice);
}

Status Engine::overrunError() const {
  MemoryBudget::Overrun o = memory_->firstOverrun();
  // Accounts are named after their stage ("tokenize window", "batch"):
  // the longest stage name the account's starts with is where it happened.
  const PlanStep *at = nullptr;
  auto consider = [&](const PlanStep &st) {
    if (o.account.compare(0, st.name.size(), st.name) == 0 &&
        (o.account.size() == st.name.size() ||
         o.account[st.name.size()] == ' ' ||
         o.account[st.name.size()] == '/') &&
        (!at || st.name.size() > at->name.size()))
      at = &st;
  };
  consider(plan_.source);
  for (const PlanStep &st : plan_.steps)
    consider(st);
  std::string msg =
      (at ? plan_.where(*at) + ": " : std::string()) +
      "budget.memory exceeded: " +
      (o.account.empty() ? std::string("a buffer") : "'" + o.account + "'") +
      " took the memory the pipeline holds to " + formatBytes(o.total) +
      ", over budget.memory " + formatBytes(memory_->limit()) +
      " (records larger than the budget leaves room for: a "
      "very long line or file, a large batch of them); make "
      "the records smaller (truncate, a smaller batch) or "
      "raise budget.memory" +
      (o.held.empty() ? std::string() : "; held then: " + o.held);
  return Status::error(msg);
}

Expected<bool> Engine::next(Item &out, int64_t &epoch) {
  if (startNs_ == 0)
    startNs_ = nowNs();
  // The caller asks for the next output: the last one is theirs to keep or
  // (usually) drop, no longer the pipeline's.
  releaseOutput();
  for (;;) {
    if (finished_)
      return false;
    if (epochs_ >= 0 && epoch_ >= epochs_) {
      finished_ = true;
      endNs_ = nowNs();
      if (memory_->overrun())
        return overrunError();
      return false;
    }
    if (!started_) {
      started_ = true;
      Status s = root_->start(static_cast<uint64_t>(epoch_));
      if (!s) {
        stop();
        return s;
      }
    }
    Expected<bool> r = root_->next(out);
    if (!r) {
      stop();
      return r;
    }
    if (*r) {
      ++outputsInEpoch_;
      rowsInEpoch_ += outputRows(out.rec);
      if (skip_ > 0) {
        --skip_;
        continue;
      }
      epoch = epoch_;
      outputs_.fetch_add(1, std::memory_order_relaxed);
      outputHeld_ = recordBytes(out.rec);
      outputAccount_->forceReserve(outputHeld_);
      outputBytes_.fetch_add(outputHeld_, std::memory_order_relaxed);
      return true;
    }
    // What a step made past the budget fails the run at the end of the
    // epoch it happened in (a buffer's own, more specific refusal, which
    // usually follows within the epoch, comes first): a run whose memory
    // went over budget.memory never ends as a success.
    if (memory_->overrun()) {
      stop();
      return overrunError();
    }
    root_->stop();
    started_ = false;
    ++epoch_;
    ++epochsDone_;
    outputsInEpoch_ = rowsInEpoch_ = epochStart_ = 0;
    skip_ = 0;
  }
}

void Engine::cancel() {
  shared_.cancelled.store(true);
  // The stage chain is fixed once built; each wake() takes only its own
  // stage's lock, so this is safe while another thread is inside next().
  for (Stage *s = root_.get(); s; s = s->upstream())
    s->wake();
}

void Engine::stop() {
  std::lock_guard<std::mutex> lock(stopMu_);
  if (root_)
    root_->stop();
  // Nothing is held for the caller any more, and idle pool buffers are no
  // longer this pipeline's to count.
  if (outputAccount_) {
    outputAccount_->release(outputHeld_);
    outputHeld_ = 0;
  }
  if (poolLimit_)
    clearBufferPoolLimit(poolLimit_.get());
  if (memory_)
    memory_->dropCarriedHeap();
  // What a remote source fetched ahead and no reader took is dropped, its
  // reservation released, before the budget goes.
  if (aheadLimit_ && source_) {
    if (auto *src = dynamic_cast<const SourceBase *>(source_.get()))
      src->setPrefetchLimit(nullptr);
    aheadLimit_.reset();
  }
  if (bodyLimit_) {
    detail::clearRemoteBodyLimit(bodyLimit_.get());
    bodyLimit_.reset();
  }
  // Idle page-locked buffers are unlocked and freed now; those still held
  // (by the caller, or a device copy under way) as they come back.
  if (shared_.pinned)
    shared_.pinned->close();
  started_ = false;
  finished_ = true;
  if (endNs_ == 0 && startNs_ != 0)
    endNs_ = nowNs();
}

RunStats Engine::stats() const {
  RunStats r;
  r.pipeline = plan_.name;
  r.epochs = epochs_;
  r.epochsDone = epochsDone_;
  r.threads = threads_;
  int64_t start = startNs_.load();
  int64_t end = endNs_ != 0 ? endNs_.load() : nowNs();
  r.wallSeconds = start ? static_cast<double>(end - start) * 1e-9 : 0;
  r.consumerCpuSeconds = static_cast<double>(consumerCpuNs_.load()) * 1e-9;
  r.outputs = outputs_.load();
  r.outputBytes = outputBytes_.load();
  r.memoryLimit = memory_->limit();
  r.memoryPeak = memory_->peak();
  r.processMemoryPeak = std::max(r.memoryPeak, processMemoryPeak());
  r.baselineRss = processBaselineRss();
  r.rss = currentRss();
  r.memoryInUse = memory_->used();
  r.memoryPeaks = memory_->peaks();
  for (const auto &c : counters_)
    r.stages.push_back(c->snapshot());
  r.consumer = consumer_.snapshot();
  if (remoteBase_) {
    RemoteTotals now = remoteTotals();
    r.remote.requests =
        static_cast<int64_t>(now.requests - remoteBase_->requests);
    r.remote.retries = static_cast<int64_t>(now.retries - remoteBase_->retries);
    r.remote.failures =
        static_cast<int64_t>(now.failures - remoteBase_->failures);
    r.remote.bytes = static_cast<int64_t>(now.bytes - remoteBase_->bytes);
    r.remote.bodiesReused =
        static_cast<int64_t>(now.bodiesReused - remoteBase_->bodiesReused);
    r.remote.bodiesPopulated = static_cast<int64_t>(
        now.bodiesPopulated - remoteBase_->bodiesPopulated);
    r.remote.bodiesMapped =
        static_cast<int64_t>(now.bodiesMapped - remoteBase_->bodiesMapped);
    r.remote.curlBuffersReused = static_cast<int64_t>(
        now.curlBuffersReused - remoteBase_->curlBuffersReused);
    r.remote.socketUpdates =
        static_cast<int64_t>(now.socketUpdates - remoteBase_->socketUpdates);
    r.remote.finishedByReaders = static_cast<int64_t>(
        now.finishedByReaders - remoteBase_->finishedByReaders);
    r.remote.clientThreads = static_cast<int64_t>(now.clientThreads);
    r.remote.medianLatencyMs = now.medianLatencyMs;
    r.remote.peakInFlight = static_cast<int64_t>(now.peakInFlight);
    r.remote.medianRequestMs = now.medianRequestMs;
    r.remote.requestsInFlight = source_->requestsInFlight();
    r.remote.inFlightPinned = source_->requestsInFlightPinned();
    r.remote.receiveSeconds = now.receiveSeconds - remoteBase_->receiveSeconds;
    r.remote.chunkBytes = source_->remoteChunkBytes();
    r.remote.nextPassAhead =
        static_cast<int64_t>(now.nextPassAhead - remoteBase_->nextPassAhead);
    r.remote.nextPassTaken =
        static_cast<int64_t>(now.nextPassTaken - remoteBase_->nextPassTaken);
    r.remote.listRequests = source_->listing().requests;
    r.remote.listedKeys = source_->listing().keys;
    r.remote.listingSeconds = source_->listing().seconds;
    r.remote.unloadedLatencyMs = now.unloadedLatencyMs;
    r.remote.streams = static_cast<int64_t>(now.streams - remoteBase_->streams);
    r.remote.streamBytes =
        static_cast<int64_t>(now.streamBytes - remoteBase_->streamBytes);
    r.remote.bursts = static_cast<int64_t>(now.bursts - remoteBase_->bursts);
    r.remote.burstRequests =
        static_cast<int64_t>(now.burstRequests - remoteBase_->burstRequests);
    r.remote.readerStalls =
        static_cast<int64_t>(now.readerStalls - remoteBase_->readerStalls);
    ObjectCacheTotals c = objectCacheTotals();
    auto d = [](uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b); };
    r.remote.cache.hits = d(c.hits, cacheBase_.hits);
    r.remote.cache.misses = d(c.misses, cacheBase_.misses);
    r.remote.cache.stale = d(c.stale, cacheBase_.stale);
    r.remote.cache.bytesRead = d(c.bytesRead, cacheBase_.bytesRead);
    r.remote.cache.bytesStored = d(c.bytesStored, cacheBase_.bytesStored);
    r.remote.cache.evictions = d(c.evictions, cacheBase_.evictions);
    r.remote.cache.damaged = d(c.damaged, cacheBase_.damaged);
  }
  return r;
}

Pipeline::Pipeline(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)) {}

Pipeline::~Pipeline() { stop(); }

Expected<std::unique_ptr<Pipeline>> Pipeline::create(const Plan &plan,
                                                     const RunOptions &opts) {
  Expected<std::unique_ptr<Engine>> e = Engine::create(plan, opts);
  if (!e)
    return e.status();
  return std::unique_ptr<Pipeline>(new Pipeline(e.take()));
}

Status Pipeline::checkFits(const Plan &plan, const RunOptions &opts) {
  Expected<std::unique_ptr<Engine>> e = Engine::create(plan, opts, true);
  return e ? Status::ok() : e.status();
}

RunController::~RunController() = default;
OutputBuffers::~OutputBuffers() = default;

Expected<bool> Pipeline::next(Batch &out) {
  Engine &e = *engine_;
  if (e.opts_.controller && !e.controllerThread_.joinable()) {
    std::lock_guard<std::mutex> lock(e.controllerMu_);
    if (!e.controllerStop_)
      e.controllerThread_ = std::thread([this, &e] {
        RunController &c = *e.opts_.controller;
        auto period =
            std::chrono::duration<double>(std::max(0.01, c.interval()));
        std::unique_lock<std::mutex> lock(e.controllerMu_);
        while (!e.controllerCv_.wait_for(lock, period,
                                         [&] { return e.controllerStop_; })) {
          lock.unlock();
          c.tick(*this);
          lock.lock();
        }
      });
  }
  // Drops the caller's reference to the last output as the engine stops
  // counting it (Pipeline.h): freed now, its buffers go to the pool, which
  // reserves them in the budget again, or back to the system. Released
  // first: the pool's reservation must not meet the output's, or `memory
  // peak` would count the buffer twice for a moment.
  static const bool keepLast = switchedOff("SLUICE_KEEP_LAST_OUTPUT");
  if (!keepLast) {
    e.releaseOutput();
    out = Batch();
  }
  Item item;
  int64_t epoch = 0;
  // The consumer's thread runs the inline stages: its CPU is serial work.
  const int64_t cpu0 = detail::threadCpuNs();
  e.consumer_.enter(nowNs());
  Expected<bool> r = engine_->next(item, epoch);
  e.consumer_.leave(nowNs(), r && *r);
  e.consumerCpuNs_.fetch_add(detail::threadCpuNs() - cpu0,
                             std::memory_order_relaxed);
  if (!r || !*r)
    return r;
  out.type_ = &engine_->plan_.outputType();
  out.fields_ = std::move(item.rec.fields);
  out.sequence_ = engine_->outputs_.load(std::memory_order_relaxed) - 1;
  out.epoch_ = epoch;
  out.index_ = item.rec.index;
  return true;
}

void Pipeline::stop() {
  if (!engine_)
    return;
  engine_->stopController();
  engine_->stop();
}

Status Pipeline::setParallelism(const std::string &step, int64_t parallelism) {
  for (detail::Stage *s = engine_->root_.get(); s; s = s->upstream())
    if (s->runsStep(step)) {
      if (s->setParallelism(parallelism))
        return Status::ok();
      return Status::error("step '" + step +
                           "' runs inline on its consumer's thread: it has "
                           "no workers whose number could change");
    }
  return Status::error("no step '" + step + "' in this pipeline");
}

Expected<int64_t> Pipeline::setPrefetch(const std::string &step,
                                        int64_t depth) {
  std::string name = step + "/prefetch";
  for (detail::Stage *s = engine_->root_.get(); s; s = s->upstream())
    if (s->runsStep(name)) {
      int64_t d = s->setDepth(depth);
      if (d >= 0)
        return d;
    }
  return Status::error("step '" + step +
                       "' has no prefetch queue whose depth could change");
}

void Pipeline::cancel() {
  if (engine_)
    engine_->cancel();
}

bool Pipeline::cancelled() const {
  return engine_ && engine_->shared_.cancelled.load();
}

const RecordType &Pipeline::outputType() const {
  return engine_->plan_.outputType();
}
const Plan &Pipeline::plan() const { return engine_->plan_; }
int64_t Pipeline::epochs() const { return engine_->epochs_; }
int64_t Pipeline::threads() const { return engine_->threads_; }
std::optional<int64_t> Pipeline::expectedOutputs() const {
  if (!engine_->expectedOutputs_ || engine_->epochs_ < 0)
    return std::nullopt;
  return *engine_->expectedOutputs_ *
         std::max<int64_t>(0, engine_->epochs_ - engine_->opts_.firstEpoch);
}
std::optional<int64_t> Pipeline::expectedOutputsPerEpoch() const {
  return engine_->expectedOutputs_;
}
std::optional<int64_t> Pipeline::expectedSourceRecords() const {
  if (!engine_->expectedSourceRecords_ || engine_->epochs_ < 0)
    return std::nullopt;
  return *engine_->expectedSourceRecords_ *
         std::max<int64_t>(0, engine_->epochs_ - engine_->opts_.firstEpoch);
}
RunStats Pipeline::stats() const { return engine_->stats(); }

PipelineState Pipeline::state() const {
  const Engine &e = *engine_;
  PipelineState s;
  s.fingerprint = planFingerprint(e.plan_);
  s.seed = e.plan_.seed;
  s.rank = e.shared_.positional.rank;
  s.worldSize = e.shared_.positional.world;
  s.epoch = e.epoch_;
  // Outputs still to drop were delivered by the run the state came from.
  s.outputs = e.outputsInEpoch_ + e.skip_;
  int64_t rows = e.rowsInEpoch_;
  int64_t start = e.epochStart_;
  // At the end of an epoch, the next output is the next epoch's first.
  if (e.expectedOutputs_ && e.skip_ == 0 && e.outputsInEpoch_ > 0 &&
      e.outputsInEpoch_ >= *e.expectedOutputs_) {
    ++s.epoch;
    s.outputs = rows = start = 0;
  }
  if (e.positionalExact_) {
    s.positionStart = start;
    s.rows = rows;
  }
  return s;
}

MemoryAccount &Pipeline::heldOutputs() {
  std::lock_guard<std::mutex> lock(engine_->stopMu_);
  if (!engine_->held_)
    engine_->held_ = engine_->memory_->account("outputs held by the caller");
  return *engine_->held_;
}

} // namespace sluice::runtime
