//===- Image.h - Decode, resize, crop and flip kernels ----------*- C++ -*-===//
//
// Image kernels over sluice::Tensor. Images are row-major HWC (rank 3) or HW
// (rank 2, one channel). Geometry kernels (crop, flip) take any numeric
// element type; resize takes u8 or f32.
//
// Semantics follow torchvision's tensor transforms (not PIL) so that models
// trained with sluice see the pixels they would have seen with torchvision:
//  - decode: libjpeg-turbo with its default accurate integer DCT and fancy
//    upsampling (what PIL and torchvision.io use); PNG through libpng,
//    16-bit samples reduced to their high byte, palette expanded, alpha
//    dropped (not composited). RGB->gray uses ITU-R 601 luma in PIL's 16-bit
//    fixed point: (19595 R + 38470 G + 7471 B + 32768) >> 16; color JPEGs
//    decoded to one channel take libjpeg's Y plane, which is the same luma.
//  - resize, Bilinear: torch.nn.functional.interpolate(mode="bilinear",
//    align_corners=False, antialias=False): source coordinate
//    (dst + 0.5) * in / out - 0.5, clamped below at 0; computed in float;
//    u8 results rounded to nearest (ties to even, like torch.round) and
//    saturated. Downscaling by more than 2x aliases, as in torchvision with
//    antialias=False.
//  - resize, Bilinear with antialias: PIL's Image.resize(BILINEAR), which
//    torchvision's antialias=True copies: a triangle filter whose support
//    is scaled by the downscale factor, PIL's fixed-point arithmetic, so
//    u8 results are PIL's bytes (crop first, then resize, as torchvision's
//    resized_crop does with PIL images).
//  - resize, Nearest: interpolate(mode="nearest"): src = floor(dst * scale)
//    with torch's float scale = float(in) / out (not the exact rational:
//    e.g. 480 -> 224 picks a different row than floor(dst * 480 / 224) for
//    some rows, and sluice picks the same rows as torch). Checked against
//    torch 1.13: identical for nearest and area, bilinear u8 within 1 (torch
//    itself differs by float rounding between memory formats).
//  - resize, Area: interpolate(mode="area") = adaptive average pooling:
//    out[i] averages in[floor(i*in/out) .. ceil((i+1)*in/out)); u8 rounded.
//  - center_crop pads with zeros when the crop is larger than the image and
//    rounds the offset like torchvision (Python round, ties to even).
//  - random_resized_crop draws its box exactly like torchvision's
//    RandomResizedCrop.get_params, with sluice's per-element Rng.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_IMAGE_H
#define SLUICE_OPS_KERNELS_IMAGE_H

#include "sluice/ops/Random.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace sluice {
namespace kernels {

/// Images larger than this per side, or with more pixels than
/// kMaxImagePixels, are refused before anything is allocated: a corrupt or
/// hostile header must not make a worker allocate gigabytes.
constexpr int64_t kMaxImageSide = int64_t(1) << 15;
constexpr int64_t kMaxImagePixels = int64_t(1) << 28;

enum class ImageFormat { Jpeg, Png };

/// What the header of an encoded image says, without decoding pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::Jpeg;
  int64_t height = 0;
  int64_t width = 0;
  /// Channels stored in the file (1 gray, 2 gray+alpha, 3 color, 4 with
  /// alpha or CMYK).
  int channels = 0;
};

/// Reads format and dimensions from the header (JPEG: up to the frame
/// header; PNG: the IHDR chunk). Fails with the same messages as decode.
Expected<ImageInfo> readImageInfo(std::string_view bytes);

/// A rectangle in pixel coordinates: rows [y, y+h), columns [x, x+w).
struct CropBox {
  int64_t y = 0, x = 0, h = 0, w = 0;
  bool operator==(const CropBox &o) const {
    return y == o.y && x == o.x && h == o.h && w == o.w;
  }
};

/// Decodes a JPEG or PNG (sniffed from the magic bytes) to u8[H, W, channels]
/// with channels 1 or 3. Errors name what is wrong: "not a JPEG or PNG
/// (first bytes 3c 68 74 6d)", "corrupt JPEG data: <libjpeg message>",
/// "truncated PNG data ...", or the refused dimensions.
/// JPEG warnings other than "extraneous bytes before marker" (which real
/// cameras write and which do not affect pixels) are errors, because
/// libjpeg-turbo fills what it could not decode with gray.
Expected<Tensor> decodeImage(std::string_view bytes, int channels);

