//===- kernels_image_test.cpp - Decode, resize, crop and flip kernels -----===//
//
// Images are encoded in the test (TurboJPEG, libpng) from synthetic
// gradients, so every expected pixel is known.
//
//===----------------------------------------------------------------------===//

#include "sluice/ops/Allocation.h"
#include "sluice/ops/kernels/Image.h"

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace sluice;
using namespace sluice::kernels;

namespace {

//===----------------------------------------------------------------------===//
// Test images and encoders
//===----------------------------------------------------------------------===//

/// A smooth gradient with some texture, h x w x c, values 0..255.
std::vector<uint8_t> gradient(int h, int w, int c, int seed = 0) {
  std::vector<uint8_t> px(size_t(h) * w * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        double v = 127.5 +
                   100 * std::sin((x + 3 * ch + seed) * 0.07) *
                       std::cos((y - 2 * ch) * 0.05) +
                   20 * ch;
        px[(size_t(y) * w + x) * c + ch] =
            uint8_t(std::lround(std::fmin(255, std::fmax(0, v))));
      }
  return px;
}

std::string encodeJpeg(const std::vector<uint8_t> &px, int h, int w, int c,
                       int quality, int subsamp) {
  tjhandle tj = tjInitCompress();
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  int rc =
      tjCompress2(tj, px.data(), w, w * c, h, c == 1 ? TJPF_GRAY : TJPF_RGB,
                  &buf, &size, c == 1 ? TJSAMP_GRAY : subsamp, quality, 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::string out(reinterpret_cast<char *>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

void pngWriteFn(png_structp png, png_bytep data, size_t n) {
  auto *out = static_cast<std::string *>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char *>(data), n);
}
void pngFlushFn(png_structp) {}

/// Writes rows already in the PNG's sample layout (16-bit big endian).
bool writePngRows(png_structp png, png_infop info, std::string *out, int w,
                  int h, int depth, int colorType, bool interlace,
                  const std::vector<png_color> *palette,
                  const std::vector<std::vector<uint8_t>> *rows) {
  if (setjmp(png_jmpbuf(png)))
    return false;
  png_set_write_fn(png, out, pngWriteFn, pngFlushFn);
  png_set_IHDR(png, info, w, h, depth, colorType,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (palette)
    png_set_PLTE(png, info, palette->data(), int(palette->size()));
  png_write_info(png, info);
  std::vector<png_bytep> ptrs;
  for (auto &r : *rows)
    ptrs.push_back(const_cast<png_bytep>(r.data()));
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  return true;
}

std::string encodePng(int w, int h, int depth, int colorType, bool interlace,
                      const std::vector<std::vector<uint8_t>> &rows,
                      const std::vector<png_color> *palette = nullptr) {
  std::string out;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  bool ok = writePngRows(png, info, &out, w, h, depth, colorType, interlace,
                         palette, &rows);
  png_destroy_write_struct(&png, &info);
  EXPECT_TRUE(ok);
  return out;
}

/// Offset of the first JPEG marker segment `marker` (walking the segment
/// lengths, so bytes inside tables are never mistaken for markers).
size_t findJpegMarker(const std::string &f, uint8_t marker) {
  size_t i = 2;
  while (i + 4 <= f.size() && uint8_t(f[i]) == 0xFF) {
    if (uint8_t(f[i + 1]) == marker)
      return i;
    i += 2 + ((size_t(uint8_t(f[i + 2])) << 8) | uint8_t(f[i + 3]));
  }
  return std::string::npos;
}

uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  return uint8_t((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
}

int maxAbsDiff(const uint8_t *a, const uint8_t *b, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; ++i)
    m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

//===----------------------------------------------------------------------===//
// PNG decode: every color type / depth / interlace, exact
//===----------------------------------------------------------------------===//

struct PngCase {
  const char *name;
  int colorType;
  int depth;
  bool interlace;
  int channels; ///< requested
};

class PngDecode : public ::testing::TestWithParam<PngCase> {};

TEST_P(PngDecode, ExactPixels) {
  const PngCase &pc = GetParam();
  const int w = 37, h = 23;
  // Source samples per PNG channel; `expect` is the decode we must get.
  int fileChannels = pc.colorType == PNG_COLOR_TYPE_GRAY         ? 1
                     : pc.colorType == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                     : pc.colorType == PNG_COLOR_TYPE_RGB        ? 3
                     : pc.colorType == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                                                                 : 1;
  std::vector<png_color> palette;
  if (pc.colorType == PNG_COLOR_TYPE_PALETTE)
    for (int i = 0; i < 256; ++i)
      palette.push_back(
          {png_byte(i), png_byte(255 - i), png_byte((i * 7) & 255)});
  std::vector<uint8_t> rgb8 = gradient(h, w, 3, 5);
  std::vector<std::vector<uint8_t>> rows(h);
  std::vector<uint8_t> expect(size_t(h) * w * pc.channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const uint8_t *s = &rgb8[(size_t(y) * w + x) * 3];
      uint8_t hi[4] = {s[0], s[1], s[2], uint8_t(x * 5)}; // 4th: alpha
      uint8_t lo[4] = {uint8_t(y * 11), uint8_t(x * 3), uint8_t(x + y), 7};
      uint8_t color[3];
      if (pc.colorType == PNG_COLOR_TYPE_PALETTE) {
        uint8_t idx = uint8_t((x * 7 + y * 3) & 255);
        rows[y].push_back(idx);
        color[0] = palette[idx].red;
        color[1] = palette[idx].green;
        color[2] = palette[idx].blue;
      } else if (pc.depth == 1) {
        uint8_t bit = ((x + y) % 3) == 0;
        if (x % 8 == 0)
          rows[y].push_back(0);
        rows[y].back() |= uint8_t(bit << (7 - x % 8));
        color[0] = color[1] = color[2] = bit ? 255 : 0;
      } else {
        for (int ch = 0; ch < fileChannels; ++ch) {
          int src = fileChannels <= 2 && ch == 1 ? 3 : ch; // GA: alpha second
          rows[y].push_back(hi[src]);
          if (pc.depth == 16)
            rows[y].push_back(lo[src]);
        }
        if (fileChannels <= 2)
          color[0] = color[1] = color[2] = hi[0];
        else
          std::memcpy(color, hi, 3);
      }
      uint8_t *e = &expect[(size_t(y) * w + x) * pc.channels];
      bool isColor = pc.colorType & PNG_COLOR_MASK_COLOR;
      if (pc.channels == 3) {
        std::memcpy(e, color, 3);
      } else {
        e[0] = isColor ? luma(color[0], color[1], color[2]) : color[0];
      }
    }
  }
  std::string file = encodePng(w, h, pc.depth, pc.colorType, pc.interlace, rows,
                               palette.empty() ? nullptr : &palette);
  Expected<ImageInfo> info = readImageInfo(file);
  ASSERT_TRUE(info) << info.status().message();
  EXPECT_EQ(info->format, ImageFormat::Png);
  EXPECT_EQ(info->height, h);
  EXPECT_EQ(info->width, w);

  Expected<Tensor> img = decodeImage(file, pc.channels);
  ASSERT_TRUE(img) << img.status().message();
  EXPECT_EQ(img->elem(), ElemType::U8);
  EXPECT_EQ(img->shape(), (std::vector<int64_t>{h, w, pc.channels}));
  ASSERT_EQ(img->nbytes(), expect.size());
  EXPECT_EQ(maxAbsDiff(img->data<uint8_t>(), expect.data(), expect.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PngDecode,
    ::testing::Values(
        PngCase{"rgb8", PNG_COLOR_TYPE_RGB, 8, false, 3},
        PngCase{"rgb8_to_gray", PNG_COLOR_TYPE_RGB, 8, false, 1},
        PngCase{"rgb8_interlaced", PNG_COLOR_TYPE_RGB, 8, true, 3},
        PngCase{"rgba8_drops_alpha", PNG_COLOR_TYPE_RGB_ALPHA, 8, false, 3},
        PngCase{"rgb16_high_byte", PNG_COLOR_TYPE_RGB, 16, false, 3},
        PngCase{"rgba16_to_gray", PNG_COLOR_TYPE_RGB_ALPHA, 16, true, 1},
        PngCase{"gray8", PNG_COLOR_TYPE_GRAY, 8, false, 1},
        PngCase{"gray8_to_rgb", PNG_COLOR_TYPE_GRAY, 8, false, 3},
        PngCase{"gray16", PNG_COLOR_TYPE_GRAY, 16, false, 1},
        PngCase{"gray_alpha8", PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, 3},
        PngCase{"gray1", PNG_COLOR_TYPE_GRAY, 1, false, 1},
        PngCase{"palette", PNG_COLOR_TYPE_PALETTE, 8, false, 3},
        PngCase{"palette_to_gray", PNG_COLOR_TYPE_PALETTE, 8, true, 1}),
    [](const auto &info) { return std::string(info.param.name); });

//===----------------------------------------------------------------------===//
// JPEG decode
//===----------------------------------------------------------------------===//

TEST(JpegDecode, RgbQuality95IsClose) {
  const int h = 61, w = 83;
  std::vector<uint8_t> px = gradient(h, w, 3);
  std::string file = encodeJpeg(px, h, w, 3, 95, TJSAMP_444);
  Expected<ImageInfo> info = readImageInfo(file);
  ASSERT_TRUE(info) << info.status().message();
  EXPECT_EQ(info->format, ImageFormat::Jpeg);
  EXPECT_EQ(info->height, h);
  EXPECT_EQ(info->width, w);
  EXPECT_EQ(info->channels, 3);
  Expected<Tensor> img = decodeImage(file, 3);
  ASSERT_TRUE(img) << img.status().message();
  EXPECT_EQ(img->shape(), (std::vector<int64_t>{h, w, 3}));
  EXPECT_LE(maxAbsDiff(img->data<uint8_t>(), px.data(), px.size()), 6);
}

TEST(JpegDecode, Subsampled420IsCloseAndGrayIsLuma) {
  const int h = 64, w = 48;
  std::vector<uint8_t> px = gradient(h, w, 3, 9);
  std::string file = encodeJpeg(px, h, w, 3, 95, TJSAMP_420);
  Expected<Tensor> rgb = decodeImage(file, 3);
  ASSERT_TRUE(rgb) << rgb.status().message();
  EXPECT_LE(maxAbsDiff(rgb->data<uint8_t>(), px.data(), px.size()), 12);
  Expected<Tensor> gray = decodeImage(file, 1);
  ASSERT_TRUE(gray) << gray.status().message();
  EXPECT_EQ(gray->shape(), (std::vector<int64_t>{h, w, 1}));
  std::vector<uint8_t> ref(size_t(h) * w);
  for (size_t i = 0; i < ref.size(); ++i)
    ref[i] = luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
  EXPECT_LE(maxAbsDiff(gray->data<uint8_t>(), ref.data(), ref.size()), 6);
}

TEST(JpegDecode, GrayscaleJpegToRgbReplicates) {
  const int h = 30, w = 40;
  std::vector<uint8_t> px = gradient(h, w, 1, 3);
  std::string file = encodeJpeg(px, h, w, 1, 95, TJSAMP_GRAY);
  Expected<ImageInfo> info = readImageInfo(file);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->channels, 1);
  Expected<Tensor> img = decodeImage(file, 3);
  ASSERT_TRUE(img) << img.status().message();
  const uint8_t *p = img->data<uint8_t>();
  for (int i = 0; i < h * w; ++i) {
    ASSERT_EQ(p[3 * i], p[3 * i + 1]);
    ASSERT_EQ(p[3 * i], p[3 * i + 2]);
    ASSERT_LE(std::abs(int(p[3 * i]) - int(px[i])), 6) << "pixel " << i;
  }
}

TEST(JpegDecode, RejectsBadChannelCount) {
  std::string file = encodeJpeg(gradient(8, 8, 3), 8, 8, 3, 90, TJSAMP_444);
  Expected<Tensor> img = decodeImage(file, 4);
  ASSERT_FALSE(img);
  EXPECT_NE(img.status().message().find("channels must be 1 or 3"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Bad input: clear errors, never a crash
//===----------------------------------------------------------------------===//

TEST(DecodeErrors, NotAnImageNamesTheFirstBytes) {
  Expected<Tensor> img = decodeImage("<html><body>404</body></html>", 3);
  ASSERT_FALSE(img);
  EXPECT_EQ(img.status().message(),
            "not a JPEG or PNG (first bytes 3c 68 74 6d)");
  Expected<Tensor> empty = decodeImage("", 3);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
}

TEST(DecodeErrors, TruncatedJpegFails) {
  std::string file = encodeJpeg(gradient(64, 64, 3), 64, 64, 3, 95, TJSAMP_420);
  for (size_t keep : {size_t(3), size_t(20), file.size() / 4, file.size() / 2,
                      file.size() - 10}) {
    Expected<Tensor> img = decodeImage(file.substr(0, keep), 3);
    ASSERT_FALSE(img) << "kept " << keep << " of " << file.size();
    EXPECT_NE(img.status().message().find("JPEG"), std::string::npos)
        << img.status().message();
  }
  Expected<Tensor> img = decodeImage(file.substr(0, file.size() / 2), 3);
  EXPECT_EQ(img.status().message().rfind("truncated JPEG data: ", 0), 0u)
      << img.status().message();
}

TEST(DecodeErrors, CorruptJpegHeaderFails) {
  std::string file = encodeJpeg(gradient(16, 16, 3), 16, 16, 3, 95, TJSAMP_444);
  size_t sof = findJpegMarker(file, 0xC0);
  ASSERT_NE(sof, std::string::npos);
  std::string bad = file;
  bad[sof + 9] = 0; // number of components -> 0
  Expected<Tensor> img = decodeImage(bad, 3);
  ASSERT_FALSE(img);
  EXPECT_EQ(img.status().message().rfind("corrupt JPEG data: ", 0), 0u)
      << img.status().message();
}

TEST(DecodeErrors, AbsurdJpegDimensionsAreRefusedBeforeAllocating) {
  std::string file = encodeJpeg(gradient(16, 16, 3), 16, 16, 3, 95, TJSAMP_444);
  size_t sof = findJpegMarker(file, 0xC0);
  ASSERT_NE(sof, std::string::npos);
  // Height and width are big-endian at offsets 5 and 7 after the marker.
  file[sof + 5] = char(0xFD);
  file[sof + 6] = char(0xE8);
  file[sof + 7] = char(0xFD);
  file[sof + 8] = char(0xE8);
  Expected<Tensor> img = decodeImage(file, 3);
  ASSERT_FALSE(img);
  EXPECT_NE(img.status().message().find("65000x65000"), std::string::npos)
      << img.status().message();
  EXPECT_NE(img.status().message().find("refusing"), std::string::npos);
}

TEST(DecodeErrors, AbsurdPngDimensionsAreRefused) {
  std::vector<std::vector<uint8_t>> rows(4, std::vector<uint8_t>(4 * 3, 9));
  std::string file = encodePng(4, 4, 8, PNG_COLOR_TYPE_RGB, false, rows);
  // 20000 x 20000 = 4e8 pixels > 2^28, each side under 2^15.
  const unsigned char dims[8] = {0, 0, 0x4E, 0x20, 0, 0, 0x4E, 0x20};
  std::memcpy(&file[16], dims, 8);
  Expected<Tensor> img = decodeImage(file, 3);
  ASSERT_FALSE(img);
  EXPECT_NE(img.status().message().find("20000x20000"), std::string::npos)
      << img.status().message();
}

/// A budget for one thread's steps that counts what is reserved in it.
class CountingLimit final : public AllocationLimit {
public:
  explicit CountingLimit(int64_t limit) : limit_(limit) {}
  bool tryReserve(int64_t bytes) override {
    if (used_ + bytes > limit_) {
      ++refused;
      return false;
    }
    used_ += bytes;
    peak = std::max(peak, used_);
    ++reservations;
    return true;
  }
  void release(int64_t bytes) override { used_ -= bytes; }
  int64_t limit() const override { return limit_; }
  int64_t used() const override { return used_; }
  int64_t peak = 0, reservations = 0, refused = 0;

private:
  int64_t limit_, used_ = 0;
};

/// 141 bytes: a 16x16 RGB IHDR, then a tEXt chunk that declares
/// 0x7FFFFFF0 bytes and holds 100. libpng allocated the declared size
/// (2 GiB resident per decoding thread), counted nowhere.
std::string hugeTextChunkPng() {
  std::string f = "\x89PNG\r\n\x1a\n";
  auto be32 = [&](uint32_t v) {
    for (int i = 3; i >= 0; --i)
      f += char((v >> (8 * i)) & 0xFF);
  };
  std::string ihdr = "IHDR";
  for (uint32_t v : {16u, 16u})
    for (int i = 3; i >= 0; --i)
      ihdr += char((v >> (8 * i)) & 0xFF);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  be32(13);
  f += ihdr;
  be32(static_cast<uint32_t>(crc32(0,
                                   reinterpret_cast<const Bytef *>(ihdr.data()),
                                   static_cast<uInt>(ihdr.size()))));
  be32(0x7FFFFFF0u);
  f += "tEXtComment";
  f += '\0';
  f += std::string(92, 'A');
  return f;
}

TEST(DecodeErrors, HugeAncillaryChunkStaysWithinTheBudget) {
  std::string file = hugeTextChunkPng();
  ASSERT_EQ(file.size(), 141u);
  // In a child, so that its peak resident set is this decode's alone.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    CountingLimit limit(int64_t(64) << 20);
    int code = 0;
    {
      AllocationScope scope(&limit);
      Expected<Tensor> img = decodeImage(file, 3);
      if (img)
        code |= 1; // must fail
      else if (img.status().message().rfind("truncated PNG data", 0) != 0)
        code |= 2;
    }
    if (limit.peak > (int64_t(64) << 20) || limit.used() != 0)
      code |= 4;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (ru.ru_maxrss > 512 * 1024) // KiB: 2 GiB before the fix
      code |= 8;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: decoded, 2: wrong message, 4: past the limit, 8: peak RSS over "
         "512 MiB";
  // The text chunk is skipped as it is read, never allocated: the file
  // ends inside it.
  Expected<Tensor> img = decodeImage(file, 3);
  ASSERT_FALSE(img);
  EXPECT_EQ(img.status().message().rfind("truncated PNG data", 0), 0u)
      << img.status().message();
}

TEST(DecodeErrors, LibpngAllocationsAreCountedInTheBudget) {
  std::vector<std::vector<uint8_t>> rows(40);
  std::vector<uint8_t> px = gradient(40, 50, 3);
  for (int y = 0; y < 40; ++y)
    rows[y].assign(px.begin() + y * 150, px.begin() + (y + 1) * 150);
  std::string file = encodePng(50, 40, 8, PNG_COLOR_TYPE_RGB, true, rows);
  CountingLimit roomy(int64_t(64) << 20);
  {
    AllocationScope scope(&roomy);
    Expected<Tensor> img = decodeImage(file, 3);
    ASSERT_TRUE(img) << img.status().message();
  }
  // libpng's structs, row buffers and zlib state went through the budget
  // and came back.
  EXPECT_GT(roomy.reservations, 0);
  EXPECT_GT(roomy.peak, 50 * 3);
  EXPECT_EQ(roomy.used(), 0);
  // A budget smaller than what libpng needs refuses it: a decode error
  // that names the budget, not an allocation past it.
  CountingLimit tight(roomy.peak / 2);
  AllocationScope scope(&tight);
  Expected<Tensor> img = decodeImage(file, 3);
  ASSERT_FALSE(img);
  EXPECT_GT(tight.refused, 0);
  EXPECT_NE(img.status().message().find("budget.memory"), std::string::npos)
      << img.status().message();
  EXPECT_LE(tight.peak, tight.limit());
}

TEST(DecodeErrors, TruncatedAndCorruptPngFail) {
  std::vector<std::vector<uint8_t>> rows(40);
  std::vector<uint8_t> px = gradient(40, 50, 3);
  for (int y = 0; y < 40; ++y)
    rows[y].assign(px.begin() + y * 150, px.begin() + (y + 1) * 150);
  std::string file = encodePng(50, 40, 8, PNG_COLOR_TYPE_RGB, false, rows);
  Expected<Tensor> cut = decodeImage(file.substr(0, file.size() / 2), 3);
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.status().message().rfind("truncated PNG data", 0), 0u)
      << cut.status().message();
  Expected<Tensor> tiny = decodeImage(file.substr(0, 12), 3);
  ASSERT_FALSE(tiny);
  // Flip a byte inside IDAT: the chunk CRC no longer matches.
  std::string bad = file;
  size_t idat = bad.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  bad[idat + 20] = char(bad[idat + 20] ^ 0x5A);
  Expected<Tensor> corrupt = decodeImage(bad, 3);
  ASSERT_FALSE(corrupt);
  EXPECT_EQ(corrupt.status().message().rfind("corrupt PNG data: ", 0), 0u)
      << corrupt.status().message();
}

TEST(DecodeErrors, RandomMutationsNeverCrash) {
  std::vector<std::string> files;
  files.push_back(encodeJpeg(gradient(32, 24, 3), 32, 24, 3, 80, TJSAMP_420));
  std::vector<std::vector<uint8_t>> rows(24, std::vector<uint8_t>(32 * 3));
  for (int y = 0; y < 24; ++y)
    for (int i = 0; i < 96; ++i)
      rows[y][i] = uint8_t(y * i);
  files.push_back(encodePng(32, 24, 8, PNG_COLOR_TYPE_RGB, true, rows));
  Rng rng(1, 0, 0, 0);
  int failures = 0;
  for (const std::string &file : files) {
    for (int iter = 0; iter < 300; ++iter) {
      std::string m = file;
      int edits = 1 + int(rng.uniformInt(0, 4));
      for (int e = 0; e < edits; ++e)
        m[size_t(rng.uniformInt(2, int64_t(m.size())))] =
            char(rng.uniformInt(0, 256));
      if (rng.bernoulli(0.3))
        m.resize(size_t(rng.uniformInt(1, int64_t(m.size()))));
      for (int channels : {1, 3}) {
        Expected<Tensor> img = decodeImage(m, channels);
        if (img) {
          EXPECT_EQ(img->rank(), 3u);
          EXPECT_EQ(img->dim(2), channels);
        } else {
          EXPECT_FALSE(img.status().message().empty());
          ++failures;
        }
      }
    }
  }
  EXPECT_GT(failures, 0);
}

//===----------------------------------------------------------------------===//
// Fused decode + crop
//===----------------------------------------------------------------------===//

TEST(DecodeCrop, SameAsDecodeThenCrop) {
  const int h = 50, w = 70;
  std::string jpeg = encodeJpeg(gradient(h, w, 3), h, w, 3, 90, TJSAMP_420);
  Expected<Tensor> full = decodeImage(jpeg, 3);
  ASSERT_TRUE(full) << full.status().message();
  for (CropBox box : {CropBox{5, 7, 20, 30}, CropBox{0, 0, h, w},
                      CropBox{-3, 60, 10, 20}, CropBox{45, -5, 10, 10}}) {
    Expected<Tensor> fused = decodeImageCrop(jpeg, 3, box);
    ASSERT_TRUE(fused) << fused.status().message();
    Expected<Tensor> ref = cropPadded(*full, box);
    ASSERT_TRUE(ref);
    EXPECT_TRUE(fused->sameAs(*ref)) << box.y << "," << box.x;
  }
}

TEST(DecodeCrop, RandomResizedCropSameAsUnfused) {
  const int h = 120, w = 90;
  std::string jpeg = encodeJpeg(gradient(h, w, 3), h, w, 3, 90, TJSAMP_420);
  Expected<Tensor> full = decodeImage(jpeg, 3);
  ASSERT_TRUE(full) << full.status().message();
  RandomResizedCropParams p;
  p.height = 32;
  p.width = 40;
  for (uint64_t index = 0; index < 20; ++index) {
    Rng a(42, 1, index, 5), b(42, 1, index, 5);
    Expected<Tensor> fused = decodeRandomResizedCrop(jpeg, 3, p, a);
    Expected<Tensor> unfused = randomResizedCrop(*full, p, b);
    ASSERT_TRUE(fused) << fused.status().message();
    ASSERT_TRUE(unfused) << unfused.status().message();
    EXPECT_TRUE(fused->sameAs(*unfused)) << "index " << index;
  }
}

TEST(DecodeCrop, DctScalingIsCloseAndSmaller) {
  const int h = 480, w = 640;
  std::string jpeg = encodeJpeg(gradient(h, w, 3), h, w, 3, 95, TJSAMP_444);
  RandomResizedCropParams p;
  p.height = 56;
  p.width = 56;
  p.scaleLo = 0.9; // boxes large enough for 1/4 or 1/8 scale
  DecodeOptions dctScaling;
  dctScaling.allowDctScaling = true;
  double meanDiff = 0;
  for (uint64_t index = 0; index < 5; ++index) {
    Rng a(3, 0, index, 1), b(3, 0, index, 1);
    Expected<Tensor> exact = decodeRandomResizedCrop(jpeg, 3, p, a);
    Expected<Tensor> scaled =
        decodeRandomResizedCrop(jpeg, 3, p, b, dctScaling);
    ASSERT_TRUE(exact && scaled);
    ASSERT_EQ(scaled->shape(), exact->shape());
    const uint8_t *x = exact->data<uint8_t>(), *y = scaled->data<uint8_t>();
    for (size_t i = 0; i < exact->nbytes(); ++i)
      meanDiff += std::abs(int(x[i]) - int(y[i]));
  }
  meanDiff /= 5.0 * 56 * 56 * 3;
  // Different sampling (a DCT-domain 1/8 downscale averages, bilinear
  // without antialias samples sparse pixels and aliases), same picture: the
  // mean difference stays a few levels (a misplaced box gives tens).
  EXPECT_LT(meanDiff, 10.0);
}

//===----------------------------------------------------------------------===//
// Resize vs straightforward references
//===----------------------------------------------------------------------===//

/// torch interpolate(bilinear, align_corners=False) written per pixel.
double refBilinear(const std::vector<double> &img, int h, int w, int c, int oh,
                   int ow, int oy, int ox, int ch) {
  auto src = [](int o, int in, int out) {
    double s = (o + 0.5) * double(in) / out - 0.5;
    return s < 0 ? 0.0 : s;
  };
  double sy = src(oy, h, oh), sx = src(ox, w, ow);
  int y0 = std::min(int(sy), h - 1), x0 = std::min(int(sx), w - 1);
  int y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
  double ly = sy - y0, lx = sx - x0;
  auto at = [&](int y, int x) { return img[(size_t(y) * w + x) * c + ch]; };
  return (1 - ly) * ((1 - lx) * at(y0, x0) + lx * at(y0, x1)) +
         ly * ((1 - lx) * at(y1, x0) + lx * at(y1, x1));
}

/// One axis of an antialiased (PIL) triangle resample in plain doubles:
/// the weights of output o over the source, support widened by the
/// downscale factor, normalized over the taps inside the image.
std::vector<double> refAaWeights(int in, int out, int o) {
  double scale = double(in) / out, fs = std::max(scale, 1.0);
  double center = (o + 0.5) * scale;
  std::vector<double> wts(in, 0.0);
  double sum = 0;
  for (int x = 0; x < in; ++x) {
    double d = std::fabs((x + 0.5 - center) / fs);
    wts[x] = d < 1 ? 1 - d : 0;
    sum += wts[x];
  }
  for (double &v : wts)
    v /= sum;
  return wts;
}

double refAntialias(const std::vector<double> &img, int h, int w, int c, int oh,
                    int ow, int oy, int ox, int ch) {
  std::vector<double> wy = refAaWeights(h, oh, oy),
                      wx = refAaWeights(w, ow, ox);
  double s = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      s += wy[y] * wx[x] * img[(size_t(y) * w + x) * c + ch];
  return s;
}

double refArea(const std::vector<double> &img, int h, int w, int c, int oh,
               int ow, int oy, int ox, int ch) {
  int y0 = int(std::floor(double(oy) * h / oh));
  int y1 = int(std::ceil(double(oy + 1) * h / oh));
  int x0 = int(std::floor(double(ox) * w / ow));
  int x1 = int(std::ceil(double(ox + 1) * w / ow));
  double s = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      s += img[(size_t(y) * w + x) * c + ch];
  return s / ((y1 - y0) * (x1 - x0));
}

struct ResizeCase {
  int h, w, c, oh, ow;
  bool rank2;
};

class Resize : public ::testing::TestWithParam<ResizeCase> {
protected:
  Tensor makeU8(std::vector<double> &vals) {
    auto [h, w, c, oh, ow, rank2] = GetParam();
    std::vector<uint8_t> px = gradient(h, w, c, 1);
    vals.assign(px.begin(), px.end());
    std::vector<int64_t> shape =
        rank2 ? std::vector<int64_t>{h, w} : std::vector<int64_t>{h, w, c};
    Tensor t = Tensor::empty(ElemType::U8, shape);
    std::memcpy(t.mutableRaw(), px.data(), px.size());
    return t;
  }
};

TEST_P(Resize, NearestIsExact) {
  auto [h, w, c, oh, ow, rank2] = GetParam();
  std::vector<double> vals;
  Tensor img = makeU8(vals);
  Expected<Tensor> out = resize(img, oh, ow, Interpolation::Nearest);
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(out->dim(0), oh);
  ASSERT_EQ(out->dim(1), ow);
  ASSERT_EQ(out->rank(), img.rank());
  const uint8_t *p = out->data<uint8_t>();
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int ch = 0; ch < c; ++ch) {
        // torch's nearest_idx: float scale, special cases for 1x and 2x.
        auto idx = [](int o, int in, int out) {
          if (in == out)
            return o;
          if (out == 2 * in)
            return o / 2;
          float scale = float(in) / float(out);
          return std::min(int(std::floor(float(o) * scale)), in - 1);
        };
        int sy = idx(y, h, oh), sx = idx(x, w, ow);
        ASSERT_EQ(p[(size_t(y) * ow + x) * c + ch],
                  uint8_t(vals[(size_t(sy) * w + sx) * c + ch]))
            << y << "," << x << "," << ch;
      }
}

TEST_P(Resize, BilinearU8WithinOne) {
  auto [h, w, c, oh, ow, rank2] = GetParam();
  std::vector<double> vals;
  Tensor img = makeU8(vals);
  Expected<Tensor> out = resize(img, oh, ow, Interpolation::Bilinear);
  ASSERT_TRUE(out) << out.status().message();
  const uint8_t *p = out->data<uint8_t>();
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int ch = 0; ch < c; ++ch) {
        double r = refBilinear(vals, h, w, c, oh, ow, y, x, ch);
        ASSERT_LE(std::fabs(p[(size_t(y) * ow + x) * c + ch] - r), 1.0)
            << y << "," << x << "," << ch;
      }
}

// Antialiased: within 1 of the exact separable triangle filter for u8 (PIL
// rounds after each pass), within 1e-4 for f32; the lit test
// examples/antialias.test checks u8 byte for byte against PIL itself.
TEST_P(Resize, AntialiasU8WithinOneOfTriangleFilter) {
  auto [h, w, c, oh, ow, rank2] = GetParam();
  std::vector<double> vals;
  Tensor img = makeU8(vals);
  Expected<Tensor> out = resize(img, oh, ow, Interpolation::Bilinear, true);
  ASSERT_TRUE(out) << out.status().message();
  std::vector<int64_t> shape{oh, ow};
  if (!rank2)
    shape.push_back(c);
  ASSERT_EQ(out->shape(), shape);
  const uint8_t *p = out->data<uint8_t>();
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int ch = 0; ch < c; ++ch) {
        double r = refAntialias(vals, h, w, c, oh, ow, y, x, ch);
        ASSERT_LE(std::fabs(p[(size_t(y) * ow + x) * c + ch] - r), 1.0)
            << y << "," << x << "," << ch;
      }
}

TEST_P(Resize, AntialiasF32Close) {
  auto [h, w, c, oh, ow, rank2] = GetParam();
  std::vector<double> vals;
  Tensor u8 = makeU8(vals);
  Tensor img = Tensor::empty(ElemType::F32, u8.shape());
  for (size_t i = 0; i < vals.size(); ++i)
    img.mutableData<float>()[i] = float(vals[i]) / 7.0f;
  for (double &v : vals)
    v = float(v) / 7.0f;
  Expected<Tensor> out = resize(img, oh, ow, Interpolation::Bilinear, true);
  ASSERT_TRUE(out) << out.status().message();
  const float *p = out->data<float>();
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int ch = 0; ch < c; ++ch)
        ASSERT_NEAR(p[(size_t(y) * ow + x) * c + ch],
                    refAntialias(vals, h, w, c, oh, ow, y, x, ch), 1e-4)
            << y << "," << x << "," << ch;
}

/// Shrinking by 2x or less and growing, antialiasing changes nothing but
/// rounding; shrinking more, it averages what bilinear skips.
TEST(ResizeAntialias, DiffersFromPlainBilinearOnlyWhenShrinkingMuch) {
  std::vector<uint8_t> px(64 * 64 * 3);
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = ((i / 3) % 64) % 3 == 0 ? 255 : 0; // every third column white
  Tensor img = Tensor::empty(ElemType::U8, {64, 64, 3});
  std::memcpy(img.mutableRaw(), px.data(), px.size());
  Expected<Tensor> aa = resize(img, 8, 8, Interpolation::Bilinear, true);
  Expected<Tensor> plain = resize(img, 8, 8, Interpolation::Bilinear, false);
  ASSERT_TRUE(aa && plain);
  // Away from the edges the antialiased result is the stripes' mean (85);
  // plain bilinear blends two neighbouring columns: 0 or 128.
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 1; x < 7; ++x)
      for (int64_t ch = 0; ch < 3; ++ch) {
        size_t i = size_t((y * 8 + x) * 3 + ch);
        EXPECT_NEAR(aa->data<uint8_t>()[i], 85, 3) << y << "," << x;
        uint8_t v = plain->data<uint8_t>()[i];
        EXPECT_TRUE(v == 0 || v == 128) << int(v);
      }
  Expected<Tensor> up = resize(img, 80, 80, Interpolation::Bilinear, true);
  Expected<Tensor> upPlain = resize(img, 80, 80, Interpolation::Bilinear);
  ASSERT_TRUE(up && upPlain);
  for (size_t i = 0; i < up->nbytes(); ++i)
    ASSERT_NEAR(up->data<uint8_t>()[i], upPlain->data<uint8_t>()[i], 1) << i;
}

/// The AVX2 horizontal pass gives the scalar pass's bytes: every shrink
/// factor from 1.1x to 9x and growing, odd sizes, on a noisy gradient.
TEST(ResizeAntialias, SimdEqualsPortable) {
  std::vector<uint8_t> px = gradient(173, 211, 3, 5);
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<uint8_t>(px[i] ^ ((i * 2654435761u) >> 26));
  Tensor img = Tensor::empty(ElemType::U8, {173, 211, 3});
  std::memcpy(img.mutableRaw(), px.data(), px.size());
  for (int64_t ow : {1, 2, 3, 23, 24, 97, 150, 190, 211, 300})
    for (int64_t oh : {1, 19, 64, 173, 200}) {
      setImageSimd(true);
      Expected<Tensor> fast =
          resize(img, oh, ow, Interpolation::Bilinear, true);
      setImageSimd(false);
      Expected<Tensor> slow =
          resize(img, oh, ow, Interpolation::Bilinear, true);
      setImageSimd(true);
      ASSERT_TRUE(fast && slow);
      ASSERT_EQ(std::memcmp(fast->raw(), slow->raw(), slow->nbytes()), 0)
          << oh << "x" << ow;
    }
}

TEST_P(Resize, BilinearF32Close) {
  auto [h, w, c, oh, ow, rank2] = GetParam();
  std::vector<double> vals;
  Tensor u8 = makeU8(vals);
  Tensor img = Tensor::empty(ElemType::F32, u8.shape());
  for (size_t i = 0; i < vals.size(); ++i)
    img.mutableData<float>()[i] = float(vals[i]) / 7.0f;
  for (double &v : vals)
    v = float(v) / 7.0f;
  Expected<Tensor> out = resize(img, oh, ow, Interpolation::Bilinear);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->elem(), ElemType::F32);
  const float *p = out->data<float>();
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int ch = 0; ch < c; ++ch)
        ASSERT_NEAR(p[(size_t(y) * ow + x) * c + ch],
                    refBilinear(vals, h, w, c, oh, ow, y, x, ch), 2e-4)
            << y << "," << x << "," << ch;
}

