//===- sluice-opt.cpp - Runs sluice passes on .mlir files -----------------===//
#include "sluice/compiler/MLIRGen.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include <cstring>

/// `--sluice-check-registry`: compares the dedicated ops with the op registry
/// (see registryMismatches). Handled before MlirOptMain, which would want an
/// input file.
static bool checkRegistry(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--sluice-check-registry") == 0)
      return true;
  return false;
}

int main(int argc, char **argv) {
  if (checkRegistry(argc, argv)) {
    mlir::MLIRContext context;
    size_t checked = 0;
    std::vector<std::string> problems =
        sluice::compiler::registryMismatches(context, &checked);
    for (const std::string &p : problems)
      llvm::errs() << "sluice-opt: error: " << p << "\n";
    if (problems.empty())
      llvm::outs() << "all " << checked
                   << " dedicated sluice ops match the op registry\n";
    return problems.empty() ? 0 : 1;
  }
  mlir::DialectRegistry registry;
  registry.insert<sluice::ir::SluiceDialect, mlir::func::FuncDialect>();
  sluice::compiler::registerSluicePasses();
  // canonicalize, cse, symbol-dce, ...: useful next to the sluice passes.
  mlir::registerTransformsPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "sluice optimizer driver\n", registry));
}
