//===- kernels_expr_test.cpp - map/filter expression interpreter ----------===//

#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Scalar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

using namespace sluice;
using namespace sluice::kernels;

namespace {

ExprPtr parse(const std::string &text) {
  ExprError err;
  ExprPtr e = parseExpr(text, err);
  EXPECT_TRUE(e) << text << ": " << err.message;
  return e;
}

Tensor f32s(const std::vector<float> &v) {
  Tensor t = Tensor::empty(ElemType::F32, {int64_t(v.size())});
  std::memcpy(t.mutableRaw(), v.data(), v.size() * 4);
  return t;
}

//===----------------------------------------------------------------------===//
// map
//===----------------------------------------------------------------------===//

struct MapCase {
  const char *expr;
  /// Evaluated step by step in float, like numpy on an f32 array: each
  /// operation rounds to f32; functions take the f64 libm result rounded.
  std::function<float(float)> ref;
};
class MapF32 : public ::testing::TestWithParam<MapCase> {};

float viaDouble(double (*f)(double), float x) {
  return static_cast<float>(f(static_cast<double>(x)));
}

TEST_P(MapF32, MatchesStepwiseF32Reference) {
  const MapCase &mc = GetParam();
  ExprPtr e = parse(mc.expr);
  ASSERT_TRUE(e);
  Expected<CompiledExpr> ce = CompiledExpr::compileMap(*e, ElemType::F32);
  ASSERT_TRUE(ce) << ce.status().message();
  EXPECT_EQ(ce->resultType(), ElemType::F32);
  // More than one chunk, with a ragged tail.
  std::vector<float> xs;
  for (int i = 0; i < 1000; ++i)
    xs.push_back(float((i - 400) * 0.173));
  Tensor in = f32s(xs);
  Expected<Tensor> out = ce->map(in);
  ASSERT_TRUE(out) << out.status().message();
  ASSERT_EQ(out->shape(), in.shape());
  for (size_t i = 0; i < xs.size(); ++i) {
    float expected = mc.ref(xs[i]);
    float got = out->data<float>()[i];
    if (std::isnan(expected))
      EXPECT_TRUE(std::isnan(got)) << mc.expr << " x=" << xs[i];
    else
      ASSERT_EQ(got, expected) << mc.expr << " x=" << xs[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Functions, MapF32,
    ::testing::Values(
        MapCase{"log(max(x, 0) + 1)",
                [](float x) {
                  return viaDouble(std::log, std::max(x, 0.f) + 1.f);
                }},
        MapCase{"x * 2.5 - 1", [](float x) { return x * 2.5f - 1.f; }},
        MapCase{"x * 0.1 + 0.7", [](float x) { return x * 0.1f + 0.7f; }},
        MapCase{"-x / 3", [](float x) { return -x / 3.f; }},
        MapCase{"abs(x) + floor(x) + ceil(x) + round(x)",
                [](float x) {
                  return std::fabs(x) + std::floor(x) + std::ceil(x) +
                         std::nearbyint(x);
                }},
        MapCase{"exp(x / 100) + sqrt(abs(x)) + log1p(abs(x))",
                [](float x) {
                  return viaDouble(std::exp, x / 100.f) +
                         std::sqrt(std::fabs(x)) +
                         viaDouble(std::log1p, std::fabs(x));
                }},
        MapCase{"sin(x) * cos(x) + tanh(x)",
                [](float x) {
                  return viaDouble(std::sin, x) * viaDouble(std::cos, x) +
                         viaDouble(std::tanh, x);
                }},
        MapCase{"sigmoid(x)",
                [](float x) { return 1.f / (1.f + viaDouble(std::exp, -x)); }},
        MapCase{
            "pow(abs(x), 1.5)",
            [](float x) { return float(std::pow(double(std::fabs(x)), 1.5)); }},
        MapCase{"clamp(x, -10, 20.5)",
                [](float x) { return std::min(std::max(x, -10.f), 20.5f); }},
        MapCase{"x % 7",
                [](float x) {
                  float m = std::fmod(x, 7.f);
                  return m < 0 ? m + 7.f : m == 0 ? 0.f : m;
                }},
        MapCase{"x // 7", [](float x) { return std::floor(x / 7.f); }},
        MapCase{"x > 0 ? x : x * 0.01",
                [](float x) { return x > 0 ? x : x * 0.01f; }},
        MapCase{"(x >= -5 and x < 5) or x == 30 ? x * 0 + 1 : x * 0",
                [](float x) {
                  return (x >= -5 && x < 5) || x == 30 ? x * 0.f + 1.f
                                                       : x * 0.f;
                }}),
    [](const auto &info) { return "case" + std::to_string(info.index); });

TEST(Map, NanPropagatesThroughMinMax) {
  ExprPtr e = parse("log(max(x, 0) + 1)");
  Expected<CompiledExpr> ce = CompiledExpr::compileMap(*e, ElemType::F32);
  ASSERT_TRUE(ce);
  Expected<Tensor> out = ce->map(f32s({NAN, 1.f}));
  ASSERT_TRUE(out);
  EXPECT_TRUE(std::isnan(out->data<float>()[0]));
  EXPECT_EQ(out->data<float>()[1], float(std::log(2.0)));
}

TEST(Map, IntegerExpressionsAreExact) {
  ExprPtr e = parse("x * 3 + x % 4 - 7");
  Expected<CompiledExpr> ce = CompiledExpr::compileMap(*e, ElemType::I64);
  ASSERT_TRUE(ce) << ce.status().message();
  EXPECT_EQ(ce->resultType(), ElemType::I64);
  std::vector<int64_t> xs = {0, -7, 13, (int64_t(1) << 60) + 1,
                             -(int64_t(1) << 59) - 3};
  Tensor in = Tensor::empty(ElemType::I64, {int64_t(xs.size())});
  std::memcpy(in.mutableRaw(), xs.data(), xs.size() * 8);
  Expected<Tensor> out = ce->map(in);
  ASSERT_TRUE(out);
  for (size_t i = 0; i < xs.size(); ++i) {
    int64_t mod = ((xs[i] % 4) + 4) % 4; // floor modulo: sign of the divisor
    EXPECT_EQ(out->data<int64_t>()[i], xs[i] * 3 + mod - 7) << xs[i];
  }
}

TEST(Map, TrueDivisionFloorModuloAndWrapping) {
  Tensor i32 = Tensor::empty(ElemType::I32, {2});
  i32.mutableData<int32_t>()[0] = 7;
  i32.mutableData<int32_t>()[1] = -7;
  Expected<CompiledExpr> div =
      CompiledExpr::compileMap(*parse("x / 2"), ElemType::I32);
  ASSERT_TRUE(div);
  EXPECT_TRUE(isFloat(div->resultType()));
  Expected<Tensor> d = div->map(i32);
  ASSERT_TRUE(d);
  EXPECT_EQ(loadAsDouble(d->elem(), d->raw(), 0), 3.5);
  EXPECT_EQ(loadAsDouble(d->elem(), d->raw(), 1), -3.5);

  Expected<CompiledExpr> mod =
      CompiledExpr::compileMap(*parse("x % 3 + x % 0"), ElemType::I32);
  ASSERT_TRUE(mod);
  Expected<Tensor> m = mod->map(i32);
  ASSERT_TRUE(m);
  EXPECT_EQ(loadAsInt(m->elem(), m->raw(), 0), 1); // 7 % 3, x % 0 -> 0
  EXPECT_EQ(loadAsInt(m->elem(), m->raw(), 1), 2); // -7 % 3, as numpy

  // A u8 field times a literal stays u8 (weak literal types) and wraps.
  Tensor u8 = Tensor::empty(ElemType::U8, {3});
  uint8_t uv[3] = {10, 127, 200};
  std::memcpy(u8.mutableRaw(), uv, 3);
  Expected<CompiledExpr> twice =
      CompiledExpr::compileMap(*parse("x * 2"), ElemType::U8);
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->resultType(), ElemType::U8);
  Expected<Tensor> t = twice->map(u8);
  ASSERT_TRUE(t);
  EXPECT_EQ(std::vector<uint8_t>(t->data<uint8_t>(), t->data<uint8_t>() + 3),
            (std::vector<uint8_t>{20, 254, 144}));
}

TEST(Map, BoolResults) {
  Expected<CompiledExpr> ce = CompiledExpr::compileMap(
      *parse("x > 0.5 and not (x > 2)"), ElemType::F32);
  ASSERT_TRUE(ce);
  EXPECT_EQ(ce->resultType(), ElemType::Bool);
  Expected<Tensor> out = ce->map(f32s({0.f, 1.f, 3.f}));
  ASSERT_TRUE(out);
  EXPECT_EQ(
      std::vector<uint8_t>(out->data<uint8_t>(), out->data<uint8_t>() + 3),
      (std::vector<uint8_t>{0, 1, 0}));
}

TEST(Map, Errors) {
  Expected<CompiledExpr> other =
      CompiledExpr::compileMap(*parse("y + 1"), ElemType::F32);
  ASSERT_FALSE(other);
  EXPECT_NE(other.status().message().find("'y'"), std::string::npos)
      << other.status().message();
  EXPECT_FALSE(CompiledExpr::compileMap(*parse("x[0]"), ElemType::F32));
  Expected<CompiledExpr> ce =
      CompiledExpr::compileMap(*parse("x + 1"), ElemType::F32);
  ASSERT_TRUE(ce);
  EXPECT_FALSE(ce->map(Tensor::zeros(ElemType::F64, {2}))); // wrong type
}

//===----------------------------------------------------------------------===//
// filter
//===----------------------------------------------------------------------===//

RecordType criteo() {
  return RecordType({{"label", FieldType(ElemType::I64)},
                     {"dense", FieldType(ElemType::F32, {13})},
                     {"tokens", FieldType(ElemType::I32, {kDynamic})},
                     {"path", FieldType(ElemType::String)}});
}

Record record(int64_t label, float dense0, std::vector<int32_t> tokens) {
  Record r;
  r.fields.push_back(Tensor::scalar<int64_t>(ElemType::I64, label));
  Tensor d = Tensor::zeros(ElemType::F32, {13});
  d.mutableData<float>()[0] = dense0;
  d.mutableData<float>()[12] = 42.f;
  r.fields.push_back(d);
  Tensor t = Tensor::empty(ElemType::I32, {int64_t(tokens.size())});
  if (!tokens.empty())
    std::memcpy(t.mutableRaw(), tokens.data(), tokens.size() * 4);
  r.fields.push_back(t);
  r.fields.push_back(Tensor::string(ElemType::String, "x.tsv"));
  return r;
}

struct FilterCase {
  const char *expr;
  int64_t label;
  float dense0;
  bool expected;
};
class Filter : public ::testing::TestWithParam<FilterCase> {};

TEST_P(Filter, EvaluatesOnRecords) {
  const FilterCase &fc = GetParam();
  Expected<CompiledExpr> ce =
      CompiledExpr::compileRecord(*parse(fc.expr), criteo());
  ASSERT_TRUE(ce) << ce.status().message();
  Expected<bool> keep = ce->test(record(fc.label, fc.dense0, {1, 2}));
  ASSERT_TRUE(keep) << keep.status().message();
  EXPECT_EQ(*keep, fc.expected) << fc.expr;
}

INSTANTIATE_TEST_SUITE_P(
    Exprs, Filter,
    ::testing::Values(
        FilterCase{"label >= 0", 0, 0, true},
        FilterCase{"label >= 0", -1, 0, false},
        FilterCase{"label >= 0 and dense[0] < 5", 1, 4.5f, true},
        FilterCase{"label >= 0 and dense[0] < 5", 1, 5.f, false},
        FilterCase{"dense[12] == 42 or label == 3", 0, 0, true},
        FilterCase{"not (label == 1)", 1, 0, false},
        FilterCase{"label % 2 == 1 ? dense[0] > 0 : false", 3, 1, true},
        FilterCase{"label % 2 == 1 ? dense[0] > 0 : false", 4, 1, false},
        FilterCase{"tokens[1] == 2", 0, 0, true},
        // 2^53 + 1 is not a double: integer arithmetic on an
        // i64 field is exact (in double, 2^53+1 - 2 would be
        // 2^53 - 2). Literals themselves travel as doubles in
        // the AST, so they are exact only below 2^53.
        FilterCase{"label - 2 == 9007199254740991", 9007199254740993, 0, true},
        FilterCase{"label - 2 == 9007199254740991", 9007199254740992, 0,
                   false}));

TEST(FilterErrors, CompileAndRuntime) {
  RecordType rt = criteo();
  Expected<CompiledExpr> vec =
      CompiledExpr::compileRecord(*parse("dense > 0"), rt);
  ASSERT_FALSE(vec);
  EXPECT_NE(vec.status().message().find("index it"), std::string::npos)
      << vec.status().message();
  Expected<CompiledExpr> oob =
      CompiledExpr::compileRecord(*parse("dense[13] > 0"), rt);
  ASSERT_FALSE(oob);
  EXPECT_NE(oob.status().message().find("out of range"), std::string::npos);
  EXPECT_FALSE(CompiledExpr::compileRecord(*parse("path == 1"), rt));
  EXPECT_FALSE(CompiledExpr::compileRecord(*parse("nope > 1"), rt));

  // A dynamically shaped field is checked per record.
  Expected<CompiledExpr> dyn =
      CompiledExpr::compileRecord(*parse("tokens[3] > 0"), rt);
  ASSERT_TRUE(dyn) << dyn.status().message();
  Record r = record(0, 0, {1, 2});
  r.index = 77;
  Expected<bool> bad = dyn->test(r);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("record 77"), std::string::npos)
      << bad.status().message();
  Expected<bool> good = dyn->test(record(0, 0, {1, 2, 3, 4}));
  ASSERT_TRUE(good);
  EXPECT_TRUE(*good);
}

TEST(Filter, EvalRecordValueAndDump) {
  Expected<CompiledExpr> ce =
      CompiledExpr::compileRecord(*parse("dense[0] * 2 + label"), criteo());
  ASSERT_TRUE(ce);
  Expected<double> v = ce->evalRecord(record(3, 1.25f, {}));
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, 5.5);
  std::string code = ce->dump();
  EXPECT_NE(code.find("load.f dense[0]"), std::string::npos) << code;
  EXPECT_NE(code.find("load.i label"), std::string::npos) << code;
  EXPECT_NE(code.find("cvt.if"), std::string::npos) << code;
}

} // namespace
