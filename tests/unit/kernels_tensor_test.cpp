//===- kernels_tensor_test.cpp - Element-wise and layout kernels ----------===//

#include "sluice/ops/Random.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Layout.h"
#include "sluice/ops/kernels/Scalar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

using namespace sluice;
using namespace sluice::kernels;

namespace {

Tensor randomTensor(ElemType e, std::vector<int64_t> shape, uint64_t seed) {
  Tensor t = Tensor::empty(e, std::move(shape));
  Rng rng(seed, 0, 0, 0);
  for (size_t i = 0; i < t.nbytes(); ++i)
    t.mutableRaw()[i] = uint8_t(rng.nextU32());
  return t;
}

/// Distance in units in the last place between two finite floats.
int64_t ulpDistance(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

//===----------------------------------------------------------------------===//
// normalize
//===----------------------------------------------------------------------===//

struct NormCase {
  ElemType elem;
  std::vector<int64_t> shape;
  size_t paramCount; ///< 1 (broadcast) or channels
};

class Normalize : public ::testing::TestWithParam<NormCase> {};

TEST_P(Normalize, ExactVsReferenceAndWithinTwoUlpOfDivision) {
  const NormCase &nc = GetParam();
  Tensor in = Tensor::empty(nc.elem, nc.shape);
  int64_t n = in.numElements();
  for (int64_t i = 0; i < n; ++i)
    storeFromDouble(nc.elem,
                    double((i * 37) % 256) -
                        (nc.elem == ElemType::U8 ? 0 : 100.25),
                    in.mutableRaw(), size_t(i));
  std::vector<double> mean, stddev;
  for (size_t k = 0; k < nc.paramCount; ++k) {
    mean.push_back(123.675 - 7.3 * k);
    stddev.push_back(58.395 + 1.7 * k);
  }
  Expected<Tensor> out = normalize(in, mean, stddev);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->elem(), ElemType::F32);
  EXPECT_EQ(out->shape(), in.shape());
  int64_t c = nc.shape.empty() ? 1 : nc.shape.back();
  int64_t maxUlp = 0;
  for (int64_t i = 0; i < n; ++i) {
    size_t k = nc.paramCount == 1 ? 0 : size_t(i % c);
    float x = float(loadAsDouble(nc.elem, in.raw(), size_t(i)));
    float expected = (x - float(mean[k])) * float(1.0 / stddev[k]);
    ASSERT_EQ(out->data<float>()[i], expected) << "element " << i;
    float divided = float((double(x) - double(float(mean[k]))) / stddev[k]);
    maxUlp = std::max(maxUlp, ulpDistance(out->data<float>()[i], divided));
  }
  EXPECT_LE(maxUlp, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Normalize,
    ::testing::Values(NormCase{ElemType::U8, {7, 9, 3}, 3},
                      NormCase{ElemType::U8, {224, 224, 3}, 3},
                      NormCase{ElemType::U8, {5, 5, 1}, 1},
                      NormCase{ElemType::U8, {3, 4, 4}, 4},
                      NormCase{ElemType::U8, {6, 13}, 13},
                      NormCase{ElemType::F32, {11, 13, 3}, 3},
                      NormCase{ElemType::F32, {1000}, 1},
                      NormCase{ElemType::I16, {4, 5, 3}, 3},
                      NormCase{ElemType::F64, {3, 2}, 2},
                      NormCase{ElemType::U8, {}, 1}));

TEST(Normalize, EmptyLastDimWithEmptyLists) {
  // A last dim of 0 accepts 0 values per list; nothing is computed.
  Expected<Tensor> r = normalize(Tensor::empty(ElemType::U8, {2, 0}), {}, {});
  ASSERT_TRUE(bool(r)) << r.status().message();
  EXPECT_EQ(r->type().str(), "f32[2,0]");
}

TEST(NormalizeErrors, ClearMessages) {
  Tensor img = Tensor::zeros(ElemType::U8, {2, 2, 3});
  Expected<Tensor> bad = normalize(img, {1, 2}, {1});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("mean has 2 values"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(normalize(img, {0}, {0}));
  EXPECT_FALSE(normalize(Tensor::string(ElemType::String, "x"), {0}, {1}));
}

//===----------------------------------------------------------------------===//
// cast
//===----------------------------------------------------------------------===//

struct CastCase {
  ElemType to;
  std::vector<double> expected;
};
class CastFromF32 : public ::testing::TestWithParam<CastCase> {};

const std::vector<float> kCastInputs = {
    -1.7f,  300.5f, std::numeric_limits<float>::quiet_NaN(),
    1e10f,  -1e10f, 0.5f,
    255.9f, -0.0f};

TEST_P(CastFromF32, TruncatesAndSaturates) {
  const CastCase &cc = GetParam();
  Tensor in = Tensor::empty(ElemType::F32, {int64_t(kCastInputs.size())});
  std::memcpy(in.mutableRaw(), kCastInputs.data(), in.nbytes());
  Expected<Tensor> out = cast(in, cc.to);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->elem(), cc.to);
  for (size_t i = 0; i < cc.expected.size(); ++i)
    EXPECT_EQ(loadAsDouble(cc.to, out->raw(), i), cc.expected[i])
        << "input " << kCastInputs[i];
}

INSTANTIATE_TEST_SUITE_P(
    Targets, CastFromF32,
    ::testing::Values(
        CastCase{ElemType::U8, {0, 255, 0, 255, 0, 0, 255, 0}},
        CastCase{ElemType::I8, {-1, 127, 0, 127, -128, 0, 127, 0}},
        CastCase{ElemType::U16, {0, 300, 0, 65535, 0, 0, 255, 0}},
        CastCase{ElemType::I16, {-1, 300, 0, 32767, -32768, 0, 255, 0}},
        CastCase{ElemType::I32,
                 {-1, 300, 0, 2147483647.0, -2147483648.0, 0, 255, 0}},
        CastCase{ElemType::I64, {-1, 300, 0, 1e10, -1e10, 0, 255, 0}},
        CastCase{ElemType::Bool, {1, 1, 1, 1, 1, 1, 1, 0}}));

TEST(Cast, IntegerNarrowingSaturates) {
  Tensor in = Tensor::empty(ElemType::I64, {5});
  int64_t vals[5] = {-5, 0, 255, 256, int64_t(1) << 40};
  std::memcpy(in.mutableRaw(), vals, sizeof(vals));
  Expected<Tensor> u8 = cast(in, ElemType::U8);
  ASSERT_TRUE(u8);
  std::vector<uint8_t> got(u8->data<uint8_t>(), u8->data<uint8_t>() + 5);
  EXPECT_EQ(got, (std::vector<uint8_t>{0, 0, 255, 255, 255}));
  Expected<Tensor> i32 = cast(in, ElemType::I32);
  ASSERT_TRUE(i32);
  EXPECT_EQ(i32->data<int32_t>()[4], INT32_MAX);
  EXPECT_EQ(i32->data<int32_t>()[0], -5);
}

TEST(Cast, HalfBitsAreIeeeBinary16) {
  struct {
    float f;
    uint16_t bits;
  } cases[] = {
      {1.0f, 0x3C00},        {-2.0f, 0xC000},
      {65504.f, 0x7BFF},     {65520.f, 0x7C00},
      {0.1f, 0x2E66},        {6e-8f, 0x0001},
      {1e-8f, 0x0000},       {0.0f, 0x0000},
      {-0.0f, 0x8000},       {6.1035156e-05f, 0x0400},
      {0.33325195f, 0x3555}, {std::numeric_limits<float>::infinity(), 0x7C00}};
  for (auto &c : cases)
    EXPECT_EQ(floatToHalf(c.f), c.bits) << c.f;
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.f);
  EXPECT_EQ(halfToFloat(0x0001), 0x1p-24f); // smallest subnormal
  EXPECT_EQ(halfToFloat(0x2E66), 0.0999755859375f);
  EXPECT_EQ(halfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  // Every half round-trips through float.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = halfToFloat(uint16_t(b));
    if (!std::isnan(f))
      ASSERT_EQ(floatToHalf(f), b) << std::hex << b;
  }
}

class CastRoundTrip
    : public ::testing::TestWithParam<std::tuple<ElemType, ElemType>> {};

TEST_P(CastRoundTrip, SmallIntegersSurviveEveryPair) {
  auto [a, b] = GetParam();
  std::vector<double> vals = a == ElemType::Bool || b == ElemType::Bool
                                 ? std::vector<double>{0, 1, 1, 0}
                                 : std::vector<double>{0, 1, 5, 100, 127};
  Tensor in = Tensor::empty(a, {int64_t(vals.size())});
  for (size_t i = 0; i < vals.size(); ++i)
    storeFromDouble(a, vals[i], in.mutableRaw(), i);
  Expected<Tensor> mid = cast(in, b);
  ASSERT_TRUE(mid) << mid.status().message();
  Expected<Tensor> back = cast(*mid, a);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_TRUE(back->sameAs(in)) << elemTypeName(a) << " -> " << elemTypeName(b);
  if (a == b)
    EXPECT_EQ(mid->raw(), in.raw()); // same type: shared, not copied
}

const auto kNumericTypes = ::testing::Values(
    ElemType::U8, ElemType::I8, ElemType::U16, ElemType::I16, ElemType::I32,
    ElemType::I64, ElemType::F16, ElemType::F32, ElemType::F64, ElemType::Bool);

INSTANTIATE_TEST_SUITE_P(AllPairs, CastRoundTrip,
                         ::testing::Combine(kNumericTypes, kNumericTypes));

//===----------------------------------------------------------------------===//
// clamp, fill_missing
//===----------------------------------------------------------------------===//

TEST(Clamp, FloatsKeepNanAndIntsRoundBoundsInward) {
  Tensor f = Tensor::empty(ElemType::F32, {4});
  float fv[4] = {-3.f, 0.5f, NAN, 9.f};
  std::memcpy(f.mutableRaw(), fv, sizeof(fv));
  Expected<Tensor> fc = clamp(f, -1.0, 2.0);
  ASSERT_TRUE(fc);
  EXPECT_EQ(fc->data<float>()[0], -1.f);
  EXPECT_EQ(fc->data<float>()[1], 0.5f);
  EXPECT_TRUE(std::isnan(fc->data<float>()[2]));
  EXPECT_EQ(fc->data<float>()[3], 2.f);

  Tensor i = Tensor::empty(ElemType::I32, {4});
  int32_t iv[4] = {-3, 0, 1, 9};
  std::memcpy(i.mutableRaw(), iv, sizeof(iv));
  Expected<Tensor> ic = clamp(i, -0.5, 2.5); // -> [0, 2]
  ASSERT_TRUE(ic);
  std::vector<int32_t> got(ic->data<int32_t>(), ic->data<int32_t>() + 4);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 1, 2}));
  Expected<Tensor> lowOnly = clamp(i, 1.0, std::nullopt);
  ASSERT_TRUE(lowOnly);
  EXPECT_EQ(lowOnly->data<int32_t>()[3], 9);
  EXPECT_FALSE(clamp(i, 3.0, 1.0));

  Tensor h = Tensor::empty(ElemType::F16, {2});
  h.mutableData<uint16_t>()[0] = floatToHalf(-7.f);
  h.mutableData<uint16_t>()[1] = floatToHalf(0.25f);
  Expected<Tensor> hc = clamp(h, 0.0, 1.0);
  ASSERT_TRUE(hc);
  EXPECT_EQ(halfToFloat(hc->data<uint16_t>()[0]), 0.f);
  EXPECT_EQ(halfToFloat(hc->data<uint16_t>()[1]), 0.25f);
}

