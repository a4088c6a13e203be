//===- codegen_epilogue_bench.cpp - Generated image epilogue vs hand-written
//===//
//
// The steps after a resize in an ImageNet-style pipeline (random_flip,
// normalize, transpose to CHW) on a 224x224 RGB crop of a real photo:
//   Handwritten  kernels::applyImageEpilogue, the row code the fused
//                decode+resize runs (sluice-fuse-crop-epilogue)
//   Generated    the remap kernel JitKernels compiles for the
//                `random_flip+normalize+transpose` stage sluice-fuse-remaps
//                makes, called through its runtime binding (parameter fill,
//                output allocation, kernel)
//   Unfused      the runtime's three kernels one after another
// Each with the flip taken (p = 1) and not (p = 0), normalize writing f32,
// bf16 or f16, and the result in CHW or left HWC (channels_last). Setup
// checks that the generated and hand-written outputs are the same bytes.
// Run with
//   build/bin/codegen_epilogue_bench --benchmark_repetitions=7 \
//     --benchmark_enable_random_interleaving=true
// and compare medians.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Codegen.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Image.h"
#include "sluice/runtime/ElementOps.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

using namespace sluice;

namespace {

const std::vector<double> kMean = {123.675, 116.28, 103.53};
const std::vector<double> kStd = {58.395, 57.12, 57.375};

/// A real photo (the JPEG or PNG $SLUICE_BENCH_PHOTO names) resized to
/// 224x224 as the pipeline does (antialiased bilinear); a noisy gradient if
/// it is unset. Make one from gnome-backgrounds with
///   /usr/bin/python3 -c "from PIL import Image; Image.open('/usr/share/\
///   backgrounds/gnome/adwaita-d.webp').convert('RGB').resize((500, 375))\
///   .save('/tmp/photo.jpg', quality=90)"
Tensor photo() {
  if (const char *path = std::getenv("SLUICE_BENCH_PHOTO")) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Expected<Tensor> img = kernels::decodeImage(ss.str(), 3);
    if (img) {
      Expected<Tensor> r = kernels::resize(
          *img, 224, 224, kernels::Interpolation::Bilinear, true);
      if (r)
        return r.take();
    }
  }
  Tensor t = Tensor::empty(ElemType::U8, {224, 224, 3});
  uint32_t state = 1;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    state = state * 1664525u + 1013904223u;
    t.mutableData<uint8_t>()[i] = uint8_t(i / 3 % 224 + (state >> 29));
  }
  return t;
}

runtime::PlanStep step(const std::string &op, FieldType in, FieldType out,
                       std::vector<std::pair<std::string, Value>> params) {
  runtime::PlanStep s;
  s.name = op;
  s.op = op;
  s.kind = OpKind::Element;
  s.params = Value::map();
  s.params.set("field", Value::string("image"));
  for (auto &[k, v] : params)
    s.params.set(k, v);
  s.inputType = RecordType({{"image", in}});
  s.outputType = RecordType({{"image", out}});
  return s;
}

Value doubles(const std::vector<double> &v) {
  std::vector<Value> items;
  for (double d : v)
    items.push_back(Value::real(d));
  return Value::list(std::move(items));
}

/// What the benchmark's arguments ask for: flip taken, normalize's dtype
/// (0 f32, 1 bf16, 2 f16), CHW or HWC.
struct Variant {
  bool flip;
  ElemType to;
  bool chw;
  explicit Variant(const benchmark::State &state)
      : flip(state.range(0) != 0), to(state.range(1) == 1   ? ElemType::BF16
                                      : state.range(1) == 2 ? ElemType::F16
                                                            : ElemType::F32),
        chw(state.range(2) != 0) {}
};

/// The steps, unfused, and as the one stage sluice-fuse-remaps makes.
runtime::Plan plan(bool fused, double p, ElemType to, bool chw) {
  FieldType u8(ElemType::U8, {224, 224, 3}), hwc(to, {224, 224, 3}),
      planes(to, {3, 224, 224});
  runtime::Plan plan;
  plan.name = "epilogue";
  plan.steps = {
      step("random_flip", u8, u8, {{"p", Value::real(p)}}),
      step("normalize", u8, hwc,
           {{"mean", doubles(kMean)},
            {"std", doubles(kStd)},
            {"dtype", Value::string(std::string(elemTypeName(to)))}})};
  if (chw)
    plan.steps.push_back(
        step("transpose", hwc, planes, {{"to", Value::string("CHW")}}));
  if (fused) {
    runtime::PlanStep f = plan.steps.front();
    f.name = chw ? "random_flip+normalize+transpose" : "random_flip+normalize";
    f.op = "fused_map";
    f.params = Value::map();
    f.outputType = plan.steps.back().outputType;
    f.fused = plan.steps;
    plan.steps = {f};
  }
  return plan;
}

