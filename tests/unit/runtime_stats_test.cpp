//===- runtime_stats_test.cpp - Per-stage counters, table and JSON --------===//
//
// The counters the autotuner reads: every stage of the graph appears, in
// stream order, with consistent element and byte counts; `sluice run`
// prints the accounting and the table and writes the same counters as JSON.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"
#include "sluice/runtime/Metrics.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace sluice;
using namespace sluice::rttest;

namespace {

class StatsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string rows;
    for (int i = 0; i < 300; ++i)
      rows += std::to_string(i) + "," + std::to_string(i % 7) + "\n";
    dir_.write("rows.csv", rows);
    plan_ = planFromYaml(
        dir_, "pipeline: stats\nseed: 9\nsource:\n  csv:\n    files: rows.csv\n"
              "    columns:\n      - {name: id, type: i64}\n"
              "      - {name: k, type: i64}\n"
              "steps:\n"
              "  - one_hot: {field: k, depth: 7, as: hot}\n"
              "  - filter: \"k != 3\"\n"
              "  - shuffle: 50\n"
              "  - batch: {size: 32, drop_remainder: true}\n"
              "epochs: 2\n"
              "schedule:\n  one_hot: {parallelism: 2}\n"
              "  shuffle: {prefetch: 3}\n");
  }
  TempDir dir_;
  runtime::Plan plan_;
};

TEST_F(StatsTest, CountersFollowTheStream) {
  runtime::RunStats s;
  std::vector<Output> outs = runAll(plan_, {}, &s);
  std::vector<std::string> names;
  for (const auto &st : s.stages)
    names.push_back(st.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"csv", "one_hot", "filter", "shuffle",
                                      "shuffle/prefetch", "batch"}));
  // 300 rows per epoch, of which k == 3 for 43.
  int64_t kept = 300 - 43;
  EXPECT_EQ(stageNamed(s, "csv").read, 600);
  EXPECT_EQ(stageNamed(s, "filter").filtered, 2 * 43);
  EXPECT_EQ(stageNamed(s, "shuffle").read, 2 * kept);
  runtime::StageStats b = stageNamed(s, "batch");
  EXPECT_EQ(b.elementsOut, 2 * (kept / 32));
  EXPECT_EQ(b.filtered, 2 * (kept % 32));
  EXPECT_EQ(static_cast<int64_t>(outs.size()), b.elementsOut);
  EXPECT_EQ(s.outputs, b.elementsOut);
  EXPECT_EQ(s.epochsDone, 2);
  EXPECT_EQ(stageNamed(s, "one_hot").parallelism, 2);
  EXPECT_EQ(stageNamed(s, "shuffle/prefetch").bufferCapacity, 3);
  EXPECT_EQ(stageNamed(s, "shuffle").bufferCapacity, 50);
  // Each stage's output bytes are the next one's input bytes.
  for (size_t i = 1; i + 1 < s.stages.size(); ++i)
    EXPECT_EQ(s.stages[i].bytesOut, s.stages[i + 1].bytesIn)
        << s.stages[i].name;
  // i64 + i64 + f32[7] per record after one_hot, as allocated, and the
  // Tensor objects: three, or four when appending the third field grew
  // the record's vector to four slots.
  int64_t data =
      static_cast<int64_t>(2 * Tensor::zeros(ElemType::I64, {}).memoryBytes() +
                           Tensor::zeros(ElemType::F32, {7}).memoryBytes());
  int64_t slot = static_cast<int64_t>(sizeof(Tensor));
  EXPECT_GE(stageNamed(s, "one_hot").bytesOut, 600 * (data + 3 * slot));
  EXPECT_LE(stageNamed(s, "one_hot").bytesOut, 600 * (data + 4 * slot));
  for (const auto &st : s.stages) {
    EXPECT_GE(st.cpuSeconds, 0) << st.name;
    EXPECT_GE(st.wallSeconds, 0) << st.name;
  }
}

