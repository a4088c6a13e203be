//===- DataObject.cpp - Read-only data as a linkable object file ----------===//
//
// Builds an LLVM module of constant globals and lets the host TargetMachine
// write it as an object file: no textual assembly, no external tool. The
// object is position independent, so it links into the PIE executables the
// Debian toolchain makes by default.
//
//===----------------------------------------------------------------------===//
#include "sluice/compiler/DataObject.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <memory>
#include <optional>

namespace sluice::compiler {

namespace {

/// The host target, with its registry entry; an error if LLVM lacks it.
Expected<const llvm::Target *> hostTarget(std::string &triple) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  triple = llvm::sys::getDefaultTargetTriple();
  std::string err;
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t)
    return Status::error("LLVM has no target for this machine (" + triple +
                         "): " + err);
  return t;
}

std::unique_ptr<llvm::TargetMachine> makeMachine(const llvm::Target *t,
                                                 const std::string &triple,
                                                 const std::string &cpu) {
  llvm::TargetOptions opts;
  return std::unique_ptr<llvm::TargetMachine>(
      t->createTargetMachine(triple, cpu, "", opts, llvm::Reloc::PIC_,
                             std::nullopt, llvm::CodeGenOptLevel::None));
}

} // namespace

Status emitDataObject(const std::vector<DataSymbol> &symbols,
                      const std::string &path) {
  std::string triple;
  Expected<const llvm::Target *> target = hostTarget(triple);
  if (!target)
    return target.status();
  std::unique_ptr<llvm::TargetMachine> tm =
      makeMachine(*target, triple, "generic");
  if (!tm)
    return Status::error("LLVM could not create a target machine for " +
                         triple);

  llvm::LLVMContext ctx;
  llvm::Module mod("sluice_data", ctx);
  mod.setTargetTriple(triple);
  mod.setDataLayout(tm->createDataLayout());
  llvm::Type *i64 = llvm::Type::getInt64Ty(ctx);
  for (const DataSymbol &s : symbols) {
    llvm::Constant *bytes = llvm::ConstantDataArray::getString(
        ctx, llvm::StringRef(s.bytes.data(), s.bytes.size()),
        /*AddNull=*/true);
    auto *g = new llvm::GlobalVariable(mod, bytes->getType(), /*isConstant=*/
                                       true, llvm::GlobalValue::ExternalLinkage,
                                       bytes, s.name);
    g->setAlignment(llvm::Align(16));
    new llvm::GlobalVariable(mod, i64, true, llvm::GlobalValue::ExternalLinkage,
                             llvm::ConstantInt::get(i64, s.bytes.size()),
                             s.name + "_size");
  }

  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return Status::error("cannot write '" + path + "': " + ec.message());
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, out, nullptr,
                              llvm::CodeGenFileType::ObjectFile))
    return Status::error("LLVM cannot write object files for " + triple);
  pm.run(mod);
  out.flush();
  if (out.has_error())
    return Status::error("cannot write '" + path +
                         "': " + out.error().message());
  return Status::ok();
}

std::string hostCpuName() { return llvm::sys::getHostCPUName().str(); }

bool isKnownTargetCpu(const std::string &cpu, std::vector<std::string> &known) {
  if (cpu == "native")
    return true;
  std::string triple;
  Expected<const llvm::Target *> target = hostTarget(triple);
  if (!target)
    return false;
  std::unique_ptr<llvm::TargetMachine> tm =
      makeMachine(*target, triple, "generic");
  if (!tm)
    return false;
  const llvm::MCSubtargetInfo *sti = tm->getMCSubtargetInfo();
  if (sti->isCPUStringValid(cpu))
    return true;
  known.clear();
  for (const llvm::SubtargetSubTypeKV &kv : sti->getAllProcessorDescriptions())
    known.emplace_back(kv.Key);
  return false;
}

} // namespace sluice::compiler
