//===- PlanGen.cpp - The runtime Plan of an optimized sluice module -------===//
//
// Parameters come back from attributes with their values intact but their
// keys sorted and their spec positions gone. The runtime compares and prints
// parameters (a type rule re-run at run time points errors at a value, an
// expression error at a column inside it), so the Plan restores both from
// what the spec wrote, which each step's location carries (MLIRGen.h),
// wherever the optimized IR still holds it.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/PlanGen.h"
#include "sluice/compiler/Interop.h"
#include "sluice/compiler/MLIRGen.h"
#include "sluice/compiler/SluiceOps.h"

#include <map>

using namespace mlir;
using namespace sluice::ir;

namespace sluice::compiler {
namespace {

const ParamSpec *findSpec(const std::vector<ParamSpec> *specs,
                          const std::string &name) {
  if (specs)
    for (const ParamSpec &spec : *specs)
      if (spec.name == name)
        return &spec;
  return nullptr;
}

/// The specs of the keys of maps held by a parameter of `spec`'s kind.
const std::vector<ParamSpec> *membersOf(const ParamSpec *spec) {
  if (spec &&
      (spec->kind == ParamKind::Struct || spec->kind == ParamKind::StructList))
    return &spec->members;
  return nullptr;
}

/// `value` (read back from attributes) laid out as the front end lays out
/// parameters: map keys in the order the spec wrote them, then in registry
/// order (where the front end adds defaults), then any others; unset
/// optionals the spec held as null (dedicated ops drop them) back as null;
/// and the spec position of every value the IR did not change. `members`
/// are the specs of the keys of `value` (a map) or of its items' keys (a
/// list of maps).
Value restoreLayout(const Value &value, const Value *original,
                    const std::vector<ParamSpec> *members) {
  bool sameKind = original && original->kind() == value.kind();
  Value out;
  switch (value.kind()) {
  case Value::Kind::Map: {
    out = Value::map();
    auto add = [&](const std::string &key) {
      if (out.has(key))
        return;
      const Value *item = value.get(key);
      const Value *originalItem = sameKind ? original->get(key) : nullptr;
      if (!item) {
        if (originalItem && originalItem->isNull())
          out.set(key, *originalItem);
        return;
      }
      out.set(key, restoreLayout(*item, originalItem,
                                 membersOf(findSpec(members, key))));
    };
    if (sameKind)
      for (const auto &entry : original->entries())
        add(entry.first);
    if (members)
      for (const ParamSpec &spec : *members)
        if (value.has(spec.name))
          add(spec.name);
    for (const auto &entry : value.entries())
      add(entry.first);
    break;
  }
  case Value::Kind::List: {
    bool sameSize =
        sameKind && original->items().size() == value.items().size();
    std::vector<Value> items;
    for (size_t i = 0; i < value.items().size(); ++i)
      items.push_back(restoreLayout(value.items()[i],
                                    sameSize ? &original->items()[i] : nullptr,
                                    members));
    out = Value::list(std::move(items));
    break;
  }
  default:
    out = value;
    sameKind = sameKind && *original == value;
    break;
  }
  if (sameKind) {
    out.setLoc(original->loc());
    out.setContentOffset(original->contentOffset());
  }
  return out;
}

/// Applies one schedule entry (`{parallelism, prefetch, cache}`, as the
/// pipeline verifier admits it) on top of what `stage` has.
void applyKnobs(DictionaryAttr knobs, runtime::PlanStep &stage) {
  StepSchedule entry;
  if (auto parallelism = knobs.getAs<IntegerAttr>("parallelism"))
    entry.parallelism = parallelism.getInt();
  if (auto prefetch = knobs.getAs<IntegerAttr>("prefetch"))
    entry.prefetch = prefetch.getInt();
  if (auto cache = knobs.getAs<StringAttr>("cache"))
    // `none` only exists to override `default`: it unsets the cache.
    entry.cache = cache.str();
  pinKnobs(stage.schedule, entry);
}

class PlanBuilder {
public:
  explicit PlanBuilder(PipelineOp pipeline) : pipeline(pipeline) {}

