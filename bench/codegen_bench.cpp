//===- codegen_bench.cpp - Generated kernels vs the runtime's kernels -----===//
//
// The Criteo-style chain of value-wise steps on one 4096-row batch (what
// runs after sluice-fuse-map-batch): fill_missing and clamp on the 13 dense
// columns, `map: log(max(x, 0) + 1)` on them, hash_bucket on the 26
// categorical ids. "runtime" binds every step with runtime::bindElementOp
// (the expression interpreter for the map), "jit" with the kernels
// JitKernels compiles for the same plan; "Fused" runs the chain as the one
// `fused_map` stage sluice-fuse-maps makes of it (one kernel per field).
// F16Map* run a map on an f16 [4096, 13] field (f16 arithmetic, rounded to
// f16 after every operation): `x * 0.5 + 1` (0) and `log(max(x, 0) + 1)`
// (1), interpreter vs generated kernel. MapNormalize* time a normalize
// inside a value-wise run (sluice-fuse-maps) against the same steps as
// separate stages, see there. Run with
//   build/bin/codegen_bench --benchmark_repetitions=5 \
//     --benchmark_enable_random_interleaving=true
// and compare medians; also reports the JIT compile time.
//
//===----------------------------------------------------------------------===//
#include "BenchJit.h"

#include "sluice/ops/kernels/Scalar.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <optional>
#include <random>

using namespace sluice;

namespace {

constexpr int64_t kRows = 4096;

runtime::PlanStep stage(const std::string &name, const std::string &op,
                        const std::string &field, RecordType type,
                        std::vector<std::pair<std::string, Value>> params) {
  runtime::PlanStep s;
  s.name = name;
  s.op = op;
  s.kind = OpKind::Element;
  s.params = Value::map();
  s.params.set("field", Value::string(field));
  for (auto &[k, v] : params)
    s.params.set(k, v);
  s.inputType = type;
  s.outputType = type;
  return s;
}

runtime::Plan criteoPlan() {
  RecordType t({{"label", FieldType(ElemType::I64, {kRows})},
                {"dense", FieldType(ElemType::F32, {kRows, 13})},
                {"cat", FieldType(ElemType::I64, {kRows, 26})}});
  runtime::Plan plan;
  plan.name = "criteo_chain";
  plan.steps = {
      stage("fill_missing", "fill_missing", "dense", t,
            {{"value", Value::integer(0)}}),
      stage("clamp", "clamp", "dense", t,
            {{"min", Value::integer(-10)}, {"max", Value::integer(1000000)}}),
      stage("map", "map", "dense", t,
            {{"expr", Value::string("log(max(x, 0) + 1)")}}),
      stage("hash_bucket", "hash_bucket", "cat", t,
            {{"buckets", Value::integer(1000000)}})};
  return plan;
}

Record criteoBatch() {
  std::mt19937 rng(7);
  Record r;
  r.fields = {Tensor::empty(ElemType::I64, {kRows}),
              Tensor::empty(ElemType::F32, {kRows, 13}),
              Tensor::empty(ElemType::I64, {kRows, 26})};
  for (int64_t i = 0; i < kRows; ++i)
    r.fields[0].mutableData<int64_t>()[i] = rng() % 2;
  float *d = r.fields[1].mutableData<float>();
  for (int64_t i = 0; i < kRows * 13; ++i) {
    uint32_t roll = rng() % 10;
    d[i] = roll == 0 ? NAN
                     : float(int64_t(rng() % 100000) - (roll == 1 ? 100 : 0));
  }
  int64_t *c = r.fields[2].mutableData<int64_t>();
  for (int64_t i = 0; i < kRows * 26; ++i)
    c[i] = rng() % 12 == 0 ? 0 : int64_t(rng());
  return r;
}

/// The chain as sluice-fuse-maps leaves it: one fused_map stage.
runtime::Plan fusedPlan() {
  runtime::Plan plan = criteoPlan();
  runtime::PlanStep fused = plan.steps.front();
  fused.name = "fill_missing+clamp+map+hash_bucket";
  fused.op = "fused_map";
  fused.params = Value::map();
  fused.fused = plan.steps;
  plan.steps = {fused};
  return plan;
}

/// Times `plan`'s stages one after another on a copy of `input`, each bound
/// to its generated kernel (`jit`, where it has one) or the runtime's;
/// `compiled` (with `jit`): how many stages must have a generated kernel.
void timeStages(benchmark::State &state, const runtime::Plan &plan, bool jit,
                const Record &input, int64_t items, int compiled = -1) {
  std::unique_ptr<compiler::JitKernels> kernels;
  if (jit) {
    kernels = bench::compileUncached(state, plan);
    if (!kernels)
      return;
    if (compiled >= 0 &&
        compiler::compiledSteps(plan).size() != size_t(compiled)) {
      state.SkipWithError("not every stage was compiled");
      return;
    }
    state.counters["compile_ms"] = kernels->stats().totalMs;
  }
  std::vector<runtime::ElementFn> fns;
  for (const runtime::PlanStep &s : plan.steps) {
    std::optional<runtime::ElementFn> fn =
        bench::bindStage(state, kernels.get(), s, plan);
    if (!fn)
      return;
    fns.push_back(std::move(*fn));
  }
  runtime::ElementContext ctx;
  for (auto _ : state) {
    Record r = input;
    for (const runtime::ElementFn &f : fns)
      benchmark::DoNotOptimize(f(r, ctx));
    for (const Tensor &t : r.fields)
      benchmark::DoNotOptimize(t.raw());
  }
  state.SetItemsProcessed(state.iterations() * items);
}

void runChain(benchmark::State &state, bool jit, int only = -1,
              bool fused = false) {
  runtime::Plan plan = fused ? fusedPlan() : criteoPlan();
  if (only >= 0)
    plan.steps = {plan.steps[size_t(only)]};
  timeStages(state, plan, jit, criteoBatch(), kRows);
}

void BM_CriteoChainRuntime(benchmark::State &s) { runChain(s, false); }
void BM_CriteoChainJit(benchmark::State &s) { runChain(s, true); }
void BM_CriteoChainFusedRuntime(benchmark::State &s) {
  runChain(s, false, -1, true);
}
void BM_CriteoChainFusedJit(benchmark::State &s) {
  runChain(s, true, -1, true);
}
BENCHMARK(BM_CriteoChainRuntime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CriteoChainJit)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CriteoChainFusedRuntime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CriteoChainFusedJit)->Unit(benchmark::kMicrosecond);
/// One step of the chain alone (0 fill_missing, 1 clamp, 2 map, 3 hash).
void BM_StepRuntime(benchmark::State &s) {
  runChain(s, false, int(s.range(0)));
}
void BM_StepJit(benchmark::State &s) { runChain(s, true, int(s.range(0))); }
BENCHMARK(BM_StepRuntime)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StepJit)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

