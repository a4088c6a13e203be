//===- PositionalSource.cpp - Reading the source by position --------------===//
//
// The source stage used for ranks, `shuffle: true` sources and positional
// resume (Shared::Positional). Each epoch has one global order of all the
// source's records: the sorted order, or with `shuffle: true` a permutation
// derived from (seed, epoch) alone. Rank r of W reads the positions
// start + r, start + r + W, ... of that order, where `start` is 0 except in
// the epoch a resumed run continues (the positions done before the state
// was saved). A record is numbered by its global position, which seeds its
// random choices downstream, so a record comes out the same at any world
// size and after a resume at another one: the union of the ranks' outputs
// is the single-process run's.
//
// How a position is read depends on the source: image_folder and files hold
// one record per shard, so a position is one file opened directly; idx and
// npy read out of order (`shuffle: true`) from a table of their records
// loaded once into memory (counted in budget.memory); any other source, and
// idx/npy in sorted order, are read front to back, skipping the positions of
// other ranks (cheap next to the per-record steps, which run only on this
// rank's records).
//
// With explicit positions (RunOptions::positions, for `sluice serve`) the
// stage reads the listed positions in the listed order instead of a rank's
// share: the stage walks "steps" 0, 1, 2, ... of the list where it
// otherwise walks rank + k * world, and every step names its position. A
// source read front to back cannot seek backwards, so it reads from the
// in-memory table then, as `shuffle: true` does.
//
// As in the sequential source stage, what the readers hold while a file is
// open (block buffer, zlib state) and allocate for a record (a whole file's
// bytes, a declared length) is counted in "<source> reading"; a record the
// budget cannot hold is a data error of its file (readCounted).
//
//===----------------------------------------------------------------------===//
#include "Engine.h"
#include "FileWindow.h"
#include "sources/Remote.h"

#include "sluice/ops/Random.h"

#include <numeric>

namespace sluice::runtime::detail {

namespace {

/// The Rng stream of the source permutation ("perm").
constexpr uint64_t kPermutationStream = 0x7065726d;

class PositionalSourceStage : public Stage {
public:
  PositionalSourceStage(Shared &s, StageCounters *c)
      : Stage(s, nullptr, c),
        scratchLimit_(s.memory->account(c->name() + " reading"),
                      /*credit=*/true) {
    const Source &src = *s.source;
    perShard_ = src.oneRecordPerShard();
    if (s.positional.order)
      orderAccount_ = s.memory->account(s.positional.order->name + " order");
    if (perShard_)
      n_ = static_cast<int64_t>(src.numShards());
    else if (std::optional<int64_t> n = src.sizeHint())
      n_ = *n;
    // Local files, one per position: the next positions' files are read on
    // the arena while this one is handed on (FileWindow.h). Remote objects
    // have their GETs in flight instead (prefetch below).
    if (perShard_ && src.prefetchDepth() == 0 && s.fileReadAhead &&
        s.threads > 1 && s.arena != nullptr) {
      window_ = std::make_unique<FileWindow>(
          s, scratchLimit_, s.memory->account(c->name() + " read-ahead"), c,
          FileWindow::widthFor(s.threads), FileWindow::readersFor(s.threads));
    }
  }

protected:
  Status onStart(uint64_t epoch) override {
    Status s = startWalk(epoch);
    if (!s || !shared_.positional.order)
      return s;
    return foldOrder(epoch);
  }

  /// Where this pass's walk starts, steps and ends, and the permutation of
  /// `shuffle: true`.
  Status startWalk(uint64_t epoch) {
    const Shared::Positional &P = shared_.positional;
    int64_t start = 0;
    if (!resumed_ && static_cast<int64_t>(epoch) == P.resumeEpoch &&
        passInEpoch() == 0) {
      start = P.resumeStart;
      resumed_ = true;
    }
    next_ = start + P.rank;
    stride_ = P.world;
    end_ = n_;
    if (P.positions) {
      next_ = 0;
      stride_ = 1;
      end_ = static_cast<int64_t>(P.positions->size());
      for (int64_t p : *P.positions)
        if (p < 0 || (n_ >= 0 && p >= n_))
          return Status::error(
              shared_.plan->where(shared_.plan->source) + ": position " +
              std::to_string(p) + " is outside the source's " +
              (n_ >= 0 ? std::to_string(n_) : std::string("unknown")) +
              " records");
    }
    prefetchFrom_ = next_;
    nextNamed_ = 0;
    if (window_)
      window_->clear();
    windowFrom_ = next_;
    cursor_.reset();
    cursorShard_ = 0;
    cursorPos_ = 0;
    if (!P.permute && !P.positions)
      return Status::ok();
    if (n_ < 0)
      return Status::error(
          shared_.plan->where(shared_.plan->source) + ": source '" +
          shared_.source->kind() + "' cannot say how many records it has, " +
          (P.permute ? "so it cannot shuffle them"
                     : "so it cannot be read at given positions"));
    if (!perShard_ && !tableLoaded_) {
      Status s = loadTable();
      if (!s)
        return s;
    }
    if (!P.permute)
      return Status::ok();
    if (nextPermEpoch_ == static_cast<int64_t>(epoch)) {
      // Computed as the last epoch ended (nameNextEpoch).
      perm_.swap(nextPerm_);
      nextPermEpoch_ = -1;
    } else {
      permutation(epoch, perm_);
    }
    return Status::ok();
  }

