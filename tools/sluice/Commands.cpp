//===- Commands.cpp - check, explain, ops, run and bench ------------------===//
//
// The subcommands that ship with the driver, each as a registration function
// (options on a CLI11 subcommand) returning its action. Shared spec loading
// and run setup live here too, for the commands in other files to reuse.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/ops/Registry.h"
#include "sluice/runtime/Metrics.h"
#include "sluice/runtime/Pipeline.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

namespace sluice::tool {

bool colorStderr() {
  const char *noColor = std::getenv("NO_COLOR");
  return isatty(2) && !(noColor && *noColor);
}

OpenOptions driverOpenOptions(const std::vector<std::string> &disabledPasses,
                              bool noJit) {
  OpenOptions o;
  o.disabledPasses = disabledPasses;
  o.jit = !noJit;
  o.diagnostics = &std::cerr;
  o.color = colorStderr();
  return o;
}

std::unique_ptr<dsl::Spec> loadSpec(const std::string &path) {
  Expected<std::unique_ptr<dsl::Spec>> spec =
      Pipeline::loadSpec(path, &std::cerr, colorStderr());
  if (!spec) {
    std::cerr << spec.status().message() << "\n";
    return nullptr;
  }
  return spec.take();
}

void addSpecArg(CLI::App &cmd, std::vector<std::string> &specs) {
  cmd.add_option("SPEC", specs, "the pipeline spec (YAML)")->type_name("");
}

bool checkOneSpec(const std::vector<std::string> &specs,
                  const std::string &command) {
  if (specs.size() == 1)
    return true;
  usageError("'sluice " + command + "' takes exactly one SPEC file, got " +
                 std::to_string(specs.size()),
             command);
  return false;
}

void addSpecRunFlags(CLI::App &cmd, SpecRunFlags &f) {
  addSpecArg(cmd, f.specs);
  addRunFlags(cmd, f.run);
  cmd.add_option("--schedule", f.scheduleFile,
                 "per-step parallelism/prefetch/cache overrides (a YAML "
                 "schedule file, e.g. from `sluice tune`)")
      ->type_name("FILE");
  cmd.add_option("--disable-pass", f.disabledPasses,
                 "do not run this graph pass (repeatable; see `sluice "
                 "explain --help`)")
      ->type_name("NAME")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd.add_flag("--no-jit", f.noJit,
               "run the runtime's own kernels instead of compiling the "
               "value-wise steps to native code (same output bytes; also "
               "SLUICE_NO_JIT=1)");
}

int setupSpecRun(const SpecRunFlags &f, const std::string &command,
                 RunSetup &rs) {
  runtime::RunOptions opts;
  if (!checkOneSpec(f.specs, command) || !applyRunFlags(f.run, opts, command))
    return kExitUsage;
  OpenOptions o = driverOpenOptions(f.disabledPasses, f.noJit);
  o.scheduleFile = f.scheduleFile;
  ErrorKind kind;
  Expected<std::unique_ptr<Pipeline>> p = Pipeline::open(f.specs[0], o, &kind);
  if (!p) {
    const std::string &msg = p.status().message();
    if (kind == ErrorKind::Usage)
      return usageError(msg, command);
    // Located errors are already printed; this is the summary line.
    if (!msg.empty())
      std::cerr << msg << "\n";
    return kind == ErrorKind::Spec ? kExitUsage : kExitData;
  }
  rs.pipeline = p.take();
  // The run flags' options, over the schedule file's knobs.
  opts.schedule = std::move(rs.opts().schedule);
  rs.opts() = std::move(opts);
  if (Status s = rs.pipeline->compileKernels(); !s) {
    std::cerr << "sluice: error: " << s.message() << "\n";
    return kExitData;
  }
  return -1;
}

int prepareRun(RunSetup &rs, std::ostream &out, std::ostream &err) {
  if (Status s = rs.pipeline->prepare(); !s) {
    err << "sluice: error: " << s.message() << "\n";
    return kExitData;
  }
  if (rs.pipeline->autoSchedule() && rs.opts().stats)
    out << rs.pipeline->scheduleExplanation() << "\n";
  return -1;
}

namespace {

std::string passList() {
  std::string s;
  for (const std::string &p : compiler::graphPassNames())
    s += (s.empty() ? "" : ", ") + p;
  return s + ", or 'all' for every one of them";
}

} // namespace

//===----------------------------------------------------------------------===//
// check
//===----------------------------------------------------------------------===//

namespace {

/// The spec step names a plan stage runs: its own, the '+'-joined names of a
/// fused stage, and the steps of a fused map.
void stepNamesOf(const runtime::PlanStep &s, std::set<std::string> &out) {
  for (const std::string &step : runtime::stepNamesIn(s.name))
    out.insert(step);
  for (const runtime::PlanStep &f : s.fused)
    stepNamesOf(f, out);
}

/// Where each shuffle of the spec runs after the graph passes, with its
/// line: a shuffle sluice-hoist-shuffle moved runs before steps written
/// above it.
std::string shufflePlacement(const dsl::Spec &spec, const runtime::Plan &plan) {
  std::ostringstream os;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const runtime::PlanStep &sh = plan.steps[i];
    const OpDef *def = Registry::instance().find(sh.op);
    if (!def || !def->traits.orderWindow)
      continue;
    std::set<std::string> later;
    for (size_t j = i + 1; j < plan.steps.size(); ++j)
      stepNamesOf(plan.steps[j], later);
    std::vector<std::string> crossed;
    bool seen = false;
    for (const dsl::Step &st : spec.steps) {
      if (st.name == sh.name) {
        seen = true;
        break;
      }
      if (later.count(st.name))
        crossed.push_back(st.name);
    }
    if (!seen)
      continue;
    os << "  " << sh.name << " (" << plan.where(sh) << ") runs ";
    if (crossed.empty()) {
      os << "where it is written\n";
      continue;
    }
    os << (i == 0 ? "right after the source"
                  : "after " + plan.steps[i - 1].name)
       << ", before ";
    for (size_t k = 0; k < crossed.size(); ++k)
      os << (k ? ", " : "") << crossed[k];
    os << " (sluice-hoist-shuffle: its buffer holds smaller records there, "
          "same output; `--disable-pass sluice-hoist-shuffle` keeps it where "
          "written)\n";
  }
  return os.str();
}

/// The spec is valid; now look at the data it names, as `run` would open
/// it (files listed, headers read, nothing decoded): a data path that does
/// not exist, a glob that matches nothing, an empty file are warnings of
/// `check` (the spec itself is fine, the data may appear later), errors of
/// `run`.
void warnAboutData(std::unique_ptr<dsl::Spec> spec, bool quiet) {
  // The plan of `sluice run --no-jit` (which kernels run does not change
  // what the data is); compile errors are not data problems: `run`
  // reports them.
  std::ostringstream remarks;
  OpenOptions o;
  o.jit = false;
  o.diagnostics = &remarks;
  Expected<std::unique_ptr<Pipeline>> p =
      Pipeline::fromSpec(std::move(spec), o);
  if (!p)
    return;
  if (!quiet)
    std::cout << shufflePlacement(*(*p)->spec(), (*p)->plan());
  Expected<std::vector<std::string>> warnings = (*p)->checkData();
  if (!warnings) {
    std::cerr << "sluice: warning: the data cannot be read as the spec "
                 "says, so `sluice run` would fail now: "
              << warnings.status().message() << "\n";
    return;
  }
  for (const std::string &w : *warnings)
    std::cerr << "sluice: warning: " << w << "\n";
}

} // namespace

