//===- Image.cpp - Image helpers, crop, flip and gray ---------------------===//
//
// The helpers the image kernel files share (ImageInternal.h) and the
// geometry kernels on decoded images: crop, center/random crop,
// random_resized_crop, flip, gray<->RGB. Decoding is in ImageDecode.cpp
// (JPEG: Jpeg.cpp, JpegRestartIndex.cpp; PNG: Png.cpp), resizing in
// Resize.cpp and ResizeAntialias.cpp, the fused flip/normalize/CHW tail in
// ImageEpilogue.cpp.
//
//===----------------------------------------------------------------------===//

#include "ImageInternal.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Scalar.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

/// Fills `count` elements of size `es` with the pattern in `value`.
void fillPattern(uint8_t *dst, size_t count, const uint8_t *value, size_t es) {
  bool allZero = true;
  for (size_t i = 0; i < es; ++i)
    allZero &= value[i] == 0;
  if (allZero) {
    std::memset(dst, 0, count * es);
    return;
  }
  for (size_t i = 0; i < count; ++i)
    std::memcpy(dst + i * es, value, es);
}

/// Python's round() for the non-negative halves torchvision rounds: ties go
/// to the even integer.
int64_t pyRound(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

} // namespace

Status checkDims(int64_t h, int64_t w) {
  if (h <= 0 || w <= 0)
    return Status::error("image header gives an empty size " +
                         std::to_string(w) + "x" + std::to_string(h));
  if (h > kMaxImageSide || w > kMaxImageSide || h * w > kMaxImagePixels)
    return Status::error(
        "image is " + std::to_string(w) + "x" + std::to_string(h) +
        " pixels; refusing to decode images larger than " +
        std::to_string(kMaxImageSide) +
        " pixels per side or 2^28 pixels "
        "(likely a corrupt header; resize the file if it is real)");
  return Status::ok();
}

Expected<Dims> imageDims(const Tensor &t, const char *op) {
  if (!t.valid())
    return Status::error(std::string(op) + ": input tensor is empty");
  if (!t.isNumeric())
    return Status::error(std::string(op) + ": expects a numeric image, got " +
                         std::string(elemTypeName(t.elem())));
  if (t.rank() != 2 && t.rank() != 3)
    return Status::error(std::string(op) +
                         ": expects an image of rank 2 (HW) or 3 (HWC), got " +
                         t.type().str());
  Dims d;
  d.h = t.dim(0);
  d.w = t.dim(1);
  d.c = t.rank() == 3 ? t.dim(2) : 1;
  return d;
}

std::vector<int64_t> imageShape(const Tensor &like, int64_t h, int64_t w) {
  if (like.rank() == 3)
    return {h, w, like.dim(2)};
  return {h, w};
}

/// Copies the box out of `src` (h x w pixels of `pixelBytes`, rows
/// `rowBytes` apart) into contiguous `dst`, filling outside with `fill`.
void copyBox(const uint8_t *src, int64_t h, int64_t w, size_t rowBytes,
             size_t pixelBytes, CropBox box, uint8_t *dst,
             const uint8_t *fillPixel) {
  size_t outRow = static_cast<size_t>(box.w) * pixelBytes;
  int64_t x0 = std::clamp<int64_t>(box.x, 0, w);
  int64_t x1 = std::clamp<int64_t>(box.x + box.w, 0, w);
  for (int64_t oy = 0; oy < box.h; ++oy) {
    uint8_t *d = dst + oy * outRow;
    int64_t sy = box.y + oy;
    if (sy < 0 || sy >= h || x1 <= x0) {
      fillPattern(d, box.w, fillPixel, pixelBytes);
      continue;
    }
    int64_t left = x0 - box.x;
    int64_t mid = x1 - x0;
    int64_t right = box.w - left - mid;
    if (left > 0)
      fillPattern(d, left, fillPixel, pixelBytes);
    std::memcpy(d + left * pixelBytes, src + sy * rowBytes + x0 * pixelBytes,
                mid * pixelBytes);
    if (right > 0)
      fillPattern(d + (left + mid) * pixelBytes, right, fillPixel, pixelBytes);
  }
}

void rgbToGrayRows(const uint8_t *rgb, uint8_t *gray, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    uint32_t r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
    gray[i] =
        static_cast<uint8_t>((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
  }
}

} // namespace imaging

using namespace imaging;

