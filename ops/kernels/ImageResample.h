//===- ImageResample.h - Resampling loops shared by the resizes -*- C++ -*-===//
//
// Private to ops/kernels: the row loops of the bilinear resize (torch's) and
// of the antialiased one (PIL's), as templates over the per-row callback, so
// that the plain resizes (Resize.cpp) and the fused epilogue
// (ImageEpilogue.cpp) write each output row where it belongs without an
// intermediate image. Their non-template parts live in Resize.cpp and
// ResizeAntialias.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_IMAGERESAMPLE_H
#define SLUICE_OPS_KERNELS_IMAGERESAMPLE_H

#include "ImageInternal.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h> // AVX2 kernels behind a run-time CPU check
#endif

namespace sluice {
namespace kernels {
namespace imaging {

//===----------------------------------------------------------------------===//
// Bilinear (Resize.cpp)
//===----------------------------------------------------------------------===//

/// Rounds to nearest, ties to even, and saturates to u8. The 1.5 * 2^23 trick
/// does the rounding in the FPU's default mode with plain SSE2 adds, so the
/// loop vectorizes without SSE4.1's roundps.
inline uint8_t toU8(float v) {
  v = v < 0.f ? 0.f : (v > 255.f ? 255.f : v);
  return static_cast<uint8_t>(static_cast<int>((v + 0x1.8p23f) - 0x1.8p23f));
}

template <typename T> inline T storePixel(float v) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return toU8(v);
  else
    return v;
}

/// Source index and weight of each output position along one axis (torch's
/// area_pixel_compute_source_index with align_corners=False, in float).
struct Taps {
  int64_t in = 0; ///< source size
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps bilinearTaps(int64_t in, int64_t out);

#if defined(__SSE2__)
/// The 4 bytes at p (an RGB pixel and the first byte after it) as floats.
inline __m128 widen4(const uint8_t *p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  const __m128i zero = _mm_setzero_si128();
  __m128i b = _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), zero);
  return _mm_cvtepi32_ps(_mm_unpacklo_epi16(b, zero));
}

/// Output pixel k of a horizontal pass over u8 RGB in SSE lanes: [R, G, B,
/// junk], with the scalar loop's float multiplies and add in its order.
/// Both source pixels need a pixel after them in the row (the 4th byte).
inline __m128 blendRgb(const uint8_t *src, const Taps &tx, int64_t k) {
  __m128 a = _mm_mul_ps(_mm_set1_ps(tx.w0[k]), widen4(src + tx.i0[k] * 3));
  __m128 b = _mm_mul_ps(_mm_set1_ps(tx.w1[k]), widen4(src + tx.i1[k] * 3));
  return _mm_add_ps(a, b);
}

/// Whether blendRgb may read output pixel k's source pixels.
inline bool blendRgbInside(const Taps &tx, int64_t k) {
  return std::max(tx.i0[k], tx.i1[k]) + 1 < tx.in;
}
#endif

/// Interpolates one source row horizontally into `row` (outW * C floats).
template <typename T, int FixedC>
void horizontalPass(const T *src, int64_t c, const Taps &tx, float *row) {
  const int64_t C = FixedC > 0 ? FixedC : c;
  int64_t outW = static_cast<int64_t>(tx.i0.size());
  auto pixel = [&](int64_t ox) {
    const T *p0 = src + tx.i0[ox] * C;
    const T *p1 = src + tx.i1[ox] * C;
    float w0 = tx.w0[ox], w1 = tx.w1[ox];
    for (int64_t ch = 0; ch < C; ++ch)
      row[ox * C + ch] =
          w0 * static_cast<float>(p0[ch]) + w1 * static_cast<float>(p1[ch]);
  };
  int64_t ox = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, uint8_t> && FixedC == 3) {
    // One pixel per step in SSE lanes: load 4 bytes (the pixel and the
    // first byte of the next one), widen them to 4 floats, blend, and store
    // 4 floats; the 4th lane lands on the next output pixel, which is
    // written after it. The same float multiplies and add, in the same
    // order, as pixel(). Source pixels without a next one in the row, and
    // the last output pixel (nothing after it to overwrite the 4th lane),
    // take the scalar way.
    for (; ox + 1 < outW; ++ox) {
      if (blendRgbInside(tx, ox))
        _mm_storeu_ps(row + ox * 3, blendRgb(src, tx, ox));
      else
        pixel(ox);
    }
  }
#endif
  for (; ox < outW; ++ox)
    pixel(ox);
}