CommandAction addCheckCommand(CLI::App &root) {
  struct State {
    std::vector<std::string> specs;
    bool quiet = false;
  };
  auto st = std::make_shared<State>();
  CLI::App *cmd = root.add_subcommand(
      "check", "validate a spec; print the record type after each step");
  addSpecArg(*cmd, st->specs);
  cmd->add_flag("-q,--quiet", st->quiet,
                "print only errors and warnings (exit code tells the result)");
  return [st] {
    if (!checkOneSpec(st->specs, "check"))
      return kExitUsage;
    auto spec = loadSpec(st->specs[0]);
    if (!spec)
      return kExitUsage;
    if (!st->quiet)
      std::cout << dsl::renderTypedSteps(*spec);
    warnAboutData(std::move(spec), st->quiet);
    return kExitOk;
  };
}

//===----------------------------------------------------------------------===//
// explain
//===----------------------------------------------------------------------===//

CommandAction addExplainCommand(CLI::App &root) {
  struct State {
    std::vector<std::string> specs;
    ExplainOptions opts;
    std::vector<std::string> disabledPasses;
    bool noJit = false;
  };
  auto st = std::make_shared<State>();
  CLI::App *cmd = root.add_subcommand(
      "explain", "print the compiled pipeline (the MLIR sluice dialect, the "
                 "runtime plan or the generated kernels)");
  addSpecArg(*cmd, st->specs);
  cmd->add_option("--ir", st->opts.ir,
                  "which form: 'graph' (the sluice dialect after the graph "
                  "passes, default), 'plan' (the runtime plan as JSON), "
                  "'kernels' (the generated kernel functions, MLIR) or "
                  "'llvm' (their optimized LLVM IR)")
      ->type_name("FORM");
  cmd->add_flag("--print-ir-after-all", st->opts.printIrAfterAll,
                "print the module after every graph pass");
  cmd->add_option("--disable-pass", st->disabledPasses,
                  "do not run this graph pass (repeatable): " + passList())
      ->type_name("NAME")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--remarks", st->opts.remarks,
                "print a remark, located in the spec, for every change a "
                "graph pass makes");
  cmd->add_flag("--locations", st->opts.locations,
                "print each op's location (which spec line it came from)");
  cmd->add_flag("--no-jit", st->noJit,
                "show the pipeline `sluice run --no-jit` runs (image "
                "epilogues folded into the hand-written resize; also "
                "SLUICE_NO_JIT=1)");
  return [st] {
    if (!checkOneSpec(st->specs, "explain"))
      return kExitUsage;
    OpenOptions o = driverOpenOptions(st->disabledPasses, st->noJit);
    return Pipeline::explain(st->specs[0], o, st->opts, std::cout);
  };
}

