//===- Stages.cpp - Take, skip, shard, repeat, shuffle, prefetch
//------------===//
//
// Stream ops that run in their consumer's thread (take, skip, shard,
// repeat, shuffle) and prefetch, which runs a producer thread behind a
// bounded, byte-accounted queue. The stage base is in StageBase.cpp, batch
// and unbatch in BatchStage.cpp.
//
//===----------------------------------------------------------------------===//
#include "Engine.h"

#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Random.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/kernels/Layout.h"

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

namespace sluice::runtime::detail {

namespace {

void inc(std::atomic<int64_t> &a, int64_t n = 1) {
  a.fetch_add(n, std::memory_order_relaxed);
}

/// Passes records through unchanged (interleave, whose work is done by the
/// source, and prefetch with a buffer of 0).
class IdentityStage : public Stage {
public:
  using Stage::Stage;

protected:
  Expected<bool> produce(Item &out) override {
    Expected<bool> r = pull(out);
    if (r && *r)
      inc(c_->emitted);
    return r;
  }
};

class TakeStage : public Stage {
public:
  TakeStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c, int64_t n)
      : Stage(s, std::move(up), c), count_(n) {}

protected:
  Status onStart(uint64_t epoch) override {
    taken_ = 0;
    return Stage::onStart(epoch);
  }
  Expected<bool> produce(Item &out) override {
    if (count_ >= 0 && taken_ >= count_)
      return false;
    Expected<bool> r = pull(out);
    if (r && *r) {
      ++taken_;
      inc(c_->emitted);
    }
    return r;
  }

private:
  int64_t count_, taken_ = 0;
};

class SkipStage : public Stage {
public:
  SkipStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c, int64_t n)
      : Stage(s, std::move(up), c), count_(n) {
    c->setFilterReason("the first " + std::to_string(n) + " records");
  }

protected:
  Status onStart(uint64_t epoch) override {
    skipped_ = 0;
    return Stage::onStart(epoch);
  }
  Expected<bool> produce(Item &out) override {
    while (skipped_ < count_) {
      Expected<bool> r = pull(out);
      if (!r || !*r)
        return r;
      ++skipped_;
      inc(c_->filtered);
    }
    Expected<bool> r = pull(out);
    if (r && *r)
      inc(c_->emitted);
    return r;
  }

private:
  int64_t count_, skipped_ = 0;
};

class ShardStage : public Stage {
public:
  ShardStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c,
             int64_t numShards, int64_t index)
      : Stage(s, std::move(up), c), n_(numShards), index_(index) {
    c->setFilterReason("other shards");
  }

protected:
  Status onStart(uint64_t epoch) override {
    pos_ = 0;
    return Stage::onStart(epoch);
  }
  Expected<bool> produce(Item &out) override {
    for (;;) {
      Expected<bool> r = pull(out);
      if (!r || !*r)
        return r;
      int64_t pos = pos_++;
      if (pos % n_ == index_) {
        inc(c_->emitted);
        return true;
      }
      inc(c_->filtered);
    }
  }

private:
  int64_t n_, index_, pos_ = 0;
};

class RepeatStage : public Stage {
public:
  RepeatStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c,
              int64_t count)
      : Stage(s, std::move(up), c), count_(count) {}

protected:
  Status onStart(uint64_t epoch) override {
    done_ = 0;
    gotAny_ = false;
    return Stage::onStart(epoch);
  }
  Expected<bool> produce(Item &out) override {
    if (count_ == 0)
      return false;
    for (;;) {
      Expected<bool> r = pull(out);
      if (!r)
        return r;
      if (*r) {
        gotAny_ = true;
        inc(c_->emitted);
        return true;
      }
      ++done_;
      // An empty input would otherwise make `repeat: -1` spin forever.
      if ((count_ >= 0 && done_ >= count_) || !gotAny_)
        return false;
      gotAny_ = false;
      upstream_->stop();
      Status s = upstream_->start(epoch());
      if (!s)
        return s;
    }
  }

private:
  int64_t count_, done_ = 0;
  bool gotAny_ = false;
};

/// A shuffle buffer: keeps `buffer` records and emits a uniformly chosen one
/// as each new record arrives. The choices come from one Rng per pass seeded
/// with (seed, epoch, pass, step), so the order is the same on every run.
/// One draw from a shuffle buffer: removes a uniformly chosen element and
/// returns it, the last element taking its place. The buffered shuffle and
/// the replay of its order (ShuffleStage::order) both draw through it, so
/// the order replayed over positions is the buffer's, draw for draw.
template <class T> T drawFromBuffer(std::vector<T> &buf, Rng &rng) {
  size_t j =
      static_cast<size_t>(rng.uniformInt(0, static_cast<int64_t>(buf.size())));
  T v = std::move(buf[j]);
  if (j + 1 != buf.size())
    buf[j] = std::move(buf.back());
  buf.pop_back();
  return v;
}

