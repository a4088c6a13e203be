//===- random_test.cpp - Philox4x32-10 known answers and Rng statistics ---===//

#include "sluice/ops/Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <thread>
#include <vector>

using namespace sluice;

namespace {

struct Kat {
  std::array<uint32_t, 4> ctr;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> expected;
};

// Known-answer vectors of Random123 (Salmon, Moraes, Dror, Shaw, "Parallel
// random numbers: as easy as 1, 2, 3", SC'11), file tests/kat_vectors of the
// Random123 distribution, the three "philox4x32 10" lines (counter, key,
// expected output):
//   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000
//                 6627e8d5 e169c58d bc57ac4c 9b00dbd8
//   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff
//                 408f276d 41c83b0e a20bc7c6 6d5451fd
//   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0
//                 d16cfe09 94fdcceb 5001e420 24126ea1   (digits of pi)
class PhiloxKat : public ::testing::TestWithParam<Kat> {};

TEST_P(PhiloxKat, MatchesRandom123) {
  const Kat &k = GetParam();
  EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Random123, PhiloxKat,
    ::testing::Values(Kat{{0, 0, 0, 0},
                          {0, 0},
                          {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
                      Kat{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                          {0xffffffff, 0xffffffff},
                          {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
                      Kat{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          {0xa4093822, 0x299f31d0},
                          {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}));

// SplitMix64 seeded with 0 outputs mix64(k * 0x9E3779B97F4A7C15) for k = 1..;
// the first values are published with Vigna's splitmix64.c / xoshiro seeding.
TEST(Mix64, MatchesSplitMix64Reference) {
  const uint64_t golden = 0x9E3779B97F4A7C15ull;
  EXPECT_EQ(mix64(golden * 1), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(mix64(golden * 2), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(mix64(golden * 3), 0x06C45D188009454Full);
  EXPECT_EQ(mix64(golden * 4), 0xF88BB8A8724C81ECull);
}

TEST(Rng, DrawsArePhiloxBlocksOfTheDocumentedCounter) {
  uint64_t key = deriveKey(42, 7);
  Rng rng(42, 3, 0x100000005ull, 7);
  std::array<uint32_t, 2> k = {uint32_t(key), uint32_t(key >> 32)};
  for (uint32_t block = 0; block < 3; ++block) {
    auto expected = philox4x32_10({5, 1, 3, block}, k);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(rng.nextU32(), expected[i])
          << "block " << block << " word " << i;
  }
  EXPECT_EQ(rng.blocksUsed(), 3u);
}

std::vector<uint64_t> draws(uint64_t seed, uint64_t epoch, uint64_t index,
                            uint64_t stream, int n = 16) {
  Rng rng(seed, epoch, index, stream);
  std::vector<uint64_t> out;
  for (int i = 0; i < n; ++i)
    out.push_back(rng.nextU64());
  return out;
}

TEST(Rng, SameInputsSameSequenceAcrossThreads) {
  std::vector<uint64_t> main = draws(1, 2, 3, 4, 1000);
  std::vector<uint64_t> other;
  std::thread t([&] { other = draws(1, 2, 3, 4, 1000); });
  t.join();
  EXPECT_EQ(main, other);
}

TEST(Rng, EveryInputChangesTheSequence) {
  std::vector<uint64_t> base = draws(1, 2, 3, 4);
  EXPECT_NE(base, draws(2, 2, 3, 4));
  EXPECT_NE(base, draws(1, 3, 3, 4));
  EXPECT_NE(base, draws(1, 2, 4, 4));
  EXPECT_NE(base, draws(1, 2, 3, 5));
  EXPECT_NE(base, draws(1, 2, 3 + (uint64_t(1) << 32), 4)); // high index word
  // Swapping seed and stream must not collide.
  EXPECT_NE(draws(5, 0, 0, 9), draws(9, 0, 0, 5));
}

TEST(Rng, StreamIdsDependOnNameAndPosition) {
  EXPECT_EQ(streamId("random_flip", 3), streamId("random_flip", 3));
  EXPECT_NE(streamId("random_flip", 3), streamId("random_flip", 4));
  EXPECT_NE(streamId("random_flip", 3), streamId("random_crop", 3));
}

double chiSquare(const std::vector<int64_t> &counts, double expected) {
  double c = 0;
  for (int64_t k : counts)
    c += (k - expected) * (k - expected) / expected;
  return c;
}

TEST(Rng, UniformDoubleMomentsAndRange) {
  Rng rng(123, 0, 0, 1);
  const int n = 1000000;
  double sum = 0, sumSq = 0;
  std::vector<int64_t> bins(20, 0);
  for (int i = 0; i < n; ++i) {
    double u = rng.uniformDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sumSq += u * u;
    ++bins[size_t(u * 20)];
  }
  double mean = sum / n, var = sumSq / n - mean * mean;
  // Standard error of the mean is sqrt(1/12/n) ~ 2.9e-4: 6 sigma bounds.
  EXPECT_NEAR(mean, 0.5, 0.0018);
  EXPECT_NEAR(var, 1.0 / 12.0, 0.001);
  // 19 degrees of freedom: 50 is beyond the 1e-4 tail.
  EXPECT_LT(chiSquare(bins, n / 20.0), 50.0);
}

TEST(Rng, UniformFloatNeverReachesOne) {
  Rng rng(9, 9, 9, 9);
  float mx = 0;
  for (int i = 0; i < 200000; ++i) {
    float u = rng.uniformFloat();
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    mx = std::max(mx, u);
  }
  EXPECT_GT(mx, 0.999f);
}

TEST(Rng, FirstDrawAcrossElementsIsUniform) {
  // Each element gets its own Rng and typically uses only its first draws:
  // those must be uniform across consecutive indices.
  std::vector<int64_t> bins(16, 0);
  const int n = 160000;
  for (int i = 0; i < n; ++i)
    ++bins[Rng(7, 0, uint64_t(i), 11).nextU32() >> 28];
  EXPECT_LT(chiSquare(bins, n / 16.0), 45.0); // 15 dof
}

struct IntCase {
  int64_t lo, hi;
};
class UniformInt : public ::testing::TestWithParam<IntCase> {};

TEST_P(UniformInt, InRangeAndUnbiased) {
  auto [lo, hi] = GetParam();
  Rng rng(5, 1, 2, 3);
  uint64_t range = uint64_t(hi) - uint64_t(lo);
  size_t nb = range <= 16 ? size_t(range) : 16;
  std::vector<int64_t> bins(nb, 0);
  const int n = 160000;
  for (int i = 0; i < n; ++i) {
    int64_t v = rng.uniformInt(lo, hi);
    ASSERT_GE(v, lo);
    ASSERT_LT(v, hi);
    uint64_t off = uint64_t(v) - uint64_t(lo);
    size_t b = range <= 16
                   ? size_t(off)
                   : size_t((static_cast<unsigned __int128>(off) * nb) / range);
    ++bins[b];
  }
  if (nb > 1)
    EXPECT_LT(chiSquare(bins, double(n) / nb), 45.0);
}

INSTANTIATE_TEST_SUITE_P(Ranges, UniformInt,
                         ::testing::Values(IntCase{0, 2}, IntCase{0, 10},
                                           IntCase{-5, 6}, IntCase{0, 3},
                                           IntCase{100, 1000003},
                                           IntCase{INT64_MIN, INT64_MAX}));

TEST(Rng, UniformIntEmptyRangeReturnsLo) {
  Rng rng(1, 1, 1, 1);
  EXPECT_EQ(rng.uniformInt(5, 5), 5);
  EXPECT_EQ(rng.uniformInt(5, 3), 5);
}

TEST(Rng, BernoulliFrequency) {
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    Rng rng(77, 0, 0, 0);
    int hits = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i)
      hits += rng.bernoulli(p);
    // sigma <= sqrt(n/4) = 158: 6 sigma is under 1000.
    EXPECT_NEAR(hits, p * n, 1000) << "p=" << p;
    if (p == 0.0)
      EXPECT_EQ(hits, 0);
    if (p == 1.0)
      EXPECT_EQ(hits, n);
  }
}

} // namespace
