//===- main.cpp - The sluice command-line driver ---------------------------===//
//
// sluice check|explain|ops|run|compile|tune|bench. Exit codes: 0 ok,
// 1 pipeline/data error, 2 usage or spec error.
//
//===----------------------------------------------------------------------===//
#include "sluice/dsl/Spec.h"
#include "sluice/ops/Registry.h"
#ifdef SLUICE_HAVE_COMPILER
#include "sluice/compiler/Compiler.h"
#endif

#include <algorithm>
#include <cstring>
#include <iostream>
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
  explain SPEC [--ir graph|kernels|llvm] [--print-ir-after-all] [--disable-pass NAME]
               [--remarks] [--locations]
                                    print the compiled pipeline (MLIR)
  ops     [--markdown]              list the sources and ops of the pipeline language
  run     SPEC [--epochs N] [--sink null|npy:DIR] [--schedule FILE] [--threads N]
  compile SPEC -o EXE               standalone executable; same flags as run
  tune    SPEC [--cores N] [--memory SIZE] [--report DIR] [--check BASELINE.json]
  bench   SPEC [--seconds S]        throughput and a per-stage table

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
#ifdef SLUICE_HAVE_COMPILER
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
#else
  std::cerr << "sluice: error: this build has no compiler\n";
  return kExitUsage;
#endif
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

int notYet(const char *cmd) {
  std::cerr << "sluice: error: '" << cmd
            << "' is not available in this build yet (it arrives with the "
               "runtime); 'check', 'explain' and 'ops' work\n";
  return kExitUsage;
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
  if (cmd == "run" || cmd == "compile" || cmd == "tune" || cmd == "bench")
    return notYet(cmd.c_str());
  std::string m = closestMatch(
      cmd, {"check", "explain", "ops", "run", "compile", "tune", "bench"});
  return usageError("unknown command '" + cmd + "'" +
                    (m.empty() ? "" : "; did you mean '" + m + "'?"));
}
