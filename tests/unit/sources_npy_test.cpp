//===- sources_npy_test.cpp - .npy reader
//----------------------------------===//

#include "sources_test_util.h"

#include <cmath>

using namespace sluice;
using namespace sluice::testing;

namespace {

/// A .npy file (format 1.0, or 2.0 when `v2`) with the given header dict.
std::string npy(const std::string &dict, const std::string &data,
                bool v2 = false) {
  size_t pre = v2 ? 12 : 10;
  std::string header = dict;
  while ((pre + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + (v2 ? '\x02' : '\x01') + '\0';
  if (v2)
    out += le<uint32_t>(static_cast<uint32_t>(header.size()));
  else
    out += le<uint16_t>(static_cast<uint16_t>(header.size()));
  return out + header + data;
}

template <typename T> std::string raw(const std::vector<T> &v) {
  std::string s;
  for (T x : v)
    s += le(x);
  return s;
}

TEST(NpySource, SlicesAlongAxisZeroAcrossFiles) {
  TempDir dir;
  std::vector<float> a = {0, 1, 2, 3, 4, 5}; // (2, 3)
  std::vector<float> b = {6, 7, 8};          // (1, 3)
  dir.write("feat_0.npy",
            npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                raw(a)));
  dir.write("feat_1.npy",
            npy("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": "
                "(1, 3)}",
                raw(b), /*v2=*/true));
  auto src = make(
      "npy", params({{"files", str("feat_*.npy")}, {"field", str("features")}}),
      dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "features: f32[3]");
  EXPECT_EQ(src->numShards(), 2u);
  ASSERT_TRUE(src->sizeHint());
  EXPECT_EQ(*src->sizeHint(), 3);
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 3u);
  for (size_t r = 0; r < 3; ++r)
    for (size_t k = 0; k < 3; ++k)
      EXPECT_EQ(all.records[r].fields[0].data<float>()[k],
                static_cast<float>(r * 3 + k));
  EXPECT_EQ(all.records[2].index, 0u); // first record of the second file
}

struct DtypeCase {
  const char *descr;
  const char *type;
  std::string data; // two scalars
  double first, second;
};

class NpyDtypeTest : public ::testing::TestWithParam<DtypeCase> {};

double valueAt(const Tensor &t) {
  switch (t.elem()) {
  case ElemType::U8:
  case ElemType::Bool:
    return *t.data<uint8_t>();
  case ElemType::I8:
    return *t.data<int8_t>();
  case ElemType::U16:
    return *t.data<uint16_t>();
  case ElemType::I16:
    return *t.data<int16_t>();
  case ElemType::I32:
    return *t.data<int32_t>();
  case ElemType::I64:
    return static_cast<double>(*t.data<int64_t>());
  case ElemType::F32:
    return *t.data<float>();
  case ElemType::F64:
    return *t.data<double>();
  default:
    return NAN;
  }
}

TEST_P(NpyDtypeTest, ReadsScalarRecords) {
  const DtypeCase &c = GetParam();
  TempDir dir;
  dir.write("x.npy", npy(std::string("{'descr': '") + c.descr +
                             "', 'fortran_order': False, 'shape': (2,), }",
                         c.data));
  auto src = make("npy", params({{"files", str("x.npy")}}), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), std::string("data: ") + c.type);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(valueAt(all.records[0].fields[0]), c.first);
  EXPECT_EQ(valueAt(all.records[1].fields[0]), c.second);
}

std::string bigEndian(std::string s, size_t width) {
  for (size_t i = 0; i < s.size(); i += width)
    std::reverse(s.begin() + static_cast<long>(i),
                 s.begin() + static_cast<long>(i + width));
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, NpyDtypeTest,
    ::testing::Values(
        DtypeCase{"|u1", "u8", "\x07\xff", 7, 255},
        DtypeCase{"|i1", "i8", "\x07\xff", 7, -1},
        DtypeCase{"|b1", "bool", std::string("\x01\x00", 2), 1, 0},
        DtypeCase{"<i2", "i16", raw<int16_t>({-300, 300}), -300, 300},
        DtypeCase{"<u2", "u16", raw<uint16_t>({65535, 1}), 65535, 1},
        DtypeCase{"<i4", "i32", raw<int32_t>({-5, 1 << 30}), -5, 1 << 30},
        DtypeCase{"<i8", "i64", raw<int64_t>({-(1LL << 40), 3}),
                  -static_cast<double>(1LL << 40), 3},
        DtypeCase{"<f8", "f64", raw<double>({0.1, -2.5}), 0.1, -2.5},
        DtypeCase{">f4", "f32", bigEndian(raw<float>({1.5f, -8.0f}), 4), 1.5,
                  -8.0},
        DtypeCase{">i8", "i64", bigEndian(raw<int64_t>({-2, 9}), 8), -2, 9}),
    [](const auto &info) {
      std::string d = info.param.descr;
      std::string order = d[0] == '>' ? "be_" : d[0] == '<' ? "le_" : "";
      return order + d.substr(1);
    });

TEST(NpySource, CreateErrors) {
  TempDir dir;
  dir.write("fortran.npy",
            npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                std::string(16, '\0')));
  dir.write("u4.npy",
            npy("{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }",
                std::string(4, '\0')));
  dir.write("scalar.npy",
            npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                std::string(4, '\0')));
  dir.write("short.npy",
            npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
                std::string(8, '\0')));
  dir.write("a.npy",
            npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }",
                std::string(8, '\0')));
  dir.write("b.npy",
            npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }",
                std::string(12, '\0')));
  dir.write("text.npy", "just text");
  auto err = [&](const std::string &files) {
    return createError("npy", params({{"files", str(files)}}), dir.path());
  };
  EXPECT_NE(err("fortran.npy").find("fortran_order"), std::string::npos);
  EXPECT_NE(err("u4.npy").find("unsupported dtype '<u4'"), std::string::npos);
  EXPECT_NE(err("scalar.npy").find("0-d array"), std::string::npos);
  EXPECT_NE(err("short.npy").find("truncated"), std::string::npos);
  std::string msg = err("[ab].npy");
  EXPECT_NE(msg.find("f32[3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[2]"), std::string::npos) << msg;
  EXPECT_NE(err("text.npy").find("not a .npy file"), std::string::npos);
}

TEST(NpySource, FilesWrittenByNumpy) {
  // An independent writer: NumPy itself, when it is installed.
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with numpy is not available";
  TempDir dir;
  std::string script =
      "import numpy as np\n"
      "a = np.arange(24, dtype=np.int16).reshape(4, 3, 2) * -3\n"
      "np.save('" +
      (dir / "n.npy") +
      "', a)\n"
      "np.save('" +
      (dir / "m.npy") + "', np.asfortranarray(np.ones(5)))\n";
  dir.write("gen.py", script);
  ASSERT_EQ(std::system(("/usr/bin/python3 " + (dir / "gen.py")).c_str()), 0);
  auto src = make("npy", params({{"files", str("n.npy")}}), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "data: i16[3,2]");
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 4u);
  for (size_t r = 0; r < 4; ++r)
    for (size_t k = 0; k < 6; ++k)
      EXPECT_EQ(all.records[r].fields[0].data<int16_t>()[k],
                static_cast<int16_t>(-3 * static_cast<int>(r * 6 + k)));
  // 1-D Fortran-order arrays are the same bytes as C order.
  auto one = make("npy", params({{"files", str("m.npy")}}), dir.path());
  ASSERT_TRUE(one);
  EXPECT_EQ(readAll(*one).records.size(), 5u);
}

} // namespace
