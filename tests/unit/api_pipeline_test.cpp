//===- api_pipeline_test.cpp - sluice::Pipeline, the one pipeline API -----===//
//
// On the real example data (examples/data/criteo): a spec opened, compiled
// with and without generated kernels, iterated, resumed and scheduled
// through the API gives the same bytes every way; bad input gets located
// errors of the kind front ends map to exit codes.
//
//===----------------------------------------------------------------------===//
#include "test_util.h"

#include "sluice/Pipeline.h"
#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Pinned.h"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace sluice {
namespace {

using testing::TempDir;

/// examples/criteo.yaml with its data path made absolute, small batches and
/// `extra` appended.
std::string criteoSpec(const TempDir &dir, const std::string &extra = "") {
  std::string data = std::string(SLUICE_SOURCE_DIR) + "/examples/data/criteo";
  return dir.write("criteo.yaml",
                   "pipeline: criteo_dlrm\n"
                   "source:\n"
                   "  csv:\n"
                   "    files: " +
                       data +
                       "/day_*.tsv\n"
                       "    delimiter: \"\\t\"\n"
                       "    columns:\n"
                       "      - {name: label, type: i64}\n"
                       "      - {name: dense, type: f32, count: 13}\n"
                       "      - {name: cat, type: hex32, count: 26}\n"
                       "steps:\n"
                       "  - filter: {where: \"label >= 0\"}\n"
                       "  - fill_missing: {field: dense, value: 0}\n"
                       "  - map: {field: dense, expr: \"log(max(x, 0) + 1)\"}\n"
                       "  - hash_bucket: {field: cat, buckets: 1000000}\n"
                       "  - batch: {size: 64}\n" +
                       extra);
}

/// Every output's bytes, field by field, from `from` on.
std::vector<std::string> drain(Pipeline &p) {
  std::vector<std::string> out;
  runtime::Batch b;
  for (;;) {
    Expected<bool> more = p.next(b);
    EXPECT_TRUE(more) << more.status().message();
    if (!more || !*more)
      break;
    std::string bytes;
    for (const Tensor &t : b.fields())
      bytes.append(reinterpret_cast<const char *>(t.raw()), t.nbytes());
    out.push_back(std::move(bytes));
  }
  return out;
}

std::unique_ptr<Pipeline> openOk(const std::string &spec,
                                 const OpenOptions &o = {}) {
  ErrorKind kind;
  Expected<std::unique_ptr<Pipeline>> p = Pipeline::open(spec, o, &kind);
  EXPECT_TRUE(p) << p.status().message();
  EXPECT_EQ(kind, ErrorKind::None);
  return p ? p.take() : nullptr;
}

/// The same spec opened with generated kernels and without.
struct JitAndPlain {
  std::unique_ptr<Pipeline> jit, plain;
};
JitAndPlain openJitAndPlain(const std::string &spec) {
  OpenOptions off;
  off.jit = false;
  return {openOk(spec), openOk(spec, off)};
}

TEST(ApiPipeline, GeneratedKernelsGiveTheRuntimeKernelsBytes) {
  TempDir dir;
  auto [jit, plain] = openJitAndPlain(criteoSpec(dir));
  ASSERT_TRUE(jit && plain);
  std::vector<std::string> a = drain(*jit), b = drain(*plain);
  EXPECT_GT(jit->generatedKernels(), 0);
  EXPECT_EQ(plain->generatedKernels(), 0);
  EXPECT_EQ(plain->kernelSummary(), "kernels: off (--no-jit)");
  ASSERT_EQ(a.size(), 8u); // 500 rows in batches of 64
  EXPECT_EQ(a, b);
  EXPECT_EQ(jit->stats().records(), 500);
}

TEST(ApiPipeline, ResumesWhereASavedStateLeftOff) {
  TempDir dir;
  std::string spec = criteoSpec(dir);
  auto whole = openOk(spec);
  ASSERT_TRUE(whole);
  std::vector<std::string> all = drain(*whole);
  auto first = openOk(spec);
  runtime::Batch b;
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(*first->next(b));
  runtime::PipelineState st = first->state();
  auto resumed = openOk(spec);
  ASSERT_TRUE(resumed->resume(st));
  std::vector<std::string> rest = drain(*resumed);
  ASSERT_EQ(rest.size(), all.size() - 3);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + 3));
}

