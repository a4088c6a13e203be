//===- BufferPool.cpp - Process-wide reuse of large tensor buffers --------===//
//
// One mutex guards the large pool: only buffers over 64 KiB come
// there, and filling one costs far more than the lock. Buffers are freed
// outside the lock (unmapping tens of MiB takes a while). The small-buffer
// pool has its own mutex around a stack per 64-byte size class (a push or a
// pop, no search; a new slab when a class runs dry), and in front of it a
// cache per thread for the classes up to kCachedClassMaxBytes.
//
// Why the per-thread caches: every small tensor and every control block
// went through that one mutex, and every free and reuse reserved or
// released its bytes in the pipeline's budget (atomics on counters all
// threads share). On examples/fashion_mnist.yaml (2 threads, 3 epochs) perf
// put 7.3% of the process's CPU samples in the pool at load ~15, and on a
// quiet host 9-19%, most of it waking and waiting on the contended mutex
// (futex). A thread now keeps up to kCacheClassBytes of idle buffers per
// class (kCacheMinBuffers..kCacheMaxBuffers buffers) for itself, trades
// them with the shared lists half a cache at a time (one lock per batch),
// and a batch moves with its budget reservation (no budget counter is
// touched). A cache reserves in chunks (chunkFor): what it frees eats
// into its credit and what it hands out adds to it, and only a cache whose
// credit is spent, or exceeds two chunks, goes to the budget. So idle bytes
// are never uncounted and at most two chunks per thread are counted that
// are not idle. Records are made on one thread and freed on another, so
// the producer's cache keeps refilling from the shared lists and the
// consumer's keeps spilling into them: with caches of 8 KiB per class the
// batches were 1-2 buffers and the caches cost more than they saved (branch
// issue-7mem-tcache); with 64 KiB (8-512 buffers) they are 4-256.
//
// Correctness rules: only its own thread touches a cache (no lock on the
// hot path); the counters stats read from other threads are atomics. The
// pool's reservation is one sum, the shared lists' share plus the caches'
// shares, of which one part is reserved in the limit and the rest is
// uncounted (no limit, or past the quarter-of-the-budget cap);
// setBufferPoolLimit() moves that sum from the old limit to the new one
// without touching any cache, so no reservation outlives its budget. A
// trim (or turning the pool off) bumps a counter that makes each cache go
// back to the shared lists at its thread's next allocation or free; the
// trimming thread's own cache goes back at once, and a cache whose thread
// is parked keeps its slabs until it runs again or ends. A thread's cache
// goes back to the shared lists when the thread ends. Lock order: the
// cache registry, then the pool's lock. SLUICE_NO_SMALL_POOL_CACHE=1 turns
// the caches off.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/MapAligned.h"
#include "sluice/ops/Switches.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <pthread.h>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
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

/// Buffers from this size up are backed by transparent huge pages where
/// the kernel allows it (THP "madvise" mode): a batch buffer's first touch
/// then takes one fault per 2 MiB instead of one per 4 KiB page.
constexpr size_t kHugePageMinBytes = size_t(4) << 20;