//===----------------------------------------------------------------------===//
// ops
//===----------------------------------------------------------------------===//

CommandAction addOpsCommand(CLI::App &root) {
  struct State {
    std::vector<std::string> names;
    bool markdown = false;
  };
  auto st = std::make_shared<State>();
  CLI::App *cmd = root.add_subcommand(
      "ops", "list the sources and ops of the pipeline language");
  cmd->add_option("NAME", st->names, "show the entry of these ops only")
      ->type_name("");
  cmd->add_flag("--markdown", st->markdown,
                "print every entry as Markdown (this is docs/ops.md)");
  return [st] {
    if (!st->names.empty()) {
      // `sluice ops NAME`: the entry for one op.
      std::string md = renderOpsMarkdown();
      for (const auto &name : st->names) {
        if (!Registry::instance().find(name)) {
          std::string m = closestMatch(name, Registry::instance().names());
          return usageError(
              "unknown op '" + name + "'" +
                  (m.empty() ? "" : "; did you mean '" + m + "'?"),
              "ops");
        }
        std::string head = "\n### `" + name + "`\n";
        size_t pos = md.find(head);
        size_t end = pos == std::string::npos ? pos : md.find("\n#", pos + 1);
        if (pos != std::string::npos)
          std::cout << md.substr(pos + 1, end == std::string::npos
                                              ? std::string::npos
                                              : end - pos);
      }
      return kExitOk;
    }
    if (st->markdown) {
      std::cout << renderOpsMarkdown();
      return kExitOk;
    }
    const char *kinds[] = {"sources", "element ops", "record ops"};
    OpKind order[] = {OpKind::Source, OpKind::Element, OpKind::Record};
    for (int k = 0; k < 3; ++k) {
      std::cout << kinds[k] << ":\n";
      for (const OpDef *d : Registry::instance().all(order[k])) {
        std::cout << "  " << d->name
                  << std::string(d->name.size() < 22 ? 22 - d->name.size() : 1,
                                 ' ')
                  << d->summary << "\n";
      }
    }
    std::cout << "\n'sluice ops NAME' shows one op; 'sluice ops --markdown' "
                 "prints docs/ops.md\n";
    return kExitOk;
  };
}

//===----------------------------------------------------------------------===//
// run
//===----------------------------------------------------------------------===//

CommandAction addRunCommand(CLI::App &root) {
  auto st = std::make_shared<SpecRunFlags>();
  CLI::App *cmd = root.add_subcommand(
      "run", "run the pipeline into a sink and print the accounting");
  addSpecRunFlags(*cmd, *st);
  auto rf = std::make_shared<ResumeFlags>();
  addResumeFlags(*cmd, *rf);
  return [st, rf] {
    RunSetup rs;
    int rc = setupSpecRun(*st, "run", rs);
    if (rc >= 0)
      return rc;
    if (!applyResumeFlags(*rf, rs.plan(), rs.opts(), "run"))
      return kExitUsage;
    rc = rs.pipeline->run(std::cout, std::cerr);
    if (rs.opts().stats)
      std::cout << rs.pipeline->kernelSummary() << "\n";
    return rc;
  };
}

//===----------------------------------------------------------------------===//
// bench
//===----------------------------------------------------------------------===//

