//===- runtime_batch_placement_test.cpp - In-place batch assembly ---------===//
//
// The parallel map stage before a `batch` writes records straight into
// their rows of the batch buffer (RunOptions::batchRowPlacement), hands
// finished records to its consumer in runs (RunOptions::batchedHandoff),
// and large batch buffers come from the tensor buffer pool. None may change
// a byte of the output: every case runs once with all turned off (the
// reference), then with all on at one and two threads, with only the
// hand-offs one by one, and with only the
// pool off, over JPEGs encoded here, with partial and dropped last batches,
// corrupt images skipped and records filtered (which make the map stage's
// row predictions wrong), and batch buffers recycled from a pool seeded
// with garbage.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/ops/BufferPool.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstring>

using namespace sluice;
using namespace sluice::rttest;

namespace {

/// A w x h RGB pattern as a JPEG.
std::string encodeJpeg(int w, int h, int seed) {
  return encodeRgbJpeg(w, h, [seed](int x, int y, int c) {
    return x * (5 + seed % 3) + y * 3 + c * 70 + seed * 29;
  });
}

struct Case {
  const char *name;
  int crop;           ///< output images are f32[3, crop, crop]
  int batch;          ///< batch size
  bool dropRemainder; ///< batch.drop_remainder
  bool corrupt;       ///< every 4th JPEG is cut short (on_error: skip)
  bool filter;        ///< drop class 1 with a filter before the batch
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
  return os << c.name;
}

/// Turns the buffer pool off for its lifetime.
struct PoolOff {
  PoolOff() { setBufferPoolEnabled(false); }
  ~PoolOff() { setBufferPoolEnabled(true); }
};

/// Leaves idle buffers of `bytes` full of 0xA5 in the pool, so that the
/// next batches of that size are built in memory that holds garbage (a row
/// the batch stage forgot to write would show).
void seedPoolWithGarbage(size_t bytes) {
  std::vector<Tensor> held;
  // More than the batches a pipeline has in flight at once.
  for (size_t i = 0; i < std::min<size_t>(kPoolMaxPerSize, 8); ++i) {
    held.push_back(Tensor::empty(ElemType::U8, {static_cast<int64_t>(bytes)}));
    std::memset(held.back().mutableRaw(), 0xA5, bytes);
  }
}

class BatchPlacement : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override {
    const Case &c = GetParam();
    // 3 classes of 11 images of different sizes; sorted names interleave
    // the corrupt ones with good ones.
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 11; ++i) {
        std::string jpeg =
            encodeJpeg(40 + 7 * i, 36 + 5 * k + 3 * i, k * 11 + i);
        if (c.corrupt && (k * 11 + i) % 4 == 1)
          jpeg = jpeg.substr(0, jpeg.size() / 2);
        dir_.write("img/class" + std::to_string(k) + "/" +
                       std::to_string(10 + i) + ".jpg",
                   jpeg);
      }
  }

  std::string spec() const {
    const Case &c = GetParam();
    std::string s = std::to_string(c.crop);
    return "pipeline: placement\nseed: 7\nepochs: 2\nsource:\n"
           "  image_folder: {root: img, on_error: " +
           std::string(c.corrupt ? "skip" : "fail") +
           "}\nsteps:\n"
           "  - decode_image: {field: data, as: image, channels: 3}\n"
           "  - random_resized_crop: {field: image, size: [" +
           s + ", " + s +
           "]}\n"
           "  - random_flip: {field: image, axis: width, p: 0.5}\n"
           "  - normalize: {field: image, mean: [123.675, 116.28, 103.53], "
           "std: [58.395, 57.12, 57.375]}\n"
           "  - transpose: {field: image, to: CHW}\n" +
           (c.filter ? "  - filter: {where: \"label != 1\"}\n" : "") +
           "  - select: [image, label]\n"
           "  - batch: {size: " +
           std::to_string(c.batch) +
           ", drop_remainder: " + (c.dropRemainder ? "true" : "false") + "}\n";
  }

  TempDir dir_;
};

