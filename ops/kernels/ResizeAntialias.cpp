//===- ResizeAntialias.cpp - PIL's antialiased bilinear resize ------------===//
//
// The triangle-filter resample of PIL's ImagingResample (torchvision's
// antialias=True): tap tables, the horizontal and vertical passes in
// scalar code and AVX2 behind a run-time CPU check, and the f32 variant.
// antialiasU8, which drives the passes, is a template in ImageResample.h.
//
//===----------------------------------------------------------------------===//

#include "ImageResample.h"
#include "sluice/ops/Switches.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

AaTaps antialiasTaps(int64_t in, int64_t out, double in0, double in1) {
  AaTaps t;
  antialiasTapsInto(t, in, out, in0, in1);
  return t;
}

/// PIL's clip8: the fixed-point sum to a saturated byte.
inline uint8_t aaClip8(int32_t v) {
  v >>= kAaBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

} // namespace

/// PIL's precompute_coeffs (box [0, in)) and normalize_coeffs_8bpc.
/// Into `t`, whose vectors keep their capacity from call to call (the
/// fused crop builds two sets per image).
void antialiasTapsInto(AaTaps &t, int64_t in, int64_t out, double in0,
                       double in1) {
  t.in = in;
  t.out = out;
  t.whole = in0 == 0.0 && in1 == static_cast<double>(in);
  double scale = (in1 - in0) / static_cast<double>(out);
  double filterScale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterScale; // the triangle's support is 1
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.start.resize(out);
  t.count.resize(out);
  t.kd.assign(static_cast<size_t>(out * t.ksize), 0.0);
  t.ki.assign(static_cast<size_t>(out * t.ksize), 0);
  double ss = 1.0 / filterScale;
  for (int64_t o = 0; o < out; ++o) {
    double center = in0 + (static_cast<double>(o) + 0.5) * scale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0)
      xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in)
      xmax = in;
    if (xmin > in - 1) // a box past the edge: the last pixel
      xmin = in - 1;
    if (xmax <= xmin)
      xmax = xmin + 1;
    xmax -= xmin;
    double *k = t.kd.data() + o * t.ksize;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      double a = (static_cast<double>(x + xmin) - center + 0.5) * ss;
      if (a < 0.0)
        a = -a;
      double w = a < 1.0 ? 1.0 - a : 0.0;
      k[x] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x)
      if (ww != 0.0)
        k[x] /= ww;
    int32_t *ki = t.ki.data() + o * t.ksize;
    for (int64_t x = 0; x < xmax; ++x)
      ki[x] = k[x] < 0 ? static_cast<int32_t>(-0.5 + k[x] * (1 << kAaBits))
                       : static_cast<int32_t>(0.5 + k[x] * (1 << kAaBits));
    t.start[o] = static_cast<int32_t>(xmin);
    t.count[o] = static_cast<int32_t>(xmax);
  }
}

/// One source row of u8 with C channels through the horizontal taps, in
/// PIL's order of operations.
void aaHorizontalScalar(const uint8_t *__restrict src, int64_t C,
                        const AaTaps &t, AaLayout lay,
                        uint8_t *__restrict dst) {
  const int32_t half = 1 << (kAaBits - 1);
  for (int64_t o = 0; o < t.out; ++o) {
    const uint8_t *p = src + t.start[o] * C;
    const int32_t *w = t.ki.data() + o * t.ksize;
    uint8_t *d = dst + lay.at(o, t.out);
    for (int64_t ch = 0; ch < C; ++ch) {
      int32_t s = half;
      for (int32_t x = 0, n = t.count[o]; x < n; ++x)
        s += p[x * C + ch] * w[x];
      d[ch * lay.channel] = aaClip8(s);
    }
  }
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))

