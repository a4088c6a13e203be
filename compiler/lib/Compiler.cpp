//===- Compiler.cpp - `sluice explain` and the graph pass pipeline --------===//
#include "sluice/compiler/Compiler.h"
#include "sluice/compiler/MLIRGen.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/SluiceOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_os_ostream.h"

#include <functional>

using namespace mlir;

namespace sluice::compiler {
namespace {

struct GraphPass {
  const char *name;
  std::function<std::unique_ptr<Pass>(bool remarks)> create;
};

/// The graph passes in the order `explain` (and later `run`) applies them.
const std::vector<GraphPass> &graphPasses() {
  static const std::vector<GraphPass> passes = {
      {"sluice-eliminate-noops",
       [](bool remarks) {
         return createEliminateNoops(EliminateNoopsOptions{remarks});
       }},
  };
  return passes;
}

std::string joined(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string didYouMean(const std::string &word,
                       const std::vector<std::string> &candidates) {
  std::string best = closestMatch(word, candidates);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

/// The first file position inside `loc` (MLIRGen wraps it in a NameLoc).
std::optional<FileLineColLoc> findFileLoc(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return file;
  if (auto name = dyn_cast<NameLoc>(loc))
    return findFileLoc(name.getChildLoc());
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return findFileLoc(call.getCallee());
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location sub : fused.getLocations())
      if (auto file = findFileLoc(sub))
        return file;
  return std::nullopt;
}

/// Routes MLIR diagnostics into the spec's diagnostic engine, so that they
/// print like the front end's: `spec.yaml:12:5: error: ...` with a caret.
class SpecDiagnostics {
public:
  SpecDiagnostics(MLIRContext &ctx, const dsl::Spec &spec, std::ostream &err)
      : engine(spec.file, readSpec(spec.file)), err(err),
        handler(&ctx, [this](Diagnostic &d) { return handle(d); }) {}

  /// Prints the errors collected so far.
  void flush() {
    engine.print(err);
    engine = dsl::DiagnosticEngine(engine.fileName(), engine.sourceText());
  }

private:
  static std::string readSpec(const std::string &file) {
    std::string text, error;
    if (!dsl::readFile(file, text, error))
      text.clear(); // without the text the caret lines are left out
    return text;
  }

  LogicalResult handle(Diagnostic &d) {
    SourceLoc where;
    if (std::optional<FileLineColLoc> file = findFileLoc(d.getLocation())) {
      where.line = static_cast<int>(file->getLine());
      where.col = static_cast<int>(file->getColumn());
    }
    std::string notes;
    for (Diagnostic &note : d.getNotes())
      notes += (notes.empty() ? "" : "; ") + note.str();
    switch (d.getSeverity()) {
    case DiagnosticSeverity::Error:
      if (notes.empty())
        notes = "the spec passed the front end's checks, so this is a bug in "
                "sluice; please report it with the spec";
      engine.error(where, d.str(), notes);
      break;
    case DiagnosticSeverity::Warning:
      engine.warning(where, d.str(), notes);
      break;
    case DiagnosticSeverity::Remark:
    case DiagnosticSeverity::Note:
      err << engine.fileName();
      if (where.valid())
        err << ':' << where.line << ':' << where.col;
      err << ": remark: " << d.str() << '\n';
      break;
    }
    return success();
  }

  dsl::DiagnosticEngine engine;
  std::ostream &err;
  ScopedDiagnosticHandler handler;
};

} // namespace

std::vector<std::string> graphPassNames() {
  std::vector<std::string> names;
  for (const GraphPass &pass : graphPasses())
    names.push_back(pass.name);
  return names;
}

int explain(const dsl::Spec &spec, const ExplainOptions &opts,
            std::ostream &out, std::ostream &err) {
  if (opts.ir == "kernels" || opts.ir == "llvm") {
    err << "sluice: error: not implemented yet: --ir " << opts.ir
        << " arrives with the codegen issue; --ir graph works\n";
    return 2;
  }
  if (opts.ir != "graph") {
    err << "sluice: error: unknown --ir '" << opts.ir << "'"
        << didYouMean(opts.ir, {"graph", "kernels", "llvm"})
        << " (expected graph, kernels or llvm)\n";
    return 2;
  }
  std::vector<std::string> names = graphPassNames();
  for (const std::string &disabled : opts.disabledPasses)
    if (std::find(names.begin(), names.end(), disabled) == names.end()) {
      err << "sluice: error: --disable-pass: no graph pass '" << disabled << "'"
          << didYouMean(disabled, names) << " (passes: " << joined(names)
          << ")\n";
      return 2;
    }

  // A pipeline module is a few dozen ops: threads would cost more than they
  // save, and a single thread keeps diagnostics in program order.
  MLIRContext ctx(MLIRContext::Threading::DISABLED);
  ctx.loadDialect<ir::SluiceDialect>();
  SpecDiagnostics diagnostics(ctx, spec, err);
  OwningOpRef<ModuleOp> module = mlirGen(ctx, spec);
  if (!module) {
    diagnostics.flush();
    return 1;
  }

  llvm::raw_os_ostream rawOut(out);
  PassManager pm(&ctx);
  if (opts.printIrAfterAll) {
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, rawOut);
  }
  for (const GraphPass &pass : graphPasses())
    if (std::find(opts.disabledPasses.begin(), opts.disabledPasses.end(),
                  pass.name) == opts.disabledPasses.end())
      pm.addPass(pass.create(opts.remarks));
  LogicalResult result = pm.run(*module);
  rawOut.flush();
  diagnostics.flush();
  if (failed(result))
    return 1;

  OpPrintingFlags flags;
  if (opts.locations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/true);
  module->print(rawOut, flags);
  rawOut << "\n";
  rawOut.flush();
  return 0;
}

} // namespace sluice::compiler
