//===- BatchStage.cpp - batch, padded_batch, unbatch
//------------------------===//
//
// batch of fixed-shape numeric records is assembled in place: the parallel
// map stage feeding it copies each record into its row of the batch buffer
// as it finishes it (BatchRows below), and the batch stage only copies the
// rows that did not land in place. Large batch buffers come from the
// tensor buffer pool (sluice/ops/BufferPool.h) rather than fresh pages.
//
//===----------------------------------------------------------------------===//
#include "Engine.h"

#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Random.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/kernels/Layout.h"
#include "sluice/runtime/Pinned.h"
#include "sluice/runtime/Pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice::runtime::detail {

namespace {

void inc(std::atomic<int64_t> &a, int64_t n = 1) {
  a.fetch_add(n, std::memory_order_relaxed);
}

/// Rows this small, or batches this small, are copied with memcpy: a batch
/// that fits in the cache is best left there for its consumer.
constexpr size_t kStreamMinRowBytes = 4096;
constexpr size_t kStreamMinBatchBytes = size_t(2) << 20;

/// Copies one record's field into its row of a batch buffer. `stream` uses
/// non-temporal stores: the thread that fills a row never reads it again,
/// and streaming stores do not first load every destination line into the
/// cache, which halves the cost of copying a 600 KB record into a recycled
/// batch buffer on the hosts measured (and keeps the worker's cache for its
/// next record). Into freshly mapped pages, which the kernel has just zeroed
/// through the cache, plain stores were faster.
void copyRow(uint8_t *dst, const uint8_t *src, size_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && n >= 64) {
    size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i));
      __m128i b =
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i + 16));
      __m128i c =
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i + 32));
      __m128i d =
          _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i *>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i *>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i *>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i *>(dst + i + 48), d);
    }
    std::memcpy(dst + i, src + i, n - i);
    // Streaming stores are weakly ordered: complete them before the row is
    // published to another thread (through a lock or the batch handoff).
    _mm_sfence();
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

/// The row layout of a batch whose fields all have a static numeric type.
struct RowLayout {
  std::vector<ElemType> elems;
  std::vector<std::vector<int64_t>> shapes; ///< of one row
  std::vector<size_t> bytes;                ///< of one row
  std::vector<bool> stream;                 ///< copyRow's `stream` per field
  /// Whether every field's batch buffer comes from recycled memory (the
  /// buffer pool or malloc's free lists) rather than fresh pages. Workers
  /// place rows only then: placing into fresh pages moves ~150 page faults
  /// per 600 KB row onto the workers, where they were measured to cost more
  /// than the whole copy on the consumer.
  bool recycled = true;
  /// Where the buffers come from when they are page-locked (a
  /// RunOptions::pinBatches, Pinned.h): registered buffers that pool keeps.
  PinnedPool *pinned = nullptr;
  /// Where full batches are made when not pinned (RunOptions::
  /// outputBuffers): asked first, ordinary buffers when it declines.
  OutputBuffers *output = nullptr;

  /// The layout of batches of `size` records of `t`; nullopt when a field
  /// is not numeric or has a dynamic shape. With `pinned`, the buffers come
  /// from that pool (recycled memory, as the tensor buffer pool's).
  static std::optional<RowLayout> of(const RecordType &t, int64_t size,
                                     PinnedPool *pinned = nullptr,
                                     OutputBuffers *output = nullptr) {
    RowLayout l;
    for (const Field &f : t.fields()) {
      std::optional<int64_t> b = f.type.staticBytes();
      if (!isNumeric(f.type.elem) || !b)
        return std::nullopt;
      size_t rowBytes = static_cast<size_t>(*b);
      size_t batchBytes = rowBytes * static_cast<size_t>(size);
      // Tensor pads buffers to whole cache lines; the pool keys by that.
      bool pooled =
          pinned != nullptr || bufferPoolKeeps((batchBytes + 63) / 64 * 64);
      l.elems.push_back(f.type.elem);
      l.shapes.push_back(f.type.shape);
      l.bytes.push_back(rowBytes);
      l.stream.push_back(pooled && rowBytes >= kStreamMinRowBytes &&
                         batchBytes >= kStreamMinBatchBytes);
      l.recycled = l.recycled && (pooled || batchBytes < kPoolMinBytes);
    }
    if (l.elems.empty())
      return std::nullopt;
    l.pinned = pinned;
    l.output = pinned ? nullptr : output;
    return l;
  }

