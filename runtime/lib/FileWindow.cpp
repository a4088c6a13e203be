//===- FileWindow.cpp - Reading whole-file shards ahead on the arena ------===//
//
// See FileWindow.h.
//
//===----------------------------------------------------------------------===//
#include "FileWindow.h"

#include <algorithm>
#include <new>

namespace sluice::runtime::detail {

FileWindow::FileWindow(Shared &shared, AccountAllocationLimit &reading,
                       MemoryAccount *held, StageCounters *counters,
                       size_t width, size_t readers)
    : shared_(shared), reading_(reading), held_(held), c_(counters),
      width_(std::max<size_t>(1, width)),
      readers_(std::max<size_t>(1, readers)) {}

size_t FileWindow::widthFor(int64_t threads) {
  return static_cast<size_t>(std::clamp<int64_t>(4 * threads, 16, 64));
}

size_t FileWindow::readersFor(int64_t threads) {
  return static_cast<size_t>(std::max<int64_t>(1, threads / 2));
}

bool FileWindow::roomForMore() const {
  if (slots_.empty())
    return true;
  const MemoryBudget &b = *shared_.memory;
  if (b.limit() <= 0)
    return true;
  const int64_t need = static_cast<int64_t>(slots_.size() + 1) *
                       std::max<int64_t>(largest_.load(), 1);
  return b.limit() - b.used() >= need;
}

void FileWindow::push(size_t shard) {
  auto slot = std::make_unique<Slot>();
  slot->shard.shard = shard;
  bool spawn = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unclaimed_.push_back(slot.get());
    slots_.push_back(std::move(slot));
    if (tasks_ < readers_) {
      ++tasks_;
      spawn = true;
    }
  }
  if (spawn)
    enqueueTask(*shared_.arena, [this] { readLoop(); });
}

void FileWindow::readLoop() {
  // A few files per turn: then, if more are named, the continuation goes
  // behind the tasks waiting for a slot (a parallel step's workers).
  constexpr int kFilesPerTurn = 8;
  std::unique_lock<std::mutex> lock(mu_);
  for (int n = 0; !unclaimed_.empty(); ++n) {
    if (n == kFilesPerTurn) {
      lock.unlock();
      enqueueTask(*shared_.arena, [this] { readLoop(); });
      return;
    }
    Slot *s = unclaimed_.front();
    unclaimed_.pop_front();
    lock.unlock();
    read(*s);
    lock.lock();
    s->done = true;
    if (wantHead_ > 0 && doneAtHead() >= wantHead_)
      cv_.notify_all();
  }
  --tasks_;
  cv_.notify_all();
}

size_t FileWindow::doneAtHead() const {
  size_t n = 0;
  while (n < slots_.size() && slots_[n]->done)
    ++n;
  return n;
}

void FileWindow::read(Slot &s) {
  const int64_t t0 = threadCpuNs();
  const Source &src = *shared_.source;
  std::vector<Entry> entries;
  int64_t bytesRead = 0;
  // A cancelled pipeline reads nothing more: the shard ends at once (the
  // stage fails with the cancellation before taking it).
  if (!shared_.cancelled.load(std::memory_order_relaxed)) {
    const std::string name = src.shardName(s.shard.shard);
    std::unique_ptr<ShardReader> reader;
    std::string refused;
    {
      // As on the stage's own thread: what opening allocates (a reader's
      // buffers) is the source's reading.
      AllocationScope scope(&reading_);
      try {
        reader = src.open(s.shard.shard);
      } catch (const std::bad_alloc &e) {
        refused = dynamic_cast<const AllocationRefused *>(&e)
                      ? std::string(e.what())
                      : std::string("out of memory: the system refused an "
                                    "allocation (std::bad_alloc)");
      }
    }
    if (!reader) {
      DataError e;
      e.where.file = name;
      e.reason = kRecordDoesNotFit;
      e.detail = refused;
      e.recoverable = false;
      Entry err;
      err.result = ReadResult::error(std::move(e));
      entries.push_back(std::move(err));
    } else {
      for (;;) {
        Entry e;
        e.result = readCounted(reading_, *reader, e.rec, name);
        e.bytes = recordBytes(e.rec);
        held_->forceReserve(e.bytes);
        int64_t seen = largest_.load(std::memory_order_relaxed);
        while (e.bytes > seen && !largest_.compare_exchange_weak(
                                     seen, e.bytes, std::memory_order_relaxed))
          ;
        const bool end = e.result.isEnd();
        entries.push_back(std::move(e));
        if (end)
          break;
      }
      bytesRead = static_cast<int64_t>(reader->bytesRead());
    }
  }
  if (entries.empty() || !entries.back().result.isEnd())
    entries.emplace_back(); // the end
  // The read ran on a worker: the source's cost, and work the pool did.
  const int64_t cpu = threadCpuNs() - t0;
  c_->cpuNs.fetch_add(cpu, std::memory_order_relaxed);
  c_->poolCpuNs.fetch_add(cpu, std::memory_order_relaxed);
  // Published to the stage by readLoop() setting `done` under the lock.
  s.shard.entries = std::move(entries);
  s.shard.bytesRead = bytesRead;
}

FileWindow::Shard FileWindow::pop(int64_t *waitedNs) {
  std::unique_lock<std::mutex> lock(mu_);
  Slot &front = *slots_.front();
  if (!front.done) {
    // Woken once a run at the head is read (or a reader ends: the last
    // shards of the source may be fewer than the run).
    wantHead_ = std::clamp<size_t>(width_ / 4, 1, slots_.size());
    const int64_t t0 = nowNs();
    cv_.wait(lock, [&] {
      return front.done && (doneAtHead() >= wantHead_ || tasks_ == 0);
    });
    wantHead_ = 0;
    if (waitedNs)
      *waitedNs += nowNs() - t0;
  }
  Shard out = std::move(front.shard);
  slots_.pop_front();
  lock.unlock();
  for (const Entry &e : out.entries)
    held_->release(e.bytes);
  return out;
}

int64_t FileWindow::clear() {
  std::unique_lock<std::mutex> lock(mu_);
  unclaimed_.clear();
  cv_.wait(lock, [&] { return tasks_ == 0; });
  int64_t bytes = 0;
  for (const auto &s : slots_) {
    for (const Entry &e : s->shard.entries)
      held_->release(e.bytes);
    bytes += s->shard.bytesRead;
  }
  slots_.clear();
  return bytes;
}

bool FileWindow::Shard::refusedByBudget() const {
  for (const Entry &e : entries)
    if (e.result.isError() && e.result.error().reason == kRecordDoesNotFit)
      return true;
  return false;
}

} // namespace sluice::runtime::detail
