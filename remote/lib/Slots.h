//===- Slots.h - Outputs handed over in shared memory on the trainer's host
//===//
//
// A worker on the trainer's own host (the local share of Workers.cpp's
// split, or loopback benchmarks) would otherwise send every byte through
// the kernel's socket: a copy into it on the worker, a copy out of it and
// one into the output buffer on the trainer, plus TCP's own work (about
// 45 ms of worker and 42 ms of trainer CPU per f32 batch of 77 MB on the
// 2-core host: docs/distributed.md, "Performance"). Instead the trainer
// lends each output of a chunk a slot: a memfd of its own, which the
// worker opens as /proc/TRAINER-PID/fd/N, writes the output's numeric
// fields into (its one copy), and the trainer hands to numpy/torch as the
// batch's memory (none). Only the output's header crosses the socket.
//
// A worker elsewhere (another host, a container, another user) cannot open
// the path or finds another file there: its check of the slot's 128-bit
// nonce fails, it says so, and outputs travel over the socket as before.
// Slots are reused (their pages stay in place in both processes, so a
// batch costs no page faults after the first few; a worker writes a slot
// with pwrite until it has written it often enough to map it: Slots.cpp),
// and a memfd dies with the last process that holds it: nothing is left
// in /dev/shm.
//
// A slot's state word, in its header, says who may touch the data:
//   0      free: the trainer's
//   L      lent under lease L (a multiple of 4, never reused)
//   L + 1  the worker is writing (it moved it there from L)
//   L + 2  written (the worker's last touch)
// The trainer takes a slot for an output whose header says it is in it
// only when it reads L + 2. A worker whose pipeline makes a batch in the
// slot itself (SlotBatches) moves it to L + 1 before the batch's first
// byte is written, and to L + 2 when it hands the output over or, never
// handed over (a stream cut, a short last batch made at its own size),
// back to L when the batch's last slot-backed buffer is freed. After a
// stream ends the trainer takes back the slots it did not receive: from L
// (the worker will not write any more: its move from L fails) or L + 2; a
// slot at L + 1 (a worker still writing, or killed while writing) is set
// aside until it reads L + 2 or takes it from L.
// SLUICE_NO_SHARED_MEMORY=1 (or ClientOptions::sharedMemory = false)
// sends everything over the socket.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_REMOTE_SLOTS_H
#define SLUICE_REMOTE_SLOTS_H

#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/Pipeline.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::remote::detail {

/// Where a slot's data start (its first page is the header).
constexpr size_t kSlotDataOffset = 4096;

/// Offsets of an output's numeric fields in a slot's data (each aligned to
/// 64 bytes), from their sizes; returns the bytes they take in all.
size_t slotLayout(const std::vector<size_t> &nbytes,
                  std::vector<size_t> &offsets);

/// This host's boot id (/proc/sys/kernel/random/boot_id), "" if unknown: a
/// worker on another host has another.
const std::string &bootId();

/// How many times a worker writes a slot beyond the trainer's bound
/// (SlotRef::bound) with pwrite before it maps it (Slots.cpp): measured on
/// this host at the first such write (before that, and under
/// SLUICE_NO_SLOT_MAP_CALIBRATION=1: 10 when its pipelines make batches in
/// the slots it maps, 32 under SLUICE_NO_SLOT_DIRECT=1);
/// SLUICE_SLOT_MAP_AFTER=N, or 0 under SLUICE_NO_SLOT_PWRITE=1, for every
/// slot.
uint64_t slotMapAfterWrites();

/// Slots this worker process has mapped whole so far.
int64_t slotMappingsMade();

/// A slot as the request names it.
struct SlotRef {
  std::string path; ///< /proc/PID/fd/N
  uint64_t nonce[2] = {0, 0};
  uint64_t lease = 0;
  uint64_t capacity = 0; ///< data bytes
  /// The most slots the trainer lends this worker at once (its request's
  /// slot_bound; 0: not said): a worker maps that many of the trainer's
  /// slots at their first write (Slots.cpp).
  uint32_t bound = 0;
};

/// The trainer's slots.
class SlotPool : public std::enable_shared_from_this<SlotPool> {
public:
  /// A pool, or nullptr where memfds cannot be made.
  static std::shared_ptr<SlotPool> create();
  ~SlotPool();

