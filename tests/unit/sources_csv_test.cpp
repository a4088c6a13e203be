//===- sources_csv_test.cpp - csv / tsv reader
//-----------------------------===//

#include "sources_test_util.h"

#include <chrono>
#include <cmath>
#include <cstdio>

using namespace sluice;
using namespace sluice::testing;
using sluice::runtime::Source;

namespace {

Value column(const std::string &name, const std::string &type,
             int64_t count = 1) {
  Value c = params({{"name", str(name)}, {"type", str(type)}});
  if (count != 1)
    c.set("count", integer(count));
  return c;
}

/// A CSV source over `files` with the given columns.
Value csvParams(const std::string &files, std::vector<Value> columns,
                bool header = false) {
  return params({{"files", str(files)},
                 {"header", boolean(header)},
                 {"columns", list(std::move(columns))}});
}

std::vector<Value> mixedColumns() {
  return {column("id", "i64"), column("score", "f32"), column("name", "string"),
          column("px", "u8", 2), column("ok", "bool")};
}

// Line endings and compression must not change what is read.
struct Encoding {
  const char *name;
  const char *eol;
  bool gz;
};

class CsvEncodingTest : public ::testing::TestWithParam<Encoding> {};

TEST_P(CsvEncodingTest, ReadsTypedColumnsWithQuoting) {
  const Encoding &enc = GetParam();
  std::string eol = enc.eol;
  std::string text = "id,score,name,px0,px1,ok" + eol +        // header
                     "1,2.5,alice,0,255,true" + eol +          //
                     "-7,-1e3,\"smith, john\",10,20,0" + eol + //
                     eol +                                     // blank: skipped
                     "8,,\"say \"\"hi\"\"\",1,2,FALSE" + eol + //
                     "9,0.125,\"two" + eol + "lines\",3,4,1" + eol +
                     "\"10\",3,\"\",5,6,true"; // no final line break
  TempDir dir;
  if (enc.gz)
    dir.writeGz("data.csv.gz", text);
  else
    dir.write("data.csv", text);
  auto src =
      make("csv", csvParams("data.csv*", mixedColumns(), true), dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(),
            "id: i64, score: f32, name: string, px: u8[2], ok: bool");
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 5u);
  const auto &r = all.records;

  std::vector<int64_t> ids = {1, -7, 8, 9, 10};
  std::vector<std::string> names = {"alice", "smith, john", "say \"hi\"",
                                    "two" + eol + "lines", ""};
  std::vector<std::pair<int, int>> px = {
      {0, 255}, {10, 20}, {1, 2}, {3, 4}, {5, 6}};
  std::vector<bool> oks = {true, false, false, true, true};
  for (size_t i = 0; i < r.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(r[i].index, i);
    EXPECT_EQ(scalarOf<int64_t>(*src, r[i], "id"), ids[i]);
    EXPECT_EQ(strOf(*src, r[i], "name"), names[i]);
    const Tensor &p = field(*src, r[i], "px");
    ASSERT_EQ(p.shape(), std::vector<int64_t>{2});
    EXPECT_EQ(p.data<uint8_t>()[0], px[i].first);
    EXPECT_EQ(p.data<uint8_t>()[1], px[i].second);
    EXPECT_EQ(scalarOf<uint8_t>(*src, r[i], "ok"), oks[i] ? 1 : 0);
  }
  EXPECT_EQ(scalarOf<float>(*src, r[0], "score"), 2.5f);
  EXPECT_EQ(scalarOf<float>(*src, r[1], "score"), -1000.0f);
  EXPECT_TRUE(std::isnan(scalarOf<float>(*src, r[2], "score")));
  EXPECT_EQ(scalarOf<float>(*src, r[3], "score"), 0.125f);
}