/// madvise(MADV_HUGEPAGE) over the whole 2 MiB pages inside [p, p + bytes),
/// unless SLUICE_NO_HUGE_PAGES is set. Advice only: it changes where the
/// bytes live, never what they are.
void adviseHugePages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  static const bool off = switchedOff("SLUICE_NO_HUGE_PAGES");
  if (off || bytes < kHugePageMinBytes)
    return;
  uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  uintptr_t first =
      (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  uintptr_t last = (begin + bytes) / kHugePageBytes * kHugePageBytes;
  if (last > first)
    ::madvise(reinterpret_cast<void *>(first), last - first, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

bool enabledByEnvironment() { return !switchedOff("SLUICE_NO_BUFFER_POOL"); }

/// Size classes a thread caches (64 .. kCachedClassMaxBytes bytes): tensors
/// of small records and every tensor's control block.
constexpr size_t kCachedClassMaxBytes = size_t(8) << 10;
constexpr size_t kCachedClasses = kCachedClassMaxBytes / kAlignment;
/// Idle bytes a thread keeps per class: at least kCacheMinBuffers and at
/// most kCacheMaxBuffers buffers. The caches trade with the shared lists
/// half a cache at a time, so a producer thread (a source making records)
/// and a consumer thread (the batch stage freeing them) take the shared
/// lock once per (capacity / 2) tensors of a class, not once per tensor.
constexpr size_t kCacheClassBytes = size_t(64) << 10;
constexpr size_t kCacheMinBuffers = 8;
constexpr size_t kCacheMaxBuffers = 512;

size_t cacheCapacity(size_t bytes) {
  return std::clamp<size_t>(kCacheClassBytes / bytes, kCacheMinBuffers,
                            kCacheMaxBuffers);
}

/// A thread's idle small buffers (see the file comment). Only its own
/// thread touches the lists and the reservation; the counters are atomics
/// (written with plain stores by that thread) only so that stats can read
/// them from another.
struct ThreadCache {
  /// lists[i]: idle buffers of (i + 1) * 64 bytes, most recent last.
  std::vector<void *> lists[kCachedClasses];
  std::atomic<size_t> idleBytes{0};
  std::atomic<int64_t> idleBuffers{0};
  std::atomic<int64_t> hits{0}; ///< allocations served from the cache
  /// This cache's share of the pool's reservation: idleBytes plus a credit
  /// of at most two chunks, or less when the budget would not give more.
  size_t reserved = 0;
  /// The pool's trim count this cache last saw (SmallPool::trims_).
  uint64_t trims = 0;
};

/// Adds `d` to an atomic counter only its owner thread writes.
template <typename T> void bump(std::atomic<T> &a, T d) {
  a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

/// Free lists of small buffers, one per 64-byte size class, carved out of
/// slabs of about kSmallPoolSlabBytes: one aligned allocation serves many
/// buffers, so a 64-byte buffer costs 64 bytes (an aligned malloc of its own
/// costs a header and up to an alignment of slack), and buffers are reused
/// whichever thread frees them (glibc's per-thread arenas would keep what
/// one worker freed away from another). A slab goes back to malloc when all
/// its buffers are idle in the shared lists and the pool is trimmed.
///
/// The reservation: the pool holds reservedTotal() = reserved_ (the shared
/// lists' share) + cacheReserved_ (the caches' shares), of which counted_
/// is reserved in limit_ and uncounted_ is not (no limit, or one that could
/// not hold it). Caches take and give back shares under mu_, a chunk or a
/// batch at a time; setLimit() moves the whole reservation from one limit
/// to the next without touching a cache.
class SmallPool {
public:
  SmallPool()
      : enabled_(enabledByEnvironment() &&
                 !switchedOff("SLUICE_NO_SMALL_BUFFER_POOL")),
        cachesOn_(!switchedOff("SLUICE_NO_SMALL_POOL_CACHE")),
        classes_(kSmallPoolMaxBytes / kAlignment) {}

  /// Held across fork() (pthread_atfork): a child must not inherit a lock
  /// that a thread of the parent, which does not exist there, held.
  void lockForFork() {
    cachesMu_.lock();
    mu_.lock();
  }
  void unlockAfterFork() {
    mu_.unlock();
    cachesMu_.unlock();
  }

  void *allocate(size_t bytes, bool evenIfDisabled) {
    bool on = enabled_.load(std::memory_order_relaxed);
    if (!evenIfDisabled && !on)
      return nullptr;
    if (on && bytes <= kCachedClassMaxBytes && cachesOn_)
      if (ThreadCache *c = threadCache())
        return cacheAllocate(*c, bytes);
    return sharedAllocate(bytes);
  }

  void release(void *p, size_t bytes) {
    if (bytes <= kCachedClassMaxBytes && cachesOn_ &&
        enabled_.load(std::memory_order_relaxed))
      if (ThreadCache *c = threadCache()) {
        cacheRelease(*c, p, bytes);
        return;
      }
    sharedRelease(p, bytes);
  }

  void *sharedAllocate(size_t bytes) {
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
      giveBack(reserved_ - idleBytes_);
      reserved_ = idleBytes_;
    }
    return p;
  }

  void sharedRelease(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    classes_[bytes / kAlignment - 1].push_back(p);
    idleBytes_ += bytes;
    ++idleBuffers_;
    if (take(bytes))
      reserved_ += bytes;
  }

  /// Frees the slabs whose buffers are all idle in the shared lists, after
  /// this thread's cache went back to them. Other threads' caches go back
  /// as their threads next allocate or free (they see trims_ change) or
  /// end; until then their slabs stay.
  void trim() {
    trims_.fetch_add(1, std::memory_order_relaxed);
    if (ThreadCache *c = ownCache()) {
      std::lock_guard<std::mutex> lock(mu_);
      drainLocked(*c);
      c->trims = trims_.load(std::memory_order_relaxed);
    }
    std::vector<void *> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      freeIdleSlabs(freed);
    }
    for (void *p : freed)
      freeAligned(p);
  }

  /// Called as a thread ends: its cache goes back to the shared lists.
  void retire(ThreadCache *c) {
    {
      std::lock_guard<std::mutex> reg(cachesMu_);
      caches_.erase(std::remove(caches_.begin(), caches_.end(), c),
                    caches_.end());
      std::lock_guard<std::mutex> lock(mu_);
      drainLocked(*c);
      retiredHits_ += c->hits.load(std::memory_order_relaxed);
    }
    delete c;
  }

  void setEnabled(bool on) {
    enabled_.store(on, std::memory_order_relaxed);
    if (!on)
      trim();
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  /// As Pool::setLimit: the whole reservation (shared lists and caches)
  /// leaves the old limit and is reserved in the new one; when that cannot
  /// hold it, slabs wholly idle in the shared lists are freed first, and
  /// what it still cannot hold stays uncounted (as idle small buffers past
  /// their cap do).
  void setLimit(AllocationLimit *limit, AllocationLimit *onlyIf, bool check) {
    std::vector<void *> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (check && limit_ != onlyIf)
        return;
      // This thread's cache joins the shared lists (the pipeline's thread
      // sets and clears the limit: what it freed is idle there).
      if (ThreadCache *c = ownCache())
        drainLocked(*c);
      if (limit_ && counted_ > 0)
        limit_->release(static_cast<int64_t>(counted_));
      uncounted_ += counted_;
      counted_ = 0;
      limit_ = limit;
      chunk_.store(chunkFor(limit_), std::memory_order_relaxed);
      // Nothing is counted now: the whole reservation is uncounted_.
      if (limit_ && count(uncounted_)) {
        uncounted_ = 0;
      } else if (limit_) {
        freeIdleSlabs(freed); // gives back from uncounted_
        if (count(uncounted_))
          uncounted_ = 0;
      }
    }
    for (void *p : freed)
      freeAligned(p);
  }

  void addStats(BufferPoolStats &s) {
    std::lock_guard<std::mutex> reg(cachesMu_);
    std::lock_guard<std::mutex> lock(mu_);
    s.smallIdleBuffers = idleBuffers_;
    s.smallIdleBytes = static_cast<int64_t>(idleBytes_);
    s.smallHits = hits_ + retiredHits_;
    for (ThreadCache *c : caches_) {
      s.smallIdleBuffers += c->idleBuffers.load(std::memory_order_relaxed);
      s.smallIdleBytes +=
          static_cast<int64_t>(c->idleBytes.load(std::memory_order_relaxed));
      s.smallHits += c->hits.load(std::memory_order_relaxed);
    }
    s.smallSlabBytes = static_cast<int64_t>(slabBytes_);
    s.smallReservedBytes = static_cast<int64_t>(counted_);
  }

private:
  struct Slab {
    char *base;
    size_t bytes; ///< of each buffer
    size_t count; ///< buffers
  };

  /// This thread's cache, made and registered on first use; null while the
  /// thread is ending.
  ThreadCache *threadCache();
  /// This thread's cache if it has one (never makes one).
  ThreadCache *ownCache();

  /// The budget chunk a cache reserves at a time: small against the limit
  /// (a 32 KiB test budget must not be spent on one cache's credit).
  size_t chunk() const { return chunk_.load(std::memory_order_relaxed); }
  static size_t chunkFor(const AllocationLimit *limit) {
    constexpr size_t most = kSmallPoolThreadCredit / 2;
    int64_t l = limit ? limit->limit() : 0;
    return l <= 0 ? most
                  : std::clamp<size_t>(static_cast<size_t>(l / 256), 64, most);
  }

  size_t reservedTotal() const { return counted_ + uncounted_; }

  /// Adds `bytes` to the pool's reservation (under mu_): in limit_ when
  /// there is one, within the quarter of the budget idle small buffers may
  /// take (they cannot be handed back one by one: they live in slabs), so
  /// past it they wait uncounted rather than crowd the pipeline out of a
  /// small budget; false (nothing added) when the limit refuses. Without a
  /// limit the bytes are added uncounted.
  bool take(size_t bytes) {
    if (!limit_) {
      uncounted_ += bytes;
      return true;
    }
    return count(bytes);
  }
  /// take() into limit_ only (under mu_).
  bool count(size_t bytes) {
    if (bytes == 0)
      return true;
    int64_t l = limit_->limit();
    if ((l > 0 && static_cast<int64_t>(counted_ + bytes) > l / 4) ||
        !limit_->tryReserveNow(static_cast<int64_t>(bytes)))
      return false;
    counted_ += bytes;
    return true;
  }
  /// Takes `bytes` off the pool's reservation (under mu_): the uncounted
  /// part first, then what limit_ holds.
  void giveBack(size_t bytes) {
    size_t u = std::min(bytes, uncounted_);
    uncounted_ -= u;
    bytes -= u;
    if (bytes > 0) {
      counted_ -= bytes;
      limit_->release(static_cast<int64_t>(bytes));
    }
  }

  /// Makes c's share cover its idle bytes plus a chunk; false when the
  /// budget will not give it (c's owner, under mu_).
  bool cacheTake(ThreadCache &c) {
    size_t idle = c.idleBytes.load(std::memory_order_relaxed);
    size_t want = idle - c.reserved + chunk();
    if (!take(want))
      return false;
    c.reserved += want;
    cacheReserved_ += want;
    return true;
  }

  /// Gives back c's share beyond its idle bytes and `keep` (c's owner,
  /// under mu_).
  void cacheGiveBack(ThreadCache &c, size_t keep) {
    size_t idle = c.idleBytes.load(std::memory_order_relaxed);
    if (c.reserved <= idle + keep)
      return;
    size_t give = c.reserved - idle - keep;
    c.reserved -= give;
    cacheReserved_ -= give;
    giveBack(give);
  }

  /// What the owner does first on every allocation and free: after a trim
  /// (or the pool turned off) its cache goes back to the shared lists.
  void noticeTrim(ThreadCache &c) {
    uint64_t t = trims_.load(std::memory_order_relaxed);
    if (c.trims == t)
      return;
    std::lock_guard<std::mutex> lock(mu_);
    drainLocked(c);
    c.trims = t;
  }

  void *cacheAllocate(ThreadCache &c, size_t bytes) {
    noticeTrim(c);
    std::vector<void *> &list = c.lists[bytes / kAlignment - 1];
    if (list.empty()) {
      // Half a cache from the shared list in one go, with the shared
      // lists' reservation of those bytes.
      size_t n = std::max<size_t>(1, cacheCapacity(bytes) / 2);
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void *> &shared = classes_[bytes / kAlignment - 1];
      if (shared.empty())
        carve(bytes, shared);
      else
        ++hits_;
      n = std::min(n, shared.size());
      list.insert(list.end(), shared.end() - static_cast<std::ptrdiff_t>(n),
                  shared.end());
      shared.resize(shared.size() - n);
      idleBytes_ -= n * bytes;
      idleBuffers_ -= static_cast<int64_t>(n);
      if (reserved_ > idleBytes_) {
        size_t moved = reserved_ - idleBytes_;
        reserved_ -= moved;
        c.reserved += moved;
        cacheReserved_ += moved;
      }
      bump(c.idleBytes, n * bytes);
      bump(c.idleBuffers, static_cast<int64_t>(n));
    } else {
      bump<int64_t>(c.hits, 1);
    }
    void *p = list.back();
    list.pop_back();
    bump(c.idleBytes, size_t(0) - bytes);
    bump<int64_t>(c.idleBuffers, -1);
    size_t idle = c.idleBytes.load(std::memory_order_relaxed);
    if (c.reserved > idle + 2 * chunk()) {
      std::lock_guard<std::mutex> lock(mu_);
      cacheGiveBack(c, chunk());
    } else if (c.reserved < idle) {
      // Fewer reserved than idle (a batch the shared lists held
      // uncounted): counted now, or back to the shared lists.
      std::lock_guard<std::mutex> lock(mu_);
      if (!cacheTake(c))
        drainLocked(c);
    }
    return p;
  }

  void cacheRelease(ThreadCache &c, void *p, size_t bytes) {
    noticeTrim(c);
    std::vector<void *> &list = c.lists[bytes / kAlignment - 1];
    list.push_back(p);
    bump(c.idleBytes, bytes);
    bump<int64_t>(c.idleBuffers, 1);
    size_t cap = cacheCapacity(bytes);
    if (list.size() > cap) {
      // Full: the older half goes to the shared lists in one go, with its
      // reservation.
      size_t n = list.size() - cap / 2;
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void *> &shared = classes_[bytes / kAlignment - 1];
      shared.insert(shared.end(), list.begin(),
                    list.begin() + static_cast<std::ptrdiff_t>(n));
      list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(n));
      bump(c.idleBytes, size_t(0) - n * bytes);
      bump(c.idleBuffers, -static_cast<int64_t>(n));
      idleBytes_ += n * bytes;
      idleBuffers_ += static_cast<int64_t>(n);
      size_t r = std::min(n * bytes, c.reserved);
      c.reserved -= r;
      cacheReserved_ -= r;
      reserved_ += r;
    }
    if (c.reserved < c.idleBytes.load(std::memory_order_relaxed)) {
      // Out of credit: a chunk more, or (the budget will not give it)
      // everything to the shared lists, which hold idle buffers uncounted
      // past their cap.
      std::lock_guard<std::mutex> lock(mu_);
      if (!cacheTake(c))
        drainLocked(c);
    }
  }

  /// Moves all of c's buffers to the shared lists with their reservation
  /// and gives back its credit (c's owner or its retirement, under mu_).
  void drainLocked(ThreadCache &c) {
    for (size_t i = 0; i < kCachedClasses; ++i) {
      std::vector<void *> &list = c.lists[i];
      if (list.empty())
        continue;
      std::vector<void *> &shared = classes_[i];
      shared.insert(shared.end(), list.begin(), list.end());
      list.clear();
    }
    size_t moved = c.idleBytes.load(std::memory_order_relaxed);
    idleBytes_ += moved;
    idleBuffers_ += c.idleBuffers.load(std::memory_order_relaxed);
    c.idleBytes.store(0, std::memory_order_relaxed);
    c.idleBuffers.store(0, std::memory_order_relaxed);
    size_t r = std::min(moved, c.reserved);
    c.reserved -= r;
    cacheReserved_ -= r;
    reserved_ += r;
    cacheGiveBack(c, 0);
    if (reserved_ < idleBytes_ && take(idleBytes_ - reserved_))
      reserved_ = idleBytes_;
  }

  /// Adds a new slab's buffers of `bytes` to `c` (under the lock). The idle
  /// ones are reserved like freed ones; when the budget cannot hold them
  /// the slab is a single buffer.
  void carve(size_t bytes, std::vector<void *> &c) {
    size_t count = std::max<size_t>(1, kSmallPoolSlabBytes / bytes);
    if (count > 1) {
      if (take((count - 1) * bytes))
        reserved_ += (count - 1) * bytes;
      else
        count = 1;
    }
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

  /// Moves every slab whose buffers are all idle in the shared lists into
  /// `freed` and drops its buffers from the lists (under the lock).
  void freeIdleSlabs(std::vector<void *> &freed) {
    if (slabs_.empty())
      return;
    std::sort(slabs_.begin(), slabs_.end(),
              [](const Slab &a, const Slab &b) { return a.base < b.base; });
    std::vector<size_t> idleIn(slabs_.size(), 0);
    auto slabOf = [&](void *p) {
      auto it =
          std::upper_bound(slabs_.begin(), slabs_.end(), static_cast<char *>(p),
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
      giveBack(reserved_ - idleBytes_);
      reserved_ = idleBytes_;
    }
  }

  std::atomic<bool> enabled_;
  const bool cachesOn_;
  std::mutex cachesMu_;
  std::vector<ThreadCache *> caches_; ///< registered, under cachesMu_
  /// Hits of the caches of threads that have ended.
  int64_t retiredHits_ = 0;
  /// Trims so far: a cache that sees it change goes back to the shared
  /// lists.
  std::atomic<uint64_t> trims_{0};
  /// chunkFor(limit_), read by the caches without the lock.
  std::atomic<size_t> chunk_{kSmallPoolThreadCredit / 2};
  std::mutex mu_;
  AllocationLimit *limit_ = nullptr;
  /// classes_[i]: idle buffers of (i + 1) * 64 bytes, most recent last.
  std::vector<std::vector<void *>> classes_;
  std::vector<Slab> slabs_;
  size_t slabBytes_ = 0;
  size_t idleBytes_ = 0;
  int64_t idleBuffers_ = 0;
  /// The shared lists' share of the reservation (at most idleBytes_).
  size_t reserved_ = 0;
  /// The caches' shares, summed.
  size_t cacheReserved_ = 0;
  /// reserved_ + cacheReserved_ = counted_ (in limit_) + uncounted_.
  size_t counted_ = 0;
  size_t uncounted_ = 0;
  int64_t hits_ = 0;
};

class Pool {
public:
  Pool() : enabled_(enabledByEnvironment()) {}

  /// As SmallPool::lockForFork.
  void lockForFork() { mu_.lock(); }
  void unlockAfterFork() { mu_.unlock(); }

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
    size_t resident =
        bytes <= kPoolMaxIdleBytes && enabled_.load(std::memory_order_relaxed)
            ? residentBytes(p, bytes)
            : bytes;
    if (bytes <= kPoolMaxIdleBytes &&
        enabled_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);
      // Checked again under the lock: a concurrent setBufferPoolEnabled(false)
      // must not be followed by a buffer parked here.
      if (enabled_.load(std::memory_order_relaxed) && recurring(bytes) &&
          idleOfSize(bytes) < kPoolMaxPerSize &&
          (!limit_ || limit_->tryReserveNow(static_cast<int64_t>(resident)))) {
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
  static Pool *p = [] {
    Pool *made = new Pool();
    ::pthread_atfork([] { pool().lockForFork(); },
                     [] { pool().unlockAfterFork(); },
                     [] { pool().unlockAfterFork(); });
    return made;
  }();
  return *p;
}

SmallPool &smallPool() {
  static SmallPool *p = [] {
    SmallPool *made = new SmallPool();
    ::pthread_atfork([] { smallPool().lockForFork(); },
                     [] { smallPool().unlockAfterFork(); },
                     [] { smallPool().unlockAfterFork(); });
    return made;
  }();
  return *p;
}

/// Owns the thread's cache: hands it back to the pool as the thread ends.
struct CacheHolder {
  ThreadCache *cache = nullptr;
  bool ended = false;
  ~CacheHolder() {
    ended = true;
    if (cache)
      smallPool().retire(cache);
    cache = nullptr;
  }
};
thread_local CacheHolder cacheHolder;

ThreadCache *SmallPool::threadCache() {
  CacheHolder &h = cacheHolder;
  if (h.cache || h.ended)
    return h.cache;
  auto *c = new ThreadCache();
  c->trims = trims_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> reg(cachesMu_);
  caches_.push_back(c);
  h.cache = c;
  return c;
}

ThreadCache *SmallPool::ownCache() {
  CacheHolder &h = cacheHolder;
  return h.ended ? nullptr : h.cache;
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

namespace {
/// The thread's BufferSourceScope's source.
thread_local BufferSource *threadSource = nullptr;
/// Buffers sources handed out, by address: looked up only while there are
/// some (sourcedCount), so a process that never pins pays one atomic load
/// per large release.
std::shared_mutex sourcedMu;
std::unordered_map<void *, std::shared_ptr<BufferSource>> &sourced() {
  static auto *m =
      new std::unordered_map<void *, std::shared_ptr<BufferSource>>;
  return *m;
}
std::atomic<int64_t> sourcedCount{0};
} // namespace

BufferSource::~BufferSource() = default;

BufferSourceScope::BufferSourceScope(BufferSource *source)
    : outer_(threadSource) {
  threadSource = source;
}
BufferSourceScope::~BufferSourceScope() { threadSource = outer_; }

void recordSourcedBuffer(void *p, std::shared_ptr<BufferSource> source) {
  std::unique_lock<std::shared_mutex> lock(sourcedMu);
  if (sourced().insert_or_assign(p, std::move(source)).second)
    sourcedCount.fetch_add(1, std::memory_order_relaxed);
}

void forgetSourcedBuffer(void *p) {
  std::shared_ptr<BufferSource> gone; // released after the lock
  std::unique_lock<std::shared_mutex> lock(sourcedMu);
  auto it = sourced().find(p);
  if (it == sourced().end())
    return;
  gone = std::move(it->second);
  sourced().erase(it);
  sourcedCount.fetch_sub(1, std::memory_order_relaxed);
}

void *poolAllocate(size_t bytes) {
  if (BufferSource *s = threadSource) {
    if (void *p = s->takeIdle(bytes))
      return p;
    if (void *p = s->allocate(bytes))
      return p;
  }
  return pool().allocate(bytes);
}
void *poolTakeIdle(size_t bytes) {
  if (BufferSource *s = threadSource)
    return s->takeIdle(bytes);
  return pool().take(bytes);
}
void poolRelease(void *p, size_t bytes) {
  if (sourcedCount.load(std::memory_order_relaxed) > 0) {
    std::shared_ptr<BufferSource> owner;
    {
      std::shared_lock<std::shared_mutex> lock(sourcedMu);
      auto it = sourced().find(p);
      if (it != sourced().end())
        owner = it->second;
    }
    if (owner) {
      owner->release(p, bytes);
      return;
    }
  }
  pool().release(p, bytes);
}
void *smallPoolAllocate(size_t bytes, bool evenIfDisabled) {
  return smallPool().allocate(bytes, evenIfDisabled);
}
void smallPoolRelease(void *p, size_t bytes) { smallPool().release(p, bytes); }
} // namespace detail

} // namespace sluice
