//===- sources_webdataset_test.cpp - webdataset tar shards
//-----------------===//
//
// The shards are written by Debian's GNU tar in its ustar, pax and gnu
// formats (an independent writer), then damaged by hand for error cases.
//
//===----------------------------------------------------------------------===//

#include "sources_test_util.h"

#include <fstream>
#include <sstream>

using namespace sluice;
using namespace sluice::testing;

namespace {

bool haveTar() { return std::system("tar --version >/dev/null 2>&1") == 0; }

/// Creates `tarName` in dir from the members, in order, with GNU tar.
void makeTar(const TempDir &dir, const std::string &format,
             const std::string &tarName,
             const std::vector<std::pair<std::string, std::string>> &members) {
  std::string list;
  for (const auto &[name, data] : members) {
    if (!name.empty() && name.back() == '/')
      std::filesystem::create_directories(dir / ("root/" + name));
    else
      dir.write("root/" + name, data);
    list += " '" + name + "'";
  }
  std::string cmd = "tar --format=" + format + " --no-recursion -cf '" +
                    (dir / tarName) + "' -C '" + (dir / "root") + "'" + list;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Value field(const std::string &ext, const std::string &name,
            const std::string &type = "") {
  Value f = params({{"ext", str(ext)}, {"name", str(name)}});
  if (!type.empty())
    f.set("type", str(type));
  return f;
}

Value wdsParams(const std::string &shards, std::vector<Value> fields) {
  return params({{"shards", str(shards)}, {"fields", list(std::move(fields))}});
}

// Longer than the 100-byte name field: ustar splits it into prefix + name,
// gnu writes an 'L' long-name member, pax an extended header.
const std::string kLongDir = "long/" + std::string(120, 'd') + "/";

std::vector<std::pair<std::string, std::string>> sampleMembers() {
  return {
      {"s/", ""},
      {"s/README", "not part of any sample"},
      {"s/0001.jpg", "JPEG-1"},
      {"s/0001.cls", "3\n"},
      {"s/0001.json", "{\"ignored\": true}"},
      {"s/0002.cls", "7"}, // order inside a sample does not matter
      {"s/0002.jpg", std::string(1500, 'x')},
      {"s/0003.jpg", "lonely"}, // no .cls
      {"s/0004.seg.png", "mask"},
      {"s/0004.jpg", "JPEG-4"},
      {"s/0004.cls", " -2 "},
      {kLongDir + "0005.jpg", "JPEG-5"},
      {kLongDir + "0005.cls", "5"},
  };
}

class WebDatasetFormatTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WebDatasetFormatTest, GroupsMembersIntoSamples) {
  if (!haveTar())
    GTEST_SKIP() << "tar is not installed";
  const std::string &format = GetParam();
  TempDir dir;
  makeTar(dir, format, "train-000.tar", sampleMembers());
  auto src = make("webdataset",
                  wdsParams("train-*.tar", {field("jpg", "image"),
                                            field("cls", "label", "i64")}),
                  dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "key: string, image: bytes, label: i64");
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "rrerr");
  ASSERT_EQ(all.records.size(), 4u);
  std::vector<std::string> keys = {"s/0001", "s/0002", "s/0004",
                                   kLongDir + "0005"};
  std::vector<std::string> images = {"JPEG-1", std::string(1500, 'x'), "JPEG-4",
                                     "JPEG-5"};
  std::vector<int64_t> labels = {3, 7, -2, 5};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(strOf(*src, all.records[i], "key"), keys[i]);
    EXPECT_EQ(strOf(*src, all.records[i], "image"), images[i]);
    EXPECT_EQ(scalarOf<int64_t>(*src, all.records[i], "label"), labels[i]);
  }
  EXPECT_EQ(all.records[3].index, 4u); // the bad sample keeps its number
  ASSERT_EQ(all.errors.size(), 1u);
  const runtime::DataError &e = all.errors[0];
  EXPECT_EQ(e.reason, "webdataset: missing field");
  EXPECT_EQ(e.where.record, 2);
  EXPECT_EQ(e.where.field, "label");
  EXPECT_TRUE(e.recoverable);
  EXPECT_NE(e.detail.find("sample 's/0003' has no member with extension "
                          "'cls'"),
            std::string::npos)
      << e.detail;
  // The offset is the header of the sample's first member (with pax: of
  // the extended header in front of it, if tar wrote one).
  std::string tar = slurp(dir / "train-000.tar");
  size_t member = 0;
  for (size_t at = 0; at + 512 <= tar.size(); at += 512)
    if (tar.compare(at, 11, std::string("s/0003.jpg\0", 11)) == 0)
      member = at;
  ASSERT_GT(member, 0u);
  int64_t off = e.where.offset;
  ASSERT_GE(off, 0);
  EXPECT_EQ(off % 512, 0);
  if (off != static_cast<int64_t>(member)) {
    EXPECT_EQ(format, "pax");
    EXPECT_LT(off, static_cast<int64_t>(member));
    EXPECT_EQ(tar[static_cast<size_t>(off) + 156], 'x');
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, WebDatasetFormatTest,
                         ::testing::Values("ustar", "gnu", "pax"),
                         [](const auto &info) { return info.param; });

