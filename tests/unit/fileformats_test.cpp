//===- fileformats_test.cpp - IDX and .npy header parsers -----------------===//
//
// The parsers the type rules and the runtime sources share: accepted headers
// give the element type, shape and data offset; each kind of bad header gets
// its own message.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/FileFormats.h"

#include <gtest/gtest.h>

using namespace sluice;

namespace {

std::string be32(uint32_t v) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8)
    s += static_cast<char>((v >> shift) & 0xff);
  return s;
}

/// Checks that `h` failed with a message containing `want`.
template <typename T> void expectError(const Expected<T> &h, const char *want) {
  ASSERT_FALSE(h) << "parsed a bad header";
  EXPECT_NE(h.status().message().find(want), std::string::npos)
      << h.status().message();
}

//===----------------------------------------------------------------------===//
// IDX
//===----------------------------------------------------------------------===//

struct IdxCase {
  const char *name;
  std::string bytes;
  ElemType elem;
  std::vector<int64_t> dims; ///< empty: expect `error`
  const char *error = "";
};

class IdxHeaderTest : public ::testing::TestWithParam<IdxCase> {};

TEST_P(IdxHeaderTest, Parse) {
  const IdxCase &c = GetParam();
  Expected<IdxHeader> h = parseIdxHeader(c.bytes);
  if (c.dims.empty())
    return expectError(h, c.error);
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_EQ(h->elem, c.elem);
  EXPECT_EQ(h->dims, c.dims);
  EXPECT_EQ(h->dataOffset, 4 + 4 * c.dims.size());
}

INSTANTIATE_TEST_SUITE_P(
    All, IdxHeaderTest,
    ::testing::Values(
        IdxCase{"MnistImages",
                be32(0x803) + be32(60000) + be32(28) + be32(28) + "\x01\x02",
                ElemType::U8,
                {60000, 28, 28}},
        IdxCase{"I8", be32(0x901) + be32(5), ElemType::I8, {5}},
        IdxCase{"I16", be32(0xB01) + be32(5), ElemType::I16, {5}},
        IdxCase{"I32", be32(0xC02) + be32(2) + be32(3), ElemType::I32, {2, 3}},
        IdxCase{"F32",
                be32(0xD01) + be32(0x80000000u),
                ElemType::F32,
                {int64_t(1) << 31}},
        IdxCase{"F64", be32(0xE01) + be32(1), ElemType::F64, {1}},
        IdxCase{"TooShort",
                std::string("\0\0\x08", 3),
                ElemType::U8,
                {},
                "the file is too short for an IDX header"},
        IdxCase{"NotIdx",
                "hello",
                ElemType::U8,
                {},
                "not an IDX file: it starts with 68 65 6c 6c, an IDX magic "
                "number starts with 00 00"},
        IdxCase{"UnknownCode",
                be32(0xA01) + be32(1),
                ElemType::U8,
                {},
                "unknown IDX element type code 0x0a"},
        IdxCase{"NoDims",
                be32(0x800),
                ElemType::U8,
                {},
                "an IDX file with no dimensions"},
        IdxCase{"EndsInHeader",
                be32(0x803) + be32(1) + be32(2),
                ElemType::U8,
                {},
                "the file ends inside its IDX header"}),
    [](const auto &info) { return std::string(info.param.name); });

//===----------------------------------------------------------------------===//
// .npy
//===----------------------------------------------------------------------===//

/// A .npy file of format `version` with `dict` padded as numpy pads it.
std::string npy(int version, std::string dict) {
  size_t pre = version == 1 ? 10 : 12;
  while ((pre + dict.size() + 1) % 64 != 0)
    dict += ' ';
  dict += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(version) +
                    '\0' + static_cast<char>(dict.size() & 0xff) +
                    static_cast<char>((dict.size() >> 8) & 0xff);
  if (version != 1)
    out += std::string(2, '\0');
  return out + dict;
}

std::string dict(const std::string &descr, const std::string &shape,
                 const char *fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran +
         ", 'shape': " + shape + ", }";
}

struct NpyCase {
  const char *name;
  std::string bytes;
  ElemType elem;
  std::vector<int64_t> shape;
  bool bigEndian = false;
  bool fortran = false;
  const char *error = ""; ///< non-empty: expect this error
};

class NpyHeaderTest : public ::testing::TestWithParam<NpyCase> {};

TEST_P(NpyHeaderTest, Parse) {
  const NpyCase &c = GetParam();
  Expected<NpyHeader> h = parseNpyHeader(c.bytes);
  if (*c.error)
    return expectError(h, c.error);
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_EQ(h->elem, c.elem);
  EXPECT_EQ(h->shape, c.shape);
  EXPECT_EQ(h->bigEndian, c.bigEndian);
  EXPECT_EQ(h->fortranOrder, c.fortran);
  // The files here are all header, no data.
  EXPECT_EQ(h->dataOffset, c.bytes.size());
  Expected<size_t> size = npyHeaderSize(c.bytes.substr(0, kNpyPreambleBytes));
  ASSERT_TRUE(size) << size.status().message();
  EXPECT_EQ(*size, c.bytes.size());
}