// RunOptions::stageTiming Off (SLUICE_NO_STAGE_TIMING=1), which
// bench/counter_overhead.py compares against: no clock reads or byte walks,
// so the time and byte columns of every step stay 0, while the record
// accounting and the outputs are the same as with the counters on.
TEST_F(StatsTest, StageTimingOffKeepsAccountingAndOutputs) {
  runtime::RunOptions on, off;
  on.stageTiming = runtime::RunOptions::StageTiming::On;
  off.stageTiming = runtime::RunOptions::StageTiming::Off;
  runtime::RunStats son, soff;
  std::vector<Output> a = runAll(plan_, on, &son);
  std::vector<Output> b = runAll(plan_, off, &soff);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].fields.size(), b[i].fields.size());
    for (size_t f = 0; f < a[i].fields.size(); ++f)
      EXPECT_TRUE(a[i].fields[f].sameAs(b[i].fields[f])) << i << " " << f;
  }
  ASSERT_EQ(son.stages.size(), soff.stages.size());
  bool anyTime = false;
  for (size_t i = 0; i < son.stages.size(); ++i) {
    const runtime::StageStats &x = son.stages[i], &y = soff.stages[i];
    EXPECT_EQ(x.read, y.read) << x.name;
    EXPECT_EQ(x.emitted, y.emitted) << x.name;
    EXPECT_EQ(x.filtered, y.filtered) << x.name;
    EXPECT_EQ(x.elementsOut, y.elementsOut) << x.name;
    EXPECT_GT(x.bytesOut, 0) << x.name;
    anyTime = anyTime || x.wallSeconds > 0;
    // The source's bytes read from its files and its parse workers' CPU
    // are kept (read from the readers, no clock per record).
    if (i == 0)
      continue;
    EXPECT_EQ(y.bytesIn, 0) << y.name;
    EXPECT_EQ(y.bytesOut, 0) << y.name;
    EXPECT_EQ(y.wallSeconds, 0) << y.name;
    EXPECT_EQ(y.cpuSeconds, 0) << y.name;
  }
  EXPECT_TRUE(anyTime);
}

TEST_F(StatsTest, RunPrintsAccountingTableAndJson) {
  runtime::RunOptions o;
  o.stats = true;
  o.statsJsonPath = dir_ / "stats.json";
  o.progress = runtime::RunOptions::Progress::Off;
  std::ostringstream out, err;
  ASSERT_EQ(runtime::runPipeline(plan_, o, out, err), 0) << err.str();
  EXPECT_EQ(err.str(), "");
  std::string text = out.str();
  EXPECT_NE(text.find("accounting (read = emitted + filtered + skipped"),
            std::string::npos);
  EXPECT_NE(text.find("filter            read 600 = emitted 514 + filtered "
                      "86 (where is false) + skipped 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("16 outputs in "), std::string::npos) << text;
  for (const char *col : {"stage", "cpu s", "wall s", "buffer"})
    EXPECT_NE(text.find(col), std::string::npos) << col;

  std::ifstream in(dir_ / "stats.json");
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(buf.str());
  EXPECT_EQ(j["pipeline"], "stats");
  EXPECT_EQ(j["outputs"], 16);
  const nlohmann::json &stages = j["stages"];
  ASSERT_EQ(stages.size(), 6u);
  EXPECT_EQ(stages[2]["name"], "filter");
  EXPECT_EQ(stages[2]["filtered"], 86);
  EXPECT_EQ(stages[2]["where"], plan_.specFile + ":11:5");
  EXPECT_EQ(stages[4]["buffer"]["capacity"], 3);
  for (const auto &st : stages)
    for (const char *key :
         {"read", "emitted", "filtered", "skipped", "discarded", "cpu_seconds",
          "wall_seconds", "bytes_in", "bytes_out"})
      EXPECT_TRUE(st.contains(key)) << key;
}

/// records/s counts what a run went through in source records: a pass
/// served from a cache stands for the source records read to record it,
/// and the recording pass is not counted twice (RunStats::records()).
class CacheRecordsTest : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    std::string rows;
    for (int i = 0; i < 300; ++i)
      rows += std::to_string(i) + "," + std::to_string(i % 7) + "\n";
    dir_.write("rows.csv", rows);
  }
  runtime::Plan plan(const std::string &where, const std::string &cache,
                     const std::string &after, int epochs) {
    return planFromYaml(
        dir_,
        "pipeline: cached\nseed: 9\nsource:\n  csv:\n    files: rows.csv\n"
        "    columns:\n      - {name: id, type: i64}\n"
        "      - {name: k, type: i64}\n"
        "steps:\n"
        "  - filter: \"" +
            where + "\"\n" + cache + after +
            "  - batch: {size: 32}\n"
            "epochs: " +
            std::to_string(epochs) + "\n");
  }
  std::string cache() const {
    return std::string("  - cache: ") + GetParam() + "\n";
  }
  TempDir dir_;
};

