//===- SourceStage.cpp - Reading the source's shards ----------------------===//
//
// The first stage: reads the source's shards in their sorted order (or, with
// `interleave`, `cycle_length` shards at a time, `block_length` records from
// each in turn, in tf.data's order) and numbers the records it reads 0, 1,
// 2, ... per epoch. That number is Record::index, the seed of every random
// choice made on the record downstream, so the enumeration order must not
// depend on threads or timing.
//
// With interleave and more than one thread, every open shard reads ahead on
// the arena into a small queue of its own (reads of several files overlap,
// and parsing runs in parallel); records are still taken from the queues in
// the fixed round-robin order, so the output does not change. Without
// interleave, a reader that can (csv, tsv) parses blocks of its file on the
// arena instead (RunOptions::parallelParse), charged to the same account.
//
// Bad records follow the source's on_error: skip counts them by reason and
// goes on; fail stops with the file, record, byte offset and reason.
//
//===----------------------------------------------------------------------===//
#include "Engine.h"
#include "FileWindow.h"
#include "sources/Remote.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <stdexcept>

namespace sluice::runtime::detail {

void noteSkipped(StageCounters &c, const DataError &e) {
  if (e.recoverable) {
    c.addSkipped(e.reason);
    return;
  }
  c.addSkipped(e.reason + ", rest of the file dropped");
  c.addWarning(e.message() + "; skipped (on_error: skip) together with " +
               "everything after it in the file");
}

Status sourceRecordError(const Shared &shared, StageCounters &c,
                         const DataError &e) {
  if (shared.onError == OnError::Skip) {
    noteSkipped(c, e);
    return Status::ok();
  }
  c.failed.fetch_add(1, std::memory_order_relaxed);
  return Status::error(e.message() + "\n  in source '" +
                       shared.plan->source.name + "' at " +
                       shared.plan->where(shared.plan->source) +
                       " (on_error: fail; add `on_error: skip` to the source "
                       "to drop bad records and count them)");
}

ReadResult readCounted(AllocationLimit &limit, ShardReader &reader, Record &rec,
                       const std::string &file) {
  AllocationScope scope(&limit);
  std::string problem;
  try {
    return reader.next(rec);
  } catch (const AllocationRefused &e) {
    problem = e.what();
  } catch (const std::bad_alloc &) {
    problem = "out of memory: the system refused an allocation "
              "(std::bad_alloc); lower budget.memory below what the host "
              "can give";
  } catch (const std::length_error &e) {
    problem = std::string("a buffer would be too large (") + e.what() + ")";
  }
  rec = Record();
  DataError e;
  e.where.file = file;
  e.reason = kRecordDoesNotFit;
  e.detail = problem;
  e.recoverable = false;
  return ReadResult::error(std::move(e));
}

namespace {

/// Records read ahead per open shard.
constexpr size_t kReadAhead = 16;

class SourceStage : public Stage {
public:
  SourceStage(Shared &s, StageCounters *c, int64_t cycle, int64_t block)
      // More slots than shards leave the extra ones empty, which the order
      // skips: the same records in the same order as with one slot per
      // shard, without a slot per unit of `cycle_length: 1e9`.
      : Stage(s, nullptr, c),
        cycle_(std::clamp<int64_t>(
            cycle, 1,
            std::max<int64_t>(1, static_cast<int64_t>(s.source->numShards())))),
        block_(std::max<int64_t>(1, block)),
        scratchLimit_(s.memory->account(c->name() + " reading"),
                      /*credit=*/true) {
    readAhead_ = cycle_ > 1 && s.threads > 1 && s.arena != nullptr;
    // Interleave's read-ahead already keeps the threads busy; block-parallel
    // parsing inside it would only add tasks.
    parallelParse_ =
        !readAhead_ && s.parallelParse && s.threads > 1 && s.arena != nullptr;
    // One file per shard, read in order: the next files are read on the
    // arena while this one is handed on (FileWindow.h).
    // (Remote objects have their GETs in flight ahead instead: prefetch.)
    const bool window = cycle_ == 1 && s.fileReadAhead && s.threads > 1 &&
                        s.arena != nullptr && s.source->oneRecordPerShard() &&
                        s.source->prefetchDepth() == 0;
    if (readAhead_ || parallelParse_ || window)
      account_ = s.memory->account(c->name() + " read-ahead");
    if (window)
      window_ = std::make_unique<FileWindow>(s, scratchLimit_, account_, c,
                                             FileWindow::widthFor(s.threads),
                                             FileWindow::readersFor(s.threads));
  }
  ~SourceStage() override { closeAll(); }

protected:
  Status onStart(uint64_t) override {
    if (passInEpoch() == 0)
      index_ = 0; // repetitions within an epoch keep numbering
    closeAll();
    for (int64_t i = 0; i < cycle_; ++i)
      slots_.push_back(std::make_unique<Slot>());
    nextShard_ = 0;
    prefetched_ = 0;
    nextPassNamed_ = 0;
    pos_ = 0;
    blockIndex_ = 0;
    open_ = 0;
    return Status::ok();
  }

