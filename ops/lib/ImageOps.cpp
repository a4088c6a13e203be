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

#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/Image.h"

#include <memory>

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

/// `interpolation` as the kernels name it.
kernels::Interpolation interpolation(const Value &v) {
  std::string s = v.isString() ? v.asString() : "bilinear";
  if (s == "nearest")
    return kernels::Interpolation::Nearest;
  if (s == "area")
    return kernels::Interpolation::Area;
  return kernels::Interpolation::Bilinear;
}

/// `antialias` (true unless the step says false).
bool antialias(const Value &params) {
  const Value &v = params["antialias"];
  return !v.isBool() || v.asBool();
}

std::string dims(const Tensor &t) {
  std::string s;
  for (size_t i = 0; i < t.rank(); ++i)
    s += (i ? "x" : "") + std::to_string(t.dim(i));
  return s.empty() ? "scalar" : s;
}

Status notEncoded(const Tensor &t) {
  return Status::error("expected one encoded image (bytes), got " +
                       t.type().str());
}

//===----------------------------------------------------------------------===//

OpDef decodeImage() {
  OpDef op = element("decode_image");
  op.traits.decoder = true;
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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    int channels = static_cast<int>(intOr(site.params["channels"], 3));
    return TensorKernel(
        [channels](const Tensor &t, const KernelCall &) -> Expected<Tensor> {
          if (t.isNumeric() || t.rank() != 0)
            return notEncoded(t);
          return kernels::decodeImage(t.str(), channels);
        });
  };
  return op;
}
static OpRegistration regDecodeImage(decodeImage());

/// resize's parameters, read once per step.
struct ResizeParams {
  std::vector<int64_t> size; ///< [h, w], or [shorter side]
  kernels::Interpolation interpolation = kernels::Interpolation::Bilinear;
  bool antialias = true;

  /// The output size of an H x W image.
  Expected<std::pair<int64_t, int64_t>> outputHW(const Tensor &t) const {
    if (size.size() == 2)
      return std::pair<int64_t, int64_t>{size[0], size[1]};
    // torchvision: the shorter side becomes `size`, the longer one
    // int(size * long / short) (truncated).
    int64_t H = t.dim(0), W = t.dim(1), s0 = size[0];
    if (H <= 0 || W <= 0)
      return Status::error("cannot resize an empty image (" + dims(t) + ")");
    auto scaled = [s0](int64_t longer, int64_t shorter) {
      return static_cast<int64_t>(static_cast<double>(s0) *
                                  static_cast<double>(longer) /
                                  static_cast<double>(shorter));
    };
    if (H <= W)
      return std::pair<int64_t, int64_t>{s0, scaled(W, H)};
    return std::pair<int64_t, int64_t>{scaled(H, W), s0};
  }
};

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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    ResizeParams p;
    p.size = site.params["size"].asIntList();
    if (p.size.empty() || p.size.size() > 2)
      return Status::error("size needs one or two numbers");
    p.interpolation = interpolation(site.params["interpolation"]);
    p.antialias = antialias(site.params);
    return TensorKernel(
        [p](const Tensor &t, const KernelCall &) -> Expected<Tensor> {
          if (t.rank() < 2)
            return Status::error("expected an image, got " + t.type().str());
          Expected<std::pair<int64_t, int64_t>> hw = p.outputHW(t);
          if (!hw)
            return hw.status();
          return kernels::resize(t, hw->first, hw->second, p.interpolation,
                                 p.antialias);
        });
  };
  return op;
}
static OpRegistration regResize(resize());

OpDef centerCrop() {
  OpDef op = element("center_crop");
  op.traits.remapForm = RemapForm::CenterCrop;
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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    auto [h, w] = sizeHW(site.params["size"]);
    return TensorKernel([h = h, w = w](const Tensor &t,
                                       const KernelCall &) -> Expected<Tensor> {
      if (t.rank() < 2)
        return Status::error("expected an image, got " + t.type().str());
      // The entry documents a data error rather than silent zero padding
      // for images smaller than the crop.
      if (t.dim(0) < h || t.dim(1) < w)
        return Status::error("image " + std::to_string(t.dim(0)) + "x" +
                             std::to_string(t.dim(1)) +
                             " is smaller than the crop " + std::to_string(h) +
                             "x" + std::to_string(w) +
                             "; resize it first (e.g. `resize: {size: " +
                             std::to_string(std::max(h, w)) + "}`)");
      return kernels::centerCrop(t, h, w);
    });
  };
  return op;
}
static OpRegistration regCenterCrop(centerCrop());

