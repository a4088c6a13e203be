//===- ImageEpilogue.cpp - Flip, normalize and CHW fused into a resize ----===//
//
// The epilogue (flip, normalize, CHW) that the fused decode+crop writes
// straight from each resized row, and resizeU8Into, which runs a resize
// with or without it; applyImageEpilogue runs it on a decoded image.
//
//===----------------------------------------------------------------------===//

#include "ImageResample.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Scalar.h"

#include <cstring>
#include <type_traits>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

//===----------------------------------------------------------------------===//
// Epilogue (flip, normalize, CHW) fused into the resize's output
//===----------------------------------------------------------------------===//

/// Writes row oy of the epilogue's result from one u8 row of W pixels of C
/// channels (read mirrored when `flip`) into `out`, an H x W x C image or
/// C planes of H x W.
template <typename OutT, int FixedC>
void epilogueRowImpl(const uint8_t *__restrict row, int64_t W, int64_t c,
                     int64_t oy, int64_t H, bool flip, const ImageEpilogue &e,
                     OutT *__restrict out) {
  const int64_t C = FixedC > 0 ? FixedC : c;
  // normalize's expression, per element: (float(x) - mean) * scale.
  auto value = [&](uint8_t v, float m, float sc) -> OutT {
    if constexpr (std::is_same_v<OutT, uint8_t>)
      return v;
    else
      return NormalizeOut<OutT>::store(
          normalizeValue(static_cast<float>(v), m, sc));
  };
  auto meanOf = [&](int64_t ch) { return e.normalize ? e.mean[ch] : 0.f; };
  auto scaleOf = [&](int64_t ch) { return e.normalize ? e.scale[ch] : 1.f; };
  if (e.chw) {
    for (int64_t ch = 0; ch < C; ++ch) {
      OutT *__restrict plane = out + (ch * H + oy) * W;
      const float m = meanOf(ch), sc = scaleOf(ch);
      if (flip)
        for (int64_t x = 0; x < W; ++x)
          plane[x] = value(row[(W - 1 - x) * C + ch], m, sc);
      else
        for (int64_t x = 0; x < W; ++x)
          plane[x] = value(row[x * C + ch], m, sc);
    }
    return;
  }
  OutT *__restrict o = out + oy * W * C;
  for (int64_t x = 0; x < W; ++x) {
    const uint8_t *p = row + (flip ? W - 1 - x : x) * C;
    for (int64_t ch = 0; ch < C; ++ch)
      o[x * C + ch] = value(p[ch], meanOf(ch), scaleOf(ch));
  }
}

template <typename OutT>
void epilogueRowT(const uint8_t *row, int64_t W, int64_t C, int64_t oy,
                  int64_t H, bool flip, const ImageEpilogue &e, OutT *out) {
  switch (C) {
  case 1:
    return epilogueRowImpl<OutT, 1>(row, W, C, oy, H, flip, e, out);
  case 3:
    return epilogueRowImpl<OutT, 3>(row, W, C, oy, H, flip, e, out);
  default:
    return epilogueRowImpl<OutT, 0>(row, W, C, oy, H, flip, e, out);
  }
}

/// Calls f(OutT *) with the output's storage: u8 without a normalize,
/// else float, HalfBits or Bf16Bits.
template <typename F>
void withOutput(const ImageEpilogue &e, Tensor &out, F &&f) {
  if (!e.normalize)
    return f(out.mutableData<uint8_t>());
  switch (e.normalizeTo) {
  case ElemType::F16:
    return f(reinterpret_cast<HalfBits *>(out.mutableRaw()));
  case ElemType::BF16:
    return f(reinterpret_cast<Bf16Bits *>(out.mutableRaw()));
  default:
    return f(out.mutableData<float>());
  }
}

void epilogueRow(const uint8_t *row, int64_t W, int64_t C, int64_t oy,
                 int64_t H, bool flip, const ImageEpilogue &e, Tensor &out) {
  withOutput(e, out,
             [&](auto *o) { epilogueRowT(row, W, C, oy, H, flip, e, o); });
}

/// One channel's row of normalized values (u8 in, OutT out).
template <typename OutT>
void normalizeRow(const uint8_t *__restrict in, OutT *__restrict o, int64_t n,
                  float m, float sc) {
  for (int64_t x = 0; x < n; ++x)
    o[x] = NormalizeOut<OutT>::store(
        normalizeValue(static_cast<float>(in[x]), m, sc));
}

Scratch &epilogueScratch() {
  thread_local Scratch s;
  return s;
}

} // namespace

/// The tensor the epilogue writes for an H x W x C u8 image.
Tensor epilogueOutput(int64_t h, int64_t w, int64_t c, const ImageEpilogue &e) {
  // Every pixel is written, so a batch row the runtime offers (its
  // OutputTargetScope, Allocation.h) is as good as a fresh tensor.
  ElemType elem = e.normalize ? e.normalizeTo : ElemType::U8;
  if (e.chw)
    return outputTensor(elem, {c, h, w});
  return outputTensor(elem, {h, w, c});
}

