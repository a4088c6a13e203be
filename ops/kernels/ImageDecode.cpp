//===- ImageDecode.cpp - Decode entry points and format dispatch ----------===//
//
// readImageInfo, decodeImage and the fused decoders (decodeImageCrop,
// decodeRandomResizedCrop): they sniff the format, check sizes against the
// memory budget, try the JPEG window decode (Jpeg.cpp) and fall back to a
// full decode into the thread's scratch, then crop or resize (Resize.cpp,
// ImageEpilogue.cpp).
//
//===----------------------------------------------------------------------===//

#include "ImageInternal.h"
#include "sluice/ops/Allocation.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

std::string hexPrefix(std::string_view bytes) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    std::snprintf(buf, sizeof(buf), "%s%02x", i ? " " : "",
                  static_cast<unsigned char>(bytes[i]));
    out += buf;
  }
  return out;
}

bool isJpeg(std::string_view b) {
  return b.size() >= 3 && static_cast<unsigned char>(b[0]) == 0xFF &&
         static_cast<unsigned char>(b[1]) == 0xD8 &&
         static_cast<unsigned char>(b[2]) == 0xFF;
}

constexpr unsigned char kPngMagic[8] = {0x89, 'P',  'N',  'G',
                                        '\r', '\n', 0x1A, '\n'};

bool isPng(std::string_view b) {
  return b.size() >= 8 && std::memcmp(b.data(), kPngMagic, 8) == 0;
}

/// Whether the decoded pixels of an image fit in what budget.memory has
/// left (Allocation.h), checked from its header before decoding.
Status checkDecodedSize(const ImageInfo &info, int channels) {
  return checkAllocation(checkedBytes({info.height, info.width, channels}),
                         "the decoded " + std::to_string(info.width) + "x" +
                             std::to_string(info.height) + "x" +
                             std::to_string(channels) + " image");
}

Status checkChannels(int channels) {
  if (channels != 1 && channels != 3)
    return Status::error("decode_image: channels must be 1 or 3, got " +
                         std::to_string(channels));
  return Status::ok();
}

Scratch &decodeScratch() {
  thread_local Scratch s;
  return s;
}

//===----------------------------------------------------------------------===//
// Decode dispatch
//===----------------------------------------------------------------------===//

Status notAnImage(std::string_view bytes) {
  if (bytes.empty())
    return Status::error("not a JPEG or PNG (the data is empty)");
  return Status::error("not a JPEG or PNG (first bytes " + hexPrefix(bytes) +
                       ")");
}

/// Decodes at full size into `dst`, which holds info.height * info.width *
/// channels bytes.
Status decodeInto(std::string_view bytes, const ImageInfo &info, int channels,
                  uint8_t *dst) {
  if (info.format == ImageFormat::Png)
    return decodePngInto(bytes, info, channels, dst);
  tjhandle tj = jpegDecompressor();
  if (!tj)
    return Status::error("cannot initialize the libjpeg-turbo decoder");
  return decodeJpegInto(tj, bytes, info, channels, int(info.width),
                        int(info.height), dst);
}

} // namespace

} // namespace imaging

using namespace imaging;

Expected<ImageInfo> readImageInfo(std::string_view bytes) {
  if (isJpeg(bytes)) {
    tjhandle tj = jpegDecompressor();
    if (!tj)
      return Status::error("cannot initialize the libjpeg-turbo decoder");
    return readJpegInfo(tj, bytes);
  }
  if (isPng(bytes))
    return readPngInfo(bytes);
  return notAnImage(bytes);
}

Expected<Tensor> decodeImage(std::string_view bytes, int channels) {
  if (Status s = checkChannels(channels); !s)
    return s;
  Expected<ImageInfo> info = readImageInfo(bytes);
  if (!info)
    return info.status();
  if (Status s = checkDecodedSize(*info, channels); !s)
    return s;
  Tensor out =
      Tensor::empty(ElemType::U8, {info->height, info->width, channels});
  if (Status s = decodeInto(bytes, *info, channels, out.mutableData<uint8_t>());
      !s)
    return s;
  return out;
}

Expected<Tensor> decodeImageCrop(std::string_view bytes, int channels,
                                 CropBox box, const DecodeOptions &opts) {
  if (Status s = checkChannels(channels); !s)
    return s;
  if (box.h <= 0 || box.w <= 0 || box.h > kMaxImageSide ||
      box.w > kMaxImageSide)
    return Status::error("decode_image crop: box size " +
                         std::to_string(box.h) + "x" + std::to_string(box.w) +
                         " is invalid");
  Expected<ImageInfo> info = readImageInfo(bytes);
  if (!info)
    return info.status();
  Scratch &scratch = decodeScratch();
  Tensor out = Tensor::empty(ElemType::U8, {box.h, box.w, channels});
  const uint8_t zeros[3] = {0, 0, 0};
  // Only the part of the box inside the image needs decoding.
  int64_t y0 = std::clamp<int64_t>(box.y, 0, info->height);
  int64_t y1 = std::clamp<int64_t>(box.y + box.h, 0, info->height);
  int64_t x0 = std::clamp<int64_t>(box.x, 0, info->width);
  int64_t x1 = std::clamp<int64_t>(box.x + box.w, 0, info->width);
  CropBox win{y0, x0, y1 - y0, x1 - x0};
  WindowPixels px;
  if (win.h > 0 && win.w > 0 &&
      decodeJpegWindow(bytes, *info, channels, win, opts.verifyFull, scratch,
                       px)) {
    CropBox shifted{box.y - y0, box.x - x0, box.h, box.w};
    copyBox(px.data, win.h, win.w, px.stride, channels, shifted,
            out.mutableData<uint8_t>(), zeros);
    scratch.trim();
    return out;
  }
  size_t rowBytes = size_t(info->width) * channels;
  uint8_t *buf = scratch.get(rowBytes * info->height);
  if (Status s = decodeInto(bytes, *info, channels, buf); !s)
    return s;
  copyBox(buf, info->height, info->width, rowBytes, channels, box,
          out.mutableData<uint8_t>(), zeros);
  scratch.trim();
  return out;
}

