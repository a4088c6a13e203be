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
// there is a data error of that record. A budget of 0 here means
// unlimited, but the engine never runs with one: without budget.memory it
// uses defaultMemoryBudget() (a share of the host's or cgroup's memory).
//
// Also counted: the tensor buffer pool's idle buffers while this pipeline
// runs (sluice/ops/BufferPool.h; it keeps a freed buffer only if the budget
// can hold it), the batch buffers the map stage's workers fill ahead (their
// rows not yet placed: "<batch> rows ahead"), and the last output until the
// caller asks for the next ("output"). So `memory peak` is what the process
// holds on top of its fixed baseline: the binary and libraries (MLIR/LLVM,
// oneTBB, libjpeg-turbo, libpng), thread stacks, per-thread decoder state
// and decode scratch (at most 64 MiB per worker, usually one photo). That
// baseline is about 74 MiB of RSS for `sluice run` of an image pipeline with
// 2 threads on this project's reference host (tests/tools/rss_check.py
// measures it; tests/examples/rss.test checks peak RSS <= budget.memory +
// baseline and `memory peak` within 10% of peak RSS - baseline).
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
  explicit MemoryBudget(int64_t limitBytes) : limit_(limitBytes) {}
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

private:
  friend class MemoryAccount;
  bool tryAdd(int64_t bytes);
  void add(int64_t bytes);

  int64_t limit_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MemoryAccount>> accounts_;
};

/// Lends an account to the steps running on a thread (sluice/ops/
/// Allocation.h): what they allocate for a record is reserved in `account`
/// while they run, so the budget sees a step's scratch (decoded images,
/// resize outputs, one-hot matrices) and refuses what cannot fit.
class AccountAllocationLimit final : public AllocationLimit {
public:
  explicit AccountAllocationLimit(MemoryAccount *account)
      : account_(account) {}
  /// A request the budget could give once other buffers drain waits up to
  /// ~100 ms for them; one larger than the whole limit is refused at once.
  bool tryReserve(int64_t bytes) override;
  bool tryReserveNow(int64_t bytes) override {
    return account_->tryReserve(bytes);
  }
  void release(int64_t bytes) override { account_->release(bytes); }
  int64_t limit() const override { return account_->budget().limit(); }
  int64_t used() const override { return account_->budget().used(); }

private:
  MemoryAccount *account_;
};

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_MEMORY_H
