//===- Ranks.cpp - Where a run's rank and world size come from ------------===//
//
// One place decides a run's share of the data for every front end (`sluice
// run`, compiled executables, the Python module), so the three agree on the
// order caller > spec > process group (torch.distributed) > environment and
// on the messages, which always say
// where a wrong value came from: with three sources, "rank 3 is out of
// range" alone leaves a person guessing which one to fix.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Pipeline.h"

#include <cerrno>
#include <cstdlib>

namespace sluice::runtime {

namespace {

struct Choice {
  int64_t value;
  std::string from; ///< "rank", "$RANK", "spec.yaml:4:22", "the default"
};

/// An environment variable as an integer >= min; nullopt when unset or
/// empty.
Expected<std::optional<int64_t>> fromEnv(const char *name, int64_t min) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return std::optional<int64_t>();
  errno = 0;
  char *end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end || errno == ERANGE || x < min)
    return Status::error(std::string("$") + name + " must be an integer >= " +
                         std::to_string(min) + ", got '" + v + "'");
  return std::optional<int64_t>(x);
}

} // namespace

Status resolveRanks(const Plan &plan, const RankArgs &args, RunOptions &opts) {
  Choice rank{0, "the default"}, world{1, "the default"};
  if (args.rank) {
    rank = {*args.rank, args.rankName};
  } else if (plan.rank) {
    rank = {*plan.rank, plan.where(plan.rankLoc)};
  } else if (args.groupRank) {
    rank = {*args.groupRank, args.groupName + ".get_rank()"};
  } else {
    for (const char *var : {"RANK", "JOB_COMPLETION_INDEX"}) {
      Expected<std::optional<int64_t>> e = fromEnv(var, 0);
      if (!e)
        return e.status();
      if (*e) {
        rank = {**e, std::string("$") + var};
        break;
      }
    }
  }
  if (args.worldSize) {
    world = {*args.worldSize, args.worldSizeName};
  } else if (plan.worldSize) {
    world = {*plan.worldSize, plan.where(plan.worldSizeLoc)};
  } else if (args.groupWorldSize) {
    world = {*args.groupWorldSize, args.groupName + ".get_world_size()"};
  } else {
    Expected<std::optional<int64_t>> e = fromEnv("WORLD_SIZE", 1);
    if (!e)
      return e.status();
    if (*e)
      world = {**e, "$WORLD_SIZE"};
  }
  if (rank.value < 0)
    return Status::error("rank must be >= 0, got " +
                         std::to_string(rank.value) + " (from " + rank.from +
                         ")");
  if (world.value < 1)
    return Status::error("world size must be >= 1, got " +
                         std::to_string(world.value) + " (from " + world.from +
                         ")");
  if (rank.value >= world.value)
    return Status::error("rank " + std::to_string(rank.value) +
                         " is out of range for world size " +
                         std::to_string(world.value) + " (rank from " +
                         rank.from + ", world size from " + world.from +
                         "; ranks count from 0, so rank < world size)");
  opts.rank = rank.value;
  opts.worldSize = world.value;
  return Status::ok();
}

} // namespace sluice::runtime
