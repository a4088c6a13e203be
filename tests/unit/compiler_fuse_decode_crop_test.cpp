//===- compiler_fuse_decode_crop_test.cpp - Fused decode+crop = unfused ---===//
//
// sluice-fuse-decode-crop must not change a single output byte: the same
// ImageNet-style pipeline over JPEGs (and a PNG, and a corrupt file that
// on_error: skip drops) written here runs with the pass enabled and
// disabled, at 1 and 2 threads, and the batches must be identical. A spec
// must not be able to name the internal fused op.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/compiler/Compiler.h"

#include <png.h>
#include <turbojpeg.h>

#include <cmath>

using namespace sluice;
using namespace sluice::rttest;

namespace {

const std::string kPass = "sluice-fuse-decode-crop";

std::vector<uint8_t> noisy(int h, int w, int c, int seed) {
  std::vector<uint8_t> px(size_t(h) * w * c);
  uint32_t state = uint32_t(seed) * 747796405u + 1;
  for (size_t i = 0; i < px.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    size_t pixel = i / c;
    double v = 120 + 90 * std::sin(double(pixel % w) * 0.09 + seed) *
                         std::cos(double(pixel / w) * 0.05) +
               double(state >> 27);
    px[i] = uint8_t(std::fmin(255, std::fmax(0, v)));
  }
  return px;
}

std::string jpeg(int h, int w, int c, int subsamp, bool progressive,
                 int seed) {
  std::vector<uint8_t> px = noisy(h, w, c, seed);
  tjhandle tj = tjInitCompress();
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, px.data(), w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB,
                       &buf, &size, subsamp, 85,
                       progressive ? TJFLAG_PROGRESSIVE : 0);
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
  EXPECT_TRUE(png_image_write_get_memory_size(image, size, 0, px.data(), 0,
                                              nullptr));
  out.resize(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0,
                                        px.data(), 0, nullptr));
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

  /// Builds the Plan of `yaml` through the compiler, with or without the
  /// pass.
  runtime::Plan build(const std::string &yaml, bool fuse) {
    std::string path = dir_.write("spec.yaml", yaml);
    dsl::DiagnosticEngine diags(path, yaml);
    std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
    std::ostringstream errs;
    diags.print(errs);
    EXPECT_TRUE(spec) << errs.str();
    if (!spec)
      return runtime::Plan();
    compiler::PlanOptions opts;
    if (!fuse)
      opts.disabledPasses = {kPass};
    std::ostringstream err;
    Expected<runtime::Plan> plan = compiler::buildPlan(*spec, opts, err);
    EXPECT_TRUE(bool(plan)) << (plan ? "" : plan.status().message())
                            << err.str();
    return plan ? plan.take() : runtime::Plan();
  }

  static int countOps(const runtime::Plan &plan, const std::string &op) {
    int n = 0;
    for (const runtime::PlanStage &s : plan.stages)
      n += s.op == op;
    return n;
  }

  /// Runs `yaml` fused and unfused at 1 and 2 threads; all four runs must
  /// give the same bytes and drop the same records.
  void expectSameOutput(const std::string &yaml, int expectFused,
                        int64_t expectSkipped) {
    runtime::Plan fused = build(yaml, true);
    runtime::Plan unfused = build(yaml, false);
    ASSERT_EQ(countOps(fused, "decode_random_resized_crop"), expectFused);
    ASSERT_EQ(countOps(unfused, "decode_random_resized_crop"), 0);
    ASSERT_EQ(countOps(unfused, "decode_image"), expectFused);
    std::string reference;
    for (int threads : {1, 2})
      for (const runtime::Plan *plan : {&unfused, &fused}) {
        runtime::RunOptions o;
        o.threads = threads;
        runtime::RunStats stats;
        std::vector<Output> outs = runAll(*plan, o, &stats);
        ASSERT_FALSE(outs.empty());
        std::string bytes = allBytes(outs);
        if (reference.empty())
          reference = bytes;
        EXPECT_TRUE(bytes == reference)
            << (plan == &fused ? "fused" : "unfused") << " at " << threads
            << " threads differs";
        // The cut JPEG is dropped by both, once per epoch.
        int64_t skipped = 0;
        for (const runtime::StageStats &s : stats.stages)
          for (const auto &reason : s.skipped)
            skipped += reason.second;
        EXPECT_EQ(skipped, expectSkipped) << stats.accounting();
      }
  }

  TempDir dir_;
};

TEST_F(FuseDecodeCropTest, ImagenetStyleOutputIsIdentical) {
  expectSameOutput(
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
      1, 2);
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
