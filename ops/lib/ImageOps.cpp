//===- ImageOps.cpp - Registry entries of the image ops -------------------===//
//
// decode_image, resize and the crops and flips. Images are HxWxC (or HxW)
// in channels-last layout until a `transpose`; the rules check static sizes
// where they are known so that a crop larger than the image is a spec error,
// not a run-time one.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"
#include "OpHelpers.h"

namespace sluice {
namespace {

using namespace detail;

/// Checks that `field` is an HxW or HxWxC image; with `resampled`, that its
/// element type is one the resampling kernels take (u8 or f32).
bool requireImage(TypeContext &ctx, const std::string &op, bool resampled) {
  if (!requireNumeric(ctx, op, "an image (HxWxC or HxW)"))
    return false;
  const FieldType &t = ctx.fieldType("field");
  const std::string &name = fieldName(ctx);
  if (resampled && t.elem != ElemType::U8 && t.elem != ElemType::F32) {
    ctx.error(ctx.param("field"),
              op + " needs a u8 or f32 image, but " + describeField(name, t),
              "cast it first, e.g. `- cast: {field: " + name +
                  ", dtype: f32}`");
    return false;
  }
  return requireRank(ctx, op, 2, 3, "an image of rank 2 (HxW) or 3 (HxWxC)");
}

/// [h, w] from a size param (a single value means both).
std::pair<int64_t, int64_t> sizeHW(const Value &size) {
  std::vector<int64_t> v = size.asIntList();
  if (v.empty())
    return {1, 1};
  return {v[0], v.size() > 1 ? v[1] : v[0]};
}

FieldType withHW(FieldType t, int64_t h, int64_t w) {
  t.shape[0] = h;
  t.shape[1] = w;
  return t;
}

ParamSpec cropSize(std::string doc) {
  return param("size", ParamKind::IntList)
      .req()
      .length(2, 2)
      .scalar(2)
      .atLeast(1)
      .describe(std::move(doc));
}

/// Errors when a static image is smaller than the crop (with padding).
bool requireFits(TypeContext &ctx, int64_t h, int64_t w, int64_t padding) {
  const FieldType &t = ctx.fieldType("field");
  int64_t H = t.shape[0], W = t.shape[1];
  bool tooTall = H >= 0 && h > H + 2 * padding;
  bool tooWide = W >= 0 && w > W + 2 * padding;
  if (!tooTall && !tooWide)
    return true;
  std::string image = padding > 0
                          ? "the padded image " +
                                dimsText({H < 0 ? H : H + 2 * padding,
                                          W < 0 ? W : W + 2 * padding}) +
                                " (padding " + std::to_string(padding) + ")"
                          : "the image " + dimsText({H, W});
  ctx.error(ctx.param("size"),
            "crop " + dimsText({h, w}) + " is larger than " + image,
            "resize it first, e.g. `- resize: {field: " + fieldName(ctx) +
                ", size: " + std::to_string(std::max(h, w)) + "}`");
  return false;
}

//===----------------------------------------------------------------------===//

OpDef decodeImage() {
  OpDef op = element("decode_image");
  op.summary = "Decodes JPEG or PNG bytes into an HxWxC u8 image.";
  op.doc = "The format is detected from the data, not the file name. "
           "JPEG goes through libjpeg-turbo, PNG through libpng (16-bit PNGs "
           "are scaled to 8 bits, alpha is dropped). `channels: 1` converts "
           "to grayscale, `channels: 3` to RGB. The size varies per image, "
           "so the result has `?` height and width: resize or crop before "
           "`batch`.\n\n"
           "`scale: auto` (fused with `random_resized_crop`) against the "
           "exact decode, measured by `bench/scale_psnr.py` (seed 42, "
           "`random_resized_crop` 224, antialias on, PSNR of the u8 crops): "
           "on 300 pictures of 900-1600 px cut from gnome-backgrounds "
           "(`bench/gen_photos.py --min-side 900 --max-side 1600 --images "
           "300 --name photos_large`), 266 crops (89 %) were decoded at a "
           "DCT scale, with PSNR mean 49.4 dB, median 49.6 dB, 5th "
           "percentile 39.2 dB, minimum 36.6 dB (46.2 dB over all pixels); "
           "on the 2,000 ImageNet-sized (300-600 px) benchmark pictures only "
           "50 crops (2.5 %) are 2x the output, PSNR mean 46.3 dB, minimum "
           "33.7 dB. It pays on pictures several times larger than the "
           "output and hardly changes ImageNet-sized ones.";
  op.example = "- decode_image: {field: data, as: image, channels: 3}";
  op.typeDoc = "`field` (bytes) becomes `u8[?,?,channels]`.";
  op.params = {
      fieldParam("The encoded image (bytes)."),
      asParam(),
      param("channels", ParamKind::Int)
          .def(Value::integer(3))
          .atLeast(1)
          .atMost(3)
          .describe("1 (grayscale) or 3 (RGB)."),
      enumParam("verify", {"window", "full"})
          .def(Value::string("window"))
          .describe(
              "When the compiler fuses this step with a following "
              "`random_resized_crop` (sluice-fuse-decode-crop), only the "
              "crop box of a JPEG is decoded. `window` stops decoding after "
              "the box's last row: a file without its end marker (cut "
              "short) is still an error, but damage below the box goes "
              "unnoticed. A JPEG whose restart markers tile each MCU row "
              "(from a camera, or `jpegtran -restart 1B`) has only the "
              "restart intervals around the box decoded, same pixels, so "
              "there damage beside or above the box goes unnoticed too "
              "(`SLUICE_NO_RESTART_WINDOW=1` turns that off). `full` "
              "entropy-decodes the rest too, so damaged data anywhere is the "
              "error a full decode gives. Without fusion every image is "
              "decoded in full."),
      enumParam("scale", {"exact", "auto"})
          .def(Value::string("exact"))
          .describe(
              "`auto`: when this step is fused with a following "
              "`random_resized_crop` (sluice-fuse-decode-crop) and the crop "
              "box of a JPEG is at least 2x the output size on both sides, "
              "decode at 1/2, 1/4 or 1/8 size in the DCT domain (the largest "
              "factor that keeps the box at least the output size, as PIL's "
              "`draft` does), so pixels that the resize would average away "
              "are never made; the box is mapped onto the smaller image. "
              "Faster, with pixels close to but not equal to `exact`'s (see "
              "the PSNR figures above). `exact` (the "
              "default) decodes every pixel. PNGs, unfused decodes and "
              "boxes smaller than 2x the output are always exact. "
              "libjpeg-turbo's other scales (3/8, 5/8, 6/8, 7/8) run C "
              "IDCTs and measured slower on real photos than the exact "
              "window plus its larger resize, so they are not used; "
              "`SLUICE_DCT_SCALES=1,2,3,4,5,6,7` allows them (to measure)."),
  };
  op.fuse = FuseKind::None;
  op.cost = {2000, 8, 8};
  op.typeRule = [](TypeContext &ctx) {
    const FieldType &t = ctx.fieldType("field");
    const std::string &name = fieldName(ctx);
    if (t.elem != ElemType::Bytes) {
      std::string hint;
      if (t.elem == ElemType::String)
        hint = "the encoded image is in a bytes field: image_folder and "
               "files call it `data`";
      else if (t.elem == ElemType::U8 && t.rank() >= 2)
        hint = "this field is already decoded; drop this step";
      ctx.error(ctx.param("field"),
                "decode_image needs encoded image bytes, but " +
                    describeField(name, t),
                hint);
      return ctx.input();
    }
    if (!t.isScalar()) {
      ctx.error(ctx.param("field"),
                "decode_image decodes one image per record, but " +
                    describeField(name, t),
                "decode before `batch`");
      return ctx.input();
    }
    const Value &ch = ctx.param("channels");
    int64_t c = intOr(ch, 3);
    if (c != 1 && c != 3) {
      ctx.error(ch, "channels must be 1 (grayscale) or 3 (RGB), got " +
                        std::to_string(c));
      return ctx.input();
    }
    return withResult(ctx, FieldType(ElemType::U8, {kDynamic, kDynamic, c}));
  };
  return op;
}
static OpRegistration regDecodeImage(decodeImage());

OpDef resize() {
  OpDef op = element("resize");
  op.summary = "Resizes an image to a fixed size or a shorter side.";
  op.doc = "`size: [h, w]` resizes to exactly h x w. `size: s` scales the "
           "image so that its shorter side is s, keeping the aspect ratio "
           "(the usual first step of evaluation pipelines, before "
           "`center_crop`), so the result size still varies per image.";
  op.example = "- resize: {field: image, size: 256}";
  op.typeDoc = "`field` keeps its element type; with `[h, w]` its shape "
               "becomes `[h,w,C]` (or `[h,w]`), with a single size `[?,?,C]`.";
  op.params = {
      fieldParam("The image (u8 or f32, HxWxC or HxW)."),
      asParam(),
      param("size", ParamKind::IntList)
          .req()
          .length(1, 2)
          .scalar()
          .atLeast(1)
          .describe("[height, width], or one number: the length of the "
                    "shorter side."),
      interpolationParam(),
      antialiasParam(),
  };
  op.fuse = FuseKind::None;
  op.cost = {500, 1, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireImage(ctx, "resize", /*resampled=*/true))
      return ctx.input();
    FieldType t = ctx.fieldType("field");
    std::vector<int64_t> size = ctx.param("size").asIntList();
    if (size.size() == 2)
      return withResult(ctx, withHW(t, size[0], size[1]));
    return withResult(ctx, withHW(t, kDynamic, kDynamic));
  };
  return op;
}
static OpRegistration regResize(resize());

OpDef centerCrop() {
  OpDef op = element("center_crop");
  op.summary = "Crops the center h x w of an image.";
  op.doc = "When the image is smaller than the crop (which can only be "
           "known at run time for images of varying size), the record "
           "fails with a data error; resize first to be safe.";
  op.example = "- center_crop: {field: image, size: 224}";
  op.typeDoc = "`field` becomes `[h,w,C]` (or `[h,w]`), same element type.";
  op.params = {
      fieldParam("The image (HxWxC or HxW)."),
      asParam(),
      cropSize("[height, width] of the crop; one number for a square."),
  };
  op.fuse = FuseKind::IndexRemap;
  op.traits.indexRemap = true;
  op.cost = {100, 0.1, 0.5};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireImage(ctx, "center_crop", /*resampled=*/false))
      return ctx.input();
    auto [h, w] = sizeHW(ctx.param("size"));
    if (!requireFits(ctx, h, w, 0))
      return ctx.input();
    return withResult(ctx, withHW(ctx.fieldType("field"), h, w));
  };
  return op;
}
static OpRegistration regCenterCrop(centerCrop());

