//===- sources_files_test.cpp - image_folder, files and text_lines --------===//

#include "sources_test_util.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

/// A small ImageNet-like tree. Returns nothing; the test knows the layout.
void makeTree(const TempDir &dir) {
  std::filesystem::create_directories(dir / "train/ant"); // an empty class
  dir.write("train/bird/b1.JPG", "bird-1");
  dir.write("train/bird/sub/b2.png", "bird-2");
  dir.write("train/cat/c1.jpeg", "cat-1");
  dir.write("train/cat/c2.gif", "cat-gif");
  dir.write("train/cat/._c3.jpg", "macOS resource fork");
  dir.write("train/dog/d1.jpg", std::string("\xff\xd8\xff\0dog", 7));
  dir.write("train/readme.jpg", "files directly under root are ignored");
  dir.write("train/.cache/x.jpg", "hidden directories are not classes");
}

TEST(ImageFolderSource, ClassesFilesAndLabels) {
  TempDir dir;
  makeTree(dir);
  auto src = make("image_folder", params({{"root", str("train")}}), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "path: string, data: bytes, label: i64");
  ASSERT_EQ(src->numShards(), 4u);
  ASSERT_TRUE(src->sizeHint());
  EXPECT_EQ(*src->sizeHint(), 4);
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 4u);
  std::vector<std::string> paths = {"train/bird/b1.JPG",
                                    "train/bird/sub/b2.png",
                                    "train/cat/c1.jpeg", "train/dog/d1.jpg"};
  std::vector<std::string> data = {"bird-1", "bird-2", "cat-1",
                                   std::string("\xff\xd8\xff\0dog", 7)};
  // Sorted classes: ant (empty) = 0, bird = 1, cat = 2, dog = 3.
  std::vector<int64_t> labels = {1, 1, 2, 3};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(src->shardName(i), dir / paths[i]);
    EXPECT_EQ(strOf(*src, all.records[i], "path"), dir / paths[i]);
    EXPECT_EQ(strOf(*src, all.records[i], "data"), data[i]);
    EXPECT_EQ(scalarOf<int64_t>(*src, all.records[i], "label"), labels[i]);
  }
}

TEST(ImageFolderSource, ExtensionsAndTheRegistryFieldOrder) {
  TempDir dir;
  makeTree(dir);
  RecordType type({{"label", FieldType(ElemType::I64)},
                   {"path", FieldType(ElemType::String)},
                   {"data", FieldType(ElemType::Bytes)}});
  auto src = make("image_folder",
                  params({{"root", str(dir / "train")},
                          {"extensions", list({str("GIF"), str(".png")})}}),
                  "/elsewhere", type);
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.records[0].fields[2].str(), "bird-2");
  EXPECT_EQ(*all.records[1].fields[0].data<int64_t>(), 2);
  EXPECT_EQ(all.records[1].fields[1].str(), dir / "train/cat/c2.gif");
}

TEST(ImageFolderSource, AFileThatDisappearsIsARecoverableError) {
  TempDir dir;
  makeTree(dir);
  auto src = make("image_folder", params({{"root", str("train")}}), dir.path());
  ASSERT_TRUE(src);
  std::filesystem::remove(dir / "train/cat/c1.jpeg");
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "rrer");
  EXPECT_EQ(all.errors[0].reason, "image_folder: cannot read file");
  EXPECT_EQ(all.errors[0].where.file, dir / "train/cat/c1.jpeg");
  EXPECT_TRUE(all.errors[0].recoverable);
}

TEST(ImageFolderSource, CreateErrors) {
  TempDir dir;
  dir.write("flat/a.jpg", "x");
  dir.write("nomatch/cls/a.bmp", "x");
  std::string msg = createError("image_folder",
                                params({{"root", str("missing")}}), dir.path());
  EXPECT_NE(msg.find("is not a directory"), std::string::npos) << msg;
  msg =
      createError("image_folder", params({{"root", str("flat")}}), dir.path());
  EXPECT_NE(msg.find("no class directories"), std::string::npos) << msg;
  msg = createError("image_folder", params({{"root", str("nomatch")}}),
                    dir.path());
  EXPECT_NE(msg.find("no files with extension jpg, jpeg, png"),
            std::string::npos)
      << msg;
}

