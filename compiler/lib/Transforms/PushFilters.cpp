//===- PushFilters.cpp - Run filters as early as their fields allow -------===//
//
// A filter after an expensive element step (`decode_image`, a resize) that
// does not read that step's result can run first: the records it drops are
// then never decoded. The pass moves every `sluice.filter` up the chain, past
// element steps and `select`, until the step before it writes a field the
// predicate reads or is a record op that counts, reorders, groups or
// renames records.
//
// Why the survivors are unchanged:
//  * element steps are one record in, one record out, and do not look at
//    other records; a filter only drops records. Running the filter first
//    leaves the same records, and each surviving record gets the same values
//    because none of the crossed steps wrote a field the predicate reads.
//  * random steps draw from (seed, epoch, record index, step), and the
//    record index is the record's position in the source (Record::index):
//    filters do not renumber records, so moving a filter before a random
//    step leaves every surviving record's draws as they were. Only batch,
//    padded_batch and unbatch renumber; the filter never crosses them.
//  * shuffle, batch, padded_batch, unbatch, take, skip, shard, repeat,
//    cache, interleave, prefetch, rename and other filters are never crossed
//    (they count, group, reorder or rename records).
// What changes: a record the filter drops is no longer processed by the
// crossed steps, so a data error those steps would have raised on it (a
// corrupt image) is not reported; it is counted as filtered, not skipped.
//
//===----------------------------------------------------------------------===//
#include "StepParams.h"

#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Expr.h"
#include "sluice/ops/Registry.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Debug.h"

#include <algorithm>

#define DEBUG_TYPE "sluice-push-filters"

namespace sluice::compiler {
#define GEN_PASS_DEF_PUSHFILTERS
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::resultField;

namespace {

struct PushFiltersPass
    : sluice::compiler::impl::PushFiltersBase<PushFiltersPass> {
  using PushFiltersBase::PushFiltersBase;

  void runOnOperation() override {
    SmallVector<FilterOp> filters;
    getOperation()->walk([&](FilterOp f) { filters.push_back(f); });
    for (FilterOp f : filters)
      push(f);
  }

  /// Why `filter` (reading `vars`) cannot move before `stage`, or "".
  std::string blocker(StepOpInterface stage,
                      const std::vector<std::string> &vars,
                      std::optional<DictionaryAttr> schedule) {
    std::string name = "'" + stage.getStepName().str() + "'";
    if (isa<SelectOp>(stage.getOperation()))
      return ""; // the fields the filter reads exist before it too
    const sluice::OpDef *def =
        sluice::Registry::instance().find(stage.getRegistryName().str());
    bool element = isa<MapOp>(stage.getOperation()) ||
                   (def && def->kind == sluice::OpKind::Element &&
                    isa<ElementOp>(stage.getOperation()));
    if (!element)
      return name + " is a record op (" + stage.getRegistryName().str() +
             "): crossing it would change which records it sees";
    // A fixed schedule that caches after the step put a materialization
    // point there; moving the filter across it would change what is cached.
    if (schedule)
      for (llvm::StringRef entry : {stage.getStepName(), StringRef("default")})
        if (auto knobs = schedule->getAs<DictionaryAttr>(entry))
          if (auto cache = knobs.getAs<StringAttr>("cache")) {
            if (cache.getValue() != "none")
              return "the fixed schedule caches the output of " + name;
            break;
          }
    std::optional<StringRef> written = resultField(stage.getRegistryParams());
    if (!written)
      return name + " has no `field` parameter, so what it writes is unknown";
    RecordType in = stage.getInputStream().getType().getRecordType();
    for (const std::string &v : vars) {
      if (*written == v)
        return name + " writes '" + v + "', which the filter reads";
      if (in.indexOf(v) < 0)
        return "'" + v + "' does not exist before " + name;
    }
    return "";
  }

  void push(FilterOp filter) {
    sluice::ExprError err;
    sluice::ExprPtr e = sluice::parseExpr(filter.getWhere().str(), err);
    if (!e)
      return; // the verifier reports it
    std::vector<std::string> vars = sluice::exprVariables(*e);
    auto pipeline = filter->getParentOfType<PipelineOp>();
    std::optional<DictionaryAttr> schedule =
        pipeline ? pipeline.getSchedule() : std::nullopt;

    // Walk up while the step before can be crossed.
    SmallVector<StepOpInterface> crossed;
    mlir::Value in = filter.getInput();
    std::string stop;
    while (auto stage = dyn_cast_or_null<StepOpInterface>(in.getDefiningOp())) {
      if (!stage.getInputStream()) {
        stop = "it already follows the source";
        break;
      }
      if (!in.hasOneUse())
        break;
      stop = blocker(stage, vars, schedule);
      if (!stop.empty())
        break;
      crossed.push_back(stage);
      in = stage.getInputStream();
    }
    if (crossed.empty()) {
      LLVM_DEBUG(llvm::dbgs()
                 << "'" << filter.getStepName() << "' stays: " << stop << "\n");
      return;
    }

    // Rewire: ... -> in -> filter -> first crossed ... last crossed -> users.
    StepOpInterface first = crossed.back(), last = crossed.front();
    mlir::Value out = filter.getOutput();
    out.replaceAllUsesWith(filter.getInput());
    filter->setOperand(0, in);
    filter->moveBefore(first);
    out.setType(in.getType());
    first->setOperand(0, out);
    (void)last;

    std::string names;
    for (StepOpInterface s : llvm::reverse(crossed))
      names += (names.empty() ? "'" : ", '") + s.getStepName().str() + "'";
    std::string read;
    for (const std::string &v : vars)
      read += (read.empty() ? "'" : ", '") + v + "'";
    LLVM_DEBUG(llvm::dbgs() << "moved '" << filter.getStepName() << "' before "
                            << names << "\n");
    if (emitRemarks) {
      InFlightDiagnostic d = filter->emitRemark();
      d << "moved '" << filter.getStepName() << "' before " << names
        << ": it reads only " << (read.empty() ? "constants" : read)
        << ", which " << (crossed.size() == 1 ? "that step does" : "they do")
        << " not write, so the records it drops skip "
        << (crossed.size() == 1 ? "it" : "them");
      if (!stop.empty())
        d << "; it stops there because " << stop;
    }
    numMoved += static_cast<int>(crossed.size());
  }
};

} // namespace