  /// Whether `r` has exactly this layout.
  bool matches(const Record &r) const {
    if (r.fields.size() != elems.size())
      return false;
    for (size_t f = 0; f < elems.size(); ++f) {
      const Tensor &t = r.fields[f];
      if (!t.valid() || !t.isNumeric() || t.elem() != elems[f] ||
          t.shape() != shapes[f])
        return false;
    }
    return true;
  }

  /// Empty [rows, ...] buffers, one per field; `batch`: the pass's batch
  /// number of a full batch (-1: a short one), which `output` may make.
  std::vector<Tensor> allocate(int64_t rows, int64_t batch = -1) const {
    std::vector<Tensor> out;
    if (output && batch >= 0) {
      std::vector<std::vector<int64_t>> full;
      for (const std::vector<int64_t> &s : shapes) {
        full.push_back({rows});
        full.back().insert(full.back().end(), s.begin(), s.end());
      }
      out = output->allocate(static_cast<uint64_t>(batch), elems, full);
      if (out.size() == elems.size())
        return out;
      out.clear();
    }
    for (size_t f = 0; f < elems.size(); ++f) {
      std::vector<int64_t> shape{rows};
      shape.insert(shape.end(), shapes[f].begin(), shapes[f].end());
      out.push_back(pinned ? pinned->allocate(elems[f], std::move(shape))
                           : Tensor::empty(elems[f], std::move(shape)));
    }
    return out;
  }
};

/// The batch buffers the map stage's workers fill ahead of the batch stage.
/// Only the batch being assembled and the next one are open: that covers
/// every record of the map stage's window for batches of more than a window
/// of records, and bounds the memory held ahead to one batch, which the
/// batch stage's static memory need (2 x size records) already counts.
/// Each row is claimed once, so a record placed at a wrong (too late)
/// position is never overwritten by another placement; the batch stage
/// copies it from there into its real row before it writes that row.
class BatchRows final : public RowPlacer {
public:
  /// `ahead` counts the open buffers' rows that hold no record yet (a
  /// placed row is counted by the record, a view of it).
  BatchRows(const RowLayout &layout, int64_t size, MemoryAccount *ahead,
            StageCounters *counters)
      : layout_(layout), size_(static_cast<uint64_t>(size)), ahead_(ahead),
        counters_(counters) {}
  ~BatchRows() override { reset(); }

  bool claim(uint64_t pos, std::vector<Tensor> &rowViews,
             std::vector<Tensor> &targets) override {
    // The worker's own list of the batch's buffers, kept for its capacity
    // (one allocation per thread, not per record) and emptied before
    // returning so that it never holds a batch buffer alive.
    thread_local std::vector<Tensor> dst;
    struct Empty {
      std::vector<Tensor> &v;
      ~Empty() { v.clear(); }
    } empty{dst};
    if (!claimRow(pos, dst))
      return false;
    uint64_t row = pos % size_;
    rowViews.clear();
    targets.clear();
    for (size_t f = 0; f < dst.size(); ++f) {
      rowViews.push_back(Tensor::viewOf(dst[f], row * layout_.bytes[f],
                                        layout_.elems[f], layout_.shapes[f]));
      size_t same = 0;
      for (size_t g = 0; g < dst.size(); ++g)
        same += layout_.elems[g] == layout_.elems[f] &&
                layout_.shapes[g] == layout_.shapes[f];
      targets.push_back(same == 1 ? rowViews.back() : Tensor());
    }
    return true;
  }

  void placeClaimed(uint64_t pos, Record &rec,
                    const std::vector<Tensor> &rowViews) override {
    (void)pos;
    if (!layout_.matches(rec) || rowViews.size() != rec.fields.size())
      return; // the batch stage copies it when it assembles the batch
    bool direct = false;
    for (size_t f = 0; f < rowViews.size(); ++f) {
      if (rec.fields[f].raw() != rowViews[f].raw())
        copyRow(const_cast<uint8_t *>(rowViews[f].raw()), rec.fields[f].raw(),
                layout_.bytes[f], layout_.stream[f]);
      else
        direct = true;
      rec.fields[f] = rowViews[f];
    }
    if (direct)
      counters_->rowsDirect.fetch_add(1, std::memory_order_relaxed);
  }

