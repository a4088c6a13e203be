//===- kernels_bench.cpp - Throughput of the ops/ kernels -----------------===//
//
// Google Benchmark. Images are synthetic and encoded here (TurboJPEG,
// libpng) at ImageNet-like sizes. Link with benchmark::benchmark (this file
// has its own main) and sluice_ops.
//
//===----------------------------------------------------------------------===//

#include "sluice/ops/Expr.h"
#include "sluice/ops/Random.h"
#include "sluice/ops/kernels/Categorical.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Image.h"
#include "sluice/ops/kernels/Layout.h"

#include <benchmark/benchmark.h>
#include <png.h>
#include <turbojpeg.h>

#include <cmath>
#include <csetjmp>
#include <cstdlib>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::kernels;

namespace {

/// A photo-like test image: smooth shading plus texture, so JPEG sizes and
/// entropy-decoding costs resemble real photos more than a flat gradient.
std::vector<uint8_t> photo(int h, int w) {
  std::vector<uint8_t> px(size_t(h) * w * 3);
  Rng rng(1, 0, 0, 0);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        double v = 128 +
                   90 * std::sin(x * 0.013 * (c + 1)) * std::cos(y * 0.021) +
                   24 * (rng.uniformDouble() - 0.5);
        px[(size_t(y) * w + x) * 3 + c] =
            uint8_t(std::fmin(255, std::fmax(0, v)));
      }
  return px;
}

std::string jpegOf(int h, int w, int quality) {
  std::vector<uint8_t> px = photo(h, w);
  tjhandle tj = tjInitCompress();
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, px.data(), w, w * 3, h, TJPF_RGB, &buf, &size, TJSAMP_420,
                  quality, 0) != 0)
    std::abort();
  std::string out(reinterpret_cast<char *>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

void pngWrite(png_structp png, png_bytep data, size_t n) {
  static_cast<std::string *>(png_get_io_ptr(png))
      ->append(reinterpret_cast<char *>(data), n);
}
void pngFlush(png_structp) {}

bool pngEncodeRows(png_structp png, png_infop info, std::string *out, int h,
                   int w, uint8_t *px) {
  if (setjmp(png_jmpbuf(png)))
    return false;
  png_set_write_fn(png, out, pngWrite, pngFlush);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y)
    png_write_row(png, px + size_t(y) * w * 3);
  png_write_end(png, nullptr);
  return true;
}

std::string pngOf(int h, int w) {
  std::vector<uint8_t> px = photo(h, w);
  std::string out;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (!pngEncodeRows(png, info, &out, h, w, px.data()))
    std::abort();
  png_destroy_write_struct(&png, &info);
  return out;
}

Tensor u8Image(int h, int w) {
  std::vector<uint8_t> px = photo(h, w);
  Tensor t = Tensor::empty(ElemType::U8, {h, w, 3});
  std::copy(px.begin(), px.end(), t.mutableData<uint8_t>());
  return t;
}

//===----------------------------------------------------------------------===//
// Decode
//===----------------------------------------------------------------------===//

void BM_DecodeJpeg(benchmark::State &state) {
  int h = int(state.range(0)), w = int(state.range(1));
  std::string jpeg = jpegOf(h, w, 90);
  for (auto _ : state) {
    Expected<Tensor> img = decodeImage(jpeg, 3);
    benchmark::DoNotOptimize(img->raw());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * int64_t(h) * w * 3);
  state.counters["jpeg_bytes"] = double(jpeg.size());
}
BENCHMARK(BM_DecodeJpeg)
    ->Args({375, 500})
    ->Args({224, 224})
    ->Args({1080, 1440});

void BM_DecodePng(benchmark::State &state) {
  int h = int(state.range(0)), w = int(state.range(1));
  std::string png = pngOf(h, w);
  for (auto _ : state) {
    Expected<Tensor> img = decodeImage(png, 3);
    benchmark::DoNotOptimize(img->raw());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * int64_t(h) * w * 3);
}
BENCHMARK(BM_DecodePng)->Args({375, 500});