TEST_P(Resize, AreaU8WithinOne) {
  auto [h, w, c, oh, ow, rank2] = GetParam();
  std::vector<double> vals;
  Tensor img = makeU8(vals);
  Expected<Tensor> out = resize(img, oh, ow, Interpolation::Area);
  ASSERT_TRUE(out) << out.status().message();
  const uint8_t *p = out->data<uint8_t>();
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x)
      for (int ch = 0; ch < c; ++ch)
        ASSERT_LE(std::fabs(p[(size_t(y) * ow + x) * c + ch] -
                            refArea(vals, h, w, c, oh, ow, y, x, ch)),
                  0.5 + 1e-9)
            << y << "," << x << "," << ch;
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, Resize,
    ::testing::Values(ResizeCase{20, 30, 3, 20, 30, false}, // identity
                      ResizeCase{20, 30, 3, 40, 60, false}, // 2x up
                      ResizeCase{40, 60, 3, 20, 30, false}, // 2x down
                      ResizeCase{37, 53, 3, 224, 224, false},
                      ResizeCase{100, 90, 3, 13, 17, false}, // >2x down
                      ResizeCase{7, 5, 1, 3, 11, false},
                      ResizeCase{7, 5, 1, 9, 2, true}, // HW
                      ResizeCase{16, 16, 4, 5, 5, false},
                      ResizeCase{9, 11, 5, 14, 6, false}, // generic C
                      ResizeCase{1, 1, 3, 4, 4, false},
                      ResizeCase{5, 8, 3, 1, 1, false}));