  void place(uint64_t pos, Record &rec) override {
    if (!layout_.matches(rec))
      return;
    uint64_t row = pos % size_;
    std::vector<Tensor> dst;
    if (!claimRow(pos, dst))
      return;
    for (size_t f = 0; f < dst.size(); ++f) {
      size_t offset = row * layout_.bytes[f];
      copyRow(dst[f].mutableRaw() + offset, rec.fields[f].raw(),
              layout_.bytes[f], layout_.stream[f]);
      rec.fields[f] =
          Tensor::viewOf(dst[f], offset, layout_.elems[f], layout_.shapes[f]);
    }
  }

private:
  /// Claims row `pos` (opening its batch buffer); false if the batch is
  /// not open or the row was claimed before. `dst`: the batch's buffers.
  bool claimRow(uint64_t pos, std::vector<Tensor> &dst) {
    uint64_t k = pos / size_, row = pos % size_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (k < firstOpen_ || k > firstOpen_ + 1)
        return false;
      Open &o = open_[k];
      if (o.refused)
        return false;
      if (o.claimed.empty()) {
        // On a worker's thread, where nothing may throw: a batch buffer
        // the budget (or the system) cannot give now is not opened ahead,
        // and the batch stage builds that batch itself, on its own thread,
        // where a refusal is the step's located error.
        try {
          o.claimed.assign(static_cast<size_t>(size_), false);
          o.fields = layout_.allocate(static_cast<int64_t>(size_),
                                      static_cast<int64_t>(k));
        } catch (const std::exception &) {
          o.claimed.clear();
          o.fields.clear();
          o.refused = true;
          return false;
        }
        int64_t bytes = 0;
        for (const Tensor &t : o.fields)
          bytes += static_cast<int64_t>(t.memoryBytes());
        if (!ahead_->tryReserve(bytes)) {
          o.claimed.clear();
          o.fields.clear();
          o.refused = true;
          return false;
        }
        o.unplaced = bytes;
      }
      if (o.claimed[row])
        return false;
      o.claimed[row] = true;
      dst = o.fields;
      int64_t rowBytes = 0;
      for (size_t f = 0; f < dst.size(); ++f)
        rowBytes += static_cast<int64_t>(layout_.bytes[f]);
      rowBytes = std::min(rowBytes, o.unplaced);
      o.unplaced -= rowBytes;
      ahead_->release(rowBytes);
    }
    return true;
  }

public:
  /// Closes batch `k` of the pass (and any before it) and returns its
  /// buffers, or nothing when no record was placed in it.
  std::vector<Tensor> take(uint64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    firstOpen_ = k + 1;
    std::vector<Tensor> out;
    auto it = open_.find(k);
    if (it != open_.end())
      out = std::move(it->second.fields);
    // From here the batch stage counts the buffer through its records.
    for (auto i = open_.begin(); i != open_.upper_bound(k); ++i)
      ahead_->release(i->second.unplaced);
    open_.erase(open_.begin(), open_.upper_bound(k));
    return out;
  }

  /// Forgets every open batch (a new pass starts at position 0).
  void reset() {
    std::map<uint64_t, Open> drop; // freed after the lock is released
    std::lock_guard<std::mutex> lock(mu_);
    drop.swap(open_);
    for (const auto &o : drop)
      ahead_->release(o.second.unplaced);
    firstOpen_ = 0;
  }

private:
  struct Open {
    std::vector<Tensor> fields;
    std::vector<bool> claimed;
    int64_t unplaced = 0; ///< bytes reserved in ahead_ for empty rows
    bool refused = false; ///< its buffer could not be had: built by batch
  };
  const RowLayout &layout_;
  const uint64_t size_;
  MemoryAccount *ahead_;
  StageCounters *counters_;
  std::mutex mu_;
  std::map<uint64_t, Open> open_;
  uint64_t firstOpen_ = 0;
};