OpDef randomCrop() {
  OpDef op = element("random_crop");
  op.summary = "Crops h x w at a random position, after optional zero "
               "padding.";
  op.doc = "The classic CIFAR augmentation: pad by `padding` pixels of zeros "
           "on every side, then crop at a uniformly random offset.";
  op.example = "- random_crop: {field: image, size: 32, padding: 4}";
  op.typeDoc = "`field` becomes `[h,w,C]` (or `[h,w]`), same element type.";
  op.params = {
      fieldParam("The image (HxWxC or HxW)."),
      asParam(),
      cropSize("[height, width] of the crop; one number for a square."),
      param("padding", ParamKind::Int)
          .def(Value::integer(0))
          .atLeast(0)
          .describe("Zero pixels added on each side before cropping."),
  };
  op.fuse = FuseKind::IndexRemap;
  op.traits.indexRemap = true;
  op.stochastic = true;
  op.cost = {100, 0.1, 0.5};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireImage(ctx, "random_crop", /*resampled=*/false))
      return ctx.input();
    auto [h, w] = sizeHW(ctx.param("size"));
    if (!requireFits(ctx, h, w, intOr(ctx.param("padding"), 0)))
      return ctx.input();
    return withResult(ctx, withHW(ctx.fieldType("field"), h, w));
  };
  return op;
}
static OpRegistration regRandomCrop(randomCrop());

