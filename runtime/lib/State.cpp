//===- State.cpp - Saving and reading where a pipeline stands -------------===//
//
// PipelineState as JSON (nlohmann-json): what `sluice run --save-state`
// writes, `--resume` reads, and the Python module's state_dict() holds. The
// fingerprint ties a state to the pipeline it came from: a hash of the Plan
// without the knobs that do not change outputs (schedule, budget, epochs),
// so a state also resumes under another schedule or thread count.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Pipeline.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>

namespace sluice::runtime {

uint64_t planFingerprint(const Plan &plan) {
  Plan p = plan;
  p.epochs = 1;
  p.cores = 0;
  p.memoryBytes = 0;
  p.scheduleAuto = false;
  p.specFile.clear();
  // The data directory by its canonical name: `sluice run dir/spec.yaml`
  // and the executable `sluice compile` made of it (which holds the
  // absolute path) read the same files.
  if (char *real = ::realpath(p.baseDir.empty() ? "." : p.baseDir.c_str(),
                              nullptr)) {
    p.baseDir = real;
    std::free(real);
  }
  auto clear = [](PlanStage &s) {
    s.parallelism = 0;
    s.prefetch = -1;
    s.cache.clear();
    s.loc = SourceLoc();
  };
  clear(p.source);
  for (PlanStage &s : p.stages)
    clear(s);
  // FNV-1a, 64 bits: stable across runs and builds (std::hash is not).
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : p.serialize()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string PipelineState::toJson() const {
  nlohmann::json j = {
      {"sluice_state", kVersion},
      // As a hex string: JSON readers in other languages lose 64-bit ints.
      {"fingerprint", [&] {
         char buf[17];
         std::snprintf(buf, sizeof(buf), "%016llx",
                       static_cast<unsigned long long>(fingerprint));
         return std::string(buf);
       }()},
      {"seed", std::to_string(seed)},
      {"epoch", epoch},
      {"outputs", outputs},
      {"rank", rank},
      {"world_size", worldSize},
      {"position_start", positionStart},
      {"rows", rows},
  };
  return j.dump();
}

Expected<PipelineState> PipelineState::fromJson(const std::string &text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto bad = [](const std::string &what) {
    return Status::error("not a sluice pipeline state: " + what);
  };
  if (j.is_discarded() || !j.is_object())
    return bad("not a JSON object");
  if (!j.contains("sluice_state") || !j["sluice_state"].is_number_integer())
    return bad("no \"sluice_state\" version");
  if (j["sluice_state"].get<int>() != kVersion)
    return bad("version " + j["sluice_state"].dump() + ", expected " +
               std::to_string(kVersion));
  PipelineState s;
  try {
    s.fingerprint = std::stoull(j.at("fingerprint").get<std::string>(),
                                nullptr, 16);
    s.seed = std::stoull(j.at("seed").get<std::string>());
    s.epoch = j.at("epoch").get<int64_t>();
    s.outputs = j.at("outputs").get<int64_t>();
    s.rank = j.at("rank").get<int64_t>();
    s.worldSize = j.at("world_size").get<int64_t>();
    s.positionStart = j.at("position_start").get<int64_t>();
    s.rows = j.at("rows").get<int64_t>();
  } catch (const std::exception &e) {
    return bad(e.what());
  }
  if (s.epoch < 0 || s.outputs < 0 || s.worldSize < 1 || s.rank < 0 ||
      s.rank >= s.worldSize)
    return bad("a count or rank out of range");
  return s;
}

} // namespace sluice::runtime