TEST(ResizeErrors, RejectsBadInput) {
  Tensor img = Tensor::zeros(ElemType::U8, {4, 4, 3});
  EXPECT_FALSE(resize(img, 0, 4, Interpolation::Bilinear));
  EXPECT_FALSE(resize(Tensor::zeros(ElemType::I32, {4, 4}), 2, 2,
                      Interpolation::Bilinear));
  EXPECT_FALSE(
      resize(Tensor::zeros(ElemType::U8, {4}), 2, 2, Interpolation::Nearest));
}

//===----------------------------------------------------------------------===//
// Crops
//===----------------------------------------------------------------------===//

/// u8[h,w,c] with pixel value (y*w+x)*c+ch mod 251 (+1 so 0 means padding).
Tensor indexImage(int h, int w, int c) {
  Tensor t = Tensor::empty(ElemType::U8, {h, w, c});
  for (int i = 0; i < h * w * c; ++i)
    t.mutableData<uint8_t>()[i] = uint8_t(1 + i % 251);
  return t;
}

uint8_t at(const Tensor &t, int64_t y, int64_t x, int64_t ch) {
  return t.data<uint8_t>()[(y * t.dim(1) + x) * t.dim(2) + ch];
}

/// Checks `out` is the box of `img`, zero outside.
void expectBox(const Tensor &img, const Tensor &out, CropBox box) {
  ASSERT_EQ(out.dim(0), box.h);
  ASSERT_EQ(out.dim(1), box.w);
  for (int64_t y = 0; y < box.h; ++y)
    for (int64_t x = 0; x < box.w; ++x)
      for (int64_t ch = 0; ch < img.dim(2); ++ch) {
        int64_t sy = box.y + y, sx = box.x + x;
        bool inside = sy >= 0 && sy < img.dim(0) && sx >= 0 && sx < img.dim(1);
        ASSERT_EQ(at(out, y, x, ch), inside ? at(img, sy, sx, ch) : 0)
            << y << "," << x;
      }
}

