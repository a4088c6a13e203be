//===- MapStage.cpp - Fused per-record steps, inline or parallel ----------===//
//
// Consecutive per-record steps (element ops, select, rename, filter) run as
// one stage: one pass over the record applies them in sequence, so a record
// is touched by one thread while it is hot in its cache.
//
// Parallel mode keeps the output order: a feeder thread pulls inputs in
// order into a ring of `window` slots; up to `parallelism` oneTBB tasks take
// runs of consecutive slots and process them; the consumer takes slots in
// ring order once they are done. Nothing about the result depends on which
// worker processed which record, so the output is the same at any
// parallelism.
//
// Accounting is done when the consumer commits a slot, in stream order:
// steps a record passed count it as emitted, the step that dropped it as
// filtered/skipped/failed. Slots never committed (the run stopped early)
// count as discarded by the first step.
//
// Before a `batch`, a worker also copies each record it finished into its
// row of the batch buffer (RowPlacer, Engine.h). Its position in the batch
// stream is the slot's position minus the records dropped before it; the
// worker counts the drops it knows of when it takes the run (all of them
// earlier in the stream), and a drop it could not know of only costs the
// batch stage a copy. That copy time counts toward the group's last step.
//
// Batched hand-offs (Shared::batchedHandoff): with large records (images,
// one per run) every hand-off used to wake a sleeping thread: a worker woke
// the consumer for each finished record, and the consumer woke the feeder
// for each freed slot; on a machine with as many cores as workers each
// wake-up preempts a worker (about three context switches per image). The
// consumer now waits until a run of `handoff_` records at the head is
// finished (or everything in the window is, or a marker is reached), and
// the feeder until as many slots are free; the order, records and counts
// are the same.
//
// Arena slicing (Shared::arenaSliceNs, TaskHandoff.h): the pipeline's arena
// has one slot per core, shared by every parallel step. A worker used to
// keep its slot while its step had input, so in a pipeline whose costly
// step feeds a cheap one (cast+map+normalize, a cache, then crop+flip) the
// cheap step's task waited until the costly step's reorder window filled
// and its workers ran dry, and the cores idled in turns. Now a worker that
// has run for a slice while another task waits for a slot enqueues its own
// continuation behind that task and returns (it stays counted in
// activeTasks_, so the feeder starts no extra worker and shutdown() waits
// for it), and a worker with nothing to do leaves at once when a task
// waits. Which worker processes a record still never shows in the output.
//
//===----------------------------------------------------------------------===//
#include "Engine.h"

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

namespace sluice::runtime::detail {

namespace {

void inc(std::atomic<int64_t> &a, int64_t n = 1) {
  a.fetch_add(n, std::memory_order_relaxed);
}

/// What happened to one record.
struct Outcome {
  enum Kind : uint8_t { Kept, Dropped, Skipped, Failed };
  Kind kind = Kept;
  int stopAt = -1; ///< index of the step that dropped it
  std::string message;
};

class MapStage : public Stage {
public:
  MapStage(Shared &s, std::unique_ptr<Stage> up, std::vector<BoundStep> ops,
           int64_t parallelism, int64_t window, int64_t perWorker)
      : Stage(s, std::move(up), nullptr), ops_(std::move(ops)),
        parallel_(parallelism > 0 && s.arena != nullptr),
        parallelism_(std::max<int64_t>(1, parallelism)),
        window_(std::max<int64_t>(2, window)), perWorker_(perWorker),
        scratchLimit_(s.memory->account(ops_.front().step->name + " scratch"),
                      /*credit=*/true) {
    inlineTiming_ = false;
    for (const BoundStep &op : ops_)
      op.counters->parallelism.store(parallel_ ? parallelism_ : 1);
    // Inline filters can test runs of records held as columns.
    runsOk_ = !parallel_;
    for (const BoundStep &op : ops_) {
      if (!runsOk_)
        break;
      if (op.rows) { // compiled (RunOptions::rowsBinder)
        rowsFilters_.push_back(op.rows);
        continue;
      }
      std::optional<Expected<RowsFilterFn>> f = bindRowsFilter(*op.step);
      runsOk_ = f && *f;
      if (runsOk_)
        rowsFilters_.push_back(f->take());
    }
    if (parallel_) {
      slots_.resize(static_cast<size_t>(window_));
      active_ = activeFor(parallelism_);
      account_ = s.memory->account(ops_.front().step->name + " window");
      ops_.back().counters->bufferCapacity.store(window_);
      maxChunk_ = std::max<int64_t>(1, active_ / (2 * parallelism_));
      if (s.batchedHandoff)
        handoff_ = std::clamp<int64_t>(window_ / 4, 1, kMaxHandoff);
    }
  }

