//===- tensor_buffer_pool_test.cpp - Reuse of large tensor buffers --------===//
//
// The process-wide pool behind Tensor::empty for buffers over 64 KiB:
// recurring sizes are handed out again (64-byte aligned, the same memory),
// its bounds hold, it can be turned off from code and from the
// environment, it is safe under concurrent use, and row views keep their
// base buffer alive. The small-buffer pool (up to 64 KiB, slabs per 64-byte
// class): reuse across threads, slabs freed by a trim only when wholly idle,
// idle bytes reserved in a pipeline's limit, and its off switch.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Allocation.h"
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Switches.h"
#include "sluice/ops/Tensor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace sluice;

namespace {

bool aligned64(const Tensor &t) {
  return reinterpret_cast<uintptr_t>(t.raw()) % 64 == 0;
}

/// Each test starts from an empty, enabled pool and leaves the pool on.
class BufferPool : public ::testing::Test {
protected:
  void SetUp() override {
    setBufferPoolEnabled(true);
    trimBufferPool();
    before_ = bufferPoolStats();
  }
  void TearDown() override {
    setBufferPoolEnabled(true);
    trimBufferPool();
  }
  int64_t hits() const { return bufferPoolStats().hits - before_.hits; }
  BufferPoolStats before_;
};

TEST_F(BufferPool, HandsARecurringSizeOutAgain) {
  const int64_t n = (3 << 20) + 4096;
  // The first buffer of a size is freed: the size may be a one-off.
  Tensor::empty(ElemType::U8, {n});
  EXPECT_EQ(bufferPoolStats().idleBuffers, 0);
  Tensor second = Tensor::empty(ElemType::U8, {n});
  const uint8_t *p = second.raw();
  second = Tensor();
  EXPECT_EQ(bufferPoolStats().idleBuffers, 1);
  EXPECT_EQ(bufferPoolStats().idleBytes, n);
  Tensor third = Tensor::empty(ElemType::U8, {n});
  EXPECT_EQ(third.raw(), p);
  EXPECT_TRUE(aligned64(third));
  EXPECT_EQ(hits(), 1);
  EXPECT_EQ(bufferPoolStats().idleBuffers, 0);
  // Another element type of the same byte size shares the buffers.
  third = Tensor();
  Tensor f = Tensor::empty(ElemType::F32, {n / 4});
  EXPECT_EQ(f.raw(), p);
  EXPECT_EQ(hits(), 2);
}

TEST_F(BufferPool, ZerosClearsAReusedBuffer) {
  const int64_t n = (2 << 20) + 64 * 3;
  for (int i = 0; i < 2; ++i) {
    Tensor t = Tensor::empty(ElemType::U8, {n});
    std::memset(t.mutableRaw(), 0xA5, t.nbytes());
  }
  Tensor z = Tensor::zeros(ElemType::U8, {n});
  EXPECT_EQ(hits(), 1);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(z.data<uint8_t>()[i], 0) << "byte " << i;
}

TEST_F(BufferPool, PadsOddSizesLikeOtherBuffers) {
  // 1 MiB + 1 byte: rounded up to whole cache lines, pooled by that size.
  const int64_t n = (1 << 20) + 1;
  Tensor::empty(ElemType::U8, {n});
  Tensor::empty(ElemType::U8, {n});
  EXPECT_EQ(bufferPoolStats().idleBytes, (1 << 20) + 64);
  Tensor t = Tensor::empty(ElemType::U8, {n});
  EXPECT_EQ(hits(), 1);
  EXPECT_TRUE(aligned64(t));
  EXPECT_EQ(t.nbytes(), static_cast<size_t>(n));
  EXPECT_EQ(t.memoryBytes(),
            static_cast<size_t>((1 << 20) + 64) + kTensorOverheadBytes);
}

TEST_F(BufferPool, LeavesSmallAndOneOffBuffersToMalloc) {
  // Small ones go to the small-buffer pool, never to this one.
  for (int i = 0; i < 3; ++i)
    Tensor::empty(ElemType::U8, {static_cast<int64_t>(kPoolMinBytes) - 64});
  EXPECT_EQ(bufferPoolStats().idleBuffers, 0);
  Tensor::empty(ElemType::U8, {(5 << 20) + 128});
  Tensor::empty(ElemType::U8, {(5 << 20) + 192});
  EXPECT_EQ(bufferPoolStats().idleBuffers, 0);
  EXPECT_EQ(hits(), 0);
}

TEST_F(BufferPool, KeepsAtMostMaxPerSizeBuffersOfOneSize) {
  // The smallest pooled size, never touched: ~70 MiB of address space.
  const int64_t n = static_cast<int64_t>(kPoolMinBytes);
  Tensor::empty(ElemType::U8, {n});
  std::vector<Tensor> held;
  for (size_t i = 0; i < kPoolMaxPerSize + 6; ++i)
    held.push_back(Tensor::empty(ElemType::U8, {n}));
  held.clear();
  EXPECT_EQ(bufferPoolStats().idleBuffers,
            static_cast<int64_t>(kPoolMaxPerSize));
  EXPECT_EQ(bufferPoolStats().idleBytes,
            static_cast<int64_t>(kPoolMaxPerSize) * n);
}

TEST_F(BufferPool, CapsIdleBytesAndKeepsTheMostRecentlyFreed) {
  // Buffers are not touched, so none of this becomes resident.
  const int64_t mib = 1 << 20;
  std::vector<int64_t> sizes = {40 * mib, 44 * mib, 48 * mib, 52 * mib};
  std::vector<Tensor> held;
  for (int64_t n : sizes) {
    Tensor::empty(ElemType::U8, {n});
    for (int i = 0; i < 2; ++i)
      held.push_back(Tensor::empty(ElemType::U8, {n}));
  }
  // 8 buffers, 368 MiB: more than the pool keeps.
  const uint8_t *last = held.back().raw();
  held.clear();
  BufferPoolStats s = bufferPoolStats();
  EXPECT_LE(s.idleBytes, static_cast<int64_t>(kPoolMaxIdleBytes));
  EXPECT_GE(s.idleBytes, static_cast<int64_t>(kPoolMaxIdleBytes) - 52 * mib);
  Tensor again = Tensor::empty(ElemType::U8, {sizes.back()});
  EXPECT_EQ(again.raw(), last);
}

TEST_F(BufferPool, TurnedOffItFreesIdleBuffersAndNeverHits) {
  const int64_t n = (6 << 20) + 64;
  for (int i = 0; i < 3; ++i)
    Tensor::empty(ElemType::U8, {n});
  ASSERT_EQ(bufferPoolStats().idleBuffers, 1);
  Tensor live = Tensor::empty(ElemType::U8, {n});
  setBufferPoolEnabled(false);
  EXPECT_FALSE(bufferPoolEnabled());
  EXPECT_EQ(bufferPoolStats().idleBuffers, 0);
  // A buffer allocated while on and freed while off is freed.
  live = Tensor();
  for (int i = 0; i < 3; ++i)
    Tensor::empty(ElemType::U8, {n});
  EXPECT_EQ(bufferPoolStats().idleBuffers, 0);
  // The third buffer of the loop above and `live`; none while off.
  EXPECT_EQ(hits(), 2);
}

TEST_F(BufferPool, HandsEachBufferToOneOwnerUnderConcurrency) {
  const std::vector<int64_t> sizes = {(1 << 20) + 64 * 7, (3 << 20) + 64 * 9};
  std::atomic<int> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        Tensor a = Tensor::empty(ElemType::U8, {sizes[(t + i) % 2]});
        uint8_t mark = static_cast<uint8_t>(t * 50 + i % 50);
        // Ends and middle are enough to see two owners of one buffer.
        size_t n = a.nbytes();
        uint8_t *p = a.mutableRaw();
        for (size_t off : {size_t(0), n / 2, n - 4096})
          std::memset(p + off, mark, 4096);
        std::this_thread::yield();
        for (size_t off : {size_t(0), n / 2, n - 4096})
          for (size_t k = 0; k < 4096; ++k)
            if (p[off + k] != mark) {
              ++corrupt;
              break;
            }
        if (!aligned64(a))
          ++corrupt;
      }
    });
  for (std::thread &th : threads)
    th.join();
  EXPECT_EQ(corrupt.load(), 0);
  BufferPoolStats s = bufferPoolStats();
  EXPECT_GT(hits(), 0);
  EXPECT_LE(s.idleBuffers, static_cast<int64_t>(2 * kPoolMaxPerSize));
}

