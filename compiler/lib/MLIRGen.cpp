//===- MLIRGen.cpp - A checked spec as a sluice module --------------------===//
//
// One stage op per source/step, in order. Registry ops that have a dedicated
// op (`sluice.<registry name>`, e.g. `sluice.batch`) become that op with one
// inherent attribute per parameter; other element ops become
// `sluice.element`. Every op is located at its line in the spec, so a
// verifier error points there.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/MLIRGen.h"
#include "sluice/compiler/Interop.h"
#include "sluice/compiler/SluiceOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace sluice::ir;

namespace sluice::compiler {
namespace {

class Generator {
public:
  Generator(MLIRContext &ctx, const dsl::Spec &spec)
      : ctx(ctx), spec(spec), builder(&ctx) {}

  OwningOpRef<ModuleOp> generate() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc(spec.loc));
    builder.setInsertionPointToEnd(module->getBody());
    const dsl::Distributed &d = spec.distributed;
    auto pipeline = builder.create<PipelineOp>(
        pipelineLoc(), builder.getStringAttr(spec.pipeline),
        builder.getIntegerAttr(builder.getIntegerType(64, /*isSigned=*/false),
                               spec.seed),
        builder.getI64IntegerAttr(spec.epochs),
        builder.getI64IntegerAttr(spec.budget.cores),
        builder.getI64IntegerAttr(spec.budget.memoryBytes), schedule(),
        spec.scheduleAutoWritten ? builder.getUnitAttr() : UnitAttr(),
        d.rank ? builder.getI64IntegerAttr(*d.rank) : IntegerAttr(),
        d.worldSize ? builder.getI64IntegerAttr(*d.worldSize) : IntegerAttr());
    builder.setInsertionPointToStart(&pipeline.getBody().emplaceBlock());

    mlir::Value stream = stage(spec.source, nullptr);
    for (const dsl::Step &step : spec.steps) {
      if (!stream)
        break;
      stream = stage(step, stream);
    }
    if (!stream)
      return nullptr;
    builder.create<OutputOp>(fileLoc(spec.loc), stream);
    if (failed(verify(*module)))
      return nullptr;
    return module;
  }

private:
  Location fileLoc(SourceLoc loc) {
    return FileLineColLoc::get(&ctx, spec.file, loc.line, loc.col);
  }

  /// The spec's start, with where `distributed:` sets rank and world size.
  Location pipelineLoc() {
    SmallVector<Location> locs{fileLoc(spec.loc)};
    const dsl::Distributed &d = spec.distributed;
    if (d.rank && d.rankLoc.valid())
      locs.push_back(
          NameLoc::get(builder.getStringAttr("rank"), fileLoc(d.rankLoc)));
    if (d.worldSize && d.worldSizeLoc.valid())
      locs.push_back(NameLoc::get(builder.getStringAttr("world_size"),
                                  fileLoc(d.worldSizeLoc)));
    return locs.size() == 1 ? locs[0] : FusedLoc::get(&ctx, locs);
  }

  /// The step's position, carrying its parameters as the spec wrote them.
  Location stepLoc(const dsl::Step &step) {
    DictionaryAttr written = builder.getDictionaryAttr(
        {builder.getNamedAttr("op", builder.getStringAttr(step.op)),
         builder.getNamedAttr("params", specLayout(&ctx, step.params))});
    return NameLoc::get(builder.getStringAttr(step.name),
                        FusedLoc::get(&ctx, {fileLoc(step.loc)}, written));
  }