/// batch and padded_batch: stacks `size` records into one contiguous tensor
/// per field (numeric: one allocation [B, ...]; strings: a list).
class BatchStage : public Stage {
public:
  BatchStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c,
             const PlanStep &step, bool padded)
      : Stage(s, std::move(up), c), step_(step), padded_(padded) {
    const Value &p = step.params;
    if (p["size"].isNumber())
      size_ = std::max<int64_t>(1, p["size"].asInt());
    dropRemainder_ =
        p["drop_remainder"].isBool() && p["drop_remainder"].asBool();
    if (p["pad_value"].isNumber())
      padValue_ = p["pad_value"].asDouble();
    // The padded shape of each field: dynamic dims padded to `length` when
    // given (an int for every dynamic dim, or a list per dynamic dim), else
    // to the longest item of the batch.
    std::vector<int64_t> lengths;
    const Value &len = p["length"];
    if (len.isNumber())
      lengths.push_back(len.asInt());
    else if (len.isList())
      lengths = len.asIntList();
    for (const Field &f : step.inputType.fields()) {
      std::vector<int64_t> shape;
      size_t dyn = 0;
      for (int64_t d : f.type.shape) {
        if (d != kDynamic) {
          shape.push_back(d);
          continue;
        }
        int64_t l = -1;
        if (lengths.size() == 1)
          l = lengths[0];
        else if (dyn < lengths.size())
          l = lengths[dyn];
        shape.push_back(l > 0 ? l : -1);
        ++dyn;
      }
      paddedShapes_.push_back(std::move(shape));
    }
    account_ = s.memory->account(step.name);
    c->bufferCapacity.store(size_);
    c->setFilterReason("drop_remainder");
    if (!padded_)
      layout_ = RowLayout::of(
          step.inputType, size_,
          s.pinned && step.name == s.pinnedStep ? s.pinned.get() : nullptr,
          s.outputBuffers && step.name == s.outputStep ? s.outputBuffers.get()
                                                       : nullptr);
    if (layout_ && layout_->recycled && s.batchRowPlacement) {
      rows_ = std::make_unique<BatchRows>(
          *layout_, size_, s.memory->account(step.name + " rows ahead"), c);
      if (!upstream_->attachRowPlacer(rows_.get()))
        rows_.reset();
    }
    runMode_ = s.recordRuns && layout_ && !rows_ && upstream_->runs();
  }

  ~BatchStage() override {
    // rows_ dies before the upstream map stage (a base-class member): stop
    // that stage's workers, which call rows_, first.
    if (rows_)
      upstream_->stop();
  }

  void staticNeeds(std::vector<StaticNeed> &out) const override {
    // The records being collected, the next batch the workers fill ahead
    // (or the batch built from the collected records), and the last batch,
    // held for the caller until it asks for the next.
    // Page-locked batches (pin_memory) keep one more buffer registered for
    // reuse, which the budget counts while it is idle.
    const bool pinned = layout_ && layout_->pinned;
    StaticNeed n;
    n.what = "the " + step_.op + " of " + std::to_string(size_) + " records" +
             (pinned ? " (page-locked for pin_memory, one more batch kept "
                       "registered for reuse)"
                     : "");
    n.records = (pinned ? 4 : 3) * size_;
    n.recordsPerKnob = pinned ? 4 : 3;
    n.type = step_.inputType;
    n.knob = step_.name + ".size";
    n.where = shared_.plan->where(step_);
    out.push_back(std::move(n));
  }

