//===- Jit.cpp - Compiling a plan's kernels: JIT, object cache, AOT -------===//
//
// JitKernels::compile() is what `sluice run` and `bench` call:
//
//   Plan ─collectKernels─► module (MLIR) ─print─► key = SHA-256(IR text,
//        target triple, CPU, CPU features, LLVM version, codegen version)
//                                                   │
//          cache hit: <cache>/kernels-<key>.o ──────┤ (key and SHA-256
//          miss: lower ─► LLVM IR ─► O3 ─► object ──┤  checked; stored
//                                                   │  atomically)
//                                                   ▼
//                       ORC LLJIT links the object in memory and resolves
//                       libm calls from the process ─► &sluice_kernel_table
//
// The JIT links the same object file emitKernelObject() writes for `sluice
// compile`, so both run identical machine code for the same CPU. ORC's
// LLJIT is used instead of mlir::ExecutionEngine because the engine can
// only compile a module, not load a cached object.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/Codegen.h"
#include "sluice/ops/Switches.h"

#include "CodegenInternal.h"

#include "sluice/ops/kernels/MathCalls.h"

#include "mlir/IR/MLIRContext.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/Core.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace sluice::compiler {

using namespace codegen;

namespace {

/// Bump when the table layout or the generated code's conventions change
/// without the kernel IR text changing.
constexpr const char *kCodegenVersion = "sluice-codegen-1";

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string envOr(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string cacheDirectory(const CodegenOptions &opts) {
  if (!opts.cacheDir.empty())
    return opts.cacheDir;
  if (std::string d = envOr("SLUICE_CACHE_DIR"); !d.empty())
    return d;
  if (std::string d = envOr("XDG_CACHE_HOME"); !d.empty())
    return d + "/sluice";
  if (std::string d = envOr("HOME"); !d.empty())
    return d + "/.cache/sluice";
  return "";
}

bool cacheEnabled(const CodegenOptions &opts) {
  return opts.useCache && !switchedOff("SLUICE_NO_KERNEL_CACHE");
}

std::string hexKey(const std::string &text) {
  llvm::SHA256 sha;
  sha.update(text);
  std::array<uint8_t, 32> digest = sha.final();
  static const char *hex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

/// Reads a whole file; false if it is absent or unreadable.
bool readWhole(const std::string &path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return !out.empty();
}

/// A cache entry is this header, then the object:
///   sluice-kernel-cache-2\n key <key>\n sha256 <digest of the object>\n
/// The key (compiler version, LLVM, target, CPU and features, kernel IR) is
/// also the file name; stored inside, it catches an entry copied or renamed
/// from another key. The digest catches damaged bytes: an object with a
/// flipped byte in its constants still links and computes NaNs, one in its
/// code can fault with SIGILL. A mismatch is never trusted: the kernels are
/// compiled again and the entry replaced.
constexpr const char *kEntryMagic = "sluice-kernel-cache-2\n";

std::string cacheEntry(const std::string &key, const std::string &object) {
  return std::string(kEntryMagic) + "key " + key + "\nsha256 " +
         hexKey(object) + "\n" + object;
}

/// The object in a cache entry for `key`; "" with `why` set when the entry
/// is not one whole, undamaged entry for this key.
std::string objectOfEntry(const std::string &entry, const std::string &key,
                          std::string &why) {
  std::string magic = kEntryMagic;
  if (entry.compare(0, magic.size(), magic) != 0) {
    why = "not a sluice kernel cache entry of this version";
    return "";
  }
  size_t keyLine = magic.size();
  size_t keyEnd = entry.find('\n', keyLine);
  if (keyEnd == std::string::npos ||
      entry.compare(keyLine, keyEnd - keyLine, "key " + key) != 0) {
    why = "it was written for another compiler, CPU or kernel (key mismatch)";
    return "";
  }
  size_t digestEnd = entry.find('\n', keyEnd + 1);
  std::string prefix = "sha256 ";
  if (digestEnd == std::string::npos ||
      entry.compare(keyEnd + 1, prefix.size(), prefix) != 0) {
    why = "its header is damaged";
    return "";
  }
  std::string digest = entry.substr(keyEnd + 1 + prefix.size(),
                                    digestEnd - keyEnd - 1 - prefix.size());
  std::string object = entry.substr(digestEnd + 1);
  if (object.empty() || hexKey(object) != digest) {
    why = "its SHA-256 digest does not match its " +
          std::to_string(object.size()) + " bytes (damaged or cut short)";
    return "";
  }
  return object;
}

/// Writes `data` to `path` through a temporary file and a rename, so a
/// reader never sees half an object. Returns "" or what went wrong.
std::string writeAtomically(const std::string &path, const std::string &data) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  if (ec)
    return ec.message();
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return "cannot create " + tmp;
    out.write(data.data(), std::streamsize(data.size()));
    if (!out)
      return "cannot write " + tmp;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return "cannot rename into " + path;
  }
  return "";
}

/// The kernel module of a plan, built and printed (the cache key's input).
struct BuiltModule {
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<KernelSpec> kernels;
  std::string text;
  /// The plan the kernels were collected from (they point into it).
  std::unique_ptr<runtime::Plan> plan;
};

/// `withSplits`: also the kernels of the stages a cache inside a fused
/// stage splits it into (runtime::cacheSplitSteps), so a split the
/// autotuner or a schedule file chooses at run time runs generated code.
Expected<BuiltModule> buildModule(const runtime::Plan &plan,
                                  bool withSplits = true) {
  BuiltModule m;
  m.ctx = std::make_unique<mlir::MLIRContext>(
      mlir::MLIRContext::Threading::DISABLED);
  m.plan = std::make_unique<runtime::Plan>(plan);
  if (withSplits)
    for (runtime::PlanStep &s : runtime::cacheSplitSteps(plan))
      if (std::none_of(
              m.plan->steps.begin(), m.plan->steps.end(),
              [&](const runtime::PlanStep &t) { return t.name == s.name; }))
        m.plan->steps.push_back(std::move(s));
  m.kernels = collectKernels(*m.plan);
  std::string error;
  m.module = buildKernelModule(*m.ctx, m.kernels, error);
  if (!m.module)
    return Status::error("internal error generating kernels: " + error);
  if (!tidyKernelModule(*m.module, error))
    return Status::error("internal error generating kernels: " + error);
  llvm::raw_string_ostream os(m.text);
  m.module->print(os);
  return m;
}

/// Lowers `m` and returns its object file for `tm`; optionally the LLVM IR.
Expected<std::string> compileObject(BuiltModule &m, llvm::TargetMachine &tm,
                                    std::string *llvmIr = nullptr) {
  std::string error;
  if (!lowerToLLVMDialect(*m.module, error))
    return Status::error("internal error: " + error);
  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> llvmModule =
      translateKernels(*m.module, m.kernels, llvmCtx, error);
  if (!llvmModule)
    return Status::error("internal error: " + error);
  std::string object;
  if (llvmIr) {
    if (!optimizeModule(*llvmModule, tm, error))
      return Status::error("internal error: " + error);
    llvm::raw_string_ostream os(*llvmIr);
    llvmModule->print(os, nullptr);
    return object;
  }
  if (!emitObject(*llvmModule, tm, object, error))
    return Status::error("internal error: " + error);
  return object;
}

} // namespace

