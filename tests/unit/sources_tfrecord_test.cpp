//===- sources_tfrecord_test.cpp - TFRecord framing, CRC-32C, Example -----===//
//
// The files are written here with an independent, bit-at-a-time CRC-32C and
// a hand-written protobuf encoder, so the reader is checked against the
// format, not against itself.
//
//===----------------------------------------------------------------------===//

#include "sources_test_util.h"

#include <algorithm>
#include <random>

using namespace sluice;
using namespace sluice::testing;

namespace sluice::runtime::detail {
uint32_t crc32cSoftware(const void *data, size_t size, uint32_t crc);
} // namespace sluice::runtime::detail

namespace {

/// CRC-32C one bit at a time: slow and obviously right.
uint32_t crcBitwise(const std::string &s) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  return ~crc;
}
uint32_t masked(const std::string &s) {
  uint32_t c = crcBitwise(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TEST(Crc32c, KnownVectorsAndAllPaths) {
  EXPECT_EQ(crcBitwise("123456789"), 0xE3069283u); // the standard check value
  EXPECT_EQ(runtime::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(runtime::crc32c("", 0), 0u);
  std::mt19937 rng(7);
  for (size_t len : {1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4099u}) {
    std::string s(len + 3, '\0');
    for (char &c : s)
      c = static_cast<char>(rng());
    for (size_t misalign = 0; misalign < 3; ++misalign) {
      std::string part = s.substr(misalign, len);
      uint32_t want = crcBitwise(part);
      EXPECT_EQ(runtime::crc32c(s.data() + misalign, len), want) << len;
      EXPECT_EQ(runtime::detail::crc32cSoftware(s.data() + misalign, len, 0),
                want)
          << len;
    }
    // Continuing a CRC over two pieces equals one pass.
    uint32_t first = runtime::crc32c(s.data(), len / 2);
    EXPECT_EQ(runtime::crc32c(s.data() + len / 2, len - len / 2, first),
              crcBitwise(s.substr(0, len)));
  }
  EXPECT_EQ(runtime::maskedCrc32c("abc", 3), masked("abc"));
}

//===----------------------------------------------------------------------===//
// A minimal protobuf encoder for tf.train.Example
//===----------------------------------------------------------------------===//

std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
  return s;
}
std::string tag(int field, int wireType) {
  return varint(static_cast<uint64_t>(field) << 3 | wireType);
}
std::string lengthDelimited(int field, const std::string &payload) {
  return tag(field, 2) + varint(payload.size()) + payload;
}

std::string bytesFeature(const std::vector<std::string> &values) {
  std::string list;
  for (const std::string &v : values)
    list += lengthDelimited(1, v);
  return lengthDelimited(1, list);
}
std::string floatFeature(const std::vector<float> &values, bool packed) {
  std::string list;
  if (packed) {
    std::string raw;
    for (float f : values)
      raw += le(f);
    list = lengthDelimited(1, raw);
  } else {
    for (float f : values)
      list += tag(1, 5) + le(f);
  }
  return lengthDelimited(2, list);
}
std::string int64Feature(const std::vector<int64_t> &values, bool packed) {
  std::string list;
  if (packed) {
    std::string raw;
    for (int64_t v : values)
      raw += varint(static_cast<uint64_t>(v));
    list = lengthDelimited(1, raw);
  } else {
    for (int64_t v : values)
      list += tag(1, 0) + varint(static_cast<uint64_t>(v));
  }
  return lengthDelimited(3, list);
}

/// An Example from (key, encoded Feature) pairs, in the given order.
std::string
example(const std::vector<std::pair<std::string, std::string>> &features) {
  std::string map;
  for (const auto &[key, feature] : features)
    map += lengthDelimited(1, lengthDelimited(1, key) +
                                  lengthDelimited(2, feature));
  return lengthDelimited(1, map);
}

/// TFRecord framing.
std::string frame(const std::string &data) {
  std::string len = le<uint64_t>(data.size());
  return len + le(masked(len)) + data + le(masked(data));
}

Value feature(const std::string &name, const std::string &type,
              std::vector<int64_t> shape = {}, const std::string &as = "") {
  Value f = params({{"name", str(name)}, {"type", str(type)}});
  std::vector<Value> dims;
  for (int64_t d : shape)
    dims.push_back(integer(d));
  f.set("shape", list(dims));
  if (!as.empty())
    f.set("as", str(as));
  return f;
}

Value tfParams(const std::string &files, std::vector<Value> features) {
  return params(
      {{"files", str(files)}, {"features", list(std::move(features))}});
}

std::vector<Value> standardFeatures() {
  return {feature("image/encoded", "bytes", {}, "data"),
          feature("label", "i64"), feature("bbox", "f32", {2, 2}),
          feature("ids", "i64", {-1}), feature("text", "string")};
}

std::string standardExample(int i, bool packed) {
  return example({
      {"unused", floatFeature({1, 2, 3}, packed)},
      {"image/encoded",
       bytesFeature({std::string("\x89PNG\0", 5) + std::to_string(i)})},
      {"label", int64Feature({i * 1000}, packed)},
      {"bbox",
       floatFeature({0.5f, -1.25f, 3e10f, static_cast<float>(i)}, packed)},
      {"ids",
       int64Feature(std::vector<int64_t>(static_cast<size_t>(i), -i), packed)},
      {"text", bytesFeature({"hello " + std::to_string(i)})},
  });
}

class TFRecordTest : public ::testing::TestWithParam<bool> {};

TEST_P(TFRecordTest, ReadsExampleFeatures) {
  bool packed = GetParam();
  TempDir dir;
  std::string file;
  for (int i = 0; i < 4; ++i)
    file += frame(standardExample(i, packed));
  dir.write("train-0.tfrecord", file);
  auto src =
      make("tfrecord", tfParams("*.tfrecord", standardFeatures()), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(),
            "data: bytes, label: i64, bbox: f32[2,2], ids: i64[?], "
            "text: string");
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const Record &r = all.records[static_cast<size_t>(i)];
    EXPECT_EQ(strOf(*src, r, "data"),
              std::string("\x89PNG\0", 5) + std::to_string(i));
    EXPECT_EQ(scalarOf<int64_t>(*src, r, "label"), i * 1000);
    const Tensor &bbox = field(*src, r, "bbox");
    ASSERT_EQ(bbox.shape(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(bbox.data<float>()[1], -1.25f);
    EXPECT_EQ(bbox.data<float>()[2], 3e10f);
    EXPECT_EQ(bbox.data<float>()[3], static_cast<float>(i));
    const Tensor &ids = field(*src, r, "ids");
    ASSERT_EQ(ids.shape(), (std::vector<int64_t>{i}));
    for (int k = 0; k < i; ++k)
      EXPECT_EQ(ids.data<int64_t>()[k], -i);
    EXPECT_EQ(strOf(*src, r, "text"), "hello " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Packing, TFRecordTest, ::testing::Bool(),
                         [](const auto &info) {
                           return info.param ? "packed" : "unpacked";
                         });

TEST(TFRecordSource, GzipCompressedFile) {
  TempDir dir;
  dir.writeGz("a.tfrecord.gz", frame(standardExample(3, true)) +
                                   frame(standardExample(2, false)));
  auto src = make("tfrecord", tfParams("a.tfrecord.gz", standardFeatures()),
                  dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(scalarOf<int64_t>(*src, all.records[1], "label"), 2000);
}

/// Three records; returns the file and the offsets where each starts.
std::string threeRecords(std::vector<size_t> &starts) {
  std::string file;
  for (int i = 1; i <= 3; ++i) {
    starts.push_back(file.size());
    file += frame(standardExample(i, true));
  }
  return file;
}

TEST(TFRecordSource, TruncatedFileWithBadCrcReportsOffsets) {
  // Record 1's length CRC is damaged and the file is cut short in record 2:
  // the first problem ends the file, with its exact offset.
  std::vector<size_t> starts;
  std::string file = threeRecords(starts);
  file[starts[1] + 9] ^= 0x40; // inside record 1's length CRC
  file.resize(starts[2] + 20); // cut inside record 2
  TempDir dir;
  dir.write("bad.tfrecord", file);
  auto src = make("tfrecord", tfParams("bad.tfrecord", standardFeatures()),
                  dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "re");
  ASSERT_EQ(all.errors.size(), 1u);
  const runtime::DataError &e = all.errors[0];
  EXPECT_EQ(e.reason, "tfrecord: length CRC mismatch");
  EXPECT_EQ(e.where.file, dir / "bad.tfrecord");
  EXPECT_EQ(e.where.record, 1);
  EXPECT_EQ(e.where.offset, static_cast<int64_t>(starts[1]));
  EXPECT_FALSE(e.recoverable);
  EXPECT_NE(e.message().find("bad.tfrecord: record 1, byte " +
                             std::to_string(starts[1])),
            std::string::npos)
      << e.message();
  EXPECT_NE(e.message().find("rest of this file cannot be read"),
            std::string::npos);
}

struct Damage {
  const char *name;
  int record; // which record is damaged
  int at;     // byte within that record; negative: cut the file there
  const char *events;
  const char *reason;
  bool recoverable;
};

class TFRecordDamageTest : public ::testing::TestWithParam<Damage> {};

TEST_P(TFRecordDamageTest, ReportsWhereAndWhetherToGoOn) {
  const Damage &d = GetParam();
  std::vector<size_t> starts;
  std::string file = threeRecords(starts);
  size_t pos = starts[static_cast<size_t>(d.record)] +
               static_cast<size_t>(d.at < 0 ? -d.at : d.at);
  if (d.at < 0)
    file.resize(pos);
  else
    file[pos] ^= 0x01;
  TempDir dir;
  dir.write("d.tfrecord", file);
  auto src =
      make("tfrecord", tfParams("d.tfrecord", standardFeatures()), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, d.events);
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_EQ(all.errors[0].reason, d.reason);
  EXPECT_EQ(all.errors[0].recoverable, d.recoverable);
  EXPECT_EQ(all.errors[0].where.record, d.record);
  EXPECT_EQ(all.errors[0].where.offset,
            static_cast<int64_t>(starts[static_cast<size_t>(d.record)]));
  // Records after a recoverable error keep their positions.
  if (d.recoverable)
    EXPECT_EQ(all.records.back().index, 2u);
}

INSTANTIATE_TEST_SUITE_P(
    Damages, TFRecordDamageTest,
    ::testing::Values(Damage{"length_bit", 1, 2, "re",
                             "tfrecord: length CRC mismatch", false},
                      Damage{"data_bit", 1, 40, "rer",
                             "tfrecord: data CRC mismatch", true},
                      Damage{"cut_in_header", 2, -5, "rre",
                             "tfrecord: truncated record", false},
                      Damage{"cut_in_data", 2, -30, "rre",
                             "tfrecord: truncated record", false}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(TFRecordSource, DamagedDataCrcFieldCostsOneRecord) {
  std::vector<size_t> starts;
  std::string file = threeRecords(starts);
  file[starts[1] - 2] ^= 0x10; // record 0's data CRC
  TempDir dir;
  dir.write("c.tfrecord", file);
  auto src =
      make("tfrecord", tfParams("c.tfrecord", standardFeatures()), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "err");
  EXPECT_EQ(all.errors[0].reason, "tfrecord: data CRC mismatch");
  EXPECT_EQ(all.errors[0].where.offset, 0);
}

struct ExampleCase {
  const char *name;
  std::string payload;
  const char *reason;
  const char *field;
};

class TFRecordExampleErrorTest : public ::testing::TestWithParam<ExampleCase> {
};

TEST_P(TFRecordExampleErrorTest, BadExamplesAreRecoverable) {
  const ExampleCase &c = GetParam();
  std::string file = frame(c.payload) + frame(standardExample(1, true));
  TempDir dir;
  dir.write("e.tfrecord", file);
  auto src =
      make("tfrecord", tfParams("e.tfrecord", standardFeatures()), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "er");
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_EQ(all.errors[0].reason, c.reason) << all.errors[0].message();
  EXPECT_EQ(all.errors[0].where.field, c.field);
  EXPECT_EQ(all.errors[0].where.offset, 0);
  EXPECT_TRUE(all.errors[0].recoverable);
}

std::vector<std::pair<std::string, std::string>> goodFeatures() {
  return {{"image/encoded", bytesFeature({"x"})},
          {"label", int64Feature({1}, true)},
          {"bbox", floatFeature({1, 2, 3, 4}, true)},
          {"ids", int64Feature({}, true)},
          {"text", bytesFeature({"t"})}};
}
std::string withFeature(const std::string &key, const std::string &value) {
  auto f = goodFeatures();
  for (auto &kv : f)
    if (kv.first == key)
      kv.second = value;
  return example(f);
}
std::string withoutFeature(const std::string &key) {
  auto f = goodFeatures();
  f.erase(std::remove_if(f.begin(), f.end(),
                         [&](const auto &kv) { return kv.first == key; }),
          f.end());
  return example(f);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, TFRecordExampleErrorTest,
    ::testing::Values(
        ExampleCase{"missing", withoutFeature("label"),
                    "tfrecord: missing feature", "label"},
        ExampleCase{"wrong_type", withFeature("label", floatFeature({1}, true)),
                    "tfrecord: wrong feature type", "label"},
        ExampleCase{"scalar_with_two",
                    withFeature("label", int64Feature({1, 2}, false)),
                    "tfrecord: wrong value count", "label"},
        ExampleCase{"static_shape_short",
                    withFeature("bbox", floatFeature({1, 2, 3}, false)),
                    "tfrecord: wrong value count", "bbox"},
        ExampleCase{"not_protobuf", "\xff\xff\xff",
                    "tfrecord: malformed Example", ""},
        ExampleCase{"overlong_length", lengthDelimited(1, "abc").substr(0, 3),
                    "tfrecord: malformed Example", ""}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(TFRecordSource, MissingFeatureListsWhatIsThere) {
  TempDir dir;
  dir.write("m.tfrecord", frame(withoutFeature("text")));
  auto src =
      make("tfrecord", tfParams("m.tfrecord", standardFeatures()), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_NE(
      all.errors[0].detail.find("it has: bbox, ids, image/encoded, label"),
      std::string::npos)
      << all.errors[0].detail;
}

TEST(TFRecordSource, LastMapEntryAndLastListWin) {
  // Protobuf merge semantics: a repeated key replaces the earlier one.
  auto f = goodFeatures();
  f.insert(f.begin(), {"label", bytesFeature({"not an int"})});
  f.push_back({"label", int64Feature({77}, true)});
  TempDir dir;
  dir.write("w.tfrecord", frame(example(f)));
  auto src =
      make("tfrecord", tfParams("w.tfrecord", standardFeatures()), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 1u) << all.errors[0].message();
  EXPECT_EQ(scalarOf<int64_t>(*src, all.records[0], "label"), 77);
  EXPECT_EQ(field(*src, all.records[0], "ids").shape(),
            std::vector<int64_t>{0});
}

TEST(TFRecordSource, CreateErrors) {
  TempDir dir;
  dir.write("a.tfrecord", "");
  std::string msg = createError(
      "tfrecord", tfParams("a.tfrecord", {feature("x", "i64", {-1, -1})}),
      dir.path());
  EXPECT_NE(msg.find("at most one dimension"), std::string::npos) << msg;
  msg = createError("tfrecord",
                    tfParams("a.tfrecord", {feature("x", "i64"),
                                            feature("y", "f32", {}, "x")}),
                    dir.path());
  EXPECT_NE(msg.find("two features are read into field 'x'"), std::string::npos)
      << msg;
  // An empty file is a valid file with no records.
  auto src = make("tfrecord", tfParams("a.tfrecord", {feature("x", "i64")}),
                  dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(readAll(*src).events, "");
}

} // namespace
