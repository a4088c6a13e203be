//===- runtime_npy_test.cpp - The npy sink is readable by numpy -----------===//
//
// Runs pipelines into `npy:DIR` and has Python's numpy load every file listed
// in index.json (skipped when no python3 with numpy is installed). numpy
// writes back the raw bytes it read, which must equal the tensors the same
// pipeline gives through the C++ iterator API.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/runtime/Sink.h"
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace sluice;
using namespace sluice::rttest;

namespace {

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A python3 that can import numpy, or "".
std::string pythonWithNumpy() {
  for (const char *py : {"/usr/bin/python3", "python3"}) {
    std::string cmd = std::string(py) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0)
      return py;
  }
  return "";
}

// Loads every output listed in index.json and writes, next to each file,
// <file>.raw: the array's bytes as numpy sees them (strings: UTF-8 joined
// by NUL; bytes: the elements joined by NUL), and <file>.meta: dtype and
// shape.
const char *kReader = R"PY(
import json, sys, numpy as np
d = sys.argv[1]
idx = json.load(open(d + "/index.json"))
assert idx["format"] == "sluice-npy", idx["format"]
kinds = {f["name"]: f["storage"] for f in idx["fields"]}
assert idx["count"] == len(idx["outputs"])
for out in idx["outputs"]:
    for name, f in out["fields"].items():
        path = d + "/" + f["file"]
        if kinds[name] == "bin+lengths":
            lengths = np.load(d + "/" + f["lengths"], allow_pickle=False)
            blob = open(path, "rb").read()
            assert int(lengths.sum()) == len(blob)
            assert list(lengths.shape) == f["shape"]
            parts, pos = [], 0
            for n in lengths.reshape(-1):
                parts.append(blob[pos:pos + int(n)])
                pos += int(n)
            raw = b"\0".join(parts)
            meta = "bytes " + repr(list(lengths.shape))
        else:
            a = np.load(path, allow_pickle=False)
            assert list(a.shape) == f["shape"], (a.shape, f["shape"])
            if a.dtype.kind == "U":
                raw = "\0".join(a.reshape(-1).tolist()).encode("utf-8")
            else:
                assert a.flags["C_CONTIGUOUS"]
                raw = a.tobytes()
            meta = a.dtype.str + " " + repr(list(a.shape))
        open(path + ".raw", "wb").write(raw)
        open(path + ".meta", "w").write(meta)
print("ok", idx["count"])
)PY";

class NpyTest : public ::testing::Test {
protected:
  void SetUp() override {
    python_ = pythonWithNumpy();
    if (python_.empty())
      GTEST_SKIP() << "no python3 with numpy";
    dir_.write("reader.py", kReader);
  }

  /// Runs `p` into npy:<dir>/out, has numpy read it back, and compares with
  /// the outputs of the iterator API.
  void check(const runtime::Plan &p, const std::vector<std::string> &descr) {
    std::string out = dir_ / "out";
    runtime::RunOptions o;
    o.sink = "npy:" + out;
    o.progress = runtime::RunOptions::Progress::Off;
    std::ostringstream so, se;
    ASSERT_EQ(runtime::runPipeline(p, o, so, se), 0) << se.str();
    std::string cmd = python_ + " " + (dir_ / "reader.py") + " " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

    std::vector<Output> outs = runAll(p);
    nlohmann::json index = nlohmann::json::parse(readAll(out + "/index.json"));
    ASSERT_EQ(index["outputs"].size(), outs.size());
    const RecordType &type = p.outputType();
    for (size_t i = 0; i < outs.size(); ++i) {
      const nlohmann::json &entry = index["outputs"][i];
      for (size_t f = 0; f < type.size(); ++f) {
        const Tensor &t = outs[i].fields[f];
        std::string file = entry["fields"][type.fields()[f].name]["file"];
        std::string raw = readAll(out + "/" + file + ".raw");
        std::string expect;
        if (t.isNumeric()) {
          expect.assign(reinterpret_cast<const char *>(t.raw()), t.nbytes());
        } else {
          for (size_t k = 0; k < t.stringValues().size(); ++k)
            expect += (k ? std::string(1, '\0') : "") + t.stringValues()[k];
        }
        EXPECT_EQ(raw, expect) << file;
        std::string meta = readAll(out + "/" + file + ".meta");
        std::string want = descr[f];
        if (want == "<U") {
          // numpy's fixed width: the longest value in code points.
          size_t width = 1;
          for (const std::string &v : t.stringValues()) {
            size_t n = 0;
            for (unsigned char c : v)
              n += (c & 0xC0) != 0x80;
            width = std::max(width, n);
          }
          want += std::to_string(width);
        }
        std::string shape = "[";
        for (size_t d = 0; d < t.rank(); ++d)
          shape += (d ? ", " : "") + std::to_string(t.dim(d));
        shape += "]";
        EXPECT_EQ(meta, want + " " + shape) << file;
      }
    }
  }

  std::string python_;
  TempDir dir_;
};

TEST_F(NpyTest, NumericBatchesOfFashionMnist) {
  if (!haveFashionMnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  runtime::Plan p = planFromYaml(
      dir_, "pipeline: fm\nseed: 3\nsource:\n  idx:\n    images: " +
                kFashionMnistImages + "\n    labels: " + kFashionMnistLabels +
                "\nsteps:\n  - take: 10\n"
                "  - random_crop: {field: image, size: 24}\n"
                "  - normalize: {field: image, mean: 72.94, std: 90.02}\n"
                "  - cast: {field: label, dtype: u8, as: small}\n"
                "  - map: {field: label, expr: \"x > 4\", as: flag}\n"
                "  - batch: 4\n");
  check(p, {"<f4", "<i8", "|u1", "|b1"});
}

TEST_F(NpyTest, StringAndBytesFields) {
  dir_.write("text/a.txt", "hello\ncaf\xc3\xa9 \xe4\xb8\xad\n\nlast line\n");
  dir_.write("blobs/x.bin", std::string("\x00\x01\x02\xff\x00", 5));
  dir_.write("blobs/y.bin", "");
  dir_.write("blobs/z.bin", "plain");
  runtime::Plan text =
      planFromYaml(dir_,
                   "pipeline: t\nsource:\n  text_lines: {files: text/*.txt}\n"
                   "steps:\n  - batch: 3\n",
                   "t.yaml");
  check(text, {"<U"});
  std::filesystem::remove_all(dir_ / "out");
  runtime::Plan blobs =
      planFromYaml(dir_,
                   "pipeline: b\nsource:\n  files: {glob: blobs/*.bin}\n"
                   "steps:\n  - select: [data]\n",
                   "b.yaml");
  check(blobs, {"bytes"});
}

TEST(NpyWriter, RefusesNonNumericAndUnknownSinks) {
  EXPECT_FALSE(runtime::writeNpy("/nonexistent/x.npy",
                                 Tensor::string(ElemType::String, "a"))
                   .isOk());
  auto bad = runtime::makeSink("parquet:out");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(bad.status().message().find("'null' or 'npy:DIR'"),
            std::string::npos);
}

} // namespace