  ~MapStage() override { shutdown(); }

  void staticNeeds(std::vector<StaticNeed> &out) const override {
    if (!parallel_)
      return;
    // A slot holds the record before and then after the steps; count the
    // larger of the two types.
    const RecordType &in = ops_.front().step->inputType;
    const RecordType &outT = ops_.back().step->outputType;
    std::optional<int64_t> bi = staticRecordBytes(in),
                           bo = staticRecordBytes(outT);
    StaticNeed n;
    n.what = "the reorder window of " + std::to_string(window_) +
             " records of the parallel step '" + ops_.front().step->name + "'";
    n.records = window_;
    n.type = (bi && bo && *bi > *bo) ? in : outT;
    n.knob = "parallelism/prefetch of '" + ops_.front().step->name + "'";
    n.where = shared_.plan->where(*ops_.front().step);
    out.push_back(std::move(n));
  }

  bool runs() const override { return runsOk_ && upstream_->runs(); }

  bool attachRowPlacer(RowPlacer *placer) override {
    if (!parallel_)
      return false;
    placer_ = placer;
    return true;
  }

  /// A plan step of this stage, or a spec step a fused one stands for
  /// ("b" of "a+b+c").
  bool runsStep(const std::string &name) const override {
    for (const BoundStep &op : ops_) {
      const std::string &n = op.step->name;
      if (n == name)
        return true;
      if (n.find('+') != std::string::npos)
        for (const std::string &step : stepNamesIn(n))
          if (step == name)
            return true;
    }
    return false;
  }

  /// In flight: more workers are enqueued by the feeder as records arrive
  /// (it starts one whenever fewer than `parallelism_` are active), fewer
  /// by workers leaving before they take their next run. Which worker
  /// processes a record never shows in the outputs.
  bool setParallelism(int64_t p) override {
    if (!parallel_)
      return false;
    p = std::clamp<int64_t>(p, 1, std::max<int64_t>(1, shared_.threads));
    {
      std::lock_guard<std::mutex> lock(mu_);
      parallelism_ = p;
      active_ = activeFor(p);
      maxChunk_ = std::max<int64_t>(1, active_ / (2 * parallelism_));
    }
    notFull_.notify_all();
    for (const BoundStep &op : ops_)
      op.counters->parallelism.store(p);
    work_.notify_all();
    return true;
  }

protected:
  Status onStart(uint64_t epoch) override {
    Status st = Stage::onStart(epoch);
    if (!st)
      return st;
    ctx_.seed = shared_.plan->seed;
    ctx_.epoch = epoch;
    if (!parallel_)
      return Status::ok();
    head_ = dispatched_ = tail_ = 0;
    knownDrops_ = 0;
    cancel_ = false;
    activeTasks_ = 0;
    feeder_ = std::thread([this] { feedLoop(); });
    return Status::ok();
  }

  void onStop() override {
    shutdown();
    // No step runs any more: the threads' budget credit goes back.
    scratchLimit_.returnCredit();
  }

  Expected<bool> produce(Item &out) override {
    return parallel_ ? produceParallel(out) : produceInline(out);
  }

