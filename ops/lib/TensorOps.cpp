//===- TensorOps.cpp - Registry entries of the tensor element ops ---------===//
//
// Value transforms (normalize, cast, clamp, map, ...), layout changes
// (transpose, pad, truncate) and encodings (hash_bucket, bucketize, one_hot,
// tokenize). Most are element-wise or index remaps that the compiler fuses
// into one kernel, so their rules must get element types exactly right.
//
//===----------------------------------------------------------------------===//
#include "Internal.h"
#include "OpHelpers.h"

#include "sluice/ops/kernels/Categorical.h"
#include "sluice/ops/kernels/Elementwise.h"
#include "sluice/ops/kernels/ExprEval.h"
#include "sluice/ops/kernels/Layout.h"

#include <algorithm>
#include <memory>

namespace sluice {
namespace {

using namespace detail;

std::string listText(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// Reports at `dtypeParam` unless it names a numeric type.
std::optional<ElemType> numericDType(TypeContext &ctx, const Value &v,
                                     const std::string &op) {
  std::optional<ElemType> t = parseElemType(v.asString());
  if (t && isNumeric(*t))
    return t;
  ctx.error(v,
            op + " produces numbers; dtype '" + v.asString() +
                "' is not a numeric type",
            "use one of u8, i8, u16, i16, i32, i64, f16, bf16, f32, f64, "
            "bool");
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// normalize, cast, fill_missing, clamp
//===----------------------------------------------------------------------===//

/// normalize's parameters, read once per step: a mean and a std for all
/// channels or one each per channel, the same length.
struct NormalizeParams {
  std::vector<double> mean, std;

  static Expected<NormalizeParams> parse(const Value &params) {
    NormalizeParams p;
    p.mean = params["mean"].asDoubleList();
    p.std = params["std"].asDoubleList();
    if (p.mean.empty() || p.std.empty())
      return Status::error("mean and std need at least one value");
    for (double v : p.std)
      if (!(v > 0))
        return Status::error("std values must be > 0");
    // The kernel takes one value or one per channel for each list;
    // broadcast a single value to the other list's length so both agree.
    if (p.mean.size() == 1 && p.std.size() > 1)
      p.mean.assign(p.std.size(), p.mean[0]);
    if (p.std.size() == 1 && p.mean.size() > 1)
      p.std.assign(p.mean.size(), p.std[0]);
    return p;
  }
};

OpDef normalize() {
  OpDef op = element("normalize");
  op.traits.valueForm = ValueForm::ScaleShift;
  op.summary = "(x - mean) / std per channel, as f32, f16 or bf16.";
  op.doc = "`mean` and `std` are one number for all channels or one per "
           "channel (the last dim, HxWxC layout). Values are not rescaled "
           "first: for u8 images give mean and std on the 0..255 scale, "
           "e.g. mean [123.675, 116.28, 103.53] and std [58.395, 57.12, "
           "57.375] for ImageNet. With `dtype: bf16` (or f16) each value is "
           "computed in f32 and rounded to nearest even as it is written, "
           "bit for bit what torch's `.to(torch.bfloat16)` of the f32 "
           "result gives, at half the bytes.";
  op.example = "- normalize: {field: image, mean: [123.675, 116.28, 103.53], "
               "std: [58.395, 57.12, 57.375], dtype: bf16}";
  op.typeDoc = "`field` becomes `dtype` (f32 unless given), same shape.";
  op.params = {
      fieldParam("The numeric input (u8 images or floats)."),
      asParam(),
      param("mean", ParamKind::FloatList)
          .req()
          .scalar()
          .length(1, std::numeric_limits<size_t>::max())
          .describe("Subtracted first: one value, or one per channel."),
      param("std", ParamKind::FloatList)
          .req()
          .scalar()
          .length(1, std::numeric_limits<size_t>::max())
          .above(0)
          .describe("Divided by next: one value, or one per channel."),
      enumParam("dtype", {"f32", "f16", "bf16"})
          .def(Value::string("f32"))
          .describe("The output element type: f32, or f16 / bf16 rounded "
                    "from the f32 value (nearest even)."),
  };
  op.fuse = FuseKind::ElementWise;
  op.traits.valueWise = true;
  // Per-channel lists are checked against the last dim per record.
  op.traits.perChannel = [](const Value &p) {
    return p["mean"].asDoubleList().size() > 1 ||
           p["std"].asDoubleList().size() > 1;
  };
  op.traits.commutesWithBatch = "normalizes per channel along the last dim, "
                                "which batching leaves in place";
  op.cost = {20, 0.5, 4};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "normalize"))
      return ctx.input();
    const FieldType &t = ctx.fieldType("field");
    const std::string &name = fieldName(ctx);
    int64_t channels = t.isScalar() ? 1 : t.shape.back();
    bool ok = true;
    for (const char *p : {"mean", "std"}) {
      const Value &v = ctx.param(p);
      size_t n = v.asDoubleList().size();
      if (n == 1)
        continue;
      if (t.isScalar()) {
        ctx.error(v, std::string(p) + " has " + std::to_string(n) +
                         " values, but field '" + name +
                         "' is a scalar; give one number");
        ok = false;
      } else if (channels >= 0 && static_cast<int64_t>(n) != channels) {
        ctx.error(v,
                  std::string(p) + " has " + std::to_string(n) +
                      " values, but the channel (last) dim of field '" + name +
                      "' (" + t.str() + ") is " + std::to_string(channels),
                  "give one value for all channels or one per channel");
        ok = false;
      }
    }
    size_t nm = ctx.param("mean").asDoubleList().size();
    size_t ns = ctx.param("std").asDoubleList().size();
    if (ok && nm != 1 && ns != 1 && nm != ns) {
      ctx.error(ctx.param("std"), "std has " + std::to_string(ns) +
                                      " values but mean has " +
                                      std::to_string(nm));
      ok = false;
    }
    if (!ok)
      return ctx.input();
    const Value &dt = ctx.param("dtype");
    ElemType out = dt.isString()
                       ? parseElemType(dt.asString()).value_or(ElemType::F32)
                       : ElemType::F32;
    return withResult(ctx, FieldType(out, t.shape));
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    Expected<NormalizeParams> p = NormalizeParams::parse(site.params);
    if (!p)
      return p.status();
    return TensorKernel([p = p.take(), to = site.output.elem](
                            const Tensor &t, const KernelCall &) {
      return kernels::normalize(t, p.mean, p.std, to);
    });
  };
  return op;
}
static OpRegistration regNormalize(normalize());

OpDef cast() {
  OpDef op = element("cast");
  op.traits.valueForm = ValueForm::Convert;
  op.summary = "Converts to another numeric element type.";
  op.doc = "Float to integer conversion truncates toward zero; `bool` is "
           "true for any nonzero value.";
  op.example = "- cast: {field: label, dtype: i32}";
  op.typeDoc = "`field` becomes `dtype`, same shape.";
  op.params = {
      fieldParam("The numeric input."),
      asParam(),
      param("dtype", ParamKind::DType)
          .req()
          .describe("The element type to convert to (numeric)."),
  };
  op.fuse = FuseKind::ElementWise;
  op.traits.valueWise = true;
  op.traits.commutesWithBatch = "converts each value on its own";
  op.traits.noopReason = [](const Value &, bool sameType) -> std::string {
    return sameType ? "casts to the element type the field already has" : "";
  };
  op.cost = {20, 0.3, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "cast", "a numeric tensor", /*allowBool=*/true))
      return ctx.input();
    std::optional<ElemType> to = numericDType(ctx, ctx.param("dtype"), "cast");
    if (!to)
      return ctx.input();
    return withResult(ctx, FieldType(*to, ctx.fieldType("field").shape));
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    ElemType to = site.output.elem;
    return TensorKernel([to](const Tensor &t, const KernelCall &) {
      return kernels::cast(t, to);
    });
  };
  return op;
}
static OpRegistration regCast(cast());

