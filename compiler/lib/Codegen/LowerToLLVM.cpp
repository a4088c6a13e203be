//===- LowerToLLVM.cpp - Kernel module to LLVM IR and machine code --------===//
//
// The back half of the code generator, the same for the JIT and for object
// files:
//
//   func/arith/math/scf + llvm.load/store       (ValueKernels.cpp)
//     │ convert-scf-to-cf, convert-math-to-llvm, convert-arith-to-llvm,
//     │ convert-func-to-llvm, convert-cf-to-llvm, reconcile-unrealized-casts
//     ▼
//   llvm dialect ──translateModuleToLLVMIR──► llvm::Module
//     │ + @sluice_kernel_table = [{stage, signature, fn}..., {null}]
//     ▼ O3 for the target machine (loop vectorizer, SLP)
//   object file (in memory) ──► JIT link (Jit.cpp) / file (emitKernelObject)
//
// Floating-point contraction is off (TargetOptions default "standard" fuses
// only explicit fmuladd, which the lowering never emits), so a generated
// a*b+c rounds twice, as the interpreter's does.
//
//===----------------------------------------------------------------------===//
#include "CodegenInternal.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <mutex>

using namespace mlir;

namespace sluice::compiler::codegen {

bool tidyKernelModule(ModuleOp module, std::string &error) {
  // CSE only: it merges identical pure ops (the constants every step and
  // every unrolled channel makes again), nothing that could change a value.
  PassManager pm(module.getContext());
  pm.addPass(createCSEPass());
  if (failed(pm.run(module))) {
    error = "tidying the kernels failed";
    return false;
  }
  return true;
}

bool lowerToLLVMDialect(ModuleOp module, std::string &error) {
  PassManager pm(module.getContext());
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  std::string diag;
  llvm::raw_string_ostream os(diag);
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &d) {
    os << d << "\n";
    return success();
  });
  if (failed(pm.run(module))) {
    error = "lowering the kernels to LLVM failed: " + diag;
    return false;
  }
  return true;
}

std::unique_ptr<llvm::Module>
translateKernels(ModuleOp module, const std::vector<KernelSpec> &kernels,
                 llvm::LLVMContext &llvmCtx, std::string &error) {
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  std::unique_ptr<llvm::Module> m =
      translateModuleToLLVMIR(module, llvmCtx, "sluice_kernels");
  if (!m) {
    error = "translating the kernels to LLVM IR failed";
    return nullptr;
  }
  // struct SluiceKernelInfo { const char *stage, *signature; void *fn; }
  llvm::PointerType *ptr = llvm::PointerType::getUnqual(llvmCtx);
  llvm::StructType *info =
      llvm::StructType::create(llvmCtx, {ptr, ptr, ptr}, "SluiceKernelInfo");
  auto cstring = [&](const std::string &s, const std::string &name) {
    llvm::Constant *init = llvm::ConstantDataArray::getString(llvmCtx, s);
    auto *g =
        new llvm::GlobalVariable(*m, init->getType(), /*isConstant=*/true,
                                 llvm::GlobalValue::PrivateLinkage, init, name);
    g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    return g;
  };
  std::vector<llvm::Constant *> rows;
  for (const KernelSpec &k : kernels) {
    llvm::Function *fn = m->getFunction(k.funcName);
    if (!fn) {
      error = "kernel function '" + k.funcName + "' vanished in lowering";
      return nullptr;
    }
    rows.push_back(llvm::ConstantStruct::get(
        info, {cstring(k.stage, k.funcName + ".stage"),
               cstring(k.signature(), k.funcName + ".signature"), fn}));
  }
  llvm::Constant *null = llvm::ConstantPointerNull::get(ptr);
  rows.push_back(llvm::ConstantStruct::get(info, {null, null, null}));
  llvm::ArrayType *tableType = llvm::ArrayType::get(info, rows.size());
  new llvm::GlobalVariable(
      *m, tableType, /*isConstant=*/true, llvm::GlobalValue::ExternalLinkage,
      llvm::ConstantArray::get(tableType, rows), "sluice_kernel_table");
  return m;
}

std::unique_ptr<llvm::TargetMachine> makeTargetMachine(const std::string &cpu,
                                                       std::string &error) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  std::string triple = llvm::sys::getProcessTriple();
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target) {
    error = "no LLVM target for " + triple + ": " + lookupError;
    return nullptr;
  }
  std::string cpuName = cpu, features;
  if (cpu.empty() || cpu == "native") {
    cpuName = llvm::sys::getHostCPUName().str();
    llvm::SubtargetFeatures f;
    for (const auto &[name, on] : llvm::sys::getHostCPUFeatures())
      f.AddFeature(name, on);
    features = f.getString();
  } else if (std::unique_ptr<llvm::MCSubtargetInfo> sti(
                 target->createMCSubtargetInfo(triple, "", ""));
             !sti || !sti->isCPUStringValid(cpuName)) {
    error = "unknown target CPU '" + cpu +
            "' (use native, x86-64, x86-64-v2, x86-64-v3, x86-64-v4 or a "
            "CPU name LLVM knows, e.g. skylake)";
    return nullptr;
  }
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, cpuName, features, options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm)
    error = "could not create a target machine for " + triple + " " + cpuName;
  return tm;
}

bool optimizeModule(llvm::Module &module, llvm::TargetMachine &tm,
                    std::string &error) {
  module.setDataLayout(tm.createDataLayout());
  module.setTargetTriple(tm.getTargetTriple().str());
  // Every function gets the machine's CPU and features, so the vectorizer
  // uses its vector width.
  for (llvm::Function &f : module) {
    if (f.isDeclaration())
      continue;
    f.addFnAttr("target-cpu", tm.getTargetCPU());
    f.addFnAttr("target-features", tm.getTargetFeatureString());
  }
  auto transformer = makeOptimizingTransformer(3, 0, &tm);
  if (llvm::Error e = transformer(&module)) {
    error = "optimizing the kernels failed: " + llvm::toString(std::move(e));
    return false;
  }
  return true;
}

bool emitObject(llvm::Module &module, llvm::TargetMachine &tm,
                std::string &object, std::string &error) {
  if (!optimizeModule(module, tm, error))
    return false;
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr,
                             llvm::CodeGenFileType::ObjectFile)) {
    error = "the target machine cannot emit object files";
    return false;
  }
  pm.run(module);
  object.assign(buffer.begin(), buffer.end());
  return true;
}

} // namespace sluice::compiler::codegen
