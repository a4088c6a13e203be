//===- EliminateNoops.cpp - Remove stages that provably do nothing --------===//
//
// Specs accumulate stages that are identities for their parameters (a
// `select` of every field left over after an edit, `skip: 0` in a template,
// `shuffle: {buffer: 1}` to switch shuffling off). Each costs a runtime stage,
// a queue and a thread hop, so they are removed before anything else looks
// at the graph.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Interop.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Registry.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-eliminate-noops"

namespace sluice::compiler {
#define GEN_PASS_DEF_ELIMINATENOOPS
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;

namespace {

/// Why a registry element op does nothing, or "": asked of the op's entry
/// (OpTraits::noopReason).
std::string elementNoopReason(ElementOp op) {
  const sluice::OpDef *def = sluice::Registry::instance().find(op.getKind());
  if (!def || !def->traits.noopReason)
    return "";
  sluice::Value params;
  std::string error;
  if (!sluice::compiler::convertAttribute(op.getParams(), params, error))
    return "";
  return def->traits.noopReason(params, op.getInput().getType() ==
                                            op.getOutput().getType());
}

/// Why `op` does nothing, or "" if it may do something.
std::string noopReason(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case([](SelectOp op) -> std::string {
        return op.getInput().getType() == op.getOutput().getType()
                   ? "selects every field in the existing order"
                   : "";
      })
      .Case([](RenameOp op) -> std::string {
        for (NamedAttribute entry : op.getMapping())
          if (entry.getValue() != entry.getName())
            return "";
        return "renames no field";
      })
      .Case([](SkipOp op) -> std::string {
        return op.getCount() == 0 ? "skips 0 records" : "";
      })
      .Case([](RepeatOp op) -> std::string {
        return op.getCount() == 1 ? "repeats the stream once" : "";
      })
      .Case([](ShuffleOp op) -> std::string {
        return op.getBuffer() == 1 ? "shuffles with a buffer of 1 record" : "";
      })
      .Case([](ShardOp op) -> std::string {
        return op.getNumShards() == 1 ? "splits into a single shard" : "";
      })
      .Case([](PrefetchOp op) -> std::string {
        return op.getBuffer() == 0 ? "prefetches 0 records" : "";
      })
      .Case([](ElementOp op) { return elementNoopReason(op); })
      .Default([](Operation *) { return std::string(); });
}

struct EliminateNoopsPass
    : sluice::compiler::impl::EliminateNoopsBase<EliminateNoopsPass> {
  using EliminateNoopsBase::EliminateNoopsBase;

  void runOnOperation() override {
    getOperation()->walk([&](PipelineOp pipeline) { run(pipeline); });
  }

  void run(PipelineOp pipeline) {
    std::optional<DictionaryAttr> schedule = pipeline.getSchedule();
    Block &body = pipeline.getBody().front();
    for (Operation &op :
         llvm::make_early_inc_range(body.without_terminator())) {
      auto stage = dyn_cast<StepOpInterface>(op);
      if (!stage || !stage.getInputStream())
        continue;
      std::string reason = noopReason(&op);
      if (reason.empty())
        continue;
      // Replacing a stream by one of another type would break the consumer;
      // every reason above implies equal types, this only guards new ones.
      if (stage.getInputStream().getType() != stage.getOutputStream().getType())
        continue;
      // A fixed schedule names the stage (e.g. prefetch after it); dropping
      // the stage would silently drop that setting.
      if (schedule && schedule->contains(stage.getStepName())) {
        LLVM_DEBUG(llvm::dbgs() << "keeping '" << stage.getStepName() << "' ("
                                << reason << "): it is scheduled\n");
        continue;
      }
      LLVM_DEBUG(llvm::dbgs() << "removing '" << stage.getStepName()
                              << "': " << reason << "\n");
      if (emitRemarks)
        op.emitRemark() << "removed '" << stage.getStepName() << "': it "
                        << reason;
      stage.getOutputStream().replaceAllUsesWith(stage.getInputStream());
      op.erase();
      ++numRemoved;
    }
  }
};

} // namespace