TEST(Crop, StrictCropChecksBounds) {
  Tensor img = indexImage(10, 12, 3);
  Expected<Tensor> ok = crop(img, {2, 3, 4, 5});
  ASSERT_TRUE(ok);
  expectBox(img, *ok, {2, 3, 4, 5});
  Expected<Tensor> bad = crop(img, {8, 3, 4, 5});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("does not fit"), std::string::npos);
}

struct CenterCase {
  int h, w, ch, cw;
  int64_t top, left; ///< torchvision's offsets (negative: padding)
};
class CenterCrop : public ::testing::TestWithParam<CenterCase> {};

TEST_P(CenterCrop, MatchesTorchvisionOffsets) {
  auto [h, w, ch, cw, top, left] = GetParam();
  Tensor img = indexImage(h, w, 3);
  Expected<Tensor> out = centerCrop(img, ch, cw);
  ASSERT_TRUE(out) << out.status().message();
  expectBox(img, *out, {top, left, ch, cw});
}

// Offsets worked out from torchvision.transforms.functional.center_crop:
// top = int(round((H - h) / 2.0)) (ties to even), and for a larger crop the
// image is padded by (h - H) // 2 on top first.
INSTANTIATE_TEST_SUITE_P(
    Torchvision, CenterCrop,
    ::testing::Values(
        CenterCase{10, 10, 4, 4, 3, 3},
        CenterCase{5, 7, 2, 3, 2, 2},   // round(1.5)=2, round(2)=2
        CenterCase{6, 9, 3, 2, 2, 4},   // round(1.5)=2, round(3.5)=4
        CenterCase{8, 8, 3, 3, 2, 2},   // round(2.5)=2
        CenterCase{2, 2, 4, 5, -1, -1}, // pad 1 top, (5-2)//2=1 left
        CenterCase{3, 8, 6, 4, -1, 2}));

