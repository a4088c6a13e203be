//===- compiler_plan_test.cpp - compiler::buildPlan against the front end -===//
//
// With no graph pass changing anything, the Plan must hold exactly what the
// front end checked: the runtime then sees the same parameters (values,
// defaults, key order, spec positions) whether a Plan came from the compiler
// or was built from a Spec directly.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Compiler.h"
#include "sluice/dsl/Spec.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>

using namespace sluice;

namespace {

const std::string kNoops = "sluice-eliminate-noops";

std::unique_ptr<dsl::Spec> parseFile(const std::string &path) {
  std::string text, error;
  if (!dsl::readFile(path, text, error)) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  dsl::DiagnosticEngine diags(path, text);
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  std::ostringstream printed;
  diags.print(printed);
  EXPECT_TRUE(spec) << printed.str();
  return spec;
}

/// A spec written to a fresh temporary file.
class TempSpec {
public:
  explicit TempSpec(const std::string &yaml) {
    char dir[] = "/tmp/sluice_plan_XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/spec.yaml";
    std::ofstream(path_) << yaml;
  }
  ~TempSpec() {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string &path() const { return path_; }
  const std::string &dir() const { return dir_; }

private:
  std::string dir_, path_;
};

// Every graph pass off: the Plan must then be exactly the front end's.
runtime::Plan
plan(const dsl::Spec &spec,
     std::vector<std::string> disabled = compiler::graphPassNames()) {
  std::ostringstream err;
  Expected<runtime::Plan> p =
      compiler::buildPlan(spec, compiler::PlanOptions{disabled}, err);
  EXPECT_TRUE(p) << p.status().message() << "\n" << err.str();
  EXPECT_EQ(err.str(), "");
  return p ? p.take() : runtime::Plan();
}

std::string locStr(SourceLoc l) {
  return std::to_string(l.line) + ":" + std::to_string(l.col);
}

/// Value::operator== ignores positions; the runtime's messages do not.
void expectSamePositions(const Value &got, const Value &want,
                         const std::string &path) {
  EXPECT_EQ(locStr(got.loc()), locStr(want.loc())) << path;
  EXPECT_EQ(got.contentOffset(), want.contentOffset()) << path;
  if (got.isList() && want.isList() &&
      got.items().size() == want.items().size())
    for (size_t i = 0; i < got.items().size(); ++i)
      expectSamePositions(got.items()[i], want.items()[i],
                          path + "[" + std::to_string(i) + "]");
  if (got.isMap() && want.isMap())
    for (const auto &[key, item] : want.entries())
      if (const Value *g = got.get(key))
        expectSamePositions(*g, item, path + "." + key);
}

/// The knobs of a fixed schedule as the spec states them: `default`, then
/// the step's own entry, knob by knob; `none` means no cache. The source's
/// parallelism (its requests in flight) comes from its own entry only.
void expectKnobs(const runtime::PlanStep &stage, const dsl::Spec &spec) {
  std::optional<int64_t> parallelism, prefetch;
  std::optional<std::string> cache;
  for (const std::string &key : {std::string("default"), stage.name}) {
    auto it = spec.schedule.find(key);
    if (it == spec.schedule.end())
      continue;
    if (key != "default" || stage.name != spec.source.name)
      if (it->second.parallelism)
        parallelism = it->second.parallelism;
    if (it->second.prefetch)
      prefetch = it->second.prefetch;
    if (it->second.cache) {
      if (*it->second.cache == "none")
        cache.reset();
      else
        cache = it->second.cache;
    }
  }
  EXPECT_EQ(stage.schedule.parallelism, parallelism) << stage.name;
  EXPECT_EQ(stage.schedule.prefetch, prefetch) << stage.name;
  EXPECT_EQ(stage.schedule.cache, cache) << stage.name;
}

void expectStep(const runtime::PlanStep &got, const dsl::Step &want,
                const RecordType &input, const dsl::Spec &spec) {
  SCOPED_TRACE("stage " + want.name);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.op, want.op);
  ASSERT_NE(want.def, nullptr);
  EXPECT_EQ(got.kind, want.def->kind);
  EXPECT_EQ(got.params, want.params)
      << "got  " << got.params.str() << "\nwant " << want.params.str();
  expectSamePositions(got.params, want.params, want.name);
  EXPECT_EQ(got.inputType, input)
      << got.inputType.str() << " vs " << input.str();
  EXPECT_EQ(got.outputType, want.outputType)
      << got.outputType.str() << " vs " << want.outputType.str();
  EXPECT_EQ(locStr(got.loc), locStr(want.loc));
  expectKnobs(got, spec);
}

/// The whole plan against the spec, stage for stage.
void expectPlanOfSpec(const runtime::Plan &p, const dsl::Spec &spec,
                      const std::string &baseDir) {
  EXPECT_EQ(p.name, spec.pipeline);
  EXPECT_EQ(p.specFile, spec.file);
  EXPECT_EQ(p.baseDir, baseDir);
  EXPECT_EQ(p.seed, spec.seed);
  EXPECT_EQ(p.epochs, spec.epochs);
  EXPECT_EQ(p.cores, spec.budget.cores);
  EXPECT_EQ(p.memoryBytes, spec.budget.memoryBytes);
  expectStep(p.source, spec.source, RecordType(), spec);
  ASSERT_EQ(p.steps.size(), spec.steps.size());
  RecordType input = spec.source.outputType;
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    expectStep(p.steps[i], spec.steps[i], input, spec);
    input = spec.steps[i].outputType;
  }
  EXPECT_EQ(p.outputType(), spec.outputType());
}