TEST(FillMissing, ReplacesNanOnlyInFloats) {
  for (ElemType e : {ElemType::F16, ElemType::F32, ElemType::F64}) {
    Tensor t = Tensor::empty(e, {4});
    double vals[4] = {1.5, NAN, -2, NAN};
    for (int i = 0; i < 4; ++i)
      storeFromDouble(e, vals[i], t.mutableRaw(), i);
    Expected<Tensor> out = fillMissing(t, 0.25);
    ASSERT_TRUE(out);
    double expect[4] = {1.5, 0.25, -2, 0.25};
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(loadAsDouble(e, out->raw(), i), expect[i]) << elemTypeName(e);
  }
  Tensor ints = Tensor::zeros(ElemType::I32, {3});
  Expected<Tensor> same = fillMissing(ints, 5);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->raw(), ints.raw());
}

//===----------------------------------------------------------------------===//
// transpose
//===----------------------------------------------------------------------===//

/// out[idx] = in[perm^-1 idx], element by element.
Tensor refTranspose(const Tensor &in, const std::vector<int64_t> &perm) {
  std::vector<int64_t> outShape(perm.size());
  for (size_t k = 0; k < perm.size(); ++k)
    outShape[k] = in.dim(perm[k]);
  Tensor out = Tensor::empty(in.elem(), outShape);
  size_t es = elemTypeSize(in.elem());
  std::vector<int64_t> inStride(in.rank(), 1);
  for (size_t d = in.rank(); d-- > 1;)
    inStride[d - 1] = inStride[d] * in.dim(d);
  std::vector<int64_t> idx(perm.size(), 0);
  for (int64_t o = 0; o < out.numElements(); ++o) {
    int64_t s = 0;
    for (size_t k = 0; k < perm.size(); ++k)
      s += idx[k] * inStride[perm[k]];
    std::memcpy(out.mutableRaw() + o * es, in.raw() + s * es, es);
    for (size_t k = perm.size(); k-- > 0;) {
      if (++idx[k] < outShape[k])
        break;
      idx[k] = 0;
    }
  }
  return out;
}