  /// Shuffle by position: the walk's steps in the order the shuffle step
  /// after the source would give them this pass (Shared::Positional::order).
  /// The records are read in that order, one at a time, instead of the
  /// shuffle buffering them all.
  Status foldOrder(uint64_t epoch) {
    std::vector<int64_t> walk;
    if (end_ > next_)
      walk.reserve(static_cast<size_t>((end_ - next_ + stride_ - 1) / stride_));
    for (int64_t step = next_; step < end_; step += stride_)
      walk.push_back(step);
    folded_ = false;
    orderAccount_->release(orderBytes_);
    orderBytes_ = 0;
    fold_.clear();
    fold_.shrink_to_fit();
    int64_t bytes = static_cast<int64_t>(2 * walk.size() * sizeof(int64_t));
    if (!orderAccount_->tryReserve(bytes))
      return Status::error(shared_.plan->where(*shared_.positional.order) +
                           ": the order of " + std::to_string(walk.size()) +
                           " positions (" + formatBytes(bytes) +
                           ") does not fit in " + shared_.budgetName + " " +
                           formatBytes(shared_.memory->limit()) + "; raise it");
    orderBytes_ = bytes;
    fold_ = shared_.positional.replay->order(*shared_.positional.order,
                                             shared_.plan->seed, epoch,
                                             passInEpoch(), walk);
    folded_ = true;
    next_ = 0;
    stride_ = 1;
    end_ = static_cast<int64_t>(fold_.size());
    prefetchFrom_ = 0;
    windowFrom_ = 0;
    return Status::ok();
  }

  void onStop() override {
    if (window_)
      doneBytes_ += window_->clear();
    if (cursor_)
      doneBytes_ += static_cast<int64_t>(cursor_->bytesRead());
    cursor_.reset();
    // Nothing reads any more: the threads' budget credit goes back.
    scratchLimit_.returnCredit();
  }

  Expected<bool> produce(Item &out) override {
    const Shared::Positional &P = shared_.positional;
    const Source &src = *shared_.source;
    for (;;) {
      if (end_ >= 0 && next_ >= end_)
        return false;
      int64_t step = next_;
      next_ += stride_;
      int64_t p = positionAt(step);
      int64_t id = idAt(step);
      ReadResult rr = ReadResult::end();
      if (perShard_) {
        // Remote objects: the next positions' GETs go out now, in the
        // order they will be opened, in bursts when there is latency to
        // spare (RequestBursts); the next position's always.
        if (size_t depth = src.prefetchDepth()) {
          prefetchFrom_ = std::max(prefetchFrom_, next_);
          const int64_t want = next_ + static_cast<int64_t>(depth) * stride_;
          int64_t until = std::min<int64_t>(end_, want);
          SubmitBatch batch;
          const bool topUp =
              bursts_.topUp(
                  depth, static_cast<size_t>((want - prefetchFrom_) / stride_),
                  readerStalls()) ||
              prefetchFrom_ == next_;
          if (topUp)
            for (; prefetchFrom_ < until; prefetchFrom_ += stride_)
              src.prefetch(static_cast<size_t>(idAt(prefetchFrom_)));
          if (topUp && want > end_)
            nameNextEpoch(src, (want - end_ + stride_ - 1) / stride_);
        }
        if (window_) {
          rr = takeFromWindow(step, static_cast<size_t>(id), out.rec);
        } else {
          std::unique_ptr<ShardReader> r = open(static_cast<size_t>(id));
          rr = readCounted(scratchLimit_, *r, out.rec,
                           src.shardName(static_cast<size_t>(id)));
          doneBytes_ += static_cast<int64_t>(r->bytesRead());
        }
        out.origin.shard = id;
        out.origin.record = 0;
        if (rr.isEnd())
          continue; // an empty file holds no record
      } else if (P.permute || P.positions) {
        const Entry &e = table_[static_cast<size_t>(id)];
        rr = e.result;
        out.rec = e.rec; // shares the table's buffers
        out.origin = e.origin;
      } else {
        rr = seek(p, out);
        if (rr.isEnd())
          return false;
      }
      c_->read.fetch_add(1, std::memory_order_relaxed);
      if (rr.isError()) {
        if (Status st = sourceRecordError(shared_, *c_, rr.error()); !st)
          return st;
        continue;
      }
      out.rec.index = static_cast<uint64_t>(
          P.numberPasses ? static_cast<int64_t>(passInEpoch()) * n_ + p : p);
      c_->emitted.fetch_add(1, std::memory_order_relaxed);
      c_->bytesIn.store(
          doneBytes_ +
              (cursor_ ? static_cast<int64_t>(cursor_->bytesRead()) : 0),
          std::memory_order_relaxed);
      return true;
    }
  }

private:
  /// Near the pass's end, the next epoch's first `count` objects of this
  /// rank are asked for (Source::prefetch with nextPass), as the sequential
  /// source stage does: the epoch boundary then waits for no round trip.
  /// Only where that walk is known now: a walk of the whole source (not a
  /// resumed one, nor given positions, nor shuffle by position), the next
  /// pass the next epoch's first (no `repeat`), and the next epoch's
  /// permutation computed here once (kept for it: startWalk takes it).
  void nameNextEpoch(const Source &src, int64_t count) {
    const Shared::Positional &P = shared_.positional;
    if (!shared_.sourceReadAfter(epoch()) || shared_.sourceRepeats ||
        !perShard_ || P.positions || P.order || n_ <= 0)
      return;
    if (P.permute && nextPermEpoch_ != static_cast<int64_t>(epoch()) + 1) {
      permutation(epoch() + 1, nextPerm_);
      nextPermEpoch_ = static_cast<int64_t>(epoch()) + 1;
    }
    for (; nextNamed_ < count; ++nextNamed_) {
      int64_t p = P.rank + nextNamed_ * P.world;
      if (p >= n_)
        break;
      src.prefetch(static_cast<size_t>(
                       P.permute ? nextPerm_[static_cast<size_t>(p)] : p),
                   /*nextPass=*/true);
    }
  }