OpDef fillMissing() {
  OpDef op = element("fill_missing");
  op.traits.valueForm = ValueForm::FillNaN;
  op.summary = "Replaces missing values (NaN) with a constant.";
  op.doc = "Missing numbers are NaN in float fields: empty CSV cells of "
           "float columns, missing TFRecord floats. Integer fields cannot "
           "hold a missing value, so an empty integer cell is reported as a "
           "data error when it is read.";
  op.example = "- fill_missing: {field: dense, value: 0}";
  op.typeDoc = "`field` keeps its type.";
  op.params = {
      fieldParam("A float field."),
      asParam(),
      param("value", ParamKind::Float)
          .def(Value::real(0))
          .describe("The value that replaces NaN."),
  };
  op.fuse = FuseKind::ElementWise;
  op.traits.valueWise = true;
  op.traits.commutesWithBatch = "replaces each NaN on its own";
  op.cost = {10, 0.2, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "fill_missing", "a float tensor",
                        /*allowBool=*/true))
      return ctx.input();
    const FieldType &t = ctx.fieldType("field");
    if (!isFloat(t.elem)) {
      ctx.error(ctx.param("field"),
                "fill_missing needs a float field, but " +
                    describeField(fieldName(ctx), t) +
                    ": integer fields have no missing values (empty integer "
                    "cells are a data error)",
                "to allow empty cells, read the column as f32");
      return ctx.input();
    }
    const Value &v = ctx.param("value");
    if (!fitsIn(t.elem, doubleOr(v, 0))) {
      ctx.error(v, "value " + v.str() + " does not fit " + t.str());
      return ctx.input();
    }
    return withResult(ctx, t);
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    const Value &value = site.params["value"];
    double v = value.isNumber() ? value.asDouble() : 0;
    return TensorKernel([v](const Tensor &t, const KernelCall &) {
      return kernels::fillMissing(t, v);
    });
  };
  return op;
}
static OpRegistration regFillMissing(fillMissing());

