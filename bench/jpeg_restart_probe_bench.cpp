//===- jpeg_restart_probe_bench.cpp - random access into JPEGs by restarts
//-===//
//
// A measurement, not a feature: how much of a random_resized_crop decode a
// JPEG with restart markers would save, on real photographs. A baseline JPEG
// must be entropy-decoded from its start down to the last row a crop uses
// (about three quarters of a full decode on the bench photos), which is why
// `decode_image: {scale: auto}` cannot reach 1.3x the decode loop there
// (bench/results.md). Restart markers reset the entropy decoder's state, so
// with one every few MCUs the intervals that cover a crop box can be cut out
// of the file and decoded alone. This probe:
//
//   1. transcodes each photo losslessly (the same DCT coefficients) with a
//      restart interval of R MCUs, R a divisor of the MCUs per row near
//      --mcus (so no interval crosses a row; 0: one interval per row);
//   2. draws a random_resized_crop box per photo (torchvision's sampling:
//      scale [0.08, 1], ratio [3/4, 4/3], ten tries, then the whole image);
//   3. times, one thread, over every photo: a full decode (tjDecompress2's
//      settings: JDCT_ISLOW, fancy upsampling); the window decode sluice's
//      fused crop uses (jpeg_crop_scanline, jpeg_skip_scanlines, stop after
//      the box's last row); and a decode of a JPEG assembled from the
//      intervals that cover the box plus one pixel around it (the headers
//      with the new size, the intervals' entropy-coded bytes, renumbered
//      RST markers);
//   4. checks that the box's pixels from the assembled JPEG equal the full
//      decode's (they should: the coefficients are the same, the pixel of
//      margin keeps fancy upsampling's neighbours inside the image, and a
//      copy at least two MCUs wide keeps libjpeg from replicating instead of
//      interpolating chroma).
//
// The product's version of step 3 is in ops/kernels/JpegRestartIndex.cpp (the
// restart-interval window of the fused crop); this probe measures it
// against the decoders alone.
//
// It prints the medians over --rounds of each decode's cost as a fraction of
// the full decode, the one-time transcode cost, the size change, and the
// number of boxes whose pixels differ. Hand-written JPEG marker parsing is
// fine here: this is a probe over known-good photos, not a reader of user
// files.
//
// usage: jpeg_restart_probe_bench DIR [--mcus N] [--rounds N] [--images N]
//        (DIR as bench/gen_photos.py lays it out: DIR/<class>/<file>.jpg)
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<unsigned char>;

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void errorExit(j_common_ptr c) {
  std::longjmp(reinterpret_cast<ErrorMgr *>(c->err)->jump, 1);
}
void silent(j_common_ptr) {}

/// The rows [y0, y1) of a decode of `data`, columns [x0, x1) kept when
/// `window` (the window path of ops/kernels/Jpeg.cpp), all of them
/// otherwise. Writes RGB rows `stride` bytes apart into `out`; returns the
/// column of the first decoded pixel, or -1 on an error.
long decode(const Bytes &data, bool window, unsigned x0, unsigned y0,
            unsigned x1, unsigned y1, Bytes &out, size_t &stride) {
  jpeg_decompress_struct c;
  ErrorMgr e;
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = errorExit;
  e.pub.output_message = silent;
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&c);
    return -1;
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, data.data(), data.size());
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_EXT_RGB;
  c.dct_method = JDCT_ISLOW;
  c.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&c);
  JDIMENSION cx = 0, cw = c.output_width;
  if (window) {
    cx = x0 > 0 ? x0 - 1 : 0;
    cw = std::min<JDIMENSION>(x1 + 2, c.output_width) - cx;
    jpeg_crop_scanline(&c, &cx, &cw);
  } else {
    y0 = 0;
    y1 = c.output_height;
  }
  stride = static_cast<size_t>(cw) * 3;
  out.resize(stride * (y1 - y0));
  if (window && y0 > 0)
    jpeg_skip_scanlines(&c, y0);
  for (unsigned y = y0; y < y1; ++y) {
    JSAMPROW row = out.data() + (y - y0) * stride;
    jpeg_read_scanlines(&c, &row, 1);
  }
  if (c.output_scanline == c.output_height)
    jpeg_finish_decompress(&c);
  else
    jpeg_abort_decompress(&c);
  jpeg_destroy_decompress(&c);
  return static_cast<long>(cx);
}

