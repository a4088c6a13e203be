//===- Compile.cpp - `sluice compile`: a spec as a standalone executable --===//
//
// The executable is three inputs linked together:
//
//   data.o      the serialized runtime::Plan and a description of what it
//               was compiled from (emitDataObject, written with LLVM)
//   kernels.o   the generated kernels for --target-cpu, defining
//               `sluice_kernel_table` (compiler::emitKernelObject)
//   exe-link    the runtime, ops, run flags and the executable's main()
//               (sluice_exe_main) as static libraries, plus the Debian
//               shared libraries they use (libtbb, libturbojpeg, ...);
//               with --serve also the gRPC worker (sluice_exe_serve,
//               remote/) and gRPC, protobuf and c-ares, so that `EXE
//               --serve ADDR` serves trainers as `sluice serve` does
//
// The third is listed, one linker argument a line, in the link manifest the
// build writes next to the libraries (<libdir>/sluice/exe-link.txt, and
// exe-link-serve.txt for --serve; found
// from this program's own path, so the build tree and an installed tree both
// work). Linking needs clang++ (as the driver that knows the C runtime and
// libstdc++ of this system) and lld; nothing else of a compiler runs, and the
// executable needs neither, nor MLIR/LLVM, at run time.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include "sluice/compiler/Compiler.h"
#include "sluice/compiler/DataObject.h"
#include "sluice/ops/Registry.h"

#include "sluice/compiler/Codegen.h"
#include "sluice/remote/Remote.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <spawn.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif
#ifndef SLUICE_EXE_LINK_MANIFEST
#error                                                                         \
    "SLUICE_EXE_LINK_MANIFEST (the manifest's path relative to bin/) must be defined"
#endif
#ifndef SLUICE_LLVM_TOOLS_DIR
#define SLUICE_LLVM_TOOLS_DIR "/usr/lib/llvm-19/bin"
#endif

namespace sluice::tool {

std::string selfPath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return "";
  buf[n] = 0;
  return buf;
}

std::string dirName(const std::string &p) {
  size_t slash = p.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

namespace {

struct CompileFlags {
  std::vector<std::string> specs;
  std::string output;
  std::string targetCpu = "native";
  std::vector<std::string> disabledPasses;
  std::string linker;
  std::string saveTemps;
  bool verbose = false;
  bool quiet = false;
  bool noJit = false;
  bool serve = false;
};

bool isExecutableFile(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(p.c_str(), X_OK) == 0;
}

std::string realPath(const std::string &p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

/// `name` if it has a slash, else its first match on $PATH; "" if none.
std::string findProgram(const std::string &name) {
  if (name.find('/') != std::string::npos)
    return isExecutableFile(name) ? name : "";
  const char *path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (isExecutableFile(cand))
      return cand;
  }
  return "";
}

/// The C++ link driver and the lld it should use.
struct Linker {
  std::string driver;
  std::string lld;
};

/// Finds clang++ and ld.lld; a usage error (exit 2) naming what is missing
/// and how to provide it.
Expected<Linker> findLinker(const std::string &requested) {
  const char *hint =
      "`sluice compile` links with clang++ (clang-19) and lld (lld-19): "
      "install them (apt-get install clang-19 lld-19), or name a clang++ "
      "with --linker PATH or SLUICE_LINKER";
  Linker l;
  std::string want = requested;
  if (want.empty())
    if (const char *env = std::getenv("SLUICE_LINKER"); env && *env)
      want = env;
  if (!want.empty()) {
    l.driver = findProgram(want);
    if (l.driver.empty())
      return Status::error(
          "cannot find the linker '" + want + "'" +
          (want.find('/') == std::string::npos ? " on PATH" : "") + "; " +
          hint);
  } else {
    for (const std::string &c :
         {std::string("clang++-19"),
          std::string(SLUICE_LLVM_TOOLS_DIR) + "/clang++",
          std::string("clang++")}) {
      l.driver = findProgram(c);
      if (!l.driver.empty())
        break;
    }
    if (l.driver.empty())
      return Status::error(
          std::string(
              "cannot find clang++-19 on PATH or in " SLUICE_LLVM_TOOLS_DIR
              "; ") +
          hint);
  }
  // lld next to the clang it belongs to, else on PATH.
  for (const std::string &c :
       {dirName(realPath(l.driver)) + "/ld.lld", std::string("ld.lld-19"),
        std::string("ld.lld"),
        std::string(SLUICE_LLVM_TOOLS_DIR) + "/ld.lld"}) {
    l.lld = findProgram(c);
    if (!l.lld.empty())
      break;
  }
  if (l.lld.empty())
    return Status::error("cannot find ld.lld (next to " + l.driver +
                         ", or ld.lld-19 / ld.lld on PATH); " + hint);
  return l;
}

/// Reads the link manifest (exe-link.txt, or exe-link-serve.txt beside it
/// for an executable that can serve): one linker argument a line, `#`
/// comments, `${dir}` standing for the manifest's directory.
Expected<std::vector<std::string>> readLinkManifest(bool serve,
                                                    std::string &where) {
  std::string self = selfPath();
  where = dirName(self) + "/" + SLUICE_EXE_LINK_MANIFEST;
  if (serve)
    where = dirName(where) + "/exe-link-serve.txt";
  std::ifstream in(where);
  if (!in)
    return Status::error(
        "cannot read the link manifest " + where +
        " (the runtime libraries a compiled executable links against); this "
        "sluice was not built or installed completely: rebuild it, or run "
        "`cmake --install` again");
  std::string dir = dirName(realPath(where));
  std::vector<std::string> args;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    for (size_t p; (p = line.find("${dir}")) != std::string::npos;)
      line.replace(p, 6, dir);
    args.push_back(line);
  }
  return args;
}

std::string shellQuote(const std::string &s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                          "0123456789_-+=/.,:@%") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `argv` with its stdout and stderr going to `log`; the exit status,
/// or -1 (with `error` set) if it could not start.
int runProgram(const std::vector<std::string> &argv, const std::string &log,
               std::string &error) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    error = std::strerror(rc);
    return -1;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  error = "killed by signal " + std::to_string(WTERMSIG(status));
  return -1;
}