/// Counts what the pool reserves, like a pipeline's budget.
class CountingLimit : public AllocationLimit {
public:
  explicit CountingLimit(int64_t limit) : limit_(limit) {}
  bool tryReserve(int64_t bytes) override {
    if (used_ + bytes > limit_)
      return false;
    used_ += bytes;
    return true;
  }
  void release(int64_t bytes) override { used_ -= bytes; }
  int64_t limit() const override { return limit_; }
  int64_t used() const override { return used_; }

private:
  int64_t limit_;
  int64_t used_ = 0;
};

/// Each test starts with the small-buffer pool on, nothing idle in it.
class SmallBufferPool : public ::testing::Test {
protected:
  void SetUp() override {
    setSmallBufferPoolEnabled(true);
    trimBufferPool();
    before_ = bufferPoolStats();
  }
  void TearDown() override {
    setBufferPoolLimit(nullptr);
    setSmallBufferPoolEnabled(true);
    trimBufferPool();
  }
  BufferPoolStats before_;
};

TEST_F(SmallBufferPool, CarvesSlabsAndReusesBuffersAcrossThreads) {
  if (!smallBufferPoolEnabled())
    GTEST_SKIP() << "SLUICE_NO_BUFFER_POOL / SLUICE_NO_SMALL_BUFFER_POOL set";
  Tensor a = Tensor::empty(ElemType::F32, {3, 7}); // 84 bytes: class 128
  EXPECT_TRUE(aligned64(a));
  BufferPoolStats s = bufferPoolStats();
  // One slab for the data class and one for the control blocks' class.
  EXPECT_GE(s.smallSlabBytes - before_.smallSlabBytes,
            static_cast<int64_t>(kSmallPoolSlabBytes));
  const uint8_t *p = a.raw();
  // Freed on another thread, which ends: its cache goes back to the shared
  // lists, and the next thread to need the class gets it.
  std::thread([t = std::move(a)]() mutable { t = Tensor(); }).join();
  int64_t hitsBefore = bufferPoolStats().smallHits;
  const uint8_t *q = nullptr;
  std::thread([&q] {
    Tensor b = Tensor::empty(ElemType::U8, {100}); // also class 128
    q = b.raw();
  }).join();
  EXPECT_EQ(q, p);
  EXPECT_GT(bufferPoolStats().smallHits, hitsBefore);
  Tensor b = Tensor::empty(ElemType::U8, {100});
  // Every buffer of a slab is distinct, aligned and writable.
  std::vector<Tensor> many;
  for (int i = 0; i < 2000; ++i) {
    many.push_back(Tensor::empty(ElemType::U8, {100}));
    std::memset(many.back().mutableRaw(), i & 0xff, 100);
  }
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(aligned64(many[i]));
    ASSERT_EQ(many[i].data<uint8_t>()[99], i & 0xff) << i;
  }
}

