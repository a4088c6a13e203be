//===- compiler_codegen_test.cpp - JIT kernels vs the runtime's kernels ---===//
//
// Generated kernels must compute the bytes the runtime's own kernels (and
// the expression interpreter) compute, or turning codegen off would change
// outputs. Each case binds one value-wise step twice, through the JIT's
// kernel table and through runtime::bindElementOp, runs both on the same
// random tensor (with NaNs carrying payloads, +-inf, -0, denormals and the
// type's extremes mixed in), and compares the outputs byte for byte. The
// pipeline tests run whole specs with codegen on and off.
//
//===----------------------------------------------------------------------===//
#include "compiler_test_util.h"
#include "runtime_test_util.h"

#include "sluice/compiler/Codegen.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Scalar.h"
#include "sluice/runtime/CompiledKernels.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

using namespace sluice;
using sluice::rttest::Output;
using sluice::testing::TempDir;

namespace {

/// Random values of `elem` with the awkward ones mixed in.
Tensor randomTensor(ElemType elem, int64_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty(elem, {n});
  uint8_t *raw = t.mutableRaw();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = rng();
    int kind = static_cast<int>(r % 16);
    switch (elem) {
    case ElemType::F32: {
      float v;
      static const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                                      -std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::infinity(),
                                      -0.0f,
                                      0.0f,
                                      std::numeric_limits<float>::denorm_min(),
                                      -1e-40f,
                                      std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::lowest(),
                                      2.5f,
                                      -2.5f,
                                      0.5f};
      if (kind < 6) {
        v = special[(r >> 8) % (sizeof(special) / sizeof(float))];
      } else if (kind == 6) { // NaN with a payload (and either sign)
        uint32_t bits = 0x7F800001u | uint32_t(r >> 32) | (uint32_t(r) << 31);
        std::memcpy(&v, &bits, 4);
        if (!(v != v))
          v = std::numeric_limits<float>::quiet_NaN();
      } else if (kind == 7) { // any bit pattern
        uint32_t bits = uint32_t(r >> 16);
        std::memcpy(&v, &bits, 4);
      } else {
        v = static_cast<float>(static_cast<int64_t>(r >> 40) % 2000) / 8.0f -
            100.0f;
      }
      std::memcpy(raw + 4 * i, &v, 4);
      break;
    }
    case ElemType::F64: {
      double v;
      static const double special[] = {
          std::numeric_limits<double>::quiet_NaN(),
          -std::numeric_limits<double>::infinity(),
          std::numeric_limits<double>::infinity(),
          -0.0,
          std::numeric_limits<double>::denorm_min(),
          std::numeric_limits<double>::max(),
          std::numeric_limits<double>::lowest(),
          9.3e18,
          -9.3e18,
          300.5,
          -2.5};
      if (kind < 6) {
        v = special[(r >> 8) % (sizeof(special) / sizeof(double))];
      } else if (kind == 6) {
        uint64_t bits = 0x7FF0000000000001ull | (r >> 13) | (r << 63);
        std::memcpy(&v, &bits, 8);
        if (!(v != v))
          v = std::numeric_limits<double>::quiet_NaN();
      } else if (kind == 7) {
        uint64_t bits = rng();
        std::memcpy(&v, &bits, 8);
      } else {
        v = static_cast<double>(static_cast<int64_t>(r >> 40) % 4000) / 16.0 -
            100.0;
      }
      std::memcpy(raw + 8 * i, &v, 8);
      break;
    }
    case ElemType::F16: {
      uint16_t h;
      static const uint16_t special[] = {
          0x7E00,         // quiet NaN
          0x7C01,         // signaling NaN, payload 1
          0xFD23,         // negative signaling NaN with a payload
          0xFE7F,         // negative quiet NaN with a payload
          0x7C00, 0xFC00, // +-inf
          0x8000, 0x0000, // -0, +0
          0x0001, 0x83FF, // smallest subnormal, largest negative subnormal
          0x0400, 0x8400, // +-smallest normal
          0x7BFF, 0xFBFF, // max, lowest
          0x4100, 0xC100, 0x3800, 0x3E00}; // 2.5, -2.5, 0.5, 1.5
      if (kind < 6) {
        h = special[(r >> 8) % (sizeof(special) / sizeof(uint16_t))];
      } else if (kind == 6) { // NaN with a payload (and either sign)
        h = uint16_t(0x7C01 | ((r >> 32) & 0x3FF) | ((r & 1) << 15));
      } else if (kind == 7) { // any bit pattern
        h = uint16_t(r >> 16);
      } else {
        h = kernels::floatToHalf(
            static_cast<float>(static_cast<int64_t>(r >> 40) % 2000) / 8.0f -
            100.0f);
      }
      std::memcpy(raw + 2 * i, &h, 2);
      break;
    }
    case ElemType::BF16: {
      uint16_t h;
      static const uint16_t special[] = {
          0x7FC0,         // quiet NaN
          0x7F81,         // signaling NaN, payload 1
          0xFF93,         // negative signaling NaN with a payload
          0xFFC5,         // negative quiet NaN with a payload
          0x7F80, 0xFF80, // +-inf
          0x8000, 0x0000, // -0, +0
          0x0001, 0x807F, // smallest subnormal, largest negative subnormal
          0x0080, 0x8080, // +-smallest normal
          0x7F7F, 0xFF7F, // max, lowest
          0x4020, 0xC020, 0x3F00, 0x3FC0}; // 2.5, -2.5, 0.5, 1.5
      if (kind < 6) {
        h = special[(r >> 8) % (sizeof(special) / sizeof(uint16_t))];
      } else if (kind == 6) { // NaN with a payload (and either sign)
        h = uint16_t(0x7F81 | ((r >> 32) & 0x7F) | ((r & 1) << 15));
      } else if (kind == 7) { // any bit pattern
        h = uint16_t(r >> 16);
      } else {
        h = kernels::floatToBf16(
            static_cast<float>(static_cast<int64_t>(r >> 40) % 2000) / 8.0f -
            100.0f);
      }
      std::memcpy(raw + 2 * i, &h, 2);
      break;
    }
    case ElemType::Bool: // mostly 0 and 1, some other non-zero bytes
      raw[i] = kind < 7 ? 0 : kind < 14 ? 1 : uint8_t(r >> 8);
      break;
    default: {
      unsigned size = elemTypeSize(elem);
      uint64_t v = r;
      if (kind < 3) // extremes and their neighbours
        v = kind == 0 ? 0 : (kind == 1 ? ~0ull : (1ull << (size * 8 - 1)));
      else if (kind < 10) // small values, both signs
        v = static_cast<uint64_t>(static_cast<int64_t>(r % 41) - 20);
      std::memcpy(raw + size * i, &v, size);
      break;
    }
    }
  }
  return t;
}

/// randomTensor() of `rows` x `channels` values, shaped [rows, channels].
Tensor randomMatrix(ElemType elem, int64_t rows, int64_t channels,
                    uint32_t seed) {
  Tensor flat = randomTensor(elem, rows * channels, seed);
  Tensor t = Tensor::empty(elem, {rows, channels});
  std::memcpy(t.mutableRaw(), flat.raw(), flat.nbytes());
  return t;
}

/// Runs `kernel` and `reference` on records holding `input`: both succeed
/// with the same type and bytes (the result, returned), or both fail with
/// the same message (an invalid tensor returned).
Tensor expectSameResult(const runtime::ElementFn &kernel,
                        const runtime::ElementFn &reference,
                        const Tensor &input) {
  Record a, b;
  a.fields = {input};
  b.fields = {input};
  runtime::ElementContext ctx;
  Expected<bool> ra = kernel(a, ctx);
  Expected<bool> rb = reference(b, ctx);
  EXPECT_EQ(bool(ra), bool(rb))
      << (ra ? rb.status().message() : ra.status().message());
  if (!ra || !rb) {
    EXPECT_EQ(ra ? "" : ra.status().message(), rb ? "" : rb.status().message());
    return Tensor();
  }
  const Tensor &x = a.fields[0], &y = b.fields[0];
  EXPECT_EQ(x.type().str(), y.type().str());
  if (x.type().str() == y.type().str())
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << "bytes differ";
  return x;
}

/// A list parameter of doubles.
Value list(const std::vector<double> &v) {
  std::vector<Value> items;
  for (double d : v)
    items.push_back(Value::real(d));
  return Value::list(std::move(items));
}