TEST(ApiPipeline, APlanFileRunsLikeItsSpec) {
  TempDir dir;
  std::string spec = criteoSpec(dir);
  auto p = openOk(spec);
  ASSERT_TRUE(p);
  std::string planFile = dir.write("plan.json", p->plan().serialize());
  std::vector<std::string> fromSpec = drain(*p);
  ErrorKind kind;
  Expected<std::unique_ptr<Pipeline>> q =
      Pipeline::openPlan(planFile, {}, &kind);
  ASSERT_TRUE(q) << q.status().message();
  EXPECT_EQ((*q)->spec(), nullptr);
  EXPECT_EQ(drain(**q), fromSpec);
  // The runtime's own kernels on the same plan: the same bytes.
  auto r = Pipeline::fromPlan(p->plan());
  EXPECT_FALSE(r->hasKernels());
  EXPECT_EQ(drain(*r), fromSpec);
}

TEST(ApiPipeline, ScheduleAutoUnlessAScheduleIsGiven) {
  TempDir dir;
  std::string spec = criteoSpec(dir, "schedule: auto\n");
  auto p = openOk(spec);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->autoScheduleWanted());
  // A schedule file, even one that sets no knob, is the schedule.
  OpenOptions o;
  o.scheduleFile = dir.write("empty.yaml", "schedule: {}\n");
  auto q = openOk(spec, o);
  ASSERT_TRUE(q);
  EXPECT_FALSE(q->autoScheduleWanted());
  EXPECT_TRUE(q->options().schedule.empty());
  // A file's knobs land in the run options as one StepSchedule per step.
  o.scheduleFile =
      dir.write("some.yaml",
                "schedule:\n  map: {parallelism: 2}\n  batch: {prefetch: 3}\n");
  auto r = openOk(spec, o);
  ASSERT_TRUE(r);
  const Schedule &s = r->options().schedule;
  ASSERT_EQ(s.count("map"), 1u);
  EXPECT_EQ(s.at("map").parallelism, 2);
  EXPECT_FALSE(s.at("map").prefetch);
  EXPECT_EQ(s.at("batch").prefetch, 3);
  // Its outputs are the bytes of the default schedule.
  r->options().threads = 2;
  OpenOptions none;
  auto plain = openOk(criteoSpec(dir), none);
  EXPECT_EQ(drain(*r), drain(*plain));
}

TEST(ApiPipeline, BadInputGetsLocatedErrorsOfItsKind) {
  TempDir dir;
  struct Case {
    const char *what;
    std::string spec;
    OpenOptions opts;
    ErrorKind kind;
    std::string message;
  };
  std::string good = criteoSpec(dir);
  OpenOptions badPass;
  badPass.disabledPasses = {"sluice-fuse-mapz"};
  OpenOptions badSchedule;
  badSchedule.scheduleFile =
      dir.write("bad.yaml", "schedule:\n  mapp: {parallelism: 2}\n");
  OpenOptions missingSchedule;
  missingSchedule.scheduleFile = dir / "missing.yaml";
  std::vector<Case> cases = {
      {"unknown source",
       dir.write("src.yaml", "pipeline: p\nsource:\n  csvv: {files: x.csv}\n"),
       {},
       ErrorKind::Spec,
       "src.yaml:3:3: error: unknown source kind 'csvv'"},
      {"missing spec",
       dir / "nothing.yaml",
       {},
       ErrorKind::Spec,
       "sluice: error: "},
      {"unknown pass", good, badPass, ErrorKind::Usage, "sluice-fuse-maps"},
      {"unknown step in a schedule file", good, badSchedule, ErrorKind::Spec,
       "bad.yaml:2:3: error: schedule names no step 'mapp'"},
      {"missing schedule file", good, missingSchedule, ErrorKind::Spec,
       "sluice: error: "},
  };
  for (const Case &c : cases) {
    ErrorKind kind = ErrorKind::None;
    Expected<std::unique_ptr<Pipeline>> p =
        Pipeline::open(c.spec, c.opts, &kind);
    ASSERT_FALSE(p) << c.what;
    EXPECT_EQ(kind, c.kind) << c.what;
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << c.what << ": " << p.status().message();
  }
}

