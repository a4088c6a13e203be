//===- runtime_memory_test.cpp - budget.memory is enforced, never an OOM --===//
//
// Buffers whose size is known before running (static record types) are
// checked when the pipeline is created; buffers of dynamically sized records
// are measured while running and stop the run with the same kind of
// message before the budget is exceeded.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <regex>
#include <sstream>

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
  std::string yaml = fmnist("  - normalize: {field: image, mean: 0, std: 1}\n"
                            "  - shuffle: 100000\n  - batch: 100\n",
                            "64MiB");
  if (yaml.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  runtime::Plan p = planFromYaml(dir_, yaml);
  auto pipe = runtime::Pipeline::create(p);
  ASSERT_FALSE(bool(pipe));
  const std::string &m = pipe.status().message();
  EXPECT_NE(m.find(p.specFile + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("the shuffle buffer of 100000 records of {image: "
                   "f32[28,28], label: i64}"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("more than budget.memory 64 MiB"), std::string::npos) << m;
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
  EXPECT_LE(fit * each, int64_t(64) << 20);
  EXPECT_GT(fit * each, int64_t(60) << 20);

  // The suggested size is accepted.
  std::string ok = yaml;
  ok.replace(ok.find("shuffle: 100000"), 15, "shuffle: " + std::to_string(fit));
  runtime::Plan q = planFromYaml(dir_, ok, "ok.yaml");
  auto accepted = runtime::Pipeline::create(q);
  EXPECT_TRUE(bool(accepted)) << (accepted ? "" : accepted.status().message());
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