OpDef randomResizedCrop() {
  OpDef op = element("random_resized_crop");
  op.summary = "Crops a random area and aspect ratio, resized to h x w "
               "(Inception-style).";
  op.doc = "Picks a crop whose area is a uniformly random fraction "
           "(`scale`) of the image and whose aspect ratio w/h is "
           "log-uniformly random in `ratio`, retrying up to 10 times before "
           "falling back to a center crop, then resizes it to `size`. The "
           "standard ImageNet training augmentation.";
  op.example = "- random_resized_crop: {field: image, size: [224, 224], "
               "scale: [0.08, 1.0], ratio: [0.75, 1.3333]}";
  op.typeDoc = "`field` becomes `[h,w,C]` (or `[h,w]`), same element type.";
  op.params = {
      fieldParam("The image (u8 or f32, HxWxC or HxW)."),
      asParam(),
      cropSize("[height, width] of the output; one number for a square."),
      param("scale", ParamKind::FloatList)
          .def(Value::list({Value::real(0.08), Value::real(1.0)}))
          .length(2, 2)
          .above(0)
          .atMost(1)
          .describe("[min, max] fraction of the image area to crop."),
      param("ratio", ParamKind::FloatList)
          .def(Value::list({Value::real(0.75), Value::real(1.3333333)}))
          .length(2, 2)
          .above(0)
          .describe("[min, max] aspect ratio (width / height) of the crop."),
      interpolationParam(),
      antialiasParam(),
  };
  op.fuse = FuseKind::None;
  op.stochastic = true;
  op.cost = {500, 2, 0.8};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireImage(ctx, "random_resized_crop", /*resampled=*/true))
      return ctx.input();
    bool ok = requireOrdered(ctx, ctx.param("scale"),
                             ctx.param("scale").asDoubleList(), false, "scale");
    ok &= requireOrdered(ctx, ctx.param("ratio"),
                         ctx.param("ratio").asDoubleList(), false, "ratio");
    if (!ok)
      return ctx.input();
    auto [h, w] = sizeHW(ctx.param("size"));
    return withResult(ctx, withHW(ctx.fieldType("field"), h, w));
  };
  return op;
}
static OpRegistration regRandomResizedCrop(randomResizedCrop());

