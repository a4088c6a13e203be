//===- ExeMain.cpp - main() of the executables `sluice compile` writes ----===//
//
// A compiled executable is this main(), the runtime and ops libraries, and
// two objects `sluice compile` generates: the serialized Plan with a
// description of its origin (sluice_embedded_plan / sluice_embedded_info)
// and the generated kernels (sluice_kernel_table). It takes the flags of
// `sluice run` (registered by RunFlags.h, the same code `sluice run` uses)
// and runs the Plan through runtime::runPipeline, like `sluice run`, so its
// outputs are the same bytes. It never reads the spec, and never includes
// MLIR or the compiler: `ldd` shows only Debian runtime libraries.
//
// Data can move: --data-root re-anchors the spec's relative paths, and
// --source-path replaces the source's files, so the executable can be copied
// to a machine where the data lives elsewhere.
//
// The plan runs through sluice::Pipeline (sluice/Pipeline.h), the API
// `sluice run` uses, made from the plan and the linked-in kernel table (its
// MLIR-free half): a spec that says `schedule: auto` is tuned here as in
// `sluice run` (a short profile, the GLPK solver, re-planning while it
// runs); the autotuner depends on the runtime only.
//
// An executable `sluice compile --serve` wrote also serves trainers on other
// hosts (`--serve ADDR`, the worker of `sluice serve`): ExeServe.h.
//
//===----------------------------------------------------------------------===//
#include "ExeServe.h"
#include "RunFlags.h"
#include "sluice/ops/Switches.h"

#include "sluice/Pipeline.h"
#include "sluice/autotune/Tune.h"
#include "sluice/dsl/Spec.h"
#include "sluice/ops/Registry.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include "sluice/runtime/CompiledKernels.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" {
// Defined by the data object `sluice compile` writes (emitDataObject).
extern const char sluice_embedded_plan[];
extern const uint64_t sluice_embedded_plan_size;
// The plan SLUICE_NO_JIT=1 runs where it differs from the main one (image
// epilogues folded into the hand-written resize); empty where it does not.
extern const char sluice_embedded_plan_nojit[];
extern const uint64_t sluice_embedded_plan_nojit_size;
extern const char sluice_embedded_info[];
extern const uint64_t sluice_embedded_info_size;
// Defined by the kernels' object (compiler::emitKernelObject), or by the
// data object as an empty table (`sluice compile --no-jit`).
extern const SluiceKernelInfo sluice_kernel_table[];
}

using namespace sluice;
using namespace sluice::tool;

namespace {

/// A source parameter that names its data (ParamSpec::dataPath in the
/// source's registry entry). Globs are matched by the runtime (escaped when
/// made absolute here).
struct PathParam {
  const ParamSpec *spec;
  /// Where the plan holds it: its name, or the older name a plan made
  /// before the rename holds it under (the source reads that one first).
  std::string key;
  bool glob() const { return spec->dataPath == DataPath::Glob; }
  /// Whether `--source-path NAME=PATH` names it.
  bool isNamed(std::string_view name) const {
    return name == spec->name ||
           std::find(spec->oldNames.begin(), spec->oldNames.end(), name) !=
               spec->oldNames.end();
  }
};

std::vector<PathParam> pathParams(const runtime::PlanStep &source) {
  std::vector<PathParam> out;
  const OpDef *def = Registry::instance().find(source.op);
  if (!def)
    return out;
  for (const ParamSpec &p : def->params) {
    if (p.dataPath == DataPath::None)
      continue;
    PathParam pp{&p, p.name};
    for (const std::string &old : p.oldNames)
      if (source.params.has(old))
        pp.key = old;
    out.push_back(std::move(pp));
  }
  return out;
}

std::string cwd() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof(buf)) ? std::string(buf) : std::string(".");
}

std::string globEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (std::string("*?[]\\{}").find(c) != std::string::npos)
      out += '\\';
    out += c;
  }
  return out;
}

/// CLI11's layout with a lowercase usage line, as `sluice --help` has.
class HelpFormatter : public CLI::Formatter {
public:
  HelpFormatter() { column_width(30); }
  std::string make_description(const CLI::App *) const override { return ""; }
  std::string make_usage(const CLI::App *app, std::string) const override {
    return "usage: " + app->get_name() + " [options]\n\n" +
           app->get_description();
  }
};

/// The information block printed by --version and at the top of --help.
std::string describe(const nlohmann::json &info, const std::string &prog) {
  auto str = [&](const char *k) {
    return info.contains(k) && info[k].is_string() ? info[k].get<std::string>()
                                                   : std::string("?");
  };
  std::string cpu = str("targetCpu");
  if (info.contains("hostCpu"))
    cpu += " (" + info["hostCpu"].get<std::string>() + ")";
  std::string s = prog + ": pipeline '" + str("pipeline") +
                  "', a standalone sluice executable\n"
                  "  compiled from " +
                  str("spec") + "\n  by sluice " + str("sluice") + " on " +
                  str("compiled") + " for CPU " + cpu;
  if (info.contains("kernelSteps")) {
    const nlohmann::json &k = info["kernelSteps"];
    s += "\n  generated kernels for " + std::to_string(k.size()) +
         (k.size() == 1 ? " step" : " steps");
    for (size_t i = 0; i < k.size(); ++i)
      s += (i ? ", " : ": ") + k[i].get<std::string>();
    if (info.value("noJit", false))
      s += " (--no-jit)";
  }
  if (info.value("serve", false))
    s += "\n  serves trainers on other hosts with --serve ADDR "
         "(docs/distributed.md)";
  if (info.contains("disabledPasses") && !info["disabledPasses"].empty()) {
    s += "\n  with passes disabled:";
    for (const auto &p : info["disabledPasses"])
      s += " " + p.get<std::string>();
  }
  return s + "\n";
}

