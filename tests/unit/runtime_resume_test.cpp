//===- runtime_resume_test.cpp - PipelineState, resume and ranks ----------===//
//
// For every kind of stream op, stopping after k outputs (every k), saving
// Pipeline::state() through its JSON form and resuming a new Pipeline gives
// exactly the outputs an uninterrupted run produces after the first k.
// Ranks read disjoint shares whose union is the whole epoch, and a run
// checkpointed at one world size resumes at another with every remaining
// record once. The data is real CSV text read by the csv source.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

namespace sluice::rttest {
namespace {

struct Case {
  const char *name;
  const char *steps;
  bool positional; ///< resumes by position (else by replay)
};

const Case kCases[] = {
    {"plain", "", true},
    {"map_batch",
     "  - map: {field: half, expr: \"x * 2\"}\n  - batch: {size: 3}\n", true},
    {"shuffle", "  - shuffle: 6\n", false},
    {"shuffle_batch", "  - shuffle: 5\n  - batch: {size: 4}\n", false},
    {"filter", "  - filter: \"id % 3 != 1\"\n  - batch: {size: 2}\n", false},
    {"take_skip", "  - skip: 3\n  - take: 12\n", false},
    {"repeat", "  - repeat: 2\n  - shuffle: 4\n", false},
    {"unbatch", "  - batch: {size: 4}\n  - unbatch: {}\n", false},
    {"interleave", "  - interleave: {cycle_length: 2}\n", false},
    {"cache", "  - cache: {}\n  - shuffle: 3\n", false},
};

class ResumeTest : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override { writeIdCsvs(dir_); }

  runtime::Plan plan(const std::string &steps, int64_t epochs = 2) {
    return idCsvPlan(dir_, "resume", steps, epochs);
  }

  TempDir dir_;
};

/// Runs `k` outputs, returns them and the state after them.
std::vector<Output> head(const runtime::Plan &plan,
                         const runtime::RunOptions &opts, int64_t k,
                         runtime::PipelineState &state) {
  std::vector<Output> outs;
  auto p = runtime::Pipeline::create(plan, opts);
  EXPECT_TRUE(bool(p)) << (p ? "" : p.status().message());
  if (!p)
    return outs;
  runtime::Batch b;
  for (int64_t i = 0; i < k; ++i) {
    Expected<bool> more = (*p)->next(b);
    EXPECT_TRUE(more && *more);
    if (!more || !*more)
      break;
    outs.push_back({b.fields(), b.epoch()});
  }
  state = (*p)->state();
  return outs;
}

bool sameOutputs(const std::vector<Output> &a, const std::vector<Output> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].epoch != b[i].epoch || a[i].fields.size() != b[i].fields.size())
      return false;
    for (size_t f = 0; f < a[i].fields.size(); ++f)
      if (!a[i].fields[f].sameAs(b[i].fields[f]))
        return false;
  }
  return true;
}

TEST_P(ResumeTest, ResumeAfterEveryOutputGivesTheRestExactly) {
  const Case &c = GetParam();
  runtime::Plan p = plan(c.steps);
  runtime::RunOptions opts;
  opts.threads = 2;
  std::vector<Output> full = runAll(p, opts);
  ASSERT_FALSE(full.empty());
  for (int64_t k = 0; k <= static_cast<int64_t>(full.size()); ++k) {
    runtime::PipelineState st;
    std::vector<Output> first = head(p, opts, k, st);
    EXPECT_EQ(st.positionStart >= 0, c.positional) << c.name;
    // Through the JSON form, as a checkpoint file would carry it.
    Expected<runtime::PipelineState> back =
        runtime::PipelineState::fromJson(st.toJson());
    ASSERT_TRUE(bool(back)) << back.status().message();
    EXPECT_LT(st.toJson().size(), 400u);
    runtime::RunOptions again = opts;
    again.threads = 1 + (k % 2); // any thread count resumes the same
    again.resume = *back;
    std::vector<Output> rest = runAll(p, again);
    first.insert(first.end(), rest.begin(), rest.end());
    EXPECT_TRUE(sameOutputs(full, first)) << c.name << " after " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ResumeTest, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.name; });