struct StepCase {
  std::string op;
  std::vector<std::pair<std::string, Value>> params;
  ElemType in;
  std::string label;
};

/// A map case's expression compiled for its input type.
Expected<kernels::CompiledExpr> compileCase(const StepCase &c) {
  ExprError err;
  ExprPtr e;
  for (const auto &[k, v] : c.params)
    if (k == "expr")
      e = parseExpr(v.asString(), err);
  if (!e)
    return Status::error(err.message);
  return kernels::CompiledExpr::compileMap(*e, c.in);
}

/// Every f16 bit pattern, once (and a few more, so the length is not a
/// multiple of any vector width).
Tensor everyHalf() {
  Tensor t = Tensor::empty(ElemType::F16, {65536 + 3});
  uint16_t *h = t.mutableData<uint16_t>();
  for (uint32_t i = 0; i < 65536 + 3; ++i)
    h[i] = uint16_t(i * 40503u); // odd: a permutation of the 65536 patterns
  return t;
}

/// Every bf16 bit pattern, once (and a few more).
Tensor everyBf16() {
  Tensor t = everyHalf();
  return Tensor::viewOf(t, 0, ElemType::BF16, t.shape());
}

/// Every byte as a bool element (the runtime reads any non-zero as true).
Tensor everyBoolByte() {
  Tensor t = Tensor::empty(ElemType::Bool, {256 * 3 + 1});
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.mutableRaw()[i] = uint8_t(i * 7);
  return t;
}

/// The output element type the registry's type rule gives the step.
ElemType outElem(const StepCase &c) {
  if (c.op == "hash_bucket")
    return ElemType::I64;
  if (c.op == "bucketize")
    return ElemType::I32;
  if (c.op == "normalize") {
    for (const auto &[k, v] : c.params)
      if (k == "dtype")
        return *parseElemType(v.asString());
    return ElemType::F32;
  }
  if (c.op == "cast")
    for (const auto &[k, v] : c.params)
      if (k == "dtype")
        return *parseElemType(v.asString());
  if (c.op == "map") {
    auto compiled = compileCase(c);
    return compiled ? compiled->resultType() : c.in;
  }
  return c.in;
}

/// The step `c` on field x of shape `shape`, named after its op.
runtime::PlanStep planStepOf(const StepCase &c, std::vector<int64_t> shape) {
  runtime::PlanStep s;
  s.name = c.op;
  s.op = c.op;
  s.kind = OpKind::Element;
  s.params = Value::map();
  s.params.set("field", Value::string("x"));
  for (const auto &[k, v] : c.params)
    s.params.set(k, v);
  s.inputType = RecordType({{"x", FieldType(c.in, shape)}});
  s.outputType = RecordType({{"x", FieldType(outElem(c), shape)}});
  return s;
}

runtime::Plan planFor(const StepCase &c, int64_t n) {
  runtime::Plan plan;
  plan.name = "codegen_test";
  plan.steps.push_back(planStepOf(c, {n}));
  return plan;
}

std::string describe(const StepCase &c) {
  return c.op + " " + c.label + " on " + std::string(elemTypeName(c.in));
}

void PrintTo(const StepCase &c, std::ostream *os) { *os << describe(c); }

class CodegenStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(CodegenStep, ByteIdenticalToRuntimeKernel) {
  const StepCase &c = GetParam();
  constexpr int64_t n = 4099; // not a multiple of any vector width
  if (c.op == "map") {
    auto compiled = compileCase(c);
    if (!compiled) // e.g. a literal that does not fit the type (NEP 50)
      GTEST_SKIP() << describe(c) << ": " << compiled.status().message();
  }
  // The plan's static length does not bind the kernel: the runtime calls
  // it with each tensor's element count, so the exhaustive inputs below
  // (every f16 pattern, every bool byte) may be longer.
  runtime::Plan plan = planFor(c, n);
  compiler::CodegenOptions opts;
  opts.useCache = false;
  auto jit = compiler::JitKernels::compile(plan, opts);
  ASSERT_TRUE(bool(jit)) << jit.status().message();
  ASSERT_EQ((*jit)->stats().kernels, 1) << describe(c) << " was not compiled";
  const runtime::PlanStep &stage = plan.steps[0];
  auto bound = (*jit)->binder()(stage);
  ASSERT_TRUE(bound.has_value());
  ASSERT_TRUE(bool(*bound)) << bound->status().message();
  Expected<runtime::ElementFn> reference = runtime::bindElementOp(stage, plan);
  ASSERT_TRUE(bool(reference)) << reference.status().message();

  for (uint32_t seed : {0u, 1u, 2u, 3u}) {
    Tensor input = seed != 0                ? randomTensor(c.in, n, seed)
                   : c.in == ElemType::F16  ? everyHalf()
                   : c.in == ElemType::BF16 ? everyBf16()
                   : c.in == ElemType::Bool ? everyBoolByte()
                                            : Tensor();
    if (!input.valid())
      continue;
    Record a, b;
    a.fields = {input};
    b.fields = {input};
    runtime::ElementContext ctx;
    Expected<bool> ra = (**bound)(a, ctx);
    Expected<bool> rb = (*reference)(b, ctx);
    ASSERT_TRUE(bool(ra)) << ra.status().message();
    ASSERT_TRUE(bool(rb)) << rb.status().message();
    const Tensor &x = a.fields[0], &y = b.fields[0];
    ASSERT_EQ(x.type().str(), y.type().str()) << describe(c);
    // The one known difference: LLVM folds `x > 0 ? x : 0 - x` on floats
    // into fabs(x), which clears the sign of a NaN where the interpreter's
    // subtraction keeps it (LLVM does not promise NaN signs through
    // selects). Such elements must still be NaN on both sides.
    bool nanSignMayDiffer = c.label == "x > 0 ? x : 0 - x" &&
                            (c.in == ElemType::F64 || c.in == ElemType::F32);
    for (int64_t i = 0; i < input.numElements(); ++i) {
      size_t size = elemTypeSize(x.elem());
      if (nanSignMayDiffer) {
        double u = kernels::loadAsDouble(x.elem(), x.raw(), size_t(i));
        double v = kernels::loadAsDouble(y.elem(), y.raw(), size_t(i));
        if (u != u && v != v)
          continue;
      }
      if (std::memcmp(x.raw() + i * size, y.raw() + i * size, size) != 0) {
        double in = kernels::loadAsDouble(c.in, input.raw(), size_t(i));
        ADD_FAILURE() << describe(c) << ": element " << i << " (input " << in
                      << ") differs: jit "
                      << kernels::loadAsDouble(x.elem(), x.raw(), size_t(i))
                      << ", runtime "
                      << kernels::loadAsDouble(y.elem(), y.raw(), size_t(i));
        break;
      }
    }
  }
}

