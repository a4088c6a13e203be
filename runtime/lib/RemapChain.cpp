//===- RemapChain.cpp - Per-record numbers of a fused remap chain ---------===//
//
// The runtime half of RemapChain.h: reads the chain's steps once, then per
// record computes the field's shape after every step and draws the random
// steps' numbers with the Rng streams and calls the unfused kernels use
// (kernels::randomCrop draws top then left; kernels::randomFlip one
// bernoulli), so a fused record sees the same draws as an unfused one.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/RemapChain.h"

#include "sluice/ops/Random.h"
#include "sluice/ops/Registry.h"
#include "sluice/runtime/ElementOps.h"

#include <cmath>

namespace sluice::runtime {

bool isRemapOp(const std::string &op) {
  const OpDef *def = Registry::instance().find(op);
  return def && def->traits.indexRemap;
}

bool isRemapValueOp(const std::string &op) {
  const OpDef *def = Registry::instance().find(op);
  return def && def->traits.valueWise;
}

namespace {

Status chainError(const PlanStep &s, const std::string &what) {
  return Status::error("stage '" + s.name + "' is no remap chain: " + what);
}

/// `size` as the image binders read it: [h, w], [s] = [s, s].
std::pair<int64_t, int64_t> sizeHW(const Value &v) {
  std::vector<int64_t> s = v.asIntList();
  if (s.empty())
    return {1, 1};
  return {s[0], s.size() > 1 ? s[1] : s[0]};
}

} // namespace

Expected<RemapChain> RemapChain::build(const PlanStep &fused) {
  // A lone normalize is a chain of one step: its channel is the last index.
  auto formOf = [](const PlanStep &s) {
    const OpTraits *t = opTraits(s.op);
    return std::make_pair(t ? t->remapForm : RemapForm::None,
                          t ? t->valueForm : ValueForm::None);
  };
  bool lone = formOf(fused).second == ValueForm::ScaleShift;
  if (!lone && (fused.op != "fused_map" || fused.fused.empty()))
    return chainError(fused, "not a fused stage");
  RemapChain c;
  bool anyRemap = false;
  std::vector<const PlanStep *> stepList;
  if (lone)
    stepList.push_back(&fused);
  for (const PlanStep &s : fused.fused)
    stepList.push_back(&s);
  for (const PlanStep *sp : stepList) {
    const PlanStep &s = *sp;
    const Value &f = s.params["field"], &as = s.params["as"];
    if (!f.isString())
      return chainError(fused, "step '" + s.name + "' names no field");
    if (c.field_.empty())
      c.field_ = f.asString();
    if (f.asString() != c.field_ ||
        (as.isString() && as.asString() != c.field_))
      return chainError(fused, "its steps work on more than one field");
    int in = s.inputType.indexOf(c.field_),
        out = s.outputType.indexOf(c.field_);
    if (in < 0 || out < 0)
      return chainError(fused, "step '" + s.name + "' lacks the field");
    Step st;
    st.stage = &s;
    const FieldType &it = s.inputType.fields()[size_t(in)].type;
    const FieldType &ot = s.outputType.fields()[size_t(out)].type;
    st.inRank = it.rank();
    st.outRank = ot.rank();
    st.inElem = it.elem;
    st.outElem = ot.elem;
    if (!isNumeric(st.inElem) || !isNumeric(st.outElem))
      return chainError(fused, "step '" + s.name + "' is not numeric");
    const std::string &op = s.op;
    auto [remap, value] = formOf(s);
    bool image = st.inRank == 2 || st.inRank == 3;
    if (remap == RemapForm::CenterCrop || remap == RemapForm::RandomCrop) {
      if (!image)
        return chainError(fused, "'" + s.name + "' needs an image");
      st.kind =
          remap == RemapForm::CenterCrop ? Kind::CenterCrop : Kind::RandomCrop;
      auto [h, w] = sizeHW(s.params["size"]);
      st.height = h;
      st.width = w;
      if (remap == RemapForm::RandomCrop) {
        st.padding =
            s.params["padding"].isNumber() ? s.params["padding"].asInt() : 0;
        st.stream = stageStream(s);
      }
      if (h <= 0 || w <= 0 || st.padding < 0)
        return chainError(fused, "'" + s.name + "' has a bad size");
    } else if (remap == RemapForm::Flip) {
      if (!image)
        return chainError(fused, "'" + s.name + "' needs an image");
      st.kind = Kind::Flip;
      st.axis =
          s.params["axis"].isString() && s.params["axis"].asString() == "height"
              ? 0
              : 1;
      st.p = s.params["p"].isNumber() ? s.params["p"].asDouble() : 0.5;
      st.stream = stageStream(s);
    } else if (remap == RemapForm::Permute) {
      st.kind = Kind::Transpose;
      const Value &to = s.params["to"];
      if (to.isString())
        st.perm = to.asString() == "CHW" ? std::vector<int64_t>{2, 0, 1}
                                         : std::vector<int64_t>{1, 2, 0};
      else
        st.perm = s.params["perm"].asIntList();
      std::vector<bool> seen(st.inRank, false);
      if (st.perm.size() != st.inRank)
        return chainError(fused, "'" + s.name + "' does not fit the rank");
      for (int64_t p : st.perm) {
        if (p < 0 || p >= int64_t(st.inRank) || seen[size_t(p)])
          return chainError(fused, "'" + s.name + "' is no permutation");
        seen[size_t(p)] = true;
      }
    } else if (remap == RemapForm::Pad) {
      st.kind = Kind::Pad;
      std::vector<int64_t> p = s.params["padding"].asIntList();
      size_t sides = st.inRank == 1 ? 2 : 4;
      if (p.size() == 1)
        p.assign(sides, p[0]);
      if (p.size() != sides || st.inRank == 0)
        return chainError(fused, "'" + s.name + "' does not fit the rank");
      st.pads.assign(st.inRank, {0, 0});
      for (size_t d = 0; d < sides / 2; ++d) {
        st.pads[d] = {p[2 * d], p[2 * d + 1]};
        if (p[2 * d] < 0 || p[2 * d + 1] < 0)
          return chainError(fused, "'" + s.name + "' has negative padding");
      }
      st.value =
          s.params["value"].isNumber() ? s.params["value"].asDouble() : 0;
    } else if (isRemapValueOp(op)) {
      st.kind = Kind::Value;
      if (value == ValueForm::ScaleShift) {
        std::vector<double> mean = s.params["mean"].asDoubleList();
        std::vector<double> sd = s.params["std"].asDoubleList();
        if (mean.empty() || sd.empty())
          return chainError(fused, "'" + s.name + "' lacks mean or std");
        for (double v : sd)
          if (!(v > 0) || !std::isfinite(v))
            return chainError(fused, "'" + s.name + "' has a bad std");
        // bindNormalize broadcasts a single value to the other list's size.
        size_t n = std::max(mean.size(), sd.size());
        st.meanCount = mean.size() == 1 ? (sd.size() > 1 ? n : 1) : mean.size();
        st.stdCount = sd.size() == 1 ? (mean.size() > 1 ? n : 1) : sd.size();
        anyRemap = true; // its constants depend on the position
      }
    } else {
      return chainError(fused,
                        "'" + op + "' is neither a remap nor a value op");
    }
    if (st.kind != Kind::Value)
      anyRemap = true;
    if (!c.steps_.empty() && (c.steps_.back().outRank != st.inRank ||
                              c.steps_.back().outElem != st.inElem))
      return chainError(fused, "its steps' types do not chain");
    c.steps_.push_back(std::move(st));
  }
  if (!anyRemap)
    return chainError(fused, "no step moves values or normalizes");
  for (const Step &st : c.steps_) {
    c.dimsAt_.push_back(c.count_);
    c.count_ += st.inRank;
    c.drawAt_.push_back(c.count_);
    if (st.kind == Kind::CenterCrop || st.kind == Kind::RandomCrop)
      c.count_ += 2;
    else if (st.kind == Kind::Flip)
      c.count_ += 1;
  }
  c.dimsAt_.push_back(c.count_);
  c.drawAt_.push_back(c.count_);
  c.count_ += c.steps_.back().outRank;
  return c;
}

size_t RemapChain::rankAt(size_t k) const {
  return k < steps_.size() ? steps_[k].inRank : steps_.back().outRank;
}

bool RemapChain::fill(const Tensor &in, uint64_t seed, uint64_t epoch,
                      uint64_t index, int64_t *params,
                      std::vector<int64_t> &outShape) const {
  if (!in.valid() || !in.isNumeric() || in.elem() != inElem() ||
      in.rank() != steps_.front().inRank)
    return false;
  std::vector<int64_t> cur = in.shape();
  auto nonEmpty = [&] {
    for (int64_t d : cur)
      if (d <= 0)
        return false;
    return true;
  };
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step &st = steps_[k];
    if (cur.size() != st.inRank || !nonEmpty())
      return false;
    for (size_t d = 0; d < cur.size(); ++d)
      params[dimsAt_[k] + d] = cur[d];
    int64_t *draw = params + drawAt_[k];
    switch (st.kind) {
    case Kind::CenterCrop:
      // kernels::centerCrop, after bindCenterCrop refused smaller images.
      if (cur[0] < st.height || cur[1] < st.width)
        return false;
      draw[0] = static_cast<int64_t>(
          std::nearbyint(static_cast<double>(cur[0] - st.height) / 2.0));
      draw[1] = static_cast<int64_t>(
          std::nearbyint(static_cast<double>(cur[1] - st.width) / 2.0));
      cur[0] = st.height;
      cur[1] = st.width;
      break;
    case Kind::RandomCrop: {
      // kernels::randomCrop without pad_if_needed: top, then left.
      int64_t ph = cur[0] + 2 * st.padding, pw = cur[1] + 2 * st.padding;
      if (ph < st.height || pw < st.width)
        return false;
      Rng rng(seed, epoch, index, st.stream);
      int64_t y = rng.uniformInt(0, ph - st.height + 1);
      int64_t x = rng.uniformInt(0, pw - st.width + 1);
      draw[0] = y - st.padding;
      draw[1] = x - st.padding;
      cur[0] = st.height;
      cur[1] = st.width;
      break;
    }
    case Kind::Flip:
      draw[0] = Rng(seed, epoch, index, st.stream).bernoulli(st.p) ? 1 : 0;
      break;
    case Kind::Transpose: {
      std::vector<int64_t> next(cur.size());
      for (size_t j = 0; j < cur.size(); ++j)
        next[j] = cur[size_t(st.perm[j])];
      cur = std::move(next);
      break;
    }
    case Kind::Pad:
      for (size_t d = 0; d < cur.size(); ++d)
        cur[d] += st.pads[d].first + st.pads[d].second;
      break;
    case Kind::Value:
      if (st.meanCount) {
        int64_t channels = cur.empty() ? 1 : cur.back();
        auto fits = [&](size_t n) { return n == 1 || int64_t(n) == channels; };
        if (!fits(st.meanCount) || !fits(st.stdCount))
          return false;
      }
      break;
    }
    if (cur.size() != st.outRank)
      return false;
  }
  if (!nonEmpty())
    return false;
  for (size_t d = 0; d < cur.size(); ++d)
    params[dimsAt_.back() + d] = cur[d];
  outShape = std::move(cur);
  return true;
}

} // namespace sluice::runtime
