//===- StageBase.cpp - The stage base
//---------------------------------------===//
//
// What every stage shares (Engine.h): start/stop, the pull loop with its
// counters and CPU time, batched pulls (produceMany, nextRun), the
// allocation guard that turns a refused reservation into a stage error.
// The stages themselves are in Stages.cpp (take, skip, shard, repeat,
// shuffle, prefetch), BatchStage.cpp, MapStage.cpp, SourceStage.cpp and
// CacheStage.cpp.
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

int64_t threadCpuNs() {
  timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::optional<int64_t> staticRecordBytes(const RecordType &t) {
  // What recordBytes() counts for such a record.
  int64_t n = 0;
  for (const Field &f : t.fields()) {
    std::optional<int64_t> b = f.type.staticBytes();
    if (!b)
      return std::nullopt;
    n += static_cast<int64_t>(
        Tensor::numericMemoryBytes(static_cast<size_t>(*b)) + sizeof(Tensor));
  }
  return n;
}

int64_t Shared::recordsSoFar() const {
  int64_t n =
      sourceCounters ? sourceCounters->read.load(std::memory_order_relaxed) : 0;
  if (replayedSourceRecords)
    n += replayedSourceRecords->load(std::memory_order_relaxed);
  return n;
}

std::string Shared::describe(const Origin &o) const {
  if (o.shard >= 0 && source &&
      static_cast<size_t>(o.shard) < source->numShards()) {
    std::string s = source->shardName(static_cast<size_t>(o.shard));
    if (o.record >= 0)
      s += ": record " + std::to_string(o.record);
    return s;
  }
  return "";
}

std::string skipReason(const std::string &op, const std::string &message) {
  size_t end = message.find(':');
  std::string head = message.substr(0, end);
  if (head.size() > 60)
    head = head.substr(0, 60);
  while (!head.empty() && head.back() == ' ')
    head.pop_back();
  return op + ": " + head;
}

Stage::~Stage() = default;
RowPlacer::~RowPlacer() = default;

namespace {

/// An allocation that failed inside a stage is a located error of the run,
/// never an exception that ends the process: the budget refused it
/// (AllocationRefused, with its own message), the system did
/// (std::bad_alloc), or it asked for a size no container can hold
/// (std::length_error, e.g. a batch of 2^62 rows).
Status allocationError(const StageCounters *c, const std::string &why) {
  std::string at;
  if (c && !c->where().empty())
    at = c->where() + ": ";
  if (c)
    at += "'" + c->name() + "': ";
  return Status::error(at + why);
}

template <typename F>
auto guardAllocations(const StageCounters *c, F &&f) -> decltype(f()) {
  try {
    return f();
  } catch (const AllocationRefused &e) {
    return allocationError(c, e.what());
  } catch (const std::bad_alloc &) {
    return allocationError(
        c, "the system refused a memory allocation (std::bad_alloc); lower "
           "budget.memory below what the host can give, or the sizes of "
           "the step");
  } catch (const std::length_error &) {
    return allocationError(c, "a buffer size too large to allocate; lower "
                              "the sizes of the step (batch, length, "
                              "prefetch) to what budget.memory can hold");
  }
}

} // namespace

Status Stage::start(uint64_t epoch) {
  if (!startedOnce_ || epoch != epoch_)
    passInEpoch_ = 0;
  else
    ++passInEpoch_;
  startedOnce_ = true;
  epoch_ = epoch;
  running_ = true;
  held_.reset();
  return guardAllocations(c_, [&] { return onStart(epoch); });
}

Status Stage::onStart(uint64_t epoch) {
  return upstream_ ? upstream_->start(epoch) : Status::ok();
}

Status cancelledError() {
  return Status::error("the pipeline was cancelled (Pipeline::cancel(), "
                       "e.g. Ctrl-C)");
}

Expected<bool> Stage::next(Item &out) {
  // Checked once per record and stage: a batch or shuffle buffer being
  // filled stops within a record of a cancel().
  if (shared_.cancelled.load(std::memory_order_relaxed))
    return cancelledError();
  if (!inlineTiming_ || !c_ || !shared_.timing) {
    Expected<bool> r = guardAllocations(c_, [&] { return produce(out); });
    if (r && *r && c_) {
      c_->elementsOut.fetch_add(1, std::memory_order_relaxed);
      if (shared_.timing)
        c_->bytesOut.fetch_add(recordBytes(out.rec), std::memory_order_relaxed);
    }
    return r;
  }
  pullNs_ = 0;
  int64_t t0 = nowNs();
  Expected<bool> r = guardAllocations(c_, [&] { return produce(out); });
  int64_t self = nowNs() - t0 - pullNs_;
  c_->wallNs.fetch_add(self, std::memory_order_relaxed);
  c_->cpuNs.fetch_add(self, std::memory_order_relaxed);
  if (r && *r) {
    c_->elementsOut.fetch_add(1, std::memory_order_relaxed);
    c_->bytesOut.fetch_add(recordBytes(out.rec), std::memory_order_relaxed);
  }
  return r;
}

Expected<size_t> Stage::produceMany(std::vector<Item> &out, size_t max) {
  size_t n = 0;
  while (n < max) {
    Item it;
    Expected<bool> r = produce(it);
    if (!r) {
      if (n == 0)
        return r.status();
      holdError(r.status());
      break;
    }
    if (!*r)
      break;
    out.push_back(std::move(it));
    ++n;
  }
  return n;
}

Expected<size_t> Stage::nextMany(std::vector<Item> &out, size_t max) {
  // As next(): a run stops within a run of a cancel().
  if (shared_.cancelled.load(std::memory_order_relaxed))
    return cancelledError();
  if (held_) {
    Status s = std::move(*held_);
    held_.reset();
    return s;
  }
  const size_t before = out.size();
  Expected<size_t> r = 0;
  if (!inlineTiming_ || !c_ || !shared_.timing) {
    r = guardAllocations(c_, [&] { return produceMany(out, max); });
  } else {
    pullNs_ = 0;
    int64_t t0 = nowNs();
    r = guardAllocations(c_, [&] { return produceMany(out, max); });
    int64_t self = nowNs() - t0 - pullNs_;
    c_->wallNs.fetch_add(self, std::memory_order_relaxed);
    c_->cpuNs.fetch_add(self, std::memory_order_relaxed);
  }
  if (c_ && out.size() > before) {
    c_->elementsOut.fetch_add(static_cast<int64_t>(out.size() - before),
                              std::memory_order_relaxed);
    if (shared_.timing) {
      int64_t bytes = 0;
      for (size_t i = before; i < out.size(); ++i)
        bytes += recordBytes(out[i].rec);
      c_->bytesOut.fetch_add(bytes, std::memory_order_relaxed);
    }
  }
  return r;
}

Expected<size_t> Stage::pullMany(std::vector<Item> &out, size_t max) {
  const size_t before = out.size();
  bool timed = inlineTiming_ && shared_.timing;
  int64_t t0 = timed ? nowNs() : 0;
  Expected<size_t> r = upstream_->nextMany(out, max);
  if (timed)
    pullNs_ += nowNs() - t0;
  if (c_ && out.size() > before) {
    c_->read.fetch_add(static_cast<int64_t>(out.size() - before),
                       std::memory_order_relaxed);
    if (shared_.timing) {
      int64_t bytes = 0;
      for (size_t i = before; i < out.size(); ++i)
        bytes += recordBytes(out[i].rec);
      c_->bytesIn.fetch_add(bytes, std::memory_order_relaxed);
    }
  }
  return r;
}

int64_t ItemRun::rowRecordBytes() const {
  int64_t n = static_cast<int64_t>(columns.size() * sizeof(Tensor));
  for (const Tensor &t : columns)
    if (t.valid() && rows > 0)
      n += static_cast<int64_t>(
          Tensor::numericMemoryBytes(t.nbytes() / static_cast<size_t>(rows)));
  return n;
}

Expected<bool> Stage::produceRun(ItemRun &, int64_t) {
  return Status::error("internal error: stage '" +
                       (c_ ? c_->name() : std::string("?")) +
                       "' cannot hand on runs of records");
}

Expected<bool> Stage::nextRun(ItemRun &run, int64_t max) {
  if (shared_.cancelled.load(std::memory_order_relaxed))
    return cancelledError();
  Expected<bool> r = true;
  if (!inlineTiming_ || !c_) {
    r = guardAllocations(c_, [&] { return produceRun(run, max); });
  } else {
    pullNs_ = 0;
    int64_t t0 = nowNs();
    r = guardAllocations(c_, [&] { return produceRun(run, max); });
    int64_t self = nowNs() - t0 - pullNs_;
    c_->wallNs.fetch_add(self, std::memory_order_relaxed);
    c_->cpuNs.fetch_add(self, std::memory_order_relaxed);
  }
  if (r && *r && c_ && run.kept() > 0) {
    c_->elementsOut.fetch_add(run.kept(), std::memory_order_relaxed);
    c_->bytesOut.fetch_add(run.kept() * run.rowRecordBytes(),
                           std::memory_order_relaxed);
  }
  return r;
}

Expected<bool> Stage::pullRows(ItemRun &run, int64_t max) {
  int64_t t0 = inlineTiming_ ? nowNs() : 0;
  Expected<bool> r = upstream_->nextRun(run, max);
  if (inlineTiming_)
    pullNs_ += nowNs() - t0;
  if (r && *r && c_ && run.kept() > 0) {
    c_->read.fetch_add(run.kept(), std::memory_order_relaxed);
    c_->bytesIn.fetch_add(run.kept() * run.rowRecordBytes(),
                          std::memory_order_relaxed);
  }
  return r;
}

void Stage::stop() {
  if (!running_)
    return;
  running_ = false;
  onStop();
  if (upstream_)
    upstream_->stop();
}

Expected<bool> Stage::pull(Item &in) {
  bool timed = inlineTiming_ && shared_.timing;
  int64_t t0 = timed ? nowNs() : 0;
  Expected<bool> r = upstream_->next(in);
  if (timed)
    pullNs_ += nowNs() - t0;
  if (r && *r && c_) {
    c_->read.fetch_add(1, std::memory_order_relaxed);
    if (shared_.timing)
      c_->bytesIn.fetch_add(recordBytes(in.rec), std::memory_order_relaxed);
  }
  return r;
}

} // namespace sluice::runtime::detail
