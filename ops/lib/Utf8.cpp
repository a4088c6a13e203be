//===- Utf8.cpp - Checking and repairing UTF-8 text -----------------------===//
//
// The well-formedness rules of Unicode's table 3-7; ASCII runs are skipped
// eight bytes at a time, since most text is mostly ASCII.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Utf8.h"

#include <cstdint>
#include <cstring>

namespace sluice {

namespace {

/// Length of the well-formed sequence at s[i], or 0 if it is ill-formed.
/// `bad` receives how many bytes the maximal ill-formed prefix spans (at
/// least 1) when the result is 0.
size_t sequenceAt(std::string_view s, size_t i, size_t &bad) {
  const auto *p = reinterpret_cast<const unsigned char *>(s.data());
  size_t n = s.size();
  unsigned char c = p[i];
  bad = 1;
  if (c < 0x80)
    return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0)
      lo = 0xA0;
    else if (c == 0xED)
      hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0)
      lo = 0x90;
    else if (c == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= n)
      return 0;
    unsigned char cc = p[i + k];
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (cc < l || cc > h)
      return 0;
    bad = k + 1;
  }
  return len;
}

} // namespace

size_t invalidUtf8At(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    size_t bad;
    size_t len = sequenceAt(s, i, bad);
    if (len == 0)
      return i;
    i += len;
  }
  return std::string::npos;
}

std::string replaceInvalidUtf8(std::string_view s, size_t *replaced) {
  std::string out;
  out.reserve(s.size());
  size_t count = 0, i = 0;
  while (i < s.size()) {
    size_t bad;
    size_t len = sequenceAt(s, i, bad);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++count;
      i += bad;
      continue;
    }
    out.append(s.data() + i, len);
    i += len;
  }
  if (replaced)
    *replaced = count;
  return out;
}

} // namespace sluice