/// A map on an f16 field: the interpreter (runtime) vs the generated kernel.
const char *const kF16Exprs[] = {"x * 0.5 + 1", "log(max(x, 0) + 1)"};

void runF16Map(benchmark::State &state, bool jit) {
  RecordType t({{"h", FieldType(ElemType::F16, {kRows, 13})}});
  runtime::Plan plan;
  plan.name = "f16_map";
  plan.steps = {stage("map", "map", "h", t,
                      {{"expr", Value::string(kF16Exprs[state.range(0)])}})};
  std::unique_ptr<compiler::JitKernels> kernels;
  std::optional<runtime::ElementFn> fn = bench::bindFirst(
      state, plan, jit, "the f16 map was not compiled", kernels);
  if (!fn)
    return;
  std::mt19937 rng(11);
  Record input;
  input.fields = {Tensor::empty(ElemType::F16, {kRows, 13})};
  uint16_t *h = input.fields[0].mutableData<uint16_t>();
  for (int64_t i = 0; i < kRows * 13; ++i)
    h[i] = rng() % 20 == 0 ? uint16_t(0x7E00)
                           : kernels::floatToHalf(
                                 float(int64_t(rng() % 20000) - 1000) / 16.0f);
  runtime::ElementContext ctx;
  for (auto _ : state) {
    Record r = input;
    benchmark::DoNotOptimize((*fn)(r, ctx));
    benchmark::DoNotOptimize(r.fields[0].raw());
  }
  state.SetItemsProcessed(state.iterations() * kRows * 13);
}
void BM_F16MapRuntime(benchmark::State &s) { runF16Map(s, false); }
void BM_F16MapJit(benchmark::State &s) { runF16Map(s, true); }
BENCHMARK(BM_F16MapRuntime)->DenseRange(0, 1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_F16MapJit)->DenseRange(0, 1)->Unit(benchmark::kMicrosecond);

