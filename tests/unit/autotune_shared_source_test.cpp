//===- autotune_shared_source_test.cpp - schedule: auto lists once --------===//
//
// `schedule: auto` makes the plan's source once (RunOptions::source) and
// hands it to the schedule cache's key, every probe and the run, so an
// image folder is walked once instead of once per pipeline. Checked by
// counting Source::create calls over applyAutoSchedule and the run, and by
// the run's outputs: the same bytes as a pipeline that lists on its own,
// and with SLUICE_NO_SHARED_SOURCE=1 every pipeline lists again.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/autotune/Tune.h"
#include "sluice/runtime/Source.h"

#include <cstdlib>

using namespace sluice;
using namespace sluice::rttest;

namespace {

/// Every output's bytes, in order.
std::string outputBytes(const runtime::Plan &plan,
                        const runtime::RunOptions &o) {
  return allBytes(runAll(plan, o));
}

class SharedSource : public ::testing::Test {
protected:
  void SetUp() override {
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 24; ++i)
        dir_.write("img/c" + std::to_string(k) + "/" + std::to_string(i) +
                       ".jpg",
                   encodeRgbJpeg(32 + i, 28 + k, [&](int x, int y, int c) {
                     return x * 3 + y * 5 + c * 40 + i * 7 + k;
                   }));
    plan_ = planFromYaml(
        dir_, "pipeline: shared\nseed: 2\nepochs: 2\nsource:\n"
              "  image_folder: {root: img}\nsteps:\n"
              "  - decode_image: {field: data, as: image, channels: 3}\n"
              "  - resize: {field: image, size: [16, 16]}\n"
              "  - select: [image, label]\n"
              "  - batch: {size: 8}\n");
    ::setenv("SLUICE_NO_SCHEDULE_CACHE", "1", 1);
  }
  void TearDown() override { ::unsetenv("SLUICE_NO_SHARED_SOURCE"); }

  /// applyAutoSchedule, then the run; returns the create() calls they made.
  int64_t tuneAndRun(std::string *bytes) {
    runtime::RunOptions o;
    o.threads = 2;
    autotune::AutoOptions a;
    a.secondsPerProbe = 0.1;
    a.maxProbeSeconds = 0.5;
    a.progressLine = false;
    a.replan = false;
    int64_t before = runtime::Source::createCalls();
    Expected<autotune::AutoSchedule> s =
        autotune::applyAutoSchedule(plan_, o, a);
    EXPECT_TRUE(s) << s.status().message();
    *bytes = outputBytes(plan_, o);
    return runtime::Source::createCalls() - before;
  }

  TempDir dir_;
  runtime::Plan plan_;
};

TEST_F(SharedSource, ProbesAndTheRunListTheFolderOnce) {
  runtime::RunOptions plain;
  plain.threads = 2;
  std::string want = outputBytes(plan_, plain);
  ASSERT_FALSE(want.empty());

  std::string got;
  EXPECT_EQ(tuneAndRun(&got), 1);
  EXPECT_TRUE(got == want) << "the tuned run's outputs differ";

  // Switched off: the key, every probe and the run list on their own.
  ::setenv("SLUICE_NO_SHARED_SOURCE", "1", 1);
  std::string again;
  EXPECT_GT(tuneAndRun(&again), 2);
  EXPECT_TRUE(again == want);
}

TEST_F(SharedSource, ASourceOfAnotherKindIsNotUsed) {
  // A source made for another plan (a files glob) is ignored: the pipeline
  // makes its own and reads the image folder.
  Value params = Value::map();
  params.set("files", Value::string("img/c0/*.jpg"));
  Expected<std::unique_ptr<runtime::Source>> other =
      runtime::Source::create("files", params, RecordType(), dir_.path());
  ASSERT_TRUE(other) << other.status().message();
  runtime::RunOptions o;
  o.threads = 2;
  std::string want = outputBytes(plan_, o);
  o.source = std::shared_ptr<const runtime::Source>(other.take());
  EXPECT_TRUE(outputBytes(plan_, o) == want);
}

} // namespace