/// random_crop's parameters, read once per step.
struct RandomCropParams {
  int64_t height = 1, width = 1, padding = 0;
  uint64_t stream = 0;
};

OpDef randomCrop() {
  OpDef op = element("random_crop");
  op.traits.remapForm = RemapForm::RandomCrop;
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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    RandomCropParams p;
    std::tie(p.height, p.width) = sizeHW(site.params["size"]);
    p.padding = intOr(site.params["padding"], 0);
    p.stream = site.stream;
    return TensorKernel([p](const Tensor &t,
                            const KernelCall &call) -> Expected<Tensor> {
      Rng rng = call.rng(p.stream);
      return kernels::randomCrop(t, p.height, p.width, p.padding, false, rng);
    });
  };
  return op;
}
static OpRegistration regRandomCrop(randomCrop());

/// The box and resize settings of random_resized_crop (also carried by
/// the fused decode_random_resized_crop).
kernels::RandomResizedCropParams resizedCropParams(const Value &params) {
  kernels::RandomResizedCropParams p;
  auto [h, w] = sizeHW(params["size"]);
  p.height = h;
  p.width = w;
  std::vector<double> scale = params["scale"].asDoubleList();
  std::vector<double> ratio = params["ratio"].asDoubleList();
  if (scale.size() == 2) {
    p.scaleLo = scale[0];
    p.scaleHi = scale[1];
  }
  if (ratio.size() == 2) {
    p.ratioLo = ratio[0];
    p.ratioHi = ratio[1];
  }
  p.interpolation = interpolation(params["interpolation"]);
  p.antialias = antialias(params);
  return p;
}

OpDef randomResizedCrop() {
  OpDef op = element("random_resized_crop");
  op.traits.fusedWithDecoder = "decode_random_resized_crop";
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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    kernels::RandomResizedCropParams p = resizedCropParams(site.params);
    uint64_t stream = site.stream;
    return TensorKernel(
        [p, stream](const Tensor &t,
                    const KernelCall &call) -> Expected<Tensor> {
          Rng rng = call.rng(stream);
          return kernels::randomResizedCrop(t, p, rng);
        });
  };
  return op;
}
static OpRegistration regRandomResizedCrop(randomResizedCrop());

/// decode_random_resized_crop's parameters, read once per step: the box is
/// drawn from the random stream of the crop step it replaced (`crop_step`),
/// so records see the draws and pixels of the unfused steps.
/// sluice-fuse-crop-epilogue may have folded a flip (drawn from the stream
/// of `flip_step`), a normalize (`mean`, `std`) and a transpose to CHW
/// (`layout`) into it.
struct DecodeCropParams {
  int channels = 3;
  kernels::RandomResizedCropParams crop;
  uint64_t cropStream = 0;
  kernels::DecodeOptions decode;
  /// The epilogue, and a second, flipping copy picked for the records the
  /// flip draws, so nothing is copied per record; both null without one.
  std::shared_ptr<const kernels::ImageEpilogue> epilogue, flipped;
  std::optional<uint64_t> flipStream;
  double flipP = 0.5;