std::string readWhole(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// A scratch directory removed on destruction (unless kept).
struct TempDir {
  std::string path;
  bool keep = false;
  ~TempDir() {
    if (path.empty() || keep)
      return;
    for (const char *f : {"data.o", "kernels.o", "link.log"})
      ::unlink((path + "/" + f).c_str());
    ::rmdir(path.c_str());
  }
};

/// What the executable prints for --version/--help and uses to check a
/// --schedule file: the spec's step names, as `sluice run` checks them.
nlohmann::json compileInfo(const dsl::Spec &spec, const CompileFlags &f,
                           const std::vector<std::string> &kernelSteps,
                           uint64_t specDigest) {
  nlohmann::json steps = nlohmann::json::array();
  for (const dsl::Step &s : spec.steps)
    steps.push_back({{"name", s.name}, {"op", s.op}});
  std::string cpu = f.targetCpu;
  nlohmann::json info = {
      {"format", 1},
      {"sluice", SLUICE_VERSION},
      {"spec", realPath(spec.file)},
      {"pipeline", spec.pipeline},
      {"targetCpu", cpu},
      {"compiled", utcNow()},
      {"source", {{"name", spec.source.name}, {"op", spec.source.op}}},
      {"steps", steps},
      {"kernelSteps", kernelSteps},
      {"noJit", f.noJit},
      {"disabledPasses", f.disabledPasses},
      {"serve", f.serve},
  };
  // A worker reports its spec's digest, which trainers compare with their
  // own spec's text (remote::specDigest; a hex string: JSON readers lose
  // 64-bit integers).
  if (f.serve) {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(specDigest));
    info["specDigest"] = hex;
  }
  if (cpu == "native")
    info["hostCpu"] = compiler::hostCpuName();
  return info;
}