OpDef clamp() {
  OpDef op = element("clamp");
  op.traits.valueForm = ValueForm::Clamp;
  op.summary = "Limits values to [min, max].";
  op.doc = "Either bound may be omitted. NaN stays NaN.";
  op.example = "- clamp: {field: dense, min: 0, max: 1000}";
  op.typeDoc = "`field` keeps its type.";
  op.params = {
      fieldParam("The numeric input."),
      asParam(),
      param("min", ParamKind::Float).describe("Lower bound."),
      param("max", ParamKind::Float).describe("Upper bound."),
  };
  op.fuse = FuseKind::ElementWise;
  op.traits.valueWise = true;
  op.traits.commutesWithBatch = "clamps each value on its own";
  op.cost = {10, 0.2, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "clamp"))
      return ctx.input();
    const Value &lo = ctx.param("min"), &hi = ctx.param("max");
    if (!lo.isNumber() && !hi.isNumber()) {
      ctx.errorAtOp("clamp needs `min`, `max` or both",
                    "e.g. `- clamp: {field: " + fieldName(ctx) +
                        ", min: 0, max: 1}`");
      return ctx.input();
    }
    if (lo.isNumber() && hi.isNumber() && lo.asDouble() > hi.asDouble()) {
      ctx.error(hi,
                "max (" + hi.str() + ") is less than min (" + lo.str() + ")");
      return ctx.input();
    }
    return withResult(ctx, ctx.fieldType("field"));
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    std::optional<double> lo, hi;
    if (site.params["min"].isNumber())
      lo = site.params["min"].asDouble();
    if (site.params["max"].isNumber())
      hi = site.params["max"].asDouble();
    return TensorKernel([lo, hi](const Tensor &t, const KernelCall &) {
      return kernels::clamp(t, lo, hi);
    });
  };
  return op;
}
static OpRegistration regClamp(clamp());

//===----------------------------------------------------------------------===//
// map
//===----------------------------------------------------------------------===//

