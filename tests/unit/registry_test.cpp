//===- registry_test.cpp - The op table, byte sizes, did-you-mean, docs ---===//
#include "sluice/ops/Registry.h"

#include <gtest/gtest.h>

#include <set>

using namespace sluice;

namespace {

struct OpName {
  const char *name;
  OpKind kind;
};

// The op list of DESIGN.md ("Sources", "Element ops", "Record ops").
const std::vector<OpName> kDesignOps = {
    {"image_folder", OpKind::Source},
    {"files", OpKind::Source},
    {"csv", OpKind::Source},
    {"tsv", OpKind::Source},
    {"tfrecord", OpKind::Source},
    {"idx", OpKind::Source},
    {"npy", OpKind::Source},
    {"webdataset", OpKind::Source},
    {"text_lines", OpKind::Source},

    {"decode_image", OpKind::Element},
    {"resize", OpKind::Element},
    {"center_crop", OpKind::Element},
    {"random_crop", OpKind::Element},
    {"random_resized_crop", OpKind::Element},
    {"random_flip", OpKind::Element},
    {"grayscale", OpKind::Element},
    {"random_grayscale", OpKind::Element},
    {"normalize", OpKind::Element},
    {"cast", OpKind::Element},
    {"transpose", OpKind::Element},
    {"pad", OpKind::Element},
    {"fill_missing", OpKind::Element},
    {"clamp", OpKind::Element},
    {"map", OpKind::Element},
    {"hash_bucket", OpKind::Element},
    {"bucketize", OpKind::Element},
    {"one_hot", OpKind::Element},
    {"tokenize", OpKind::Element},
    {"truncate", OpKind::Element},

    {"select", OpKind::Record},
    {"rename", OpKind::Record},
    {"filter", OpKind::Record},
    {"shuffle", OpKind::Record},
    {"batch", OpKind::Record},
    {"padded_batch", OpKind::Record},
    {"unbatch", OpKind::Record},
    {"repeat", OpKind::Record},
    {"take", OpKind::Record},
    {"skip", OpKind::Record},
    {"shard", OpKind::Record},
    {"interleave", OpKind::Record},
    {"cache", OpKind::Record},
    {"prefetch", OpKind::Record},
};

class DesignOpTest : public ::testing::TestWithParam<OpName> {};

TEST_P(DesignOpTest, RegisteredAndDocumented) {
  const OpDef *op = Registry::instance().find(GetParam().name);
  ASSERT_NE(op, nullptr) << GetParam().name << " is not registered";
  EXPECT_EQ(op->kind, GetParam().kind);
  EXPECT_FALSE(op->summary.empty());
  EXPECT_FALSE(op->doc.empty());
  EXPECT_FALSE(op->typeDoc.empty());
  EXPECT_TRUE(static_cast<bool>(op->typeRule));
  // The example uses the op (as a step, or as the source).
  std::string expectedStart = op->kind == OpKind::Source
                                  ? "source:\n  " + op->name
                                  : "- " + op->name + ":";
  EXPECT_EQ(op->example.rfind(expectedStart, 0), 0u) << op->example;
  if (op->kind != OpKind::Element)
    EXPECT_EQ(op->fuse, FuseKind::None);
  EXPECT_GT(op->cost.nsPerElement, 0);
  EXPECT_GE(op->cost.nsPerByte, 0);
  EXPECT_GT(op->cost.outputBytesRatio, 0);
  if (!op->shorthand.empty())
    EXPECT_NE(op->findParam(op->shorthand), nullptr) << op->shorthand;
  if (op->kind == OpKind::Source) {
    const ParamSpec *onError = op->findParam("on_error");
    ASSERT_NE(onError, nullptr);
    EXPECT_EQ(onError->choices, (std::vector<std::string>{"fail", "skip"}));
    EXPECT_EQ(*onError->defaultValue, Value::string("fail"));
  }
}

// Parameter specs must be internally consistent: the front end trusts them.
void checkParam(const std::string &op, const ParamSpec &p) {
  SCOPED_TRACE(op + "." + p.name);
  EXPECT_FALSE(p.doc.empty());
  EXPECT_FALSE(p.required && p.defaultValue.has_value())
      << "a required param has a default";
  if (p.kind == ParamKind::Enum) {
    ASSERT_FALSE(p.choices.empty());
    if (p.defaultValue) {
      ASSERT_TRUE(p.defaultValue->isString());
      EXPECT_NE(std::find(p.choices.begin(), p.choices.end(),
                          p.defaultValue->asString()),
                p.choices.end());
    }
  }
  if (p.defaultValue) {
    const Value &d = *p.defaultValue;
    switch (p.kind) {
    case ParamKind::Bool:
      EXPECT_TRUE(d.isBool());
      break;
    case ParamKind::Int:
      EXPECT_TRUE(d.isInt());
      break;
    case ParamKind::Float:
      EXPECT_TRUE(d.isFloat()) << "Float defaults are reals";
      break;
    case ParamKind::String:
    case ParamKind::Enum:
    case ParamKind::DType:
      EXPECT_TRUE(d.isString());
      break;
    case ParamKind::IntList:
    case ParamKind::FloatList:
    case ParamKind::StringList:
      EXPECT_TRUE(d.isList());
      EXPECT_GE(d.items().size(), p.minLen);
      EXPECT_LE(d.items().size(), p.maxLen);
      break;
    default:
      break;
    }
    if (d.isNumber() && p.min)
      EXPECT_GE(d.asDouble(), *p.min);
    if (d.isNumber() && p.max)
      EXPECT_LE(d.asDouble(), *p.max);
  }
  if (p.kind == ParamKind::Struct || p.kind == ParamKind::StructList)
    EXPECT_FALSE(p.members.empty());
  else
    EXPECT_TRUE(p.members.empty());
  for (const ParamSpec &m : p.members)
    checkParam(op + "." + p.name, m);
}

TEST_P(DesignOpTest, ParamSpecsAreConsistent) {
  const OpDef *op = Registry::instance().find(GetParam().name);
  ASSERT_NE(op, nullptr);
  std::set<std::string> names;
  for (const ParamSpec &p : op->params) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate param " << p.name;
    checkParam(op->name, p);
  }
}

