//===- FuseMapBatch.cpp - Run value-wise steps once per batch -------------===//
//
// Tabular pipelines end in `fill_missing, map, hash_bucket, batch`: steps
// that touch 13 or 26 values per record, where the per-record dispatch and
// result allocation cost far more than the arithmetic. When a step computes
// every output value from the input value at the same position alone,
// f(batch(records)) == batch(f(record), ...), so the step can run after the
// batch, once per [B, ...] tensor, with the same output bytes.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Interop.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"

#include "Retype.h"
#include "StepParams.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "sluice-fuse-map-batch"

namespace sluice::compiler {
#define GEN_PASS_DEF_FUSEMAPBATCH
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::cachedBySchedule;

namespace {

/// Why the registry op `op` commutes with `batch`, or null
/// (OpTraits::commutesWithBatch). The property is "value in, value out, no
/// per-record state and no per-record data errors", which is neither
/// implied by nor implies fusability into a kernel (hash_bucket is a
/// library call, yet value-wise). Ops leave it unset on purpose where it
/// fails: one_hot (an id outside [0, depth) is a data error: after the
/// batch it would fail or skip a whole batch instead of one record), random
/// ops (they draw per record index), and everything that looks at the shape
/// (crops, resize, transpose, pad, truncate, tokenize).
const char *commuteReason(llvm::StringRef op) {
  const sluice::OpDef *def = sluice::Registry::instance().find(op.str());
  return def ? def->traits.commutesWithBatch : nullptr;
}

/// `record` with a leading dimension `dim` on every field, as `batch` types
/// its output.
RecordType batchedRecord(RecordType record, int64_t dim) {
  SmallVector<Type> types;
  for (Type t : record.getTypes()) {
    auto tensor = cast<RankedTensorType>(t);
    SmallVector<int64_t> shape{dim};
    llvm::append_range(shape, tensor.getShape());
    types.push_back(RankedTensorType::get(shape, tensor.getElementType()));
  }
  return RecordType::get(record.getContext(), record.getNames(), types);
}

struct FuseMapBatchPass
    : sluice::compiler::impl::FuseMapBatchBase<FuseMapBatchPass> {
  using FuseMapBatchBase::FuseMapBatchBase;

  void runOnOperation() override {
    SmallVector<BatchOp> batches;
    getOperation()->walk([&](BatchOp batch) { batches.push_back(batch); });
    for (BatchOp batch : batches)
      hoistOver(batch);
  }

  /// Why `stage` cannot move after a batch that adds leading dim `dim`, or
  /// "" if it can.
  std::string blocker(StepOpInterface stage, int64_t dim,
                      std::optional<DictionaryAttr> schedule) {
    llvm::StringRef op = stage.getRegistryName();
    const sluice::OpDef *def = sluice::Registry::instance().find(op.str());
    if (!commuteReason(op) || !def || def->kind != sluice::OpKind::Element)
      return "'" + op.str() + "' is not value-wise";
    if (def->stochastic)
      return "'" + op.str() + "' draws random numbers per record";
    // A fixed schedule that caches after this step put a materialization
    // point into the record stream (sized and placed for records); moving
    // the step would silently move that point behind the batch.
    if (schedule && cachedBySchedule(*schedule, stage.getStepName()))
      return "the fixed schedule caches its output";
    if (!def->typeRule)
      return "'" + op.str() + "' has no type rule";

    sluice::Value params;
    std::string error;
    if (!sluice::compiler::convertAttribute(stage.getRegistryParams(), params,
                                            error))
      return error;
    // Dedicated ops drop unset optionals; the rules expect them as the front
    // end gives them, defaults filled.
    for (const sluice::ParamSpec &spec : def->params)
      if (!params.has(spec.name) && spec.defaultValue)
        params.set(spec.name, *spec.defaultValue);

    RecordType in = stage.getInputStream().getType().getRecordType();
    RecordType out = stage.getOutputStream().getType().getRecordType();
    sluice::RecordType batchedIn =
        sluice::compiler::convertRecordType(batchedRecord(in, dim));
    // A failed rule only means "do not move".
    sluice::compiler::detail::ProbeTypeContext ctx(batchedIn, params);
    sluice::RecordType inferred = def->typeRule(ctx);
    if (ctx.failed())
      return "its type rule rejects the batched input: " + ctx.firstError;
    if (inferred !=
        sluice::compiler::convertRecordType(batchedRecord(out, dim)))
      return "on the batched input its type rule infers {" + inferred.str() +
             "}, not the batched output";

    if (def->traits.perChannel) {
      // Per-channel steps check their lists against the last dim per
      // record; with a dynamic last dim a record with the wrong channel
      // count would make the whole batch fail instead of one record.
      const sluice::Value &field = params["field"];
      RankedTensorType type =
          in.getFieldType(field.isString() ? field.asString() : "");
      bool perChannel = def->traits.perChannel(params);
      if (!type || (perChannel && (type.getRank() == 0 ||
                                   type.isDynamicDim(type.getRank() - 1))))
        return "its channel (last) dim is not static";
    }
    return "";
  }

  void hoistOver(BatchOp batch) {
    auto pipeline = batch->getParentOfType<PipelineOp>();
    std::optional<DictionaryAttr> schedule =
        pipeline ? pipeline.getSchedule() : std::nullopt;
    int64_t dim =
        batch.getDropRemainder() ? batch.getSize() : ShapedType::kDynamic;

    // The steps right before the batch that can move, nearest first. Each is
    // checked on its own batched input; since every step nearer the batch
    // keeps the batched types, the moved chain stays well typed.
    SmallVector<StepOpInterface> chain;
    mlir::Value in = batch.getInput();
    while (auto stage = dyn_cast_or_null<StepOpInterface>(in.getDefiningOp())) {
      if (!stage.getInputStream() || !in.hasOneUse())
        break;
      std::string why = blocker(stage, dim, schedule);
      if (!why.empty()) {
        LLVM_DEBUG(llvm::dbgs()
                   << "'" << stage.getStepName() << "' stays before '"
                   << batch.getStepName() << "': " << why << "\n");
        break;
      }
      chain.push_back(stage);
      in = stage.getInputStream();
    }
    if (chain.empty())
      return;

    StepOpInterface first = chain.back(), last = chain.front();
    mlir::Value batchOut = batch.getOutput();
    batchOut.replaceAllUsesWith(last.getOutputStream());
    batch->setOperand(0, in);
    batch->moveBefore(first);
    batchOut.setType(StreamType::get(
        &getContext(),
        batchedRecord(cast<StreamType>(in.getType()).getRecordType(), dim)));
    first->setOperand(0, batchOut);
    for (StepOpInterface stage : llvm::reverse(chain)) {
      mlir::Value out = stage.getOutputStream();
      out.setType(StreamType::get(
          &getContext(),
          batchedRecord(cast<StreamType>(out.getType()).getRecordType(), dim)));
      LLVM_DEBUG(llvm::dbgs() << "moved '" << stage.getStepName() << "' after '"
                              << batch.getStepName() << "'\n");
      if (emitRemarks)
        stage->emitRemark() << "moved '" << stage.getStepName() << "' after '"
                            << batch.getStepName() << "': it "
                            << commuteReason(stage.getRegistryName())
                            << ", so it runs once per batch of "
                            << (batch.getDropRemainder() ? "" : "up to ")
                            << batch.getSize() << " records";
      ++numMoved;
    }
  }
};

} // namespace