class SpecFilePlan : public testing::TestWithParam<std::string> {};

TEST_P(SpecFilePlan, EqualsTheFrontEndsSpec) {
  std::string dir = std::string(SLUICE_SOURCE_DIR) + "/" +
                    GetParam().substr(0, GetParam().rfind('/'));
  std::unique_ptr<dsl::Spec> spec =
      parseFile(std::string(SLUICE_SOURCE_DIR) + "/" + GetParam());
  ASSERT_TRUE(spec);
  runtime::Plan p = plan(*spec);
  expectPlanOfSpec(p, *spec, dir);
}

TEST_P(SpecFilePlan, SurvivesItsJsonForm) {
  std::unique_ptr<dsl::Spec> spec =
      parseFile(std::string(SLUICE_SOURCE_DIR) + "/" + GetParam());
  ASSERT_TRUE(spec);
  runtime::Plan p = plan(*spec, {});
  std::string json = p.serialize();
  Expected<runtime::Plan> back = runtime::Plan::deserialize(json);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->serialize(), json);
  ASSERT_EQ(back->steps.size(), p.steps.size());
  for (size_t i = 0; i < p.steps.size(); ++i)
    EXPECT_EQ(back->steps[i].params, p.steps[i].params) << p.steps[i].name;
}

INSTANTIATE_TEST_SUITE_P(
    Specs, SpecFilePlan,
    testing::Values("examples/imagenet.yaml", "examples/criteo.yaml",
                    "examples/fashion_mnist.yaml", "examples/text.yaml",
                    "tests/compiler/Inputs/all-ops.yaml",
                    "tests/compiler/Inputs/noops.yaml"),
    [](const testing::TestParamInfo<std::string> &info) {
      std::string name = info.param.substr(info.param.rfind('/') + 1);
      name = name.substr(0, name.find('.'));
      for (char &c : name)
        if (!isalnum(static_cast<unsigned char>(c)))
          c = '_';
      return name;
    });

// Parameters the spec leaves out, nested structs, repeats of an op and
// every schedule form, in one pipeline.
const char *kMixed = R"(pipeline: mixed
seed: 9223372036854775807
source:
  csv:
    files: "*.csv"
    columns:
      - {type: i64, name: label}
      - {name: dense, count: 4, type: f32}
steps:
  - map: {expr: "x * 2", field: dense}
  - map: {field: label, as: label2, expr: 'x + 1'}
  - normalize: {field: dense, mean: 1, std: [1, 2, 3, 4]}
  - padded_batch: {size: 2, pad_value: 1}
  - unbatch
  - skip: 0
  - cache: {to: disk, path: cache}
