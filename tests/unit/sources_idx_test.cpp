//===- sources_idx_test.cpp - idx reader on Fashion-MNIST and made-up files
//===//

#include "sources_test_util.h"

#include <set>

using namespace sluice;
using namespace sluice::testing;

namespace {

const std::string kDir = SLUICE_FASHION_MNIST_DIR;

/// The whole decompressed file, read with zlib directly.
std::string gunzip(const std::string &path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string out;
  if (!f)
    return out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0)
    out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

uint32_t be32(const std::string &s, size_t at) {
  const auto *u = reinterpret_cast<const unsigned char *>(s.data() + at);
  return uint32_t(u[0]) << 24 | uint32_t(u[1]) << 16 | uint32_t(u[2]) << 8 |
         uint32_t(u[3]);
}
std::string be32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i)
    s[static_cast<size_t>(i)] = static_cast<char>(v >> (24 - 8 * i));
  return s;
}

TEST(IdxSource, FashionMnistTestSet) {
  std::string images = kDir + "/t10k-images-idx3-ubyte.gz";
  std::string labels = kDir + "/t10k-labels-idx1-ubyte.gz";
  auto src =
      make("idx", params({{"images", str(images)}, {"labels", str(labels)}}),
           "/nonexistent-base-ignored-for-absolute-paths");
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "image: u8[28,28], label: i64");
  EXPECT_EQ(src->numShards(), 1u);
  ASSERT_TRUE(src->sizeHint().has_value());
  EXPECT_EQ(*src->sizeHint(), 10000);

  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 10000u);

  // Independent read of the same files.
  std::string rawImages = gunzip(images), rawLabels = gunzip(labels);
  ASSERT_EQ(be32(rawImages, 0), 0x00000803u);
  ASSERT_EQ(be32(rawImages, 4), 10000u);
  ASSERT_EQ(rawLabels.size(), 8u + 10000u);
  const size_t px = 28 * 28;
  std::vector<int> perClass(10, 0);
  for (size_t i : {size_t(0), size_t(1), size_t(4567), size_t(9999)}) {
    SCOPED_TRACE(i);
    const Record &r = all.records[i];
    EXPECT_EQ(r.index, i);
    const Tensor &img = field(*src, r, "image");
    ASSERT_EQ(img.shape(), (std::vector<int64_t>{28, 28}));
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(img.raw()), px),
              rawImages.substr(16 + i * px, px));
    EXPECT_EQ(scalarOf<int64_t>(*src, r, "label"),
              static_cast<unsigned char>(rawLabels[8 + i]));
  }
  for (const Record &r : all.records) {
    int64_t label = scalarOf<int64_t>(*src, r, "label");
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
    ++perClass[static_cast<size_t>(label)];
  }
  // Every class occurs, and the counts match the labels file.
  for (int c = 0; c < 10; ++c) {
    int want = 0;
    for (size_t i = 0; i < 10000; ++i)
      want += static_cast<unsigned char>(rawLabels[8 + i]) == c;
    EXPECT_EQ(perClass[static_cast<size_t>(c)], want);
    EXPECT_GT(want, 0);
  }
}

TEST(IdxSource, ImagesOnlyAndPlainFiles) {
  TempDir dir;
  std::string img = be32(0x00000803) + be32(2) + be32(2) + be32(3);
  for (int i = 0; i < 12; ++i)
    img += static_cast<char>(i * 20);
  dir.write("imgs-idx3-ubyte", img);
  auto src =
      make("idx", params({{"images", str("imgs-idx3-ubyte")}}), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "image: u8[2,3]");
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.records[1].fields[0].raw()[5], 220);
}

TEST(IdxSource, WiderElementTypesAreByteSwapped) {
  TempDir dir;
  // 0x0C = i32, 2 dims: 2 records of [2].
  std::string img = be32(0x00000C02) + be32(2) + be32(2) + be32(1) +
                    be32(static_cast<uint32_t>(-2)) + be32(0x01020304) +
                    be32(7);
  std::string lab =
      be32(0x00000B01) + be32(2) + std::string("\x01\x00\xff\xfe", 4);
  dir.write("i", img);
  dir.write("l", lab);
  auto src = make("idx", params({{"images", str("i")}, {"labels", str("l")}}),
                  dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "image: i32[2], label: i64");
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.records[0].fields[0].data<int32_t>()[1], -2);
  EXPECT_EQ(all.records[1].fields[0].data<int32_t>()[0], 0x01020304);
  EXPECT_EQ(*all.records[0].fields[1].data<int64_t>(), 256);
  EXPECT_EQ(*all.records[1].fields[1].data<int64_t>(), -2);
}

TEST(IdxSource, HeaderProblemsAreCreateErrors) {
  TempDir dir;
  std::string img =
      be32(0x00000803) + be32(3) + be32(2) + be32(2) + std::string(12, '\x01');
  dir.write("img", img);
  dir.write("short", img.substr(0, 20));
  dir.write("lab2", be32(0x00000801) + be32(2) + "\x01\x02");
  dir.write("notidx", "hello world, not idx");
  dir.writeGz("cut.gz", img.substr(0, 22));

  std::string msg = createError(
      "idx", params({{"images", str("img")}, {"labels", str("lab2")}}),
      dir.path());
  EXPECT_NE(msg.find("holds 3 images but"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 2 labels"), std::string::npos) << msg;
  msg = createError("idx", params({{"images", str("short")}}), dir.path());
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  msg = createError("idx", params({{"images", str("notidx")}}), dir.path());
  EXPECT_NE(msg.find("not an IDX file: it starts with 68 65 6c 6c"),
            std::string::npos)
      << msg;
  msg = createError("idx", params({{"images", str("lab2")}}), dir.path());
  EXPECT_NE(msg.find("1-D idx file"), std::string::npos) << msg;
  msg = createError("idx", params({{"images", str("missing.gz")}}), dir.path());
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;

  // A gzip file's length is unknown up front: the reader reports it.
  auto src = make("idx", params({{"images", str("cut.gz")}}), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "re"); // 16-byte header + one 4-byte image + 2 bytes
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_EQ(all.errors[0].reason, "idx: truncated file");
  EXPECT_EQ(all.errors[0].where.record, 1);
  EXPECT_EQ(all.errors[0].where.offset, 20);
  EXPECT_FALSE(all.errors[0].recoverable);
}

} // namespace
