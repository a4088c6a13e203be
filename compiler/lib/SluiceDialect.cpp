//===- SluiceDialect.cpp - The sluice dialect and its types ---------------===//
#include "sluice/compiler/SluiceDialect.h"
#include "sluice/compiler/Interop.h"
#include "sluice/compiler/SluiceOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace sluice::ir;

#include "sluice/compiler/SluiceDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "sluice/compiler/SluiceTypes.cpp.inc"

void SluiceDialect::initialize() {
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "sluice/compiler/SluiceOps.cpp.inc"
      >();
}

void SluiceDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "sluice/compiler/SluiceTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RecordType
//===----------------------------------------------------------------------===//

int RecordType::indexOf(StringRef name) const {
  for (auto [i, n] : llvm::enumerate(getNames()))
    if (n.getValue() == name)
      return static_cast<int>(i);
  return -1;
}

RankedTensorType RecordType::getFieldType(StringRef name) const {
  int i = indexOf(name);
  return i < 0 ? RankedTensorType()
               : llvm::cast<RankedTensorType>(getTypes()[i]);
}

LogicalResult RecordType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 ArrayRef<StringAttr> names,
                                 ArrayRef<Type> types) {
  if (names.size() != types.size())
    return emitError() << "record has " << names.size() << " names but "
                       << types.size() << " field types";
  llvm::SmallDenseSet<StringAttr> seen;
  for (auto [name, type] : llvm::zip_equal(names, types)) {
    if (!name || name.getValue().empty())
      return emitError() << "record field names must not be empty";
    if (!seen.insert(name).second)
      return emitError() << "record field '" << name.getValue()
                         << "' appears twice";
    if (!sluice::compiler::convertFieldType(type))
      return emitError()
             << "record field '" << name.getValue() << "' has type " << type
             << "; fields are ranked tensors of ui8, i8, ui16, i16, i32, i64, "
                "f16, f32, f64, i1, !sluice.bytes or !sluice.string";
  }
  return success();
}

Type RecordType::parse(AsmParser &parser) {
  SmallVector<StringAttr> names;
  SmallVector<Type> types;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseLBrace())
    return {};
  if (failed(parser.parseOptionalRBrace())) {
    do {
      std::string name;
      Type type;
      if (parser.parseKeywordOrString(&name) || parser.parseColon() ||
          parser.parseType(type))
        return {};
      names.push_back(StringAttr::get(parser.getContext(), name));
      types.push_back(type);
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseRBrace())
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<RecordType>(loc, parser.getContext(), names, types);
}

void RecordType::print(AsmPrinter &printer) const {
  printer << "<{";
  llvm::interleaveComma(
      llvm::zip_equal(getNames(), getTypes()), printer, [&](auto field) {
        printer.printKeywordOrString(std::get<0>(field).getValue());
        printer << ": ";
        printer.printType(std::get<1>(field));
      });
  printer << "}>";
}