  /// `{step = {parallelism = 4, prefetch = 2, cache = "memory"}}`, or null
  /// for `schedule: auto`.
  DictionaryAttr schedule() {
    if (spec.scheduleAuto)
      return nullptr;
    SmallVector<NamedAttribute> steps;
    for (const auto &[name, knobs] : spec.schedule) {
      SmallVector<NamedAttribute> entries;
      if (knobs.parallelism)
        entries.push_back(builder.getNamedAttr(
            "parallelism", builder.getI64IntegerAttr(*knobs.parallelism)));
      if (knobs.prefetch)
        entries.push_back(builder.getNamedAttr(
            "prefetch", builder.getI64IntegerAttr(*knobs.prefetch)));
      if (knobs.cache)
        entries.push_back(
            builder.getNamedAttr("cache", builder.getStringAttr(*knobs.cache)));
      steps.push_back(
          builder.getNamedAttr(name, builder.getDictionaryAttr(entries)));
    }
    return builder.getDictionaryAttr(steps);
  }

  /// The dedicated op for registry op `name`, if the dialect has one.
  std::optional<RegisteredOperationName> dedicatedOp(llvm::StringRef name) {
    if (name == "source" || name == "element")
      return std::nullopt;
    std::optional<RegisteredOperationName> info =
        RegisteredOperationName::lookup(("sluice." + name).str(), &ctx);
    if (!info || !info->hasInterface<StepOpInterface>())
      return std::nullopt;
    return info;
  }

  /// Builds the op of one step; null (after an error) if there is none.
  mlir::Value stage(const dsl::Step &step, mlir::Value input) {
    Location loc = stepLoc(step);
    if (!step.def) {
      emitError(loc) << "internal: step '" << step.name
                     << "' has no registry entry";
      return nullptr;
    }
    StreamType type = convertStreamType(&ctx, step.outputType);
    DictionaryAttr params = convertParams(&ctx, step.params, step.def);
    StringAttr name =
        step.name == step.op ? StringAttr() : builder.getStringAttr(step.name);

    if (step.def->kind == OpKind::Source) {
      if (input) {
        emitError(loc) << "internal: source '" << step.op << "' used as a step";
        return nullptr;
      }
      return builder.create<SourceOp>(loc, type, step.op, params, name);
    }
    if (!input) {
      emitError(loc) << "internal: the first stage '" << step.op
                     << "' is not a source";
      return nullptr;
    }
    if (std::optional<RegisteredOperationName> info = dedicatedOp(step.op)) {
      OperationState state(loc, *info);
      state.addOperands(input);
      state.addTypes(type);
      llvm::ArrayRef<StringAttr> inherent = info->getAttributeNames();
      for (NamedAttribute param : params) {
        if (!llvm::is_contained(inherent, param.getName()) ||
            param.getName() == "name") {
          emitError(loc) << "internal: " << info->getStringRef()
                         << " has no attribute for registry parameter '"
                         << param.getName().getValue()
                         << "'; add it to SluiceOps.td";
          return nullptr;
        }
        // Null parameters (unset optionals) are simply absent attributes.
        if (!isa<UnitAttr>(param.getValue()))
          state.addAttribute(param.getName(), param.getValue());
      }
      if (name)
        state.addAttribute("name", name);
      return builder.create(state)->getResult(0);
    }
    if (step.def->kind != OpKind::Element) {
      emitError(loc) << "internal: record op '" << step.op
                     << "' has no sluice dialect op; add one to SluiceOps.td";
      return nullptr;
    }
    return builder.create<ElementOp>(loc, type, step.op, input, params, name);
  }

  MLIRContext &ctx;
  const dsl::Spec &spec;
  OpBuilder builder;
};

} // namespace

Attribute specLayout(MLIRContext *ctx, const Value &value) {
  Builder b(ctx);
  SmallVector<Attribute> out;
  auto pos = b.getDenseI64ArrayAttr(
      {value.loc().line, value.loc().col, value.contentOffset()});
  switch (value.kind()) {
  case Value::Kind::Map:
    out = {b.getStringAttr("m"), pos};
    for (const auto &[key, item] : value.entries()) {
      out.push_back(b.getStringAttr(key));
      out.push_back(specLayout(ctx, item));
    }
    break;
  case Value::Kind::List:
    out = {b.getStringAttr("l"), pos};
    for (const Value &item : value.items())
      out.push_back(specLayout(ctx, item));
    break;
  default:
    out = {b.getStringAttr("s"), pos, convertValue(ctx, value)};
    break;
  }
  return b.getArrayAttr(out);
}

