//===- runtime_elementops_test.cpp - Steps bound to their kernels ---------===//
//
// Table-driven: each element op runs as a pipeline step and must give, for
// every record, exactly what its kernel gives when called by hand on the
// source record with the step's parameters (and, for random ops, the Rng of
// (seed, epoch, record index, step stream)). This checks the bindings:
// parameter reading, field routing, `as`, and the randomness contract.
//
//===----------------------------------------------------------------------===//
#include "runtime_test_util.h"

#include "sluice/ops/Random.h"
#include "sluice/ops/kernels/Categorical.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Image.h"
#include "sluice/ops/kernels/Layout.h"

#include <functional>

using namespace sluice;
using namespace sluice::rttest;
namespace k = sluice::kernels;

namespace {

constexpr uint64_t kSeed = 11;

/// The expected value of the step's result for one source record.
using Reference =
    std::function<Expected<Tensor>(const Record &src, uint64_t index)>;

struct OpCase {
  const char *name;
  const char *source; ///< "csv" or "idx"
  std::string step;   ///< one YAML list item
  std::string result; ///< field holding the result
  Reference expect;
};

Rng rngFor(const std::string &op, uint64_t index, uint64_t occurrence = 1) {
  return Rng(kSeed, 0, index, streamId(op, occurrence));
}

class ElementOpsTest : public ::testing::TestWithParam<OpCase> {
protected:
  std::string sourceYaml(const std::string &kind) {
    if (kind == "idx")
      return "  idx:\n    images: " + kFashionMnistImages +
             "\n    labels: " + kFashionMnistLabels + "\n";
    std::string rows;
    for (int i = 0; i < 40; ++i) {
      rows += std::to_string(i) + ",";
      for (int c = 0; c < 4; ++c) {
        if ((i + c) % 7 != 3)
          rows += std::to_string(i * 0.25 - c * 1.5);
        rows += ",";
      }
      rows += "word" + std::to_string(i % 5) + " more," +
              (i % 2 ? "ff" : "1a2b") + "\n";
    }
    dir_.write("rows.csv", rows);
    return "  csv:\n    files: rows.csv\n    columns:\n"
           "      - {name: id, type: i64}\n"
           "      - {name: v, type: f32, count: 4}\n"
           "      - {name: s, type: string}\n"
           "      - {name: cat, type: hex32}\n";
  }