struct ExeFlags {
  RunFlags run;
  ResumeFlags resume;
  std::string scheduleFile;
  std::string dataRoot;
  std::vector<std::string> sourcePaths;
  bool version = false;
  bool printPlan = false;
};

/// The spec's step names as `sluice compile` recorded them, which a
/// --schedule file is checked against (as `sluice run --schedule` checks it
/// against the spec).
dsl::Spec stepNames(const nlohmann::json &info) {
  dsl::Spec names;
  names.pipeline = info.value("pipeline", "");
  if (info.contains("source"))
    names.source.name = info["source"].value("name", "");
  if (info.contains("steps"))
    for (const auto &s : info["steps"]) {
      dsl::Step step;
      step.name = s.value("name", "");
      step.op = s.value("op", "");
      names.steps.push_back(step);
    }
  return names;
}

/// --data-root and --source-path.
bool applyDataFlags(const ExeFlags &f, runtime::Plan &plan) {
  if (!f.dataRoot.empty()) {
    struct stat st;
    if (::stat(f.dataRoot.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      usageError("'--data-root' needs a directory; '" + f.dataRoot +
                 "' is not one");
      return false;
    }
    plan.baseDir = f.dataRoot[0] == '/' ? f.dataRoot : cwd() + "/" + f.dataRoot;
  }
  std::vector<PathParam> params = pathParams(plan.source);
  std::vector<std::string> names;
  for (const PathParam &p : params)
    names.push_back(p.spec->name);
  for (const std::string &v : f.sourcePaths) {
    const PathParam *which = nullptr;
    std::string path = v;
    size_t eq = v.find('=');
    if (eq != std::string::npos)
      for (const PathParam &p : params)
        if (p.isNamed(std::string_view(v).substr(0, eq))) {
          which = &p;
          path = v.substr(eq + 1);
        }
    if (!which) {
      if (params.empty()) {
        usageError("the " + plan.source.op +
                   " source names no data path that '--source-path' could "
                   "replace");
        return false;
      }
      if (params.size() != 1) {
        std::string list;
        for (const std::string &n : names)
          list += (list.empty() ? "" : ", ") + n + "=PATH";
        usageError("the " + plan.source.op +
                   " source reads several paths; write '--source-path " + list +
                   "', got '" + v + "'");
        return false;
      }
      which = &params[0];
    }
    if (path.empty()) {
      usageError("'--source-path " + which->spec->name + "=PATH' needs a path");
      return false;
    }
    // Relative to the current directory, as any path on a command line.
    if (path[0] != '/' && path[0] != '~')
      path = (which->glob() ? globEscape(cwd()) : cwd()) + "/" + path;
    plan.source.params.set(which->key, Value::string(path));
  }
  return true;
}

/// Parses the command line; -1 to go on, else the exit code.
int parseCommandLine(CLI::App &app, int argc, char **argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError &e) {
    return reportParseError(e, "");
  }
  for (const std::string &extra : app.remaining()) {
    if (extra.rfind("--disable-pass", 0) == 0)
      return usageError("'--disable-pass' is a compile-time flag: the "
                        "passes ran when this executable was compiled "
                        "(give it to `sluice compile`)");
    if (extra.rfind("--serve", 0) == 0 && !exeServeHook())
      return usageError("this executable was compiled without serving: "
                        "`sluice compile --serve` writes one that takes "
                        "'--serve ADDR' (or run `sluice serve SPEC --listen "
                        "ADDR`)");
  }
  return rejectExtras(app, "",
                      " (the spec is built in; this program takes only "
                      "options)");
}

} // namespace

