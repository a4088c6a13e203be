//===- Image.cpp - JPEG/PNG decode, resize, crop and flip kernels ---------===//

#include "sluice/ops/kernels/Image.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Scalar.h"

#include <png.h>
#include <turbojpeg.h>
// jpeglib.h needs FILE and size_t declared first.
#include <cstdio>
#include <jpeglib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h> // AVX2 kernels behind a run-time CPU check
#endif

namespace sluice {
namespace kernels {

namespace {

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

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

Scratch &decodeScratch() {
  thread_local Scratch s;
  return s;
}
Scratch &pngRgbScratch() {
  thread_local Scratch s;
  return s;
}

/// Dimensions of an image tensor: HWC or HW.
struct Dims {
  int64_t h = 0, w = 0, c = 1;
};

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

/// Python's round() for the non-negative halves torchvision rounds: ties go
/// to the even integer.
int64_t pyRound(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

void rgbToGrayRows(const uint8_t *rgb, uint8_t *gray, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    uint32_t r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
    gray[i] =
        static_cast<uint8_t>((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
  }
}

//===----------------------------------------------------------------------===//
// JPEG
//===----------------------------------------------------------------------===//

struct TjDecompressor {
  tjhandle handle = tjInitDecompress();
  ~TjDecompressor() {
    if (handle)
      tjDestroy(handle);
  }
};

TjDecompressor &jpegState() {
  thread_local TjDecompressor d;
  return d;
}

tjhandle jpegDecompressor() { return jpegState().handle; }

/// libjpeg-turbo 2.1 leaves a handle in a suspended or half-read state after
/// some errors (an incomplete header "succeeds" with 0x0 and poisons the next
/// image), so a handle that saw any error is replaced.
void resetJpegDecompressor() {
  TjDecompressor &d = jpegState();
  if (d.handle)
    tjDestroy(d.handle);
  d.handle = tjInitDecompress();
}

Expected<ImageInfo> readJpegInfo(tjhandle tj, std::string_view bytes) {
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj,
                          reinterpret_cast<const unsigned char *>(bytes.data()),
                          static_cast<unsigned long>(bytes.size()), &w, &h,
                          &subsamp, &colorspace) != 0) {
    std::string msg = tjGetErrorStr2(tj);
    resetJpegDecompressor();
    return Status::error("corrupt JPEG data: " + msg);
  }
  if (w <= 0 || h <= 0) {
    resetJpegDecompressor();
    return Status::error("truncated JPEG data: no frame header in the " +
                         std::to_string(bytes.size()) + " bytes given");
  }
  ImageInfo info;
  info.format = ImageFormat::Jpeg;
  info.width = w;
  info.height = h;
  info.channels = colorspace == TJCS_GRAY                                ? 1
                  : (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) ? 4
                                                                         : 3;
  if (Status s = checkDims(h, w); !s)
    return s;
  return info;
}

/// Decodes into dst (outH x outW x channels, contiguous); outH/outW are the
/// (possibly DCT-scaled) output size.
Status decodeJpegInto(tjhandle tj, std::string_view bytes,
                      const ImageInfo &info, int channels, int outW, int outH,
                      uint8_t *dst) {
  if (info.channels == 4)
    return Status::error("CMYK/YCCK JPEGs are not supported: libjpeg-turbo "
                         "cannot convert them to RGB; convert the file to RGB");
  int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  int rc =
      tjDecompress2(tj, reinterpret_cast<const unsigned char *>(bytes.data()),
                    static_cast<unsigned long>(bytes.size()), dst, outW,
                    outW * channels, outH, pf, 0);
  if (rc == 0)
    return Status::ok();
  std::string msg = tjGetErrorStr2(tj);
  bool warning = tjGetErrorCode(tj) == TJERR_WARNING;
  resetJpegDecompressor();
  if (warning) {
    // Extra bytes between markers do not affect the pixels; everything else
    // means libjpeg replaced data it could not read with gray.
    if (msg.find("extraneous bytes") != std::string::npos)
      return Status::ok();
    if (msg.find("Premature end") != std::string::npos)
      return Status::error("truncated JPEG data: " + msg);
  }
  return Status::error("corrupt JPEG data: " + msg);
}

//===----------------------------------------------------------------------===//
// JPEG window decode (the libjpeg API of libjpeg-turbo)
//===----------------------------------------------------------------------===//

// TurboJPEG 2.1 has no partial decode, so the window path drives libjpeg
// directly: jpeg_crop_scanline limits IDCT, upsampling and color conversion
// to the columns of the window, jpeg_skip_scanlines skips them for the rows
// above it. The output settings are the ones tjDecompress2 uses without
// flags (JDCT_ISLOW, fancy upsampling, block smoothing), so the pixels of
// the window are the pixels a full decode has there.

/// Errors longjmp back into jpegWindowRun; warnings are only recorded, since
/// any warning sends the image down the full-decode path.
struct JpegWindowError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool warned;
};

void jpegWindowErrorExit(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<JpegWindowError *>(cinfo->err)->jump, 1);
}

void jpegWindowEmit(j_common_ptr cinfo, int level) {
  if (level < 0)
    reinterpret_cast<JpegWindowError *>(cinfo->err)->warned = true;
}

void jpegWindowSilent(j_common_ptr) {}

/// One libjpeg decompressor per thread, reused across images.
struct JpegWindowDecoder {
  jpeg_decompress_struct cinfo;
  JpegWindowError err;
  bool ready = false;
  JpegWindowDecoder();
  ~JpegWindowDecoder() {
    if (ready)
      jpeg_destroy_decompress(&cinfo);
  }
};

/// Only POD state between setjmp and longjmp.
bool jpegWindowCreate(JpegWindowDecoder *d) {
  if (setjmp(d->err.jump))
    return false;
  jpeg_create_decompress(&d->cinfo);
  return true;
}

JpegWindowDecoder::JpegWindowDecoder() {
  std::memset(&cinfo, 0, sizeof(cinfo));
  std::memset(&err, 0, sizeof(err));
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpegWindowErrorExit;
  err.pub.emit_message = jpegWindowEmit;
  err.pub.output_message = jpegWindowSilent;
  ready = jpegWindowCreate(this);
}

/// What jpegWindowRun decodes: rows [y0, y1) and columns [x0, x1) of the
/// full-size image. libjpeg writes each row of its (slightly wider, iMCU
/// aligned) cropped region straight into `dst`, rows `dstStride` bytes
/// apart; `dstStride` must be at least width * channels. On success
/// `offset` is where pixel (y0, x0) landed in `dst`.
struct JpegWindowJob {
  const unsigned char *data;
  unsigned long size;
  int channels;
  JDIMENSION width, height; ///< from the TurboJPEG header read
  JDIMENSION y0, y1, x0, x1;
  bool verifyFull; ///< entropy-decode the rows below the window too
  int num;         ///< DCT scale num/8 (1..8); width/height and the
                   ///< window are in the scaled image
  uint8_t *dst;
  size_t dstStride;
  size_t offset; ///< out
};

/// True if the data libjpeg has not read yet holds an end-of-image marker
/// (or libjpeg has already met it). Entropy-coded data escapes every 0xFF
/// byte, so 0xFF 0xD9 there is a marker: its presence means the file was
/// not cut short. Searched from the end, where it almost always is.
bool jpegEndMarkerAhead(j_decompress_ptr cinfo) {
  if (jpeg_input_complete(cinfo) || cinfo->unread_marker == 0xD9)
    return true;
  const jpeg_source_mgr *src = cinfo->src;
  const JOCTET *begin = src->next_input_byte;
  for (size_t i = src->bytes_in_buffer; i >= 2; --i)
    if (begin[i - 1] == 0xD9 && begin[i - 2] == 0xFF)
      return true;
  return false;
}

/// Decodes the window; false on any error, warning or unsupported input.
/// Only POD locals: setjmp.
bool jpegWindowRun(JpegWindowDecoder *d, JpegWindowJob *job) {
  j_decompress_ptr cinfo = &d->cinfo;
  d->err.warned = false;
  if (setjmp(d->err.jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_mem_src(cinfo, job->data, job->size);
  if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK ||
      cinfo->num_components == 4 || cinfo->jpeg_color_space == JCS_CMYK ||
      cinfo->jpeg_color_space == JCS_YCCK) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  cinfo->out_color_space = job->channels == 1 ? JCS_GRAYSCALE : JCS_EXT_RGB;
  cinfo->scale_num = static_cast<unsigned int>(job->num);
  cinfo->scale_denom = 8;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->do_block_smoothing = TRUE;
  jpeg_start_decompress(cinfo);
  if (cinfo->output_width != job->width ||
      cinfo->output_height != job->height ||
      cinfo->output_components != job->channels) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  // Fancy upsampling treats the first and last column of a cropped region
  // as image edges: decode one column more on the left (the library then
  // aligns down to the iMCU) and two more on the right, so the edge columns
  // fall outside the window.
  JDIMENSION cropX = job->x0 > 0 ? job->x0 - 1 : 0;
  JDIMENSION cropEnd = job->x1 + 2 < job->width ? job->x1 + 2 : job->width;
  JDIMENSION cropW = cropEnd - cropX;
  jpeg_crop_scanline(cinfo, &cropX, &cropW);
  if (job->y0 > 0)
    jpeg_skip_scanlines(cinfo, job->y0);
  job->offset = (job->x0 - cropX) * static_cast<size_t>(job->channels);
  for (JDIMENSION y = job->y0; y < job->y1; ++y) {
    JSAMPROW row = job->dst + (y - job->y0) * job->dstStride;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      jpeg_abort_decompress(cinfo);
      return false;
    }
  }
  if (cinfo->output_scanline == cinfo->output_height) {
    jpeg_finish_decompress(cinfo); // reads up to the end marker
    return !d->err.warned;
  }
  if (!job->verifyFull) {
    // Stop here (tf.data's decode_and_crop_jpeg does the same): the rows
    // below the window cost as much entropy decoding as the ones above.
    // A file that lacks its end marker is still refused.
    bool complete = jpegEndMarkerAhead(cinfo);
    jpeg_abort_decompress(cinfo);
    return complete && !d->err.warned;
  }
  // Entropy-decode the rest (skipping still reads every MCU, but skips the
  // IDCT) so that damaged data below the window is noticed as in a full
  // decode; skipping to the very end would not read it.
  JDIMENSION left = cinfo->output_height - cinfo->output_scanline;
  if (left > 1)
    jpeg_skip_scanlines(cinfo, left - 1);
  if (cinfo->output_scanline < cinfo->output_height) {
    // Into the spare row after the window.
    JSAMPROW tail = job->dst + (job->y1 - job->y0) * job->dstStride;
    jpeg_read_scanlines(cinfo, &tail, 1);
  }
  jpeg_finish_decompress(cinfo);
  return !d->err.warned;
}

/// A decoded window: pixel (0, 0) of the window at `data`, rows `stride`
/// bytes apart.
struct WindowPixels {
  const uint8_t *data = nullptr;
  size_t stride = 0;
};

std::atomic<bool> &windowDecodeAllowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

/// The numerators M of the DCT scales M/8 that decode_image's `scale: auto`
/// may pick, as a bit mask (bit M). Default: 1/8, 2/8 and 4/8, the scales
/// whose IDCTs libjpeg-turbo 2.1 has in SIMD. The others (3/8, 5/8, 6/8,
/// 7/8) run its C IDCTs (with 4:2:0 chroma at 2M x 2M) and were measured
/// slower than the full-size SIMD IDCT plus the larger resize on real
/// photos (bench/image_profile_bench.cpp; bench/results.md, 2026-11-24):
/// SLUICE_DCT_SCALES=1,2,3,4,5,6,7 names the set to measure them again.
std::atomic<unsigned> &dctScaleMask() {
  static std::atomic<unsigned> mask{[] {
    unsigned m = kDefaultDctScales;
    if (const char *v = std::getenv("SLUICE_DCT_SCALES"); v && *v) {
      m = 0;
      for (const char *p = v; *p; ++p)
        if (*p >= '1' && *p <= '7')
          m |= 1u << (*p - '0');
    }
    return m;
  }()};
  return mask;
}

bool dctScaleAllowed(int num) {
  return (dctScaleMask().load(std::memory_order_relaxed) >> num) & 1u;
}

//===----------------------------------------------------------------------===//
// Random access through restart markers
//===----------------------------------------------------------------------===//

// A baseline JPEG must be entropy-decoded from its first row down to the
// last row a crop uses: on photos that is most of a decode, whatever the
// window or the DCT scale. A restart marker (RSTn, every DRI MCUs) resets the
// entropy decoder, so the intervals that cover a window can be cut out and
// decoded alone, as a smaller JPEG with the same headers. With intervals that
// tile each MCU row (DRI divides the MCUs per row; `jpegtran -restart 1B`
// writes such files) the window's cost follows its area; with intervals of
// whole rows, its height. The copy keeps one pixel of margin on every side
// (rounded out to intervals) and at least two MCUs across and down (libjpeg
// replicates chroma rows of two samples or fewer instead of interpolating),
// so fancy upsampling sees the same neighbours and the window's pixels are
// the full decode's
// (bench/jpeg_restart_probe_bench.cpp checks 2,000 photos; the kernel tests
// compare bytes). Anything unexpected (progressive or arithmetic coding, a
// scan without every component, markers out of sequence, no end marker)
// leaves the file to the window decode below. Hand-written marker parsing:
// libjpeg has no API for where a restart interval starts, and the parse only
// walks the marker segments before the scan plus one memchr pass over it.

std::atomic<bool> &restartWindowAllowed() {
  static std::atomic<bool> allowed{std::getenv("SLUICE_NO_RESTART_WINDOW") ==
                                   nullptr};
  return allowed;
}

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

unsigned be16(const unsigned char *p) { return (unsigned(p[0]) << 8) | p[1]; }

/// Fills `ix` when `data` is a baseline (or extended Huffman) JPEG whose
/// single scan has restart intervals that tile either each MCU row or
/// whole MCU rows; false otherwise (the caller then decodes as usual).
bool indexRestarts(const unsigned char *d, size_t n, RestartIndex &ix) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8)
    return false;
  unsigned dri = 0, nc = 0, hmax = 1, vmax = 1;
  size_t p = 2;
  for (;;) {
    if (p + 4 > n || d[p] != 0xFF)
      return false;
    unsigned m = d[p + 1];
    if (m == 0xFF) { // fill byte before a marker
      ++p;
      continue;
    }
    size_t len = be16(d + p + 2);
    if (len < 2 || p + 2 + len > n)
      return false;
    const unsigned char *seg = d + p + 4;
    if (m == 0xC0 || m == 0xC1) {
      if (len < 8 || seg[0] != 8)
        return false;
      ix.sof = p;
      ix.height = be16(seg + 1);
      ix.width = be16(seg + 3);
      nc = seg[5];
      if ((nc != 1 && nc != 3) || len < 8 + 3 * nc)
        return false;
      for (unsigned c = 0; c < nc; ++c) {
        unsigned hv = seg[6 + 3 * c + 1];
        hmax = std::max(hmax, hv >> 4);
        vmax = std::max(vmax, hv & 15u);
      }
    } else if ((m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 &&
                m != 0xCC) ||
               m == 0xDC) {
      return false; // progressive, lossless, arithmetic, hierarchical, DNL
    } else if (m == 0xDD) {
      if (len < 4)
        return false;
      dri = be16(seg);
    } else if (m == 0xDA) {
      if (ix.sof == 0 || len < 3 || seg[0] != nc)
        return false; // a scan without every component: several scans
      ix.scanStart = p + 2 + len;
      break;
    } else if ((m >= 0xD0 && m <= 0xD9) || m == 0x01) {
      return false; // standalone markers do not belong here
    }
    p += 2 + len;
  }
  if (dri == 0 || ix.width == 0 || ix.height == 0 || hmax > 4 || vmax > 4)
    return false;
  if (nc > 1) {
    ix.mcuW = 8 * hmax;
    ix.mcuH = 8 * vmax;
  }
  unsigned mcusPerRow = (ix.width + ix.mcuW - 1) / ix.mcuW;
  unsigned mcuRows = (ix.height + ix.mcuH - 1) / ix.mcuH;
  if (mcusPerRow % dri == 0) {
    ix.perRow = mcusPerRow / dri;
    ix.intervalW = dri * ix.mcuW;
    ix.intervalH = ix.mcuH;
    ix.intervalRows = mcuRows;
  } else if (dri % mcusPerRow == 0) {
    unsigned rows = dri / mcusPerRow;
    ix.perRow = 1;
    ix.intervalW = mcusPerRow * ix.mcuW;
    ix.intervalH = rows * ix.mcuH;
    ix.intervalRows = (mcuRows + rows - 1) / rows;
  } else {
    return false;
  }
  size_t expected = size_t(ix.perRow) * ix.intervalRows;
  // Each interval but the last ends in a 2-byte marker; the index is
  // counted against the budget like the rest of the record's scratch.
  if (expected < 2 || expected > n / 2 ||
      !reserveScratch(int64_t(expected * sizeof(size_t)),
                      "the restart interval index"))
    return false;
  std::vector<size_t> &at = ix.at;
  at.clear();
  at.push_back(ix.scanStart);
  for (size_t q = ix.scanStart; q + 1 < n;) {
    const void *f = std::memchr(d + q, 0xFF, n - q - 1);
    if (!f)
      return false; // no end marker: truncated
    q = size_t(static_cast<const unsigned char *>(f) - d);
    unsigned m = d[q + 1];
    if (m == 0x00 || m == 0xFF) {
      q += 1 + (m == 0x00); // stuffed byte, or fill before a marker
    } else if (m >= 0xD0 && m <= 0xD7) {
      if (m != 0xD0 + ((at.size() - 1) & 7u) || at.size() >= expected)
        return false;
      at.push_back(q + 2);
      q += 2;
    } else if (m == 0xD9) {
      if (at.size() != expected)
        return false;
      ix.scanEnd = q;
      return true;
    } else {
      return false; // another marker inside the scan (DNL, a second scan)
    }
  }
  return false;
}