protected:
  Status onStart(uint64_t epoch) override {
    if (passInEpoch() == 0)
      batchIndex_ = 0;
    passBatch_ = 0;
    if (rows_)
      rows_->reset();
    return Stage::onStart(epoch);
  }

  void onStop() override {
    inc(c_->discarded, static_cast<int64_t>(items_.size()));
    clear();
    if (rows_)
      rows_->reset();
  }

  /// Pulls what the batch still lacks as runs of records (nextMany),
  /// reserving each record's bytes as the per-record loop below does.
  Status pullRun() {
    while (static_cast<int64_t>(items_.size()) < size_) {
      const size_t before = items_.size();
      Expected<size_t> r =
          pullMany(items_, static_cast<size_t>(size_) - before);
      if (!r)
        return r.status();
      if (*r == 0)
        return Status::ok();
      for (size_t i = before; i < items_.size(); ++i) {
        int64_t bytes = recordBytes(items_[i].rec);
        if (!account_->tryReserve(bytes)) {
          // The records after it were pulled in the same run: dropped too.
          inc(c_->discarded, static_cast<int64_t>(items_.size() - i));
          items_.resize(i);
          return budgetError();
        }
        bytes_ += bytes;
      }
      c_->notePeakBytes(bytes_);
    }
    return Status::ok();
  }

  /// A batch of rows of a static layout that cannot fit in the whole
  /// budget is refused before its first record is pulled. Waiting until
  /// the records being collected fill the budget would make the refusal
  /// land wherever the next reservation happens to be asked for (a worker's
  /// scratch, the source's read-ahead): a different step's error from run
  /// to run.
  Status fitsOnce() {
    if (fitChecked_)
      return Status::ok();
    fitChecked_ = true;
    const int64_t limit = shared_.memory->limit();
    if (!layout_ || limit <= 0)
      return Status::ok();
    int64_t rowBytes = 0;
    for (size_t b : layout_->bytes)
      rowBytes += static_cast<int64_t>(b);
    if (rowBytes > 0 && size_ > limit / rowBytes)
      return budgetError();
    return Status::ok();
  }

  Status budgetError() const {
    return Status::error(
        shared_.plan->where(step_) + ": error: a batch of " +
        std::to_string(size_) + " records does not fit in budget.memory " +
        formatBytes(shared_.memory->limit()) +
        " (buffers in use: " + shared_.memory->usageSummary() + "); lower " +
        step_.name + ".size or raise budget.memory" +
        (layout_ && layout_->pinned
             ? " (its batches are page-locked for pin_memory: the budget "
               "counts each batch handed out and the idle ones kept for "
               "reuse)"
             : ""));
  }

  /// Run mode: copies runs of rows (ItemRun) from their columns into the
  /// batch's buffers, a memcpy per field and run of consecutive kept rows,
  /// instead of one per field and record.
  Expected<bool> produceFromRuns(Item &out) {
    int64_t bufferBytes = 0;
    for (size_t f = 0; f < layout_->bytes.size(); ++f)
      bufferBytes += static_cast<int64_t>(Tensor::numericMemoryBytes(
          layout_->bytes[f] * static_cast<size_t>(size_)));
    // Allocated (no page touched yet, or recycled by the pool, which gives
    // back its idle reservation as it hands the buffer out) before it is
    // reserved, so that the bytes are never counted twice.
    std::vector<Tensor> placed =
        layout_->allocate(size_, static_cast<int64_t>(passBatch_));
    if (!account_->tryReserve(bufferBytes))
      return budgetError();
    struct Hold { // the buffer being filled, until it is handed on
      MemoryAccount *account;
      int64_t bytes;
      ~Hold() { account->release(bytes); }
    } hold{account_, bufferBytes};
    int64_t n = 0;
    while (n < size_) {
      Expected<bool> r = pullRows(run_, size_ - n);
      if (!r) {
        inc(c_->discarded, n);
        return r.status();
      }
      if (!*r)
        break;
      const int64_t k = run_.kept();
      if (k == 0)
        continue;
      if (k > size_ - n || run_.columns.size() != placed.size())
        return Status::error("internal error: " + step_.name +
                             " was handed a run that does not fit its batch");
      for (size_t f = 0; f < placed.size(); ++f) {
        const Tensor &col = run_.columns[f];
        const size_t rb = layout_->bytes[f];
        if (col.elem() != layout_->elems[f] ||
            col.nbytes() != rb * static_cast<size_t>(run_.rows))
          return Status::error("internal error: " + step_.name +
                               ": a run's field " + std::to_string(f) + " is " +
                               col.type().str());
        uint8_t *dst = placed[f].mutableRaw() + static_cast<size_t>(n) * rb;
        const uint8_t *src = col.raw();
        if (!run_.selected) {
          copyRow(dst, src, static_cast<size_t>(k) * rb, layout_->stream[f]);
          continue;
        }
        // Consecutive kept rows in one copy.
        const std::vector<uint32_t> &keep = run_.keep;
        for (size_t i = 0; i < keep.size();) {
          size_t j = i + 1;
          while (j < keep.size() && keep[j] == keep[j - 1] + 1)
            ++j;
          copyRow(dst, src + size_t(keep[i]) * rb, (j - i) * rb,
                  layout_->stream[f]);
          dst += (j - i) * rb;
          i = j;
        }
      }
      n += k;
      inc(c_->rowsFromRuns, k);
      c_->notePeakBytes(bufferBytes);
    }
    run_.columns.clear(); // the source's block is not held past the batch
    if (n == 0)
      return false;
    c_->sampleOccupancy(n);
    if (n < size_ && dropRemainder_) {
      inc(c_->filtered, n);
      return false;
    }
    ++passBatch_;
    if (n < size_) {
      // A partial batch has its own shape.
      std::vector<Tensor> part = layout_->allocate(n);
      for (size_t f = 0; f < part.size(); ++f)
        std::memcpy(part[f].mutableRaw(), placed[f].raw(), part[f].nbytes());
      placed = std::move(part);
    }
    return emit(std::move(placed), n, out);
  }

  Expected<bool> produce(Item &out) override {
    if (Status st = fitsOnce(); !st)
      return st;
    if (runMode_)
      return produceFromRuns(out);
    const bool bulk = shared_.bulkPull && !rows_;
    if (bulk) {
      if (Status st = pullRun(); !st)
        return st;
    }
    while (!bulk && static_cast<int64_t>(items_.size()) < size_) {
      Item in;
      Expected<bool> r = pull(in);
      if (!r)
        return r;
      if (!*r)
        break;
      int64_t bytes = recordBytes(in.rec);
      if (!account_->tryReserve(bytes)) {
        inc(c_->discarded);
        return budgetError();
      }
      bytes_ += bytes;
      c_->notePeakBytes(bytes_);
      items_.push_back(std::move(in));
    }
    if (items_.empty())
      return false;
    int64_t n = static_cast<int64_t>(items_.size());
    c_->sampleOccupancy(n);
    if (n < size_ && dropRemainder_) {
      inc(c_->filtered, n);
      clear();
      return false;
    }
    std::vector<Tensor> placed;
    if (rows_)
      placed = rows_->take(passBatch_);
    ++passBatch_;
    // A batch built in a new buffer is held beside its records until
    // emit(): count it. (One the workers filled is counted by its records.)
    const bool fresh = placed.empty() || n < size_;
    const bool rows = layout_ && std::all_of(items_.begin(), items_.end(),
                                             [&](const Item &it) {
                                               return layout_->matches(it.rec);
                                             });
    // A partial batch has its own shape: copy every row into it. Allocated
    // before it is counted: a buffer the pool recycles gives back its idle
    // reservation as it is taken, and counting it first would count those
    // bytes twice at the budget's peak.
    if (rows && fresh)
      placed = layout_->allocate(
          n, n == size_ ? static_cast<int64_t>(passBatch_) - 1 : -1);
    // The new buffer's own bytes when it is one (its rows are the records'
    // data without their per-tensor overhead: 784 of the 1.3 KiB a
    // Fashion-MNIST record counts); the records' bytes, a bound on what
    // stacking them makes, otherwise.
    int64_t freshBytes = 0;
    if (fresh && rows && !shared_.coarseBatchCount)
      for (const Tensor &t : placed)
        freshBytes += static_cast<int64_t>(t.memoryBytes());
    else if (fresh && !padded_)
      freshBytes = bytes_;
    BuildHold hold(account_, freshBytes);
    // Padding can make a batch far larger than its records (`length:
    // 1000000000`): what padded_batch allocates is reserved in its account
    // as it is allocated, and a buffer the budget cannot give is refused
    // (AllocationRefused, a located error: guardAllocations) before any
    // byte of it is touched.
    std::optional<AccountAllocationLimit> padLimit;
    std::optional<AllocationScope> padScope;
    if (padded_) {
      padLimit.emplace(account_);
      padScope.emplace(&*padLimit);
    }
    if (rows) {
      // In stream order: a record not in place sits in a row after its own
      // (or in another buffer), so it is read before that row is written.
      int64_t inPlace = 0;
      for (size_t i = 0; i < items_.size(); ++i) {
        bool all = true;
        for (size_t f = 0; f < placed.size(); ++f) {
          size_t bytes = layout_->bytes[f];
          uint8_t *dst = placed[f].mutableRaw() + i * bytes;
          const uint8_t *src = items_[i].rec.fields[f].raw();
          if (src == dst)
            continue;
          copyRow(dst, src, bytes, layout_->stream[f]);
          all = false;
        }
        inPlace += all;
      }
      inc(c_->rowsInPlace, inPlace);
      return emit(std::move(placed), n, out);
    }
    Record rec;
    size_t numFields = items_.front().rec.fields.size();
    std::vector<Tensor> column(items_.size());
    for (size_t f = 0; f < numFields; ++f) {
      for (size_t i = 0; i < items_.size(); ++i)
        column[i] = std::move(items_[i].rec.fields[f]);
      if (padded_ && f < paddedShapes_.size()) {
        // A fixed `length` also cuts longer items.
        const std::vector<int64_t> &ps = paddedShapes_[f];
        for (Tensor &t : column)
          for (size_t d = 0; d < ps.size() && d < t.rank(); ++d)
            if (ps[d] >= 0 && t.dim(d) > ps[d]) {
              Expected<Tensor> cut =
                  kernels::truncate(t, ps[d], static_cast<int64_t>(d));
              if (cut)
                t = cut.take();
            }
      }
      Expected<Tensor> t =
          padded_ ? kernels::paddedStack(column,
                                         f < paddedShapes_.size()
                                             ? paddedShapes_[f]
                                             : std::vector<int64_t>{},
                                         padValue_)
                  : kernels::stack(column);
      if (!t) {
        std::string field = f < step_.inputType.size()
                                ? step_.inputType.fields()[f].name
                                : std::to_string(f);
        inc(c_->failed, n);
        clear();
        return Status::error(
            step_.name + " (" + shared_.plan->where(step_) + "): field '" +
            field + "' of batch " + std::to_string(batchIndex_) + ": " +
            t.status().message() +
            (padded_ ? std::string()
                     : "; records of one batch need the same shape: use "
                       "padded_batch, or resize/crop to a fixed size first"));
      }
      rec.fields.push_back(t.take());
    }
    return emit(std::move(rec.fields), n, out);
  }

