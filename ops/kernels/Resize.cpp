//===- Resize.cpp - Bilinear, nearest and area resize ---------------------===//
//
// torch-compatible resizes of u8/f32 image views (Image.h states the
// semantics) and the resize op; the antialiased bilinear filter is in
// ResizeAntialias.cpp, the templates both use in ImageResample.h.
//
//===----------------------------------------------------------------------===//

#include "ImageResample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

template <typename T, int FixedC>
void resizeBilinearImpl(View<T> src, T *dst, int64_t outH, int64_t outW) {
  int64_t rowLen = outW * src.c;
  bilinearRows<T, FixedC>(
      src, outH, outW, false,
      [&](int64_t oy, float wy0, const float *r0, float wy1, const float *r1) {
        T *out = dst + oy * rowLen;
        // Contiguous and branch-free: vectorizes (checked with
        // -Rpass=loop-vectorize, width 4 on baseline x86-64).
        for (int64_t i = 0; i < rowLen; ++i)
          out[i] = storePixel<T>(wy0 * r0[i] + wy1 * r1[i]);
      });
}

template <typename T>
void resizeBilinear(View<T> src, T *dst, int64_t outH, int64_t outW) {
  switch (src.c) {
  case 1:
    return resizeBilinearImpl<T, 1>(src, dst, outH, outW);
  case 3:
    return resizeBilinearImpl<T, 3>(src, dst, outH, outW);
  case 4:
    return resizeBilinearImpl<T, 4>(src, dst, outH, outW);
  default:
    return resizeBilinearImpl<T, 0>(src, dst, outH, outW);
  }
}

/// torch's nearest_idx: the source index is floor(dst * scale) with a float
/// scale, so some sizes pick a neighbour of the exact floor(dst * in / out);
/// matching torch matters more here than the exact rational.
int64_t nearestIndex(int64_t dst, int64_t in, int64_t out) {
  if (in == out)
    return dst;
  if (out == 2 * in)
    return dst >> 1;
  float scale = static_cast<float>(in) / static_cast<float>(out);
  int64_t i = static_cast<int64_t>(std::floor(static_cast<float>(dst) * scale));
  return std::min(i, in - 1);
}

template <typename T>
void resizeNearest(View<T> src, T *dst, int64_t outH, int64_t outW) {
  std::vector<int64_t> xoff(outW);
  for (int64_t ox = 0; ox < outW; ++ox)
    xoff[ox] = nearestIndex(ox, src.w, outW) * src.c;
  size_t pixelBytes = src.c * sizeof(T);
  for (int64_t oy = 0; oy < outH; ++oy) {
    int64_t sy = nearestIndex(oy, src.h, outH);
    const T *row = src.data + sy * src.rowStride;
    T *out = dst + oy * outW * src.c;
    if (src.c == 1) {
      for (int64_t ox = 0; ox < outW; ++ox)
        out[ox] = row[xoff[ox]];
    } else {
      for (int64_t ox = 0; ox < outW; ++ox)
        std::memcpy(out + ox * src.c, row + xoff[ox], pixelBytes);
    }
  }
}

template <typename T>
void resizeArea(View<T> src, T *dst, int64_t outH, int64_t outW) {
  int64_t C = src.c;
  std::vector<double> colSum(src.w * C);
  for (int64_t oy = 0; oy < outH; ++oy) {
    int64_t y0 = oy * src.h / outH;
    int64_t y1 = ((oy + 1) * src.h + outH - 1) / outH;
    std::fill(colSum.begin(), colSum.end(), 0.0);
    for (int64_t y = y0; y < y1; ++y) {
      const T *row = src.data + y * src.rowStride;
      for (int64_t i = 0; i < src.w * C; ++i)
        colSum[i] += static_cast<double>(row[i]);
    }
    T *out = dst + oy * outW * C;
    for (int64_t ox = 0; ox < outW; ++ox) {
      int64_t x0 = ox * src.w / outW;
      int64_t x1 = ((ox + 1) * src.w + outW - 1) / outW;
      double inv = 1.0 / static_cast<double>((y1 - y0) * (x1 - x0));
      for (int64_t ch = 0; ch < C; ++ch) {
        double s = 0;
        for (int64_t x = x0; x < x1; ++x)
          s += colSum[x * C + ch];
        double v = s * inv;
        if constexpr (std::is_same_v<T, uint8_t>)
          out[ox * C + ch] =
              static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.0, 255.0));
        else
          out[ox * C + ch] = static_cast<T>(v);
      }
    }
  }
}

} // namespace