OpDef mapOp() {
  OpDef op = element("map");
  op.traits.valueForm = ValueForm::Expression;
  op.summary = "Applies an expression to every element of a field.";
  op.doc =
      "`x` is one element of `field`; the expression is compiled and fused "
      "with the neighbouring element-wise steps. The expression language "
      "(shared with `filter`):\n\n"
      "- numbers (`3`, `0.5`, `1e-3`), `true`, `false`, names (`x` here, "
      "fields in `filter`), `f[3]` (a constant index, `filter` only);\n"
      "- from lowest to highest precedence: `c ? a : b`; `or` (`||`); "
      "`and` (`&&`); `not` (`!`); comparisons `< <= > >= == !=` (not "
      "chained); `+ -`; `* / // %`; unary `-`; calls and indexing;\n"
      "- functions: `log exp sqrt abs min max floor ceil round pow "
      "clamp(x, lo, hi) sin cos tanh sigmoid log1p`.\n\n"
      "**Semantics are numpy 2's, with NEP 50 promotion** (as if `x` were a "
      "numpy array of the field's dtype and the literals Python numbers):\n\n"
      "- Arithmetic runs in the field's dtype: `x * 0.5` on f32 is f32 "
      "arithmetic, each operation rounded to f32 (not computed in f64 and "
      "rounded at the end). Two fields promote as numpy's `promote_types` "
      "(u8 + i8 is i16; i64 + f32 is f64; u8 + f16 is f16).\n"
      "- Literals are weak: an integer literal takes the field's type (`x * "
      "2` on u8 stays u8) and must fit it (`x + 300` on u8 is a spec error, "
      "as numpy 2 raises OverflowError); a float literal takes a float "
      "field's type and is converted to it first (on f32, `x == 0.7` "
      "compares with float32(0.7), so it is true for a stored 0.7), and "
      "makes f64 next to an integer field (`x * 0.5` on u8 is f64). "
      "Comparisons take any integer literal and compare exact values "
      "(`x < 300` on u8 is always true). Parts made of literals only are "
      "computed once as Python would (`x * log(2)` is `x * math.log(2)`, "
      "still weak; `1 / 0` is a spec error).\n"
      "- Integer overflow wraps (`x * 2` on u8 200 is 144; `-x` on u8 "
      "wraps; `abs` of i8 -128 is -128). `/` is true division: f64 for "
      "integers (`x / 255` on u8 is f64: add `dtype: f32` for f32), the "
      "float type otherwise.\n"
      "- `%` and `//` floor, as Python: the remainder has the sign of the "
      "divisor (`-7 % 3` is 2, `-7 // 3` is -3). Integer `x // 0` and `x % "
      "0` give 0 (numpy gives 0 with a warning); float `x % 0` is NaN and "
      "`x // 0` is +-inf or NaN, as numpy.\n"
      "- `round` rounds half to even (`round(2.5)` is 2, like `np.round`); "
      "`floor`, `ceil`, `round` and `abs` keep the type (the identity on "
      "integers).\n"
      "- `exp log log1p sqrt sin cos tanh sigmoid` keep a float type; on "
      "integers they compute in the smallest float holding them, as numpy "
      "does (u8/i8 give f16, u16/i16 f32, i32/i64 f64). `sigmoid(x)` is "
      "`1 / (1 + exp(-x))` in that type. `pow` of two integers is an "
      "integer power (wrapping; a negative exponent gives 0, or +-1 for a "
      "base of +-1, where numpy raises).\n"
      "- NaN propagates: `min`, `max` and `clamp` return the NaN (like "
      "`np.minimum`/`np.maximum`/`np.clip`, not like `fmin`); comparisons "
      "with NaN are false except `!=`. A NaN input keeps its payload "
      "through every operation (quieted); a NaN an operation creates is "
      "the processor's default NaN.\n"
      "- `c ? a : b` promotes `a` and `b` like an arithmetic operation "
      "(`np.where`); comparisons and logic give bool.\n"
      "- A bool field is a condition: `not`, `and`, `or`, `==`/`!=` with "
      "another bool and `x ? a : b` take it (any non-zero byte is true); "
      "arithmetic on it is a spec error. f16 arithmetic is computed in f64 "
      "and rounded to f16 after every operation (for `+ - * / sqrt` exactly "
      "IEEE f16 arithmetic); `min`/`max` of equal f16 values give the first "
      "(numpy's half loop).\n\n"
      "Results equal numpy's bit for bit (NaN compared as NaN), except the "
      "transcendental functions (`exp log log1p sin cos tanh sigmoid` and "
      "float `pow`), which are the f64 libm result (for `log`, sluice's own "
      "f64 log, within 1 unit in the last place of libm's and shared with "
      "the generated kernels) rounded to the type and are within 4 units in "
      "the last place of numpy's "
      "(tests/examples/expr-numpy.test checks every dtype against numpy on "
      "random values, NaN, +-inf, -0, denormals and integer extremes). "
      "`dtype` converts the result (saturating, like `cast`).\n\n"
      "With the code generator on (the default; `--no-jit` turns it off), "
      "the expression runs as generated native code for every numeric "
      "dtype, f16 and bool included: the interpreter's bytecode lowered "
      "instruction by instruction, with the same bytes (NaN payloads "
      "included).";
  op.example = "- map: {field: dense, expr: \"log(max(x, 0) + 1)\"}";
  op.typeDoc = "`field` keeps its shape; the element type is the "
               "expression's (or `dtype`).";
  op.params = {
      fieldParam("The numeric input; its elements are `x`."),
      asParam(),
      param("expr", ParamKind::Expr)
          .req()
          .describe("The expression computing each output element from "
                    "`x`."),
      param("dtype", ParamKind::DType)
          .describe("Convert the result to this element type."),
  };
  op.fuse = FuseKind::ElementWise;
  op.traits.valueWise = true;
  op.traits.commutesWithBatch =
      "computes each value from the value at the same position (the "
      "expression sees only `x`)";
  op.cost = {20, 1, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "map", "a numeric tensor", /*allowBool=*/true))
      return ctx.input();
    const FieldType &t = ctx.fieldType("field");
    const std::string &name = fieldName(ctx);
    const Value &exprV = ctx.param("expr");
    ExprPtr e = parseExprParam(ctx, "expr");
    if (!e)
      return ctx.input();
    bool ok = true;
    forEachVar(*e, [&](const Expr &var, const Expr *index) {
      if (!ok)
        return;
      if (var.name != "x") {
        ctx.errorInString(exprV, var.offset,
                          "unknown name '" + var.name + "'; did you mean 'x'?",
                          "in map, `x` is one element of field '" + name +
                              "'; other fields are not visible");
        ok = false;
      } else if (index) {
        ctx.errorInString(exprV, index->offset,
                          "'x' is one element of field '" + name +
                              "' and cannot be indexed",
                          "map computes element by element; to pick entries "
                          "of a field use `filter` or a record op");
        ok = false;
      }
    });
    if (!ok)
      return ctx.input();
    ElemType result;
    ExprTypeError err;
    if (!inferExprType(
            *e,
            [&](const std::string &n, ElemType &out) {
              out = t.elem;
              return n == "x";
            },
            result, err)) {
      ctx.errorInString(exprV, err.offset, err.message);
      return ctx.input();
    }
    const Value &dtypeV = ctx.param("dtype");
    if (dtypeV.isString()) {
      std::optional<ElemType> to = numericDType(ctx, dtypeV, "map");
      if (!to)
        return ctx.input();
      result = *to;
    }
    return withResult(ctx, FieldType(result, t.shape));
  };
  // The expression is parsed and compiled once per step; values the
  // expression computes in another type are cast to the step's dtype.
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    const Value &text = site.params["expr"];
    if (!text.isString())
      return Status::error("parameter 'expr' is missing");
    ExprError err;
    ExprPtr e = parseExpr(text.asString(), err);
    if (!e)
      return Status::error("expression '" + text.asString() +
                           "': " + err.message);
    Expected<kernels::CompiledExpr> compiled =
        kernels::CompiledExpr::compileMap(*e, site.input.elem);
    if (!compiled)
      return compiled.status();
    auto code = std::make_shared<const kernels::CompiledExpr>(compiled.take());
    ElemType to = site.output.elem;
    return TensorKernel(
        [code, to](const Tensor &t, const KernelCall &) -> Expected<Tensor> {
          Expected<Tensor> r = code->map(t);
          if (!r || r->elem() == to)
            return r;
          return kernels::cast(*r, to);
        });
  };
  return op;
}
static OpRegistration regMap(mapOp());

