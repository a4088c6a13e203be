//===- kernels_decode_crop_test.cpp - Crop-window JPEG decode vs full -----===//
//
// The crop-window decode (libjpeg's jpeg_crop_scanline/jpeg_skip_scanlines)
// must give exactly the pixels of a full TurboJPEG decode followed by a
// crop, for every subsampling, progressive files, odd sizes and boxes at
// every edge, and, with verifyFull, the same error messages for damaged
// files; by default a truncated file is still refused while damage below
// the window is not looked at. The JPEGs are
// encoded here from noisy images, so that upsampling at a window edge that
// saw the wrong neighbour would show.
//
//===----------------------------------------------------------------------===//

#include "sluice/ops/Random.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Image.h"
#include "sluice/ops/kernels/Layout.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <jpeglib.h>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::kernels;

namespace {

/// A smooth pattern plus per-pixel noise, h x w x c.
std::vector<uint8_t> noisyImage(int h, int w, int c, uint32_t seed) {
  std::vector<uint8_t> px(size_t(h) * w * c);
  uint32_t state = seed * 2654435761u + 1;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        state = state * 1664525u + 1013904223u;
        double v =
            128 +
            80 * std::sin((x + 5 * ch) * 0.11) * std::cos((y + 3 * ch) * 0.07) +
            double(state >> 26) - 32;
        px[(size_t(y) * w + x) * c + ch] =
            uint8_t(std::lround(std::fmin(255, std::fmax(0, v))));
      }
  return px;
}

struct Encoding {
  const char *name;
  int height, width;
  int channels; ///< of the encoded image
  int subsamp;
  bool progressive;
};

void PrintTo(const Encoding &e, std::ostream *os) { *os << e.name; }