bool aaRgbSimdTaps(const AaTaps &t, AaRgbSimdTaps &s) {
  int64_t window = 0;
  for (int32_t n : t.count)
    window = std::max<int64_t>(window, n);
  window += window & 1;
  if (window > t.in || t.out < 2)
    return false;
  s.window = window;
  s.pairs = t.out / 2;
  s.wstart.resize(t.out);
  s.lo.assign(static_cast<size_t>(s.pairs * (window / 2) * 16), 0);
  s.hi.assign(s.lo.size(), 0);
  s.tail = s.pairs;
  for (int64_t o = 0; o < t.out; ++o) {
    int64_t start = std::min<int64_t>(t.start[o], t.in - window);
    s.wstart[o] = static_cast<int32_t>(start);
    if (start + window >= t.in && o / 2 < s.tail)
      s.tail = o / 2;
    if (o / 2 >= s.pairs)
      continue;
    int64_t shift = t.start[o] - start;
    for (int64_t x = 0; x < t.count[o]; ++x) {
      int32_t w = t.ki[o * t.ksize + x];
      if (w < 0 || w > (1 << kAaBits))
        return false; // the triangle's weights never are
      int64_t tap = shift + x;
      size_t at = size_t(((o / 2) * (window / 2) + tap / 2) * 16 + (o & 1) * 8 +
                         (tap & 1));
      for (int lane = 0; lane < 3; ++lane) {
        s.lo[at + 2 * lane] = static_cast<int16_t>(w & 2047);
        s.hi[at + 2 * lane] = static_cast<int16_t>(w >> 11);
      }
    }
  }
  return true;
}

/// The sums of output pair q of the AVX2 horizontal pass, rounded and
/// shifted: R, G, B in lanes 0-2 of each 128-bit half (output 2q low,
/// 2q+1 high).
/// Taps2 > 0: the tap pairs per window as a constant (the loop unrolls).
template <int Taps2>
__attribute__((target("avx2"), always_inline)) inline __m256i
aaPairSumsAvx2(const uint8_t *__restrict src, const AaRgbSimdTaps &s, int64_t q,
               int64_t taps2, __m256i spread, __m256i half) {
  if constexpr (Taps2 > 0)
    taps2 = Taps2;
  const uint8_t *p0 = src + int64_t(s.wstart[2 * q]) * 3;
  const uint8_t *p1 = src + int64_t(s.wstart[2 * q + 1]) * 3;
  const int16_t *lo = s.lo.data() + q * taps2 * 16;
  const int16_t *hi = s.hi.data() + q * taps2 * 16;
  __m256i accLo = _mm256_setzero_si256(), accHi = _mm256_setzero_si256();
  for (int64_t j = 0; j < taps2; ++j) {
    __m256i v = _mm256_set_m128i(
        _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p1 + 6 * j)),
        _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p0 + 6 * j)));
    v = _mm256_shuffle_epi8(v, spread);
    accLo = _mm256_add_epi32(
        accLo, _mm256_madd_epi16(
                   v, _mm256_loadu_si256(
                          reinterpret_cast<const __m256i *>(lo + 16 * j))));
    accHi = _mm256_add_epi32(
        accHi, _mm256_madd_epi16(
                   v, _mm256_loadu_si256(
                          reinterpret_cast<const __m256i *>(hi + 16 * j))));
  }
  __m256i acc = _mm256_add_epi32(
      _mm256_add_epi32(_mm256_slli_epi32(accHi, 11), accLo), half);
  return _mm256_srai_epi32(acc, kAaBits);
}