TEST(RandomCrop, DeterministicInBoundsAndZeroPadded) {
  Tensor img = indexImage(12, 16, 3);
  std::set<std::pair<int64_t, int64_t>> corners;
  for (uint64_t index = 0; index < 200; ++index) {
    Rng a(1, 0, index, 2), b(1, 0, index, 2);
    Expected<Tensor> x = randomCrop(img, 10, 10, 4, false, a);
    Expected<Tensor> y = randomCrop(img, 10, 10, 4, false, b);
    ASSERT_TRUE(x && y);
    EXPECT_TRUE(x->sameAs(*y));
    // Recover the box from the draws and check the pixels.
    Rng c(1, 0, index, 2);
    int64_t top = c.uniformInt(0, 20 - 10 + 1) - 4;
    int64_t left = c.uniformInt(0, 24 - 10 + 1) - 4;
    expectBox(img, *x, {top, left, 10, 10});
    corners.insert({top, left});
  }
  EXPECT_GT(corners.size(), 50u); // the draws vary
  Rng r(0, 0, 0, 0);
  EXPECT_FALSE(randomCrop(img, 20, 20, 0, false, r));
  Expected<Tensor> padded = randomCrop(img, 20, 20, 0, true, r);
  ASSERT_TRUE(padded) << padded.status().message();
  EXPECT_EQ(padded->dim(0), 20);
}

