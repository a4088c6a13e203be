//===- PushProjections.cpp - Never produce fields nobody reads ------------===//
//
// `select: [image, label]` at the end of a pipeline says which fields the
// training loop reads; everything upstream that only feeds the dropped
// fields is wasted work. This pass computes, walking the stage chain from
// `sluice.output` back to the source, the set of fields each point of the
// pipeline must carry (what later stages read: filter predicates, the
// `field` of element steps, the output), and then:
//  * csv/tsv sources get `read: [columns]`: the other columns' cells are
//    still split and counted (a line with too few or too many cells is the
//    same error), but never converted or checked;
//  * tfrecord sources lose the `features` nobody reads: they are skipped as
//    unknown keys are, never parsed;
//  * element steps whose result nobody reads are removed (a `decode_image`
//    whose image is dropped is never run: only its label survives);
//  * `select` lists and `rename` mappings lose the fields that no longer
//    exist.
// Types after every change are re-inferred by the registry type rules.
//
// The contract, stated in docs/ops.md (select) and the README: outputs are
// byte-identical with the pass off, except that a data error in a value
// nobody reads is no longer found (a malformed cell in an unread column, a
// bad unread feature, a corrupt image whose pixels are dropped): with
// `on_error: skip` that record is kept rather than skipped, with `fail` the
// run goes on. This is the choice Spark's CSV column pruning makes; turn the
// pass off (--disable-pass sluice-push-projections) to check every value.
//
//===----------------------------------------------------------------------===//
#include "Retype.h"
#include "StepParams.h"

#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Expr.h"
#include "sluice/ops/Registry.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-push-projections"

