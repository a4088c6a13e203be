//===- CompiledKernels.cpp - Binding steps to generated kernels -----------===//
//
// The adapter from a SluiceKernelInfo table to the runtime's ElementFn: it
// parses each entry's signature once at bind time, checks it against the
// step's record types, and returns a closure that allocates the output and
// calls the function pointer. It knows nothing of how the code was made.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/CompiledKernels.h"
#include "sluice/ops/Switches.h"

#include "sluice/ops/Allocation.h"
#include "sluice/ops/Expr.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/runtime/RemapChain.h"

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::runtime {

namespace {

using ValuesFn = void (*)(const void *, void *, int64_t);
using RemapFn = void (*)(const void *, void *, const int64_t *);
using FilterFn = void (*)(const void *const *, int64_t *);
using FilterRowsFn = void (*)(const void *const *, const int64_t *,
                              const uint32_t *, int64_t, uint8_t *);

/// One "values FIELD IN -> OUT OUTELEM" entry, resolved to field positions.
struct ValuesCall {
  ValuesFn fn = nullptr;
  size_t in = 0, out = 0;
  ElemType inElem = ElemType::F32, outElem = ElemType::F32;
  std::string field;
  /// "channels C": the field's last dim must be C (> 1), else 1.
  int64_t channels = 1;
};

Status kernelError(const PlanStep &s, const std::string &what) {
  return Status::error("cannot run step '" + s.name + "' (" + s.op +
                       ") with its compiled kernel: " + what);
}

/// Parses one signature against the stage's types. `width` is the number of
/// fields the record has when this entry runs (entries before it may have
/// appended one).
Expected<ValuesCall> parseValues(const PlanStep &s, const SluiceKernelInfo &k,
                                 size_t &width) {
  std::istringstream in(k.signature ? k.signature : "");
  std::string kind, field, inName, arrow, out, outName;
  if (!(in >> kind >> field >> inName >> arrow >> out >> outName) ||
      kind != "values" || arrow != "->")
    return kernelError(s, std::string("unknown kernel signature '") +
                              (k.signature ? k.signature : "") + "'");
  int64_t channels = 1;
  std::string word;
  if (in >> word) { // "channels C" and nothing after it
    std::string rest;
    if (word != "channels" || !(in >> channels) || channels < 2 || (in >> rest))
      return kernelError(s, std::string("unknown kernel signature '") +
                                k.signature + "'");
  }
  std::optional<ElemType> inElem = parseElemType(inName);
  std::optional<ElemType> outElem = parseElemType(outName);
  if (!inElem || !outElem || !isNumeric(*inElem) || !isNumeric(*outElem))
    return kernelError(s, "bad element types in '" + std::string(k.signature) +
                              "'");
  int i = s.inputType.indexOf(field);
  int o = s.outputType.indexOf(out);
  if (i < 0 || static_cast<size_t>(i) >= width)
    return kernelError(s, "its input has no field '" + field + "'");
  if (o < 0 || static_cast<size_t>(o) > width)
    return kernelError(s, "its output has no field '" + out + "'");
  if (s.outputType.fields()[size_t(o)].type.elem != *outElem)
    return kernelError(s, "the kernel writes " + outName + " but field '" +
                              out + "' is " +
                              s.outputType.fields()[size_t(o)].type.str());
  ValuesCall c;
  c.fn = reinterpret_cast<ValuesFn>(k.fn);
  c.in = size_t(i);
  c.out = size_t(o);
  c.inElem = *inElem;
  c.outElem = *outElem;
  c.field = field;
  c.channels = channels;
  if (c.out == width)
    ++width;
  return c;
}

/// Binds a "remap FIELD IN -> FIELD OUTELEM" entry: the stage is a remap
/// chain (RemapChain.h); per record the runtime fills the parameter block
/// and calls the kernel once. Records the chain's steps would reject take
/// the unfused steps, which report what they always reported.
Expected<ElementFn> bindRemap(const PlanStep &s, const SluiceKernelInfo &k) {
  std::istringstream in(k.signature ? k.signature : "");
  std::string kind, field, inName, arrow, out, outName;
  if (!(in >> kind >> field >> inName >> arrow >> out >> outName) ||
      kind != "remap" || arrow != "->" || field != out)
    return kernelError(s, std::string("unknown kernel signature '") +
                              (k.signature ? k.signature : "") + "'");
  Expected<RemapChain> chain = RemapChain::build(s);
  if (!chain)
    return kernelError(s, chain.status().message());
  std::optional<ElemType> inElem = parseElemType(inName);
  std::optional<ElemType> outElem = parseElemType(outName);
  if (!inElem || !outElem || *inElem != chain->inElem() ||
      *outElem != chain->outElem() || chain->field() != field)
    return kernelError(s, "the kernel's types '" + std::string(k.signature) +
                              "' are not the chain's");
  int i = s.inputType.indexOf(field), o = s.outputType.indexOf(field);
  if (i < 0 || o < 0 || i != o)
    return kernelError(s, "its records have no field '" + field + "'");
  if (!k.fn)
    return kernelError(s, "null kernel pointer");
  static const Plan kNoPlan;
  Expected<ElementFn> reference =
      s.op == "fused_map" ? bindFused(s, kNoPlan) : bindElementOp(s, kNoPlan);
  if (!reference)
    return reference.status();
  auto c = std::make_shared<const RemapChain>(chain.take());
  // The kernel has the sizes the types know compiled in (Codegen): a record
  // of another shape takes the unfused steps.
  auto fits = [](const std::vector<int64_t> &actual,
                 const std::vector<int64_t> &known) {
    if (actual.size() != known.size())
      return false;
    for (size_t d = 0; d < known.size(); ++d)
      if (known[d] != kDynamic && known[d] != actual[d])
        return false;
    return true;
  };
  return ElementFn(
      [c, ref = reference.take(), fn = reinterpret_cast<RemapFn>(k.fn),
       at = size_t(i), elem = *outElem, fits,
       inShape = s.inputType.fields()[size_t(i)].type.shape,
       outShape = s.outputType.fields()[size_t(o)].type.shape](
          Record &rec, const ElementContext &ctx) -> Expected<bool> {
        if (at >= rec.fields.size())
          return ref(rec, ctx);
        int64_t small[64];
        std::vector<int64_t> big;
        int64_t *params = small;
        if (c->paramCount() > 64) {
          big.resize(c->paramCount());
          params = big.data();
        }
        std::vector<int64_t> shape;
        const Tensor &t = rec.fields[at];
        if (!fits(t.shape(), inShape) ||
            !c->fill(t, ctx.seed, ctx.epoch, rec.index, params, shape) ||
            !fits(shape, outShape))
          return ref(rec, ctx);
        // Every value is written: a batch row the runtime offers will do.
        Tensor result = outputTensor(elem, std::move(shape));
        fn(t.raw(), result.mutableRaw(), params);
        rec.fields[at] = std::move(result);
        return true;
      });
}

/// The checks both filter entries start with, and the condition compiled
/// as the interpreter compiles it (its load slots name what the kernel
/// reads).
Expected<kernels::CompiledExpr> filterCondition(const PlanStep &s,
                                                const SluiceKernelInfo &k) {
  const OpDef *def = Registry::instance().find(s.op);
  const char *param = def ? def->traits.condition : nullptr;
  if (!param)
    return kernelError(s, "a condition kernel on a step that keeps records "
                          "by no condition");
  if (!k.fn)
    return kernelError(s, "null kernel pointer");
  const Value &text = s.params[param];
  if (!text.isString())
    return kernelError(s, "parameter '" + std::string(param) + "' is missing");
  ExprError err;
  ExprPtr e = parseExpr(text.asString(), err);
  if (!e)
    return kernelError(s, err.message);
  Expected<kernels::CompiledExpr> code =
      kernels::CompiledExpr::compileRecord(*e, s.inputType);
  if (!code)
    return kernelError(s, code.status().message());
  return code;
}

/// Binds a "condition" entry: the condition's load slots (field, flattened
/// index) come from the same bytecode compile the interpreter runs; per
/// record the runtime points at each slot's element and calls the kernel.
/// A record the interpreter would reject (a missing field, another type, an
/// index out of range) goes to it, which reports what it always reported.
Expected<ElementFn> bindFilterKernel(const PlanStep &s,
                                     const SluiceKernelInfo &k) {
  Expected<kernels::CompiledExpr> code = filterCondition(s, k);
  if (!code)
    return code.status();
  static const Plan kNoPlan;
  Expected<ElementFn> reference = bindElementOp(s, kNoPlan);
  if (!reference)
    return reference.status();
  auto slots = std::make_shared<const std::vector<kernels::CompiledExpr::Slot>>(
      code->slots());
  return ElementFn(
      [slots, ref = reference.take(), fn = reinterpret_cast<FilterFn>(k.fn)](
          Record &rec, const ElementContext &ctx) -> Expected<bool> {
        const void *small[16];
        std::vector<const void *> big;
        const void **ptrs = small;
        if (slots->size() > 16) {
          big.resize(slots->size());
          ptrs = big.data();
        }
        for (size_t i = 0; i < slots->size(); ++i) {
          const kernels::CompiledExpr::Slot &slot = (*slots)[i];
          if (slot.field < 0 || size_t(slot.field) >= rec.fields.size())
            return ref(rec, ctx);
          const Tensor &t = rec.fields[size_t(slot.field)];
          if (!t.valid() || !t.isNumeric() || t.elem() != slot.elem ||
              slot.index < 0 || slot.index >= t.numElements())
            return ref(rec, ctx);
          ptrs[i] = t.raw() + size_t(slot.index) * elemTypeSize(slot.elem);
        }
        int64_t kept = 0;
        fn(ptrs, &kept);
        return kept != 0;
      });
}

/// Binds a "condition rows" entry: per run, the same checks as
/// CompiledExpr::testRows, then one call over the rows.
Expected<RowsFilterFn> bindFilterRowsKernel(const PlanStep &s,
                                            const SluiceKernelInfo &k) {
  Expected<kernels::CompiledExpr> code = filterCondition(s, k);
  if (!code)
    return code.status();
  std::optional<Expected<RowsFilterFn>> reference = bindRowsFilter(s);
  if (!reference)
    return kernelError(s, "no column test for this step");
  if (!*reference)
    return reference->status();
  auto slots = std::make_shared<const std::vector<kernels::CompiledExpr::Slot>>(
      code->slots());
  return RowsFilterFn([slots, ref = reference->take(),
                       fn = reinterpret_cast<FilterRowsFn>(k.fn)](
                          const std::vector<Tensor> &columns,
                          const uint32_t *rows, int64_t n,
                          uint8_t *keep) -> Status {
    const void *smallBases[16];
    int64_t smallStrides[16];
    std::vector<const void *> bigBases;
    std::vector<int64_t> bigStrides;
    const void **bases = smallBases;
    int64_t *strides = smallStrides;
    if (slots->size() > 16) {
      bigBases.resize(slots->size());
      bigStrides.resize(slots->size());
      bases = bigBases.data();
      strides = bigStrides.data();
    }
    for (size_t i = 0; i < slots->size(); ++i) {
      const kernels::CompiledExpr::Slot &slot = (*slots)[i];
      if (slot.field < 0 || size_t(slot.field) >= columns.size())
        return ref(columns, rows, n, keep);
      const Tensor &t = columns[size_t(slot.field)];
      if (!t.valid() || !t.isNumeric() || t.elem() != slot.elem ||
          t.rank() == 0 || t.dim(0) <= 0)
        return ref(columns, rows, n, keep);
      int64_t rowElems = t.numElements() / t.dim(0);
      if (slot.index < 0 || slot.index >= rowElems)
        return ref(columns, rows, n, keep);
      bases[i] = t.raw() + size_t(slot.index) * elemTypeSize(slot.elem);
      strides[i] = rowElems;
    }
    if (n > 0)
      fn(bases, strides, rows, n, keep);
    return Status::ok();
  });
}

} // namespace

RowsKernelBinder rowsBinderFromKernelTable(const SluiceKernelInfo *table) {
  // SLUICE_NO_GENERATED_ROWS_FILTER=1: record runs test their filters with
  // the interpreter (an A/B switch; the same rows are kept).
  if (switchedOff("SLUICE_NO_GENERATED_ROWS_FILTER"))
    return [](const PlanStep &) -> std::optional<Expected<RowsFilterFn>> {
      return std::nullopt;
    };
  return [table](const PlanStep &s) -> std::optional<Expected<RowsFilterFn>> {
    for (size_t i = 0; table && table[i].stage; ++i)
      if (s.name == table[i].stage && table[i].signature &&
          std::string(table[i].signature) == "condition rows")
        return bindFilterRowsKernel(s, table[i]);
    return std::nullopt;
  };
}

size_t kernelTableSize(const SluiceKernelInfo *table) {
  size_t n = 0;
  while (table && table[n].stage)
    ++n;
  return n;
}

KernelBinder binderFromKernelTable(const SluiceKernelInfo *table) {
  return [table](const PlanStep &s) -> std::optional<Expected<ElementFn>> {
    std::vector<const SluiceKernelInfo *> mine;
    for (size_t i = 0; table && table[i].stage; ++i)
      if (s.name == table[i].stage &&
          !(table[i].signature &&
            std::string(table[i].signature) == "condition rows"))
        mine.push_back(&table[i]); // the column form: rowsBinderFromKernelTable
    if (mine.empty())
      return std::nullopt;
    if (mine.size() == 1 && mine[0]->signature &&
        std::string(mine[0]->signature).rfind("remap ", 0) == 0)
      return bindRemap(s, *mine[0]);
    if (mine.size() == 1 && mine[0]->signature &&
        std::string(mine[0]->signature) == "condition")
      return bindFilterKernel(s, *mine[0]);
    size_t width = s.inputType.size();
    auto calls = std::make_shared<std::vector<ValuesCall>>();
    for (const SluiceKernelInfo *k : mine) {
      Expected<ValuesCall> c = parseValues(s, *k, width);
      if (!c)
        return Expected<ElementFn>(c.status());
      if (!c->fn)
        return Expected<ElementFn>(kernelError(s, "null kernel pointer"));
      calls->push_back(c.take());
    }
    if (width != s.outputType.size())
      return Expected<ElementFn>(
          kernelError(s, "its kernels produce " + std::to_string(width) +
                             " fields, the step's output type has " +
                             std::to_string(s.outputType.size())));
    // A chain with a per-channel normalize has its channel count compiled
    // in: a record whose field has another last dim takes the unfused
    // steps, which report the mismatch as they always did.
    bool perChannel = false;
    for (const ValuesCall &c : *calls)
      perChannel |= c.channels > 1;
    ElementFn reference;
    if (perChannel) {
      static const Plan kNoPlan;
      Expected<ElementFn> ref = s.op == "fused_map" ? bindFused(s, kNoPlan)
                                                    : bindElementOp(s, kNoPlan);
      if (!ref)
        return Expected<ElementFn>(ref.status());
      reference = ref.take();
    }
    ElementFn fn = [calls, reference, name = s.name](
                       Record &rec,
                       const ElementContext &ctx) -> Expected<bool> {
      if (reference)
        for (const ValuesCall &c : *calls) {
          if (c.channels < 2)
            continue;
          const Tensor *t =
              c.in < rec.fields.size() ? &rec.fields[c.in] : nullptr;
          if (!t || !t->valid() || t->rank() == 0 ||
              t->dim(t->rank() - 1) != c.channels)
            return reference(rec, ctx);
        }
      for (const ValuesCall &c : *calls) {
        if (c.in >= rec.fields.size() || c.out > rec.fields.size())
          return Status::error("internal error: record has " +
                               std::to_string(rec.fields.size()) +
                               " fields at step '" + name + "'");
        const Tensor &t = rec.fields[c.in];
        if (!t.valid() || !t.isNumeric() || t.elem() != c.inElem)
          return Status::error(
              "step '" + name + "': field '" + c.field + "' is " +
              (t.valid() ? t.type().str() : std::string("missing")) +
              ", its compiled kernel takes " +
              std::string(elemTypeName(c.inElem)));
        Tensor out = Tensor::empty(c.outElem, t.shape());
        c.fn(t.raw(), out.mutableRaw(), t.numElements());
        if (c.out == rec.fields.size())
          rec.fields.push_back(std::move(out));
        else
          rec.fields[c.out] = std::move(out);
      }
      return true;
    };
    return Expected<ElementFn>(std::move(fn));
  };
}

} // namespace sluice::runtime
