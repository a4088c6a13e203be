//===- Allocation.h - What a step may allocate while it works ---*- C++ -*-===//
//
// budget.memory must bound everything the process holds, including what a
// step allocates while it turns one record into the next: a decoded image,
// a resize output, a one-hot matrix, a padded copy. Kernels cannot see the
// runtime's budget (ops/ does not depend on runtime/), so the runtime lends
// each worker thread an AllocationLimit for the time it runs the steps of one
// record (an AllocationScope). While a scope is open:
//
//  - every numeric Tensor allocated on the thread reserves its bytes there
//    first; a reservation the budget cannot give makes Tensor::empty throw
//    AllocationRefused (a std::bad_alloc), which the runtime catches at the
//    step boundary and reports as a data error of that record and step;
//  - kernels that know a size before they allocate (an image header, a
//    declared length) call checkAllocation() first and return a Status that
//    says what the record needs and what the budget has left, before any
//    byte is touched.
//
// The bytes a scope reserved are released when it closes: by then the
// record's surviving tensors are counted by the buffer that holds the record
// (MemoryAccount in the runtime). Summing a record's allocations over its
// steps overstates the step's true peak a little; it never understates it.
//
// Sizes are products of untrusted numbers (headers, parameters):
// checkedBytes() multiplies without overflow.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_ALLOCATION_H
#define SLUICE_OPS_ALLOCATION_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Types.h"

#include <cstdint>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

/// The memory a pipeline lends a thread's steps (implemented by the
/// runtime over its MemoryBudget).
class AllocationLimit {
public:
  virtual ~AllocationLimit();
  /// Reserves `bytes`; false (nothing reserved) when the budget cannot give
  /// them now.
  virtual bool tryReserve(int64_t bytes) = 0;
  virtual void release(int64_t bytes) = 0;
  /// tryReserve() that never waits (for callers holding a lock).
  virtual bool tryReserveNow(int64_t bytes) { return tryReserve(bytes); }
  /// The budget's limit and what it holds now (for messages).
  virtual int64_t limit() const = 0;
  virtual int64_t used() const = 0;
};

/// Lends `limit` to the current thread until destroyed; null lends nothing
/// (allocations are then not checked). Scopes nest; the innermost applies.
class AllocationScope {
public:
  explicit AllocationScope(AllocationLimit *limit);
  ~AllocationScope();
  AllocationScope(const AllocationScope &) = delete;
  AllocationScope &operator=(const AllocationScope &) = delete;
  /// Bytes reserved through this scope so far.
  int64_t charged() const { return charged_; }
  /// The innermost scope open on this thread, or null.
  static AllocationScope *current();
  /// The limit it lends (may be null).
  AllocationLimit *limit() const { return limit_; }
  /// Reserves `bytes` until the scope closes; false when refused.
  bool tryCharge(int64_t bytes);

private:
  AllocationLimit *limit_;
  AllocationScope *outer_;
  int64_t charged_ = 0;
};

/// Thrown by Tensor::empty/zeros when the thread's AllocationLimit refuses a
/// buffer or its size overflows; carries a message a person can act on.
class AllocationRefused : public std::bad_alloc {
public:
  explicit AllocationRefused(std::string message)
      : message_(std::move(message)) {}
  const char *what() const noexcept override { return message_.c_str(); }

private:
  std::string message_;
};

/// `elemSize` times the product of `dims` (each >= 0), or nullopt when it
/// does not fit in 63 bits.
std::optional<int64_t> checkedBytes(std::initializer_list<int64_t> dims,
                                    int64_t elemSize = 1);

/// Whether `bytes` (nullopt: too large to count) could be allocated on this
/// thread now. The error names `what` ("the decoded 16000x16000x3 image"),
/// the size, and what budget.memory has left; ok when no scope is open and
/// the size is countable.
Status checkAllocation(std::optional<int64_t> bytes, std::string_view what);

/// Reserves `bytes` in the thread's scope for a scratch buffer that is not a
/// Tensor (a decoder's row buffer); same error as checkAllocation(). Released
/// with the scope.
Status reserveScratch(std::optional<int64_t> bytes, std::string_view what);

/// Bytes of a buffer that outlives the record it was made for (a reader's
/// block buffer and the zlib state of a .gz stream, a parser's spare
/// buffers), reserved in the limit of the scope open on the thread when it
/// is first sized, until it is resized, reset or destroyed: the budget
/// counts them as long as they are resident, and refuses the ones it cannot
/// hold (AllocationRefused) instead of letting them grow past it. Without a
/// scope (a reader used outside a pipeline) nothing is reserved. The scope's
/// limit must outlive the object: the runtime opens a source's readers in
/// its source stage's scope and closes them before the stage goes.
class HeldAllocation {
public:
  HeldAllocation() = default;
  ~HeldAllocation() { reset(); }
  HeldAllocation(const HeldAllocation &) = delete;
  HeldAllocation &operator=(const HeldAllocation &) = delete;
  /// Holds `bytes` from now on: growth is reserved first (throws
  /// AllocationRefused naming `what` when the budget cannot give it, and
  /// then holds what it held before), a shrink is released.
  void resize(int64_t bytes, std::string_view what);
  /// resize() that neither waits for other buffers to drain nor throws:
  /// false (holding what it held) when the budget cannot give the growth
  /// now. For a buffer that can make do with less.
  bool tryResize(int64_t bytes);
  /// Releases everything.
  void reset();
  int64_t bytes() const { return bytes_; }
  /// What the budget it reserves in (the scope open on the thread, when not
  /// bound yet) has left now; -1 when there is no limit.
  int64_t available() const;

private:
  AllocationLimit *limit_ = nullptr;
  bool bound_ = false;
  int64_t bytes_ = 0;
};