namespace {

/// Runs the pipeline for a while (repeating epochs as needed) and reports
/// steady-state throughput after a short warm-up.
int runBench(RunSetup &rs, double seconds) {
  // Enough epochs to fill the measuring window; the loop stops on time.
  if (!rs.opts().epochs)
    rs.opts().epochs = 1000000;
  // bench measures the spec's fixed schedule (or --schedule's): it does not
  // run `schedule: auto`'s probes.
  rs.pipeline->setAutoSchedule(false);
  auto created = rs.pipeline->makeRunner();
  if (!created) {
    std::cerr << "sluice: error: " << created.status().message() << "\n";
    return kExitData;
  }
  std::unique_ptr<runtime::Pipeline> p = created.take();
  std::unique_ptr<runtime::MetricsExporter> metrics;
  const runtime::RunOptions &opts = rs.opts();
  if (opts.metricsPort > 0 || !opts.metricsFile.empty()) {
    auto m = runtime::MetricsExporter::start(
        [&p] { return p->stats(); }, opts.metricsAddress, opts.metricsPort,
        opts.metricsFile, opts.metricsInterval);
    if (!m) {
      std::cerr << "sluice: error: " << m.status().message() << "\n";
      return kExitUsage;
    }
    metrics = m.take();
  }
  using Clock = std::chrono::steady_clock;
  const double warmup = std::min(2.0, seconds / 5);
  auto start = Clock::now();
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  runtime::Batch batch;
  int64_t outputs = 0, bytes = 0, records = 0;
  int64_t warmOutputs = 0, warmBytes = 0, warmRecords = 0;
  Clock::time_point measureStart = start;
  bool warm = false;
  auto sourceRead = [&] {
    runtime::RunStats st = p->stats();
    return st.records(); // a pass served from a cache counts too
  };
  while (since(start) < seconds + warmup) {
    Expected<bool> more = p->next(batch);
    if (!more) {
      std::cerr << "sluice: error: " << more.status().message() << "\n";
      return kExitData;
    }
    if (!*more)
      break;
    ++outputs;
    for (const Tensor &f : batch.fields())
      bytes += static_cast<int64_t>(f.memoryBytes());
    if (!warm && since(start) >= warmup) {
      warm = true;
      measureStart = Clock::now();
      warmOutputs = outputs;
      warmBytes = bytes;
      warmRecords = sourceRead();
    }
  }
  double t = warm ? since(measureStart) : since(start);
  records = sourceRead();
  if (!warm)
    warmOutputs = warmBytes = warmRecords = 0;
  p->stop();
  runtime::RunStats st = p->stats();
  double outRate = (outputs - warmOutputs) / t;
  double recRate = (records - warmRecords) / t;
  double mbRate = (bytes - warmBytes) / t / 1e6;
  std::cout << "pipeline " << rs.plan().name << ": " << p->threads()
            << " threads, " << std::fixed << std::setprecision(1) << t
            << " s measured after " << (warm ? warmup : 0.0) << " s warm-up\n"
            << "  source records/s  " << recRate << "\n"
            << "  outputs/s         " << outRate << "\n"
            << "  output MB/s       " << mbRate << "\n"
            << "  " << rs.pipeline->kernelSummary() << "\n\n"
            << st.table();
  if (!opts.statsJsonPath.empty()) {
    std::ofstream js(opts.statsJsonPath);
    js << st.jsonText(true) << "\n";
    js.close();
    if (!js) {
      std::cerr << "sluice: error: cannot write the statistics to "
                << opts.statsJsonPath << "\n";
      return kExitData;
    }
  }
  return kExitOk;
}

} // namespace

CommandAction addBenchCommand(CLI::App &root) {
  struct State {
    SpecRunFlags flags;
    std::string seconds = "10";
  };
  auto st = std::make_shared<State>();
  CLI::App *cmd = root.add_subcommand(
      "bench", "measure throughput (records/s, outputs/s, MB/s) and print a "
               "per-stage table");
  addSpecRunFlags(*cmd, st->flags);
  cmd->add_option("--seconds", st->seconds,
                  "how long to measure, after a warm-up of min(2, S/5) s "
                  "(default 10)")
      ->type_name("S");
  return [st] {
    char *end = nullptr;
    double seconds = std::strtod(st->seconds.c_str(), &end);
    if (st->seconds.empty() || *end || !(seconds > 0))
      return usageError("'--seconds' needs a positive number, got '" +
                            st->seconds + "'",
                        "bench");
    RunSetup rs;
    int rc = setupSpecRun(st->flags, "bench", rs);
    if (rc >= 0)
      return rc;
    return runBench(rs, seconds);
  };
}

} // namespace sluice::tool
