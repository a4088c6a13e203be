//===- Replay.cpp - Which positions a chunk of outputs holds
//---------------===//
//
// Replay.h says why a shuffle step and a filter are replayed and how. The
// classification below names, for every step a worker cannot cut at an
// arbitrary output, what to write instead: the trainer sees that message
// from `sluice serve` before any worker listens.
//
//===----------------------------------------------------------------------===//
#include "Replay.h"

#include "sluice/runtime/ElementOps.h"

#include <algorithm>

namespace sluice::remote::detail {

namespace {

/// The step's traits in the op registry (null for an op it does not know).
const OpTraits *traitsOf(const runtime::PlanStep &st) {
  return opTraits(st.op);
}

/// A step that groups records into batches (batch, padded_batch).
bool isBatch(const runtime::PlanStep &st) {
  const OpTraits *t = traitsOf(st);
  return t && t->count == Cardinality::Groups;
}

/// A step whose order a worker replays over position numbers (shuffle).
bool isShuffle(const runtime::PlanStep &st) {
  return runtime::replaysOrder(st);
}

/// A per-record step that drops records by their values (filter): a
/// worker runs the steps up to it to learn which positions survive.
bool isFilter(const runtime::PlanStep &st) {
  const OpTraits *t = traitsOf(st);
  return t && runtime::isPerRecordStep(st) && t->count == Cardinality::Fewer;
}

/// A step that only buffers between threads (prefetch).
bool isPrefetch(const runtime::PlanStep &st) {
  const OpTraits *t = traitsOf(st);
  return t && t->prefetchDepth;
}

Status refuse(const runtime::Plan &plan, const runtime::PlanStep &st,
              const std::string &why, const std::string &instead) {
  return Status::error(plan.where(st) + ": step '" + st.name + "' (" + st.op +
                       ") cannot be served: " + why + "; " + instead +
                       " (docs/distributed.md, \"What runs where\")");
}

/// Why a stream step other than shuffle, filter and batch cannot be served,
/// and what to write instead (empty: it can be).
std::optional<std::pair<std::string, std::string>>
unservable(const runtime::PlanStep &st) {
  // The op's own reason first (unbatch, repeat, take, skip, shard,
  // interleave, cache: OpTraits::notServed).
  if (const OpTraits *t = traitsOf(st); t && t->notServed.why)
    return std::make_pair(std::string(t->notServed.why),
                          std::string(t->notServed.instead));
  if (isPrefetch(st) || runtime::isPerRecordStep(st) || isBatch(st) ||
      isShuffle(st))
    return std::nullopt;
  return std::make_pair(
      std::string("it is not a per-record step, a shuffle, a filter or the "
                  "batch"),
      std::string("remove it from the served spec"));
}

} // namespace

Expected<std::unique_ptr<ServePlan>>
ServePlan::make(const runtime::Plan &plan, const runtime::RunOptions &opts) {
  std::unique_ptr<ServePlan> sp(new ServePlan(plan, opts));
  // The runtime's own refusals (budget, bad parameters) first.
  runtime::RunOptions o = opts;
  o.epochs = 1;
  o.firstEpoch = 0;
  o.rank = 0;
  o.worldSize = 1;
  o.controller = nullptr;
  o.resume.reset();
  {
    auto created = runtime::Pipeline::create(plan, o);
    if (!created)
      return created.status();
    sp->sourceRecords_ = (*created)->expectedSourceRecords();
    sp->threads_ = (*created)->stats().threads;
    bool positional = (*created)->state().positionStart >= 0;
    (*created)->stop();
    if (positional) {
      sp->chunkPlan_ = plan;
      for (const runtime::PlanStep &st : plan.steps)
        if (isBatch(st) && st.params["size"].isNumber()) {
          sp->batched_ = true;
          sp->rows_ = st.params["size"].asInt();
        }
      return sp;
    }
  }

  const Value &onError = plan.source.params["on_error"];
  if (onError.isString() && onError.asString() == "skip")
    return refuse(plan, plan.source,
                  "`on_error: skip` drops the records it cannot read, which "
                  "a worker learns only by reading every record before a "
                  "chunk",
                  "serve with `on_error: fail` (a bad record then ends the "
                  "trainer's epoch with its location), or remove the damaged "
                  "files");
  if (plan.source.schedule.cache)
    return refuse(plan, plan.source, "a worker keeps nothing between chunks",
                  "remove `cache:` (each chunk is made anew on its worker)");
  bool sawBatch = false;
  for (const runtime::PlanStep &st : plan.steps) {
    if (st.schedule.cache)
      return refuse(plan, st, "a worker keeps nothing between chunks",
                    "remove `cache:` (each chunk is made anew on its worker)");
    if (auto no = unservable(st))
      return refuse(plan, st, no->first, no->second);
    if (isBatch(st)) {
      if (sawBatch)
        return refuse(plan, st, "a second batch groups batches",
                      "batch once, at the end");
      sawBatch = true;
      sp->batched_ = true;
      if (st.params["size"].isNumber())
        sp->rows_ = st.params["size"].asInt();
      const Value &drop = st.params["drop_remainder"];
      sp->dropRemainder_ = drop.isBool() && drop.asBool();
    } else if (isShuffle(st) || isFilter(st)) {
      if (sawBatch)
        return refuse(plan, st,
                      "it works on whole batches, while a worker's chunk is "
                      "a run of rows of the share's order",
                      "put the " + st.op + " before the batch");
      sp->replay_ = true;
      if (isFilter(st))
        sp->countKnown_ = false;
    }
  }
  if (!sp->replay_)
    return Status::error(
        "pipeline '" + plan.name +
        "' cannot be served: it does not resume by position, and no step "
        "says why (docs/distributed.md, \"What runs where\")");
  if (!sp->sourceRecords_)
    return Status::error(
        plan.where(plan.source) + ": source '" + plan.source.name +
        "' cannot say how many records it has, and a worker replays a "
        "shuffle step or a filter over the numbers of all of them; serve a "
        "source that counts its records (image_folder, files, idx, npy), or "
        "read this one by position with `shuffle: true` in place of the "
        "shuffle step");
  sp->chunkPlan_ = plan;
  sp->chunkPlan_.steps.clear();
  for (const runtime::PlanStep &st : plan.steps)
    if (!isShuffle(st))
      sp->chunkPlan_.steps.push_back(st);
  return sp;
}

int64_t ServePlan::outputsFor(int64_t rows) const {
  if (!batched_)
    return rows;
  return dropRemainder_ ? rows / rows_ : (rows + rows_ - 1) / rows_;
}

Expected<std::vector<int64_t>> ServePlan::survivors(size_t lastStage,
                                                    std::vector<int64_t> in,
                                                    int64_t epoch) const {
  // The steps up to the filter, without the shuffle steps (their order is
  // `in` already), over the positions in that order.
  runtime::Plan sub = plan_;
  sub.steps.clear();
  for (size_t i = 0; i <= lastStage; ++i)
    if (!isShuffle(plan_.steps[i]))
      sub.steps.push_back(plan_.steps[i]);
  runtime::RunOptions o = opts_;
  o.rank = 0;
  o.worldSize = 1;
  o.firstEpoch = epoch;
  o.epochs = epoch + 1;
  o.resume.reset();
  o.controller = nullptr;
  o.positions = std::make_shared<const std::vector<int64_t>>(std::move(in));
  auto created = runtime::Pipeline::create(sub, o);
  if (!created)
    return created.status();
  std::unique_ptr<runtime::Pipeline> pipe = created.take();
  std::vector<int64_t> kept;
  runtime::Batch b;
  for (;;) {
    Expected<bool> more = pipe->next(b);
    if (!more)
      return more.status();
    if (!*more)
      break;
    kept.push_back(static_cast<int64_t>(b.recordIndex()));
  }
  pipe->stop();
  return kept;
}

Expected<std::shared_ptr<const std::vector<int64_t>>>
ServePlan::order(int64_t epoch, int64_t rank, int64_t world) {
  Key key{epoch, rank, world};
  // One at a time: the second trainer thread asking for the same share
  // waits for the first's order instead of making it again.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto &[k, v] : cache_)
    if (k == key)
      return v;
  int64_t n = sourceRecords_.value_or(0);
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(std::max<int64_t>(0, n / world + 1)));
  for (int64_t p = rank; p < n; p += world)
    rows.push_back(p);
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const runtime::PlanStep &st = plan_.steps[i];
    if (isBatch(st))
      break;
    if (isShuffle(st)) {
      // One pass per epoch (`repeat` is refused), so the pass is 0.
      rows = *runtime::replayOrder(st, plan_.seed, static_cast<uint64_t>(epoch),
                                   0, rows);
    } else if (isFilter(st)) {
      Expected<std::vector<int64_t>> kept =
          survivors(i, std::move(rows), epoch);
      if (!kept)
        return kept.status();
      rows = std::move(*kept);
    }
  }
  auto made = std::make_shared<const std::vector<int64_t>>(std::move(rows));
  cache_.emplace_back(key, made);
  if (cache_.size() > 8)
    cache_.erase(cache_.begin());
  return made;
}

} // namespace sluice::remote::detail