INSTANTIATE_TEST_SUITE_P(Encodings, CsvEncodingTest,
                         ::testing::Values(Encoding{"lf", "\n", false},
                                           Encoding{"crlf", "\r\n", false},
                                           Encoding{"lf_gz", "\n", true},
                                           Encoding{"crlf_gz", "\r\n", true}),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

TEST(CsvSource, TooFewColumnsHasExactLocationAndReaderContinues) {
  std::string text = "1,2,3\n"
                     "4,5,6\n"
                     "\"a\nb\",8,9\n" // a string cell spanning two lines
                     "10,11\n"        // too few: line 5
                     "12,13,14\n";
  TempDir dir;
  dir.write("x.csv", text);
  auto src = make("csv",
                  csvParams("x.csv", {column("a", "string"), column("b", "i64"),
                                      column("c", "i32")}),
                  dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "rrrer");
  ASSERT_EQ(all.errors.size(), 1u);
  const runtime::DataError &e = all.errors[0];
  EXPECT_EQ(e.reason, "csv: too few columns");
  EXPECT_EQ(e.where.file, dir / "x.csv");
  EXPECT_EQ(e.where.line, 5);
  EXPECT_EQ(e.where.record, 3);
  EXPECT_EQ(e.where.offset, static_cast<int64_t>(text.find("10,11")));
  EXPECT_TRUE(e.recoverable);
  EXPECT_NE(e.detail.find("expected 3 columns"), std::string::npos) << e.detail;
  EXPECT_NE(e.detail.find("found 2"), std::string::npos) << e.detail;
  EXPECT_NE(e.message().find(dir / "x.csv:5: record 3, byte " +
                             std::to_string(text.find("10,11"))),
            std::string::npos)
      << e.message();
  // The record after the bad one keeps its own index.
  EXPECT_EQ(all.records.back().index, 4u);
  EXPECT_EQ(scalarOf<int64_t>(*src, all.records.back(), "b"), 13);
}

struct CellCase {
  const char *name;
  const char *type;
  const char *cell;
  const char *reason; // "" = valid
};

class CsvCellTest : public ::testing::TestWithParam<CellCase> {};

TEST_P(CsvCellTest, ConvertsOrReportsTheCell) {
  const CellCase &c = GetParam();
  std::string text = std::string("7,") + c.cell + "\n8,1\n";
  TempDir dir;
  dir.write("c.csv", text);
  auto src =
      make("csv", csvParams("c.csv", {column("k", "i64"), column("v", c.type)}),
           dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  if (std::string(c.reason).empty()) {
    ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
    EXPECT_EQ(all.records.size(), 2u);
    return;
  }
  EXPECT_EQ(all.events, "er");
  ASSERT_EQ(all.errors.size(), 1u);
  const runtime::DataError &e = all.errors[0];
  EXPECT_EQ(e.reason, c.reason);
  EXPECT_EQ(e.where.line, 1);
  EXPECT_EQ(e.where.offset, 2); // the cell, after "7,"
  EXPECT_EQ(e.where.field, "v");
  EXPECT_NE(e.detail.find("column 2 'v'"), std::string::npos) << e.detail;
}

INSTANTIATE_TEST_SUITE_P(
    Cells, CsvCellTest,
    ::testing::Values(
        CellCase{"i64_ok", "i64", "-9223372036854775808", ""},
        CellCase{"i64_empty", "i64", "", "csv: empty value"},
        CellCase{"i64_text", "i64", "12x", "csv: bad number"},
        CellCase{"i64_float", "i64", "1.5", "csv: bad number"},
        CellCase{"i64_overflow", "i64", "9223372036854775808",
                 "csv: value out of range"},
        CellCase{"u8_range", "u8", "256", "csv: value out of range"},
        CellCase{"u8_negative", "u8", "-1", "csv: value out of range"},
        CellCase{"i32_ok", "i32", " +42 ", ""},
        CellCase{"f32_empty_is_nan", "f32", "", ""},
        CellCase{"f64_text", "f64", "abc", "csv: bad number"},
        CellCase{"f32_overflow", "f32", "1e39", "csv: value out of range"},
        CellCase{"bool_empty", "bool", "", "csv: empty value"},
        CellCase{"bool_bad", "bool", "yes", "csv: bad bool"},
        CellCase{"hex32_ok", "hex32", "ffffffff", ""},
        CellCase{"hex32_empty_is_0", "hex32", "", ""},
        CellCase{"hex32_nine_digits", "hex32", "123456789", "csv: bad hex32"},
        CellCase{"hex32_not_hex", "hex32", "68fd1g64", "csv: bad hex32"},
        CellCase{"stray_quote", "string", "\"ab\"c", "csv: bad quoting"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(CsvSource, EmptyIntegerCellMessageNamesTheColumn) {
  TempDir dir;
  dir.write("e.csv", "1,2\n3,\n");
  auto src = make(
      "csv", csvParams("e.csv", {column("x", "i64"), column("label", "i64")}),
      dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.errors.size(), 1u);
  EXPECT_EQ(all.errors[0].where.line, 2);
  EXPECT_NE(all.errors[0].message().find(
                "column 2 'label': empty value for i64 column"),
            std::string::npos)
      << all.errors[0].message();
}

TEST(CsvSource, ByteOrderMarkIsIgnored) {
  TempDir dir;
  dir.write("bom.csv", "\xEF\xBB\xBF"
                       "41,x\n42,y\n");
  auto src = make(
      "csv", csvParams("bom.csv", {column("n", "i64"), column("s", "string")}),
      dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.events, "rr") << all.errors[0].message();
  EXPECT_EQ(*all.records[0].fields[0].data<int64_t>(), 41);
}

TEST(CsvSource, Hex32Values) {
  TempDir dir;
  dir.write("h.tsv", "68fd1e64\t0\tFFFFFFFF\t\t00000001\n");
  auto src = make("tsv",
                  params({{"files", str("h.tsv")},
                          {"columns", list({column("cat", "hex32", 5)})}}),
                  dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "cat: i64[5]");
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 1u);
  const Tensor &t = all.records[0].fields[0];
  std::vector<int64_t> got(t.data<int64_t>(), t.data<int64_t>() + 5);
  EXPECT_EQ(got, (std::vector<int64_t>{0x68fd1e64, 0, 0xffffffffLL, 0, 1}));
}

TEST(CsvSource, TooManyColumnsAndVectorColumnNames) {
  TempDir dir;
  std::string text = "1,2,3\n1,2,3,4\n1,2,x\n";
  dir.write("m.csv", text);
  auto src =
      make("csv", csvParams("m.csv", {column("v", "i64", 3)}), dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "ree");
  ASSERT_EQ(all.errors.size(), 2u);
  EXPECT_EQ(all.errors[0].reason, "csv: too many columns");
  EXPECT_EQ(all.errors[0].where.line, 2);
  EXPECT_NE(all.errors[0].detail.find("v x3"), std::string::npos);
  EXPECT_EQ(all.errors[1].where.field, "v[2]");
  EXPECT_EQ(all.errors[1].where.offset, static_cast<int64_t>(text.rfind("x")));
}

TEST(CsvSource, UnterminatedQuoteEndsTheFile) {
  TempDir dir;
  std::string text = "1,a\n2,\"never closed\n3,c\n";
  dir.write("u.csv", text);
  auto src = make(
      "csv", csvParams("u.csv", {column("n", "i64"), column("s", "string")}),
      dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  EXPECT_EQ(all.events, "re");
  EXPECT_EQ(all.errors[0].reason, "csv: unterminated quoted field");
  EXPECT_FALSE(all.errors[0].recoverable);
  EXPECT_EQ(all.errors[0].where.offset, static_cast<int64_t>(text.find('"')));
  EXPECT_NE(all.errors[0].message().find("rest of this file"),
            std::string::npos);
}

TEST(CsvSource, FilesAreReadInSortedOrderOneShardEach) {
  TempDir dir;
  dir.write("part-10.csv", "10\n11\n");
  dir.write("part-02.csv", "2\n");
  dir.write("part-01.csv", "1\n");
  dir.write("other.txt", "99\n");
  auto src =
      make("csv", csvParams("part-*.csv", {column("n", "i64")}), dir.path());
  ASSERT_TRUE(src);
  ASSERT_EQ(src->numShards(), 3u);
  EXPECT_EQ(src->shardName(0), dir / "part-01.csv");
  EXPECT_EQ(src->shardName(2), dir / "part-10.csv");
  EXPECT_FALSE(src->sizeHint().has_value());
  ReadAll all = readAll(*src);
  std::vector<int64_t> got;
  for (const Record &r : all.records)
    got.push_back(*r.fields[0].data<int64_t>());
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 10, 11}));
}

TEST(CsvSource, CreateErrors) {
  TempDir dir;
  dir.write("a.csv", "1\n");
  std::string msg = createError(
      "csv", csvParams("nope/*.csv", {column("n", "i64")}), dir.path());
  EXPECT_NE(msg.find("'nope/*.csv' matched no files"), std::string::npos)
      << msg;
  msg = createError("csv", csvParams("a.csv", {column("n", "complex")}),
                    dir.path());
  EXPECT_NE(msg.find("unknown type"), std::string::npos) << msg;
  Value p = csvParams("a.csv", {column("n", "i64")});
  p.set("delimiter", str(";;"));
  msg = createError("csv", p, dir.path());
  EXPECT_NE(msg.find("delimiter must be one character"), std::string::npos);
  // The registry's type and the reader must agree.
  msg = createError("csv", csvParams("a.csv", {column("n", "i64")}), dir.path(),
                    RecordType({{"n", FieldType(ElemType::F32)}}));
  EXPECT_NE(msg.find("field 'n' is i64, expected f32"), std::string::npos)
      << msg;
  msg = createError("nosuch", csvParams("a.csv", {column("n", "i64")}),
                    dir.path());
  EXPECT_NE(msg.find("unknown source 'nosuch'"), std::string::npos) << msg;
}

TEST(CsvSource, FieldsFollowTheGivenTypeOrder) {
  TempDir dir;
  dir.write("o.csv", "1,hello\n");
  RecordType type(
      {{"s", FieldType(ElemType::String)}, {"n", FieldType(ElemType::I64)}});
  auto src = make(
      "csv", csvParams("o.csv", {column("n", "i64"), column("s", "string")}),
      dir.path(), type);
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType(), type);
  ReadAll all = readAll(*src);
  ASSERT_EQ(all.records.size(), 1u);
  EXPECT_EQ(all.records[0].fields[0].str(), "hello");
  EXPECT_EQ(*all.records[0].fields[1].data<int64_t>(), 1);
}

TEST(CsvSource, RecordsLargerThanTheReadBuffer) {
  // 3 MiB cells force the reader to grow its 1 MiB buffer mid-record.
  TempDir dir;
  std::string big(3 << 20, 'z');
  std::string text = "a,1\n\"" + big + "\",2\n" + big + ",3\nb,4\n";
  dir.write("big.csv", text);
  auto src = make(
      "csv", csvParams("big.csv", {column("s", "bytes"), column("n", "u8")}),
      dir.path());
  ASSERT_TRUE(src);
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 4u);
  EXPECT_EQ(all.records[1].fields[0].str(), big);
  EXPECT_EQ(all.records[2].fields[0].str(), big);
  EXPECT_EQ(*all.records[3].fields[1].data<uint8_t>(), 4);
}