/// decode_image + random_resized_crop in one step, made by the compiler's
/// sluice-fuse-decode-crop pass: the JPEG header gives the size the box is
/// drawn from, then only the box is decoded. `field`/`as`/`channels` are the
/// decode's, the rest the crop's; `crop_step` names the crop step whose
/// random stream the box is drawn from, so the pixels are the unfused ones.
OpDef decodeRandomResizedCrop() {
  OpDef decode = decodeImage();
  OpDef crop = randomResizedCrop();
  OpDef op = element("decode_random_resized_crop");
  op.internal = true;
  op.summary = "`decode_image` followed by `random_resized_crop` of the "
               "decoded image.";
  op.doc = "Decodes only the crop box of a JPEG (PNG: the whole image), "
           "with the pixels and random draws of the two steps it replaces. "
           "sluice-fuse-crop-epilogue can fold a following `random_flip` "
           "(width), `normalize` and `transpose` to CHW into it, which are "
           "then done while the resize writes its output.";
  op.typeDoc = "`field` (bytes) becomes `u8[h,w,channels]`; with `mean` "
               "`dtype` (f32 unless given), with `layout: CHW` "
               "`[channels,h,w]`.";
  // The decode's `scale` is `decode_scale` here (the crop has a `scale`).
  for (ParamSpec p : decode.params) {
    if (p.name == "scale")
      p.name = "decode_scale";
    op.params.push_back(p);
  }
  for (const ParamSpec &p : crop.params)
    if (p.name != "field" && p.name != "as")
      op.params.push_back(p);
  op.params.push_back(param("crop_step", ParamKind::String)
                          .req()
                          .describe("The name of the fused crop step, whose "
                                    "random stream draws the box."));
  // The epilogue folded in by sluice-fuse-crop-epilogue.
  op.params.push_back(param("flip_step", ParamKind::String)
                          .describe("The name of a fused `random_flip` "
                                    "(axis width), whose random stream "
                                    "decides the flip."));
  op.params.push_back(param("flip_p", ParamKind::Float)
                          .def(Value::real(0.5))
                          .atLeast(0)
                          .atMost(1)
                          .describe("The fused flip's probability."));
  op.params.push_back(param("mean", ParamKind::FloatList)
                          .describe("A fused `normalize`'s mean."));
  op.params.push_back(param("std", ParamKind::FloatList)
                          .describe("A fused `normalize`'s std."));
  op.params.push_back(enumParam("dtype", {"f32", "f16", "bf16"})
                          .def(Value::string("f32"))
                          .describe("A fused `normalize`'s dtype."));
  op.params.push_back(enumParam("layout", {"HWC", "CHW"})
                          .def(Value::string("HWC"))
                          .describe("CHW: a fused `transpose` to CHW."));
  op.fuse = FuseKind::None;
  op.stochastic = true;
  op.cost = {decode.cost.nsPerElement + crop.cost.nsPerElement,
             decode.cost.nsPerByte, 0};
  op.typeRule = [](TypeContext &ctx) {
    const FieldType &t = ctx.fieldType("field");
    if (t.elem != ElemType::Bytes || !t.isScalar()) {
      ctx.error(ctx.param("field"),
                "decode_random_resized_crop needs one encoded image (bytes) "
                "per record, but " +
                    describeField(fieldName(ctx), t));
      return ctx.input();
    }
    auto [h, w] = sizeHW(ctx.param("size"));
    int64_t c = intOr(ctx.param("channels"), 3);
    ElemType elem = ElemType::U8;
    if (ctx.param("mean").isList()) {
      const Value &dt = ctx.param("dtype");
      elem = dt.isString()
                 ? parseElemType(dt.asString()).value_or(ElemType::F32)
                 : ElemType::F32;
    }
    const Value &layout = ctx.param("layout");
    if (layout.isString() && layout.asString() == "CHW")
      return withResult(ctx, FieldType(elem, {c, h, w}));
    return withResult(ctx, FieldType(elem, {h, w, c}));
  };
  return op;
}
static OpRegistration regDecodeRandomResizedCrop(decodeRandomResizedCrop());