struct Bound {
  std::unique_ptr<compiler::JitKernels> jit;
  std::vector<runtime::ElementFn> fns;
};

Bound bind(bool generated, const Variant &v, std::string &error) {
  Bound b;
  runtime::Plan pl = plan(generated, v.flip ? 1.0 : 0.0, v.to, v.chw);
  if (generated) {
    compiler::CodegenOptions opts;
    opts.useCache = false;
    auto k = compiler::JitKernels::compile(pl, opts);
    if (!k) {
      error = k.status().message();
      return b;
    }
    b.jit = k.take();
    std::optional<Expected<runtime::ElementFn>> fn =
        b.jit->binder()(pl.steps[0]);
    if (!fn || !*fn) {
      error = fn ? fn->status().message() : "the stage was not compiled";
      return b;
    }
    b.fns.push_back(fn->take());
    return b;
  }
  for (const runtime::PlanStep &s : pl.steps) {
    Expected<runtime::ElementFn> fn = runtime::bindElementOp(s, pl);
    if (!fn) {
      error = fn.status().message();
      return b;
    }
    b.fns.push_back(fn.take());
  }
  return b;
}

kernels::ImageEpilogue handwritten(const Variant &v) {
  kernels::ImageEpilogue e;
  e.flip = v.flip;
  e.normalize = true;
  e.normalizeTo = v.to;
  e.chw = v.chw;
  kernels::normalizeTables(kMean, kStd, 3, e.mean, e.scale);
  return e;
}

void BM_EpilogueHandwritten(benchmark::State &state) {
  Tensor img = photo();
  kernels::ImageEpilogue e = handwritten(Variant(state));
  for (auto _ : state) {
    Expected<Tensor> out = kernels::applyImageEpilogue(img, e);
    benchmark::DoNotOptimize(out->raw());
  }
  state.SetItemsProcessed(state.iterations());
}

void runBound(benchmark::State &state, bool generated) {
  Variant v(state);
  std::string error;
  Bound b = bind(generated, v, error);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  Record input;
  input.fields = {photo()};
  runtime::ElementContext ctx;
  // The same bytes as the hand-written path, or the figure means nothing.
  {
    Record r = input;
    for (const runtime::ElementFn &f : b.fns)
      (void)f(r, ctx);
    Expected<Tensor> ref =
        kernels::applyImageEpilogue(input.fields[0], handwritten(v));
    if (!ref || r.fields[0].nbytes() != ref->nbytes() ||
        std::memcmp(r.fields[0].raw(), ref->raw(), ref->nbytes()) != 0) {
      state.SkipWithError("output differs from the hand-written epilogue");
      return;
    }
  }
  for (auto _ : state) {
    Record r = input;
    for (const runtime::ElementFn &f : b.fns)
      benchmark::DoNotOptimize(f(r, ctx));
    benchmark::DoNotOptimize(r.fields[0].raw());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_EpilogueGenerated(benchmark::State &s) { runBound(s, true); }
void BM_EpilogueUnfused(benchmark::State &s) { runBound(s, false); }

} // namespace

// Arguments: flip taken, dtype (0 f32, 1 bf16, 2 f16), CHW.
#define SLUICE_EPILOGUE_ARGS                                                   \
  ArgNames({"flip", "dtype", "chw"})->ArgsProduct({{0, 1}, {0, 1, 2}, {1, 0}})
BENCHMARK(BM_EpilogueHandwritten)->SLUICE_EPILOGUE_ARGS;
BENCHMARK(BM_EpilogueGenerated)->SLUICE_EPILOGUE_ARGS;
BENCHMARK(BM_EpilogueUnfused)->SLUICE_EPILOGUE_ARGS;

BENCHMARK_MAIN();
