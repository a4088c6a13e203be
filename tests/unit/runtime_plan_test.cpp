//===- runtime_plan_test.cpp - The Plan's serialized form -----------------===//
//
// A compiled executable embeds its Plan as JSON, so serialize/deserialize
// must be exact: every Value kind (int vs float, NaN/inf, nested maps in
// order), spec positions, record types with dynamic dims, schedule knobs.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>

using namespace sluice;
using namespace sluice::runtime;

namespace {

/// Value equality including spec positions (Value::operator== ignores them).
void expectSameValue(const Value &a, const Value &b, const std::string &path) {
  EXPECT_TRUE(a == b) << path << ": " << a.str() << " vs " << b.str();
  EXPECT_EQ(a.kind(), b.kind()) << path;
  EXPECT_EQ(a.loc().line, b.loc().line) << path;
  EXPECT_EQ(a.loc().col, b.loc().col) << path;
  EXPECT_EQ(a.contentOffset(), b.contentOffset()) << path;
  if (a.isFloat() && b.isFloat() && !std::isnan(a.asDouble()))
    EXPECT_EQ(std::signbit(a.asDouble()), std::signbit(b.asDouble())) << path;
  if (a.isList() && b.isList() && a.items().size() == b.items().size())
    for (size_t i = 0; i < a.items().size(); ++i)
      expectSameValue(a.items()[i], b.items()[i],
                      path + "[" + std::to_string(i) + "]");
  if (a.isMap() && b.isMap() && a.entries().size() == b.entries().size())
    for (size_t i = 0; i < a.entries().size(); ++i) {
      EXPECT_EQ(a.entries()[i].first, b.entries()[i].first) << path;
      expectSameValue(a.entries()[i].second, b.entries()[i].second,
                      path + "." + a.entries()[i].first);
    }
}

void expectSameStep(const PlanStep &a, const PlanStep &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.kind, b.kind);
  expectSameValue(a.params, b.params, a.name);
  EXPECT_EQ(a.inputType, b.inputType) << a.name;
  EXPECT_EQ(a.outputType, b.outputType) << a.name;
  EXPECT_EQ(a.loc.line, b.loc.line);
  EXPECT_EQ(a.loc.col, b.loc.col);
  EXPECT_EQ(a.schedule.parallelism, b.schedule.parallelism);
  EXPECT_EQ(a.schedule.prefetch, b.schedule.prefetch);
  EXPECT_EQ(a.schedule.cache, b.schedule.cache);
}

void expectSamePlan(const Plan &a, const Plan &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.specFile, b.specFile);
  EXPECT_EQ(a.baseDir, b.baseDir);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.cores, b.cores);
  EXPECT_EQ(a.memoryBytes, b.memoryBytes);
  expectSameStep(a.source, b.source);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i)
    expectSameStep(a.steps[i], b.steps[i]);
}

Plan trickyPlan() {
  Plan p;
  p.name = "tricky \"pipeline\"\n";
  p.specFile = "dir with spaces/spec.yaml";
  p.baseDir = "dir with spaces";
  p.seed = std::numeric_limits<uint64_t>::max();
  p.epochs = -1;
  p.cores = 3;
  p.memoryBytes = int64_t(1) << 40;
  p.source.name = "csv";
  p.source.op = "csv";
  p.source.kind = OpKind::Source;
  Value params = Value::map({1, 1});
  params.set("files", Value::string("data/*.csv", {2, 12}));
  Value cols = Value::list({}, {3, 5});
  Value col = Value::map({4, 9});
  col.set("name", Value::string("x\ty", {4, 16}));
  col.set("count", Value::integer(std::numeric_limits<int64_t>::min()));
  cols.items().push_back(col);
  params.set("columns", cols);
  p.source.params = params;
  p.source.outputType = RecordType({{"x", FieldType(ElemType::F16, {13})}});
  p.source.loc = {3, 3};

  PlanStep st;
  st.name = "map.2";
  st.op = "map";
  st.kind = OpKind::Element;
  Value mp = Value::map();
  Value expr = Value::string("log(max(x, 0) + 1)", {7, 30});
  expr.setContentOffset(1);
  mp.set("expr", expr);
  mp.set("nan", Value::real(std::nan("")));
  mp.set("inf", Value::real(std::numeric_limits<double>::infinity()));
  mp.set("ninf", Value::real(-std::numeric_limits<double>::infinity()));
  mp.set("negzero", Value::real(-0.0));
  mp.set("three", Value::real(3.0));
  mp.set("three_int", Value::integer(3));
  mp.set("tiny", Value::real(5e-324));
  mp.set("null", Value::null({9, 9}));
  mp.set("flag", Value::boolean(true));
  mp.set("unicode", Value::string("caf\xc3\xa9 \xe4\xb8\xad"));
  st.params = mp;
  std::vector<Field> fields;
  for (std::string_view n : allElemTypeNames())
    fields.push_back({"f_" + std::string(n),
                      FieldType(*parseElemType(n), {kDynamic, 0, 7})});
  st.inputType = RecordType(fields);
  st.outputType = RecordType({{"scalar", FieldType(ElemType::Bool)}});
  st.loc = {7, 5};
  st.schedule.parallelism = 4;
  st.schedule.prefetch = 0;
  st.schedule.cache = "disk";
  p.steps.push_back(st);
  PlanStep batch;
  batch.name = "batch";
  batch.op = "batch";
  batch.kind = OpKind::Record;
  batch.params = Value::map();
  p.steps.push_back(batch);
  return p;
}