/// splitmix64: deterministic pseudo-random data for generated files.
uint64_t mix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

TEST(CsvSource, CriteoThroughput) {
  // Criteo's layout: label, 13 integer features (some missing), 26 hex32
  // categoricals (some missing), tab-separated. Checks every value against
  // the generator and reports MB/s (informational, never asserted).
  const int kRows = 200000;
  std::string text;
  text.reserve(kRows * 260);
  uint64_t state = 42;
  double denseSum = 0;
  int64_t catSum = 0, labelSum = 0, missingDense = 0;
  char buf[32];
  for (int r = 0; r < kRows; ++r) {
    int label = static_cast<int>(mix(state) & 1);
    labelSum += label;
    text += std::to_string(label);
    for (int i = 0; i < 13; ++i) {
      text += '\t';
      uint64_t v = mix(state);
      if (v % 10 == 0) {
        ++missingDense;
        continue;
      }
      int x = static_cast<int>(v >> 40) % 5000;
      denseSum += x;
      text += std::to_string(x);
    }
    for (int i = 0; i < 26; ++i) {
      text += '\t';
      uint64_t v = mix(state);
      if (v % 20 == 0)
        continue;
      uint32_t h = static_cast<uint32_t>(v >> 32);
      catSum += h;
      std::snprintf(buf, sizeof buf, "%08x", h);
      text += buf;
    }
    text += '\n';
  }
  TempDir dir;
  dir.write("day_0.tsv", text);
  auto src = make("tsv",
                  params({{"files", str("day_*.tsv")},
                          {"columns", list({column("label", "i64"),
                                            column("dense", "f32", 13),
                                            column("cat", "hex32", 26)})}}),
                  dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(),
            "label: i64, dense: f32[13], cat: i64[26]");

  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<runtime::ShardReader> reader = src->open(0);
  Record rec;
  int64_t rows = 0, gotLabels = 0, gotCats = 0, gotMissing = 0;
  double gotDense = 0;
  while (true) {
    runtime::ReadResult res = reader->next(rec);
    if (res.isEnd())
      break;
    ASSERT_TRUE(res.isRecord()) << res.error().message();
    ++rows;
    gotLabels += *rec.fields[0].data<int64_t>();
    const float *d = rec.fields[1].data<float>();
    for (int i = 0; i < 13; ++i) {
      if (std::isnan(d[i]))
        ++gotMissing;
      else
        gotDense += d[i];
    }
    const int64_t *c = rec.fields[2].data<int64_t>();
    for (int i = 0; i < 26; ++i)
      gotCats += c[i];
  }
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(rows, kRows);
  EXPECT_EQ(gotLabels, labelSum);
  EXPECT_EQ(gotMissing, missingDense);
  EXPECT_EQ(gotDense, denseSum);
  EXPECT_EQ(gotCats, catSum);
  EXPECT_EQ(reader->bytesRead(), text.size());
  double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("[ criteo  ] %.1f MB, %d rows in %.3f s: %.0f MB/s, %.2f M "
              "rows/s (one thread)\n",
              mb, kRows, secs, mb / secs, kRows / secs / 1e6);
  RecordProperty("criteo_MBps", std::to_string(mb / secs));
}

} // namespace