bool jitDisabledByEnvironment() { return switchedOff("SLUICE_NO_JIT"); }

struct JitKernels::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  const SluiceKernelInfo *table = nullptr;
  SluiceKernelInfo empty{nullptr, nullptr, nullptr};
  CodegenStats stats;
  std::string cacheNote;
};

JitKernels::JitKernels(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitKernels::~JitKernels() = default;

const SluiceKernelInfo *JitKernels::table() const { return impl_->table; }
runtime::KernelBinder JitKernels::binder() const {
  return runtime::binderFromKernelTable(impl_->table);
}
runtime::RowsKernelBinder JitKernels::rowsBinder() const {
  return runtime::rowsBinderFromKernelTable(impl_->table);
}
void JitKernels::bind(runtime::RunOptions &opts) const {
  opts.binder = binder();
  opts.rowsBinder = rowsBinder();
}
const CodegenStats &JitKernels::stats() const { return impl_->stats; }

std::string JitKernels::summary() const {
  const CodegenStats &s = impl_->stats;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "kernels: " << s.kernels << " generated";
  if (s.kernels == 0)
    return os.str() + " (no step to compile)";
  os << " in " << s.totalMs << " ms (";
  if (s.cacheHits)
    os << "cache hit";
  else
    os << "compiled in " << s.compileMs << " ms, cache miss";
  os << ")";
  if (!impl_->cacheNote.empty())
    os << "; " << impl_->cacheNote;
  return os.str();
}

Expected<std::unique_ptr<JitKernels>>
JitKernels::compile(const runtime::Plan &plan, const CodegenOptions &opts) {
  Clock::time_point start = Clock::now();
  auto impl = std::make_unique<Impl>();
  impl->table = &impl->empty;
  Expected<BuiltModule> built = buildModule(plan);
  if (!built)
    return built.status();
  BuiltModule m = built.take();
  impl->stats.kernels = int64_t(m.kernels.size());
  if (m.kernels.empty()) {
    impl->stats.totalMs = msSince(start);
    return std::unique_ptr<JitKernels>(new JitKernels(std::move(impl)));
  }
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine("native", error);
  if (!tm)
    return Status::error("internal error: " + error);
  impl->stats.buildMs = msSince(start);

  std::string key =
      hexKey(std::string(kCodegenVersion) + "\n" + LLVM_VERSION_STRING + "\n" +
             tm->getTargetTriple().str() + "\n" + tm->getTargetCPU().str() +
             "\n" + tm->getTargetFeatureString().str() + "\n" + m.text);
  std::string dir = cacheEnabled(opts) ? cacheDirectory(opts) : "";
  std::string path = dir.empty() ? "" : dir + "/kernels-" + key + ".o";
  std::string object;
  bool hit = false;
  if (std::string entry; !path.empty() && readWhole(path, entry)) {
    std::string why;
    object = objectOfEntry(entry, key, why);
    hit = !object.empty();
    if (!hit) {
      impl->stats.cacheRejected = 1;
      impl->cacheNote =
          "replaced a cache entry not trusted (" + path + ": " + why + ")";
    }
  }

  auto link = [&](const std::string &obj) -> Status {
    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit)
      return Status::error("internal error: cannot start the JIT: " +
                           llvm::toString(jit.takeError()));
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        (*jit)->getDataLayout().getGlobalPrefix());
    if (!gen)
      return Status::error("internal error: " +
                           llvm::toString(gen.takeError()));
    (*jit)->getMainJITDylib().addGenerator(std::move(*gen));
    // The math entry points by address: this binary need not export them.
    llvm::orc::SymbolMap math;
    for (const kernels::MathCall *c = kernels::mathCallTable(); c->name; ++c)
      math[(*jit)->mangleAndIntern(c->name)] =
          llvm::orc::ExecutorSymbolDef(llvm::orc::ExecutorAddr::fromPtr(c->fn),
                                       llvm::JITSymbolFlags::Exported);
    if (llvm::Error e = (*jit)->getMainJITDylib().define(
            llvm::orc::absoluteSymbols(std::move(math))))
      return Status::error("internal error: " + llvm::toString(std::move(e)));
    if (llvm::Error e = (*jit)->addObjectFile(
            llvm::MemoryBuffer::getMemBufferCopy(obj, "sluice_kernels.o")))
      return Status::error("cannot load the kernel object: " +
                           llvm::toString(std::move(e)));
    auto sym = (*jit)->lookup("sluice_kernel_table");
    if (!sym)
      return Status::error("cannot find the kernel table: " +
                           llvm::toString(sym.takeError()));
    impl->table = sym->toPtr<const SluiceKernelInfo *>();
    impl->jit = std::move(*jit);
    return Status::ok();
  };

  if (hit) {
    if (Status s = link(object); s) {
      impl->stats.cacheHits = 1;
      impl->stats.totalMs = msSince(start);
      return std::unique_ptr<JitKernels>(new JitKernels(std::move(impl)));
    }
    // An entry whose digest matches but which does not link (written by a
    // build with another LLVM): compile afresh and overwrite it.
    impl->stats.cacheRejected = 1;
    impl->cacheNote = "replaced a cache entry that did not link (" + path + ")";
  }
  Clock::time_point compileStart = Clock::now();
  Expected<std::string> compiled = compileObject(m, *tm);
  if (!compiled)
    return compiled.status();
  object = compiled.take();
  impl->stats.compileMs = msSince(compileStart);
  impl->stats.cacheMisses = 1;
  if (!path.empty())
    if (std::string w = writeAtomically(path, cacheEntry(key, object));
        !w.empty())
      impl->cacheNote = "cache not written: " + w;
  if (Status s = link(object); !s)
    return s;
  impl->stats.totalMs = msSince(start);
  return std::unique_ptr<JitKernels>(new JitKernels(std::move(impl)));
}

