//===- HoistShuffle.cpp - Shuffle records where they are smallest ---------===//
//
// Users write `shuffle` where tf.data tutorials put it: after the decode and
// the augmentations, right before `batch`. There the buffer holds decoded,
// often f32 records (602 KB for a 224x224x3 image instead of ~30 KB of
// JPEG), and the batch that follows copies each one on a single thread
// because the shuffle stands between the parallel workers and the batch
// rows they could write directly. This pass moves each shuffle up the
// chain, past the steps that provably do not care where it stands, to the
// point among those where the estimated record is smallest.
//
// Why the output is byte-identical (sluice's randomness is keyed by source
// position, DESIGN.md):
//  * a shuffle's choices come from one Rng per (seed, epoch, pass, step)
//    and depend only on how many records reach it and in which order;
//  * a crossed step is per record and one to one (registry traits), so the
//    records reaching the shuffle, and their order, are the same ones, just
//    earlier in their processing; each record keeps its source index
//    (Record::index) through the shuffle;
//  * a crossed random step draws from (seed, epoch, source index, step), not
//    from its place in the stream, so it draws the same for each record;
//  * a step that can raise a data error is crossed only when the source says
//    `on_error: fail`: under `skip` it may drop a record, and the shuffle
//    would then count one more record than it did where it was written.
// Never crossed: filters (they change the count), anything that groups,
// repeats, reorders or materializes records, and a step whose output a
// fixed schedule caches. What changes is only where the work happens, and,
// for a run that fails on bad data under `on_error: fail`, which bad record
// is met first.
//
//===----------------------------------------------------------------------===//
#include "StepParams.h"

#include "sluice/compiler/Interop.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Registry.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Debug.h"

#include <algorithm>

#define DEBUG_TYPE "sluice-hoist-shuffle"

namespace sluice::compiler {
#define GEN_PASS_DEF_HOISTSHUFFLE
#include "sluice/compiler/Passes.h.inc"
} // namespace sluice::compiler

using namespace mlir;
using namespace sluice::ir;
using sluice::compiler::detail::cachedBySchedule;
using sluice::compiler::detail::resultField;
using sluice::compiler::detail::stringParam;