struct TransposeCase {
  std::vector<int64_t> shape;
  std::vector<int64_t> perm;
};
class Transpose
    : public ::testing::TestWithParam<std::tuple<TransposeCase, ElemType>> {};

TEST_P(Transpose, MatchesReferenceAndRoundTrips) {
  auto [tc, elem] = GetParam();
  Tensor in = randomTensor(elem, tc.shape, 17);
  Expected<Tensor> out = transpose(in, tc.perm);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_TRUE(out->sameAs(refTranspose(in, tc.perm)));
  std::vector<int64_t> inverse(tc.perm.size());
  for (size_t k = 0; k < tc.perm.size(); ++k)
    inverse[tc.perm[k]] = int64_t(k);
  Expected<Tensor> back = transpose(*out, inverse);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->sameAs(in));
}

INSTANTIATE_TEST_SUITE_P(
    Perms, Transpose,
    ::testing::Combine(
        ::testing::Values(TransposeCase{{224, 224, 3}, {2, 0, 1}}, // HWC->CHW
                          TransposeCase{{3, 37, 41}, {1, 2, 0}},   // CHW->HWC
                          TransposeCase{{70, 45}, {1, 0}},
                          TransposeCase{{4, 5, 6, 7}, {3, 1, 0, 2}},
                          TransposeCase{{2, 3, 4, 5}, {0, 2, 1, 3}}, // rows
                          TransposeCase{{6, 1, 9}, {2, 1, 0}},       // size-1
                          TransposeCase{{8, 9, 10}, {0, 1, 2}},      // identity
                          TransposeCase{{33, 65, 2}, {2, 1, 0}}),
        ::testing::Values(ElemType::U8, ElemType::I16, ElemType::F32,
                          ElemType::F64)));