TEST_F(SmallBufferPool, TrimFreesOnlyWhollyIdleSlabs) {
  if (!smallBufferPoolEnabled())
    GTEST_SKIP() << "SLUICE_NO_BUFFER_POOL / SLUICE_NO_SMALL_BUFFER_POOL set";
  const int64_t cls = 4096; // 16 buffers per 64 KiB slab
  std::vector<Tensor> held;
  for (int i = 0; i < 40; ++i) // three slabs of this class
    held.push_back(Tensor::empty(ElemType::U8, {cls}));
  int64_t slabs = bufferPoolStats().smallSlabBytes;
  Tensor keep = held.front(); // keeps the first slab in use
  held.clear();
  trimBufferPool();
  BufferPoolStats s = bufferPoolStats();
  EXPECT_LT(s.smallSlabBytes, slabs);
  EXPECT_GE(s.smallSlabBytes, static_cast<int64_t>(kSmallPoolSlabBytes));
  keep = Tensor();
  trimBufferPool();
  EXPECT_EQ(bufferPoolStats().smallSlabBytes, 0);
  EXPECT_EQ(bufferPoolStats().smallIdleBytes, 0);
}

TEST_F(SmallBufferPool, ReservesIdleBytesInTheLimit) {
  if (!smallBufferPoolEnabled())
    GTEST_SKIP() << "SLUICE_NO_BUFFER_POOL / SLUICE_NO_SMALL_BUFFER_POOL set";
  CountingLimit limit(int64_t(1) << 30);
  setBufferPoolLimit(&limit);
  {
    std::vector<Tensor> held;
    for (int i = 0; i < 100; ++i)
      held.push_back(Tensor::empty(ElemType::U8, {1000}));
    // What is idle (the rest of the slabs) is reserved; what is handed out
    // is the holder's to count. The thread's cache reserves ahead in
    // chunks: at most kSmallPoolThreadCredit more than it holds.
    int64_t idle = bufferPoolStats().smallIdleBytes;
    EXPECT_GE(limit.used(), idle);
    EXPECT_LE(limit.used(), idle + int64_t(kSmallPoolThreadCredit));
  }
  int64_t idle = bufferPoolStats().smallIdleBytes;
  EXPECT_GE(limit.used(), idle);
  EXPECT_LE(limit.used(), idle + int64_t(kSmallPoolThreadCredit));
  EXPECT_GT(limit.used(), 100 * 1000);
  setBufferPoolLimit(nullptr);
  EXPECT_EQ(limit.used(), 0);
  // A limit that cannot hold the idle slabs makes the pool free them.
  CountingLimit tiny(1024);
  setBufferPoolLimit(&tiny);
  EXPECT_EQ(bufferPoolStats().smallSlabBytes, 0);
  EXPECT_EQ(tiny.used(), 0);
  setBufferPoolLimit(nullptr);
}

