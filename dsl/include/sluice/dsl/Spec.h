//===- Spec.h - A checked pipeline spec -------------------------*- C++ -*-===//
//
// The front end's output: the pipeline as written, every op resolved against
// the registry, every parameter validated and defaulted, and the record type
// known after every step. compiler/ turns this into the `sluice` dialect.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_DSL_SPEC_H
#define SLUICE_DSL_SPEC_H

#include "sluice/dsl/Diagnostics.h"
#include "sluice/ops/Registry.h"
#include "sluice/ops/Schedule.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::dsl {

/// A source or a step.
struct Step {
  /// Unique name used by schedules and reports: the op name, with ".2",
  /// ".3"... appended when an op occurs more than once ("map", "map.2").
  std::string name;
  std::string op;             ///< registry name
  const OpDef *def = nullptr; ///< registry entry
  Value params;               ///< Map: validated, defaults filled
  SourceLoc loc;              ///< where the op name is written
  RecordType outputType;      ///< record type after this step
};

/// Per-step knobs of a fixed schedule (sluice::StepSchedule, the one form
/// every layer uses; unset = let the runtime/autotuner pick) and where the
/// entry is written, for messages.
struct StepSchedule : sluice::StepSchedule {
  SourceLoc loc;
};

struct Budget {
  int64_t cores = 0;       ///< 0 = all cores of the host
  int64_t memoryBytes = 0; ///< 0 = no limit given
  SourceLoc coresLoc, memoryLoc;
};

/// `distributed: {rank: R, world_size: W}`: this process's share of the
/// data, each value optional. A Python call or --rank/--world-size
/// overrides a value written here; a value not written here comes from the
/// environment torchrun or a Kubernetes Indexed Job sets
/// (runtime::resolveRanks()).
struct Distributed {
  std::optional<int64_t> rank;
  std::optional<int64_t> worldSize;
  SourceLoc rankLoc, worldSizeLoc;
};

/// A checked pipeline.
struct Spec {
  std::string file;     ///< path as given on the command line
  /// The file's text as the front end read it: later layers print caret
  /// lines from it instead of reading the file again.
  std::string text;
  std::string pipeline; ///< `pipeline:` name
  uint64_t seed = 0;
  Step source;
  std::vector<Step> steps;
  int64_t epochs = 1;
  Budget budget;
  Distributed distributed;
  bool scheduleAuto = true;
  /// The spec says `schedule: auto` in so many words: `sluice run` then
  /// profiles briefly and applies the autotuner's schedule (a spec without
  /// `schedule:` runs with the runtime's defaults).
  bool scheduleAutoWritten = false;
  /// Keyed by Step::name ("default" applies to every step).
  std::map<std::string, StepSchedule> schedule;
  SourceLoc loc; ///< the document start

  /// The record type the pipeline emits.
  const RecordType &outputType() const {
    return steps.empty() ? source.outputType : steps.back().outputType;
  }
};

/// Parses and checks a spec. Returns null when there were errors; all of
/// them are in `diags`.
std::unique_ptr<Spec> parseSpec(DiagnosticEngine &diags);

/// Reads a schedule file for `spec` (`sluice run --schedule FILE`; what
/// `sluice tune` writes): a mapping with `schedule:` (and an optional
/// `pipeline:` that must match), or the step mapping itself, in the syntax of
/// the spec's `schedule:`. False when there were errors (in `diags`).
bool parseScheduleFile(DiagnosticEngine &diags, const Spec &spec,
                       std::map<std::string, StepSchedule> &out);

/// Reads a whole spec or schedule file (at most the 4 MiB a spec may have;
/// devices and FIFOs refused, see sluice/ops/ConfigFile.h); false (with
/// `error` set) if it cannot be read.
bool readFile(const std::string &path, std::string &contents,
              std::string &error);

/// `sluice check` output: one line per step with its record type.
std::string renderTypedSteps(const Spec &spec);

} // namespace sluice::dsl

#endif // SLUICE_DSL_SPEC_H