TEST_F(ResumeTest, RanksReadDisjointSharesCoveringTheEpoch) {
  runtime::Plan p = plan("  - map: {field: half, expr: \"x + 1\"}\n", 1);
  std::vector<int64_t> all;
  for (int64_t r = 0; r < 3; ++r) {
    runtime::RunOptions o;
    o.rank = r;
    o.worldSize = 3;
    std::vector<int64_t> share = ints(runAll(p, o), 0);
    for (int64_t id : share)
      EXPECT_EQ(id % 3, r);
    all.insert(all.end(), share.begin(), share.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want(20);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(all, want);
}

TEST_F(ResumeTest, WorldSizeFourResumesAtThree) {
  runtime::Plan p = plan("  - batch: {size: 2}\n", 2);
  std::multiset<int64_t> seen, nextEpoch;
  std::vector<runtime::PipelineState> states;
  for (int64_t r = 0; r < 4; ++r) {
    runtime::RunOptions o;
    o.rank = r;
    o.worldSize = 4;
    runtime::PipelineState st;
    for (const Output &out : head(p, o, 1, st))
      for (int64_t i = 0; i < out.fields[0].numElements(); ++i)
        seen.insert(out.fields[0].data<int64_t>()[i]);
    states.push_back(st);
  }
  for (int64_t r = 0; r < 3; ++r) {
    runtime::RunOptions o;
    o.rank = r;
    o.worldSize = 3;
    o.resume = states[static_cast<size_t>(r)];
    for (const Output &out : runAll(p, o))
      for (int64_t i = 0; i < out.fields[0].numElements(); ++i)
        (out.epoch == 0 ? seen : nextEpoch)
            .insert(out.fields[0].data<int64_t>()[i]);
  }
  std::multiset<int64_t> want;
  for (int64_t i = 0; i < 20; ++i)
    want.insert(i);
  EXPECT_EQ(seen, want);
  EXPECT_EQ(nextEpoch, want);
}

TEST_F(ResumeTest, StatesOnlyResumeTheirPipeline) {
  runtime::Plan p = plan("  - shuffle: 4\n");
  runtime::PipelineState st;
  head(p, {}, 3, st);
  runtime::RunOptions o;
  o.resume = st;
  EXPECT_TRUE(bool(runtime::Pipeline::create(p, o)));
  // Another schedule or budget: same pipeline.
  runtime::Plan q = p;
  q.steps[0].schedule.prefetch = 3;
  q.memoryBytes = 1 << 30;
  EXPECT_EQ(runtime::planFingerprint(p), runtime::planFingerprint(q));
  // Another parameter: refused.
  runtime::Plan r = plan("  - shuffle: 5\n");
  auto made = runtime::Pipeline::create(r, o);
  ASSERT_FALSE(bool(made));
  EXPECT_NE(made.status().message().find("another pipeline"),
            std::string::npos);
  // A replay state at another share: refused with the way out.
  o.rank = 1;
  o.worldSize = 2;
  made = runtime::Pipeline::create(p, o);
  ASSERT_FALSE(bool(made));
  EXPECT_NE(made.status().message().find("shuffle: true"), std::string::npos);
  EXPECT_FALSE(bool(runtime::PipelineState::fromJson("{\"epoch\": 1}")));
  EXPECT_FALSE(bool(runtime::PipelineState::fromJson("not json")));
}

TEST_F(ResumeTest, FirstEpochRunsThatEpochAlone) {
  runtime::Plan p = plan("  - shuffle: 6\n", 3);
  std::vector<Output> full = runAll(p);
  runtime::RunOptions o;
  o.firstEpoch = 2;
  std::vector<Output> last = runAll(p, o);
  std::vector<Output> want(full.begin() + 40, full.end());
  EXPECT_TRUE(sameOutputs(want, last));
}

} // namespace

/// Sets (or with nullptr unsets) an environment variable for one test and
/// restores it afterwards.
class EnvVar {
public:
  EnvVar(const char *name, const char *value) : name_(name) {
    const char *old = std::getenv(name);
    if (old)
      old_ = old;
    had_ = old != nullptr;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvVar() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  std::string old_;
  bool had_ = false;
};

/// resolveRanks: each value from the caller, else the spec, else the
/// environment, else 0 of 1; errors say where each value came from.
TEST_F(ResumeTest, RanksComeFromCallerThenSpecThenEnvironment) {
  struct Case {
    const char *distributed; ///< the spec's block ("" = none)
    std::optional<int64_t> argRank, argWorld;
    const char *envRank, *envWorld, *envIndex;
    int64_t rank, world; ///< expected, or -1: an error containing `error`
    const char *error;
  };
  const Case cases[] = {
      {"", {}, {}, nullptr, nullptr, nullptr, 0, 1, ""},
      {"", {}, {}, "2", "4", nullptr, 2, 4, ""},
      {"", {}, {}, nullptr, "4", "3", 3, 4, ""},
      {"", {}, {}, "1", "4", "3", 1, 4, ""},
      {"{rank: 1, world_size: 3}", {}, {}, "0", "8", nullptr, 1, 3, ""},
      {"{world_size: 3}", {}, {}, "2", "8", nullptr, 2, 3, ""},
      {"{world_size: 3}", {}, {}, nullptr, nullptr, "1", 1, 3, ""},
      {"{rank: 0, world_size: 1}", {}, {}, "3", "4", nullptr, 0, 1, ""},
      {"{rank: 1, world_size: 3}", 0, {}, nullptr, nullptr, nullptr, 0, 3, ""},
      {"{rank: 1, world_size: 3}", 4, 5, "0", "1", nullptr, 4, 5, ""},
      {"{world_size: 2}",
       {},
       {},
       "2",
       nullptr,
       nullptr,
       -1,
       -1,
       "rank 2 is out of range for world size 2 (rank from $RANK, world "
       "size from "},
      {"{rank: 1}",
       {},
       1,
       nullptr,
       nullptr,
       nullptr,
       -1,
       -1,
       ":11:21, world size from world_size;"},
      {"",
       {},
       {},
       "x",
       nullptr,
       nullptr,
       -1,
       -1,
       "$RANK must be an integer >= 0, got 'x'"},
      {"",
       {},
       {},
       nullptr,
       "0",
       nullptr,
       -1,
       -1,
       "$WORLD_SIZE must be an integer >= 1, got '0'"},
      {"{world_size: 2}", {}, {}, nullptr, "junk", nullptr, 0, 2, ""},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.distributed) +
                 " rank=" + (c.argRank ? std::to_string(*c.argRank) : "-") +
                 " env " + (c.envRank ? c.envRank : "-") + "/" +
                 (c.envWorld ? c.envWorld : "-") + "/" +
                 (c.envIndex ? c.envIndex : "-"));
    std::string extra =
        *c.distributed ? std::string("distributed: ") + c.distributed + "\n"
                       : "";
    runtime::Plan p = idCsvPlan(dir_, "ranks", "", 1, extra);
    EnvVar r("RANK", c.envRank), w("WORLD_SIZE", c.envWorld),
        i("JOB_COMPLETION_INDEX", c.envIndex);
    runtime::RankArgs args;
    args.rank = c.argRank;
    args.worldSize = c.argWorld;
    runtime::RunOptions opts;
    Status s = runtime::resolveRanks(p, args, opts);
    if (c.rank < 0) {
      ASSERT_FALSE(s.isOk());
      EXPECT_NE(s.message().find(c.error), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(opts.rank, c.rank);
    EXPECT_EQ(opts.worldSize, c.world);
  }
}

} // namespace sluice::rttest