INSTANTIATE_TEST_SUITE_P(All, DesignOpTest, ::testing::ValuesIn(kDesignOps),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

TEST(Registry, HoldsExactlyTheDesignOps) {
  std::set<std::string> expected;
  for (const OpName &o : kDesignOps)
    expected.insert(o.name);
  std::vector<std::string> names = Registry::instance().names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(Registry::instance().names(OpKind::Source).size(), 9u);
  EXPECT_EQ(Registry::instance().names(OpKind::Element).size(), 20u);
  EXPECT_EQ(Registry::instance().names(OpKind::Record).size(), 14u);
  EXPECT_EQ(Registry::instance().find("decode_imgae"), nullptr);
}

// The fusion passes and the runtime's RemapChain ask for these traits; the
// sets are the ones their private name lists held.
TEST(Registry, FusionTraits) {
  std::set<std::string> valueWise, remap, batch;
  for (const OpDef *op : Registry::instance().all()) {
    if (op->traits.valueWise)
      valueWise.insert(op->name);
    if (op->traits.indexRemap)
      remap.insert(op->name);
    if (op->traits.commutesWithBatch)
      batch.insert(op->name);
  }
  std::set<std::string> values = {"bucketize",    "cast",        "clamp",
                                  "fill_missing", "hash_bucket", "map",
                                  "normalize"};
  EXPECT_EQ(valueWise, values);
  EXPECT_EQ(batch, values);
  EXPECT_EQ(remap, (std::set<std::string>{"center_crop", "pad", "random_crop",
                                          "random_flip", "transpose"}));
  const OpDef *norm = Registry::instance().find("normalize");
  ASSERT_TRUE(norm->traits.perChannel);
  Value scalar = Value::map();
  scalar.set("mean", Value::real(0.5));
  scalar.set("std", Value::real(0.25));
  EXPECT_FALSE(norm->traits.perChannel(scalar));
  Value lists = Value::map();
  lists.set("mean", Value::list({Value::real(1), Value::real(2)}));
  lists.set("std", Value::list({Value::real(1), Value::real(2)}));
  EXPECT_TRUE(norm->traits.perChannel(lists));
  // Every element op, random ones included, brings its kernel in its entry
  // (internal ones too: the fused decode + crop), and the per-record record
  // ops bring theirs; the runtime has no kernels of its own.
  for (const OpDef *op : Registry::instance().all(OpKind::Element))
    EXPECT_TRUE(op->kernel) << op->name;
  EXPECT_TRUE(Registry::instance().find("decode_random_resized_crop")->kernel);
  for (const char *n : {"select", "rename", "filter"})
    EXPECT_TRUE(Registry::instance().find(n)->recordKernel) << n;
  EXPECT_TRUE(Registry::instance().find("filter")->rowsKernel);
}

TEST(Registry, StochasticAndFuseKinds) {
  auto op = [](const char *n) { return Registry::instance().find(n); };
  for (const char *n :
       {"random_crop", "random_resized_crop", "random_flip", "shuffle"})
    EXPECT_TRUE(op(n)->stochastic) << n;
  for (const char *n : {"normalize", "cast", "center_crop", "map", "batch"})
    EXPECT_FALSE(op(n)->stochastic) << n;
  for (const char *n :
       {"normalize", "cast", "fill_missing", "clamp", "map", "bucketize"})
    EXPECT_EQ(op(n)->fuse, FuseKind::ElementWise) << n;
  for (const char *n : {"center_crop", "random_crop", "random_flip",
                        "transpose", "pad", "truncate"})
    EXPECT_EQ(op(n)->fuse, FuseKind::IndexRemap) << n;
  for (const char *n : {"decode_image", "hash_bucket", "tokenize"})
    EXPECT_EQ(op(n)->fuse, FuseKind::None) << n;
  EXPECT_EQ(op("select")->shorthand, "fields");
  EXPECT_EQ(op("filter")->shorthand, "where");
  EXPECT_EQ(op("files")->shorthand, "files");
}

// The traits the graph passes ask instead of op names
// (sluice-hoist-shuffle crosses what is per record and one to one).
TEST(Registry, Traits) {
  const Registry &reg = Registry::instance();
  for (const OpDef *d : reg.all(OpKind::Element)) {
    EXPECT_TRUE(d->traits.perRecord) << d->name;
    EXPECT_EQ(d->traits.count, Cardinality::OneToOne) << d->name;
    EXPECT_FALSE(d->traits.reorders) << d->name;
    // Element ops draw by the record's source position, never by its
    // place in the stream.
    EXPECT_EQ(d->traits.random,
              d->stochastic ? RandomKey::SourcePosition : RandomKey::None)
        << d->name;
  }
  for (const OpDef *d : reg.all(OpKind::Source))
    EXPECT_EQ(d->traits.count, Cardinality::Source) << d->name;
  auto t = [&](const char *n) { return reg.find(n)->traits; };
  EXPECT_TRUE(t("decode_image").dataErrors);
  for (const char *n : {"select", "rename"}) {
    EXPECT_TRUE(t(n).perRecord) << n;
    EXPECT_EQ(t(n).count, Cardinality::OneToOne) << n;
    EXPECT_FALSE(t(n).dataErrors) << n;
  }
  EXPECT_EQ(t("filter").count, Cardinality::Fewer);
  EXPECT_TRUE(t("shuffle").reorders);
  EXPECT_EQ(t("shuffle").random, RandomKey::StreamOrder);
  EXPECT_TRUE(t("interleave").reorders);
  EXPECT_TRUE(t("cache").materializes);
  EXPECT_EQ(t("prefetch").count, Cardinality::Same);
  EXPECT_FALSE(t("prefetch").materializes);
  for (const char *n : {"batch", "padded_batch"})
    EXPECT_EQ(t(n).count, Cardinality::Groups) << n;
  for (const char *n : {"unbatch", "repeat"})
    EXPECT_EQ(t(n).count, Cardinality::More) << n;
  for (const char *n : {"take", "skip", "shard"})
    EXPECT_EQ(t(n).count, Cardinality::Fewer) << n;
  // Which batch step can be page-locked, and what takes batches apart.
  EXPECT_TRUE(t("batch").fixedRows);
  EXPECT_FALSE(t("padded_batch").fixedRows);
  EXPECT_TRUE(t("unbatch").splitsRecords);
  EXPECT_FALSE(t("repeat").splitsRecords);
  // Every op says what it is to a serve worker: a reason not to serve it
  // (with what to write instead), or a kind the worker runs.
  for (const OpDef *d : reg.all(OpKind::Record)) {
    const OpTraits &tr = d->traits;
    EXPECT_EQ(tr.fixedRows, tr.fixedRows && tr.count == Cardinality::Groups)
        << d->name;
    EXPECT_EQ(tr.splitsRecords,
              tr.splitsRecords && tr.count == Cardinality::More)
        << d->name;
    EXPECT_EQ(tr.notServed.why == nullptr, tr.notServed.instead == nullptr)
        << d->name;
    bool served = tr.perRecord || tr.count == Cardinality::Groups ||
                  tr.orderWindow || tr.prefetchDepth;
    EXPECT_NE(served, tr.notServed.why != nullptr) << d->name;
  }
}

TEST(Registry, SourcesNameTheirData) {
  // What a compiled executable's --source-path replaces.
  for (const OpDef *d : Registry::instance().all(OpKind::Source)) {
    int paths = 0;
    for (const ParamSpec &p : d->params)
      if (p.dataPath != DataPath::None) {
        ++paths;
        EXPECT_EQ(p.kind, ParamKind::String) << d->name << "." << p.name;
      }
    EXPECT_GE(paths, 1) << d->name;
  }
  const OpDef *idx = Registry::instance().find("idx");
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->findParam("images")->dataPath, DataPath::File);
  EXPECT_EQ(idx->findParam("labels")->dataPath, DataPath::File);
  EXPECT_EQ(Registry::instance().find("csv")->findParam("files")->dataPath,
            DataPath::Glob);
}