  /// `shuffle: true`'s order of epoch `epoch`: a permutation derived from
  /// (seed, epoch) alone.
  void permutation(uint64_t epoch, std::vector<int64_t> &perm) const {
    perm.resize(static_cast<size_t>(n_));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    Rng rng(shared_.plan->seed, epoch, 0, kPermutationStream);
    for (int64_t i = n_ - 1; i > 0; --i)
      std::swap(perm[static_cast<size_t>(i)],
                perm[static_cast<size_t>(rng.uniformInt(0, i + 1))]);
  }

  /// The global position read at step `step` of the walk (rank + k *
  /// world, or the k-th explicit position).
  int64_t positionAt(int64_t step) const {
    const Shared::Positional &P = shared_.positional;
    if (folded_)
      step = fold_[static_cast<size_t>(step)];
    return P.positions ? (*P.positions)[static_cast<size_t>(step)] : step;
  }
  /// The shard (or table entry) that holds the record of step `step`.
  int64_t idAt(int64_t step) const {
    int64_t p = positionAt(step);
    return shared_.positional.permute ? perm_[static_cast<size_t>(p)] : p;
  }

  /// The file of step `p` (shard `id`) from the window: the steps after it
  /// are named first, so it holds the next `width` of this rank.
  ReadResult takeFromWindow(int64_t p, size_t id, Record &rec) {
    auto fill = [&] {
      windowFrom_ = std::max(windowFrom_, p);
      if (!window_->wantsMore())
        return;
      for (; window_->size() < window_->width() && windowFrom_ < end_ &&
             window_->roomForMore();
           windowFrom_ += stride_)
        window_->push(static_cast<size_t>(idAt(windowFrom_)));
    };
    fill();
    int64_t waited = 0;
    FileWindow::Shard sh = window_->pop(&waited);
    excludeTime(waited);
    if (sh.refusedByBudget() || sh.shard != id) {
      // Refused by the budget beside the other reads (or, never expected,
      // not the file of this position): drop what the window holds and
      // read this file here, alone, as without the window.
      doneBytes_ += window_->clear();
      windowFrom_ = p + stride_;
      std::unique_ptr<ShardReader> r = open(id);
      ReadResult rr = readCounted(scratchLimit_, *r, rec, src().shardName(id));
      doneBytes_ += static_cast<int64_t>(r->bytesRead());
      fill();
      return rr;
    }
    doneBytes_ += sh.bytesRead;
    fill();
    rec = std::move(sh.entries.front().rec);
    return std::move(sh.entries.front().result);
  }
  const Source &src() const { return *shared_.source; }

  struct Entry {
    ReadResult result = ReadResult::end();
    Record rec;
    Origin origin;
  };