/// A lone normalize of a u8 [224, 224, C] image (C = the argument: 3, 5, 8,
/// 64 channels), per-channel mean and std: the runtime's kernel
/// (kernels::normalize, period tables) vs the generated one (C <= 4: the
/// channel unrolled, constants folded; more: period tables, the same loop).
void runNormalize(benchmark::State &state, bool jit) {
  const int64_t c = state.range(0), h = 224, w = 224;
  std::vector<Value> mean, sd;
  for (int64_t i = 0; i < c; ++i) {
    mean.push_back(Value::real(100.0 + 3.5 * double(i)));
    sd.push_back(Value::real(50.0 + 0.75 * double(i)));
  }
  RecordType in({{"image", FieldType(ElemType::U8, {h, w, c})}});
  runtime::PlanStep s =
      stage("normalize", "normalize", "image", in,
            {{"mean", Value::list(mean)}, {"std", Value::list(sd)}});
  s.outputType = RecordType({{"image", FieldType(ElemType::F32, {h, w, c})}});
  runtime::Plan plan;
  plan.name = "normalize";
  plan.steps = {s};
  std::unique_ptr<compiler::JitKernels> kernels;
  std::optional<runtime::ElementFn> fn =
      bench::bindFirst(state, plan, jit, "normalize was not compiled", kernels);
  if (!fn)
    return;
  Record input;
  input.fields = {Tensor::empty(ElemType::U8, {h, w, c})};
  std::mt19937 rng(3);
  for (int64_t i = 0; i < h * w * c; ++i)
    input.fields[0].mutableData<uint8_t>()[i] = uint8_t(rng());
  runtime::ElementContext ctx;
  for (auto _ : state) {
    Record r = input;
    benchmark::DoNotOptimize((*fn)(r, ctx));
    benchmark::DoNotOptimize(r.fields[0].raw());
  }
  state.SetItemsProcessed(state.iterations() * h * w * c);
}
void BM_NormalizeRuntime(benchmark::State &s) { runNormalize(s, false); }
void BM_NormalizeJit(benchmark::State &s) { runNormalize(s, true); }
BENCHMARK(BM_NormalizeRuntime)
    ->Arg(3)
    ->Arg(5)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_NormalizeJit)
    ->Arg(3)
    ->Arg(5)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMicrosecond);

/// A normalize inside a value-wise run, as sluice-fuse-maps fuses it, vs the
/// same steps as separate stages (sluice-fuse-maps off), all with generated
/// kernels (and, for reference, the unfused runtime kernels without the
/// JIT). Argument 0: a tabular batch after sluice-fuse-map-batch, f32
/// [4096, 13], `map: log(max(x, 0) + 1)` then normalize with 13 per-column
/// means and stds; 1: a u8 [224, 224, 3] image, `cast: f32` then normalize
/// with ImageNet's constants; 2: as 0 with the cheap `map: x * 0.5 + 1`. Fused,
/// each value is read once and written once; unfused, the map's (cast's) f32
/// result makes a round trip through memory and a second kernel call.
runtime::Plan mapNormalizePlan(int which, bool fused) {
  bool image = which == 1;
  std::vector<int64_t> shape = image ? std::vector<int64_t>{224, 224, 3}
                                     : std::vector<int64_t>{kRows, 13};
  RecordType in(
      {{"x", FieldType(image ? ElemType::U8 : ElemType::F32, shape)}});
  RecordType f32({{"x", FieldType(ElemType::F32, shape)}});
  std::vector<Value> mean, sd;
  for (int64_t c = 0; c < shape.back(); ++c) {
    mean.push_back(Value::real(image ? 123.675 - 7.4 * double(c)
                                     : 0.5 + 0.25 * double(c)));
    sd.push_back(Value::real(image ? 58.395 - 0.6 * double(c)
                                   : 1.5 + 0.125 * double(c)));
  }
  runtime::PlanStep first =
      image ? stage("cast", "cast", "x", in, {{"dtype", Value::string("f32")}})
            : stage("map", "map", "x", in,
                    {{"expr", Value::string(which == 0 ? "log(max(x, 0) + 1)"
                                                       : "x * 0.5 + 1")}});
  first.outputType = f32;
  runtime::PlanStep norm =
      stage("normalize", "normalize", "x", f32,
            {{"mean", Value::list(mean)}, {"std", Value::list(sd)}});
  runtime::Plan plan;
  plan.name = "map_normalize";
  plan.steps = {first, norm};
  if (fused) {
    runtime::PlanStep f = first;
    f.name = first.name + "+normalize";
    f.op = "fused_map";
    f.params = Value::map();
    f.outputType = f32;
    f.fused = plan.steps;
    plan.steps = {f};
  }
  return plan;
}