  /// Inline: the steps on a run of records from upstream, timed once per
  /// run when there is one step (else per step and record, as produce()).
  Expected<size_t> produceMany(std::vector<Item> &out, size_t max) override {
    if (parallel_)
      return Stage::produceMany(out, max);
    const bool perStep = ops_.size() > 1;
    std::vector<int64_t> &ns = ns_;
    struct Clear { // dropped records are not held after the call
      std::vector<Item> &v;
      ~Clear() { v.clear(); }
    } clear{run_};
    size_t n = 0;
    while (n < max) {
      run_.clear();
      Expected<size_t> r = upstream_->nextMany(run_, max - n);
      if (!r) {
        if (n == 0)
          return r.status();
        holdError(r.status());
        return n;
      }
      if (*r == 0)
        break;
      std::fill(ns.begin(), ns.end(), 0);
      const bool runClock = !perStep && shared_.timing;
      int64_t t0 = runClock ? nowNs() : 0;
      for (size_t i = 0; i < run_.size(); ++i) {
        Item &item = run_[i];
        inc(ops_.front().counters->read);
        Outcome o;
        process(item, o, ns.data(), perStep);
        bool kept = false;
        Status s = commit(item, o, kept);
        if (!s) {
          // Pulled in this run but never looked at.
          int64_t rest = static_cast<int64_t>(run_.size() - i - 1);
          inc(ops_.front().counters->read, rest);
          inc(ops_.front().counters->discarded, rest);
          if (runClock)
            ns[0] += nowNs() - t0;
          chargeTime(ns.data(), -1);
          if (n == 0)
            return s;
          holdError(std::move(s));
          return n;
        }
        if (kept) {
          out.push_back(std::move(item));
          ++n;
        }
      }
      if (runClock)
        ns[0] += nowNs() - t0;
      chargeTime(ns.data(), -1);
    }
    return n;
  }

  /// Run mode: each filter tests the run's selected rows at once and
  /// narrows the selection; counted as produceInline counts its records.
  Expected<bool> produceRun(ItemRun &run, int64_t max) override {
    Expected<bool> r = upstream_->nextRun(run, max);
    if (!r || !*r)
      return r;
    int64_t in = run.kept();
    if (in == 0)
      return true;
    inc(ops_.front().counters->read, in);
    const int64_t bytes = run.rowRecordBytes();
    std::vector<int64_t> &ns = ns_;
    std::fill(ns.begin(), ns.end(), 0);
    for (size_t i = 0; i < ops_.size() && in > 0; ++i) {
      StageCounters &c = *ops_[i].counters;
      if (i > 0)
        inc(c.read, in);
      inc(c.bytesIn, in * bytes);
      int64_t t0 = nowNs();
      keepFlags_.resize(static_cast<size_t>(in));
      Status st =
          rowsFilters_[i](run.columns, run.selected ? run.keep.data() : nullptr,
                          in, keepFlags_.data());
      if (!st) {
        inc(c.failed, in);
        const PlanStep &step = *ops_[i].step;
        return Status::error(shared_.describe(run.origin) + ": " +
                             step.reportedOp() + ": " + st.message() +
                             "\n  in step '" + step.name + "' at " +
                             shared_.plan->where(step));
      }
      nextKeep_.clear();
      for (int64_t j = 0; j < in; ++j)
        if (keepFlags_[size_t(j)])
          nextKeep_.push_back(run.selected ? run.keep[size_t(j)]
                                           : static_cast<uint32_t>(j));
      run.keep.swap(nextKeep_);
      run.selected = true;
      ns[i] += nowNs() - t0;
      int64_t out = static_cast<int64_t>(run.keep.size());
      inc(c.emitted, out);
      inc(c.elementsOut, out);
      inc(c.filtered, in - out);
      inc(c.bytesOut, out * bytes);
      in = out;
    }
    chargeTime(ns.data(), -1);
    return true;
  }

private:
  struct Slot {
    Item item;
    Outcome outcome;
    int64_t bytes = 0;
    bool done = false;
    enum Marker : uint8_t { None, End, Error } marker = None;
    Status error;
  };