private:
  /// Bytes reserved while a batch is built, released when it is handed on.
  struct BuildHold {
    BuildHold(MemoryAccount *a, int64_t b) : account(a), bytes(b) {
      account->forceReserve(bytes);
    }
    ~BuildHold() { account->release(bytes); }
    MemoryAccount *account;
    int64_t bytes;
  };

  Expected<bool> emit(std::vector<Tensor> fields, int64_t n, Item &out) {
    inc(c_->emitted, n);
    clear();
    out.rec.fields = std::move(fields);
    out.rec.index = batchIndex_++;
    out.origin = Origin();
    return true;
  }

  void clear() {
    // Released first: a record's buffers freed into the buffer pool are
    // counted there as they arrive, and counting them here too would count
    // a whole batch of records twice at the moment the batch is emitted.
    account_->release(bytes_);
    bytes_ = 0;
    items_.clear();
  }

  const PlanStep &step_;
  bool padded_;
  int64_t size_ = 1;
  bool dropRemainder_ = false;
  bool fitChecked_ = false; ///< fitsOnce() ran
  double padValue_ = 0;
  std::vector<std::vector<int64_t>> paddedShapes_;
  /// Set for `batch` of fixed-shape numeric records.
  std::optional<RowLayout> layout_;
  /// Set when the upstream map stage places rows.
  std::unique_ptr<BatchRows> rows_;
  /// Batches are filled from runs of rows (Shared::recordRuns).
  bool runMode_ = false;
  ItemRun run_;
  MemoryAccount *account_;
  std::vector<Item> items_;
  int64_t bytes_ = 0;
  uint64_t batchIndex_ = 0;
  /// Batches emitted in this pass (the BatchRows numbering).
  uint64_t passBatch_ = 0;
};