std::optional<Value> readSpecLayout(Attribute attr) {
  auto array = dyn_cast_or_null<ArrayAttr>(attr);
  if (!array || array.size() < 2)
    return std::nullopt;
  auto kind = dyn_cast<StringAttr>(array[0]);
  auto pos = dyn_cast<DenseI64ArrayAttr>(array[1]);
  if (!kind || !pos || pos.size() != 3)
    return std::nullopt;
  Value out;
  if (kind.getValue() == "m") {
    if (array.size() % 2 != 0)
      return std::nullopt;
    out = Value::map();
    for (size_t i = 2; i < array.size(); i += 2) {
      auto key = dyn_cast<StringAttr>(array[i]);
      std::optional<Value> item = readSpecLayout(array[i + 1]);
      if (!key || !item)
        return std::nullopt;
      out.set(key.str(), std::move(*item));
    }
  } else if (kind.getValue() == "l") {
    std::vector<Value> items;
    for (size_t i = 2; i < array.size(); ++i) {
      std::optional<Value> item = readSpecLayout(array[i]);
      if (!item)
        return std::nullopt;
      items.push_back(std::move(*item));
    }
    out = Value::list(std::move(items));
  } else if (kind.getValue() == "s" && array.size() == 3) {
    std::string error;
    if (!convertAttribute(array[2], out, error))
      return std::nullopt;
  } else {
    return std::nullopt;
  }
  out.setLoc(SourceLoc{static_cast<int>(pos[0]), static_cast<int>(pos[1])});
  out.setContentOffset(static_cast<int>(pos[2]));
  return out;
}

std::optional<FileLineColLoc> findFileLoc(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return file;
  if (auto name = dyn_cast<NameLoc>(loc))
    return findFileLoc(name.getChildLoc());
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return findFileLoc(call.getCallee());
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location sub : fused.getLocations())
      if (auto file = findFileLoc(sub))
        return file;
  return std::nullopt;
}

OwningOpRef<ModuleOp> mlirGen(MLIRContext &context, const dsl::Spec &spec) {
  return Generator(context, spec).generate();
}

std::vector<std::string> registryMismatches(MLIRContext &context,
                                            size_t *checked) {
  std::vector<std::string> problems;
  size_t count = 0;
  Dialect *dialect = context.getOrLoadDialect<SluiceDialect>();
  for (RegisteredOperationName info : context.getRegisteredOperations()) {
    if (&info.getDialect() != dialect || !info.hasInterface<StepOpInterface>())
      continue;
    llvm::StringRef name =
        info.getStringRef().drop_front(dialect->getNamespace().size() + 1);
    if (name == "source" || name == "element")
      continue;
    ++count;
    const OpDef *def = Registry::instance().find(name.str());
    if (!def) {
      problems.push_back(info.getStringRef().str() +
                         ": no op registry entry named '" + name.str() + "'");
      continue;
    }
    llvm::ArrayRef<StringAttr> attrs = info.getAttributeNames();
    for (const ParamSpec &param : def->params)
      if (param.name == "name" ||
          !llvm::any_of(attrs, [&](StringAttr a) { return a == param.name; }))
        problems.push_back(info.getStringRef().str() +
                           ": no attribute for registry parameter '" +
                           param.name + "'");
    for (StringAttr attr : attrs)
      if (attr != "name" && !def->findParam(attr.str()))
        problems.push_back(info.getStringRef().str() + ": attribute '" +
                           attr.str() + "' is no parameter of '" + name.str() +
                           "' in the registry");
  }
  if (checked)
    *checked = count;
  return problems;
}

} // namespace sluice::compiler
