//===- runtime_arena_slicing_test.cpp - Parallel steps take turns ---------===//
//
// Arena slicing (RunOptions::arenaSlicing, TaskHandoff.h, MapStage.cpp):
// the pipeline's arena runs its tasks in the order they were enqueued, and
// a parallel step's worker that has run for a slice while another task
// waits for a slot re-enqueues itself behind it. Which worker runs which
// record must never show: every case runs with slicing off (the reference)
// and on with a slice short enough that workers give their slots away many
// times (checked through the `slotsGiven` counter), over Fashion-MNIST (a
// costly map, a memory cache, then random crop and flip, as
// bench/specs/autotune/cached_prefix.yaml, over several epochs) and over
// JPEGs encoded here with corrupt ones skipped or failing the run; and a
// consumer that stops early, or a pipeline destroyed mid-epoch while
// workers are re-enqueued, leaves nothing reserved and does not hang.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/runtime/TaskHandoff.h"

#include <turbojpeg.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

using namespace sluice;
using namespace sluice::rttest;

namespace {

/// Sum over stages of the slots their workers gave away.
int64_t slotsGiven(const runtime::RunStats &s) {
  int64_t n = 0;
  for (const runtime::StageStats &st : s.stages)
    n += st.slotsGiven;
  return n;
}

/// Runs with slicing off and on (a 20 us slice, so that workers give their
/// slots away often), at `threads`; expects the same bytes, epochs and
/// per-stage counts, and returns the slots given with slicing on.
int64_t expectSameOnAndOff(const runtime::Plan &plan, int64_t threads) {
  runtime::RunOptions off;
  off.threads = threads;
  off.arenaSlicing = false;
  runtime::RunStats refStats;
  std::vector<Output> ref = runAll(plan, off, &refStats);
  EXPECT_FALSE(ref.empty());
  EXPECT_EQ(slotsGiven(refStats), 0);

  runtime::RunOptions on;
  on.threads = threads;
  on.arenaSlicing = true;
  on.arenaSliceMicros = 20;
  runtime::RunStats s;
  std::vector<Output> outs = runAll(plan, on, &s);
  EXPECT_EQ(outs.size(), ref.size());
  EXPECT_TRUE(allBytes(outs) == allBytes(ref))
      << "outputs differ with arena slicing on";
  for (size_t i = 0; i < std::min(outs.size(), ref.size()); ++i)
    EXPECT_EQ(outs[i].epoch, ref[i].epoch) << "output " << i;
  EXPECT_EQ(s.stages.size(), refStats.stages.size());
  for (const runtime::StageStats &st : refStats.stages) {
    runtime::StageStats o = stageNamed(s, st.name);
    EXPECT_EQ(st.read, o.read) << st.name;
    EXPECT_EQ(st.emitted, o.emitted) << st.name;
    EXPECT_EQ(st.filtered, o.filtered) << st.name;
    EXPECT_EQ(st.skippedTotal(), o.skippedTotal()) << st.name;
    EXPECT_EQ(st.failed, o.failed) << st.name;
  }
  // What stays reserved after the run (a full memory cache) is the same.
  EXPECT_EQ(s.memoryInUse, refStats.memoryInUse);
  return slotsGiven(s);
}

/// A w x h RGB pattern as a JPEG.
std::string encodeJpeg(int w, int h, int seed) {
  return encodeRgbJpeg(w, h, [seed](int x, int y, int c) {
    return x * (3 + seed % 5) + y * 7 + c * 50 + seed * 31;
  });
}

/// cached_prefix's shape over the first `records` of Fashion-MNIST's test
/// split: a costly map on two workers, a memory cache after it, random crop
/// and flip on two workers, batches, three epochs.
std::string fashionSpec(int records) {
  return "pipeline: slicing\nseed: 11\nepochs: 3\nsource:\n  idx:\n"
         "    images: " +
         kFashionMnistImages + "\n    labels: " + kFashionMnistLabels +
         "\nsteps:\n"
         "  - take: {count: " +
         std::to_string(records) +
         "}\n"
         "  - cast: {field: image, dtype: f32}\n"
         "  - map: {field: image, expr: \"sqrt(abs(sin(x) * cos(x / 3) + "
         "exp(-x / 255) * log(x + 1)))\"}\n"
         "  - normalize: {field: image, mean: 0.5, std: 0.25}\n"
         "  - random_crop: {field: image, size: [24, 24]}\n"
         "  - random_flip: {field: image, axis: width}\n"
         "  - batch: {size: 100}\n"
         "schedule:\n"
         "  cast: {parallelism: 2}\n"
         "  map: {parallelism: 2}\n"
         "  normalize: {parallelism: 2, cache: memory}\n"
         "  random_crop: {parallelism: 2}\n"
         "  random_flip: {parallelism: 2, prefetch: 16}\n"
         "  batch: {prefetch: 2}\n";
}

/// JPEGs decoded and resized on two workers, a memory cache, then random
/// crop and flip on two workers; every 5th image is cut short.
class JpegSlicing : public ::testing::Test {
protected:
  void SetUp() override {
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 40; ++i) {
        std::string jpeg = encodeJpeg(96 + 4 * i, 80 + 3 * k, k * 40 + i);
        if ((k * 40 + i) % 5 == 2)
          jpeg = jpeg.substr(0, jpeg.size() / 2);
        dir_.write("img/c" + std::to_string(k) + "/" + std::to_string(100 + i) +
                       ".jpg",
                   jpeg);
      }
  }