  void onStop() override {
    closeAll();
    // Nothing reads any more: the threads' budget credit goes back.
    scratchLimit_.returnCredit();
  }

  // tf.data's interleave order: the cycle position moves on after
  // `block_length` records or when its shard ends; an empty slot takes the
  // next shard when the position reaches it.
  Expected<bool> produce(Item &out) override {
    if (window_)
      return produceFromWindow(out);
    const Source &src = *shared_.source;
    for (;;) {
      bool inputLeft = nextShard_ < src.numShards();
      if (!inputLeft && open_ == 0)
        return false;
      Slot &s = *slots_[pos_];
      if (!s.reader) {
        if (inputLeft) {
          s.shard = nextShard_++;
          // A source over remote objects fetches the next shards while
          // this one is read. The shard opened first in a pass is asked
          // for the same way (the fetch is taken at once): a sequential
          // source's first request then covers a window of chunks, not
          // one chunk that a second round trip follows (FetchAhead).
          // A per-file source's window is topped up in bursts when there
          // is latency to spare (RequestBursts); the shard opened now is
          // always asked for.
          if (const size_t depth = src.prefetchDepth(); depth > 0) {
            const size_t n = src.numShards(), until = s.shard + 1 + depth;
            prefetched_ = std::max(prefetched_, s.shard);
            SubmitBatch batch;
            const bool topUp =
                !src.oneRecordPerShard() ||
                bursts_.topUp(depth, until - prefetched_, readerStalls()) ||
                prefetched_ == s.shard;
            if (topUp)
              for (; prefetched_ < std::min(n, until); ++prefetched_)
                src.prefetch(prefetched_);
            // Near the pass's end, the next epoch's first shards (those
            // this pass has opened already): the boundary then costs no
            // round trip. The same objects as the next pass would ask for
            // at its start, taken by its readers (shard k is the same
            // object in every pass).
            if (topUp && until > n && nextPassFollows())
              for (; nextPassNamed_ < std::min(until - n, s.shard);
                   ++nextPassNamed_)
                src.prefetch(nextPassNamed_, /*nextPass=*/true);
          }
          {
            AllocationScope scope(&scratchLimit_);
            s.reader = src.open(s.shard);
          }
          if (parallelParse_)
            s.reader->setReadAhead(parseAhead());
          s.ended = false;
          s.bytes = 0;
          ++open_;
        } else {
          advance();
        }
        continue;
      }
      ReadResult rr = readahead() ? take(s, out.rec) : read(s, out.rec);
      if (rr.isEnd()) {
        doneBytes_ += readahead() ? s.bytes.load()
                                  : static_cast<int64_t>(s.reader->bytesRead());
        s.reader.reset();
        --open_;
        advance();
        continue;
      }
      ++index_;
      c_->read.fetch_add(1, std::memory_order_relaxed);
      size_t shard = s.shard;
      if (++blockIndex_ >= block_)
        advance();
      if (rr.isError()) {
        if (Status st = sourceRecordError(shared_, *c_, rr.error()); !st)
          return st;
        continue;
      }
      out.origin.shard = static_cast<int64_t>(shard);
      out.origin.record = static_cast<int64_t>(out.rec.index);
      out.rec.index = index_ - 1;
      c_->emitted.fetch_add(1, std::memory_order_relaxed);
      if (parallelParse_ && (index_ & 1023) == 0)
        foldParseCpu();
      c_->bytesIn.store(bytesRead(), std::memory_order_relaxed);
      return true;
    }
  }

