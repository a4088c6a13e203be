//===- JpegRestartIndex.cpp - Random access through JPEG restart markers --===//
//
// Finds where a baseline JPEG's restart intervals start and cuts out the
// intervals that cover a crop window as a smaller JPEG with the same
// headers (used by the window decode in Jpeg.cpp).
//
//===----------------------------------------------------------------------===//

#include "ImageInternal.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/Switches.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sluice {
namespace kernels {
namespace imaging {

namespace {

unsigned be16(const unsigned char *p) { return (unsigned(p[0]) << 8) | p[1]; }

} // namespace

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
  static std::atomic<bool> allowed{!switchedOff("SLUICE_NO_RESTART_WINDOW")};
  return allowed;
}

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

} // namespace imaging

using namespace imaging;

void setRestartWindowDecode(bool enabled) {
  restartWindowAllowed().store(enabled, std::memory_order_relaxed);
}

} // namespace kernels
} // namespace sluice