TEST(WebDatasetSource, UstarMultiDotExtensionsAndAlternatives) {
  if (!haveTar())
    GTEST_SKIP() << "tar is not installed";
  TempDir dir;
  makeTar(dir, "ustar", "a.tar",
          {{"x/1.seg.png", "S1"},
           {"x/1.png", "P1"},
           {"x/1.txt", "first"},
           {"x/2.jpeg", "J2"},
           {"x/2.seg.png", "S2"},
           {"x/2.txt", "second"},
           {"x/.hidden.txt", "skipped"}});
  auto src = make(
      "webdataset",
      wdsParams("a.tar", {field("png;jpeg", "image"), field("seg.png", "mask"),
                          field("txt", "caption", "string")}),
      dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.events, "rr") << all.errors[0].message();
  EXPECT_EQ(strOf(*src, all.records[0], "image"), "P1");
  EXPECT_EQ(strOf(*src, all.records[0], "mask"), "S1");
  EXPECT_EQ(strOf(*src, all.records[1], "image"), "J2");
  EXPECT_EQ(strOf(*src, all.records[1], "caption"), "second");
}

TEST(WebDatasetSource, BadLabelTextAndDuplicateMembers) {
  if (!haveTar())
    GTEST_SKIP() << "tar is not installed";
  TempDir dir;
  makeTar(dir, "gnu", "b.tar",
          {{"1.jpg", "a"}, {"1.cls", "three"}, {"2.jpg", "b"}, {"2.cls", "2"}});
  auto src = make(
      "webdataset",
      wdsParams("b.tar", {field("jpg", "image"), field("cls", "label", "i64")}),
      dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "er");
  EXPECT_EQ(all.errors[0].reason, "webdataset: bad number");
  EXPECT_NE(all.errors[0].detail.find("'three' is not a valid i64"),
            std::string::npos);

  // Naming a file twice in one run makes tar store a hard link; appending
  // it in separate runs stores two regular members with the same name.
  std::string base = "tar --format=gnu -C '" + (dir / "root") + "' ";
  std::string tarPath = "'" + (dir / "c.tar") + "' ";
  ASSERT_EQ(std::system((base + "-cf " + tarPath + "1.jpg").c_str()), 0);
  ASSERT_EQ(std::system((base + "-rf " + tarPath + "1.jpg").c_str()), 0);
  ASSERT_EQ(std::system((base + "-rf " + tarPath + "2.jpg").c_str()), 0);
  auto dup = make("webdataset", wdsParams("c.tar", {field("jpg", "image")}),
                  dir.path());
  ASSERT_TRUE(dup);
  all = readAll(*dup);
  EXPECT_EQ(all.events, "er");
  EXPECT_EQ(all.errors[0].reason, "webdataset: duplicate member");
}

TEST(WebDatasetSource, CorruptHeaderAndTruncationEndTheShard) {
  if (!haveTar())
    GTEST_SKIP() << "tar is not installed";
  TempDir dir;
  makeTar(dir, "ustar", "good.tar",
          {{"1.jpg", std::string(700, 'a')}, {"2.jpg", "b"}, {"3.jpg", "c"}});
  std::string tar = slurp(dir / "good.tar");
  size_t second = tar.find("2.jpg");
  ASSERT_EQ(second % 512, 0u);

  std::string corrupt = tar;
  corrupt[second + 1] = 'X'; // rename without fixing the checksum
  dir.write("corrupt.tar", corrupt);
  auto src = make("webdataset", wdsParams("corrupt.tar", {field("jpg", "i")}),
                  dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "re");
  EXPECT_EQ(all.errors[0].reason, "webdataset: bad tar header checksum");
  EXPECT_EQ(all.errors[0].where.offset, static_cast<int64_t>(second));
  EXPECT_FALSE(all.errors[0].recoverable);

  dir.write("cut.tar", tar.substr(0, 512 + 300)); // inside 1.jpg's data
  auto cut =
      make("webdataset", wdsParams("cut.tar", {field("jpg", "i")}), dir.path());
  ASSERT_TRUE(cut);
  all = readAll(*cut);
  EXPECT_EQ(all.events, "e");
  EXPECT_EQ(all.errors[0].reason, "webdataset: truncated tar");
  EXPECT_EQ(all.errors[0].where.offset, 0);

  dir.write("notatar.tar", std::string(1024, 'z'));
  auto junk = make("webdataset", wdsParams("notatar.tar", {field("jpg", "i")}),
                   dir.path());
  ASSERT_TRUE(junk);
  all = readAll(*junk);
  EXPECT_EQ(all.events, "e");
  EXPECT_EQ(all.errors[0].reason, "webdataset: bad tar header");
}

TEST(WebDatasetSource, GzippedShardsAndCreateErrors) {
  if (!haveTar())
    GTEST_SKIP() << "tar is not installed";
  TempDir dir;
  makeTar(dir, "pax", "p.tar", {{"k.jpg", "data"}, {"k.cls", "1"}});
  dir.writeGz("p.tar.gz", slurp(dir / "p.tar"));
  auto src =
      make("webdataset", wdsParams("p.tar.gz", {field("cls", "label", "i64")}),
           dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.events, "r");
  EXPECT_EQ(scalarOf<int64_t>(*src, all.records[0], "label"), 1);

  std::string msg = createError(
      "webdataset", wdsParams("p.tar", {field("jpg", "key")}), dir.path());
  EXPECT_NE(msg.find("'key' is used twice"), std::string::npos) << msg;
  msg = createError("webdataset",
                    wdsParams("p.tar", {field("jpg", "a"), field("jpg", "b")}),
                    dir.path());
  EXPECT_NE(msg.find("read by two fields"), std::string::npos) << msg;
  // Default names follow the registry: the extension with '.' -> '_'.
  auto named =
      make("webdataset",
           wdsParams("p.tar", {params({{"ext", str("seg.png")}})}), dir.path());
  ASSERT_TRUE(named);
  EXPECT_EQ(named->recordType().str(), "key: string, seg_png: bytes");
}

} // namespace