  FailureOr<runtime::Plan> build() {
    runtime::Plan plan;
    plan.name = pipeline.getSymName().str();
    if (std::optional<FileLineColLoc> file = findFileLoc(pipeline.getLoc()))
      plan.specFile = file->getFilename().str();
    plan.baseDir = specBaseDir(plan.specFile);
    plan.seed = pipeline.getSeed();
    plan.epochs = pipeline.getEpochs();
    plan.cores = pipeline.getCores();
    plan.memoryBytes = pipeline.getMemory();
    plan.scheduleAuto = pipeline.getScheduleAuto();
    plan.rank = pipeline.getRank();
    plan.worldSize = pipeline.getWorldSize();
    // Where `distributed:` wrote them: named parts of the pipeline's
    // location.
    if (auto fused = dyn_cast<FusedLoc>(pipeline.getLoc()))
      for (Location part : fused.getLocations())
        if (auto named = dyn_cast<NameLoc>(part))
          if (std::optional<FileLineColLoc> at = findFileLoc(named)) {
            SourceLoc loc{static_cast<int>(at->getLine()),
                          static_cast<int>(at->getColumn())};
            if (named.getName() == "rank")
              plan.rankLoc = loc;
            else if (named.getName() == "world_size")
              plan.worldSizeLoc = loc;
          }

    // The region is a chain by construction today; a pass that made it a
    // DAG (several sources, a split) needs a Plan that can say so first.
    mlir::Value stream;
    for (Operation &op : pipeline.getBody().front().without_terminator()) {
      auto stage = dyn_cast<StepOpInterface>(op);
      if (!stage)
        return op.emitError()
               << "internal: '" << op.getName()
               << "' is no pipeline stage, so the runtime cannot run it";
      if (stage.getInputStream() != stream)
        return op.emitError()
               << "internal: stage '" << stage.getStepName()
               << "' does not consume the stream of the stage before it; "
                  "a runtime Plan is a chain of stages";
      FailureOr<runtime::PlanStep> planStep = buildStep(stage);
      if (failed(planStep))
        return failure();
      if ((planStep->kind == OpKind::Source) != !stream)
        return op.emitError()
               << "internal: stage '" << planStep->name << "' ('"
               << planStep->op << "') "
               << (stream ? "is a source but not the first stage"
                          : "is the first stage but not a source");
      if (!stream)
        plan.source = std::move(*planStep);
      else if (auto group = op.getAttrOfType<StringAttr>("sluice.fused"))
        addFused(plan, group.getValue().str(), std::move(*planStep));
      else
        plan.steps.push_back(std::move(*planStep));
      stream = stage.getOutputStream();
    }
    if (!stream || pipeline.getOutputOp().getStream() != stream)
      return pipeline.emitError()
             << "internal: the pipeline does not deliver the stream of its "
                "last stage";
    return plan;
  }

private:
  /// A step of a sluice-fuse-maps group: the first opens a `fused_map`
  /// stage named after the group (its position and knobs are the first
  /// step's), the others join it; the stage's output type is the last's.
  static void addFused(runtime::Plan &plan, const std::string &group,
                       runtime::PlanStep step) {
    if (plan.steps.empty() || plan.steps.back().name != group ||
        plan.steps.back().op != "fused_map") {
      runtime::PlanStep fused;
      fused.name = group;
      fused.op = "fused_map";
      fused.kind = OpKind::Element;
      fused.params = Value::map();
      fused.params.set("steps", Value::list({}));
      fused.inputType = step.inputType;
      fused.loc = step.loc;
      fused.schedule = step.schedule;
      plan.steps.push_back(std::move(fused));
    }
    runtime::PlanStep &fused = plan.steps.back();
    std::vector<Value> names = fused.params["steps"].items();
    names.push_back(Value::string(step.name));
    fused.params.set("steps", Value::list(std::move(names)));
    fused.outputType = step.outputType;
    fused.schedule.parallelism =
        largerKnob(fused.schedule.parallelism, step.schedule.parallelism);
    fused.schedule.prefetch =
        largerKnob(fused.schedule.prefetch, step.schedule.prefetch);
    if (step.schedule.cache)
      fused.schedule.cache = step.schedule.cache;
    fused.fused.push_back(std::move(step));
  }

