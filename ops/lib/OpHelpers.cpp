//===- OpHelpers.cpp - Shared pieces of the registry entries --------------===//
//
// The common parameters and checks of ops/lib/*Ops.cpp, so that the same
// mistake gets the same message whichever op it is made in.
//
//===----------------------------------------------------------------------===//
#include "OpHelpers.h"
#include "Internal.h"

#include <cmath>
#include <limits>

namespace sluice::detail {

ParamSpec fieldParam(std::string doc) {
  return param("field", ParamKind::Field).req().describe(std::move(doc));
}

ParamSpec asParam() {
  return param("as", ParamKind::String)
      .describe("Write the result to this new field and keep `field` "
                "unchanged; by default the result replaces `field`.");
}

ParamSpec onErrorParam() {
  return enumParam("on_error", {"fail", "skip"})
      .def(Value::string("fail"))
      .describe("What to do with a record that cannot be read or parsed: "
                "`fail` stops the run with the file and offset, `skip` counts "
                "it (with the reason) and goes on.");
}

ParamSpec remoteParam() {
  return structParam(
             "remote",
             {
                 param("endpoint", ParamKind::String)
                     .describe("S3 endpoint URL (e.g. http://127.0.0.1:9000 "
                               "for MinIO); default AWS_ENDPOINT_URL_S3, "
                               "AWS_ENDPOINT_URL, the profile's endpoint_url "
                               "in ~/.aws/config, else AWS's own."),
                 param("region", ParamKind::String)
                     .describe("S3 region for signing; default AWS_REGION, "
                               "AWS_DEFAULT_REGION, the profile's region in "
                               "~/.aws/config, else us-east-1."),
                 param("profile", ParamKind::String)
                     .describe("Profile to sign with, from "
                               "~/.aws/credentials or ~/.aws/config; "
                               "default: AWS_ACCESS_KEY_ID/"
                               "AWS_SECRET_ACCESS_KEY, else AWS_PROFILE's "
                               "profile (or 'default'), else anonymous "
                               "requests."),
                 param("sign", ParamKind::Bool)
                     .describe("false: s3:// requests go unsigned (a public "
                               "bucket, as `aws s3 --no-sign-request` reads "
                               "it), whatever credentials the host has; no "
                               "profile, key or role is looked for. Default "
                               "true: signed with the credentials found, "
                               "anonymous when there are none."),
                 param("request_timeout", ParamKind::Float)
                     .above(0)
                     .describe("Seconds one request may take before it is "
                               "retried (default 60)."),
                 param("concurrency", ParamKind::Int)
                     .atLeast(1)
                     .atMost(1024)
                     .describe(
                         "Requests in flight per file read in chunks, "
                         "or whole objects fetched ahead by image_folder "
                         "and files. Default: the tuner's choice (Little's "
                         "law) under `schedule: auto` or a schedule's "
                         "`parallelism` on the source, else 8; set, it "
                         "overrides both."),
                 param("retries", ParamKind::Int)
                     .atLeast(0)
                     .atMost(100)
                     .describe("Retries of a request that failed with 5xx, "
                               "429 or a broken connection, with capped "
                               "exponential backoff and jitter (default 5)."),
                 param("chunk_size", ParamKind::Size)
                     .describe("Bytes per ranged request of a file read in "
                               "order (default 4MiB)."),
                 param("cache", ParamKind::String)
                     .describe("Directory that keeps fetched objects (relative "
                               "to the spec's), so later epochs read them "
                               "locally; each is used only while the server "
                               "says its ETag is current (If-None-Match), and "
                               "fetched again when it changed."),
                 param("cache_size", ParamKind::Size)
                     .describe("Bound of the cache directory; the least "
                               "recently used objects are removed beyond it "
                               "(default 10GiB)."),
                 param("ca_bundle", ParamKind::String)
                     .describe("PEM file (relative to the spec's directory) "
                               "of the certificate authorities that https "
                               "servers are checked against, for a server "
                               "whose certificate a private CA signed; "
                               "default: AWS_CA_BUNDLE, else the system's "
                               "store. Certificates are always verified."),
             })
      .describe("How `s3://`, `http://` and `https://` file names are read "
                "(every member optional).");
}

ParamSpec encodingParam() {
  return enumParam("encoding", {"strict", "replace"})
      .def(Value::string("strict"))
      .describe("Text must be UTF-8. `strict`: bytes that are not are a "
                "data error (located; `on_error` decides whether it stops "
                "the run or the record is skipped and counted). `replace`: "
                "each invalid sequence becomes U+FFFD and the record is "
                "kept.");
}

ParamSpec interpolationParam() {
  return enumParam("interpolation", {"bilinear", "area", "nearest"})
      .def(Value::string("bilinear"))
      .describe("Resampling filter. `area` is best when shrinking a lot.");
}

ParamSpec antialiasParam() {
  return param("antialias", ParamKind::Bool)
      .def(Value::boolean(true))
      .describe("Bilinear only: when shrinking, widen the triangle filter by "
                "the shrink factor so every source pixel under an output "
                "pixel counts (PIL's `Image.resize` and torchvision's "
                "`antialias=True`, how ImageNet models are trained); u8 "
                "results are PIL's bytes. `false` samples the 2x2 nearest "
                "source pixels (torch's `interpolate` without antialias), "
                "which aliases when shrinking by more than 2x. `nearest` and "
                "`area` ignore it.");
}

std::string describeField(const std::string &name, const FieldType &t) {
  return "field '" + name + "' is " + t.str();
}

std::string dimsText(const std::vector<int64_t> &dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i)
      s += 'x';
    s += dims[i] < 0 ? std::string("?") : std::to_string(dims[i]);
  }
  return s;
}