/// unbatch: splits each input along its leading dimension.
class UnbatchStage : public Stage {
public:
  using Stage::Stage;

protected:
  Status onStart(uint64_t epoch) override {
    if (passInEpoch() == 0)
      index_ = 0;
    rows_.clear();
    pos_ = 0;
    return Stage::onStart(epoch);
  }
  void onStop() override {
    if (pos_ < rows_.size())
      inc(c_->discarded);
    rows_.clear();
    pos_ = 0;
  }
  Expected<bool> produce(Item &out) override {
    while (pos_ >= rows_.size()) {
      Item in;
      Expected<bool> r = pull(in);
      if (!r || !*r)
        return r;
      rows_.clear();
      pos_ = 0;
      int64_t n = -1;
      for (size_t f = 0; f < in.rec.fields.size(); ++f) {
        Expected<std::vector<Tensor>> parts =
            kernels::unstack(in.rec.fields[f]);
        if (!parts) {
          inc(c_->failed);
          return Status::error("unbatch: field " + std::to_string(f) + ": " +
                               parts.status().message());
        }
        if (n < 0) {
          n = static_cast<int64_t>(parts->size());
          rows_.resize(parts->size());
        } else if (static_cast<int64_t>(parts->size()) != n) {
          inc(c_->failed);
          return Status::error(
              "unbatch: the fields of one input have different leading "
              "dimensions (" +
              std::to_string(n) + " and " + std::to_string(parts->size()) +
              ")");
        }
        for (size_t i = 0; i < parts->size(); ++i)
          rows_[i].fields.push_back(std::move((*parts)[i]));
      }
      if (rows_.empty())
        inc(c_->emitted); // an empty batch is fully passed on
    }
    out.rec = std::move(rows_[pos_++]);
    out.rec.index = index_++;
    out.origin = Origin();
    if (pos_ == rows_.size())
      inc(c_->emitted);
    return true;
  }

private:
  std::vector<Record> rows_;
  size_t pos_ = 0;
  uint64_t index_ = 0;
};

} // namespace