  /// `out`: the element type of the step's result (a fused normalize's
  /// dtype: f32, f16 or bf16).
  static Expected<DecodeCropParams> parse(const Value &params,
                                          const FieldType &out) {
    DecodeCropParams d;
    const Value &cropStep = params["crop_step"];
    if (!cropStep.isString())
      return Status::error("parameter 'crop_step' is missing");
    d.cropStream = stepStream("random_resized_crop", cropStep.asString());
    d.channels = static_cast<int>(intOr(params["channels"], 3));
    d.crop = resizedCropParams(params);
    d.decode.verifyFull =
        params["verify"].isString() && params["verify"].asString() == "full";
    d.decode.allowDctScaling = params["decode_scale"].isString() &&
                               params["decode_scale"].asString() == "auto";
    auto epi = std::make_shared<kernels::ImageEpilogue>();
    bool hasEpilogue = false;
    d.flipP = params["flip_p"].isNumber() ? params["flip_p"].asDouble() : 0.5;
    if (params["flip_step"].isString()) {
      d.flipStream = stepStream("random_flip", params["flip_step"].asString());
      hasEpilogue = true;
    }
    if (params["mean"].isList() || params["std"].isList()) {
      std::vector<double> mean = params["mean"].asDoubleList();
      std::vector<double> sd = params["std"].asDoubleList();
      auto fits = [&](const std::vector<double> &v) {
        return v.size() == 1 || v.size() == static_cast<size_t>(d.channels);
      };
      if (!fits(mean) || !fits(sd))
        return Status::error("mean and std need 1 or " +
                             std::to_string(d.channels) + " values");
      for (double v : sd)
        if (!(v > 0))
          return Status::error("std values must be > 0");
      epi->normalize = true;
      epi->normalizeTo = out.elem;
      if (!kernels::isNormalizeOutput(epi->normalizeTo))
        return Status::error("a fused normalize writes f32, f16 or bf16, not " +
                             out.str());
      kernels::normalizeTables(mean, sd, d.channels, epi->mean, epi->scale);
      hasEpilogue = true;
    }
    if (params["layout"].isString() && params["layout"].asString() == "CHW") {
      epi->chw = true;
      hasEpilogue = true;
    }
    if (hasEpilogue)
      d.epilogue = epi;
    if (d.epilogue && d.flipStream) {
      auto f = std::make_shared<kernels::ImageEpilogue>(*epi);
      f->flip = true;
      d.flipped = std::move(f);
    }
    return d;
  }
};

/// decode_image + random_resized_crop in one step, made by the compiler's
/// sluice-fuse-decode-crop pass: the JPEG header gives the size the box is
/// drawn from, then only the box is decoded. `field`/`as`/`channels` are the
/// decode's, the rest the crop's; `crop_step` names the crop step whose
/// random stream the box is drawn from, so the pixels are the unfused ones.
OpDef decodeRandomResizedCrop() {
  OpDef decode = decodeImage();
  OpDef crop = randomResizedCrop();
  OpDef op = element("decode_random_resized_crop");
  op.traits.takesEpilogue = true;
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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    Expected<DecodeCropParams> parsed =
        DecodeCropParams::parse(site.params, site.output);
    if (!parsed)
      return parsed.status();
    auto p = std::make_shared<const DecodeCropParams>(parsed.take());
    return TensorKernel(
        [p](const Tensor &t, const KernelCall &call) -> Expected<Tensor> {
          if (t.isNumeric() || t.rank() != 0)
            return notEncoded(t);
          Rng rng = call.rng(p->cropStream);
          kernels::DecodeOptions o = p->decode;
          o.epilogue = p->epilogue.get();
          if (p->flipStream && call.rng(*p->flipStream).bernoulli(p->flipP))
            o.epilogue = p->flipped.get();
          return kernels::decodeRandomResizedCrop(t.str(), p->channels, p->crop,
                                                  rng, o);
        });
  };
  return op;
}
static OpRegistration regDecodeRandomResizedCrop(decodeRandomResizedCrop());

OpDef randomFlip() {
  OpDef op = element("random_flip");
  op.traits.remapForm = RemapForm::Flip;
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
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    const Value &axisV = site.params["axis"];
    kernels::FlipAxis axis = axisV.isString() && axisV.asString() == "height"
                                 ? kernels::FlipAxis::Height
                                 : kernels::FlipAxis::Width;
    double p = site.params["p"].isNumber() ? site.params["p"].asDouble() : 0.5;
    uint64_t stream = site.stream;
    return TensorKernel(
        [axis, p, stream](const Tensor &t,
                          const KernelCall &call) -> Expected<Tensor> {
          Rng rng = call.rng(stream);
          return kernels::randomFlip(t, axis, p, rng);
        });
  };
  return op;
}
static OpRegistration regRandomFlip(randomFlip());

} // namespace
} // namespace sluice