/// The JPEG made of the intervals that cover `win` and one pixel around it,
/// into `out`; its pixel (0, 0) is the photo's (ox, oy), and it is aw x ah.
void assembleRestartWindow(const unsigned char *d, const RestartIndex &ix,
                           CropBox win, std::vector<unsigned char> &out,
                           unsigned &ox, unsigned &oy, unsigned &aw,
                           unsigned &ah) {
  unsigned y0 = unsigned(win.y), y1 = unsigned(win.y + win.h);
  unsigned x0 = unsigned(win.x), x1 = unsigned(win.x + win.w);
  unsigned r0 = y0 > 0 ? (y0 - 1) / ix.intervalH : 0;
  unsigned r1 = std::min(ix.intervalRows, (y1 + ix.intervalH) / ix.intervalH);
  unsigned c0 = x0 > 0 ? (x0 - 1) / ix.intervalW : 0;
  unsigned c1 = std::min(ix.perRow, (x1 + ix.intervalW) / ix.intervalW);
  // libjpeg upsamples chroma rows of two samples or fewer by replication
  // instead of fancy upsampling: keep the copy at least two MCUs wide and
  // high (or the whole image, when it is smaller), widening it by whole
  // intervals.
  auto span = [](unsigned lo, unsigned hi, unsigned step, unsigned size) {
    return std::min((hi - lo) * step, size - lo * step);
  };
  while (span(c0, c1, ix.intervalW, ix.width) < 2 * ix.mcuW &&
         (c0 > 0 || c1 < ix.perRow))
    c0 > 0 ? --c0 : ++c1;
  while (span(r0, r1, ix.intervalH, ix.height) < 2 * ix.mcuH &&
         (r0 > 0 || r1 < ix.intervalRows))
    r0 > 0 ? --r0 : ++r1;
  ox = c0 * ix.intervalW;
  oy = r0 * ix.intervalH;
  aw = span(c0, c1, ix.intervalW, ix.width);
  ah = span(r0, r1, ix.intervalH, ix.height);
  out.assign(d, d + ix.scanStart);
  out[ix.sof + 5] = static_cast<unsigned char>(ah >> 8);
  out[ix.sof + 6] = static_cast<unsigned char>(ah & 255);
  out[ix.sof + 7] = static_cast<unsigned char>(aw >> 8);
  out[ix.sof + 8] = static_cast<unsigned char>(aw & 255);
  unsigned k = 0;
  for (unsigned r = r0; r < r1; ++r)
    for (unsigned c = c0; c < c1; ++c, ++k) {
      size_t i = size_t(r) * ix.perRow + c;
      size_t b = ix.at[i];
      size_t e = i + 1 < ix.at.size() ? ix.at[i + 1] - 2 : ix.scanEnd;
      if (k > 0) {
        out.push_back(0xFF);
        out.push_back(static_cast<unsigned char>(0xD0 + ((k - 1) & 7u)));
      }
      out.insert(out.end(), d + b, d + e);
    }
  out.push_back(0xFF);
  out.push_back(0xD9);
}

