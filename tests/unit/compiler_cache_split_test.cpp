//===- compiler_cache_split_test.cpp - A cache inside a fused stage -------===//
//
// sluice-fuse-remaps fuses a deterministic prefix (cast, map, normalize)
// with the random crop and flip after it, so a cache after normalize falls
// inside one stage. A cache on such an inner step splits the stage there
// (runtime/Plan.h, cacheSplitPoint): these tests check the split itself on
// the compiled Fashion-MNIST plan, that it never changes a byte (generated
// kernels on and off, 1 and 2 threads, from the plan and from its serialized
// form as a compiled executable carries it), that the generated kernels of
// the split halves exist up front, and that a cache pinned in the spec
// (a `cache:` step, or a `cache` knob in its schedule) still leaves the
// steps on either side fused.
//
//===----------------------------------------------------------------------===//
#include "compiler_test_util.h"
#include "runtime_test_util.h"

#include "sluice/compiler/Codegen.h"
#include "sluice/compiler/Compiler.h"

#include <algorithm>

using namespace sluice;
using namespace sluice::rttest;

namespace {

const std::string kFused = "cast+map+normalize+random_crop+random_flip";

std::string spec(const std::string &steps, const std::string &extra = "") {
  return "pipeline: cache_split\n"
         "seed: 5\n"
         "source:\n"
         "  idx:\n"
         "    images: " SLUICE_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz\n"
         "    labels: " SLUICE_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz\n"
         "steps:\n" +
         steps +
         "  - random_crop: {field: image, size: [24, 24]}\n"
         "  - random_flip: {field: image, axis: width}\n"
         "  - batch: {size: 100}\n"
         "epochs: 1\n" +
         extra;
}

const std::string kPrefix =
    "  - cast: {field: image, dtype: f32}\n"
    "  - map: {field: image, expr: \"sqrt(abs(sin(x) * cos(x / 3) + "
    "exp(-x / 255) * log(x + 1)))\"}\n"
    "  - normalize: {field: image, mean: 0.5, std: 0.25}\n";

std::vector<std::string> names(const runtime::Plan &p) {
  std::vector<std::string> out;
  for (const runtime::PlanStep &s : p.steps)
    out.push_back(s.name);
  return out;
}

using Names = std::vector<std::string>;

/// The stage names a run with `o` used (its counters).
Names ranStages(const runtime::Plan &plan, const runtime::RunOptions &o) {
  auto p = runtime::Pipeline::create(plan, o);
  EXPECT_TRUE(bool(p)) << p.status().message();
  if (!p)
    return {};
  Names out;
  for (const runtime::StageStats &s : (*p)->stats().stages)
    out.push_back(s.name);
  return out;
}

} // namespace

TEST(CacheSplit, SplitsTheFusedStageAfterItsDeterministicPrefix) {
  sluice::testing::TempDir dir;
  runtime::Plan plan =
      sluice::testing::planOfSpecFile(dir.write("s.yaml", spec(kPrefix)));
  ASSERT_EQ(names(plan), (Names{kFused, "batch"}));
  std::optional<size_t> k = runtime::cacheSplitPoint(plan.steps[0]);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(plan.steps[0].fused[*k].name, "normalize");
  // Not a fused stage, or nothing random in it: no inner cache point.
  EXPECT_FALSE(runtime::cacheSplitPoint(plan.steps[1]).has_value());

  std::vector<runtime::PlanStep> extra = runtime::cacheSplitSteps(plan);
  ASSERT_EQ(extra.size(), 2u);
  EXPECT_EQ(extra[0].name, "cast+map+normalize");
  EXPECT_EQ(extra[1].name, "random_crop+random_flip");
  EXPECT_EQ(extra[0].outputType.str(), extra[1].inputType.str());

  runtime::Plan split = plan;
  EXPECT_FALSE(runtime::splitFusedAfter(split, "random_flip")); // the last
  EXPECT_FALSE(runtime::splitFusedAfter(split, "batch"));
  EXPECT_TRUE(runtime::splitFusedAfter(split, "map"));
  EXPECT_EQ(names(split),
            (Names{"cast+map", "normalize+random_crop+random_flip", "batch"}));
  split = plan;
  // A plan step name ("a+b") stands for its last step.
  EXPECT_TRUE(runtime::splitFusedAfter(split, "cast+map+normalize"));
  EXPECT_EQ(names(split),
            (Names{"cast+map+normalize", "random_crop+random_flip", "batch"}));
  // One step on its own is that step.
  split = plan;
  EXPECT_TRUE(runtime::splitFusedAfter(split, "cast"));
  EXPECT_EQ(split.steps[0].op, "cast");

  // The code generator compiles the split halves' kernels up front.
  auto jit = compiler::JitKernels::compile(plan);
  ASSERT_TRUE(bool(jit)) << jit.status().message();
  Names tableStages;
  for (const SluiceKernelInfo *t = (*jit)->table(); t->stage; ++t)
    tableStages.push_back(t->stage);
  for (const std::string &n : {kFused, std::string("cast+map+normalize"),
                               std::string("random_crop+random_flip")})
    EXPECT_NE(std::find(tableStages.begin(), tableStages.end(), n),
              tableStages.end())
        << n << " has no kernel";
}