  /// Opens shard `i` with its reader's buffers (block buffer, zlib state)
  /// counted in the budget while it is open, as the sequential source
  /// stage does ("<source> reading").
  std::unique_ptr<ShardReader> open(size_t i) {
    AllocationScope scope(&scratchLimit_);
    return shared_.source->open(i);
  }

  /// Reads front to back up to global position `p` (positions only grow
  /// within a pass); records of other positions are passed over.
  ReadResult seek(int64_t p, Item &out) {
    const Source &src = *shared_.source;
    for (;;) {
      if (!cursor_) {
        if (cursorShard_ >= src.numShards())
          return ReadResult::end();
        cursor_ = open(cursorShard_);
        openShard_ = cursorShard_++;
      }
      ReadResult rr = readCounted(scratchLimit_, *cursor_, out.rec,
                                  src.shardName(openShard_));
      if (rr.isEnd()) {
        doneBytes_ += static_cast<int64_t>(cursor_->bytesRead());
        cursor_.reset();
        continue;
      }
      int64_t pos = cursorPos_++;
      if (pos < p)
        continue;
      out.origin.shard = static_cast<int64_t>(openShard_);
      out.origin.record = static_cast<int64_t>(out.rec.index);
      return rr;
    }
  }

  /// Reads every record of an idx/npy source into memory once, for reading
  /// them in permuted order.
  Status loadTable() {
    const Source &src = *shared_.source;
    MemoryAccount *account =
        shared_.memory->account(shared_.plan->source.name + " (shuffle: true)");
    table_.clear();
    table_.reserve(static_cast<size_t>(n_));
    for (size_t s = 0; s < src.numShards(); ++s) {
      std::unique_ptr<ShardReader> r = open(s);
      for (;;) {
        Entry e;
        e.result = readCounted(scratchLimit_, *r, e.rec, src.shardName(s));
        if (e.result.isEnd())
          break;
        e.origin.shard = static_cast<int64_t>(s);
        e.origin.record = static_cast<int64_t>(e.rec.index);
        int64_t bytes = recordBytes(e.rec);
        if (!account->tryReserve(bytes))
          return Status::error(
              shared_.plan->where(shared_.plan->source) +
              ": error: `shuffle: true` holds the source's " +
              std::to_string(n_) +
              " records in memory and they do not fit "
              "in budget.memory " +
              formatBytes(shared_.memory->limit()) + " (" +
              formatBytes(account->used()) + " after " +
              std::to_string(table_.size()) +
              " records); raise budget.memory or shuffle with a `shuffle` "
              "step instead");
        table_.push_back(std::move(e));
      }
      doneBytes_ += static_cast<int64_t>(r->bytesRead());
    }
    if (static_cast<int64_t>(table_.size()) != n_)
      return Status::error(shared_.plan->where(shared_.plan->source) +
                           ": the source promised " + std::to_string(n_) +
                           " records and holds " +
                           std::to_string(table_.size()));
    tableLoaded_ = true;
    return Status::ok();
  }

  /// What the readers hold and allocate for the record they read; declared
  /// before the readers, which release into it as they close.
  AccountAllocationLimit scratchLimit_;
  bool perShard_ = false;
  int64_t n_ = -1;
  /// The walk: the next step, the step between two of this rank's, and
  /// where the walk ends (n_, or the explicit positions' count).
  int64_t next_ = 0;
  int64_t stride_ = 1;
  int64_t end_ = -1;
  int64_t prefetchFrom_ = 0; ///< the next position to prefetch
  RequestBursts bursts_;     ///< when the window of prefetches is topped up
  /// The file window (FileWindow.h), and the next position to name to it.
  std::unique_ptr<FileWindow> window_;
  int64_t windowFrom_ = 0;
  bool resumed_ = false;
  std::vector<int64_t> perm_;
  /// The next epoch's permutation, made as this one ends (nameNextEpoch),
  /// and its epoch (-1: none); the next epoch's first steps named so far.
  std::vector<int64_t> nextPerm_;
  int64_t nextPermEpoch_ = -1;
  int64_t nextNamed_ = 0;
  /// Shuffle by position: this pass's walk in the shuffle step's order
  /// (steps of the walk; the order and the walk it was made from are
  /// counted in orderAccount_).
  std::vector<int64_t> fold_;
  bool folded_ = false;
  MemoryAccount *orderAccount_ = nullptr;
  int64_t orderBytes_ = 0;
  std::vector<Entry> table_;
  bool tableLoaded_ = false;
  std::unique_ptr<ShardReader> cursor_;
  size_t cursorShard_ = 0, openShard_ = 0;
  int64_t cursorPos_ = 0;
  int64_t doneBytes_ = 0;
};

} // namespace

std::unique_ptr<Stage> makePositionalSourceStage(Shared &shared,
                                                 StageCounters *c) {
  return std::make_unique<PositionalSourceStage>(shared, c);
}

} // namespace sluice::runtime::detail