std::vector<StepCase> stepCases() {
  std::vector<StepCase> cases;
  const ElemType all[] = {ElemType::U8,  ElemType::I8,  ElemType::U16,
                          ElemType::I16, ElemType::I32, ElemType::I64,
                          ElemType::F16, ElemType::F32, ElemType::F64,
                          ElemType::Bool};
  const ElemType ints[] = {ElemType::U8,  ElemType::I8,  ElemType::U16,
                           ElemType::I16, ElemType::I32, ElemType::I64,
                           ElemType::Bool};
  for (ElemType e : all) {
    cases.push_back(
        {"fill_missing", {{"value", Value::real(-1.5)}}, e, "-1.5"});
    cases.push_back({"clamp",
                     {{"min", Value::real(-3.5)}, {"max", Value::real(100.25)}},
                     e,
                     "[-3.5, 100.25]"});
    cases.push_back({"clamp", {{"max", Value::integer(7)}}, e, "max 7"});
    cases.push_back({"clamp", {{"min", Value::real(1e30)}}, e, "min 1e30"});
    for (ElemType to : all)
      cases.push_back(
          {"cast",
           {{"dtype", Value::string(std::string(elemTypeName(to)))}},
           e,
           "to " + std::string(elemTypeName(to))});
    if (e == ElemType::Bool) {
      // bool is a condition: no arithmetic (a spec error, as numpy's
      // `-` on bools), but logic, comparisons of bools, and `?`.
      for (const char *expr :
           {"x", "not x", "x ? 1 : 0", "x ? 2.5 : -1", "x ? -3 : 300",
            "x == true", "x != false", "x and true", "x or false",
            "not x ? 0.5 : 1e30", "x ? x : false"})
        cases.push_back({"map", {{"expr", Value::string(expr)}}, e, expr});
    }
    for (const char *expr : {"log(max(x, 0) + 1)",
                             "x * 2 + 1",
                             "x - 7",
                             "x % 3",
                             "x % -4",
                             "x / 3",
                             "x // 3",
                             "x // -4",
                             "-x",
                             "abs(x)",
                             "min(x, 5)",
                             "max(x, -5)",
                             "clamp(x, -1, 1)",
                             "x > 0 ? x : 0 - x",
                             "round(x)",
                             "floor(x)",
                             "ceil(x)",
                             "sqrt(x)",
                             "exp(x)",
                             "sigmoid(x)",
                             "tanh(x)",
                             "sin(x) + cos(x)",
                             "pow(x, 2)",
                             "pow(x, 3) + 1",
                             "x * 1.5 // 0.25",
                             "pow(x, 0.5)",
                             "log1p(abs(x))",
                             "x * x * x",
                             "x % 2.5",
                             "x * 0.1 + 0.7",
                             "x + 2147483647",
                             "x > 3 ? 1 : 0",
                             "x == 3 ? 2.5 : x",
                             "x * 1000",
                             "x / 1e-4",
                             "x * 1e-5",
                             "max(x, -x)",
                             "min(-x, x)",
                             "x + 65504",
                             "x == 0.7",
                             "x < 0.7 ? -x : x * 3"})
      if (e != ElemType::Bool)
        cases.push_back({"map", {{"expr", Value::string(expr)}}, e, expr});
    // Boundaries between, at and beyond the values; non-integral ones and
    // doubles past int64's range test the exact int64 comparison.
    cases.push_back({"bucketize",
                     {{"boundaries", list({-2.5, 0, 0, 3, 7.25})}},
                     e,
                     "[-2.5, 0, 0, 3, 7.25]"});
    cases.push_back({"bucketize",
                     {{"boundaries", list({-0x1p64, -0x1p63, -1e-300, 1.0,
                                           0x1p53 + 2, 0x1p63, 1e300})}},
                     e,
                     "extremes"});
    cases.push_back({"bucketize", {{"boundaries", list({})}}, e, "none"});
  }
  // bf16: its conversions both ways (every bit pattern), fill_missing and
  // clamp (no map: numpy has no bf16 arithmetic, the type check refuses it).
  for (ElemType e : all) {
    cases.push_back({"cast", {{"dtype", Value::string("bf16")}}, e, "to bf16"});
    cases.push_back({"cast",
                     {{"dtype", Value::string(std::string(elemTypeName(e)))}},
                     ElemType::BF16,
                     "to " + std::string(elemTypeName(e))});
  }
  cases.push_back(
      {"fill_missing", {{"value", Value::real(-1.5)}}, ElemType::BF16, "-1.5"});
  cases.push_back({"clamp",
                   {{"min", Value::real(-3.5)}, {"max", Value::real(100.25)}},
                   ElemType::BF16,
                   "[-3.5, 100.25]"});
  cases.push_back(
      {"clamp", {{"min", Value::real(1e30)}}, ElemType::BF16, "min 1e30"});
  for (ElemType e : {ElemType::U8, ElemType::F32, ElemType::BF16})
    for (const char *to : {"f16", "bf16"})
      cases.push_back({"normalize",
                       {{"mean", list({0.5})},
                        {"std", list({3.0})},
                        {"dtype", Value::string(to)}},
                       e,
                       std::string("to ") + to});
  for (ElemType e : ints)
    for (int64_t b : {int64_t(1), int64_t(7), int64_t(16383), int64_t(16384),
                      int64_t(1000000), int64_t(99991), (int64_t(1) << 40) + 3,
                      (int64_t(1) << 62) - 1, int64_t(1) << 62})
      cases.push_back({"hash_bucket",
                       {{"buckets", Value::integer(b)}},
                       e,
                       std::to_string(b) + " buckets"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Steps, CodegenStep, ::testing::ValuesIn(stepCases()),
                         [](const ::testing::TestParamInfo<StepCase> &info) {
                           return std::to_string(info.index) + "_" +
                                  info.param.op + "_" +
                                  std::string(elemTypeName(info.param.in));
                         });

/// Steps the generator does not cover are left to the runtime.
TEST(Codegen, UncoveredStepsAreLeftToTheRuntime) {
  StepCase hashFloat{
      "hash_bucket", {{"buckets", Value::integer(5)}}, ElemType::F32, ""};
  runtime::Plan plan = planFor({"fill_missing", {}, ElemType::F32, ""}, 8);
  runtime::PlanStep normalize = plan.steps[0];
  normalize.name = "normalize";
  normalize.op = "normalize";
  plan.steps = {normalize};
  auto jit = compiler::JitKernels::compile(plan);
  ASSERT_TRUE(bool(jit));
  EXPECT_EQ((*jit)->stats().kernels, 0);
  EXPECT_EQ(runtime::kernelTableSize((*jit)->table()), 0u);
  EXPECT_FALSE((*jit)->binder()(normalize).has_value());
  EXPECT_EQ(compiler::compiledSteps(plan), std::vector<std::string>{});
  (void)hashFloat;
}

/// A lone normalize over any channel count is a generated kernel (constant
/// per-channel tables; flat over the elements in periods, as the runtime's
/// loop) with the runtime kernel's bytes: 1, 3, 4, 5, 8 and 64 channels,
/// per-channel and single-pair constants, integer and float inputs with
/// NaN payloads, +-inf, -0 and denormals, the channel dim known to the type
/// or not, and a row count that leaves a partial period.
TEST(Codegen, LoneNormalizeAnyChannelCountIsByteIdentical) {
  for (int64_t channels : {1, 3, 4, 5, 8, 64}) {
    for (ElemType elem :
         {ElemType::U8, ElemType::I32, ElemType::F32, ElemType::F64}) {
      for (bool knownChannels : {true, false}) {
        for (bool onePair : {false, true}) {
          std::string what = std::to_string(channels) + " channels of " +
                             std::string(elemTypeName(elem)) +
                             (knownChannels ? "" : ", channel dim unknown") +
                             (onePair ? ", one mean" : "");
          SCOPED_TRACE(what);
          const int64_t rows = 37;
          std::vector<Value> mean, sd;
          for (int64_t c = 0; c < channels; ++c) {
            mean.push_back(Value::real(onePair && c ? 0 : 0.37 * c - 11.5));
            sd.push_back(Value::real(0.25 + 1.3 * c));
          }
          if (onePair)
            mean.resize(1);
          runtime::Plan plan;
          plan.name = "normalize_test";
          runtime::PlanStep st;
          st.name = st.op = "normalize";
          st.kind = OpKind::Element;
          st.params = Value::map();
          st.params.set("field", Value::string("x"));
          st.params.set("mean", Value::list(mean));
          st.params.set("std", Value::list(sd));
          st.inputType = RecordType(
              {{"x", FieldType(elem, {kDynamic,
                                      knownChannels ? channels : kDynamic})}});
          st.outputType = RecordType(
              {{"x", FieldType(ElemType::F32,
                               st.inputType.fields()[0].type.shape)}});
          plan.steps.push_back(st);
          compiler::CodegenOptions opts;
          opts.useCache = false;
          auto jit = compiler::JitKernels::compile(plan, opts);
          ASSERT_TRUE(bool(jit)) << jit.status().message();
          ASSERT_EQ((*jit)->stats().kernels, 1) << "not compiled";
          auto bound = (*jit)->binder()(plan.steps[0]);
          ASSERT_TRUE(bound.has_value() && bool(*bound));
          Expected<runtime::ElementFn> reference =
              runtime::bindElementOp(plan.steps[0], plan);
          ASSERT_TRUE(bool(reference)) << reference.status().message();
          for (uint32_t seed : {7u, 8u}) {
            Tensor x = expectSameResult(
                **bound, *reference, randomMatrix(elem, rows, channels, seed));
            ASSERT_TRUE(x.valid());
            EXPECT_EQ(x.type().str(), "f32[" + std::to_string(rows) + "," +
                                          std::to_string(channels) + "]");
          }
        }
      }
    }
  }
}

/// normalize over more than 4 channels inside a remap chain (flip, CHW)
/// and alone, in whole pipelines over .npy records of 5, 8 and 64 channels
/// (floats with NaN, +-inf, -0 and denormals; and u8): the generated
/// kernels give the bytes of every pass off without codegen.
TEST(Codegen, ManyChannelNormalizeInPipelines) {
  TempDir dir;
  for (int64_t channels : {3, 5, 8, 64}) {
    for (const char *dtype : {"f4", "u1"}) {
      SCOPED_TRACE(std::to_string(channels) + " channels, " + dtype);
      const int64_t n = 6, h = 5, w = 7;
      ElemType elem = dtype[0] == 'f' ? ElemType::F32 : ElemType::U8;
      Tensor data = randomTensor(elem, n * h * w * channels, 11);
      std::string dict =
          std::string("{'descr': '") + (elem == ElemType::F32 ? "<f4" : "|u1") +
          "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ", " +
          std::to_string(h) + ", " + std::to_string(w) + ", " +
          std::to_string(channels) + "), }";
      std::string header = dict;
      while ((10 + header.size() + 1) % 64 != 0)
        header += ' ';
      header += '\n';
      std::string npy = std::string("\x93NUMPY\x01\x00", 8);
      npy += char(header.size() & 0xFF);
      npy += char(header.size() >> 8);
      npy += header;
      npy.append(reinterpret_cast<const char *>(data.raw()), data.nbytes());
      dir.write("x.npy", npy);
      std::string mean, sd;
      for (int64_t c = 0; c < channels; ++c) {
        mean += (c ? ", " : "") + std::to_string(0.5 * c - 3);
        sd += (c ? ", " : "") + std::to_string(0.75 + 0.5 * c);
      }
      for (const std::string &steps :
           {"  - random_flip: {field: x, axis: width, p: 0.5}\n"
            "  - normalize: {field: x, mean: [" +
                mean + "], std: [" + sd +
                "]}\n"
                "  - transpose: {field: x, to: CHW}\n",
            "  - normalize: {field: x, mean: [" + mean + "], std: [" + sd +
                "]}\n"
                "  - random_flip: {field: x, axis: height, p: 0.5}\n",
            "  - normalize: {field: x, mean: [" + mean + "], std: [" + sd +
                "]}\n"
                "  - map: {field: x, expr: \"x * 2\"}\n"}) {
        SCOPED_TRACE(steps);
        std::string path = dir.write(
            "spec.yaml", "pipeline: many_channels\nseed: 3\nsource:\n"
                         "  npy: {files: " +
                             dir.path() +
                             "/x.npy, field: x}\n"
                             "steps:\n" +
                             steps + "  - batch: {size: 4}\nepochs: 2\n");
        runtime::Plan off = sluice::testing::planOfSpecFile(path, {"all"});
        runtime::RunOptions ref;
        ref.threads = 1;
        std::string reference = rttest::allBytes(rttest::runAll(off, ref));
        ASSERT_GT(reference.size(), 1000u);
        runtime::Plan on = sluice::testing::planOfSpecFile(path);
        std::vector<std::string> compiled = compiler::compiledSteps(on);
        bool normalizeCompiled = false;
        for (const std::string &name : compiled)
          normalizeCompiled |= name.find("normalize") != std::string::npos;
        EXPECT_TRUE(normalizeCompiled) << "no compiled stage has normalize";
        auto jit = compiler::JitKernels::compile(on);
        ASSERT_TRUE(bool(jit)) << jit.status().message();
        for (int threads : {1, 2}) {
          runtime::RunOptions withJit;
          withJit.threads = threads;
          withJit.binder = (*jit)->binder();
          EXPECT_TRUE(rttest::allBytes(rttest::runAll(on, withJit)) ==
                      reference)
              << threads << " threads: output bytes differ";
        }
      }
    }
  }
}

/// One step of a hand-built fused chain on field x: op, params, and the
/// element type it writes (normalize: f32; map: the expression's type).
struct ChainStep {
  std::string op;
  std::vector<std::pair<std::string, Value>> params;
};

/// A `fused_map` stage of `steps` on field x of type `in` with shape
/// [rows, channels] (`channels` kDynamic: not known to the type), as
/// PlanGen builds it from a sluice-fuse-maps run.
runtime::PlanStep fusedChain(const std::vector<ChainStep> &steps, ElemType in,
                             int64_t channels) {
  runtime::PlanStep fused;
  fused.op = "fused_map";
  fused.kind = OpKind::Element;
  fused.params = Value::map();
  std::vector<Value> names;
  ElemType elem = in;
  std::vector<int64_t> shape = {kDynamic, channels};
  fused.inputType = RecordType({{"x", FieldType(in, shape)}});
  for (size_t i = 0; i < steps.size(); ++i) {
    runtime::PlanStep st =
        planStepOf({steps[i].op, steps[i].params, elem, ""}, shape);
    st.name += "." + std::to_string(i);
    elem = st.outputType.fields()[0].type.elem;
    fused.name += (i ? "+" : "") + st.name;
    names.push_back(Value::string(st.name));
    fused.fused.push_back(st);
  }
  fused.params.set("steps", Value::list(names));
  fused.outputType = RecordType({{"x", FieldType(elem, shape)}});
  return fused;
}

/// A normalize inside a sluice-fuse-maps run (per record or per batch: the
/// kernel sees [rows, C] either way) is compiled into the run's value loop
/// with its channel from the element's position, and gives the bytes of the
/// unfused runtime steps: before and after map, cast, clamp, fill_missing
/// and another normalize; u8, i64, f16, f32 and f64 inputs with NaN
/// payloads, +-inf, -0 and denormals; f16, bf16, f32 and f64 outputs (a
/// normalize with dtype f16 or bf16 among them); 1, 3, 5,
/// 13 and 64 channels, known to the type or not, one pair or per channel.
/// A record whose last dim is not the lists' length takes the unfused
/// steps and fails with their error.
TEST(Codegen, NormalizeInFusedValueRunsIsByteIdentical) {
  int cases = 0;
  for (int64_t channels : {1, 3, 5, 13, 64}) {
    std::vector<double> mean, sd, mean2, sd2;
    for (int64_t c = 0; c < channels; ++c) {
      mean.push_back(0.37 * double(c) - 11.5);
      sd.push_back(0.25 + 1.3 * double(c));
      mean2.push_back(1.0 / (1.0 + double(c)));
      sd2.push_back(3.0 - 0.01 * double(c));
    }
    ChainStep norm{"normalize", {{"mean", list(mean)}, {"std", list(sd)}}};
    ChainStep onePair{"normalize", {{"mean", list({2.5})}, {"std", list(sd)}}};
    ChainStep norm2{"normalize", {{"mean", list(mean2)}, {"std", list(sd2)}}};
    auto map = [](const char *e) {
      return ChainStep{"map", {{"expr", Value::string(e)}}};
    };
    auto cast = [](const char *to) {
      return ChainStep{"cast", {{"dtype", Value::string(to)}}};
    };
    ChainStep clamp{"clamp",
                    {{"min", Value::real(-3)}, {"max", Value::real(3)}}};
    auto normTo = [&](const char *to) {
      return ChainStep{"normalize",
                       {{"mean", list(mean)},
                        {"std", list(sd)},
                        {"dtype", Value::string(to)}}};
    };
    ChainStep fill{"fill_missing", {{"value", Value::real(-1.5)}}};
    const std::vector<std::vector<ChainStep>> chains = {
        {map("x * 2 + 1"), norm},
        {cast("f32"), norm},
        {norm, clamp},
        {norm, cast("f16")},
        {norm, cast("f64")},
        {normTo("bf16"), clamp},
        {normTo("f16")},
        {map("x * 2 + 1"), normTo("bf16"), cast("f32")},
        {fill, norm, map("x * 0.5 - 1")},
        {onePair, map("log(max(x, 0) + 1)")},
        {norm, norm2},
        {norm, map("x > 0 ? x : -x"), cast("u8")},
    };
    for (ElemType in : {ElemType::U8, ElemType::I64, ElemType::F16,
                        ElemType::F32, ElemType::F64}) {
      // Every chain as a stage of one plan (one compile); the channel dim
      // is known to the types of every other chain.
      runtime::Plan plan;
      plan.name = "fused_normalize";
      for (size_t ci = 0; ci < chains.size(); ++ci) {
        const std::vector<ChainStep> &chain = chains[ci];
        if (chain[0].op == "fill_missing" && in != ElemType::F32 &&
            in != ElemType::F64)
          continue;
        if (chain[0].op == "map") { // an integer map needs its own literal
          StepCase sc{"map", chain[0].params, in, ""};
          if (!compileCase(sc))
            continue;
        }
        runtime::PlanStep stage =
            fusedChain(chain, in, ci % 2 ? channels : kDynamic);
        stage.name = std::to_string(ci) + ":" + stage.name;
        plan.steps.push_back(stage);
      }
      std::vector<std::string> names;
      for (const runtime::PlanStep &st : plan.steps)
        names.push_back(st.name);
      EXPECT_EQ(compiler::compiledSteps(plan), names);
      compiler::CodegenOptions opts;
      opts.useCache = false;
      auto jit = compiler::JitKernels::compile(plan, opts);
      ASSERT_TRUE(bool(jit)) << jit.status().message();
      ASSERT_EQ(runtime::kernelTableSize((*jit)->table()), names.size());
      for (size_t si = 0; si < plan.steps.size(); ++si) {
        const runtime::PlanStep &stage = plan.steps[si];
        bool known = stage.inputType.fields()[0].type.shape[1] != kDynamic;
        SCOPED_TRACE(stage.name + " on " + std::string(elemTypeName(in)) +
                     ", " + std::to_string(channels) + " channels" +
                     (known ? "" : " (unknown to the type)"));
        const SluiceKernelInfo &entry = (*jit)->table()[si];
        EXPECT_EQ(std::string(entry.signature).find("channels") !=
                      std::string::npos,
                  channels > 1)
            << entry.signature;
        auto bound = (*jit)->binder()(stage);
        ASSERT_TRUE(bound.has_value());
        ASSERT_TRUE(bool(*bound)) << bound->status().message();
        Expected<runtime::ElementFn> reference =
            runtime::bindElementOp(stage, plan);
        ASSERT_TRUE(bool(reference)) << reference.status().message();
        for (int64_t rows : {int64_t(37), int64_t(1), int64_t(0)}) {
          SCOPED_TRACE(std::to_string(rows) + " rows");
          EXPECT_TRUE(expectSameResult(
                          **bound, *reference,
                          randomMatrix(in, rows, channels, uint32_t(rows + si)))
                          .valid());
        }
        if (!known && channels > 1) // one channel too many: the steps' error
          EXPECT_FALSE(expectSameResult(**bound, *reference,
                                        randomMatrix(in, 4, channels + 1, 5))
                           .valid());
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 150);
}

/// A normalize whose lists would fail every record (lengths that disagree)
/// keeps its run with the runtime, which reports the error.
/// normalize to f16 / bf16 of integer inputs: the generator enumerates
/// every value each channel can give and leaves out of the rounding the
/// cases none meets (NaN, overflow, subnormals, zeros, ties). Over every
/// input value, with constants that make each case appear (and not), the
/// kernel gives the runtime's bits, and the same with
/// SLUICE_NO_NARROW_RANGES=1 (every case kept).
TEST(Codegen, NormalizeNarrowingOverEveryInputValueIsByteIdentical) {
  struct Pair {
    double mean, sd;
    const char *what;
  };
  const Pair pairs[] = {
      {123.675, 58.395, "ImageNet's first channel"},
      {128, 64, "exact zeros"},
      {0, 1e-3, "f16 overflow"},
      {0.5, 1e30, "f16 subnormals"},
      {0, 1e38, "f32 denormals"},
      {-0.5, 1, "ties (bf16 from u8, f16 from 16-bit inputs)"},
      {7, 1e-45, "an infinite scale: infinities, and NaN at x = 7"},
      {-300.25, 0.02, "negative values only"}};
  for (ElemType in : {ElemType::U8, ElemType::I8, ElemType::U16, ElemType::I16,
                      ElemType::Bool}) {
    // Every value of the type (every byte for bool), then a few again so
    // the length is not a multiple of any vector width.
    int64_t count = elemTypeSize(in) == 1 ? 256 : 65536;
    Tensor input = Tensor::empty(in, {count + 5});
    for (int64_t i = 0; i < count + 5; ++i) {
      uint16_t v = uint16_t(i % count);
      std::memcpy(input.mutableRaw() + i * elemTypeSize(in), &v,
                  elemTypeSize(in));
    }
    for (const char *to : {"f16", "bf16"}) {
      for (const Pair &p : pairs) {
        StepCase c{"normalize",
                   {{"mean", list({p.mean})},
                    {"std", list({p.sd})},
                    {"dtype", Value::string(to)}},
                   in,
                   std::string("to ") + to + ", " + p.what};
        SCOPED_TRACE(describe(c));
        runtime::Plan plan = planFor(c, count + 5);
        Expected<runtime::ElementFn> reference =
            runtime::bindElementOp(plan.steps[0], plan);
        ASSERT_TRUE(bool(reference)) << reference.status().message();
        for (const char *narrow : {"0", "1"}) {
          ::setenv("SLUICE_NO_NARROW_RANGES", narrow, 1);
          compiler::CodegenOptions opts;
          opts.useCache = false;
          auto jit = compiler::JitKernels::compile(plan, opts);
          ::unsetenv("SLUICE_NO_NARROW_RANGES");
          ASSERT_TRUE(bool(jit)) << jit.status().message();
          ASSERT_EQ((*jit)->stats().kernels, 1) << "not compiled";
          auto bound = (*jit)->binder()(plan.steps[0]);
          ASSERT_TRUE(bound.has_value() && bool(*bound));
          Tensor x = expectSameResult(**bound, *reference, input);
          EXPECT_TRUE(x.valid()) << "SLUICE_NO_NARROW_RANGES=" << narrow;
        }
      }
    }
  }
}

TEST(Codegen, FusedNormalizeTheRuntimeRejectsIsLeftToIt) {
  runtime::PlanStep stage = fusedChain(
      {{"normalize", {{"mean", list({1, 2})}, {"std", list({1, 2, 3})}}},
       {"clamp", {{"max", Value::real(1)}}}},
      ElemType::F32, kDynamic);
  runtime::Plan plan;
  plan.steps = {stage};
  EXPECT_EQ(compiler::compiledSteps(plan), std::vector<std::string>{});
}

/// A table entry with a signature the runtime does not know is refused.
TEST(Codegen, UnknownSignatureIsAnError) {
  runtime::Plan plan = planFor({"fill_missing", {}, ElemType::F32, ""}, 8);
  static SluiceKernelInfo table[] = {
      {"fill_missing", "vectors x f32 -> x f32", reinterpret_cast<void *>(1)},
      {nullptr, nullptr, nullptr}};
  auto bound = runtime::binderFromKernelTable(table)(plan.steps[0]);
  ASSERT_TRUE(bound.has_value());
  ASSERT_FALSE(bool(*bound));
  EXPECT_NE(bound->status().message().find("unknown kernel signature"),
            std::string::npos)
      << bound->status().message();
  // A per-channel values entry needs a channel count of 2 or more, and
  // nothing may follow it.
  for (const char *sig :
       {"values x f32 -> x f32 channels 1", "values x f32 -> x f32 channels",
        "values x f32 -> x f32 channels 3 more",
        "values x f32 -> x f32 lanes 3"}) {
    SluiceKernelInfo bad[] = {
        {"fill_missing", sig, reinterpret_cast<void *>(1)},
        {nullptr, nullptr, nullptr}};
    auto b = runtime::binderFromKernelTable(bad)(plan.steps[0]);
    ASSERT_TRUE(b.has_value());
    ASSERT_FALSE(bool(*b)) << sig;
    EXPECT_NE(b->status().message().find("unknown kernel signature"),
              std::string::npos)
        << b->status().message();
  }
}

/// The object cache: a second compile of the same plan loads the object.
TEST(Codegen, SecondCompileHitsTheCache) {
  TempDir dir;
  runtime::Plan plan = planFor(
      {"map", {{"expr", Value::string("x * 3 + 1")}}, ElemType::F32, ""}, 16);
  compiler::CodegenOptions opts;
  opts.cacheDir = dir.path() + "/cache";
  auto first = compiler::JitKernels::compile(plan, opts);
  ASSERT_TRUE(bool(first)) << first.status().message();
  EXPECT_EQ((*first)->stats().cacheMisses, 1);
  auto second = compiler::JitKernels::compile(plan, opts);
  ASSERT_TRUE(bool(second)) << second.status().message();
  EXPECT_EQ((*second)->stats().cacheHits, 1);
  EXPECT_NE((*second)->summary().find("cache hit"), std::string::npos);
  // The cached kernel computes the same thing.
  Record r;
  r.fields = {Tensor::empty(ElemType::F32, {16})};
  for (int i = 0; i < 16; ++i)
    r.fields[0].mutableData<float>()[i] = float(i);
  auto fn = (*second)->binder()(plan.steps[0]);
  ASSERT_TRUE(fn && *fn);
  ASSERT_TRUE(bool((**fn)(r, {})));
  EXPECT_EQ(r.fields[0].data<float>()[5], 16.0f);

  // A damaged entry is replaced, not trusted.
  for (const auto &entry : std::filesystem::directory_iterator(opts.cacheDir))
    std::ofstream(entry.path(), std::ios::trunc) << "not an object";
  auto third = compiler::JitKernels::compile(plan, opts);
  ASSERT_TRUE(bool(third)) << third.status().message();
  EXPECT_EQ((*third)->stats().cacheMisses, 1);
}

/// A cache entry is used only when its key and digest match: one flipped
/// byte anywhere in it, a cut, or an entry copied under another key's name
/// is counted as rejected, compiled again and replaced (the next compile
/// hits), and the kernels compute what a clean compile's do.
TEST(Codegen, DamagedCacheEntryIsRecompiledNotTrusted) {
  TempDir dir;
  runtime::Plan plan = planFor(
      {"map", {{"expr", Value::string("x * 3 + 1")}}, ElemType::F32, ""}, 16);
  runtime::Plan other = planFor(
      {"map", {{"expr", Value::string("x * 5 - 2")}}, ElemType::F32, ""}, 16);
  compiler::CodegenOptions opts;
  opts.cacheDir = dir.path() + "/cache";
  auto computes = [&](compiler::JitKernels &k) {
    Record r;
    r.fields = {Tensor::empty(ElemType::F32, {16})};
    for (int i = 0; i < 16; ++i)
      r.fields[0].mutableData<float>()[i] = float(i);
    auto fn = k.binder()(plan.steps[0]);
    if (!fn || !*fn || !(**fn)(r, {}))
      return false;
    for (int i = 0; i < 16; ++i)
      if (r.fields[0].data<float>()[i] != float(i) * 3 + 1)
        return false;
    return true;
  };
  auto first = compiler::JitKernels::compile(plan, opts);
  ASSERT_TRUE(bool(first)) << first.status().message();
  std::string entry;
  for (const auto &e : std::filesystem::directory_iterator(opts.cacheDir))
    entry = e.path().string();
  ASSERT_FALSE(entry.empty());
  std::string clean;
  {
    std::ifstream in(entry, std::ios::binary);
    clean.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(clean.size(), 1000u);
  // The entry of another kernel, as if copied over this one.
  TempDir otherDir;
  compiler::CodegenOptions otherOpts = opts;
  otherOpts.cacheDir = otherDir.path();
  ASSERT_TRUE(bool(compiler::JitKernels::compile(other, otherOpts)));
  std::string foreign;
  for (const auto &e : std::filesystem::directory_iterator(otherDir.path())) {
    std::ifstream in(e.path(), std::ios::binary);
    foreign.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_FALSE(foreign.empty());

  std::vector<std::pair<std::string, std::string>> damaged;
  for (size_t at : {clean.size() / 3, clean.size() / 2, clean.size() - 1}) {
    std::string d = clean;
    d[at] = char(d[at] ^ 0x20);
    damaged.push_back({"byte " + std::to_string(at) + " flipped", d});
  }
  damaged.push_back({"cut short", clean.substr(0, clean.size() - 100)});
  damaged.push_back({"another kernel's entry", foreign});
  for (const auto &[what, bytes] : damaged) {
    SCOPED_TRACE(what);
    std::ofstream(entry, std::ios::binary | std::ios::trunc) << bytes;
    auto k = compiler::JitKernels::compile(plan, opts);
    ASSERT_TRUE(bool(k)) << k.status().message();
    EXPECT_EQ((*k)->stats().cacheHits, 0);
    EXPECT_EQ((*k)->stats().cacheMisses, 1);
    EXPECT_EQ((*k)->stats().cacheRejected, 1);
    EXPECT_NE((*k)->summary().find("replaced a cache entry not trusted"),
              std::string::npos)
        << (*k)->summary();
    EXPECT_TRUE(computes(**k));
    auto again = compiler::JitKernels::compile(plan, opts);
    ASSERT_TRUE(bool(again)) << again.status().message();
    EXPECT_EQ((*again)->stats().cacheHits, 1);
    EXPECT_EQ((*again)->stats().cacheRejected, 0);
    EXPECT_TRUE(computes(**again));
  }
}

/// emitKernelObject writes a relocatable object for a generic CPU.
TEST(Codegen, EmitsAnObjectFile) {
  TempDir dir;
  runtime::Plan plan =
      planFor({"clamp", {{"max", Value::real(2)}}, ElemType::F32, ""}, 16);
  std::string path = dir.path() + "/k.o";
  Status s = compiler::emitKernelObject(plan, "x86-64-v2", path);
  ASSERT_TRUE(s.isOk()) << s.message();
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 64u);
  EXPECT_EQ(bytes.substr(0, 4), "\x7f"
                                "ELF");
  EXPECT_NE(bytes.find("sluice_kernel_table"), std::string::npos);
  Status bad = compiler::emitKernelObject(plan, "no-such-cpu", path);
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("unknown target CPU"), std::string::npos);
}

// --- filter conditions
// ---------------------------------------------------===//

/// A filter stage over scalar fields of several types (f16 and bool too), a
/// fixed-length f32 vector and a dynamically sized i32 vector.
runtime::PlanStep filterStep(const std::string &where) {
  runtime::PlanStep s;
  s.name = "filter";
  s.op = "filter";
  s.kind = OpKind::Record;
  s.params = Value::map();
  s.params.set("where", Value::string(where));
  s.inputType = RecordType({{"a", FieldType(ElemType::F32, {})},
                            {"b", FieldType(ElemType::F64, {})},
                            {"c", FieldType(ElemType::I8, {})},
                            {"d", FieldType(ElemType::U8, {})},
                            {"e", FieldType(ElemType::I64, {})},
                            {"v", FieldType(ElemType::F32, {4})},
                            {"w", FieldType(ElemType::I32, {kDynamic})},
                            {"h", FieldType(ElemType::F16, {})},
                            {"t", FieldType(ElemType::Bool, {})}});
  s.outputType = s.inputType;
  return s;
}

/// Record i of `n`: each field one value of a random tensor of its type
/// (NaN payloads, infinities, -0, denormals, integer extremes); w has i % 3
/// elements, so `w[1]` is out of range for a third of them.
Record filterRecord(const std::vector<Tensor> &columns, int64_t i) {
  Record r;
  r.index = uint64_t(i);
  for (size_t f = 0; f < 5; ++f) {
    const Tensor &col = columns[f];
    Tensor t = Tensor::empty(col.elem(), {});
    size_t size = elemTypeSize(col.elem());
    std::memcpy(t.mutableRaw(), col.raw() + size * size_t(i), size);
    r.fields.push_back(std::move(t));
  }
  Tensor v = Tensor::empty(ElemType::F32, {4});
  std::memcpy(v.mutableRaw(), columns[5].raw() + 16 * size_t(i), 16);
  r.fields.push_back(std::move(v));
  int64_t len = i % 3;
  Tensor w = Tensor::empty(ElemType::I32, {len});
  std::memcpy(w.mutableRaw(), columns[6].raw() + 8 * size_t(i),
              size_t(len) * 4);
  r.fields.push_back(std::move(w));
  for (size_t f = 7; f < 9; ++f) { // h (f16), t (bool)
    const Tensor &col = columns[f];
    Tensor t = Tensor::empty(col.elem(), {});
    size_t size = elemTypeSize(col.elem());
    std::memcpy(t.mutableRaw(), col.raw() + size * size_t(i), size);
    r.fields.push_back(std::move(t));
  }
  return r;
}

/// Each condition compiled to a kernel keeps and drops exactly the records
/// the interpreter (the runtime's filter) keeps and drops, and fails with
/// its message where it fails (an index out of range).
TEST(Codegen, FilterKernelDecidesAsTheInterpreter) {
  const int64_t n = 3000;
  std::vector<Tensor> columns = {randomTensor(ElemType::F32, n, 1),
                                 randomTensor(ElemType::F64, n, 2),
                                 randomTensor(ElemType::I8, n, 3),
                                 randomTensor(ElemType::U8, n, 4),
                                 randomTensor(ElemType::I64, n, 5),
                                 randomTensor(ElemType::F32, 4 * n, 6),
                                 randomTensor(ElemType::I32, 2 * n, 7),
                                 randomTensor(ElemType::F16, n, 8),
                                 randomTensor(ElemType::Bool, n, 9)};
  const std::vector<std::string> conditions = {
      "a == 2.5 or a == 0.7", "a < 0.7", "a != a", "b >= -2.5 and b < 300.5",
      "not (b > 0) or e % 3 == 2", "c * 2 > d", "c // 3 == -2 or d % 7 == 1",
      "e - 1 < e", "abs(e) > 100", "v[0] + v[3] > 1 and v[2] != 0.5",
      "max(a, v[1]) >= min(b, 2)", "round(a) == 2", "log(max(b, 0) + 1) < 3",
      "sqrt(abs(a)) > 1.5", "floor(b) == ceil(b)", "a", "d", "w[1] > 0",
      "e > 0 and w[0] < 5",
      // f16 (compared as numpy does: f16 with a Python float is f16) and
      // bool fields (any non-zero byte is true)
      "h == 0.7 or h == 2.5", "h < 0.7", "h != h", "h * 2 > a", "h + c >= 3",
      "max(h, 0) == 0", "round(h) == 2 or h // 3 == -1", "h * 1000 > 60000",
      "t", "not t", "t and h < 1", "not t or a > 0", "t == (c > 0)",
      "t ? h > 0 : d > 100", "(t ? h : a) < 0.5"};
  for (const std::string &where : conditions) {
    runtime::Plan plan;
    plan.name = "filter_test";
    plan.steps = {filterStep(where)};
    EXPECT_EQ(compiler::compiledSteps(plan), std::vector<std::string>{"filter"})
        << where;
    auto jit = compiler::JitKernels::compile(plan);
    ASSERT_TRUE(bool(jit)) << where << ": " << jit.status().message();
    auto bound = (*jit)->binder()(plan.steps[0]);
    ASSERT_TRUE(bound.has_value()) << where;
    ASSERT_TRUE(bool(*bound)) << where << ": " << bound->status().message();
    Expected<runtime::ElementFn> reference =
        runtime::bindElementOp(plan.steps[0], plan);
    ASSERT_TRUE(bool(reference)) << reference.status().message();
    int kept = 0, differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      Record r1 = filterRecord(columns, i), r2 = r1;
      Expected<bool> k1 = (**bound)(r1, {});
      Expected<bool> k2 = (*reference)(r2, {});
      ASSERT_EQ(bool(k1), bool(k2)) << where << " record " << i;
      if (!k1) {
        EXPECT_EQ(k1.status().message(), k2.status().message());
        continue;
      }
      kept += *k1 ? 1 : 0;
      differ += *k1 != *k2 ? 1 : 0;
    }
    EXPECT_EQ(differ, 0) << where;
    if (where != "a != a" && where != "h != h") // NaNs are about 1 in 20 here
      EXPECT_GT(kept, 0) << where << " keeps nothing: a weak test";
    EXPECT_LT(kept, n) << where << " keeps everything: a weak test";
  }
}

/// The column form of each condition ("condition rows", for record runs)
/// keeps exactly the rows the interpreter's column test
/// (CompiledExpr::testRows) keeps, over all rows and over a selection; a
/// run the interpreter rejects gets its message.
TEST(Codegen, FilterRowsKernelDecidesAsTheInterpreter) {
  const int64_t n = 3000;
  auto shaped = [](Tensor flat, std::vector<int64_t> shape) {
    Tensor t = Tensor::empty(flat.elem(), shape);
    std::memcpy(t.mutableRaw(), flat.raw(), t.nbytes());
    return t;
  };
  std::vector<Tensor> columns = {
      randomTensor(ElemType::F32, n, 1),
      randomTensor(ElemType::F64, n, 2),
      randomTensor(ElemType::I8, n, 3),
      randomTensor(ElemType::U8, n, 4),
      randomTensor(ElemType::I64, n, 5),
      shaped(randomTensor(ElemType::F32, 4 * n, 6), {n, 4}),
      shaped(randomTensor(ElemType::I32, 2 * n, 7), {n, 2})};
  std::vector<uint32_t> selection;
  for (uint32_t r = 0; r < uint32_t(n); r += 1 + r % 5)
    selection.push_back(r);
  for (const std::string &where :
       {"a == 2.5 or a == 0.7", "a < 0.7", "a != a", "b >= -2.5 and b < 300.5",
        "not (b > 0) or e % 3 == 2", "c * 2 > d", "c // 3 == -2 or d % 7 == 1",
        "e - 1 < e", "abs(e) > 100", "v[0] + v[3] > 1 and v[2] != 0.5",
        "max(a, v[1]) >= min(b, 2)", "round(a) == 2", "log(max(b, 0) + 1) < 3",
        "sqrt(abs(a)) > 1.5", "floor(b) == ceil(b)", "a", "d", "w[1] > 0",
        "e > 0 and w[0] < 5"}) {
    SCOPED_TRACE(where);
    runtime::Plan plan;
    plan.name = "filter_rows_test";
    runtime::PlanStep stage = filterStep(where);
    stage.inputType = RecordType({{"a", FieldType(ElemType::F32, {})},
                                  {"b", FieldType(ElemType::F64, {})},
                                  {"c", FieldType(ElemType::I8, {})},
                                  {"d", FieldType(ElemType::U8, {})},
                                  {"e", FieldType(ElemType::I64, {})},
                                  {"v", FieldType(ElemType::F32, {4})},
                                  {"w", FieldType(ElemType::I32, {2})}});
    stage.outputType = stage.inputType;
    plan.steps = {stage};
    auto jit = compiler::JitKernels::compile(plan);
    ASSERT_TRUE(bool(jit)) << jit.status().message();
    auto bound = (*jit)->rowsBinder()(plan.steps[0]);
    ASSERT_TRUE(bound.has_value()) << "no compiled column test";
    ASSERT_TRUE(bool(*bound)) << bound->status().message();
    auto reference = runtime::bindRowsFilter(plan.steps[0]);
    ASSERT_TRUE(reference.has_value() && bool(*reference));
    // The per-record binder does not take the column entry.
    auto perRecord = (*jit)->binder()(plan.steps[0]);
    ASSERT_TRUE(perRecord.has_value() && bool(*perRecord));
    for (bool selected : {false, true}) {
      int64_t m = selected ? int64_t(selection.size()) : n;
      const uint32_t *rows = selected ? selection.data() : nullptr;
      std::vector<uint8_t> k1(size_t(m), 7), k2(size_t(m), 9);
      Status s1 = (**bound)(columns, rows, m, k1.data());
      Status s2 = (**reference)(columns, rows, m, k2.data());
      ASSERT_TRUE(s1.isOk()) << s1.message();
      ASSERT_TRUE(s2.isOk()) << s2.message();
      EXPECT_TRUE(k1 == k2) << (selected ? "selected rows" : "all rows");
      int64_t kept = 0;
      for (uint8_t k : k1)
        kept += k;
      if (std::string(where) != "a != a")
        EXPECT_GT(kept, 0) << "keeps nothing: a weak test";
      EXPECT_LT(kept, m) << "keeps everything: a weak test";
    }
    // A column of another type: the interpreter's error.
    std::vector<Tensor> wrong = columns;
    wrong[0] = randomTensor(ElemType::F64, n, 9);
    wrong[5] = randomTensor(ElemType::I64, n, 9);
    wrong[6] = randomTensor(ElemType::F32, n, 9);
    std::vector<uint8_t> k1(static_cast<size_t>(n)), k2(static_cast<size_t>(n));
    Status s1 = (**bound)(wrong, nullptr, n, k1.data());
    Status s2 = (**reference)(wrong, nullptr, n, k2.data());
    EXPECT_EQ(s1.isOk(), s2.isOk());
    EXPECT_EQ(s1.message(), s2.message());
  }
}

/// Record runs (csv/tsv rows from parsed blocks into the batch, no record
/// per row) test their inline filters with the generated column kernels
/// when codegen is on: same bytes, errors and accounting as records
/// through the interpreter and as runs through it, with bad rows skipped
/// or failing the run.
TEST(Codegen, RecordRunsUseTheGeneratedFilterKernel) {
  TempDir dir;
  std::string text = sluice::testing::criteoTsv(21, 30000);
  // A bad row (a letter in a dense column) at line 9001.
  size_t at = 0;
  for (int line = 0; line < 9000; ++line)
    at = text.find('\n', at) + 1;
  size_t tab = text.find('\t', at);
  text.insert(tab + 1, "x");
  dir.write("d/day_0.tsv", text);
  dir.write("d/day_1.tsv", sluice::testing::criteoTsv(22, 5000));
  for (const char *steps :
       {"  - filter: {where: \"label >= 1\"}\n"
        "  - filter: {where: \"dense[2] < 4000 or cat[25] % 3 == 1\"}\n"
        "  - batch: {size: 777}\n",
        "  - filter: {where: \"dense[0] != dense[0] or log(max(dense[1], 0) "
        "+ 1) > 2\"}\n"
        "  - batch: {size: 1000, drop_remainder: true}\n",
        "  - filter: {where: \"label > 5\"}\n"
        "  - batch: {size: 100}\n"}) {
    for (const char *onError : {"skip", "fail"}) {
      SCOPED_TRACE(std::string(onError) + "\n" + steps);
      runtime::Plan plan = rttest::planFromYaml(
          dir, "pipeline: runs\n" +
                   sluice::testing::criteoTsvSource("d/day_*.tsv", onError) +
                   "steps:\n" + steps);
      auto jit = compiler::JitKernels::compile(plan);
      ASSERT_TRUE(bool(jit)) << jit.status().message();
      auto calls = std::make_shared<std::atomic<int64_t>>(0);
      auto counted = [calls,
                      rows = (*jit)->rowsBinder()](const runtime::PlanStep &s)
          -> std::optional<Expected<runtime::RowsFilterFn>> {
        auto r = rows(s);
        if (!r || !*r)
          return r;
        return Expected<runtime::RowsFilterFn>(runtime::RowsFilterFn(
            [calls, fn = r->take()](const std::vector<Tensor> &c,
                                    const uint32_t *sel, int64_t n,
                                    uint8_t *keep) {
              calls->fetch_add(1);
              return fn(c, sel, n, keep);
            }));
      };
      for (int threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(threads));
        auto run = [&](bool codegen, bool runs, int64_t &fromRuns) {
          runtime::RunOptions o;
          o.threads = threads;
          o.recordRuns = runs;
          if (codegen) {
            o.binder = (*jit)->binder();
            o.rowsBinder = counted;
          }
          std::string error;
          std::vector<rttest::Output> outs;
          auto p = runtime::Pipeline::create(plan, o);
          EXPECT_TRUE(bool(p));
          if (!p)
            return std::make_pair(std::string(), std::string());
          runtime::Batch b;
          for (;;) {
            Expected<bool> more = (*p)->next(b);
            if (!more) {
              error = more.status().message();
              break;
            }
            if (!*more)
              break;
            outs.push_back({b.fields(), b.epoch()});
          }
          (*p)->stop();
          std::string acct;
          for (const runtime::StageStats &st : (*p)->stats().stages) {
            acct += st.accountingLine() + "\n";
            if (st.op == "batch")
              fromRuns = st.rowsFromRuns;
          }
          return std::make_pair(rttest::allBytes(outs) + "\n" + error, acct);
        };
        int64_t r0 = 0, r1 = 0, r2 = 0;
        calls->store(0);
        auto reference = run(false, false, r0);
        auto interpreted = run(false, true, r1);
        auto generated = run(true, true, r2);
        EXPECT_TRUE(generated.first == reference.first) << "outputs differ";
        EXPECT_TRUE(interpreted.first == reference.first);
        EXPECT_EQ(generated.second, reference.second);
        EXPECT_EQ(r0, 0);
        if (std::string(steps).find("label > 5") == std::string::npos) {
          EXPECT_GT(r2, 1000) << "the runs were not used";
          EXPECT_EQ(r2, r1);
        }
        if (threads == 1 || r2 > 0)
          EXPECT_GT(calls->load(), 0) << "the generated column test never ran";
        if (std::string(onError) == "fail")
          EXPECT_NE(reference.first.find("day_0.tsv:9001"), std::string::npos);
      }
    }
  }
}

// --- whole pipelines
// -----------------------------------------------------===//

class CodegenPipeline : public ::testing::TestWithParam<int> {};

TEST_P(CodegenPipeline, CriteoIsByteIdenticalWithCodegenAndFusionOnAndOff) {
  TempDir dir;
  dir.write("day_0.tsv", sluice::testing::criteoTsv(11, 2000));
  dir.write("day_1.tsv", sluice::testing::criteoTsv(12, 333));
  std::string spec = dir.write(
      "spec.yaml",
      "pipeline: criteo_codegen\n" +
          sluice::testing::criteoTsvSource(dir.path() + "/day_*.tsv") +
          "steps:\n"
          "  - filter: {where: \"label >= 0\"}\n"
          "  - fill_missing: {field: dense, value: 0}\n"
          "  - clamp: {field: dense, min: -5, max: 50000}\n"
          "  - map: {field: dense, expr: \"log(max(x, 0) + 1)\"}\n"
          "  - map: {field: label, as: weight, expr: \"x * 0.5 + 1\"}\n"
          "  - cast: {field: label, dtype: f32}\n"
          "  - hash_bucket: {field: cat, buckets: 1000000}\n"
          "  - batch: {size: 256}\n");
  // The reference: no graph pass that changes stages, no generated code.
  runtime::RunOptions plainOpts;
  plainOpts.threads = GetParam();
  runtime::Plan plainPlan = sluice::testing::planOfSpecFile(
      spec, {"sluice-fuse-map-batch", "sluice-fuse-maps"});
  std::string reference =
      rttest::allBytes(rttest::runAll(plainPlan, plainOpts));
  EXPECT_GT(reference.size(), 100000u);

  const std::vector<std::vector<std::string>> configs = {
      {}, {"sluice-fuse-map-batch"}, {"sluice-fuse-maps"}};
  for (const std::vector<std::string> &disabled : configs) {
    runtime::Plan plan = sluice::testing::planOfSpecFile(spec, disabled);
    std::string what =
        disabled.empty() ? "all passes" : "without " + disabled[0];
    bool fused = disabled.empty() || disabled[0] != "sluice-fuse-maps";
    std::vector<std::string> expected =
        fused ? std::vector<std::string>{"filter", "fill_missing+clamp+map",
                                         "cast+hash_bucket"}
              : std::vector<std::string>{"filter",     "fill_missing", "clamp",
                                         "map",        "map.2",        "cast",
                                         "hash_bucket"};
    if (fused) // map.2 has its own `as`: it runs alone, also compiled
      expected.insert(expected.begin() + 2, "map.2");
    EXPECT_EQ(compiler::compiledSteps(plan), expected) << what;
    // The Plan (with its fused stages) survives serialization.
    Expected<runtime::Plan> back = runtime::Plan::deserialize(plan.serialize());
    ASSERT_TRUE(bool(back)) << back.status().message();
    EXPECT_EQ(back->serialize(), plan.serialize());

    auto jit = compiler::JitKernels::compile(*back);
    ASSERT_TRUE(bool(jit)) << jit.status().message();
    runtime::RunOptions on, off;
    on.threads = off.threads = GetParam();
    on.binder = (*jit)->binder();
    EXPECT_TRUE(rttest::allBytes(rttest::runAll(*back, on)) == reference)
        << "codegen on, " << what << ": output bytes differ";
    EXPECT_TRUE(rttest::allBytes(rttest::runAll(*back, off)) == reference)
        << "codegen off, " << what << ": output bytes differ";
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CodegenPipeline, ::testing::Values(1, 2));

} // namespace