std::string withByte(std::string s, size_t at, char c) {
  s[at] = c;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    All, NpyHeaderTest,
    ::testing::Values(
        NpyCase{
            "V1", npy(1, dict("<f4", "(10, 3, 4)")), ElemType::F32, {10, 3, 4}},
        NpyCase{"V2", npy(2, dict("|u1", "(7,)")), ElemType::U8, {7}},
        NpyCase{"V3", npy(3, dict("<i8", "()")), ElemType::I64, {}},
        NpyCase{"DoubleQuotesNoTrailingComma",
                npy(1, "{\"descr\": \"<f8\", \"fortran_order\": False, "
                       "\"shape\": (2, 3)}"),
                ElemType::F64,
                {2, 3}},
        NpyCase{"Python2Longs",
                npy(1, dict("<i2", "(3L, 4L)")),
                ElemType::I16,
                {3, 4}},
        NpyCase{"BigEndian",
                npy(1, dict(">u2", "(5,)")),
                ElemType::U16,
                {5},
                /*bigEndian=*/true},
        NpyCase{"Fortran",
                npy(1, dict("<f2", "(2, 2)", "True")),
                ElemType::F16,
                {2, 2},
                false,
                /*fortran=*/true},
        NpyCase{"NativeOrderBool",
                npy(1, dict("=b1", "(1,)")),
                ElemType::Bool,
                {1}},
        NpyCase{"NoMagic",
                "just text",
                ElemType::U8,
                {},
                false,
                false,
                "not a .npy file (no \\x93NUMPY magic)"},
        NpyCase{"Version4",
                withByte(npy(1, dict("<f4", "(1,)")), 6, 4),
                ElemType::U8,
                {},
                false,
                false,
                "unsupported .npy format version 4 (versions 1, 2 and 3 are "
                "supported)"},
        NpyCase{"ImplausiblyLong",
                std::string("\x93NUMPY\x02\x00\x01\x00\x10\x00", 12),
                ElemType::U8,
                {},
                false,
                false,
                "implausibly long .npy header (1048577 bytes)"},
        NpyCase{"EndsInPreamble",
                npy(2, dict("<f4", "(1,)")).substr(0, 11),
                ElemType::U8,
                {},
                false,
                false,
                "the file ends inside its .npy header"},
        NpyCase{"EndsInDict",
                npy(1, dict("<f4", "(1,)")).substr(0, 40),
                ElemType::U8,
                {},
                false,
                false,
                "the file ends inside its .npy header"},
        NpyCase{"NotADict",
                npy(1, "['descr']"),
                ElemType::U8,
                {},
                false,
                false,
                "malformed header: ['descr']"},
        NpyCase{"UnexpectedKey",
                npy(1, "{'descr': '<f4', 'order': 'C', 'shape': (1,)}"),
                ElemType::U8,
                {},
                false,
                false,
                "unexpected key 'order' in header"},
        NpyCase{"NoFortranOrder",
                npy(1, "{'descr': '<f4', 'shape': (1,)}"),
                ElemType::U8,
                {},
                false,
                false,
                "header lacks descr, fortran_order or shape"},
        NpyCase{"BadShape",
                npy(1, dict("<f4", "(1, x)")),
                ElemType::U8,
                {},
                false,
                false,
                "malformed shape in header"},
        NpyCase{"Structured",
                npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, "
                       "'shape': (1,)}"),
                ElemType::U8,
                {},
                false,
                false,
                "structured dtypes are not supported"},
        NpyCase{"Unicode",
                npy(1, dict("<U10", "(3,)")),
                ElemType::U8,
                {},
                false,
                false,
                "unsupported dtype '<U10'"},
        NpyCase{"NoByteOrder",
                npy(1, dict("f4", "(3,)")),
                ElemType::U8,
                {},
                false,
                false,
                "unsupported dtype 'f4'"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(NpyHeaderSize, LongestPlausibleHeader) {
  // A 1 MiB dict is allowed; NpyHeaderTest ImplausiblyLong is a byte more.
  Expected<size_t> size =
      npyHeaderSize(std::string("\x93NUMPY\x02\x00\x00\x00\x10\x00", 12));
  ASSERT_TRUE(size) << size.status().message();
  EXPECT_EQ(*size, 12u + (1u << 20));
}

/// What the npy sink writes for each type reads back as that type.
TEST(NpyDescr, RoundTripsEveryNumericType) {
  for (ElemType t : {ElemType::U8, ElemType::I8, ElemType::U16, ElemType::I16,
                     ElemType::I32, ElemType::I64, ElemType::F16, ElemType::F32,
                     ElemType::F64, ElemType::Bool}) {
    std::string descr = npyDescr(t);
    // One-byte types have no byte order; numpy writes '|' for them.
    EXPECT_EQ(descr[0], elemTypeSize(t) == 1 ? '|' : '<') << descr;
    Expected<NpyHeader> h = parseNpyHeader(npy(1, dict(descr, "(1,)")));
    ASSERT_TRUE(h) << descr << ": " << h.status().message();
    EXPECT_EQ(h->elem, t) << descr;
    EXPECT_FALSE(h->bigEndian) << descr;
  }
  EXPECT_EQ(npyDescr(ElemType::Bytes), "");
  EXPECT_EQ(npyDescr(ElemType::String), "");
}

} // namespace