class ShuffleStage : public Stage {
public:
  ShuffleStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c,
               const PlanStep &step, std::optional<int64_t> recordsPerPass)
      : Stage(s, std::move(up), c), step_(step),
        recordsPerPass_(recordsPerPass) {
    const Value &p = step.params;
    if (p["buffer"].isNumber())
      buffer_ = std::max<int64_t>(1, p["buffer"].asInt());
    if (p["seed"].isNumber())
      seed_ = static_cast<uint64_t>(p["seed"].asInt());
    else
      seed_ = s.plan->seed;
    reshuffle_ = reshuffles(p);
    stream_ = stageStream(step);
    account_ = s.memory->account(step.name);
    // Shuffled by position: the source reads in this step's order (the
    // replay below), so the records arrive shuffled and pass through.
    folded_ = s.positional.order == &step;
    c->bufferCapacity.store(folded_ ? 0 : buffer_);
  }

  /// The order this step gives `in` in pass `pass` of `epoch`: the draws
  /// of produce() below, over labels instead of records (each draw is a
  /// uniform index into the buffer, which depends only on how many records
  /// it holds).
  static std::vector<int64_t> order(const PlanStep &step, uint64_t planSeed,
                                    uint64_t epoch, uint64_t pass,
                                    const std::vector<int64_t> &in) {
    const Value &p = step.params;
    int64_t buffer = 1;
    if (p["buffer"].isNumber())
      buffer = std::max<int64_t>(1, p["buffer"].asInt());
    uint64_t seed = p["seed"].isNumber()
                        ? static_cast<uint64_t>(p["seed"].asInt())
                        : planSeed;
    bool reshuffle = reshuffles(p);
    Rng rng(seed, reshuffle ? epoch : 0, reshuffle ? pass : 0,
            stageStream(step));
    std::vector<int64_t> out, buf;
    out.reserve(in.size());
    buf.reserve(static_cast<size_t>(
        std::min<int64_t>(buffer, static_cast<int64_t>(in.size()))));
    size_t next = 0;
    for (;;) {
      while (next < in.size() && static_cast<int64_t>(buf.size()) < buffer)
        buf.push_back(in[next++]);
      if (buf.empty())
        break;
      out.push_back(drawFromBuffer(buf, rng));
    }
    return out;
  }

  void staticNeeds(std::vector<StaticNeed> &out) const override {
    if (folded_)
      return; // holds nothing
    // The buffer is emptied at the end of every pass, so it never holds
    // more records than one pass brings (a 4096-record buffer over a folder
    // of 138 images holds 138).
    int64_t held = buffer_;
    if (recordsPerPass_ && *recordsPerPass_ < held)
      held = std::max<int64_t>(*recordsPerPass_, 0);
    StaticNeed n;
    n.what = "the shuffle buffer of " + std::to_string(buffer_) + " records";
    if (held < buffer_)
      n.what += " (" + std::to_string(held) +
                " at most: the records of one "
                "pass)";
    n.records = held;
    n.type = step_.inputType;
    n.knob = step_.name + ".buffer";
    n.where = shared_.plan->where(step_);
    out.push_back(std::move(n));
  }

protected:
  Status onStart(uint64_t epoch) override {
    clear();
    upstreamDone_ = false;
    uint64_t e = reshuffle_ ? epoch : 0;
    uint64_t pass = reshuffle_ ? passInEpoch() : 0;
    rng_.emplace(seed_, e, pass, stream_);
    return Stage::onStart(epoch);
  }

  void onStop() override {
    inc(c_->discarded, static_cast<int64_t>(buf_.size()));
    clear();
  }

  Expected<bool> produce(Item &out) override {
    if (folded_) {
      Expected<bool> r = pull(out);
      if (r && *r)
        inc(c_->emitted);
      return r;
    }
    while (!upstreamDone_ && static_cast<int64_t>(buf_.size()) < buffer_) {
      Item in;
      Expected<bool> r = pull(in);
      if (!r)
        return r;
      if (!*r) {
        upstreamDone_ = true;
        break;
      }
      // A record parsed into a block of rows would keep the whole block
      // alive for as long as it waits here.
      compactRecord(in.rec);
      int64_t bytes = recordBytes(in.rec);
      if (!account_->tryReserve(bytes)) {
        inc(c_->discarded);
        return overBudget(bytes);
      }
      bytes_ += bytes;
      c_->notePeakBytes(bytes_);
      buf_.emplace_back(std::move(in), bytes);
    }
    if (buf_.empty())
      return false;
    c_->sampleOccupancy(static_cast<int64_t>(buf_.size()));
    std::pair<Item, int64_t> drawn = drawFromBuffer(buf_, *rng_);
    out = std::move(drawn.first);
    int64_t b = drawn.second;
    account_->release(b);
    bytes_ -= b;
    inc(c_->emitted);
    return true;
  }

