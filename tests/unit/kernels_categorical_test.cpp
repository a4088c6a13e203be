//===- kernels_categorical_test.cpp - hash_bucket, bucketize, one_hot, ... ===//

#include "sluice/ops/kernels/Categorical.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

using namespace sluice;
using namespace sluice::kernels;

namespace {

double chiSquare(const std::vector<int64_t> &counts, double expected) {
  double c = 0;
  for (int64_t k : counts)
    c += (k - expected) * (k - expected) / expected;
  return c;
}

//===----------------------------------------------------------------------===//
// Hashes
//===----------------------------------------------------------------------===//

// FNV-1a 64 test vectors from the FNV reference suite (Noll).
TEST(Hash, Fnv1aPublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

// hashInt(v) is SplitMix64's first output for seed v; for v = 0 and v = the
// golden gamma these are SplitMix64(0)'s published first two outputs.
TEST(Hash, IntHashIsSplitMix64) {
  EXPECT_EQ(hashInt(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(hashInt(int64_t(0x9E3779B97F4A7C15ull)), 0x6E789E6AA1B965F4ull);
}

// Bucket ids are a compatibility contract: these values were computed once
// from the documented algorithm with an independent Python implementation
// (mix64(fnv1a64(s) + 0x9E3779B97F4A7C15) % 1000000) and must never change.
TEST(Hash, StableBucketIds) {
  struct {
    const char *s;
    int64_t bucket;
  } strs[] = {
      {"", 409008}, {"a", 476583}, {"foobar", 358415}, {"68fd1e64", 567113}};
  Tensor t = Tensor::strings(ElemType::String, {4},
                             {strs[0].s, strs[1].s, strs[2].s, strs[3].s});
  Expected<Tensor> b = hashBucket(t, 1000000);
  ASSERT_TRUE(b) << b.status().message();
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(b->data<int64_t>()[i], strs[i].bucket) << strs[i].s;

  Tensor ints = Tensor::empty(ElemType::I64, {5});
  int64_t iv[5] = {0, 1, -1, 42, int64_t(1) << 40};
  std::memcpy(ints.mutableRaw(), iv, sizeof(iv));
  Expected<Tensor> ib = hashBucket(ints, 1000000);
  ASSERT_TRUE(ib);
  std::vector<int64_t> got(ib->data<int64_t>(), ib->data<int64_t>() + 5);
  EXPECT_EQ(got,
            (std::vector<int64_t>{607535, 822465, 443936, 275413, 413641}));
}

TEST(Hash, WidthsAgreeAndBytesEqualStrings) {
  Tensor i32 = Tensor::empty(ElemType::I32, {3});
  Tensor i64 = Tensor::empty(ElemType::I64, {3});
  int32_t a[3] = {-5, 7, 123456};
  for (int i = 0; i < 3; ++i) {
    i32.mutableData<int32_t>()[i] = a[i];
    i64.mutableData<int64_t>()[i] = a[i];
  }
  EXPECT_TRUE(hashBucket(i32, 97)->sameAs(*hashBucket(i64, 97)));
  Tensor s = Tensor::strings(ElemType::String, {1}, {"abc"});
  Tensor by = Tensor::strings(ElemType::Bytes, {1}, {"abc"});
  EXPECT_TRUE(hashBucket(s, 1000)->sameAs(*hashBucket(by, 1000)));
}

TEST(Hash, BucketsAreUniform) {
  // Sequential ids and near-identical strings are the adversarial inputs for
  // weak hashes; a power-of-two bucket count exposes weak low bits.
  for (int64_t buckets : {64, 100, 1000}) {
    const int n = 200000;
    Tensor ints = Tensor::empty(ElemType::I64, {n});
    std::vector<std::string> strs;
    for (int i = 0; i < n; ++i) {
      ints.mutableData<int64_t>()[i] = i;
      strs.push_back("user_" + std::to_string(i));
    }
    Tensor st = Tensor::strings(ElemType::String, {n}, strs);
    for (const Tensor *t : {&ints, &st}) {
      Expected<Tensor> b = hashBucket(*t, buckets);
      ASSERT_TRUE(b);
      std::vector<int64_t> counts(size_t(buckets), 0);
      for (int i = 0; i < n; ++i) {
        int64_t v = b->data<int64_t>()[i];
        ASSERT_GE(v, 0);
        ASSERT_LT(v, buckets);
        ++counts[size_t(v)];
      }
      // Mean of chi-square is dof = buckets - 1, sd sqrt(2 dof); 6 sd margin.
      double dof = double(buckets - 1);
      EXPECT_LT(chiSquare(counts, double(n) / buckets),
                dof + 6 * std::sqrt(2 * dof))
          << "buckets " << buckets << (t == &st ? " strings" : " ints");
    }
  }
}

TEST(Hash, Errors) {
  EXPECT_FALSE(hashBucket(Tensor::zeros(ElemType::F32, {2}), 10));
  EXPECT_FALSE(hashBucket(Tensor::zeros(ElemType::I32, {2}), 0));
}

//===----------------------------------------------------------------------===//
// bucketize
//===----------------------------------------------------------------------===//

struct DigitizeCase {
  std::vector<double> boundaries;
  std::vector<double> x;
  std::vector<int32_t> expected; ///< numpy.digitize(x, boundaries)
};
class Bucketize : public ::testing::TestWithParam<DigitizeCase> {};

TEST_P(Bucketize, MatchesNumpyDigitize) {
  const DigitizeCase &dc = GetParam();
  for (ElemType e : {ElemType::F32, ElemType::F64}) {
    Tensor in = Tensor::empty(e, {int64_t(dc.x.size())});
    for (size_t i = 0; i < dc.x.size(); ++i) {
      if (e == ElemType::F32)
        in.mutableData<float>()[i] = float(dc.x[i]);
      else
        in.mutableData<double>()[i] = dc.x[i];
    }
    Expected<Tensor> out = bucketize(in, dc.boundaries);
    ASSERT_TRUE(out) << out.status().message();
    EXPECT_EQ(out->elem(), ElemType::I32);
    std::vector<int32_t> got(out->data<int32_t>(),
                             out->data<int32_t>() + dc.x.size());
    EXPECT_EQ(got, dc.expected);
  }
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Expected values from numpy 1.24: np.digitize(x, bins) (right=False).
INSTANTIATE_TEST_SUITE_P(
    Numpy, Bucketize,
    ::testing::Values(
        DigitizeCase{{0, 1.5, 10},
                     {-1, 0, 1, 1.5, 9.99, 10, 1e9, kNaN, -kInf, kInf},
                     {0, 1, 1, 2, 2, 3, 3, 3, 0, 3}},
        DigitizeCase{{1, 1, 2}, {0.5, 1, 1.5, 2, 3}, {0, 2, 2, 3, 3}},
        DigitizeCase{{}, {5, -5}, {0, 0}},
        DigitizeCase{{-3}, {-4, -3, -2}, {0, 1, 1}}));

TEST(BucketizeInts, Int64ComparesExactly) {
  // 2^53 + 3 rounds to 2^53 + 4 as a double; the exact answer is below the
  // boundary.
  const int64_t two53 = int64_t(1) << 53;
  Tensor in = Tensor::empty(ElemType::I64, {3});
  in.mutableData<int64_t>()[0] = two53 + 3;
  in.mutableData<int64_t>()[1] = two53 + 4;
  in.mutableData<int64_t>()[2] = std::numeric_limits<int64_t>::max();
  Expected<Tensor> out = bucketize(in, {double(two53 + 4), 0x1p63});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->data<int32_t>()[0], 0);
  EXPECT_EQ(out->data<int32_t>()[1], 1);
  EXPECT_EQ(out->data<int32_t>()[2], 1);
  Tensor small = Tensor::empty(ElemType::U8, {3});
  uint8_t sv[3] = {0, 5, 200};
  std::memcpy(small.mutableRaw(), sv, 3);
  Expected<Tensor> so = bucketize(small, {5, 100});
  ASSERT_TRUE(so);
  EXPECT_EQ(std::vector<int32_t>(so->data<int32_t>(), so->data<int32_t>() + 3),
            (std::vector<int32_t>{0, 1, 2}));
}

TEST(BucketizeErrors, UnsortedOrNan) {
  Tensor in = Tensor::zeros(ElemType::F32, {1});
  Expected<Tensor> unsorted = bucketize(in, {1, 3, 2});
  ASSERT_FALSE(unsorted);
  EXPECT_NE(unsorted.status().message().find("sorted"), std::string::npos);
  EXPECT_FALSE(bucketize(in, {1, kNaN}));
}

//===----------------------------------------------------------------------===//
// one_hot
//===----------------------------------------------------------------------===//

TEST(OneHot, RowsAndTypes) {
  Tensor ids = Tensor::empty(ElemType::I64, {2, 2});
  int64_t v[4] = {2, 0, 1, 2};
  std::memcpy(ids.mutableRaw(), v, sizeof(v));
  Expected<Tensor> f = oneHot(ids, 3);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->shape(), (std::vector<int64_t>{2, 2, 3}));
  std::vector<float> got(f->data<float>(), f->data<float>() + 12);
  EXPECT_EQ(got, (std::vector<float>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  Expected<Tensor> u = oneHot(ids, 4, ElemType::U8);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->data<uint8_t>()[2], 1);
  EXPECT_EQ(u->data<uint8_t>()[3], 0);
}

TEST(OneHot, OutOfRangeNamesThePosition) {
  Tensor ids = Tensor::empty(ElemType::I32, {3});
  int32_t v[3] = {0, 5, 1};
  std::memcpy(ids.mutableRaw(), v, sizeof(v));
  Expected<Tensor> out = oneHot(ids, 5);
  ASSERT_FALSE(out);
  EXPECT_NE(out.status().message().find("id 5 at position 1"),
            std::string::npos)
      << out.status().message();
  EXPECT_FALSE(oneHot(Tensor::zeros(ElemType::F32, {1}), 3));
}

//===----------------------------------------------------------------------===//
// Vocab and tokenize
//===----------------------------------------------------------------------===//

class Tokenize : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice_vocab_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "vocab.txt").string();
    std::ofstream out(path_, std::ios::binary);
    // ids: [PAD]=0 [UNK]=1 the=2 cat=3 sat=4 ""=5 on=6 the=7(dup) mat=8
    out << "[PAD]\n[UNK]\nthe\ncat\r\nsat\n\non\nthe\nmat";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(Tokenize, VocabFileIdsAreLineNumbers) {
  Expected<std::shared_ptr<const Vocab>> v = Vocab::load(path_);
  ASSERT_TRUE(v) << v.status().message();
  const Vocab &vocab = **v;
  EXPECT_EQ(vocab.size(), 9u);
  EXPECT_EQ(vocab.lookup("[PAD]"), 0);
  EXPECT_EQ(vocab.lookup("the"), 2); // first occurrence wins
  EXPECT_EQ(vocab.lookup("cat"), 3); // CRLF stripped
  EXPECT_EQ(vocab.lookup("mat"), 8); // no trailing newline
  EXPECT_EQ(vocab.lookup("dog"), -1);
  EXPECT_EQ(vocab.lookup("Cat"), -1);
}

TEST_F(Tokenize, SplitsLowercasesAndMapsUnknown) {
  auto vocab = *Vocab::load(path_);
  Tensor text =
      Tensor::string(ElemType::String, "  The cat\tSAT on\nthe  dog ");
  TokenizeOptions opt;
  opt.lowercase = true;
  opt.unknownId = 1;
  Expected<Tensor> ids = tokenize(text, *vocab, opt);
  ASSERT_TRUE(ids) << ids.status().message();
  EXPECT_EQ(ids->elem(), ElemType::I64);
  std::vector<int64_t> got(ids->data<int64_t>(),
                           ids->data<int64_t>() + ids->dim(0));
  EXPECT_EQ(got, (std::vector<int64_t>{2, 3, 4, 6, 2, 1}));

  TokenizeOptions cased;
  cased.out = ElemType::I32;
  Expected<Tensor> c = tokenize(text, *vocab, cased);
  ASSERT_TRUE(c);
  std::vector<int32_t> got32(c->data<int32_t>(),
                             c->data<int32_t>() + c->dim(0));
  EXPECT_EQ(got32, (std::vector<int32_t>{-1, 3, -1, 6, 2, -1}));

  Expected<Tensor> empty =
      tokenize(Tensor::string(ElemType::String, " \t "), *vocab);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->shape(), (std::vector<int64_t>{0}));
  EXPECT_FALSE(tokenize(Tensor::zeros(ElemType::U8, {3}), *vocab));
}

TEST_F(Tokenize, SharedVocabIsLoadedOnce) {
  Expected<std::shared_ptr<const Vocab>> a = Vocab::shared(path_);
  Expected<std::shared_ptr<const Vocab>> b = Vocab::shared(path_);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->get(), b->get());
  Expected<std::shared_ptr<const Vocab>> missing =
      Vocab::shared((dir_ / "nope.txt").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("vocabulary file: cannot open"),
            std::string::npos);
}

TEST(TokenizeEncoding, InvalidUtf8IsAnErrorUnlessReplaced) {
  std::shared_ptr<const Vocab> vocab =
      Vocab::fromTokens({"[UNK]", "a", "b", "\xef\xbf\xbd"});
  // 0xff cannot start a sequence; 0xc3 0x28 is a cut-off two-byte sequence.
  Tensor bytes = Tensor::string(ElemType::Bytes, "a \xff b \xc3\x28");
  TokenizeOptions strict;
  strict.unknownId = 0;
  Expected<Tensor> bad = tokenize(bytes, *vocab, strict);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find(
                "invalid UTF-8: byte 0xff at offset 2 of the text"),
            std::string::npos)
      << bad.status().message();