  FailureOr<runtime::PlanStep> buildStep(StepOpInterface stage) {
    Operation *op = stage.getOperation();
    runtime::PlanStep out;
    out.name = stage.getStepName().str();
    out.op = stage.getRegistryName().str();
    const OpDef *def = Registry::instance().find(out.op);
    if (!def)
      return op->emitError() << "internal: stage '" << out.name << "' runs '"
                             << out.op << "', which has no op registry entry";
    out.kind = def->kind;

    Value params = Value::map();
    for (NamedAttribute entry : stage.getRegistryParams()) {
      Value value;
      std::string error;
      if (!convertAttribute(entry.getValue(), value, error))
        return op->emitError()
               << "internal: parameter '" << entry.getName().getValue()
               << "' of stage '" << out.name << "': " << error;
      params.set(entry.getName().str(), std::move(value));
    }
    // A stage a pass created or changed into another op has nothing the
    // spec wrote to restore from.
    std::optional<Value> original = writtenParams(op->getLoc(), out);
    out.params =
        restoreLayout(params, original ? &*original : nullptr, &def->params);

    if (TypedValue<StreamType> input = stage.getInputStream())
      out.inputType = convertRecordType(input.getType().getRecordType());
    out.outputType =
        convertRecordType(stage.getOutputStream().getType().getRecordType());
    if (std::optional<FileLineColLoc> file = findFileLoc(op->getLoc())) {
      out.loc.line = static_cast<int>(file->getLine());
      out.loc.col = static_cast<int>(file->getColumn());
    }

    if (std::optional<DictionaryAttr> schedule = pipeline.getSchedule()) {
      if (auto knobs = schedule->getAs<DictionaryAttr>("default")) {
        applyKnobs(knobs, out);
        // The source's parallelism is its requests in flight (remote
        // objects): a default meant for the workers does not set it.
        if (!stage.getInputStream())
          out.schedule.parallelism.reset();
      }
      // A fused stage ("a+b") takes the knobs of each of its steps, in
      // order: the fusion passes fuse named steps only when their knobs
      // agree (parallelism on any, prefetch and cache on the last).
      llvm::StringRef rest = out.name;
      while (!rest.empty()) {
        auto [part, tail] = rest.split('+');
        if (auto knobs = schedule->getAs<DictionaryAttr>(part))
          applyKnobs(knobs, out);
        rest = tail;
      }
    }
    return out;
  }

  /// The parameters the spec wrote for stage `stage`, from its location
  /// (NameLoc(step, FusedLoc<{op, params}>[...]), MLIRGen.h): only while the
  /// stage is still that step running that op.
  static std::optional<Value> writtenParams(Location loc,
                                            const runtime::PlanStep &stage) {
    auto named = dyn_cast<NameLoc>(loc);
    if (!named || named.getName() != stage.name)
      return std::nullopt;
    auto fused = dyn_cast<FusedLoc>(named.getChildLoc());
    auto written =
        fused ? dyn_cast_or_null<DictionaryAttr>(fused.getMetadata()) : nullptr;
    if (!written)
      return std::nullopt;
    auto op = written.getAs<StringAttr>("op");
    if (!op || op.getValue() != stage.op)
      return std::nullopt;
    return readSpecLayout(written.get("params"));
  }

  PipelineOp pipeline;
};

} // namespace

std::string specBaseDir(const std::string &specFile) {
  size_t slash = specFile.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return specFile.substr(0, slash);
}

FailureOr<runtime::Plan> derivePlan(ModuleOp module) {
  auto pipelines = module.getOps<PipelineOp>();
  if (pipelines.empty())
    return module.emitError() << "internal: the module holds no "
                                 "sluice.pipeline to derive a Plan from";
  if (std::next(pipelines.begin()) != pipelines.end())
    return module.emitError()
           << "internal: the module holds more than one sluice.pipeline; a "
              "Plan runs exactly one";
  return PlanBuilder(*pipelines.begin()).build();
}

} // namespace sluice::compiler
