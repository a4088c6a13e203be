//===- ElementOps.cpp - Registry element ops bound to their kernels -------===//
//
// One binder per op: it reads the step's (validated, defaulted) parameters
// once, precomputes what it can (parsed expressions, a loaded vocabulary,
// field positions) and returns a closure the map stage calls per record.
// `as` writes the result to a new field (appended, or replacing a field of
// that name, exactly as the registry's withResult() types it); without it
// the result replaces `field`.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/ElementOps.h"

#include "sluice/ops/Expr.h"
#include "sluice/ops/Random.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/kernels/Categorical.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Image.h"
#include "sluice/ops/kernels/Layout.h"
#include "sluice/runtime/Stats.h"

#include <cmath>
#include <map>
#include <memory>

namespace sluice::runtime {

uint64_t stageStream(const PlanStage &stage) {
  uint64_t occurrence = 1;
  size_t dot = stage.name.rfind('.');
  if (dot != std::string::npos && dot + 1 < stage.name.size()) {
    uint64_t n = 0;
    bool digits = true;
    for (size_t i = dot + 1; i < stage.name.size(); ++i) {
      char c = stage.name[i];
      if (c < '0' || c > '9') {
        digits = false;
        break;
      }
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (digits && n > 0)
      occurrence = n;
  }
  return streamId(stage.op, occurrence);
}

bool isPerRecordStep(const PlanStage &stage) {
  return stage.kind == OpKind::Element || stage.op == "select" ||
         stage.op == "rename" || stage.op == "filter";
}

namespace {

using kernels::CompiledExpr;

/// Where a step reads its input field and writes its result.
struct FieldIO {
  size_t in = 0;
  size_t out = 0;
  FieldType outType;
};

Status bindError(const PlanStage &s, const std::string &what) {
  return Status::error("cannot run step '" + s.name + "' (" + s.op +
                       "): " + what);
}

Expected<FieldIO> fieldIO(const PlanStage &s) {
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

/// A kernel call on the input field: f(tensor, rec, ctx) -> Expected<Tensor>.
template <typename F> ElementFn unary(const FieldIO &io, F f) {
  return [io, f](Record &rec, const ElementContext &ctx) -> Expected<bool> {
    if (io.in >= rec.fields.size())
      return Status::error("internal error: record has " +
                           std::to_string(rec.fields.size()) + " fields");
    Expected<Tensor> t = f(rec.fields[io.in], rec, ctx);
    if (!t)
      return t.status();
    store(rec, io, t.take());
    return true;
  };
}

std::pair<int64_t, int64_t> sizeHW(const Value &v) {
  std::vector<int64_t> s = v.asIntList();
  if (s.empty())
    return {1, 1};
  return {s[0], s.size() > 1 ? s[1] : s[0]};
}

/// A step's `antialias` (true unless the plan says false).
bool antialias(const PlanStage &s) {
  const Value &v = s.params["antialias"];
  return !v.isBool() || v.asBool();
}

kernels::Interpolation interpolation(const Value &v) {
  std::string s = v.isString() ? v.asString() : "bilinear";
  if (s == "nearest")
    return kernels::Interpolation::Nearest;
  if (s == "area")
    return kernels::Interpolation::Area;
  return kernels::Interpolation::Bilinear;
}

std::string dims(const Tensor &t) {
  std::string s;
  for (size_t i = 0; i < t.rank(); ++i)
    s += (i ? "x" : "") + std::to_string(t.dim(i));
  return s.empty() ? "scalar" : s;
}

Expected<ElementFn> bindDecodeImage(const PlanStage &s, const FieldIO &io) {
  int channels = static_cast<int>(
      s.params["channels"].isNumber() ? s.params["channels"].asInt() : 3);
  return unary(io,
               [channels](const Tensor &t, Record &,
                          const ElementContext &) -> Expected<Tensor> {
                 if (t.isNumeric() || t.rank() != 0)
                   return Status::error(
                       "expected one encoded image (bytes), got " +
                       t.type().str());
                 return kernels::decodeImage(t.str(), channels);
               });
}

Expected<ElementFn> bindResize(const PlanStage &s, const FieldIO &io) {
  std::vector<int64_t> size = s.params["size"].asIntList();
  if (size.empty() || size.size() > 2)
    return bindError(s, "size needs one or two numbers");
  kernels::Interpolation interp = interpolation(s.params["interpolation"]);
  bool aa = antialias(s);
  return unary(io,
               [size, interp, aa](const Tensor &t, Record &,
                              const ElementContext &) -> Expected<Tensor> {
                 if (t.rank() < 2)
                   return Status::error("expected an image, got " +
                                        t.type().str());
                 int64_t h, w;
                 if (size.size() == 2) {
                   h = size[0];
                   w = size[1];
                 } else {
                   // torchvision: the shorter side becomes `size`, the longer
                   // one int(size * long / short) (truncated).
                   int64_t H = t.dim(0), W = t.dim(1), s0 = size[0];
                   if (H <= 0 || W <= 0)
                     return Status::error("cannot resize an empty image (" +
                                          dims(t) + ")");
                   if (H <= W) {
                     h = s0;
                     w = static_cast<int64_t>(static_cast<double>(s0) *
                                              static_cast<double>(W) /
                                              static_cast<double>(H));
                   } else {
                     w = s0;
                     h = static_cast<int64_t>(static_cast<double>(s0) *
                                              static_cast<double>(H) /
                                              static_cast<double>(W));
                   }
                 }
                 return kernels::resize(t, h, w, interp, aa);
               });
}

Expected<ElementFn> bindCenterCrop(const PlanStage &s, const FieldIO &io) {
  auto [h, w] = sizeHW(s.params["size"]);
  return unary(
      io,
      [h = h, w = w](const Tensor &t, Record &,
                     const ElementContext &) -> Expected<Tensor> {
        if (t.rank() < 2)
          return Status::error("expected an image, got " + t.type().str());
        // The registry documents a data error rather than silent zero padding
        // for images smaller than the crop.
        if (t.dim(0) < h || t.dim(1) < w)
          return Status::error("image " + std::to_string(t.dim(0)) + "x" +
                               std::to_string(t.dim(1)) +
                               " is smaller than the crop " +
                               std::to_string(h) + "x" + std::to_string(w) +
                               "; resize it first (e.g. `resize: {size: " +
                               std::to_string(std::max(h, w)) + "}`)");
        return kernels::centerCrop(t, h, w);
      });
}

Expected<ElementFn> bindRandomCrop(const PlanStage &s, const FieldIO &io) {
  auto [h, w] = sizeHW(s.params["size"]);
  int64_t padding =
      s.params["padding"].isNumber() ? s.params["padding"].asInt() : 0;
  uint64_t stream = stageStream(s);
  return unary(io,
               [h = h, w = w, padding,
                stream](const Tensor &t, Record &rec,
                        const ElementContext &ctx) -> Expected<Tensor> {
                 Rng rng(ctx.seed, ctx.epoch, rec.index, stream);
                 return kernels::randomCrop(t, h, w, padding, false, rng);
               });
}

/// The box and resize settings of random_resized_crop (also carried by the
/// fused decode_random_resized_crop).
kernels::RandomResizedCropParams resizedCropParams(const PlanStage &s) {
  kernels::RandomResizedCropParams p;
  auto [h, w] = sizeHW(s.params["size"]);
  p.height = h;
  p.width = w;
  std::vector<double> scale = s.params["scale"].asDoubleList();
  std::vector<double> ratio = s.params["ratio"].asDoubleList();
  if (scale.size() == 2) {
    p.scaleLo = scale[0];
    p.scaleHi = scale[1];
  }
  if (ratio.size() == 2) {
    p.ratioLo = ratio[0];
    p.ratioHi = ratio[1];
  }
  p.interpolation = interpolation(s.params["interpolation"]);
  p.antialias = antialias(s);
  return p;
}

Expected<ElementFn> bindRandomResizedCrop(const PlanStage &s,
                                          const FieldIO &io) {
  kernels::RandomResizedCropParams p = resizedCropParams(s);
  uint64_t stream = stageStream(s);
  return unary(io,
               [p, stream](const Tensor &t, Record &rec,
                           const ElementContext &ctx) -> Expected<Tensor> {
                 Rng rng(ctx.seed, ctx.epoch, rec.index, stream);
                 return kernels::randomResizedCrop(t, p, rng);
               });
}

/// The random stream of the step named `name` of op `op` (a step fused
/// away, whose draws the fused op makes).
uint64_t fusedStepStream(const std::string &op, const std::string &name) {
  PlanStage step;
  step.op = op;
  step.name = name;
  return stageStream(step);
}

/// decode_random_resized_crop (made by sluice-fuse-decode-crop): draws the
/// box from the random stream of the crop step it replaced, named by
/// `crop_step`, so records see the draws and pixels of the unfused steps.
/// sluice-fuse-crop-epilogue may have folded a flip (drawn from the stream
/// of `flip_step`), a normalize (`mean`, `std`) and a transpose to CHW
/// (`layout`) into it.
Expected<ElementFn> bindDecodeRandomResizedCrop(const PlanStage &s,
                                                const FieldIO &io) {
  const Value &cropStep = s.params["crop_step"];
  if (!cropStep.isString())
    return bindError(s, "parameter 'crop_step' is missing");
  uint64_t stream = fusedStepStream("random_resized_crop", cropStep.asString());
  int channels = static_cast<int>(
      s.params["channels"].isNumber() ? s.params["channels"].asInt() : 3);
  kernels::RandomResizedCropParams p = resizedCropParams(s);
  kernels::DecodeOptions opts;
  opts.verifyFull =
      s.params["verify"].isString() && s.params["verify"].asString() == "full";
  opts.allowDctScaling = s.params["decode_scale"].isString() &&
                         s.params["decode_scale"].asString() == "auto";

  auto epi = std::make_shared<kernels::ImageEpilogue>();
  bool hasEpilogue = false;
  std::optional<uint64_t> flipStream;
  double flipP =
      s.params["flip_p"].isNumber() ? s.params["flip_p"].asDouble() : 0.5;
  if (s.params["flip_step"].isString()) {
    flipStream =
        fusedStepStream("random_flip", s.params["flip_step"].asString());
    hasEpilogue = true;
  }
  if (s.params["mean"].isList() || s.params["std"].isList()) {
    std::vector<double> mean = s.params["mean"].asDoubleList();
    std::vector<double> sd = s.params["std"].asDoubleList();
    auto fits = [&](const std::vector<double> &v) {
      return v.size() == 1 || v.size() == static_cast<size_t>(channels);
    };
    if (!fits(mean) || !fits(sd))
      return bindError(s, "mean and std need 1 or " + std::to_string(channels) +
                              " values");
    for (double v : sd)
      if (!(v > 0))
        return bindError(s, "std values must be > 0");
    epi->normalize = true;
    epi->normalizeTo = io.outType.elem;
    if (!kernels::isNormalizeOutput(epi->normalizeTo))
      return bindError(s, "a fused normalize writes f32, f16 or bf16, not " +
                              io.outType.str());
    kernels::normalizeTables(mean, sd, channels, epi->mean, epi->scale);
    hasEpilogue = true;
  }
  if (s.params["layout"].isString() && s.params["layout"].asString() == "CHW") {
    epi->chw = true;
    hasEpilogue = true;
  }
  if (!hasEpilogue)
    epi.reset();
  // The flip is drawn per record: a second, flipping copy of the epilogue
  // is picked then, so nothing is copied per record.
  std::shared_ptr<const kernels::ImageEpilogue> flipped;
  if (epi && flipStream) {
    auto f = std::make_shared<kernels::ImageEpilogue>(*epi);
    f->flip = true;
    flipped = std::move(f);
  }
  return unary(
      io,
      [p, channels, stream, opts, epi, flipped, flipStream,
       flipP](const Tensor &t, Record &rec,
              const ElementContext &ctx) -> Expected<Tensor> {
        if (t.isNumeric() || t.rank() != 0)
          return Status::error("expected one encoded image (bytes), got " +
                               t.type().str());
        Rng rng(ctx.seed, ctx.epoch, rec.index, stream);
        kernels::DecodeOptions o = opts;
        o.epilogue = epi.get();
        if (flipStream &&
            Rng(ctx.seed, ctx.epoch, rec.index, *flipStream).bernoulli(flipP))
          o.epilogue = flipped.get();
        return kernels::decodeRandomResizedCrop(t.str(), channels, p, rng, o);
      });
}

Expected<ElementFn> bindRandomFlip(const PlanStage &s, const FieldIO &io) {
  kernels::FlipAxis axis =
      s.params["axis"].isString() && s.params["axis"].asString() == "height"
          ? kernels::FlipAxis::Height
          : kernels::FlipAxis::Width;
  double p = s.params["p"].isNumber() ? s.params["p"].asDouble() : 0.5;
  uint64_t stream = stageStream(s);
  return unary(
      io,
      [axis, p, stream](const Tensor &t, Record &rec,
                        const ElementContext &ctx) -> Expected<Tensor> {
        Rng rng(ctx.seed, ctx.epoch, rec.index, stream);
        return kernels::randomFlip(t, axis, p, rng);
      });
}

Expected<ElementFn> bindNormalize(const PlanStage &s, const FieldIO &io) {
  std::vector<double> mean = s.params["mean"].asDoubleList();
  std::vector<double> sd = s.params["std"].asDoubleList();
  if (mean.empty() || sd.empty())
    return bindError(s, "mean and std need at least one value");
  for (double v : sd)
    if (!(v > 0))
      return bindError(s, "std values must be > 0");
  // The kernel takes one value or one per channel for each list; broadcast
  // a single value to the other list's length so both agree.
  if (mean.size() == 1 && sd.size() > 1)
    mean.assign(sd.size(), mean[0]);
  if (sd.size() == 1 && mean.size() > 1)
    sd.assign(mean.size(), sd[0]);
  ElemType to = io.outType.elem;
  return unary(io,
               [mean, sd, to](const Tensor &t, Record &,
                              const ElementContext &) -> Expected<Tensor> {
                 return kernels::normalize(t, mean, sd, to);
               });
}

Expected<ElementFn> bindCast(const PlanStage &s, const FieldIO &io) {
  ElemType to = io.outType.elem;
  return unary(io,
               [to](const Tensor &t, Record &, const ElementContext &)
                   -> Expected<Tensor> { return kernels::cast(t, to); });
}

Expected<ElementFn> bindFillMissing(const PlanStage &s, const FieldIO &io) {
  double v = s.params["value"].isNumber() ? s.params["value"].asDouble() : 0;
  return unary(io,
               [v](const Tensor &t, Record &, const ElementContext &)
                   -> Expected<Tensor> { return kernels::fillMissing(t, v); });
}

Expected<ElementFn> bindClamp(const PlanStage &s, const FieldIO &io) {
  std::optional<double> lo, hi;
  if (s.params["min"].isNumber())
    lo = s.params["min"].asDouble();
  if (s.params["max"].isNumber())
    hi = s.params["max"].asDouble();
  return unary(io,
               [lo, hi](const Tensor &t, Record &, const ElementContext &)
                   -> Expected<Tensor> { return kernels::clamp(t, lo, hi); });
}

Expected<ElementFn> bindMap(const PlanStage &s, const FieldIO &io) {
  const Value &text = s.params["expr"];
  if (!text.isString())
    return bindError(s, "parameter 'expr' is missing");
  ExprError err;
  ExprPtr e = parseExpr(text.asString(), err);
  if (!e)
    return bindError(s, "expression '" + text.asString() + "': " + err.message);
  ElemType inElem = s.inputType.fields()[io.in].type.elem;
  Expected<CompiledExpr> compiled = CompiledExpr::compileMap(*e, inElem);
  if (!compiled)
    return bindError(s, compiled.status().message());
  auto code = std::make_shared<const CompiledExpr>(compiled.take());
  ElemType to = io.outType.elem;
  return unary(io,
               [code, to](const Tensor &t, Record &,
                          const ElementContext &) -> Expected<Tensor> {
                 Expected<Tensor> r = code->map(t);
                 if (!r || r->elem() == to)
                   return r;
                 return kernels::cast(*r, to);
               });
}

Expected<ElementFn> bindTranspose(const PlanStage &s, const FieldIO &io) {
  std::vector<int64_t> perm;
  const Value &to = s.params["to"];
  if (to.isString())
    perm = to.asString() == "CHW" ? std::vector<int64_t>{2, 0, 1}
                                  : std::vector<int64_t>{1, 2, 0};
  else
    perm = s.params["perm"].asIntList();
  if (perm.size() != s.inputType.fields()[io.in].type.rank())
    return bindError(s, "the permutation does not match the field's rank");
  return unary(io,
               [perm](const Tensor &t, Record &, const ElementContext &)
                   -> Expected<Tensor> { return kernels::transpose(t, perm); });
}

Expected<ElementFn> bindPad(const PlanStage &s, const FieldIO &io) {
  std::vector<int64_t> p = s.params["padding"].asIntList();
  double value =
      s.params["value"].isNumber() ? s.params["value"].asDouble() : 0;
  size_t rank = s.inputType.fields()[io.in].type.rank();
  size_t sides = rank == 1 ? 2 : 4;
  if (p.size() == 1)
    p.assign(sides, p[0]);
  if (p.size() != sides || rank == 0)
    return bindError(s, "padding does not match the field's rank");
  std::vector<std::pair<int64_t, int64_t>> pads(rank, {0, 0});
  for (size_t d = 0; d < sides / 2; ++d)
    pads[d] = {p[2 * d], p[2 * d + 1]};
  return unary(io,
               [pads, value](const Tensor &t, Record &,
                             const ElementContext &) -> Expected<Tensor> {
                 return kernels::pad(t, pads, value);
               });
}

Expected<ElementFn> bindTruncate(const PlanStage &s, const FieldIO &io) {
  int64_t len = s.params["length"].isNumber() ? s.params["length"].asInt() : 1;
  return unary(io,
               [len](const Tensor &t, Record &,
                     const ElementContext &) -> Expected<Tensor> {
                 return kernels::truncate(t, len, 0);
               });
}

Expected<ElementFn> bindHashBucket(const PlanStage &s, const FieldIO &io) {
  int64_t buckets =
      s.params["buckets"].isNumber() ? s.params["buckets"].asInt() : 1;
  return unary(io,
               [buckets](const Tensor &t, Record &,
                         const ElementContext &) -> Expected<Tensor> {
                 return kernels::hashBucket(t, buckets);
               });
}

Expected<ElementFn> bindBucketize(const PlanStage &s, const FieldIO &io) {
  std::vector<double> b = s.params["boundaries"].asDoubleList();
  return unary(io,
               [b](const Tensor &t, Record &, const ElementContext &)
                   -> Expected<Tensor> { return kernels::bucketize(t, b); });
}

Expected<ElementFn> bindOneHot(const PlanStage &s, const FieldIO &io) {
  int64_t depth = s.params["depth"].isNumber() ? s.params["depth"].asInt() : 1;
  ElemType out = io.outType.elem;
  return unary(io,
               [depth, out](const Tensor &t, Record &,
                            const ElementContext &) -> Expected<Tensor> {
                 return kernels::oneHot(t, depth, out);
               });
}

Expected<ElementFn> bindTokenize(const PlanStage &s, const FieldIO &io,
                                 const Plan &plan) {
  const Value &vocabV = s.params["vocab"];
  if (!vocabV.isString() || vocabV.asString().empty())
    return bindError(s, "parameter 'vocab' is missing");
  std::string path = vocabV.asString();
  if (path[0] != '/' && !plan.baseDir.empty())
    path = plan.baseDir + "/" + path;
  Expected<std::shared_ptr<const kernels::Vocab>> vocab =
      kernels::Vocab::shared(path);
  if (!vocab)
    return bindError(s, vocab.status().message());
  kernels::TokenizeOptions opts;
  opts.lowercase =
      s.params["lowercase"].isBool() && s.params["lowercase"].asBool();
  std::string unknown =
      s.params["unknown"].isString() ? s.params["unknown"].asString() : "[UNK]";
  opts.unknownId = (*vocab)->lookup(unknown);
  if (opts.unknownId < 0)
    return bindError(s, "the unknown token '" + unknown +
                            "' is not in the vocabulary " + path +
                            "; add it as a line of the file or set `unknown` "
                            "to one of its tokens");
  opts.out = io.outType.elem == ElemType::I32 ? ElemType::I32 : ElemType::I64;
  opts.replaceInvalid = s.params["encoding"].isString() &&
                        s.params["encoding"].asString() == "replace";
  std::shared_ptr<const kernels::Vocab> v = *vocab;
  return unary(io,
               [v, opts](const Tensor &t, Record &,
                         const ElementContext &ctx) -> Expected<Tensor> {
                 size_t replaced = 0;
                 Expected<Tensor> r = kernels::tokenize(t, *v, opts, &replaced);
                 if (replaced > 0 && ctx.counters)
                   ctx.counters->addRepaired(
                       "tokenize: invalid UTF-8 replaced by U+FFFD");
                 return r;
               });
}

Expected<ElementFn> bindSelect(const PlanStage &s) {
  std::vector<size_t> from;
  for (const Field &f : s.outputType.fields()) {
    int i = s.inputType.indexOf(f.name);
    if (i < 0)
      return bindError(s, "its input has no field '" + f.name + "'");
    from.push_back(static_cast<size_t>(i));
  }
  return ElementFn(
      [from](Record &rec, const ElementContext &) -> Expected<bool> {
        std::vector<Tensor> fields;
        fields.reserve(from.size());
        for (size_t i : from) {
          if (i >= rec.fields.size())
            return Status::error("internal error: record has " +
                                 std::to_string(rec.fields.size()) + " fields");
          fields.push_back(std::move(rec.fields[i]));
        }
        rec.fields = std::move(fields);
        return true;
      });
}

Expected<std::shared_ptr<const CompiledExpr>>
compileFilter(const PlanStage &s) {
  const Value &text = s.params["where"];
  if (!text.isString())
    return bindError(s, "parameter 'where' is missing");
  ExprError err;
  ExprPtr e = parseExpr(text.asString(), err);
  if (!e)
    return bindError(s, "expression '" + text.asString() + "': " + err.message);
  Expected<CompiledExpr> compiled =
      CompiledExpr::compileRecord(*e, s.inputType);
  if (!compiled)
    return bindError(s, compiled.status().message());
  return std::make_shared<const CompiledExpr>(compiled.take());
}

Expected<ElementFn> bindFilter(const PlanStage &s) {
  Expected<std::shared_ptr<const CompiledExpr>> compiled = compileFilter(s);
  if (!compiled)
    return compiled.status();
  auto code = compiled.take();
  return ElementFn(
      [code](Record &rec, const ElementContext &) -> Expected<bool> {
        return code->test(rec);
      });
}

} // namespace

/// A `fused_map` stage (sluice-fuse-maps) without generated code: its steps
/// one after another, with the bytes of the unfused stages.
Expected<ElementFn> bindFused(const PlanStage &s, const Plan &plan) {
  if (s.fused.empty())
    return bindError(s, "a fused stage without steps");
  auto fns = std::make_shared<std::vector<ElementFn>>();
  for (const PlanStage &step : s.fused) {
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

std::optional<Expected<RowsFilterFn>> bindRowsFilter(const PlanStage &s) {
  if (s.op != "filter")
    return std::nullopt;
  Expected<std::shared_ptr<const CompiledExpr>> compiled = compileFilter(s);
  if (!compiled)
    return Expected<RowsFilterFn>(compiled.status());
  auto code = compiled.take();
  return Expected<RowsFilterFn>(RowsFilterFn(
      [code](const std::vector<Tensor> &columns, const uint32_t *rows,
             int64_t n, uint8_t *keep) {
        return code->testRows(columns, rows, n, keep);
      }));
}

Expected<ElementFn> bindElementOp(const PlanStage &s, const Plan &plan) {
  if (s.op == "select")
    return bindSelect(s);
  if (s.op == "rename")
    return ElementFn([](Record &, const ElementContext &) -> Expected<bool> {
      return true; // names live in the record type only
    });
  if (s.op == "filter")
    return bindFilter(s);
  if (s.kind != OpKind::Element)
    return bindError(s, "not a per-record step");
  if (s.op == "fused_map")
    return bindFused(s, plan);

  Expected<FieldIO> io = fieldIO(s);
  if (!io)
    return io.status();
  const std::string &op = s.op;
  if (op == "decode_image")
    return bindDecodeImage(s, *io);
  if (op == "resize")
    return bindResize(s, *io);
  if (op == "center_crop")
    return bindCenterCrop(s, *io);
  if (op == "random_crop")
    return bindRandomCrop(s, *io);
  if (op == "random_resized_crop")
    return bindRandomResizedCrop(s, *io);
  if (op == "decode_random_resized_crop")
    return bindDecodeRandomResizedCrop(s, *io);
  if (op == "random_flip")
    return bindRandomFlip(s, *io);
  if (op == "normalize")
    return bindNormalize(s, *io);
  if (op == "cast")
    return bindCast(s, *io);
  if (op == "fill_missing")
    return bindFillMissing(s, *io);
  if (op == "clamp")
    return bindClamp(s, *io);
  if (op == "map")
    return bindMap(s, *io);
  if (op == "transpose")
    return bindTranspose(s, *io);
  if (op == "pad")
    return bindPad(s, *io);
  if (op == "truncate")
    return bindTruncate(s, *io);
  if (op == "hash_bucket")
    return bindHashBucket(s, *io);
  if (op == "bucketize")
    return bindBucketize(s, *io);
  if (op == "one_hot")
    return bindOneHot(s, *io);
  if (op == "tokenize")
    return bindTokenize(s, *io, plan);
  // An op whose registry entry carries its kernel (OpDef::kernel).
  if (const OpDef *def = Registry::instance().find(op); def && def->kernel) {
    Expected<TensorKernel> kernel = def->kernel(s.params);
    if (!kernel)
      return bindError(s, kernel.status().message());
    return unary(*io,
                 [k = kernel.take()](const Tensor &t, Record &,
                                     const ElementContext &) { return k(t); });
  }
  return bindError(s, "the runtime has no kernel for element op '" + op +
                          "' (not implemented)");
}

} // namespace sluice::runtime