//===----------------------------------------------------------------------===//
// transpose, pad, truncate
//===----------------------------------------------------------------------===//

OpDef transpose() {
  OpDef op = element("transpose");
  op.traits.remapForm = RemapForm::Permute;
  op.summary = "Permutes the dims of a tensor (HWC to CHW and back).";
  op.doc = "`to: CHW` turns an HxWxC image into CxHxW, the layout PyTorch "
           "models expect; `to: HWC` reverses it. `perm` gives any "
           "permutation: output dim i is input dim perm[i].";
  op.example = "- transpose: {field: image, to: CHW}";
  op.typeDoc = "`field` keeps its element type; its dims are permuted.";
  op.params = {
      fieldParam("The numeric input."),
      asParam(),
      enumParam("to", {"CHW", "HWC"})
          .describe("Target layout of a rank-3 image (from HWC, resp. CHW)."),
      param("perm", ParamKind::IntList)
          .atLeast(0)
          .describe("Explicit permutation; use either `to` or `perm`."),
  };
  op.fuse = FuseKind::IndexRemap;
  op.traits.indexRemap = true;
  op.traits.noopReason = [](const Value &params, bool sameType) -> std::string {
    const Value &perm = params["perm"];
    if (!sameType || !perm.isList())
      return "";
    std::vector<int64_t> p = perm.asIntList();
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] != static_cast<int64_t>(i))
        return "";
    return "transposes with the identity permutation";
  };
  op.cost = {20, 0.5, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "transpose", "a numeric tensor",
                        /*allowBool=*/true))
      return ctx.input();
    const FieldType &t = ctx.fieldType("field");
    const Value &to = ctx.param("to"), &permV = ctx.param("perm");
    std::vector<int64_t> perm;
    if (to.isString() == permV.isList()) {
      if (to.isString())
        ctx.error(permV, "give either `to` or `perm`, not both");
      else
        ctx.errorAtOp("transpose needs `to` (CHW or HWC) or `perm`",
                      "e.g. `- transpose: {field: " + fieldName(ctx) +
                          ", to: CHW}`");
      return ctx.input();
    }
    if (to.isString()) {
      if (t.rank() != 3) {
        ctx.error(ctx.param("field"),
                  "transpose to " + to.asString() +
                      " needs a rank-3 image, but " +
                      describeField(fieldName(ctx), t),
                  t.rank() == 2 ? "a HxW image has no channel dim; use "
                                  "decode_image with channels: 1 for "
                                  "grayscale HxWx1"
                                : "");
        return ctx.input();
      }
      perm = to.asString() == "CHW" ? std::vector<int64_t>{2, 0, 1}
                                    : std::vector<int64_t>{1, 2, 0};
    } else {
      perm = permV.asIntList();
      std::vector<bool> seen(t.rank(), false);
      bool ok = perm.size() == t.rank();
      for (int64_t p : perm) {
        if (p < 0 || p >= static_cast<int64_t>(t.rank()) || seen[p])
          ok = false;
        else
          seen[p] = true;
      }
      if (!ok) {
        ctx.error(permV,
                  "perm must be a permutation of 0.." +
                      std::to_string(static_cast<int64_t>(t.rank()) - 1) +
                      " (one entry per dim of " + t.str() + "), got " +
                      listText(perm));
        return ctx.input();
      }
    }
    FieldType out = t;
    for (size_t i = 0; i < perm.size(); ++i)
      out.shape[i] = t.shape[perm[i]];
    return withResult(ctx, out);
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    std::vector<int64_t> perm;
    const Value &to = site.params["to"];
    if (to.isString())
      perm = to.asString() == "CHW" ? std::vector<int64_t>{2, 0, 1}
                                    : std::vector<int64_t>{1, 2, 0};
    else
      perm = site.params["perm"].asIntList();
    if (perm.size() != site.input.rank())
      return Status::error("the permutation does not match the field's rank");
    return TensorKernel([perm](const Tensor &t, const KernelCall &) {
      return kernels::transpose(t, perm);
    });
  };
  return op;
}
static OpRegistration regTranspose(transpose());