TEST_F(SmallBufferPool, ThreadCachesAreCountedAndGoBackWhenTheThreadEnds) {
  if (!smallBufferPoolEnabled())
    GTEST_SKIP() << "SLUICE_NO_BUFFER_POOL / SLUICE_NO_SMALL_BUFFER_POOL set";
  CountingLimit limit(int64_t(1) << 30);
  setBufferPoolLimit(&limit);
  // A worker frees small buffers and stays alive (as oneTBB's workers do
  // between pipelines) while the budget is checked, then ends.
  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;
  std::thread worker([&] {
    {
      std::vector<Tensor> held;
      for (int i = 0; i < 300; ++i)
        held.push_back(Tensor::empty(ElemType::U8, {1000 + i % 3 * 64}));
    }
    std::unique_lock<std::mutex> lock(mu);
    stage = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 2; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stage == 1; });
    // The worker's cache holds some of its buffers: idle, and counted.
    BufferPoolStats s = bufferPoolStats();
    EXPECT_GE(limit.used(), s.smallIdleBytes);
    EXPECT_LE(limit.used(),
              s.smallIdleBytes + 2 * int64_t(kSmallPoolThreadCredit));
    EXPECT_GE(s.smallIdleBytes, 300 * 1000);
    // A new budget takes the caches' bytes over; the old one is left with
    // nothing reserved.
    CountingLimit next(int64_t(1) << 30);
    setBufferPoolLimit(&next);
    EXPECT_EQ(limit.used(), 0);
    EXPECT_GE(next.used(), bufferPoolStats().smallIdleBytes);
    setBufferPoolLimit(&limit);
    EXPECT_EQ(next.used(), 0);
    stage = 2;
    cv.notify_all();
  }
  worker.join();
  // Its cache went back to the shared lists: every buffer is idle again, so
  // a trim frees every slab (nothing leaked in the ended thread's cache).
  BufferPoolStats s = bufferPoolStats();
  EXPECT_GE(limit.used(), s.smallIdleBytes);
  EXPECT_LE(limit.used(), s.smallIdleBytes + int64_t(kSmallPoolThreadCredit));
  setBufferPoolLimit(nullptr);
  EXPECT_EQ(limit.used(), 0);
  trimBufferPool();
  EXPECT_EQ(bufferPoolStats().smallSlabBytes, 0);
  EXPECT_EQ(bufferPoolStats().smallIdleBytes, 0);
}