private:
  static bool reshuffles(const Value &p) {
    if (p["reshuffle_each_epoch"].isBool())
      return p["reshuffle_each_epoch"].asBool();
    if (p["reshuffle_each_iteration"].isBool())
      return p["reshuffle_each_iteration"].asBool();
    return true;
  }

  void clear() {
    account_->release(bytes_);
    bytes_ = 0;
    buf_.clear();
  }

  Status overBudget(int64_t bytes) {
    MemoryBudget &m = *shared_.memory;
    int64_t n = static_cast<int64_t>(buf_.size()) + 1;
    int64_t avg = (bytes_ + bytes) / n;
    int64_t others = m.used() - bytes_;
    int64_t fit = avg > 0 ? (m.limit() - others) / avg : 0;
    const std::string &budget = shared_.budgetName;
    std::string msg =
        shared_.plan->where(step_) + ": error: the shuffle buffer of " +
        std::to_string(buffer_) + " records does not fit in " + budget + " " +
        formatBytes(m.limit()) + ": after " + std::to_string(n) +
        " records of {" + step_.inputType.str() + "} it would hold " +
        formatBytes(bytes_ + bytes) + " (" + formatBytes(avg) +
        " per record) while the other buffers hold " + formatBytes(others);
    // A shuffle buffer of 0 records is no advice: when not even a few
    // records fit, the budget itself is what is too small.
    if (fit >= 2)
      msg += "; lower " + step_.name + ".buffer to <= " + std::to_string(fit) +
             " or raise " + budget;
    else
      msg += "; with the other buffers not even a few records fit: raise " +
             budget + " to well above " + formatBytes(others + 2 * avg);
    return Status::error(msg);
  }

  const PlanStep &step_;
  /// At most this many records reach the shuffle per pass, when known.
  std::optional<int64_t> recordsPerPass_;
  int64_t buffer_ = 1;
  uint64_t seed_ = 0;
  bool reshuffle_ = true;
  bool folded_ = false;
  uint64_t stream_ = 0;
  MemoryAccount *account_;
  std::optional<Rng> rng_;
  std::vector<std::pair<Item, int64_t>> buf_;
  int64_t bytes_ = 0;
  bool upstreamDone_ = false;
};

/// prefetch: a producer thread fills a queue of up to `buffer` records.
/// When budget.memory is short the producer waits for the consumer to make
/// room instead of failing (a non-empty queue always drains).
class PrefetchStage : public Stage {
public:
  PrefetchStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c,
                int64_t buffer, RecordType type, std::string knob,
                std::string where)
      : Stage(s, std::move(up), c), buffer_(std::max<int64_t>(1, buffer)),
        depth_(buffer_), type_(std::move(type)), knob_(std::move(knob)),
        where_(std::move(where)) {
    inlineTiming_ = false;
    account_ = s.memory->account(c->name());
    c->bufferCapacity.store(buffer_);
  }
  ~PrefetchStage() override { stopThread(); }

  /// In flight, up to the capacity the memory check counted.
  int64_t setDepth(int64_t d) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      depth_ = std::clamp<int64_t>(d, 1, buffer_);
      d = depth_;
    }
    notFull_.notify_all();
    return d;
  }

  void staticNeeds(std::vector<StaticNeed> &out) const override {
    StaticNeed n;
    n.what = "the prefetch queue of " + std::to_string(buffer_) + " records";
    n.records = buffer_;
    n.type = type_;
    n.knob = knob_;
    n.where = where_;
    out.push_back(std::move(n));
  }

