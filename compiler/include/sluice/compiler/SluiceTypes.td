//===- SluiceTypes.td - Record, stream and element types -----*- tablegen -*-===//
#ifndef SLUICE_TYPES_TD
#define SLUICE_TYPES_TD

include "sluice/compiler/SluiceDialect.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Sluice_BytesType : Sluice_Type<"Bytes", "bytes"> {
  let summary = "An opaque byte string (e.g. an encoded JPEG)";
  let description = [{
    Used as the element type of a field tensor whose elements are byte
    strings of varying length: `tensor<!sluice.bytes>` is one blob,
    `tensor<4x!sluice.bytes>` four of them.
  }];
}

def Sluice_StringType : Sluice_Type<"String", "string"> {
  let summary = "A UTF-8 string (a path, a line of text)";
  let description = [{
    Used as the element type of a field tensor whose elements are strings:
    `tensor<!sluice.string>`, `tensor<128x!sluice.string>`.
  }];
}

def Sluice_RecordType : Sluice_Type<"Record", "record"> {
  let summary = "An ordered list of named fields";
  let description = [{
    Each field is a ranked tensor whose element type is a numeric type
    (`ui8`, `i8`, `ui16`, `i16`, `i32`, `i64`, `f16`, `f32`, `f64`, `i1` for
    bool) or `!sluice.bytes` / `!sluice.string`. A scalar field is a rank-0
    tensor; dynamic dimensions are `?`. Field names are unique; names that
    are not identifiers are written as quoted strings.

    ```mlir
    !sluice.record<{image: tensor<224x224x3xui8>, label: tensor<i64>}>
    !sluice.record<{path: tensor<!sluice.string>, "class id": tensor<i32>}>
    ```
  }];
  let parameters = (ins
    ArrayRefParameter<"::mlir::StringAttr", "field names">:$names,
    ArrayRefParameter<"::mlir::Type", "field types">:$types);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    size_t size() const { return getNames().size(); }
    /// Index of the field called `name`, or -1.
    int indexOf(::llvm::StringRef name) const;
    /// The type of field `name`, or null.
    ::mlir::RankedTensorType getFieldType(::llvm::StringRef name) const;
  }];
}

def Sluice_StreamType : Sluice_Type<"Stream", "stream"> {
  let summary = "A stream of records";
  let description = [{
    What flows between stages. The record type is the type every element of
    the stream has.

    ```mlir
    !sluice.stream<!sluice.record<{image: tensor<3x224x224xf32>, label: tensor<i64>}>>
    ```
  }];
  let parameters = (ins "::sluice::ir::RecordType":$recordType);
  let assemblyFormat = "`<` qualified($recordType) `>`";
}

#endif // SLUICE_TYPES_TD
