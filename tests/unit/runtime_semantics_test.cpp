//===- runtime_semantics_test.cpp - Record-op semantics of the runtime ----===//
//
// Table-driven: three CSV files with ids 0..19 (7, 5 and 8 rows) run through
// one or more record ops; the ids that come out (and how many outputs carry
// them) are compared with what the op's definition says.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include <algorithm>
#include <numeric>

using namespace sluice;
using namespace sluice::rttest;

namespace {

struct Case {
  const char *name;
  const char *steps; ///< YAML list items (may be empty)
  std::vector<int64_t> ids;
  int64_t outputs; ///< -1: one per id
  int64_t epochs = 1;
};

std::vector<int64_t> range(int64_t lo, int64_t hi) {
  std::vector<int64_t> v(static_cast<size_t>(hi - lo));
  std::iota(v.begin(), v.end(), lo);
  return v;
}

std::vector<int64_t> concat(std::vector<int64_t> a,
                            const std::vector<int64_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int64_t> everyNth(int64_t n, int64_t start) {
  std::vector<int64_t> v;
  for (int64_t i = start; i < 20; i += n)
    v.push_back(i);
  return v;
}

class SemanticsTest : public ::testing::TestWithParam<Case> {
protected:
  void SetUp() override { writeIdCsvs(dir_); }

  runtime::Plan plan(const std::string &steps, int64_t epochs) {
    return idCsvPlan(dir_, "semantics", steps, epochs);
  }

  TempDir dir_;
};

TEST_P(SemanticsTest, IdsMatchTheDefinition) {
  const Case &c = GetParam();
  runtime::Plan p = plan(c.steps, c.epochs);
  ASSERT_FALSE(p.source.op.empty());
  for (int threads : {1, 2}) {
    runtime::RunOptions opts;
    opts.threads = threads;
    runtime::RunStats stats;
    std::vector<Output> outs = runAll(p, opts, &stats);
    EXPECT_EQ(ints(outs, 0), c.ids) << c.name << " threads=" << threads;
    int64_t expected =
        c.outputs < 0 ? static_cast<int64_t>(c.ids.size()) : c.outputs;
    EXPECT_EQ(static_cast<int64_t>(outs.size()), expected) << c.name;
    for (const auto &s : stats.stages)
      EXPECT_TRUE(s.balanced()) << s.name << ": " << s.accountingLine();
  }
}

const Case kCases[] = {
    {"source", "", range(0, 20), -1},
    {"take", "  - take: 5\n", range(0, 5), -1},
    {"take_zero", "  - take: 0\n", {}, -1},
    {"skip", "  - skip: 17\n", range(17, 20), -1},
    {"skip_all", "  - skip: 100\n", {}, -1},
    {"skip_take", "  - skip: 3\n  - take: 4\n", range(3, 7), -1},
    {"shard", "  - shard: {num_shards: 3, index: 1}\n", everyNth(3, 1), -1},
    {"shard_last", "  - shard: {num_shards: 4, index: 3}\n", everyNth(4, 3),
     -1},
    {"repeat", "  - repeat: 2\n", concat(range(0, 20), range(0, 20)), -1},
    {"repeat_take", "  - repeat: 3\n  - take: 25\n",
     concat(range(0, 20), range(0, 5)), -1},
    {"repeat_forever_take", "  - repeat: {}\n  - take: 45\n",
     concat(concat(range(0, 20), range(0, 20)), range(0, 5)), -1},
    {"batch", "  - batch: 6\n", range(0, 20), 4},
    {"batch_drop", "  - batch: {size: 6, drop_remainder: true}\n", range(0, 18),
     3},
    {"batch_exact", "  - batch: {size: 5, drop_remainder: true}\n",
     range(0, 20), 4},
    {"batch_unbatch", "  - batch: 4\n  - unbatch: {}\n", range(0, 20), -1},
    {"batch_unbatch_rebatch", "  - batch: 3\n  - unbatch: {}\n  - batch: 7\n",
     range(0, 20), 3},
    // tf.data's interleave order over files [0..6], [7..11], [12..19].
    {"interleave",
     "  - interleave: {cycle_length: 2, block_length: 2}\n",
     {0, 1, 7, 8, 2, 3, 9, 10, 4, 5, 11, 6, 12, 13, 14, 15, 16, 17, 18, 19},
     -1},
    {"interleave_block1",
     "  - interleave: {cycle_length: 3, block_length: 1}\n",
     {0, 7, 12, 1, 8, 13, 2, 9, 14, 3, 10, 15, 4, 11, 16, 5, 17, 6, 18, 19},
     -1},
    {"filter", "  - filter: \"id % 3 == 0\"\n", everyNth(3, 0), -1},
    {"filter_batch", "  - filter: \"id >= 10\"\n  - batch: 4\n", range(10, 20),
     3},
    {"select_rename", "  - select: [id]\n  - rename: {id: key}\n", range(0, 20),
     -1},
    {"prefetch", "  - prefetch: 3\n", range(0, 20), -1},
    {"cache_memory", "  - cache: memory\n", concat(range(0, 20), range(0, 20)),
     -1, 2},
    {"cache_disk", "  - cache: disk\n  - take: 15\n",
     concat(range(0, 15), range(0, 15)), -1, 2},
    {"cache_repeat", "  - cache: memory\n  - repeat: 3\n",
     concat(concat(range(0, 20), range(0, 20)), range(0, 20)), -1},
    {"map_cast",
     "  - map: {field: id, expr: \"x * 2\"}\n  - map: {field: id, "
     "expr: \"x / 2\", dtype: i64}\n",
     range(0, 20), -1},
    {"epochs", "  - batch: 10\n", concat(range(0, 20), range(0, 20)), 4, 2},
};

INSTANTIATE_TEST_SUITE_P(Ops, SemanticsTest, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.name; });

class ShuffleTest : public SemanticsTest {};

TEST_F(ShuffleTest, IsADeterministicPermutationThatChangesPerEpoch) {
  runtime::Plan p = plan("  - shuffle: 8\n", 2);
  std::vector<Output> a = runAll(p), b = runAll(p);
  std::vector<int64_t> ia = ints(a, 0), ib = ints(b, 0);
  EXPECT_EQ(ia, ib);
  ASSERT_EQ(ia.size(), 40u);
  std::vector<int64_t> e0(ia.begin(), ia.begin() + 20),
      e1(ia.begin() + 20, ia.end());
  EXPECT_NE(e0, range(0, 20));
  EXPECT_NE(e0, e1) << "epoch 1 must be shuffled differently";
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, range(0, 20));
  EXPECT_EQ(e1, range(0, 20));
  // A buffer of 1 keeps the order.
  EXPECT_EQ(ints(runAll(plan("  - shuffle: 1\n", 1)), 0), range(0, 20));
}

