//===- SourceStage.cpp - Reading the source's shards ----------------------===//
//
// The first stage: reads the source's shards in their sorted order (or, with
// `interleave`, `cycle_length` shards at a time, `block_length` records from
// each in turn, in tf.data's order) and numbers
// the records it reads 0, 1, 2, ... per epoch. That number is Record::index,
// the seed of every random choice made on the record downstream, so the
// enumeration order must not depend on threads or timing.
//
// Bad records follow the source's on_error: skip counts them by reason and
// goes on; fail stops with the file, record, byte offset and reason.
//
//===----------------------------------------------------------------------===//
#include "Engine.h"

namespace sluice::runtime::detail {

namespace {

class SourceStage : public Stage {
public:
  SourceStage(Shared &s, StageCounters *c, int64_t cycle, int64_t block)
      : Stage(s, nullptr, c), cycle_(std::max<int64_t>(1, cycle)),
        block_(std::max<int64_t>(1, block)) {}

protected:
  Status onStart(uint64_t) override {
    if (passInEpoch() == 0)
      index_ = 0; // repetitions within an epoch keep numbering
    closeAll();
    slots_.clear();
    slots_.resize(static_cast<size_t>(cycle_));
    nextShard_ = 0;
    pos_ = 0;
    blockIndex_ = 0;
    open_ = 0;
    return Status::ok();
  }

  void onStop() override { closeAll(); }

  // tf.data's interleave order: the cycle position moves on after
  // `block_length` records or when its shard ends; an empty slot takes the
  // next shard when the position reaches it.
  Expected<bool> produce(Item &out) override {
    const Source &src = *shared_.source;
    for (;;) {
      bool inputLeft = nextShard_ < src.numShards();
      if (!inputLeft && open_ == 0)
        return false;
      Slot &s = slots_[pos_];
      if (!s.reader) {
        if (inputLeft) {
          s.shard = nextShard_++;
          s.reader = src.open(s.shard);
          ++open_;
        } else {
          advance();
        }
        continue;
      }
      ReadResult rr = s.reader->next(out.rec);
      if (rr.isEnd()) {
        doneBytes_ += static_cast<int64_t>(s.reader->bytesRead());
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
        const DataError &e = rr.error();
        if (shared_.onError == OnError::Skip) {
          c_->addSkipped(e.reason);
          continue;
        }
        c_->failed.fetch_add(1, std::memory_order_relaxed);
        return Status::error(
            e.message() + "\n  in source '" + shared_.plan->source.name +
            "' at " + shared_.plan->where(shared_.plan->source) +
            " (on_error: fail; add `on_error: skip` to the source to drop "
            "bad records and count them)");
      }
      out.origin.shard = static_cast<int64_t>(shard);
      out.origin.record = static_cast<int64_t>(out.rec.index);
      out.rec.index = index_ - 1;
      c_->emitted.fetch_add(1, std::memory_order_relaxed);
      c_->bytesIn.store(bytesRead(), std::memory_order_relaxed);
      return true;
    }
  }

private:
  struct Slot {
    size_t shard = 0;
    std::unique_ptr<ShardReader> reader;
  };

  void advance() {
    blockIndex_ = 0;
    pos_ = (pos_ + 1) % slots_.size();
  }

  void closeAll() {
    for (Slot &s : slots_)
      if (s.reader)
        doneBytes_ += static_cast<int64_t>(s.reader->bytesRead());
    slots_.clear();
    open_ = 0;
  }

  int64_t bytesRead() {
    // Finished readers are folded into doneBytes_ when they close.
    int64_t n = doneBytes_;
    for (const Slot &s : slots_)
      if (s.reader)
        n += static_cast<int64_t>(s.reader->bytesRead());
    return n;
  }

  int64_t cycle_, block_;
  std::vector<Slot> slots_;
  size_t nextShard_ = 0;
  size_t pos_ = 0;
  int64_t blockIndex_ = 0;
  int64_t open_ = 0;
  uint64_t index_ = 0;
  int64_t doneBytes_ = 0;
};

} // namespace

std::unique_ptr<Stage> makeSourceStage(Shared &shared, StageCounters *c,
                                       int64_t cycleLength,
                                       int64_t blockLength) {
  return std::make_unique<SourceStage>(shared, c, cycleLength, blockLength);
}

} // namespace sluice::runtime::detail
