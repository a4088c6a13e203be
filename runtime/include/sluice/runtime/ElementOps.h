//===- ElementOps.h - Binding plan steps to kernels -------------*- C++ -*-===//
//
// Each element step (and the per-record ops select, rename, filter) becomes
// one closure, built once from the step's parameters by the kernel binder
// of the op's registry entry (normalize precomputes its constants, tokenize
// loads its vocabulary, map/filter parse their expression) and then called
// for every record, from any worker thread. The engine fuses consecutive
// closures into one parallel stage.
//
// Randomness: a stochastic step draws from
//   Rng(seed, epoch, record.index, stageStream(step))
// so a record gets the same crop on any worker, in any order, in every run.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_ELEMENTOPS_H
#define SLUICE_RUNTIME_ELEMENTOPS_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/Plan.h"

#include <cstdint>
#include <functional>
#include <optional>

namespace sluice::runtime {

/// What a bound step needs besides the record.
class StageCounters;

struct ElementContext {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  /// The counters of the step being run, for what a step counts besides
  /// its outcome (StageCounters::addRepaired); null outside a pipeline.
  StageCounters *counters = nullptr;
};

/// A bound step: rewrites `rec` (fields in the step's input type order) into
/// the step's output type. Returns false to drop the record (filter), an
/// error when the record cannot be processed (a corrupt image): the engine
/// applies the source's on_error policy to it. Must be thread-safe.
using ElementFn =
    std::function<Expected<bool>(Record &rec, const ElementContext &ctx)>;

/// True for the steps bindElementOp() accepts: element ops, select, rename,
/// filter.
bool isPerRecordStep(const PlanStep &stage);

/// Binds a step. Fails for a step it cannot bind (unknown op, a vocabulary
/// file that cannot be read, parameters the registry should have refused).
/// `plan` gives the base directory for relative paths.
Expected<ElementFn> bindElementOp(const PlanStep &stage, const Plan &plan);

/// Binds a fused step (`fused_map`, PlanStep::fused) to its steps' kernels, run
/// one after another (what bindElementOp does for it).
Expected<ElementFn> bindFused(const PlanStep &stage, const Plan &plan);

/// A `filter` on a run of records held as columns: `columns[f]` holds field
/// f of record i in row i; sets keep[j] (1 kept, 0 dropped) for each of the
/// `n` rows listed in `rows` (null: rows 0..n-1), as the ElementFn does per
/// record. Must be thread-safe.
using RowsFilterFn =
    std::function<Status(const std::vector<Tensor> &columns,
                         const uint32_t *rows, int64_t n, uint8_t *keep)>;

/// The RowsFilterFn of a `filter` step (the same compiled expression as
/// bindElementOp's); nullopt for any other step.
std::optional<Expected<RowsFilterFn>> bindRowsFilter(const PlanStep &stage);

/// The random stream of a step: stepStream(op, name) (sluice/ops/Random.h),
/// which the step's kernel gets as KernelSite::stream.
uint64_t stageStream(const PlanStep &stage);

/// The order a reordering step (a `shuffle`) gives the records labelled
/// `in` in pass `pass` of `epoch`: its draws replayed over the labels
/// (positions, steps of a walk) instead of records. nullopt when the
/// step's order is not a function of its record count alone.
std::optional<std::vector<int64_t>> replayOrder(const PlanStep &step,
                                                uint64_t planSeed,
                                                uint64_t epoch, uint64_t pass,
                                                const std::vector<int64_t> &in);
/// Whether replayOrder() replays the step's order (its stage registers how:
/// a `shuffle`).
bool replaysOrder(const PlanStep &step);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_ELEMENTOPS_H
