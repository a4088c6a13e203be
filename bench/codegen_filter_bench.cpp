//===- codegen_filter_bench.cpp - Generated filter conditions vs the interpreter
//===//
//
// A `filter` runs once per record, before batching, so its cost is per
// record: the bytecode interpreter (runtime::bindElementOp, the reference)
// against the generated condition (JitKernels' "filter" kernel through its
// runtime binding: slot checks, pointer fill, call). Conditions on a
// Criteo-like record (label i64, dense f32[13], cat i64[26], and a bool
// `flag` and an f16 `h`): the example's `label >= 0` (0), a longer one
// reading three fields (1), the bool alone (2), and the bool with an f16
// comparison (3). Each iteration
// filters 4096 records. Run with
//   build/bin/codegen_filter_bench --benchmark_repetitions=7 \
//     --benchmark_enable_random_interleaving=true
// and compare medians. The Rows benchmarks test the same 4096 records held
// as columns in one call (record runs). Setup checks both keep the same
// records.
//
//===----------------------------------------------------------------------===//
#include "BenchJit.h"

#include "sluice/ops/kernels/Scalar.h"

#include <benchmark/benchmark.h>

#include <cstring>
#include <optional>
#include <random>

using namespace sluice;

namespace {

constexpr int kRecords = 4096;

const char *const kConditions[] = {
    "label >= 0",
    "label >= 0 and dense[0] < 5 and (dense[3] != dense[3] or cat[2] % 7 != 3)",
    "flag", "flag and h < 0.5"};

runtime::Plan filterPlan(const char *where) {
  runtime::PlanStep s;
  s.name = "filter";
  s.op = "filter";
  s.kind = OpKind::Record;
  s.params = Value::map();
  s.params.set("where", Value::string(where));
  s.inputType = RecordType({{"label", FieldType(ElemType::I64, {})},
                            {"dense", FieldType(ElemType::F32, {13})},
                            {"cat", FieldType(ElemType::I64, {26})},
                            {"flag", FieldType(ElemType::Bool, {})},
                            {"h", FieldType(ElemType::F16, {})}});
  s.outputType = s.inputType;
  runtime::Plan plan;
  plan.name = "filter_bench";
  plan.steps = {s};
  return plan;
}

std::vector<Record> records() {
  std::mt19937_64 rng(42);
  std::vector<Record> out(kRecords);
  for (int i = 0; i < kRecords; ++i) {
    Record &r = out[size_t(i)];
    r.index = uint64_t(i);
    Tensor label = Tensor::empty(ElemType::I64, {});
    label.mutableData<int64_t>()[0] = int64_t(rng() % 3) - 1;
    Tensor dense = Tensor::empty(ElemType::F32, {13});
    for (int j = 0; j < 13; ++j)
      dense.mutableData<float>()[j] =
          rng() % 10 == 0 ? NAN : float(rng() % 1000) / 100.0f;
    Tensor cat = Tensor::empty(ElemType::I64, {26});
    for (int j = 0; j < 26; ++j)
      cat.mutableData<int64_t>()[j] = int64_t(rng() >> 33);
    Tensor flag = Tensor::empty(ElemType::Bool, {});
    flag.mutableRaw()[0] = rng() % 3 == 0;
    Tensor h = Tensor::empty(ElemType::F16, {});
    h.mutableData<uint16_t>()[0] =
        kernels::floatToHalf(float(rng() % 1000) / 1000.0f);
    r.fields = {label, dense, cat, flag, h};
  }
  return out;
}

void runFilter(benchmark::State &state, bool jit) {
  const char *where = kConditions[state.range(0)];
  runtime::Plan plan = filterPlan(where);
  std::unique_ptr<compiler::JitKernels> kernels;
  std::optional<runtime::ElementFn> reference =
      bench::bindStage(state, nullptr, plan.steps[0], plan);
  std::optional<runtime::ElementFn> fn =
      reference ? bench::bindFirst(state, plan, jit,
                                   "the filter was not compiled", kernels)
                : std::nullopt;
  if (!fn)
    return;
  std::vector<Record> recs = records();
  runtime::ElementContext ctx;
  int kept = 0;
  for (Record &r : recs) {
    Expected<bool> a = (*fn)(r, ctx), b = (*reference)(r, ctx);
    if (!a || !b || *a != *b) {
      state.SkipWithError("the kernel and the interpreter disagree");
      return;
    }
    kept += *a ? 1 : 0;
  }
  for (auto _ : state)
    for (Record &r : recs)
      benchmark::DoNotOptimize((*fn)(r, ctx));
  state.SetItemsProcessed(state.iterations() * kRecords);
  state.counters["kept"] = kept;
}

void BM_FilterInterpreter(benchmark::State &s) { runFilter(s, false); }
void BM_FilterJit(benchmark::State &s) { runFilter(s, true); }

/// Record runs: the same records held as columns (label [4096], dense
/// [4096, 13], cat [4096, 26], ...), the condition tested on the whole run at
/// once: the interpreter's CompiledExpr::testRows (runtime::bindRowsFilter)
/// against the generated "filter rows" kernel. Setup checks both keep the
/// same rows.
void runRowsFilter(benchmark::State &state, bool jit) {
  const char *where = kConditions[state.range(0)];
  runtime::Plan plan = filterPlan(where);
  std::optional<Expected<runtime::RowsFilterFn>> reference =
      runtime::bindRowsFilter(plan.steps[0]);
  if (!reference || !*reference) {
    state.SkipWithError("no column test");
    return;
  }
  std::unique_ptr<compiler::JitKernels> kernels;
  runtime::RowsFilterFn fn = **reference;
  if (jit) {
    if (!(kernels = bench::compileUncached(state, plan)))
      return;
    std::optional<runtime::RowsFilterFn> bound =
        bench::takeBound(state, kernels->rowsBinder()(plan.steps[0]),
                         "the column test was not compiled");
    if (!bound)
      return;
    fn = std::move(*bound);
  }
  std::vector<Record> recs = records();
  std::vector<Tensor> columns;
  for (const Tensor &t : recs[0].fields) {
    std::vector<int64_t> shape = t.shape();
    shape.insert(shape.begin(), kRecords);
    columns.push_back(Tensor::empty(t.elem(), shape));
  }
  for (size_t f = 0; f < columns.size(); ++f) {
    size_t row = recs[0].fields[f].nbytes();
    for (int i = 0; i < kRecords; ++i)
      std::memcpy(columns[f].mutableRaw() + row * size_t(i),
                  recs[size_t(i)].fields[f].raw(), row);
  }
  std::vector<uint8_t> a(kRecords), b(kRecords);
  if (!fn(columns, nullptr, kRecords, a.data()) ||
      !(**reference)(columns, nullptr, kRecords, b.data()) || a != b) {
    state.SkipWithError("the kernel and the interpreter disagree");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(fn(columns, nullptr, kRecords, a.data()));
    benchmark::DoNotOptimize(a.data());
  }
  state.SetItemsProcessed(state.iterations() * kRecords);
}

void BM_RowsFilterInterpreter(benchmark::State &s) { runRowsFilter(s, false); }
void BM_RowsFilterJit(benchmark::State &s) { runRowsFilter(s, true); }

} // namespace

BENCHMARK(BM_FilterInterpreter)
    ->DenseRange(0, 3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FilterJit)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RowsFilterInterpreter)
    ->DenseRange(0, 3)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RowsFilterJit)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