TEST(Plan, FusedStepsReportTheirFirstOp) {
  runtime::PlanStep s;
  s.op = "normalize";
  s.name = "normalize.3";
  EXPECT_EQ(s.reportedOp(), "normalize");
  s.op = "decode_random_resized_crop";
  s.name = "decode_image+random_resized_crop+random_flip";
  EXPECT_EQ(s.reportedOp(), "decode_image");
  s.name = "decode_image.2+random_resized_crop.2";
  EXPECT_EQ(s.reportedOp(), "decode_image");
}

TEST(Plan, SerializeRoundTripsExactly) {
  Plan p = trickyPlan();
  std::string text = p.serialize();
  Expected<Plan> back = Plan::deserialize(text);
  ASSERT_TRUE(bool(back)) << back.status().message() << "\n" << text;
  expectSamePlan(p, *back);
  EXPECT_EQ(back->serialize(), text);
  EXPECT_EQ(p.where(p.steps[0]), "dir with spaces/spec.yaml:7:5");
  EXPECT_EQ(p.where(p.steps[1]), "dir with spaces/spec.yaml");
}

TEST(Plan, UnsetKnobsKeepThePlanFormat) {
  // The stage without knobs: written as plans always wrote unset knobs
  // (0, -1, ""), read back unset; so existing plans and the plans compiled
  // executables embed still load.
  Plan p = trickyPlan();
  std::string text = p.serialize();
  nlohmann::json j = nlohmann::json::parse(text);
  const nlohmann::json &written = j["stages"][1];
  EXPECT_EQ(written["parallelism"], 0);
  EXPECT_EQ(written["prefetch"], -1);
  EXPECT_EQ(written["cache"], "");
  Expected<Plan> back = Plan::deserialize(text);
  ASSERT_TRUE(bool(back)) << back.status().message();
  const PlanStep &batch = back->steps[1];
  EXPECT_FALSE(batch.schedule.parallelism);
  EXPECT_FALSE(batch.schedule.prefetch);
  EXPECT_FALSE(batch.schedule.cache);
  // A prefetch of 0 is a knob, not unset.
  EXPECT_EQ(back->steps[0].schedule.prefetch, 0);
  // "none" (meaning no cache) reads as unset too.
  j["stages"][1]["cache"] = "none";
  Expected<Plan> none = Plan::deserialize(j.dump());
  ASSERT_TRUE(bool(none)) << none.status().message();
  EXPECT_FALSE(none->steps[1].schedule.cache);
}

TEST(Plan, SerializeRoundTripsAnExampleSpec) {
  rttest::TempDir dir;
  dir.write("data/a.csv", "1,2\n");
  runtime::Plan p = rttest::planFromYaml(
      dir, "pipeline: ex\nseed: 42\nsource:\n  csv:\n    files: data/*.csv\n"
           "    columns:\n      - {name: label, type: i64}\n"
           "      - {name: dense, type: f32}\n"
           "steps:\n  - filter: {where: \"label >= 0\"}\n"
           "  - map: {field: dense, expr: \"log(max(x, 0) + 1)\"}\n"
           "  - shuffle: 16\n  - batch: {size: 4, drop_remainder: true}\n"
           "budget: {cores: 2, memory: 1GiB}\n"
           "schedule:\n  map: {parallelism: 2, prefetch: 4}\n"
           "distributed: {world_size: 3}\n");
  Expected<Plan> back = Plan::deserialize(p.serialize());
  ASSERT_TRUE(bool(back)) << back.status().message();
  expectSamePlan(p, *back);
  EXPECT_EQ(back->serialize(), p.serialize());
  EXPECT_FALSE(back->rank.has_value());
  ASSERT_TRUE(back->worldSize.has_value());
  EXPECT_EQ(*back->worldSize, 3);
  EXPECT_EQ(back->where(back->worldSizeLoc), p.where(p.worldSizeLoc));
  EXPECT_EQ(back->worldSizeLoc.line, 17);
  EXPECT_EQ(back->steps[1].schedule.parallelism, 2);
  EXPECT_EQ(back->memoryBytes, int64_t(1) << 30);
  // The deserialized plan runs like the original.
  runtime::RunOptions rank0;
  rank0.rank = 0;
  rank0.worldSize = 3;
  EXPECT_EQ(rttest::allBytes(rttest::runAll(*back, rank0)),
            rttest::allBytes(rttest::runAll(p, rank0)));
  // A plan without `distributed:` writes neither key.
  EXPECT_EQ(trickyPlan().serialize().find("worldSize"), std::string::npos);
}