/// Decodes `win` (inside the image) of a JPEG into `scratch`. False when
/// the window path cannot vouch for the result (an error, any warning, a
/// missing end marker, CMYK): the caller then decodes in full, which gives
/// the same pixels or the full decode's error message.
bool decodeJpegWindow(std::string_view bytes, const ImageInfo &info,
                      int channels, CropBox win, bool verifyFull,
                      Scratch &scratch, WindowPixels &out, int num = 8) {
  if (!windowDecodeAllowed().load(std::memory_order_relaxed))
    return false;
  if (info.format != ImageFormat::Jpeg || info.channels == 4)
    return false;
  thread_local JpegWindowDecoder decoder;
  if (!decoder.ready)
    return false;
  const auto *data = reinterpret_cast<const unsigned char *>(bytes.data());
  // Only the window's restart intervals, when the file has them: same pixels
  // (full size only; `verify: full` wants every row decoded).
  if (num == 8 && !verifyFull &&
      restartWindowAllowed().load(std::memory_order_relaxed)) {
    thread_local RestartIndex ix;
    thread_local std::vector<unsigned char> part;
    // The thread keeps these for the next image, but not beyond ordinary
    // sizes: what a huge file needed is counted only while it is decoded.
    struct Trim {
      ~Trim() {
        if (part.capacity() > (size_t(16) << 20))
          std::vector<unsigned char>().swap(part);
        if (ix.at.capacity() > (size_t(1) << 20))
          std::vector<size_t>().swap(ix.at);
      }
    } trim;
    if (indexRestarts(data, bytes.size(), ix) &&
        ix.width == unsigned(info.width) &&
        ix.height == unsigned(info.height)) {
      unsigned ox, oy, aw, ah;
      assembleRestartWindow(data, ix, win, part, ox, oy, aw, ah);
      if (reserveScratch(int64_t(part.size()),
                         "the crop window's restart intervals")) {
        JpegWindowJob job;
        job.data = part.data();
        job.size = static_cast<unsigned long>(part.size());
        job.channels = channels;
        job.width = aw;
        job.height = ah;
        job.num = 8;
        job.y0 = static_cast<JDIMENSION>(win.y - oy);
        job.y1 = static_cast<JDIMENSION>(win.y + win.h - oy);
        job.x0 = static_cast<JDIMENSION>(win.x - ox);
        job.x1 = static_cast<JDIMENSION>(win.x + win.w - ox);
        job.verifyFull = false;
        job.dstStride = size_t(aw) * channels;
        job.dst = scratch.get(job.dstStride * size_t(win.h + 1));
        job.offset = 0;
        if (jpegWindowRun(&decoder, &job)) {
          out.data = job.dst + job.offset;
          out.stride = job.dstStride;
          return true;
        }
      }
    }
  }
  JpegWindowJob job;
  job.data = data;
  job.size = static_cast<unsigned long>(bytes.size());
  job.channels = channels;
  // libjpeg's scaled size: ceil(size * num / 8).
  job.width = static_cast<JDIMENSION>((info.width * num + 7) / 8);
  job.height = static_cast<JDIMENSION>((info.height * num + 7) / 8);
  job.num = num;
  job.y0 = static_cast<JDIMENSION>(win.y);
  job.y1 = static_cast<JDIMENSION>(win.y + win.h);
  job.x0 = static_cast<JDIMENSION>(win.x);
  job.x1 = static_cast<JDIMENSION>(win.x + win.w);
  job.verifyFull = verifyFull;
  // The cropped region libjpeg writes is at most the image's width; one row
  // more takes the scanline read after the window when verifying in full.
  job.dstStride = size_t(job.width) * channels;
  job.dst = scratch.get(job.dstStride * size_t(win.h + 1));
  job.offset = 0;
  if (!jpegWindowRun(&decoder, &job))
    return false;
  out.data = job.dst + job.offset;
  out.stride = job.dstStride;
  return true;
}

