//===- SluiceDialect.h - The sluice dialect and its types -------*- C++ -*-===//
#ifndef SLUICE_COMPILER_SLUICEDIALECT_H
#define SLUICE_COMPILER_SLUICEDIALECT_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include "sluice/compiler/SluiceDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "sluice/compiler/SluiceTypes.h.inc"

#endif // SLUICE_COMPILER_SLUICEDIALECT_H