TEST_P(CacheRecordsTest, ReplayedEpochsCountTheirSourceRecordsOnce) {
  runtime::RunStats s, plain;
  std::vector<Output> outs = runAll(plan("k != 3", cache(), "", 3), {}, &s);
  std::vector<Output> ref = runAll(plan("k != 3", "", "", 3), {}, &plain);
  EXPECT_EQ(allBytes(outs), allBytes(ref));
  EXPECT_EQ(stageNamed(s, "csv").read, 300); // read once, replayed twice
  EXPECT_EQ(stageNamed(s, "cache").replayedSourceRecords, 600);
  EXPECT_EQ(stageNamed(s, "cache").read, 3 * 257); // 257 pass the filter
  EXPECT_EQ(s.records(), 900);
  EXPECT_EQ(plain.records(), 900); // the same without the cache
  EXPECT_EQ(stageNamed(plain, "csv").read, 900);
}

TEST_P(CacheRecordsTest, ARepeatAfterTheCacheCountsEveryRepetition) {
  runtime::RunStats s;
  std::vector<Output> outs =
      runAll(plan("k != 3", cache(), "  - repeat: 4\n", 1), {}, &s);
  EXPECT_EQ(stageNamed(s, "csv").read, 300);
  EXPECT_EQ(s.records(), 1200);
}

TEST_P(CacheRecordsTest, AnEmptyRecordingStandsForTheRecordsReadToMakeIt) {
  // Nothing passes the filter: the replayed passes serve no record but
  // still stand for the 300 source records each.
  runtime::RunStats s;
  std::vector<Output> outs = runAll(plan("k > 100", cache(), "", 4), {}, &s);
  EXPECT_TRUE(outs.empty());
  EXPECT_EQ(stageNamed(s, "csv").read, 300);
  EXPECT_EQ(s.records(), 1200);
}

TEST_P(CacheRecordsTest, RecordsGrowSteadilyDuringAReplayedPass) {
  // Each record a replayed pass serves credits its share: the count never
  // goes back and never runs ahead of the records that stand behind it.
  auto p = runtime::Pipeline::create(plan("k != 3", cache(), "", 2), {});
  ASSERT_TRUE(bool(p)) << p.status().message();
  runtime::Batch b;
  int64_t last = 0, epoch2Batches = 0;
  for (;;) {
    Expected<bool> more = (*p)->next(b);
    ASSERT_TRUE(bool(more)) << more.status().message();
    if (!*more)
      break;
    int64_t now = (*p)->stats().records();
    EXPECT_GE(now, last);
    EXPECT_LE(now, 600);
    if (b.epoch() == 1 && ++epoch2Batches == 4) // 128 of 257 records served
      EXPECT_GE(now, 300 + 300 * 128 / 257) << "replayed records not credited";
    last = now;
  }
  (*p)->stop();
  EXPECT_EQ((*p)->stats().records(), 600);
}

TEST_P(CacheRecordsTest, TheFinalLineAndJsonGiveRecords) {
  runtime::RunOptions o;
  o.stats = true;
  o.statsJsonPath = dir_ / "stats.json";
  o.progress = runtime::RunOptions::Progress::Off;
  std::ostringstream out, err;
  ASSERT_EQ(runtime::runPipeline(plan("k != 3", cache(), "", 3), o, out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("(900 records, "), std::string::npos) << out.str();
  std::ifstream in(dir_ / "stats.json");
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(buf.str());
  EXPECT_EQ(j["records"], 900);
}

INSTANTIATE_TEST_SUITE_P(To, CacheRecordsTest,
                         ::testing::Values("memory", "disk"));

} // namespace

