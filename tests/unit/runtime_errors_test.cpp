//===- runtime_errors_test.cpp - Bad data: on_error, locations, accounting ===//
//
// JPEGs encoded by the test (one of them corrupt) and CSV files with a bad
// row: `on_error: skip` drops and counts them by reason with a balanced
// accounting; `on_error: fail` stops with exit code 1 and names the file,
// the record and the step with its spec location.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <turbojpeg.h>

#include <sstream>

using namespace sluice;
using namespace sluice::rttest;

namespace {

/// A w x h RGB gradient as a JPEG.
std::string encodeJpeg(int w, int h, int seed) {
  return encodeRgbJpeg(w, h, [seed](int x, int y, int c) {
    return x * 7 + y * 3 + c * 50 + seed * 31;
  });
}

class ErrorsTest : public ::testing::Test {
protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i)
      dir_.write("img/cat/" + std::to_string(i) + ".jpg",
                 encodeJpeg(40 + i, 30, i));
    for (int i = 0; i < 3; ++i)
      dir_.write("img/dog/" + std::to_string(i) + ".jpg",
                 encodeJpeg(32, 36 + i, 10 + i));
    // A JPEG cut in the middle of its entropy-coded data.
    std::string bad = encodeJpeg(64, 64, 99);
    dir_.write("img/dog/1b.jpg", bad.substr(0, bad.size() / 2));
  }

  std::string imageSpec(const std::string &onError) {
    return "pipeline: images\nseed: 1\nsource:\n"
           "  image_folder: {root: img, on_error: " +
           onError +
           "}\n"
           "steps:\n"
           "  - decode_image: {field: data, as: image, channels: 3}\n"
           "  - resize: {field: image, size: [16, 16]}\n"
           "  - select: [image, label]\n"
           "  - batch: 2\n";
  }

  TempDir dir_;
};

TEST_F(ErrorsTest, SkipDropsAndCountsACorruptJpeg) {
  runtime::Plan p = planFromYaml(dir_, imageSpec("skip"));
  for (int threads : {1, 2}) {
    runtime::RunOptions o;
    o.threads = threads;
    runtime::RunStats s;
    std::vector<Output> outs = runAll(p, o, &s);
    ASSERT_EQ(outs.size(), 3u);
    EXPECT_EQ(ints(outs, 1), (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
    runtime::StageStats src = stageNamed(s, "image_folder");
    EXPECT_EQ(src.read, 7);
    EXPECT_EQ(src.emitted, 7);
    runtime::StageStats dec = stageNamed(s, "decode_image");
    EXPECT_EQ(dec.read, 7);
    EXPECT_EQ(dec.emitted, 6);
    ASSERT_EQ(dec.skipped.size(), 1u);
    EXPECT_EQ(dec.skipped[0].second, 1);
    EXPECT_EQ(dec.skipped[0].first.rfind("decode_image: ", 0), 0u)
        << dec.skipped[0].first;
    EXPECT_EQ(stageNamed(s, "resize").read, 6);
    EXPECT_EQ(stageNamed(s, "batch").emitted, 6);
    for (const auto &st : s.stages)
      EXPECT_TRUE(st.balanced()) << st.name << ": " << st.accountingLine();
    EXPECT_NE(s.accounting().find("skipped 1 (1 decode_image: "),
              std::string::npos)
        << s.accounting();
  }
}

TEST_F(ErrorsTest, FailNamesTheFileRecordAndStep) {
  runtime::Plan p = planFromYaml(dir_, imageSpec("fail"));
  for (int threads : {1, 2}) {
    runtime::RunOptions o;
    o.threads = threads;
    o.progress = runtime::RunOptions::Progress::Off;
    std::ostringstream out, err;
    EXPECT_EQ(runtime::runPipeline(p, o, out, err), 1);
    std::string e = err.str();
    // The bad file, its record number within the file, the op, and the step
    // with its position in the spec (decode_image is on line 6, column 5).
    EXPECT_NE(e.find(dir_ / "img/dog/1b.jpg" + ": record 0: decode_image: "),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("in step 'decode_image' at " + p.specFile + ":6:5"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("on_error: skip"), std::string::npos) << e;
    // The accounting is printed even when the run fails, and balances.
    EXPECT_NE(out.str().find("failed 1"), std::string::npos) << out.str();
    EXPECT_EQ(e.find("internal error"), std::string::npos) << e;
  }
}

TEST_F(ErrorsTest, SourceErrorsFollowOnError) {
  dir_.write("csv/a.csv", "1,2\n3,4\n");
  dir_.write("csv/b.csv", "5,6\n7,x\n9,10\n");
  std::string base = "pipeline: rows\nsource:\n  csv:\n    files: csv/*.csv\n"
                     "    columns:\n      - {name: a, type: i64}\n"
                     "      - {name: b, type: i64}\n";
  runtime::Plan skip = planFromYaml(
      dir_, base + "    on_error: skip\nsteps:\n  - filter: \"a > 1\"\n",
      "skip.yaml");
  runtime::RunStats s;
  std::vector<Output> outs = runAll(skip, {}, &s);
  EXPECT_EQ(ints(outs, 0), (std::vector<int64_t>{3, 5, 9}));
  runtime::StageStats src = stageNamed(s, "csv");
  EXPECT_EQ(src.read, 5);
  EXPECT_EQ(src.emitted, 4);
  EXPECT_EQ(src.skippedTotal(), 1);
  runtime::StageStats f = stageNamed(s, "filter");
  EXPECT_EQ(f.read, 4);
  EXPECT_EQ(f.filtered, 1);
  EXPECT_EQ(f.filterReason, "where is false");
  EXPECT_TRUE(s.checkBalanced().isOk());

  runtime::Plan fail =
      planFromYaml(dir_, base + "steps:\n  - take: 10\n", "fail.yaml");
  auto pipe = runtime::Pipeline::create(fail);
  ASSERT_TRUE(bool(pipe)) << pipe.status().message();
  runtime::Batch b;
  int good = 0;
  Expected<bool> more = true;
  while ((more = (*pipe)->next(b)) && *more)
    ++good;
  EXPECT_EQ(good, 3);
  ASSERT_FALSE(bool(more));
  const std::string &m = more.status().message();
  // Line 2 of b.csv is record 1 of that file.
  EXPECT_NE(m.find(dir_ / "csv/b.csv" + ":2"), std::string::npos) << m;
  EXPECT_NE(m.find("record 1"), std::string::npos) << m;
  EXPECT_NE(m.find("in source 'csv' at " + fail.specFile + ":3:3"),
            std::string::npos)
      << m;
  (*pipe)->stop();
  runtime::RunStats fs = (*pipe)->stats();
  EXPECT_EQ(stageNamed(fs, "csv").failed, 1);
  EXPECT_TRUE(fs.checkBalanced().isOk()) << fs.checkBalanced().message();
}

} // namespace