namespace {

/// Estimated bytes of each field of a record at one point of the chain.
/// Static shapes count exactly; a dynamic field keeps the estimate of where
/// it came from, scaled by the registry's output size hint of the step that
/// wrote it (decode_image: 8x its input). Only differences between points
/// of one chain matter, so the guesses for a source's dynamic fields mostly
/// cancel out.
using FieldSizes = llvm::StringMap<double>;

double guessDynamic(const sluice::FieldType &t) {
  if (std::optional<int64_t> b = t.staticBytes())
    return static_cast<double>(*b);
  switch (t.elem) {
  case sluice::ElemType::String:
    return 64; // a path, a line of text
  case sluice::ElemType::Bytes:
    return 64 * 1024; // an encoded image or sample
  default:
    return 4096 * static_cast<double>(sluice::elemTypeSize(t.elem));
  }
}

double total(const FieldSizes &sizes) {
  double sum = 0;
  for (const auto &e : sizes)
    sum += e.getValue();
  return sum;
}

/// The sizes after `stage`, from the sizes before it.
FieldSizes sizesAfter(StepOpInterface stage, const FieldSizes &before) {
  sluice::RecordType out = sluice::compiler::convertRecordType(
      stage.getOutputStream().getType().getRecordType());
  const sluice::OpDef *def =
      sluice::Registry::instance().find(stage.getRegistryName().str());
  std::optional<StringRef> written = resultField(stage.getRegistryParams());
  std::optional<StringRef> read =
      stringParam(stage.getRegistryParams(), "field");
  FieldSizes after;
  for (const sluice::Field &f : out.fields()) {
    double est;
    if (std::optional<int64_t> b = f.type.staticBytes())
      est = static_cast<double>(*b);
    else if (written && *written == f.name && read && before.count(*read))
      est = before.lookup(*read) * (def ? def->cost.outputBytesRatio : 1.0);
    else if (before.count(f.name))
      est = before.lookup(f.name);
    else
      est = guessDynamic(f.type);
    after[f.name] = est;
  }
  return after;
}

struct HoistShufflePass
    : sluice::compiler::impl::HoistShuffleBase<HoistShufflePass> {
  using HoistShuffleBase::HoistShuffleBase;

  void runOnOperation() override {
    SmallVector<ShuffleOp> shuffles;
    getOperation()->walk([&](ShuffleOp s) { shuffles.push_back(s); });
    for (ShuffleOp s : shuffles)
      hoist(s);
  }

  /// Why the shuffle cannot move before `stage`, or "".
  std::string blocker(StepOpInterface stage, bool onErrorSkip,
                      std::optional<DictionaryAttr> schedule,
                      ArrayAttr cachedSteps) {
    std::string name = "'" + stage.getStepName().str() + "'";
    const sluice::OpDef *def =
        sluice::Registry::instance().find(stage.getRegistryName().str());
    if (!def)
      return name + " is not in the op registry";
    const sluice::OpTraits &t = def->traits;
    bool passThrough = t.count == sluice::Cardinality::Same && !t.reorders &&
                       !t.materializes && t.random == sluice::RandomKey::None;
    if (!passThrough) {
      if (!t.perRecord)
        return name + " works on the stream (" + def->name +
               "), so the records it gives depend on where the shuffle is";
      if (t.count != sluice::Cardinality::OneToOne)
        return name + " does not give exactly one record for each record (" +
               def->name + "), so the shuffle would count other records";
      if (t.random == sluice::RandomKey::StreamOrder)
        return name + " draws by stream order";
      if (t.dataErrors && onErrorSkip)
        return name + " may skip a record on a data error (the source "
                      "says `on_error: skip`), so the shuffle would count "
                      "records the step drops";
    }
    // A fixed schedule that caches after the step put a materialization
    // point there: the cache would replay the shuffled order.
    if (schedule && cachedBySchedule(*schedule, stage.getStepName()))
      return "the fixed schedule caches the output of " + name;
    // The same for a schedule file (PlanOptions::cachedSteps).
    if (cachedSteps)
      for (Attribute a : cachedSteps)
        if (auto s = dyn_cast<StringAttr>(a);
            s &&
            (s.getValue() == stage.getStepName() || s.getValue() == "default"))
          return "the schedule file caches the output of " + name;
    return "";
  }

  void hoist(ShuffleOp shuffle) {
    auto pipeline = shuffle->getParentOfType<PipelineOp>();
    std::optional<DictionaryAttr> schedule =
        pipeline ? pipeline.getSchedule() : std::nullopt;
    ArrayAttr cachedSteps =
        pipeline ? pipeline->getAttrOfType<ArrayAttr>("sluice.cached_steps")
                 : ArrayAttr();

    // The chain from the source down to the shuffle.
    SmallVector<StepOpInterface> chain; // source first
    for (mlir::Value v = shuffle.getInput(); v;) {
      auto stage = dyn_cast_or_null<StepOpInterface>(v.getDefiningOp());
      if (!stage)
        break;
      chain.push_back(stage);
      v = stage.getInputStream();
    }
    std::reverse(chain.begin(), chain.end());
    if (chain.empty() || chain.front().getInputStream())
      return; // not fed by a source: leave it
    bool onErrorSkip = false;
    if (std::optional<StringRef> onError =
            stringParam(chain.front().getRegistryParams(), "on_error"))
      onErrorSkip = *onError == "skip";

    // Walk up while the step before can be crossed: `first` is the index
    // in `chain` of the highest step the shuffle may go before.
    size_t first = chain.size();
    std::string stop;
    while (first > 1) {
      StepOpInterface stage = chain[first - 1];
      if (!stage.getOutputStream().hasOneUse())
        break;
      stop = blocker(stage, onErrorSkip, schedule, cachedSteps);
      if (!stop.empty())
        break;
      --first;
    }

    // Estimated record size after each stage of the chain; the shuffle goes
    // after the stage (index >= first - 1) where it is smallest, the
    // earliest on a tie.
    SmallVector<double> size;
    FieldSizes sizes;
    sluice::RecordType sourceType = sluice::compiler::convertRecordType(
        chain.front().getOutputStream().getType().getRecordType());
    for (const sluice::Field &f : sourceType.fields())
      sizes[f.name] = guessDynamic(f.type);
    size.push_back(total(sizes));
    for (size_t i = 1; i < chain.size(); ++i) {
      sizes = sizesAfter(chain[i], sizes);
      size.push_back(total(sizes));
    }
    size_t best = chain.size() - 1; // where it is written
    for (size_t i = first - 1; i < chain.size(); ++i)
      if (size[i] < size[best])
        best = i;
    // Prefer the earliest point among those as small as the best.
    for (size_t i = first - 1; i < best; ++i)
      if (size[i] <= size[best]) {
        best = i;
        break;
      }

    if (best + 1 == chain.size()) {
      if (first == chain.size() && stop.empty())
        stop = "it already follows the source";
      else if (first != chain.size())
        stop = "its records are smallest there";
      LLVM_DEBUG(llvm::dbgs() << "'" << shuffle.getStepName()
                              << "' stays: " << stop << "\n");
      if (emitRemarks)
        shuffle->emitRemark()
            << "'" << shuffle.getStepName() << "' stays where it is: " << stop;
      return;
    }

    // Rewire: chain[best] -> shuffle -> chain[best + 1] ... chain.back() ->
    // the shuffle's users.
    StepOpInterface after = chain[best], next = chain[best + 1];
    mlir::Value out = shuffle.getOutput();
    out.replaceAllUsesWith(shuffle.getInput());
    mlir::Value in = after.getOutputStream();
    shuffle->setOperand(0, in);
    shuffle->moveBefore(next);
    out.setType(in.getType());
    next->setOperand(0, out);

    std::string names;
    for (size_t i = best + 1; i < chain.size(); ++i)
      names +=
          (names.empty() ? "'" : ", '") + chain[i].getStepName().str() + "'";
    size_t crossed = chain.size() - 1 - best;
    LLVM_DEBUG(llvm::dbgs() << "moved '" << shuffle.getStepName() << "' before "
                            << names << "\n");
    if (emitRemarks) {
      auto bytes = [](double b) {
        if (b < 10 * 1024)
          return std::to_string(static_cast<int64_t>(b + 0.5)) + " B";
        return std::to_string(static_cast<int64_t>(b / 1024 + 0.5)) + " KiB";
      };
      bool random = false;
      for (size_t i = best + 1; i < chain.size(); ++i)
        if (const sluice::OpDef *def = sluice::Registry::instance().find(
                chain[i].getRegistryName().str()))
          random |= def->traits.random != sluice::RandomKey::None;
      InFlightDiagnostic d = shuffle->emitRemark();
      d << "moved '" << shuffle.getStepName() << "' before " << names
        << (best == 0 ? " (right after the source)" : "")
        << ": its buffer holds records of an estimated " << bytes(size[best])
        << " there";
      if (size[best] < size.back())
        d << " instead of " << bytes(size.back());
      else
        d << ", as where it was written";
      d << "; " << (crossed == 1 ? "that step gives" : "those steps give")
        << " one record for each record";
      if (random)
        d << (crossed == 1 ? " and draws" : " and draw")
          << " by source position";
      d << ", so the output is the same";
      if (best + 1 != first)
        d << "; its records would be no smaller higher up";
      else if (best != 0 && !stop.empty())
        d << "; it stops there because " << stop;
    }
    numMoved += static_cast<int>(crossed);
  }
};

} // namespace