TEST_P(BatchPlacement, OutputIsIdenticalWithPlacementAndPoolOff) {
  const Case &c = GetParam();
  runtime::Plan plan = planFromYaml(dir_, spec());

  runtime::RunOptions refOpts;
  refOpts.threads = 2;
  refOpts.batchRowPlacement = false;
  refOpts.batchedHandoff = false;
  runtime::RunStats refStats;
  std::vector<Output> ref;
  {
    PoolOff off;
    ref = runAll(plan, refOpts, &refStats);
  }
  // The records each epoch keeps, and the batches they make.
  int kept = 33;
  if (c.corrupt)
    kept -= 8;
  if (c.filter)
    kept -= c.corrupt ? 8 : 11;
  size_t batches = static_cast<size_t>(
      2 * (c.dropRemainder ? kept / c.batch : (kept + c.batch - 1) / c.batch));
  ASSERT_EQ(ref.size(), batches);
  EXPECT_EQ(stageNamed(refStats, "batch").rowsInPlace, 0);
  EXPECT_EQ(refStats.memoryInUse, 0);

  const size_t rowBytes = 3 * size_t(c.crop) * size_t(c.crop) * sizeof(float);
  const size_t batchBytes = (rowBytes * size_t(c.batch) + 63) / 64 * 64;
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setBufferPoolEnabled(true);
    if (batchBytes >= kPoolMinBytes)
      seedPoolWithGarbage(batchBytes);
    int64_t hitsBefore = bufferPoolStats().hits;
    runtime::RunOptions o;
    o.threads = threads;
    runtime::RunStats s;
    std::vector<Output> outs = runAll(plan, o, &s);
    ASSERT_EQ(outs.size(), ref.size());
    EXPECT_TRUE(allBytes(outs) == allBytes(ref))
        << "batches differ from the reference";
    for (size_t i = 0; i < outs.size(); ++i)
      for (size_t f = 0; f < outs[i].fields.size(); ++f)
        EXPECT_TRUE(outs[i].fields[f].sameAs(ref[i].fields[f]))
            << "batch " << i << " field " << f;
    runtime::StageStats b = stageNamed(s, "batch");
    EXPECT_GT(b.rowsInPlace, 0);
    EXPECT_LE(b.rowsInPlace, b.emitted);
    // Without the compiler's passes nothing is fused: no step writes
    // straight into the batch (compiler_fuse_decode_crop_test covers it).
    EXPECT_EQ(b.rowsDirect, 0);
    EXPECT_EQ(s.memoryInUse, 0);
    if (batchBytes >= kPoolMinBytes)
      EXPECT_GT(bufferPoolStats().hits, hitsBefore);

    // Direct output off: the step allocates its result and the worker
    // copies it into the row. Same bytes.
    runtime::RunOptions noDirect = o;
    noDirect.directOutput = false;
    runtime::RunStats sd;
    std::vector<Output> copied = runAll(plan, noDirect, &sd);
    EXPECT_TRUE(allBytes(copied) == allBytes(ref))
        << "batches differ from the reference without direct output";
    EXPECT_EQ(stageNamed(sd, "batch").rowsDirect, 0);
    EXPECT_GT(stageNamed(sd, "batch").rowsInPlace, 0);
    EXPECT_EQ(sd.memoryInUse, 0);

    // Hand-offs one record at a time (the unbatched path). Same bytes and
    // the same counts.
    runtime::RunOptions single = o;
    single.batchedHandoff = false;
    runtime::RunStats sh;
    std::vector<Output> one = runAll(plan, single, &sh);
    EXPECT_TRUE(allBytes(one) == allBytes(ref))
        << "batches differ from the reference with one-by-one hand-offs";
    EXPECT_TRUE(allBytes(one) == allBytes(outs));
    for (const runtime::StageStats &st : s.stages) {
      runtime::StageStats other = stageNamed(sh, st.name);
      EXPECT_EQ(st.emitted, other.emitted) << st.name;
      EXPECT_EQ(st.skippedTotal(), other.skippedTotal()) << st.name;
      EXPECT_EQ(st.filtered, other.filtered) << st.name;
    }
    EXPECT_EQ(sh.memoryInUse, 0);
  }

  // With the pool off, batch buffers of 1 MiB and more are fresh pages:
  // the batch stage copies every row itself (placing rows would move the
  // page faults onto the workers). Same bytes.
  {
    PoolOff off;
    runtime::RunOptions o;
    o.threads = 2;
    runtime::RunStats s;
    std::vector<Output> outs = runAll(plan, o, &s);
    EXPECT_TRUE(allBytes(outs) == allBytes(ref))
        << "batches differ from the reference with the pool off";
    if (batchBytes >= kPoolMinBytes)
      EXPECT_EQ(stageNamed(s, "batch").rowsInPlace, 0);
    EXPECT_EQ(s.memoryInUse, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runs, BatchPlacement,
    ::testing::Values(Case{"small_rows", 16, 5, false, false, false},
                      Case{"drop_remainder", 40, 7, true, false, false},
                      Case{"skips_and_filter", 32, 3, false, true, true},
                      Case{"filter_only", 24, 4, false, false, true},
                      Case{"large_streamed_rows", 224, 4, false, false, false},
                      Case{"large_rows_with_skips", 224, 3, true, true, false}),
    [](const ::testing::TestParamInfo<Case> &i) { return i.param.name; });

/// A consumer that stops after one batch leaves nothing reserved and every
/// stage balanced, with rows placed ahead into batches never emitted.
TEST(BatchPlacementStop, EarlyStopReleasesEverything) {
  TempDir dir;
  for (int i = 0; i < 40; ++i)
    dir.write("img/a/" + std::to_string(100 + i) + ".jpg",
              encodeJpeg(50 + i, 60, i));
  runtime::Plan plan = planFromYaml(
      dir, "pipeline: stop\nsource:\n  image_folder: {root: img}\nsteps:\n"
           "  - decode_image: {field: data, as: image, channels: 3}\n"
           "  - resize: {field: image, size: [64, 64]}\n"
           "  - cast: {field: image, dtype: f32}\n"
           "  - batch: 8\n");
  for (bool placement : {false, true}) {
    runtime::RunOptions o;
    o.threads = 2;
    o.batchRowPlacement = placement;
    auto p = runtime::Pipeline::create(plan, o);
    ASSERT_TRUE(bool(p)) << p.status().message();
    runtime::Batch b;
    Expected<bool> more = (*p)->next(b);
    ASSERT_TRUE(more && *more);
    EXPECT_EQ(b.rows(), 8);
    (*p)->stop();
    runtime::RunStats s = (*p)->stats();
    EXPECT_EQ(s.memoryInUse, 0);
    Status bal = s.checkBalanced();
    EXPECT_TRUE(bal.isOk()) << bal.message();
  }
}

} // namespace
