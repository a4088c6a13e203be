//===- Verifiers.cpp - Verifiers of the sluice ops ------------------------===//
//
// Each stage op first checks its own invariants with a message in the
// dialect's terms, then hands its parameters to the op registry: they are
// validated against the registry's parameter specs (a hand-written .mlir file
// has not been through the front end) and the registry's type rule must infer
// exactly the declared result type.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Interop.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Expr.h"
#include "sluice/ops/Registry.h"

#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::convertAttribute;
using sluice::compiler::convertRecordType;

//===----------------------------------------------------------------------===//
// Registry checks shared by all stages
//===----------------------------------------------------------------------===//

static std::string joinNames(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

static std::string didYouMean(llvm::StringRef word,
                              const std::vector<std::string> &candidates) {
  std::string best = sluice::closestMatch(word.str(), candidates);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

namespace {

/// Validates a parameter map against registry specs, filling defaults the
/// way the front end does, and reports problems as errors on `op`.
class ParamChecker {
public:
  ParamChecker(Operation *op, llvm::StringRef opName,
               const sluice::RecordType &input)
      : op(op), opName(opName.str()), input(input) {}

  bool check(const std::vector<sluice::ParamSpec> &specs, sluice::Value &map,
             const std::string &prefix) {
    std::vector<std::string> known;
    for (const sluice::ParamSpec &s : specs)
      known.push_back(s.name);
    for (const auto &entry : map.entries())
      if (!findSpec(specs, entry.first))
        error() << "'" << opName << "' has no parameter '" << prefix
                << entry.first << "'" << didYouMean(entry.first, known);
    for (const sluice::ParamSpec &spec : specs) {
      sluice::Value *v = map.get(spec.name);
      if (!v || v->isNull()) {
        if (spec.defaultValue && !spec.defaultValue->isNull())
          map.set(spec.name, *spec.defaultValue);
        else if (spec.required)
          error() << "'" << opName << "' is missing required parameter '"
                  << prefix << spec.name << "'";
        continue;
      }
      checkValue(spec, spec.kind, *v, prefix + spec.name);
    }
    return !failed;
  }

private:
  static const sluice::ParamSpec *
  findSpec(const std::vector<sluice::ParamSpec> &specs,
           const std::string &name) {
    for (const sluice::ParamSpec &s : specs)
      if (s.name == name)
        return &s;
    return nullptr;
  }

  InFlightDiagnostic error() {
    failed = true;
    return op->emitOpError();
  }

  InFlightDiagnostic bad(const std::string &path) {
    return error() << "parameter '" << path << "' of '" << opName << "' ";
  }

  void checkRange(const sluice::ParamSpec &spec, double x,
                  const std::string &path) {
    if (spec.min && (spec.minExclusive ? x <= *spec.min : x < *spec.min))
      bad(path) << "must be " << (spec.minExclusive ? "> " : ">= ") << *spec.min
                << ", got " << x;
    else if (spec.max && (spec.maxExclusive ? x >= *spec.max : x > *spec.max))
      bad(path) << "must be " << (spec.maxExclusive ? "< " : "<= ") << *spec.max
                << ", got " << x;
  }

  void checkField(const std::string &name, const std::string &path) {
    if (!input.find(name))
      bad(path) << "names no field of the input record: '" << name << "'"
                << didYouMean(name, input.names())
                << " (fields: " << joinNames(input.names()) << ")";
  }

  void checkValue(const sluice::ParamSpec &spec, sluice::ParamKind kind,
                  sluice::Value &v, const std::string &path) {
    using sluice::ParamKind;
    switch (kind) {
    case ParamKind::Bool:
      if (!v.isBool())
        bad(path) << "must be a boolean";
      return;
    case ParamKind::Int:
      if (!v.isInt())
        bad(path) << "must be an integer";
      else
        checkRange(spec, v.asDouble(), path);
      return;
    case ParamKind::Float:
      if (!v.isNumber()) {
        bad(path) << "must be a number";
        return;
      }
      v = sluice::Value::real(v.asDouble());
      checkRange(spec, v.asDouble(), path);
      return;
    case ParamKind::Size:
      if (v.isString()) {
        std::optional<int64_t> bytes = sluice::parseByteSize(v.asString());
        if (!bytes) {
          bad(path) << "'" << v.asString() << "' is not a byte size";
          return;
        }
        v = sluice::Value::integer(*bytes);
      }
      if (!v.isInt())
        bad(path) << "must be a byte size";
      else
        checkRange(spec, v.asDouble(), path);
      return;
    case ParamKind::String:
    case ParamKind::Expr:
      if (!v.isString())
        bad(path) << "must be a string";
      return;
    case ParamKind::Enum:
      if (!v.isString() || std::find(spec.choices.begin(), spec.choices.end(),
                                     v.asString()) == spec.choices.end())
        bad(path) << "must be one of " << joinNames(spec.choices);
      return;
    case ParamKind::DType:
      if (!v.isString() || !sluice::parseElemType(v.asString()))
        bad(path) << "must be an element type (u8, i32, i64, f32, ...)";
      return;
    case ParamKind::Field:
      if (!v.isString())
        bad(path) << "must be a field name";
      else
        checkField(v.asString(), path);
      return;
    case ParamKind::Struct:
      if (!v.isMap())
        bad(path) << "must be a dictionary";
      else
        check(spec.members, v, path + ".");
      return;
    case ParamKind::FieldMap:
      if (!v.isMap()) {
        bad(path) << "must be a dictionary {old_name = \"new_name\"}";
        return;
      }
      for (auto &[from, to] : v.entries()) {
        checkField(from, path);
        if (!to.isString() || to.asString().empty())
          bad(path) << "must map '" << from << "' to a non-empty name";
      }
      return;
    case ParamKind::IntList:
    case ParamKind::FloatList:
    case ParamKind::StringList:
    case ParamKind::FieldList:
    case ParamKind::StructList: {
      if (!v.isList()) {
        if (!spec.scalarOk || v.isMap()) {
          bad(path) << "must be a list";
          return;
        }
        std::vector<sluice::Value> items(
            spec.broadcastTo > 1 ? spec.broadcastTo : 1, v);
        v = sluice::Value::list(std::move(items));
      }
      ParamKind itemKind = kind == ParamKind::IntList      ? ParamKind::Int
                           : kind == ParamKind::FloatList  ? ParamKind::Float
                           : kind == ParamKind::FieldList  ? ParamKind::Field
                           : kind == ParamKind::StructList ? ParamKind::Struct
                                                           : ParamKind::String;
      for (auto [i, item] : llvm::enumerate(v.items()))
        checkValue(spec, itemKind, item, path + "[" + std::to_string(i) + "]");
      size_t n = v.items().size();
      if (n < spec.minLen || n > spec.maxLen)
        bad(path) << "has " << n << " values; it needs between " << spec.minLen
                  << " and "
                  << (spec.maxLen == std::numeric_limits<size_t>::max()
                          ? std::string("any number of")
                          : std::to_string(spec.maxLen));
      return;
    }
    }
  }

  Operation *op;
  std::string opName;
  const sluice::RecordType &input;
  bool failed = false;
};

/// The registry's view of a stage being verified: errors become op errors.
class VerifierTypeContext final : public sluice::TypeContext {
public:
  VerifierTypeContext(Operation *op, llvm::StringRef opName,
                      const sluice::RecordType &input,
                      const sluice::Value &params)
      : op(op), opName(opName.str()), input_(input), params_(params) {}

  const sluice::RecordType &input() const override { return input_; }
  const sluice::Value &params() const override { return params_; }
  void error(const sluice::Value &, std::string message,
             std::string hint) override {
    report(message, hint);
  }
  void errorAtOp(std::string message, std::string hint) override {
    report(message, hint);
  }
  void errorInString(const sluice::Value &at, size_t offset,
                     std::string message, std::string hint) override {
    report(message + " (at character " + std::to_string(offset + 1) + " of \"" +
               at.asString() + "\")",
           hint);
  }
  bool failed() const override { return failed_; }
  // Paths in IR are taken as written; a source's files are not re-read here.
  std::string resolvePath(const std::string &path) const override {
    return path;
  }

private:
  void report(const std::string &message, const std::string &hint) {
    failed_ = true;
    InFlightDiagnostic diag = op->emitOpError()
                              << "'" << opName << "': " << message;
    if (!hint.empty())
      diag.attachNote() << hint;
  }

  Operation *op;
  std::string opName;
  const sluice::RecordType &input_;
  const sluice::Value &params_;
  bool failed_ = false;
};

} // namespace

static sluice::RecordType recordOf(TypedValue<StreamType> stream) {
  return stream ? convertRecordType(stream.getType().getRecordType())
                : sluice::RecordType();
}

/// The registry half of every stage verifier.
static LogicalResult verifyStep(StepOpInterface stage) {
  Operation *op = stage.getOperation();
  llvm::StringRef name = stage.getRegistryName();
  sluice::Registry &registry = sluice::Registry::instance();
  const sluice::OpDef *def = registry.find(name.str());
  bool isSource = isa<SourceOp>(op);
  if (!def) {
    auto kind = isSource ? sluice::OpKind::Source : sluice::OpKind::Element;
    return op->emitOpError() << "'" << name << "' is not in the op registry"
                             << didYouMean(name, registry.names(kind));
  }
  if (isSource != (def->kind == sluice::OpKind::Source))
    return op->emitOpError() << "'" << name << "' is "
                             << (isSource ? "not a source" : "a source");
  if (isa<ElementOp>(op) && def->kind != sluice::OpKind::Element)
    return op->emitOpError()
           << "'" << name
           << "' is a record op; sluice.element holds element ops only";

  sluice::Value params;
  std::string error;
  if (!convertAttribute(stage.getRegistryParams(), params, error))
    return op->emitOpError() << error;
  sluice::RecordType input = recordOf(stage.getInputStream());
  ParamChecker checker(op, name, input);
  if (!checker.check(def->params, params, ""))
    return failure();
  // A source's type rule may read its files (an npy header, a CSV header);
  // the IR keeps the type the front end saw and stays valid without them.
  if (isSource || !def->typeRule)
    return success();

  VerifierTypeContext ctx(op, name, input, params);
  sluice::RecordType inferred = def->typeRule(ctx);
  if (ctx.failed())
    return failure();
  sluice::RecordType declared = recordOf(stage.getOutputStream());
  if (inferred != declared)
    return op->emitOpError()
           << "result record type does not match what '" << name
           << "' produces: declared {" << declared.str() << "}, inferred {"
           << inferred.str() << "}";
  return success();
}

static RecordType inputRecord(StepOpInterface stage) {
  return stage.getInputStream().getType().getRecordType();
}
static RecordType outputRecord(StepOpInterface stage) {
  return stage.getOutputStream().getType().getRecordType();
}

static LogicalResult verifyExpr(Operation *op, llvm::StringRef what,
                                llvm::StringRef text) {
  sluice::ExprError err;
  if (!sluice::parseExpr(text.str(), err))
    return op->emitOpError()
           << what << " \"" << text << "\" does not parse: " << err.message
           << " (at character " << err.offset + 1 << ")";
  return success();
}

static std::string fieldList(RecordType record) {
  std::vector<std::string> names;
  for (StringAttr n : record.getNames())
    names.push_back(n.str());
  return joinNames(names);
}

//===----------------------------------------------------------------------===//
// Pipeline structure
//===----------------------------------------------------------------------===//

LogicalResult PipelineOp::verify() {
  if (getSymName().empty())
    return emitOpError() << "needs a non-empty name";
  if (getEpochs() < 1)
    return emitOpError() << "epochs must be >= 1, got " << getEpochs();
  if (getCores() < 0)
    return emitOpError() << "budget cores must be >= 0 (0 = all), got "
                         << getCores();
  if (getMemory() < 0)
    return emitOpError() << "budget memory must be >= 0 bytes (0 = no limit), "
                            "got "
                         << getMemory();
  if (std::optional<DictionaryAttr> schedule = getSchedule()) {
    for (NamedAttribute step : *schedule) {
      auto knobs = dyn_cast<DictionaryAttr>(step.getValue());
      if (!knobs)
        return emitOpError() << "schedule of '" << step.getName().getValue()
                             << "' must be a dictionary of parallelism, "
                                "prefetch, cache";
      for (NamedAttribute knob : knobs) {
        llvm::StringRef key = knob.getName().getValue();
        auto intValue = dyn_cast<IntegerAttr>(knob.getValue());
        auto strValue = dyn_cast<StringAttr>(knob.getValue());
        bool ok =
            (key == "parallelism" && intValue && intValue.getInt() >= 1) ||
            (key == "prefetch" && intValue && intValue.getInt() >= 0) ||
            // `none` lets one step opt out of a `default` cache.
            (key == "cache" && strValue &&
             (strValue.getValue() == "memory" ||
              strValue.getValue() == "disk" || strValue.getValue() == "none"));
        if (!ok)
          return emitOpError()
                 << "schedule of '" << step.getName().getValue()
                 << "': bad setting " << key << " = " << knob.getValue()
                 << " (expected parallelism >= 1, prefetch >= 0, cache = "
                    "\"memory\", \"disk\" or \"none\")";
      }
    }
  }
  return success();
}

LogicalResult PipelineOp::verifyRegions() {
  Block &block = getBody().front();
  if (block.getNumArguments() != 0)
    return emitOpError() << "body must not have block arguments";
  if (block.empty() || !isa<OutputOp>(block.back()))
    return emitOpError() << "body must end with sluice.output";
  llvm::StringSet<> names;
  for (Operation &op : block.without_terminator()) {
    auto stage = dyn_cast<StepOpInterface>(op);
    if (!stage)
      return op.emitOpError() << "is not a pipeline stage";
    if (!names.insert(stage.getStepName()).second)
      return op.emitOpError() << "step name '" << stage.getStepName()
                              << "' is already used by an earlier stage";
    // Pipelines are chains: a stream that feeds two stages would need a
    // fan-out the runtime does not have, and an unused one is dead code.
    if (!stage.getOutputStream().hasOneUse())
      return op.emitOpError()
             << "output stream must have exactly one consumer, it has "
             << std::distance(stage.getOutputStream().use_begin(),
                              stage.getOutputStream().use_end());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Sources and generic element ops
//===----------------------------------------------------------------------===//

LogicalResult SourceOp::verify() { return verifyStep(*this); }
LogicalResult ElementOp::verify() { return verifyStep(*this); }

//===----------------------------------------------------------------------===//
// Dedicated stages
//===----------------------------------------------------------------------===//

LogicalResult MapOp::verify() {
  if (inputRecord(*this).indexOf(getField()) < 0)
    return emitOpError() << "field '" << getField()
                         << "' is not in the input record (fields: "
                         << fieldList(inputRecord(*this)) << ")";
  if (failed(verifyExpr(*this, "expression", getExpr())))
    return failure();
  return verifyStep(*this);
}

LogicalResult FilterOp::verify() {
  if (failed(verifyExpr(*this, "predicate", getWhere())))
    return failure();
  return verifyStep(*this);
}

LogicalResult SelectOp::verify() {
  RecordType in = inputRecord(*this);
  if (getFields().empty())
    return emitOpError() << "must keep at least one field";
  SmallVector<StringAttr> names;
  SmallVector<Type> types;
  llvm::StringSet<> seen;
  for (StringAttr field : getFields().getAsRange<StringAttr>()) {
    if (!seen.insert(field.getValue()).second)
      return emitOpError() << "field '" << field.getValue()
                           << "' is selected twice";
    Type type = in.getFieldType(field.getValue());
    if (!type)
      return emitOpError() << "field '" << field.getValue()
                           << "' is not in the input record (fields: "
                           << fieldList(in) << ")";
    names.push_back(field);
    types.push_back(type);
  }
  auto expected = RecordType::get(getContext(), names, types);
  if (expected != outputRecord(*this))
    return emitOpError() << "result record must be the selected fields in "
                            "the listed order: "
                         << expected;
  return verifyStep(*this);
}

LogicalResult RenameOp::verify() {
  RecordType in = inputRecord(*this);
  for (NamedAttribute entry : getMapping()) {
    if (in.indexOf(entry.getName().getValue()) < 0)
      return emitOpError() << "field '" << entry.getName().getValue()
                           << "' is not in the input record (fields: "
                           << fieldList(in) << ")";
    auto to = dyn_cast<StringAttr>(entry.getValue());
    if (!to || to.getValue().empty())
      return emitOpError() << "the new name of '" << entry.getName().getValue()
                           << "' must be a non-empty string";
  }
  return verifyStep(*this);
}

LogicalResult ShuffleOp::verify() {
  if (getBuffer() <= 0)
    return emitOpError() << "buffer must be > 0 records, got " << getBuffer();
  return verifyStep(*this);
}

/// The input record with a leading dimension `dim` on every field.
static RecordType batchedRecord(RecordType in, int64_t dim) {
  SmallVector<Type> types;
  for (Type t : in.getTypes()) {
    auto tensor = cast<RankedTensorType>(t);
    SmallVector<int64_t> shape{dim};
    llvm::append_range(shape, tensor.getShape());
    types.push_back(RankedTensorType::get(shape, tensor.getElementType()));
  }
  return RecordType::get(in.getContext(), in.getNames(), types);
}

LogicalResult BatchOp::verify() {
  if (getSize() <= 0)
    return emitOpError() << "batch size must be > 0, got " << getSize();
  RecordType expected =
      batchedRecord(inputRecord(*this),
                    getDropRemainder() ? getSize() : ShapedType::kDynamic);
  if (expected != outputRecord(*this))
    return emitOpError() << "result record must be the input with a leading "
                         << (getDropRemainder() ? std::to_string(getSize())
                                                : std::string("?"))
                         << " on every field: " << expected;
  return verifyStep(*this);
}

LogicalResult PaddedBatchOp::verify() {
  if (getSize() <= 0)
    return emitOpError() << "batch size must be > 0, got " << getSize();
  if (getLength() && *getLength() <= 0)
    return emitOpError() << "padded length must be > 0, got " << *getLength();
  return verifyStep(*this);
}

LogicalResult UnbatchOp::verify() {
  RecordType in = inputRecord(*this);
  for (auto [name, type] : llvm::zip_equal(in.getNames(), in.getTypes()))
    if (cast<RankedTensorType>(type).getRank() == 0)
      return emitOpError() << "field '" << name.getValue()
                           << "' is a scalar; every field needs a leading "
                              "dimension to unbatch";
  return verifyStep(*this);
}

LogicalResult RepeatOp::verify() {
  if (getCount() && *getCount() <= 0)
    return emitOpError() << "count must be > 0 (omit it to repeat forever), "
                            "got "
                         << *getCount();
  return verifyStep(*this);
}

LogicalResult TakeOp::verify() {
  if (getCount() < 0)
    return emitOpError() << "count must be >= 0, got " << getCount();
  return verifyStep(*this);
}

LogicalResult SkipOp::verify() {
  if (getCount() < 0)
    return emitOpError() << "count must be >= 0, got " << getCount();
  return verifyStep(*this);
}

LogicalResult ShardOp::verify() {
  if (getNumShards() <= 0)
    return emitOpError() << "num_shards must be > 0, got " << getNumShards();
  if (getIndex() < 0 || getIndex() >= getNumShards())
    return emitOpError() << "shard index must be in [0, " << getNumShards()
                         << "), got " << getIndex();
  return verifyStep(*this);
}

LogicalResult InterleaveOp::verify() {
  if (getCycleLength() <= 0)
    return emitOpError() << "cycle_length must be > 0, got "
                         << getCycleLength();
  if (getBlockLength() <= 0)
    return emitOpError() << "block_length must be > 0, got "
                         << getBlockLength();
  return verifyStep(*this);
}

LogicalResult CacheOp::verify() {
  if (getTo() != "memory" && getTo() != "disk")
    return emitOpError() << "cache must go to \"memory\" or \"disk\", got \""
                         << getTo() << "\"";
  return verifyStep(*this);
}

LogicalResult PrefetchOp::verify() {
  if (getBuffer() && *getBuffer() < 0)
    return emitOpError() << "buffer must be >= 0 records, got " << *getBuffer();
  return verifyStep(*this);
}