Expected<Tensor> decodeRandomResizedCrop(std::string_view bytes, int channels,
                                         const RandomResizedCropParams &params,
                                         Rng &rng, const DecodeOptions &opts) {
  if (Status s = checkChannels(channels); !s)
    return s;
  if (Status s =
          checkOutSize("random_resized_crop", params.height, params.width);
      !s)
    return s;
  const ImageEpilogue *epi = opts.epilogue;
  if (epi && epi->normalize &&
      (epi->mean.size() != size_t(channels) ||
       epi->scale.size() != size_t(channels)))
    return Status::error("normalize: needs one mean and std per channel (" +
                         std::to_string(channels) + ")");
  Expected<ImageInfo> info = readImageInfo(bytes);
  if (!info)
    return info.status();
  CropBox box =
      randomResizedCropBox(info->height, info->width, params.scaleLo,
                           params.scaleHi, params.ratioLo, params.ratioHi, rng);

  // Pick the smallest DCT scale M/8 that keeps the box at least the output
  // size, among the scales allowed (dctScaleAllowed).
  int num = 8;
  if (opts.allowDctScaling && info->format == ImageFormat::Jpeg &&
      info->channels != 4)
    for (int m = 1; m < 8; ++m)
      if (dctScaleAllowed(m) && box.h * m / 8 >= params.height &&
          box.w * m / 8 >= params.width) {
        num = m;
        break;
      }
  int64_t decH = info->height, decW = info->width;
  // With antialiasing, the scaled decode resamples exactly the box's area
  // (box * M/8, fractional, as PIL's draft + resize(box=...) does) rather
  // than the whole scaled pixels around it.
  SourceBox fine;
  if (num < 8) {
    const double f = num / 8.0;
    fine = {true, double(box.y) * f, double(box.x) * f,
            double(box.y + box.h) * f, double(box.x + box.w) * f};
    decH = (info->height * num + 7) / 8;
    decW = (info->width * num + 7) / 8;
    int64_t y0 = box.y * num / 8, x0 = box.x * num / 8;
    int64_t y1 = std::min(decH, ((box.y + box.h) * num + 7) / 8);
    int64_t x1 = std::min(decW, ((box.x + box.w) * num + 7) / 8);
    box = {y0, x0, y1 - y0, x1 - x0};
    fine.y0 -= double(y0);
    fine.y1 -= double(y0);
    fine.x0 -= double(x0);
    fine.x1 -= double(x0);
  }

  Scratch &scratch = decodeScratch();
  Tensor out = epi ? epilogueOutput(params.height, params.width, channels, *epi)
                   : Tensor::empty(ElemType::U8,
                                   {params.height, params.width, channels});
  WindowPixels px;
  // The window path also decodes DCT-scaled (in scaled coordinates).
  if (decodeJpegWindow(bytes, *info, channels, box, opts.verifyFull, scratch,
                       px, num)) {
    View<uint8_t> v{px.data, box.h, box.w, channels,
                    static_cast<int64_t>(px.stride)};
    resizeU8Into(v, out, params.height, params.width, params.interpolation,
                 params.antialias, epi, fine);
    scratch.trim();
    return out;
  }
  size_t rowBytes = size_t(decW) * channels;
  // The whole (scaled) image is decoded into the thread's scratch: its
  // bytes count against budget.memory while this record is processed.
  if (Status s = reserveScratch(checkedBytes({decH, decW, channels}),
                                "decoding the " + std::to_string(decW) + "x" +
                                    std::to_string(decH) + "x" +
                                    std::to_string(channels) + " image");
      !s)
    return s;
  uint8_t *buf = scratch.get(rowBytes * decH);
  Status s = Status::ok();
  if (num < 8)
    s = decodeJpegInto(jpegDecompressor(), bytes, *info, channels, int(decW),
                       int(decH), buf);
  else
    s = decodeInto(bytes, *info, channels, buf);
  if (!s)
    return s;
  View<uint8_t> v{buf + (box.y * decW + box.x) * channels, box.h, box.w,
                  channels, decW * channels};
  resizeU8Into(v, out, params.height, params.width, params.interpolation,
               params.antialias, epi, fine);
  scratch.trim();
  return out;
}

} // namespace kernels
} // namespace sluice