int runCompile(const CompileFlags &f) {
  if (!checkOneSpec(f.specs, "compile"))
    return kExitUsage;
  if (f.output.empty())
    return usageError("'sluice compile' needs the executable to write: -o EXE",
                      "compile");
  std::vector<std::string> cpus;
  if (!compiler::isKnownTargetCpu(f.targetCpu, cpus)) {
    std::string m = closestMatch(f.targetCpu, cpus);
    return usageError(
        "unknown --target-cpu '" + f.targetCpu + "'" +
            (m.empty() ? "" : "; did you mean '" + m + "'?") +
            " (use native, x86-64, x86-64-v2, x86-64-v3, x86-64-v4 or a CPU "
            "name LLVM knows, e.g. skylake)",
        "compile");
  }
  if (Status s = compiler::checkPassNames(f.disabledPasses); !s)
    return usageError(s.message(), "compile");
  Expected<Linker> linker = findLinker(f.linker);
  if (!linker) {
    std::cerr << "sluice: error: " << linker.status().message() << "\n";
    return kExitUsage;
  }
  std::string manifestPath;
  Expected<std::vector<std::string>> manifest =
      readLinkManifest(f.serve, manifestPath);
  if (!manifest) {
    std::cerr << "sluice: error: " << manifest.status().message() << "\n";
    return kExitData;
  }

  // The spec's plan through the pipeline API, as `sluice run` compiles it,
  // for generated kernels unless --no-jit (whatever SLUICE_NO_JIT says
  // here: the executable's environment decides when it runs).
  OpenOptions o = driverOpenOptions(f.disabledPasses, f.noJit);
  o.jitFromEnvironment = false;
  ErrorKind kind;
  Expected<std::unique_ptr<Pipeline>> opened =
      Pipeline::open(f.specs[0], o, &kind);
  if (!opened) {
    // Located errors are already printed; this is the summary line.
    if (!opened.status().message().empty())
      std::cerr << opened.status().message() << "\n";
    return kind == ErrorKind::Spec ? kExitUsage : kExitData;
  }
  const dsl::Spec *spec = (*opened)->spec();
  runtime::Plan *plan = &(*opened)->plan();
  // The executable runs from anywhere: relative data paths resolve against
  // the spec's directory as an absolute path (or --data-root at run time).
  plan->baseDir = realPath(plan->baseDir.empty() ? "." : plan->baseDir);
  // What the executable runs with SLUICE_NO_JIT=1: the plan of `sluice run
  // --no-jit` (image epilogues folded into the hand-written resize), kept
  // only where it differs.
  std::string noJitPlan;
  if (!f.noJit) {
    Expected<runtime::Plan> folded = (*opened)->noJitPlan();
    if (!folded) {
      std::cerr << folded.status().message() << "\n";
      return kExitData;
    }
    folded->baseDir = plan->baseDir;
    if (folded->serialize() != plan->serialize())
      noJitPlan = folded->serialize();
  }

  TempDir tmp;
  if (!f.saveTemps.empty()) {
    tmp.path = f.saveTemps;
    tmp.keep = true;
    ::mkdir(tmp.path.c_str(), 0755);
  } else {
    const char *t = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(t && *t ? t : "/tmp") + "/sluice-compile-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    if (!::mkdtemp(buf.data())) {
      std::cerr << "sluice: error: cannot create a temporary directory " << tmpl
                << ": " << std::strerror(errno) << "\n";
      return kExitData;
    }
    tmp.path = buf.data();
  }

  std::vector<std::string> kernelSteps;
  std::vector<compiler::DataSymbol> symbols;
  std::vector<std::string> objects = {tmp.path + "/data.o"};
  if (!f.noJit) {
    kernelSteps = compiler::compiledSteps(*plan);
    if (Status s = compiler::emitKernelObject(*plan, f.targetCpu,
                                              tmp.path + "/kernels.o");
        !s) {
      std::cerr << "sluice: error: cannot generate the kernels: " << s.message()
                << "\n";
      return kExitData;
    }
    objects.push_back(tmp.path + "/kernels.o");
  } else {
    // An empty kernel table (only the terminator, a null entry of three
    // pointers): every step runs the runtime's own kernels, as with
    // `sluice run --no-jit`.
    symbols.push_back({"sluice_kernel_table", std::string(24, '\0')});
  }
  symbols.push_back({"sluice_embedded_plan", plan->serialize()});
  symbols.push_back({"sluice_embedded_plan_nojit", noJitPlan});
  symbols.push_back({"sluice_embedded_info",
                     compileInfo(*spec, f, kernelSteps,
                                 remote::specDigest(readWhole(spec->file)))
                         .dump(1)});
  if (Status s = compiler::emitDataObject(symbols, objects[0]); !s) {
    std::cerr << "sluice: error: " << s.message() << "\n";
    return kExitData;
  }

  std::vector<std::string> argv = {linker->driver, "-fuse-ld=lld",
                                   "--ld-path=" + linker->lld, "-o", f.output};
  argv.insert(argv.end(), objects.begin(), objects.end());
  argv.insert(argv.end(), manifest->begin(), manifest->end());
  std::string cmdline;
  for (const std::string &a : argv)
    cmdline += (cmdline.empty() ? "" : " ") + shellQuote(a);
  if (f.verbose)
    std::cerr << cmdline << "\n";
  std::string log = tmp.path + "/link.log", error;
  int rc = runProgram(argv, log, error);
  std::string out = readWhole(log);
  if (rc != 0) {
    std::cerr << "sluice: error: linking " << f.output << " failed ("
              << (rc < 0 ? error : "exit status " + std::to_string(rc)) << ")\n"
              << out << (out.empty() || out.back() == '\n' ? "" : "\n")
              << "the link command was: " << cmdline << "\n";
    return kExitData;
  }
  if (f.verbose && !out.empty())
    std::cerr << out;
  if (!f.quiet) {
    std::cout << "wrote " << f.output << ": pipeline " << plan->name << ", "
              << "kernels for " << kernelSteps.size()
              << (kernelSteps.size() == 1 ? " step" : " steps")
              << (f.noJit ? " (--no-jit)" : "") << " for CPU " << f.targetCpu;
    if (f.targetCpu == "native")
      std::cout << " (" << compiler::hostCpuName() << ")";
    if (f.serve)
      std::cout << ", serving with --serve ADDR";
    std::cout << "; '" << f.output << " --help' lists its flags\n";
  }
  return kExitOk;
}

} // namespace

