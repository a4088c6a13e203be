//===- runtime_faults_test.cpp - Input files that change under a run ------===//
//
// A source lists its files when the pipeline is built and opens each when
// it gets to it, so on a shared file system a file can vanish, become
// unreadable or shrink between the listing and the read (a cleanup job, a
// permission change, a rewrite in place). Each case must end as documented
// (docs/reliability.md, "Faults"): with `on_error: fail` a data error naming
// the file and what happened; with `on_error: skip` the file counted as
// skipped with the reason and every other record delivered; never a crash,
// a hang, or records missing without a count. The tests change the files
// after the first output, when the reader has not reached them yet (it
// reads ahead a few MiB at most).
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <filesystem>
#include <fstream>

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace sluice;
using namespace sluice::rttest;
namespace fs = std::filesystem;

namespace {

constexpr int kFiles = 200, kRowsPerFile = 10;

/// What a run delivered before it ended.
struct Outcome {
  /// The first field of every output row, in order (for bytes: lengths).
  std::vector<int64_t> ids;
  std::string error; ///< empty: the run reached its end
  runtime::RunStats stats;
};

class FaultsTest : public ::testing::Test {
protected:
  /// f000.csv .. f199.csv, ten rows each, ids 0..1999 in file order.
  void writeCsvFiles() {
    for (int f = 0; f < kFiles; ++f) {
      std::string rows;
      for (int r = 0; r < kRowsPerFile; ++r)
        rows += std::to_string(f * kRowsPerFile + r) + "\n";
      dir_.write(name(f, "csv"), rows);
    }
  }
  static std::string name(int f, const char *ext) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "data/f%03d.%s", f, ext);
    return buf;
  }
  runtime::Plan csvPlan(const std::string &onError, int epochs = 1,
                        int batch = 10) {
    return planFromYaml(
        dir_, "pipeline: faults\nsource:\n  csv:\n"
              "    files: data/*.csv\n"
              "    columns: [{name: id, type: i64}]\n"
              "    on_error: " +
                  onError + "\nsteps:\n  - batch: " + std::to_string(batch) +
                  "\nepochs: " + std::to_string(epochs) + "\n");
  }

  /// Runs `plan`; calls `change` once, right after output number `at`.
  Outcome run(const runtime::Plan &plan, int64_t at,
              const std::function<void()> &change) {
    Outcome o;
    auto p = runtime::Pipeline::create(plan, {});
    EXPECT_TRUE(bool(p)) << (p ? "" : p.status().message());
    if (!p)
      return o;
    runtime::Batch b;
    for (int64_t n = 0;; ++n) {
      Expected<bool> more = (*p)->next(b);
      if (!more) {
        o.error = more.status().message();
        break;
      }
      if (!*more)
        break;
      const Tensor &t = b.fields()[0];
      if (t.isNumeric())
        for (int64_t i = 0; i < t.numElements(); ++i)
          o.ids.push_back(t.data<int64_t>()[i]);
      else // bytes: their lengths
        for (const std::string &v : t.stringValues())
          o.ids.push_back(static_cast<int64_t>(v.size()));
      if (n == at)
        change();
    }
    (*p)->stop();
    o.stats = (*p)->stats();
    Status bal = o.stats.checkBalanced();
    EXPECT_TRUE(bal.isOk()) << bal.message();
    return o;
  }

  /// Removes files [from, to) of the data set.
  void removeFiles(int from, int to, const char *ext) {
    for (int f = from; f < to; ++f)
      ASSERT_TRUE(fs::remove(dir_ / name(f, ext))) << name(f, ext);
  }

  TempDir dir_;
};

/// ids [from, to).
std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < to; ++i)
    v.push_back(i);
  return v;
}

/// Every record read before the failing file, in order, and nothing after.
void expectPrefixUpTo(const Outcome &o, int64_t firstLost) {
  ASSERT_LE(static_cast<int64_t>(o.ids.size()), firstLost);
  EXPECT_EQ(o.ids, range(0, static_cast<int64_t>(o.ids.size())))
      << "records before the vanished file went missing";
}