/// Output pixels 2q and 2q+1 of u8 RGB in AVX2 (one per 128-bit half):
/// 8 bytes per tap pair (two pixels and 2 bytes after them), spread to
/// 16-bit [R0 R1 G0 G1 B0 B1 0 0], multiply-added with the split weights.
/// Planar and Mirror are AaLayout's, as template arguments so that the
/// stores are a few plain moves.
template <bool Planar, bool Mirror, int Taps2>
__attribute__((target("avx2"))) void
aaHorizontalRgbAvx2T(const uint8_t *__restrict src, const AaTaps &t,
                     const AaRgbSimdTaps &s, uint8_t *__restrict dst) {
  const __m256i spread = _mm256_setr_epi8(
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, //
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m256i half = _mm256_set1_epi32(1 << (kAaBits - 1));
  // [R0 G0 B0 0 R1 G1 B1 0] (output 2q's bytes, then 2q+1's) to the order
  // the layout stores: planar [R R G G B B], interleaved [R G B R G B], the
  // two outputs swapped when mirrored.
  const __m128i order =
      Planar ? (Mirror ? _mm_setr_epi8(4, 0, 5, 1, 6, 2, -1, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1)
                       : _mm_setr_epi8(0, 4, 1, 5, 2, 6, -1, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1))
             : (Mirror ? _mm_setr_epi8(4, 5, 6, 0, 1, 2, -1, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1)
                       : _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1));
  // Four outputs (two pairs) at a time share the rounding, packing and
  // stores: [o, o+1, o+2, o+3] as RGB0 words to the layout's order.
  const __m128i order4 =
      Planar ? (Mirror ? _mm_setr_epi8(12, 8, 4, 0, 13, 9, 5, 1, 14, 10, 6, 2,
                                       -1, -1, -1, -1)
                       : _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14,
                                       -1, -1, -1, -1))
             : (Mirror ? _mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2,
                                       -1, -1, -1, -1)
                       : _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14,
                                       -1, -1, -1, -1));
  const int64_t taps2 = s.window / 2;
  const int64_t outW = t.out;
  uint8_t *planeG = dst + outW, *planeB = dst + 2 * outW;
  int64_t q = 0;
  for (; q + 1 < s.tail; q += 2) {
    __m256i a = aaPairSumsAvx2<Taps2>(src, s, q, taps2, spread, half);
    __m256i b = aaPairSumsAvx2<Taps2>(src, s, q + 1, taps2, spread, half);
    // Saturate as clip8: int32 -> int16 -> u8. Low half: outputs 2q and
    // 2q+2, high half: 2q+1 and 2q+3.
    __m256i bytes8 =
        _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_setzero_si256());
    __m128i four = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes8),
                                      _mm256_extracti128_si256(bytes8, 1));
    four = _mm_shuffle_epi8(four, order4);
    int64_t first = Mirror ? outW - 4 - 2 * q : 2 * q;
    if constexpr (Planar) {
      uint32_t r = uint32_t(_mm_cvtsi128_si32(four));
      uint32_t g = uint32_t(_mm_extract_epi32(four, 1));
      uint32_t bl = uint32_t(_mm_extract_epi32(four, 2));
      std::memcpy(dst + first, &r, 4);
      std::memcpy(planeG + first, &g, 4);
      std::memcpy(planeB + first, &bl, 4);
    } else {
      uint64_t head = uint64_t(_mm_cvtsi128_si64(four));
      uint32_t rest = uint32_t(_mm_extract_epi32(four, 2));
      std::memcpy(dst + 3 * first, &head, 8);
      std::memcpy(dst + 3 * first + 8, &rest, 4);
    }
  }
  for (; q < s.tail; ++q) {
    // madd left R in lane 0, G in 1, B in 2 of each half.
    __m256i acc = aaPairSumsAvx2<Taps2>(src, s, q, taps2, spread, half);
    // Saturate to 0..255 as clip8 does: int32 -> int16 -> u8.
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc),
                                    _mm256_setzero_si256());
    __m128i both = _mm_unpacklo_epi32(_mm256_castsi256_si128(b),
                                      _mm256_extracti128_si256(b, 1));
    both = _mm_shuffle_epi8(both, order);
    uint64_t bytes = static_cast<uint64_t>(_mm_cvtsi128_si64(both));
    // The first output of the pair in memory order.
    int64_t first = Mirror ? outW - 2 - 2 * q : 2 * q;
    if constexpr (Planar) {
      uint16_t r = uint16_t(bytes), g = uint16_t(bytes >> 16),
               bl = uint16_t(bytes >> 32);
      std::memcpy(dst + first, &r, 2);
      std::memcpy(planeG + first, &g, 2);
      std::memcpy(planeB + first, &bl, 2);
    } else {
      uint32_t head = uint32_t(bytes);
      uint16_t rest = uint16_t(bytes >> 32);
      std::memcpy(dst + 3 * first, &head, 4);
      std::memcpy(dst + 3 * first + 4, &rest, 2);
    }
  }
  // The last outputs, whose windows reach the row's end, the portable way.
  const int32_t halfS = 1 << (kAaBits - 1);
  for (int64_t o = 2 * s.tail; o < outW; ++o) {
    const uint8_t *p = src + t.start[o] * 3;
    const int32_t *w = t.ki.data() + o * t.ksize;
    int32_t r = halfS, g = halfS, bl = halfS;
    for (int32_t x = 0, n = t.count[o]; x < n; ++x) {
      r += p[3 * x] * w[x];
      g += p[3 * x + 1] * w[x];
      bl += p[3 * x + 2] * w[x];
    }
    int64_t at = Mirror ? outW - 1 - o : o;
    if constexpr (Planar) {
      dst[at] = aaClip8(r);
      planeG[at] = aaClip8(g);
      planeB[at] = aaClip8(bl);
    } else {
      dst[3 * at] = aaClip8(r);
      dst[3 * at + 1] = aaClip8(g);
      dst[3 * at + 2] = aaClip8(bl);
    }
  }
}