protected:
  Status onStart(uint64_t epoch) override {
    Status s = Stage::onStart(epoch);
    if (!s)
      return s;
    done_ = false;
    cancel_ = false;
    error_ = Status::ok();
    thread_ = std::thread([this] { produceLoop(); });
    return Status::ok();
  }

  void onStop() override {
    stopThread();
    std::lock_guard<std::mutex> lock(mu_);
    inc(c_->discarded, static_cast<int64_t>(queue_.size()));
    for (auto &e : queue_)
      account_->release(e.second);
    queue_.clear();
  }

  Expected<bool> produce(Item &out) override {
    std::unique_lock<std::mutex> lock(mu_);
    c_->sampleOccupancy(static_cast<int64_t>(queue_.size()));
    notEmpty_.wait(lock, [&] {
      return !queue_.empty() || done_ ||
             shared_.cancelled.load(std::memory_order_relaxed);
    });
    if (queue_.empty() && !done_)
      return cancelledError();
    if (!queue_.empty()) {
      out = std::move(queue_.front().first);
      account_->release(queue_.front().second);
      queue_.pop_front();
      inc(c_->emitted);
      notFull_.notify_one();
      return true;
    }
    if (!error_.isOk()) {
      Status e = error_;
      error_ = Status::ok();
      return e;
    }
    return false;
  }

public:
  void wake() override {
    std::lock_guard<std::mutex> lock(mu_);
    notEmpty_.notify_all();
    notFull_.notify_all();
  }

private:
  void stopThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel_ = true;
    }
    notFull_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

  void produceLoop() {
    // The producer's CPU is serial work (StageStats::threadCpuSeconds),
    // read every 256 records and at the end (a clock read per record would
    // cost what a cheap tabular step does).
    int64_t cpuMark = threadCpuNs();
    uint64_t produced = 0;
    auto countCpu = [&] {
      int64_t now = threadCpuNs();
      if (c_)
        c_->threadCpuNs.fetch_add(now - cpuMark, std::memory_order_relaxed);
      cpuMark = now;
    };
    struct AtExit {
      decltype(countCpu) &f;
      ~AtExit() { f(); }
    } atExit{countCpu};
    for (;;) {
      if ((++produced & 255) == 0)
        countCpu();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (cancel_)
          break;
      }
      Item in;
      Expected<bool> r = pull(in);
      std::unique_lock<std::mutex> lock(mu_);
      if (!r || !*r) {
        if (!r)
          error_ = r.status();
        done_ = true;
        notEmpty_.notify_all();
        return;
      }
      int64_t bytes = recordBytes(in.rec);
      bool reserved = false;
      while (!cancel_) {
        if (static_cast<int64_t>(queue_.size()) < depth_) {
          if (account_->tryReserve(bytes)) {
            reserved = true;
            break;
          }
          if (queue_.empty()) {
            // Nothing of ours to wait for: one record must get through.
            account_->forceReserve(bytes);
            reserved = true;
            break;
          }
        }
        // Memory freed elsewhere does not notify us: poll.
        notFull_.wait_for(lock, std::chrono::milliseconds(5));
      }
      if (!reserved) {
        inc(c_->discarded);
        break;
      }
      queue_.emplace_back(std::move(in), bytes);
      int64_t held = 0;
      for (const auto &e : queue_)
        held += e.second;
      c_->notePeakBytes(held);
      notEmpty_.notify_one();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    notEmpty_.notify_all();
  }

  int64_t buffer_;
  /// The depth in use (setDepth), at most buffer_.
  int64_t depth_;
  RecordType type_;
  std::string knob_, where_;
  MemoryAccount *account_;
  std::mutex mu_;
  std::condition_variable notEmpty_, notFull_;
  std::deque<std::pair<Item, int64_t>> queue_;
  bool done_ = false, cancel_ = false;
  Status error_;
  std::thread thread_;
};

} // namespace