//===----------------------------------------------------------------------===//
// PNG (libpng's progressive API, for control over the conversions)
//===----------------------------------------------------------------------===//

struct PngSource {
  const uint8_t *data;
  size_t size;
  size_t pos;
  char message[256];
  /// The thread's budget (AllocationScope) when the decoder was made: every
  /// allocation libpng makes is reserved there first (pngMalloc).
  AllocationLimit *limit;
  /// An allocation was refused; `message` says which and why.
  bool refused;
};

/// Ancillary chunks (text, ICC profiles, sPLT...) larger than this are a
/// decode error before libpng allocates them: the decoder uses none of
/// them, and a 141-byte file declaring a 2 GiB tEXt chunk made libpng
/// allocate that much per decoding thread. IDAT is not limited by it
/// (libpng bounds it by the image size).
constexpr png_alloc_size_t kMaxPngChunkBytes = png_alloc_size_t(8) << 20;
/// Ancillary chunks libpng keeps per image (text, sPLT, unknown).
constexpr png_uint_32 kMaxPngCachedChunks = 128;

/// libpng's allocator: each block is reserved in the thread's budget before
/// it is allocated and released when libpng frees it, so what libpng holds
/// while it decodes is counted, and a block the budget cannot give is an
/// allocation failure libpng reports, not memory taken past the budget.
constexpr size_t kPngBlockHeader = 16; // keeps malloc's 16-byte alignment

