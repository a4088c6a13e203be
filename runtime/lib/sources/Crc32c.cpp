//===- Crc32c.cpp - CRC-32C for TFRecord framing
//---------------------------===//
//
// TFRecord checks every length and payload with a masked CRC-32C, so the
// checksum runs over every byte read. SSE4.2 has an instruction for it
// (~8 bytes per cycle-ish); other CPUs use slicing-by-8 tables.
//
//===----------------------------------------------------------------------===//

#include "sluice/runtime/Source.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define SLUICE_CRC_X86 1
#endif

namespace sluice::runtime {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u; // Castagnoli, bit-reflected

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (uint32_t i = 0; i < 256; ++i)
        t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
};

const Tables &tables() {
  static const Tables tabs;
  return tabs;
}

uint32_t crcSoftware(const uint8_t *p, size_t n, uint32_t crc) {
  const Tables &tb = tables();
  const auto &t = tb.t;
  crc = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8); // little-endian hosts only (x86, arm64)
    w ^= crc;
    crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
          t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^
          t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--)
    crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

#ifdef SLUICE_CRC_X86
__attribute__((target("sse4.2"))) uint32_t crcHardware(const uint8_t *p,
                                                       size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--)
    c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool haveHardwareCrc() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

} // namespace

uint32_t crc32c(const void *data, size_t size, uint32_t crc) {
  const uint8_t *p = static_cast<const uint8_t *>(data);
#ifdef SLUICE_CRC_X86
  if (haveHardwareCrc())
    return crcHardware(p, size, crc);
#endif
  return crcSoftware(p, size, crc);
}

uint32_t maskedCrc32c(const void *data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace detail {
/// The table-driven path, for tests comparing it with the hardware one.
uint32_t crc32cSoftware(const void *data, size_t size, uint32_t crc) {
  return crcSoftware(static_cast<const uint8_t *>(data), size, crc);
}
} // namespace detail

} // namespace sluice::runtime