/// A photo transcoded with restart markers, and where its intervals are.
struct Indexed {
  Bytes jpeg;
  unsigned width = 0, height = 0;
  unsigned mcuW = 8, mcuH = 8, mcusPerRow = 0, mcuRows = 0;
  unsigned interval = 0;  ///< MCUs per restart interval
  size_t sof = 0;         ///< offset of the SOF0/1 marker
  size_t scanStart = 0;   ///< first entropy-coded byte
  std::vector<size_t> at; ///< start of each interval's bytes
  size_t scanEnd = 0;     ///< the EOI marker
};

bool transcode(const Bytes &in, unsigned targetMcus, Indexed &t) {
  jpeg_decompress_struct d;
  jpeg_compress_struct k;
  ErrorMgr e; // both objects' errors land here
  d.err = k.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = errorExit;
  e.pub.output_message = silent;
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  jpeg_create_decompress(&d);
  jpeg_create_compress(&k);
  if (setjmp(e.jump)) {
    jpeg_destroy_compress(&k);
    jpeg_destroy_decompress(&d);
    std::free(buf);
    return false;
  }
  jpeg_mem_src(&d, in.data(), in.size());
  jpeg_read_header(&d, TRUE);
  if (d.progressive_mode || d.num_components == 4) {
    jpeg_destroy_compress(&k);
    jpeg_destroy_decompress(&d);
    return false;
  }
  jvirt_barray_ptr *coefs = jpeg_read_coefficients(&d);
  jpeg_mem_dest(&k, &buf, &size);
  jpeg_copy_critical_parameters(&d, &k);
  t.width = d.image_width;
  t.height = d.image_height;
  if (d.num_components > 1) {
    t.mcuW = 8 * static_cast<unsigned>(d.max_h_samp_factor);
    t.mcuH = 8 * static_cast<unsigned>(d.max_v_samp_factor);
  }
  t.mcusPerRow = (t.width + t.mcuW - 1) / t.mcuW;
  t.mcuRows = (t.height + t.mcuH - 1) / t.mcuH;
  t.interval = t.mcusPerRow;
  if (targetMcus > 0)
    for (unsigned r = 1; r <= t.mcusPerRow; ++r)
      if (t.mcusPerRow % r == 0 &&
          std::abs(static_cast<int>(r) - static_cast<int>(targetMcus)) <
              std::abs(static_cast<int>(t.interval) -
                       static_cast<int>(targetMcus)))
        t.interval = r;
  k.restart_interval = t.interval;
  k.optimize_coding = TRUE; // as jpegtran -optimize: offsets the markers
  jpeg_write_coefficients(&k, coefs);
  jpeg_finish_compress(&k);
  jpeg_destroy_compress(&k);
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  t.jpeg.assign(buf, buf + size);
  std::free(buf);

  // Index: the markers up to the scan, then every RSTn inside it.
  const Bytes &j = t.jpeg;
  size_t p = 2;
  for (;;) {
    if (p + 4 > j.size() || j[p] != 0xFF)
      return false;
    unsigned m = j[p + 1];
    size_t len = (static_cast<size_t>(j[p + 2]) << 8) | j[p + 3];
    if (m == 0xC0 || m == 0xC1)
      t.sof = p;
    if (m == 0xDA) {
      t.scanStart = p + 2 + len;
      break;
    }
    p += 2 + len;
  }
  t.at.push_back(t.scanStart);
  for (size_t q = t.scanStart; q + 1 < j.size();) {
    const void *f = std::memchr(&j[q], 0xFF, j.size() - q);
    if (!f)
      return false;
    q = static_cast<size_t>(static_cast<const unsigned char *>(f) - j.data());
    unsigned m = j[q + 1];
    if (m >= 0xD0 && m <= 0xD7) {
      t.at.push_back(q + 2);
      q += 2;
    } else if (m == 0xD9) {
      t.scanEnd = q;
      return t.sof != 0 &&
             t.at.size() ==
                 static_cast<size_t>(t.mcusPerRow / t.interval) * t.mcuRows;
    } else {
      q += 2; // a stuffed 0xFF 0x00
    }
  }
  return false;
}

struct Box {
  unsigned x0, y0, x1, y1;
};

