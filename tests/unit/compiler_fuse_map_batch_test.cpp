//===- compiler_fuse_map_batch_test.cpp - sluice-fuse-map-batch, end to end
//-===//
//
// Moving value-wise steps after `batch` is only worth having if the output
// bytes do not change: each pipeline here is compiled with the pass on and
// off, both Plans are run through the runtime (1 and 2 threads), and every
// output tensor is compared byte for byte.
//
//===----------------------------------------------------------------------===//
#include "compiler_test_util.h"
#include "runtime_test_util.h"

#include "sluice/compiler/Compiler.h"

#include <cmath>
#include <cstring>
#include <random>

using namespace sluice;
using sluice::rttest::Output;
using sluice::testing::TempDir;

namespace {

const std::string kPass = "sluice-fuse-map-batch";

std::string criteoSpec(const TempDir &dir, int batch, bool dropRemainder) {
  return "pipeline: criteo_fuse\n" +
         sluice::testing::criteoTsvSource(dir.path() + "/day_*.tsv") +
         "steps:\n"
         "  - filter: {where: \"label >= 0\"}\n"
         "  - fill_missing: {field: dense, value: 0}\n"
         "  - map: {field: dense, expr: \"log(max(x, 0) + 1)\"}\n"
         "  - clamp: {field: dense, max: 9.5}\n"
         "  - bucketize: {field: dense, as: dense_bucket, boundaries: [1, 2, "
         "4, 8]}\n"
         "  - cast: {field: label, dtype: f32}\n"
         "  - hash_bucket: {field: cat, buckets: 1000}\n"
         "  - batch: {size: " +
         std::to_string(batch) +
         ", drop_remainder: " + (dropRemainder ? "true" : "false") + "}\n";
}

std::string fashionSpec(int batch, bool dropRemainder) {
  return "pipeline: fashion_fuse\n"
         "source:\n"
         "  idx: {images: " +
         rttest::kFashionMnistImages +
         ", labels: " + rttest::kFashionMnistLabels +
         "}\n"
         "steps:\n"
         "  - take: 3000\n"
         "  - normalize: {field: image, mean: 72.94, std: 90.02}\n"
         "  - map: {field: image, expr: \"x * 0.5 + 0.25\"}\n"
         "  - batch: {size: " +
         std::to_string(batch) +
         ", drop_remainder: " + (dropRemainder ? "true" : "false") + "}\n";
}

/// Compiles the spec at `path`, with `kPass` disabled or not. Only this
/// pass is compared: sluice-fuse-maps (which would group the moved steps into
/// one stage) has its own tests.
runtime::Plan compile(const std::string &path, bool fused) {
  std::vector<std::string> disabled{"sluice-fuse-maps"};
  if (!fused)
    disabled.push_back(kPass);
  return sluice::testing::planOfSpecFile(path, std::move(disabled));
}

std::vector<std::string> stageNames(const runtime::Plan &plan) {
  std::vector<std::string> names;
  for (const runtime::PlanStep &s : plan.steps)
    names.push_back(s.name);
  return names;
}

void expectSameBytes(const std::vector<Output> &fused,
                     const std::vector<Output> &unfused) {
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t o = 0; o < fused.size(); ++o) {
    ASSERT_EQ(fused[o].fields.size(), unfused[o].fields.size())
        << "output " << o;
    EXPECT_EQ(fused[o].epoch, unfused[o].epoch);
    for (size_t f = 0; f < fused[o].fields.size(); ++f) {
      const Tensor &a = fused[o].fields[f], &b = unfused[o].fields[f];
      ASSERT_EQ(a.type().str(), b.type().str())
          << "output " << o << " field " << f;
      ASSERT_TRUE(a.isNumeric());
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0)
          << "output " << o << " field " << f << " differs";
    }
  }
}

struct Case {
  std::string name;
  int threads;
  int batch;
  bool dropRemainder;
};

class FuseMapBatch : public ::testing::TestWithParam<Case> {};

TEST_P(FuseMapBatch, CriteoOutputsAreByteIdentical) {
  const Case &c = GetParam();
  TempDir dir;
  dir.write("day_0.tsv", sluice::testing::criteoTsv(1, 1500));
  dir.write("day_1.tsv", sluice::testing::criteoTsv(2, 777));
  std::string spec =
      dir.write("spec.yaml", criteoSpec(dir, c.batch, c.dropRemainder));

  runtime::Plan fusedPlan = compile(spec, true);
  runtime::Plan plainPlan = compile(spec, false);
  // The pass did move the steps (else this compares a Plan with itself).
  std::vector<std::string> moved = {"filter", "batch",      "fill_missing",
                                    "map",    "clamp",      "bucketize",
                                    "cast",   "hash_bucket"};
  EXPECT_EQ(stageNames(fusedPlan), moved);
  ASSERT_EQ(stageNames(plainPlan).back(), "batch");
  EXPECT_EQ(fusedPlan.outputType(), plainPlan.outputType());

  runtime::RunOptions opts;
  opts.threads = c.threads;
  std::vector<Output> fused = rttest::runAll(fusedPlan, opts);
  std::vector<Output> plain = rttest::runAll(plainPlan, opts);
  ASSERT_FALSE(plain.empty());
  int64_t rows = 0;
  for (const Output &o : plain)
    rows += o.fields[0].dim(0);
  EXPECT_GT(rows, 1000); // most rows pass the filter
  expectSameBytes(fused, plain);
}

TEST_P(FuseMapBatch, FashionMnistNormalizeIsByteIdentical) {
  if (!rttest::haveFashionMnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const Case &c = GetParam();
  TempDir dir;
  std::string spec =
      dir.write("spec.yaml", fashionSpec(c.batch, c.dropRemainder));
  runtime::Plan fusedPlan = compile(spec, true);
  runtime::Plan plainPlan = compile(spec, false);
  EXPECT_EQ(stageNames(fusedPlan),
            (std::vector<std::string>{"take", "batch", "normalize", "map"}));
  runtime::RunOptions opts;
  opts.threads = c.threads;
  std::vector<Output> fused = rttest::runAll(fusedPlan, opts);
  std::vector<Output> plain = rttest::runAll(plainPlan, opts);
  size_t batches =
      c.dropRemainder ? 3000 / c.batch : (3000 + c.batch - 1) / c.batch;
  ASSERT_EQ(plain.size(), batches);
  expectSameBytes(fused, plain);
}

INSTANTIATE_TEST_SUITE_P(
    Runs, FuseMapBatch,
    ::testing::Values(Case{"OneThread", 1, 64, false},
                      Case{"TwoThreads", 2, 64, false},
                      Case{"TwoThreadsDropRemainder", 2, 100, true},
                      Case{"OneThreadBatchOfOne", 1, 1, false}),
    [](const ::testing::TestParamInfo<Case> &info) { return info.param.name; });

} // namespace
