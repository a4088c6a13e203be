//===- SluiceDialect.td - The sluice dialect and its base classes -*- tablegen -*-===//
//
// The `sluice` dialect describes an input pipeline as a dataflow of record
// streams: one op per stage, typed by the record type flowing out of it.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_DIALECT_TD
#define SLUICE_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Sluice_Dialect : Dialect {
  let name = "sluice";
  let cppNamespace = "::sluice::ir";
  let summary = "Input pipelines as dataflows of typed record streams";
  let description = [{
    A `sluice.pipeline` holds one stage op per source or step of a pipeline
    spec. Every stage consumes at most one `!sluice.stream<...>` and produces
    one; the stream's record type is the record type after that stage, so the
    whole type inference of the front end is visible (and re-checked by the
    verifiers) in the IR. Field values are builtin ranked tensors: a scalar
    `i64` field is `tensor<i64>`, an image is `tensor<?x?x3xui8>`, and
    variable-length bytes and strings are the element types
    `!sluice.bytes` / `!sluice.string`.

    Ops that exist in the op registry (ops/) but have no dedicated op here are
    represented by the generic `sluice.element`, so adding an op to the
    registry never requires a dialect change.
  }];
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerTypes();
  }];
}

/// Base class of all sluice types.
class Sluice_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Sluice_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

/// Base class of all sluice ops.
class Sluice_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sluice_Dialect, mnemonic, traits>;

#endif // SLUICE_DIALECT_TD