TEST(TransposeMisc, NoMoveSharesBufferAndHelpers) {
  Tensor in = randomTensor(ElemType::F32, {4, 1, 5}, 3);
  Expected<Tensor> same = transpose(in, {1, 0, 2}); // only moves a size-1 dim
  ASSERT_TRUE(same);
  EXPECT_EQ(same->raw(), in.raw());
  EXPECT_EQ(same->shape(), (std::vector<int64_t>{1, 4, 5}));
  Tensor img = randomTensor(ElemType::U8, {10, 12, 3}, 4);
  Expected<Tensor> chw = hwcToChw(img);
  ASSERT_TRUE(chw);
  EXPECT_EQ(chw->shape(), (std::vector<int64_t>{3, 10, 12}));
  EXPECT_EQ(chw->data<uint8_t>()[1 * 120 + 2 * 12 + 5],
            img.data<uint8_t>()[(2 * 12 + 5) * 3 + 1]);
  EXPECT_TRUE(chwToHwc(*chw)->sameAs(img));
  Expected<Tensor> bad = transpose(img, {0, 0, 1});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("not a permutation"),
            std::string::npos);
  Tensor s =
      Tensor::strings(ElemType::String, {2, 3}, {"a", "b", "c", "d", "e", "f"});
  Expected<Tensor> st = transpose(s, {1, 0});
  ASSERT_TRUE(st);
  EXPECT_EQ(st->stringValues(),
            (std::vector<std::string>{"a", "d", "b", "e", "c", "f"}));
}

