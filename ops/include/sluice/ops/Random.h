//===- Random.h - Counter-based random numbers for stochastic ops -*- C++
//-*-===//
//
// Every random choice in a pipeline derives from (seed, epoch, element index,
// stream) through Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11). Nothing is shared between elements or threads, so
// an element gets the same crop and flip whichever worker processes it, in
// whatever order, in every run: determinism at any parallelism follows from
// the construction rather than from scheduling.
//
// Layout of the Philox inputs:
//   key     = deriveKey(seed, stream)            (64 bits, two 32-bit words)
//   counter = {index lo, index hi, epoch, block}  (block counts 4-word draws)
// so one (seed, epoch, index, stream) has 2^32 blocks = 2^34 32-bit draws.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_RANDOM_H
#define SLUICE_OPS_RANDOM_H

#include <array>
#include <cstdint>
#include <string_view>

namespace sluice {

/// The Philox4x32 bijection with 10 rounds: 128-bit counter, 64-bit key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key);

/// SplitMix64's output function (Steele, Lea, Flood 2014): a fast 64-bit
/// bijection with full avalanche, used to fold several ids into one key.
uint64_t mix64(uint64_t x);

/// The Philox key of one random stream under one pipeline seed. Distinct
/// streams (one per stochastic step) give independent sequences.
uint64_t deriveKey(uint64_t seed, uint64_t stream);

/// A stream id for a stochastic step: its op name and its position in the
/// pipeline, so two random_flip steps draw independently and renaming a
/// field does not change the draws.
uint64_t streamId(std::string_view opName, uint64_t stepIndex);

/// The random stream of the step named `stepName` of op `op`: streamId(op,
/// k) where k is the 1-based occurrence of the op among the steps, read
/// from the name ("random_flip" is 1, "random_flip.2" is 2). Stable under
/// graph rewrites that keep names.
uint64_t stepStream(std::string_view op, std::string_view stepName);

/// Random numbers for one (seed, epoch, element index, stream). Cheap to
/// construct (no state beyond the counter), never shared between threads.
class Rng {
public:
  Rng(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t stream);

  /// The next 32 uniformly distributed bits.
  uint32_t nextU32() {
    if (pos_ == 4)
      refill();
    return block_[pos_++];
  }
  /// The next 64 uniformly distributed bits (two 32-bit draws, low first).
  uint64_t nextU64() {
    uint64_t lo = nextU32();
    uint64_t hi = nextU32();
    return lo | (hi << 32);
  }
  /// Uniform in [0, 1) with 24 random bits (every value is a multiple of
  /// 2^-24, so 1.0f is never returned).
  float uniformFloat() { return static_cast<float>(nextU32() >> 8) * 0x1p-24f; }
  /// Uniform in [0, 1) with 53 random bits.
  double uniformDouble() {
    return static_cast<double>(nextU64() >> 11) * 0x1p-53;
  }
  /// Uniform in [lo, hi) (lo + (hi - lo) * uniformDouble()).
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * uniformDouble();
  }
  /// Uniform integer in [lo, hi), without modulo bias (Lemire's multiply and
  /// reject). Returns lo when hi <= lo.
  int64_t uniformInt(int64_t lo, int64_t hi);
  /// True with probability p (p <= 0: never, p >= 1: always; always consumes
  /// one 64-bit draw so later draws do not depend on p).
  bool bernoulli(double p) { return uniformDouble() < p; }

  /// Number of 4-word Philox blocks generated so far (for tests).
  uint32_t blocksUsed() const { return ctr_[3]; }

private:
  void refill();

  std::array<uint32_t, 4> ctr_;
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> block_{};
  unsigned pos_ = 4;
};

} // namespace sluice

#endif // SLUICE_OPS_RANDOM_H
