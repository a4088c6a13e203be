//===- SluiceInterfaces.td - What every pipeline step provides -*- tablegen -*-===//
#ifndef SLUICE_INTERFACES_TD
#define SLUICE_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Sluice_StepOpInterface : OpInterface<"StepOpInterface"> {
  let cppNamespace = "::sluice::ir";
  let description = [{
    A step of a pipeline: the source or a step of the spec. Steps are tied
    to an op registry entry (ops/Registry.h) whose type rule the verifier
    re-runs, and carry the unique step name that schedules and reports use.
  }];
  let methods = [
    InterfaceMethod<[{
        The name of the op registry entry this step runs ("batch",
        "decode_image", "image_folder").
      }], "::llvm::StringRef", "getRegistryName", (ins), [{}], [{
        return $_op->getName().stripDialect();
      }]>,
    InterfaceMethod<[{
        The unique step name: the `name` attribute, or the registry name
        when the attribute is absent.
      }], "::llvm::StringRef", "getStepName", (ins), [{}], [{
        if (auto attr = $_op->template getAttrOfType<::mlir::StringAttr>("name"))
          return attr.getValue();
        return $_op.getRegistryName();
      }]>,
    InterfaceMethod<[{
        The registry parameters of this step, as attributes. Dedicated ops
        store each parameter as an inherent attribute of the same name.
      }], "::mlir::DictionaryAttr", "getRegistryParams", (ins), [{}], [{
        return ::sluice::ir::detail::collectInherentParams($_op.getOperation());
      }]>,
    InterfaceMethod<"The stream this step consumes, or null for a source.",
      "::mlir::TypedValue<::sluice::ir::StreamType>", "getInputStream", (ins),
      [{}], [{
        if ($_op->getNumOperands() == 0)
          return nullptr;
        return ::mlir::cast<::mlir::TypedValue<::sluice::ir::StreamType>>(
            $_op->getOperand(0));
      }]>,
    InterfaceMethod<"The stream this step produces.",
      "::mlir::TypedValue<::sluice::ir::StreamType>", "getOutputStream", (ins),
      [{}], [{
        return ::mlir::cast<::mlir::TypedValue<::sluice::ir::StreamType>>(
            $_op->getResult(0));
      }]>,
  ];
}

#endif // SLUICE_INTERFACES_TD