//===----------------------------------------------------------------------===//
// pad, truncate
//===----------------------------------------------------------------------===//

TEST(Pad, ConstantValueAroundTheInput) {
  Tensor in = Tensor::empty(ElemType::I32, {2, 3});
  for (int i = 0; i < 6; ++i)
    in.mutableData<int32_t>()[i] = i + 1;
  Expected<Tensor> out = pad(in, {{1, 0}, {2, 1}}, -7);
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(out->shape(), (std::vector<int64_t>{3, 6}));
  std::vector<int32_t> got(out->data<int32_t>(), out->data<int32_t>() + 18);
  EXPECT_EQ(got, (std::vector<int32_t>{-7, -7, -7, -7, -7, -7, //
                                       -7, -7, 1, 2, 3, -7,    //
                                       -7, -7, 4, 5, 6, -7}));
  Tensor f = Tensor::zeros(ElemType::F32, {2, 2, 3});
  Expected<Tensor> fp = pad(f, {{0, 0}, {1, 1}, {0, 0}}, 0.5);
  ASSERT_TRUE(fp);
  EXPECT_EQ(fp->shape(), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(fp->data<float>()[0], 0.5f);
  EXPECT_EQ(fp->data<float>()[3], 0.f);
  EXPECT_FALSE(pad(in, {{1, 0}}, 0));
  EXPECT_FALSE(pad(in, {{-1, 0}, {0, 0}}, 0));
}

TEST(Truncate, NumericAndStrings) {
  Tensor ids = Tensor::empty(ElemType::I64, {5});
  std::iota(ids.mutableData<int64_t>(), ids.mutableData<int64_t>() + 5, 10);
  Expected<Tensor> t3 = truncate(ids, 3);
  ASSERT_TRUE(t3);
  EXPECT_EQ(t3->shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(t3->data<int64_t>()[2], 12);
  Expected<Tensor> same = truncate(ids, 10);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->raw(), ids.raw());
  Tensor m = Tensor::empty(ElemType::U8, {2, 4});
  for (int i = 0; i < 8; ++i)
    m.mutableData<uint8_t>()[i] = uint8_t(i);
  Expected<Tensor> cols = truncate(m, 2, 1);
  ASSERT_TRUE(cols);
  std::vector<uint8_t> got(cols->data<uint8_t>(), cols->data<uint8_t>() + 4);
  EXPECT_EQ(got, (std::vector<uint8_t>{0, 1, 4, 5}));
  Tensor s = Tensor::strings(ElemType::String, {3}, {"a", "b", "c"});
  Expected<Tensor> st = truncate(s, 2);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->stringValues(), (std::vector<std::string>{"a", "b"}));
}

//===----------------------------------------------------------------------===//
// batching
//===----------------------------------------------------------------------===//

TEST(Stack, StackUnstackRoundTrip) {
  std::vector<Tensor> items;
  for (int i = 0; i < 5; ++i)
    items.push_back(randomTensor(ElemType::F32, {3, 4}, uint64_t(i)));
  Expected<Tensor> batch = stack(items);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->shape(), (std::vector<int64_t>{5, 3, 4}));
  Expected<std::vector<Tensor>> back = unstack(*batch);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 5u);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE((*back)[i].sameAs(items[i])) << i;
  // Scalars stack to a vector.
  std::vector<Tensor> labels = {Tensor::scalar<int64_t>(ElemType::I64, 3),
                                Tensor::scalar<int64_t>(ElemType::I64, 9)};
  Expected<Tensor> lb = stack(labels);
  ASSERT_TRUE(lb);
  EXPECT_EQ(lb->shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(lb->data<int64_t>()[1], 9);
}

