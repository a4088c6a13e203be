//===- GrayscaleOp.cpp - The grayscale op: registry entry and kernel ------===//
//
// Everything about `grayscale` in one place: its parameters, type rule,
// traits and cost, and its kernel, bound once per step (OpDef::kernel) so
// the runtime needs no code of its own for it.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"
#include "OpHelpers.h"

#include "sluice/ops/kernels/Image.h"

namespace sluice {
namespace {

using namespace detail;

OpDef grayscale() {
  OpDef op = element("grayscale");
  op.summary = "Converts an RGB image to its luma, as 1 or 3 channels.";
  op.doc = "ITU-R 601-2 luma in PIL's fixed point, (19595 R + 38470 G + "
           "7471 B + 32768) >> 16, which is PIL's `convert(\"L\")` and so "
           "torchvision's `Grayscale` on PIL images (its tensor version "
           "rounds differently). `channels: 3` repeats the luma in three "
           "channels, as `Grayscale(num_output_channels=3)` does, so that "
           "the image keeps the shape a model expects.";
  op.example = "- grayscale: {field: image, channels: 3}";
  op.typeDoc = "`field` (`u8[H,W,3]`) becomes `u8[H,W,channels]`.";
  op.params = {
      fieldParam("The RGB image (u8, HxWx3)."),
      asParam(),
      param("channels", ParamKind::Int)
          .def(Value::integer(1))
          .atLeast(1)
          .atMost(3)
          .describe("1 (the luma alone) or 3 (the luma in each channel)."),
  };
  op.cost = {50, 1.0, 1.0 / 3};
  op.typeRule = [](TypeContext &ctx) {
    int64_t channels = ctx.param("channels").asInt();
    if (channels == 2) {
      ctx.error(ctx.param("channels"), "grayscale makes 1 or 3 channels, not 2",
                "write `channels: 1` or `channels: 3`");
      return ctx.input();
    }
    const FieldType &t = ctx.fieldType("field");
    const std::string &name = fieldName(ctx);
    if (t.elem != ElemType::U8 || t.shape.size() != 3 || t.shape[2] != 3) {
      ctx.error(ctx.param("field"),
                "grayscale needs an RGB image u8[H,W,3], but " +
                    describeField(name, t),
                "decode it with `channels: 3`, or cast it to u8 first");
      return ctx.input();
    }
    return withResult(
        ctx, FieldType(ElemType::U8, {t.shape[0], t.shape[1], channels}));
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    bool three = site.params["channels"].asInt() == 3;
    return TensorKernel(
        [three](const Tensor &image, const KernelCall &) -> Expected<Tensor> {
          Expected<Tensor> gray = kernels::rgbToGray(image);
          if (!gray || !three)
            return gray;
          return kernels::grayToRgb(*gray);
        });
  };
  return op;
}
static OpRegistration regGrayscale(grayscale());

} // namespace
} // namespace sluice
