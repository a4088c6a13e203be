//===- autotune_tune_test.cpp - tune() on a real pipeline, replay, check --===//
//
// A CSV written here, a spec through the real front end and compiler, a
// short tune: the four report files, a schedule that replays to the same
// bytes, a tight memory budget (on Fashion-MNIST, whose epoch size is known,
// so a cache is on the table) respected by the measured peak, and `check`
// failing on an injected regression (a baseline three times faster: far
// beyond any noise) and passing on an unchanged report; a close call settled
// by paired runs (the verdict forced by the margin, so nothing depends on
// which configuration the loaded host favours). No timing is asserted: the
// host is shared.
//
//===----------------------------------------------------------------------===//
#include "test_util.h"

#include "sluice/autotune/Tune.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/dsl/Spec.h"
#include "sluice/ops/Allocation.h"
#include "sluice/runtime/Pipeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace sluice;
using sluice::testing::TempDir;

namespace {

std::string csvRows(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += std::to_string(i % 7 == 0 ? -1 : i % 2) + "," +
         std::to_string(i * 0.5) + "," + std::to_string(i % 97) + "\n";
  return s;
}

struct Loaded {
  std::unique_ptr<dsl::Spec> spec;
  runtime::Plan plan;
};

Loaded load(const std::string &path) {
  std::string text, err;
  EXPECT_TRUE(dsl::readFile(path, text, err)) << err;
  dsl::DiagnosticEngine diags(path, text);
  Loaded l;
  l.spec = dsl::parseSpec(diags);
  std::ostringstream d;
  diags.print(d, false);
  EXPECT_TRUE(l.spec) << d.str();
  std::ostringstream e;
  auto plan = compiler::buildPlan(*l.spec, {}, e);
  EXPECT_TRUE(plan) << e.str();
  if (plan)
    l.plan = plan.take();
  return l;
}

/// Every output's bytes, in order.
std::string runAll(const runtime::Plan &plan, const runtime::RunOptions &o) {
  auto p = runtime::Pipeline::create(plan, o);
  EXPECT_TRUE(p) << p.status().message();
  if (!p)
    return {};
  std::string all;
  runtime::Batch b;
  for (;;) {
    auto more = (*p)->next(b);
    EXPECT_TRUE(more) << more.status().message();
    if (!more || !*more)
      break;
    for (const Tensor &t : b.fields())
      if (t.isNumeric())
        all.append(reinterpret_cast<const char *>(t.raw()), t.nbytes());
  }
  return all;
}

constexpr const char *kSpec = R"(pipeline: tune_csv
seed: 3
source:
  csv:
    files: data/*.csv
    columns:
      - {name: label, type: i64}
      - {name: x, type: f32}
      - {name: k, type: i64}
steps:
  - filter: {where: "label >= 0"}
  - map: {field: x, expr: "log(x + 1) * 2"}
  - hash_bucket: {field: k, buckets: 1000}
  - batch: {size: 64}
epochs: 3
budget: {cores: 2, memory: 64MiB}
)";

class AutotuneTune : public ::testing::Test {
protected:
  void SetUp() override {
    dir.write("data/a.csv", csvRows(20000));
    dir.write("data/b.csv", csvRows(20000));
    specPath = dir.write("tune.yaml", kSpec);
    l = load(specPath);
    opts.profile.secondsPerProbe = 0.3;
    opts.verifySeconds = 0.4;
    opts.profile.base.tempDir = dir.path();
  }
  TempDir dir;
  std::string specPath;
  Loaded l;
  autotune::TuneOptions opts;
};

} // namespace

TEST_F(AutotuneTune, WritesFourFilesThatReplayExactly) {
  auto r = autotune::tune(l.plan, opts);
  ASSERT_TRUE(r) << r.status().message();
  ASSERT_TRUE(r->measured.has_value());
  EXPECT_GT(r->measured->sourceRecordsPerSecond, 0);
  EXPECT_GT(r->solution.prediction.throughput, 0);
  EXPECT_FALSE(r->solution.prediction.bottleneckLabel.empty());
  // Selectivity of the filter: 1 in 7 rows has label -1.
  ASSERT_GE(r->profile.steps.size(), 2u);
  EXPECT_NEAR(r->profile.steps[1].selectivity, 6.0 / 7, 0.02);

  std::string out = dir / "report";
  ASSERT_TRUE(autotune::writeReports(*r, out));
  for (const char *f :
       {"schedule.yaml", "report.json", "report.md", "chart.svg"})
    EXPECT_TRUE(std::filesystem::file_size(out + "/" + f) > 0) << f;
  std::ifstream js(out + "/report.json");
  nlohmann::json j = nlohmann::json::parse(js);
  EXPECT_EQ(j["schema"], "sluice-tune-report");
  EXPECT_EQ(j["version"], autotune::kReportVersion);
  EXPECT_TRUE(j["measured"]["prediction_error"].is_number());
  EXPECT_FALSE(j["knobs"].empty());
  for (const auto &st : j["steps"])
    EXPECT_NE(st["where"].get<std::string>().find("tune.yaml:"),
              std::string::npos);

  // The schedule file parses against the spec and replays to the same
  // bytes as the default schedule (output never depends on the schedule).
  std::string text, err;
  ASSERT_TRUE(dsl::readFile(out + "/schedule.yaml", text, err));
  dsl::DiagnosticEngine diags(out + "/schedule.yaml", text);
  std::map<std::string, dsl::StepSchedule> sched;
  bool ok = dsl::parseScheduleFile(diags, *l.spec, sched);
  std::ostringstream d;
  diags.print(d, false);
  ASSERT_TRUE(ok) << d.str() << text;
  runtime::RunOptions tuned;
  tuned.tempDir = dir.path();
  for (const auto &[name, s] : sched)
    tuned.schedule[name] = s;
  EXPECT_FALSE(tuned.schedule.empty());
  runtime::RunOptions plain;
  plain.tempDir = dir.path();
  std::string a = runAll(l.plan, plain), b = runAll(l.plan, tuned);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);

  // check: unchanged passes; a baseline three times faster at a third of
  // the CPU per record fails; three times faster at the same CPU per
  // record is the host's load (another process took the cores) and passes.
  autotune::CheckResult same = autotune::check(j, j, 0.10);
  EXPECT_TRUE(same.ok) << same.text;
  ASSERT_TRUE(j["measured"]["cpu_seconds_per_record"].is_number());
  nlohmann::json faster = j;
  faster["measured"]["records_per_second"] =
      j["measured"]["records_per_second"].get<double>() * 3;
  autotune::CheckResult loaded = autotune::check(faster, j, 0.10);
  EXPECT_TRUE(loaded.ok) << loaded.text;
  EXPECT_NE(loaded.text.find("the drop is the host's load"), std::string::npos)
      << loaded.text;
  faster["measured"]["cpu_seconds_per_record"] =
      j["measured"]["cpu_seconds_per_record"].get<double>() / 3;
  autotune::CheckResult slow = autotune::check(faster, j, 0.10);
  EXPECT_FALSE(slow.ok);
  EXPECT_NE(slow.text.find("FAIL throughput"), std::string::npos) << slow.text;
  EXPECT_NE(slow.text.find("FAIL CPU per source record"), std::string::npos)
      << slow.text;
  nlohmann::json moved = j;
  // A stage the current report does not have (kind "stage"): with the
  // run's own kind, a "cpu" bottleneck on a quiet host compares the CPU's
  // capacity, which is the limit, and rightly reports no move.
  moved["bottleneck"]["label"] = "somewhere else";
  moved["bottleneck"]["kind"] = "stage";
  autotune::CheckResult m = autotune::check(moved, j, 0.10);
  EXPECT_FALSE(m.ok);
  EXPECT_NE(m.text.find("FAIL bottleneck"), std::string::npos) << m.text;
  nlohmann::json broke = j;
  broke["budget"]["memory_bytes"] = 1;
  EXPECT_FALSE(autotune::check(j, broke, 0.10).ok);
  EXPECT_FALSE(autotune::check(nlohmann::json::object(), j, 0.1).ok);
}

TEST_F(AutotuneTune, CloseCallRunsBothAndKeepsTheMeasuredFaster) {
  // A solution and a close call made by hand on the real plan (whether the
  // solver finds one depends on the profile): the parallel stage at the
  // other parallelism. The margin decides deterministically: any measured
  // ratio beats a margin of -1, none beats 1e9.
  opts.verify = false;
  opts.probeCachedEpochs = false;
  opts.measureCloseCalls = false;
  opts.closeCallSeconds = 0.2;
  auto r = autotune::tune(l.plan, opts);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_FALSE(r->solution.closeCall.has_value() &&
               !r->closeCallNote.empty()); // not settled with it off
  std::vector<runtime::Lane> us =
      autotune::lanes(r->profile, r->solution.config.cache.after);
  autotune::Config other = r->solution.config;
  size_t k = us.size();
  for (size_t i = 0; i < us.size(); ++i)
    if (us[i].parallel && us[i].pinned == 0)
      k = i;
  ASSERT_LT(k, us.size()) << "the plan has a free parallel stage";
  other.parallelism[k] = other.parallelism[k] == 1 ? 2 : 1;
  const autotune::Config chosen = r->solution.config;
  auto withCall = [&] {
    autotune::TuneResult x = *r;
    x.solution.closeCall = other;
    x.solution.closeCallGain = -0.004;
    return x;
  };
  auto parAt = [&](const autotune::Schedule &s) {
    for (size_t i : us[k].steps) {
      auto it = s.find(r->profile.steps[i].name);
      if (it != s.end() && it->second.parallelism)
        return *it->second.parallelism;
    }
    return int64_t(-1);
  };

  autotune::TuneOptions keep = opts;
  keep.closeCallMargin = 1e9;
  // Whole runs are chosen when one is predicted to take at most a quarter of
  // closeCallSeconds, from a profile that a loaded host slows: 0.2 s gave
  // 0.05 s, which a starved profile exceeded (windows were measured). 8 s
  // allows 2 s per run; quiet, a run here takes a few hundredths of that.
  keep.closeCallSeconds = 8;
  autotune::TuneResult a = withCall();
  ASSERT_TRUE(autotune::settleCloseCall(l.plan, keep, a));
  EXPECT_EQ(a.solution.config.parallelism, chosen.parallelism);
  EXPECT_EQ(parAt(a.schedule), chosen.parallelism[k]);
  EXPECT_NE(a.closeCallNote.find("paired whole runs"), std::string::npos)
      << a.closeCallNote; // 3 epochs of 40,000 rows: whole runs
  EXPECT_NE(a.closeCallNote.find("the chosen one stays"), std::string::npos)
      << a.closeCallNote;
  EXPECT_EQ(a.solution.notes.back(), a.closeCallNote);

  autotune::TuneOptions take = opts;
  take.closeCallMargin = -1;
  autotune::TuneResult b = withCall();
  ASSERT_TRUE(autotune::settleCloseCall(l.plan, take, b));
  EXPECT_EQ(b.solution.config.parallelism, other.parallelism);
  EXPECT_EQ(parAt(b.schedule), other.parallelism[k]);
  EXPECT_NE(b.closeCallNote.find("the close call is kept"), std::string::npos)
      << b.closeCallNote;
  bool explained = false;
  for (const autotune::KnobChoice &kc : b.solution.knobs)
    if (kc.knob == "parallelism" &&
        kc.value == std::to_string(other.parallelism[k]))
      explained = kc.reason.find("close call") != std::string::npos &&
                  kc.reason.find("paired runs") != std::string::npos;
  EXPECT_TRUE(explained);
  // The schedule is the close call's, so it still replays to the same
  // bytes as the runtime's defaults.
  runtime::RunOptions plain, replay;
  plain.tempDir = replay.tempDir = dir.path();
  replay.schedule = b.schedule;
  EXPECT_EQ(runAll(l.plan, plain), runAll(l.plan, replay));

  // A whole run predicted longer than a quarter of the time given:
  // steady-state windows instead, three pairs.
  autotune::TuneOptions windows = keep;
  windows.closeCallSeconds = 1e-4;
  windows.closeCallWindowSeconds = 0.1;
  autotune::TuneResult w = withCall();
  ASSERT_TRUE(autotune::settleCloseCall(l.plan, windows, w));
  EXPECT_NE(w.closeCallNote.find("measured 3 paired windows"),
            std::string::npos)
      << w.closeCallNote;

  // Cached configurations compare on whole runs only: with a memory cache
  // after the filter (the plan's first step, deterministic) and no time
  // for a whole run, nothing runs and the note says why.
  {
    autotune::TuneResult x = withCall();
    autotune::CacheOption cache{1, "memory", 0};
    ASSERT_EQ(autotune::lanes(x.profile, 1).size(), us.size());
    x.solution.config.cache = cache;
    x.solution.closeCall->cache = cache;
    ASSERT_TRUE(autotune::settleCloseCall(l.plan, windows, x));
    EXPECT_EQ(x.solution.config.parallelism, chosen.parallelism);
    EXPECT_NE(x.closeCallNote.find("not measured: only whole runs compare"),
              std::string::npos)
        << x.closeCallNote;
  }

  // Off by name: nothing runs, the note says so.
  ::setenv("SLUICE_NO_CLOSE_CALLS", "1", 1);
  autotune::TuneResult c = withCall();
  Status s = autotune::settleCloseCall(l.plan, take, c);
  ::unsetenv("SLUICE_NO_CLOSE_CALLS");
  ASSERT_TRUE(s);
  EXPECT_EQ(c.solution.config.parallelism, chosen.parallelism);
  EXPECT_NE(c.closeCallNote.find("not measured (SLUICE_NO_CLOSE_CALLS=1)"),
            std::string::npos)
      << c.closeCallNote;
}

/// A spec over Fashion-MNIST's test split (Debian's dataset-fashion-mnist)
/// in `dir`, or "" when the package is not installed.
static std::string fashionMnistSpec(TempDir &dir, const std::string &name,
                                    const std::string &steps,
                                    const std::string &rest) {
  const std::string dirName = SLUICE_FASHION_MNIST_DIR;
  if (!std::filesystem::exists(dirName + "/t10k-images-idx3-ubyte.gz"))
    return "";
  return dir.write("fm.yaml",
                   "pipeline: " + name +
                       "\nseed: 1\nsource:\n"
                       "  idx:\n    images: " +
                       dirName +
                       "/t10k-images-idx3-ubyte.gz\n    labels: " + dirName +
                       "/t10k-labels-idx1-ubyte.gz\nsteps:\n" + steps + rest);
}

TEST(AutotuneTuneMemory, TightMemoryIsRespectedAndExplained) {
  // Fashion-MNIST's test split (Debian's dataset-fashion-mnist): 10000
  // records, 12.5 MiB after the source, more after normalize. Three epochs
  // make a cache worth having; 8 MiB leaves room for the shuffle buffer and
  // batches but not for a memory cache.
  TempDir dir;
  std::string spec = fashionMnistSpec(
      dir, "fm_tight",
      "  - normalize: {field: image, mean: 72.94, std: 90.02}\n"
      "  - random_flip: {field: image, axis: width}\n"
      "  - shuffle: {buffer: 500}\n"
      "  - batch: {size: 128}\n",
      "epochs: 3\nbudget: {cores: 2}\n");
  if (spec.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Loaded l = load(spec);
  autotune::TuneOptions opts;
  opts.profile.secondsPerProbe = 0.3;
  opts.verifySeconds = 0.5;
  opts.profile.base.tempDir = dir.path();
  const int64_t budget = 8 << 20;
  opts.memoryBytes = budget;
  auto r = autotune::tune(l.plan, opts);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->budget.memoryBytes, budget);
  EXPECT_LE(r->solution.prediction.memoryBytes, budget);
  ASSERT_TRUE(r->measured.has_value());
  EXPECT_LE(r->measured->memoryPeak, budget);
  EXPECT_NE(r->solution.config.cache.to, "memory");
  bool noted = false;
  for (const std::string &n : r->solution.notes)
    noted = noted || n.find("a memory cache after 'idx' (12.") == 0;
  EXPECT_TRUE(noted);
  std::string md = autotune::reportMarkdown(*r);
  EXPECT_NE(md.find("memory 8 MiB (--memory)"), std::string::npos) << md;
  EXPECT_NE(md.find("does not fit budget.memory 8 MiB"), std::string::npos)
      << md;

  // With room nothing is ruled out for memory, and a cache may follow the
  // source or normalize but never random_flip.
  opts.memoryBytes = 512 << 20;
  auto roomy = autotune::tune(l.plan, opts);
  ASSERT_TRUE(roomy) << roomy.status().message();
  for (const std::string &n : roomy->solution.notes)
    EXPECT_EQ(n.find("does not fit"), std::string::npos) << n;
  EXPECT_LE(roomy->solution.config.cache.after, 1); // never after random_flip
}

TEST(AutotuneTuneMemory, AShuffleBufferLargerThanTheDataSetHoldsOnePass) {
  // A buffer of a million records over Fashion-MNIST's 10,000 holds 10,000
  // at most (sluice-hoist-shuffle puts it before the normalize: ~8 MiB of
  // u8 images): the tune fits in 64 MiB and predicts the buffer at that
  // size, not at a million records (0.8 GB).
  TempDir dir;
  std::string spec = fashionMnistSpec(
      dir, "fm_big_shuffle",
      "  - normalize: {field: image, mean: 72.94, std: 90.02}\n"
      "  - shuffle: {buffer: 1000000}\n"
      "  - batch: {size: 500}\n",
      "budget: {cores: 2, memory: 64MiB}\n");
  if (spec.empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Loaded l = load(spec);
  autotune::TuneOptions opts;
  opts.profile.secondsPerProbe = 0.3;
  opts.verifySeconds = 0.5;
  opts.profile.base.tempDir = dir.path();
  auto r = autotune::tune(l.plan, opts);
  ASSERT_TRUE(r) << r.status().message();
  bool seen = false;
  for (const autotune::StepProfile &st : r->profile.steps)
    if (st.op == "shuffle") {
      seen = true;
      // One pass (10,000 records) times the records per source record the
      // probes measured at the shuffle (1 within a percent).
      EXPECT_GE(st.heldRecords, 9900);
      EXPECT_LE(st.heldRecords, 10100);
    }
  EXPECT_TRUE(seen);
  EXPECT_LE(r->solution.prediction.memoryBytes, int64_t(64) << 20);
  EXPECT_GE(r->solution.prediction.memoryBytes, int64_t(7) << 20);
  ASSERT_TRUE(r->measured.has_value());
  EXPECT_LE(r->measured->memoryPeak, int64_t(64) << 20);
}

TEST_F(AutotuneTune, PlansForABiggerHostWithoutMeasuring) {
  opts.cores = 16;
  auto r = autotune::tune(l.plan, opts);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_TRUE(r->otherHost || sluice::hostCores() >= 16);
  if (r->otherHost) {
    EXPECT_FALSE(r->measured.has_value());
    EXPECT_NE(r->scaleAdvice.find("At 16 cores the limit is"),
              std::string::npos)
        << r->scaleAdvice;
    nlohmann::json j = autotune::reportJson(*r);
    EXPECT_TRUE(j["measured"].is_null());
    EXPECT_EQ(j["budget"]["cores"], 16);
  }
}

// Re-planning in flight: the profile is taken on cheap lines only; the run
// then meets lines 300 times longer (per-record cost follows the tokens).
// The re-planner, started from the naive schedule (one worker), must see
// the drift, re-solve and raise the parallelism while the run goes on,
// and the outputs must equal the fixed schedule's.
TEST(AutotuneReplan, DriftRaisesParallelismInFlightSameBytes) {
  TempDir dir;
  std::string shortLines, longLines;
  const char *words[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 20000; ++i)
    shortLines += std::string(words[i % 4]) + " b c\n";
  for (int i = 0; i < 1500; ++i) {
    for (int k = 0; k < 1000; ++k)
      longLines += std::string(words[(i + k) % 4]) + " ";
    longLines += "\n";
  }
  dir.write("data/1-cheap.txt", shortLines);
  dir.write("data/2-dear.txt", longLines);
  dir.write("vocab.txt", "[UNK]\na\nb\nc\nd\n");
  auto spec = [&](const std::string &glob) {
    return std::string("pipeline: drift\nsource:\n  text_lines: data/") + glob +
           "\nsteps:\n"
           "  - tokenize: {field: line, vocab: vocab.txt}\n"
           "  - cast: {field: line, dtype: f32}\n"
           "  - map: {field: line, expr: \"sqrt(abs(sin(x) * cos(x / 3) + "
           "exp(-x / 255) * log(x + 1) + tanh(x / 64)))\"}\n"
           "  - truncate: {field: line, length: 4}\n"
           "  - padded_batch: {size: 16}\n"
           "budget: {cores: 2}\n";
  };
  Loaded cheap = load(dir.write("cheap.yaml", spec("1-cheap.txt")));
  Loaded all = load(dir.write("all.yaml", spec("*.txt")));
  autotune::ProfileOptions po;
  po.secondsPerProbe = 0.3;
  po.base.tempDir = dir.path();
  auto prof = autotune::profilePipeline(cheap.plan, po);
  ASSERT_TRUE(prof) << prof.status().message();
  autotune::Budget budget;
  budget.cores = 2;
  autotune::Config naive = autotune::naiveConfig(*prof);
  autotune::ReplanOptions ro;
  ro.interval = 0.01;
  ro.minElements = 16;
  ro.cooldown = 0.05;
  auto replanner =
      std::make_shared<autotune::Replanner>(*prof, budget, naive, ro);

  runtime::RunOptions fixed;
  fixed.threads = 2;
  fixed.tempDir = dir.path();
  fixed.schedule = autotune::toSchedule(*prof, naive);
  runtime::RunOptions o = fixed;
  o.controller = replanner;
  std::string expected = runAll(all.plan, fixed);
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(runAll(all.plan, o), expected);

  std::vector<autotune::ReplanEvent> ev = replanner->events();
  ASSERT_FALSE(ev.empty()) << "no re-plan in " << replanner->looks()
                           << " looks";
  EXPECT_NE(ev.front().why.find("costs"), std::string::npos) << ev.front().why;
  std::string changes;
  for (const autotune::ReplanEvent &e : ev)
    for (const std::string &c : e.changes)
      changes += c + "\n";
  // Tokenizing is where the cost grew 300 times, but the map stage's own
  // cost per record follows the line length too: on a loaded host the
  // drift measured first can be the map's, and the re-plan raises that
  // stage. Either way a stage goes from one worker to two in flight.
  bool raised = false;
  for (const autotune::ReplanEvent &e : ev)
    for (const std::string &c : e.changes)
      raised |= c.rfind("parallelism of '", 0) == 0 &&
                c.find("' 1 -> 2") != std::string::npos;
  EXPECT_TRUE(raised) << changes;
  std::string report = replanner->report();
  EXPECT_NE(report.find("re-planned"), std::string::npos) << report;
  std::cout << report;
}