OpDef pad() {
  OpDef op = element("pad");
  op.traits.remapForm = RemapForm::Pad;
  op.summary = "Pads a vector or an image with a constant.";
  op.doc = "For a rank-1 field, `padding` is `[before, after]`; for images "
           "(rank 2 or more, HxW first) `[top, bottom, left, right]`. One "
           "number pads every side by that much.";
  op.example = "- pad: {field: image, padding: [4, 4, 4, 4], value: 0}";
  op.typeDoc = "`field` keeps its element type; static padded dims grow by "
               "the padding, dims of varying size stay `?`.";
  op.params = {
      fieldParam("The numeric input (rank 1 or more)."),
      asParam(),
      param("padding", ParamKind::IntList)
          .req()
          .scalar()
          .length(1, 4)
          .atLeast(0)
          .describe("[before, after] (rank 1), [top, bottom, left, right] "
                    "(images), or one number for all sides."),
      param("value", ParamKind::Float)
          .def(Value::real(0))
          .describe("The padding value."),
  };
  op.fuse = FuseKind::IndexRemap;
  op.traits.indexRemap = true;
  op.cost = {50, 0.3, 1.1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "pad", "a numeric tensor", /*allowBool=*/true) ||
        !requireRank(ctx, "pad", 1, std::numeric_limits<size_t>::max(),
                     "a tensor of rank 1 or more"))
      return ctx.input();
    const FieldType &t = ctx.fieldType("field");
    const Value &padV = ctx.param("padding");
    std::vector<int64_t> p = padV.asIntList();
    size_t sides = t.rank() == 1 ? 2 : 4;
    if (p.size() == 1)
      p.assign(sides, p[0]);
    if (p.size() != sides) {
      ctx.error(padV, t.rank() == 1
                          ? "a rank-1 field takes [before, after] or one "
                            "number, got " +
                                std::to_string(p.size()) + " values"
                          : "an image takes [top, bottom, left, right] or "
                            "one number, got " +
                                std::to_string(p.size()) + " values");
      return ctx.input();
    }
    const Value &value = ctx.param("value");
    if (!fitsIn(t.elem, doubleOr(value, 0))) {
      ctx.error(value, "value " + value.str() + " does not fit field '" +
                           fieldName(ctx) + "' (" + t.str() + ")");
      return ctx.input();
    }
    FieldType out = t;
    for (size_t d = 0; d < sides / 2; ++d)
      if (out.shape[d] >= 0)
        out.shape[d] += p[2 * d] + p[2 * d + 1];
    return withResult(ctx, out);
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    std::vector<int64_t> p = site.params["padding"].asIntList();
    const Value &valueV = site.params["value"];
    double value = valueV.isNumber() ? valueV.asDouble() : 0;
    size_t rank = site.input.rank();
    size_t sides = rank == 1 ? 2 : 4;
    if (p.size() == 1)
      p.assign(sides, p[0]);
    if (p.size() != sides || rank == 0)
      return Status::error("padding does not match the field's rank");
    std::vector<std::pair<int64_t, int64_t>> pads(rank, {0, 0});
    for (size_t d = 0; d < sides / 2; ++d)
      pads[d] = {p[2 * d], p[2 * d + 1]};
    return TensorKernel([pads, value](const Tensor &t, const KernelCall &) {
      return kernels::pad(t, pads, value);
    });
  };
  return op;
}
static OpRegistration regPad(pad());

OpDef truncate() {
  OpDef op = element("truncate");
  op.summary = "Keeps at most `length` entries along the first dim.";
  op.doc = "Shorter inputs are left as they are; combine with "
           "`padded_batch` to get a fixed length.";
  op.example = "- truncate: {field: tokens, length: 128}";
  op.typeDoc = "`field` keeps its element type; its first dim becomes "
               "min(dim, length) when static, else `?`.";
  op.params = {
      fieldParam("The input (rank 1 or more)."),
      asParam(),
      param("length", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Maximum number of entries kept."),
  };
  op.fuse = FuseKind::IndexRemap;
  op.cost = {20, 0.1, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireRank(ctx, "truncate", 1, std::numeric_limits<size_t>::max(),
                     "a tensor of rank 1 or more"))
      return ctx.input();
    FieldType t = ctx.fieldType("field");
    int64_t len = intOr(ctx.param("length"), 1);
    if (t.shape[0] >= 0)
      t.shape[0] = std::min(t.shape[0], len);
    return withResult(ctx, t);
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    int64_t len = intOr(site.params["length"], 1);
    return TensorKernel([len](const Tensor &t, const KernelCall &) {
      return kernels::truncate(t, len, 0);
    });
  };
  return op;
}
static OpRegistration regTruncate(truncate());