TEST(Stack, StringsAndMismatchErrors) {
  std::vector<Tensor> paths = {Tensor::string(ElemType::String, "a.jpg"),
                               Tensor::string(ElemType::String, "b.jpg")};
  Expected<Tensor> b = stack(paths);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->stringValues(), (std::vector<std::string>{"a.jpg", "b.jpg"}));
  Expected<std::vector<Tensor>> u = unstack(*b);
  ASSERT_TRUE(u);
  EXPECT_EQ((*u)[1].str(), "b.jpg");
  Expected<Tensor> bad = stack({Tensor::zeros(ElemType::U8, {2, 2}),
                                Tensor::zeros(ElemType::U8, {2, 3})});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("element 1 has type u8[2,3]"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(stack({}));
}

TEST(PaddedStack, PadsToLongestOrFixedShape) {
  auto ids = [](std::vector<int32_t> v) {
    Tensor t = Tensor::empty(ElemType::I32, {int64_t(v.size())});
    std::memcpy(t.mutableRaw(), v.data(), v.size() * 4);
    return t;
  };
  std::vector<Tensor> items = {ids({1, 2}), ids({3, 4, 5, 6}), ids({7})};
  Expected<Tensor> b = paddedStack(items, {}, -1);
  ASSERT_TRUE(b) << b.status().message();
  EXPECT_EQ(b->shape(), (std::vector<int64_t>{3, 4}));
  std::vector<int32_t> got(b->data<int32_t>(), b->data<int32_t>() + 12);
  EXPECT_EQ(got,
            (std::vector<int32_t>{1, 2, -1, -1, 3, 4, 5, 6, 7, -1, -1, -1}));
  Expected<Tensor> fixed = paddedStack(items, {6}, 0);
  ASSERT_TRUE(fixed);
  EXPECT_EQ(fixed->shape(), (std::vector<int64_t>{3, 6}));
  Expected<Tensor> tooLong = paddedStack(items, {3}, 0);
  ASSERT_FALSE(tooLong);
  EXPECT_NE(tooLong.status().message().find("element 1"), std::string::npos)
      << tooLong.status().message();

  // 2-D elements pad in both dimensions.
  std::vector<Tensor> imgs = {Tensor::zeros(ElemType::U8, {2, 3}),
                              Tensor::zeros(ElemType::U8, {4, 1})};
  imgs[1].mutableData<uint8_t>()[3] = 9;
  Expected<Tensor> ib = paddedStack(imgs, {}, 7);
  ASSERT_TRUE(ib);
  EXPECT_EQ(ib->shape(), (std::vector<int64_t>{2, 4, 3}));
  const uint8_t *p = ib->data<uint8_t>();
  EXPECT_EQ(p[0], 0);      // item 0 (0,0)
  EXPECT_EQ(p[3 * 3], 7);  // item 0 row 3: padding
  EXPECT_EQ(p[12 + 9], 9); // item 1 (3,0)
  EXPECT_EQ(p[12 + 1], 7); // item 1 (0,1): padding

  std::vector<Tensor> words = {
      Tensor::strings(ElemType::String, {1}, {"a"}),
      Tensor::strings(ElemType::String, {2}, {"b", "c"})};
  Expected<Tensor> wb = paddedStack(words, {}, 0);
  ASSERT_TRUE(wb);
  EXPECT_EQ(wb->stringValues(), (std::vector<std::string>{"a", "", "b", "c"}));
}

TEST(TensorString, TakesItsValueWithoutACopy) {
  // A whole file read as one record (image_folder, files) becomes a scalar
  // Bytes tensor: its bytes must move in, not be copied a second time.
  std::string file(1 << 20, 'x');
  file[12345] = 'y';
  const char *bytes = file.data();
  Tensor t = Tensor::string(ElemType::Bytes, std::move(file));
  EXPECT_EQ(t.str().data(), bytes);
  EXPECT_EQ(t.str().size(), size_t(1) << 20);
  EXPECT_EQ(t.str()[12345], 'y');
  EXPECT_EQ(t.rank(), 0u);
}

} // namespace
