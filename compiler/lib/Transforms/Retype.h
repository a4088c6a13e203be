//===- Retype.h - Recomputing stage types after a graph rewrite -*- C++ -*-===//
//
// Internal to compiler/lib/Transforms. Passes that move a stage or drop
// fields change the record type flowing through the stages after the
// change; rather than patching types by hand (and restating each op's type
// rule), they re-run the registry type rule of every later stage, exactly
// as the verifier will, and store what it infers.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_LIB_TRANSFORMS_RETYPE_H
#define SLUICE_COMPILER_LIB_TRANSFORMS_RETYPE_H

#include "sluice/compiler/Interop.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Registry.h"

#include <optional>
#include <string>

namespace sluice::compiler::detail {

/// A type rule run on a hypothetical input: problems are collected rather
/// than reported.
class ProbeTypeContext final : public sluice::TypeContext {
public:
  ProbeTypeContext(const sluice::RecordType &input, const sluice::Value &params)
      : input_(input), params_(params) {}
  const sluice::RecordType &input() const override { return input_; }
  const sluice::Value &params() const override { return params_; }
  void error(const sluice::Value &, std::string message, std::string) override {
    fail(message);
  }
  void errorAtOp(std::string message, std::string) override { fail(message); }
  void errorInString(const sluice::Value &, size_t, std::string message,
                     std::string) override {
    fail(message);
  }
  bool failed() const override { return !firstError.empty(); }
  std::string resolvePath(const std::string &path) const override {
    return path;
  }
  std::string firstError;

private:
  void fail(const std::string &message) {
    if (firstError.empty())
      firstError = message.empty() ? "(no message)" : message;
  }
  const sluice::RecordType &input_;
  const sluice::Value &params_;
};

/// The stage's registry parameters with defaults filled, as the front end
/// hands them to type rules; nullopt (and `error`) when unreadable.
inline std::optional<sluice::Value> stageParams(ir::StepOpInterface stage,
                                                const sluice::OpDef &def,
                                                std::string &error) {
  sluice::Value params;
  if (!convertAttribute(stage.getRegistryParams(), params, error))
    return std::nullopt;
  for (const sluice::ParamSpec &spec : def.params)
    if (!params.has(spec.name) && spec.defaultValue)
      params.set(spec.name, *spec.defaultValue);
  return params;
}

/// Re-infers the output type of `stage` (not a source) from its current
/// input type; false with `error` when its rule rejects the input.
inline bool retypeStep(ir::StepOpInterface stage, std::string &error) {
  const sluice::OpDef *def =
      sluice::Registry::instance().find(stage.getRegistryName().str());
  if (!def || !def->typeRule) {
    error = "'" + stage.getRegistryName().str() + "' has no type rule";
    return false;
  }
  std::optional<sluice::Value> params = stageParams(stage, *def, error);
  if (!params)
    return false;
  sluice::RecordType in =
      convertRecordType(stage.getInputStream().getType().getRecordType());
  ProbeTypeContext ctx(in, *params);
  sluice::RecordType out = def->typeRule(ctx);
  if (ctx.failed()) {
    error = ctx.firstError;
    return false;
  }
  stage.getOutputStream().setType(convertStreamType(stage->getContext(), out));
  return true;
}

/// Re-infers the types of every stage after `from` in its pipeline, in
/// order; false (with the stage and the reason) if one rejects its input.
inline bool retypeAfter(mlir::Operation *from, std::string &error) {
  for (mlir::Operation *op = from->getNextNode(); op; op = op->getNextNode())
    if (auto stage = mlir::dyn_cast<ir::StepOpInterface>(op))
      if (!retypeStep(stage, error)) {
        error = "'" + stage.getStepName().str() + "': " + error;
        return false;
      }
  return true;
}

} // namespace sluice::compiler::detail

#endif // SLUICE_COMPILER_LIB_TRANSFORMS_RETYPE_H
