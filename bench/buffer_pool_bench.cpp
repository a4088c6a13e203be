//===- buffer_pool_bench.cpp - The small-buffer pool under threads --------===//
//
// The small-buffer pool (sluice/ops/BufferPool.h) serves every tensor of up
// to 64 KiB and its control block behind one mutex. This measures what an
// allocation and a free cost with 1 and 2 threads doing nothing else (the
// worst case for the lock: a real pipeline does a step's work between two
// allocations), against the pool off (glibc malloc with the one arena sluice
// sets, or its default arenas when run without SLUICE_MALLOC_ARENAS).
//
//   buffer_pool_bench [--benchmark_repetitions=5]
//
// Items are tensors allocated and freed; the per-thread rate at 2 threads
// against 1 thread is the contention.
//
// BM_PipelineHandoff is a pipeline's pattern: inside a running budget (the
// pool's idle buffers reserved in it, each tensor charged to a stage's
// scratch account as a step's allocation is), one thread makes records and
// another frees them, so buffers change threads on every record. Compare
// the per-thread caches and the budget credit with their switches:
//
//   buffer_pool_bench --benchmark_filter=Handoff
//   SLUICE_NO_SMALL_POOL_CACHE=1 SLUICE_NO_BUDGET_CREDIT=1 buffer_pool_bench
//   ...
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Allocation.h"
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/Memory.h"

#include <benchmark/benchmark.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

using namespace sluice;

namespace {

/// Allocates a record's worth of small tensors (a 28x28 image and a label,
/// as in Fashion-MNIST) `kBurst` times, then frees them in order: the
/// pattern of a source filling a window that a consumer drains.
void smallTensors(benchmark::State &state, bool pool) {
  if (state.thread_index() == 0)
    setSmallBufferPoolEnabled(pool);
  constexpr int kBurst = 64;
  std::vector<Tensor> held;
  held.reserve(2 * kBurst);
  for (auto _ : state) {
    for (int i = 0; i < kBurst; ++i) {
      held.push_back(Tensor::empty(ElemType::U8, {28, 28}));
      held.push_back(Tensor::empty(ElemType::I64, {}));
    }
    benchmark::DoNotOptimize(held.data());
    held.clear();
  }
  state.SetItemsProcessed(state.iterations() * 2 * kBurst);
  if (state.thread_index() == 0)
    setSmallBufferPoolEnabled(true);
}

void BM_SmallTensorsPool(benchmark::State &state) { smallTensors(state, true); }
void BM_SmallTensorsMalloc(benchmark::State &state) {
  smallTensors(state, false);
}

/// One thread makes Fashion-MNIST-like records (u8[28,28] and an i64 label
/// read, f32[28,28] and f32[10] made by the steps) in a budget's scope, in
/// batches of 64 records handed to a consumer thread that frees them.
void BM_PipelineHandoff(benchmark::State &state) {
  runtime::MemoryBudget budget(int64_t(512) << 20);
  runtime::AccountAllocationLimit poolLimit(budget.account("buffer pool"));
  runtime::AccountAllocationLimit scratch(budget.account("map scratch"),
                                          /*credit=*/true);
  setBufferPoolLimit(&poolLimit);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<Tensor>> queue;
  bool done = false;
  std::thread consumer([&] {
    for (;;) {
      std::vector<Tensor> batch;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return done || !queue.empty(); });
        if (queue.empty())
          return;
        batch = std::move(queue.front());
        queue.pop_front();
      }
      cv.notify_all();
      batch.clear();
    }
  });
  constexpr int kRecords = 64;
  for (auto _ : state) {
    std::vector<Tensor> batch;
    batch.reserve(4 * kRecords);
    for (int i = 0; i < kRecords; ++i) {
      AllocationScope scope(&scratch);
      batch.push_back(Tensor::empty(ElemType::U8, {28, 28}));
      batch.push_back(Tensor::empty(ElemType::I64, {}));
      batch.push_back(Tensor::empty(ElemType::F32, {28, 28}));
      batch.push_back(Tensor::empty(ElemType::F32, {10}));
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return queue.size() < 4; });
    queue.push_back(std::move(batch));
    lock.unlock();
    cv.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  consumer.join();
  setBufferPoolLimit(nullptr);
  state.SetItemsProcessed(state.iterations() * 4 * kRecords);
}

BENCHMARK(BM_SmallTensorsPool)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_PipelineHandoff)->UseRealTime();
BENCHMARK(BM_SmallTensorsMalloc)->Threads(1)->Threads(2)->UseRealTime();

} // namespace

int main(int argc, char **argv) {
  sluice::runtime::configureProcessAllocator();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