  /// Runs need one shard at a time (no interleave) read on this thread;
  /// a reader that holds no run (ShardReader::nextRun returns 0) is read
  /// record by record, each record a run of one.
  bool runs() const override {
    return cycle_ == 1 && !readAhead_ && !window_ &&
           shared_.source->readsRuns();
  }

  Expected<bool> produceRun(ItemRun &run, int64_t max) override {
    run.selected = false;
    run.keep.clear();
    if (!slots_.empty()) {
      Slot &s = *slots_[pos_];
      int64_t k = 0;
      if (s.reader) {
        RecordRun rr;
        rr.columns = std::move(run.columns);
        {
          // As read(): the reader's buffers are counted in the budget.
          AllocationScope scope(&scratchLimit_);
          try {
            k = s.reader->nextRun(rr, max);
          } catch (const std::bad_alloc &e) {
            return Status::error(
                shared_.source->shardName(s.shard) + ": " + kRecordDoesNotFit +
                ": " +
                (dynamic_cast<const AllocationRefused *>(&e)
                     ? std::string(e.what())
                     : std::string("out of memory: the system refused an "
                                   "allocation (std::bad_alloc); lower "
                                   "budget.memory below what the host can "
                                   "give")));
          }
        }
        run.columns = std::move(rr.columns);
        if (k > 0) {
          index_ += static_cast<uint64_t>(k);
          c_->read.fetch_add(k, std::memory_order_relaxed);
          c_->emitted.fetch_add(k, std::memory_order_relaxed);
          run.rows = k;
          run.firstIndex = index_ - static_cast<uint64_t>(k);
          run.origin.shard = static_cast<int64_t>(s.shard);
          run.origin.record = rr.first;
          if (parallelParse_ && (runs_++ & 15) == 0)
            foldParseCpu();
          c_->bytesIn.store(bytesRead(), std::memory_order_relaxed);
          return true;
        }
      }
    }
    // The next record on its own (opening the next shard, or an error).
    Item it;
    Expected<bool> r = produce(it);
    if (!r || !*r)
      return r;
    run.columns.resize(it.rec.fields.size());
    for (size_t f = 0; f < it.rec.fields.size(); ++f) {
      Tensor &t = it.rec.fields[f];
      if (!t.valid() || !t.isNumeric())
        return Status::error("internal error: a run of records with a "
                             "non-numeric field");
      std::vector<int64_t> shape{1};
      shape.insert(shape.end(), t.shape().begin(), t.shape().end());
      run.columns[f] = Tensor::viewOf(t, 0, t.elem(), std::move(shape));
    }
    run.rows = 1;
    run.firstIndex = it.rec.index;
    run.origin = it.origin;
    return true;
  }

private:
  /// produce() with the file window: the shards' records in shard order,
  /// as the slot path below reads them with one slot.
  Expected<bool> produceFromWindow(Item &out) {
    const Source &src = *shared_.source;
    for (;;) {
      if (pending_.empty()) {
        fillWindow(src);
        if (window_->size() == 0)
          return false;
        int64_t waited = 0;
        FileWindow::Shard sh = window_->pop(&waited);
        // Waiting for a worker's read is not this thread's work.
        excludeTime(waited);
        if (sh.refusedByBudget()) {
          // A read ahead that the budget refused may have been refused
          // only because the reads beside it held memory: drop what the
          // window holds and read this file again here, alone, so the
          // budget decides as it does reading one file after another.
          doneBytes_ += window_->clear();
          nextShard_ = sh.shard + 1;
          sh = readHere(sh.shard);
        }
        doneBytes_ += sh.bytesRead;
        pendingShard_ = sh.shard;
        for (FileWindow::Entry &e : sh.entries)
          pending_.push_back(std::move(e));
        fillWindow(src);
      }
      FileWindow::Entry e = std::move(pending_.front());
      pending_.pop_front();
      if (e.result.isEnd())
        continue;
      ++index_;
      c_->read.fetch_add(1, std::memory_order_relaxed);
      if (e.result.isError()) {
        if (Status st = sourceRecordError(shared_, *c_, e.result.error()); !st)
          return st;
        continue;
      }
      out.rec = std::move(e.rec);
      out.origin.shard = static_cast<int64_t>(pendingShard_);
      out.origin.record = static_cast<int64_t>(out.rec.index);
      out.rec.index = index_ - 1;
      c_->emitted.fetch_add(1, std::memory_order_relaxed);
      c_->bytesIn.store(doneBytes_, std::memory_order_relaxed);
      return true;
    }
  }

