//===- FuseRemaps.cpp - One kernel for crop, flip, transpose, pad chains --===//
//
// `random_crop, random_flip, normalize, transpose` on an image are four
// stages that each allocate and write a whole tensor, three of them only
// to move bytes around. Every output value of such a chain is one input
// value (or a pad value) sent through the chain's value-wise steps, at an
// input position that is an affine function of the output position whose
// coefficients are the image's size, the crop offsets and the flip
// decision. This pass groups such runs (on one field, at least one of them
// moving values) into one stage, as sluice-fuse-maps does, and the code
// generator compiles the composed index map and the value steps into one
// kernel per chain; the per-record numbers (shapes, crop offsets, flip
// draws) are kernel arguments the runtime fills (runtime/RemapChain.h)
// from the same random streams the unfused steps draw from.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"

#include "StepParams.h"

#include "sluice/runtime/RemapChain.h"

#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-fuse-remaps"

namespace sluice::compiler {
#define GEN_PASS_DEF_FUSEREMAPS
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::kFusedAttr;
using sluice::compiler::detail::markFused;
using sluice::compiler::detail::scheduleSplits;
using sluice::compiler::detail::stringParam;

namespace {

struct FuseRemapsPass : sluice::compiler::impl::FuseRemapsBase<FuseRemapsPass> {
  using FuseRemapsBase::FuseRemapsBase;

  void runOnOperation() override {
    getOperation()->walk([&](PipelineOp pipeline) { run(pipeline); });
  }

  /// Why `stage` cannot join a remap run, or "" (then `field` is its field).
  std::string blocker(StepOpInterface stage, std::string &field) {
    std::string op = stage.getRegistryName().str();
    if (!sluice::runtime::isRemapOp(op) && !sluice::runtime::isRemapValueOp(op))
      return "'" + op + "' neither moves values nor computes them one by one";
    if (stage->hasAttr(kFusedAttr))
      return "it is already fused";
    DictionaryAttr params = stage.getRegistryParams();
    std::optional<StringRef> f = stringParam(params, "field");
    std::optional<StringRef> as = stringParam(params, "as");
    if (!f)
      return "it names no field";
    if (as && *as != *f)
      return "it writes a new field '" + as->str() + "'";
    if (!stage.getOutputStream().hasOneUse())
      return "its stream has other consumers";
    field = f->str();
    return "";
  }

  void run(PipelineOp pipeline) {
    Block &body = pipeline.getBody().front();
    SmallVector<StepOpInterface> runOps;
    std::string runField;
    auto flush = [&] {
      bool moves = llvm::any_of(runOps, [](StepOpInterface s) {
        return sluice::runtime::isRemapOp(s.getRegistryName().str());
      });
      if (runOps.size() >= 2 && moves)
        fuse(runOps);
      runOps.clear();
    };
    for (Operation &op : body.without_terminator()) {
      auto stage = dyn_cast<StepOpInterface>(op);
      if (!stage) {
        flush();
        continue;
      }
      std::string field;
      std::string why = blocker(stage, field);
      if (!why.empty()) {
        if (!runOps.empty())
          LLVM_DEBUG(llvm::dbgs() << "run ends before '" << stage.getStepName()
                                  << "': " << why << "\n");
        flush();
        continue;
      }
      bool chained =
          !runOps.empty() &&
          stage.getInputStream() == runOps.back().getOutputStream() &&
          field == runField;
      // A fixed schedule's knobs that act between the two end the run.
      if (chained &&
          !scheduleSplits(pipeline.getSchedule(), runOps.back().getStepName(),
                          stage.getStepName())
               .empty())
        chained = false;
      if (!chained)
        flush();
      runOps.push_back(stage);
      runField = field;
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
          << "': one kernel computes each output value from its input "
             "position; sizes, crop offsets and flip draws are its arguments";
  }
};

} // namespace