  /// Runs the steps on one record; adds the wall time per step to `ns[i]`
  /// (when `timed`: a caller timing a whole run of records passes false)
  /// and its bytes in and out to `ns[n + i]` and `ns[2n + i]` (n steps): a
  /// worker keeps these in its own array and charges them to the shared
  /// counters every few milliseconds (chargeTime), so the counters cost no
  /// contended atomic per step and record. Nothing is timed or counted with
  /// the stage timing off (RunOptions::stageTiming).
  void process(Item &item, Outcome &o, int64_t *ns, bool timed = true) {
    o = Outcome();
    const bool timing = shared_.timing;
    int64_t bytes = timing ? recordBytes(item.rec) : 0;
    // What the steps allocate for this record is reserved in the budget
    // while they run (Allocation.h); the record's surviving tensors are
    // counted by the window or the next buffer once the scope closes.
    AllocationScope scope(&scratchLimit_);
    const size_t n = ops_.size();
    const bool clock = timing && timed;
    for (size_t i = 0; i < n; ++i) {
      if (timing)
        ns[n + i] += bytes;
      int64_t t0 = clock ? nowNs() : 0;
      Expected<bool> r = runStep(i, item.rec);
      if (clock)
        ns[i] += nowNs() - t0;
      if (!r) {
        o.kind = shared_.onError == OnError::Skip ? Outcome::Skipped
                                                  : Outcome::Failed;
        o.stopAt = static_cast<int>(i);
        o.message = r.status().message();
        return;
      }
      if (!*r) {
        o.kind = Outcome::Dropped;
        o.stopAt = static_cast<int>(i);
        return;
      }
      if (timing) {
        bytes = recordBytes(item.rec);
        ns[2 * n + i] += bytes;
      }
    }
  }

  /// Runs step `i`; an allocation the budget refused (AllocationRefused)
  /// or the system could not give (std::bad_alloc) fails the record like
  /// any other data error instead of escaping the worker thread.
  Expected<bool> runStep(size_t i, Record &rec) {
    try {
      ElementContext ctx = ctx_;
      ctx.counters = ops_[i].counters;
      return ops_[i].fn(rec, ctx);
    } catch (const AllocationRefused &e) {
      return Status::error(e.what());
    } catch (const std::bad_alloc &) {
      return Status::error(
          "out of memory: the system refused an allocation for this record "
          "(std::bad_alloc); lower budget.memory below what the host can "
          "give, or drop or shrink such records before this step");
    } catch (const std::length_error &e) {
      return Status::error(std::string("a buffer for this record would be "
                                       "too large (") +
                           e.what() + ")");
    }
  }

  /// Counts a record's outcome, in stream order. Returns an error for a
  /// failed record; `kept` tells whether it goes downstream.
  Status commit(const Item &item, const Outcome &o, bool &kept) {
    size_t passed =
        o.kind == Outcome::Kept ? ops_.size() : static_cast<size_t>(o.stopAt);
    for (size_t i = 0; i < passed; ++i) {
      StageCounters &c = *ops_[i].counters;
      if (i > 0)
        inc(c.read);
      inc(c.emitted);
      inc(c.elementsOut);
    }
    kept = o.kind == Outcome::Kept;
    if (kept)
      return Status::ok();
    StageCounters &c = *ops_[passed].counters;
    if (passed > 0)
      inc(c.read);
    const PlanStep &step = *ops_[passed].step;
    switch (o.kind) {
    case Outcome::Dropped:
      inc(c.filtered);
      return Status::ok();
    case Outcome::Skipped:
      c.addSkipped(skipReason(step.reportedOp(), o.message));
      return Status::ok();
    case Outcome::Failed: {
      inc(c.failed);
      std::string where = shared_.describe(item.origin);
      if (where.empty())
        where = "record " + std::to_string(item.rec.index) + " of the stream";
      return Status::error(
          where + ": " + step.reportedOp() + ": " + o.message +
          "\n  in step '" + step.name + "' at " + shared_.plan->where(step) +
          " (on_error: fail; add `on_error: skip` to the source to drop bad "
          "records and count them)");
    }
    case Outcome::Kept:
      break;
    }
    return Status::ok();
  }

