//===- main.cpp - The sluice command-line driver ---------------------------===//
//
// sluice check|explain|ops|run|compile|tune|bench. Exit codes: 0 ok,
// 1 pipeline/data error, 2 usage or spec error.
//
//===----------------------------------------------------------------------===//
#include "sluice/dsl/Spec.h"
#include "sluice/ops/Registry.h"
#include "sluice/compiler/Codegen.h"
#include "sluice/compiler/Compiler.h"
#include "sluice/runtime/Pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace sluice;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;

const char *kUsage = R"(usage: sluice <command> [options]

commands:
  check   SPEC                      validate; print the record type after each step
  explain SPEC [--ir graph|plan|kernels|llvm] [--print-ir-after-all] [--disable-pass NAME]
               [--remarks] [--locations]
                                    print the compiled pipeline (MLIR)
  ops     [--markdown]              list the sources and ops of the pipeline language
  run     SPEC [--epochs N] [--sink null|npy:DIR] [--schedule FILE] [--threads N]
               [--memory SIZE] [--stats] [--stats-json FILE] [--quiet] [--disable-pass NAME]
               [--no-jit]           run the runtime's own kernels (also SLUICE_NO_JIT=1)
  compile SPEC -o EXE               standalone executable; same flags as run
  tune    SPEC [--cores N] [--memory SIZE] [--report DIR] [--check BASELINE.json]
  bench   SPEC [--seconds S]        throughput and a per-stage table (same flags as run)

exit codes: 0 ok, 1 pipeline or data error, 2 usage or spec error
)";

int usageError(const std::string &msg) {
  std::cerr << "sluice: error: " << msg << "\n"
            << "run 'sluice --help' for usage\n";
  return kExitUsage;
}

bool colorStderr() {
  const char *noColor = std::getenv("NO_COLOR");
  return isatty(2) && !(noColor && *noColor);
}

/// Reads and checks a spec; prints diagnostics. Null on failure.
std::unique_ptr<dsl::Spec> loadSpec(const std::string &path) {
  std::string text, err;
  if (!dsl::readFile(path, text, err)) {
    std::cerr << "sluice: error: " << err << "\n";
    return nullptr;
  }
  dsl::DiagnosticEngine diags(path, std::move(text));
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  diags.print(std::cerr, colorStderr());
  if (!spec) {
    size_t n = diags.errorCount();
    std::cerr << n << (n == 1 ? " error" : " errors") << " in " << path
              << "\n";
  }
  return spec;
}

struct Args {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options; // --name value
  std::vector<std::string> flags;                           // --name
};

/// Splits argv into positionals, flags and valued options. `valued` lists
/// the options that take a value (as `--opt V` or `--opt=V`).
bool parseArgs(int argc, char **argv, int first,
               const std::vector<std::string> &valued,
               const std::vector<std::string> &flagNames, Args &out) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      std::string name = a, value;
      bool hasValue = false;
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        hasValue = true;
      }
      if (std::find(valued.begin(), valued.end(), name) != valued.end()) {
        if (!hasValue) {
          if (i + 1 >= argc) {
            usageError("option '" + name + "' needs a value");
            return false;
          }
          value = argv[++i];
        }
        out.options.emplace_back(name, value);
      } else if (!hasValue && std::find(flagNames.begin(), flagNames.end(),
                                        name) != flagNames.end()) {
        out.flags.push_back(name);
      } else {
        std::vector<std::string> all = valued;
        all.insert(all.end(), flagNames.begin(), flagNames.end());
        std::string m = closestMatch(name, all);
        usageError("unknown option '" + name + "'" +
                   (m.empty() ? "" : "; did you mean '" + m + "'?"));
        return false;
      }
    } else {
      out.positional.push_back(a);
    }
  }
  return true;
}

bool needOneSpec(const Args &args, const char *cmd) {
  if (args.positional.size() != 1) {
    usageError(std::string("'sluice ") + cmd + "' takes exactly one SPEC file, got " +
               std::to_string(args.positional.size()));
    return false;
  }
  return true;
}

int cmdCheck(int argc, char **argv) {
  Args args;
  if (!parseArgs(argc, argv, 2, {}, {"--quiet", "-q"}, args) ||
      !needOneSpec(args, "check"))
    return kExitUsage;
  auto spec = loadSpec(args.positional[0]);
  if (!spec)
    return kExitUsage;
  bool quiet = !args.flags.empty();
  if (!quiet)
    std::cout << dsl::renderTypedStages(*spec);
  return kExitOk;
}