CropBox randomResizedCropBox(int64_t height, int64_t width, double scaleLo,
                             double scaleHi, double ratioLo, double ratioHi,
                             Rng &rng) {
  double area = static_cast<double>(height) * static_cast<double>(width);
  double logLo = std::log(ratioLo), logHi = std::log(ratioHi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double targetArea = area * rng.uniform(scaleLo, scaleHi);
    double aspect = std::exp(rng.uniform(logLo, logHi));
    int64_t w = pyRound(std::sqrt(targetArea * aspect));
    int64_t h = pyRound(std::sqrt(targetArea / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      int64_t y = rng.uniformInt(0, height - h + 1);
      int64_t x = rng.uniformInt(0, width - w + 1);
      return {y, x, h, w};
    }
  }
  double inRatio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w, h;
  double minRatio = std::min(ratioLo, ratioHi);
  double maxRatio = std::max(ratioLo, ratioHi);
  if (inRatio < minRatio) {
    w = width;
    h = pyRound(static_cast<double>(w) / minRatio);
  } else if (inRatio > maxRatio) {
    h = height;
    w = pyRound(static_cast<double>(h) * maxRatio);
  } else {
    w = width;
    h = height;
  }
  // Rounding can overshoot by one on tiny images; keep the box inside.
  h = std::clamp<int64_t>(h, 1, height);
  w = std::clamp<int64_t>(w, 1, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

Expected<Tensor> grayToRgb(const Tensor &image) {
  Expected<Dims> d = imageDims(image, "gray_to_rgb");
  if (!d)
    return d.status();
  if (image.elem() != ElemType::U8 || d->c != 1)
    return Status::error("gray_to_rgb: expects u8[H,W,1] or u8[H,W], got " +
                         image.type().str());
  Tensor out = Tensor::empty(ElemType::U8, {d->h, d->w, 3});
  const uint8_t *in = image.data<uint8_t>();
  uint8_t *o = out.mutableData<uint8_t>();
  for (int64_t i = 0, n = d->h * d->w; i < n; ++i)
    o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = in[i];
  return out;
}

Expected<Tensor> rgbToGray(const Tensor &image) {
  Expected<Dims> d = imageDims(image, "rgb_to_gray");
  if (!d)
    return d.status();
  if (image.elem() != ElemType::U8 || image.rank() != 3 || d->c != 3)
    return Status::error("rgb_to_gray: expects u8[H,W,3], got " +
                         image.type().str());
  Tensor out = Tensor::empty(ElemType::U8, {d->h, d->w, 1});
  rgbToGrayRows(image.data<uint8_t>(), out.mutableData<uint8_t>(),
                size_t(d->h * d->w));
  return out;
}

Expected<Tensor> cropPadded(const Tensor &image, CropBox box, double fill) {
  Expected<Dims> d = imageDims(image, "crop");
  if (!d)
    return d.status();
  if (box.h < 0 || box.w < 0)
    return Status::error("crop: negative crop size " + std::to_string(box.h) +
                         "x" + std::to_string(box.w));
  size_t es = elemTypeSize(image.elem());
  size_t pixelBytes = es * d->c;
  std::vector<uint8_t> fillPixel(pixelBytes);
  for (int64_t ch = 0; ch < d->c; ++ch)
    storeFromDouble(image.elem(), fill, fillPixel.data() + ch * es, 0);
  Tensor out = Tensor::empty(image.elem(), imageShape(image, box.h, box.w));
  copyBox(image.raw(), d->h, d->w, d->w * pixelBytes, pixelBytes, box,
          out.mutableRaw(), fillPixel.data());
  return out;
}

Expected<Tensor> crop(const Tensor &image, CropBox box) {
  Expected<Dims> d = imageDims(image, "crop");
  if (!d)
    return d.status();
  if (box.y < 0 || box.x < 0 || box.h <= 0 || box.w <= 0 ||
      box.y + box.h > d->h || box.x + box.w > d->w)
    return Status::error(
        "crop: box (y=" + std::to_string(box.y) +
        ", x=" + std::to_string(box.x) + ", h=" + std::to_string(box.h) +
        ", w=" + std::to_string(box.w) + ") does not fit in the " +
        std::to_string(d->h) + "x" + std::to_string(d->w) + " image");
  return cropPadded(image, box);
}

Expected<Tensor> centerCrop(const Tensor &image, int64_t height,
                            int64_t width) {
  Expected<Dims> d = imageDims(image, "center_crop");
  if (!d)
    return d.status();
  if (height <= 0 || width <= 0)
    return Status::error("center_crop: size must be positive, got " +
                         std::to_string(height) + "x" + std::to_string(width));
  // torchvision pads (H - h) // 2 on the top when the crop is larger, which
  // with Python's round is the same expression for negative differences.
  int64_t top = pyRound(static_cast<double>(d->h - height) / 2.0);
  int64_t left = pyRound(static_cast<double>(d->w - width) / 2.0);
  if (height > d->h)
    top = -((height - d->h) / 2);
  if (width > d->w)
    left = -((width - d->w) / 2);
  return cropPadded(image, {top, left, height, width});
}

Expected<Tensor> randomCrop(const Tensor &image, int64_t height, int64_t width,
                            int64_t padding, bool padIfNeeded, Rng &rng) {
  Expected<Dims> d = imageDims(image, "random_crop");
  if (!d)
    return d.status();
  if (height <= 0 || width <= 0 || padding < 0)
    return Status::error("random_crop: size must be positive and padding "
                         "non-negative");
  int64_t padTop = padding, padLeft = padding;
  int64_t paddedH = d->h + 2 * padding, paddedW = d->w + 2 * padding;
  if (padIfNeeded && paddedH < height) {
    int64_t extra = height - paddedH;
    padTop += extra;
    paddedH += 2 * extra;
  }
  if (padIfNeeded && paddedW < width) {
    int64_t extra = width - paddedW;
    padLeft += extra;
    paddedW += 2 * extra;
  }
  if (paddedH < height || paddedW < width)
    return Status::error(
        "random_crop: crop " + std::to_string(height) + "x" +
        std::to_string(width) + " is larger than the padded image " +
        std::to_string(paddedH) + "x" + std::to_string(paddedW) +
        " (set pad_if_needed or a larger padding)");
  int64_t y = rng.uniformInt(0, paddedH - height + 1);
  int64_t x = rng.uniformInt(0, paddedW - width + 1);
  return cropPadded(image, {y - padTop, x - padLeft, height, width});
}

Expected<Tensor> randomResizedCrop(const Tensor &image,
                                   const RandomResizedCropParams &params,
                                   Rng &rng) {
  Expected<Dims> d = imageDims(image, "random_resized_crop");
  if (!d)
    return d.status();
  if (Status s = checkResizable(image, "random_resized_crop"); !s)
    return s;
  if (Status s =
          checkOutSize("random_resized_crop", params.height, params.width);
      !s)
    return s;
  if (d->h == 0 || d->w == 0)
    return Status::error("random_resized_crop: empty image " +
                         image.type().str());
  CropBox box = randomResizedCropBox(d->h, d->w, params.scaleLo, params.scaleHi,
                                     params.ratioLo, params.ratioHi, rng);
  return resizeBox(image, *d, box, params.height, params.width,
                   params.interpolation, params.antialias);
}

Expected<Tensor> flip(const Tensor &image, FlipAxis axis) {
  Expected<Dims> d = imageDims(image, "flip");
  if (!d)
    return d.status();
  Tensor out = Tensor::empty(image.elem(), image.shape());
  size_t pixelBytes = elemTypeSize(image.elem()) * d->c;
  size_t rowBytes = pixelBytes * d->w;
  const uint8_t *in = image.raw();
  uint8_t *o = out.mutableRaw();
  if (axis == FlipAxis::Height) {
    for (int64_t y = 0; y < d->h; ++y)
      std::memcpy(o + y * rowBytes, in + (d->h - 1 - y) * rowBytes, rowBytes);
    return out;
  }
  for (int64_t y = 0; y < d->h; ++y) {
    const uint8_t *src = in + y * rowBytes;
    uint8_t *dst = o + y * rowBytes;
    if (pixelBytes == 1) {
      for (int64_t x = 0; x < d->w; ++x)
        dst[x] = src[d->w - 1 - x];
    } else if (pixelBytes == 3) {
      for (int64_t x = 0; x < d->w; ++x) {
        const uint8_t *s = src + (d->w - 1 - x) * 3;
        dst[3 * x] = s[0];
        dst[3 * x + 1] = s[1];
        dst[3 * x + 2] = s[2];
      }
    } else {
      for (int64_t x = 0; x < d->w; ++x)
        std::memcpy(dst + x * pixelBytes, src + (d->w - 1 - x) * pixelBytes,
                    pixelBytes);
    }
  }
  return out;
}

Expected<Tensor> randomFlip(const Tensor &image, FlipAxis axis, double p,
                            Rng &rng) {
  if (!rng.bernoulli(p)) {
    if (Expected<Dims> d = imageDims(image, "random_flip"); !d)
      return d.status();
    return image;
  }
  return flip(image, axis);
}

} // namespace kernels
} // namespace sluice