  /// Names shards to the window, once it is half empty, until it is full
  /// or none are left.
  void fillWindow(const Source &src) {
    if (!window_->wantsMore())
      return;
    while (window_->size() < window_->width() && nextShard_ < src.numShards() &&
           window_->roomForMore())
      window_->push(nextShard_++);
  }

  /// Reads a whole shard on this thread (as a window task would).
  FileWindow::Shard readHere(size_t shard) {
    FileWindow::Shard sh;
    sh.shard = shard;
    std::unique_ptr<ShardReader> reader;
    {
      AllocationScope scope(&scratchLimit_);
      reader = shared_.source->open(shard);
    }
    const std::string name = shared_.source->shardName(shard);
    for (;;) {
      FileWindow::Entry e;
      e.result = readCounted(scratchLimit_, *reader, e.rec, name);
      const bool end = e.result.isEnd();
      sh.entries.push_back(std::move(e));
      if (end)
        break;
    }
    sh.bytesRead = static_cast<int64_t>(reader->bytesRead());
    return sh;
  }

  struct Slot;
  /// Reads the next record of a slot's shard, its allocations counted.
  ReadResult read(Slot &s, Record &rec) {
    return readCounted(scratchLimit_, *s.reader, rec,
                       shared_.source->shardName(s.shard));
  }

  /// What a read-ahead task read: a record, an error or the end.
  struct Entry {
    ReadResult result = ReadResult::end();
    Record rec;
    int64_t bytes = 0;
  };

  struct Slot {
    size_t shard = 0;
    std::unique_ptr<ShardReader> reader;
    // Read-ahead state, guarded by mu. While `reading`, only the task
    // touches the reader.
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Entry> queue;
    bool reading = false;
    bool ended = false;
    bool cancel = false;
    std::atomic<int64_t> bytes{0};
  };

  bool readahead() const { return readAhead_; }

  ReadAhead parseAhead() const {
    ReadAhead ra;
    TaskArena *arena = shared_.arena;
    // The parse tasks' CPU time is the source's cost too (the autotuner
    // reads it); they add it to a counter that outlives them, and
    // foldParseCpu() moves it into the stage's counters.
    ra.spawn = [arena, cpu = parseCpuNs_](std::function<void()> task) {
      enqueueTask(*arena, [cpu, task = std::move(task)] {
        int64_t t0 = threadCpuNs();
        task();
        cpu->fetch_add(threadCpuNs() - t0, std::memory_order_relaxed);
      });
    };
    ra.memory = account_;
    // Enough blocks for every thread to parse one while the consumer
    // emits another.
    ra.maxInFlight = static_cast<size_t>(shared_.threads) + 2;
    return ra;
  }

  void schedule(Slot &s) {
    s.reading = true;
    enqueueTask(*shared_.arena, [this, &s] { readLoop(s); });
  }

