//===- Allocation.cpp - Per-thread allocation limits, host memory ---------===//
//
// The thread-local scope stack of Allocation.h, and the host's memory and
// cores as the default budget sees them (RAM and CPUs, or the cgroup's
// limits and the affinity mask inside a container or a Slurm job).
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Allocation.h"
#include "sluice/ops/Registry.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

namespace sluice {

namespace {
thread_local AllocationScope *currentScope = nullptr;

std::string describeBytes(int64_t b) {
  // Same style as the runtime's formatBytes: three significant digits.
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  else
    snprintf(buf, sizeof buf,
             v == static_cast<double>(static_cast<int64_t>(v)) || v >= 100
                 ? "%.0f %s"
             : v >= 10 ? "%.1f %s"
                       : "%.2f %s",
             v, units[u]);
  return buf;
}

std::string refusal(std::optional<int64_t> bytes, std::string_view what,
                    const AllocationLimit *limit) {
  std::string msg(what);
  msg += bytes ? " needs " + describeBytes(*bytes)
               : std::string(" is too large to allocate (its size overflows "
                             "64 bits)");
  if (limit && bytes) {
    int64_t left = std::max<int64_t>(0, limit->limit() - limit->used());
    msg += ", more than the " + describeBytes(left) +
           " left of budget.memory " + describeBytes(limit->limit());
    msg += *bytes > limit->limit()
               ? " (one record of this size cannot fit; raise budget.memory "
                 "or drop or shrink such records before this step)"
               : " (lower parallelism, prefetch or buffer sizes, or raise "
                 "budget.memory)";
  }
  return msg;
}

/// Reads the first integer of a file, or nullopt ("max", missing files).
std::optional<int64_t> readLimitFile(const char *path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max")
    return std::nullopt;
  char *end = nullptr;
  unsigned long long v = std::strtoull(word.c_str(), &end, 10);
  if (end == word.c_str() || v == 0 ||
      v >= static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return static_cast<int64_t>(v);
}
} // namespace

AllocationLimit::~AllocationLimit() = default;

AllocationScope::AllocationScope(AllocationLimit *limit)
    : limit_(limit), outer_(currentScope) {
  currentScope = this;
}

AllocationScope::~AllocationScope() {
  if (limit_ && charged_ > 0)
    limit_->release(charged_);
  currentScope = outer_;
}

AllocationScope *AllocationScope::current() { return currentScope; }

bool AllocationScope::tryCharge(int64_t bytes) {
  if (!limit_ || bytes <= 0)
    return true;
  if (!limit_->tryReserve(bytes))
    return false;
  charged_ += bytes;
  return true;
}

std::optional<int64_t> checkedBytes(std::initializer_list<int64_t> dims,
                                    int64_t elemSize) {
  int64_t n = elemSize;
  if (n < 0)
    return std::nullopt;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  }
  return n;
}

Status checkAllocation(std::optional<int64_t> bytes, std::string_view what) {
  AllocationScope *s = currentScope;
  AllocationLimit *limit = s ? s->limit() : nullptr;
  if (!bytes)
    return Status::error(refusal(bytes, what, limit));
  if (!limit || limit->limit() <= 0)
    return Status::ok();
  // Reserve and give back at once: the limit decides (and may wait for
  // other buffers to drain) exactly as for an allocation.
  if (!limit->tryReserve(*bytes))
    return Status::error(refusal(bytes, what, limit));
  limit->release(*bytes);
  return Status::ok();
}

Status reserveScratch(std::optional<int64_t> bytes, std::string_view what) {
  AllocationScope *s = currentScope;
  if (!bytes)
    return Status::error(refusal(bytes, what, s ? s->limit() : nullptr));
  if (s && !s->tryCharge(*bytes))
    return Status::error(refusal(bytes, what, s->limit()));
  return Status::ok();
}

namespace {
/// Why a buffer that outlives its record (HeldAllocation) was refused.
std::string heldRefusal(int64_t bytes, std::string_view what,
                        const AllocationLimit *limit) {
  int64_t left = std::max<int64_t>(0, limit->limit() - limit->used());
  return std::string(what) + ": " + describeBytes(bytes) +
         " needed, more than the " + describeBytes(left) +
         " left of budget.memory " + describeBytes(limit->limit()) +
         " (raise budget.memory, or lower parallelism, prefetch or buffer "
         "sizes)";
}
} // namespace

void HeldAllocation::resize(int64_t bytes, std::string_view what) {
  bytes = std::max<int64_t>(0, bytes);
  if (!bound_) {
    AllocationScope *s = currentScope;
    limit_ = s ? s->limit() : nullptr;
    bound_ = true;
  }
  if (limit_ && bytes > bytes_) {
    if (!limit_->tryReserve(bytes - bytes_))
      throw AllocationRefused(heldRefusal(bytes, what, limit_));
  } else if (limit_ && bytes < bytes_) {
    limit_->release(bytes_ - bytes);
  }
  bytes_ = bytes;
}

int64_t HeldAllocation::available() const {
  const AllocationLimit *l = limit_;
  if (!bound_)
    l = currentScope ? currentScope->limit() : nullptr;
  if (!l || l->limit() <= 0)
    return -1;
  return std::max<int64_t>(0, l->limit() - l->used());
}

bool HeldAllocation::tryResize(int64_t bytes) {
  bytes = std::max<int64_t>(0, bytes);
  if (!bound_) {
    AllocationScope *s = currentScope;
    limit_ = s ? s->limit() : nullptr;
    bound_ = true;
  }
  if (limit_ && bytes > bytes_) {
    if (!limit_->tryReserveNow(bytes - bytes_))
      return false;
  } else if (limit_ && bytes < bytes_) {
    limit_->release(bytes_ - bytes);
  }
  bytes_ = bytes;
  return true;
}

void HeldAllocation::reset() {
  if (limit_ && bytes_ > 0)
    limit_->release(bytes_);
  bytes_ = 0;
}

void chargeTensorAllocation(std::optional<int64_t> bytes, ElemType elem,
                            const std::vector<int64_t> &shape) {
  AllocationScope *s = currentScope;
  if (bytes && (!s || s->tryCharge(*bytes)))
    return;
  throw AllocationRefused(refusal(bytes,
                                  "a tensor " + FieldType(elem, shape).str(),
                                  s ? s->limit() : nullptr));
}

void chargeStringTensor(ElemType elem, const std::vector<int64_t> &shape,
                        int64_t payloadBytes) {
  std::optional<int64_t> bytes = static_cast<int64_t>(sizeof(std::string));
  for (int64_t d : shape)
    if (bytes && (d < 0 || __builtin_mul_overflow(*bytes, d, &*bytes)))
      bytes.reset();
  constexpr int64_t kFixed = static_cast<int64_t>(
      kTensorOverheadBytes + sizeof(std::vector<std::string>));
  if (bytes && (payloadBytes < 0 ||
                __builtin_add_overflow(*bytes, payloadBytes + kFixed, &*bytes)))
    bytes.reset();
  if (!bytes || AllocationScope::current())
    chargeTensorAllocation(bytes, elem, shape);
}

std::string recordTypeTooLarge(const RecordType &t, int64_t limit,
                               bool leadingAtLeastOne) {
  if (limit <= 0)
    return "";
  int64_t total = 0;
  bool overflow = false;
  bool lowerBound = false;
  for (const Field &f : t.fields()) {
    if (!isNumeric(f.type.elem))
      continue;
    std::optional<int64_t> b = elemTypeSize(f.type.elem);
    bool known = true;
    for (size_t i = 0; i < f.type.shape.size(); ++i) {
      int64_t d = f.type.shape[i];
      if (d < 0 && i == 0 && leadingAtLeastOne) {
        lowerBound = true;
        continue; // one row at least
      }
      if (d < 0) {
        known = false;
        break;
      }
      if (b && __builtin_mul_overflow(*b, d, &*b))
        b.reset();
    }
    if (!known)
      continue;
    if (!b || __builtin_add_overflow(total, *b, &total)) {
      overflow = true;
      break;
    }
  }
  if (!overflow && total <= limit)
    return "";
  return "one record of {" + t.str() + "} takes " +
         (overflow ? std::string("more than 2^63 bytes")
          : lowerBound
              ? "at least " + describeBytes(total) + " (a batch of one row)"
              : describeBytes(total)) +
         ", more than budget.memory " + describeBytes(limit);
}

namespace {
thread_local std::vector<Tensor> *currentTargets = nullptr;
} // namespace

OutputTargetScope::OutputTargetScope(std::vector<Tensor> *targets)
    : outer_(currentTargets) {
  currentTargets = targets;
}

OutputTargetScope::~OutputTargetScope() { currentTargets = outer_; }

Tensor outputTensor(ElemType elem, std::vector<int64_t> shape) {
  if (std::vector<Tensor> *targets = currentTargets)
    for (Tensor &t : *targets)
      if (t.valid() && t.elem() == elem && t.shape() == shape) {
        Tensor out = std::move(t);
        t = Tensor();
        return out;
      }
  return Tensor::empty(elem, std::move(shape));
}

int64_t hostMemoryBytes() {
  static const int64_t bytes = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t ram = pages > 0 && page > 0 ? int64_t(pages) * int64_t(page)
                                        : int64_t(4) << 30;
    for (const char *p : {"/sys/fs/cgroup/memory.max",
                          "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
      if (std::optional<int64_t> cg = readLimitFile(p))
        ram = std::min(ram, *cg);
    return ram;
  }();
  return bytes;
}

namespace {
std::string readFileWord(const char *path, int words) {
  std::ifstream f(path);
  std::string out, w;
  for (int i = 0; i < words && f >> w; ++i)
    out += (i ? " " : "") + w;
  return out;
}
} // namespace

int64_t coresAllowed(int64_t affinity, int64_t online,
                     const std::string &cpuMax, const std::string &v1Quota,
                     const std::string &v1Period) {
  int64_t cores = affinity > 0 ? affinity : std::max<int64_t>(1, online);
  auto quotaCores = [](double quota, double period) -> int64_t {
    if (!(quota > 0) || !(period > 0))
      return 0;
    return static_cast<int64_t>(std::ceil(quota / period - 1e-9));
  };
  int64_t q = 0;
  if (!cpuMax.empty()) {
    char quota[32] = {0};
    double period = 0;
    if (std::sscanf(cpuMax.c_str(), "%31s %lf", quota, &period) == 2 &&
        std::string(quota) != "max")
      q = quotaCores(std::strtod(quota, nullptr), period);
  } else if (!v1Quota.empty() && !v1Period.empty()) {
    q = quotaCores(std::strtod(v1Quota.c_str(), nullptr),
                   std::strtod(v1Period.c_str(), nullptr));
  }
  if (q > 0)
    cores = std::min(cores, q);
  return std::max<int64_t>(1, cores);
}

int64_t hostCores() {
  static const int64_t cores = [] {
    cpu_set_t set;
    int64_t affinity = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      affinity = CPU_COUNT(&set);
    return coresAllowed(
        affinity, std::thread::hardware_concurrency(),
        readFileWord("/sys/fs/cgroup/cpu.max", 2),
        readFileWord("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", 1),
        readFileWord("/sys/fs/cgroup/cpu/cpu.cfs_period_us", 1));
  }();
  return cores;
}

int64_t defaultMemoryBudget() {
  if (const char *env = std::getenv("SLUICE_DEFAULT_MEMORY"); env && *env)
    if (std::optional<int64_t> b = parseByteSize(env); b && *b > 0)
      return *b;
  int64_t b = static_cast<int64_t>(static_cast<double>(hostMemoryBytes()) *
                                   kDefaultMemoryFraction);
  return std::max<int64_t>(b / (1 << 20) * (1 << 20), int64_t(64) << 20);
}

} // namespace sluice
