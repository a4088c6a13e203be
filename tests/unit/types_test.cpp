//===- types_test.cpp - Element/field/record types, Value, Tensor ---------===//
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace sluice;

namespace {

//===----------------------------------------------------------------------===//
// ElemType
//===----------------------------------------------------------------------===//

struct ElemCase {
  const char *name;
  ElemType type;
  unsigned size;
  bool numeric, isFloat, isInteger;
};

class ElemTypeTest : public ::testing::TestWithParam<ElemCase> {};

TEST_P(ElemTypeTest, NameSizeAndClass) {
  const ElemCase &c = GetParam();
  EXPECT_EQ(elemTypeName(c.type), c.name);
  std::optional<ElemType> parsed = parseElemType(c.name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, c.type);
  EXPECT_EQ(elemTypeSize(c.type), c.size);
  EXPECT_EQ(isNumeric(c.type), c.numeric);
  EXPECT_EQ(isFloat(c.type), c.isFloat);
  EXPECT_EQ(isInteger(c.type), c.isInteger);
}

INSTANTIATE_TEST_SUITE_P(
    All, ElemTypeTest,
    ::testing::Values(
        ElemCase{"u8", ElemType::U8, 1, true, false, true},
        ElemCase{"i8", ElemType::I8, 1, true, false, true},
        ElemCase{"u16", ElemType::U16, 2, true, false, true},
        ElemCase{"i16", ElemType::I16, 2, true, false, true},
        ElemCase{"i32", ElemType::I32, 4, true, false, true},
        ElemCase{"i64", ElemType::I64, 8, true, false, true},
        ElemCase{"f16", ElemType::F16, 2, true, true, false},
        ElemCase{"f32", ElemType::F32, 4, true, true, false},
        ElemCase{"f64", ElemType::F64, 8, true, true, false},
        ElemCase{"bool", ElemType::Bool, 1, true, false, true},
        ElemCase{"bytes", ElemType::Bytes, 0, false, false, false},
        ElemCase{"string", ElemType::String, 0, false, false, false}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(ElemType, RejectsUnknownSpellings) {
  for (const char *bad : {"", "float", "F32", "int64", "u32", "f32 ", "str"})
    EXPECT_FALSE(parseElemType(bad).has_value()) << bad;
}

TEST(ElemType, AllNamesParseBack) {
  const auto &names = allElemTypeNames();
  EXPECT_EQ(names.size(), 13u);
  // bf16 is numeric, a float, two bytes; its number comes after the others
  // (disk caches store the numbers).
  EXPECT_EQ(parseElemType("bf16"), ElemType::BF16);
  EXPECT_TRUE(isFloat(ElemType::BF16) && isNumeric(ElemType::BF16));
  EXPECT_EQ(elemTypeSize(ElemType::BF16), 2u);
  EXPECT_GT(static_cast<int>(ElemType::BF16),
            static_cast<int>(ElemType::String));
  for (std::string_view n : names) {
    std::optional<ElemType> t = parseElemType(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_EQ(elemTypeName(*t), n);
  }
}

//===----------------------------------------------------------------------===//
// FieldType
//===----------------------------------------------------------------------===//

struct FieldCase {
  FieldType type;
  const char *str;
  bool isStatic;
  std::optional<int64_t> elements;
  std::optional<int64_t> bytes;
};

class FieldTypeTest : public ::testing::TestWithParam<FieldCase> {};

TEST_P(FieldTypeTest, StrAndSizes) {
  const FieldCase &c = GetParam();
  EXPECT_EQ(c.type.str(), c.str);
  EXPECT_EQ(c.type.hasStaticShape(), c.isStatic);
  EXPECT_EQ(c.type.numElements(), c.elements);
  EXPECT_EQ(c.type.staticBytes(), c.bytes);
}

INSTANTIATE_TEST_SUITE_P(
    All, FieldTypeTest,
    ::testing::Values(
        FieldCase{{ElemType::U8, {224, 224, 3}},
                  "u8[224,224,3]",
                  true,
                  224 * 224 * 3,
                  224 * 224 * 3},
        FieldCase{{ElemType::I64}, "i64", true, 1, 8},
        FieldCase{{ElemType::F32, {kDynamic, 13}},
                  "f32[?,13]",
                  false,
                  std::nullopt,
                  std::nullopt},
        FieldCase{
            {ElemType::Bytes, {128}}, "bytes[128]", true, 128, std::nullopt},
        FieldCase{{ElemType::String}, "string", true, 1, std::nullopt},
        FieldCase{{ElemType::F16, {2, 0, 5}}, "f16[2,0,5]", true, 0, 0},
        FieldCase{{ElemType::F64, {128, 3, 224, 224}},
                  "f64[128,3,224,224]",
                  true,
                  128 * 3 * 224 * 224,
                  128LL * 3 * 224 * 224 * 8},
        FieldCase{{ElemType::Bool, {kDynamic}},
                  "bool[?]",
                  false,
                  std::nullopt,
                  std::nullopt},
        // Overflowing products are not a usable static size.
        FieldCase{{ElemType::U8, {1LL << 40, 1LL << 40}},
                  "u8[1099511627776,1099511627776]",
                  true,
                  std::nullopt,
                  std::nullopt}));

TEST(FieldType, Equality) {
  EXPECT_EQ(FieldType(ElemType::U8, {2, 3}), FieldType(ElemType::U8, {2, 3}));
  EXPECT_NE(FieldType(ElemType::U8, {2, 3}), FieldType(ElemType::I8, {2, 3}));
  EXPECT_NE(FieldType(ElemType::U8, {2, 3}), FieldType(ElemType::U8, {3, 2}));
  EXPECT_NE(FieldType(ElemType::U8), FieldType(ElemType::U8, {1}));
}

//===----------------------------------------------------------------------===//
// RecordType
//===----------------------------------------------------------------------===//

TEST(RecordType, StrFindSetRemove) {
  RecordType r({{"image", FieldType(ElemType::U8, {224, 224, 3})},
                {"label", FieldType(ElemType::I64)}});
  EXPECT_EQ(r.str(), "image: u8[224,224,3], label: i64");
  EXPECT_EQ(r.indexOf("label"), 1);
  EXPECT_EQ(r.indexOf("nope"), -1);
  ASSERT_NE(r.find("image"), nullptr);
  EXPECT_EQ(r.find("image")->type.str(), "u8[224,224,3]");
  EXPECT_EQ(r.find("nope"), nullptr);

  // set replaces in place (keeping the position) or appends.
  r.set("image", FieldType(ElemType::F32, {3, 224, 224}));
  r.set("weight", FieldType(ElemType::F32));
  EXPECT_EQ(r.str(), "image: f32[3,224,224], label: i64, weight: f32");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"image", "label", "weight"}));

  r.remove("label");
  r.remove("label"); // absent: no effect
  EXPECT_EQ(r.str(), "image: f32[3,224,224], weight: f32");
  EXPECT_EQ(r.size(), 2u);
  EXPECT_FALSE(r.empty());
  EXPECT_EQ(RecordType().str(), "");
  EXPECT_TRUE(RecordType().empty());
}

//===----------------------------------------------------------------------===//
// Value
//===----------------------------------------------------------------------===//

struct ValueStrCase {
  Value value;
  const char *str;
};

class ValueStrTest : public ::testing::TestWithParam<ValueStrCase> {};

TEST_P(ValueStrTest, FlowRendering) {
  EXPECT_EQ(GetParam().value.str(), GetParam().str);
}

Value sizeScaleMap() {
  Value m = Value::map();
  m.set("size", Value::list({Value::integer(224), Value::integer(224)}));
  m.set("scale", Value::real(0.5));
  return m;
}

INSTANTIATE_TEST_SUITE_P(
    All, ValueStrTest,
    ::testing::Values(
        ValueStrCase{sizeScaleMap(), "{size: [224, 224], scale: 0.5}"},
        ValueStrCase{Value::null(), "null"},
        ValueStrCase{Value::boolean(true), "true"},
        ValueStrCase{Value::integer(-42), "-42"},
        ValueStrCase{Value::real(1.0), "1.0"},
        ValueStrCase{Value::real(0.1), "0.1"},
        ValueStrCase{Value::real(1.3333333), "1.3333333"},
        ValueStrCase{Value::real(1e-7), "1e-07"},
        ValueStrCase{Value::string("data/train"), "data/train"},
        ValueStrCase{Value::string("day_*.tsv"), "day_*.tsv"},
        // Strings that would read back as something else get quotes.
        ValueStrCase{Value::string("\t"), "\"\\t\""},
        ValueStrCase{Value::string("42"), "\"42\""},
        ValueStrCase{Value::string("true"), "\"true\""},
        ValueStrCase{Value::string(""), "\"\""},
        ValueStrCase{Value::string("label >= 0"), "\"label >= 0\""},
        ValueStrCase{Value::string("*.jpg"), "\"*.jpg\""},
        ValueStrCase{Value::string("a\"b"), "\"a\\\"b\""},
        ValueStrCase{Value::list({}), "[]"}, ValueStrCase{Value::map(), "{}"}));

TEST(Value, MapAccessKeepsOrderAndReplaces) {
  Value m = Value::map(SourceLoc{3, 5});
  m.set("b", Value::integer(1));
  m.set("a", Value::integer(2));
  m.set("b", Value::integer(3));
  ASSERT_EQ(m.entries().size(), 2u);
  EXPECT_EQ(m.entries()[0].first, "b");
  EXPECT_EQ(m["b"].asInt(), 3);
  EXPECT_TRUE(m.has("a"));
  EXPECT_FALSE(m.has("c"));
  EXPECT_TRUE(m["c"].isNull());
  EXPECT_EQ(m.get("c"), nullptr);
  EXPECT_EQ(m.loc().line, 3);
  EXPECT_EQ(m.loc().col, 5);
}

TEST(Value, ListConversionsAcceptScalars) {
  Value l = Value::list({Value::integer(1), Value::real(2.5)});
  EXPECT_EQ(l.asDoubleList(), (std::vector<double>{1.0, 2.5}));
  EXPECT_EQ(l.asIntList(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Value::integer(7).asIntList(), (std::vector<int64_t>{7}));
  EXPECT_EQ(Value::real(0.5).asDoubleList(), (std::vector<double>{0.5}));
  EXPECT_EQ(Value::string("x").asStringList(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(Value::integer(3).asDouble(), 3.0);
  EXPECT_EQ(Value::real(3.9).asInt(), 3);
}

TEST(Value, EqualityIgnoresLocationsNotKinds) {
  EXPECT_EQ(Value::integer(1, {1, 1}), Value::integer(1, {9, 9}));
  EXPECT_NE(Value::integer(1), Value::real(1.0));
  EXPECT_NE(Value::string("a"), Value::string("b"));
  EXPECT_EQ(sizeScaleMap(), sizeScaleMap());
  Value other = sizeScaleMap();
  other.set("scale", Value::real(0.25));
  EXPECT_NE(sizeScaleMap(), other);
  EXPECT_EQ(Value::real(std::nan("")), Value::real(std::nan("")));
}

//===----------------------------------------------------------------------===//
// Tensor
//===----------------------------------------------------------------------===//

class TensorAlignTest : public ::testing::TestWithParam<
                            std::pair<ElemType, std::vector<int64_t>>> {};

TEST_P(TensorAlignTest, AlignedSizedAndZeroed) {
  auto [elem, shape] = GetParam();
  Tensor t = Tensor::zeros(elem, shape);
  ASSERT_TRUE(t.valid());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  FieldType ft(elem, shape);
  EXPECT_EQ(static_cast<int64_t>(t.nbytes()), *ft.staticBytes());
  EXPECT_EQ(t.numElements(), *ft.numElements());
  EXPECT_EQ(t.type(), ft);
  for (size_t i = 0; i < t.nbytes(); ++i)
    ASSERT_EQ(t.raw()[i], 0) << i;
  EXPECT_GE(t.memoryBytes(), t.nbytes());
  EXPECT_EQ(t.memoryBytes() % 64, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TensorAlignTest,
    ::testing::Values(
        std::make_pair(ElemType::U8, std::vector<int64_t>{224, 224, 3}),
        std::make_pair(ElemType::F32, std::vector<int64_t>{13}),
        std::make_pair(ElemType::I64, std::vector<int64_t>{}),
        std::make_pair(ElemType::F64, std::vector<int64_t>{0, 4}),
        std::make_pair(ElemType::U16, std::vector<int64_t>{3, 5, 7})));

TEST(Tensor, ViewsOfLargerBuffersCompactToTheirOwnBytes) {
  Tensor base = Tensor::empty(ElemType::I32, {1000});
  for (int i = 0; i < 1000; ++i)
    base.mutableData<int32_t>()[i] = i;
  EXPECT_FALSE(base.pinsLargerBuffer());
  Tensor row = Tensor::viewOf(base, 40, ElemType::I32, {5});
  ASSERT_TRUE(row.pinsLargerBuffer());
  Tensor rowOfRow = Tensor::viewOf(row, 4, ElemType::I32, {2});
  EXPECT_TRUE(rowOfRow.pinsLargerBuffer());
  Tensor own = row.compacted();
  EXPECT_FALSE(own.pinsLargerBuffer());
  EXPECT_NE(own.raw(), row.raw());
  EXPECT_TRUE(own.sameAs(row));
  EXPECT_EQ(own.data<int32_t>()[0], 10);
  // A view of a whole buffer pins nothing more; compacting it is free.
  Tensor whole = Tensor::viewOf(base, 0, ElemType::I32, {1000});
  EXPECT_FALSE(whole.pinsLargerBuffer());
  EXPECT_EQ(whole.compacted().raw(), base.raw());
}

TEST(Tensor, ScalarStringsSameAsAndReshape) {
  Tensor a = Tensor::scalar<float>(ElemType::F32, 2.5f);
  EXPECT_EQ(*a.data<float>(), 2.5f);
  EXPECT_EQ(a.rank(), 0u);
  Tensor b = Tensor::scalar<float>(ElemType::F32, 2.5f);
  EXPECT_TRUE(a.sameAs(b));
  *b.mutableData<float>() = 3.0f;
  EXPECT_FALSE(a.sameAs(b));
  EXPECT_FALSE(a.sameAs(Tensor::scalar<int32_t>(ElemType::I32, 0)));

  Tensor v = Tensor::empty(ElemType::I32, {2, 3});
  for (int i = 0; i < 6; ++i)
    v.mutableData<int32_t>()[i] = i * 10;
  Tensor r = v.reshaped({3, 2});
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r.raw(), v.raw()); // a view, not a copy
  EXPECT_EQ(r.data<int32_t>()[5], 50);
  EXPECT_FALSE(r.sameAs(v)); // same bytes, different shape

  Tensor s = Tensor::strings(ElemType::String, {2}, {"cat", "dog"});
  EXPECT_FALSE(s.isNumeric());
  EXPECT_EQ(s.stringValues()[1], "dog");
  EXPECT_TRUE(s.sameAs(Tensor::strings(ElemType::String, {2}, {"cat", "dog"})));
  EXPECT_FALSE(s.sameAs(Tensor::strings(ElemType::Bytes, {2}, {"cat", "dog"})));
  Tensor copy = s; // copies share the strings
  copy.mutableStringValues()[0] = "cow";
  EXPECT_EQ(s.stringValues()[0], "cow");
  Tensor big = Tensor::string(ElemType::Bytes, std::string(1000, 'x'));
  EXPECT_EQ(big.str().size(), 1000u);
  EXPECT_GE(big.memoryBytes(), 1000u);
  EXPECT_FALSE(Tensor().valid());
}

} // namespace
