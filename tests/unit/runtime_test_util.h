//===- runtime_test_util.h - Helpers shared by the runtime tests ----------===//
//
// Specs written by the test into a temporary directory, parsed with the real
// front end and turned into a runtime Plan (the compiler's module->Plan path
// is not needed for runtime tests), plus running a Plan to a list of outputs
// and where Fashion-MNIST is.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TESTS_UNIT_RUNTIME_TEST_UTIL_H
#define SLUICE_TESTS_UNIT_RUNTIME_TEST_UTIL_H

#include "test_util.h"

#include "sluice/dsl/Spec.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace sluice::rttest {

using sluice::testing::TempDir;

/// Debian's dataset-fashion-mnist, test split.
inline const std::string kFashionMnistImages =
    std::string(SLUICE_FASHION_MNIST_DIR) + "/t10k-images-idx3-ubyte.gz";
inline const std::string kFashionMnistLabels =
    std::string(SLUICE_FASHION_MNIST_DIR) + "/t10k-labels-idx1-ubyte.gz";

/// True when dataset-fashion-mnist is installed (the package brings the
/// images and labels together); tests that read it skip otherwise.
inline bool haveFashionMnist() {
  struct stat sb;
  return ::stat(kFashionMnistImages.c_str(), &sb) == 0;
}

/// The runtime Plan of a checked spec: the source and steps in order, each
/// with its input/output record types and the spec's schedule knobs.
inline runtime::Plan planFromSpec(const dsl::Spec &spec) {
  runtime::Plan p;
  p.name = spec.pipeline;
  p.specFile = spec.file;
  size_t slash = spec.file.rfind('/');
  p.baseDir = slash == std::string::npos ? "." : spec.file.substr(0, slash);
  p.seed = spec.seed;
  p.epochs = spec.epochs;
  p.cores = spec.budget.cores;
  p.memoryBytes = spec.budget.memoryBytes;
  p.rank = spec.distributed.rank;
  p.worldSize = spec.distributed.worldSize;
  p.rankLoc = spec.distributed.rankLoc;
  p.worldSizeLoc = spec.distributed.worldSizeLoc;
  auto convert = [&](const dsl::Step &s, const RecordType &in) {
    runtime::PlanStep st;
    st.name = s.name;
    st.op = s.op;
    st.kind = s.def ? s.def->kind : OpKind::Element;
    st.params = s.params;
    st.inputType = in;
    st.outputType = s.outputType;
    st.loc = s.loc;
    for (const char *key : {"default", s.name.c_str()}) {
      auto it = spec.schedule.find(key);
      if (it == spec.schedule.end())
        continue;
      pinKnobs(st.schedule, it->second);
    }
    return st;
  };
  p.source = convert(spec.source, RecordType());
  p.source.kind = OpKind::Source;
  RecordType prev = spec.source.outputType;
  for (const dsl::Step &s : spec.steps) {
    p.steps.push_back(convert(s, prev));
    prev = s.outputType;
  }
  return p;
}

/// Writes `yaml` to dir/name, parses and checks it; fails the test (and
/// returns an empty plan) on spec errors.
inline runtime::Plan planFromYaml(const TempDir &dir, const std::string &yaml,
                                  const std::string &name = "spec.yaml") {
  std::string path = dir.write(name, yaml);
  dsl::DiagnosticEngine diags(path, yaml);
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  std::ostringstream errs;
  diags.print(errs);
  EXPECT_TRUE(spec != nullptr) << errs.str();
  if (!spec)
    return runtime::Plan();
  return planFromSpec(*spec);
}

/// The ids fixture of the runtime semantics and resume tests: three CSV
/// files data/part-{0,1,2}.csv holding rows `id,half` (half = id * 0.5) for
/// ids 0..19 (7, 5 and 8 rows), read by the csv source, so shard boundaries
/// fall inside the epoch.
inline void writeIdCsvs(const TempDir &dir) {
  auto rows = [](int64_t lo, int64_t hi) {
    std::string s;
    for (int64_t i = lo; i < hi; ++i)
      s += std::to_string(i) + "," + std::to_string(i * 0.5) + "\n";
    return s;
  };
  dir.write("data/part-0.csv", rows(0, 7));
  dir.write("data/part-1.csv", rows(7, 12));
  dir.write("data/part-2.csv", rows(12, 20));
}

