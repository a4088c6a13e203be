//===- FuseMaps.cpp - One stage for a run of value-wise steps -------------===//
//
// `fill_missing, clamp, map, hash_bucket` are four stages, four kernel
// calls, four output tensors and four passes over the same values (and
// `cast, normalize` on a tabular column, or `normalize, clamp` on a batch,
// two). Grouped
// into one stage, the code generator emits one kernel per field that reads
// each value once, applies all of that field's steps in registers and writes
// the result once. The pass only decides the groups (a `sluice.fused`
// attribute naming the run on each of its ops, so the IR keeps every step
// with its own location and verifiable types); PlanGen turns each group into
// one `fused_map` runtime stage that keeps the steps.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"

#include "StepParams.h"

#include "sluice/ops/Registry.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-fuse-maps"

namespace sluice::compiler {
#define GEN_PASS_DEF_FUSEMAPS
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::kFusedAttr;
using sluice::compiler::detail::markFused;
using sluice::compiler::detail::scheduleSplits;
using sluice::compiler::detail::stringParam;

namespace {

/// What the code generator fuses into one loop: ops whose every output
/// value is a function of the input value at the same position (and of its
/// channel, which the generated loop knows): OpTraits::valueWise.
bool valueWise(llvm::StringRef op) {
  const sluice::OpDef *def = sluice::Registry::instance().find(op.str());
  return def && def->traits.valueWise;
}

struct FuseMapsPass : sluice::compiler::impl::FuseMapsBase<FuseMapsPass> {
  using FuseMapsBase::FuseMapsBase;

  void runOnOperation() override {
    getOperation()->walk([&](PipelineOp pipeline) { run(pipeline); });
  }

  /// Why `stage` cannot join a fused run, or "".
  std::string blocker(StepOpInterface stage) {
    llvm::StringRef op = stage.getRegistryName();
    if (!valueWise(op))
      return "'" + op.str() + "' is not value-wise";
    if (stage->hasAttr(kFusedAttr))
      return "sluice-fuse-remaps put it into a remap kernel";
    const sluice::OpDef *def = sluice::Registry::instance().find(op.str());
    if (!def || def->kind != sluice::OpKind::Element || def->stochastic)
      return "'" + op.str() + "' is not a deterministic element op";
    DictionaryAttr params = stage.getRegistryParams();
    std::optional<StringRef> field = stringParam(params, "field");
    std::optional<StringRef> as = stringParam(params, "as");
    if (!field)
      return "it names no field";
    if (as && *as != *field)
      return "it writes a new field '" + as->str() + "'";
    if (!stage.getOutputStream().hasOneUse())
      return "its stream has other consumers";
    return "";
  }

  void run(PipelineOp pipeline) {
    Block &body = pipeline.getBody().front();
    SmallVector<StepOpInterface> runOps;
    auto flush = [&] {
      if (runOps.size() >= 2)
        fuse(runOps);
      runOps.clear();
    };
    for (Operation &op : body.without_terminator()) {
      auto stage = dyn_cast<StepOpInterface>(op);
      if (!stage) {
        flush();
        continue;
      }
      std::string why = blocker(stage);
      // A run continues only along the stream: each step consumes the
      // previous one's output.
      bool chained = !runOps.empty() &&
                     stage.getInputStream() == runOps.back().getOutputStream();
      if (!why.empty()) {
        if (!runOps.empty())
          LLVM_DEBUG(llvm::dbgs() << "run ends before '" << stage.getStepName()
                                  << "': " << why << "\n");
        flush();
        continue;
      }
      // A fixed schedule's knobs that act between the two end the run.
      if (chained &&
          !scheduleSplits(pipeline.getSchedule(), runOps.back().getStepName(),
                          stage.getStepName())
               .empty())
        chained = false;
      if (!chained)
        flush();
      runOps.push_back(stage);
    }
    flush();
  }

  void fuse(ArrayRef<StepOpInterface> stages) {
    std::string name = markFused(stages);
    numFused += stages.size();
    LLVM_DEBUG(llvm::dbgs() << "fused '" << name << "'\n");
    if (emitRemarks)
      stages.front()->emitRemark()
          << "fused " << stages.size() << " steps into '" << name
          << "': one kernel per field reads each value once and applies "
             "every step to it";
  }
};

} // namespace
