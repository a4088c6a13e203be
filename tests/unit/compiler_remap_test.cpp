//===- compiler_remap_test.cpp - Remap kernels = the unfused steps --------===//
//
// sluice-fuse-remaps and the remap kernels it leads to must not change a
// byte or a draw: image pipelines over PNGs written here (RGB and gray, of
// several sizes, one too small for its crop so that on_error: skip drops
// it) run with the pass and generated code on, with the pass on and the
// runtime's kernels (the kept steps one after another), with the pass off,
// and with every pass off, at 1 and 2 threads; all outputs must be equal.
// The chains cover every remap op (center_crop, random_crop with padding,
// random_flip along both axes, transpose, pad) between value steps of
// several element types (cast, clamp, fill_missing, map, normalize).
//
//===----------------------------------------------------------------------===//
#include "compiler_test_util.h"
#include "runtime_test_util.h"

#include "sluice/compiler/Codegen.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/runtime/RemapChain.h"

#include <png.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

using namespace sluice;
using namespace sluice::rttest;

namespace {

const std::string kPass = "sluice-fuse-remaps";

/// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char *name, const char *value) : name(name) {
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { ::unsetenv(name); }
  const char *name;
};

std::string png(int h, int w, int channels, int seed) {
  std::vector<uint8_t> px(size_t(h) * w * channels);
  uint32_t state = uint32_t(seed) * 2654435761u + 7;
  for (size_t i = 0; i < px.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    px[i] = uint8_t((i * 7 + (state >> 24)) & 0xFF);
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(
      png_image_write_get_memory_size(image, size, 0, px.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, px.data(),
                                        0, nullptr));
  out.resize(size);
  return out;
}

class RemapFusionTest : public ::testing::Test {
protected:
  void SetUp() override {
    int i = 0;
    for (auto [h, w] : std::vector<std::pair<int, int>>{
             {40, 48}, {37, 53}, {64, 33}, {33, 33}, {90, 70}, {41, 45}}) {
      dir_.write("img/a/" + std::to_string(i) + ".png", png(h, w, 3, i));
      ++i;
    }
    for (auto [h, w] : std::vector<std::pair<int, int>>{{44, 36}, {35, 50}}) {
      dir_.write("img/g/" + std::to_string(i) + ".png", png(h, w, 1, i));
      ++i;
    }
    dir_.write("img/s/small.png", png(20, 60, 3, 99)); // < the 32x32 crop
  }

  std::string spec(const std::string &channels, const std::string &steps) {
    return "pipeline: remap_test\n"
           "seed: 5\n"
           "source:\n"
           "  image_folder: {root: " +
           dir_.path() +
           "/img, extensions: [png], on_error: skip}\n"
           "steps:\n"
           "  - decode_image: {field: data, as: image, channels: " +
           channels + "}\n" + steps +
           "  - select: [image, label]\n"
           "  - batch: {size: 4}\n"
           "epochs: 2\n";
  }

  /// Runs `yaml` in every configuration; all must give the reference's
  /// bytes. `fused` is the stage sluice-fuse-remaps must make and compile
  /// (`byPass`; else a lone step compiled as a chain of one, which --no-jit
  /// turns off).
  void expectSame(const std::string &yaml, const std::string &fused,
                  bool byPass = true) {
    std::string path = dir_.write("spec.yaml", yaml);
    runtime::Plan off = sluice::testing::planOfSpecFile(path, {"all"});
    runtime::RunOptions ref;
    ref.threads = 1;
    std::string reference = allBytes(runAll(off, ref));
    ASSERT_GT(reference.size(), 1000u);

    runtime::Plan on = sluice::testing::planOfSpecFile(path);
    std::vector<std::string> compiled = compiler::compiledSteps(on);
    EXPECT_NE(std::find(compiled.begin(), compiled.end(), fused),
              compiled.end())
        << "'" << fused << "' is not compiled";
    runtime::Plan noRemap = sluice::testing::planOfSpecFile(path, {kPass});
    for (const runtime::PlanStep &s : noRemap.steps)
      if (byPass)
        EXPECT_NE(s.name, fused) << "fused with " << kPass << " off";

    for (const runtime::Plan *plan : {&on, &noRemap}) {
      Expected<runtime::Plan> back =
          runtime::Plan::deserialize(plan->serialize());
      ASSERT_TRUE(bool(back)) << back.status().message();
      auto jit = compiler::JitKernels::compile(*back);
      ASSERT_TRUE(bool(jit)) << jit.status().message();
      for (int threads : {1, 2}) {
        runtime::RunOptions withJit, without;
        withJit.threads = without.threads = threads;
        withJit.binder = (*jit)->binder();
        std::string what = std::string(plan == &on ? "pass on" : "pass off") +
                           ", " + std::to_string(threads) + " threads";
        EXPECT_TRUE(allBytes(runAll(*back, withJit)) == reference)
            << "codegen on, " << what << ": output bytes differ";
        EXPECT_TRUE(allBytes(runAll(*back, without)) == reference)
            << "codegen off, " << what << ": output bytes differ";
      }
    }
    // The generator's switches: the same bytes with each of them off.
    for (const char *off :
         {"SLUICE_NO_FLIP_VERSIONS", "SLUICE_NO_NARROW_RANGES"}) {
      std::unique_ptr<compiler::JitKernels> kernels;
      {
        ScopedEnv env(off, "1");
        compiler::CodegenOptions opts;
        opts.useCache = false;
        auto jit = compiler::JitKernels::compile(on, opts);
        ASSERT_TRUE(bool(jit)) << jit.status().message();
        kernels = jit.take();
      }
      runtime::RunOptions withJit;
      withJit.threads = 2;
      withJit.binder = kernels->binder();
      EXPECT_TRUE(allBytes(runAll(on, withJit)) == reference)
          << off << "=1: output bytes differ";
    }
  }

  sluice::testing::TempDir dir_;
};

TEST_F(RemapFusionTest, CenterCropFlipNormalizeChw) {
  expectSame(spec("3", "  - resize: {field: image, size: [36, 40]}\n"
                       "  - center_crop: {field: image, size: [32, 30]}\n"
                       "  - random_flip: {field: image, axis: width}\n"
                       "  - normalize: {field: image, mean: [123.675, 116.28, "
                       "103.53], std: [58.395, 57.12, 57.375]}\n"
                       "  - transpose: {field: image, to: CHW}\n"),
             "center_crop+random_flip+normalize+transpose");
}

TEST_F(RemapFusionTest, SmallImageTakesTheUnfusedStepsAndIsSkipped) {
  // No resize: small.png (20x60) is smaller than the crop; the fused stage
  // hands it to the unfused center_crop, whose error on_error: skip counts.
  expectSame(spec("3", "  - center_crop: {field: image, size: [32, 32]}\n"
                       "  - random_flip: {field: image, axis: height, p: 0.7}\n"
                       "  - cast: {field: image, dtype: f32}\n"),
             "center_crop+random_flip+cast");
}

TEST_F(RemapFusionTest, RandomCropWithPaddingPadAndValueSteps) {
  expectSame(spec("3", "  - random_crop: {field: image, size: [24, 20], "
                       "padding: 5}\n"
                       "  - random_flip: {field: image}\n"
                       "  - pad: {field: image, padding: [1, 2, 3, 4], value: "
                       "201}\n"
                       "  - cast: {field: image, dtype: i16}\n"
                       "  - map: {field: image, expr: \"x * 3 - 200\"}\n"
                       "  - clamp: {field: image, min: -50, max: 400}\n"
                       "  - transpose: {field: image, perm: [1, 0, 2]}\n"),
             "random_crop+random_flip+pad+cast+map+clamp+transpose");
}

TEST_F(RemapFusionTest, GrayImagesF64AndPadAfterNormalize) {
  expectSame(spec("1", "  - resize: {field: image, size: [30, 28]}\n"
                       "  - cast: {field: image, dtype: f64}\n"
                       "  - map: {field: image, expr: \"x / 7\"}\n"
                       "  - random_crop: {field: image, size: [26, 26], "
                       "padding: 2}\n"
                       "  - normalize: {field: image, mean: 0.5, std: 2}\n"
                       "  - pad: {field: image, padding: [2, 0, 0, 3], value: "
                       "-1.5}\n"
                       "  - fill_missing: {field: image, value: 0}\n"),
             "cast+map+random_crop+normalize+pad+fill_missing");
}

TEST_F(RemapFusionTest, F16ChainWithPadCropFlipAndValueSteps) {
  // f16 elements travel as their bits; the value steps convert them with
  // Scalar.h's rules (x * 0.37 rounds in f16, the pad value rounds to f16,
  // x / (x - 2.5) makes infinities and NaNs, fill_missing replaces those).
  expectSame(spec("3", "  - cast: {field: image, dtype: f16}\n"
                       "  - random_crop: {field: image, size: [24, 20], "
                       "padding: 3}\n"
                       "  - map: {field: image, expr: \"x * 0.37 - 20\"}\n"
                       "  - random_flip: {field: image}\n"
                       "  - pad: {field: image, padding: [1, 2, 3, 4], value: "
                       "1000.3}\n"
                       "  - map: {field: image, expr: \"x / (x - 2.5)\"}\n"
                       "  - clamp: {field: image, min: -0.3, max: 30.1}\n"
                       "  - fill_missing: {field: image, value: 0.1}\n"
                       "  - normalize: {field: image, mean: [1, 2, 3], "
                       "std: [3, 2, 0.7]}\n"
                       "  - transpose: {field: image, to: CHW}\n"),
             "cast+random_crop+map+random_flip+pad+map.2+clamp+fill_missing+"
             "normalize+transpose");
}

TEST_F(RemapFusionTest, Bf16AndF16FromFlipsAlongBothAxes) {
  // Two flips: four copies of the loop nest, one per pair of draws; the
  // normalize's narrowing to bf16 / f16 sees u8 values only (ties, with
  // mean -0.5, for bf16; exact zeros, with an integer mean, for f16).
  expectSame(spec("3", "  - resize: {field: image, size: [30, 34]}\n"
                       "  - random_flip: {field: image, axis: width}\n"
                       "  - random_flip: {field: image, axis: height, p: 0.3}\n"
                       "  - normalize: {field: image, mean: [-0.5, 116.28, "
                       "103.53], std: [1, 57.12, 0.001], dtype: bf16}\n"
                       "  - transpose: {field: image, to: CHW}\n"),
             "random_flip+random_flip.2+normalize+transpose");
  expectSame(spec("3", "  - center_crop: {field: image, size: [32, 32]}\n"
                       "  - random_flip: {field: image, axis: width}\n"
                       "  - normalize: {field: image, mean: [128, 0, 7], "
                       "std: [64, 0.001, 1e30], dtype: f16}\n"),
             "center_crop+random_flip+normalize");
}

TEST_F(RemapFusionTest, BoolChain) {
  // A bool image from a comparison, transposed and padded as bytes, then
  // read back as numbers by a cast (crop and flip take no bool images).
  expectSame(spec("1", "  - resize: {field: image, size: [30, 28]}\n"
                       "  - map: {field: image, expr: \"x > 100\"}\n"
                       "  - transpose: {field: image, perm: [1, 0, 2]}\n"
                       "  - pad: {field: image, padding: [2, 2, 0, 1], value: "
                       "1}\n"
                       "  - map: {field: image, expr: \"not x\"}\n"
                       "  - cast: {field: image, dtype: f16}\n"
                       "  - map: {field: image, expr: \"x - 0.25\"}\n"),
             "map+transpose+pad+map.2+cast+map.3");
}

TEST_F(RemapFusionTest, BucketizeAndHashBucketJoinTheChain) {
  // Per record (the shuffle keeps the steps before the batch): the ids of
  // a flipped, padded image, and the buckets of a transposed one.
  expectSame(spec("3", "  - resize: {field: image, size: [30, 28]}\n"
                       "  - random_flip: {field: image}\n"
                       "  - pad: {field: image, padding: 2, value: 7}\n"
                       "  - hash_bucket: {field: image, buckets: 13}\n"
                       "  - shuffle: {buffer: 3}\n"),
             "random_flip+pad+hash_bucket");
  expectSame(spec("1", "  - resize: {field: image, size: [30, 28]}\n"
                       "  - cast: {field: image, dtype: f32}\n"
                       "  - transpose: {field: image, perm: [1, 0, 2]}\n"
                       "  - bucketize: {field: image, boundaries: [10, 99.5, "
                       "200]}\n"
                       "  - shuffle: {buffer: 3}\n"),
             "cast+transpose+bucketize");
}

TEST_F(RemapFusionTest, LoneNormalizePerChannel) {
  // A lone normalize compiles as a chain of one step (its constants depend
  // on the channel, the last index); here per record and, moved behind the
  // batch by sluice-fuse-map-batch, per batch.
  expectSame(spec("3", "  - resize: {field: image, size: [30, 28]}\n"
                       "  - normalize: {field: image, mean: [120, 110.5, 100], "
                       "std: [60, 0.5, 3]}\n"),
             "normalize", /*byPass=*/false);
}

TEST_F(RemapFusionTest, ARecordOfAnotherShapeThanTheTypeTakesTheUnfusedSteps) {
  // The kernel has the type's sizes (resize's 30x28, 3 channels) compiled
  // in. Handed a record of another size, the bound kernel must not write
  // 30x28 values into it: it gives the unfused steps' result.
  std::string path = dir_.write(
      "spec.yaml",
      spec("3", "  - resize: {field: image, size: [30, 28]}\n"
                "  - random_flip: {field: image, axis: width, p: 1}\n"
                "  - normalize: {field: image, mean: [120, 110.5, 100], "
                "std: [60, 0.5, 3]}\n"
                "  - transpose: {field: image, to: CHW}\n"));
  runtime::Plan plan = sluice::testing::planOfSpecFile(path);
  const runtime::PlanStep *fused = nullptr;
  for (const runtime::PlanStep &s : plan.steps)
    if (s.name == "random_flip+normalize+transpose")
      fused = &s;
  ASSERT_NE(fused, nullptr);
  auto jit = compiler::JitKernels::compile(plan);
  ASSERT_TRUE(bool(jit)) << jit.status().message();
  auto bound = (*jit)->binder()(*fused);
  ASSERT_TRUE(bound.has_value() && bool(*bound));
  Expected<runtime::ElementFn> unfused = runtime::bindFused(*fused, plan);
  ASSERT_TRUE(bool(unfused)) << unfused.status().message();
  int at = fused->inputType.indexOf("image");
  ASSERT_GE(at, 0);
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{30, 28, 3}, std::vector<int64_t>{17, 40, 3}}) {
    Record r;
    r.index = 7;
    for (const Field &f : fused->inputType.fields())
      r.fields.push_back(Tensor::empty(
          f.type.elem, f.name == "image" ? shape : std::vector<int64_t>{}));
    Tensor &img = r.fields[size_t(at)];
    for (int64_t i = 0; i < img.numElements(); ++i)
      img.mutableData<uint8_t>()[i] = uint8_t(i * 37 % 251);
    Record viaKernel = r, viaSteps = r;
    runtime::ElementContext ctx;
    ctx.seed = 5;
    ASSERT_TRUE(bool((**bound)(viaKernel, ctx)));
    ASSERT_TRUE(bool((*unfused)(viaSteps, ctx)));
    const Tensor &a = viaKernel.fields[size_t(at)],
                 &b = viaSteps.fields[size_t(at)];
    EXPECT_EQ(a.shape(), (std::vector<int64_t>{3, shape[0], shape[1]}));
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0)
        << shape[0] << "x" << shape[1];
  }
}