png_voidp pngMalloc(png_structp png, png_alloc_size_t n) {
  auto *src = static_cast<PngSource *>(png_get_mem_ptr(png));
  if (n > (std::numeric_limits<size_t>::max() >> 2))
    return nullptr;
  int64_t bytes = static_cast<int64_t>(n + kPngBlockHeader);
  if (src && src->limit && !src->limit->tryReserve(bytes)) {
    if (!src->refused) {
      src->refused = true;
      std::string why =
          checkAllocation(bytes, "a buffer of the PNG decoder (libpng)")
              .message();
      std::snprintf(src->message, sizeof(src->message), "%s", why.c_str());
    }
    return nullptr;
  }
  auto *base = static_cast<unsigned char *>(std::malloc(n + kPngBlockHeader));
  if (!base) {
    if (src && src->limit)
      src->limit->release(bytes);
    return nullptr;
  }
  std::memcpy(base, &n, sizeof(n));
  return base + kPngBlockHeader;
}

void pngFree(png_structp png, png_voidp ptr) {
  if (!ptr)
    return;
  auto *base = static_cast<unsigned char *>(ptr) - kPngBlockHeader;
  png_alloc_size_t n;
  std::memcpy(&n, base, sizeof(n));
  auto *src = static_cast<PngSource *>(png_get_mem_ptr(png));
  if (src && src->limit)
    src->limit->release(static_cast<int64_t>(n + kPngBlockHeader));
  std::free(base);
}

