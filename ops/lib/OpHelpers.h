//===- OpHelpers.h - Shared pieces of the registry entries ------*- C++ -*-===//
//
// Not installed. The parameters most element ops share (`field`, `as`,
// `on_error`) and the checks whose wording must be the same everywhere
// ("normalize needs a numeric tensor, but field 'data' is bytes").
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_LIB_OPHELPERS_H
#define SLUICE_OPS_LIB_OPHELPERS_H

#include "sluice/ops/Expr.h"
#include "sluice/ops/Registry.h"

#include <string>
#include <vector>

namespace sluice::detail {

/// A registry entry with its name and kind set; the *Ops.cpp files fill in
/// the rest.
inline OpDef newOp(std::string name, OpKind kind) {
  OpDef op;
  op.name = std::move(name);
  op.kind = kind;
  return op;
}
inline OpDef source(std::string name) {
  OpDef op = newOp(std::move(name), OpKind::Source);
  op.traits.count = Cardinality::Source;
  return op;
}
/// Element ops look at one record and give one record; they may raise data
/// errors unless the entry says otherwise (`traits.dataErrors = false`).
inline OpDef element(std::string name) {
  OpDef op = newOp(std::move(name), OpKind::Element);
  op.traits.perRecord = true;
  op.traits.count = Cardinality::OneToOne;
  op.traits.dataErrors = true;
  return op;
}
/// Record ops work on the stream; each entry states its traits.
inline OpDef record(std::string name) {
  OpDef op = newOp(std::move(name), OpKind::Record);
  op.traits.count = Cardinality::Same;
  return op;
}

/// `field` (required Field) with a doc line.
ParamSpec fieldParam(std::string doc = "The input field.");
/// `as` (optional String): write the result to a new field.
ParamSpec asParam();
/// `on_error: fail | skip` of every source.
ParamSpec onErrorParam();
/// `remote: {endpoint, region, profile, request_timeout, concurrency,
/// retries, chunk_size}` of every source: how s3:// and http(s):// file
/// names are read.
ParamSpec remoteParam();
/// `encoding: strict | replace` of readers of text (Utf8.h).
ParamSpec encodingParam();
/// `interpolation: bilinear | area | nearest`.
ParamSpec interpolationParam();
/// `antialias: true|false` of the resampling ops (default true).
ParamSpec antialiasParam();

/// "field 'data' is bytes" / "field 'image' is u8[?,?,3]".
std::string describeField(const std::string &name, const FieldType &t);
/// Dims written for people: "224x224", "?x300".
std::string dimsText(const std::vector<int64_t> &dims);

/// The name of the `field` param and its type.
const std::string &fieldName(TypeContext &ctx);
/// The output record: the input with the result written to `as` (when set)
/// or over `field`. Reports a bad `as` name.
RecordType withResult(TypeContext &ctx, FieldType result);

/// A hint for an op that got undecoded or textual data in `field`.
std::string nonNumericHint(const std::string &field, ElemType t);

/// Reports at `field` unless its element type is numeric and not bool:
/// "<op> needs <what>, but field 'x' is bytes". Returns false on error.
bool requireNumeric(TypeContext &ctx, const std::string &op,
                    const std::string &what = "a numeric tensor",
                    bool allowBool = false);
/// Reports at `field` unless its rank is in [lo, hi].
bool requireRank(TypeContext &ctx, const std::string &op, size_t lo, size_t hi,
                 const std::string &what);

/// True when `v` is representable in `t` (integer range, no fraction).
bool fitsIn(ElemType t, double v);

/// Reports an error at `at` unless `values` is strictly increasing (or
/// non-decreasing when `strict` is false). `what` names the list.
bool requireOrdered(TypeContext &ctx, const Value &at,
                    const std::vector<double> &values, bool strict,
                    const std::string &what);

/// Reports a bad field name written by the user (as, rename targets...).
bool requireFieldName(TypeContext &ctx, const Value &at);

/// Parses the expression in param `paramName`; reports parse errors inside
/// the string. Null on error.
ExprPtr parseExprParam(TypeContext &ctx, const std::string &paramName);

/// Visits every Var node (including the base of Index nodes) with the Index
/// node around it, or null.
void forEachVar(
    const Expr &e,
    const std::function<void(const Expr &var, const Expr *index)> &fn);

/// Integer value of `v`, or `def` when null (defaults are normally filled in
/// by the front end; this keeps rules total).
int64_t intOr(const Value &v, int64_t def);
double doubleOr(const Value &v, double def);
bool boolOr(const Value &v, bool def);
std::string stringOr(const Value &v, const std::string &def);

} // namespace sluice::detail

#endif // SLUICE_OPS_LIB_OPHELPERS_H
