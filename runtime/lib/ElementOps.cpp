//===- ElementOps.cpp - Per-record steps bound to their registry kernels --===//
//
// The runtime has no code of its own for an op: each op's registry entry
// (ops/lib/*Ops.cpp) carries its kernel binder, which reads the step's
// (validated, defaulted) parameters once into the op's typed parameters,
// precomputes what it can (parsed expressions, a loaded vocabulary) and
// returns a kernel. Here the kernel is found by the step's op, bound, and
// wrapped into the closure the map stage calls per record: an element op's
// kernel reads the step's `field` and its result is written to `as` (a new
// field appended, or a field of that name replaced, exactly as the
// registry's withResult() types it) or over `field`.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/ElementOps.h"

#include "sluice/ops/Random.h"
#include "sluice/ops/Registry.h"
#include "sluice/runtime/Stats.h"

#include <memory>

namespace sluice::runtime {

uint64_t stageStream(const PlanStep &stage) {
  return stepStream(stage.op, stage.name);
}

bool isPerRecordStep(const PlanStep &stage) {
  if (stage.kind == OpKind::Element)
    return true;
  const OpDef *def = Registry::instance().find(stage.op);
  return def && def->traits.perRecord;
}

namespace {

/// Where a step reads its input field and writes its result.
struct FieldIO {
  size_t in = 0;
  size_t out = 0;
  FieldType outType;
};

Status bindError(const PlanStep &s, const std::string &what) {
  return Status::error("cannot run step '" + s.name + "' (" + s.op +
                       "): " + what);
}

Expected<FieldIO> fieldIO(const PlanStep &s) {
  const Value &field = s.params["field"];
  if (!field.isString())
    return bindError(s, "parameter 'field' is missing");
  int in = s.inputType.indexOf(field.asString());
  if (in < 0)
    return bindError(s, "its input has no field '" + field.asString() + "'");
  const Value &as = s.params["as"];
  std::string result = as.isString() ? as.asString() : field.asString();
  int out = s.outputType.indexOf(result);
  if (out < 0 || static_cast<size_t>(out) > s.inputType.size())
    return bindError(s, "its output type has no field '" + result + "'");
  FieldIO io;
  io.in = static_cast<size_t>(in);
  io.out = static_cast<size_t>(out);
  io.outType = s.outputType.fields()[static_cast<size_t>(out)].type;
  return io;
}

void store(Record &rec, const FieldIO &io, Tensor t) {
  if (io.out == rec.fields.size())
    rec.fields.push_back(std::move(t));
  else
    rec.fields[io.out] = std::move(t);
}

/// Counts a kernel's repairs in the step's counters.
class CountedRepairs final : public KernelCall::Repairs {
public:
  explicit CountedRepairs(StageCounters *c) : counters_(c) {}
  void addRepaired(const std::string &reason) override {
    counters_->addRepaired(reason);
  }

private:
  StageCounters *counters_;
};

/// Runs `f(call)` with the KernelCall of record `rec` in `ctx`.
template <typename F>
auto withCall(const Record &rec, const ElementContext &ctx, F &&f) {
  KernelCall call;
  call.seed = ctx.seed;
  call.epoch = ctx.epoch;
  call.index = rec.index;
  if (!ctx.counters)
    return f(call);
  CountedRepairs repairs(ctx.counters);
  call.repairs = &repairs;
  return f(call);
}

/// An element op's kernel on the step's field.
Expected<ElementFn> bindKernel(const PlanStep &s, const OpDef &def,
                               const Plan &plan) {
  Expected<FieldIO> io = fieldIO(s);
  if (!io)
    return io.status();
  KernelSite site{
      s.params,    s.name,         s.inputType.fields()[io->in].type,
      io->outType, stageStream(s), plan.baseDir};
  Expected<TensorKernel> kernel = def.kernel(site);
  if (!kernel)
    return bindError(s, kernel.status().message());
  return ElementFn(
      [io = *io, k = kernel.take()](
          Record &rec, const ElementContext &ctx) -> Expected<bool> {
        if (io.in >= rec.fields.size())
          return Status::error("internal error: record has " +
                               std::to_string(rec.fields.size()) + " fields");
        Expected<Tensor> t = withCall(rec, ctx, [&](const KernelCall &call) {
          return k(rec.fields[io.in], call);
        });
        if (!t)
          return t.status();
        store(rec, io, t.take());
        return true;
      });
}

/// A per-record op's kernel on the whole record (select, rename, filter).
Expected<ElementFn> bindRecordKernel(const PlanStep &s, const OpDef &def) {
  Expected<RecordKernel> kernel =
      def.recordKernel(RecordSite{s.params, s.inputType, s.outputType});
  if (!kernel)
    return bindError(s, kernel.status().message());
  return ElementFn([k = kernel.take()](Record &rec, const ElementContext &ctx) {
    return withCall(rec, ctx,
                    [&](const KernelCall &call) { return k(rec, call); });
  });
}

} // namespace

/// A `fused_map` stage (sluice-fuse-maps) without generated code: its steps
/// one after another, with the bytes of the unfused stages.
Expected<ElementFn> bindFused(const PlanStep &s, const Plan &plan) {
  if (s.fused.empty())
    return bindError(s, "a fused stage without steps");
  auto fns = std::make_shared<std::vector<ElementFn>>();
  for (const PlanStep &step : s.fused) {
    Expected<ElementFn> fn = bindElementOp(step, plan);
    if (!fn)
      return fn.status();
    fns->push_back(fn.take());
  }
  return ElementFn(
      [fns](Record &rec, const ElementContext &ctx) -> Expected<bool> {
        for (const ElementFn &fn : *fns) {
          Expected<bool> kept = fn(rec, ctx);
          if (!kept || !*kept)
            return kept;
        }
        return true;
      });
}

std::optional<Expected<RowsFilterFn>> bindRowsFilter(const PlanStep &s) {
  const OpDef *def = Registry::instance().find(s.op);
  if (!def || !def->rowsKernel)
    return std::nullopt;
  Expected<RowsKernel> kernel =
      def->rowsKernel(RecordSite{s.params, s.inputType, s.outputType});
  if (!kernel)
    return Expected<RowsFilterFn>(bindError(s, kernel.status().message()));
  return Expected<RowsFilterFn>(RowsFilterFn(kernel.take()));
}

Expected<ElementFn> bindElementOp(const PlanStep &s, const Plan &plan) {
  // A run of steps fused by sluice-fuse-maps is a plan stage, not an op.
  if (s.op == "fused_map")
    return bindFused(s, plan);
  const OpDef *def = Registry::instance().find(s.op);
  if (def && def->recordKernel)
    return bindRecordKernel(s, *def);
  if (s.kind != OpKind::Element)
    return bindError(s, "not a per-record step");
  if (!def || !def->kernel)
    return bindError(s, "the runtime has no kernel for element op '" + s.op +
                            "' (not implemented)");
  return bindKernel(s, *def, plan);
}

} // namespace sluice::runtime