/// Resizes a u8 view into `out`: plainly (out is u8[outH, outW, C]), or
/// through the epilogue (out from epilogueOutput). Bilinear blends each
/// output row into a small u8 row that the epilogue then writes out, with
/// the flip folded into the horizontal taps; the other interpolations
/// resize into a scratch image first.
void resizeU8Into(View<uint8_t> src, Tensor &out, int64_t outH, int64_t outW,
                  Interpolation interp, bool antialias,
                  const ImageEpilogue *epi, SourceBox box) {
  if (!epi) {
    if (box.set && antialias && interp == Interpolation::Bilinear) {
      const size_t rowLen = static_cast<size_t>(outW * src.c);
      uint8_t *dst = out.mutableData<uint8_t>();
      antialiasU8(
          src, outH, outW, /*planar=*/false, /*mirror=*/false,
          [&](int64_t oy, const uint8_t *row) {
            std::memcpy(dst + oy * rowLen, row, rowLen);
          },
          box);
      return;
    }
    resizeViewAa(src, out.mutableData<uint8_t>(), outH, outW, interp,
                 antialias);
    return;
  }
  const int64_t C = src.c;
  const int64_t rowLen = outW * C;
  if (antialias && interp == Interpolation::Bilinear) {
    // Each antialiased u8 row goes through the epilogue as it is made; the
    // flip is folded into the horizontal pass. For CHW RGB the rows come
    // as three planes, so each channel's row is one contiguous loop.
    if (C == 3 && epi->chw) {
      withOutput(*epi, out, [&](auto *o) {
        using OutT = std::remove_pointer_t<decltype(o)>;
        antialiasU8(
            src, outH, outW, /*planar=*/true, epi->flip,
            [&](int64_t oy, const uint8_t *row) {
              for (int64_t ch = 0; ch < 3; ++ch) {
                const uint8_t *__restrict in = row + ch * outW;
                int64_t at = (ch * outH + oy) * outW;
                if constexpr (std::is_same_v<OutT, uint8_t>)
                  std::memcpy(o + at, in, static_cast<size_t>(outW));
                else
                  normalizeRow(in, o + at, outW, epi->mean[ch], epi->scale[ch]);
              }
            },
            box);
      });
      return;
    }
    antialiasU8(
        src, outH, outW, /*planar=*/false, epi->flip,
        [&](int64_t oy, const uint8_t *row) {
          epilogueRow(row, outW, C, oy, outH, /*flip=*/false, *epi, out);
        },
        box);
    return;
  }
  if (interp == Interpolation::Bilinear && C == 3 && epi->chw) {
    // Planar rows: blend, round to u8 and normalize each channel's row in
    // one contiguous loop, straight into its output plane.
    withOutput(*epi, out, [&](auto *out0) {
      using OutT = std::remove_pointer_t<decltype(out0)>;
      auto emit = [&](int64_t oy, float wy0, const float *r0, float wy1,
                      const float *r1) {
        for (int64_t ch = 0; ch < 3; ++ch) {
          const float *__restrict a = r0 + ch * outW;
          const float *__restrict b = r1 + ch * outW;
          OutT *__restrict o = out0 + (ch * outH + oy) * outW;
          if constexpr (std::is_same_v<OutT, uint8_t>) {
            for (int64_t x = 0; x < outW; ++x)
              o[x] = toU8(wy0 * a[x] + wy1 * b[x]);
          } else {
            const float m = epi->mean[ch], sc = epi->scale[ch];
            for (int64_t x = 0; x < outW; ++x)
              o[x] = NormalizeOut<OutT>::store(normalizeValue(
                  static_cast<float>(toU8(wy0 * a[x] + wy1 * b[x])), m, sc));
          }
        }
      };
      bilinearRows<uint8_t, 3, /*Planar=*/true>(src, outH, outW, epi->flip,
                                                emit);
    });
    return;
  }
  if (interp == Interpolation::Bilinear) {
    std::vector<uint8_t> u8row(static_cast<size_t>(rowLen));
    auto emit = [&](int64_t oy, float wy0, const float *r0, float wy1,
                    const float *r1) {
      uint8_t *__restrict u = u8row.data();
      for (int64_t i = 0; i < rowLen; ++i)
        u[i] = toU8(wy0 * r0[i] + wy1 * r1[i]);
      epilogueRow(u, outW, C, oy, outH, /*flip=*/false, *epi, out);
    };
    if (C == 3)
      bilinearRows<uint8_t, 3>(src, outH, outW, epi->flip, emit);
    else if (C == 1)
      bilinearRows<uint8_t, 1>(src, outH, outW, epi->flip, emit);
    else
      bilinearRows<uint8_t, 0>(src, outH, outW, epi->flip, emit);
    return;
  }
  Scratch &scratch = epilogueScratch();
  uint8_t *tmp = scratch.get(static_cast<size_t>(rowLen * outH));
  resizeView(src, tmp, outH, outW, interp);
  for (int64_t oy = 0; oy < outH; ++oy)
    epilogueRow(tmp + oy * rowLen, outW, C, oy, outH, epi->flip, *epi, out);
  scratch.trim();
}

} // namespace imaging

using namespace imaging;

Expected<Tensor> applyImageEpilogue(const Tensor &image,
                                    const ImageEpilogue &e) {
  Expected<Dims> d = imageDims(image, "image epilogue");
  if (!d)
    return d.status();
  if (image.elem() != ElemType::U8)
    return Status::error("image epilogue: expects u8, got " +
                         image.type().str());
  if (e.normalize &&
      (e.mean.size() != size_t(d->c) || e.scale.size() != size_t(d->c)))
    return Status::error("image epilogue: needs one mean and scale per "
                         "channel");
  Tensor out = epilogueOutput(d->h, d->w, d->c, e);
  const uint8_t *src = image.data<uint8_t>();
  for (int64_t oy = 0; oy < d->h; ++oy)
    epilogueRow(src + oy * d->w * d->c, d->w, d->c, oy, d->h, e.flip, e, out);
  return out;
}

} // namespace kernels
} // namespace sluice
