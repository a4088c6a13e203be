//===- sources_spec_test.cpp - readers agree with the registry's types ----===//
//
// Each case writes data and a YAML spec, runs the front end (registry
// defaults, type rules), then builds the source from the checked step
// exactly as the runtime does: the reader must accept the defaulted
// parameters and produce the type the front end promised.
//
//===----------------------------------------------------------------------===//

#include "sources_test_util.h"

#include "sluice/dsl/Spec.h"

#include <sstream>

using namespace sluice;
using namespace sluice::testing;

namespace {

struct SpecCase {
  const char *name;
  std::vector<std::pair<std::string, std::string>> files; // rel path, bytes
  std::string source;                                     // YAML `source:`
  const char *type; // the record type both sides must agree on
  size_t records;
};

std::string tfrecordFile() {
  // One Example {label: int64_list [5]} with framing; CRCs from the reader's
  // own crc32c, which sources_tfrecord_test checks independently.
  std::string label = std::string("\x1a\x03\x0a\x01\x05", 5); // Feature
  std::string entry = std::string("\x0a\x05", 2) + "label" +  // key
                      "\x12" + static_cast<char>(label.size()) + label; // value
  std::string features =
      "\x0a" + std::string(1, static_cast<char>(entry.size())) + entry;
  std::string ex =
      "\x0a" + std::string(1, static_cast<char>(features.size())) + features;
  std::string len = le<uint64_t>(ex.size());
  return len + le(runtime::maskedCrc32c(len.data(), 8)) + ex +
         le(runtime::maskedCrc32c(ex.data(), ex.size()));
}

std::string npyFile() {
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) +
         le<uint16_t>(static_cast<uint16_t>(header.size())) + header +
         std::string(24, '\0');
}

std::string tarFile() {
  // A one-member ustar archive: "a/1.cls" holding "4".
  std::string h(512, '\0');
  std::memcpy(&h[0], "a/1.cls", 7);
  std::memcpy(&h[100], "0000644", 7);
  std::memcpy(&h[124], "00000000001", 11);
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = '0';
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h)
    sum += c;
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  std::memcpy(&h[148], chk, 7);
  std::string data(512, '\0');
  data[0] = '4';
  return h + data + std::string(1024, '\0');
}

class SpecSourceTest : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpecSourceTest, ReaderMatchesTheCheckedType) {
  const SpecCase &c = GetParam();
  TempDir dir;
  for (const auto &[rel, bytes] : c.files)
    dir.write(rel, bytes);
  std::string yaml = "pipeline: t\nsource:\n" + c.source + "\n";
  std::string specPath = dir.write("spec.yaml", yaml);
  dsl::DiagnosticEngine diags(specPath, yaml);
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  if (!spec) {
    std::ostringstream os;
    diags.print(os);
    FAIL() << os.str();
  }
  EXPECT_EQ(spec->source.outputType.str(), c.type);
  auto src = make(spec->source.op, spec->source.params, dir.path(),
                  spec->source.outputType);
  ASSERT_TRUE(src);
  EXPECT_EQ(src->recordType(), spec->source.outputType);
  ReadAll all = readAll(*src);
  ASSERT_TRUE(all.errors.empty()) << all.errors[0].message();
  EXPECT_EQ(all.records.size(), c.records);
  for (const Record &r : all.records) {
    ASSERT_EQ(r.fields.size(), src->recordType().size());
    for (size_t i = 0; i < r.fields.size(); ++i) {
      const FieldType &want = src->recordType().fields()[i].type;
      EXPECT_EQ(r.fields[i].elem(), want.elem) << i;
      EXPECT_EQ(r.fields[i].rank(), want.rank()) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, SpecSourceTest,
    ::testing::Values(
        SpecCase{"image_folder",
                 {{"img/a/1.jpg", "x"}, {"img/b/2.PNG", "y"}},
                 "  image_folder: {root: img}",
                 "path: string, data: bytes, label: i64",
                 2},
        SpecCase{"files",
                 {{"f/1.bin", "x"}},
                 "  files: f/*.bin",
                 "path: string, data: bytes",
                 1},
        SpecCase{"csv",
                 {{"c/1.csv", "1,2.5,ff\n2,,0\n"}},
                 "  csv:\n    files: c/*.csv\n    columns:\n"
                 "      - {name: label, type: i64}\n"
                 "      - {name: x, type: f32}\n"
                 "      - {name: h, type: hex32, count: 1}",
                 "label: i64, x: f32, h: i64",
                 2},
        SpecCase{"tsv",
                 {{"t.tsv", "1\t2\t3\n"}},
                 "  tsv:\n    files: t.tsv\n    columns:\n"
                 "      - {name: v, type: u8, count: 3}",
                 "v: u8[3]",
                 1},
        SpecCase{"tfrecord",
                 {{"r.tfrecord", tfrecordFile()}},
                 "  tfrecord:\n    files: r.tfrecord\n    features:\n"
                 "      - {name: label, type: i64}\n"
                 "      - {name: label, type: i64, shape: [-1], as: all}",
                 "label: i64, all: i64[?]",
                 1},
        SpecCase{
            "idx",
            {},
            "  idx:\n    images: " SLUICE_FASHION_MNIST_DIR
            "/t10k-images-idx3-ubyte.gz\n    labels: " SLUICE_FASHION_MNIST_DIR
            "/t10k-labels-idx1-ubyte.gz",
            "image: u8[28,28], label: i64",
            10000},
        SpecCase{"npy",
                 {{"n.npy", npyFile()}},
                 "  npy: {files: n.npy}",
                 "data: f32[2]",
                 3},
        SpecCase{"webdataset",
                 {{"w.tar", tarFile()}},
                 "  webdataset:\n    shards: w.tar\n    fields:\n"
                 "      - {ext: cls, type: i64}",
                 "key: string, cls: i64",
                 1},
        SpecCase{"text_lines",
                 {{"l.txt", "a\nb\n"}},
                 "  text_lines: l.txt",
                 "line: string",
                 2}),
    [](const auto &info) { return std::string(info.param.name); });

} // namespace