//===----------------------------------------------------------------------===//
// random_resized_crop
//===----------------------------------------------------------------------===//

TEST(RandomResizedCropBox, DeterministicAndInsideImage) {
  for (auto [h, w] : std::vector<std::pair<int, int>>{
           {1, 1}, {3, 100}, {100, 3}, {224, 224}, {375, 500}, {1000, 17}}) {
    for (uint64_t index = 0; index < 500; ++index) {
      Rng a(42, 3, index, 9), b(42, 3, index, 9);
      CropBox x = randomResizedCropBox(h, w, 0.08, 1.0, 0.75, 4.0 / 3, a);
      CropBox y = randomResizedCropBox(h, w, 0.08, 1.0, 0.75, 4.0 / 3, b);
      ASSERT_EQ(x, y);
      ASSERT_GE(x.y, 0);
      ASSERT_GE(x.x, 0);
      ASSERT_GE(x.h, 1);
      ASSERT_GE(x.w, 1);
      ASSERT_LE(x.y + x.h, h) << h << "x" << w << " index " << index;
      ASSERT_LE(x.x + x.w, w) << h << "x" << w << " index " << index;
    }
  }
}

TEST(RandomResizedCropBox, DifferentElementsGetDifferentBoxes) {
  std::set<std::vector<int64_t>> boxes;
  for (uint64_t index = 0; index < 100; ++index) {
    Rng rng(42, 0, index, 1);
    CropBox b = randomResizedCropBox(400, 600, 0.08, 1.0, 0.75, 4.0 / 3, rng);
    boxes.insert({b.y, b.x, b.h, b.w});
  }
  EXPECT_GT(boxes.size(), 95u);
  Rng e0(42, 0, 7, 1), e1(42, 1, 7, 1);
  EXPECT_FALSE(randomResizedCropBox(400, 600, 0.08, 1, 0.75, 4.0 / 3, e0) ==
               randomResizedCropBox(400, 600, 0.08, 1, 0.75, 4.0 / 3, e1));
}