TEST(ApiPipeline, CheckDataSaysWhatARunWouldFind) {
  TempDir dir;
  dir.write("a.tsv", "");
  auto checked = [&](const std::string &files) {
    std::string spec =
        dir.write("check.yaml", "pipeline: p\n"
                                "source:\n"
                                "  tsv:\n"
                                "    files: " +
                                    files +
                                    "\n"
                                    "    columns:\n"
                                    "      - {name: label, type: i64}\n");
    Expected<std::unique_ptr<dsl::Spec>> read = Pipeline::loadSpec(spec);
    EXPECT_TRUE(read) << read.status().message();
    OpenOptions o;
    o.jit = false;
    Expected<std::unique_ptr<Pipeline>> p =
        Pipeline::fromSpec(read ? read.take() : nullptr, o);
    EXPECT_TRUE(p) << p.status().message();
    EXPECT_NE((*p)->spec(), nullptr);
    return (*p)->checkData();
  };
  // An empty file is a warning; a glob that matches nothing is why `sluice
  // run` would fail.
  Expected<std::vector<std::string>> empty = checked(dir / "a.tsv");
  ASSERT_TRUE(empty) << empty.status().message();
  ASSERT_EQ(empty->size(), 1u);
  EXPECT_NE((*empty)[0].find("a.tsv is empty (0 bytes)"), std::string::npos)
      << (*empty)[0];
  Expected<std::vector<std::string>> missing = checked(dir / "nowhere/*.tsv");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("matched no files"),
            std::string::npos)
      << missing.status().message();
}

TEST(ApiPipeline, NoJitPlanIsThePlanOfARunWithoutKernels) {
  TempDir dir;
  auto [jit, plain] = openJitAndPlain(criteoSpec(dir));
  ASSERT_TRUE(jit && plain);
  Expected<runtime::Plan> folded = jit->noJitPlan();
  ASSERT_TRUE(folded) << folded.status().message();
  EXPECT_EQ(folded->serialize(), plain->plan().serialize());
  // A pipeline made from a plan has no spec to compile again.
  EXPECT_FALSE(Pipeline::fromPlan(jit->plan())->noJitPlan());
}

TEST(ApiPipeline, ExplainPrintsThePlanOpenMakes) {
  TempDir dir;
  std::string spec = criteoSpec(dir);
  OpenOptions o;
  o.jit = false;
  std::ostringstream err;
  o.diagnostics = &err;
  auto p = openOk(spec, o);
  ASSERT_TRUE(p);
  ExplainOptions what;
  what.ir = "plan";
  std::ostringstream out;
  EXPECT_EQ(Pipeline::explain(spec, o, what, out), 0) << err.str();
  EXPECT_EQ(out.str(), p->plan().serialize());
  // Usage errors exit 2 with the driver's message.
  what.ir = "plam";
  std::ostringstream none;
  EXPECT_EQ(Pipeline::explain(spec, o, what, none), 2);
  EXPECT_NE(err.str().find("unknown --ir 'plam'"), std::string::npos)
      << err.str();
  EXPECT_EQ(none.str(), "");
  EXPECT_EQ(Pipeline::explain(dir / "nothing.yaml", o, {}, none), 2);
}

TEST(ApiPipeline, PinBatchesIsARunOption) {
  const std::string images =
      "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  if (!std::ifstream(images).good())
    GTEST_SKIP() << "needs " << images;
  TempDir dir;
  // 128 images of 28x28 u8 a batch: 100 KB, a field pinned batches lock.
  std::string spec = dir.write("fm.yaml", "pipeline: fm\n"
                                          "source:\n"
                                          "  idx: {images: " +
                                              images +
                                              "}\n"
                                              "steps:\n"
                                              "  - take: 1024\n"
                                              "  - batch: {size: 128}\n");
  OpenOptions off;
  off.jit = false;
  auto plain = openOk(spec, off);
  ASSERT_TRUE(plain);
  std::vector<std::string> want = drain(*plain);
  ASSERT_EQ(want.size(), 8u);
  // Asked for without a registrar: refused, saying so.
  runtime::setHostRegistrar(nullptr);
  auto refused = openOk(spec, off);
  ASSERT_TRUE(refused);
  refused->options().pinBatches = true;
  Status s = refused->start();
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("no host memory registrar"), std::string::npos)
      << s.message();
  // With one: the batches are registered, the bytes the same.
  runtime::setHostRegistrar(runtime::makeRecordingRegistrar(false));
  auto pinned = openOk(spec, off);
  ASSERT_TRUE(pinned);
  pinned->options().pinBatches = true;
  EXPECT_EQ(drain(*pinned), want);
  pinned->stop();
  std::optional<runtime::RegistrarLog> log = runtime::registrarLog();
  runtime::setHostRegistrar(nullptr);
  ASSERT_TRUE(log);
  EXPECT_GT(log->registrations, 0);
  EXPECT_EQ(log->doubleRegistrations, 0);
  EXPECT_EQ(log->strayUnregistrations, 0);
}

} // namespace
} // namespace sluice