Status emitKernelObject(const runtime::Plan &plan, const std::string &cpu,
                        const std::string &path) {
  Expected<BuiltModule> built = buildModule(plan);
  if (!built)
    return built.status();
  BuiltModule m = built.take();
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine(cpu, error);
  if (!tm)
    return Status::error(error);
  Expected<std::string> object = compileObject(m, *tm);
  if (!object)
    return object.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    return Status::error("cannot write " + path);
  out.write(object->data(), std::streamsize(object->size()));
  if (!out)
    return Status::error("cannot write " + path);
  return Status::ok();
}

Status printKernels(const runtime::Plan &plan, const std::string &form,
                    std::ostream &out) {
  // The plan's own kernels (not those of split halves a cache may need).
  Expected<BuiltModule> built = buildModule(plan, /*withSplits=*/false);
  if (!built)
    return built.status();
  BuiltModule m = built.take();
  if (m.kernels.empty()) {
    out << (form == "llvm" ? "; " : "// ")
        << "no step of this pipeline is compiled to a kernel\n";
    return Status::ok();
  }
  if (form == "kernels") {
    out << m.text;
    return Status::ok();
  }
  std::string error;
  std::unique_ptr<llvm::TargetMachine> tm = makeTargetMachine("native", error);
  if (!tm)
    return Status::error(error);
  std::string ir;
  Expected<std::string> r = compileObject(m, *tm, &ir);
  if (!r)
    return r.status();
  out << ir;
  return Status::ok();
}

std::vector<std::string> compiledSteps(const runtime::Plan &plan) {
  std::vector<std::string> names;
  for (const KernelSpec &k : collectKernels(plan))
    if (names.empty() || names.back() != k.stage)
      names.push_back(k.stage);
  return names;
}

} // namespace sluice::compiler
