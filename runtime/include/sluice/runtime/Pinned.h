//===- Pinned.h - Page-locked batch buffers through a registrar -*- C++ -*-===//
//
// A batch copied to a GPU from pageable memory goes through the driver's
// staging buffer at a fraction of the bus's speed (5.9 against 51 GB/s for
// an f32 image batch on an H200 host), and copying it into page-locked
// memory after the fact costs a second pass over every byte (77 MB per
// 128-image f32 batch). So with RunOptions::pinBatches the batch stage
// allocates its buffers page-locked where they are made (its allocations
// draw from the pool through the tensor buffer pool's BufferSource hook,
// sluice/ops/BufferPool.h: buffers of at least 64 KiB; a smaller field,
// such as a batch's labels, stays ordinary memory): a PinnedPool takes
// page-aligned memory, has the process's HostRegistrar lock it (a CUDA
// runtime's cudaHostRegister, loaded with dlopen: the runtime has no
// build-time CUDA dependency) and keeps each registered buffer for reuse
// once its batch is freed, because registering costs far more than a batch
// takes to fill (the driver pins and maps every page).
//
// The registrar is process-wide and installed by the program (the Python
// module does it for sluice.torch's pin_memory / device="cuda"): one CUDA
// runtime serves every pipeline of the process. A recording registrar (no
// GPU needed; optionally mlock()ing the range) lets tests check the
// bookkeeping: every buffer handed out registered exactly once, none
// unregistered twice or while in use, all unregistered when the pipeline
// ends.
//
// Memory accounting follows the tensor buffer pool's (sluice/ops/
// BufferPool.h): a pinned buffer in use is counted by whoever holds its
// batch (the batch stage, the output), like any batch; an idle one is
// reserved in the pipeline's "pinned batches (idle)" account, and one the
// budget cannot hold as idle is unregistered and freed instead (counted in
// `dropped`), so page-locked memory is never held uncounted. A buffer
// returns to the pool only when the last reference to its batch goes: a
// consumer that copies the batch asynchronously (sluice.torch's side-stream
// copier) keeps it until the copy's event has completed, so the pipeline
// never overwrites memory the GPU is still reading. The batch step's static
// memory need counts one batch more when its batches are pinned (the buffer
// kept registered for the next), so a budget that cannot hold it is refused
// up front, at that step, saying so.
//
// Pinning is asked for per pipeline, by RunOptions::pinBatches
// (sluice::Pipeline's options(); sluice.Pipeline's pin_memory sets it).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_PINNED_H
#define SLUICE_RUNTIME_PINNED_H

#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace sluice {
class AllocationLimit;
}

namespace sluice::runtime {

/// Page-locks and unlocks host memory ranges for fast device copies.
class HostRegistrar {
public:
  virtual ~HostRegistrar();
  /// "cuda (libcudart.so.12)", "record", "mlock": for stats and messages.
  virtual std::string name() const = 0;
  /// Page-locks [p, p + bytes) (page-aligned); an error says why not.
  virtual Status registerRange(void *p, size_t bytes) = 0;
  /// Undoes registerRange(p, bytes).
  virtual void unregisterRange(void *p, size_t bytes) = 0;
};

/// Installs the registrar pipelines created from now on with pinned
/// batches (RunOptions::pinBatches) use (null: none; they are then refused).
/// Pipelines running keep the one they started with.
void setHostRegistrar(std::shared_ptr<HostRegistrar> registrar);
/// The registrar installed now (or null).
std::shared_ptr<HostRegistrar> hostRegistrar();

/// A registrar over the CUDA runtime: cudaHostRegister(p, bytes,
/// cudaHostRegisterPortable) and cudaHostUnregister, looked up with dlopen
/// in `library` when given, else in a libcudart the process has loaded
/// already (torch's), else libcudart.so.12 / .so / .so.11.0. An error when
/// none can be loaded or it has no device.
Expected<std::shared_ptr<HostRegistrar>>
makeCudaRegistrar(const std::string &library = "");

/// What a recording registrar saw.
struct RegistrarLog {
  int64_t registrations = 0;
  int64_t unregistrations = 0;
  /// Bookkeeping errors: a range registered while it was registered, or
  /// unregistered while it was not.
  int64_t doubleRegistrations = 0;
  int64_t strayUnregistrations = 0;
  /// Ranges registered now: start address and bytes.
  std::vector<std::pair<uintptr_t, size_t>> live;
};

/// A registrar that needs no GPU: records every call (registrarLog()) and,
/// with `lock`, mlock()s / munlock()s the range (so a range the process may
/// not lock, RLIMIT_MEMLOCK, fails as a CUDA registration would). For tests
/// (SLUICE_PIN_REGISTRAR=record|mlock in sluice.torch).
std::shared_ptr<HostRegistrar> makeRecordingRegistrar(bool lock);
/// The log of the installed registrar when it is a recording one.
std::optional<RegistrarLog> registrarLog();

/// Counters of pinned batch buffers: of one pipeline (PinnedPool::stats),
/// or of every pool of the process (pinnedTotals(): the registrar is the
/// process's).
struct PinnedStats {
  std::string registrar;
  int64_t buffers = 0;      ///< registered now (in use or idle)
  int64_t bytes = 0;        ///< their bytes
  int64_t peakBytes = 0;    ///< most registered at once
  int64_t idleBuffers = 0;  ///< kept for reuse now
  int64_t registered = 0;   ///< registrations made
  int64_t unregistered = 0; ///< unregistrations made
  int64_t reused = 0;       ///< allocations served by an idle buffer
  /// Buffers unregistered and freed as they came back because the budget
  /// could not hold them idle.
  int64_t dropped = 0;
  /// Registrations that failed (the batch was made in ordinary memory
  /// instead), and the first failure's message.
  int64_t failures = 0;
  std::string firstError;
};
/// The counters of every pinned pool of the process so far.
PinnedStats pinnedTotals();

/// The registered batch buffers of one pipeline, kept for reuse by exact
/// size. Shared by the buffers it hands out: one that comes back after the
/// pipeline closed the pool is unregistered and freed.
class PinnedPool final : public sluice::detail::BufferSource,
                         public std::enable_shared_from_this<PinnedPool> {
public:
  PinnedPool(std::shared_ptr<HostRegistrar> registrar, AllocationLimit *idle);
  ~PinnedPool() override;
  PinnedPool(const PinnedPool &) = delete;
  PinnedPool &operator=(const PinnedPool &) = delete;

  /// Tensor::empty(elem, shape) with the buffer (when it is one the tensor
  /// buffer pool would serve, kPoolMinBytes and up) from this pool: an idle
  /// registered one of its size, or a new one registered now. Charged and
  /// refused as Tensor::empty is. A registration that fails leaves the
  /// batch in ordinary memory (counted in `failures`).
  Tensor allocate(ElemType elem, std::vector<int64_t> shape);
  /// Unregisters and frees the idle buffers and releases their reservation;
  /// buffers still in use are unregistered and freed as they come back.
  /// Called before the budget the idle limit draws on goes.
  void close();
  PinnedStats stats() const;

  // sluice::detail::BufferSource.
  void *takeIdle(size_t bytes) override;
  void *allocate(size_t bytes) override;
  void release(void *p, size_t bytes) override;

private:
  void unregisterAndFree(void *p, size_t bytes);

  std::shared_ptr<HostRegistrar> registrar_;
  AllocationLimit *idleLimit_;
  mutable std::mutex mu_;
  bool closed_ = false;
  std::map<size_t, std::vector<void *>> idle_;
  PinnedStats stats_;
};

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_PINNED_H