TEST(Registry, ParamHelpers) {
  ParamSpec p =
      param("size", ParamKind::IntList).req().length(2, 2).scalar(2).atLeast(1);
  EXPECT_EQ(p.name, "size");
  EXPECT_TRUE(p.required);
  EXPECT_EQ(p.broadcastTo, 2u);
  EXPECT_EQ(*p.min, 1);
  ParamSpec e = enumParam("to", {"memory", "disk"});
  EXPECT_EQ(e.kind, ParamKind::Enum);
  EXPECT_EQ(e.choices.size(), 2u);
  ParamSpec s =
      structParam("columns", {param("name", ParamKind::String)}, true);
  EXPECT_EQ(s.kind, ParamKind::StructList);
  EXPECT_EQ(structParam("x", {}, false).kind, ParamKind::Struct);
  EXPECT_EQ(paramKindName(ParamKind::FloatList), "list of floats");
  EXPECT_EQ(paramKindName(ParamKind::Size), "byte size");
}

//===----------------------------------------------------------------------===//
// closestMatch
//===----------------------------------------------------------------------===//

struct MatchCase {
  const char *word;
  const char *expected; // "" = no suggestion
};

class ClosestMatchTest : public ::testing::TestWithParam<MatchCase> {};

TEST_P(ClosestMatchTest, AgainstOpNames) {
  EXPECT_EQ(closestMatch(GetParam().word, Registry::instance().names()),
            GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Ops, ClosestMatchTest,
    ::testing::Values(
        MatchCase{"decode_imgae", "decode_image"},
        MatchCase{"decode_img", "decode_image"},
        MatchCase{"Normalize", "normalize"}, MatchCase{"suffle", "shuffle"},
        MatchCase{"bacth", "batch"}, MatchCase{"random_crop", "random_crop"},
        MatchCase{"tfrecords", "tfrecord"},
        MatchCase{"paded_batch", "padded_batch"}, MatchCase{"jpeg_decode", ""},
        MatchCase{"xyz", ""}, MatchCase{"", ""}));

TEST(ClosestMatch, ShortWordsNeedACommonCharacter) {
  EXPECT_EQ(closestMatch("lgo", {"log", "exp"}), "log");
  EXPECT_EQ(closestMatch("ab", {"xy"}), "");
  EXPECT_EQ(closestMatch("lable", {"image", "label"}), "label");
  EXPECT_EQ(closestMatch("y", {"x"}), "");
  EXPECT_EQ(closestMatch("anything", {}), "");
}

//===----------------------------------------------------------------------===//
// Byte sizes
//===----------------------------------------------------------------------===//

struct SizeCase {
  const char *text;
  std::optional<int64_t> bytes;
};

class ByteSizeTest : public ::testing::TestWithParam<SizeCase> {};

TEST_P(ByteSizeTest, Parse) {
  EXPECT_EQ(parseByteSize(GetParam().text), GetParam().bytes)
      << '"' << GetParam().text << '"';
}

constexpr int64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024,
                  TiB = GiB * 1024;

INSTANTIATE_TEST_SUITE_P(
    Table, ByteSizeTest,
    ::testing::Values(
        SizeCase{"0", 0}, SizeCase{"1000000", 1000000}, SizeCase{"17B", 17},
        SizeCase{"64KB", 64000}, SizeCase{"1.5GB", 1500000000},
        SizeCase{"2MB", 2000000}, SizeCase{"1TB", 1000000000000},
        SizeCase{"512MiB", 512 * MiB}, SizeCase{"4GiB", 4 * GiB},
        SizeCase{"2TiB", 2 * TiB}, SizeCase{"64KiB", 64 * KiB},
        SizeCase{"1.5KiB", 1536}, SizeCase{"0.5MiB", 512 * KiB},
        SizeCase{"64k", 64 * KiB}, SizeCase{"64K", 64 * KiB},
        SizeCase{"3M", 3 * MiB}, SizeCase{"2g", 2 * GiB},
        SizeCase{"4 GiB", 4 * GiB}, SizeCase{" 4gib ", 4 * GiB},
        SizeCase{"8EiB", std::nullopt}, // no exbibytes
        SizeCase{"4 GiBs", std::nullopt}, SizeCase{"-1GiB", std::nullopt},
        SizeCase{"-5", std::nullopt}, SizeCase{"", std::nullopt},
        SizeCase{"GiB", std::nullopt}, SizeCase{"1e3", std::nullopt},
        SizeCase{"0.5B", std::nullopt}, SizeCase{"0.3", std::nullopt},
        SizeCase{"1.", std::nullopt}, SizeCase{".5GiB", std::nullopt},
        SizeCase{"+1GiB", std::nullopt}, SizeCase{"1 2GiB", std::nullopt},
        SizeCase{"4GiB4", std::nullopt},
        SizeCase{"9223372036854775807", INT64_MAX},
        SizeCase{"9223372036854775808", std::nullopt},
        SizeCase{"8388608TiB", std::nullopt}, // 2^63 bytes
        SizeCase{"99999999999999999999", std::nullopt}));

TEST(ByteSize, FormatIsExactAndRoundTrips) {
  EXPECT_EQ(formatByteSize(4 * GiB), "4GiB");
  EXPECT_EQ(formatByteSize(512 * MiB), "512MiB");
  EXPECT_EQ(formatByteSize(1000), "1000B");
  EXPECT_EQ(formatByteSize(1536), "1536B");
  EXPECT_EQ(formatByteSize(3 * KiB), "3KiB");
  EXPECT_EQ(formatByteSize(2 * TiB), "2TiB");
  EXPECT_EQ(formatByteSize(1024 * TiB), "1024TiB");
  EXPECT_EQ(formatByteSize(0), "0B");
  for (int64_t b : {int64_t(0), int64_t(1), int64_t(999), 4 * GiB + 1,
                    int64_t(1500000000), 7 * MiB, 5 * TiB, INT64_MAX})
    EXPECT_EQ(parseByteSize(formatByteSize(b)), b) << b;
}

//===----------------------------------------------------------------------===//
// Markdown
//===----------------------------------------------------------------------===//

TEST(OpsMarkdown, DocumentsEveryOpAndParam) {
  std::string md = renderOpsMarkdown();
  for (const OpDef *op : Registry::instance().all()) {
    SCOPED_TRACE(op->name);
    EXPECT_NE(md.find("### `" + op->name + "`"), std::string::npos);
    EXPECT_NE(md.find("(#" + op->name + ")"), std::string::npos)
        << "missing from the contents";
    EXPECT_NE(md.find(op->summary), std::string::npos);
    EXPECT_NE(md.find(op->typeDoc), std::string::npos);
    for (const ParamSpec &p : op->params)
      EXPECT_NE(md.find("| `" + p.name + "` | " +
                        std::string(paramKindName(p.kind)) + " |"),
                std::string::npos)
          << p.name;
  }
  // Struct members are listed under their parent, defaults and constraints
  // are rendered.
  EXPECT_NE(md.find("| `columns[].count` | int | `1` | ≥ 1 |"),
            std::string::npos);
  EXPECT_NE(md.find("| `scale` | list of floats | `[0.08, 1.0]` | each in "
                    "(0, 1]; 2 values |"),
            std::string::npos);
  EXPECT_NE(md.find("one of `bilinear`, `area`, `nearest`"), std::string::npos);
  EXPECT_NE(md.find("## Sources"), std::string::npos);
  EXPECT_NE(md.find("## Element ops"), std::string::npos);
  EXPECT_NE(md.find("## Record ops"), std::string::npos);
  // Every table row has the same number of cells as the header.
  size_t pos = 0;
  while ((pos = md.find("\n| `", pos)) != std::string::npos) {
    size_t end = md.find('\n', pos + 1);
    std::string row = md.substr(pos + 1, end - pos - 1);
    int bars = 0;
    for (size_t i = 0; i < row.size(); ++i)
      if (row[i] == '|' && (i == 0 || row[i - 1] != '\\'))
        ++bars;
    EXPECT_EQ(bars, 6) << row;
    pos = end;
  }
}

} // namespace