int main(int argc, char **argv) {
  runtime::configureProcessAllocator(); // before any thread: Memory.h
  std::string prog = argc > 0 && argv[0] ? argv[0] : "pipeline";
  if (size_t slash = prog.rfind('/'); slash != std::string::npos)
    prog = prog.substr(slash + 1);
  setProgramName(prog);

  nlohmann::json info = nlohmann::json::parse(
      std::string(sluice_embedded_info, sluice_embedded_info_size), nullptr,
      /*allow_exceptions=*/false);
  if (info.is_discarded())
    info = nlohmann::json::object();

  ExeFlags f;
  CLI::App app(describe(info, prog), prog);
  app.formatter(std::make_shared<HelpFormatter>());
  app.option_defaults()->group("options")->disable_flag_override();
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras();
  app.footer(
      "Paths: relative paths of the spec resolve against the spec's "
      "directory at compile time\n(" +
      std::string("shown by --print-plan as baseDir") +
      "), or against --data-root DIR. --source-path replaces the\nsource's "
      "files; a relative PATH is relative to the current directory.\n"
      "exit codes: 0 ok, 1 pipeline or data error, 2 usage error");
  addRunFlags(app, f.run);
  addResumeFlags(app, f.resume);
  app.add_option("--schedule", f.scheduleFile,
                 "per-step parallelism/prefetch/cache overrides (a YAML "
                 "schedule file, e.g. from `sluice tune`)")
      ->type_name("FILE");
  app.add_option("--data-root", f.dataRoot,
                 "resolve the spec's relative data paths against DIR "
                 "instead of the spec's directory")
      ->type_name("DIR");
  app.add_option("--source-path", f.sourcePaths,
                 "read the source's data from PATH instead of what the spec "
                 "names (its root, files or shards glob; idx: images=PATH, "
                 "labels=PATH; repeatable)")
      ->type_name("[PARAM=]PATH")
      ->expected(1)
      ->allow_extra_args(false) // one PATH each time
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--version", f.version,
               "print what this executable was compiled from and exit");
  app.add_flag("--print-plan", f.printPlan,
               "print the embedded plan (JSON, after --data-root and "
               "--source-path) and exit");
  const ExeServeHook *serving = exeServeHook();
  if (serving)
    serving->addFlags(app);

  if (int rc = parseCommandLine(app, argc, argv); rc >= 0)
    return rc;
  if (f.version) {
    std::cout << describe(info, prog);
    return kExitOk;
  }
  if (serving && serving->requested()) {
    const ResumeFlags &r = f.resume;
    if (!r.resume.empty() || !r.saveState.empty() || !r.stopAfter.empty())
      return usageError("--resume, --save-state and --stop-after are for "
                        "running the pipeline here; a worker's trainers say "
                        "where each chunk starts");
    uint64_t digest = std::strtoull(
        info.value("specDigest", std::string("0")).c_str(), nullptr, 16);
    if (int rc = serving->prepare(f.run, digest); rc >= 0)
      return rc;
  }

  // SLUICE_NO_JIT=1 runs the runtime's own kernels, as it does for
  // `sluice run` (an A/B switch; the outputs are the same bytes), on the
  // plan `sluice run --no-jit` runs.
  bool kernelsOff = switchedOff("SLUICE_NO_JIT");
  Expected<runtime::Plan> plan = runtime::Plan::deserialize(
      kernelsOff && sluice_embedded_plan_nojit_size > 0
          ? std::string(sluice_embedded_plan_nojit,
                        sluice_embedded_plan_nojit_size)
          : std::string(sluice_embedded_plan, sluice_embedded_plan_size));
  if (!plan) {
    std::cerr << prog << ": error: the embedded plan cannot be read ("
              << plan.status().message()
              << "); compile the executable again with this sluice\n";
    return kExitData;
  }
  std::unique_ptr<Pipeline> p = Pipeline::fromPlan(
      plan.take(), kernelsOff ? nullptr : sluice_kernel_table);
  const char *noColor = std::getenv("NO_COLOR");
  p->setDiagnostics(&std::cerr, isatty(2) && !(noColor && *noColor), prog);
  runtime::RunOptions &opts = p->options();
  if (!applyRunFlags(f.run, opts, "") ||
      !applyResumeFlags(f.resume, p->plan(), opts, "") ||
      !applyDataFlags(f, p->plan()))
    return kExitUsage;
  if (!f.scheduleFile.empty()) {
    dsl::Spec names = stepNames(info);
    if (Status s = p->useScheduleFile(f.scheduleFile, &names); !s) {
      if (!s.message().empty())
        std::cerr << s.message() << "\n";
      return kExitUsage;
    }
  }
  if (f.printPlan) {
    std::cout << p->plan().serialize() << "\n";
    return kExitOk;
  }
  size_t kernels = runtime::kernelTableSize(sluice_kernel_table);
  // `schedule: auto` in the spec: profile, solve and re-plan as `sluice
  // run` does (the autotuner is MLIR-free; it links GLPK), unless a
  // --schedule file replays a schedule.
  if (serving && serving->requested()) {
    if (Status s = p->prepare(); !s) {
      std::cerr << "sluice: error: " << s.message() << "\n";
      return kExitData;
    }
    if (p->autoSchedule() && opts.stats)
      std::cout << p->autoSchedule()->explanation << "\n";
    return serving->serve(p->plan(), opts);
  }
  int rc = p->run(std::cout, std::cerr);
  if (opts.stats) {
    std::string cpu = info.value("targetCpu", "?");
    if (kernelsOff)
      std::cout << "kernels: off (SLUICE_NO_JIT=1)\n";
    else
      std::cout << "kernels: " << kernels << " compiled ahead of time for CPU "
                << cpu << " (linked in)\n";
  }
  runtime::endProcess(rc); // flushes; skips static teardown (Memory.h)
}
