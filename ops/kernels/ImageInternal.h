//===- ImageInternal.h - What the image kernel files share ------*- C++ -*-===//
//
// Private to ops/kernels: the helpers and internal entry points that the
// image kernel files (Image.cpp, ImageDecode.cpp, Jpeg.cpp,
// JpegRestartIndex.cpp, Png.cpp, Resize.cpp, ResizeAntialias.cpp,
// ImageEpilogue.cpp) call across files. The public kernels are in
// sluice/ops/kernels/Image.h.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_IMAGEINTERNAL_H
#define SLUICE_OPS_KERNELS_IMAGEINTERNAL_H

#include "sluice/ops/kernels/Image.h"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include <atomic>
#include <turbojpeg.h>

namespace sluice {
namespace kernels {
namespace imaging {

/// A per-thread buffer reused across images by the fused decoders. Very
/// large buffers are released afterwards so one huge image does not pin
/// memory in every worker.
struct Scratch {
  std::vector<uint8_t> bytes;
  uint8_t *get(size_t n) {
    if (bytes.size() < n)
      bytes.resize(n);
    return bytes.data();
  }
  void trim() {
    if (bytes.size() > (size_t(64) << 20))
      std::vector<uint8_t>().swap(bytes);
  }
};

/// Dimensions of an image tensor: HWC or HW.
struct Dims {
  int64_t h = 0, w = 0, c = 1;
};

Status checkDims(int64_t h, int64_t w);
Expected<Dims> imageDims(const Tensor &t, const char *op);
std::vector<int64_t> imageShape(const Tensor &like, int64_t h, int64_t w);

/// Copies the box out of `src` (h x w pixels of `pixelBytes`, rows
/// `rowBytes` apart) into contiguous `dst`, filling outside with `fill`.
void copyBox(const uint8_t *src, int64_t h, int64_t w, size_t rowBytes,
             size_t pixelBytes, CropBox box, uint8_t *dst,
             const uint8_t *fillPixel);

void rgbToGrayRows(const uint8_t *rgb, uint8_t *gray, size_t pixels);

/// A strided image: rows `rowStride` elements apart, pixels contiguous.
template <typename T> struct View {
  const T *data;
  int64_t h, w, c, rowStride;
};

/// A resampling box in source pixels, fractional (PIL's resize `box`):
/// rows [y0, y1), columns [x0, x1). Unset: the whole view.
struct SourceBox {
  bool set = false;
  double y0 = 0, x0 = 0, y1 = 0, x1 = 0;
};

//===----------------------------------------------------------------------===//
// JPEG (Jpeg.cpp, JpegRestartIndex.cpp)
//===----------------------------------------------------------------------===//

/// The thread's TurboJPEG decompressor (null if it could not be made).
tjhandle jpegDecompressor();
Expected<ImageInfo> readJpegInfo(tjhandle tj, std::string_view bytes);

/// Decodes into dst (outH x outW x channels, contiguous); outH/outW are the
/// (possibly DCT-scaled) output size.
Status decodeJpegInto(tjhandle tj, std::string_view bytes,
                      const ImageInfo &info, int channels, int outW, int outH,
                      uint8_t *dst);

/// A decoded window: pixel (0, 0) of the window at `data`, rows `stride`
/// bytes apart.
struct WindowPixels {
  const uint8_t *data = nullptr;
  size_t stride = 0;
};

/// Whether decode_image's `scale: auto` may pick the DCT scale num/8.
bool dctScaleAllowed(int num);

/// Decodes `win` (inside the image) of a JPEG into `scratch`. False when
/// the window path cannot vouch for the result (an error, any warning, a
/// missing end marker, CMYK): the caller then decodes in full, which gives
/// the same pixels or the full decode's error message.
bool decodeJpegWindow(std::string_view bytes, const ImageInfo &info,
                      int channels, CropBox win, bool verifyFull,
                      Scratch &scratch, WindowPixels &out, int num = 8);

/// Whether the window decode may decode only a window's restart intervals
/// (SLUICE_NO_RESTART_WINDOW / setRestartWindowDecode).
std::atomic<bool> &restartWindowAllowed();

/// Where a JPEG's restart intervals are, when they tile it usefully.
struct RestartIndex {
  size_t sof = 0;       ///< offset of the SOF0/SOF1 marker
  size_t scanStart = 0; ///< first entropy-coded byte
  size_t scanEnd = 0;   ///< offset of the EOI marker
  unsigned width = 0, height = 0;
  unsigned mcuW = 8, mcuH = 8;
  unsigned perRow = 1;    ///< intervals across a row of intervals
  unsigned intervalW = 0; ///< pixels across one interval
  unsigned intervalH = 0; ///< pixel rows of one interval
  unsigned intervalRows = 0;
  std::vector<size_t> at; ///< first byte of each interval
};

/// Fills `ix` when `data` is a baseline (or extended Huffman) JPEG whose
/// single scan has restart intervals that tile either each MCU row or
/// whole MCU rows; false otherwise (the caller then decodes as usual).
bool indexRestarts(const unsigned char *d, size_t n, RestartIndex &ix);

/// The JPEG made of the intervals that cover `win` and one pixel around it,
/// into `out`; its pixel (0, 0) is the photo's (ox, oy), and it is aw x ah.
void assembleRestartWindow(const unsigned char *d, const RestartIndex &ix,
                           CropBox win, std::vector<unsigned char> &out,
                           unsigned &ox, unsigned &oy, unsigned &aw,
                           unsigned &ah);

//===----------------------------------------------------------------------===//
// PNG (Png.cpp)
//===----------------------------------------------------------------------===//

Expected<ImageInfo> readPngInfo(std::string_view bytes);

/// Decodes a PNG into dst (H x W x channels). Color PNGs decoded to gray go
/// through a per-thread RGB buffer.
Status decodePngInto(std::string_view bytes, const ImageInfo &info,
                     int channels, uint8_t *dst);

//===----------------------------------------------------------------------===//
// Resize (Resize.cpp) and epilogue (ImageEpilogue.cpp)
//===----------------------------------------------------------------------===//

/// torch's resizes of a view into contiguous `dst` (outH x outW x c).
template <typename T>
void resizeView(View<T> src, T *dst, int64_t outH, int64_t outW,
                Interpolation interp);

/// resizeView with antialiasing for bilinear (other filters ignore it).
template <typename T>
void resizeViewAa(View<T> src, T *dst, int64_t outH, int64_t outW,
                  Interpolation interp, bool antialias);

Status checkOutSize(const char *op, int64_t outH, int64_t outW);

/// Resizes the box of a u8/f32 image (any rank 2/3 tensor) into a new tensor.
Expected<Tensor> resizeBox(const Tensor &image, const Dims &d, CropBox box,
                           int64_t outH, int64_t outW, Interpolation interp,
                           bool antialias);

Status checkResizable(const Tensor &image, const char *op);

/// The tensor the epilogue writes for an H x W x C u8 image.
Tensor epilogueOutput(int64_t h, int64_t w, int64_t c, const ImageEpilogue &e);

/// Resizes a u8 view into `out`: plainly (out is u8[outH, outW, C]), or
/// through the epilogue (out from epilogueOutput). Bilinear blends each
/// output row into a small u8 row that the epilogue then writes out, with
/// the flip folded into the horizontal taps; the other interpolations
/// resize into a scratch image first.
void resizeU8Into(View<uint8_t> src, Tensor &out, int64_t outH, int64_t outW,
                  Interpolation interp, bool antialias,
                  const ImageEpilogue *epi, SourceBox box = {});

} // namespace imaging
} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_IMAGEINTERNAL_H
