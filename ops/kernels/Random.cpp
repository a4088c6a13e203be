//===- Random.cpp - Philox4x32-10 and the per-element Rng -----------------===//

#include "sluice/ops/Random.h"

namespace sluice {

namespace {
// Round multipliers and Weyl key increments from the Philox paper (Table 2 of
// Salmon et al. SC'11 and Random123's philox.h defaults).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u; // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u; // sqrt(3) - 1

inline void mulHiLo(uint32_t a, uint32_t b, uint32_t &hi, uint32_t &lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
} // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c,
                                      std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulHiLo(kPhiloxM0, c[0], hi0, lo0);
    mulHiLo(kPhiloxM1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t deriveKey(uint64_t seed, uint64_t stream) {
  // Two rounds so that (seed, stream) and (stream, seed) differ and nearby
  // seeds/streams land far apart.
  return mix64(mix64(seed + 0x9E3779B97F4A7C15ull) ^ stream);
}

uint64_t streamId(std::string_view opName, uint64_t stepIndex) {
  uint64_t h = 0xCBF29CE484222325ull; // FNV-1a 64 offset basis
  for (unsigned char ch : opName) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return mix64(h ^ mix64(stepIndex));
}

uint64_t stepStream(std::string_view op, std::string_view stepName) {
  uint64_t occurrence = 1;
  size_t dot = stepName.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < stepName.size()) {
    uint64_t n = 0;
    bool digits = true;
    for (size_t i = dot + 1; i < stepName.size(); ++i) {
      char c = stepName[i];
      if (c < '0' || c > '9') {
        digits = false;
        break;
      }
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (digits && n > 0)
      occurrence = n;
  }
  return streamId(op, occurrence);
}

Rng::Rng(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t stream) {
  uint64_t key = deriveKey(seed, stream);
  key_ = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
  // Epochs beyond 2^32 wrap; no training run comes close.
  ctr_ = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
          static_cast<uint32_t>(epoch), 0};
}

void Rng::refill() {
  block_ = philox4x32_10(ctr_, key_);
  ++ctr_[3];
  pos_ = 0;
}

int64_t Rng::uniformInt(int64_t lo, int64_t hi) {
  if (hi <= lo)
    return lo;
  uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  unsigned __int128 m = static_cast<unsigned __int128>(nextU64()) * range;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < range) {
    uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(nextU64()) * range;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<int64_t>(static_cast<uint64_t>(lo) +
                              static_cast<uint64_t>(m >> 64));
}

} // namespace sluice