/// decode_image + random_resized_crop(224), unfused (two kernels).
void BM_DecodeThenRandomResizedCrop(benchmark::State &state) {
  std::string jpeg = jpegOf(375, 500, 90);
  RandomResizedCropParams p;
  uint64_t index = 0;
  for (auto _ : state) {
    Rng rng(42, 0, index++, 1);
    Expected<Tensor> img = decodeImage(jpeg, 3);
    Expected<Tensor> out = randomResizedCrop(*img, p, rng);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeThenRandomResizedCrop);

/// The fused kernel, exact (arg 0) or with DCT-domain downscaling (arg 1).
void BM_DecodeRandomResizedCropFused(benchmark::State &state) {
  int h = int(state.range(0)), w = int(state.range(1));
  DecodeOptions opts;
  opts.allowDctScaling = state.range(2) != 0;
  std::string jpeg = jpegOf(h, w, 90);
  RandomResizedCropParams p;
  uint64_t index = 0;
  for (auto _ : state) {
    Rng rng(42, 0, index++, 1);
    Expected<Tensor> out = decodeRandomResizedCrop(jpeg, 3, p, rng, opts);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeRandomResizedCropFused)
    ->Args({375, 500, 0})
    ->Args({375, 500, 1})
    ->Args({1080, 1440, 0})
    ->Args({1080, 1440, 1});

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

void BM_Resize(benchmark::State &state) {
  auto interp = static_cast<Interpolation>(state.range(0));
  bool f32 = state.range(1) != 0;
  Tensor img = u8Image(375, 500);
  if (f32)
    img = *cast(img, ElemType::F32);
  for (auto _ : state) {
    Expected<Tensor> out = resize(img, 224, 224, interp);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * int64_t(224) * 224 * 3 *
                          (f32 ? 4 : 1));
}
BENCHMARK(BM_Resize)
    ->ArgNames({"interp", "f32"})
    ->Args({int(Interpolation::Bilinear), 0})
    ->Args({int(Interpolation::Bilinear), 1})
    ->Args({int(Interpolation::Nearest), 0})
    ->Args({int(Interpolation::Area), 0});

/// Antialiased bilinear (PIL's filter) from a crop-sized u8 RGB image to
/// 224x224, with the AVX2 passes (simd 1) or the portable ones (simd 0).
void BM_ResizeAntialias(benchmark::State &state) {
  Tensor img = u8Image(state.range(0), state.range(1));
  setImageSimd(state.range(2) != 0);
  for (auto _ : state) {
    Expected<Tensor> out =
        resize(img, 224, 224, Interpolation::Bilinear, /*antialias=*/true);
    benchmark::DoNotOptimize(out->raw());
  }
  setImageSimd(true);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeAntialias)
    ->ArgNames({"h", "w", "simd"})
    ->Args({300, 300, 1})
    ->Args({300, 300, 0})
    ->Args({180, 200, 1})
    ->Args({450, 400, 1});

//===----------------------------------------------------------------------===//
// Element-wise and layout
//===----------------------------------------------------------------------===//

void BM_NormalizeU8(benchmark::State &state) {
  int64_t side = state.range(0);
  Tensor img = Tensor::zeros(ElemType::U8, {side, side, 3});
  for (int64_t i = 0; i < side * side * 3; ++i)
    img.mutableData<uint8_t>()[i] = uint8_t(i * 7);
  std::vector<double> mean = {123.675, 116.28, 103.53};
  std::vector<double> stddev = {58.395, 57.12, 57.375};
  for (auto _ : state) {
    Expected<Tensor> out = normalize(img, mean, stddev);
    benchmark::DoNotOptimize(out->raw());
  }
  // Input + output bytes moved.
  state.SetBytesProcessed(state.iterations() * side * side * 3 * 5);
  state.SetItemsProcessed(state.iterations() * side * side * 3);
}
BENCHMARK(BM_NormalizeU8)->Arg(224)->Arg(2048);

void BM_NormalizeF32(benchmark::State &state) {
  Tensor img = *cast(u8Image(224, 224), ElemType::F32);
  for (auto _ : state) {
    Expected<Tensor> out = normalize(img, {0.5, 0.4, 0.3}, {0.2, 0.2, 0.2});
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetBytesProcessed(state.iterations() * 224 * 224 * 3 * 8);
  state.SetItemsProcessed(state.iterations() * 224 * 224 * 3);
}
BENCHMARK(BM_NormalizeF32);

void BM_TransposeHwcToChw(benchmark::State &state) {
  bool f32 = state.range(0) != 0;
  Tensor img = u8Image(224, 224);
  if (f32)
    img = *cast(img, ElemType::F32);
  for (auto _ : state) {
    Expected<Tensor> out = hwcToChw(img);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(img.nbytes()) * 2);
}
BENCHMARK(BM_TransposeHwcToChw)->ArgName("f32")->Arg(0)->Arg(1);

void BM_Transpose2D(benchmark::State &state) {
  Tensor m = Tensor::zeros(ElemType::F32, {2048, 2048});
  for (auto _ : state) {
    Expected<Tensor> out = transpose(m, {1, 0});
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(m.nbytes()) * 2);
}
BENCHMARK(BM_Transpose2D);

void BM_Stack(benchmark::State &state) {
  std::vector<Tensor> items(128, Tensor::zeros(ElemType::F32, {3, 224, 224}));
  for (auto _ : state) {
    Expected<Tensor> out = stack(items);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetBytesProcessed(state.iterations() * 128 * 3 * 224 * 224 * 4 * 2);
}
BENCHMARK(BM_Stack);

//===----------------------------------------------------------------------===//
// Categorical and expressions
//===----------------------------------------------------------------------===//

void BM_HashBucketStrings(benchmark::State &state) {
  std::vector<std::string> cats;
  for (int i = 0; i < 26 * 4096; ++i)
    cats.push_back(std::to_string(0x68fd1e64 + i * 977));
  Tensor t = Tensor::strings(ElemType::String, {int64_t(cats.size())}, cats);
  for (auto _ : state) {
    Expected<Tensor> out = hashBucket(t, 1000000);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetItemsProcessed(state.iterations() * int64_t(cats.size()));
}
BENCHMARK(BM_HashBucketStrings);

void BM_ExprMap(benchmark::State &state) {
  ExprError err;
  ExprPtr e = parseExpr("log(max(x, 0) + 1)", err);
  Expected<CompiledExpr> ce = CompiledExpr::compileMap(*e, ElemType::F32);
  Tensor dense = Tensor::empty(ElemType::F32, {4096, 13});
  for (int64_t i = 0; i < dense.numElements(); ++i)
    dense.mutableData<float>()[i] = float(i % 1000) - 100;
  for (auto _ : state) {
    Expected<Tensor> out = ce->map(dense);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetItemsProcessed(state.iterations() * dense.numElements());
}
BENCHMARK(BM_ExprMap);

} // namespace

BENCHMARK_MAIN();