Taps bilinearTaps(int64_t in, int64_t out) {
  Taps t;
  t.in = in;
  t.i0.resize(out);
  t.i1.resize(out);
  t.w0.resize(out);
  t.w1.resize(out);
  float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    float src = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0.f)
      src = 0.f;
    int64_t i = static_cast<int64_t>(src);
    if (i > in - 1)
      i = in - 1;
    float lambda = src - static_cast<float>(i);
    t.i0[o] = i;
    t.i1[o] = i < in - 1 ? i + 1 : i;
    t.w1[o] = lambda;
    t.w0[o] = 1.f - lambda;
  }
  return t;
}

/// horizontalPass for u8 RGB, writing three planes (R, G, B; outW floats
/// each, `plane` floats apart) instead of interleaved pixels, so that what
/// follows runs over contiguous floats per channel. Same values.
void horizontalPassPlanar(const uint8_t *src, const Taps &tx, float *row,
                          int64_t plane) {
  int64_t outW = static_cast<int64_t>(tx.i0.size());
  auto pixel = [&](int64_t ox) {
    const uint8_t *p0 = src + tx.i0[ox] * 3;
    const uint8_t *p1 = src + tx.i1[ox] * 3;
    float w0 = tx.w0[ox], w1 = tx.w1[ox];
    for (int64_t ch = 0; ch < 3; ++ch)
      row[ch * plane + ox] =
          w0 * static_cast<float>(p0[ch]) + w1 * static_cast<float>(p1[ch]);
  };
  int64_t ox = 0;
#if defined(__SSE2__)
  // Four output pixels per step: each blended in SSE lanes as in
  // horizontalPass ([R, G, B, next byte]), then a 4x4 transpose turns the
  // four pixels into a vector per channel.
  for (; ox + 4 <= outW; ox += 4) {
    bool inside = true;
    for (int64_t k = ox; k < ox + 4; ++k)
      inside &= blendRgbInside(tx, k);
    if (!inside) {
      for (int64_t k = ox; k < ox + 4; ++k)
        pixel(k);
      continue;
    }
    __m128 v0 = blendRgb(src, tx, ox), v1 = blendRgb(src, tx, ox + 1),
           v2 = blendRgb(src, tx, ox + 2), v3 = blendRgb(src, tx, ox + 3);
    _MM_TRANSPOSE4_PS(v0, v1, v2, v3);
    _mm_storeu_ps(row + ox, v0);
    _mm_storeu_ps(row + plane + ox, v1);
    _mm_storeu_ps(row + 2 * plane + ox, v2);
  }
#endif
  for (; ox < outW; ++ox)
    pixel(ox);
}

/// Mirrors taps left-right: output column o then samples where column
/// out - 1 - o did, which is how a resize writes a flipped image for free.
void mirrorTaps(Taps &t) {
  std::reverse(t.i0.begin(), t.i0.end());
  std::reverse(t.i1.begin(), t.i1.end());
  std::reverse(t.w0.begin(), t.w0.end());
  std::reverse(t.w1.begin(), t.w1.end());
}