TEST(FilesSource, GlobOfRawFiles) {
  TempDir dir;
  dir.write("blobs/b.bin", std::string("\0\1\2", 3));
  dir.write("blobs/a.bin", "");
  dir.write("blobs/c.txt", "not matched");
  std::filesystem::create_directories(dir / "blobs/d.bin"); // a directory
  auto src = make("files", params({{"glob", str("blobs/*.bin")}}), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "path: string, data: bytes");
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(strOf(*src, all.records[0], "path"), dir / "blobs/a.bin");
  EXPECT_EQ(strOf(*src, all.records[0], "data"), "");
  EXPECT_EQ(strOf(*src, all.records[1], "data"), std::string("\0\1\2", 3));

  std::string msg =
      createError("files", params({{"glob", str("blobs/*.png")}}), dir.path());
  EXPECT_NE(msg.find("pattern 'blobs/*.png' matched no files"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(dir.path()), std::string::npos) << msg;
  msg = createError("files", params({{"glob", str("blob?/d.*")}}), dir.path());
  EXPECT_NE(msg.find("matched only directories"), std::string::npos) << msg;
}

TEST(FilesSource, BaseDirWithGlobCharactersIsLiteral) {
  TempDir dir;
  dir.write("odd[1]/x.bin", "x");
  auto src = make("files", params({{"glob", str("*.bin")}}), dir / "odd[1]");
  ASSERT_TRUE(src);
  EXPECT_EQ(src->numShards(), 1u);
}

struct LinesCase {
  const char *name;
  std::string text;
  std::vector<std::string> lines;
};

class TextLinesTest : public ::testing::TestWithParam<LinesCase> {};

TEST_P(TextLinesTest, SplitsLines) {
  const LinesCase &c = GetParam();
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz);
    TempDir dir;
    if (gz)
      dir.writeGz("t.txt.gz", c.text);
    else
      dir.write("t.txt", c.text);
    auto src =
        make("text_lines", params({{"files", str("t.txt*")}}), dir.path());
    ASSERT_TRUE(src);
    EXPECT_EQ(src->recordType().str(), "line: string");
    ReadAll all = readAll(*src);
    ASSERT_TRUE(all.errors.empty());
    std::vector<std::string> got;
    for (const Record &r : all.records)
      got.push_back(r.fields[0].str());
    EXPECT_EQ(got, c.lines);
    for (size_t i = 0; i < all.records.size(); ++i)
      EXPECT_EQ(all.records[i].index, i);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Texts, TextLinesTest,
    ::testing::Values(LinesCase{"lf", "a\nbb\n\nccc\n", {"a", "bb", "", "ccc"}},
                      LinesCase{"crlf", "a\r\nbb\r\n\r\n", {"a", "bb", ""}},
                      LinesCase{"no_final_newline", "x\ny", {"x", "y"}},
                      LinesCase{"lone_cr_kept", "a\rb\n", {"a\rb"}},
                      LinesCase{"empty", "", {}},
                      LinesCase{"utf8_bom",
                                "\xEF\xBB\xBF"
                                "first\nsecond",
                                {"first", "second"}},
                      LinesCase{"long_line",
                                std::string(3 << 20, 'q') + "\nend",
                                {std::string(3 << 20, 'q'), "end"}}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(Source, KindsAndOnError) {
  const std::vector<std::string> &kinds = runtime::Source::kinds();
  for (const char *k : {"csv", "files", "idx", "image_folder", "npy",
                        "text_lines", "tfrecord", "tsv", "webdataset"})
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), k), kinds.end()) << k;
  TempDir dir;
  dir.write("t.txt", "x\n");
  auto fail = make("text_lines", params({{"files", str("t.txt")}}), dir.path());
  ASSERT_TRUE(fail);
  EXPECT_EQ(fail->onError(), runtime::OnError::Fail);
  auto skip = make("text_lines",
                   params({{"files", str("t.txt")}, {"on_error", str("skip")}}),
                   dir.path());
  ASSERT_TRUE(skip);
  EXPECT_EQ(skip->onError(), runtime::OnError::Skip);
  std::string msg = createError(
      "text_lines",
      params({{"files", str("t.txt")}, {"on_error", str("ignore")}}),
      dir.path());
  EXPECT_NE(msg.find("on_error must be 'fail' or 'skip'"), std::string::npos);
}

TEST(Source, DataLocationText) {
  runtime::DataLocation loc;
  loc.file = "d/x.csv";
  loc.line = 17;
  loc.record = 15;
  loc.offset = 1234;
  loc.field = "label";
  EXPECT_EQ(loc.str(), "d/x.csv:17: record 15, byte 1234, 'label'");
  runtime::DataError e;
  e.where = loc;
  e.reason = "csv: too few columns";
  e.detail = "expected 40 columns, found 39";
  EXPECT_EQ(e.message(), "d/x.csv:17: record 15, byte 1234, 'label': csv: too "
                         "few columns: expected 40 columns, found 39");
  e.recoverable = false;
  EXPECT_NE(e.message().find("(the rest of this file cannot be read)"),
            std::string::npos);
}

} // namespace
