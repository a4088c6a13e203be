//===- Jpeg.cpp - JPEG header, full and window decode ---------------------===//
//
// JPEG through libjpeg-turbo: TurboJPEG for headers and full decodes, the
// libjpeg API for the window decode (rows and columns of a crop only,
// optionally DCT-scaled), which also decodes just the restart intervals
// around a window when the file has them (JpegRestartIndex.cpp).
//
//===----------------------------------------------------------------------===//

#include "ImageInternal.h"
#include "sluice/ops/Allocation.h"

#include <turbojpeg.h>
// jpeglib.h needs FILE and size_t declared first.
#include <cstdio>
#include <jpeglib.h>

#include <atomic>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

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

/// libjpeg-turbo 2.1 leaves a handle in a suspended or half-read state after
/// some errors (an incomplete header "succeeds" with 0x0 and poisons the next
/// image), so a handle that saw any error is replaced.
void resetJpegDecompressor() {
  TjDecompressor &d = jpegState();
  if (d.handle)
    tjDestroy(d.handle);
  d.handle = tjInitDecompress();
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

} // namespace

tjhandle jpegDecompressor() { return jpegState().handle; }

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

bool dctScaleAllowed(int num) {
  return (dctScaleMask().load(std::memory_order_relaxed) >> num) & 1u;
}

/// Decodes `win` (inside the image) of a JPEG into `scratch`. False when
/// the window path cannot vouch for the result (an error, any warning, a
/// missing end marker, CMYK): the caller then decodes in full, which gives
/// the same pixels or the full decode's error message.
bool decodeJpegWindow(std::string_view bytes, const ImageInfo &info,
                      int channels, CropBox win, bool verifyFull,
                      Scratch &scratch, WindowPixels &out, int num) {
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

} // namespace imaging

using namespace imaging;

void setJpegWindowDecode(bool enabled) {
  windowDecodeAllowed().store(enabled, std::memory_order_relaxed);
}

void setDctScales(unsigned mask) {
  dctScaleMask().store(mask & 0xFEu, std::memory_order_relaxed);
}

} // namespace kernels
} // namespace sluice
