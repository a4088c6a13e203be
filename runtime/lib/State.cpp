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

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <limits>

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
  if (char *real =
          ::realpath(p.baseDir.empty() ? "." : p.baseDir.c_str(), nullptr)) {
    p.baseDir = real;
    std::free(real);
  }
  auto clear = [](PlanStep &s) {
    s.schedule = StepSchedule();
    s.loc = SourceLoc();
  };
  clear(p.source);
  for (PlanStep &s : p.steps)
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
      {"fingerprint",
       [&] {
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
  // Every field by name, its type and its range: a state is input like any
  // other (it may be damaged or edited), and a wrong count would silently
  // skip outputs. Engine::checkResumeState() then holds it against the plan.
  std::string why;
  auto integer = [&](const char *key, int64_t min, int64_t &out) {
    if (!why.empty())
      return;
    if (!j.contains(key)) {
      why = std::string("no \"") + key + "\"";
      return;
    }
    const nlohmann::json &v = j[key];
    // A float, a string or an integer past 2^63 - 1 is no count.
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() &&
         v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
      why = std::string("\"") + key + "\" must be an integer below 2^63, got " +
            v.dump();
      return;
    }
    out = v.get<int64_t>();
    if (out < min)
      why = std::string("\"") + key + "\" must be >= " + std::to_string(min) +
            ", got " + v.dump();
  };
  auto hex = [&](const char *key, int base, uint64_t &out) {
    if (!why.empty())
      return;
    const char *digits = base == 16 ? "0123456789abcdefABCDEF" : "0123456789";
    std::string t = j.contains(key) && j[key].is_string()
                        ? j[key].get<std::string>()
                        : std::string();
    errno = 0;
    char *end = nullptr;
    if (!t.empty() && t.size() <= 20 &&
        t.find_first_not_of(digits) == std::string::npos)
      out = std::strtoull(t.c_str(), &end, base);
    if (t.empty() || !end || *end || errno == ERANGE)
      why = std::string("\"") + key + "\" must be a string of " +
            (base == 16 ? "hex digits" : "decimal digits") + " below 2^64";
  };
  PipelineState s;
  hex("fingerprint", 16, s.fingerprint);
  hex("seed", 10, s.seed);
  integer("epoch", 0, s.epoch);
  integer("outputs", 0, s.outputs);
  integer("rank", 0, s.rank);
  integer("world_size", 1, s.worldSize);
  integer("position_start", -1, s.positionStart);
  integer("rows", -1, s.rows);
  if (!why.empty())
    return bad(why);
  if (s.rank >= s.worldSize)
    return bad("\"rank\" " + std::to_string(s.rank) +
               " is not below \"world_size\" " + std::to_string(s.worldSize));
  return s;
}

} // namespace sluice::runtime