epochs: 3
budget: {cores: 1, memory: 1KiB}
schedule:
  default: {cache: memory, prefetch: 1}
  map.2: {parallelism: 3, cache: none}
  skip: {prefetch: 0}
)";

TEST(Plan, KeepsParametersAsTheSpecWroteThem) {
  TempSpec file(kMixed);
  std::unique_ptr<dsl::Spec> spec = parseFile(file.path());
  ASSERT_TRUE(spec);
  runtime::Plan p = plan(*spec);
  expectPlanOfSpec(p, *spec, file.dir());
  EXPECT_EQ(p.seed, 9223372036854775807u);
  ASSERT_EQ(p.steps.size(), 7u);
  EXPECT_EQ(p.steps[1].name, "map.2");
  EXPECT_EQ(p.steps[1].schedule.parallelism, 3);
  EXPECT_FALSE(p.steps[1].schedule.cache);
  EXPECT_EQ(p.steps[0].schedule.cache, "memory");
  // Written order first, then defaults in registry order.
  std::vector<std::string> keys;
  for (const auto &entry : p.steps[1].params.entries())
    keys.push_back(entry.first);
  ASSERT_GE(keys.size(), 3u);
  EXPECT_EQ((std::vector<std::string>(keys.begin(), keys.begin() + 3)),
            (std::vector<std::string>{"field", "as", "expr"}));
}

TEST(Plan, LeavesOutTheStagesThePassesRemove) {
  TempSpec file(kMixed);
  std::unique_ptr<dsl::Spec> spec = parseFile(file.path());
  ASSERT_TRUE(spec);
  // `skip: 0` is scheduled, so it stays; without the schedule entry it goes.
  runtime::Plan kept = plan(*spec, {});
  ASSERT_EQ(kept.steps.size(), spec->steps.size());
  EXPECT_EQ(kept.steps[5].name, "skip");
  EXPECT_EQ(kept.steps[5].schedule.prefetch, 0);

  std::string yaml = kMixed;
  yaml.erase(yaml.find("  skip: {prefetch: 0}\n"));
  TempSpec unscheduled(yaml);
  spec = parseFile(unscheduled.path());
  ASSERT_TRUE(spec);
  runtime::Plan removed = plan(*spec, {});
  ASSERT_EQ(removed.steps.size(), spec->steps.size() - 1);
  for (const runtime::PlanStep &stage : removed.steps)
    EXPECT_NE(stage.name, "skip");
  // The stages around the gap are unchanged and still chained.
  EXPECT_EQ(removed.steps[5].name, "cache");
  EXPECT_EQ(removed.steps[5].inputType, removed.steps[4].outputType);
  expectStep(removed.steps[5], spec->steps[6], spec->steps[5].outputType,
             *spec);
}

TEST(Plan, RejectsUnknownPassNames) {
  TempSpec file(kMixed);
  std::unique_ptr<dsl::Spec> spec = parseFile(file.path());
  ASSERT_TRUE(spec);
  std::ostringstream err;
  Expected<runtime::Plan> p = compiler::buildPlan(
      *spec, compiler::PlanOptions{{"sluice-eliminate-noop"}}, err);
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("did you mean 'sluice-eliminate-noops'"),
            std::string::npos)
      << p.status().message();
  EXPECT_EQ(err.str(), "");
  EXPECT_FALSE(compiler::checkPassNames({"sluice-eliminate-noop"}));
  EXPECT_TRUE(compiler::checkPassNames({kNoops}));
}

TEST(Plan, ReportsCompileErrorsAtTheSpec) {
  TempSpec file(kMixed);
  std::unique_ptr<dsl::Spec> spec = parseFile(file.path());
  ASSERT_TRUE(spec);
  // Only a front-end bug gets a checked spec past MLIRGen's checks; this
  // fakes one.
  spec->steps[1].def = nullptr;
  std::ostringstream err;
  Expected<runtime::Plan> p =
      compiler::buildPlan(*spec, compiler::PlanOptions(), err);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(),
            "could not compile " + file.path() + " (1 error)");
  EXPECT_NE(err.str().find(file.path() + ":11:5: error: internal: step "
                                         "'map.2' has no registry entry"),
            std::string::npos)
      << err.str();
}

} // namespace