std::string encode(const Encoding &e, uint32_t seed) {
  std::vector<uint8_t> px = noisyImage(e.height, e.width, e.channels, seed);
  tjhandle tj = tjInitCompress();
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  int flags = e.progressive ? TJFLAG_PROGRESSIVE : 0;
  int rc = tjCompress2(tj, px.data(), e.width, 0, e.height,
                       e.channels == 1 ? TJPF_GRAY : TJPF_RGB, &buf, &size,
                       e.subsamp, 88, flags);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::string out(reinterpret_cast<char *>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

/// How often `withRestarts` puts a restart marker.
enum class Restarts {
  OneMcu,    ///< every MCU (`jpegtran -restart 1B`)
  TwoMcus,   ///< every 2 MCUs: tiles a row only when it has an even count
  ThreeMcus, ///< every 3 MCUs: rows whose count is not a multiple fall back
  Row,       ///< every MCU row
  TwoRows,   ///< every 2 MCU rows
};

struct JpegJump {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

/// `jpeg` transcoded losslessly (the same DCT coefficients, so the same
/// pixels; progressive input comes out sequential) with restart markers.
std::string withRestarts(const std::string &jpeg, Restarts r) {
  jpeg_decompress_struct d;
  jpeg_compress_struct k;
  JpegJump e;
  d.err = k.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = [](j_common_ptr c) {
    std::longjmp(reinterpret_cast<JpegJump *>(c->err)->jump, 1);
  };
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  jpeg_create_decompress(&d);
  jpeg_create_compress(&k);
  if (setjmp(e.jump)) {
    jpeg_destroy_compress(&k);
    jpeg_destroy_decompress(&d);
    std::free(buf);
    ADD_FAILURE() << "transcoding failed";
    return {};
  }
  jpeg_mem_src(&d, reinterpret_cast<const unsigned char *>(jpeg.data()),
               jpeg.size());
  jpeg_read_header(&d, TRUE);
  jvirt_barray_ptr *coefs = jpeg_read_coefficients(&d);
  jpeg_mem_dest(&k, &buf, &size);
  jpeg_copy_critical_parameters(&d, &k);
  unsigned mcuW = d.num_components == 1 ? 8 : 8 * d.max_h_samp_factor;
  unsigned perRow = (d.image_width + mcuW - 1) / mcuW;
  switch (r) {
  case Restarts::OneMcu:
    k.restart_interval = 1;
    break;
  case Restarts::TwoMcus:
    k.restart_interval = 2;
    break;
  case Restarts::ThreeMcus:
    k.restart_interval = 3;
    break;
  case Restarts::Row:
    k.restart_interval = perRow;
    break;
  case Restarts::TwoRows:
    k.restart_interval = 2 * perRow;
    break;
  }
  jpeg_write_coefficients(&k, coefs);
  jpeg_finish_compress(&k);
  jpeg_destroy_compress(&k);
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  std::string out(reinterpret_cast<char *>(buf), size);
  std::free(buf);
  return out;
}

std::string boxText(CropBox b) {
  return "box y=" + std::to_string(b.y) + " x=" + std::to_string(b.x) +
         " h=" + std::to_string(b.h) + " w=" + std::to_string(b.w);
}

/// Fails the test unless decodeImageCrop equals crop(decodeImage).
void expectSameCrop(const std::string &jpeg, const Tensor &full, int channels,
                    CropBox box) {
  Expected<Tensor> window = decodeImageCrop(jpeg, channels, box);
  ASSERT_TRUE(bool(window)) << window.status().message() << " " << boxText(box);
  Expected<Tensor> expected = cropPadded(full, box);
  ASSERT_TRUE(bool(expected)) << expected.status().message();
  ASSERT_EQ(window->shape(), expected->shape()) << boxText(box);
  ASSERT_EQ(std::memcmp(window->raw(), expected->raw(), expected->nbytes()), 0)
      << boxText(box);
}

class DecodeCropTest
    : public ::testing::TestWithParam<std::tuple<Encoding, int>> {};

TEST_P(DecodeCropTest, WindowEqualsFullDecodeThenCrop) {
  auto [enc, channels] = GetParam();
  std::string jpeg = encode(enc, 7);
  Expected<Tensor> full = decodeImage(jpeg, channels);
  ASSERT_TRUE(bool(full)) << full.status().message();
  int64_t H = enc.height, W = enc.width;

  // Every edge and corner, 1-pixel slivers, the whole image, and boxes that
  // start or end on and next to iMCU boundaries (multiples of 8 and 16).
  std::vector<CropBox> boxes = {
      {0, 0, H, W},
      {0, 0, 1, 1},
      {H - 1, W - 1, 1, 1},
      {0, W - 1, H, 1},
      {H - 1, 0, 1, W},
      {0, 0, H / 2, W / 2},
      {H / 2, W / 2, H - H / 2, W - W / 2},
      {0, W / 3, H, W / 3},
      {H / 3, 0, H / 3, W},
  };
  for (int64_t a : {7, 8, 9, 15, 16, 17, 31, 32, 33})
    for (int64_t b : {1, 2, 8, 16, 23})
      if (a + b <= H && a + b <= W) {
        boxes.push_back({a, a, b, b});
        boxes.push_back({a, 0, b, W});
        boxes.push_back({0, a, H, b});
        boxes.push_back({H - a - b, W - a - b, b, b});
      }
  // Boxes partly outside the image are zero-filled by both paths.
  boxes.push_back({-3, -5, H / 2, W / 2});
  boxes.push_back({H - 4, W - 6, 10, 12});
  Rng rng(11, 0, static_cast<uint64_t>(H * 1000 + W), 3);
  for (int i = 0; i < 150; ++i) {
    int64_t h = rng.uniformInt(1, H + 1), w = rng.uniformInt(1, W + 1);
    boxes.push_back(
        {rng.uniformInt(0, H - h + 1), rng.uniformInt(0, W - w + 1), h, w});
  }
  for (CropBox box : boxes) {
    expectSameCrop(jpeg, *full, channels, box);
    if (::testing::Test::HasFatalFailure())
      return;
  }
}

TEST_P(DecodeCropTest, FusedRandomResizedCropEqualsUnfused) {
  auto [enc, channels] = GetParam();
  std::string jpeg = encode(enc, 3);
  Expected<Tensor> full = decodeImage(jpeg, channels);
  ASSERT_TRUE(bool(full)) << full.status().message();
  RandomResizedCropParams p;
  p.height = 24;
  p.width = 20;
  for (bool antialias : {false, true})
    for (Interpolation interp :
         {Interpolation::Bilinear, Interpolation::Nearest, Interpolation::Area})
      for (uint64_t index = 0; index < 40; ++index) {
        p.interpolation = interp;
        p.antialias = antialias;
        Rng a(5, 1, index, 9), b(5, 1, index, 9);
        Expected<Tensor> fused = decodeRandomResizedCrop(jpeg, channels, p, a);
        Expected<Tensor> unfused = randomResizedCrop(*full, p, b);
        ASSERT_TRUE(bool(fused)) << fused.status().message();
        ASSERT_TRUE(bool(unfused)) << unfused.status().message();
        ASSERT_EQ(fused->shape(), unfused->shape());
        ASSERT_EQ(std::memcmp(fused->raw(), unfused->raw(), unfused->nbytes()),
                  0)
            << "record " << index << " antialias " << antialias;
        // Both consumed the same draws.
        EXPECT_EQ(a.nextU32(), b.nextU32());
      }
}

/// With restart markers the window decode cuts the intervals that cover
/// the window out of the file; the pixels must still be the full decode's,
/// for every subsampling, interval (tiling the row, not tiling it, whole
/// rows) and box, with the interval path on and off.
TEST_P(DecodeCropTest, RestartIntervalWindowEqualsFullDecodeThenCrop) {
  auto [enc, channels] = GetParam();
  std::string plain = encode(enc, 13);
  Expected<Tensor> full = decodeImage(plain, channels);
  ASSERT_TRUE(bool(full)) << full.status().message();
  int64_t H = enc.height, W = enc.width;
  std::vector<CropBox> boxes = {{0, 0, H, W},
                                {0, 0, 1, 1},
                                {H - 1, W - 1, 1, 1},
                                {H / 3, W / 3, H / 3, W / 3}};
  for (int64_t a : {7, 8, 9, 15, 16, 17, 31, 32, 33})
    for (int64_t b : {1, 2, 16, 23})
      if (a + b <= H && a + b <= W) {
        boxes.push_back({a, a, b, b});
        boxes.push_back({H - a - b, W - a - b, b, b});
      }
  Rng rng(17, 0, static_cast<uint64_t>(H * 1000 + W), 3);
  for (int i = 0; i < 60; ++i) {
    int64_t h = rng.uniformInt(1, H + 1), w = rng.uniformInt(1, W + 1);
    boxes.push_back(
        {rng.uniformInt(0, H - h + 1), rng.uniformInt(0, W - w + 1), h, w});
  }
  for (Restarts r : {Restarts::OneMcu, Restarts::TwoMcus, Restarts::ThreeMcus,
                     Restarts::Row, Restarts::TwoRows}) {
    SCOPED_TRACE("restart mode " + std::to_string(int(r)));
    std::string jpeg = withRestarts(plain, r);
    ASSERT_FALSE(jpeg.empty());
    Expected<Tensor> again = decodeImage(jpeg, channels);
    ASSERT_TRUE(bool(again)) << again.status().message();
    ASSERT_EQ(std::memcmp(again->raw(), full->raw(), full->nbytes()), 0)
        << "the transcode is lossless";
    for (bool on : {true, false}) {
      SCOPED_TRACE(on ? "interval path on" : "interval path off");
      setRestartWindowDecode(on);
      for (CropBox box : boxes) {
        expectSameCrop(jpeg, *full, channels, box);
        if (::testing::Test::HasFatalFailure()) {
          setRestartWindowDecode(true);
          return;
        }
      }
      RandomResizedCropParams p;
      p.height = 24;
      p.width = 20;
      p.antialias = true;
      for (uint64_t index = 0; index < 20; ++index) {
        Rng a(5, 1, index, 9), b(5, 1, index, 9);
        Expected<Tensor> fused = decodeRandomResizedCrop(jpeg, channels, p, a);
        Expected<Tensor> unfused = randomResizedCrop(*full, p, b);
        ASSERT_TRUE(bool(fused)) << fused.status().message();
        ASSERT_TRUE(bool(unfused));
        ASSERT_EQ(std::memcmp(fused->raw(), unfused->raw(), unfused->nbytes()),
                  0)
            << "record " << index;
      }
    }
    setRestartWindowDecode(true);
  }
}

const Encoding kEncodings[] = {
    {"s444", 96, 80, 3, TJSAMP_444, false},
    {"s422", 97, 83, 3, TJSAMP_422, false},
    {"s420", 101, 123, 3, TJSAMP_420, false},
    {"s440", 90, 70, 3, TJSAMP_440, false},
    {"s411", 64, 131, 3, TJSAMP_411, false},
    {"gray", 77, 91, 1, TJSAMP_GRAY, false},
    {"progressive420", 99, 117, 3, TJSAMP_420, true},
    {"progressive444", 50, 61, 3, TJSAMP_444, true},
    {"progressiveGray", 45, 39, 1, TJSAMP_GRAY, true},
    {"tiny420", 3, 5, 3, TJSAMP_420, false},
    {"large420", 333, 517, 3, TJSAMP_420, false},
};

INSTANTIATE_TEST_SUITE_P(
    Encodings, DecodeCropTest,
    ::testing::Combine(::testing::ValuesIn(kEncodings),
                       ::testing::Values(1, 3)),
    [](const ::testing::TestParamInfo<DecodeCropTest::ParamType> &info) {
      return std::string(std::get<0>(info.param).name) + "_to" +
             std::to_string(std::get<1>(info.param));
    });

/// Damaged files with verifyFull: the window path must report exactly what
/// the full decode reports (or, where libjpeg recovers silently, give the
/// same pixels), even when the damage lies below or beside the window.
TEST(DecodeCropErrors, DamagedFilesBehaveLikeFullDecode) {
  DecodeOptions verify;
  verify.verifyFull = true;
  Encoding enc{"s420", 160, 144, 3, TJSAMP_420, false};
  std::string jpeg = encode(enc, 21);
  std::vector<std::pair<std::string, std::string>> damaged;
  for (double keep : {0.2, 0.5, 0.8, 0.97})
    damaged.push_back({"truncated to " + std::to_string(keep),
                       jpeg.substr(0, size_t(jpeg.size() * keep))});
  for (double at : {0.3, 0.6, 0.9}) {
    std::string bad = jpeg;
    size_t pos = size_t(bad.size() * at);
    for (size_t i = pos; i < pos + 6; ++i)
      bad[i] = static_cast<char>(0xFF ^ static_cast<unsigned char>(bad[i]));
    damaged.push_back({"garbled at " + std::to_string(at), bad});
  }
  damaged.push_back({"trailing junk", jpeg.substr(0, jpeg.size() - 2) +
                                          std::string("junk\xFF\xD9", 6)});
  damaged.push_back({"header only", jpeg.substr(0, 200)});
  damaged.push_back({"not an image", "GIF89a........"});
  std::vector<CropBox> boxes = {
      {0, 0, 16, 16}, {8, 40, 30, 50}, {120, 100, 40, 44}, {0, 0, 160, 144}};
  for (const auto &[what, bytes] : damaged) {
    Expected<Tensor> full = decodeImage(bytes, 3);
    for (CropBox box : boxes) {
      Expected<Tensor> window = decodeImageCrop(bytes, 3, box, verify);
      ASSERT_EQ(bool(window), bool(full)) << what << " " << boxText(box);
      if (!bool(full)) {
        EXPECT_EQ(window.status().message(), full.status().message())
            << what << " " << boxText(box);
        continue;
      }
      Expected<Tensor> expected = crop(*full, box);
      ASSERT_TRUE(bool(expected));
      EXPECT_EQ(std::memcmp(window->raw(), expected->raw(), expected->nbytes()),
                0)
          << what << " " << boxText(box);
    }
  }
}

/// The default window mode stops after the window: damage below it is not
/// seen (the window's pixels are those of the undamaged file), damage inside
/// or above it is the full decode's error, and so is a file cut short
/// anywhere, even far below the window.
TEST(DecodeCropErrors, WindowModeStopsAfterTheWindowButRefusesCutFiles) {
  Encoding enc{"s420", 160, 144, 3, TJSAMP_420, false};
  std::string jpeg = encode(enc, 22);
  Expected<Tensor> clean = decodeImage(jpeg, 3);
  ASSERT_TRUE(bool(clean));
  // A stray marker in the entropy-coded data of the last rows: libjpeg
  // stops there and warns (garbled bytes it often decodes silently).
  std::string bad = jpeg;
  bad.replace(size_t(bad.size() * 0.95), 2, "\xFF\xD3");
  Expected<Tensor> badFull = decodeImage(bad, 3);
  ASSERT_FALSE(bool(badFull)) << "the damage must be visible to a full decode";

  CropBox top{0, 10, 40, 60};
  Expected<Tensor> window = decodeImageCrop(bad, 3, top);
  ASSERT_TRUE(bool(window)) << window.status().message();
  Expected<Tensor> expected = crop(*clean, top);
  ASSERT_TRUE(bool(expected));
  EXPECT_EQ(std::memcmp(window->raw(), expected->raw(), expected->nbytes()), 0);

  DecodeOptions verify;
  verify.verifyFull = true;
  Expected<Tensor> verified = decodeImageCrop(bad, 3, top, verify);
  ASSERT_FALSE(bool(verified));
  EXPECT_EQ(verified.status().message(), badFull.status().message());

  CropBox bottom{120, 10, 40, 60};
  Expected<Tensor> below = decodeImageCrop(bad, 3, bottom);
  ASSERT_FALSE(bool(below));
  EXPECT_EQ(below.status().message(), badFull.status().message());

  for (double keep : {0.5, 0.9, 0.99}) {
    std::string cut = jpeg.substr(0, size_t(jpeg.size() * keep));
    Expected<Tensor> cutFull = decodeImage(cut, 3);
    ASSERT_FALSE(bool(cutFull));
    Expected<Tensor> cutWindow = decodeImageCrop(cut, 3, {0, 0, 8, 8});
    ASSERT_FALSE(bool(cutWindow)) << "kept " << keep;
    EXPECT_EQ(cutWindow.status().message(), cutFull.status().message());
  }
}

/// Damaged files with restart markers: a file cut short anywhere is still
/// the full decode's error (the intervals are only used when the end marker
/// is there); markers out of sequence or foreign markers in the scan send
/// the file to the usual window decode, which gives its usual result; and
/// damage in an interval the window does not use goes unnoticed, as damage
/// below the window does without restart markers.
TEST(DecodeCropErrors, RestartFilesCutOrOutOfSequenceBehaveAsBefore) {
  Encoding enc{"s420", 160, 144, 3, TJSAMP_420, false};
  std::string plain = encode(enc, 23);
  std::string jpeg = withRestarts(plain, Restarts::OneMcu);
  Expected<Tensor> clean = decodeImage(jpeg, 3);
  ASSERT_TRUE(bool(clean));
  CropBox box{40, 40, 30, 30};
  for (double keep : {0.3, 0.9, 0.999}) {
    std::string cut = jpeg.substr(0, size_t(jpeg.size() * keep));
    Expected<Tensor> cutFull = decodeImage(cut, 3);
    ASSERT_FALSE(bool(cutFull));
    Expected<Tensor> w = decodeImageCrop(cut, 3, box);
    ASSERT_FALSE(bool(w)) << "kept " << keep;
    EXPECT_EQ(w.status().message(), cutFull.status().message());
  }
  // Every restart marker found, in order: swap two of them.
  std::vector<size_t> rst;
  for (size_t i = 0; i + 1 < jpeg.size(); ++i)
    if (static_cast<unsigned char>(jpeg[i]) == 0xFF &&
        (static_cast<unsigned char>(jpeg[i + 1]) & 0xF8) == 0xD0)
      rst.push_back(i);
  ASSERT_GT(rst.size(), 20u);
  std::string swapped = jpeg;
  std::swap(swapped[rst[3] + 1], swapped[rst[4] + 1]);
  setRestartWindowDecode(false);
  Expected<Tensor> before = decodeImageCrop(swapped, 3, box);
  setRestartWindowDecode(true);
  Expected<Tensor> now = decodeImageCrop(swapped, 3, box);
  ASSERT_EQ(bool(before), bool(now));
  if (before)
    EXPECT_EQ(std::memcmp(before->raw(), now->raw(), now->nbytes()), 0);
  else
    EXPECT_EQ(before.status().message(), now.status().message());
  // Damage in the last interval, far from the box: not looked at.
  std::string bad = jpeg;
  size_t at = rst.back() + 3;
  bad[at] = static_cast<char>(0xFF ^ static_cast<unsigned char>(bad[at]));
  Expected<Tensor> w = decodeImageCrop(bad, 3, box);
  ASSERT_TRUE(bool(w)) << w.status().message();
  Expected<Tensor> expected = crop(*clean, box);
  ASSERT_TRUE(bool(expected));
  EXPECT_EQ(std::memcmp(w->raw(), expected->raw(), expected->nbytes()), 0);
}

/// DCT-scaled decoding of only the window gives the pixels of the whole
/// scaled decode: scale: auto, antialias on and off, every subsampling.
TEST_P(DecodeCropTest, ScaledWindowEqualsScaledFullDecode) {
  auto [enc, channels] = GetParam();
  std::string jpeg = encode(enc, 3);
  RandomResizedCropParams p;
  p.height = 11;
  p.width = 9;
  DecodeOptions opts;
  opts.allowDctScaling = true;
  for (bool antialias : {false, true})
    for (uint64_t index = 0; index < 30; ++index) {
      p.antialias = antialias;
      Rng a(6, 0, index, 4), b(6, 0, index, 4);
      Expected<Tensor> window =
          decodeRandomResizedCrop(jpeg, channels, p, a, opts);
      setJpegWindowDecode(false);
      Expected<Tensor> whole =
          decodeRandomResizedCrop(jpeg, channels, p, b, opts);
      setJpegWindowDecode(true);
      ASSERT_TRUE(window && whole);
      ASSERT_EQ(std::memcmp(window->raw(), whole->raw(), whole->nbytes()), 0)
          << "record " << index << " antialias " << antialias;
    }
}

/// Every DCT scale M/8 the mask can allow (the fractional ones are off by
/// default, measured slower): the window decode at M/8 equals the scaled
/// full decode, and a scale that is taken changes pixels (so the scaled
/// path really ran), while the default mask gives the bytes it always gave.
TEST_P(DecodeCropTest, FractionalDctScalesWindowEqualsScaledFullDecode) {
  auto [enc, channels] = GetParam();
  std::string jpeg = encode(enc, 5);
  RandomResizedCropParams p;
  p.height = 12;
  p.width = 10;
  DecodeOptions scaled;
  scaled.allowDctScaling = true;
  for (unsigned m : {3u, 5u, 6u, 7u}) {
    setDctScales(1u << m);
    int differs = 0;
    for (bool antialias : {false, true})
      for (uint64_t index = 0; index < 24; ++index) {
        p.antialias = antialias;
        Rng a(7, 0, index, 1), b(7, 0, index, 1), c(7, 0, index, 1);
        Expected<Tensor> window =
            decodeRandomResizedCrop(jpeg, channels, p, a, scaled);
        setJpegWindowDecode(false);
        Expected<Tensor> whole =
            decodeRandomResizedCrop(jpeg, channels, p, b, scaled);
        setJpegWindowDecode(true);
        Expected<Tensor> exact = decodeRandomResizedCrop(jpeg, channels, p, c);
        ASSERT_TRUE(window && whole && exact);
        ASSERT_EQ(std::memcmp(window->raw(), whole->raw(), whole->nbytes()), 0)
            << "scale " << m << "/8, record " << index << " antialias "
            << antialias;
        differs +=
            std::memcmp(window->raw(), exact->raw(), exact->nbytes()) != 0;
      }
    if (std::min(enc.height, enc.width) >= 39) // boxes big enough for 3/8
      EXPECT_GT(differs, 0) << "scale " << m << "/8 was never taken";
  }
  // Back to the default: 1/8, 2/8, 4/8 only; a box under 2x the output
  // size is decoded exactly, as before.
  setDctScales(kDefaultDctScales);
  p.height = enc.height / 2 + 1;
  p.width = enc.width / 2 + 1;
  for (uint64_t index = 0; index < 8; ++index) {
    Rng a(7, 0, index, 2), b(7, 0, index, 2);
    Expected<Tensor> withAuto =
        decodeRandomResizedCrop(jpeg, channels, p, a, scaled);
    Expected<Tensor> exact = decodeRandomResizedCrop(jpeg, channels, p, b);
    ASSERT_TRUE(withAuto && exact);
    ASSERT_EQ(std::memcmp(withAuto->raw(), exact->raw(), exact->nbytes()), 0)
        << "record " << index;
  }
}

/// The fused epilogue equals flip, normalize and transpose done one after
/// another on the resized crop, bit for bit.
TEST(DecodeCropEpilogue, EqualsTheStepsOneAfterAnother) {
  Encoding enc{"s444", 97, 131, 3, TJSAMP_444, false};
  std::string jpeg = encode(enc, 23);
  RandomResizedCropParams p;
  p.height = 29;
  p.width = 31;
  const std::vector<double> mean = {123.675, 116.28, 103.53};
  const std::vector<double> sd = {58.395, 57.12, 57.375};
  for (bool antialias : {false, true})
    for (Interpolation interp :
         {Interpolation::Bilinear, Interpolation::Nearest, Interpolation::Area})
      for (int variant = 0; variant < 8; ++variant) {
        p.interpolation = interp;
        p.antialias = antialias;
        ImageEpilogue epi;
        epi.flip = variant & 1;
        epi.normalize = variant & 2;
        epi.chw = variant & 4;
        for (size_t c = 0; c < 3; ++c) {
          epi.mean.push_back(static_cast<float>(mean[c]));
          epi.scale.push_back(static_cast<float>(1.0 / sd[c]));
        }
        DecodeOptions opts;
        opts.epilogue = &epi;
        for (uint64_t index = 0; index < 6; ++index) {
          Rng a(9, 0, index, 2), b(9, 0, index, 2);
          // The fused call alternates between the AVX2 and portable kernels
          // (where the CPU has AVX2): both give the same bytes.
          setImageSimd(index % 2 == 0);
          Expected<Tensor> fused = decodeRandomResizedCrop(jpeg, 3, p, a, opts);
          setImageSimd(true);
          Expected<Tensor> plain = decodeRandomResizedCrop(jpeg, 3, p, b);
          ASSERT_TRUE(fused && plain);
          Tensor t = plain.take();
          if (epi.flip)
            t = flip(t, FlipAxis::Width).take();
          if (epi.normalize)
            t = normalize(t, mean, sd).take();
          if (epi.chw)
            t = transpose(t, {2, 0, 1}).take();
          ASSERT_EQ(fused->type().str(), t.type().str()) << variant;
          EXPECT_EQ(std::memcmp(fused->raw(), t.raw(), t.nbytes()), 0)
              << "variant " << variant << " index " << index;
        }
      }
}

} // namespace