//===----------------------------------------------------------------------===//
// hash_bucket, bucketize, one_hot, tokenize
//===----------------------------------------------------------------------===//

OpDef hashBucket() {
  OpDef op = element("hash_bucket");
  op.traits.valueForm = ValueForm::HashBucket;
  op.summary = "Maps ids or strings to [0, buckets) by hashing.";
  op.doc = "A fixed 64-bit hash of each value modulo `buckets`: the same "
           "value gets the same bucket on every run and machine. Used for "
           "categorical features with huge vocabularies (Criteo).";
  op.example = "- hash_bucket: {field: cat, buckets: 1000000}";
  op.typeDoc = "`field` becomes i64, same shape.";
  op.params = {
      fieldParam("Integer, string or bytes values."),
      asParam(),
      param("buckets", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Number of buckets."),
  };
  op.fuse = FuseKind::None;
  // A library call (FuseKind::None), yet value-wise.
  op.traits.valueWise = true;
  op.traits.commutesWithBatch = "hashes each value on its own";
  op.cost = {50, 2, 1};
  op.typeRule = [](TypeContext &ctx) {
    const FieldType &t = ctx.fieldType("field");
    if (isFloat(t.elem)) {
      ctx.error(ctx.param("field"),
                "hash_bucket needs integers, strings or bytes, but " +
                    describeField(fieldName(ctx), t),
                "to bucket floats by value use `bucketize`");
      return ctx.input();
    }
    return withResult(ctx, FieldType(ElemType::I64, t.shape));
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    int64_t buckets = intOr(site.params["buckets"], 1);
    return TensorKernel([buckets](const Tensor &t, const KernelCall &) {
      return kernels::hashBucket(t, buckets);
    });
  };
  return op;
}
static OpRegistration regHashBucket(hashBucket());

OpDef bucketize() {
  OpDef op = element("bucketize");
  op.traits.valueForm = ValueForm::Bucketize;
  op.summary = "Replaces each value by the index of its bucket.";
  op.doc = "With boundaries [b0, ..., bn-1], a value v goes to bucket i "
           "where b(i-1) <= v < b(i): below b0 is 0, at or above bn-1 is n. "
           "NaN goes to bucket n.";
  op.example = "- bucketize: {field: age, boundaries: [18, 25, 35, 50, 65]}";
  op.typeDoc = "`field` becomes i32, same shape.";
  op.params = {
      fieldParam("The numeric input."),
      asParam(),
      param("boundaries", ParamKind::FloatList)
          .req()
          .length(1, std::numeric_limits<size_t>::max())
          .describe("Strictly increasing bucket boundaries."),
  };
  op.fuse = FuseKind::ElementWise;
  op.traits.valueWise = true;
  op.traits.commutesWithBatch = "looks up each value's bucket on its own";
  op.cost = {20, 2, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "bucketize"))
      return ctx.input();
    const Value &b = ctx.param("boundaries");
    if (!requireOrdered(ctx, b, b.asDoubleList(), true, "boundaries"))
      return ctx.input();
    return withResult(ctx,
                      FieldType(ElemType::I32, ctx.fieldType("field").shape));
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    std::vector<double> b = site.params["boundaries"].asDoubleList();
    return TensorKernel([b](const Tensor &t, const KernelCall &) {
      return kernels::bucketize(t, b);
    });
  };
  return op;
}
static OpRegistration regBucketize(bucketize());

OpDef oneHot() {
  OpDef op = element("one_hot");
  op.summary = "Encodes integer class ids as one-hot vectors.";
  op.doc = "Each id c becomes a vector of `depth` zeros with a 1 at index c. "
           "An id outside [0, depth) is a data error reported with the "
           "record.";
  op.example = "- one_hot: {field: label, depth: 10}";
  op.typeDoc = "`field` becomes `dtype[..., depth]`: its shape plus a last "
               "dim of `depth`.";
  op.params = {
      fieldParam("Integer class ids."),
      asParam(),
      param("depth", ParamKind::Int)
          .req()
          .atLeast(1)
          .describe("Number of classes."),
      param("dtype", ParamKind::DType)
          .def(Value::string("f32"))
          .describe("Element type of the result."),
  };
  op.fuse = FuseKind::None;
  op.cost = {20, 1, 1};
  op.typeRule = [](TypeContext &ctx) {
    if (!requireNumeric(ctx, "one_hot", "integer class ids",
                        /*allowBool=*/true))
      return ctx.input();
    const FieldType &t = ctx.fieldType("field");
    if (!isInteger(t.elem)) {
      ctx.error(ctx.param("field"),
                "one_hot needs integer class ids, but " +
                    describeField(fieldName(ctx), t),
                "cast it first, e.g. `- cast: {field: " + fieldName(ctx) +
                    ", dtype: i64}`");
      return ctx.input();
    }
    const Value &dtypeV = ctx.param("dtype");
    std::optional<ElemType> dt = dtypeV.isString()
                                     ? numericDType(ctx, dtypeV, "one_hot")
                                     : std::optional<ElemType>(ElemType::F32);
    if (!dt)
      return ctx.input();
    FieldType out(*dt, t.shape);
    out.shape.push_back(intOr(ctx.param("depth"), 1));
    return withResult(ctx, out);
  };
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    int64_t depth = intOr(site.params["depth"], 1);
    ElemType out = site.output.elem;
    return TensorKernel([depth, out](const Tensor &t, const KernelCall &) {
      return kernels::oneHot(t, depth, out);
    });
  };
  return op;
}
static OpRegistration regOneHot(oneHot());