/// Steps that follow a resize, done while the resize writes its output
/// (made by the compiler's sluice-fuse-crop-epilogue): mirror left-right,
/// normalize u8 to f32, HWC to CHW. The result is bit-identical to running
/// flip (when `flip`), normalize and transpose(CHW) one after another: the
/// same u8 pixels, then the same float expression per element.
struct ImageEpilogue {
  bool flip = false;      ///< mirror left-right (the random draw is made)
  bool normalize = false; ///< u8 -> f32: (float(x) - mean[c]) * scale[c]
  /// One value per channel: normalizeTables() (Elementwise.h), and the
  /// pixels go through normalizeValue().
  std::vector<float> mean, scale;
  /// What a normalize writes: f32, or f16 / bf16 rounded from the f32
  /// value (NormalizeOut, Elementwise.h), as normalize with `dtype` does.
  ElemType normalizeTo = ElemType::F32;
  bool chw = false; ///< write [C, H, W] instead of [H, W, C]
};

/// The epilogue on an already resized u8 image (HWC or HW), row by row with
/// the code the fused resize runs on each row it writes (the hand-written
/// path the generated remap kernels are measured against, bench/
/// epilogue_bench.cpp).
Expected<Tensor> applyImageEpilogue(const Tensor &image,
                                    const ImageEpilogue &e);

/// How a fused decode + crop decodes.
struct DecodeOptions {
  /// Entropy-decode every row of a JPEG, also the rows below the window,
  /// so damaged data anywhere in the file is the error a full decode gives
  /// (decode_image's `verify: full`). By default decoding stops after the
  /// window's last row: a file that lacks its end-of-image marker
  /// (truncated) is still an error, but damage below the window goes
  /// unnoticed, since no pixel of the result comes from there.
  bool verifyFull = false;
  /// See decodeRandomResizedCrop.
  bool allowDctScaling = false;
  /// Steps applied while writing the result; null: none.
  const ImageEpilogue *epilogue = nullptr;
};

/// Decodes and crops in one step. For a JPEG only the window is decoded
/// (libjpeg's jpeg_crop_scanline + jpeg_skip_scanlines, with one extra
/// column each side so fancy upsampling sees its real neighbours). Any
/// error or warning on that path, CMYK, and PNG fall back to a full decode
/// into a reused per-thread buffer. The box may extend past the image;
/// outside pixels are 0. Same pixels as crop(decodeImage(...)); same errors
/// with `verifyFull` (see DecodeOptions for the default).
Expected<Tensor> decodeImageCrop(std::string_view bytes, int channels,
                                 CropBox box, const DecodeOptions &opts = {});

enum class Interpolation { Nearest, Bilinear, Area };

/// Parameters of random_resized_crop (torchvision's defaults).
struct RandomResizedCropParams {
  int64_t height = 224, width = 224; ///< output size
  double scaleLo = 0.08, scaleHi = 1.0;
  double ratioLo = 3.0 / 4.0, ratioHi = 4.0 / 3.0;
  Interpolation interpolation = Interpolation::Bilinear;
  /// Antialiased bilinear (see resize()); the op's default is true, the
  /// kernel's false (torchvision's tensor default before 0.17).
  bool antialias = false;
};

/// The crop box of RandomResizedCrop.get_params: up to 10 attempts of
/// area = H*W*U(scale), log-uniform aspect ratio, w = round(sqrt(area*r)),
/// h = round(sqrt(area/r)); accepted if 0 < w <= W and 0 < h <= H, then
/// the corner is uniform. Otherwise the central crop with the aspect ratio
/// clamped to the ratio range. Always inside the image.
CropBox randomResizedCropBox(int64_t height, int64_t width, double scaleLo,
                             double scaleHi, double ratioLo, double ratioHi,
                             Rng &rng);

/// Decodes, draws the random_resized_crop box from the full-size header
/// dimensions, decodes only the box of a JPEG (as decodeImageCrop), resizes
/// it and applies `opts.epilogue`. Same result and Rng draws as
/// randomResizedCrop(decodeImage(...)) followed by the epilogue's steps
/// unless `opts.allowDctScaling`: then a JPEG whose box is at least 2x the
/// output size is decoded at 1/2, 1/4 or 1/8 scale in the DCT
/// (libjpeg-turbo scaling factors; the largest that keeps the box at least
/// the output size), again only the box's window, and with antialiasing the
/// resize resamples exactly the box's area of the scaled image (a
/// fractional box, as PIL's draft + resize(box=...)): faster on large
/// photos, with slightly different pixels (PSNR in docs/ops.md).
Expected<Tensor> decodeRandomResizedCrop(std::string_view bytes, int channels,
                                         const RandomResizedCropParams &params,
                                         Rng &rng,
                                         const DecodeOptions &opts = {});

