//===- Codegen.h - Native kernels for a Plan (MLIR-free facade) -*- C++ -*-===//
//
// The code generator turns the value-wise steps of a runtime::Plan
// (fill_missing, clamp, cast, hash_bucket and `map` expressions, alone or as
// a fused "a+b+c" stage) into native functions: each step chain becomes a
// loop of arith/math over one field (compiler/lib/Codegen), lowered to LLVM
// and compiled by mlir::ExecutionEngine (JIT) or written to an object file
// (AOT, for `sluice compile`). Either way the result is a SluiceKernelInfo
// table that runtime::binderFromKernelTable() binds; the runtime never sees
// MLIR. Generated kernels compute the same bytes as the runtime's kernels
// (the expression interpreter's bytecode is lowered instruction by
// instruction; transcendental functions call the same libm functions), so
// turning codegen off (`--no-jit`, SLUICE_NO_JIT=1) changes no output.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_CODEGEN_H
#define SLUICE_COMPILER_CODEGEN_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/CompiledKernels.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace sluice::compiler {

struct CodegenOptions {
  /// Directory of the on-disk object cache; "" = $SLUICE_CACHE_DIR, else
  /// $XDG_CACHE_HOME/sluice, else ~/.cache/sluice.
  std::string cacheDir;
  /// false (or SLUICE_NO_KERNEL_CACHE=1): always compile, write nothing.
  bool useCache = true;
};

/// What compiling the kernels of one plan cost.
struct CodegenStats {
  int64_t kernels = 0;     ///< generated functions
  int64_t cacheHits = 0;   ///< 1 if the object came from the cache
  int64_t cacheMisses = 0; ///< 1 if it was compiled (and stored)
  /// 1 if a cache entry was found but not trusted (its digest or key did
  /// not match, or it did not link): it was compiled again and replaced.
  int64_t cacheRejected = 0;
  double buildMs = 0;   ///< IR construction + lowering to LLVM
  double compileMs = 0; ///< LLVM optimization + machine code (0 on a hit)
  double totalMs = 0;   ///< everything, including loading
};

/// True when SLUICE_NO_JIT=1 (or any non-empty value other than 0) asks to
/// run the runtime's own kernels only.
bool jitDisabledByEnvironment();

/// Compiled kernels of one plan, alive as long as this object.
class JitKernels {
public:
  /// Generates and compiles the kernels of every step of `plan` the code
  /// generator covers (possibly none: the table is then only the
  /// terminator). An error is an internal compiler failure.
  static Expected<std::unique_ptr<JitKernels>>
  compile(const runtime::Plan &plan, const CodegenOptions &opts = {});
  ~JitKernels();
  JitKernels(const JitKernels &) = delete;
  JitKernels &operator=(const JitKernels &) = delete;

  /// The table, terminated by an entry whose stage is null.
  const SluiceKernelInfo *table() const;
  /// binderFromKernelTable(table()).
  runtime::KernelBinder binder() const;
  /// rowsBinderFromKernelTable(table()): filters' column tests for record
  /// runs.
  runtime::RowsKernelBinder rowsBinder() const;
  /// Sets opts.binder and opts.rowsBinder.
  void bind(runtime::RunOptions &opts) const;
  const CodegenStats &stats() const;
  /// One line for `--stats`: "kernels: 3 compiled in 41.2 ms (cache miss)".
  std::string summary() const;

  struct Impl;

private:
  explicit JitKernels(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Writes the kernels of `plan` as a relocatable object file for `cpu`
/// ("native" = this machine, "x86-64", "x86-64-v2", "x86-64-v3", ...,
/// or any CPU name LLVM knows) defining the C symbol `sluice_kernel_table`
/// (an array of SluiceKernelInfo ending with the terminator), with its
/// strings and functions. Calls into libm (log, exp, ...) stay external.
Status emitKernelObject(const runtime::Plan &plan, const std::string &cpu,
                        const std::string &path);

/// `sluice explain --ir kernels` (the kernel functions as MLIR, before
/// lowering) or `--ir llvm` (the LLVM IR module, after optimization).
/// Prints a comment line when the plan has no step to compile.
Status printKernels(const runtime::Plan &plan, const std::string &form,
                    std::ostream &out);

/// The names of the steps `plan` would compile, in plan order.
std::vector<std::string> compiledSteps(const runtime::Plan &plan);

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_CODEGEN_H