TEST_F(ShuffleTest, ReshuffleOffKeepsTheOrderAcrossEpochs) {
  runtime::Plan p =
      plan("  - shuffle: {buffer: 20, reshuffle_each_epoch: false}\n", 2);
  std::vector<int64_t> ids = ints(runAll(p), 0);
  ASSERT_EQ(ids.size(), 40u);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 20),
            std::vector<int64_t>(ids.begin() + 20, ids.end()));
}

TEST_F(SemanticsTest, AccountingCountsFilteredAndDiscarded) {
  runtime::Plan p = plan("  - filter: \"id % 2 == 0\"\n  - batch: {size: 4, "
                         "drop_remainder: true}\n",
                         1);
  runtime::RunStats s;
  runAll(p, {}, &s);
  runtime::StageStats f = stageNamed(s, "filter");
  EXPECT_EQ(f.read, 20);
  EXPECT_EQ(f.emitted, 10);
  EXPECT_EQ(f.filtered, 10);
  runtime::StageStats b = stageNamed(s, "batch");
  EXPECT_EQ(b.read, 10);
  EXPECT_EQ(b.emitted, 8);
  EXPECT_EQ(b.filtered, 2);
  EXPECT_EQ(b.elementsOut, 2);

  // take stops early: a shuffle buffer still holding records reports them
  // as discarded and the equation still holds.
  runtime::Plan q = plan("  - shuffle: 8\n  - take: 3\n", 1);
  runAll(q, {}, &s);
  runtime::StageStats sh = stageNamed(s, "shuffle");
  EXPECT_EQ(sh.emitted, 3);
  EXPECT_GT(sh.discarded, 0);
  EXPECT_TRUE(sh.balanced()) << sh.accountingLine();
}

