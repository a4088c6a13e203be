//===- sources_csv_parallel_test.cpp - Block-parallel csv parsing ---------===//
//
// The csv reader cuts a file into blocks of whole records and parses them
// on other threads (ReadAhead, RunOptions::parallelParse). Nothing it
// returns may change: every case reads real files once with the reader's
// defaults (the reference) and again with blocks of a few bytes, parsed
// inline, on one thread and on two, and compares every record's bytes and
// every error's message, location and order. The texts put quoted fields
// with line breaks and delimiters, CRLF, blank lines and bad rows all over
// the file, so that they straddle block boundaries.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"
#include "sources_test_util.h"

#include "sluice/runtime/Memory.h"
#include "sluice/runtime/TaskHandoff.h"

#include <oneapi/tbb/task_arena.h>

using namespace sluice;
using namespace sluice::testing;
using sluice::runtime::ReadAhead;
using sluice::runtime::Source;

namespace {

struct TextCase {
  const char *name;
  const char *eol;
  bool gz;
  bool header;
  bool bom;
  bool unterminated; ///< the file ends inside a quoted field
};

std::ostream &operator<<(std::ostream &os, const TextCase &c) {
  return os << c.name;
}

/// ~150 records of id: i64, score: f32, name: string, h: hex32 x2 with
/// quoting, blank lines and one bad row of each kind every 25 records.
std::string makeText(const TextCase &c) {
  std::string eol = c.eol, t;
  if (c.bom)
    t += "\xEF\xBB\xBF";
  if (c.header)
    t += eol + "id,score,\"na" + eol + "me\",h0,h1" + eol; // blank line first
  for (int i = 0; i < 150; ++i) {
    std::string id = std::to_string(i * 7 - 20);
    std::string score = i % 5 == 0 ? "" : std::to_string(i) + ".25";
    std::string name;
    switch (i % 6) {
    case 0:
      name = "plain" + std::to_string(i);
      break;
    case 1:
      name = "\"with, comma\"";
      break;
    case 2:
      name = "\"two" + eol + "lines" + eol + "and more\"";
      break;
    case 3:
      name = "\"say \"\"hi\"\"\"";
      break;
    case 4:
      name = "";
      break;
    default:
      name = "\"\"";
    }
    std::string row = id + "," + score + "," + name + ",ab" +
                      std::to_string(i % 10) + "," + (i % 4 == 0 ? "" : "FF");
    switch (i % 25) {
    case 7:
      row = id + "," + score; // too few columns
      break;
    case 11:
      row = "x" + id + ",1,a,0,0"; // bad number
      break;
    case 15:
      row = id + ",1,a,zz,0"; // bad hex32
      break;
    case 19:
      row = id + ",1,\"a\"b,0,0"; // text after the closing quote
      break;
    case 23:
      row = ",1,a,0,0"; // empty integer
      break;
    case 24:
      row += ",extra"; // too many columns
      break;
    }
    t += row + eol;
    if (i % 9 == 4)
      t += eol; // blank line
  }
  if (c.unterminated)
    t += "1,2,\"never" + eol + "closed,0,0" + eol + "3,4,c,0,0" + eol;
  else
    t += "999,0.5,last,1,2"; // no final line break
  return t;
}

std::vector<Value> columns() {
  auto col = [](const char *name, const char *type, int64_t count = 1) {
    Value c = params({{"name", str(name)}, {"type", str(type)}});
    if (count != 1)
      c.set("count", integer(count));
    return c;
  };
  return {col("id", "i64"), col("score", "f32"), col("name", "string"),
          col("h", "hex32", 2)};
}

/// Everything a reader returned, in order, as comparable text and bytes.
struct Transcript {
  std::string events;              ///< per shard: r/e per result, then '|'
  std::string bytes;               ///< records: index and fields' bytes
  std::vector<std::string> errors; ///< message, reason and location
  std::vector<uint64_t> bytesRead; ///< per shard, after its end
};

void appendRecord(std::string &out, const Record &r) {
  out += std::to_string(r.index) + ":";
  for (const Tensor &t : r.fields) {
    out += t.type().str() + "=";
    if (t.isNumeric())
      out.append(reinterpret_cast<const char *>(t.raw()), t.nbytes());
    else
      for (const std::string &s : t.stringValues())
        out += s + '\0';
  }
  out += '\n';
}

/// Reads every shard; `ra` (if any) is given to each reader, with `stopAt`
/// results read before the reader is dropped mid-file (0: to the end).
Transcript read(const Source &src, const ReadAhead *ra, size_t stopAt = 0) {
  Transcript tr;
  for (size_t s = 0; s < src.numShards(); ++s) {
    std::unique_ptr<runtime::ShardReader> reader = src.open(s);
    if (ra)
      reader->setReadAhead(*ra);
    for (size_t n = 0; stopAt == 0 || n < stopAt; ++n) {
      Record rec;
      runtime::ReadResult r = reader->next(rec);
      if (r.isEnd())
        break;
      if (r.isError()) {
        const runtime::DataError &e = r.error();
        tr.events += 'e';
        tr.errors.push_back(
            e.message() + " [" + e.reason + "] field '" + e.where.field +
            "' line " + std::to_string(e.where.line) + " offset " +
            std::to_string(e.where.offset) + " record " +
            std::to_string(e.where.record) + (e.recoverable ? "" : " fatal"));
        continue;
      }
      tr.events += 'r';
      appendRecord(tr.bytes, rec);
    }
    tr.events += '|';
    if (stopAt == 0)
      tr.bytesRead.push_back(reader->bytesRead());
  }
  return tr;
}

void expectSame(const Transcript &got, const Transcript &ref) {
  EXPECT_EQ(got.events, ref.events);
  EXPECT_TRUE(got.bytes == ref.bytes) << "records differ";
  ASSERT_EQ(got.errors.size(), ref.errors.size());
  for (size_t i = 0; i < ref.errors.size(); ++i)
    EXPECT_EQ(got.errors[i], ref.errors[i]);
  EXPECT_EQ(got.bytesRead, ref.bytesRead);
}

class CsvBlocks : public ::testing::TestWithParam<TextCase> {};

TEST_P(CsvBlocks, AnyBlockSizeAndThreadsReadTheSame) {
  const TextCase &c = GetParam();
  std::string text = makeText(c);
  TempDir dir;
  // Two shards: the second starts over (header, BOM, line 1, record 0).
  for (const char *name : {"a.csv", "b.csv"}) {
    if (c.gz)
      dir.writeGz(std::string(name) + ".gz", text);
    else
      dir.write(name, text);
  }
  auto src = make("csv",
                  params({{"files", str("*.csv*")},
                          {"header", boolean(c.header)},
                          {"columns", list(columns())}}),
                  dir.path());
  ASSERT_TRUE(src);

  Transcript ref = read(*src, nullptr);
  // The reference itself is what the text says.
  size_t good = static_cast<size_t>(
      std::count(ref.events.begin(), ref.events.end(), 'r'));
  EXPECT_EQ(good, c.unterminated ? 2u * 114 : 2u * 115);
  EXPECT_EQ(ref.errors.size(), 2u * (36 + (c.unterminated ? 1 : 0)));
  if (!c.gz)
    EXPECT_EQ(ref.bytesRead, (std::vector<uint64_t>(2, text.size())));

  for (size_t block : {1, 7, 64, 500}) {
    SCOPED_TRACE("block " + std::to_string(block));
    ReadAhead inline_;
    inline_.blockBytes = block;
    {
      SCOPED_TRACE("inline");
      expectSame(read(*src, &inline_), ref);
    }
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      runtime::TaskArena arena(threads, 1); // waits for its tasks
      runtime::MemoryBudget budget(0);
      ReadAhead ra = inline_;
      ra.spawn = [&arena](std::function<void()> f) {
        runtime::enqueueTask(arena, std::move(f));
      };
      ra.memory = budget.account("read-ahead");
      ra.maxInFlight = 3;
      expectSame(read(*src, &ra), ref);
      // Stopping mid-file cancels or waits for every block, leaving
      // nothing charged.
      Transcript part = read(*src, &ra, 40);
      EXPECT_EQ(part.events.substr(0, 40), ref.events.substr(0, 40));
      EXPECT_GT(budget.peak(), 0);
      EXPECT_EQ(budget.used(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Texts, CsvBlocks,
    ::testing::Values(
        TextCase{"lf", "\n", false, false, false, false},
        TextCase{"crlf_header_bom", "\r\n", false, true, true, false},
        TextCase{"lf_header_gz", "\n", true, true, false, false},
        TextCase{"crlf_gz_unterminated", "\r\n", true, false, false, true},
        TextCase{"lf_bom_unterminated", "\n", false, false, true, true}),
    [](const ::testing::TestParamInfo<TextCase> &i) { return i.param.name; });

/// A header that never closes its quote is the error, at line 1 (or after
/// the blank lines before it) and record 0, with any block size.
TEST(CsvBlocks, UnterminatedHeader) {
  TempDir dir;
  dir.write("h.csv", "\n\"id,x\n1,2\n");
  auto src = make("csv",
                  params({{"files", str("h.csv")},
                          {"header", boolean(true)},
                          {"columns", list({columns()[0], columns()[1]})}}),
                  dir.path());
  ASSERT_TRUE(src);
  Transcript ref = read(*src, nullptr);
  ASSERT_EQ(ref.errors.size(), 1u);
  EXPECT_NE(ref.errors[0].find("line 2 offset 1 record 0 fatal"),
            std::string::npos)
      << ref.errors[0];
  ReadAhead ra;
  ra.blockBytes = 2;
  expectSame(read(*src, &ra), ref);
}

/// Text with no quote and no carriage return takes the reader's fast path
/// (RecordScanner::scanSimple); SLUICE_NO_FAST_CSV=1 sends every record
/// through the general scan. Both must return the same records, errors,
/// lines and offsets: every kind of cell the fast path converts itself
/// (digits, minus signs, -0, empty cells, 1 to 8 hex digits, upper case)
/// and every kind it hands back (decimals, exponents, spaces, '+', long
/// numbers, 9+ hex digits, bad values, wrong cell counts, invalid UTF-8).
TEST(CsvFastPath, SameAsGeneralScan) {
  std::string t;
  const char *ints[] = {"0",
                        "7",
                        "-3",
                        "-0",
                        "123456789012345678",
                        "1234567890123456789",
                        "-9223372036854775808",
                        "+5",
                        " 12",
                        "x1",
                        ""};
  const char *floats[] = {"",
                          "0",
                          "-0",
                          "42",
                          "-17",
                          "123456789012345",
                          "1234567890123456",
                          "0.1",
                          "-2.5e-3",
                          "1e39",
                          "1e-50",
                          " 3 ",
                          "+4",
                          "nan",
                          "-inf",
                          "1x",
                          "-"};
  const char *hexes[] = {"",         "0",        "a",        "FF",
                         "deadbeef", "DEADBEEF", "0badf00d", "123456789",
                         " ab",      "zz",       "g0000000"};
  const char *names[] = {"plain", "", "caf\xc3\xa9", "bad\xff", "sp ace"};
  for (int i = 0; i < 400; ++i) {
    std::string row = ints[i % 11];
    row += std::string(",") + floats[i % 17] + "," + floats[(i / 3) % 17];
    row += std::string(",") + hexes[i % 11] + "," + hexes[(i / 2) % 11];
    row += std::string(",") + names[i % 5];
    if (i % 37 == 5)
      row = "1,2"; // too few
    if (i % 41 == 9)
      row += ",extra"; // too many
    if (i % 29 == 3)
      t += "\n"; // blank line
    t += row + "\n";
  }
  t += "5,1,2,a,b,last"; // no final line break
  TempDir dir;
  dir.write("f.csv", t);
  auto col = [](const char *name, const char *type) {
    return params({{"name", str(name)}, {"type", str(type)}});
  };
  Value cols =
      list({col("i", "i64"), col("f", "f32"), col("d", "f64"),
            col("h", "hex32"), col("h2", "hex32"), col("s", "string")});
  auto open = [&](bool fast) {
    if (fast)
      unsetenv("SLUICE_NO_FAST_CSV");
    else
      setenv("SLUICE_NO_FAST_CSV", "1", 1);
    auto src = make("csv", params({{"files", str("f.csv")}, {"columns", cols}}),
                    dir.path());
    unsetenv("SLUICE_NO_FAST_CSV");
    return src;
  };
  auto general = open(false), fast = open(true);
  ASSERT_TRUE(general && fast);
  Transcript ref = read(*general, nullptr);
  // The file holds good and bad records of every kind.
  EXPECT_GT(std::count(ref.events.begin(), ref.events.end(), 'r'), 50);
  EXPECT_GT(ref.errors.size(), 50u);
  expectSame(read(*fast, nullptr), ref);
  for (size_t block : {1, 64, 300, 4096}) {
    SCOPED_TRACE("block " + std::to_string(block));
    ReadAhead ra;
    ra.blockBytes = block;
    expectSame(read(*fast, &ra), ref);
  }
}

// The whole pipeline: a multi-block Criteo-like file with bad rows in later
// blocks, parallel parsing off (the reference) and on at one and two
// threads, under on_error skip (same outputs and skip counts) and fail
// (same message).
std::string criteoText(int rows) {
  std::string t;
  uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  char hex[16];
  for (int r = 0; r < rows; ++r) {
    t += std::to_string(next() % 2);
    for (int i = 0; i < 13; ++i)
      t += '\t' +
           (next() % 7 == 0 ? std::string() : std::to_string(next() % 9000));
    for (int i = 0; i < 26; ++i) {
      std::snprintf(hex, sizeof hex, "%08llx",
                    static_cast<unsigned long long>(next() & 0xffffffffu));
      t += '\t' + (next() % 11 == 0 ? std::string() : std::string(hex));
    }
    t += '\n';
    if (r % 9000 == 8999)
      t += "1\t2\t3\n"; // too few columns, every ~2 MB
    if (r % 13000 == 12999)
      t += "1" + std::string(13, '\t') + std::string(26, '\t') + "zz\n";
  }
  return t;
}

struct RunResult {
  std::string bytes;
  std::string error;
  std::string accounting;
};

/// Runs `plan` under `o` to the end: its bytes, error and accounting lines
/// (with each stage's byte and element counts when `withBytes`), checking
/// that the accounting balances and no memory is left counted.
RunResult runPlan(const runtime::Plan &plan, const runtime::RunOptions &o,
                  bool withBytes, int64_t *rowsFromRuns = nullptr) {
  RunResult res;
  auto p = runtime::Pipeline::create(plan, o);
  EXPECT_TRUE(bool(p)) << (p ? "" : p.status().message());
  if (!p)
    return res;
  std::vector<rttest::Output> outs;
  runtime::Batch b;
  for (;;) {
    Expected<bool> more = (*p)->next(b);
    if (!more) {
      res.error = more.status().message();
      break;
    }
    if (!*more)
      break;
    outs.push_back({b.fields(), b.epoch()});
  }
  (*p)->stop();
  res.bytes = rttest::allBytes(outs);
  runtime::RunStats s = (*p)->stats();
  for (const runtime::StageStats &st : s.stages) {
    res.accounting += st.accountingLine();
    if (withBytes)
      res.accounting += " in " + std::to_string(st.bytesIn) + " out " +
                        std::to_string(st.bytesOut) + " elements " +
                        std::to_string(st.elementsOut);
    res.accounting += "\n";
    if (rowsFromRuns && st.op == "batch")
      *rowsFromRuns = st.rowsFromRuns;
  }
  Status bal = s.checkBalanced();
  EXPECT_TRUE(bal.isOk()) << bal.message();
  EXPECT_EQ(s.memoryInUse, 0);
  return res;
}

RunResult runCriteo(const runtime::Plan &plan, int threads, bool parallel) {
  runtime::RunOptions o;
  o.threads = threads;
  o.parallelParse = parallel;
  return runPlan(plan, o, /*withBytes=*/false);
}

TEST(CsvParallelPipeline, SameOutputsSkipsAndErrors) {
  TempDir dir;
  dir.write("d/day_0.tsv", criteoText(30000)); // ~7 MB, several blocks
  dir.write("d/day_1.tsv", criteoText(5000));
  for (const char *onError : {"skip", "fail"}) {
    SCOPED_TRACE(onError);
    runtime::Plan plan = rttest::planFromYaml(
        dir, "pipeline: criteo\n" + criteoTsvSource("d/day_*.tsv", onError) +
                 "steps:\n"
                 "  - filter: {where: \"label >= 1\"}\n"
                 "  - fill_missing: {field: dense, value: 0}\n"
                 "  - hash_bucket: {field: cat, buckets: 1000}\n"
                 "  - batch: {size: 1000}\n");
    RunResult ref = runCriteo(plan, 2, false);
    if (std::string(onError) == "skip") {
      EXPECT_TRUE(ref.error.empty()) << ref.error;
      EXPECT_NE(ref.accounting.find("skipped 5"), std::string::npos)
          << ref.accounting;
    } else {
      EXPECT_NE(ref.error.find("day_0.tsv:9001: record 9000"),
                std::string::npos)
          << ref.error;
    }
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      RunResult got = runCriteo(plan, threads, true);
      EXPECT_TRUE(got.bytes == ref.bytes) << "outputs differ";
      EXPECT_EQ(got.error, ref.error);
      if (ref.error.empty())
        EXPECT_EQ(got.accounting, ref.accounting);
    }
  }
}

/// `batch` pulls runs of records (Stage::nextMany: the source and the
/// inline filter time and count a run at once); SLUICE_NO_BULK_PULL=1 pulls
/// one record at a time. Outputs, errors and every stage's accounting are
/// the same, with bad rows (skipped, or failing the run mid-batch), a
/// filter that drops records, a step after it, and a partial last batch.
TEST(CsvParallelPipeline, BulkPullSameAsPerRecord) {
  TempDir dir;
  dir.write("d/day_0.tsv", criteoText(20000));
  for (const char *onError : {"skip", "fail"}) {
    SCOPED_TRACE(onError);
    runtime::Plan plan = rttest::planFromYaml(
        dir, "pipeline: bulk\n" + criteoTsvSource("d/day_*.tsv", onError) +
                 "steps:\n"
                 "  - filter: {where: \"label >= 1\"}\n"
                 "  - clamp: {field: dense, min: 0, max: 100}\n"
                 "  - batch: {size: 777}\n");
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      setenv("SLUICE_NO_BULK_PULL", "1", 1);
      RunResult ref = runCriteo(plan, threads, true);
      unsetenv("SLUICE_NO_BULK_PULL");
      RunResult got = runCriteo(plan, threads, true);
      EXPECT_FALSE(ref.bytes.empty());
      EXPECT_TRUE(got.bytes == ref.bytes) << "outputs differ";
      EXPECT_EQ(got.error, ref.error);
      if (std::string(onError) == "fail")
        EXPECT_NE(ref.error.find("day_0.tsv:9001: record 9000"),
                  std::string::npos)
            << ref.error;
      else
        EXPECT_EQ(got.accounting, ref.accounting);
    }
  }
}

RunResult runCriteoRuns(const runtime::Plan &plan, int threads, bool runs,
                        int64_t *rowsFromRuns = nullptr) {
  runtime::RunOptions o;
  o.threads = threads;
  o.recordRuns = runs;
  // Bytes too: a run counts what its records would have.
  return runPlan(plan, o, /*withBytes=*/true, rowsFromRuns);
}

/// Record runs (RunOptions::recordRuns): `batch` after a csv/tsv source and
/// inline filters copies runs of rows from the parsed blocks' columns. The
/// outputs, errors and every stage's counts (bytes included) equal those of
/// building each record, with bad rows (skipped, or failing the run
/// mid-batch), filters that drop rows or every row, two files, a partial
/// last batch or drop_remainder, one and two threads (one thread parses on
/// the consumer's thread, two in blocks on the workers).
TEST(CsvParallelPipeline, RecordRunsSameAsRecords) {
  TempDir dir;
  dir.write("d/day_0.tsv", criteoText(30000));
  dir.write("d/day_1.tsv", criteoText(5000));
  const char *stepsCases[] = {
      "  - filter: {where: \"label >= 1\"}\n"
      "  - filter: {where: \"dense[2] < 4000 or cat[25] % 3 == 1\"}\n"
      "  - batch: {size: 777}\n",
      "  - batch: {size: 1000, drop_remainder: true}\n",
      "  - filter: {where: \"label > 5\"}\n"
      "  - batch: {size: 100}\n",
  };
  for (const char *steps : stepsCases) {
    for (const char *onError : {"skip", "fail"}) {
      SCOPED_TRACE(std::string(onError) + "\n" + steps);
      runtime::Plan plan = rttest::planFromYaml(
          dir, "pipeline: runs\n" + criteoTsvSource("d/day_*.tsv", onError) +
                   "steps:\n" + steps);
      for (int threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(threads));
        int64_t fromRuns = 0, fromRecords = 0;
        RunResult ref = runCriteoRuns(plan, threads, false, &fromRecords);
        RunResult got = runCriteoRuns(plan, threads, true, &fromRuns);
        EXPECT_TRUE(got.bytes == ref.bytes) << "outputs differ";
        EXPECT_EQ(got.error, ref.error);
        EXPECT_EQ(got.accounting, ref.accounting);
        EXPECT_EQ(fromRecords, 0);
        if (std::string(steps).find("label > 5") == std::string::npos) {
          EXPECT_FALSE(ref.bytes.empty());
          EXPECT_GT(fromRuns, 1000) << "the runs were not used";
        }
        if (std::string(onError) == "fail")
          EXPECT_NE(ref.error.find("day_0.tsv:9001: record 9000"),
                    std::string::npos)
              << ref.error;
      }
    }
  }
}

/// Parsed records are views of their block's column buffers; a shuffle (or
/// a memory cache) that keeps them would keep whole blocks alive while
/// counting only the records' own bytes, so it stores compact copies.
TEST(CsvParallelPipeline, KeptRecordsDoNotPinTheirBlocks) {
  TempDir dir;
  dir.write("d/day_0.tsv", criteoText(3000));
  const std::string head =
      "pipeline: pins\nseed: 1\n" + criteoTsvSource("d/day_0.tsv", "skip");
  auto pinned = [&](const std::string &steps) {
    runtime::Plan plan = rttest::planFromYaml(dir, head + steps);
    runtime::RunOptions o;
    o.threads = 2;
    size_t n = 0;
    for (const rttest::Output &out : rttest::runAll(plan, o))
      for (const Tensor &t : out.fields)
        n += t.pinsLargerBuffer();
    return n;
  };
  EXPECT_GT(pinned("steps:\n  - take: 10\n"), 0u)
      << "the reader no longer hands out views; this test checks nothing";
  EXPECT_EQ(pinned("steps:\n  - shuffle: {buffer: 100}\n"), 0u);
  EXPECT_EQ(pinned("steps:\n  - cache: memory\n"), 0u);
}

} // namespace