namespace {

// `read` (set by sluice-push-projections): only the listed columns become
// fields; the others are counted but never converted, so a malformed value
// in them is not an error, while a wrong cell count still is.
TEST(CsvRead, ProducesOnlyReadColumnsAndSkipsTheirConversion) {
  TempDir dir;
  dir.write("data.csv", "1,0.5,x\"y,ab,7\n"
                        "2,1.5,oops,zz,8\n"
                        "3,2.5,,q,9\n");
  Value p = csvParams("data.csv", {column("id", "i64"), column("x", "f32"),
                                   column("junk", "f32"), column("h", "hex32"),
                                   column("n", "u8")});
  p.set("read", list({str("n"), str("id")}));
  auto src = make("csv", p, dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType().str(), "id: i64, n: u8"); // file order
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  ASSERT_EQ(all.records.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(scalarOf<int64_t>(*src, all.records[i], "id"), i + 1);
    EXPECT_EQ(scalarOf<uint8_t>(*src, all.records[i], "n"), 7 + i);
  }

  // Without `read` the same file has two bad rows.
  auto full =
      make("csv",
           csvParams("data.csv", {column("id", "i64"), column("x", "f32"),
                                  column("junk", "f32"), column("h", "hex32"),
                                  column("n", "u8")}),
           dir.path());
  ASSERT_TRUE(full);
  EXPECT_FALSE(readAll(*full).errors.empty());

  // The cell count is still checked.
  dir.write("short.csv", "1,0.5,1,ab,7\n2,1.5,2\n");
  Value s = csvParams("short.csv", {column("id", "i64"), column("x", "f32"),
                                    column("junk", "f32"), column("h", "hex32"),
                                    column("n", "u8")});
  s.set("read", list({str("id")}));
  auto shortSrc = make("csv", s, dir.path());
  ASSERT_TRUE(shortSrc);
  ReadAll bad = readAll(*shortSrc);
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_NE(bad.errors[0].message().find("too few columns"), std::string::npos)
      << bad.errors[0].message();

  // `read` must name columns.
  Value wrong = p;
  wrong.set("read", list({str("nope")}));
  EXPECT_NE(createError("csv", wrong, dir.path()).find("'nope'"),
            std::string::npos);
}

} // namespace
