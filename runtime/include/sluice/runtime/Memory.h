//===- Memory.h - Byte-accounted memory budget of a pipeline ----*- C++ -*-===//
//
// Every buffer of the runtime (prefetch queues, reorder windows of parallel
// stages, the shuffle buffer, batches being assembled, the memory cache)
// reserves the bytes of the records it holds here before it holds them and
// releases them when it lets go. A reservation that would exceed
// budget.memory fails instead of allocating, so the pipeline stops with an
// error that names the buffer and what to change, never with an OOM kill.
//
// What steps and readers allocate while they process one record (decoded
// images, resize outputs, tar members) is reserved too, through the
// per-thread AllocationScope of sluice/ops/Allocation.h that the map and
// source stages open over an AccountAllocationLimit; a reservation refused
// there is a data error of that record. What a reader keeps while its file
// is open (its block buffer, zlib's state of a .gz stream) is reserved in
// the source stage's account for that long (HeldAllocation).
//
// Bytes change accounts without being counted twice: a buffer recycled by
// the pool gives back its idle reservation before its new holder counts it,
// and a holder releases its records' bytes before freeing them into the
// pool. A budget of 0 here means
// unlimited, but the engine never runs with one: without budget.memory it
// uses defaultMemoryBudget() (a share of the host's or cgroup's memory).
//
// Also counted: the free heap earlier pipelines of the process left, until
// it is reused (MemoryBudget::carryFreeHeap, "heap left free"); the tensor
// buffer pool's idle buffers while this pipeline
// runs (sluice/ops/BufferPool.h; it keeps a freed buffer only if the budget
// can hold it), the batch buffers the map stage's workers fill ahead (their
// rows not yet placed: "<batch> rows ahead"), and the last output until the
// caller asks for the next ("output"; Pipeline::next then empties the
// caller's Batch, so a caller that passes the same Batch again frees it
// instead of holding it uncounted while the next is made). So `memory peak`
// is what the process
// holds on top of its fixed baseline: the binary and libraries (MLIR/LLVM,
// oneTBB, libjpeg-turbo, libpng), JIT code, thread stacks, per-thread
// decoder state and decode scratch (at most 64 MiB per worker, usually one
// photo). noteProcessBaseline() records the resident set when the first
// pipeline is created (after returning the heap's free pages); it was
// 75-77 MiB after a one-record run of an image or idx pipeline with 2
// threads on this project's reference host, 81-84 MiB with JIT kernels.
// tests/examples/rss.test and rss-examples.test check peak RSS <=
// budget.memory + baseline and `memory peak` within 10% of peak RSS -
// baseline (tests/tools/rss_check.py, rss_table.py).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_MEMORY_H
#define SLUICE_RUNTIME_MEMORY_H

#include "sluice/ops/Allocation.h"
#include "sluice/ops/Tensor.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sluice::runtime {

/// Bytes a record keeps alive: its fields' Tensor::memoryBytes and the
/// Tensor objects themselves.
int64_t recordBytes(const Record &r);
/// Replaces the fields that pin a larger buffer than their own bytes
/// (Tensor::compacted) by copies, before a stage keeps the record for long.
void compactRecord(Record &r);

/// The most bytes the budgets of this process held at once (pipelines run
/// one after another or side by side, e.g. `schedule: auto`'s probe runs
/// before the run itself): what the process held on top of its baseline.
int64_t processMemoryPeak();

/// Called as a pipeline is created: the first time in the process, returns
/// the heap's free pages to the system (malloc_trim: what compiling the
/// plan and its kernels freed) and records the resident set then, the
/// process's fixed baseline (binary, libraries, JIT code, the main thread).
void noteProcessBaseline();
/// Under SLUICE_DEBUG_RSS=1, prints a line on stderr with `what`, the
/// resident set over the baseline, the bytes the budgets count and the
/// difference, the buffer pool's idle bytes, and each live budget's
/// accounts (a sampler thread, started with the first pipeline, prints one
/// at each new high of the resident set and of the counted bytes, checked
/// every millisecond); does nothing otherwise.
void debugRssMark(const char *what);
/// The resident set noteProcessBaseline() recorded, in bytes (0: not yet,
/// or not readable here). Peak RSS minus this is what the pipelines of the
/// process added: their buffers (what `memory peak` counts), plus worker
/// thread stacks and per-thread decoder state (a few MiB).
int64_t processBaselineRss();
/// The process's resident set now, in bytes (0 when not readable).
int64_t currentRss();

