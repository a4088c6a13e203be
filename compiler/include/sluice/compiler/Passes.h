//===- Passes.h - Graph passes over the sluice dialect ----------*- C++ -*-===//
#ifndef SLUICE_COMPILER_PASSES_H
#define SLUICE_COMPILER_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace sluice::compiler {

#define GEN_PASS_DECL
#include "sluice/compiler/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "sluice/compiler/Passes.h.inc"

} // namespace sluice::compiler

#endif // SLUICE_COMPILER_PASSES_H
