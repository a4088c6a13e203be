//===- image_profile_bench.cpp - Where a real photo's crop time goes ------===//
//
// The image pipeline's per-image cost split into the parts a profile cannot
// separate cleanly (decode_mcu serves both the rows a window decode skips
// and the rows it decodes): on one thread, for every JPEG of a directory
// and the random_resized_crop box the fused step draws for it, the thread
// CPU time of
//   full        tjDecompress2 of the whole image (the decode-only loop)
//   entropy     entropy decoding of every row and nothing else
//               (jpeg_skip_scanlines over the image, then one row)
//   entropy_y1  entropy decoding down to the box's last row only
//   window      the exact window decode (crop_scanline + skip_scanlines +
//               the box's rows), no resize
//   crop        decodeRandomResizedCrop, exact: window + antialiased resize
//   crop_epi    the same plus flip + normalize + CHW (the --no-jit epilogue)
//   auto        decodeRandomResizedCrop with scale: auto
// The variants run interleaved image by image (their order rotates), the
// whole set `--rounds` times; the median over rounds of each variant's mean
// µs per image is printed. Counting instructions instead: run under
// `valgrind --tool=callgrind` with --rounds 1.
//
//   image_profile_bench DIR [--images N] [--rounds R] [--size 224]
//
//===----------------------------------------------------------------------===//

#include "sluice/ops/Random.h"
#include "sluice/ops/kernels/Image.h"

#include <turbojpeg.h>
// jpeglib.h needs size_t and FILE first.
#include <cstdio>
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::kernels;

namespace {

double threadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct JpegErr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};
void errExit(j_common_ptr c) {
  std::longjmp(reinterpret_cast<JpegErr *>(c->err)->jump, 1);
}
void silent(j_common_ptr) {}
void emitNothing(j_common_ptr, int) {}

struct Lj {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  Lj() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = errExit;
    err.pub.output_message = silent;
    err.pub.emit_message = emitNothing;
    jpeg_create_decompress(&cinfo);
  }
  ~Lj() { jpeg_destroy_decompress(&cinfo); }
};

/// Entropy-decodes rows [0, rows) (all of them when rows == height); with
/// `window`, then decodes the box's rows in its columns (as the fused step).
bool ljRun(Lj &lj, const std::string &bytes, int y1, const CropBox *window,
           std::vector<unsigned char> &buf) {
  j_decompress_ptr c = &lj.cinfo;
  if (setjmp(lj.err.jump)) {
    jpeg_abort_decompress(c);
    return false;
  }
  jpeg_mem_src(c, reinterpret_cast<const unsigned char *>(bytes.data()),
               bytes.size());
  jpeg_read_header(c, TRUE);
  c->out_color_space = JCS_EXT_RGB;
  c->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(c);
  buf.resize(size_t(c->output_width) * 3 * 2);
  JSAMPROW row = buf.data();
  if (!window) {
    JDIMENSION n = std::min<JDIMENSION>(y1, c->output_height);
    if (n == c->output_height) {
      jpeg_skip_scanlines(c, n - 1);
      jpeg_read_scanlines(c, &row, 1);
    } else {
      jpeg_skip_scanlines(c, n);
    }
    jpeg_abort_decompress(c);
    return true;
  }
  JDIMENSION x0 = JDIMENSION(window->x), x1 = JDIMENSION(window->x + window->w);
  JDIMENSION cropX = x0 > 0 ? x0 - 1 : 0;
  JDIMENSION cropEnd = std::min<JDIMENSION>(x1 + 2, c->output_width);
  JDIMENSION cropW = cropEnd - cropX;
  jpeg_crop_scanline(c, &cropX, &cropW);
  if (window->y > 0)
    jpeg_skip_scanlines(c, JDIMENSION(window->y));
  for (int64_t y = 0; y < window->h; ++y)
    jpeg_read_scanlines(c, &row, 1);
  jpeg_abort_decompress(c);
  return true;
}

struct Image {
  std::string bytes;
  int w = 0, h = 0;
  CropBox box;
  uint64_t index = 0;
};

} // namespace

