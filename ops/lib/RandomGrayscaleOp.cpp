//===- RandomGrayscaleOp.cpp - The random_grayscale op --------------------===//
//
// Everything about `random_grayscale` in one place: its parameters, type
// rule, traits and cost, and its kernel, bound once per step
// (OpDef::kernel). The kernel draws from the step's random stream through
// the KernelCall, so the runtime needs no code of its own for a random op
// either.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"
#include "OpHelpers.h"

#include "sluice/ops/kernels/Image.h"

namespace sluice {
namespace {

using namespace detail;

/// random_grayscale's parameters, read once per step.
struct RandomGrayscaleParams {
  double p = 0.1;
  uint64_t stream = 0;
};

OpDef randomGrayscale() {
  OpDef op = element("random_grayscale");
  op.summary = "Turns an RGB image gray with probability p, keeping 3 "
               "channels.";
  op.doc = "With probability `p` the image becomes its luma repeated in "
           "three channels (the luma of `grayscale`: PIL's `convert(\"L\")`), "
           "otherwise it passes unchanged; torchvision's `RandomGrayscale` "
           "on PIL images. The draw is keyed by the record's source "
           "position, like every random step.";
  op.example = "- random_grayscale: {field: image, p: 0.1}";
  op.typeDoc = "`field` (`u8[H,W,3]`) keeps its type.";
  op.params = {
      fieldParam("The RGB image (u8, HxWx3)."),
      asParam(),
      param("p", ParamKind::Float)
          .def(Value::real(0.1))
          .atLeast(0)
          .atMost(1)
          .describe("Probability of turning a record gray."),
  };
  op.stochastic = true;
  op.cost = {50, 0.5, 1};
  op.typeRule = [](TypeContext &ctx) {
    const FieldType &t = ctx.fieldType("field");
    if (t.elem != ElemType::U8 || t.shape.size() != 3 || t.shape[2] != 3) {
      ctx.error(ctx.param("field"),
                "random_grayscale needs an RGB image u8[H,W,3], but " +
                    describeField(fieldName(ctx), t),
                "decode it with `channels: 3`, or cast it to u8 first");
      return ctx.input();
    }
    return withResult(ctx, t);
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    RandomGrayscaleParams p;
    p.p = site.params["p"].asDouble();
    p.stream = site.stream;
    return TensorKernel(
        [p](const Tensor &image, const KernelCall &call) -> Expected<Tensor> {
          if (!call.rng(p.stream).bernoulli(p.p))
            return image;
          Expected<Tensor> gray = kernels::rgbToGray(image);
          if (!gray)
            return gray;
          return kernels::grayToRgb(*gray);
        });
  };
  return op;
}
static OpRegistration regRandomGrayscale(randomGrayscale());

} // namespace
} // namespace sluice