std::unique_ptr<Stage> makeBatchStage(Shared &shared,
                                      std::unique_ptr<Stage> upstream,
                                      StageCounters *c, const PlanStep &step,
                                      bool padded) {
  return std::make_unique<BatchStage>(shared, std::move(upstream), c, step,
                                      padded);
}
std::unique_ptr<Stage> makeUnbatchStage(Shared &shared,
                                        std::unique_ptr<Stage> upstream,
                                        StageCounters *c) {
  return std::make_unique<UnbatchStage>(shared, std::move(upstream), c);
}

namespace {

/// batch and padded_batch: ceil(n / size) records, floor with
/// drop_remainder.
Expected<std::unique_ptr<Stage>> batchStage(StageBuild &b, bool padded) {
  const Value &p = b.step.params;
  if (b.count) {
    int64_t size = std::max<int64_t>(1, p["size"].asInt());
    bool drop = p["drop_remainder"].isBool() && p["drop_remainder"].asBool();
    b.count = drop ? *b.count / size : (*b.count + size - 1) / size;
  }
  return makeBatchStage(b.shared, std::move(b.upstream), b.counters, b.step,
                        padded);
}

Expected<std::unique_ptr<Stage>> batch(StageBuild &b) {
  return batchStage(b, false);
}
Expected<std::unique_ptr<Stage>> paddedBatch(StageBuild &b) {
  return batchStage(b, true);
}
Expected<std::unique_ptr<Stage>> unbatch(StageBuild &b) {
  b.count.reset();
  return makeUnbatchStage(b.shared, std::move(b.upstream), b.counters);
}

StageRegistration batchRegistration("batch", batch);
StageRegistration paddedBatchRegistration("padded_batch", paddedBatch);
StageRegistration unbatchRegistration("unbatch", unbatch);

} // namespace

} // namespace sluice::runtime::detail
