//===- compiler_fuse_decode_crop_test.cpp - Fused decode+crop = unfused ---===//
//
// sluice-fuse-decode-crop and sluice-fuse-crop-epilogue must not change a
// single output byte: the same ImageNet-style pipelines over JPEGs (and a
// PNG, and a truncated file that on_error: skip drops) written here run with
// both passes, with only the first, and with neither, at 1 and 2 threads,
// and the batches must be identical. A spec must not be able to name the
// internal fused op. JPEG damage below the crop box is noticed only with
// decode_image's `verify: full`.
//
//===----------------------------------------------------------------------===//
#include "compiler_test_util.h"
#include "runtime_test_util.h"

#include "sluice/compiler/Compiler.h"

#include <png.h>
#include <turbojpeg.h>

#include <cmath>

using namespace sluice;
using namespace sluice::rttest;

namespace {

const std::string kDecodeCrop = "sluice-fuse-decode-crop";
const std::string kEpilogue = "sluice-fuse-crop-epilogue";
const std::string kRemaps = "sluice-fuse-remaps";

std::vector<uint8_t> noisy(int h, int w, int c, int seed) {
  std::vector<uint8_t> px(size_t(h) * w * c);
  uint32_t state = uint32_t(seed) * 747796405u + 1;
  for (size_t i = 0; i < px.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    size_t pixel = i / c;
    double v = 120 +
               90 * std::sin(double(pixel % w) * 0.09 + seed) *
                   std::cos(double(pixel / w) * 0.05) +
               double(state >> 27);
    px[i] = uint8_t(std::fmin(255, std::fmax(0, v)));
  }
  return px;
}

std::string jpeg(int h, int w, int c, int subsamp, bool progressive, int seed) {
  std::vector<uint8_t> px = noisy(h, w, c, seed);
  tjhandle tj = tjInitCompress();
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  int rc =
      tjCompress2(tj, px.data(), w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &buf,
                  &size, subsamp, 85, progressive ? TJFLAG_PROGRESSIVE : 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::string out(reinterpret_cast<char *>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

void pngAppend(png_structp png, png_bytep data, size_t n) {
  static_cast<std::string *>(png_get_io_ptr(png))
      ->append(reinterpret_cast<const char *>(data), n);
}

std::string png(int h, int w, int seed) {
  std::vector<uint8_t> px = noisy(h, w, 3, seed);
  std::string out;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(
      png_image_write_get_memory_size(image, size, 0, px.data(), 0, nullptr));
  out.resize(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, px.data(),
                                        0, nullptr));
  out.resize(size);
  return out;
}

class FuseDecodeCropTest : public ::testing::Test {
protected:
  void SetUp() override {
    int i = 0;
    for (int subsamp : {TJSAMP_420, TJSAMP_422, TJSAMP_444})
      for (int k = 0; k < 4; ++k, ++i)
        dir_.write("img/a/" + std::to_string(i) + ".jpg",
                   jpeg(60 + 13 * k, 90 - 7 * k, 3, subsamp, k == 3, i));
    dir_.write("img/b/gray.jpg", jpeg(51, 47, 1, TJSAMP_GRAY, false, 40));
    dir_.write("img/b/big.jpg", jpeg(301, 257, 3, TJSAMP_420, false, 41));
    dir_.write("img/b/photo.png", png(45, 52, 42));
    std::string cut = jpeg(120, 100, 3, TJSAMP_420, false, 43);
    dir_.write("img/b/cut.jpg", cut.substr(0, cut.size() * 2 / 3));
  }

  /// Builds the Plan of `yaml` through the compiler without the passes
  /// named in `disabled`.
  runtime::Plan build(const std::string &yaml,
                      std::vector<std::string> disabled) {
    return sluice::testing::planOfSpecFile(dir_.write("spec.yaml", yaml),
                                           std::move(disabled));
  }

  static int countOps(const runtime::Plan &plan, const std::string &op) {
    int n = 0;
    for (const runtime::PlanStep &s : plan.steps)
      n += s.op == op;
    return n;
  }

  /// Runs `yaml` with both passes, with the decode + crop fusion only, and
  /// with neither, at 1 and 2 threads; all six runs must give the same
  /// bytes and drop the same records. `expectFused` decode + crop pairs are
  /// fused, and `expectFolded` steps folded into them.
  /// Also runs the fully fused plan with direct output off (the fused step
  /// then allocates its result and the worker copies it into the batch
  /// row); returns the rows written directly into batch buffers.
  int64_t expectSameOutput(const std::string &yaml, int expectFused,
                           int64_t expectSkipped, int expectFolded = 0) {
    int64_t directRows = 0;
    runtime::Plan all = build(yaml, {});
    runtime::Plan cropOnly = build(yaml, {kEpilogue, kRemaps});
    runtime::Plan none = build(yaml, {kDecodeCrop, kEpilogue, kRemaps});
    // Without the epilogue pass, sluice-fuse-remaps takes the steps after
    // the crop (run here by the runtime's kernels, one after another).
    runtime::Plan remapped = build(yaml, {kEpilogue});
    EXPECT_EQ(countOps(all, "decode_random_resized_crop"), expectFused);
    EXPECT_EQ(countOps(cropOnly, "decode_random_resized_crop"), expectFused);
    EXPECT_EQ(countOps(none, "decode_random_resized_crop"), 0);
    EXPECT_EQ(countOps(none, "decode_image"), expectFused);
    // Counted without sluice-fuse-remaps, which may group what is left.
    EXPECT_EQ(cropOnly.steps.size() - build(yaml, {kRemaps}).steps.size(),
              size_t(expectFolded));
    std::string reference;
    for (int threads : {1, 2})
      for (const runtime::Plan *plan : {&none, &cropOnly, &remapped, &all}) {
        const char *what = plan == &all        ? "both passes"
                           : plan == &cropOnly ? "decode-crop only"
                           : plan == &remapped ? "decode-crop and remaps"
                                               : "no fusion";
        runtime::RunOptions o;
        o.threads = threads;
        runtime::RunStats stats;
        std::vector<Output> outs = runAll(*plan, o, &stats);
        EXPECT_FALSE(outs.empty());
        std::string bytes = allBytes(outs);
        if (reference.empty())
          reference = bytes;
        EXPECT_TRUE(bytes == reference)
            << what << " at " << threads << " threads differs";
        // The cut JPEG is dropped by every run, once per epoch.
        EXPECT_EQ(skippedRecords(stats), expectSkipped)
            << what << ": " << stats.accounting();
        if (plan != &all)
          continue;
        for (const runtime::StageStats &st : stats.stages)
          directRows += st.rowsDirect;
        runtime::RunOptions copied = o;
        copied.directOutput = false;
        runtime::RunStats copiedStats;
        EXPECT_TRUE(allBytes(runAll(*plan, copied, &copiedStats)) == reference)
            << "direct output off at " << threads << " threads differs";
        for (const runtime::StageStats &st : copiedStats.stages)
          EXPECT_EQ(st.rowsDirect, 0);
      }
    return directRows;
  }

  static int64_t skippedRecords(const runtime::RunStats &stats) {
    int64_t skipped = 0;
    for (const runtime::StageStats &s : stats.stages)
      for (const auto &reason : s.skipped)
        skipped += reason.second;
    return skipped;
  }

  TempDir dir_;
};

TEST_F(FuseDecodeCropTest, ImagenetStyleOutputIsIdentical) {
  int64_t direct = expectSameOutput(
      "pipeline: imagenet_small\nseed: 7\nsource:\n"
      "  image_folder: {root: img, on_error: skip}\n"
      "steps:\n"
      "  - decode_image: {field: data, as: image, channels: 3}\n"
      "  - random_resized_crop: {field: image, size: [24, 20]}\n"
      "  - random_flip: {field: image, axis: width, p: 0.5}\n"
      "  - normalize: {field: image, mean: [123.675, 116.28, 103.53], "
      "std: [58.395, 57.12, 57.375]}\n"
      "  - transpose: {field: image, to: CHW}\n"
      "  - select: [image, label]\n"
      "  - batch: {size: 4}\n"
      "epochs: 2\n",
      1, 2, 3);
  // At 2 threads the fused step writes its rows straight into the batch.
  EXPECT_GT(direct, 0);
}

/// Every shape of epilogue the pass folds: flip after normalize, flip
/// alone, a u8 CHW transpose by `perm`, one mean/std for all channels, a
/// gray image, nearest and area resizing, and a flip that always happens.
TEST_F(FuseDecodeCropTest, EpilogueVariantsAreIdentical) {
  const std::string head = "pipeline: variants\nseed: 11\nsource:\n"
                           "  image_folder: {root: img, on_error: skip}\n"
                           "steps:\n";
  expectSameOutput(head +
                       "  - decode_image: {field: data, as: image}\n"
                       "  - random_resized_crop: {field: image, size: 17}\n"
                       "  - normalize: {field: image, mean: 127.5, std: 64}\n"
                       "  - random_flip: {field: image, p: 1}\n"
                       "  - select: [image, label]\n"
                       "  - batch: {size: 5}\n",
                   1, 1, 2);
  expectSameOutput(
      head + "  - decode_image: {field: data, as: image}\n"
             "  - random_resized_crop: {field: image, size: [13, 18], "
             "interpolation: nearest}\n"
             "  - random_flip: {field: image}\n"
             "  - transpose: {field: image, perm: [2, 0, 1]}\n"
             "  - select: [image, label]\n"
             "  - batch: {size: 5}\n",
      1, 1, 2);
  expectSameOutput(head + "  - decode_image: {field: data, channels: 1}\n"
                          "  - random_resized_crop: {field: data, size: 12, "
                          "interpolation: area}\n"
                          "  - normalize: {field: data, mean: [10], std: [3]}\n"
                          "  - transpose: {field: data, to: CHW}\n"
                          "  - batch: {size: 5}\n",
                   1, 1, 2);
}

/// Steps the epilogue cannot take stay as they are: a flip along the
/// height stops the fold, and so does a step writing another field.
TEST_F(FuseDecodeCropTest, EpilogueStopsAtStepsItCannotTake) {
  const std::string head =
      "pipeline: stops\nseed: 5\nsource:\n"
      "  image_folder: {root: img, on_error: skip}\n"
      "steps:\n"
      "  - decode_image: {field: data, as: image}\n"
      "  - random_resized_crop: {field: image, size: 10}\n";
  expectSameOutput(head + "  - normalize: {field: image, mean: 100, std: 50}\n"
                          "  - random_flip: {field: image, axis: height}\n"
                          "  - transpose: {field: image, to: CHW}\n"
                          "  - select: [image, label]\n"
                          "  - batch: {size: 4}\n",
                   1, 1, 1);
  expectSameOutput(head + "  - random_flip: {field: image, as: flipped}\n"
                          "  - select: [image, flipped, label]\n"
                          "  - batch: {size: 4}\n",
                   1, 1, 0);
}

/// Two fused pairs: the second draws from `random_resized_crop.2`'s stream,
/// decodes in place (no `as`) and to gray.
TEST_F(FuseDecodeCropTest, SecondOccurrenceKeepsItsRandomStream) {
  expectSameOutput(
      "pipeline: two_crops\nseed: 3\nsource:\n"
      "  image_folder: {root: img, on_error: skip}\n"
      "steps:\n"
      "  - decode_image: {field: data, as: image, channels: 3}\n"
      "  - random_resized_crop: {field: image, size: 16, scale: [0.3, 0.9], "
      "interpolation: nearest}\n"
      "  - decode_image: {field: data, channels: 1}\n"
      "  - random_resized_crop: {field: data, size: [9, 11]}\n"
      "  - select: [image, data, label]\n"
      "  - batch: {size: 3}\n",
      2, 1);
}

/// A JPEG damaged in its last rows (a stray marker there): with decode_image's
/// `verify: full` the fused runs drop it exactly like the unfused one; with
/// the default `verify: window` a box that ends above the damage decodes
/// fine (the seed and box sizes here keep every box above it).
TEST_F(FuseDecodeCropTest, VerifyFullFindsDamageBelowTheBox) {
  std::string tall = jpeg(400, 64, 3, TJSAMP_420, false, 50);
  tall.replace(tall.size() * 98 / 100, 2, "\xFF\xD3");
  dir_.write("img/c/tall.jpg", tall);
  auto spec = [](const std::string &verify) {
    return "pipeline: verify\nseed: 2\nsource:\n"
           "  image_folder: {root: img, on_error: skip}\n"
           "steps:\n"
           "  - decode_image: {field: data, as: image, verify: " +
           verify +
           "}\n"
           "  - random_resized_crop: {field: image, size: 8, "
           "scale: [0.01, 0.02]}\n"
           "  - select: [image, label]\n"
           "  - batch: {size: 4}\n";
  };
  // The cut JPEG and the damaged one are dropped by every run.
  expectSameOutput(spec("full"), 1, 2);

  runtime::RunStats stats;
  runtime::RunOptions o;
  std::vector<Output> outs = runAll(build(spec("window"), {}), o, &stats);
  ASSERT_FALSE(outs.empty());
  EXPECT_EQ(skippedRecords(stats), 1) << stats.accounting();
}

TEST_F(FuseDecodeCropTest, SpecCannotNameTheInternalOp) {
  std::string yaml = "pipeline: p\nsource:\n  image_folder: {root: img}\n"
                     "steps:\n"
                     "  - decode_random_resized_crop: {field: data, size: 8, "
                     "crop_step: x}\n";
  std::string path = dir_.write("bad.yaml", yaml);
  dsl::DiagnosticEngine diags(path, yaml);
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  std::ostringstream errs;
  diags.print(errs);
  EXPECT_FALSE(spec && diags.errorCount() == 0);
  EXPECT_NE(errs.str().find("bad.yaml:5:5: error: "
                            "'decode_random_resized_crop' is internal to the "
                            "compiler"),
            std::string::npos)
      << errs.str();
}

} // namespace