/// The plan of a spec named `name` (seed 5) reading writeIdCsvs()'s files
/// with fields {id: i64, half: f32}, then `steps` (YAML list items, may be
/// empty), for `epochs` epochs; `extra` is appended at the top level.
inline runtime::Plan idCsvPlan(const TempDir &dir, const std::string &name,
                               const std::string &steps, int64_t epochs,
                               const std::string &extra = "") {
  std::string yaml = "pipeline: " + name +
                     "\nseed: 5\nsource:\n  csv:\n"
                     "    files: data/part-*.csv\n    columns:\n"
                     "      - {name: id, type: i64}\n"
                     "      - {name: half, type: f32}\n";
  yaml += "epochs: " + std::to_string(epochs) + "\n";
  yaml += steps.empty() ? "steps: []\n" : "steps:\n" + steps;
  yaml += extra;
  return planFromYaml(dir, yaml);
}

/// A w x h RGB image as a 4:2:0 JPEG of quality 90, each sample
/// `pixel(x, y, c) & 0xFF` (c = 0, 1, 2 for R, G, B).
template <class F> std::string encodeRgbJpeg(int w, int h, F pixel) {
  std::vector<unsigned char> rgb(static_cast<size_t>(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[static_cast<size_t>((y * w + x) * 3 + c)] =
            static_cast<unsigned char>(pixel(x, y, c) & 0xFF);
  tjhandle tj = tjInitCompress();
  unsigned char *buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &buf, &size,
                       TJSAMP_420, 90, 0);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  std::string out(reinterpret_cast<char *>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

/// One output with its fields copied out.
struct Output {
  std::vector<Tensor> fields;
  int64_t epoch = 0;
};

/// Runs a plan to the end; fails the test on an error.
inline std::vector<Output> runAll(const runtime::Plan &plan,
                                  const runtime::RunOptions &opts = {},
                                  runtime::RunStats *stats = nullptr) {
  std::vector<Output> outs;
  auto p = runtime::Pipeline::create(plan, opts);
  EXPECT_TRUE(bool(p)) << (p ? "" : p.status().message());
  if (!p)
    return outs;
  runtime::Batch b;
  for (;;) {
    Expected<bool> more = (*p)->next(b);
    EXPECT_TRUE(bool(more)) << (more ? "" : more.status().message());
    if (!more || !*more)
      break;
    outs.push_back({b.fields(), b.epoch()});
  }
  (*p)->stop();
  if (stats)
    *stats = (*p)->stats();
  Status bal = (*p)->stats().checkBalanced();
  EXPECT_TRUE(bal.isOk()) << bal.message();
  return outs;
}

/// All values of an integer field of the outputs, flattened in order.
inline std::vector<int64_t> ints(const std::vector<Output> &outs,
                                 size_t field) {
  std::vector<int64_t> v;
  for (const Output &o : outs) {
    const Tensor &t = o.fields[field];
    for (int64_t i = 0; i < t.numElements(); ++i) {
      switch (t.elem()) {
      case ElemType::I64:
        v.push_back(t.data<int64_t>()[i]);
        break;
      case ElemType::I32:
        v.push_back(t.data<int32_t>()[i]);
        break;
      case ElemType::U8:
        v.push_back(t.data<uint8_t>()[i]);
        break;
      default:
        ADD_FAILURE() << "not an integer field: " << t.type().str();
        return v;
      }
    }
  }
  return v;
}

/// Bytes of every output, concatenated (for bit-exact comparisons).
inline std::string allBytes(const std::vector<Output> &outs) {
  std::string s;
  for (const Output &o : outs)
    for (const Tensor &t : o.fields) {
      s += t.type().str();
      if (t.isNumeric())
        s.append(reinterpret_cast<const char *>(t.raw()), t.nbytes());
      else
        for (const std::string &v : t.stringValues())
          s += v + '\0';
    }
  return s;
}

/// The stats of the stage called `name`, or a default.
inline runtime::StageStats stageNamed(const runtime::RunStats &s,
                                      const std::string &name) {
  for (const auto &st : s.stages)
    if (st.name == name)
      return st;
  ADD_FAILURE() << "no stage " << name;
  return {};
}

} // namespace sluice::rttest

#endif // SLUICE_TESTS_UNIT_RUNTIME_TEST_UTIL_H