/// horizontalPass for u8 RGB, writing three planes (R, G, B; outW floats
/// each, `plane` floats apart) instead of interleaved pixels, so that what
/// follows runs over contiguous floats per channel. Same values.
void horizontalPassPlanar(const uint8_t *src, const Taps &tx, float *row,
                          int64_t plane);

/// Mirrors taps left-right: output column o then samples where column
/// out - 1 - o did, which is how a resize writes a flipped image for free.
void mirrorTaps(Taps &t);

/// The bilinear resize proper: horizontal pass per needed source row (each
/// computed once), then `emit(oy, wy0, r0, wy1, r1)` blends two of them
/// into output row oy.
template <typename T, int FixedC, bool Planar = false, typename Emit>
void bilinearRows(View<T> src, int64_t outH, int64_t outW, bool mirror,
                  Emit &&emit) {
  static_assert(!Planar || (std::is_same_v<T, uint8_t> && FixedC == 3),
                "planar rows are for u8 RGB");
  Taps ty = bilinearTaps(src.h, outH);
  Taps tx = bilinearTaps(src.w, outW);
  if (mirror)
    mirrorTaps(tx);
  int64_t rowLen = outW * src.c;
  std::vector<float> rows(2 * rowLen);
  float *r0 = rows.data(), *r1 = rows.data() + rowLen;
  auto pass = [&](int64_t y, float *row) {
    const T *in = src.data + y * src.rowStride;
    if constexpr (Planar)
      horizontalPassPlanar(in, tx, row, outW);
    else
      horizontalPass<T, FixedC>(in, src.c, tx, row);
  };
  int64_t have0 = -1, have1 = -1; // source rows now in r0 / r1
  for (int64_t oy = 0; oy < outH; ++oy) {
    int64_t y0 = ty.i0[oy], y1 = ty.i1[oy];
    if (have0 != y0) {
      if (have1 == y0) {
        std::swap(r0, r1);
        std::swap(have0, have1);
      } else {
        pass(y0, r0);
        have0 = y0;
      }
    }
    if (have1 != y1) {
      pass(y1, r1);
      have1 = y1;
    }
    emit(oy, ty.w0[oy], r0, ty.w1[oy], r1);
  }
}

//===----------------------------------------------------------------------===//
// Antialiased bilinear (ResizeAntialias.cpp)
//===----------------------------------------------------------------------===//

/// PIL's PRECISION_BITS for 8-bit images: 32 - 8 - 2.
constexpr int kAaBits = 22;

/// The taps of one axis: output o reads `count[o]` source pixels from
/// `start[o]`, weighted by row o of `k` (ksize entries, zero-padded).
struct AaTaps {
  int64_t in = 0, out = 0, ksize = 0;
  std::vector<int32_t> start, count;
  std::vector<double> kd;  ///< normalized weights (f32 images)
  std::vector<int32_t> ki; ///< kd in fixed point (u8 images)
  /// Whether the pass is the identity (no resampling on this axis).
  bool identity() const { return in == out && whole; }
  bool whole = true; ///< the box is [0, in)
};

void antialiasTapsInto(AaTaps &t, int64_t in, int64_t out, double in0,
                       double in1);