OpDef tokenize() {
  OpDef op = element("tokenize");
  op.summary = "Splits text into tokens and maps them to vocabulary ids.";
  op.doc =
      "Splits on whitespace; each token's id is its 0-based line number "
      "in the `vocab` file (one token per line, read when the pipeline "
      "starts). Tokens not in the vocabulary get the id of `unknown`, "
      "which must be in it. `lowercase` lowercases ASCII letters first. The "
      "text must be UTF-8: with `encoding: strict` (the default) "
      "invalid bytes are a data error located at the record (on_error "
      "decides), with `replace` they become U+FFFD and the record is "
      "counted as repaired in the step's accounting line.";
  op.example = "- tokenize: {field: line, vocab: vocab.txt, as: tokens}";
  op.typeDoc = "`field` (one string per record) becomes `i64[?]`.";
  op.params = {
      fieldParam("The text (a string or bytes scalar)."),
      asParam(),
      param("vocab", ParamKind::String)
          .req()
          .describe("Path of the vocabulary file, relative to the spec."),
      param("unknown", ParamKind::String)
          .def(Value::string("[UNK]"))
          .describe("Vocabulary entry used for unknown tokens."),
      param("lowercase", ParamKind::Bool)
          .def(Value::boolean(false))
          .describe("Lowercase ASCII letters before the lookup."),
      encodingParam(),
  };
  op.fuse = FuseKind::None;
  op.cost = {500, 20, 2};
  op.typeRule = [](TypeContext &ctx) {
    const FieldType &t = ctx.fieldType("field");
    const std::string &name = fieldName(ctx);
    if (isNumeric(t.elem)) {
      ctx.error(ctx.param("field"),
                "tokenize needs text (a string or bytes field), but " +
                    describeField(name, t));
      return ctx.input();
    }
    if (!t.isScalar()) {
      ctx.error(ctx.param("field"),
                "tokenize works on one text per record, but " +
                    describeField(name, t),
                "tokenize before `batch`");
      return ctx.input();
    }
    if (ctx.param("vocab").asString().empty()) {
      ctx.error(ctx.param("vocab"), "vocab needs a file path");
      return ctx.input();
    }
    return withResult(ctx, FieldType(ElemType::I64, {kDynamic}));
  };
  // The vocabulary is loaded once per file (Vocab::shared) and the options
  // read once per step; replaced invalid UTF-8 is counted per record.
  op.kernel = [](const KernelSite &site) -> Expected<TensorKernel> {
    const Value &vocabV = site.params["vocab"];
    if (!vocabV.isString() || vocabV.asString().empty())
      return Status::error("parameter 'vocab' is missing");
    std::string path = site.resolvePath(vocabV.asString());
    Expected<std::shared_ptr<const kernels::Vocab>> vocab =
        kernels::Vocab::shared(path);
    if (!vocab)
      return vocab.status();
    kernels::TokenizeOptions opts;
    const Value &lower = site.params["lowercase"];
    opts.lowercase = lower.isBool() && lower.asBool();
    const Value &unknownV = site.params["unknown"];
    std::string unknown = unknownV.isString() ? unknownV.asString() : "[UNK]";
    opts.unknownId = (*vocab)->lookup(unknown);
    if (opts.unknownId < 0)
      return Status::error("the unknown token '" + unknown +
                           "' is not in the vocabulary " + path +
                           "; add it as a line of the file or set `unknown` "
                           "to one of its tokens");
    opts.out =
        site.output.elem == ElemType::I32 ? ElemType::I32 : ElemType::I64;
    const Value &encoding = site.params["encoding"];
    opts.replaceInvalid =
        encoding.isString() && encoding.asString() == "replace";
    std::shared_ptr<const kernels::Vocab> v = *vocab;
    return TensorKernel(
        [v, opts](const Tensor &t, const KernelCall &call) -> Expected<Tensor> {
          size_t replaced = 0;
          Expected<Tensor> r = kernels::tokenize(t, *v, opts, &replaced);
          if (replaced > 0)
            call.repaired("tokenize: invalid UTF-8 replaced by U+FFFD");
          return r;
        });
  };
  return op;
}
static OpRegistration regTokenize(tokenize());

} // namespace
} // namespace sluice