const std::string &fieldName(TypeContext &ctx) {
  return ctx.param("field").asString();
}

bool requireFieldName(TypeContext &ctx, const Value &at) {
  if (isIdentifier(at.asString()))
    return true;
  ctx.error(at, "'" + at.asString() + "' is not a valid field name",
            "field names are letters, digits and '_', not starting with a "
            "digit, so that expressions can refer to them");
  return false;
}

RecordType withResult(TypeContext &ctx, FieldType result) {
  RecordType out = ctx.input();
  const Value &as = ctx.param("as");
  if (as.isString()) {
    if (!requireFieldName(ctx, as))
      return out;
    // Like rename: writing over another field is refused, not silent.
    const std::string &to = as.asString();
    if (to != fieldName(ctx) && ctx.input().find(to)) {
      ctx.error(as,
                "cannot write the result to '" + to + "': a field named '" +
                    to + "' already exists (" +
                    ctx.input().find(to)->type.str() + ")",
                "choose a new name, drop '" + to +
                    "' first with `select`, or leave out `as` to replace '" +
                    fieldName(ctx) + "' itself");
      return out;
    }
    out.set(to, std::move(result));
  } else {
    out.set(fieldName(ctx), std::move(result));
  }
  return out;
}

std::string nonNumericHint(const std::string &field, ElemType t) {
  if (t == ElemType::Bytes)
    return "decode it first, e.g. `- decode_image: {field: " + field +
           ", as: image}`";
  if (t == ElemType::String)
    return "string fields hold text: turn it into numbers first with "
           "`tokenize` or `hash_bucket`";
  return "";
}

bool requireNumeric(TypeContext &ctx, const std::string &op,
                    const std::string &what, bool allowBool) {
  const FieldType &t = ctx.fieldType("field");
  if (isNumeric(t.elem) && (allowBool || t.elem != ElemType::Bool))
    return true;
  std::string hint = nonNumericHint(fieldName(ctx), t.elem);
  if (t.elem == ElemType::Bool)
    hint = "cast it first, e.g. `- cast: {field: " + fieldName(ctx) +
           ", dtype: f32}`";
  ctx.error(ctx.param("field"),
            op + " needs " + what + ", but field '" + fieldName(ctx) + "' is " +
                t.str(),
            hint);
  return false;
}

bool requireRank(TypeContext &ctx, const std::string &op, size_t lo, size_t hi,
                 const std::string &what) {
  const FieldType &t = ctx.fieldType("field");
  if (t.rank() >= lo && t.rank() <= hi)
    return true;
  ctx.error(ctx.param("field"), op + " needs " + what + ", but " +
                                    describeField(fieldName(ctx), t));
  return false;
}

bool fitsIn(ElemType t, double v) {
  if (std::isnan(v))
    return isFloat(t);
  if (isFloat(t))
    return ((t != ElemType::F16 || std::fabs(v) <= 65504.0) &&
            (t != ElemType::BF16 || std::fabs(v) <= 0x1.FEp127)) ||
           std::isinf(v);
  if (v != std::floor(v) || !isNumeric(t))
    return false;
  // In double the i64 bounds are -2^63 and 2^63 (INT64_MAX rounds up).
  auto [lo, hi] = integerRange(t);
  return v >= static_cast<double>(lo) && v <= static_cast<double>(hi);
}

bool requireOrdered(TypeContext &ctx, const Value &at,
                    const std::vector<double> &values, bool strict,
                    const std::string &what) {
  for (size_t i = 1; i < values.size(); ++i) {
    bool bad = strict ? values[i] <= values[i - 1] : values[i] < values[i - 1];
    if (!bad)
      continue;
    const Value &item =
        at.isList() && i < at.items().size() ? at.items()[i] : at;
    ctx.error(item,
              what + " must be " +
                  (strict ? "strictly increasing" : "in increasing order") +
                  ", but " + formatDouble(values[i]) + " follows " +
                  formatDouble(values[i - 1]));
    return false;
  }
  return true;
}

ExprPtr parseExprParam(TypeContext &ctx, const std::string &paramName) {
  const Value &v = ctx.param(paramName);
  ExprError err;
  ExprPtr e = parseExpr(v.asString(), err);
  if (!e)
    ctx.errorInString(v, err.offset, err.message);
  return e;
}

void forEachVar(
    const Expr &e,
    const std::function<void(const Expr &var, const Expr *index)> &fn) {
  if (e.kind == Expr::Kind::Var) {
    fn(e, nullptr);
    return;
  }
  if (e.kind == Expr::Kind::Index && !e.args.empty() &&
      e.args[0]->kind == Expr::Kind::Var) {
    fn(*e.args[0], &e);
    return;
  }
  for (const ExprPtr &a : e.args)
    forEachVar(*a, fn);
}

int64_t intOr(const Value &v, int64_t def) {
  return v.isNumber() ? v.asInt() : def;
}
double doubleOr(const Value &v, double def) {
  return v.isNumber() ? v.asDouble() : def;
}
bool boolOr(const Value &v, bool def) { return v.isBool() ? v.asBool() : def; }
std::string stringOr(const Value &v, const std::string &def) {
  return v.isString() ? v.asString() : def;
}

} // namespace sluice::detail