template <int Taps2>
void aaHorizontalRgbAvx2N(const uint8_t *src, const AaTaps &t,
                          const AaRgbSimdTaps &s, AaLayout lay, uint8_t *dst) {
  bool planar = lay.pixel == 1;
  if (planar)
    lay.mirror ? aaHorizontalRgbAvx2T<true, true, Taps2>(src, t, s, dst)
               : aaHorizontalRgbAvx2T<true, false, Taps2>(src, t, s, dst);
  else
    lay.mirror ? aaHorizontalRgbAvx2T<false, true, Taps2>(src, t, s, dst)
               : aaHorizontalRgbAvx2T<false, false, Taps2>(src, t, s, dst);
}

/// Windows of 2 to 8 taps (shrinking by up to ~3.5x, and every
/// enlargement) get a kernel with the tap loop unrolled.
void aaHorizontalRgbAvx2(const uint8_t *src, const AaTaps &t,
                         const AaRgbSimdTaps &s, AaLayout lay, uint8_t *dst) {
  switch (s.window / 2) {
  case 1:
    return aaHorizontalRgbAvx2N<1>(src, t, s, lay, dst);
  case 2:
    return aaHorizontalRgbAvx2N<2>(src, t, s, lay, dst);
  case 3:
    return aaHorizontalRgbAvx2N<3>(src, t, s, lay, dst);
  case 4:
    return aaHorizontalRgbAvx2N<4>(src, t, s, lay, dst);
  default:
    return aaHorizontalRgbAvx2N<0>(src, t, s, lay, dst);
  }
}

std::atomic<bool> &simdAllowed() {
  // SLUICE_NO_IMAGE_SIMD=1 turns the AVX2 paths off (same bytes).
  static std::atomic<bool> allowed{!switchedOff("SLUICE_NO_IMAGE_SIMD")};
  return allowed;
}

bool cpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && simdAllowed().load(std::memory_order_relaxed);
}
#else
std::atomic<bool> &simdAllowed() {
  // SLUICE_NO_IMAGE_SIMD=1 turns the AVX2 paths off (same bytes).
  static std::atomic<bool> allowed{!switchedOff("SLUICE_NO_IMAGE_SIMD")};
  return allowed;
}
bool cpuHasAvx2() { return false; }
#endif

/// One output row of the vertical pass: `n` rows of `len` bytes, `stride`
/// apart from `src`, weighted by `k`, summed in `acc` (len int32s).
SLUICE_AA_CLONES
void aaVerticalRow(const uint8_t *src, size_t stride, const int32_t *k,
                   int32_t n, int64_t len, int32_t *__restrict acc,
                   uint8_t *__restrict dst) {
  const int32_t half = 1 << (kAaBits - 1);
  for (int64_t i = 0; i < len; ++i)
    acc[i] = half;
  for (int32_t y = 0; y < n; ++y) {
    const uint8_t *__restrict r = src + y * stride;
    const int32_t w = k[y];
    for (int64_t i = 0; i < len; ++i)
      acc[i] += static_cast<int32_t>(r[i]) * w;
  }
  for (int64_t i = 0; i < len; ++i) {
    int32_t v = acc[i] >> kAaBits;
    dst[i] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
/// aaVerticalRow in AVX2 with the sums in registers: 32 bytes of the row at
/// a time, two source rows per step interleaved as 16-bit pairs and
/// multiply-added with the pair's weights split as in the horizontal pass
/// (w = hi * 2^11 + lo, both below 2^12), so the int32 sums are exactly
/// aaVerticalRow's. False (nothing written) for weights outside [0, 2^22].
__attribute__((target("avx2"))) bool
aaVerticalRowAvx2(const uint8_t *src, size_t stride, const int32_t *k,
                  int32_t n, int64_t len, uint8_t *__restrict dst) {
  constexpr int32_t kMaxPairs = 64;
  if (n > 2 * kMaxPairs)
    return false;
  __m256i whi[kMaxPairs], wlo[kMaxPairs];
  for (int32_t y = 0; y < n; y += 2) {
    int32_t w0 = k[y], w1 = y + 1 < n ? k[y + 1] : 0;
    if (w0 < 0 || w0 > (1 << kAaBits) || w1 < 0 || w1 > (1 << kAaBits))
      return false;
    whi[y / 2] = _mm256_set1_epi32(
        int32_t((uint32_t(w1 >> 11) << 16) | uint32_t(w0 >> 11)));
    wlo[y / 2] = _mm256_set1_epi32(
        int32_t((uint32_t(w1 & 2047) << 16) | uint32_t(w0 & 2047)));
  }
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(1 << (kAaBits - 1));
  int64_t i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
    __m256i l0 = zero, l1 = zero, l2 = zero, l3 = zero;
    for (int32_t y = 0; y < n; y += 2) {
      __m256i a = _mm256_loadu_si256(
          reinterpret_cast<const __m256i *>(src + y * stride + i));
      __m256i b = y + 1 < n
                      ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(
                            src + (y + 1) * stride + i))
                      : zero;
      __m256i alo = _mm256_unpacklo_epi8(a, zero);
      __m256i ahi = _mm256_unpackhi_epi8(a, zero);
      __m256i blo = _mm256_unpacklo_epi8(b, zero);
      __m256i bhi = _mm256_unpackhi_epi8(b, zero);
      // Per 128-bit lane: bytes 0-3, 4-7, 8-11, 12-15 as (a, b) pairs.
      __m256i p0 = _mm256_unpacklo_epi16(alo, blo);
      __m256i p1 = _mm256_unpackhi_epi16(alo, blo);
      __m256i p2 = _mm256_unpacklo_epi16(ahi, bhi);
      __m256i p3 = _mm256_unpackhi_epi16(ahi, bhi);
      const __m256i wh = whi[y / 2], wl = wlo[y / 2];
      h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(p0, wh));
      h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(p1, wh));
      h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(p2, wh));
      h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(p3, wh));
      l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(p0, wl));
      l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(p1, wl));
      l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(p2, wl));
      l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(p3, wl));
    }
    auto finish = [&](__m256i h, __m256i l) __attribute__((target("avx2"))) {
      return _mm256_srai_epi32(
          _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), half),
          kAaBits);
    };
    __m256i v0 = finish(h0, l0), v1 = finish(h1, l1), v2 = finish(h2, l2),
            v3 = finish(h3, l3);
    // clip8: int32 -> int16 -> u8, back in byte order (the unpacks and
    // packs work within 128-bit lanes alike).
    __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(v0, v1),
                                        _mm256_packs_epi32(v2, v3));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), bytes);
  }
  const int32_t halfS = 1 << (kAaBits - 1);
  for (; i < len; ++i) {
    int32_t acc = halfS;
    for (int32_t y = 0; y < n; ++y)
      acc += static_cast<int32_t>(src[y * stride + i]) * k[y];
    dst[i] = aaClip8(acc);
  }
  return true;
}
#endif