TEST_F(FaultsTest, VanishedFileFailsWithItsName) {
  writeCsvFiles();
  Outcome o = run(csvPlan("fail"), 0, [&] { removeFiles(150, 200, "csv"); });
  EXPECT_NE(o.error.find("f150.csv"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("cannot read file"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("No such file or directory"), std::string::npos)
      << o.error;
  expectPrefixUpTo(o, 1500);
  EXPECT_EQ(stageNamed(o.stats, "csv").failed, 1);
}

TEST_F(FaultsTest, VanishedFilesAreSkippedAndCounted) {
  writeCsvFiles();
  Outcome o = run(csvPlan("skip"), 0, [&] { removeFiles(150, 200, "csv"); });
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.ids, range(0, 1500)); // every record of the files still there
  runtime::StageStats csv = stageNamed(o.stats, "csv");
  EXPECT_EQ(csv.emitted, 1500);
  ASSERT_EQ(csv.skipped.size(), 1u);
  EXPECT_EQ(csv.skipped[0].first,
            "csv: cannot read file, rest of the file dropped");
  EXPECT_EQ(csv.skipped[0].second, 50); // one per file
}

TEST_F(FaultsTest, FileVanishedBeforeTheNextEpochFailsThatEpoch) {
  writeCsvFiles();
  runtime::Plan plan = csvPlan("fail", 2);
  int64_t lastOfEpoch0 = kFiles * kRowsPerFile / 10 - 1;
  Outcome o = run(plan, lastOfEpoch0, [&] { removeFiles(120, 121, "csv"); });
  EXPECT_NE(o.error.find("f120.csv"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("No such file or directory"), std::string::npos)
      << o.error;
  // Epoch 0 whole, then epoch 1 up to the vanished file at most.
  ASSERT_GE(o.ids.size(), 2000u);
  EXPECT_EQ(std::vector<int64_t>(o.ids.begin(), o.ids.begin() + 2000),
            range(0, 2000));
  std::vector<int64_t> epoch1(o.ids.begin() + 2000, o.ids.end());
  ASSERT_LE(epoch1.size(), 1200u);
  EXPECT_EQ(epoch1, range(0, static_cast<int64_t>(epoch1.size())));
}

TEST_F(FaultsTest, FileReplacedByADirectoryFailsWithItsName) {
  writeCsvFiles();
  Outcome o = run(csvPlan("fail"), 0, [&] {
    removeFiles(170, 171, "csv");
    fs::create_directory(dir_ / name(170, "csv"));
  });
  EXPECT_NE(o.error.find("f170.csv"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("is a directory"), std::string::npos) << o.error;
  expectPrefixUpTo(o, 1700);
}

/// A file cut short while it is being read (rewritten in place) is an I/O
/// error naming the file, not a shorter data set: the reader knows the size
/// it opened.
TEST_F(FaultsTest, FileThatShrinksWhileReadFailsWithItsName) {
  // One 16 MiB file: the reader holds a few 1 MiB blocks ahead at most.
  std::string rows;
  int64_t n = 0;
  while (rows.size() < (size_t(16) << 20))
    rows += std::to_string(n++) + "\n";
  std::string path = dir_.write("data/big.csv", rows);
  Outcome o = run(csvPlan("fail", 1, 4096), 0, [&] {
    // Cut at a line boundary: a parse error cannot give it away.
    size_t cut = rows.find('\n', size_t(10) << 20) + 1;
    fs::resize_file(path, cut);
  });
  EXPECT_NE(o.error.find("big.csv"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("shrank"), std::string::npos) << o.error;
  EXPECT_LT(static_cast<int64_t>(o.ids.size()), n);
  EXPECT_EQ(o.ids, range(0, static_cast<int64_t>(o.ids.size())));
}

TEST_F(FaultsTest, ShrunkFileIsSkippedAndCountedUnderSkip) {
  std::string rows;
  int64_t n = 0;
  while (rows.size() < (size_t(16) << 20))
    rows += std::to_string(n++) + "\n";
  std::string path = dir_.write("data/big.csv", rows);
  dir_.write("data/small.csv", "-1\n-2\n"); // after big.csv in sorted order
  Outcome o = run(csvPlan("skip", 1, 4096), 0, [&] {
    fs::resize_file(path, rows.find('\n', size_t(10) << 20) + 1);
  });
  ASSERT_EQ(o.error, "");
  runtime::StageStats csv = stageNamed(o.stats, "csv");
  EXPECT_EQ(csv.skippedTotal(), 1);
  // The rest of big.csv is not there; small.csv still is.
  ASSERT_GE(o.ids.size(), 2u);
  EXPECT_EQ(std::vector<int64_t>(o.ids.end() - 2, o.ids.end()),
            (std::vector<int64_t>{-1, -2}));
}

/// `files` reads each file whole when its record comes up.
TEST_F(FaultsTest, VanishedWholeFilesFollowOnError) {
  for (int f = 0; f < 100; ++f)
    dir_.write(name(f, "bin"), std::string(100 + f, 'x'));
  for (const char *onError : {"fail", "skip"}) {
    SCOPED_TRACE(onError);
    runtime::Plan plan = planFromYaml(
        dir_, std::string("pipeline: whole\nsource:\n  files:\n"
                          "    files: data/*.bin\n    on_error: ") +
                  onError + "\nsteps:\n  - select: [data]\n");
    Outcome o = run(plan, 0, [&] { removeFiles(80, 100, "bin"); });
    if (std::string(onError) == "fail") {
      EXPECT_NE(o.error.find("f080.bin"), std::string::npos) << o.error;
      EXPECT_NE(o.error.find("No such file or directory"), std::string::npos)
          << o.error;
      ASSERT_LE(o.ids.size(), 80u);
      EXPECT_EQ(o.ids, range(100, 100 + static_cast<int64_t>(o.ids.size())));
    } else {
      EXPECT_EQ(o.error, "");
      EXPECT_EQ(o.ids, range(100, 180));
      EXPECT_EQ(stageNamed(o.stats, "files").skippedTotal(), 20);
    }
    for (int f = 80; f < 100; ++f)
      dir_.write(name(f, "bin"), std::string(100 + f, 'x'));
  }
}

/// A file whose permissions are taken away after the listing. Root reads
/// mode-000 files, so when the tests run as root the runs happen in a child
/// process that has become nobody, the files' owner.
TEST_F(FaultsTest, FileMadeUnreadableFollowsOnError) {
  writeCsvFiles();
  std::string victim = dir_ / name(160, "csv");
  ::chmod(dir_.path().c_str(), 0755);
  ::chmod((dir_ / "data").c_str(), 0755);
  if (::geteuid() == 0)
    ASSERT_EQ(::chown(victim.c_str(), 65534, 65534), 0);
  // Written here: nobody cannot write the spec files into this folder.
  runtime::Plan failPlan = csvPlan("fail"), skipPlan = csvPlan("skip");
  // "fast": the child is forked here and reads this test's folder.
  GTEST_FLAG_SET(death_test_style, "fast");
  auto child = [&] {
    ::dup2(2, 1); // gtest reports failures on stdout
    if (::geteuid() == 0) {
      gid_t none = 65534;
      if (::setgroups(1, &none) != 0 || ::setgid(65534) != 0 ||
          ::setuid(65534) != 0) {
        std::fprintf(stderr, "cannot become nobody\n");
        std::exit(3);
      }
    }
    auto takeAway = [&] {
      if (::chmod(victim.c_str(), 0) != 0)
        std::exit(4);
    };
    Outcome failed = run(failPlan, 0, takeAway);
    ::chmod(victim.c_str(), 0644);
    Outcome skipped = run(skipPlan, 0, takeAway);
    runtime::StageStats csv = stageNamed(skipped.stats, "csv");
    std::vector<int64_t> want = range(0, 1600), rest = range(1610, 2000);
    want.insert(want.end(), rest.begin(), rest.end());
    std::fprintf(stderr,
                 "fail: %s\nskip: '%s', %s records, skipped %lld (%s)\n",
                 failed.error.c_str(), skipped.error.c_str(),
                 skipped.ids == want ? "the other" : "NOT the other",
                 static_cast<long long>(csv.skippedTotal()),
                 csv.skipped.empty() ? "" : csv.skipped[0].first.c_str());
    bool prefix =
        failed.ids.size() <= 1600 &&
        failed.ids == range(0, static_cast<int64_t>(failed.ids.size()));
    if (!prefix)
      std::fprintf(stderr, "the failed run's %zu records are not 0..N-1\n",
                   failed.ids.size());
    if (::testing::Test::HasFailure())
      std::fprintf(stderr, "a check failed in the child\n");
    // _exit, not exit: the child is a fork of a process whose oneTBB
    // workers (started by earlier tests' pipelines) did not come with it,
    // and running the library's exit-time destructors over them aborted
    // now and then ("pure virtual method called").
    std::fflush(nullptr);
    ::_exit(prefix && !::testing::Test::HasFailure() ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0),
              "fail: .*f160\\.csv.*cannot read file.*Permission denied.*\n"
              "skip: '', the other records, skipped 1 \\(csv: cannot read "
              "file, rest of the file dropped\\)");
}

} // namespace