TEST_F(SemanticsTest, SelectAndRenameShapeTheOutput) {
  runtime::Plan p = plan("  - select: [half, id]\n  - rename: {half: h}\n", 1);
  auto pipe = runtime::Pipeline::create(p);
  ASSERT_TRUE(bool(pipe)) << pipe.status().message();
  EXPECT_EQ((*pipe)->outputType().str(), "h: f32, id: i64");
  runtime::Batch b;
  Expected<bool> more = (*pipe)->next(b);
  ASSERT_TRUE(more && *more);
  ASSERT_NE(b.field("h"), nullptr);
  EXPECT_EQ(b.field("h")->data<float>()[0], 0.0f);
  EXPECT_EQ(b.field("id")->data<int64_t>()[0], 0);
  EXPECT_EQ(b.field("half"), nullptr);
}

TEST_F(SemanticsTest, BinderSuppliesCompiledSteps) {
  runtime::Plan p = plan("  - map: {field: id, expr: \"x + 1\"}\n"
                         "  - filter: \"id < 10\"\n",
                         1);
  runtime::RunOptions o;
  int bound = 0;
  o.binder = [&](const runtime::PlanStep &st)
      -> std::optional<Expected<runtime::ElementFn>> {
    if (st.op != "map")
      return std::nullopt;
    ++bound;
    return Expected<runtime::ElementFn>(runtime::ElementFn(
        [](Record &rec, const runtime::ElementContext &) -> Expected<bool> {
          rec.fields[0] = Tensor::scalar<int64_t>(
              ElemType::I64, rec.fields[0].data<int64_t>()[0] * 100);
          return true;
        }));
  };
  EXPECT_EQ(ints(runAll(p, o), 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(bound, 1);
  EXPECT_EQ(ints(runAll(p), 0), range(1, 10));
}

TEST_F(SemanticsTest, InterleaveMustComeBeforeStreamOps) {
  runtime::Plan p =
      plan("  - shuffle: 4\n  - interleave: {cycle_length: 2}\n", 1);
  auto pipe = runtime::Pipeline::create(p);
  ASSERT_FALSE(bool(pipe));
  EXPECT_NE(pipe.status().message().find(
                "interleave reads the source's files round-robin, so it must "
                "come before 'shuffle'"),
            std::string::npos)
      << pipe.status().message();
}

TEST_F(SemanticsTest, PaddedBatchPadsAndCutsToLength) {
  dir_.write("text/a.txt", "a b c\nb\na a a a a\n\nc b\n");
  dir_.write("vocab.txt", "[UNK]\na\nb\nc\n");
  std::string yaml = "pipeline: padded\nsource:\n  text_lines: {files: "
                     "text/*.txt}\nsteps:\n"
                     "  - tokenize: {field: line, vocab: vocab.txt, as: "
                     "tokens}\n"
                     "  - select: [tokens]\n";
  runtime::Plan longest =
      planFromYaml(dir_, yaml + "  - padded_batch: {size: 3, pad_value: 9}\n");
  std::vector<Output> outs = runAll(longest);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].fields[0].shape(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(ints(outs, 0), (std::vector<int64_t>{1, 2, 3, 9, 9, 2, 9, 9, 9, 9,
                                                 1, 1, 1, 1, 1, 9, 9, 3, 2}));
  runtime::Plan fixed = planFromYaml(
      dir_,
      yaml + "  - padded_batch: {size: 2, length: 2, drop_remainder: "
             "true}\n",
      "fixed.yaml");
  outs = runAll(fixed);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].fields[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ints(outs, 0), (std::vector<int64_t>{1, 2, 2, 0, 1, 1, 0, 0}));
}

} // namespace