/// The JPEG made of the intervals that cover `b` and one pixel around it;
/// `ox`, `oy`: where its pixel (0, 0) lies in the photo.
void assemble(const Indexed &t, const Box &b, Bytes &out, unsigned &ox,
              unsigned &oy) {
  unsigned iw = t.interval * t.mcuW;
  unsigned perRow = t.mcusPerRow / t.interval;
  unsigned r0 = b.y0 > 0 ? (b.y0 - 1) / t.mcuH : 0;
  unsigned r1 = std::min(t.mcuRows, (b.y1 + t.mcuH) / t.mcuH);
  unsigned c0 = b.x0 > 0 ? (b.x0 - 1) / iw : 0;
  unsigned c1 = std::min(perRow, (b.x1 + iw) / iw);
  // libjpeg replicates chroma rows of two samples or fewer instead of
  // interpolating them: at least two MCUs across and down (as the kernel).
  auto span = [](unsigned lo, unsigned hi, unsigned step, unsigned size) {
    return std::min((hi - lo) * step, size - lo * step);
  };
  while (span(c0, c1, iw, t.width) < 2 * t.mcuW && (c0 > 0 || c1 < perRow))
    c0 > 0 ? --c0 : ++c1;
  while (span(r0, r1, t.mcuH, t.height) < 2 * t.mcuH &&
         (r0 > 0 || r1 < t.mcuRows))
    r0 > 0 ? --r0 : ++r1;
  ox = c0 * iw;
  oy = r0 * t.mcuH;
  unsigned w = span(c0, c1, iw, t.width);
  unsigned h = span(r0, r1, t.mcuH, t.height);
  out.assign(t.jpeg.begin(), t.jpeg.begin() + static_cast<long>(t.scanStart));
  out[t.sof + 5] = static_cast<unsigned char>(h >> 8);
  out[t.sof + 6] = static_cast<unsigned char>(h & 255);
  out[t.sof + 7] = static_cast<unsigned char>(w >> 8);
  out[t.sof + 8] = static_cast<unsigned char>(w & 255);
  unsigned n = 0;
  for (unsigned r = r0; r < r1; ++r)
    for (unsigned c = c0; c < c1; ++c, ++n) {
      size_t k = static_cast<size_t>(r) * perRow + c;
      size_t s = t.at[k];
      size_t e = k + 1 < t.at.size() ? t.at[k + 1] - 2 : t.scanEnd;
      if (n) {
        out.push_back(0xFF);
        out.push_back(static_cast<unsigned char>(0xD0 + ((n - 1) & 7)));
      }
      out.insert(out.end(), t.jpeg.begin() + static_cast<long>(s),
                 t.jpeg.begin() + static_cast<long>(e));
    }
  out.push_back(0xFF);
  out.push_back(0xD9);
}

} // namespace