  /// Adds a worker's accumulated time and bytes (process()) to the
  /// counters.
  void chargeTime(const int64_t *ns, int64_t cpu) {
    const size_t n = ops_.size();
    int64_t total = 0;
    for (size_t i = 0; i < n; ++i)
      total += ns[i];
    for (size_t i = 0; i < n; ++i) {
      if (ns[n + i])
        inc(ops_[i].counters->bytesIn, ns[n + i]);
      if (ns[2 * n + i])
        inc(ops_[i].counters->bytesOut, ns[2 * n + i]);
      inc(ops_[i].counters->wallNs, ns[i]);
      // Thread CPU time is measured per run of records; share it out by the
      // wall time each step took (cpu < 0: use wall time).
      int64_t share =
          cpu < 0
              ? ns[i]
              : (total > 0 ? static_cast<int64_t>(static_cast<double>(cpu) *
                                                  static_cast<double>(ns[i]) /
                                                  static_cast<double>(total))
                           : 0);
      inc(ops_[i].counters->cpuNs, share);
    }
  }

  Expected<bool> produceInline(Item &out) {
    std::vector<int64_t> &ns = ns_;
    for (;;) {
      Expected<bool> r = upstream_->next(out);
      if (!r || !*r)
        return r;
      inc(ops_.front().counters->read);
      std::fill(ns.begin(), ns.end(), 0);
      Outcome o;
      process(out, o, ns.data());
      chargeTime(ns.data(), -1);
      bool kept = false;
      Status s = commit(out, o, kept);
      if (!s)
        return s;
      if (kept)
        return true;
    }
  }

  // --- parallel mode ---

  Slot &slot(uint64_t pos) { return slots_[pos % slots_.size()]; }

  void feedLoop() {
    std::vector<Item> pulled;
    // This thread pulls every record of the upstream stages it runs: its
    // CPU is serial work (StageStats::threadCpuSeconds), counted per run.
    int64_t cpuMark = threadCpuNs();
    auto countCpu = [&] {
      int64_t now = threadCpuNs();
      inc(ops_.back().counters->threadCpuNs, now - cpuMark);
      cpuMark = now;
    };
    struct AtExit {
      decltype(countCpu) &f;
      ~AtExit() { f(); }
    } atExit{countCpu};
    for (;;) {
      countCpu();
      uint64_t room;
      {
        std::unique_lock<std::mutex> lock(mu_);
        notFull_.wait(lock, [&] {
          return cancel_ || tail_ - head_ < static_cast<uint64_t>(active_);
        });
        if (cancel_)
          return;
        room = static_cast<uint64_t>(active_) - (tail_ - head_);
      }
      // Pull a run of records outside the lock (as many as a worker takes
      // at once) so the lock is taken once per run, not once per record.
      uint64_t want = std::min<uint64_t>(
          room, static_cast<uint64_t>(std::max<int64_t>(1, chunk_)));
      pulled.clear();
      std::optional<Expected<bool>> last;
      while (pulled.size() < want) {
        Item in;
        Expected<bool> r = upstream_->next(in);
        if (!r || !*r) {
          last.emplace(std::move(r));
          break;
        }
        pulled.push_back(std::move(in));
      }
      std::unique_lock<std::mutex> lock(mu_);
      inc(ops_.front().counters->read, static_cast<int64_t>(pulled.size()));
      if (cancel_) {
        // Read but never placed in the window.
        inc(ops_.front().counters->discarded,
            static_cast<int64_t>(pulled.size()));
        return;
      }
      for (Item &in : pulled) {
        int64_t bytes = recordBytes(in.rec);
        // Wait for memory while our window holds records (they will be
        // consumed); an empty window must let one record through.
        while (!account_->tryReserve(bytes)) {
          if (cancel_ || tail_ == head_) {
            account_->forceReserve(bytes);
            break;
          }
          feederWaitsMemory_ = true;
          notFull_.wait_for(lock, std::chrono::milliseconds(5));
          feederWaitsMemory_ = false;
        }
        Slot &s = slot(tail_);
        s = Slot();
        s.item = std::move(in);
        s.bytes = bytes;
        ++tail_;
      }
      if (!pulled.empty()) {
        if (idleWorkers_ > 0)
          work_.notify_one();
        else if (activeTasks_ < parallelism_) {
          ++activeTasks_;
          enqueueTask(*shared_.arena, [this] { workLoop(); });
        }
      }
      if (last) {
        Slot &s = slot(tail_);
        s = Slot();
        s.done = true;
        s.marker = *last ? Slot::End : Slot::Error;
        if (!*last)
          s.error = last->status();
        ++tail_;
        ready_.notify_one();
        work_.notify_all();
        return;
      }
    }
  }