/// Gray u8[H,W,1] (or [H,W]) to u8[H,W,3] by replication.
Expected<Tensor> grayToRgb(const Tensor &image);
/// u8[H,W,3] to u8[H,W,1] with the ITU-R 601 luma above.
Expected<Tensor> rgbToGray(const Tensor &image);

/// Resizes a u8 or f32 image (HWC or HW) to outHeight x outWidth. With
/// `antialias`, Bilinear is PIL's (and torchvision's antialias=True)
/// triangle filter whose support widens with the downscale factor: PIL's
/// coefficients, 22-bit fixed point and u8 intermediate after the
/// horizontal pass, so u8 results are the bytes PIL's
/// Image.resize(size, BILINEAR) gives; f32 images follow PIL's 32-bit float
/// mode (double weights and sums). Nearest and Area ignore `antialias`.
Expected<Tensor> resize(const Tensor &image, int64_t outHeight,
                        int64_t outWidth, Interpolation interpolation,
                        bool antialias = false);

/// Copies the box out of the image; the box must lie inside it.
Expected<Tensor> crop(const Tensor &image, CropBox box);
/// Copies the box out of the image; parts outside the image are `fill`.
Expected<Tensor> cropPadded(const Tensor &image, CropBox box, double fill = 0);

/// torchvision center_crop: top = round((H - h) / 2), left = round((W - w)
/// / 2), zero padding when the crop is larger than the image.
Expected<Tensor> centerCrop(const Tensor &image, int64_t height, int64_t width);

/// torchvision RandomCrop(size, padding, pad_if_needed, fill=0): pads
/// `padding` zeros on every side (and, with padIfNeeded, enough to reach the
/// crop size), then takes a uniformly placed height x width window (top
/// drawn before left). Fails if the padded image is still smaller.
Expected<Tensor> randomCrop(const Tensor &image, int64_t height, int64_t width,
                            int64_t padding, bool padIfNeeded, Rng &rng);

/// random_resized_crop on a decoded image: randomResizedCropBox, then crop
/// and resize in one pass (no intermediate crop tensor).
Expected<Tensor> randomResizedCrop(const Tensor &image,
                                   const RandomResizedCropParams &params,
                                   Rng &rng);

/// Whether the image kernels may use their AVX2 paths on CPUs that have
/// AVX2 (default true). They give the same bytes as the portable code; this
/// exists so tests and benchmarks can compare the two.
void setImageSimd(bool enabled);

/// Whether fused decode + crop may decode only the crop window of a JPEG
/// (default true); false decodes whole images, with the same pixels. For
/// tests and A/B timing.
void setJpegWindowDecode(bool enabled);

/// Whether the window decode may cut a JPEG's restart intervals that cover
/// the window out of the file and decode only those (default true, unless
/// SLUICE_NO_RESTART_WINDOW is set): for JPEGs whose restart interval
/// divides the MCUs of a row (or is whole rows), the crop then costs in
/// proportion to its area instead of to its last row. Same pixels; for
/// tests and A/B timing.
void setRestartWindowDecode(bool enabled);

/// The DCT scales M/8 that `scale: auto` (DecodeOptions::allowDctScaling)
/// may decode at, as a bit mask: bit M allows M/8, for M = 1..7. The
/// default, kDefaultDctScales, is 1/8, 2/8 and 4/8, the scales that
/// libjpeg-turbo 2.1 runs in SIMD; the others were measured slower on real
/// photos than decoding the window at full size. SLUICE_DCT_SCALES=1,2,4,6
/// sets the mask at start-up; this, for tests and A/B timing.
constexpr unsigned kDefaultDctScales = (1u << 1) | (1u << 2) | (1u << 4);
void setDctScales(unsigned mask);

enum class FlipAxis { Width, Height };

/// Mirrors the image along an axis (Width: left-right).
Expected<Tensor> flip(const Tensor &image, FlipAxis axis);
/// Flips with probability p (one Rng draw, always consumed); returns the
/// input tensor itself (sharing its buffer) when not flipping.
Expected<Tensor> randomFlip(const Tensor &image, FlipAxis axis, double p,
                            Rng &rng);

} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_IMAGE_H