TEST(RandomResizedCropBox, AcceptedBoxesHaveRequestedScaleAndRatio) {
  int accepted = 0;
  for (uint64_t index = 0; index < 2000; ++index) {
    Rng rng(5, 0, index, 1);
    CropBox b = randomResizedCropBox(500, 500, 0.25, 0.5, 0.5, 2.0, rng);
    double area = double(b.h) * b.w / (500.0 * 500.0);
    double ratio = double(b.w) / b.h;
    // Rounding w and h to integers moves area and ratio a little.
    EXPECT_GE(area, 0.25 * 0.98);
    EXPECT_LE(area, 0.5 * 1.02);
    EXPECT_GE(ratio, 0.5 * 0.98);
    EXPECT_LE(ratio, 2.0 * 1.02);
    ++accepted;
  }
  EXPECT_EQ(accepted, 2000);
}

struct FallbackCase {
  int h, w;
  CropBox expected;
};
class RrcFallback : public ::testing::TestWithParam<FallbackCase> {};

// scale > 1 can never fit, so all 10 attempts fail and get_params returns the
// central crop with the aspect ratio clamped to [3/4, 4/3]:
//   100x300: in_ratio 3 > 4/3 -> h = 100, w = round(100 * 4/3) = 133,
//            j = (300 - 133) // 2 = 83
//   300x100: in_ratio 1/3 < 3/4 -> w = 100, h = round(100 / 0.75) = 133,
//            i = (300 - 133) // 2 = 83
//   120x130: ratio inside the range -> the whole image
TEST_P(RrcFallback, CentralCropWithClampedRatio) {
  auto [h, w, expected] = GetParam();
  Rng rng(1, 2, 3, 4);
  CropBox b = randomResizedCropBox(h, w, 2.0, 3.0, 0.75, 4.0 / 3, rng);
  EXPECT_EQ(b, expected) << b.y << " " << b.x << " " << b.h << " " << b.w;
  // 10 attempts x 2 uniform doubles x 2 words = 40 words = 10 blocks.
  EXPECT_EQ(rng.blocksUsed(), 10u);
}

