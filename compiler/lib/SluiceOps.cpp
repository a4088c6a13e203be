//===- SluiceOps.cpp - Definitions and assembly of the sluice ops ---------===//
//
// The ODS-generated op definitions, plus the hand-written pieces they call:
// result names, `custom<Params>` printing, and the stage interface of the
// generic ops. The verifiers live in Verifiers.cpp so that editing them does
// not recompile the generated code.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/SluiceOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace sluice::ir;

//===----------------------------------------------------------------------===//
// Stage interface helpers
//===----------------------------------------------------------------------===//

DictionaryAttr sluice::ir::detail::collectInherentParams(Operation *op) {
  SmallVector<NamedAttribute> entries;
  if (std::optional<RegisteredOperationName> info = op->getRegisteredInfo())
    for (StringAttr name : info->getAttributeNames()) {
      if (name.getValue() == "name")
        continue;
      std::optional<Attribute> attr = op->getInherentAttr(name.getValue());
      if (attr && *attr)
        entries.push_back(NamedAttribute(name, *attr));
    }
  return DictionaryAttr::get(op->getContext(), entries);
}

void sluice::ir::detail::setStepResultName(Operation *op,
                                           OpAsmSetValueNameFn fn) {
  fn(op->getResult(0), cast<StepOpInterface>(op).getStepName());
}

//===----------------------------------------------------------------------===//
// custom<Params>
//===----------------------------------------------------------------------===//

/// The shortest decimal text that reads back as `d` and lexes as an MLIR
/// float literal (which needs a '.').
static std::string shortestFloat(double d) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d)
      break;
  }
  std::string text = buf;
  if (text.find_first_of(".") == std::string::npos) {
    size_t exponent = text.find_first_of("eE");
    text.insert(exponent == std::string::npos ? text.size() : exponent, ".0");
  }
  return text;
}

static void printParamValue(OpAsmPrinter &p, Attribute attr) {
  if (auto dict = dyn_cast<DictionaryAttr>(attr)) {
    p << '{';
    llvm::interleaveComma(dict, p, [&](NamedAttribute entry) {
      p.printKeywordOrString(entry.getName().getValue());
      p << " = ";
      printParamValue(p, entry.getValue());
    });
    p << '}';
    return;
  }
  if (auto array = dyn_cast<ArrayAttr>(attr)) {
    p << '[';
    llvm::interleaveComma(array, p,
                          [&](Attribute item) { printParamValue(p, item); });
    p << ']';
    return;
  }
  if (auto integer = dyn_cast<IntegerAttr>(attr);
      integer && integer.getType().isSignlessInteger(64)) {
    p << integer.getInt();
    return;
  }
  if (auto real = dyn_cast<FloatAttr>(attr);
      real && real.getType().isF64() &&
      std::isfinite(real.getValueAsDouble())) {
    p << shortestFloat(real.getValueAsDouble());
    return;
  }
  p.printAttribute(attr);
}

static ParseResult parseParams(OpAsmParser &parser, DictionaryAttr &params) {
  return parser.parseAttribute(params);
}

static void printParams(OpAsmPrinter &p, Operation *, DictionaryAttr params) {
  printParamValue(p, params);
}

//===----------------------------------------------------------------------===//
// Pipeline and generic stages
//===----------------------------------------------------------------------===//

OutputOp PipelineOp::getOutputOp() {
  return cast<OutputOp>(getBody().front().getTerminator());
}

llvm::StringRef SourceOp::getRegistryName() { return getKind(); }
DictionaryAttr SourceOp::getRegistryParams() { return getParams(); }
llvm::StringRef ElementOp::getRegistryName() { return getKind(); }
DictionaryAttr ElementOp::getRegistryParams() { return getParams(); }

#include "sluice/compiler/SluiceInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "sluice/compiler/SluiceOps.cpp.inc"