Record mapNormalizeInput(int which) {
  std::mt19937 rng(5);
  Record r;
  if (which == 1) {
    r.fields = {Tensor::empty(ElemType::U8, {224, 224, 3})};
    for (int64_t i = 0; i < r.fields[0].numElements(); ++i)
      r.fields[0].mutableData<uint8_t>()[i] = uint8_t(rng());
    return r;
  }
  r.fields = {Tensor::empty(ElemType::F32, {kRows, 13})};
  float *d = r.fields[0].mutableData<float>();
  for (int64_t i = 0; i < kRows * 13; ++i)
    d[i] = rng() % 10 == 0 ? NAN : float(int64_t(rng() % 100000) - 100);
  return r;
}

void runMapNormalize(benchmark::State &state, bool jit, bool fused) {
  int which = int(state.range(0));
  runtime::Plan plan = mapNormalizePlan(which, fused);
  Record input = mapNormalizeInput(which);
  timeStages(state, plan, jit, input, input.fields[0].numElements(),
             jit ? int(plan.steps.size()) : -1);
}
void BM_MapNormalizeFusedJit(benchmark::State &s) {
  runMapNormalize(s, true, true);
}
void BM_MapNormalizeUnfusedJit(benchmark::State &s) {
  runMapNormalize(s, true, false);
}
void BM_MapNormalizeUnfusedRuntime(benchmark::State &s) {
  runMapNormalize(s, false, false);
}
BENCHMARK(BM_MapNormalizeFusedJit)
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MapNormalizeUnfusedJit)
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MapNormalizeUnfusedRuntime)
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond);

/// The generated kernels alone on preallocated buffers (no allocation, no
/// record handling): what the chain costs when outputs are written in place.
void BM_CriteoKernelsOnly(benchmark::State &state) {
  runtime::Plan plan = fusedPlan();
  std::unique_ptr<compiler::JitKernels> k = bench::compileUncached(state, plan);
  if (!k)
    return;
  Record in = criteoBatch();
  Tensor dense = Tensor::empty(ElemType::F32, {kRows, 13});
  Tensor cat = Tensor::empty(ElemType::I64, {kRows, 26});
  using Fn = void (*)(const void *, void *, int64_t);
  const SluiceKernelInfo *t = k->table();
  for (auto _ : state) {
    reinterpret_cast<Fn>(t[0].fn)(in.fields[1].raw(), dense.mutableRaw(),
                                  kRows * 13);
    reinterpret_cast<Fn>(t[1].fn)(in.fields[2].raw(), cat.mutableRaw(),
                                  kRows * 26);
    benchmark::DoNotOptimize(dense.raw());
    benchmark::DoNotOptimize(cat.raw());
  }
  state.SetItemsProcessed(state.iterations() * kRows);
}
BENCHMARK(BM_CriteoKernelsOnly)->Unit(benchmark::kMicrosecond);

/// Cold JIT compile of the chain (no cache) and a compile served by the
/// object cache.
void BM_CompileCold(benchmark::State &state) {
  runtime::Plan plan = criteoPlan();
  compiler::CodegenOptions opts;
  opts.useCache = false;
  for (auto _ : state)
    benchmark::DoNotOptimize(compiler::JitKernels::compile(plan, opts));
}
void BM_CompileCached(benchmark::State &state) {
  runtime::Plan plan = criteoPlan();
  compiler::CodegenOptions opts;
  opts.cacheDir =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
      "/sluice-codegen-bench-cache";
  (void)compiler::JitKernels::compile(plan, opts);
  for (auto _ : state)
    benchmark::DoNotOptimize(compiler::JitKernels::compile(plan, opts));
}
BENCHMARK(BM_CompileCold)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileCached)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