  /// Up to `n` slots of at least `bytes` data bytes, each lent under a new
  /// lease; fewer when `limit` slots exist and too few are free. Slots last
  /// lent to `worker` come first: a worker maps each slot it writes, and
  /// its first write to a slot faults in every page of its mapping (with
  /// two workers taking any slot, each faulted in all of them: 3,000-8,000
  /// faults per f32 batch for the first 5 epochs of bench/remote_loopback.py,
  /// and 1.6-2x the worker CPU per batch).
  ///
  /// `bound` (0: none) is how many slots `worker` needs at once: the
  /// request's outputs and those lent ahead, plus the batch the trainer's
  /// consumer holds while it waits for the next (Client.cpp). Among the
  /// worker's free slots the one freed last comes first (its pages are the
  /// warmest, and the same few slots are written again and again, so the
  /// worker's rent-or-buy rule maps them sooner). When the worker already
  /// has `bound` slots and none is free, no slot is made while
  /// `mayWait()` says that one will be freed soon (the consumer is busy
  /// with a batch it lets go of at its next call) and for at most
  /// `maxWait`: the pool then stays at what the worker needs instead of
  /// growing at every moment the consumer holds one batch more. When
  /// waiting cannot help (the consumer waits for an output itself, or
  /// keeps its batches) slots are made as before, up to `limit`.
  /// SLUICE_NO_SLOT_BOUND=1 (Client.cpp): bound 0.
  std::vector<SlotRef>
  lend(size_t n, size_t bytes, size_t limit, const void *worker = nullptr,
       size_t bound = 0, const std::function<bool()> &mayWait = nullptr,
       std::chrono::milliseconds maxWait = std::chrono::milliseconds(0));
  /// Takes back a slot lent and not received (after its stream ended).
  void giveBack(const SlotRef &ref);
  /// A slot the worker wrote for an output: its data, kept alive (and the
  /// slot held) by the returned handle; nullptr when the slot is not at
  /// lease + 2.
  std::shared_ptr<const void> take(const SlotRef &ref, const uint8_t *&data);

  /// Slots in all, and those set aside (a worker was writing when its
  /// stream ended).
  size_t size() const;
  size_t setAside() const;
  /// Slots made so far (retired ones included), and lend() calls that
  /// waited for a slot to be freed instead of making one.
  int64_t made() const;
  int64_t waits() const;
  /// Slots made of huge pages (slotHugePagesEnabled() when made, or
  /// collapsed: slotCollapseEnabled()).
  int64_t madeHuge() const;

private:
  struct Slot;
  SlotPool() = default;
  void release(Slot *s);
  Slot *make(size_t bytes);

  mutable std::mutex mu_;
  /// Notified when a slot is freed (released, given back).
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t nextLease_ = 4;
  /// Stamps the slots as they are freed (Slot::freed: the last one first).
  uint64_t clock_ = 0;
  int64_t made_ = 0, waits_ = 0, madeHuge_ = 0;
  uint64_t nonce_[2] = {0, 0};
  uint64_t serial_ = 0;
  /// The process that made the memfds (their paths name it).
  int64_t pid_ = 0;
};

/// Whether a worker's pipelines make their batches in the trainer's slots
/// (SlotBatches): unless SLUICE_NO_SLOT_DIRECT is set (and not "0").
bool slotDirectEnabled();

/// Whether /sys/kernel/mm/transparent_hugepage/shmem_enabled's `setting`
/// (the chosen mode in brackets) lets shared memory have huge pages on
/// request: "always", "within_size", "advise" or "force".
bool shmemAllowsHugePages(const std::string &setting);
/// Whether slots are made of huge pages (both ends size and map them so,
/// Slots.cpp's mapSlotFile): where this host's shmem_enabled allows it,
/// unless SLUICE_NO_SLOT_HUGE_PAGES is set (and not "0"; read at each
/// slot made or mapped). Kernels' default, "never", keeps 4 KiB pages, and
/// the trainer then collapses each slot into huge pages itself
/// (slotCollapseEnabled).
bool slotHugePagesEnabled();
/// Whether a trainer whose host does not give slots huge pages on request
/// has the kernel collapse each new slot's pages into huge ones
/// (MADV_COLLAPSE, Linux 6.1; Slots.cpp's collapseSlot): unless
/// SLUICE_NO_SLOT_COLLAPSE or SLUICE_NO_SLOT_HUGE_PAGES is set (and not
/// "0"; read at each slot made).
bool slotCollapseEnabled();