/// The ImageNet-style epilogue after the fused decode + random resized
/// crop: with the code generator on (PlanOptions::codegen) it is one
/// generated remap kernel after the resize; with it off (--no-jit), with
/// SLUICE_NO_GENERATED_EPILOGUE=1 and with sluice-fuse-remaps off it is
/// folded into the hand-written resize. Every variant gives the bytes of
/// the unfused steps.
TEST_F(RemapFusionTest, ImageEpilogueGeneratedWithCodegenFoldedWithout) {
  for (bool antialias : {true, false}) {
    for (const std::string epilogue :
         {"  - random_flip: {field: image, axis: width, p: 0.5}\n"
          "  - normalize: {field: image, mean: [123.675, 116.28, 103.53], "
          "std: [58.395, 57.12, 57.375]}\n"
          "  - transpose: {field: image, to: CHW}\n",
          "  - normalize: {field: image, mean: [120, 110.5, 100], "
          "std: [60, 0.5, 3]}\n"
          "  - random_flip: {field: image, axis: width, p: 0.5}\n",
          "  - normalize: {field: image, mean: [120], std: [60]}\n"}) {
      SCOPED_TRACE(epilogue + (antialias ? " antialias" : " no antialias"));
      std::string path = dir_.write(
          "spec.yaml",
          spec("3", "  - random_resized_crop: {field: image, size: [32, 24], "
                    "scale: [0.3, 1.0], antialias: " +
                        std::string(antialias ? "true" : "false") + "}\n" +
                        epilogue));
      runtime::Plan off = sluice::testing::planOfSpecFile(path, {"all"});
      runtime::RunOptions ref;
      ref.threads = 1;
      std::string reference = allBytes(runAll(off, ref));
      ASSERT_GT(reference.size(), 1000u);

      auto names = [](const runtime::Plan &p) {
        std::vector<std::string> v;
        for (const runtime::PlanStep &s : p.steps)
          v.push_back(s.name);
        return v;
      };
      auto has = [](const std::vector<std::string> &v, const std::string &n) {
        return std::find(v.begin(), v.end(), n) != v.end();
      };
      runtime::Plan generated =
          sluice::testing::planOfSpecFile(path, {}, /*codegen=*/true);
      runtime::Plan folded = sluice::testing::planOfSpecFile(path);
      runtime::Plan noRemap =
          sluice::testing::planOfSpecFile(path, {kPass}, /*codegen=*/true);
      // The crop writes u8 HWC; the epilogue is one compiled stage.
      EXPECT_TRUE(has(names(generated), "decode_image+random_resized_crop"));
      std::vector<std::string> compiled = compiler::compiledSteps(generated);
      bool epilogueCompiled = false;
      for (const runtime::PlanStep &s : generated.steps)
        if (s.name != "decode_image+random_resized_crop" &&
            !has(names(folded), s.name) && s.name != "select" &&
            s.name != "batch")
          epilogueCompiled = has(compiled, s.name);
      EXPECT_TRUE(epilogueCompiled) << "no compiled epilogue stage";
      for (const runtime::Plan *p : {&folded, &noRemap})
        EXPECT_FALSE(has(names(*p), "decode_image+random_resized_crop"))
            << "the epilogue is not folded";
      {
        ScopedEnv env("SLUICE_NO_GENERATED_EPILOGUE", "1");
        runtime::Plan a =
            sluice::testing::planOfSpecFile(path, {}, /*codegen=*/true);
        EXPECT_EQ(names(a), names(folded));
      }

      for (const runtime::Plan *plan : {&generated, &folded, &noRemap}) {
        auto jit = compiler::JitKernels::compile(*plan);
        ASSERT_TRUE(bool(jit)) << jit.status().message();
        for (int threads : {1, 2}) {
          runtime::RunOptions withJit, without;
          withJit.threads = without.threads = threads;
          withJit.binder = (*jit)->binder();
          std::string what = std::string(plan == &generated ? "generated"
                                         : plan == &folded  ? "folded"
                                                            : "remaps off") +
                             ", " + std::to_string(threads) + " threads";
          EXPECT_TRUE(allBytes(runAll(*plan, withJit)) == reference)
              << "codegen on, " << what << ": output bytes differ";
          EXPECT_TRUE(allBytes(runAll(*plan, without)) == reference)
              << "codegen off, " << what << ": output bytes differ";
        }
      }
    }
  }
}

