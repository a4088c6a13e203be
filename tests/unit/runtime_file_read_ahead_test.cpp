//===- runtime_file_read_ahead_test.cpp - Files read ahead on the pool ----===//
//
// A per-file source (image_folder, files) over local files reads the next
// files on the worker threads (RunOptions::fileReadAhead, FileWindow.h).
// Nothing of the output may change: every case runs once with it off (the
// reference, files read one after another on the source's thread) and
// then with it on at two and four threads, and compares every byte, every
// stage's counts and skip reasons, and the error a failing run stops with.
// The data: JPEGs encoded here in three classes, some cut short, one
// empty, a dangling symbolic link among them (a broken entry), read in
// order, by rank, with `shuffle: true` and under a budget that holds only
// a few of the files at a time.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <filesystem>

using namespace sluice;
using namespace sluice::rttest;

namespace {

std::string encodeJpeg(int w, int h, int seed) {
  return encodeRgbJpeg(w, h, [seed](int x, int y, int c) {
    return x * (3 + seed % 5) + y * 7 + c * 50 + seed * 13;
  });
}

/// What a run gave: its outputs and stats, or the error it stopped with.
struct Result {
  std::vector<Output> outs;
  runtime::RunStats stats;
  std::string error;
};

Result runCollect(const runtime::Plan &plan, const runtime::RunOptions &o) {
  Result r;
  auto p = runtime::Pipeline::create(plan, o);
  if (!p) {
    r.error = p.status().message();
    return r;
  }
  runtime::Batch b;
  for (;;) {
    Expected<bool> more = (*p)->next(b);
    if (!more) {
      r.error = more.status().message();
      break;
    }
    if (!*more)
      break;
    r.outs.push_back({b.fields(), b.epoch()});
  }
  (*p)->stop();
  r.stats = (*p)->stats();
  Status bal = r.stats.checkBalanced();
  EXPECT_TRUE(bal.isOk()) << bal.message();
  EXPECT_EQ(r.stats.memoryInUse, 0);
  return r;
}

/// Expects `got` to be `ref` to the byte, with the same counts per stage.
void expectSame(const Result &ref, const Result &got) {
  EXPECT_EQ(got.error, ref.error);
  ASSERT_EQ(got.outs.size(), ref.outs.size());
  EXPECT_TRUE(allBytes(got.outs) == allBytes(ref.outs))
      << "outputs differ from the reference";
  ASSERT_EQ(got.stats.stages.size(), ref.stats.stages.size());
  for (size_t i = 0; i < ref.stats.stages.size(); ++i) {
    const runtime::StageStats &a = ref.stats.stages[i],
                              &b = got.stats.stages[i];
    EXPECT_EQ(b.read, a.read) << a.name;
    EXPECT_EQ(b.emitted, a.emitted) << a.name;
    EXPECT_EQ(b.filtered, a.filtered) << a.name;
    EXPECT_EQ(b.failed, a.failed) << a.name;
    EXPECT_EQ(b.skipped, a.skipped) << a.name;
  }
}

class FileReadAhead : public ::testing::Test {
protected:
  void SetUp() override {
    // 3 classes x 13 images; every 5th cut short, one empty file, and a
    // dangling link that sorts between good images.
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 13; ++i) {
        std::string jpeg =
            encodeJpeg(24 + 5 * i, 20 + 3 * k + 2 * i, k * 13 + i);
        if ((k * 13 + i) % 5 == 2)
          jpeg = jpeg.substr(0, jpeg.size() / 3);
        if (k == 1 && i == 6)
          jpeg.clear();
        dir_.write("img/c" + std::to_string(k) + "/" + std::to_string(10 + i) +
                       ".jpg",
                   jpeg);
      }
    std::filesystem::create_symlink(dir_ / "img/c2/nowhere.jpg",
                                    dir_ / "img/c2/15b.jpg");
  }

  std::string spec(const std::string &onError, const std::string &extra,
                   const std::string &sourceExtra = "") const {
    return "pipeline: readahead\nseed: 11\nepochs: 2\nsource:\n"
           "  image_folder: {root: img, on_error: " +
           onError + sourceExtra +
           "}\nsteps:\n"
           "  - decode_image: {field: data, as: image, channels: 3}\n"
           "  - resize: {field: image, size: [16, 16]}\n"
           "  - random_flip: {field: image, axis: width, p: 0.5}\n" +
           extra +
           "  - select: [image, label]\n"
           "  - batch: {size: 4, drop_remainder: false}\n";
  }

  Result reference(const runtime::Plan &plan, runtime::RunOptions o) {
    o.threads = 2;
    o.fileReadAhead = false;
    Result r = runCollect(plan, o);
    if (!r.stats.stages.empty())
      EXPECT_EQ(r.stats.stages.front().poolCpuSeconds, 0.0);
    return r;
  }

