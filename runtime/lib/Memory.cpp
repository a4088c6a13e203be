//===- Memory.cpp - Byte-accounted memory budget --------------------------===//
//
// Lock-free on the hot path: reservations are a compare-and-swap on the
// pipeline total; the mutex only guards the list of accounts.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Memory.h"
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Switches.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>
#include <tuple>

namespace sluice::runtime {

int64_t recordBytes(const Record &r) {
  int64_t n = static_cast<int64_t>(r.fields.capacity() * sizeof(Tensor));
  for (const Tensor &t : r.fields)
    if (t.valid())
      n += static_cast<int64_t>(t.memoryBytes());
  return n;
}

void compactRecord(Record &r) {
  for (Tensor &t : r.fields)
    if (t.pinsLargerBuffer())
      t = t.compacted();
}

std::string formatBytes(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes < 0 ? -bytes : bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%s%lld B", bytes < 0 ? "-" : "",
                  static_cast<long long>(bytes < 0 ? -bytes : bytes));
  else
    std::snprintf(buf, sizeof(buf), "%s%.*f %s", bytes < 0 ? "-" : "",
                  v == static_cast<double>(static_cast<int64_t>(v))
                      ? 0
                      : (v >= 100 ? 0 : (v >= 10 ? 1 : 2)),
                  v, units[u]);
  return buf;
}

namespace {
/// Bytes reserved in all budgets alive now, and the most ever.
std::atomic<int64_t> &processUsed() {
  static std::atomic<int64_t> v{0};
  return v;
}
std::atomic<int64_t> &processPeak() {
  static std::atomic<int64_t> v{0};
  return v;
}
void addToProcess(int64_t bytes) {
  int64_t next =
      processUsed().fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::atomic<int64_t> &peak = processPeak();
  int64_t p = peak.load(std::memory_order_relaxed);
  while (next > p &&
         !peak.compare_exchange_weak(p, next, std::memory_order_relaxed))
    ;
}
} // namespace

int configureProcessAllocator() {
#ifdef __GLIBC__
  const char *tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_ARENA_MAX") ||
      (tunables && std::strstr(tunables, "glibc.malloc.arena_max")))
    return 0;
  int arenas = 1;
  if (const char *v = std::getenv("SLUICE_MALLOC_ARENAS"); v && *v) {
    char *end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > 1024)
      return 0;
    arenas = static_cast<int>(n);
  }
  if (arenas == 0)
    return 0;
  return mallopt(M_ARENA_MAX, arenas) == 1 ? arenas : 0;
#else
  return 0;
#endif
}

bool keepSmallFreeHeap() {
  static const bool on = !switchedOff("SLUICE_NO_SMALL_HEAP_KEEP");
  return on;
}

bool heapCarryEnabled() {
#ifdef __GLIBC__
  return !switchedOff("SLUICE_NO_HEAP_CARRY");
#else
  return false;
#endif
}

namespace {
/// mallinfo2's free bytes when the baseline was recorded or the heap last
/// trimmed by this file (-1: not yet): malloc_trim returns free pages but
/// leaves the chunks free, so what was free then is not resident.
std::atomic<int64_t> &baselineFreeHeap() {
  static std::atomic<int64_t> v{-1};
  return v;
}
int64_t freeHeapNow() {
#ifdef __GLIBC__
  return static_cast<int64_t>(mallinfo2().fordblks);
#else
  return 0;
#endif
}
} // namespace

namespace {
/// malloc_trim(0), after which the free chunks it emptied (their pages
/// returned, but still free bytes to mallinfo2) are the new reference.
void trimHeap() {
#ifdef __GLIBC__
  malloc_trim(0);
  if (baselineFreeHeap().load(std::memory_order_relaxed) >= 0)
    baselineFreeHeap().store(freeHeapNow(), std::memory_order_relaxed);
#endif
}
} // namespace

int64_t freeHeapAboveBaseline() {
  int64_t base = baselineFreeHeap().load(std::memory_order_relaxed);
  if (base < 0)
    return 0;
  return std::max<int64_t>(0, freeHeapNow() - base);
}

