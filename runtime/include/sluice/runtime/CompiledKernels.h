//===- CompiledKernels.h - Kernels compiled ahead of the run -----*- C++
//-*-===//
//
// The seam between compiler/ (which generates native kernels, JIT or as an
// object file) and the runtime (which must never include MLIR): a kernel is a
// plain function pointer in a table of SluiceKernelInfo, terminated by an
// entry whose `stage` is null. The JIT builds such a table in memory; a
// compiled executable links an object that defines `sluice_kernel_table`.
// binderFromKernelTable() turns a table into a RunOptions::binder, so the
// runtime calls the generated code for the steps it covers and its own
// kernels for the rest.
//
// Signatures (the `signature` string says how to call `fn`):
//
//   "values FIELD IN -> OUT OUTELEM" [" channels C"]
//       void fn(const void *in, void *out, int64_t n)
//       A value-wise chain over field FIELD (element type IN) writing field
//       OUT (element type OUTELEM, same shape): out[i] = f(in[i]) for
//       i < n. A stage may have several entries (one per field it touches);
//       they run in table order on the same record. FIELD == OUT replaces
//       the field; OUT may also name a field the stage appends or replaces
//       (`as`). With "channels C" (a per-channel normalize in the chain)
//       f also depends on i mod C, the channel: the kernel is only called
//       on records whose FIELD has last dim C; the others take the unfused
//       steps.
//
//   "remap FIELD IN -> FIELD OUTELEM"
//       void fn(const void *in, void *out, const int64_t *params)
//       A remap chain (sluice-fuse-remaps, or a lone normalize): the whole
//       field in one call; `params` is the per-record block RemapChain.h
//       lays out (sizes, crop offsets, flip draws). The stage's only entry.
//
//   "condition"
//       void fn(const void *const *slots, int64_t *kept)
//       A filter's condition: slots[i] points at the element that load slot
//       i of the condition's bytecode (kernels::CompiledExpr::slots()) reads;
//       *kept is set to 1 to keep the record, 0 to drop it. The stage's only
//       entry.
//
//   "condition rows"
//       void fn(const void *const *bases, const int64_t *strides,
//               const uint32_t *rows, int64_t n, uint8_t *keep)
//       The same condition over a run of records held as columns (record
//       runs, RowsFilterFn): load slot i of row r is element r * strides[i]
//       of bases[i] (the slot's column, offset by its index in a row);
//       keep[j] = 1 if row rows[j] (row j when rows is null) is kept, else
//       0. A filter stage's second entry, bound by rowsBinderFromKernelTable.
//
// The table shape is versioned by the signature grammar: an entry whose
// signature the runtime does not understand is an error at bind time, never
// silently skipped.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_COMPILEDKERNELS_H
#define SLUICE_RUNTIME_COMPILEDKERNELS_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/ElementOps.h"
#include "sluice/runtime/Plan.h"

#include <functional>
#include <optional>

extern "C" {
/// One generated kernel. A table ends with an entry whose `stage` is null.
struct SluiceKernelInfo {
  const char *stage;     ///< step name (PlanStep::name) it implements
  const char *signature; ///< how to call `fn` (see the file comment)
  void *fn;
};
}

namespace sluice::runtime {

/// The shape of RunOptions::binder.
using KernelBinder =
    std::function<std::optional<Expected<ElementFn>>(const PlanStep &)>;

/// A binder that binds every stage named in `table` to its kernels and
/// leaves the others (nullopt) to the runtime. The table must outlive the
/// pipeline. A null table binds nothing.
KernelBinder binderFromKernelTable(const SluiceKernelInfo *table);

/// The shape of RunOptions::rowsBinder.
using RowsKernelBinder =
    std::function<std::optional<Expected<RowsFilterFn>>(const PlanStep &)>;

/// A binder of the "condition rows" entries of `table`: the column test of
/// each filter stage it names (nullopt for the others, which then take the
/// interpreter's CompiledExpr::testRows). A run whose columns the
/// interpreter would reject (another type, an index out of range) goes to
/// the interpreter, which reports what it always reported.
/// SLUICE_NO_GENERATED_ROWS_FILTER=1 makes it bind nothing.
RowsKernelBinder rowsBinderFromKernelTable(const SluiceKernelInfo *table);

/// The number of entries before the terminator.
size_t kernelTableSize(const SluiceKernelInfo *table);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_COMPILEDKERNELS_H
