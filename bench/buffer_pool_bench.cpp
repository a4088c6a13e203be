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
//===----------------------------------------------------------------------===//
#include "sluice/ops/BufferPool.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/Memory.h"

#include <benchmark/benchmark.h>

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

BENCHMARK(BM_SmallTensorsPool)->Threads(1)->Threads(2)->UseRealTime();
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