  std::string spec(const char *onError) const {
    return std::string("pipeline: jpegs\nseed: 3\nepochs: 2\nsource:\n"
                       "  image_folder: {root: img, on_error: ") +
           onError +
           "}\nsteps:\n"
           "  - decode_image: {field: data, as: image, channels: 3}\n"
           "  - resize: {field: image, size: [64, 64]}\n"
           "  - cast: {field: image, dtype: f32}\n"
           "  - random_crop: {field: image, size: [48, 48]}\n"
           "  - random_flip: {field: image, axis: width}\n"
           "  - select: [image, label]\n"
           "  - batch: {size: 6}\n"
           "schedule:\n"
           "  decode_image: {parallelism: 2}\n"
           "  cast: {parallelism: 2, cache: memory}\n"
           "  random_crop: {parallelism: 2}\n"
           "  random_flip: {parallelism: 2}\n";
  }

  TempDir dir_;
};

} // namespace

/// The arena's own queue: with one slot busy, tasks enqueued meanwhile wait
/// (counted by waiting()) and then run in the order they were enqueued.
TEST(ArenaTurns, WaitingTasksRunInTheOrderEnqueued) {
  runtime::TaskArena arena(1, 0, /*turns=*/true);
  ASSERT_TRUE(arena.turns());
  std::atomic<bool> started{false}, release{false};
  runtime::enqueueTask(arena, [&] {
    started = true;
    while (!release)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  while (!started)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 40; ++i)
    runtime::enqueueTask(arena, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    });
  EXPECT_EQ(arena.waiting(), 40);
  release = true;
  arena.waitIdle();
  EXPECT_EQ(arena.waiting(), 0);
  ASSERT_EQ(order.size(), 40u);
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(order[size_t(i)], i);

  // Without turns nothing is counted as waiting (waiting() is a hint only
  // slicing reads), and every task still runs.
  runtime::TaskArena plain(1, 0, /*turns=*/false);
  EXPECT_FALSE(plain.turns());
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i)
    runtime::enqueueTask(plain, [&] { ++ran; });
  EXPECT_EQ(plain.waiting(), 0);
  plain.waitIdle();
  EXPECT_EQ(ran.load(), 10);
}

TEST(ArenaSlicing, CachedPrefixOutputIsIdenticalOnAndOff) {
  if (!haveFashionMnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  runtime::Plan plan = planFromYaml(dir, fashionSpec(1500));
  // Two threads: the map's two workers and the crop/flip's two share two
  // slots, so workers give theirs away.
  EXPECT_GT(expectSameOnAndOff(plan, 2), 0);
  // One thread: one slot for both steps.
  EXPECT_GT(expectSameOnAndOff(plan, 1), 0);
}

TEST_F(JpegSlicing, SkippedImagesAndCountsAreIdenticalOnAndOff) {
  runtime::Plan plan = planFromYaml(dir_, spec("skip"));
  expectSameOnAndOff(plan, 2);
  expectSameOnAndOff(plan, 1);
}

/// on_error: fail stops the run at the first corrupt image with the same
/// error, after the same outputs, with slicing on and off.
TEST_F(JpegSlicing, AFailingImageGivesTheSameErrorOnAndOff) {
  runtime::Plan plan = planFromYaml(dir_, spec("fail"));
  auto run = [&](bool slicing, std::string &error) {
    runtime::RunOptions o;
    o.threads = 2;
    o.arenaSlicing = slicing;
    o.arenaSliceMicros = 20;
    std::vector<Output> outs;
    auto p = runtime::Pipeline::create(plan, o);
    EXPECT_TRUE(bool(p)) << (p ? "" : p.status().message());
    if (!p)
      return outs;
    runtime::Batch b;
    for (;;) {
      Expected<bool> more = (*p)->next(b);
      if (!more) {
        error = more.status().message();
        break;
      }
      if (!*more)
        break;
      outs.push_back({b.fields(), b.epoch()});
    }
    (*p)->stop();
    EXPECT_EQ((*p)->stats().memoryInUse, 0);
    return outs;
  };
  std::string offError, onError;
  std::vector<Output> off = run(false, offError);
  std::vector<Output> on = run(true, onError);
  EXPECT_FALSE(offError.empty());
  EXPECT_NE(offError.find("102.jpg"), std::string::npos) << offError;
  EXPECT_EQ(onError, offError);
  EXPECT_TRUE(allBytes(on) == allBytes(off));
}

/// A consumer that stops early (after 0 to 4 batches, in the first epoch
/// while the map's workers are re-enqueueing themselves, or in a cached
/// epoch) and a pipeline destroyed without stop() leave every stage
/// balanced and nothing reserved, and never hang.
TEST(ArenaSlicing, EarlyStopAndDestructionMidEpoch) {
  if (!haveFashionMnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  runtime::Plan plan = planFromYaml(dir, fashionSpec(1500));
  for (int stopAfter : {0, 1, 4, 16, 20}) {
    for (bool callStop : {true, false}) {
      SCOPED_TRACE("stop after " + std::to_string(stopAfter) +
                   (callStop ? " batches, stop()" : " batches, destroyed"));
      runtime::RunOptions o;
      o.threads = 2;
      o.arenaSliceMicros = 10;
      auto p = runtime::Pipeline::create(plan, o);
      ASSERT_TRUE(bool(p)) << p.status().message();
      runtime::Batch b;
      for (int i = 0; i < stopAfter; ++i) {
        Expected<bool> more = (*p)->next(b);
        ASSERT_TRUE(more && *more);
      }
      if (callStop) {
        (*p)->stop();
        Status bal = (*p)->stats().checkBalanced();
        EXPECT_TRUE(bal.isOk()) << bal.message();
        // An epoch is 15 batches: before the cache is complete nothing is
        // left reserved (the partial cache is dropped).
        if (stopAfter < 15)
          EXPECT_EQ((*p)->stats().memoryInUse, 0);
      }
      (*p).reset(); // destroys the pipeline (and waits for its arena)
    }
  }
}