  void readLoop(Slot &s) {
    // Acquire the slot's lock once so the reader handed over by schedule()
    // is visibly published to this thread (also for ThreadSanitizer, which
    // does not see oneTBB's internal synchronization).
    {
      std::lock_guard<std::mutex> lock(s.mu);
    }
    for (;;) {
      Entry e;
      e.result = read(s, e.rec);
      e.bytes = recordBytes(e.rec);
      account_->forceReserve(e.bytes);
      s.bytes.store(static_cast<int64_t>(s.reader->bytesRead()),
                    std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(s.mu);
      bool end = e.result.isEnd();
      s.queue.push_back(std::move(e));
      if (end)
        s.ended = true;
      if (end || s.cancel || s.queue.size() >= kReadAhead) {
        s.reading = false;
        s.cv.notify_all();
        return;
      }
      s.cv.notify_all();
    }
  }

  /// The next entry of a slot's queue, reading ahead as needed.
  ReadResult take(Slot &s, Record &rec) {
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.queue.empty() && !s.reading && !s.ended)
      schedule(s);
    s.cv.wait(lock, [&] { return !s.queue.empty(); });
    Entry e = std::move(s.queue.front());
    s.queue.pop_front();
    account_->release(e.bytes);
    if (!s.ended && !s.reading && s.queue.size() <= kReadAhead / 2)
      schedule(s);
    rec = std::move(e.rec);
    return std::move(e.result);
  }

  void advance() {
    blockIndex_ = 0;
    pos_ = (pos_ + 1) % slots_.size();
  }

  void closeAll() {
    if (window_) {
      doneBytes_ += window_->clear();
      pending_.clear();
    }
    for (auto &sp : slots_) {
      Slot &s = *sp;
      if (readahead()) {
        std::unique_lock<std::mutex> lock(s.mu);
        s.cancel = true;
        s.cv.wait(lock, [&] { return !s.reading; });
        for (const Entry &e : s.queue)
          account_->release(e.bytes);
        s.queue.clear();
      }
      if (s.reader)
        doneBytes_ += static_cast<int64_t>(s.reader->bytesRead());
    }
    slots_.clear(); // waits for parse tasks under way
    open_ = 0;
    foldParseCpu();
  }

  int64_t bytesRead() {
    // Finished readers are folded into doneBytes_ when they close.
    int64_t n = doneBytes_;
    for (const auto &s : slots_)
      if (s->reader)
        n += readahead() ? s->bytes.load(std::memory_order_relaxed)
                         : static_cast<int64_t>(s->reader->bytesRead());
    return n;
  }

  void foldParseCpu() {
    if (int64_t ns = parseCpuNs_->exchange(0, std::memory_order_relaxed))
      c_->cpuNs.fetch_add(ns, std::memory_order_relaxed);
  }

  int64_t cycle_, block_;
  /// What the readers allocate for the record they read.
  AccountAllocationLimit scratchLimit_;
  bool readAhead_ = false;
  bool parallelParse_ = false;
  std::shared_ptr<std::atomic<int64_t>> parseCpuNs_ =
      std::make_shared<std::atomic<int64_t>>(0);
  MemoryAccount *account_ = nullptr;
  std::vector<std::unique_ptr<Slot>> slots_;
  /// The file window (FileWindow.h), and the records of the shard it last
  /// handed over that are still to be emitted.
  std::unique_ptr<FileWindow> window_;
  std::deque<FileWindow::Entry> pending_;
  size_t pendingShard_ = 0;
  size_t nextShard_ = 0;
  size_t prefetched_ = 0; ///< shards before it were named to prefetch()
  RequestBursts bursts_;  ///< when the window of prefetch()es is topped up
  /// The next pass's first shards named so far (prefetch(k, nextPass)).
  size_t nextPassNamed_ = 0;
  /// Whether the source is read again in the epoch after this one
  /// (Shared::sourceEpochs).
  bool nextPassFollows() const { return shared_.sourceReadAfter(epoch()); }
  size_t pos_ = 0;
  int64_t blockIndex_ = 0;
  int64_t open_ = 0;
  uint64_t index_ = 0;
  int64_t doneBytes_ = 0;
  uint64_t runs_ = 0;
};

} // namespace

std::unique_ptr<Stage> makeSourceStage(Shared &shared, StageCounters *c,
                                       int64_t cycleLength,
                                       int64_t blockLength) {
  return std::make_unique<SourceStage>(shared, c, cycleLength, blockLength);
}

} // namespace sluice::runtime::detail