/// A worker's pipeline making its batches in the slots the trainer lent for
/// them (Slots.cpp): the batch step's buffers (runtime::OutputBuffers) are
/// the worker's mapping of the slot lent for the output the batch becomes,
/// so the send path has nothing to copy (SlotWriter's copy, 16.8 ms of
/// worker CPU per f32 batch of 77 MB, docs/distributed.md). A batch for
/// which no slot is known yet (read ahead past the request's outputs), or
/// whose slot this worker does not map yet, is made in ordinary memory and
/// copied as before; the send path checks where each output really is.
class SlotBatches final : public runtime::OutputBuffers,
                          public sluice::detail::BufferSource,
                          public std::enable_shared_from_this<SlotBatches> {
public:
  /// For a pipeline whose batch 0 becomes the trainer's output `first`.
  SlotBatches(int64_t first, std::string trainerBootId);
  ~SlotBatches() override;
  /// The slots a request lent for its outputs first, first + 1, ...
  /// (replacing those of the request before; past its last output, those
  /// lent ahead for the next chunk).
  void lend(int64_t first, std::vector<SlotRef> refs);
  /// True when the numeric `fields` of an output were made in `ref`'s slot
  /// by this pipeline (each field of a slot-backed buffer at its place in
  /// the slot's layout): copies the other (small) fields there, marks the
  /// slot written (lease + 2) and hands it over. False: the slot is not
  /// touched (the output is copied, or sent over the socket).
  bool handOver(const SlotRef &ref, const std::vector<Tensor> &fields);
  /// Batches made in a slot so far.
  int64_t made() const;

  // runtime::OutputBuffers.
  std::vector<Tensor>
  allocate(uint64_t batch, const std::vector<ElemType> &elems,
           const std::vector<std::vector<int64_t>> &shapes) override;
  // sluice::detail::BufferSource: the slot memory Tensor::empty asks for
  // while allocate() makes a slot-backed field.
  void *takeIdle(size_t bytes) override;
  void *allocate(size_t bytes) override;
  void release(void *p, size_t bytes) override;

private:
  struct Claim;
  const int64_t first_;
  const std::string trainerBoot_;
  mutable std::mutex mu_;
  int64_t refsFirst_ = 0;
  std::vector<SlotRef> refs_;
  /// Slots a batch is being or was made in, by lease, and by the address
  /// of each of their slot-backed buffers.
  std::map<uint64_t, std::shared_ptr<Claim>> byLease_;
  std::map<const void *, std::shared_ptr<Claim>> byBuffer_;
  int64_t made_ = 0;
};

/// The worker's side of a request's slots.
class SlotWriter {
public:
  SlotWriter(std::vector<SlotRef> refs, const std::string &trainerBootId);
  /// Writes `fields` (numeric) into the request's slot `i` when it exists,
  /// fits them and is still lent; false: send them over the socket.
  bool write(size_t i, const std::vector<Tensor> &fields);
  /// The trainer's slots cannot be opened from here (another host, user or
  /// namespace): said once, in the next output's header.
  bool unreachable() const { return unreachable_; }
  /// The request's slot `i`, or null.
  const SlotRef *ref(size_t i) const {
    return i < refs_.size() ? &refs_[i] : nullptr;
  }
  /// The request's slots.
  const std::vector<SlotRef> &refs() const { return refs_; }
  /// An output went into its slot another way (SlotBatches::handOver).
  void wroteElsewhere() { wrote_ = checked_ = true; }
  /// Outputs written with pwrite, and copied into a mapping (Slots.cpp:
  /// a slot is mapped once this worker has written it often enough).
  int64_t pwritten() const { return pwritten_; }
  int64_t mapped() const { return mapped_; }

private:
  std::vector<SlotRef> refs_;
  int64_t pwritten_ = 0, mapped_ = 0;
  bool checked_ = false, unreachable_ = false, wrote_ = false;
  std::string trainerBoot_;
};

} // namespace sluice::remote::detail

#endif // SLUICE_REMOTE_SLOTS_H