int main(int argc, char **argv) {
  std::string dir;
  unsigned mcus = 2;
  int rounds = 3;
  size_t maxImages = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mcus" && i + 1 < argc)
      mcus = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--images" && i + 1 < argc)
      maxImages = static_cast<size_t>(std::atol(argv[++i]));
    else if (dir.empty() && a[0] != '-')
      dir = a;
    else {
      std::fprintf(stderr, "usage: jpeg_restart_probe_bench DIR [--mcus N] "
                           "[--rounds N] [--images N]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: jpeg_restart_probe_bench DIR [--mcus N] "
                         "[--rounds N] [--images N]\n");
    return 2;
  }
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto &e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg"))
      paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (maxImages && paths.size() > maxImages)
    paths.resize(maxImages);

  std::vector<Bytes> files;
  std::vector<Indexed> idx;
  double transcodeSecs = 0;
  size_t inBytes = 0, outBytes = 0, skipped = 0;
  for (const std::string &p : paths) {
    std::ifstream f(p, std::ios::binary);
    Bytes b((std::istreambuf_iterator<char>(f)), {});
    Indexed t;
    auto t0 = Clock::now();
    bool ok = transcode(b, mcus, t);
    transcodeSecs += seconds(t0);
    if (!ok) {
      ++skipped;
      continue;
    }
    inBytes += b.size();
    outBytes += t.jpeg.size();
    files.push_back(std::move(b));
    idx.push_back(std::move(t));
  }
  if (files.empty()) {
    std::fprintf(stderr, "no baseline JPEG under %s\n", dir.c_str());
    return 1;
  }

  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Box> boxes;
  for (const Indexed &t : idx) {
    Box b{0, 0, t.width, t.height};
    double area = static_cast<double>(t.width) * t.height;
    for (int tries = 0; tries < 10; ++tries) {
      double target = area * (0.08 + 0.92 * u(rng));
      double ratio = std::exp(std::log(3.0 / 4) +
                              (std::log(4.0 / 3) - std::log(3.0 / 4)) * u(rng));
      long w = std::lround(std::sqrt(target * ratio));
      long h = std::lround(std::sqrt(target / ratio));
      if (w > 0 && h > 0 && w <= t.width && h <= t.height) {
        unsigned x = static_cast<unsigned>(u(rng) * (t.width - w + 1));
        unsigned y = static_cast<unsigned>(u(rng) * (t.height - h + 1));
        b = {x, y, x + static_cast<unsigned>(w), y + static_cast<unsigned>(h)};
        break;
      }
    }
    boxes.push_back(b);
  }

  // Exactness: the box's pixels from the assembled JPEG against the full
  // decode of the original.
  size_t differ = 0;
  double assembledArea = 0, boxArea = 0;
  Bytes full, part, small;
  for (size_t i = 0; i < idx.size(); ++i) {
    size_t fs, ps;
    unsigned ox, oy;
    decode(files[i], false, 0, 0, 0, 0, full, fs);
    assemble(idx[i], boxes[i], small, ox, oy);
    long px = decode(small, false, 0, 0, 0, 0, part, ps);
    const Box &b = boxes[i];
    bool same = px == 0;
    for (unsigned y = b.y0; same && y < b.y1; ++y)
      same = std::memcmp(&full[y * fs + b.x0 * 3],
                         &part[(y - oy) * ps + (b.x0 - ox) * 3],
                         (b.x1 - b.x0) * 3) == 0;
    differ += !same;
    double a = static_cast<double>(idx[i].width) * idx[i].height;
    assembledArea += static_cast<double>(ps / 3) * (part.size() / ps) / a;
    boxArea += static_cast<double>(b.x1 - b.x0) * (b.y1 - b.y0) / a;
  }

  std::vector<double> tFull, rWindow, rAssembled;
  for (int r = 0; r < rounds; ++r) {
    size_t s;
    auto t0 = Clock::now();
    for (const Bytes &f : files)
      decode(f, false, 0, 0, 0, 0, full, s);
    double fullSecs = seconds(t0);
    t0 = Clock::now();
    for (size_t i = 0; i < files.size(); ++i)
      decode(files[i], true, boxes[i].x0, boxes[i].y0, boxes[i].x1, boxes[i].y1,
             part, s);
    double windowSecs = seconds(t0);
    t0 = Clock::now();
    for (size_t i = 0; i < idx.size(); ++i) {
      unsigned ox, oy;
      assemble(idx[i], boxes[i], small, ox, oy);
      decode(small, false, 0, 0, 0, 0, part, s);
    }
    double assembledSecs = seconds(t0);
    tFull.push_back(fullSecs / static_cast<double>(files.size()));
    rWindow.push_back(windowSecs / fullSecs);
    rAssembled.push_back(assembledSecs / fullSecs);
  }
  double n = static_cast<double>(files.size());
  std::printf(
      "%zu photos (%zu skipped: progressive or CMYK), restart interval "
      "target %u MCUs (0: a row)\n"
      "full decode: %.1f us per photo (median of %d rounds)\n"
      "window decode (sluice's fused crop): %.3f of a full decode\n"
      "assembled from restart intervals:     %.3f of a full decode "
      "(box %.2f of the photo's area, intervals decoded %.2f)\n"
      "boxes whose pixels differ from the full decode: %zu\n"
      "one-time lossless transcode: %.1f us per photo (%.2f full decodes), "
      "size x%.3f\n",
      files.size(), skipped, mcus, median(tFull) * 1e6, rounds, median(rWindow),
      median(rAssembled), boxArea / n, assembledArea / n, differ,
      transcodeSecs / n * 1e6, transcodeSecs / n / median(tFull),
      static_cast<double>(outBytes) / static_cast<double>(inBytes));
  return differ ? 1 : 0;
}