Scratch &antialiasScratch() {
  thread_local Scratch s;
  return s;
}

/// Antialiased resize of an f32 view, as PIL's 32-bit float mode: double
/// weights and sums, a float intermediate.
void antialiasF32(View<float> src, float *dst, int64_t outH, int64_t outW) {
  const int64_t C = src.c;
  AaTaps tx = antialiasTaps(src.w, outW, 0.0, double(src.w));
  AaTaps ty = antialiasTaps(src.h, outH, 0.0, double(src.h));
  int64_t y0 = ty.start[0];
  int64_t y1 = ty.start[outH - 1] + ty.count[outH - 1];
  const int64_t rowLen = outW * C;
  std::vector<float> inter(static_cast<size_t>(rowLen * (y1 - y0)));
  for (int64_t y = y0; y < y1; ++y) {
    const float *in = src.data + y * src.rowStride;
    float *o = inter.data() + (y - y0) * rowLen;
    for (int64_t ox = 0; ox < outW; ++ox) {
      const double *w = tx.kd.data() + ox * tx.ksize;
      const float *p = in + int64_t(tx.start[ox]) * C;
      for (int64_t ch = 0; ch < C; ++ch) {
        double s = 0.0;
        for (int32_t x = 0; x < tx.count[ox]; ++x)
          s += static_cast<double>(p[x * C + ch]) * w[x];
        o[ox * C + ch] = tx.identity() ? p[ch] : static_cast<float>(s);
      }
    }
  }
  for (int64_t oy = 0; oy < outH; ++oy) {
    const double *w = ty.kd.data() + oy * ty.ksize;
    const float *first = inter.data() + (ty.start[oy] - y0) * rowLen;
    float *o = dst + oy * rowLen;
    for (int64_t i = 0; i < rowLen; ++i) {
      if (ty.identity()) {
        o[i] = first[i];
        continue;
      }
      double s = 0.0;
      for (int32_t y = 0; y < ty.count[oy]; ++y)
        s += static_cast<double>(first[y * rowLen + i]) * w[y];
      o[i] = static_cast<float>(s);
    }
  }
}

} // namespace imaging

using namespace imaging;

void setImageSimd(bool enabled) {
  simdAllowed().store(enabled, std::memory_order_relaxed);
}

} // namespace kernels
} // namespace sluice
