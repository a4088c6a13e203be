//===- BufferPool.h - Reuse of large tensor buffers -------------*- C++ -*-===//
//
// A pipeline frees and allocates buffers of the same large size over and
// over (every batch of a pipeline has the same size). glibc serves each
// allocation of 32 MiB or more with a fresh mmap and unmaps it on free, so
// every new batch pays one page fault per 4 KiB page: for a 77 MB batch of
// f32[128, 3, 224, 224] that is ~19k faults, several times the cost of
// copying the data into it. Tensor therefore returns freed numeric buffers
// of at least kPoolMinBytes to a small process-wide pool keyed by exact size
// and hands them out again.
//
// Bounds: at most kPoolMaxPerSize (1024) idle buffers of one size and at most
// kPoolMaxIdleBytes (256 MiB) idle in total, least recently freed evicted
// first. A size is pooled only after it has been allocated twice, so one-off
// sizes (decoded images of every size) do not crowd out the recurring ones.
// The pool is never trimmed on a timer: a running pipeline takes its
// buffers back within one batch, and the cap bounds what an idle process
// keeps (trimBufferPool() gives it back on demand).
//
// Memory accounting: idle buffers are resident memory, so a running
// pipeline lends the pool its budget (setBufferPoolLimit): the pool keeps a
// freed buffer only if the budget can hold it (it frees it otherwise) and
// gives the bytes back when the buffer is handed out again or evicted.
// Without a limit (no pipeline running) the pool holds at most
// kPoolMaxIdleBytes uncounted; the next pipeline adopts them into its budget
// (or frees what it cannot hold).
//
// Small buffers (up to kSmallPoolMaxBytes, with the shared_ptr control
// block of each) have a second pool: a free list per 64-byte size class,
// filled by carving slabs of kSmallPoolSlabBytes. Left to malloc, a
// pipeline of small records costs far more than the bytes it holds: each
// 64-byte aligned allocation carries a header and alignment slack (a
// 64-byte one-hot takes ~160 bytes of heap), a shuffle buffer frees records
// in random order between the intermediates of the next ones, and a record
// made on one thread and freed on another leaves its memory in the first
// thread's malloc arena. Measured on examples/fashion_mnist.yaml (shuffle of
// 10,000 28x28 records, 2 threads): peak RSS over the baseline 65 MiB for
// 42 MiB counted without this pool, 45 MiB with it. A freed small buffer
// stays a buffer of its class and serves the next allocation of that class
// on any thread. Idle small buffers are reserved in the running pipeline's
// budget like the large ones (slabs are not touched until used, so a fresh
// slab's idle part is counted before it is resident: at most 64 KiB per
// size class). A slab goes back to malloc when all its buffers are idle and
// the pool is trimmed (trimBufferPool, turning the pool off, or a new
// pipeline whose budget cannot hold the idle bytes).
//
// Fresh buffers of 4 MiB or more (batch buffers) are advised to the kernel
// as transparent huge pages (madvise MADV_HUGEPAGE, for THP's "madvise"
// mode): their first touch takes one fault per 2 MiB instead of per 4 KiB
// (bench/specs/photos_bench.yaml, 6 epochs: 2.7 minor faults per image
// instead of 7.2; the sys-time share moved within the noise of a shared
// host). SLUICE_NO_HUGE_PAGES=1 turns that off.
//
// Each thread keeps a cache of idle small buffers (classes up to 8 KiB, 64
// KiB per class) in front of the shared lists, counted in the budget like
// them: the pool's reservation moves with the buffers, and a cache reserves
// ahead in chunks (at most kSmallPoolThreadCredit beyond what it holds).
// Only its thread touches a cache. It goes back to the shared lists when
// the thread ends, when the thread allocates or frees after a trim (or the
// pool turned off), and when the thread that sets or clears the pipeline's
// limit does so; a budget change moves the whole reservation, the caches'
// share included, from the old limit to the new one (ops/lib/BufferPool.cpp
// says why and how it was measured). trimBufferPool() frees the slabs
// wholly idle in the shared lists and the calling thread's cache; buffers
// in another live thread's cache wait for that thread.
// SLUICE_NO_SMALL_POOL_CACHE=1 turns the caches off.
//
// SLUICE_NO_BUFFER_POOL=1 in the environment turns both pools off (every
// buffer is allocated and freed as it would be without them);
// SLUICE_NO_SMALL_BUFFER_POOL=1 turns off only the small one;
// setBufferPoolEnabled() and setSmallBufferPoolEnabled() do the same from
// code.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_BUFFERPOOL_H
#define SLUICE_OPS_BUFFERPOOL_H

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice {

/// Largest buffer the small-buffer pool keeps (its size classes are the
/// multiples of 64 up to this).
constexpr size_t kSmallPoolMaxBytes = size_t(64) << 10;
/// Smallest buffer the (large) pool keeps: the next size class after the
/// small-buffer pool's. Buffers of 64 KiB to 1 MiB (the batches of small
/// records, e.g. 256 x 28 x 28 f32) are pooled too: left to malloc, each
/// one freed raises glibc's mmap threshold and the next ones fragment the
/// heap (examples/fashion_mnist.yaml: 10 MiB more peak RSS with the
/// large pool starting at 1 MiB).
constexpr size_t kPoolMinBytes = kSmallPoolMaxBytes + 64;
/// Idle buffers of one size the pool keeps at most. Many: the records of a
/// shuffle buffer (588 KiB images) are freed together at the end of an
/// epoch or a `schedule: auto` probe, and what the pool does not keep goes
/// to glibc's heap, resident and counted nowhere, where the next epoch or
/// pipeline reuses it uncounted (examples/imagenet.yaml: peak RSS 260 MiB
/// over the baseline for 229 MiB counted with 4 per size; 231 for 227 with
/// this) and faults its pages in again (3.4x the minor faults). The total
/// stays bounded by kPoolMaxIdleBytes and by the budget.
constexpr size_t kPoolMaxPerSize = 1024;
/// Idle bytes the pool keeps at most, over all sizes.
constexpr size_t kPoolMaxIdleBytes = size_t(256) << 20;
/// Bytes of the slabs the small-buffer pool carves its buffers from (one
/// buffer when its class is larger).
constexpr size_t kSmallPoolSlabBytes = size_t(64) << 10;

/// Most bytes a thread's small-buffer cache may have reserved in the
/// running pipeline's budget beyond the idle buffers it holds (it reserves
/// in chunks of up to half this, and at most 1/256 of the limit each, so
/// that freeing a small buffer rarely touches the pool's lock or the
/// budget's shared counters).
constexpr size_t kSmallPoolThreadCredit = size_t(64) << 10;

/// Counters of the process-wide buffer pool.
struct BufferPoolStats {
  int64_t idleBuffers = 0;      ///< buffers held for reuse now
  int64_t idleBytes = 0;        ///< their bytes
  int64_t hits = 0;             ///< allocations served from the pool
  int64_t misses = 0;           ///< pooled-size allocations that were not
  int64_t smallIdleBuffers = 0; ///< small buffers held for reuse now
  int64_t smallIdleBytes = 0;   ///< their bytes
  int64_t smallHits = 0;        ///< small allocations served from the pool
  int64_t smallSlabBytes = 0;   ///< bytes of the slabs it holds (idle or not)
  /// What the small-buffer pool has reserved in the running pipeline's
  /// budget (setBufferPoolLimit): its idle buffers, in the shared lists and
  /// the threads' caches, plus the caches' credit.
  int64_t smallReservedBytes = 0;
};

/// Whether freed large buffers are kept for reuse (initially: unless
/// SLUICE_NO_BUFFER_POOL is set to something other than "0").
bool bufferPoolEnabled();
/// Turns the pool on or off; turning it off frees the idle buffers.
void setBufferPoolEnabled(bool enabled);
/// Whether freed small buffers are kept for reuse (initially: unless
/// SLUICE_NO_BUFFER_POOL or SLUICE_NO_SMALL_BUFFER_POOL is set to something
/// other than "0").
bool smallBufferPoolEnabled();
/// Turns the small-buffer pool on or off; off frees its idle buffers.
void setSmallBufferPoolEnabled(bool enabled);
/// Whether a freed buffer of `bytes` may be kept for reuse (the pool is on
/// and the size in its range), i.e. whether a stream of buffers of that
/// size ends up recycling resident memory rather than faulting in new pages.
bool bufferPoolKeeps(size_t bytes);
/// Counters now.
BufferPoolStats bufferPoolStats();
class AllocationLimit;
/// Makes the pool reserve its idle buffers in `limit` (null: in nothing);
/// the idle buffers move their reservation there, and those it cannot hold
/// are freed.
void setBufferPoolLimit(AllocationLimit *limit);
/// setBufferPoolLimit(nullptr) if `limit` is the pool's limit now.
void clearBufferPoolLimit(AllocationLimit *limit);
/// Frees every idle large buffer and every small-buffer slab whose buffers
/// are all idle (in the shared lists or the calling thread's cache; other
/// threads' caches return theirs at their next allocation), and forgets
/// which sizes recurred (a size is kept again only after it has been
/// allocated twice more).
void trimBufferPool();

namespace detail {
/// Another owner of large buffers that Tensor's allocations (kPoolMinBytes
/// and up) draw from instead of this pool, on a thread while a
/// BufferSourceScope is open: the page-locked batch buffers of
/// runtime/Pinned.h, which the batch step's buffers come from (Tensor
/// itself stays unaware). The buffers it hands out are given back to it
/// by poolRelease, however late (recordSourcedBuffer keeps it alive).
class BufferSource {
public:
  virtual ~BufferSource();
  /// An idle buffer of exactly `bytes`, its idle reservation released (as
  /// poolTakeIdle), or null.
  virtual void *takeIdle(size_t bytes) = 0;
  /// A new buffer of `bytes` (64-byte aligned), or null: the pool then
  /// allocates an ordinary one.
  virtual void *allocate(size_t bytes) = 0;
  /// Takes back a buffer it handed out (from poolRelease).
  virtual void release(void *p, size_t bytes) = 0;
};
/// Makes the large buffers Tensor allocates on this thread come from
/// `source` (null: from the pool) until it closes. Scopes nest.
class BufferSourceScope {
public:
  explicit BufferSourceScope(BufferSource *source);
  ~BufferSourceScope();
  BufferSourceScope(const BufferSourceScope &) = delete;
  BufferSourceScope &operator=(const BufferSourceScope &) = delete;

private:
  BufferSource *outer_;
};
/// Called by a source for each buffer it hands out (poolRelease then gives
/// it back to `source`, which it keeps alive until forgetSourcedBuffer).
void recordSourcedBuffer(void *p, std::shared_ptr<BufferSource> source);
/// Called by a source as it frees a buffer for good.
void forgetSourcedBuffer(void *p);

/// A 64-byte aligned buffer of `bytes` (a multiple of 64, at least
/// kPoolMinBytes), from the pool when one of that size is idle.
void *poolAllocate(size_t bytes);
/// An idle pooled buffer of exactly `bytes` (counted as a poolAllocate hit),
/// or null -- then nothing is counted and poolAllocate() allocates. Lets a
/// caller that reserves bytes before allocating take a recycled buffer
/// first: the pool releases the buffer's idle reservation as it hands it
/// out, so the two reservations never overlap.
void *poolTakeIdle(size_t bytes);
/// Returns a buffer from poolAllocate(p, bytes) to the pool or frees it.
void poolRelease(void *p, size_t bytes);
/// A 64-byte aligned buffer of `bytes` (a multiple of 64, at most
/// kSmallPoolMaxBytes) from the small-buffer pool, or null when that pool
/// is off (unless `evenIfDisabled`).
void *smallPoolAllocate(size_t bytes, bool evenIfDisabled = false);
/// Returns a buffer from smallPoolAllocate (always to the pool: it may be
/// part of a slab).
void smallPoolRelease(void *p, size_t bytes);
} // namespace detail

} // namespace sluice

#endif // SLUICE_OPS_BUFFERPOOL_H