namespace sluice::compiler {
#define GEN_PASS_DEF_PUSHPROJECTIONS
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::resultField;
using sluice::compiler::detail::stringParam;

namespace {

using FieldSet = llvm::StringSet<>;

std::string listed(const std::vector<std::string> &names) {
  std::string s;
  for (const std::string &n : names)
    s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

struct PushProjectionsPass
    : sluice::compiler::impl::PushProjectionsBase<PushProjectionsPass> {
  using PushProjectionsBase::PushProjectionsBase;

  void runOnOperation() override {
    getOperation()->walk([&](PipelineOp pipeline) {
      if (failed(run(pipeline)))
        signalPassFailure();
    });
  }

  /// The fields `stage` needs in its input for `needed` in its output; sets
  /// `dead` when the stage computes nothing anyone reads.
  FieldSet neededBefore(StepOpInterface stage, const FieldSet &needed,
                        bool &dead) {
    dead = false;
    Operation *op = stage.getOperation();
    RecordType in = stage.getInputStream().getType().getRecordType();
    auto all = [&] {
      FieldSet s;
      for (StringAttr n : in.getNames())
        s.insert(n.getValue());
      return s;
    };
    if (auto filter = dyn_cast<FilterOp>(op)) {
      FieldSet s = needed;
      sluice::ExprError err;
      if (sluice::ExprPtr e = sluice::parseExpr(filter.getWhere().str(), err))
        for (const std::string &v : sluice::exprVariables(*e))
          s.insert(v);
      else
        return all();
      return s;
    }
    if (isa<SelectOp>(op))
      return needed; // it drops the others; the names are unchanged
    if (auto rename = dyn_cast<RenameOp>(op)) {
      // A mapping renames all its fields at once ({a: b, b: a} swaps them):
      // every name is looked up in `needed` as it was after the rename, never
      // in the set being built (which already holds some old names).
      FieldSet s = needed;
      for (NamedAttribute entry : rename.getMapping()) {
        auto to = dyn_cast<StringAttr>(entry.getValue());
        if (!to)
          return all();
        s.erase(to.getValue());
      }
      for (NamedAttribute entry : rename.getMapping())
        if (needed.contains(cast<StringAttr>(entry.getValue()).getValue()))
          s.insert(entry.getName().getValue());
      return s;
    }
    const sluice::OpDef *def =
        sluice::Registry::instance().find(stage.getRegistryName().str());
    bool element = isa<MapOp>(op) || (isa<ElementOp>(op) && def &&
                                      def->kind == sluice::OpKind::Element);
    if (!element)
      return needed; // record ops pass every field through
    DictionaryAttr params = stage.getRegistryParams();
    std::optional<StringRef> field = stringParam(params, "field");
    std::optional<StringRef> written = resultField(params);
    if (!field || !written)
      return all(); // reads and writes unknown fields
    FieldSet s = needed;
    if (!needed.contains(*written)) {
      dead = true;
      return s;
    }
    s.erase(*written);
    s.insert(*field);
    return s;
  }

  LogicalResult run(PipelineOp pipeline) {
    Block &body = pipeline.getBody().front();
    SmallVector<StepOpInterface> stages;
    for (Operation &op : body.without_terminator())
      if (auto s = dyn_cast<StepOpInterface>(op))
        stages.push_back(s);
    if (stages.empty() || stages.front().getInputStream())
      return success(); // not a simple chain from a source
    std::optional<DictionaryAttr> schedule = pipeline.getSchedule();

    // Backward: the fields needed after each stage.
    FieldSet needed;
    for (StringAttr n : pipeline.getOutputOp()
                            .getStream()
                            .getType()
                            .getRecordType()
                            .getNames())
      needed.insert(n.getValue());
    std::vector<FieldSet> neededAfter(stages.size());
    SmallVector<StepOpInterface> dead;
    for (size_t i = stages.size(); i-- > 1;) {
      neededAfter[i] = needed;
      bool isDead = false;
      FieldSet before = neededBefore(stages[i], needed, isDead);
      if (isDead) {
        if (schedule && schedule->contains(stages[i].getStepName())) {
          isDead = false; // the schedule names it: keep its knobs meaningful
          before.insert(*stringParam(stages[i].getRegistryParams(), "field"));
        } else {
          dead.push_back(stages[i]);
        }
      }
      needed = std::move(before);
    }
    neededAfter[0] = needed;

    bool changed = false;
    // Remove the dead element steps.
    for (StepOpInterface s : dead) {
      std::optional<StringRef> written = resultField(s.getRegistryParams());
      LLVM_DEBUG(llvm::dbgs() << "removing '" << s.getStepName() << "'\n");
      if (emitRemarks)
        s->emitRemark() << "removed '" << s.getStepName()
                        << "': nobody downstream reads '" << *written
                        << "', so it is never computed";
      s.getOutputStream().replaceAllUsesWith(s.getInputStream());
      s->erase();
      ++numRemoved;
      changed = true;
    }
    // Trim select lists to what is still needed (a select drops whatever
    // else reaches it, so a field it no longer lists is simply dropped).
    for (size_t i = 1; i < stages.size(); ++i) {
      if (llvm::is_contained(dead, stages[i]))
        continue;
      if (auto select = dyn_cast<SelectOp>(stages[i].getOperation())) {
        SmallVector<Attribute> keep;
        for (StringAttr f : select.getFields().getAsRange<StringAttr>())
          if (neededAfter[i].contains(f.getValue()))
            keep.push_back(f);
        if (keep.size() != select.getFields().size() && !keep.empty()) {
          select.setFieldsAttr(ArrayAttr::get(&getContext(), keep));
          changed = true;
        }
      }
    }
    // The source produces only what is needed.
    auto source = cast<SourceOp>(stages.front().getOperation());
    if (pruneSource(source, neededAfter[0]))
      changed = true;
    if (!changed)
      return success();
    // Forward, in order: a rename forgets the entries whose field no longer
    // reaches it, then every stage's type is re-inferred. A rename entry is
    // dropped only when its field is gone, never because nobody reads its
    // new name: a field left under its old name could collide with another
    // entry's new name (a swap, {a: b, b: a}) or a later step's `as`.
    for (Operation *op = source->getNextNode(); op; op = op->getNextNode()) {
      auto stage = dyn_cast<StepOpInterface>(op);
      if (!stage)
        continue;
      if (auto rename = dyn_cast<RenameOp>(op)) {
        llvm::StringSet<> present;
        for (StringAttr n :
             rename.getInput().getType().getRecordType().getNames())
          present.insert(n.getValue());
        SmallVector<NamedAttribute> keep;
        for (NamedAttribute entry : rename.getMapping())
          if (present.contains(entry.getName().getValue()))
            keep.push_back(entry);
        if (keep.size() != rename.getMapping().size())
          rename.setMappingAttr(DictionaryAttr::get(&getContext(), keep));
      }
      std::string error;
      if (!sluice::compiler::detail::retypeStep(stage, error))
        return pipeline.emitError()
               << "sluice-push-projections left an ill-typed pipeline: '"
               << stage.getStepName() << "': " << error;
    }
    // A select whose fields are now exactly its input's, in order, does
    // nothing: drop it, as sluice-eliminate-noops would have.
    for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
      if (auto select = dyn_cast<SelectOp>(op))
        if (select.getInput().getType() == select.getOutput().getType() &&
            !(schedule && schedule->contains(select.getStepName()))) {
          if (emitRemarks)
            select->emitRemark()
                << "removed '" << select.getStepName()
                << "': the fields it keeps are now all that reach it";
          select.getOutput().replaceAllUsesWith(select.getInput());
          select->erase();
          ++numRemoved;
        }
    return success();
  }

  /// Gives csv/tsv a `read` list and tfrecord a shorter `features` list;
  /// sets the source's type to the fields kept. False if unchanged.
  bool pruneSource(SourceOp source, const FieldSet &needed) {
    StringRef kind = source.getKind();
    RecordType type = source.getOutput().getType().getRecordType();
    std::vector<std::string> keep, drop;
    for (StringAttr n : type.getNames())
      (needed.contains(n.getValue()) ? keep : drop).push_back(n.str());
    if (drop.empty() || keep.empty())
      return false;
    DictionaryAttr params = source.getParams();
    NamedAttrList attrs(params);
    // How the source reads fewer fields is asked of its entry.
    const sluice::OpDef *def = sluice::Registry::instance().find(kind);
    sluice::Projection how =
        def ? def->traits.projection : sluice::Projection::None;
    const char *param = def ? def->traits.projectionParam : nullptr;
    if (!param)
      how = sluice::Projection::None;
    if (how == sluice::Projection::ListFields) {
      SmallVector<Attribute> names;
      for (const std::string &k : keep)
        names.push_back(StringAttr::get(&getContext(), k));
      attrs.set(param, ArrayAttr::get(&getContext(), names));
      if (emitRemarks)
        source->emitRemark()
            << kind << " reads only " << listed(keep) << ": the cells of "
            << listed(drop)
            << " are counted but never converted, since nobody reads them";
    } else if (how == sluice::Projection::KeepEntries) {
      auto features = params.getAs<ArrayAttr>(param);
      if (!features)
        return false;
      SmallVector<Attribute> kept;
      for (Attribute f : features) {
        auto d = dyn_cast<DictionaryAttr>(f);
        if (!d)
          return false;
        std::optional<StringRef> name = stringParam(d, "as");
        if (!name)
          name = stringParam(d, "name");
        if (!name)
          return false;
        if (needed.contains(*name))
          kept.push_back(f);
      }
      attrs.set(param, ArrayAttr::get(&getContext(), kept));
      if (emitRemarks)
        source->emitRemark() << kind << " parses only " << listed(keep)
                             << ": the features " << listed(drop)
                             << " are skipped unparsed, since nobody reads "
                                "them";
    } else {
      return false;
    }
    source.setParamsAttr(attrs.getDictionary(&getContext()));
    SmallVector<StringAttr> names;
    SmallVector<Type> types;
    for (auto [n, t] : llvm::zip(type.getNames(), type.getTypes()))
      if (needed.contains(n.getValue())) {
        names.push_back(n);
        types.push_back(t);
      }
    source.getOutput().setType(StreamType::get(
        &getContext(), RecordType::get(&getContext(), names, types)));
    ++numPruned;
    return true;
  }
};

} // namespace