// The vertical pass is built for AVX2 as well as the baseline, picked at
// load time (its 32-bit multiplies vectorize only from SSE4.1). Not under
// ThreadSanitizer: clang instruments the clones' ifunc resolver, which the
// dynamic loader runs while relocating, before the TSan runtime exists
// (every program crashed in __tsan_func_entry before main).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_AA_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && defined(__clang__) && !defined(SLUICE_AA_NO_CLONES)
#define SLUICE_AA_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SLUICE_AA_CLONES
#endif

/// Where the horizontal pass writes channel c of output pixel o: at
/// `o' * pixel + c * channel` with o' = o, or outW - 1 - o when mirrored
/// (a flip folded into the pass). Interleaved: pixel C, channel 1; planar:
/// pixel 1, channel outW.
struct AaLayout {
  int64_t pixel = 3, channel = 1;
  bool mirror = false;
  int64_t at(int64_t o, int64_t outW) const {
    return (mirror ? outW - 1 - o : o) * pixel;
  }
};

/// One source row of u8 with C channels through the horizontal taps, in
/// PIL's order of operations.
void aaHorizontalScalar(const uint8_t *__restrict src, int64_t C,
                        const AaTaps &t, AaLayout lay, uint8_t *__restrict dst);

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))

/// The horizontal taps of u8 RGB for the AVX2 pass. Every output reads an
/// even-sized window of `window` pixels from `wstart[o]` (moved left from
/// PIL's start where needed; extra taps weigh 0, so the sums are PIL's).
/// Each 22-bit weight is split as hi * 2^11 + lo (both below 2^12), so that
/// pixel * weight sums come out of 16-bit multiply-adds exactly:
/// sum(p * w) = 2^11 * sum(p * hi) + sum(p * lo). For output pair q (outputs
/// 2q, 2q+1) and tap pair j, `lo`/`hi` hold 16 int16s: [w_j, w_j+1] three
/// times (R, G, B lanes) and [0, 0], for each of the two outputs.
/// `tail` is the first output pair whose windows need not have a pixel after
/// them in the row (the 8-byte loads read 2 bytes past a tap pair).
struct AaRgbSimdTaps {
  int64_t window = 0, pairs = 0, tail = 0;
  std::vector<int32_t> wstart;
  std::vector<int16_t> lo, hi;
};

bool aaRgbSimdTaps(const AaTaps &t, AaRgbSimdTaps &s);

void aaHorizontalRgbAvx2(const uint8_t *src, const AaTaps &t,
                         const AaRgbSimdTaps &s, AaLayout lay, uint8_t *dst);

/// aaVerticalRow in AVX2 with the sums in registers: 32 bytes of the row at
/// a time, two source rows per step interleaved as 16-bit pairs and
/// multiply-added with the pair's weights split as in the horizontal pass
/// (w = hi * 2^11 + lo, both below 2^12), so the int32 sums are exactly
/// aaVerticalRow's. False (nothing written) for weights outside [0, 2^22].
__attribute__((target("avx2"))) bool
aaVerticalRowAvx2(const uint8_t *src, size_t stride, const int32_t *k,
                  int32_t n, int64_t len, uint8_t *__restrict dst);

#endif

/// Whether the AVX2 paths may run: the CPU has AVX2 and SLUICE_NO_IMAGE_SIMD
/// / setImageSimd did not turn them off.
bool cpuHasAvx2();

/// One output row of the vertical pass: `n` rows of `len` bytes, `stride`
/// apart from `src`, weighted by `k`, summed in `acc` (len int32s).
SLUICE_AA_CLONES
void aaVerticalRow(const uint8_t *src, size_t stride, const int32_t *k,
                   int32_t n, int64_t len, int32_t *__restrict acc,
                   uint8_t *__restrict dst);

Scratch &antialiasScratch();

/// Antialiased resize of an f32 view, as PIL's 32-bit float mode: double
/// weights and sums, a float intermediate.
void antialiasF32(View<float> src, float *dst, int64_t outH, int64_t outW);