OpDef randomFlip() {
  OpDef op = element("random_flip");
  op.summary = "Mirrors an image with probability p.";
  op.doc = "`axis: width` mirrors left-right (dim 1 of an HxWxC or HxW "
           "image), `axis: height` upside-down (dim 0). Flip before "
           "`transpose: {to: CHW}`, which moves those dims.";
  op.example = "- random_flip: {field: image, axis: width, p: 0.5}";
  op.typeDoc = "`field` keeps its type.";
  op.params = {
      fieldParam("The image (rank 2 or more)."),
      asParam(),
      enumParam("axis", {"width", "height"})
          .def(Value::string("width"))
          .describe("`width` flips left-right, `height` top-bottom."),
      param("p", ParamKind::Float)
          .def(Value::real(0.5))
          .atLeast(0)
          .atMost(1)
          .describe("Probability of flipping a record."),
  };
  op.fuse = FuseKind::IndexRemap;
  op.traits.indexRemap = true;
  op.stochastic = true;
  op.cost = {50, 0.2, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "random_flip", "an image (HxWxC or HxW)") ||
        !requireRank(ctx, "random_flip", 2, std::numeric_limits<size_t>::max(),
                     "an image of rank 2 or more"))
      return ctx.input();
    return withResult(ctx, ctx.fieldType("field"));
  };
  return op;
}
static OpRegistration regRandomFlip(randomFlip());

} // namespace
} // namespace sluice