/// What a program that runs pipelines (the sluice tool, a compiled
/// executable) calls first, before any thread starts: tells glibc's malloc
/// to keep one arena (M_ARENA_MAX 1) instead of one per thread. A pipeline's
/// buffers are made on one thread and freed on another (a file read by the
/// source, decoded by a worker; a shuffle buffer drained by the consumer),
/// so with an arena per thread each arena grows to the working set of the
/// buffers its thread made and their free space is never reused by the
/// others: on bench/specs/imagenet_bench.yaml (with its schedule probe)
/// peak RSS was 710 MiB for 356 MiB counted; with one arena 443 MiB. The
/// small-buffer pool (BufferPool.h) already keeps tensors thread-agnostic;
/// this covers byte strings and containers. Skipped when the user chose
/// (MALLOC_ARENA_MAX or a glibc.malloc.arena_max tunable in the
/// environment); SLUICE_MALLOC_ARENAS=N sets N arenas, 0 leaves glibc's
/// default (8 per core). A library user (the Python module) is not changed:
/// its process is the user's. Returns the arena limit it set (0: none).
int configureProcessAllocator();

/// Returns the heap's free pages to the system (glibc's malloc_trim) when
/// nothing else needs them soon: called once `schedule: auto`'s probe runs
/// have ended, before the run itself. Only with the free heap carry off
/// (heapCarryEnabled()): otherwise the run counts those pages and refills
/// them (on bench/specs/photos_bench.yaml the trim freed the probes' 85 MiB
/// of file bytes and the run faulted them in again, ~22k faults). The probes'
/// pipelines leave their freed byte strings and containers (csv block texts,
/// read buffers) in the heap, resident but counted in no budget; the run then
/// added them to its peak RSS on top of what it counted (criteo_bench: ~9 MiB
/// free in the heap after the probes; see bench/README.md "Memory"). A no-op
/// under SLUICE_NO_HEAP_TRIM=1 (or off glibc); returns whether it trimmed.
bool releaseFreeHeap();

/// Bytes free inside the malloc heap now (glibc's mallinfo2 fordblks, all
/// arenas: freed chunks and the top chunk, resident once touched), above
/// what was free when noteProcessBaseline() recorded the baseline; 0 off
/// glibc or before the baseline.
int64_t freeHeapAboveBaseline();

/// Whether a new pipeline counts the free heap earlier pipelines of the
/// process left (MemoryBudget::carryFreeHeap) instead of `schedule: auto`
/// trimming it after its probes: on unless SLUICE_NO_HEAP_CARRY=1 (or off
/// glibc). With it on, releaseFreeHeap() leaves the heap alone.
bool heapCarryEnabled();
/// Whether a carried free heap of at most MemoryBudget::kCarryKeepBytes is
/// kept past the grace instead of returned (MemoryBudget::carryFreeHeap):
/// on unless SLUICE_NO_SMALL_HEAP_KEEP=1. Read once per process.
bool keepSmallFreeHeap();

/// Ends the process with `code` once a program that runs pipelines (the
/// sluice tool, a compiled executable) has done its work: flushes
/// std::cout/std::cerr and every C stream, then leaves without running
/// static destructors (_exit). Tearing down LLVM, MLIR, oneTBB and the
/// other libraries' static objects does nothing a finished run needs, and
/// it faults in code pages of theirs that the run never touched: on
/// bench/specs/criteo_bench.yaml it raised the process's peak RSS by ~1.5
/// MiB after the last pipeline had ended, peak RSS the budget does not
/// count. Under a sanitizer (LeakSanitizer checks at exit) or
/// SLUICE_NO_QUICK_EXIT=1 it calls std::exit(code) instead. Never used by
/// a library user (the Python module): its process is the user's.
[[noreturn]] void endProcess(int code);

/// "1.5 GiB", "812 KiB", "17 B": human-readable, three significant digits.
std::string formatBytes(int64_t bytes);

class MemoryBudget;

