//===- sluice-opt.cpp - Runs sluice passes on .mlir files -----------------===//
#include "sluice/compiler/MLIRGen.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/PlanGen.h"
#include "sluice/compiler/SluiceOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/SourceMgr.h"

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

/// `--sluice-print-plan FILE`: the runtime Plan (its JSON form) that
/// derivePlan reads from the module in FILE ("-": stdin), which must carry
/// the locations MLIRGen gives (print it with --mlir-print-debuginfo). The
/// module alone decides the Plan, so this equals `sluice explain --ir plan`
/// of the spec the module came from.
static int printPlan(const char *file) {
  mlir::MLIRContext context;
  context.loadDialect<sluice::ir::SluiceDialect>();
  llvm::SourceMgr sources;
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      mlir::openInputFile(file, &error);
  if (!buffer) {
    llvm::errs() << "sluice-opt: error: " << error << "\n";
    return 1;
  }
  sources.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sources, &context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &context);
  if (!module)
    return 1;
  mlir::FailureOr<sluice::runtime::Plan> plan =
      sluice::compiler::derivePlan(*module);
  if (mlir::failed(plan))
    return 1;
  llvm::outs() << plan->serialize();
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && std::strcmp(argv[1], "--sluice-print-plan") == 0)
    return printPlan(argv[2]);
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
