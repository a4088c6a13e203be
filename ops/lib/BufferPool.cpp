//===- BufferPool.cpp - Process-wide reuse of large tensor buffers --------===//
//
// One mutex guards everything: only buffers of 1 MiB and more come here,
// and filling one costs far more than the lock. Buffers are freed outside
// the lock (unmapping tens of MiB takes a while).
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Allocation.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace sluice {

namespace {

constexpr size_t kAlignment = 64;
/// Sizes whose allocation counts are remembered to tell recurring sizes
/// from one-off ones.
constexpr size_t kTrackedSizes = 64;

void freeAligned(void *p) {
  ::operator delete(p, std::align_val_t(kAlignment));
}

bool enabledByEnvironment() {
  const char *v = std::getenv("SLUICE_NO_BUFFER_POOL");
  return !(v && *v && std::strcmp(v, "0") != 0);
}

class Pool {
public:
  Pool() : enabled_(enabledByEnvironment()) {}

  void *allocate(size_t bytes) {
    if (enabled_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      noteAllocation(bytes);
      // The most recently freed buffer of the size: its pages are the
      // likeliest to still be in a cache.
      for (size_t i = idle_.size(); i-- > 0;) {
        if (idle_[i].bytes != bytes)
          continue;
        void *p = idle_[i].p;
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        idleBytes_ -= bytes;
        if (limit_)
          limit_->release(static_cast<int64_t>(bytes));
        ++hits_;
        return p;
      }
      ++misses_;
    }
    return ::operator new(bytes, std::align_val_t(kAlignment));
  }

  void release(void *p, size_t bytes) {
    std::vector<void *> evicted;
    if (bytes <= kPoolMaxIdleBytes &&
        enabled_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      // Checked again under the lock: a concurrent setBufferPoolEnabled(false)
      // must not be followed by a buffer parked here.
      if (enabled_.load(std::memory_order_relaxed) && recurring(bytes) &&
          idleOfSize(bytes) < kPoolMaxPerSize &&
          (!limit_ || limit_->tryReserveNow(static_cast<int64_t>(bytes)))) {
        idle_.push_back({bytes, p});
        idleBytes_ += bytes;
        p = nullptr;
        size_t drop = 0;
        while (idleBytes_ > kPoolMaxIdleBytes) {
          idleBytes_ -= idle_[drop].bytes;
          if (limit_)
            limit_->release(static_cast<int64_t>(idle_[drop].bytes));
          evicted.push_back(idle_[drop].p);
          ++drop;
        }
        idle_.erase(idle_.begin(),
                    idle_.begin() + static_cast<std::ptrdiff_t>(drop));
      }
    }
    if (p)
      freeAligned(p);
    for (void *q : evicted)
      freeAligned(q);
  }

  void trim() {
    std::vector<Idle> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all.swap(idle_);
      if (limit_)
        limit_->release(static_cast<int64_t>(idleBytes_));
      idleBytes_ = 0;
      // A trimmed pool starts over: sizes must recur again to be kept.
      seen_.clear();
    }
    for (const Idle &i : all)
      freeAligned(i.p);
  }

  void setEnabled(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      enabled_.store(on, std::memory_order_relaxed);
    }
    if (!on)
      trim();
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  /// Moves the idle buffers' reservations from the old limit to `limit`;
  /// those it cannot hold are freed.
  void setLimit(AllocationLimit *limit, AllocationLimit *onlyIf, bool check) {
    std::vector<void *> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (check && limit_ != onlyIf)
        return;
      if (limit_)
        limit_->release(static_cast<int64_t>(idleBytes_));
      limit_ = limit;
      std::vector<Idle> kept;
      idleBytes_ = 0;
      for (const Idle &i : idle_) {
        if (!limit_ || limit_->tryReserveNow(static_cast<int64_t>(i.bytes))) {
          kept.push_back(i);
          idleBytes_ += i.bytes;
        } else {
          dropped.push_back(i.p);
        }
      }
      idle_.swap(kept);
    }
    for (void *p : dropped)
      freeAligned(p);
  }

  BufferPoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    BufferPoolStats s;
    s.idleBuffers = static_cast<int64_t>(idle_.size());
    s.idleBytes = static_cast<int64_t>(idleBytes_);
    s.hits = hits_;
    s.misses = misses_;
    return s;
  }

private:
  struct Idle {
    size_t bytes;
    void *p;
  };
  struct Seen {
    size_t bytes;
    int64_t count;
    uint64_t last;
  };

  /// Counts an allocation of `bytes`. When the table is full the least
  /// allocated (then least recent) size makes room, so the sizes a pipeline
  /// allocates again and again stay while one-off sizes churn.
  void noteAllocation(size_t bytes) {
    ++tick_;
    for (Seen &s : seen_)
      if (s.bytes == bytes) {
        ++s.count;
        s.last = tick_;
        return;
      }
    if (seen_.size() < kTrackedSizes) {
      seen_.push_back({bytes, 1, tick_});
      return;
    }
    auto victim = std::min_element(
        seen_.begin(), seen_.end(), [](const Seen &a, const Seen &b) {
          return a.count != b.count ? a.count < b.count : a.last < b.last;
        });
    *victim = {bytes, 1, tick_};
  }

  bool recurring(size_t bytes) const {
    for (const Seen &s : seen_)
      if (s.bytes == bytes)
        return s.count >= 2;
    return false;
  }

  size_t idleOfSize(size_t bytes) const {
    return static_cast<size_t>(
        std::count_if(idle_.begin(), idle_.end(),
                      [&](const Idle &i) { return i.bytes == bytes; }));
  }

  std::atomic<bool> enabled_;
  std::mutex mu_;
  /// Where idle buffers are reserved (a running pipeline's budget).
  AllocationLimit *limit_ = nullptr;
  /// Oldest first.
  std::vector<Idle> idle_;
  size_t idleBytes_ = 0;
  std::vector<Seen> seen_;
  uint64_t tick_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

/// Never destroyed: tensors may be freed by static destructors that run
/// after this file's.
Pool &pool() {
  static Pool *p = new Pool();
  return *p;
}

} // namespace

bool bufferPoolEnabled() { return pool().enabled(); }
void setBufferPoolEnabled(bool enabled) { pool().setEnabled(enabled); }
bool bufferPoolKeeps(size_t bytes) {
  return bytes >= kPoolMinBytes && bytes <= kPoolMaxIdleBytes &&
         pool().enabled();
}
BufferPoolStats bufferPoolStats() { return pool().stats(); }
void trimBufferPool() { pool().trim(); }
void setBufferPoolLimit(AllocationLimit *limit) {
  pool().setLimit(limit, nullptr, false);
}
void clearBufferPoolLimit(AllocationLimit *limit) {
  pool().setLimit(nullptr, limit, true);
}

namespace detail {
void *poolAllocate(size_t bytes) { return pool().allocate(bytes); }
void poolRelease(void *p, size_t bytes) { pool().release(p, bytes); }
} // namespace detail

} // namespace sluice