int main(int argc, char **argv) {
  std::string dir;
  size_t maxImages = 500;
  int rounds = 5;
  int64_t size = 224;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--images" && i + 1 < argc)
      maxImages = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (a == "--size" && i + 1 < argc)
      size = std::atoll(argv[++i]);
    else if (!a.empty() && a[0] != '-' && dir.empty())
      dir = a;
    else {
      std::fprintf(stderr, "usage: image_profile_bench DIR [--images N] "
                           "[--rounds R] [--size S]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "image_profile_bench: give a directory of JPEGs\n");
    return 2;
  }
  std::vector<std::string> paths;
  for (auto &e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".jpg")
      paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  // Spread the sample over the directory (classes come in sorted runs).
  std::vector<Image> images;
  size_t step =
      std::max<size_t>(1, paths.size() / std::max<size_t>(1, maxImages));
  for (size_t i = 0; i < paths.size() && images.size() < maxImages; i += step) {
    Image im;
    std::ifstream f(paths[i], std::ios::binary);
    im.bytes.assign(std::istreambuf_iterator<char>(f), {});
    Expected<ImageInfo> info = readImageInfo(im.bytes);
    if (!info)
      continue;
    im.w = int(info->width);
    im.h = int(info->height);
    im.index = i;
    Rng rng(42, 0, im.index, 0);
    im.box = randomResizedCropBox(im.h, im.w, 0.08, 1.0, 0.75, 4.0 / 3.0, rng);
    images.push_back(std::move(im));
  }
  if (images.empty()) {
    std::fprintf(stderr, "image_profile_bench: no JPEGs under %s\n",
                 dir.c_str());
    return 1;
  }

  tjhandle tj = tjInitDecompress();
  Lj lj;
  std::vector<unsigned char> rgb, row;
  RandomResizedCropParams params;
  params.height = params.width = size;
  params.antialias = true;
  ImageEpilogue epi;
  epi.flip = false;
  epi.normalize = true;
  epi.mean = {123.675f, 116.28f, 103.53f};
  epi.scale = {1 / 58.395f, 1 / 57.12f, 1 / 57.375f};
  epi.chw = true;
  DecodeOptions exact, exactEpi, autoScale;
  exactEpi.epilogue = &epi;
  autoScale.allowDctScaling = true;

  using Fn = std::function<void(const Image &)>;
  struct Variant {
    const char *name;
    Fn run;
    std::vector<double> perRound;
    double seconds = 0;
  };
  std::vector<Variant> variants = {
      {"full",
       [&](const Image &im) {
         rgb.resize(size_t(im.w) * im.h * 3);
         tjDecompress2(
             tj, reinterpret_cast<const unsigned char *>(im.bytes.data()),
             im.bytes.size(), rgb.data(), im.w, im.w * 3, im.h, TJPF_RGB, 0);
       }},
      {"entropy",
       [&](const Image &im) { ljRun(lj, im.bytes, im.h, nullptr, row); }},
      {"entropy_y1",
       [&](const Image &im) {
         ljRun(lj, im.bytes, int(im.box.y + im.box.h), nullptr, row);
       }},
      {"window",
       [&](const Image &im) { ljRun(lj, im.bytes, 0, &im.box, row); }},
      {"crop",
       [&](const Image &im) {
         Rng rng(42, 0, im.index, 0);
         (void)decodeRandomResizedCrop(im.bytes, 3, params, rng, exact);
       }},
      {"crop_epi",
       [&](const Image &im) {
         Rng rng(42, 0, im.index, 0);
         (void)decodeRandomResizedCrop(im.bytes, 3, params, rng, exactEpi);
       }},
      {"auto",
       [&](const Image &im) {
         Rng rng(42, 0, im.index, 0);
         (void)decodeRandomResizedCrop(im.bytes, 3, params, rng, autoScale);
       }},
  };
  // PROFILE_ONLY=full,window keeps only those variants.
  if (const char *only = std::getenv("PROFILE_ONLY"); only && *only) {
    std::string list = std::string(",") + only + ",";
    std::vector<Variant> kept;
    for (Variant &v : variants)
      if (list.find(std::string(",") + v.name + ",") != std::string::npos)
        kept.push_back(std::move(v));
    variants.swap(kept);
  }
  for (int r = 0; r < rounds; ++r) {
    for (Variant &v : variants)
      v.seconds = 0;
    for (size_t i = 0; i < images.size(); ++i)
      for (size_t k = 0; k < variants.size(); ++k) {
        Variant &v = variants[(i + k) % variants.size()];
        double t0 = threadSeconds();
        v.run(images[i]);
        v.seconds += threadSeconds() - t0;
      }
    for (Variant &v : variants)
      v.perRound.push_back(v.seconds / double(images.size()) * 1e6);
  }
  double boxArea = 0, y1Share = 0, y0Share = 0;
  for (const Image &im : images) {
    boxArea += double(im.box.h * im.box.w) / (double(im.h) * im.w);
    y1Share += double(im.box.y + im.box.h) / im.h;
    y0Share += double(im.box.y) / im.h;
  }
  std::printf(
      "%zu images from %s, %d rounds, 1 thread; box: mean area %.3f of "
      "the image, mean bottom row %.3f, mean top row %.3f of the height\n",
      images.size(), dir.c_str(), rounds, boxArea / images.size(),
      y1Share / images.size(), y0Share / images.size());
  double full = 0;
  for (Variant &v : variants) {
    std::sort(v.perRound.begin(), v.perRound.end());
    double med = v.perRound[v.perRound.size() / 2];
    if (std::string(v.name) == "full")
      full = med;
    std::printf("%-11s %8.1f us/image", v.name, med);
    if (full > 0)
      std::printf("   %.3f of full", med / full);
    std::printf("\n");
  }
  tjDestroy(tj);
  return 0;
}