bool releaseFreeHeap() {
#ifdef __GLIBC__
  // The next pipeline counts the free heap and refills it.
  if (switchedOff("SLUICE_NO_HEAP_TRIM") || heapCarryEnabled())
    return false;
  trimHeap();
  return true;
#else
  return false;
#endif
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLUICE_EXIT_RUNS_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||     \
    __has_feature(memory_sanitizer) || __has_feature(leak_sanitizer)
#define SLUICE_EXIT_RUNS_CHECKS 1
#endif
#endif

void endProcess(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
#ifndef SLUICE_EXIT_RUNS_CHECKS
  if (!switchedOff("SLUICE_NO_QUICK_EXIT"))
    ::_exit(code);
#endif
  std::exit(code);
}

namespace {
std::atomic<int64_t> &baselineRss() {
  static std::atomic<int64_t> v{0};
  return v;
}
} // namespace

namespace {
std::chrono::steady_clock::time_point debugStart() {
  static const auto t0 = std::chrono::steady_clock::now();
  return t0;
}
/// One SLUICE_DEBUG_RSS line on stderr: the resident set over the baseline
/// beside the bytes the budgets count, and the pool's idle bytes.
std::mutex &liveBudgetsMu() {
  static std::mutex m;
  return m;
}
std::vector<const MemoryBudget *> &liveBudgets() {
  static std::vector<const MemoryBudget *> v;
  return v;
}
bool debugRss();
/// The resident set over the baseline that the budgets do not count, as it
/// stays for up to 20 ms: each sample reads the count before and after the
/// resident set and takes the larger. A gap that closes within 20 ms is the
/// moment between a buffer's count being released and its pages being
/// unmapped (or touched and counted) on another thread, which a loaded host
/// can stretch to milliseconds; memory held uncounted (a batch the caller
/// keeps while the next one is made) stays for a batch's time and is seen.
int64_t lastingGap(int64_t &rssOut, int64_t &usedOut) {
  int64_t base = baselineRss().load();
  int64_t gap = INT64_MAX;
  for (int i = 0; i < 10; ++i) {
    int64_t u1 = processUsed().load(std::memory_order_relaxed);
    int64_t rss = currentRss();
    int64_t u2 = processUsed().load(std::memory_order_relaxed);
    int64_t g = rss - base - std::max(u1, u2);
    if (g < gap) {
      gap = g;
      rssOut = rss;
      usedOut = std::max(u1, u2);
    }
    if (gap <= (int64_t(1) << 20))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return gap;
}
void debugRssLine(const char *what, bool lasting = false) {
  int64_t rss = currentRss(), base = baselineRss().load();
  int64_t used = processUsed().load(std::memory_order_relaxed);
  if (lasting)
    lastingGap(rss, used);
  BufferPoolStats ps = bufferPoolStats();
  double mib = 1 << 20;
  std::fprintf(stderr,
               "sluice rss: %8.3f s %-28s rss-base %7.1f MiB counted %7.1f "
               "MiB gap %6.1f MiB pool idle %6.1f MiB\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             debugStart())
                   .count(),
               what, (rss - base) / mib, used / mib, (rss - base - used) / mib,
               ps.idleBytes / mib);
  std::lock_guard<std::mutex> lock(liveBudgetsMu());
  for (const MemoryBudget *b : liveBudgets())
    std::fprintf(stderr, "sluice rss:   budget: %s\n",
                 b->usageSummary().c_str());
}
bool debugRss() {
  static const bool on = std::getenv("SLUICE_DEBUG_RSS") &&
                         *std::getenv("SLUICE_DEBUG_RSS") &&
                         std::strcmp(std::getenv("SLUICE_DEBUG_RSS"), "0") != 0;
  return on;
}
} // namespace

void debugRssMark(const char *what) {
  if (debugRss())
    debugRssLine(what);
}

void noteProcessBaseline() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    baselineRss().store(currentRss(), std::memory_order_relaxed);
    baselineFreeHeap().store(freeHeapNow(), std::memory_order_relaxed);
    if (!debugRss())
      return;
    debugStart();
    // Samples every millisecond; prints each new high of the resident set.
    std::thread([] {
      int64_t high = 0, countedHigh = 0;
      for (;;) {
        int64_t rss = currentRss();
        if (rss > high + (int64_t(1) << 20)) {
          high = rss;
          debugRssLine("new rss high", /*lasting=*/true);
        }
        int64_t used = processUsed().load(std::memory_order_relaxed);
        if (used > countedHigh + (int64_t(1) << 20)) {
          countedHigh = used;
          debugRssLine("new counted high");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }).detach();
  });
}

int64_t currentRss() {
  long pages = 0, resident = 0;
  if (FILE *f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

int64_t processBaselineRss() {
  return baselineRss().load(std::memory_order_relaxed);
}

int64_t processMemoryPeak() {
  return processPeak().load(std::memory_order_relaxed);
}

void MemoryAccount::notePeak(int64_t v) {
  int64_t p = peak_.load(std::memory_order_relaxed);
  while (v > p && !peak_.compare_exchange_weak(p, v, std::memory_order_relaxed))
    ;
}

bool MemoryAccount::tryReserve(int64_t bytes) {
  if (bytes <= 0)
    return true;
  if (!budget_->tryAdd(bytes))
    return false;
  notePeak(used_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  return true;
}

void MemoryAccount::forceReserve(int64_t bytes) {
  if (bytes <= 0)
    return;
  // The account first: an overrun's list of what held the memory
  // (MemoryBudget::add) then includes these bytes.
  notePeak(used_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  budget_->add(bytes, this);
}

void MemoryAccount::release(int64_t bytes) {
  if (bytes <= 0)
    return;
  used_.fetch_sub(bytes, std::memory_order_relaxed);
  budget_->used_.fetch_sub(bytes, std::memory_order_relaxed);
  processUsed().fetch_sub(bytes, std::memory_order_relaxed);
}

MemoryBudget::MemoryBudget(int64_t limitBytes) : limit_(limitBytes) {
  if (!debugRss())
    return;
  std::lock_guard<std::mutex> lock(liveBudgetsMu());
  liveBudgets().push_back(this);
}

MemoryBudget::~MemoryBudget() {
  if (!debugRss())
    return;
  std::lock_guard<std::mutex> lock(liveBudgetsMu());
  auto &v = liveBudgets();
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
}

MemoryAccount *MemoryBudget::account(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  accounts_.emplace_back(new MemoryAccount(this, std::move(name)));
  return accounts_.back().get();
}

bool MemoryBudget::tryAdd(int64_t bytes) {
  int64_t cur = used_.load(std::memory_order_relaxed);
  for (bool trimmed = false;;) {
    int64_t next = cur + bytes;
    if (limit_ > 0 && next > limit_) {
      // Free heap counted for reuse gives way to a real request. Look once
      // more in any case: another thread may have just trimmed it (its
      // trimCarriedHeap() then finds nothing left and returns false here).
      if (trimmed)
        return false;
      trimmed = true;
      if (carried_.load(std::memory_order_relaxed) > 0)
        trimCarriedHeap();
      cur = used_.load(std::memory_order_relaxed);
      continue;
    }
    if (used_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      // Before the peak: the carried free heap this growth may have used.
      if (carried_.load(std::memory_order_relaxed) > 0)
        noteCarryGrowth(bytes);
      addToProcess(bytes);
      int64_t p = peak_.load(std::memory_order_relaxed);
      while (next > p &&
             !peak_.compare_exchange_weak(p, next, std::memory_order_relaxed))
        ;
      return true;
    }
  }
}

MemoryBudget::Overrun MemoryBudget::firstOverrun() const {
  std::lock_guard<std::mutex> lock(mu_);
  return firstOverrun_;
}

void MemoryBudget::add(int64_t bytes, const MemoryAccount *who) {
  int64_t next = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  // The carried free heap gives way to bytes already allocated as it does
  // to a refused reservation (tryAdd): it is counted only while the budget
  // has room for it, so a pipeline that fits without carrying never
  // overruns because of it.
  if (limit_ > 0 && next > limit_ &&
      carried_.load(std::memory_order_relaxed) > 0 && trimCarriedHeap())
    next = used_.load(std::memory_order_relaxed);
  if (limit_ > 0 && next > limit_ &&
      !overrun_.load(std::memory_order_relaxed)) {
    // What held the memory then, for the error (usageSummary takes mu_).
    std::string held = usageSummary();
    std::lock_guard<std::mutex> lock(mu_);
    if (!overrun_.load(std::memory_order_relaxed)) {
      firstOverrun_.account = who ? who->name() : std::string();
      firstOverrun_.total = next;
      firstOverrun_.held = std::move(held);
      overrun_.store(true, std::memory_order_release);
    }
  }
  if (carried_.load(std::memory_order_relaxed) > 0)
    noteCarryGrowth(bytes);
  addToProcess(bytes);
  int64_t p = peak_.load(std::memory_order_relaxed);
  while (next > p &&
         !peak_.compare_exchange_weak(p, next, std::memory_order_relaxed))
    ;
}

int64_t MemoryBudget::carryFreeHeap(MemoryAccount *account) {
  if (!heapCarryEnabled() || account->budget_ != this)
    return 0;
  std::lock_guard<std::mutex> lock(carryMu_);
  if (carried_.load(std::memory_order_relaxed) > 0)
    return 0;
  int64_t free = freeHeapAboveBaseline();
  if (free < (int64_t(1) << 20))
    return 0;
  // More than half the budget is not carried but returned: the free heap
  // may be another live pipeline's (a training pipeline still open while an
  // evaluation one starts, in one Python process), and a budget mostly
  // taken by it leaves too little for this pipeline's own first buffers.
  if (limit_ > 0 && free > limit_ / 2) {
    trimHeap();
    return 0;
  }
  if (!account->tryReserve(free)) {
    trimHeap();
    return 0;
  }
  carryAccount_ = account;
  sinceRefresh_.store(0, std::memory_order_relaxed);
  carryStep_.store(kCarryRefreshBytes, std::memory_order_relaxed);
  carryReserved_ = 0;
  carryGrace_ = std::max<int64_t>(int64_t(16) << 20, 2 * free);
  carried_.store(free, std::memory_order_relaxed);
  return free;
}

void MemoryBudget::noteCarryGrowth(int64_t bytes) {
  if (sinceRefresh_.fetch_add(bytes, std::memory_order_relaxed) + bytes <
      carryStep_.load(std::memory_order_relaxed))
    return;
  std::unique_lock<std::mutex> lock(carryMu_, std::try_to_lock);
  if (!lock.owns_lock())
    return;
  carryReserved_ += sinceRefresh_.exchange(0, std::memory_order_relaxed);
  int64_t c = carried_.load(std::memory_order_relaxed);
  if (c <= 0)
    return;
  int64_t keep = std::clamp<int64_t>(freeHeapAboveBaseline(), 0, c);
  // What is left is too little to be worth a check per MiB reserved.
  if (keep < kCarryRefreshBytes)
    keep = 0;
  // What the pipeline has not reused by the time it reserved twice the
  // carried bytes (16 MiB at least) it is not likely to: back to the
  // system, as the trim after the probes did. A free heap of at most
  // kCarryKeepBytes stays (counted): it is the churn of the pipeline's own
  // per-record buffers (what a decode's window or a resize allocates),
  // whose size is what the busiest moment took, not what is in use when
  // checked, so it is refilled again and again. Returned, each of its
  // pages would be faulted in again: one trim per pipeline cost a
  // `sluice serve` worker of the photo pipeline ~100 faults per batch.
  // Kept, it is looked at once per kCarryKeepBytes reserved from then on
  // (mallinfo2 walks every free list: once per MiB reserved it took ~0.5
  // ms of that worker's CPU per batch).
  if (keep > 0 && carryReserved_ >= carryGrace_) {
    if (keep <= kCarryKeepBytes && keepSmallFreeHeap()) {
      carryStep_.store(kCarryKeepBytes, std::memory_order_relaxed);
    } else {
      trimHeap();
      keep = 0;
    }
  }
  if (keep < c) {
    carried_.store(keep, std::memory_order_relaxed);
    carryAccount_->release(c - keep);
  }
}

bool MemoryBudget::trimCarriedHeap() {
  std::lock_guard<std::mutex> lock(carryMu_);
  int64_t c = carried_.exchange(0, std::memory_order_relaxed);
  if (c <= 0)
    return false;
  trimHeap();
  carryAccount_->release(c);
  return true;
}

void MemoryBudget::dropCarriedHeap() {
  std::lock_guard<std::mutex> lock(carryMu_);
  int64_t c = carried_.exchange(0, std::memory_order_relaxed);
  if (c > 0)
    carryAccount_->release(c);
}

std::string MemoryBudget::usageSummary() const {
  // (bytes, the account's place, name): largest first, ties in the
  // accounts' order. std::sort with a total order rather than
  // std::stable_sort, whose libstdc++ 12 implementation trips clang's
  // deprecation warning.
  std::vector<std::tuple<int64_t, size_t, std::string>> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto &a : accounts_)
      if (a->used() > 0)
        held.emplace_back(a->used(), held.size(), a->name());
  }
  std::sort(held.begin(), held.end(), [](const auto &x, const auto &y) {
    if (std::get<0>(x) != std::get<0>(y))
      return std::get<0>(x) > std::get<0>(y);
    return std::get<1>(x) < std::get<1>(y);
  });
  std::string s;
  for (const auto &[bytes, order, name] : held)
    s += (s.empty() ? "" : ", ") + name + " " + formatBytes(bytes);
  return s.empty() ? "nothing" : s;
}

std::vector<std::pair<std::string, int64_t>> MemoryBudget::peaks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto &a : accounts_)
    out.emplace_back(a->name(), a->peak());
  return out;
}

AccountAllocationLimit::AccountAllocationLimit(MemoryAccount *account,
                                               bool credit)
    : account_(account) {
  if (!credit || switchedOff("SLUICE_NO_BUDGET_CREDIT"))
    return;
  int64_t l = account_->budget().limit();
  int64_t chunk =
      l > 0 ? std::min(kMaxCreditChunk, l / 1024 / 64 * 64) : kMaxCreditChunk;
  // Below a few KiB a chunk would save little and cost a tight budget.
  if (chunk < 1024)
    return;
  chunk_ = chunk;
  slots_.reset(new Slot[kCreditSlots]);
}

AccountAllocationLimit::~AccountAllocationLimit() { returnCredit(); }

AccountAllocationLimit::Slot &AccountAllocationLimit::threadSlot() {
  static std::atomic<unsigned> next{0};
  thread_local const unsigned index =
      next.fetch_add(1, std::memory_order_relaxed);
  return slots_[index % kCreditSlots];
}

int64_t AccountAllocationLimit::outstandingCredit() const {
  int64_t n = 0;
  if (slots_)
    for (int i = 0; i < kCreditSlots; ++i)
      n += slots_[i].credit.load(std::memory_order_relaxed);
  return n;
}

bool AccountAllocationLimit::returnCredit() {
  if (!slots_)
    return false;
  int64_t n = 0;
  for (int i = 0; i < kCreditSlots; ++i)
    n += slots_[i].credit.exchange(0, std::memory_order_relaxed);
  account_->release(n);
  return n > 0;
}

bool AccountAllocationLimit::reserveExactly(int64_t bytes) {
  if (account_->tryReserve(bytes))
    return true;
  // Other threads' credit may hold what this request needs.
  return returnCredit() && account_->tryReserve(bytes);
}

bool AccountAllocationLimit::tryReserveNow(int64_t bytes) {
  if (bytes <= 0)
    return true;
  if (chunk_ == 0 || bytes > chunk_)
    return reserveExactly(bytes);
  Slot &s = threadSlot();
  int64_t c = s.credit.load(std::memory_order_relaxed);
  while (c >= bytes)
    if (s.credit.compare_exchange_weak(c, c - bytes, std::memory_order_relaxed))
      return true;
  // Out of credit: this request and a fresh chunk in one reservation.
  if (account_->tryReserve(bytes + chunk_)) {
    s.credit.fetch_add(chunk_, std::memory_order_relaxed);
    return true;
  }
  return reserveExactly(bytes);
}

void AccountAllocationLimit::release(int64_t bytes) {
  if (bytes <= 0)
    return;
  if (chunk_ == 0 || bytes > 2 * chunk_) {
    account_->release(bytes);
    return;
  }
  Slot &s = threadSlot();
  int64_t c = s.credit.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  // More than two chunks: keep one, give the rest back.
  while (c > 2 * chunk_)
    if (s.credit.compare_exchange_weak(c, chunk_, std::memory_order_relaxed)) {
      account_->release(c - chunk_);
      return;
    }
}

bool AccountAllocationLimit::tryReserve(int64_t bytes) {
  if (tryReserveNow(bytes))
    return true;
  const MemoryBudget &b = account_->budget();
  if (!b.limited() || bytes > b.limit())
    return false;
  // Queues and windows release records as the consumer takes them; a short
  // wait turns a momentary peak into a delay instead of a failed record.
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (reserveExactly(bytes))
      return true;
  }
  return false;
}

} // namespace sluice::runtime