template <typename T>
void resizeView(View<T> src, T *dst, int64_t outH, int64_t outW,
                Interpolation interp) {
  switch (interp) {
  case Interpolation::Nearest:
    return resizeNearest(src, dst, outH, outW);
  case Interpolation::Bilinear:
    return resizeBilinear(src, dst, outH, outW);
  case Interpolation::Area:
    return resizeArea(src, dst, outH, outW);
  }
}

template void resizeView<uint8_t>(View<uint8_t>, uint8_t *, int64_t, int64_t,
                                  Interpolation);
template void resizeView<float>(View<float>, float *, int64_t, int64_t,
                                Interpolation);

/// resizeView with antialiasing for bilinear (other filters ignore it).
template <typename T>
void resizeViewAa(View<T> src, T *dst, int64_t outH, int64_t outW,
                  Interpolation interp, bool antialias) {
  if (!antialias || interp != Interpolation::Bilinear)
    return resizeView(src, dst, outH, outW, interp);
  if constexpr (std::is_same_v<T, uint8_t>) {
    const size_t rowLen = static_cast<size_t>(outW * src.c);
    antialiasU8(src, outH, outW, /*planar=*/false, /*mirror=*/false,
                [&](int64_t oy, const uint8_t *row) {
                  std::memcpy(dst + oy * rowLen, row, rowLen);
                });
  } else {
    antialiasF32(src, dst, outH, outW);
  }
}

template void resizeViewAa<uint8_t>(View<uint8_t>, uint8_t *, int64_t, int64_t,
                                    Interpolation, bool);
template void resizeViewAa<float>(View<float>, float *, int64_t, int64_t,
                                  Interpolation, bool);

Status checkOutSize(const char *op, int64_t outH, int64_t outW) {
  if (outH <= 0 || outW <= 0 || outH > kMaxImageSide || outW > kMaxImageSide)
    return Status::error(std::string(op) + ": output size " +
                         std::to_string(outH) + "x" + std::to_string(outW) +
                         " must be between 1 and " +
                         std::to_string(kMaxImageSide) + " per side");
  return Status::ok();
}

/// Resizes the box of a u8/f32 image (any rank 2/3 tensor) into a new tensor.
Expected<Tensor> resizeBox(const Tensor &image, const Dims &d, CropBox box,
                           int64_t outH, int64_t outW, Interpolation interp,
                           bool antialias) {
  Tensor out = Tensor::empty(image.elem(), imageShape(image, outH, outW));
  int64_t offset = (box.y * d.w + box.x) * d.c;
  if (image.elem() == ElemType::U8) {
    View<uint8_t> v{image.data<uint8_t>() + offset, box.h, box.w, d.c,
                    d.w * d.c};
    resizeViewAa(v, out.mutableData<uint8_t>(), outH, outW, interp, antialias);
  } else {
    View<float> v{image.data<float>() + offset, box.h, box.w, d.c, d.w * d.c};
    resizeViewAa(v, out.mutableData<float>(), outH, outW, interp, antialias);
  }
  return out;
}

Status checkResizable(const Tensor &image, const char *op) {
  if (image.elem() != ElemType::U8 && image.elem() != ElemType::F32)
    return Status::error(std::string(op) + ": expects a u8 or f32 image, got " +
                         image.type().str() + " (cast it first)");
  return Status::ok();
}

} // namespace imaging

using namespace imaging;

Expected<Tensor> resize(const Tensor &image, int64_t outHeight,
                        int64_t outWidth, Interpolation interpolation,
                        bool antialias) {
  Expected<Dims> d = imageDims(image, "resize");
  if (!d)
    return d.status();
  if (Status s = checkResizable(image, "resize"); !s)
    return s;
  if (Status s = checkOutSize("resize", outHeight, outWidth); !s)
    return s;
  if (d->h == 0 || d->w == 0)
    return Status::error("resize: cannot resize an empty image " +
                         image.type().str());
  return resizeBox(image, *d, {0, 0, d->h, d->w}, outHeight, outWidth,
                   interpolation, antialias);
}

} // namespace kernels
} // namespace sluice