/// Reserves the `bytes` (nullopt: overflowed) of a tensor of `elem` and
/// `shape` about to be allocated (Tensor::empty); throws AllocationRefused
/// when they cannot be given.
void chargeTensorAllocation(std::optional<int64_t> bytes, ElemType elem,
                            const std::vector<int64_t> &shape);

/// Reserves, before it is built, what a Bytes/String tensor of `elem` and
/// `shape` whose strings hold `payloadBytes` in all takes (as
/// Tensor::memoryBytes counts it: the string objects, their heap bytes,
/// kTensorOverheadBytes); throws AllocationRefused when the thread's scope
/// cannot give it or the element count overflows, like Tensor::empty. Kernels
/// that build strings (pad, batch, unbatch, truncate of text fields) call it
/// first.
void chargeStringTensor(ElemType elem, const std::vector<int64_t> &shape,
                        int64_t payloadBytes = 0);

/// The least a buffered record costs (its Tensor objects, the slot of the
/// queue or window that holds it): a prefetch deeper than budget.memory /
/// this could not be held whatever the records, and is refused by `sluice
/// check` and before a run starts.
inline constexpr int64_t kMinBufferedRecordBytes = 256;

/// "" when one record of type `t` can fit in `limit` bytes as far as its
/// static fields (numeric, every dim known) tell; else why not, e.g.
/// "one record of {image: u8[30000,30000,3]} takes 2.51 GiB, more than
/// budget.memory 256 MiB". Used by `sluice check` and before a run starts.
/// With `leadingAtLeastOne` (the output of an op that stacks records, such
/// as padded_batch), a `?` leading dim counts as 1: `ids: i64[?,1000000000]`
/// takes at least 7.45 GiB whatever the batch.
std::string recordTypeTooLarge(const RecordType &t, int64_t limit,
                               bool leadingAtLeastOne = false);

/// Output targets: the runtime may hand the steps of one record the rows
/// of a batch buffer the record will land in (views of the right type and
/// shape). A kernel that makes its result in one pass (the fused decode +
/// crop + epilogue) asks outputTensor() for its result and writes straight
/// into the batch row, so the image is neither allocated nor copied. A
/// kernel that asks for a type no target has gets a fresh tensor, and the
/// runtime copies the record into its row afterwards as usual.
class OutputTargetScope {
public:
  /// `targets` (null: none) must outlive the scope; each is used once.
  explicit OutputTargetScope(std::vector<Tensor> *targets);
  ~OutputTargetScope();
  OutputTargetScope(const OutputTargetScope &) = delete;
  OutputTargetScope &operator=(const OutputTargetScope &) = delete;

private:
  std::vector<Tensor> *outer_;
};

/// A target of the thread's OutputTargetScope with exactly `elem` and
/// `shape` (taken: a second request gets a fresh tensor), or
/// Tensor::empty(elem, shape).
Tensor outputTensor(ElemType elem, std::vector<int64_t> shape);

/// Physical memory this process may use: the host's RAM, or the cgroup's
/// memory limit (cgroup v2 memory.max, v1 memory.limit_in_bytes) when that
/// is lower.
int64_t hostMemoryBytes();

/// Cores this process may run on: the CPUs of its affinity mask (taskset,
/// Slurm's and Kubernetes' cpusets), or fewer when its cgroup's CPU quota
/// allows fewer (cgroup v2 cpu.max, v1 cpu.cfs_quota_us over
/// cpu.cfs_period_us; a fraction rounds up), at least 1. Read once.
/// std::thread::hardware_concurrency() counts every online CPU of the
/// machine, so a job given 8 of a node's 128 cores would run 128 threads.
int64_t hostCores();
/// The same from the files' contents (for tests): `affinity` CPUs (<= 0:
/// unknown, then `online`), a v2 `cpu.max` line ("max 100000" or
/// "QUOTA PERIOD", empty when absent), v1 quota and period ("" when
/// absent; a quota of -1 is none).
int64_t coresAllowed(int64_t affinity, int64_t online,
                     const std::string &cpuMax, const std::string &v1Quota,
                     const std::string &v1Period);

/// Share of hostMemoryBytes() a pipeline without `budget: {memory: ...}`
/// may use.
constexpr double kDefaultMemoryFraction = 0.5;
/// budget.memory when the spec gives none: kDefaultMemoryFraction of
/// hostMemoryBytes(), rounded down to MiB. SLUICE_DEFAULT_MEMORY=SIZE (for
/// example 512MiB) overrides it.
int64_t defaultMemoryBudget();

} // namespace sluice

#endif // SLUICE_OPS_ALLOCATION_H