  void workLoop() {
    std::vector<int64_t> ns(3 * ops_.size(), 0);
    std::vector<Tensor> rowViews, targets;
    const bool timing = shared_.timing;
    int64_t cpu0 = timing ? threadCpuNs() : 0;
    int64_t lastCharge = nowNs();
    int64_t items = 0, runNs = 0;
    // Arena slicing: this task's slot goes to a waiting task once it has
    // run this long (0: never).
    const int64_t slice = shared_.arenaSliceNs;
    const int64_t sliceStart = lastCharge;
    TaskArena &arena = *shared_.arena;
    for (;;) {
      uint64_t a, b, drops;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Linger briefly before giving the thread back: when the input is
        // the bottleneck, records trickle in one by one, and re-enqueueing
        // a task for each would pay a worker wake-up per record. The wait
        // is short so that other stages sharing the arena are not starved;
        // with arena slicing it ends as soon as another task waits for a
        // slot (checked every 50 us).
        const int lingerTurns = slice > 0 ? 4 : 1;
        const auto lingerWait = std::chrono::microseconds(200 / lingerTurns);
        int lingered = 0;
        for (;;) {
          while (dispatched_ < tail_ && slot(dispatched_).marker != Slot::None)
            ++dispatched_;
          if (cancel_ || dispatched_ < tail_ || lingered >= lingerTurns ||
              activeTasks_ > parallelism_ ||
              shared_.cancelled.load(std::memory_order_relaxed) ||
              (slice > 0 && arena.waiting() > 0))
            break;
          ++idleWorkers_;
          work_.wait_for(lock, lingerWait);
          --idleWorkers_;
          ++lingered;
        }
        // Also leave when the parallelism was lowered while running.
        if (cancel_ || dispatched_ >= tail_ || activeTasks_ > parallelism_ ||
            shared_.cancelled.load(std::memory_order_relaxed)) {
          --activeTasks_;
          if (timing)
            chargeTime(ns.data(), threadCpuNs() - cpu0);
          adaptChunk(runNs, items);
          idle_.notify_all();
          return;
        }
        a = dispatched_;
        b = a;
        while (b < tail_ && b - a < static_cast<uint64_t>(chunk_) &&
               slot(b).marker == Slot::None)
          ++b;
        dispatched_ = b;
        drops = knownDrops_;
      }
      // Slots [a, b) belong to this worker until they are marked done.
      int64_t runStart = nowNs();
      for (uint64_t p = a; p < b; ++p) {
        Slot &s = slot(p);
        // Direct output: claim the record's batch row first so the step
        // that makes its result in one pass writes it there.
        bool claimed = placer_ && shared_.directOutput &&
                       placer_->claim(p - drops, rowViews, targets);
        {
          OutputTargetScope scope(claimed ? &targets : nullptr);
          process(s.item, s.outcome, ns.data());
        }
        targets.clear();
        if (placer_ && s.outcome.kind == Outcome::Kept) {
          int64_t t0 = shared_.timing ? nowNs() : 0;
          if (claimed)
            placer_->placeClaimed(p - drops, s.item.rec, rowViews);
          else
            placer_->place(p - drops, s.item.rec);
          if (shared_.timing)
            ns[ops_.size() - 1] += nowNs() - t0;
        }
        // Do not keep the batch buffer alive past its batch.
        rowViews.clear();
      }
      int64_t t = nowNs();
      runNs += t - runStart;
      items += static_cast<int64_t>(b - a);
      // Charge the work done so far every few milliseconds, not only when
      // the worker leaves: a worker of the bottleneck stage never runs out
      // of input, and its time must show in the counters while it runs
      // (the autotuner's probes and re-planner read them live).
      if (t - lastCharge >= kChargeNs) {
        if (timing) {
          int64_t cpu = threadCpuNs();
          chargeTime(ns.data(), cpu - cpu0);
          std::fill(ns.begin(), ns.end(), 0);
          cpu0 = cpu;
        }
        adaptChunk(runNs, items);
        items = runNs = 0;
        lastCharge = t;
      }
      std::lock_guard<std::mutex> lock(mu_);
      for (uint64_t p = a; p < b; ++p) {
        Slot &s = slot(p);
        int64_t now = recordBytes(s.item.rec);
        if (now > s.bytes)
          account_->forceReserve(now - s.bytes);
        else
          account_->release(s.bytes - now);
        s.bytes = now;
        s.done = true;
        if (s.outcome.kind != Outcome::Kept)
          ++knownDrops_;
      }
      if (handoff_ > 1 ? headReady() : a <= head_)
        ready_.notify_one();
      // Arena slicing: after a slice, give the slot to a task waiting for
      // one (another step's worker) and go on in a task enqueued behind it;
      // this worker stays counted in activeTasks_ until that task leaves,
      // so shutdown() waits for it and the feeder starts no extra one.
      if (slice > 0 && t - sliceStart >= slice && arena.waiting() > 0 &&
          !cancel_ && dispatched_ < tail_ &&
          !shared_.cancelled.load(std::memory_order_relaxed)) {
        if (timing)
          chargeTime(ns.data(), threadCpuNs() - cpu0);
        adaptChunk(runNs, items);
        inc(ops_.front().counters->slotsGiven);
        enqueueTask(arena, [this] { workLoop(); });
        return;
      }
    }
  }

