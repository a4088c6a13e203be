//===- Png.cpp - PNG header and decode (libpng) ---------------------------===//
//
// PNG through libpng's progressive API, every allocation libpng makes
// counted against the thread's memory budget.
//
//===----------------------------------------------------------------------===//

#include "ImageInternal.h"
#include "sluice/ops/Allocation.h"

#include <png.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

Scratch &pngRgbScratch() {
  thread_local Scratch s;
  return s;
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

} // namespace

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

} // namespace imaging

} // namespace kernels
} // namespace sluice
