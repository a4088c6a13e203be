//===- FuseDecodeCrop.cpp - Decode only the crop box of an image ----------===//
//
// `decode_image` followed by `random_resized_crop` of the decoded image
// decodes every pixel and then keeps a box of, on average, about half the
// image. The fused op reads the JPEG header first, draws the box from the
// crop step's random stream exactly as the crop would, and decodes only the
// box (tf.data's decode_and_crop_jpeg), with the same pixels. The fused op
// has both steps' locations, the decode's first.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Registry.h"

#include "StepParams.h"

#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-fuse-decode-crop"

namespace sluice::compiler {
#define GEN_PASS_DEF_FUSEDECODECROP
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::resultField;
using sluice::compiler::detail::scheduleSplits;

namespace {

struct FuseDecodeCropPass
    : sluice::compiler::impl::FuseDecodeCropBase<FuseDecodeCropPass> {
  using FuseDecodeCropBase::FuseDecodeCropBase;

  void runOnOperation() override {
    getOperation()->walk([&](PipelineOp pipeline) { run(pipeline); });
  }

  /// Why `decode` + `crop` cannot be fused, or "".
  std::string blocker(PipelineOp pipeline, ElementOp decode, ElementOp crop) {
    if (!decode.getOutput().hasOneUse())
      return "the decoded stream has other consumers";
    DictionaryAttr dp = decode.getParams(), cp = crop.getParams();
    std::optional<StringRef> decoded = resultField(dp);
    auto cropField = cp.getAs<StringAttr>("field");
    if (!decoded || !cropField || cropField.getValue() != *decoded)
      return "the crop does not read the decoded field";
    // With its own `as`, the crop leaves the uncropped image in the record
    // for later steps; the fused op never makes it.
    if (std::optional<StringRef> cropped = resultField(cp);
        !cropped || *cropped != *decoded)
      return "the crop writes field '" + cropped.value_or("").str() +
             "' and leaves the full decoded image '" + decoded->str() +
             "' in the record";
    // A fixed schedule's knobs move onto the fused stage when they agree
    // (PlanGen applies each part's); a prefetch or cache between the two, or
    // two parallelisms, keep them apart.
    return scheduleSplits(pipeline.getSchedule(), decode.getStepName(),
                          crop.getStepName());
  }

  void run(PipelineOp pipeline) {
    Block &body = pipeline.getBody().front();
    for (Operation &op :
         llvm::make_early_inc_range(body.without_terminator())) {
      // Asked of the ops' entries: a step that has a fused form with the
      // decoder right before it.
      auto crop = dyn_cast<ElementOp>(op);
      const sluice::OpDef *cropDef =
          crop ? sluice::Registry::instance().find(crop.getKind()) : nullptr;
      if (!cropDef || !cropDef->traits.fusedWithDecoder)
        continue;
      auto decode = crop.getInput().getDefiningOp<ElementOp>();
      const sluice::OpDef *decodeDef =
          decode ? sluice::Registry::instance().find(decode.getKind())
                 : nullptr;
      if (!decodeDef || !decodeDef->traits.decoder)
        continue;
      std::string reason = blocker(pipeline, decode, crop);
      if (!reason.empty()) {
        LLVM_DEBUG(llvm::dbgs()
                   << "not fusing '" << decode.getStepName() << "' + '"
                   << crop.getStepName() << "': " << reason << "\n");
        if (emitRemarks)
          crop.emitRemark()
              << "did not fuse '" << decode.getStepName() << "' into '"
              << crop.getStepName() << "': " << reason;
        continue;
      }
      fuse(decode, crop);
    }
  }

  void fuse(ElementOp decode, ElementOp crop) {
    MLIRContext *ctx = crop.getContext();
    NamedAttrList params;
    // random_resized_crop has a `scale` of its own (the area range): the
    // decode's `scale` (exact | auto) becomes `decode_scale`.
    for (NamedAttribute p : decode.getParams())
      params.set(p.getName() == "scale" ? StringAttr::get(ctx, "decode_scale")
                                        : p.getName(),
                 p.getValue());
    for (NamedAttribute p : crop.getParams())
      if (p.getName() != "field" && p.getName() != "as")
        params.set(p.getName(), p.getValue());
    std::string cropName = crop.getStepName().str();
    params.set("crop_step", StringAttr::get(ctx, cropName));
    // '+' cannot occur in a step name, so the fused name is unique.
    std::string name = decode.getStepName().str() + "+" + cropName;

    // Both lines: errors of the fused step (nearly all of them the
    // decode's) point at the first, the decode.
    Location loc = FusedLoc::get(ctx, {decode.getLoc(), crop.getLoc()});
    OpBuilder builder(crop);
    auto fused =
        builder.create<ElementOp>(loc, crop.getOutput().getType(),
                                  sluice::Registry::instance()
                                      .find(crop.getKind())
                                      ->traits.fusedWithDecoder,
                                  decode.getInput(), params.getDictionary(ctx),
                                  StringAttr::get(ctx, name));
    LLVM_DEBUG(llvm::dbgs() << "fused '" << decode.getStepName() << "' + '"
                            << cropName << "' into '" << name << "'\n");
    if (emitRemarks)
      crop.emitRemark() << "fused '" << decode.getStepName() << "' into '"
                        << cropName
                        << "': only the crop box of each JPEG is decoded";
    crop.getOutput().replaceAllUsesWith(fused.getOutput());
    crop.erase();
    decode.erase();
    ++numFused;
  }
};

} // namespace