  /// Whether the consumer takes records now (under mu_): the head record
  /// is finished and, with batched hand-offs, so are the `handoff_` records
  /// from it, or every record in the window (nothing else can finish before
  /// the consumer frees slots), or the run reaches a marker.
  bool headReady() {
    if (!(head_ < tail_ && slot(head_).done))
      return false;
    int64_t n = 0;
    for (uint64_t p = head_; p < tail_; ++p) {
      const Slot &s = slot(p);
      if (!s.done)
        return false;
      if (s.marker != Slot::None || ++n >= handoff_)
        return true;
    }
    return true;
  }

  /// Sizes runs of records so that a task works ~20us between lock
  /// acquisitions: tiny records go in runs, large images one by one.
  void adaptChunk(int64_t total, int64_t items) {
    if (items <= 0)
      return;
    int64_t per = std::max<int64_t>(1, total / items);
    chunk_ = std::clamp<int64_t>(20000 / per, 1, maxChunk_.load());
  }

  Expected<bool> produceParallel(Item &out) {
    for (;;) {
      if (taken_.empty()) {
        std::unique_lock<std::mutex> lock(mu_);
        ops_.back().counters->sampleOccupancy(
            static_cast<int64_t>(tail_ - head_));
        ready_.wait(lock, [&] {
          return headReady() ||
                 shared_.cancelled.load(std::memory_order_relaxed);
        });
        if (!(head_ < tail_ && slot(head_).done))
          return cancelledError();
        Slot &s = slot(head_);
        if (s.marker == Slot::End)
          return false;
        if (s.marker == Slot::Error) {
          Status e = s.error;
          s.marker = Slot::End;
          return e;
        }
        ops_.back().counters->notePeakBytes(account_->used());
        // Take every finished record at the head (up to a worker's run, or
        // the hand-off run) in one go: one lock and one wake-up of the
        // feeder per run.
        int64_t limit = std::max<int64_t>({1, chunk_, handoff_});
        while (head_ < tail_ && static_cast<int64_t>(taken_.size()) < limit) {
          Slot &h = slot(head_);
          if (!h.done || h.marker != Slot::None)
            break;
          taken_.emplace_back(std::move(h.item), std::move(h.outcome));
          account_->release(h.bytes);
          h.bytes = 0;
          ++head_;
        }
        // Batched: the feeder (waiting for a free slot when the window is
        // full) is woken once `handoff_` slots are free, and fills them in
        // one go; at once when it waits for the memory just released.
        bool wakeFeeder = feederWaitsMemory_ ||
                          static_cast<int64_t>(static_cast<uint64_t>(active_) -
                                               (tail_ - head_)) >= handoff_;
        lock.unlock();
        if (wakeFeeder)
          notFull_.notify_one();
      }
      std::pair<Item, Outcome> next = std::move(taken_.front());
      taken_.pop_front();
      bool kept = false;
      Status st = commit(next.first, next.second, kept);
      if (!st)
        return st;
      if (kept) {
        out = std::move(next.first);
        return true;
      }
    }
  }

public:
  void wake() override {
    if (!parallel_)
      return;
    std::lock_guard<std::mutex> lock(mu_);
    ready_.notify_all();
    notFull_.notify_all();
    work_.notify_all();
  }

private:
  void shutdown() {
    if (!parallel_)
      return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel_ = true;
    }
    notFull_.notify_all();
    work_.notify_all();
    if (feeder_.joinable())
      feeder_.join();
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return activeTasks_ == 0; });
    inc(ops_.front().counters->discarded, static_cast<int64_t>(taken_.size()));
    taken_.clear();
    for (uint64_t p = head_; p < tail_; ++p) {
      Slot &s = slot(p);
      if (s.marker == Slot::None)
        inc(ops_.front().counters->discarded);
      account_->release(s.bytes);
      s = Slot();
    }
    head_ = dispatched_ = tail_ = 0;
  }

  std::vector<BoundStep> ops_;
  /// produceInline/produceMany scratch: time and bytes per step (see
  /// process()), a run of records.
  std::vector<int64_t> ns_ = std::vector<int64_t>(3 * ops_.size());
  std::vector<Item> run_;
  /// Run mode (runs()): one RowsFilterFn per step, scratch.
  bool runsOk_ = false;
  std::vector<RowsFilterFn> rowsFilters_;
  std::vector<uint8_t> keepFlags_;
  std::vector<uint32_t> nextKeep_;
  bool parallel_;
  int64_t parallelism_;
  int64_t window_;
  /// Window slots the feeder fills: all of window_ at the parallelism it
  /// was sized for, perWorker_ fewer per worker less (a window sized for
  /// every thread so that a controller can raise the parallelism in flight
  /// is not filled while fewer workers run: its items would be buffers
  /// first touched for nothing). perWorker_ 0: always window_.
  int64_t perWorker_ = 0;
  int64_t active_ = 0;
  int64_t activeFor(int64_t p) const {
    if (perWorker_ <= 0)
      return window_;
    int64_t sizedFor = std::max<int64_t>(1, shared_.threads);
    return std::clamp<int64_t>(
        window_ - perWorker_ * (sizedFor - std::max<int64_t>(1, p)), 2,
        window_);
  }
  ElementContext ctx_;

  std::mutex mu_;
  std::condition_variable ready_, notFull_, idle_, work_;
  std::vector<Slot> slots_;
  /// Finished records the consumer took from the window but has not
  /// returned yet.
  std::deque<std::pair<Item, Outcome>> taken_;
  uint64_t head_ = 0, dispatched_ = 0, tail_ = 0;
  /// Records of this pass that workers finished and did not keep.
  uint64_t knownDrops_ = 0;
  RowPlacer *placer_ = nullptr;
  int64_t activeTasks_ = 0;
  int64_t idleWorkers_ = 0;
  bool cancel_ = false;
  /// Batched hand-offs: the run of finished records the consumer waits
  /// for, and of free slots before it wakes the feeder (1: every record).
  int64_t handoff_ = 1;
  /// The feeder waits for budget the window holds (under mu_).
  bool feederWaitsMemory_ = false;
  static constexpr int64_t kMaxHandoff = 16;
  std::atomic<int64_t> chunk_{1};
  std::atomic<int64_t> maxChunk_{1};
  /// Workers charge their time to the counters at least this often.
  static constexpr int64_t kChargeNs = 2000000;
  std::thread feeder_;
  MemoryAccount *account_ = nullptr;
  /// What the steps allocate while they process a record.
  AccountAllocationLimit scratchLimit_;
};

} // namespace

std::unique_ptr<Stage> makeMapStage(Shared &shared,
                                    std::unique_ptr<Stage> upstream,
                                    std::vector<BoundStep> ops,
                                    int64_t parallelism, int64_t window,
                                    int64_t perWorker) {
  return std::make_unique<MapStage>(shared, std::move(upstream), std::move(ops),
                                    parallelism, window, perWorker);
}

} // namespace sluice::runtime::detail