  TokenizeOptions replace = strict;
  replace.replaceInvalid = true;
  size_t replaced = 99;
  Expected<Tensor> ids = tokenize(bytes, *vocab, replace, &replaced);
  ASSERT_TRUE(ids) << ids.status().message();
  EXPECT_EQ(replaced, 2u);
  std::vector<int64_t> got(ids->data<int64_t>(),
                           ids->data<int64_t>() + ids->dim(0));
  // "a" U+FFFD "b" U+FFFD"(": the last token is not in the vocabulary.
  EXPECT_EQ(got, (std::vector<int64_t>{1, 3, 2, 0}));

  // Valid text is untouched and counts no replacement.
  Expected<Tensor> ok = tokenize(Tensor::string(ElemType::String, "a b"),
                                 *vocab, strict, &replaced);
  ASSERT_TRUE(ok);
  EXPECT_EQ(replaced, 0u);
}

TEST(Vocab, LargeVocabLookups) {
  std::vector<std::string> toks;
  for (int i = 0; i < 50000; ++i)
    toks.push_back("tok" + std::to_string(i * 7919));
  auto v = Vocab::fromTokens(toks);
  for (int i = 0; i < 50000; i += 97)
    ASSERT_EQ(v->lookup(toks[size_t(i)]), i);
  EXPECT_EQ(v->lookup("tok1"), -1);
}

} // namespace