/// The bytes held by one buffer (one stage's queue, window or cache).
class MemoryAccount {
public:
  const std::string &name() const { return name_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

  /// Reserves `bytes`; false (nothing reserved) if the budget's total would
  /// exceed its limit.
  bool tryReserve(int64_t bytes);
  /// Reserves even past the limit (for bytes that are already allocated and
  /// must be tracked, such as a record a worker just produced).
  void forceReserve(int64_t bytes);
  void release(int64_t bytes);
  /// The budget this account belongs to.
  const MemoryBudget &budget() const { return *budget_; }

private:
  friend class MemoryBudget;
  MemoryAccount(MemoryBudget *budget, std::string name)
      : budget_(budget), name_(std::move(name)) {}
  void notePeak(int64_t v);

  MemoryBudget *budget_;
  std::string name_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
};

/// The budget of one pipeline: a limit (0 = unlimited) and its accounts.
class MemoryBudget {
public:
  explicit MemoryBudget(int64_t limitBytes);
  ~MemoryBudget();
  MemoryBudget(const MemoryBudget &) = delete;
  MemoryBudget &operator=(const MemoryBudget &) = delete;

  /// Creates an account (owned by the budget, valid for its lifetime).
  MemoryAccount *account(std::string name);

  int64_t limit() const { return limit_; }
  bool limited() const { return limit_ > 0; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

  /// "shuffle 812 MiB, prefetch 12 MiB": the accounts holding memory now,
  /// largest first.
  std::string usageSummary() const;
  /// Per-account peaks, in creation order.
  std::vector<std::pair<std::string, int64_t>> peaks() const;

  /// The first time bytes already allocated (MemoryAccount::forceReserve: a
  /// record a step made, an output handed over) took the total past the
  /// limit: the account that did it and the total then. tryReserve never
  /// goes past the limit, so this is the only way the budget can be
  /// exceeded; the engine turns it into an error of the run (a peak above
  /// budget.memory never ends as a success).
  struct Overrun {
    std::string account;
    int64_t total = 0;
    /// The accounts holding memory then (usageSummary()).
    std::string held;
  };
  bool overrun() const { return overrun_.load(std::memory_order_acquire); }
  Overrun firstOverrun() const;

  /// Counts in `account` the free heap the process's earlier pipelines left
  /// (freeHeapAboveBaseline(): `schedule: auto`'s probes free their shuffle
  /// buffers' byte strings into the heap, resident, and the next pipeline
  /// refills that memory instead of faulting in new pages). The reservation
  /// shrinks as the heap's free bytes are used again: checked (mallinfo2)
  /// each time kCarryRefreshBytes more have been reserved in the budget
  /// since the last check, so it overstates by about that much at most
  /// (what the heap gives out for counted records is reserved first), and
  /// it is let go of once under kCarryRefreshBytes. What is still free once
  /// the budget has reserved twice the carried bytes (16 MiB at least) is
  /// returned to the system (malloc_trim): memory the pipeline does not
  /// reuse is not kept for it, unless it is at most kCarryKeepBytes (a
  /// pipeline's own per-record churn, refilled again and again; off:
  /// SLUICE_NO_SMALL_HEAP_KEEP=1, keepSmallFreeHeap()), which is then
  /// checked once per kCarryKeepBytes reserved instead. When it is more than
  /// half the budget (it may be another live pipeline's), or the budget cannot
  /// hold it, or a reservation is refused (or bytes already allocated would
  /// take the total past the limit) while some is carried, the heap's
  /// free pages are returned (malloc_trim) and nothing is carried, so the
  /// budget stays as hard as without it.
  /// Returns the bytes carried (0 below 1 MiB).
  int64_t carryFreeHeap(MemoryAccount *account);
  /// The carried bytes now.
  int64_t carriedHeap() const {
    return carried_.load(std::memory_order_relaxed);
  }
  /// Stops carrying: releases what is left of the reservation.
  void dropCarriedHeap();
  /// Bytes reserved between two checks of the carried free heap.
  static constexpr int64_t kCarryRefreshBytes = int64_t(1) << 20;
  /// The most carried free heap kept past the grace (see carryFreeHeap).
  static constexpr int64_t kCarryKeepBytes = int64_t(16) << 20;

private:
  friend class MemoryAccount;
  bool tryAdd(int64_t bytes);
  /// Adds bytes already allocated (forceReserve); past the limit it records
  /// the overrun (overrun()).
  void add(int64_t bytes, const MemoryAccount *who);
  /// Counts `bytes` reserved while some free heap is carried; every
  /// kCarryRefreshBytes, shrinks the carried reservation to the heap's
  /// free bytes now (one thread at a time).
  void noteCarryGrowth(int64_t bytes);
  /// Returns the heap's free pages and releases all that is carried.
  bool trimCarriedHeap();

  int64_t limit_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MemoryAccount>> accounts_;
  /// The carried free heap (carryFreeHeap), reserved in carryAccount_.
  std::atomic<int64_t> carried_{0};
  std::atomic<int64_t> sinceRefresh_{0};
  /// Bytes reserved between two checks: kCarryRefreshBytes, and
  /// kCarryKeepBytes once a small free heap is kept past the grace.
  std::atomic<int64_t> carryStep_{kCarryRefreshBytes};
  /// Bytes reserved since carrying began, and how many it may take to
  /// reuse the carried heap before the rest is trimmed (under carryMu_).
  int64_t carryReserved_ = 0;
  int64_t carryGrace_ = 0;
  MemoryAccount *carryAccount_ = nullptr;
  std::mutex carryMu_;
  std::atomic<bool> overrun_{false};
  Overrun firstOverrun_; ///< under mu_
};

/// Lends an account to the steps running on a thread (sluice/ops/
/// Allocation.h): what they allocate for a record is reserved in `account`
/// while they run, so the budget sees a step's scratch (decoded images,
/// resize outputs, one-hot matrices) and refuses what cannot fit.
///
/// Budget credit (`credit` true, unless SLUICE_NO_BUDGET_CREDIT=1): a
/// record's small tensors are reserved and released one by one, several
/// per record, and each reservation was a handful of atomic operations on
/// counters every thread of the pipeline shares (the budget's total and
/// peak, the process's, the account's). With credit, each thread (one of
/// kCreditSlots slots, cache-line apart) takes the budget in chunks of
/// creditChunk() bytes and serves requests up to a chunk from its own
/// slot; released bytes go back to the slot, and a slot holding more than
/// two chunks gives all but one back. Larger requests go to the account
/// as before. The budget stays a hard limit: credit is reserved in the
/// account like any bytes (so `memory peak` counts outstanding credit: at
/// most two chunks per thread running the stage), and a request the
/// account cannot give first takes every slot's credit back, so a refusal
/// means the budget is really spent, with the same located error as
/// without credit.
class AccountAllocationLimit final : public AllocationLimit {
public:
  explicit AccountAllocationLimit(MemoryAccount *account, bool credit = false);
  ~AccountAllocationLimit() override;
  AccountAllocationLimit(const AccountAllocationLimit &) = delete;
  AccountAllocationLimit &operator=(const AccountAllocationLimit &) = delete;
  /// A request the budget could give once other buffers drain waits up to
  /// ~100 ms for them; one larger than the whole limit is refused at once.
  bool tryReserve(int64_t bytes) override;
  bool tryReserveNow(int64_t bytes) override;
  void release(int64_t bytes) override;
  int64_t limit() const override { return account_->budget().limit(); }
  int64_t used() const override { return account_->budget().used(); }

  /// Bytes a thread takes from the budget at a time (0: no credit).
  int64_t creditChunk() const { return chunk_; }
  /// Credit the threads hold now (reserved in the account, not in use).
  int64_t outstandingCredit() const;
  /// Gives every thread's credit back to the account; returns whether
  /// there was any. Called before a refusal and as the limit goes.
  bool returnCredit();

  /// Slots of per-thread credit (threads beyond this share slots).
  static constexpr int kCreditSlots = 16;
  /// Largest chunk, and the share of the budget's limit a chunk is at
  /// most (1/1024: 512 KiB at 512 MiB gives 32 KiB, 8 MiB gives 8 KiB).
  static constexpr int64_t kMaxCreditChunk = int64_t(32) << 10;

private:
  struct alignas(64) Slot {
    std::atomic<int64_t> credit{0};
  };
  Slot &threadSlot();
  /// account_->tryReserve, and once more after taking every slot's credit
  /// back when it fails.
  bool reserveExactly(int64_t bytes);

  MemoryAccount *account_;
  int64_t chunk_ = 0;
  std::unique_ptr<Slot[]> slots_;
};

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_MEMORY_H