  TempDir dir_;
};

TEST_P(ElementOpsTest, MatchesTheKernel) {
  const OpCase &c = GetParam();
  if (std::string(c.source) == "idx" && !haveFashionMnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  std::string head = "pipeline: ops\nseed: " + std::to_string(kSeed) +
                     "\nsource:\n" + sourceYaml(c.source) + "steps:\n";
  runtime::Plan src = planFromYaml(dir_, head + "  - take: 40\n", "src.yaml");
  runtime::Plan op =
      planFromYaml(dir_, head + "  - take: 40\n" + c.step, "op.yaml");
  ASSERT_FALSE(op.steps.empty());
  std::vector<Output> in = runAll(src);
  ASSERT_EQ(in.size(), 40u);
  int field = op.outputType().indexOf(c.result);
  ASSERT_GE(field, 0) << c.result << " not in " << op.outputType().str();
  for (int threads : {1, 2}) {
    runtime::RunOptions o;
    o.threads = threads;
    std::vector<Output> out = runAll(op, o);
    ASSERT_EQ(out.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      Record rec;
      rec.fields = in[i].fields;
      rec.index = i;
      Expected<Tensor> want = c.expect(rec, i);
      ASSERT_TRUE(bool(want)) << want.status().message();
      const Tensor &got = out[i].fields[static_cast<size_t>(field)];
      EXPECT_TRUE(got.sameAs(*want))
          << c.name << " record " << i << ": got " << got.type().str()
          << ", want " << want->type().str();
      // The declared type of the result matches what came out.
      const FieldType &declared =
          op.outputType().fields()[static_cast<size_t>(field)].type;
      EXPECT_EQ(got.elem(), declared.elem);
      ASSERT_EQ(got.rank(), declared.rank());
      for (size_t d = 0; d < got.rank(); ++d)
        if (declared.shape[d] != kDynamic)
          EXPECT_EQ(got.dim(d), declared.shape[d]);
    }
  }
}

// Source fields: idx {image: u8[28,28], label: i64};
// csv {id: i64, v: f32[4], s: string, cat: i64}.
const OpCase kOps[] = {
    {"resize_hw", "idx", "  - resize: {field: image, size: [14, 20]}\n",
     "image",
     [](const Record &r, uint64_t) {
       return k::resize(r.fields[0], 14, 20, k::Interpolation::Bilinear,
                        /*antialias=*/true);
     }},
    {"resize_hw_no_antialias", "idx",
     "  - resize: {field: image, size: [14, 20], antialias: false}\n", "image",
     [](const Record &r, uint64_t) {
       return k::resize(r.fields[0], 14, 20, k::Interpolation::Bilinear);
     }},
    {"resize_short_side_area", "idx",
     "  - resize: {field: image, size: 9, interpolation: area, as: small}\n",
     "small",
     [](const Record &r, uint64_t) {
       return k::resize(r.fields[0], 9, 9, k::Interpolation::Area);
     }},
    {"center_crop", "idx", "  - center_crop: {field: image, size: [20, 17]}\n",
     "image",
     [](const Record &r, uint64_t) {
       return k::centerCrop(r.fields[0], 20, 17);
     }},
    {"random_crop", "idx",
     "  - random_crop: {field: image, size: 24, padding: 3}\n", "image",
     [](const Record &r, uint64_t i) {
       Rng rng = rngFor("random_crop", i);
       return k::randomCrop(r.fields[0], 24, 24, 3, false, rng);
     }},
    {"random_resized_crop", "idx",
     "  - random_resized_crop: {field: image, size: [16, 12], scale: [0.2, "
     "0.9], ratio: [0.5, 2.0], as: crop}\n",
     "crop",
     [](const Record &r, uint64_t i) {
       k::RandomResizedCropParams p;
       p.height = 16;
       p.width = 12;
       p.scaleLo = 0.2;
       p.scaleHi = 0.9;
       p.ratioLo = 0.5;
       p.ratioHi = 2.0;
       p.antialias = true; // the op's default
       Rng rng = rngFor("random_resized_crop", i);
       return k::randomResizedCrop(r.fields[0], p, rng);
     }},
    {"random_flip_twice", "idx",
     "  - random_flip: {field: image, axis: height, p: 0.5}\n"
     "  - random_flip: {field: image, axis: width, p: 0.3}\n",
     "image",
     [](const Record &r, uint64_t i) -> Expected<Tensor> {
       Rng a = rngFor("random_flip", i, 1);
       Expected<Tensor> t =
           k::randomFlip(r.fields[0], k::FlipAxis::Height, 0.5, a);
       if (!t)
         return t;
       Rng b = rngFor("random_flip", i, 2);
       return k::randomFlip(*t, k::FlipAxis::Width, 0.3, b);
     }},
    {"normalize", "idx",
     "  - normalize: {field: image, mean: 72.94, std: 90.02, as: x}\n", "x",
     [](const Record &r, uint64_t) {
       return k::normalize(r.fields[0], {72.94}, {90.02});
     }},
    {"transpose_perm", "idx", "  - transpose: {field: image, perm: [1, 0]}\n",
     "image",
     [](const Record &r, uint64_t) {
       return k::transpose(r.fields[0], {1, 0});
     }},
    {"pad_image", "idx",
     "  - pad: {field: image, padding: [1, 2, 3, 4], value: 7}\n", "image",
     [](const Record &r, uint64_t) {
       return k::pad(r.fields[0], {{1, 2}, {3, 4}}, 7);
     }},
    {"one_hot", "idx", "  - one_hot: {field: label, depth: 10, dtype: u8}\n",
     "label",
     [](const Record &r, uint64_t) {
       return k::oneHot(r.fields[1], 10, ElemType::U8);
     }},
    {"cast", "csv", "  - cast: {field: id, dtype: f16, as: half}\n", "half",
     [](const Record &r, uint64_t) {
       return k::cast(r.fields[0], ElemType::F16);
     }},
    {"fill_missing", "csv", "  - fill_missing: {field: v, value: -1}\n", "v",
     [](const Record &r, uint64_t) { return k::fillMissing(r.fields[1], -1); }},
    {"clamp_as", "csv", "  - clamp: {field: v, min: 0, max: 2, as: vc}\n", "vc",
     [](const Record &r, uint64_t) { return k::clamp(r.fields[1], 0.0, 2.0); }},
    {"clamp_keeps_input", "csv", "  - clamp: {field: v, max: 1, as: vc}\n", "v",
     [](const Record &r, uint64_t) -> Expected<Tensor> { return r.fields[1]; }},
    {"pad_vector", "csv", "  - pad: {field: v, padding: [1, 2], value: 9}\n",
     "v",
     [](const Record &r, uint64_t) {
       return k::pad(r.fields[1], {{1, 2}}, 9);
     }},
    {"truncate", "csv", "  - truncate: {field: v, length: 3}\n", "v",
     [](const Record &r, uint64_t) { return k::truncate(r.fields[1], 3, 0); }},
    {"map", "csv", "  - map: {field: v, expr: \"x * 2 + 1\"}\n", "v",
     [](const Record &r, uint64_t) -> Expected<Tensor> {
       ExprError err;
       ExprPtr e = parseExpr("x * 2 + 1", err);
       Expected<k::CompiledExpr> c =
           k::CompiledExpr::compileMap(*e, ElemType::F32);
       if (!c)
         return c.status();
       return c->map(r.fields[1]);
     }},
    {"map_dtype", "csv",
     "  - map: {field: id, expr: \"x / 3\", dtype: i32, as: third}\n", "third",
     [](const Record &r, uint64_t) -> Expected<Tensor> {
       ExprError err;
       ExprPtr e = parseExpr("x / 3", err);
       Expected<k::CompiledExpr> c =
           k::CompiledExpr::compileMap(*e, ElemType::I64);
       if (!c)
         return c.status();
       Expected<Tensor> t = c->map(r.fields[0]);
       if (!t)
         return t;
       return k::cast(*t, ElemType::I32);
     }},
    {"hash_bucket_string", "csv", "  - hash_bucket: {field: s, buckets: 97}\n",
     "s",
     [](const Record &r, uint64_t) { return k::hashBucket(r.fields[2], 97); }},
    {"hash_bucket_hex", "csv",
     "  - hash_bucket: {field: cat, buckets: 1000, as: h}\n", "h",
     [](const Record &r, uint64_t) {
       return k::hashBucket(r.fields[3], 1000);
     }},
    {"bucketize", "csv",
     "  - bucketize: {field: v, boundaries: [-2, 0, 2.5]}\n", "v",
     [](const Record &r, uint64_t) {
       return k::bucketize(r.fields[1], {-2, 0, 2.5});
     }},
};

INSTANTIATE_TEST_SUITE_P(Ops, ElementOpsTest, ::testing::ValuesIn(kOps),
                         [](const auto &info) { return info.param.name; });

TEST(ElementOps, StreamsFollowTheOccurrenceInTheStepName) {
  runtime::PlanStep s;
  s.op = "random_flip";
  s.name = "random_flip";
  EXPECT_EQ(runtime::stageStream(s), streamId("random_flip", 1));
  s.name = "random_flip.3";
  EXPECT_EQ(runtime::stageStream(s), streamId("random_flip", 3));
  s.name = "random_flip.x";
  EXPECT_EQ(runtime::stageStream(s), streamId("random_flip", 1));
}

TEST(ElementOps, UnknownOpsAndMissingVocabulariesAreClearErrors) {
  runtime::Plan plan;
  plan.baseDir = "/nonexistent";
  runtime::PlanStep s;
  s.name = "sharpen";
  s.op = "sharpen";
  s.kind = OpKind::Element;
  s.params = Value::map();
  s.params.set("field", Value::string("image"));
  s.inputType = RecordType({{"image", FieldType(ElemType::U8, {2, 2})}});
  s.outputType = s.inputType;
  Expected<runtime::ElementFn> fn = runtime::bindElementOp(s, plan);
  ASSERT_FALSE(bool(fn));
  EXPECT_NE(fn.status().message().find("no kernel for element op 'sharpen'"),
            std::string::npos)
      << fn.status().message();

  s.name = s.op = "tokenize";
  s.params.set("vocab", Value::string("missing.txt"));
  s.inputType = RecordType({{"image", FieldType(ElemType::String)}});
  s.outputType = RecordType({{"image", FieldType(ElemType::I64, {kDynamic})}});
  fn = runtime::bindElementOp(s, plan);
  ASSERT_FALSE(bool(fn));
  EXPECT_NE(fn.status().message().find("missing.txt"), std::string::npos)
      << fn.status().message();
}

} // namespace