TEST(Plan, DeserializeErrorsNameThePath) {
  std::string good = trickyPlan().serialize();
  struct Edit {
    std::string from, to, expect;
  };
  for (const Edit &e :
       {Edit{"\"format\": \"sluice-plan\"", "\"format\": \"other\"",
             "format is 'other'"},
        Edit{"\"version\": 1", "\"version\": 99", "version 99"},
        Edit{"\"elem\": \"f16\"", "\"elem\": \"f17\"",
             "plan.source.outputType[0].elem: unknown element type 'f17'"},
        Edit{"\"kind\": \"element\"", "\"kind\": \"weird\"",
             "plan.stages[0].kind"},
        Edit{"\"t\": \"int\"", "\"t\": \"integer\"", "unknown value kind"},
        Edit{"\"seed\": 18446744073709551615", "\"seed\": -1", "plan.seed"}}) {
    std::string text = good;
    size_t at = text.find(e.from);
    ASSERT_NE(at, std::string::npos) << e.from;
    text.replace(at, e.from.size(), e.to);
    Expected<Plan> p = Plan::deserialize(text);
    ASSERT_FALSE(bool(p)) << e.to;
    EXPECT_NE(p.status().message().find(e.expect), std::string::npos)
        << p.status().message();
  }
  EXPECT_FALSE(bool(Plan::deserialize("")));
  EXPECT_FALSE(bool(Plan::deserialize("[]")));
}

TEST(Plan, MalformedJsonIsLocated) {
  struct Bad {
    const char *text;
    const char *where;
  };
  for (const Bad &b :
       {Bad{"{\"a\": [1, 2,]}", "line 1, column 13"},
        Bad{"{\"a\" 1}", "line 1, column 6"},
        Bad{"[1,\n 2", "line 2, column 3"}, Bad{"\"abc", "line 1, column 5"},
        Bad{"{} x", "line 1, column 4"}, Bad{"tru", "line 1, column 4"}}) {
    Expected<Plan> p = Plan::deserialize(b.text);
    ASSERT_FALSE(bool(p)) << b.text;
    EXPECT_NE(p.status().message().find(std::string("invalid plan: JSON ")),
              std::string::npos)
        << p.status().message();
    EXPECT_NE(p.status().message().find(b.where), std::string::npos)
        << b.text << " -> " << p.status().message();
  }
  // Hostile nesting neither overflows the stack nor is accepted.
  EXPECT_FALSE(bool(Plan::deserialize(std::string(100000, '['))));
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(bool(Plan::deserialize(deep)));
}

TEST(Plan, NumbersAndStringsAreExact) {
  Plan p = trickyPlan();
  Value extremes = Value::map();
  for (double v :
       {0.1, 1.0 / 3, 1e300, 5e-324, -2.5, 123456789.0, -0.0,
        std::numeric_limits<double>::max(), std::numeric_limits<double>::min()})
    extremes.set("d" + std::to_string(extremes.entries().size()),
                 Value::real(v));
  extremes.set("imax", Value::integer(std::numeric_limits<int64_t>::max()));
  extremes.set("imin", Value::integer(std::numeric_limits<int64_t>::min()));
  // Bytes that are not UTF-8 (a hand-built plan, a path from argv).
  extremes.set("raw\xff", Value::string(std::string("a\xff\xfe\0b", 5)));
  p.steps[1].params = extremes;
  p.specFile = "dir/\xc3(.yaml";
  std::string text = p.serialize();
  Expected<Plan> back = Plan::deserialize(text);
  ASSERT_TRUE(bool(back)) << back.status().message() << "\n" << text;
  expectSamePlan(p, *back);
  EXPECT_EQ(back->serialize(), text);
  const auto &entries = back->steps[1].params.entries();
  for (size_t i = 0; i + 3 < entries.size(); ++i) {
    double a = extremes.entries()[i].second.asDouble();
    double b = entries[i].second.asDouble();
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << entries[i].first;
  }
  EXPECT_EQ(back->specFile, "dir/\xc3(.yaml");
  EXPECT_EQ(entries.back().second.asString(), std::string("a\xff\xfe\0b", 5));
  // Everything it writes is valid JSON a standard reader accepts.
  EXPECT_NO_THROW((void)nlohmann::json::parse(text));
}

} // namespace