int cmdExplain(int argc, char **argv) {
  Args args;
  if (!parseArgs(argc, argv, 2, {"--ir", "--disable-pass"},
                 {"--print-ir-after-all", "--remarks", "--locations"}, args) ||
      !needOneSpec(args, "explain"))
    return kExitUsage;
  compiler::ExplainOptions opts;
  for (const auto &[k, v] : args.options) {
    if (k == "--ir")
      opts.ir = v;
    else if (k == "--disable-pass")
      opts.disabledPasses.push_back(v);
  }
  auto hasFlag = [&](const char *flag) {
    return std::find(args.flags.begin(), args.flags.end(), flag) !=
           args.flags.end();
  };
  opts.printIrAfterAll = hasFlag("--print-ir-after-all");
  opts.remarks = hasFlag("--remarks");
  opts.locations = hasFlag("--locations");
  auto spec = loadSpec(args.positional[0]);
  if (!spec)
    return kExitUsage;
  return compiler::explain(*spec, opts, std::cout, std::cerr);
}

int cmdOps(int argc, char **argv) {
  Args args;
  if (!parseArgs(argc, argv, 2, {}, {"--markdown"}, args))
    return kExitUsage;
  if (!args.positional.empty()) {
    // `sluice ops NAME`: the entry for one op.
    std::string md = renderOpsMarkdown();
    for (const auto &name : args.positional) {
      if (!Registry::instance().find(name)) {
        std::string m = closestMatch(name, Registry::instance().names());
        return usageError("unknown op '" + name + "'" +
                          (m.empty() ? "" : "; did you mean '" + m + "'?"));
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
  if (!args.flags.empty()) {
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
}

bool parsePositiveInt(const std::string &opt, const std::string &v,
                      int64_t min, int64_t &out) {
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < min) {
    usageError("'" + opt + "' needs an integer >= " + std::to_string(min) +
               ", got '" + v + "'");
    return false;
  }
  out = x;
  return true;
}

/// Options shared by `run` and `bench`.
struct RunSetup {
  std::unique_ptr<dsl::Spec> spec;
  runtime::Plan plan;
  runtime::RunOptions opts;
  /// Native kernels of the plan's value-wise steps; null with --no-jit.
  std::unique_ptr<compiler::JitKernels> kernels;
};

const std::vector<std::string> kRunValued = {
    "--epochs", "--sink",       "--schedule", "--threads",
    "--memory", "--stats-json", "--disable-pass", "--seconds"};
const std::vector<std::string> kRunFlags = {"--stats", "--quiet", "-q",
                                            "--no-jit"};

/// Parses run/bench arguments, checks the spec, applies a schedule file and
/// builds the Plan from the optimized module. Returns an exit code < 0 on
/// success.
int setupRun(int argc, char **argv, const char *cmd, RunSetup &rs,
             double *seconds) {
  Args args;
  if (!parseArgs(argc, argv, 2, kRunValued, kRunFlags, args) ||
      !needOneSpec(args, cmd))
    return kExitUsage;
  compiler::PlanOptions planOpts;
  std::string scheduleFile;
  for (const auto &[k, v] : args.options) {
    int64_t n;
    if (k == "--epochs") {
      if (!parsePositiveInt(k, v, 1, n))
        return kExitUsage;
      rs.opts.epochs = n;
    } else if (k == "--threads") {
      if (!parsePositiveInt(k, v, 1, n))
        return kExitUsage;
      rs.opts.threads = n;
    } else if (k == "--sink") {
      if (v != "null" && v.rfind("npy:", 0) != 0)
        return usageError("'--sink' must be 'null' or 'npy:DIR', got '" + v +
                          "'");
      if (v == "npy:")
        return usageError("'--sink npy:DIR' needs a directory");
      rs.opts.sink = v;
    } else if (k == "--memory") {
      auto bytes = parseByteSize(v);
      if (!bytes || *bytes <= 0)
        return usageError("'--memory' needs a size such as 512MiB or 4GiB, "
                          "got '" + v + "'");
      rs.opts.memoryBytes = *bytes;
    } else if (k == "--stats-json") {
      rs.opts.statsJsonPath = v;
    } else if (k == "--schedule") {
      scheduleFile = v;
    } else if (k == "--disable-pass") {
      planOpts.disabledPasses.push_back(v);
    } else if (k == "--seconds") {
      char *end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (!seconds || v.empty() || *end || !(d > 0))
        return usageError("'--seconds' needs a positive number, got '" + v +
                          "'");
      *seconds = d;
    }
  }
  bool jit = !compiler::jitDisabledByEnvironment();
  for (const auto &f : args.flags) {
    if (f == "--no-jit")
      jit = false;
    if (f == "--stats")
      rs.opts.stats = true;
    else if (f == "--quiet" || f == "-q")
      rs.opts.progress = runtime::RunOptions::Progress::Off;
  }
  rs.spec = loadSpec(args.positional[0]);
  if (!rs.spec)
    return kExitUsage;
  if (!scheduleFile.empty()) {
    std::string text, err;
    if (!dsl::readFile(scheduleFile, text, err)) {
      std::cerr << "sluice: error: " << err << "\n";
      return kExitUsage;
    }
    dsl::DiagnosticEngine diags(scheduleFile, std::move(text));
    std::map<std::string, dsl::StepSchedule> sched;
    bool ok = dsl::parseScheduleFile(diags, *rs.spec, sched);
    diags.print(std::cerr, colorStderr());
    if (!ok)
      return kExitUsage;
    for (const auto &[name, s] : sched) {
      runtime::ScheduleOverride o;
      o.parallelism = s.parallelism;
      o.prefetch = s.prefetch;
      o.cache = s.cache;
      rs.opts.schedule[name] = o;
    }
  }
  if (Status s = compiler::checkPassNames(planOpts.disabledPasses); !s)
    return usageError(s.message());
  Expected<runtime::Plan> plan =
      compiler::buildPlan(*rs.spec, planOpts, std::cerr);
  if (!plan) {
    // Located errors are already printed; this is the summary line.
    if (!plan.status().message().empty())
      std::cerr << "sluice: error: " << plan.status().message() << "\n";
    return 1;
  }
  rs.plan = plan.take();
  if (jit) {
    auto kernels = compiler::JitKernels::compile(rs.plan);
    if (!kernels) {
      std::cerr << "sluice: error: " << kernels.status().message() << "\n";
      return 1;
    }
    rs.kernels = kernels.take();
    rs.opts.binder = rs.kernels->binder();
  }
  return -1;
}

/// The codegen line of `--stats`.
void printKernelStats(const RunSetup &rs) {
  if (rs.opts.stats)
    std::cout << (rs.kernels ? rs.kernels->summary()
                             : std::string("kernels: off (--no-jit)"))
              << "\n";
}

int cmdRun(int argc, char **argv) {
  RunSetup rs;
  int rc = setupRun(argc, argv, "run", rs, nullptr);
  if (rc >= 0)
    return rc;
  rc = runtime::runPipeline(rs.plan, rs.opts, std::cout, std::cerr);
  printKernelStats(rs);
  return rc;
}

/// `sluice bench`: runs the pipeline for a while (repeating epochs as
/// needed) and reports steady-state throughput after a short warm-up.
int cmdBench(int argc, char **argv) {
  RunSetup rs;
  double seconds = 10;
  int rc = setupRun(argc, argv, "bench", rs, &seconds);
  if (rc >= 0)
    return rc;
  // Enough epochs to fill the measuring window; the loop stops on time.
  if (!rs.opts.epochs)
    rs.opts.epochs = 1000000;
  auto created = runtime::Pipeline::create(rs.plan, rs.opts);
  if (!created) {
    std::cerr << "sluice: error: " << created.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<runtime::Pipeline> p = created.take();
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
    return st.stages.empty() ? int64_t(0) : st.stages.front().emitted;
  };
  while (since(start) < seconds + warmup) {
    Expected<bool> more = p->next(batch);
    if (!more) {
      std::cerr << "sluice: error: " << more.status().message() << "\n";
      return 1;
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
  std::cout << "pipeline " << rs.plan.name << ": " << p->threads()
            << " threads, " << std::fixed << std::setprecision(1) << t
            << " s measured after " << (warm ? warmup : 0.0) << " s warm-up\n"
            << "  source records/s  " << recRate << "\n"
            << "  outputs/s         " << outRate << "\n"
            << "  output MB/s       " << mbRate
            << "\n"
            << "  " << (rs.kernels ? rs.kernels->summary()
                                   : std::string("kernels: off (--no-jit)"))
            << "\n\n"
            << st.table();
  if (!rs.opts.statsJsonPath.empty()) {
    std::ofstream js(rs.opts.statsJsonPath);
    js << st.toJson().dump() << "\n";
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usageError("missing command");
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return kExitOk;
  }
  if (cmd == "--version" || cmd == "version") {
    std::cout << "sluice 0.1.0\n";
    return kExitOk;
  }
  if (cmd == "check")
    return cmdCheck(argc, argv);
  if (cmd == "explain")
    return cmdExplain(argc, argv);
  if (cmd == "ops")
    return cmdOps(argc, argv);
  if (cmd == "run")
    return cmdRun(argc, argv);
  if (cmd == "bench")
    return cmdBench(argc, argv);
  if (cmd == "compile" || cmd == "tune") {
    std::cerr << "sluice: error: '" << cmd
              << "' is not available yet (it arrives with the "
              << (cmd == "compile" ? "codegen" : "autotuner")
              << " work); 'check', 'explain', 'ops', 'run' and 'bench' work\n";
    return kExitUsage;
  }
  std::string m = closestMatch(
      cmd, {"check", "explain", "ops", "run", "compile", "tune", "bench"});
  return usageError("unknown command '" + cmd + "'" +
                    (m.empty() ? "" : "; did you mean '" + m + "'?"));
}
