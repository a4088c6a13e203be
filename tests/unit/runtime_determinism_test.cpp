//===- runtime_determinism_test.cpp - Same seed, same bytes, any threads --===//
//
// Fashion-MNIST (Debian's dataset-fashion-mnist, test split) through random
// crops, normalization, a shuffle buffer and batching: the bytes that come
// out must not depend on the number of worker threads, must change with the
// epoch and with the seed, and a cache must freeze what it recorded.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <atomic>
#include <set>

using namespace sluice;
using namespace sluice::rttest;

namespace {

class DeterminismTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveFashionMnist())
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }

  runtime::Plan plan(uint64_t seed, int64_t epochs, const std::string &extra,
                     const std::string &tail) {
    std::string yaml = "pipeline: fmnist\nseed: " + std::to_string(seed) +
                       "\nsource:\n  idx:\n    images: " + kFashionMnistImages +
                       "\n    labels: " + kFashionMnistLabels + "\nsteps:\n" +
                       extra +
                       "  - random_crop: {field: image, size: [24, 24], "
                       "padding: 2}\n"
                       "  - random_flip: {field: image, axis: width}\n"
                       "  - normalize: {field: image, mean: 72.94, std: "
                       "90.02}\n" +
                       tail + "epochs: " + std::to_string(epochs) + "\n";
    return planFromYaml(dir_, yaml, "spec" + std::to_string(n_++) + ".yaml");
  }

  TempDir dir_;
  int n_ = 0;
};

std::string run(const runtime::Plan &p, int threads) {
  runtime::RunOptions o;
  o.threads = threads;
  return allBytes(runAll(p, o));
}

TEST_F(DeterminismTest, SameBytesAtAnyParallelism) {
  runtime::Plan p = plan(7, 1, "",
                         "  - shuffle: 1000\n  - batch: {size: 256, "
                         "drop_remainder: true}\n");
  std::string one = run(p, 1);
  // 10000 records, 39 full batches of f32[256,24,24] + i64[256].
  EXPECT_EQ(one.size(), 39 * (256 * 24 * 24 * 4 + 256 * 8 +
                              std::string("f32[256,24,24]i64[256]").size()));
  EXPECT_EQ(run(p, 2), one);
  EXPECT_EQ(run(p, 1), one);
  // An explicit parallelism of 1 for the map group is the same too.
  runtime::RunOptions o;
  o.threads = 2;
  o.schedule["random_crop"].parallelism = 1;
  o.schedule["default"].prefetch = 3;
  EXPECT_EQ(allBytes(runAll(p, o)), one);
}

TEST_F(DeterminismTest, EpochsAndSeedsChangeTheOutput) {
  runtime::Plan p =
      plan(7, 2, "  - take: 2000\n", "  - shuffle: 500\n  - batch: 100\n");
  std::vector<Output> outs = runAll(p);
  ASSERT_EQ(outs.size(), 40u);
  std::vector<Output> e0(outs.begin(), outs.begin() + 20),
      e1(outs.begin() + 20, outs.end());
  EXPECT_EQ(e0.front().epoch, 0);
  EXPECT_EQ(e1.front().epoch, 1);
  EXPECT_NE(allBytes(e0), allBytes(e1));
  // The second epoch reshuffles the same records: the multiset of labels is
  // the same, their order is not.
  std::vector<int64_t> l0 = ints(e0, 1), l1 = ints(e1, 1);
  EXPECT_NE(l0, l1);
  std::sort(l0.begin(), l0.end());
  std::sort(l1.begin(), l1.end());
  EXPECT_EQ(l0, l1);

  runtime::Plan q =
      plan(8, 2, "  - take: 2000\n", "  - shuffle: 500\n  - batch: 100\n");
  EXPECT_NE(allBytes(runAll(q)), allBytes(outs));
  // Same seed again: identical.
  EXPECT_EQ(allBytes(runAll(p, {})), allBytes(outs));
}

/// A cache after random steps would replay the first epoch's draws in every
/// later epoch: the spec checker refuses it, and so does the engine for a
/// plan that gets one another way. A cache before them keeps every byte of
/// an uncached run, and each epoch draws anew.
TEST_F(DeterminismTest, CacheOnlyBeforeRandomSteps) {
  for (const char *to : {"memory", "disk"}) {
    std::string yaml = "pipeline: fmnist\nsource:\n  idx:\n    images: " +
                       kFashionMnistImages +
                       "\n    labels: " + kFashionMnistLabels +
                       "\nsteps:\n  - take: 300\n  - random_crop: {field: "
                       "image, size: [24, 24], padding: 2}\n  - cache: " +
                       to + "\n  - batch: 300\nepochs: 2\n";
    dsl::DiagnosticEngine diags("after.yaml", yaml);
    EXPECT_EQ(dsl::parseSpec(diags), nullptr) << to;
    std::ostringstream errs;
    diags.print(errs);
    EXPECT_NE(errs.str().find("after.yaml:9:5: error: cannot cache here: "
                              "'random_crop' (spec line 8) is random"),
              std::string::npos)
        << errs.str();
  }
  runtime::Plan uncached = plan(3, 2, "  - take: 300\n", "  - batch: 300\n");
  runtime::Plan sneaked = uncached;
  sneaked.steps[2].schedule.cache = "memory"; // after random_flip
  auto refused = runtime::Pipeline::create(sneaked, {});
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(refused.status().message().find(
                "cannot cache after 'random_flip': 'random_crop'"),
            std::string::npos)
      << refused.status().message();

  runtime::Plan cached =
      plan(3, 2, "  - take: 300\n  - cache: memory\n", "  - batch: 300\n");
  std::vector<Output> outs = runAll(cached);
  std::vector<Output> u = runAll(uncached);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(allBytes(outs), allBytes(u));
  EXPECT_NE(allBytes({outs[0]}), allBytes({outs[1]}));
}