std::unique_ptr<Stage> makeIdentityStage(Shared &shared,
                                         std::unique_ptr<Stage> upstream,
                                         StageCounters *c) {
  return std::make_unique<IdentityStage>(shared, std::move(upstream), c);
}
std::unique_ptr<Stage> makePrefetchStage(Shared &shared,
                                         std::unique_ptr<Stage> upstream,
                                         StageCounters *c, int64_t buffer,
                                         RecordType type, std::string knob,
                                         std::string where) {
  if (buffer <= 0)
    return makeIdentityStage(shared, std::move(upstream), c);
  return std::make_unique<PrefetchStage>(shared, std::move(upstream), c, buffer,
                                         std::move(type), std::move(knob),
                                         std::move(where));
}
std::unique_ptr<Stage> makeShuffleStage(Shared &shared,
                                        std::unique_ptr<Stage> upstream,
                                        StageCounters *c, const PlanStep &step,
                                        std::optional<int64_t> recordsPerPass) {
  return std::make_unique<ShuffleStage>(shared, std::move(upstream), c, step,
                                        recordsPerPass);
}
std::unique_ptr<Stage> makeRepeatStage(Shared &shared,
                                       std::unique_ptr<Stage> upstream,
                                       StageCounters *c, int64_t count) {
  return std::make_unique<RepeatStage>(shared, std::move(upstream), c, count);
}
std::unique_ptr<Stage> makeTakeStage(Shared &shared,
                                     std::unique_ptr<Stage> upstream,
                                     StageCounters *c, int64_t count) {
  return std::make_unique<TakeStage>(shared, std::move(upstream), c, count);
}
std::unique_ptr<Stage> makeSkipStage(Shared &shared,
                                     std::unique_ptr<Stage> upstream,
                                     StageCounters *c, int64_t count) {
  return std::make_unique<SkipStage>(shared, std::move(upstream), c, count);
}
std::unique_ptr<Stage> makeShardStage(Shared &shared,
                                      std::unique_ptr<Stage> upstream,
                                      StageCounters *c, int64_t numShards,
                                      int64_t index) {
  return std::make_unique<ShardStage>(shared, std::move(upstream), c, numShards,
                                      index);
}

//===----------------------------------------------------------------------===//
// The record ops these stages run, and how each changes the record count.
//===----------------------------------------------------------------------===//

namespace {

int64_t intParam(const PlanStep &st, const char *name, int64_t def) {
  const Value &v = st.params[name];
  return v.isNumber() ? v.asInt() : def;
}

Expected<std::unique_ptr<Stage>> shuffle(StageBuild &b) {
  return makeShuffleStage(b.shared, std::move(b.upstream), b.counters, b.step,
                          b.count);
}

Expected<std::unique_ptr<Stage>> repeat(StageBuild &b) {
  int64_t n = intParam(b.step, "count", -1);
  if (b.count && n >= 0)
    b.count = *b.count * n;
  else
    b.count.reset();
  if (b.sourceRecords && n >= 0)
    b.sourceRecords = *b.sourceRecords * n;
  else if (n < 0)
    b.sourceRecords.reset();
  return makeRepeatStage(b.shared, std::move(b.upstream), b.counters, n);
}

Expected<std::unique_ptr<Stage>> take(StageBuild &b) {
  int64_t n = intParam(b.step, "count", 0);
  if (b.count) {
    b.count = std::min(*b.count, n);
  } else {
    b.count = std::max<int64_t>(n, 0);
    b.countExact = false;
  }
  b.sourceRecords.reset(); // the source may stop early
  return makeTakeStage(b.shared, std::move(b.upstream), b.counters, n);
}

Expected<std::unique_ptr<Stage>> skip(StageBuild &b) {
  int64_t n = intParam(b.step, "count", 0);
  if (b.count)
    b.count = std::max<int64_t>(0, *b.count - n);
  return makeSkipStage(b.shared, std::move(b.upstream), b.counters, n);
}

Expected<std::unique_ptr<Stage>> shard(StageBuild &b) {
  int64_t n = intParam(b.step, "num_shards", 1);
  int64_t i = intParam(b.step, "index", 0);
  if (n < 1 || i < 0 || i >= n)
    return Status::error(b.where + ": shard index " + std::to_string(i) +
                         " is out of range for num_shards " +
                         std::to_string(n));
  if (b.count)
    b.count = (*b.count - i + n - 1) / n;
  return makeShardStage(b.shared, std::move(b.upstream), b.counters, n, i);
}

/// interleave configures how the source reads its shards (Engine::build);
/// its own place in the stream passes records through.
Expected<std::unique_ptr<Stage>> interleave(StageBuild &b) {
  return makeIdentityStage(b.shared, std::move(b.upstream), b.counters);
}

Expected<std::unique_ptr<Stage>> prefetch(StageBuild &b) {
  int64_t n = intParam(b.step, "buffer", 2);
  return makePrefetchStage(b.shared, std::move(b.upstream), b.counters, n,
                           b.step.inputType, b.step.name + ".buffer", b.where);
}

StageRegistration shuffleRegistration("shuffle", shuffle,
                                      OrderReplay{ShuffleStage::order});
StageRegistration repeatRegistration("repeat", repeat);
StageRegistration takeRegistration("take", take);
StageRegistration skipRegistration("skip", skip);
StageRegistration shardRegistration("shard", shard);
StageRegistration interleaveRegistration("interleave", interleave);
StageRegistration prefetchRegistration("prefetch", prefetch);

} // namespace

} // namespace sluice::runtime::detail