// The stall meter's arithmetic on a timeline given to it (nanoseconds):
// the first output's wait is start-up; a later wait over 1 ms is a stall;
// the caller's time before an output that did not stall is headspace.
TEST(ConsumerMeterTest, SplitsWaitsStallsAndHeadspace) {
  runtime::ConsumerMeter m;
  const int64_t ms = 1000000;
  m.enter(0);
  m.leave(300 * ms, true);           // first output after 300 ms
  m.enter(310 * ms);                 // the caller worked 10 ms
  m.leave(310 * ms + ms / 10, true); // ready: 0.1 ms
  m.enter(330 * ms);                 // worked ~20 ms
  m.leave(335 * ms, true);           // waited 5 ms: a stall
  m.enter(340 * ms);                 // worked 5 ms
  m.leave(341 * ms, false);          // the end: not an output
  runtime::RunStats::Consumer c = m.snapshot();
  EXPECT_EQ(c.outputs, 3);
  EXPECT_NEAR(c.firstWaitSeconds, 0.3, 1e-12);
  EXPECT_NEAR(c.waitSeconds, 0.0051, 1e-12);
  EXPECT_NEAR(c.maxWaitSeconds, 0.005, 1e-12);
  EXPECT_EQ(c.stalls, 1);
  EXPECT_NEAR(c.awaySeconds, 0.010 + (0.020 - 0.0001), 1e-12);
  EXPECT_NEAR(c.headspaceSeconds, 0.010, 1e-12);
  EXPECT_NEAR(c.meanWaitSeconds(), 0.0051 / 2, 1e-12);
}

// The Prometheus text: one HELP and TYPE per family, label values escaped
// as the format says (a pipeline or step name may hold quotes, backslashes
// or a newline), and the stall meter's values as they are in the stats.
TEST(PrometheusTextTest, EscapesLabelsAndCarriesTheStallMeter) {
  runtime::RunStats s;
  s.pipeline = "a \"quoted\\ name\nhere";
  s.outputs = 12;
  s.consumer.outputs = 12;
  s.consumer.stalls = 4;
  s.consumer.waitSeconds = 0.25;
  runtime::StageStats st;
  st.name = "map.2";
  st.read = 7;
  s.stages.push_back(st);
  std::string t = runtime::prometheusText(s);
  const std::string label = "pipeline=\"a \\\"quoted\\\\ name\\nhere\"";
  EXPECT_NE(t.find("sluice_outputs_total{" + label + "} 12\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("sluice_consumer_stalls_total{" + label + "} 4\n"),
            std::string::npos);
  EXPECT_NE(t.find("sluice_consumer_wait_seconds_total{" + label + "} 0.25\n"),
            std::string::npos);
  EXPECT_NE(
      t.find("sluice_stage_read_total{" + label + ",stage=\"map.2\"} 7\n"),
      std::string::npos);
  EXPECT_NE(t.find("# TYPE sluice_consumer_stalls_total counter\n"),
            std::string::npos);
  // No raw newline inside a sample: every line is a comment or a sample.
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);)
    EXPECT_TRUE(line.rfind("# ", 0) == 0 || line.rfind("sluice_", 0) == 0)
        << line;
}

// A run that ends right after it started its --metrics-port server stops
// the server before the server's thread has begun listening: the stop must
// still end that thread (it used to wait in accept() for ever).
TEST(MetricsExporterTest, StopsAServerRightAfterStartingIt) {
  for (int i = 0; i < 200; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len), 0);
    ::close(fd);
    auto exporter = sluice::runtime::MetricsExporter::start(
        [] { return sluice::runtime::RunStats(); }, "127.0.0.1",
        ntohs(a.sin_port), "", 0);
    if (!exporter)
      continue;        // the port was taken meanwhile
    exporter->reset(); // stops the server; must return
  }
}
