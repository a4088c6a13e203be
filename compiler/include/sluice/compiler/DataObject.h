//===- DataObject.h - Read-only data as a linkable object file --*- C++ -*-===//
//
// `sluice compile` puts the serialized Plan and a description of what the
// executable was compiled from into the executable as plain constant symbols.
// They are written here with LLVM (already linked into the compiler), so
// compiling an executable needs a linker but no C compiler or assembler.
// MLIR/LLVM-free header: the driver includes it.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_COMPILER_DATAOBJECT_H
#define SLUICE_COMPILER_DATAOBJECT_H

#include "sluice/ops/Status.h"

#include <string>
#include <vector>

namespace sluice::compiler {

/// One constant symbol of a data object.
struct DataSymbol {
  /// C symbol name (external linkage).
  std::string name;
  /// Its contents; any bytes, NULs included.
  std::string bytes;
};

/// Writes a relocatable, position-independent object file for the host's
/// target triple to `path`. Each symbol S becomes `const char S[]` holding
/// its bytes and a terminating NUL, plus `const uint64_t S_size` (the byte
/// count without the NUL). An error says what could not be written.
Status emitDataObject(const std::vector<DataSymbol> &symbols,
                      const std::string &path);

/// Whether LLVM knows `cpu` for the host's architecture ("native" always
/// counts); on false, `known` lists the CPU names LLVM accepts.
bool isKnownTargetCpu(const std::string &cpu, std::vector<std::string> &known);

/// The CPU name "native" stands for on this machine ("skylake-avx512", ...).
std::string hostCpuName();

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_DATAOBJECT_H
