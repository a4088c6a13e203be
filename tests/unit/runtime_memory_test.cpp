//===- runtime_memory_test.cpp - budget.memory is enforced, never an OOM --===//
//
// Buffers whose size is known before running (static record types) are
// checked when the pipeline is created; buffers of dynamically sized records
// are measured while running and stop the run with the same kind of
// message before the budget is exceeded.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/ops/Allocation.h"
#include "sluice/ops/kernels/Categorical.h"
#include "sluice/ops/kernels/Layout.h"
#include "sluice/runtime/Memory.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

using namespace sluice;
using namespace sluice::rttest;

namespace {

class MemoryTest : public ::testing::Test {
protected:
  std::string fmnist(const std::string &steps, const std::string &memory) {
    if (!haveFashionMnist())
      return "";
    return "pipeline: mem\nsource:\n  idx:\n    images: " +
           kFashionMnistImages + "\n    labels: " + kFashionMnistLabels +
           "\nsteps:\n" + steps + "budget: {memory: " + memory + "}\n";
  }
  TempDir dir_;
};

TEST_F(MemoryTest, RefusesAShuffleBufferThatCannotFit) {
  // The 10,000 records of one pass (the most the buffer can hold) take
  // about 33 MiB: more than this budget.
  std::string yaml = fmnist("  - normalize: {field: image, mean: 0, std: 1}\n"
                            "  - shuffle: 100000\n  - batch: 100\n",
                            "16MiB");
  if (yaml.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  runtime::Plan p = planFromYaml(dir_, yaml);
  auto pipe = runtime::Pipeline::create(p);
  ASSERT_FALSE(bool(pipe));
  const std::string &m = pipe.status().message();
  EXPECT_NE(m.find(p.specFile + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("the shuffle buffer of 100000 records (10000 at most: "
                   "the records of one pass) of {image: f32[28,28], label: "
                   "i64}"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("more than budget.memory 16 MiB"), std::string::npos) << m;
  std::smatch match;
  ASSERT_TRUE(
      std::regex_search(m, match,
                        std::regex("lower shuffle.buffer to <= ([0-9]+) "
                                   "or raise budget.memory")))
      << m;
  int64_t fit = std::stoll(match[1]);
  // A record is 28*28*4 bytes of image and 8 of label, each in whole
  // 64-byte lines plus its tensor's bookkeeping; the suggestion must fit
  // with the other buffers and must not be needlessly small.
  int64_t each =
      28 * 28 * 4 + 64 +
      2 * static_cast<int64_t>(kTensorOverheadBytes + sizeof(Tensor));
  EXPECT_LE(fit * each, int64_t(16) << 20);
  EXPECT_GT(fit * each, int64_t(14) << 20);

  // The suggested size is accepted.
  std::string ok = yaml;
  ok.replace(ok.find("shuffle: 100000"), 15, "shuffle: " + std::to_string(fit));
  runtime::Plan q = planFromYaml(dir_, ok, "ok.yaml");
  auto accepted = runtime::Pipeline::create(q);
  EXPECT_TRUE(bool(accepted)) << (accepted ? "" : accepted.status().message());
}

TEST_F(MemoryTest, AShuffleBufferHoldsAtMostOnePassOfRecords) {
  // 100,000 records of 3.2 KiB would need 310 MiB, but the source has
  // 10,000 (33 MiB): the buffer never holds more, so 64 MiB is enough,
  // after a filter too (it can only bring fewer). A take before the shuffle
  // bounds it further.
  for (const char *before :
       {"", "  - filter: {where: \"label >= 0\"}\n", "  - take: 20000\n"}) {
    std::string yaml = fmnist(
        std::string(before) + "  - normalize: {field: image, mean: 0, std: 1}\n"
                              "  - shuffle: 100000\n  - batch: 1000\n",
        "64MiB");
    if (yaml.empty())
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    runtime::Plan p = planFromYaml(dir_, yaml);
    if (*before) {
      // (Run once only: a second pipeline in this process would count the
      // heap the first one left free against its budget.)
      auto pipe = runtime::Pipeline::create(p);
      EXPECT_TRUE(bool(pipe))
          << before << (pipe ? "" : pipe.status().message());
      continue;
    }
    runtime::RunOptions o;
    o.progress = runtime::RunOptions::Progress::Off;
    runtime::RunStats st;
    std::vector<Output> outs = runAll(p, o, &st);
    ASSERT_EQ(outs.size(), 10u);
    EXPECT_LE(st.memoryPeak, int64_t(64) << 20);
  }
  // Past what one pass brings the check still refuses: 20,000 records
  // (two passes of `repeat: 2`, 66 MiB) do not fit.
  std::string twice = fmnist("  - repeat: 2\n"
                             "  - normalize: {field: image, mean: 0, std: 1}\n"
                             "  - shuffle: 100000\n  - batch: 1000\n",
                             "64MiB");
  auto pipe =
      runtime::Pipeline::create(planFromYaml(dir_, twice, "twice.yaml"));
  ASSERT_FALSE(bool(pipe));
  EXPECT_NE(pipe.status().message().find("(20000 at most: the records of one "
                                         "pass)"),
            std::string::npos)
      << pipe.status().message();
}

TEST_F(MemoryTest, RefusesAMemoryCacheOfAKnownSizeDataSet) {
  std::string yaml = fmnist("  - normalize: {field: image, mean: 0, std: 1}\n"
                            "  - cache: memory\n",
                            "16MiB");
  if (yaml.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto pipe = runtime::Pipeline::create(planFromYaml(dir_, yaml));
  ASSERT_FALSE(bool(pipe));
  const std::string &m = pipe.status().message();
  EXPECT_NE(m.find("the memory cache of 10000 records"), std::string::npos)
      << m;
  EXPECT_NE(m.find("cache: disk"), std::string::npos) << m;
}

TEST_F(MemoryTest, StopsAGrowingMemoryCacheBeforeTheBudget) {
  // CSV sources do not know their size: the cache is measured as it fills.
  // (The reader's buffer, 180 KiB for this file, does not fit in 64 KiB
  // either: it shrinks to what the budget gives and reads shorter blocks.)
  std::string rows;
  for (int i = 0; i < 5000; ++i)
    rows += std::to_string(i) + ",some text that takes room " +
            std::to_string(i * 7) + "\n";
  dir_.write("rows.csv", rows);
  std::string yaml = "pipeline: rows\nsource:\n  csv:\n    files: rows.csv\n"
                     "    columns:\n      - {name: id, type: i64}\n"
                     "      - {name: text, type: string}\n"
                     "steps:\n  - cache: memory\nepochs: 2\n"
                     "budget: {memory: 64KiB}\n";
  runtime::Plan p = planFromYaml(dir_, yaml);
  runtime::RunOptions o;
  o.progress = runtime::RunOptions::Progress::Off;
  std::ostringstream out, err;
  EXPECT_EQ(runtime::runPipeline(p, o, out, err), 1);
  EXPECT_NE(err.str().find("the memory cache of 'cache' holds"),
            std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("cache to disk instead (`cache: disk`)"),
            std::string::npos)
      << err.str();
  EXPECT_EQ(err.str().find("internal error"), std::string::npos) << err.str();

  // On disk the same pipeline runs, and the second epoch replays the first.
  std::string disk = yaml;
  disk.replace(disk.find("cache: memory"), 13, "cache: disk");
  std::vector<Output> outs = runAll(planFromYaml(dir_, disk, "disk.yaml"));
  ASSERT_EQ(outs.size(), 10000u);
  EXPECT_EQ(outs[4321].fields[1].str(), outs[9321].fields[1].str());
  EXPECT_EQ(outs[4321].fields[1].str(), "some text that takes room 30247");
}

TEST_F(MemoryTest, ReadersCountTheirBuffersAndZlibState) {
  // Fashion-MNIST's .gz files: the image stream holds a 1 MiB block buffer
  // and zlib's 256 KiB input and 512 KiB output buffers and inflate state;
  // the labels file (~5 KB compressed, 10 KB of data) far less.
  std::string yaml = fmnist("  - batch: 1000\n", "256MiB");
  if (yaml.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  runtime::RunStats stats;
  std::vector<Output> outs = runAll(planFromYaml(dir_, yaml), {}, &stats);
  ASSERT_EQ(outs.size(), 10u);
  int64_t reading = -1;
  for (const auto &[name, bytes] : stats.memoryPeaks)
    if (name == "idx reading")
      reading = bytes;
  EXPECT_GE(reading, (1 << 20) + 768 * 1024) << reading;
  EXPECT_LE(reading, (1 << 20) + 768 * 1024 + 256 * 1024) << reading;
}

TEST_F(MemoryTest, ABatchBuiltInANewBufferCountsThatBuffer) {
  // `batch` holds the records it collected beside the new buffer it copies
  // them into until it hands the batch on. That buffer is counted by its
  // own bytes (1000 rows of 784 + 8 bytes), not by the records' bytes again
  // (each record also counts its tensors' overhead: ~1.3 KiB), which
  // overstated the peak of examples/fashion_mnist_test.yaml by ~0.5 MiB.
  // SLUICE_COARSE_BATCH_COUNT=1 counts the records' bytes again. Same bytes
  // either way.
  std::string yaml = fmnist("  - batch: 1000\n", "256MiB");
  if (yaml.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  runtime::Plan plan = planFromYaml(dir_, yaml);
  auto batchPeak = [](const runtime::RunStats &st) {
    for (const auto &[name, bytes] : st.memoryPeaks)
      if (name == "batch")
        return bytes;
    return int64_t(-1);
  };
  runtime::RunStats fine, coarse;
  std::vector<Output> a = runAll(plan, {}, &fine);
  ::setenv("SLUICE_COARSE_BATCH_COUNT", "1", 1);
  std::vector<Output> b = runAll(plan, {}, &coarse);
  ::unsetenv("SLUICE_COARSE_BATCH_COUNT");
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t f = 0; f < 2; ++f)
      EXPECT_TRUE(a[i].fields[f].sameAs(b[i].fields[f])) << i;
  // Coarse: the records twice. Fine: the records once and the buffer.
  const int64_t records = batchPeak(coarse) / 2;
  const int64_t buffer =
      static_cast<int64_t>(Tensor::numericMemoryBytes(1000 * 784) +
                           Tensor::numericMemoryBytes(1000 * 8)); // i64
  EXPECT_GT(records, 1000 * 784);
  EXPECT_EQ(batchPeak(coarse), 2 * records);
  EXPECT_EQ(batchPeak(fine), records + buffer);
}

TEST_F(MemoryTest, PositionalReadersCountTheirBuffers) {
  // Read by position (a rank's share, or `shuffle: true` on the source),
  // the idx readers' block buffers and zlib state are counted as they are
  // when read front to back: in "idx reading", while the file is open.
  std::string yaml = fmnist("  - batch: 1000\n", "256MiB");
  if (yaml.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto readingPeak = [](const runtime::RunStats &stats,
                        const std::string &account) {
    for (const auto &[name, bytes] : stats.memoryPeaks)
      if (name == account)
        return bytes;
    return int64_t(-1);
  };
  // A rank's share: the positions of the other rank are passed over.
  runtime::RunOptions o;
  o.rank = 1;
  o.worldSize = 2;
  runtime::RunStats stats;
  std::vector<Output> outs = runAll(planFromYaml(dir_, yaml), o, &stats);
  ASSERT_EQ(outs.size(), 5u);
  int64_t reading = readingPeak(stats, "idx reading");
  EXPECT_GE(reading, (1 << 20) + 768 * 1024) << reading;
  EXPECT_LE(reading, (1 << 20) + 768 * 1024 + 256 * 1024) << reading;
  EXPECT_LE(stats.memoryPeak, int64_t(256) << 20);

  // Permuted: the table of records and, while it loads, the readers.
  std::string shuffled = yaml;
  shuffled.replace(shuffled.find("\nsteps:"), 0, "\n    shuffle: true");
  outs = runAll(planFromYaml(dir_, shuffled, "shuffled.yaml"), {}, &stats);
  ASSERT_EQ(outs.size(), 10u);
  reading = readingPeak(stats, "idx reading");
  EXPECT_GE(reading, (1 << 20) + 768 * 1024) << reading;
  EXPECT_LE(reading, (1 << 20) + 768 * 1024 + 256 * 1024) << reading;
  // 10,000 records of 28x28 u8 and a label.
  EXPECT_GE(readingPeak(stats, "idx (shuffle: true)"), 10000 * (784 + 8));
}

TEST_F(MemoryTest, WholeFileLargerThanTheBudgetIsALocatedDataError) {
  // A file source reads each file whole: a 2 MiB file under a 1 MiB budget
  // is refused before it is read, with the file and what the budget has,
  // read front to back and by position alike; `on_error: skip` drops it
  // and reads the others.
  dir_.write("a.bin", std::string(1000, 'a'));
  dir_.write("b.bin", std::string(2 << 20, 'b'));
  dir_.write("c.bin", std::string(3000, 'c'));
  for (const char *shuffle : {"", ", shuffle: true"}) {
    SCOPED_TRACE(shuffle);
    std::string yaml = std::string("pipeline: blobs\nsource:\n  files: "
                                   "{files: '*.bin'") +
                       shuffle + "}\nbudget: {memory: 1MiB, cores: 1}\n";
    runtime::RunOptions o;
    o.progress = runtime::RunOptions::Progress::Off;
    std::ostringstream out, err;
    EXPECT_EQ(runtime::runPipeline(planFromYaml(dir_, yaml), o, out, err), 1);
    EXPECT_NE(err.str().find("b.bin"), std::string::npos) << err.str();
    EXPECT_NE(err.str().find("memory: record does not fit"), std::string::npos)
        << err.str();
    EXPECT_NE(err.str().find("the 2097152-byte file needs 2 MiB, more than"),
              std::string::npos)
        << err.str();
    EXPECT_EQ(err.str().find("bad_alloc"), std::string::npos) << err.str();

    std::string skip = yaml;
    skip.replace(skip.find("'*.bin'"), 7, "'*.bin', on_error: skip");
    runtime::RunStats stats;
    std::vector<Output> outs =
        runAll(planFromYaml(dir_, skip, "skip.yaml"), {}, &stats);
    ASSERT_EQ(outs.size(), 2u);
    std::vector<size_t> sizes;
    for (const Output &r : outs)
      sizes.push_back(r.fields[1].str().size());
    std::sort(sizes.begin(), sizes.end());
    EXPECT_EQ(sizes, (std::vector<size_t>{1000, 3000}));
    EXPECT_LE(stats.memoryPeak, int64_t(1) << 20);
  }
}

TEST_F(MemoryTest, ReadBufferRefusesARecordLongerThanTheBudget) {
  // One line of 1 MiB cannot be held under 256 KiB: a data error naming
  // the file and the buffer, never std::bad_alloc.
  std::string longLine = "1," + std::string(1 << 20, 'x') + "\n";
  dir_.write("long.csv", "0,a\n" + longLine);
  std::string yaml2 = "pipeline: rows\nsource:\n  csv:\n    files: long.csv\n"
                      "    columns:\n      - {name: id, type: i64}\n"
                      "      - {name: text, type: string}\n"
                      "steps:\n  - batch: 1\n"
                      "budget: {memory: 256KiB, cores: 1}\n";
  runtime::RunOptions o;
  o.progress = runtime::RunOptions::Progress::Off;
  std::ostringstream out, err;
  EXPECT_EQ(
      runtime::runPipeline(planFromYaml(dir_, yaml2, "long.yaml"), o, out, err),
      1);
  EXPECT_NE(err.str().find("long.csv"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("the read buffer of"), std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("left of budget.memory 256 KiB"), std::string::npos)
      << err.str();
  EXPECT_EQ(err.str().find("bad_alloc"), std::string::npos) << err.str();
}

TEST_F(MemoryTest, StopsAShuffleOfDynamicRecordsBeforeTheBudget) {
  // Text lines of growing length: the record type is dynamic, so the
  // shuffle buffer is measured while running.
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += std::string(static_cast<size_t>(200 + i), 'a' + i % 26) + "\n";
  dir_.write("lines.txt", text);
  std::string yaml = "pipeline: lines\nsource:\n  text_lines: {files: "
                     "lines.txt}\nsteps:\n  - shuffle: 300\n"
                     "budget: {memory: 32KiB}\n";
  runtime::Plan p = planFromYaml(dir_, yaml);
  auto pipe = runtime::Pipeline::create(p);
  ASSERT_TRUE(bool(pipe)) << pipe.status().message();
  runtime::Batch b;
  Expected<bool> more = (*pipe)->next(b);
  ASSERT_FALSE(bool(more));
  const std::string &m = more.status().message();
  EXPECT_NE(m.find("the shuffle buffer of 300 records does not fit in "
                   "budget.memory 32 KiB"),
            std::string::npos)
      << m;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      m, match, std::regex("lower shuffle.buffer to <= ([0-9]+)")))
      << m;
  EXPECT_GT(std::stoll(match[1]), 0);
  EXPECT_LT(std::stoll(match[1]), 300);
  (*pipe)->stop();
  runtime::RunStats s = (*pipe)->stats();
  EXPECT_TRUE(s.checkBalanced().isOk()) << s.checkBalanced().message();
  EXPECT_LE(s.memoryPeak, 32 * 1024);
}

} // namespace

//===----------------------------------------------------------------------===//
// Allocation scopes: what steps allocate is inside the budget
//===----------------------------------------------------------------------===//

TEST(AllocationScopeTest, TensorsReserveInTheScopeAndReleaseWithIt) {
  runtime::MemoryBudget budget(int64_t(8) << 20);
  runtime::AccountAllocationLimit limit(budget.account("scratch"));
  {
    AllocationScope scope(&limit);
    Tensor a = Tensor::empty(ElemType::U8, {1000, 1000, 3});
    EXPECT_EQ(scope.charged(), int64_t(Tensor::numericMemoryBytes(3000000)));
    EXPECT_EQ(budget.used(), scope.charged());
    // 3 MB more fits; another 3 MB does not (8 MiB total).
    Tensor b = Tensor::zeros(ElemType::U8, {1000, 1000, 3});
    EXPECT_THROW(Tensor::empty(ElemType::F32, {1000, 1000}), AllocationRefused);
    try {
      (void)Tensor::empty(ElemType::F32, {1000, 1000});
    } catch (const AllocationRefused &e) {
      std::string m = e.what();
      EXPECT_NE(m.find("a tensor f32[1000,1000] needs 3.81 MiB, more than the"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("left of budget.memory 8 MiB"), std::string::npos) << m;
    }
  }
  EXPECT_EQ(budget.used(), 0);
  EXPECT_GE(budget.peak(), int64_t(6000000));
  // Outside any scope nothing is charged.
  Tensor c = Tensor::empty(ElemType::U8, {4000, 4000});
  EXPECT_EQ(budget.used(), 0);
}

TEST(AllocationScopeTest, OverflowingShapesAreRefusedNotWrapped) {
  EXPECT_EQ(checkedBytes({int64_t(1) << 40, int64_t(1) << 30}), std::nullopt);
  EXPECT_EQ(checkedBytes({2000, 3000, 3}, 4), int64_t(72000000));
  EXPECT_EQ(checkedBytes({-1, 3}), std::nullopt);
  // No scope: an overflowing shape still throws instead of wrapping.
  EXPECT_THROW(Tensor::empty(ElemType::U8, {2000000032, 2000000048, 3}),
               AllocationRefused);
}

TEST(AllocationScopeTest, CheckAndScratchNameTheSizeAndTheBudget) {
  runtime::MemoryBudget budget(int64_t(1) << 20);
  runtime::AccountAllocationLimit limit(budget.account("scratch"));
  EXPECT_TRUE(checkAllocation(int64_t(1) << 30, "x").isOk()) << "no scope";
  AllocationScope scope(&limit);
  Status s = checkAllocation(int64_t(3) << 20, "the decoded 1024x1024x3 image");
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("the decoded 1024x1024x3 image needs 3 MiB, "
                              "more than the 1 MiB left of budget.memory 1 MiB "
                              "(one record of this size cannot fit",
                              0),
            0u)
      << s.message();
  EXPECT_TRUE(reserveScratch(int64_t(512) << 10, "rows").isOk());
  EXPECT_EQ(budget.used(), int64_t(512) << 10);
  Status again = reserveScratch(int64_t(600) << 10, "rows");
  EXPECT_FALSE(again.isOk());
  EXPECT_NE(again.message().find("lower parallelism"), std::string::npos)
      << again.message();
}

TEST(AllocationScopeTest, TokenizeReservesItsOutputBeforeBuildingIt) {
  std::string words;
  for (int i = 0; i < 200000; ++i)
    words += i % 3 ? "a " : "b ";
  Tensor text = Tensor::string(ElemType::String, words);
  std::shared_ptr<const kernels::Vocab> vocab =
      kernels::Vocab::fromTokens({"a", "b"});
  {
    // 200,000 i64 ids (1.5 MiB) under a 1 MiB budget: refused when the
    // output is reserved, before any id is stored.
    runtime::MemoryBudget budget(int64_t(1) << 20);
    runtime::AccountAllocationLimit limit(budget.account("scratch"));
    AllocationScope scope(&limit);
    EXPECT_THROW((void)kernels::tokenize(text, *vocab), AllocationRefused);
    EXPECT_EQ(scope.charged(), 0);
  }
  runtime::MemoryBudget budget(int64_t(8) << 20);
  runtime::AccountAllocationLimit limit(budget.account("scratch"));
  AllocationScope scope(&limit);
  Expected<Tensor> ids = kernels::tokenize(text, *vocab);
  ASSERT_TRUE(bool(ids)) << ids.status().message();
  ASSERT_EQ(ids->shape(), (std::vector<int64_t>{200000}));
  EXPECT_EQ(ids->data<int64_t>()[0], 1);
  EXPECT_EQ(ids->data<int64_t>()[1], 0);
  EXPECT_EQ(ids->data<int64_t>()[199999], 0);
  // What was charged is the output, nothing more.
  EXPECT_EQ(scope.charged(),
            int64_t(Tensor::numericMemoryBytes(200000 * sizeof(int64_t))));
}

TEST(AllocationScopeTest, StringKernelsReserveBeforeBuilding) {
  Tensor words = Tensor::strings(
      ElemType::String, {2},
      {"short", std::string(1000, 'x')}); // one inline, one on the heap
  // A padded shape whose string objects cannot be counted: refused, not a
  // std::length_error or a wrapped size, with or without a scope.
  EXPECT_THROW((void)kernels::paddedStack({words}, {int64_t(1) << 60}, 0),
               AllocationRefused);
  runtime::MemoryBudget budget(int64_t(1) << 20);
  runtime::AccountAllocationLimit limit(budget.account("scratch"));
  AllocationScope scope(&limit);
  // 100,000 empty strings (3 MiB of string objects) do not fit in 1 MiB.
  EXPECT_THROW((void)kernels::paddedStack({words}, {100000}, 0),
               AllocationRefused);
  EXPECT_EQ(scope.charged(), 0);
  // Batching copies the strings: reserved first, heap bytes included.
  std::vector<Tensor> items(2000, words); // 2 MB of copies

  EXPECT_THROW((void)kernels::stack(items), AllocationRefused);
  items.resize(100);
  Expected<Tensor> b = kernels::stack(items);
  ASSERT_TRUE(bool(b)) << b.status().message();
  EXPECT_EQ(b->stringValues()[199], std::string(1000, 'x'));
  EXPECT_EQ(scope.charged(),
            int64_t(kTensorOverheadBytes + sizeof(std::vector<std::string>) +
                    200 * sizeof(std::string) + 100 * 1001));
}

//===----------------------------------------------------------------------===//
// Budget credit: small reservations from a thread's chunk, the limit hard
//===----------------------------------------------------------------------===//

TEST(BudgetCreditTest, SmallTensorsComeFromTheThreadsChunk) {
  unsetenv("SLUICE_NO_BUDGET_CREDIT");
  runtime::MemoryBudget budget(int64_t(16) << 20);
  runtime::MemoryAccount *account = budget.account("map scratch");
  auto limit = std::make_unique<runtime::AccountAllocationLimit>(
      account, /*credit=*/true);
  const int64_t chunk = limit->creditChunk();
  ASSERT_EQ(chunk, int64_t(16) << 10); // 1/1024 of the limit
  int64_t charged = 0;
  {
    AllocationScope scope(limit.get());
    std::vector<Tensor> held;
    for (int i = 0; i < 100; ++i)
      held.push_back(Tensor::empty(ElemType::U8, {28, 28}));
    charged = scope.charged();
    EXPECT_EQ(charged, 100 * int64_t(Tensor::numericMemoryBytes(784)));
    // Reserved: what the tensors take plus this thread's unused credit
    // (less than a chunk: it took one chunk at a time).
    EXPECT_GE(budget.used(), charged);
    EXPECT_LT(budget.used(), charged + chunk);
    EXPECT_EQ(budget.used() - charged, limit->outstandingCredit());
  }
  // Released into the thread's credit: at most two chunks stay reserved.
  EXPECT_GT(budget.used(), 0);
  EXPECT_LE(budget.used(), 2 * chunk);
  EXPECT_EQ(budget.used(), limit->outstandingCredit());
  EXPECT_GE(budget.peak(), charged);
  // The limit gives its credit back as it goes.
  limit.reset();
  EXPECT_EQ(budget.used(), 0);
  EXPECT_EQ(account->used(), 0);
}

TEST(BudgetCreditTest, TheBudgetStaysHardWithCreditHeldByOtherThreads) {
  unsetenv("SLUICE_NO_BUDGET_CREDIT");
  const int64_t limitBytes = int64_t(4) << 20;
  runtime::MemoryBudget budget(limitBytes);
  runtime::AccountAllocationLimit limit(budget.account("map scratch"),
                                        /*credit=*/true);
  const int64_t chunk = limit.creditChunk();
  ASSERT_EQ(chunk, int64_t(4) << 10);
  // Four threads each leave up to two chunks of credit behind.
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      AllocationScope scope(&limit);
      std::vector<Tensor> held;
      for (int i = 0; i < 20; ++i)
        held.push_back(Tensor::empty(ElemType::F32, {28, 28}));
    });
  for (std::thread &w : workers)
    w.join();
  const int64_t credit = limit.outstandingCredit();
  EXPECT_GT(credit, 0);
  EXPECT_EQ(budget.used(), credit);
  // A request that fits only once that credit is taken back succeeds ...
  {
    AllocationScope scope(&limit);
    EXPECT_TRUE(reserveScratch(limitBytes - 100, "rows").isOk());
    EXPECT_EQ(limit.outstandingCredit(), 0);
    EXPECT_EQ(budget.used(), limitBytes - 100);
    // ... and one byte past the limit is refused, credit or not, small
    // (served from credit when there is some) or large, with the located
    // message the budget gives without credit.
    Status small = reserveScratch(101, "a small tensor");
    ASSERT_FALSE(small.isOk());
    EXPECT_NE(small.message().find("a small tensor needs 101 B, more than "
                                   "the 100 B left of budget.memory 4 MiB"),
              std::string::npos)
        << small.message();
    EXPECT_THROW(Tensor::empty(ElemType::U8, {200}), AllocationRefused);
    EXPECT_TRUE(reserveScratch(100, "the last bytes").isOk());
    EXPECT_EQ(budget.used(), limitBytes);
  }
  EXPECT_LE(budget.peak(), limitBytes);
  EXPECT_LE(budget.used(), 2 * chunk);
}

TEST(BudgetCreditTest, TurnsOffByItsVariableAndForTinyBudgets) {
  setenv("SLUICE_NO_BUDGET_CREDIT", "1", 1);
  runtime::MemoryBudget budget(int64_t(64) << 20);
  runtime::AccountAllocationLimit off(budget.account("a"), /*credit=*/true);
  unsetenv("SLUICE_NO_BUDGET_CREDIT");
  EXPECT_EQ(off.creditChunk(), 0);
  {
    AllocationScope scope(&off);
    Tensor t = Tensor::empty(ElemType::U8, {28, 28});
    // Without credit the budget holds exactly what is charged.
    EXPECT_EQ(budget.used(), scope.charged());
  }
  EXPECT_EQ(budget.used(), 0);
  // Not asked for, or a budget under 1 MiB: no credit either.
  runtime::AccountAllocationLimit plain(budget.account("b"));
  EXPECT_EQ(plain.creditChunk(), 0);
  runtime::MemoryBudget tiny(int64_t(512) << 10);
  runtime::AccountAllocationLimit small(tiny.account("c"), /*credit=*/true);
  EXPECT_EQ(small.creditChunk(), 0);
}

TEST(AllocationScopeTest, DefaultBudgetIsAShareOfTheHostNotUnlimited) {
  EXPECT_GT(hostMemoryBytes(), int64_t(0));
  unsetenv("SLUICE_DEFAULT_MEMORY");
  int64_t d = defaultMemoryBudget();
  EXPECT_GT(d, 0);
  EXPECT_LE(d, hostMemoryBytes());
  EXPECT_GE(d,
            static_cast<int64_t>(hostMemoryBytes() * kDefaultMemoryFraction) -
                (int64_t(1) << 20));
  setenv("SLUICE_DEFAULT_MEMORY", "300MiB", 1);
  EXPECT_EQ(defaultMemoryBudget(), int64_t(300) << 20);
  unsetenv("SLUICE_DEFAULT_MEMORY");
}

TEST(AllocationScopeTest, HostCoresFollowAffinityAndCgroupQuota) {
  // The affinity mask wins over the machine's online CPUs (taskset, a
  // Slurm or Kubernetes cpuset).
  EXPECT_EQ(coresAllowed(8, 128, "", "", ""), 8);
  EXPECT_EQ(coresAllowed(0, 16, "", "", ""), 16);
  // cgroup v2 cpu.max: "max PERIOD" is no quota; 2.5 cores round up to 3.
  EXPECT_EQ(coresAllowed(8, 128, "max 100000", "", ""), 8);
  EXPECT_EQ(coresAllowed(8, 128, "250000 100000", "", ""), 3);
  EXPECT_EQ(coresAllowed(8, 128, "400000 100000", "", ""), 4);
  EXPECT_EQ(coresAllowed(2, 128, "400000 100000", "", ""), 2);
  EXPECT_EQ(coresAllowed(8, 128, "50000 100000", "", ""), 1);
  // v1: quota -1 is none.
  EXPECT_EQ(coresAllowed(8, 128, "", "-1", "100000"), 8);
  EXPECT_EQ(coresAllowed(8, 128, "", "300000", "100000"), 3);
  // Unreadable or malformed files leave the mask.
  EXPECT_EQ(coresAllowed(8, 128, "garbage", "", ""), 8);
  EXPECT_EQ(coresAllowed(8, 128, "", "x", "y"), 8);
  // This process: at least 1, at most the CPUs of its mask.
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_GE(hostCores(), 1);
  EXPECT_LE(hostCores(), CPU_COUNT(&set));
}

TEST(AllocationScopeTest, RecordTypesLargerThanTheBudgetAreNamed) {
  RecordType t;
  t.set("image", FieldType(ElemType::U8, {30000, 30000, 3}));
  t.set("label", FieldType(ElemType::I64, {}));
  EXPECT_EQ(recordTypeTooLarge(t, int64_t(256) << 20),
            "one record of {image: u8[30000,30000,3], label: i64} takes 2.51 "
            "GiB, more than budget.memory 256 MiB");
  EXPECT_EQ(recordTypeTooLarge(t, int64_t(4) << 30), "");
  RecordType dyn;
  dyn.set("image", FieldType(ElemType::U8, {-1, -1, 3}));
  EXPECT_EQ(recordTypeTooLarge(dyn, 1), "");
}

namespace {

#ifdef __GLIBC__
/// malloc'd and written: the compiler may not drop the allocation.
void *heapBlock(size_t bytes, int fill) {
  void *p = std::malloc(bytes);
  std::memset(p, fill, bytes);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

/// Leaves `n` blocks of 100 KiB free in the heap (under glibc's mmap
/// threshold: from the heap) with a block after them (as large: a small one
/// may land in a hole before them), so that they are a free chunk in the
/// heap rather than a top that free() trims; returns that last block.
void *leaveFreeHeap(int n) {
  std::vector<void *> blocks;
  for (int i = 0; i < n; ++i)
    blocks.push_back(heapBlock(100 << 10, 1));
  void *pin = heapBlock(100 << 10, 0);
  for (void *b : blocks)
    std::free(b);
  return pin;
}

/// Runs `checks` in a fresh process (what earlier tests left in the heap
/// would change what its blocks reuse): passes when it returns "", else
/// fails with what it returned.
void expectChecksInAFreshProcess(const std::function<std::string()> &checks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string failed = checks();
        std::fprintf(stderr, "%s\n", failed.c_str());
        std::fflush(stderr);
        std::_Exit(failed.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

/// The checks of FreeHeapIsCountedUntilReusedAndGivesWayToRequests, run in
/// a fresh process (what earlier tests left in the heap would change what
/// the blocks below reuse): "" or what failed.
std::string heapCarryChecks() {
#define CARRY_CHECK(cond)                                                      \
  if (!(cond))                                                                 \
    return std::string("failed: " #cond " (free above the reference ") +       \
           std::to_string(runtime::freeHeapAboveBaseline()) + ")";
  runtime::noteProcessBaseline();
  void *pin = leaveFreeHeap(240); // 24 MiB
  std::vector<void *> blocks;
  const int64_t freed = runtime::freeHeapAboveBaseline();
  CARRY_CHECK(freed >= int64_t(22) << 20);

  runtime::MemoryBudget budget(int64_t(64) << 20);
  runtime::MemoryAccount *heap = budget.account("heap left free");
  runtime::MemoryAccount *work = budget.account("work");
  const int64_t carried = budget.carryFreeHeap(heap);
  CARRY_CHECK(carried >= int64_t(22) << 20);
  CARRY_CHECK(heap->used() == carried);
  // 8 MiB of it used again, and as much and a refresh step reserved: the
  // carried bytes shrink by about what was reused.
  for (int i = 0; i < 80; ++i)
    blocks.push_back(heapBlock(100 << 10, 2));
  CARRY_CHECK(work->tryReserve(80 * (100 << 10)));
  CARRY_CHECK(work->tryReserve(runtime::MemoryBudget::kCarryRefreshBytes));
  CARRY_CHECK(budget.carriedHeap() <= carried - (int64_t(7) << 20));
  CARRY_CHECK(budget.carriedHeap() >= carried - (int64_t(9) << 20));
  CARRY_CHECK(heap->used() == budget.carriedHeap());
  // A request only the carried bytes stand in the way of: the heap is
  // trimmed, nothing is carried, and the request is granted.
  const int64_t room = budget.limit() - budget.used();
  CARRY_CHECK(work->tryReserve(room + budget.carriedHeap() / 2));
  CARRY_CHECK(budget.carriedHeap() == 0);
  CARRY_CHECK(heap->used() == 0);
  CARRY_CHECK(budget.used() <= budget.limit());
  // The trimmed chunks are free but not resident: not carried again.
  work->release(work->used());
  runtime::MemoryBudget next(int64_t(64) << 20);
  CARRY_CHECK(next.carryFreeHeap(next.account("heap left free")) == 0);
  // Freed again (resident, about 8 MiB): not carried by a budget it would
  // fill more than half of (it may be another live pipeline's heap, which
  // would leave this one too little), but returned to the system.
  for (void *b : blocks)
    std::free(b);
  CARRY_CHECK(runtime::freeHeapAboveBaseline() >= int64_t(6) << 20);
  runtime::MemoryBudget half(int64_t(12) << 20);
  CARRY_CHECK(half.carryFreeHeap(half.account("heap left free")) == 0);
  CARRY_CHECK(half.used() == 0);
  CARRY_CHECK(runtime::freeHeapAboveBaseline() < int64_t(6) << 20);
  // Nor by one that cannot hold it at all.
  runtime::MemoryBudget tiny(int64_t(2) << 20);
  CARRY_CHECK(tiny.carryFreeHeap(tiny.account("heap left free")) == 0);
  std::free(pin);
  return "";
#undef CARRY_CHECK
}

TEST(HeapCarryTest, FreeHeapIsCountedUntilReusedAndGivesWayToRequests) {
  // What earlier pipelines freed into the heap (schedule: auto's probes'
  // shuffle buffers) is resident: a budget carries it in an account and
  // lets go of it as the heap's free bytes are used again, and a request
  // the budget cannot otherwise give trims the heap instead of failing.
  if (!runtime::heapCarryEnabled())
    GTEST_SKIP() << "SLUICE_NO_HEAP_CARRY is set";
  expectChecksInAFreshProcess(heapCarryChecks);
}

/// A free heap of `mib` MiB carried while the budget reserves past the
/// grace (twice the carried bytes, 16 MiB at least) memory that is not the
/// heap's (a pool's buffers, a worker's slots), in a fresh process: "" or
/// what failed. `kept`: whether the free heap should still be carried (and
/// resident) after it, or returned to the system.
std::string carryGraceChecks(int mib, bool kept) {
#define CARRY_CHECK(cond)                                                      \
  if (!(cond))                                                                 \
    return std::string("failed: " #cond " (mib ") + std::to_string(mib) +      \
           ", free above the reference " +                                     \
           std::to_string(runtime::freeHeapAboveBaseline()) + ")";
  runtime::noteProcessBaseline();
  void *pin = leaveFreeHeap(mib * 10);
  std::vector<void *> blocks;
  const int64_t freed = runtime::freeHeapAboveBaseline();
  CARRY_CHECK(freed >= int64_t(mib - 2) << 20);
  runtime::MemoryBudget budget(int64_t(1) << 30);
  runtime::MemoryAccount *heap = budget.account("heap left free");
  runtime::MemoryAccount *work = budget.account("work");
  const int64_t carried = budget.carryFreeHeap(heap);
  CARRY_CHECK(carried >= int64_t(mib - 2) << 20);
  const int64_t grace = std::max<int64_t>(int64_t(16) << 20, 2 * carried);
  for (int64_t r = 0; r <= grace + (int64_t(4) << 20);
       r += runtime::MemoryBudget::kCarryRefreshBytes)
    CARRY_CHECK(work->tryReserve(runtime::MemoryBudget::kCarryRefreshBytes));
  if (kept) {
    CARRY_CHECK(budget.carriedHeap() >= carried - (int64_t(1) << 20));
    CARRY_CHECK(heap->used() == budget.carriedHeap());
    CARRY_CHECK(runtime::freeHeapAboveBaseline() >= freed - (int64_t(1) << 20));
    // Reused from then on, it still shrinks: looked at once per
    // kCarryKeepBytes reserved.
    const int64_t before = budget.carriedHeap();
    for (int i = 0; i < 40; ++i)
      blocks.push_back(heapBlock(100 << 10, 2));
    for (int64_t r = 0; r <= runtime::MemoryBudget::kCarryKeepBytes;
         r += runtime::MemoryBudget::kCarryRefreshBytes)
      CARRY_CHECK(work->tryReserve(runtime::MemoryBudget::kCarryRefreshBytes));
    CARRY_CHECK(budget.carriedHeap() <= before - (int64_t(3) << 20));
    CARRY_CHECK(heap->used() == budget.carriedHeap());
    for (void *b : blocks)
      std::free(b);
  } else {
    CARRY_CHECK(budget.carriedHeap() == 0);
    CARRY_CHECK(heap->used() == 0);
    // Trimmed: the reference is the heap's free bytes after the trim.
    CARRY_CHECK(runtime::freeHeapAboveBaseline() < int64_t(1) << 20);
  }
  std::free(pin);
  return "";
#undef CARRY_CHECK
}

void expectCarryGrace(int mib, bool kept) {
  expectChecksInAFreshProcess([&] { return carryGraceChecks(mib, kept); });
}

TEST(HeapCarryTest, SmallFreeHeapIsKeptPastTheGraceALargeOneReturned) {
  // A pipeline's own per-record buffers (a decode's window, a resize) leave
  // a free heap of a few MiB that the next pipeline of the process refills
  // again and again: kept, counted, past the grace. What is larger than
  // kCarryKeepBytes and not reused by then is returned to the system, and
  // with SLUICE_NO_SMALL_HEAP_KEEP=1 a small one is returned too.
  if (!runtime::heapCarryEnabled())
    GTEST_SKIP() << "SLUICE_NO_HEAP_CARRY is set";
  static_assert(runtime::MemoryBudget::kCarryKeepBytes == int64_t(16) << 20);
  expectCarryGrace(8, /*kept=*/true);
  expectCarryGrace(40, /*kept=*/false);
  ::setenv("SLUICE_NO_SMALL_HEAP_KEEP", "1", 1);
  expectCarryGrace(8, /*kept=*/false);
  ::unsetenv("SLUICE_NO_SMALL_HEAP_KEEP");
}

/// A carried free heap and bytes already allocated (forceReserve: an output
/// handed to Python, a record a step made) that fit the budget only without
/// it, in a fresh process: "" or what failed.
std::string carryGivesWayToForcedChecks() {
#define CARRY_CHECK(cond)                                                      \
  if (!(cond))                                                                 \
    return std::string("failed: " #cond " (free above the reference ") +       \
           std::to_string(runtime::freeHeapAboveBaseline()) + ")";
  runtime::noteProcessBaseline();
  void *pin = leaveFreeHeap(240); // 24 MiB
  runtime::MemoryBudget budget(int64_t(64) << 20);
  runtime::MemoryAccount *heap = budget.account("heap left free");
  runtime::MemoryAccount *work = budget.account("work");
  runtime::MemoryAccount *held = budget.account("outputs held by the caller");
  const int64_t carried = budget.carryFreeHeap(heap);
  CARRY_CHECK(carried >= int64_t(22) << 20);
  // Reserved up to the limit: the last request trims the carried heap.
  CARRY_CHECK(work->tryReserve(budget.limit() - carried - (int64_t(1) << 20)));
  CARRY_CHECK(budget.carriedHeap() == carried);
  // Bytes already allocated that the budget holds only without the carried
  // heap: it is let go of, and the budget is not overrun.
  held->forceReserve(int64_t(8) << 20);
  CARRY_CHECK(budget.carriedHeap() == 0);
  CARRY_CHECK(heap->used() == 0);
  CARRY_CHECK(!budget.overrun());
  CARRY_CHECK(budget.used() <= budget.limit());
  // Past the limit even without it: an overrun, which names the account and
  // what held the memory then.
  held->forceReserve(budget.limit());
  CARRY_CHECK(budget.overrun());
  runtime::MemoryBudget::Overrun o = budget.firstOverrun();
  CARRY_CHECK(o.account == "outputs held by the caller");
  CARRY_CHECK(o.held.find("work") != std::string::npos);
  CARRY_CHECK(o.held.find("outputs held by the caller") != std::string::npos);
  std::free(pin);
  return "";
#undef CARRY_CHECK
}

TEST(HeapCarryTest, CarriedHeapGivesWayToBytesAlreadyAllocated) {
  // A pipeline made after others in one Python process carries their free
  // heap; an output handed to the caller that the budget holds only without
  // it used to overrun budget.memory ("outputs held by the caller took the
  // memory the pipeline holds to 256 MiB") instead of trimming it.
  if (!runtime::heapCarryEnabled())
    GTEST_SKIP() << "SLUICE_NO_HEAP_CARRY is set";
  expectChecksInAFreshProcess(carryGivesWayToForcedChecks);
}

TEST(HeapCarryTest, TurnsOffByItsVariable) {
  ::setenv("SLUICE_NO_HEAP_CARRY", "1", 1);
  EXPECT_FALSE(runtime::heapCarryEnabled());
  runtime::MemoryBudget budget(int64_t(64) << 20);
  EXPECT_EQ(budget.carryFreeHeap(budget.account("heap left free")), 0);
  ::unsetenv("SLUICE_NO_HEAP_CARRY");
  EXPECT_TRUE(runtime::heapCarryEnabled());
}
#endif

TEST(LastOutputTest, NextEmptiesTheCallersBatchFirst) {
  // Pipeline::next drops the caller's last batch before it makes the next
  // (the budget stopped counting it): also when there is no next, so a
  // loop that passes the same Batch never holds one uncounted. Under
  // SLUICE_KEEP_LAST_OUTPUT=1 (the old behaviour) the last one stays.
  TempDir dir;
  std::string rows;
  for (int i = 0; i < 100; ++i)
    rows += std::to_string(i) + "\n";
  dir.write("rows.csv", rows);
  std::string yaml = "pipeline: rows\nsource:\n  csv:\n    files: rows.csv\n"
                     "    columns:\n      - {name: id, type: i64}\n"
                     "steps:\n  - batch: 10\n";
  runtime::Plan p = planFromYaml(dir, yaml);
  auto pipe = runtime::Pipeline::create(p);
  ASSERT_TRUE(bool(pipe)) << pipe.status().message();
  runtime::Batch b;
  int64_t batches = 0;
  for (;;) {
    Expected<bool> more = (*pipe)->next(b);
    ASSERT_TRUE(bool(more)) << more.status().message();
    if (!*more)
      break;
    ASSERT_EQ(b.fields().size(), 1u);
    EXPECT_EQ(b.fields()[0].dim(0), 10);
    // A copy the caller keeps is the caller's: next() leaves it alone.
    Tensor kept = b.fields()[0];
    const int64_t first = kept.data<int64_t>()[0];
    ++batches;
    Expected<bool> again = (*pipe)->next(b);
    ASSERT_TRUE(bool(again));
    EXPECT_EQ(kept.data<int64_t>()[0], first);
    if (!*again)
      break;
    ++batches;
  }
  EXPECT_EQ(batches, 10);
  EXPECT_TRUE(b.fields().empty());
}

} // namespace
