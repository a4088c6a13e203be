//===- RunFlags.cpp - Command-line flags that control a run ---------------===//
//
// One registration and one check for the flags shared by every command that
// runs a pipeline, so `run`, `bench`, compiled executables and the
// autotuner's trials accept the same spellings with the same messages.
//
//===----------------------------------------------------------------------===//
#include "RunFlags.h"

#include "sluice/ops/ConfigFile.h"
#include "sluice/ops/Registry.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice::tool {

namespace {
std::string &programNameRef() {
  static std::string name = "sluice";
  return name;
}
} // namespace

void setProgramName(std::string name) { programNameRef() = std::move(name); }
const std::string &programName() { return programNameRef(); }

int usageError(const std::string &msg, const std::string &command) {
  const std::string &prog = programName();
  std::cerr << prog << ": error: " << msg << "\n"
            << "run '" << prog << " " << (command.empty() ? "" : command + " ")
            << "--help' for usage\n";
  return kExitUsage;
}

void addRunFlags(CLI::App &cmd, RunFlags &f) {
  cmd.add_option("--epochs", f.epochs,
                 "passes over the data (overrides the spec's `epochs`)")
      ->type_name("N");
  cmd.add_option("--threads", f.threads,
                 "worker threads (default: the spec's budget.cores, else all "
                 "cores)")
      ->type_name("N");
  cmd.add_option("--memory", f.memory,
                 "memory budget, e.g. 512MiB or 4GiB (overrides the spec's "
                 "budget.memory)")
      ->type_name("SIZE");
  cmd.add_option("--sink", f.sink,
                 "where outputs go: 'null' counts them (default); 'npy:DIR' "
                 "writes one .npy file per field and output, then "
                 "DIR/index.json saying whether the run completed (DIR and "
                 "its parents are created)")
      ->type_name("null|npy:DIR");
  cmd.add_flag("--overwrite", f.overwrite,
               "clear a non-empty npy:DIR first (only if it holds nothing "
               "but sluice npy output); without it such a DIR is refused");
  cmd.add_flag("--stats", f.stats,
               "print the per-stage table (time, records, bytes) after the "
               "run");
  cmd.add_option("--stats-json", f.statsJson,
                 "also write the per-stage counters as JSON to FILE")
      ->type_name("FILE");
  cmd.add_option("--metrics-port", f.metricsPort,
                 "serve the run's counters (the stall meter included) in "
                 "Prometheus' text format at http://127.0.0.1:PORT/metrics "
                 "while it runs")
      ->type_name("PORT");
  cmd.add_option("--metrics-address", f.metricsAddress,
                 "the address --metrics-port listens on (default 127.0.0.1; "
                 "0.0.0.0 for every interface)")
      ->type_name("ADDR");
  cmd.add_option("--metrics-file", f.metricsFile,
                 "write the same Prometheus text to FILE every 5 s and at the "
                 "end (for node_exporter's textfile collector)")
      ->type_name("FILE");
  cmd.add_flag("-q,--quiet", f.quiet,
               "no progress line while running (errors, warnings and the "
               "final accounting still print)");
}

int reportParseError(const CLI::ParseError &e, const std::string &command) {
  std::string what = e.what();
  if (dynamic_cast<const CLI::ArgumentMismatch *>(&e)) {
    size_t over = what.find(" was given a disallowed flag override");
    if (over != std::string::npos) {
      std::string flag = what.substr(0, over);
      if (flag.rfind("-", 0) != 0)
        flag = (flag.size() > 1 ? "--" : "-") + flag;
      return usageError("option '" + flag + "' takes no value", command);
    }
    // CLI11 starts the message with the option's name and a colon; an
    // option given more often than it takes values says "At Most N
    // required but received M".
    size_t colon = what.find(':');
    if (colon != std::string::npos && what.rfind("-", 0) == 0) {
      std::string name = what.substr(0, colon);
      if (what.find("At Most") != std::string::npos)
        return usageError("option '" + name +
                              "' is given more than once; give it once",
                          command);
      return usageError("option '" + name + "' needs a value", command);
    }
  }
  return usageError(what, command);
}

int rejectExtras(const CLI::App &cmd, const std::string &command,
                 const std::string &unexpectedHint) {
  for (const std::string &extra : cmd.remaining()) {
    if (extra.size() > 1 && extra[0] == '-') {
      std::string name = extra.substr(0, extra.find('='));
      std::vector<std::string> names;
      for (const CLI::Option *o : cmd.get_options()) {
        for (const std::string &l : o->get_lnames())
          names.push_back("--" + l);
        for (const std::string &s : o->get_snames())
          names.push_back("-" + s);
      }
      std::string m = closestMatch(name, names);
      return usageError("unknown option '" + name + "'" +
                            (m.empty() ? "" : "; did you mean '" + m + "'?"),
                        command);
    }
    return usageError("unexpected argument '" + extra + "'" + unexpectedHint,
                      command);
  }
  return -1;
}