INSTANTIATE_TEST_SUITE_P(
    Torchvision, RrcFallback,
    ::testing::Values(FallbackCase{100, 300, {0, 83, 100, 133}},
                      FallbackCase{300, 100, {83, 0, 133, 100}},
                      FallbackCase{120, 130, {0, 0, 120, 130}}));

TEST(RandomResizedCropBox, FullScaleSquareIsWholeImage) {
  Rng rng(1, 1, 1, 1);
  EXPECT_EQ(randomResizedCropBox(64, 64, 1.0, 1.0, 1.0, 1.0, rng),
            (CropBox{0, 0, 64, 64}));
}

TEST(RandomResizedCrop, OutputIsResizedBox) {
  Tensor img = indexImage(60, 80, 3);
  RandomResizedCropParams p;
  p.height = 24;
  p.width = 24;
  p.interpolation = Interpolation::Nearest;
  Rng a(8, 0, 3, 1), b(8, 0, 3, 1);
  Expected<Tensor> out = randomResizedCrop(img, p, a);
  ASSERT_TRUE(out) << out.status().message();
  CropBox box = randomResizedCropBox(60, 80, p.scaleLo, p.scaleHi, p.ratioLo,
                                     p.ratioHi, b);
  Expected<Tensor> cropped = crop(img, box);
  ASSERT_TRUE(cropped);
  Expected<Tensor> ref = resize(*cropped, 24, 24, Interpolation::Nearest);
  ASSERT_TRUE(ref);
  EXPECT_TRUE(out->sameAs(*ref));
}

//===----------------------------------------------------------------------===//
// Flip and color conversion
//===----------------------------------------------------------------------===//

TEST(Flip, WidthAndHeight) {
  for (ElemType e : {ElemType::U8, ElemType::F32}) {
    for (int c : {1, 3, 4}) {
      Tensor img = Tensor::empty(e, {5, 7, c});
      size_t es = elemTypeSize(e);
      for (size_t i = 0; i < img.nbytes(); ++i)
        img.mutableRaw()[i] = uint8_t(i * 13 + 1);
      Expected<Tensor> fw = flip(img, FlipAxis::Width);
      Expected<Tensor> fh = flip(img, FlipAxis::Height);
      ASSERT_TRUE(fw && fh);
      size_t pb = es * c;
      for (int y = 0; y < 5; ++y)
        for (int x = 0; x < 7; ++x) {
          EXPECT_EQ(std::memcmp(fw->raw() + (y * 7 + x) * pb,
                                img.raw() + (y * 7 + 6 - x) * pb, pb),
                    0);
          EXPECT_EQ(std::memcmp(fh->raw() + (y * 7 + x) * pb,
                                img.raw() + ((4 - y) * 7 + x) * pb, pb),
                    0);
        }
      Expected<Tensor> back = flip(*fw, FlipAxis::Width);
      ASSERT_TRUE(back);
      EXPECT_TRUE(back->sameAs(img));
    }
  }
}

TEST(Flip, RandomFlipProbabilityAndSharing) {
  Tensor img = indexImage(4, 6, 3);
  Rng never(1, 0, 0, 0);
  Expected<Tensor> same = randomFlip(img, FlipAxis::Width, 0.0, never);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->raw(), img.raw()); // no copy when not flipping
  Rng always(1, 0, 0, 0);
  Expected<Tensor> flipped = randomFlip(img, FlipAxis::Width, 1.0, always);
  ASSERT_TRUE(flipped);
  EXPECT_TRUE(flipped->sameAs(*flip(img, FlipAxis::Width)));
  int flips = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    Rng rng(3, 0, i, 1);
    Expected<Tensor> r = randomFlip(img, FlipAxis::Width, 0.5, rng);
    flips += r->raw() != img.raw();
  }
  EXPECT_NEAR(flips, 1000, 150);
}

TEST(Color, GrayRgbRoundTrip) {
  Tensor gray = Tensor::empty(ElemType::U8, {3, 4, 1});
  for (int i = 0; i < 12; ++i)
    gray.mutableData<uint8_t>()[i] = uint8_t(i * 20);
  Expected<Tensor> rgb = grayToRgb(gray);
  ASSERT_TRUE(rgb);
  EXPECT_EQ(rgb->shape(), (std::vector<int64_t>{3, 4, 3}));
  Expected<Tensor> back = rgbToGray(*rgb);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->sameAs(gray)); // weights sum to 65536: gray is a fixpoint
  Tensor color = Tensor::empty(ElemType::U8, {1, 1, 3});
  color.mutableData<uint8_t>()[0] = 255;
  color.mutableData<uint8_t>()[1] = 0;
  color.mutableData<uint8_t>()[2] = 0;
  // PIL: L = R * 299/1000 + ... -> 76 for pure red.
  EXPECT_EQ(rgbToGray(color)->data<uint8_t>()[0], 76);
  EXPECT_FALSE(rgbToGray(gray));
}

} // namespace