TEST_F(DeterminismTest, RepeatDrawsNewCropsInEachPass) {
  runtime::Plan p =
      plan(3, 1, "  - take: 100\n  - repeat: 2\n", "  - batch: 100\n");
  std::vector<Output> outs = runAll(p);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(ints({outs[0]}, 1), ints({outs[1]}, 1));   // same labels
  EXPECT_NE(allBytes({outs[0]}), allBytes({outs[1]})); // new crops
  runtime::RunOptions o;
  o.threads = 1;
  EXPECT_EQ(allBytes(runAll(p, o)), allBytes(outs));
}

} // namespace

namespace {

/// Changes knobs on every tick, as the autotuner's re-planner may: the
/// parallel group's workers between 1 and 2 and the prefetch depth after
/// `batch` between 1 and 3. Also records what the runtime refused.
class Flipper : public runtime::RunController {
public:
  double interval() const override { return 0.002; }
  void tick(runtime::Pipeline &p) override {
    ++ticks;
    int64_t par = ticks % 2 ? 1 : 2;
    if (p.setParallelism("random_flip", par))
      ++changed;
    Expected<int64_t> d = p.setPrefetch("batch", ticks % 3 + 1);
    if (d)
      depths.insert(*d);
    for (const runtime::StageStats &s : p.stats().stages)
      if (s.name == "random_crop+random_flip+normalize" ||
          s.name == "random_crop")
        seen.insert(s.parallelism);
    unknown = p.setParallelism("no_such_step", 2).message();
    inlineStep = p.setParallelism("batch", 2).message();
    noQueue = p.setPrefetch("random_crop", 2).status().message();
  }
  std::atomic<int> ticks{0}, changed{0};
  std::set<int64_t> depths, seen;
  std::string unknown, inlineStep, noQueue;
};

} // namespace

namespace {
/// A controller that looks and changes nothing (as the re-planner when
/// nothing drifts).
class Idle : public runtime::RunController {
public:
  double interval() const override { return 0.01; }
  void tick(runtime::Pipeline &) override {}
};
} // namespace

TEST_F(DeterminismTest, AControllersWindowIsFilledForTheWorkersThatRun) {
  // With a controller the window of a parallel step is sized for every
  // thread (the parallelism may rise in flight: 2 x 16 slots here), but
  // one worker's feeder fills 16, as without a controller: the rest would
  // be buffers first touched for nothing. The same bytes either way, and
  // with SLUICE_NO_ACTIVE_WINDOW=1 (all 32 filled).
  runtime::Plan p =
      plan(7, 1, "", "  - batch: {size: 64, drop_remainder: true}\n");
  runtime::RunOptions o;
  o.threads = 2;
  o.schedule["random_crop"].parallelism = 1;
  const std::string expected = allBytes(runAll(p, o));
  o.controller = std::make_shared<Idle>();
  runtime::RunStats st;
  EXPECT_EQ(allBytes(runAll(p, o, &st)), expected);
  // The window's occupancy is the last step's of the group.
  runtime::StageStats m = stageNamed(st, "normalize");
  EXPECT_EQ(m.bufferCapacity, 32);
  EXPECT_GT(m.occupancyMax, 0);
  EXPECT_LE(m.occupancyMax, 16);
  ::setenv("SLUICE_NO_ACTIVE_WINDOW", "1", 1);
  std::string off = allBytes(runAll(p, o));
  ::unsetenv("SLUICE_NO_ACTIVE_WINDOW");
  EXPECT_EQ(off, expected);
}

TEST_F(DeterminismTest, KnobsChangedInFlightKeepTheBytes) {
  runtime::Plan p = plan(7, 3, "",
                         "  - shuffle: 1000\n  - batch: {size: 64, "
                         "drop_remainder: true}\n");
  runtime::RunOptions fixed;
  fixed.threads = 2;
  fixed.schedule["random_crop"].parallelism = 2;
  fixed.schedule["batch"].prefetch = 3;
  std::string expected = allBytes(runAll(p, fixed));
  runtime::RunOptions o = fixed;
  auto flipper = std::make_shared<Flipper>();
  o.controller = flipper;
  EXPECT_EQ(allBytes(runAll(p, o)), expected);
  // It really ran and changed things while outputs flowed (a loaded host
  // may give it few ticks, but some).
  EXPECT_GT(flipper->ticks.load(), 2);
  EXPECT_GT(flipper->changed.load(), 0);
  EXPECT_FALSE(flipper->depths.empty());
  for (int64_t d : flipper->depths)
    EXPECT_TRUE(d >= 1 && d <= 3) << d;
  EXPECT_TRUE(flipper->seen.count(1) || flipper->seen.count(2));
  EXPECT_NE(flipper->unknown.find("no step 'no_such_step'"), std::string::npos)
      << flipper->unknown;
  EXPECT_NE(flipper->inlineStep.find("runs inline"), std::string::npos)
      << flipper->inlineStep;
  EXPECT_NE(flipper->noQueue.find("no prefetch queue"), std::string::npos)
      << flipper->noQueue;
}