bool parseIntFlag(const std::string &opt, const std::string &v, int64_t min,
                  int64_t &out, const std::string &command) {
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < min) {
    usageError("'" + opt + "' needs an integer >= " + std::to_string(min) +
                   ", got '" + v + "'",
               command);
    return false;
  }
  out = x;
  return true;
}

bool applyRunFlags(const RunFlags &f, runtime::RunOptions &opts,
                   const std::string &command) {
  int64_t n;
  if (!f.epochs.empty()) {
    if (!parseIntFlag("--epochs", f.epochs, 1, n, command))
      return false;
    opts.epochs = n;
  }
  if (!f.threads.empty()) {
    if (!parseIntFlag("--threads", f.threads, 1, n, command))
      return false;
    opts.threads = n;
  }
  if (!f.memory.empty()) {
    auto bytes = parseByteSize(f.memory);
    if (!bytes || *bytes <= 0) {
      usageError("'--memory' needs a size such as 512MiB or 4GiB, got '" +
                     f.memory + "'",
                 command);
      return false;
    }
    opts.memoryBytes = *bytes;
  }
  const std::string &v = f.sink;
  if (v != "null" && v.rfind("npy:", 0) != 0) {
    usageError("'--sink' must be 'null' or 'npy:DIR', got '" + v + "'",
               command);
    return false;
  }
  if (v == "npy:") {
    usageError("'--sink npy:DIR' needs a directory", command);
    return false;
  }
  opts.sink = v;
  opts.overwrite = f.overwrite;
  opts.handleSignals = true;
  opts.statsJsonPath = f.statsJson;
  opts.stats = f.stats;
  if (!f.metricsPort.empty()) {
    if (!parseIntFlag("--metrics-port", f.metricsPort, 1, n, command))
      return false;
    if (n > 65535) {
      usageError("'--metrics-port' needs a port in [1, 65535], got '" +
                     f.metricsPort + "'",
                 command);
      return false;
    }
    opts.metricsPort = static_cast<int>(n);
  }
  if (!f.metricsAddress.empty()) {
    if (f.metricsPort.empty()) {
      usageError("'--metrics-address' goes with '--metrics-port'", command);
      return false;
    }
    opts.metricsAddress = f.metricsAddress;
  }
  opts.metricsFile = f.metricsFile;
  if (f.quiet)
    opts.progress = runtime::RunOptions::Progress::Off;
  return true;
}

void addResumeFlags(CLI::App &cmd, ResumeFlags &f) {
  cmd.add_option("--resume", f.resume,
                 "continue from a state saved with --save-state: the outputs "
                 "are exactly those the first run would have produced next")
      ->type_name("STATE");
  cmd.add_option("--save-state", f.saveState,
                 "when the run ends (finished, stopped or failed), write "
                 "where it stands to FILE (a few hundred bytes of JSON)")
      ->type_name("FILE");
  cmd.add_option("--stop-after", f.stopAfter,
                 "stop after N outputs (with --save-state: continue later "
                 "with --resume)")
      ->type_name("N");
  cmd.add_option("--rank", f.rank,
                 "this process's share of the data: rank R of --world-size "
                 "(default: the spec's distributed.rank, else $RANK, else "
                 "$JOB_COMPLETION_INDEX, else 0)")
      ->type_name("R");
  cmd.add_option("--world-size", f.worldSize,
                 "number of processes sharing the data (default: the "
                 "spec's distributed.world_size, else $WORLD_SIZE, else 1)")
      ->type_name("W");
}

bool applyResumeFlags(const ResumeFlags &f, const runtime::Plan &plan,
                      runtime::RunOptions &opts, const std::string &command) {
  int64_t n;
  if (!f.stopAfter.empty()) {
    if (!parseIntFlag("--stop-after", f.stopAfter, 1, n, command))
      return false;
    opts.stopAfter = n;
  }
  opts.saveStatePath = f.saveState;
  runtime::RankArgs ranks;
  ranks.rankName = "--rank";
  ranks.worldSizeName = "--world-size";
  if (!f.rank.empty()) {
    if (!parseIntFlag("--rank", f.rank, 0, n, command))
      return false;
    ranks.rank = n;
  }
  if (!f.worldSize.empty()) {
    if (!parseIntFlag("--world-size", f.worldSize, 1, n, command))
      return false;
    ranks.worldSize = n;
  }
  if (Status s = runtime::resolveRanks(plan, ranks, opts); !s) {
    usageError(s.message(), command);
    return false;
  }
  if (!f.resume.empty()) {
    // A state file is a few KiB (positions of every source); the limit and
    // the refusal of devices and FIFOs keep a wrong path from hanging here.
    std::string text;
    if (Status s =
            readConfigFile(f.resume, "a state file", size_t(64) << 20, text);
        !s) {
      usageError("cannot read the state file: " + s.message(), command);
      return false;
    }
    Expected<runtime::PipelineState> st =
        runtime::PipelineState::fromJson(text);
    if (!st) {
      usageError(f.resume + ": " + st.status().message(), command);
      return false;
    }
    opts.resume = st.take();
  }
  return true;
}

} // namespace sluice::tool