CommandAction addCompileCommand(CLI::App &root) {
  auto st = std::make_shared<CompileFlags>();
  CLI::App *cmd = root.add_subcommand(
      "compile",
      "compile the pipeline into a standalone executable that takes the "
      "flags of `sluice run` (EXE --help) and needs no spec, MLIR or "
      "compiler to run");
  addSpecArg(*cmd, st->specs);
  cmd->add_option("-o,--output", st->output, "the executable to write")
      ->type_name("EXE");
  cmd->add_option("--target-cpu", st->targetCpu,
                  "CPU the generated kernels are compiled for: native (this "
                  "machine, the default), x86-64, x86-64-v2, x86-64-v3, "
                  "x86-64-v4 or an LLVM CPU name; pick a portable one for an "
                  "executable that runs elsewhere")
      ->type_name("CPU");
  cmd->add_option("--disable-pass", st->disabledPasses,
                  "do not run this graph pass (repeatable; see `sluice "
                  "explain --help`)")
      ->type_name("NAME")
      ->expected(1)
      ->allow_extra_args(false) // one NAME each time: SPEC may follow
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--no-jit", st->noJit,
                "generate no kernels: the executable runs the runtime's own "
                "kernels (same output bytes, as `sluice run --no-jit`)");
  cmd->add_flag("--serve", st->serve,
                "link the gRPC worker in too: the executable then also "
                "serves trainers on other hosts with '--serve ADDR', as "
                "`sluice serve` does (docs/distributed.md); it needs gRPC, "
                "protobuf and c-ares at run time");
  cmd->add_option("--linker", st->linker,
                  "the clang++ that links the executable (default: "
                  "$SLUICE_LINKER, else clang++-19 on PATH); lld must be "
                  "installed beside it or on PATH")
      ->type_name("PATH");
  cmd->add_option("--save-temps", st->saveTemps,
                  "keep the object files and the link log in DIR")
      ->type_name("DIR");
  cmd->add_flag("-v,--verbose", st->verbose, "print the link command");
  cmd->add_flag("-q,--quiet", st->quiet, "print nothing on success");
  return [st] { return runCompile(*st); };
}

} // namespace sluice::tool
