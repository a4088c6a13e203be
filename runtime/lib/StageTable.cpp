//===- StageTable.cpp - The table record ops register their stages in ----===//
//
// Engine::build finds a record op's stage by the step's op in this table;
// each stage's file registers its factories (StageRegistration), so a new
// record op adds its own file and nothing in the engine. The library is
// linked whole (runtime/CMakeLists.txt) so that no registration is dropped.
//
//===----------------------------------------------------------------------===//
#include "Engine.h"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace sluice::runtime::detail {
namespace {

std::map<std::string, StageFactory, std::less<>> &table() {
  static std::map<std::string, StageFactory, std::less<>> t;
  return t;
}
std::map<std::string, OrderReplay, std::less<>> &replays() {
  static std::map<std::string, OrderReplay, std::less<>> t;
  return t;
}

} // namespace

StageRegistration::StageRegistration(std::string op, StageFactory make,
                                     OrderReplay replay) {
  if (replay.order)
    replays().emplace(op, std::move(replay));
  if (!table().emplace(op, std::move(make)).second) {
    // Two factories for one op is a build mistake, not a user error.
    std::fprintf(stderr, "sluice: stage of op '%s' registered twice\n",
                 op.c_str());
    std::abort();
  }
}

const StageFactory *findStageFactory(std::string_view op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

const OrderReplay *findOrderReplay(std::string_view op) {
  auto it = replays().find(op);
  return it == replays().end() ? nullptr : &it->second;
}

} // namespace sluice::runtime::detail

namespace sluice::runtime {

std::optional<std::vector<int64_t>>
replayOrder(const PlanStep &step, uint64_t planSeed, uint64_t epoch,
            uint64_t pass, const std::vector<int64_t> &in) {
  const detail::OrderReplay *r = detail::findOrderReplay(step.op);
  if (!r)
    return std::nullopt;
  return r->order(step, planSeed, epoch, pass, in);
}

bool replaysOrder(const PlanStep &step) {
  return detail::findOrderReplay(step.op) != nullptr;
}

} // namespace sluice::runtime
