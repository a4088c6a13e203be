//===- FuseCropEpilogue.cpp - Flip, normalize and CHW inside the crop -----===//
//
// After `decode_random_resized_crop` the ImageNet-style pipeline mirrors the
// 224x224 crop, normalizes it to f32 and transposes it to CHW: three more
// passes over the image, two of them over 600 KB of floats, and three more
// allocations per record. The resize already visits every output pixel
// once, so this pass folds those steps into the fused crop: the flip
// becomes mirrored horizontal taps, normalize and the transpose happen as
// the resize writes each output row. The pixels are the same u8 values
// before the same float expression, so the output bytes do not change.
//
// When the code generator is on (`leave-to-codegen`), an epilogue that
// sluice-fuse-remaps turns into one generated kernel is left unfolded: that
// kernel (flip, normalize and the CHW transpose as one index map, written
// into the batch row) costs a fraction of the hand-written row code, which
// stays the path of `--no-jit`.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Registry.h"

#include "StepParams.h"

#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-fuse-crop-epilogue"

namespace sluice::compiler {
#define GEN_PASS_DEF_FUSECROPEPILOGUE
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::resultField;
using sluice::compiler::detail::scheduleSplits;
using sluice::compiler::detail::stringParam;

namespace {

/// What a step can be in an epilogue, asked of its op's entry: a flip, a
/// scale-shift (normalize) or a permute (transpose); None otherwise.
enum class Part { None, Flip, ScaleShift, Permute };
Part partOf(ElementOp step) {
  const sluice::OpTraits *t = sluice::opTraits(step.getKind());
  if (!t)
    return Part::None;
  if (t->remapForm == sluice::RemapForm::Flip)
    return Part::Flip;
  if (t->valueForm == sluice::ValueForm::ScaleShift)
    return Part::ScaleShift;
  if (t->remapForm == sluice::RemapForm::Permute)
    return Part::Permute;
  return Part::None;
}

/// Number of values of a float/int list parameter, 0 if absent.
size_t listSize(DictionaryAttr params, StringRef name) {
  if (auto list = params.getAs<ArrayAttr>(name))
    return list.size();
  return 0;
}

/// The epilogue gathered so far on one fused crop.
struct Epilogue {
  ElementOp flip, normalize, transpose;
  SmallVector<ElementOp> steps; // in pipeline order
};

struct FuseCropEpiloguePass
    : sluice::compiler::impl::FuseCropEpilogueBase<FuseCropEpiloguePass> {
  using FuseCropEpilogueBase::FuseCropEpilogueBase;

  void runOnOperation() override {
    getOperation()->walk([&](PipelineOp pipeline) { run(pipeline); });
  }

  /// Why `step` cannot join the epilogue of `crop` (whose image field is
  /// `image`, with `channels` channels), or "".
  std::string blocker(PipelineOp pipeline, ElementOp crop, const Epilogue &epi,
                      ElementOp step, StringRef image, int64_t channels) {
    DictionaryAttr p = step.getParams();
    std::optional<StringRef> field = stringParam(p, "field");
    if (!field || *field != image)
      return "it does not work on the cropped field '" + image.str() + "'";
    if (std::optional<StringRef> out = resultField(p); !out || *out != image)
      return "it writes field '" + out.value_or("").str() +
             "' and leaves the cropped image in the record";
    if (epi.transpose)
      return "it comes after the transpose";
    // The step the folded one follows: the crop (the last step of the
    // fused "decode+crop") or the epilogue's last.
    StringRef prev = epi.steps.empty()
                         ? crop.getStepName().rsplit('+').second.empty()
                               ? crop.getStepName()
                               : crop.getStepName().rsplit('+').second
                         : ElementOp(epi.steps.back()).getStepName();
    if (std::string split =
            scheduleSplits(pipeline.getSchedule(), prev, step.getStepName());
        !split.empty())
      return split;
    Part part = partOf(step);
    if (part == Part::Flip) {
      if (epi.flip)
        return "the epilogue already has a flip";
      if (stringParam(p, "axis").value_or("width") != "width")
        return "it flips along the height";
      return "";
    }
    if (part == Part::ScaleShift) {
      if (epi.normalize)
        return "the epilogue already normalizes";
      for (StringRef list : {"mean", "std"}) {
        size_t n = listSize(p, list);
        if (n != 1 && n != static_cast<size_t>(channels))
          return "its " + list.str() + " has neither 1 nor " +
                 std::to_string(channels) + " values";
      }
      return "";
    }
    if (part == Part::Permute) {
      if (stringParam(p, "to") == std::optional<StringRef>("CHW"))
        return "";
      if (auto perm = p.getAs<ArrayAttr>("perm"); perm && perm.size() == 3) {
        SmallVector<int64_t> v;
        for (Attribute a : perm)
          if (auto i = dyn_cast<IntegerAttr>(a))
            v.push_back(i.getInt());
        if (v == SmallVector<int64_t>{2, 0, 1})
          return "";
      }
      return "it is not a transpose from HWC to CHW";
    }
    return "not a flip, normalize or transpose";
  }

  void run(PipelineOp pipeline) {
    SmallVector<ElementOp> crops;
    pipeline.walk([&](ElementOp op) {
      if (const sluice::OpTraits *t = sluice::opTraits(op.getKind());
          t && t->takesEpilogue)
        crops.push_back(op);
    });
    for (ElementOp crop : crops)
      gather(pipeline, crop);
  }

  /// Collects the flip/normalize/transpose steps that directly follow
  /// `crop`, then folds them in.
  void gather(PipelineOp pipeline, ElementOp crop) {
    DictionaryAttr cp = crop.getParams();
    std::optional<StringRef> image = resultField(cp);
    if (!image || cp.contains("mean") || cp.contains("flip_step") ||
        stringParam(cp, "layout") == std::optional<StringRef>("CHW"))
      return; // already has an epilogue (the pass ran before)
    int64_t channels = 3;
    if (auto c = cp.getAs<IntegerAttr>("channels"))
      channels = c.getInt();
    Epilogue epi;
    Value cur = crop.getOutput();
    while (cur.hasOneUse()) {
      auto step = dyn_cast<ElementOp>(*cur.getUsers().begin());
      if (!step)
        break;
      Part part = partOf(step);
      if (part == Part::None)
        break;
      std::string reason = blocker(pipeline, crop, epi, step, *image, channels);
      if (!reason.empty()) {
        LLVM_DEBUG(llvm::dbgs() << "not folding '" << step.getStepName()
                                << "': " << reason << "\n");
        if (emitRemarks)
          step.emitRemark()
              << "did not fold '" << step.getStepName() << "' into '"
              << crop.getStepName() << "': " << reason;
        break;
      }
      if (part == Part::Flip)
        epi.flip = step;
      else if (part == Part::ScaleShift)
        epi.normalize = step;
      else
        epi.transpose = step;
      epi.steps.push_back(step);
      cur = step.getOutput();
    }
    if (epi.steps.empty())
      return;
    if (leaveToCodegen && generated(epi)) {
      numLeft += epi.steps.size();
      LLVM_DEBUG(llvm::dbgs() << "left the epilogue of '" << crop.getStepName()
                              << "' to the generated kernel\n");
      if (emitRemarks)
        epi.steps.front().emitRemark()
            << "left " << quotedNames(epi) << " after '" << crop.getStepName()
            << (epi.steps.size() == 1
                    ? "' to a generated kernel (alone, it writes the batch "
                      "row; sluice-fuse-maps fuses it with value-wise steps "
                      "after it)"
                    : "' to one generated kernel (sluice-fuse-remaps), which "
                      "writes the batch row")
            << "; --no-jit folds them into the resize";
      return;
    }
    fold(crop, epi);
  }

  /// True if sluice-fuse-remaps makes the epilogue one generated kernel:
  /// two or more steps, one of them moving values, or a lone normalize
  /// (compiled as a chain of one).
  static bool generated(const Epilogue &epi) {
    if (epi.steps.size() == 1)
      return static_cast<bool>(epi.normalize);
    return epi.flip || epi.transpose;
  }

  static std::string quotedNames(const Epilogue &epi) {
    std::string names;
    for (ElementOp step : epi.steps)
      names += (names.empty() ? "'" : ", '") + step.getStepName().str() + "'";
    return names;
  }

  void fold(ElementOp crop, Epilogue epi) {
    MLIRContext *ctx = crop.getContext();
    NamedAttrList params(crop.getParams());
    std::string name = crop.getStepName().str();
    for (ElementOp step : epi.steps)
      name += "+" + step.getStepName().str();
    if (epi.flip) {
      params.set("flip_step", StringAttr::get(ctx, epi.flip.getStepName()));
      if (Attribute pAttr = epi.flip.getParams().get("p"))
        params.set("flip_p", pAttr);
    }
    if (epi.normalize) {
      params.set("mean", epi.normalize.getParams().get("mean"));
      params.set("std", epi.normalize.getParams().get("std"));
      if (Attribute dtype = epi.normalize.getParams().get("dtype"))
        params.set("dtype", dtype);
    }
    if (epi.transpose)
      params.set("layout", StringAttr::get(ctx, "CHW"));

    SmallVector<Location> locs{crop.getLoc()};
    for (ElementOp step : epi.steps)
      locs.push_back(step.getLoc());
    ElementOp last = epi.steps.back();
    OpBuilder builder(last);
    auto fused = builder.create<ElementOp>(
        FusedLoc::get(ctx, locs), last.getOutput().getType(), crop.getKind(),
        crop.getInput(), params.getDictionary(ctx), StringAttr::get(ctx, name));
    LLVM_DEBUG(llvm::dbgs() << "folded into '" << name << "'\n");
    if (emitRemarks) {
      epi.steps.front().emitRemark()
          << "folded " << quotedNames(epi) << " into '" << crop.getStepName()
          << "': done while the resize writes each row";
    }
    last.getOutput().replaceAllUsesWith(fused.getOutput());
    for (auto it = epi.steps.rbegin(); it != epi.steps.rend(); ++it)
      (*it)->erase();
    crop.erase();
    numFolded += epi.steps.size();
  }
};

} // namespace