void pngRead(png_structp png, png_bytep out, size_t n) {
  auto *src = static_cast<PngSource *>(png_get_io_ptr(png));
  if (n > src->size - src->pos) {
    std::snprintf(src->message, sizeof(src->message),
                  "truncated PNG data: the data ends at byte %zu, %zu bytes "
                  "short of the end of the image",
                  src->size, n - (src->size - src->pos));
    png_longjmp(png, 1);
  }
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

void pngError(png_structp png, png_const_charp msg) {
  auto *src = static_cast<PngSource *>(png_get_error_ptr(png));
  // A refused allocation already wrote why (the budget); libpng's own
  // "out of memory" would hide it.
  if (!src->refused)
    std::snprintf(src->message, sizeof(src->message), "corrupt PNG data: %s%s",
                  msg,
                  std::strstr(msg, "too large")
                      ? " (ancillary chunks over 8 MiB are refused)"
                      : "");
  png_longjmp(png, 1);
}

void pngWarning(png_structp, png_const_charp) {}

/// Owns libpng's structs; declared before any setjmp so longjmp never skips
/// its destructor.
struct PngReader {
  PngSource src{};
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngReader(std::string_view bytes) {
    src.data = reinterpret_cast<const uint8_t *>(bytes.data());
    src.size = bytes.size();
    AllocationScope *scope = AllocationScope::current();
    src.limit = scope ? scope->limit() : nullptr;
    png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &src, pngError,
                                   pngWarning, &src, pngMalloc, pngFree);
    if (png) {
      // Metadata chunks the decoder never uses are skipped as they are read
      // (in small pieces, nothing allocated for them), whatever length they
      // declare; what libpng still allocates goes through pngMalloc.
      static const png_byte kSkipped[] =
          "tEXt\0zTXt\0iTXt\0iCCP\0sPLT\0eXIf\0tIME\0pHYs\0hIST\0oFFs\0"
          "pCAL\0sCAL\0sTER";
      png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kSkipped,
                                  static_cast<int>(sizeof(kSkipped) / 5));
      png_set_chunk_malloc_max(png, kMaxPngChunkBytes);
      png_set_chunk_cache_max(png, kMaxPngCachedChunks);
      info = png_create_info_struct(png);
    }
  }
  ~PngReader() {
    if (png)
      png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

struct PngLayout {
  uint32_t width, height;
  int colorChannels; ///< 1 or 3 after our transforms
};

/// Reads the header and sets up transforms to 8-bit, alpha-free gray or RGB
/// (RGB also for gray input when `channels` is 3). Only POD locals: setjmp.
bool pngSetup(PngReader &r, int channels, PngLayout *layout) {
  if (setjmp(png_jmpbuf(r.png)))
    return false;
  png_set_user_limits(r.png, kMaxImageSide, kMaxImageSide);
  png_set_read_fn(r.png, &r.src, pngRead);
  png_read_info(r.png, r.info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, colorType = 0;
  png_get_IHDR(r.png, r.info, &w, &h, &depth, &colorType, nullptr, nullptr,
               nullptr);
  if (depth == 16)
    png_set_strip_16(r.png);
  if (colorType == PNG_COLOR_TYPE_PALETTE)
    png_set_palette_to_rgb(r.png);
  if (colorType == PNG_COLOR_TYPE_GRAY && depth < 8)
    png_set_expand_gray_1_2_4_to_8(r.png);
  png_set_strip_alpha(r.png);
  bool color = (colorType & PNG_COLOR_MASK_COLOR) != 0;
  if (channels == 3 && !color)
    png_set_gray_to_rgb(r.png);
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  layout->width = w;
  layout->height = h;
  layout->colorChannels = png_get_channels(r.png, r.info);
  return true;
}

/// Reads all rows (all interlace passes) into dst. Only POD locals: setjmp.
bool pngReadRows(PngReader &r, const PngLayout &layout, uint8_t *dst) {
  if (setjmp(png_jmpbuf(r.png)))
    return false;
  int passes = png_set_interlace_handling(r.png);
  size_t rowBytes = size_t(layout.width) * layout.colorChannels;
  for (int pass = 0; pass < passes; ++pass)
    for (uint32_t y = 0; y < layout.height; ++y)
      png_read_row(r.png, dst + y * rowBytes, nullptr);
  return true;
}

Expected<ImageInfo> readPngInfo(std::string_view bytes) {
  // IHDR is always the first chunk: 8 magic + 4 length + 4 "IHDR" + 13 data.
  if (bytes.size() < 33)
    return Status::error("truncated PNG data: " + std::to_string(bytes.size()) +
                         " bytes is too short for a PNG header");
  const auto *p = reinterpret_cast<const uint8_t *>(bytes.data());
  if (std::memcmp(p + 12, "IHDR", 4) != 0)
    return Status::error("corrupt PNG data: the first chunk is not IHDR");
  auto be32 = [&](size_t o) {
    return (uint32_t(p[o]) << 24) | (uint32_t(p[o + 1]) << 16) |
           (uint32_t(p[o + 2]) << 8) | uint32_t(p[o + 3]);
  };
  ImageInfo info;
  info.format = ImageFormat::Png;
  info.width = be32(16);
  info.height = be32(20);
  switch (p[25]) {
  case 0:
    info.channels = 1;
    break;
  case 2:
    info.channels = 3;
    break;
  case 3:
    info.channels = 3;
    break;
  case 4:
    info.channels = 2;
    break;
  case 6:
    info.channels = 4;
    break;
  default:
    return Status::error("corrupt PNG data: invalid color type " +
                         std::to_string(p[25]));
  }
  if (Status s = checkDims(info.height, info.width); !s)
    return s;
  return info;
}

/// Decodes a PNG into dst (H x W x channels). Color PNGs decoded to gray go
/// through a per-thread RGB buffer.
Status decodePngInto(std::string_view bytes, const ImageInfo &info,
                     int channels, uint8_t *dst) {
  PngReader r(bytes);
  if (!r.png || !r.info)
    return Status::error("out of memory creating a PNG decoder");
  PngLayout layout{};
  if (!pngSetup(r, channels, &layout))
    return Status::error(r.src.message);
  if (layout.width != info.width || layout.height != info.height)
    return Status::error("corrupt PNG data: inconsistent header");
  size_t pixels = size_t(layout.width) * layout.height;
  if (layout.colorChannels == channels) {
    if (!pngReadRows(r, layout, dst))
      return Status::error(r.src.message);
    return Status::ok();
  }
  Scratch &scratch = pngRgbScratch();
  uint8_t *rgb = scratch.get(pixels * 3);
  bool ok = pngReadRows(r, layout, rgb);
  if (ok)
    rgbToGrayRows(rgb, dst, pixels);
  scratch.trim();
  if (!ok)
    return Status::error(r.src.message);
  return Status::ok();
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

//===----------------------------------------------------------------------===//
// Resize
//===----------------------------------------------------------------------===//

/// A strided image: rows `rowStride` elements apart, pixels contiguous.
template <typename T> struct View {
  const T *data;
  int64_t h, w, c, rowStride;
};

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

//===----------------------------------------------------------------------===//
// Antialiased bilinear: PIL's ImagingResample with its triangle filter
//===----------------------------------------------------------------------===//

// PIL (and torchvision's antialias=True, which copies it) widens the
// triangle filter by the downscale factor, so every source pixel under an
// output pixel contributes and nothing aliases. The coefficients, their
// 22-bit fixed point for u8 images, the horizontal-then-vertical order and
// the rounding of the u8 intermediate are PIL's (Pillow's Resample.c), so
// u8 results are PIL's bytes. Upscaling uses the plain triangle (support 1),
// which is bilinear interpolation with PIL's rounding.

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

/// A resampling box in source pixels, fractional (PIL's resize `box`):
/// rows [y0, y1), columns [x0, x1). Unset: the whole view.
struct SourceBox {
  bool set = false;
  double y0 = 0, x0 = 0, y1 = 0, x1 = 0;
};

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
      size_t at = size_t(((o / 2) * (window / 2) + tap / 2) * 16 +
                         (o & 1) * 8 + (tap & 1));
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
aaPairSumsAvx2(const uint8_t *__restrict src, const AaRgbSimdTaps &s,
               int64_t q, int64_t taps2, __m256i spread, __m256i half) {
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
        accLo, _mm256_madd_epi16(v, _mm256_loadu_si256(
                                        reinterpret_cast<const __m256i *>(
                                            lo + 16 * j))));
    accHi = _mm256_add_epi32(
        accHi, _mm256_madd_epi16(v, _mm256_loadu_si256(
                                        reinterpret_cast<const __m256i *>(
                                            hi + 16 * j))));
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
      Planar ? (Mirror ? _mm_setr_epi8(4, 0, 5, 1, 6, 2, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1, -1)
                       : _mm_setr_epi8(0, 4, 1, 5, 2, 6, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1, -1))
             : (Mirror ? _mm_setr_epi8(4, 5, 6, 0, 1, 2, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1, -1)
                       : _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1,
                                       -1, -1, -1, -1, -1));
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
    __m256i bytes8 = _mm256_packus_epi16(_mm256_packs_epi32(a, b),
                                         _mm256_setzero_si256());
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
  static std::atomic<bool> allowed{std::getenv("SLUICE_NO_IMAGE_SIMD") ==
                                   nullptr};
  return allowed;
}

bool cpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && simdAllowed().load(std::memory_order_relaxed);
}
#else
std::atomic<bool> &simdAllowed() {
  // SLUICE_NO_IMAGE_SIMD=1 turns the AVX2 paths off (same bytes).
  static std::atomic<bool> allowed{std::getenv("SLUICE_NO_IMAGE_SIMD") ==
                                   nullptr};
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
    whi[y / 2] = _mm256_set1_epi32(int32_t((uint32_t(w1 >> 11) << 16) |
                                           uint32_t(w0 >> 11)));
    wlo[y / 2] = _mm256_set1_epi32(int32_t((uint32_t(w1 & 2047) << 16) |
                                           uint32_t(w0 & 2047)));
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
      __m256i b = y + 1 < n ? _mm256_loadu_si256(
                                  reinterpret_cast<const __m256i *>(
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
          _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l),
                           half),
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
    if (cpuHasAvx2() && aaVerticalRowAvx2(first, stride,
                                          ty.ki.data() + oy * ty.ksize,
                                          ty.count[oy],
                                          static_cast<int64_t>(rowLen), outRow)) {
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
    if constexpr (std::is_same_v<OutT, float>)
      return normalizeValue(static_cast<float>(v), m, sc);
    else
      return v;
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

void epilogueRow(const uint8_t *row, int64_t W, int64_t C, int64_t oy,
                 int64_t H, bool flip, const ImageEpilogue &e, Tensor &out) {
  if (e.normalize)
    epilogueRowT(row, W, C, oy, H, flip, e, out.mutableData<float>());
  else
    epilogueRowT(row, W, C, oy, H, flip, e, out.mutableData<uint8_t>());
}

/// The tensor the epilogue writes for an H x W x C u8 image.
Tensor epilogueOutput(int64_t h, int64_t w, int64_t c, const ImageEpilogue &e) {
  // Every pixel is written, so a batch row the runtime offers (its
  // OutputTargetScope, Allocation.h) is as good as a fresh tensor.
  ElemType elem = e.normalize ? ElemType::F32 : ElemType::U8;
  if (e.chw)
    return outputTensor(elem, {c, h, w});
  return outputTensor(elem, {h, w, c});
}

Scratch &epilogueScratch() {
  thread_local Scratch s;
  return s;
}

/// Resizes a u8 view into `out`: plainly (out is u8[outH, outW, C]), or
/// through the epilogue (out from epilogueOutput). Bilinear blends each
/// output row into a small u8 row that the epilogue then writes out, with
/// the flip folded into the horizontal taps; the other interpolations
/// resize into a scratch image first.
void resizeU8Into(View<uint8_t> src, Tensor &out, int64_t outH, int64_t outW,
                  Interpolation interp, bool antialias,
                  const ImageEpilogue *epi, SourceBox box = {}) {
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
      const bool norm = epi->normalize;
      antialiasU8(src, outH, outW, /*planar=*/true, epi->flip,
                  [&](int64_t oy, const uint8_t *row) {
                    for (int64_t ch = 0; ch < 3; ++ch) {
                      const uint8_t *__restrict in = row + ch * outW;
                      int64_t at = (ch * outH + oy) * outW;
                      if (norm) {
                        const float m = epi->mean[ch], sc = epi->scale[ch];
                        float *__restrict o = out.mutableData<float>() + at;
                        for (int64_t x = 0; x < outW; ++x)
                          o[x] = normalizeValue(static_cast<float>(in[x]), m,
                                                sc);
                      } else {
                        std::memcpy(out.mutableData<uint8_t>() + at, in,
                                    static_cast<size_t>(outW));
                      }
                    }
                  },
                  box);
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
    const bool norm = epi->normalize;
    auto emit = [&](int64_t oy, float wy0, const float *r0, float wy1,
                    const float *r1) {
      for (int64_t ch = 0; ch < 3; ++ch) {
        const float *__restrict a = r0 + ch * outW;
        const float *__restrict b = r1 + ch * outW;
        int64_t at = (ch * outH + oy) * outW;
        if (norm) {
          const float m = epi->mean[ch], sc = epi->scale[ch];
          float *__restrict o = out.mutableData<float>() + at;
          for (int64_t x = 0; x < outW; ++x)
            o[x] = normalizeValue(
                static_cast<float>(toU8(wy0 * a[x] + wy1 * b[x])), m, sc);
        } else {
          uint8_t *__restrict o = out.mutableData<uint8_t>() + at;
          for (int64_t x = 0; x < outW; ++x)
            o[x] = toU8(wy0 * a[x] + wy1 * b[x]);
        }
      }
    };
    bilinearRows<uint8_t, 3, /*Planar=*/true>(src, outH, outW, epi->flip, emit);
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
    resizeViewAa(v, out.mutableData<uint8_t>(), outH, outW, interp,
                 antialias);
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

} // namespace

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

void setJpegWindowDecode(bool enabled) {
  windowDecodeAllowed().store(enabled, std::memory_order_relaxed);
}

void setRestartWindowDecode(bool enabled) {
  restartWindowAllowed().store(enabled, std::memory_order_relaxed);
}

void setImageSimd(bool enabled) {
  simdAllowed().store(enabled, std::memory_order_relaxed);
}

void setDctScales(unsigned mask) {
  dctScaleMask().store(mask & 0xFEu, std::memory_order_relaxed);
}

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

Expected<Tensor> applyImageEpilogue(const Tensor &image,
                                    const ImageEpilogue &e) {
  Expected<Dims> d = imageDims(image, "image epilogue");
  if (!d)
    return d.status();
  if (image.elem() != ElemType::U8)
    return Status::error("image epilogue: expects u8, got " +
                         image.type().str());
  if (e.normalize && (e.mean.size() != size_t(d->c) ||
                      e.scale.size() != size_t(d->c)))
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