/// Antialiased resize of a u8 view: the horizontal pass over every source
/// row into a reused scratch image, then `emit(oy, row)` for each output
/// row of the vertical pass (outW * C bytes, valid during the call). With
/// `planar` (C == 3 only) a row holds the R, G and B rows one after the
/// other; with `mirror` it is flipped left-right.
template <typename Emit>
void antialiasU8(View<uint8_t> src, int64_t outH, int64_t outW, bool planar,
                 bool mirror, Emit &&emit, SourceBox box = {}) {
  const int64_t C = src.c;
  if (!box.set)
    box = {true, 0, 0, double(src.h), double(src.w)};
  // Per thread, so that their buffers are reused from image to image;
  // emit never resizes.
  thread_local AaTaps tx, ty;
  antialiasTapsInto(tx, src.w, outW, box.x0, box.x1);
  antialiasTapsInto(ty, src.h, outH, box.y0, box.y1);
  AaLayout lay;
  lay.pixel = planar ? 1 : C;
  lay.channel = planar ? outW : 1;
  lay.mirror = mirror;
  // The horizontal pass runs even when it is the identity if it has to
  // mirror or make planes.
  const bool horizontal = !tx.identity() || mirror || planar;
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
  thread_local AaRgbSimdTaps simdTaps;
  const bool simd = horizontal && C == 3 && !tx.identity() && cpuHasAvx2() &&
                    aaRgbSimdTaps(tx, simdTaps);
#endif
  // The rows the vertical taps read: all of them but for rounding at the
  // edges, as PIL's ybox_first/ybox_last.
  int64_t y0 = ty.start[0];
  int64_t y1 = ty.start[outH - 1] + ty.count[outH - 1];
  const size_t rowLen = static_cast<size_t>(outW * C);
  Scratch &scratch = antialiasScratch();
  const uint8_t *rows;
  size_t stride;
  // Layout of the scratch: intermediate rows, then one output row, then the
  // int32 accumulators (aligned).
  size_t interBytes = horizontal ? rowLen * size_t(y1 - y0) : 0;
  size_t accAt = (interBytes + rowLen + 63) & ~size_t(63);
  uint8_t *base = scratch.get(accAt + rowLen * sizeof(int32_t));
  uint8_t *outRow = base + interBytes;
  auto *acc = reinterpret_cast<int32_t *>(base + accAt);
  if (!horizontal) {
    rows = src.data + y0 * src.rowStride;
    stride = static_cast<size_t>(src.rowStride);
  } else {
    for (int64_t y = y0; y < y1; ++y) {
      const uint8_t *in = src.data + y * src.rowStride;
      uint8_t *o = base + size_t(y - y0) * rowLen;
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
      if (simd) {
        aaHorizontalRgbAvx2(in, tx, simdTaps, lay, o);
        continue;
      }
#endif
      aaHorizontalScalar(in, C, tx, lay, o);
    }
    rows = base;
    stride = rowLen;
  }
  for (int64_t oy = 0; oy < outH; ++oy) {
    const uint8_t *first = rows + size_t(ty.start[oy] - y0) * stride;
    if (ty.identity()) {
      emit(oy, first);
      continue;
    }
#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
    if (cpuHasAvx2() &&
        aaVerticalRowAvx2(first, stride, ty.ki.data() + oy * ty.ksize,
                          ty.count[oy], static_cast<int64_t>(rowLen), outRow)) {
      emit(oy, static_cast<const uint8_t *>(outRow));
      continue;
    }
#endif
    aaVerticalRow(first, stride, ty.ki.data() + oy * ty.ksize, ty.count[oy],
                  static_cast<int64_t>(rowLen), acc, outRow);
    emit(oy, static_cast<const uint8_t *>(outRow));
  }
  scratch.trim();
}

} // namespace imaging
} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_IMAGERESAMPLE_H
