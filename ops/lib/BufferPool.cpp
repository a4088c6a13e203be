//===- BufferPool.cpp - Process-wide reuse of large tensor buffers --------===//
//
// One mutex guards the large pool: only buffers over 64 KiB come
// there, and filling one costs far more than the lock. Buffers are freed
// outside the lock (unmapping tens of MiB takes a while). The small-buffer
// pool has its own mutex around a stack per 64-byte size class (a push or a
// pop, no search; a new slab when a class runs dry).
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

#include <sys/mman.h>
#include <unistd.h>

namespace sluice {

namespace {

constexpr size_t kAlignment = 64;
/// Sizes whose allocation counts are remembered to tell recurring sizes
/// from one-off ones.
constexpr size_t kTrackedSizes = 64;

void freeAligned(void *p) {
  ::operator delete(p, std::align_val_t(kAlignment));
}

/// Bytes of [p, p + bytes) in resident pages (mincore). An idle buffer is
/// counted by these: a batch buffer dropped half filled (drop_remainder,
/// the end of a probe) has most of its pages never touched, and counting
/// it whole would overstate what the process holds. Pages at the ends that
/// the buffer shares with its neighbours count as resident; `bytes` when
/// the kernel cannot tell.
size_t residentBytes(void *p, size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  uintptr_t first = (begin + page - 1) / page * page;
  uintptr_t last = (begin + bytes) / page * page;
  if (last <= first)
    return bytes;
  size_t pages = (last - first) / page;
  std::vector<unsigned char> in(pages);
  if (mincore(reinterpret_cast<void *>(first), last - first, in.data()) != 0)
    return bytes;
  size_t resident = bytes - (last - first);
  for (unsigned char c : in)
    if (c & 1)
      resident += page;
  return resident;
}

bool setInEnvironment(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

/// Buffers from this size up are backed by transparent huge pages where
/// the kernel allows it (THP "madvise" mode): a batch buffer's first touch
/// then takes one fault per 2 MiB instead of one per 4 KiB page.
constexpr size_t kHugePageMinBytes = size_t(4) << 20;
constexpr size_t kHugePageBytes = size_t(2) << 20;

/// madvise(MADV_HUGEPAGE) over the whole 2 MiB pages inside [p, p + bytes),
/// unless SLUICE_NO_HUGE_PAGES is set. Advice only: it changes where the
/// bytes live, never what they are.
void adviseHugePages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  static const bool off = setInEnvironment("SLUICE_NO_HUGE_PAGES");
  if (off || bytes < kHugePageMinBytes)
    return;
  uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  uintptr_t first = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  uintptr_t last = (begin + bytes) / kHugePageBytes * kHugePageBytes;
  if (last > first)
    ::madvise(reinterpret_cast<void *>(first), last - first, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

bool enabledByEnvironment() { return !setInEnvironment("SLUICE_NO_BUFFER_POOL"); }

/// Free lists of small buffers, one per 64-byte size class, carved out of
/// slabs of about kSmallPoolSlabBytes: one aligned allocation serves many
/// buffers, so a 64-byte buffer costs 64 bytes (an aligned malloc of its own
/// costs a header and up to an alignment of slack), and buffers are reused
/// whichever thread frees them (glibc's per-thread arenas would keep what
/// one worker freed away from another). A slab goes back to malloc when all
/// its buffers are idle and the pool is trimmed.
class SmallPool {
public:
  SmallPool()
      : enabled_(enabledByEnvironment() &&
                 !setInEnvironment("SLUICE_NO_SMALL_BUFFER_POOL")),
        classes_(kSmallPoolMaxBytes / kAlignment) {}

  void *allocate(size_t bytes, bool evenIfDisabled) {
    if (!evenIfDisabled && !enabled_.load(std::memory_order_relaxed))
      return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<void *> &c = classes_[bytes / kAlignment - 1];
    if (!c.empty())
      ++hits_;
    else
      carve(bytes, c);
    void *p = c.back();
    c.pop_back();
    idleBytes_ -= bytes;
    --idleBuffers_;
    if (reserved_ > idleBytes_) {
      limit_->release(static_cast<int64_t>(reserved_ - idleBytes_));
      reserved_ = idleBytes_;
    }
    return p;
  }

  void release(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    classes_[bytes / kAlignment - 1].push_back(p);
    idleBytes_ += bytes;
    ++idleBuffers_;
    reserve(bytes);
  }

  void trim() {
    std::vector<void *> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      freeIdleSlabs(freed);
    }
    for (void *p : freed)
      freeAligned(p);
  }

  void setEnabled(bool on) {
    enabled_.store(on, std::memory_order_relaxed);
    if (!on)
      trim();
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  /// As Pool::setLimit; slabs the new limit cannot hold are freed where all
  /// their buffers are idle.
  void setLimit(AllocationLimit *limit, AllocationLimit *onlyIf, bool check) {
    std::vector<void *> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (check && limit_ != onlyIf)
        return;
      if (limit_ && reserved_ > 0)
        limit_->release(static_cast<int64_t>(reserved_));
      reserved_ = 0;
      limit_ = limit;
      if (limit_ && idleBytes_ > 0 && !reserve(idleBytes_)) {
        freeIdleSlabs(freed);
        if (idleBytes_ > 0)
          reserve(idleBytes_);
      }
    }
    for (void *p : freed)
      freeAligned(p);
  }

  void addStats(BufferPoolStats &s) {
    std::lock_guard<std::mutex> lock(mu_);
    s.smallIdleBuffers = idleBuffers_;
    s.smallIdleBytes = static_cast<int64_t>(idleBytes_);
    s.smallHits = hits_;
    s.smallSlabBytes = static_cast<int64_t>(slabBytes_);
  }

private:
  struct Slab {
    char *base;
    size_t bytes; ///< of each buffer
    size_t count; ///< buffers
  };

  /// Reserves `bytes` of idle buffers in limit_ (under the lock). Idle small
  /// buffers cannot be handed back one by one (they live in slabs), so they
  /// take at most a quarter of the budget: past it they wait uncounted
  /// rather than crowd the pipeline out of a small budget.
  bool reserve(size_t bytes) {
    int64_t cap = limit_ ? limit_->limit() / 4 : 0;
    if (!limit_ || (limit_->limit() > 0 &&
                    static_cast<int64_t>(reserved_ + bytes) > cap) ||
        !limit_->tryReserveNow(static_cast<int64_t>(bytes)))
      return false;
    reserved_ += bytes;
    return true;
  }

  /// Adds a new slab's buffers of `bytes` to `c` (under the lock). The idle
  /// ones are reserved in the limit like freed ones; when it cannot hold
  /// them the slab is a single buffer.
  void carve(size_t bytes, std::vector<void *> &c) {
    size_t count = std::max<size_t>(1, kSmallPoolSlabBytes / bytes);
    if (count > 1 && limit_ && !reserve((count - 1) * bytes))
      count = 1;
    char *base = static_cast<char *>(
        ::operator new(count * bytes, std::align_val_t(kAlignment)));
    slabs_.push_back({base, bytes, count});
    slabBytes_ += count * bytes;
    // Handed out from the front of the slab first.
    for (size_t i = count; i-- > 0;)
      c.push_back(base + i * bytes);
    idleBytes_ += count * bytes;
    idleBuffers_ += static_cast<int64_t>(count);
  }

  /// Moves every slab whose buffers are all idle into `freed` and drops its
  /// buffers from the free lists (under the lock).
  void freeIdleSlabs(std::vector<void *> &freed) {
    if (slabs_.empty())
      return;
    std::sort(slabs_.begin(), slabs_.end(),
              [](const Slab &a, const Slab &b) { return a.base < b.base; });
    std::vector<size_t> idleIn(slabs_.size(), 0);
    auto slabOf = [&](void *p) {
      auto it = std::upper_bound(
          slabs_.begin(), slabs_.end(), static_cast<char *>(p),
          [](char *q, const Slab &s) { return q < s.base; });
      return static_cast<size_t>(it - slabs_.begin()) - 1;
    };
    for (std::vector<void *> &c : classes_)
      for (void *p : c)
        ++idleIn[slabOf(p)];
    std::vector<bool> drop(slabs_.size(), false);
    bool any = false;
    for (size_t i = 0; i < slabs_.size(); ++i)
      if (idleIn[i] == slabs_[i].count)
        drop[i] = any = true;
    if (!any)
      return;
    for (std::vector<void *> &c : classes_)
      c.erase(std::remove_if(c.begin(), c.end(),
                             [&](void *p) { return drop[slabOf(p)]; }),
              c.end());
    std::vector<Slab> kept;
    for (size_t i = 0; i < slabs_.size(); ++i) {
      const Slab &s = slabs_[i];
      if (!drop[i]) {
        kept.push_back(s);
        continue;
      }
      freed.push_back(s.base);
      idleBytes_ -= s.count * s.bytes;
      idleBuffers_ -= static_cast<int64_t>(s.count);
      slabBytes_ -= s.count * s.bytes;
    }
    slabs_.swap(kept);
    if (reserved_ > idleBytes_) {
      limit_->release(static_cast<int64_t>(reserved_ - idleBytes_));
      reserved_ = idleBytes_;
    }
  }

  std::atomic<bool> enabled_;
  std::mutex mu_;
  AllocationLimit *limit_ = nullptr;
  /// classes_[i]: idle buffers of (i + 1) * 64 bytes, most recent last.
  std::vector<std::vector<void *>> classes_;
  std::vector<Slab> slabs_;
  size_t slabBytes_ = 0;
  size_t idleBytes_ = 0;
  /// The part of idleBytes_ reserved in limit_ (at most all of it).
  size_t reserved_ = 0;
  int64_t idleBuffers_ = 0;
  int64_t hits_ = 0;
};

class Pool {
public:
  Pool() : enabled_(enabledByEnvironment()) {}

  void *allocate(size_t bytes) {
    if (enabled_.load(std::memory_order_relaxed)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        noteAllocation(bytes);
        if (void *p = takeIdle(bytes))
          return p;
        ++misses_;
      }
      void *p = ::operator new(bytes, std::align_val_t(kAlignment));
      adviseHugePages(p, bytes);
      return p;
    }
    return ::operator new(bytes, std::align_val_t(kAlignment));
  }

  /// An idle buffer of `bytes`, or null (then nothing is noted).
  void *take(size_t bytes) {
    if (!enabled_.load(std::memory_order_relaxed))
      return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    void *p = takeIdle(bytes);
    if (p)
      noteAllocation(bytes);
    return p;
  }

  void release(void *p, size_t bytes) {
    std::vector<void *> evicted;
    // Outside the lock: a system call over the buffer's pages.
    size_t resident = bytes <= kPoolMaxIdleBytes &&
                              enabled_.load(std::memory_order_relaxed)
                          ? residentBytes(p, bytes)
                          : bytes;
    if (bytes <= kPoolMaxIdleBytes &&
        enabled_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      // Checked again under the lock: a concurrent setBufferPoolEnabled(false)
      // must not be followed by a buffer parked here.
      if (enabled_.load(std::memory_order_relaxed) && recurring(bytes) &&
          idleOfSize(bytes) < kPoolMaxPerSize &&
          (!limit_ ||
           limit_->tryReserveNow(static_cast<int64_t>(resident)))) {
        idle_.push_back({bytes, p, limit_ ? resident : 0});
        idleBytes_ += bytes;
        p = nullptr;
        size_t drop = 0;
        while (idleBytes_ > kPoolMaxIdleBytes) {
          idleBytes_ -= idle_[drop].bytes;
          if (limit_)
            limit_->release(static_cast<int64_t>(idle_[drop].counted));
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
        for (const Idle &i : all)
          limit_->release(static_cast<int64_t>(i.counted));
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
        for (const Idle &i : idle_)
          limit_->release(static_cast<int64_t>(i.counted));
      limit_ = limit;
      std::vector<Idle> kept;
      idleBytes_ = 0;
      for (Idle i : idle_) {
        // What is resident now (pages of a partly filled buffer stay
        // untouched while it waits).
        i.counted = limit_ ? residentBytes(i.p, i.bytes) : 0;
        if (!limit_ || limit_->tryReserveNow(static_cast<int64_t>(i.counted))) {
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
    /// Bytes reserved for it in limit_: its resident pages.
    size_t counted;
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

  /// Hands out the most recently freed idle buffer of `bytes` (its pages
  /// are the likeliest to still be in a cache), or null (under the lock).
  void *takeIdle(size_t bytes) {
    for (size_t i = idle_.size(); i-- > 0;) {
      if (idle_[i].bytes != bytes)
        continue;
      void *p = idle_[i].p;
      if (limit_)
        limit_->release(static_cast<int64_t>(idle_[i].counted));
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
      idleBytes_ -= bytes;
      ++hits_;
      return p;
    }
    return nullptr;
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

SmallPool &smallPool() {
  static SmallPool *p = new SmallPool();
  return *p;
}

} // namespace

bool bufferPoolEnabled() { return pool().enabled(); }
void setBufferPoolEnabled(bool enabled) { pool().setEnabled(enabled); }
bool bufferPoolKeeps(size_t bytes) {
  return bytes >= kPoolMinBytes && bytes <= kPoolMaxIdleBytes &&
         pool().enabled();
}
BufferPoolStats bufferPoolStats() {
  BufferPoolStats s = pool().stats();
  smallPool().addStats(s);
  return s;
}
void trimBufferPool() {
  pool().trim();
  smallPool().trim();
}
bool smallBufferPoolEnabled() { return smallPool().enabled(); }
void setSmallBufferPoolEnabled(bool enabled) {
  smallPool().setEnabled(enabled);
}
void setBufferPoolLimit(AllocationLimit *limit) {
  pool().setLimit(limit, nullptr, false);
  smallPool().setLimit(limit, nullptr, false);
}
void clearBufferPoolLimit(AllocationLimit *limit) {
  pool().setLimit(nullptr, limit, true);
  smallPool().setLimit(nullptr, limit, true);
}

namespace detail {
void *poolAllocate(size_t bytes) { return pool().allocate(bytes); }
void *poolTakeIdle(size_t bytes) { return pool().take(bytes); }
void poolRelease(void *p, size_t bytes) { pool().release(p, bytes); }
void *smallPoolAllocate(size_t bytes, bool evenIfDisabled) {
  return smallPool().allocate(bytes, evenIfDisabled);
}
void smallPoolRelease(void *p, size_t bytes) {
  smallPool().release(p, bytes);
}
} // namespace detail

} // namespace sluice