  /// Runs with the read-ahead on at 2 and 4 threads against `ref`.
  void expectSameOn(const runtime::Plan &plan, runtime::RunOptions o,
                    const Result &ref, bool expectPoolWork = true) {
    for (int threads : {2, 4}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      o.threads = threads;
      o.fileReadAhead = true;
      Result got = runCollect(plan, o);
      expectSame(ref, got);
      if (expectPoolWork)
        EXPECT_GT(got.stats.stages.front().poolCpuSeconds, 0.0)
            << "the files were not read on the pool";
    }
  }

  TempDir dir_;
};

TEST_F(FileReadAhead, InOrderWithBadFilesSkipped) {
  runtime::Plan plan = planFromYaml(dir_, spec("skip", ""));
  Result ref = reference(plan, {});
  ASSERT_EQ(ref.error, "");
  // 39 files + the link, twice; the link is the source's error.
  const runtime::StageStats &src = ref.stats.stages.front();
  EXPECT_EQ(src.read, 80);
  EXPECT_EQ(src.skippedTotal(), 2);
  expectSameOn(plan, {}, ref);
}

TEST_F(FileReadAhead, ShuffleBufferAfterTheSource) {
  // The order the hoisted shuffle runs in: a buffer of raw files.
  runtime::Plan plan = planFromYaml(
      dir_, "pipeline: readahead\nseed: 5\nepochs: 2\nsource:\n"
            "  image_folder: {root: img, on_error: skip}\nsteps:\n"
            "  - shuffle: {buffer: 16}\n"
            "  - decode_image: {field: data, as: image, channels: 3}\n"
            "  - resize: {field: image, size: [16, 16]}\n"
            "  - select: [image, label]\n"
            "  - batch: {size: 5}\n");
  Result ref = reference(plan, {});
  ASSERT_EQ(ref.error, "");
  expectSameOn(plan, {}, ref);
}

TEST_F(FileReadAhead, FailStopsAtTheSameFileWithTheSameMessage) {
  // The source's own error (the dangling link), with no step before it
  // that could fail first.
  runtime::Plan plan =
      planFromYaml(dir_, "pipeline: readahead\nepochs: 1\nsource:\n"
                         "  image_folder: {root: img, on_error: fail}\n"
                         "steps:\n  - select: [data, label]\n");
  Result ref = reference(plan, {});
  ASSERT_NE(ref.error, "");
  EXPECT_NE(ref.error.find("15b.jpg"), std::string::npos) << ref.error;
  for (int threads : {2, 4}) {
    runtime::RunOptions o;
    o.threads = threads;
    Result got = runCollect(plan, o);
    EXPECT_EQ(got.error, ref.error);
    // Every record before the link came out, in order.
    EXPECT_TRUE(allBytes(got.outs) == allBytes(ref.outs));
  }
}

TEST_F(FileReadAhead, ByRankAndWithSourceShuffle) {
  for (const char *shuffle : {"", ", shuffle: true"}) {
    runtime::Plan plan = planFromYaml(dir_, spec("skip", "", shuffle));
    for (int rank : {0, 2}) {
      SCOPED_TRACE(std::string("rank ") + std::to_string(rank) + shuffle);
      runtime::RunOptions o;
      o.rank = rank;
      o.worldSize = 3;
      Result ref = reference(plan, o);
      ASSERT_EQ(ref.error, "");
      expectSameOn(plan, o, ref);
    }
  }
}

TEST_F(FileReadAhead, FilesSourceUnderATightBudget) {
  // Eight 2 MiB files under a 12 MiB budget: the source's thread holds
  // one at a time, while eight read at once would not fit. A read ahead
  // that the budget refuses is read again alone, so nothing is refused
  // that reading one after another would take.
  for (int i = 0; i < 8; ++i) {
    std::string bytes(2 << 20, static_cast<char>('a' + i));
    bytes[7] = static_cast<char>(i);
    dir_.write("big/" + std::to_string(i) + ".bin", bytes);
  }
  runtime::Plan plan = planFromYaml(
      dir_, "pipeline: tight\nepochs: 2\nsource:\n  files: big/*.bin\n"
            "steps:\n  - select: [data]\nbudget: {memory: 12MiB}\n");
  Result ref = reference(plan, {});
  ASSERT_EQ(ref.error, "");
  ASSERT_EQ(ref.outs.size(), 16u);
  // The budget may refuse every read ahead; then the pool did no work that
  // counted, so only the outputs and counts are compared.
  runtime::RunOptions o;
  o.threads = 4;
  Result got = runCollect(plan, o);
  expectSame(ref, got);
}

} // namespace
