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
// Bounds: at most kPoolMaxPerSize idle buffers of one size and at most
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
// SLUICE_NO_BUFFER_POOL=1 in the environment turns the pool off (every
// buffer is allocated and freed as it would be without it);
// setBufferPoolEnabled() does the same from code.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_BUFFERPOOL_H
#define SLUICE_OPS_BUFFERPOOL_H

#include <cstddef>
#include <cstdint>

namespace sluice {

/// Smallest buffer the pool keeps (smaller ones come from malloc's free
/// lists, which reuse them without page faults).
constexpr size_t kPoolMinBytes = size_t(1) << 20;
/// Idle buffers of one size the pool keeps at most.
constexpr size_t kPoolMaxPerSize = 4;
/// Idle bytes the pool keeps at most, over all sizes.
constexpr size_t kPoolMaxIdleBytes = size_t(256) << 20;

/// Counters of the process-wide buffer pool.
struct BufferPoolStats {
  int64_t idleBuffers = 0; ///< buffers held for reuse now
  int64_t idleBytes = 0;   ///< their bytes
  int64_t hits = 0;        ///< allocations served from the pool
  int64_t misses = 0;      ///< pooled-size allocations that were not
};

/// Whether freed large buffers are kept for reuse (initially: unless
/// SLUICE_NO_BUFFER_POOL is set to something other than "0").
bool bufferPoolEnabled();
/// Turns the pool on or off; turning it off frees the idle buffers.
void setBufferPoolEnabled(bool enabled);
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
/// Frees every idle buffer and forgets which sizes recurred (a size is
/// kept again only after it has been allocated twice more).
void trimBufferPool();

namespace detail {
/// A 64-byte aligned buffer of `bytes` (a multiple of 64, at least
/// kPoolMinBytes), from the pool when one of that size is idle.
void *poolAllocate(size_t bytes);
/// Returns a buffer from poolAllocate(p, bytes) to the pool or frees it.
void poolRelease(void *p, size_t bytes);
} // namespace detail

} // namespace sluice

#endif // SLUICE_OPS_BUFFERPOOL_H