TEST_F(SmallBufferPool, ExactAccountingWithoutThreadCaches) {
  const char *off = std::getenv("SLUICE_NO_SMALL_POOL_CACHE");
  if (!off || std::string(off) != "1" || !smallBufferPoolEnabled())
    GTEST_SKIP() << "run by ThreadCachesTurnOffByTheirVariable";
  CountingLimit limit(int64_t(1) << 30);
  setBufferPoolLimit(&limit);
  std::vector<Tensor> held;
  for (int i = 0; i < 100; ++i)
    held.push_back(Tensor::empty(ElemType::U8, {1000}));
  EXPECT_EQ(limit.used(), bufferPoolStats().smallIdleBytes);
  held.clear();
  EXPECT_EQ(limit.used(), bufferPoolStats().smallIdleBytes);
  setBufferPoolLimit(nullptr);
}

TEST(SmallBufferPoolEnvironment, ThreadCachesTurnOffByTheirVariable) {
  char self[4096];
  ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  std::string cmd = std::string("SLUICE_NO_SMALL_POOL_CACHE=1 ") + self +
                    " --gtest_filter=SmallBufferPool."
                    "ExactAccountingWithoutThreadCaches > /dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc)) << cmd;
  EXPECT_EQ(WEXITSTATUS(rc), 0) << cmd;
}

TEST_F(SmallBufferPool, OffLeavesSmallBuffersToMalloc) {
  Tensor pooled = Tensor::empty(ElemType::U8, {64});
  setSmallBufferPoolEnabled(false);
  int64_t slabs = bufferPoolStats().smallSlabBytes;
  std::vector<Tensor> held;
  for (int i = 0; i < 100; ++i) {
    held.push_back(Tensor::empty(ElemType::U8, {64 * (i % 8 + 1)}));
    ASSERT_TRUE(aligned64(held.back()));
  }
  EXPECT_EQ(bufferPoolStats().smallSlabBytes, slabs);
  // A buffer handed out while the pool was on goes back to its slab.
  pooled = Tensor();
  held.clear();
  trimBufferPool();
  EXPECT_EQ(bufferPoolStats().smallSlabBytes, 0);
}

TEST(TensorView, SharesAndKeepsItsBaseAlive) {
  Tensor base = Tensor::empty(ElemType::F32, {3, 5});
  for (int i = 0; i < 15; ++i)
    base.mutableData<float>()[i] = static_cast<float>(i);
  Tensor row = Tensor::viewOf(base, 2 * 5 * sizeof(float), ElemType::F32, {5});
  base = Tensor();
  ASSERT_EQ(row.shape(), (std::vector<int64_t>{5}));
  EXPECT_EQ(row.nbytes(), 5 * sizeof(float));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(row.data<float>()[i], static_cast<float>(10 + i));
}

/// The pool's state in this process agrees with SLUICE_NO_BUFFER_POOL as it
/// was when the process started (run as is, and re-run below with the
/// variable set).
TEST(BufferPoolEnvironment, StateFollowsTheVariable) {
  const char *v = std::getenv("SLUICE_NO_BUFFER_POOL");
  bool off = v && *v && std::string(v) != "0";
  EXPECT_EQ(bufferPoolEnabled(), !off);
}

/// Every SLUICE_NO_* switch follows one rule (ops/Switches.h): set to
/// anything but "" or "0" turns its optimization off.
TEST(Switches, OneRuleForEverySwitch) {
  const char *name = "SLUICE_NO_SWITCH_RULE_TEST";
  ::unsetenv(name);
  EXPECT_FALSE(switchedOff(name));
  for (const char *value : {"1", "yes", "true", "on", "2"}) {
    ::setenv(name, value, 1);
    EXPECT_TRUE(switchedOff(name)) << value;
  }
  for (const char *value : {"0", ""}) {
    ::setenv(name, value, 1);
    EXPECT_FALSE(switchedOff(name)) << "'" << value << "'";
  }
  ::unsetenv(name);
}

TEST(BufferPoolEnvironment, VariableTurnsThePoolOff) {
  char self[4096];
  ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  for (const char *value : {"1", "yes", "0", ""}) {
    std::string cmd = std::string("SLUICE_NO_BUFFER_POOL=") + value + " " +
                      self +
                      " --gtest_filter=BufferPoolEnvironment."
                      "StateFollowsTheVariable > /dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc)) << cmd;
    EXPECT_EQ(WEXITSTATUS(rc), 0) << cmd;
  }
}

} // namespace