TEST(CacheSplit, ACacheOnAnInnerStepSplitsAndChangesNoByte) {
  sluice::testing::TempDir dir;
  std::string text = spec(kPrefix);
  // Two epochs: the cache replays the second, where the random crop and
  // flip must still draw anew.
  text.replace(text.find("epochs: 1"), 9, "epochs: 2");
  runtime::Plan plan =
      sluice::testing::planOfSpecFile(dir.write("s.yaml", text));
  runtime::RunOptions ref;
  ref.threads = 1;
  ref.tempDir = dir.path();
  std::string reference = allBytes(runAll(plan, ref));
  ASSERT_GT(reference.size(), 100000u);

  Expected<runtime::Plan> back = runtime::Plan::deserialize(plan.serialize());
  ASSERT_TRUE(bool(back)) << back.status().message();
  auto jit = compiler::JitKernels::compile(*back);
  ASSERT_TRUE(bool(jit)) << jit.status().message();
  for (const std::string &to : {"memory", "disk"})
    for (int threads : {1, 2})
      for (bool codegen : {true, false}) {
        runtime::RunOptions o;
        o.threads = threads;
        o.tempDir = dir.path();
        if (codegen)
          o.binder = (*jit)->binder();
        o.schedule["normalize"].cache = to;
        o.schedule["cast"].parallelism = threads;
        std::string what = to + " cache, " + std::to_string(threads) +
                           " threads, codegen " + (codegen ? "on" : "off");
        EXPECT_EQ(
            ranStages(*back, o),
            (Names{"idx", "cast+map+normalize", "cast+map+normalize/cache",
                   "random_crop+random_flip", "batch"}))
            << what;
        EXPECT_TRUE(allBytes(runAll(*back, o)) == reference)
            << what << ": output bytes differ";
      }
  // The schedule of a plan split elsewhere ("cast+map+normalize" as one
  // key) applies to the fused stage's steps when no cache splits it.
  runtime::RunOptions o;
  o.schedule["cast+map+normalize"].parallelism = 1;
  o.schedule["random_crop+random_flip"].parallelism = 1;
  auto p = runtime::Pipeline::create(plan, o);
  ASSERT_TRUE(bool(p)) << p.status().message();
  bool seen = false;
  for (const runtime::StageStats &s : (*p)->stats().stages)
    if (s.name == kFused) {
      EXPECT_EQ(s.parallelism, 1);
      seen = true;
    }
  EXPECT_TRUE(seen);
}

TEST(CacheSplit, APinnedCacheKeepsFusionOnEitherSide) {
  sluice::testing::TempDir dir;
  // A `cache:` step: the fusion passes stop at it.
  std::string withStep = spec(kPrefix + "  - cache: {to: memory}\n");
  withStep.replace(withStep.find("epochs: 1"), 9, "epochs: 2");
  runtime::Plan a =
      sluice::testing::planOfSpecFile(dir.write("a.yaml", withStep));
  // (sluice-fuse-maps takes normalize into the value-wise run before it.)
  EXPECT_EQ(names(a), (Names{"cast+map+normalize", "cache",
                             "random_crop+random_flip", "batch"}));
  // A `cache` knob in the spec's schedule on the last step of a value-wise
  // run: the run stays fused and the fused stage takes the knob (a cache
  // written on a step inside a run would end the run there).
  std::string withKnob =
      spec(kPrefix, "schedule:\n  normalize: {cache: memory}\n");
  withKnob.replace(withKnob.find("epochs: 1"), 9, "epochs: 2");
  runtime::Plan b =
      sluice::testing::planOfSpecFile(dir.write("b.yaml", withKnob));
  EXPECT_EQ(names(b),
            (Names{"cast+map+normalize", "random_crop+random_flip", "batch"}));
  EXPECT_EQ(b.steps[0].schedule.cache, "memory");
  // Same bytes as without any cache, codegen on and off.
  std::string plainText = spec(kPrefix);
  plainText.replace(plainText.find("epochs: 1"), 9, "epochs: 2");
  runtime::Plan plain =
      sluice::testing::planOfSpecFile(dir.write("p.yaml", plainText));
  runtime::RunOptions o;
  o.threads = 2;
  o.tempDir = dir.path();
  std::string reference = allBytes(runAll(plain, o));
  for (const runtime::Plan *p : {&a, &b}) {
    auto jit = compiler::JitKernels::compile(*p);
    ASSERT_TRUE(bool(jit)) << jit.status().message();
    runtime::RunOptions withJit = o;
    withJit.binder = (*jit)->binder();
    EXPECT_TRUE(allBytes(runAll(*p, withJit)) == reference);
    EXPECT_TRUE(allBytes(runAll(*p, o)) == reference);
  }
}