TEST_F(RemapFusionTest, TheChainLayoutNamesEveryNumber) {
  std::string path = dir_.write(
      "spec.yaml",
      spec("3", "  - random_crop: {field: image, size: [24, 20], padding: 5}\n"
                "  - random_flip: {field: image}\n"
                "  - transpose: {field: image, to: CHW}\n"));
  runtime::Plan plan = sluice::testing::planOfSpecFile(path);
  const runtime::PlanStep *fused = nullptr;
  for (const runtime::PlanStep &s : plan.steps)
    if (s.op == "fused_map")
      fused = &s;
  ASSERT_NE(fused, nullptr);
  Expected<runtime::RemapChain> chain = runtime::RemapChain::build(*fused);
  ASSERT_TRUE(bool(chain)) << chain.status().message();
  // dims 3 + draws 2, dims 3 + flip 1, dims 3, output dims 3.
  EXPECT_EQ(chain->paramCount(), 15u);
  Tensor img = Tensor::empty(ElemType::U8, {40, 48, 3});
  std::vector<int64_t> params(chain->paramCount()), shape;
  ASSERT_TRUE(chain->fill(img, 5, 0, 3, params.data(), shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 24, 20}));
  EXPECT_EQ(params[0], 40);
  EXPECT_GE(params[3], -5); // top, relative to the unpadded image
  EXPECT_LE(params[3], 40 + 5 - 24);
  EXPECT_TRUE(params[8] == 0 || params[8] == 1); // the flip
  // A record of another rank is left to the unfused steps.
  EXPECT_FALSE(chain->fill(Tensor::empty(ElemType::U8, {40, 48}), 5, 0, 3,
                           params.data(), shape));
  // A chain on two fields is no remap chain.
  runtime::PlanStep bad = *fused;
  bad.fused.back().params.set("field", Value::string("label"));
  EXPECT_FALSE(bool(runtime::RemapChain::build(bad)));
}

} // namespace
