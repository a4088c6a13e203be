//===- Compiler.cpp - `sluice explain`, buildPlan and the graph passes ----===//
#include "sluice/compiler/Compiler.h"
#include "sluice/compiler/Codegen.h"
#include "sluice/compiler/MLIRGen.h"
#include "sluice/compiler/Passes.h"
#include "sluice/compiler/PlanGen.h"
#include "sluice/compiler/SluiceOps.h"
#include "sluice/ops/Switches.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_os_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

using namespace mlir;

namespace sluice::compiler {
namespace {

struct GraphPass {
  const char *name;
  /// `codegen`: the run compiles kernels (PlanOptions::codegen and
  /// codegenEpilogue()); only sluice-fuse-crop-epilogue looks at it.
  std::function<std::unique_ptr<Pass>(bool remarks, bool codegen)> create;
};

/// The graph passes in the order `explain` (and later `run`) applies them.
const std::vector<GraphPass> &graphPasses() {
  static const std::vector<GraphPass> passes = {
      {"sluice-eliminate-noops",
       [](bool remarks, bool) {
         return createEliminateNoops(EliminateNoopsOptions{remarks});
       }},
      // Before the fusion passes: the steps it moves the shuffle above
      // are then fused with what follows them (decode + crop, the batch).
      {"sluice-hoist-shuffle",
       [](bool remarks, bool) {
         return createHoistShuffle(HoistShuffleOptions{remarks});
       }},
      {"sluice-push-filters",
       [](bool remarks, bool) {
         return createPushFilters(PushFiltersOptions{remarks});
       }},
      {"sluice-push-projections",
       [](bool remarks, bool) {
         return createPushProjections(PushProjectionsOptions{remarks});
       }},
      {"sluice-fuse-decode-crop",
       [](bool remarks, bool) {
         return createFuseDecodeCrop(FuseDecodeCropOptions{remarks});
       }},
      {"sluice-fuse-crop-epilogue",
       [](bool remarks, bool codegen) {
         return createFuseCropEpilogue(
             FuseCropEpilogueOptions{remarks, /*leaveToCodegen=*/codegen});
       }},
      {"sluice-fuse-map-batch",
       [](bool remarks, bool) {
         return createFuseMapBatch(FuseMapBatchOptions{remarks});
       }},
      // Before fuse-maps, which leaves the steps it grouped alone.
      {"sluice-fuse-remaps",
       [](bool remarks, bool) {
         return createFuseRemaps(FuseRemapsOptions{remarks});
       }},
      // After fuse-map-batch, so that the steps it moved behind a batch
      // are grouped there.
      {"sluice-fuse-maps",
       [](bool remarks, bool) {
         return createFuseMaps(FuseMapsOptions{remarks});
       }},
  };
  return passes;
}

/// `--disable-pass all` turns every graph pass off.
bool isDisabled(const std::string &name,
                const std::vector<std::string> &disabledPasses) {
  for (const std::string &d : disabledPasses)
    if (d == name || d == "all")
      return true;
  return false;
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

/// Routes MLIR diagnostics into the spec's diagnostic engine, so that they
/// print like the front end's: `spec.yaml:12:5: error: ...` with a caret.
class SpecDiagnostics {
public:
  SpecDiagnostics(MLIRContext &ctx, const dsl::Spec &spec, std::ostream &err)
      : engine(spec.file, spec.text), err(err),
        handler(&ctx, [this](Diagnostic &d) { return handle(d); }) {}

  /// Prints the errors collected so far; returns how many there were.
  size_t flush() {
    size_t errors = engine.errorCount();
    engine.print(err);
    engine = dsl::DiagnosticEngine(engine.fileName(), engine.sourceText());
    return errors;
  }

private:
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

/// Runs one graph pass the way DuckDB's optimizer runs each rule: skipped
/// when disabled, timed, and the module verified after it (a pass that
/// leaves invalid IR is reported as the bug it is, naming the pass, instead
/// of surfacing later as a confusing plan error). One wrapper for every
/// pass, so a new pass gets all three by being listed in graphPasses().
/// With `remarks`, says at the pipeline what it did: ran in how long, or
/// was disabled.
LogicalResult runGraphPass(MLIRContext &ctx, ModuleOp module,
                           const GraphPass &pass, bool disabled, bool remarks,
                           bool codegen, llvm::raw_ostream *printAfterAll) {
  Location at = module.getLoc();
  if (auto pipeline = module.getOps<ir::PipelineOp>(); !pipeline.empty())
    at = (*pipeline.begin()).getLoc();
  if (disabled) {
    if (remarks)
      emitRemark(at) << "pass '" << pass.name
                     << "' is disabled (--disable-pass)";
    return success();
  }
  PassManager pm(&ctx);
  pm.enableVerifier(true);
  if (printAfterAll) {
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, *printAfterAll);
  }
  pm.addPass(pass.create(remarks, codegen));
  auto start = std::chrono::steady_clock::now();
  LogicalResult result = pm.run(module);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  if (failed(result)) {
    emitError(at) << "graph pass '" << pass.name
                  << "' failed or left an invalid module; run again with "
                     "--disable-pass "
                  << pass.name << " and please report it with the spec";
    return failure();
  }
  if (remarks) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", ms);
    emitRemark(at) << "pass '" << pass.name << "' ran in " << buf
                   << " ms; module verified";
  }
  return success();
}

/// The module of `spec` after the graph passes that `disabledPasses` leaves
/// on; null after errors, which `diagnostics` holds. With `printAfterAll`,
/// the module is printed there after every pass. `codegen`: image
/// epilogues are left to the generated kernel (leaveEpilogues()).
OwningOpRef<ModuleOp>
compileGraph(MLIRContext &ctx, const dsl::Spec &spec,
             const std::vector<std::string> &disabledPasses, bool remarks,
             llvm::raw_ostream *printAfterAll, bool codegen = false,
             const std::vector<std::string> &cachedSteps = {}) {
  OwningOpRef<ModuleOp> module = mlirGen(ctx, spec);
  if (!module)
    return nullptr;
  // What a schedule file caches (PlanOptions::cachedSteps), for the passes
  // that must not move records across a materialization point.
  if (!cachedSteps.empty()) {
    SmallVector<Attribute> names;
    for (const std::string &n : cachedSteps)
      names.push_back(StringAttr::get(&ctx, n));
    for (auto pipeline : module->getOps<ir::PipelineOp>())
      pipeline->setAttr("sluice.cached_steps", ArrayAttr::get(&ctx, names));
  }
  for (const GraphPass &pass : graphPasses())
    if (failed(runGraphPass(ctx, *module, pass,
                            isDisabled(pass.name, disabledPasses), remarks,
                            codegen, printAfterAll)))
      return nullptr;
  return module;
}

/// A context for compiling one pipeline. A pipeline module is a few dozen
/// ops: threads would cost more than they save, and a single thread keeps
/// diagnostics in program order.
std::unique_ptr<MLIRContext> pipelineContext() {
  auto ctx = std::make_unique<MLIRContext>(MLIRContext::Threading::DISABLED);
  ctx->loadDialect<ir::SluiceDialect>();
  return ctx;
}

Status compileFailure(const dsl::Spec &spec, size_t errors) {
  if (errors == 0) // a pass failed without saying why
    return Status::error("could not compile " + spec.file +
                         ": a compiler pass failed without a message; please "
                         "report this with the spec");
  return Status::error("could not compile " + spec.file + " (" +
                       std::to_string(errors) +
                       (errors == 1 ? " error" : " errors") + ")");
}

/// Whether a run with the code generator on should leave the image
/// epilogues of `spec` to the generated kernel: only if it changes the plan
/// and every stage it changes besides the crop itself is one the generator
/// compiles (a chain it could not compile would run as slow runtime steps,
/// so the hand-written fold stays). Compiles the graph both ways, quietly;
/// a few milliseconds.
bool leaveEpilogues(const dsl::Spec &spec,
                    const std::vector<std::string> &disabledPasses) {
  if (!codegenEpilogue(disabledPasses))
    return false;
  auto planOf = [&](bool leave) -> std::optional<runtime::Plan> {
    std::unique_ptr<MLIRContext> ctx = pipelineContext();
    std::ostringstream quiet; // the final compile reports the errors
    SpecDiagnostics diagnostics(*ctx, spec, quiet);
    OwningOpRef<ModuleOp> module = compileGraph(
        *ctx, spec, disabledPasses, /*remarks=*/false, nullptr, leave);
    if (!module)
      return std::nullopt;
    FailureOr<runtime::Plan> plan = derivePlan(*module);
    if (failed(plan))
      return std::nullopt;
    return std::move(*plan);
  };
  std::optional<runtime::Plan> left = planOf(true), folded = planOf(false);
  if (!left || !folded)
    return false;
  std::set<std::string> foldedNames;
  for (const runtime::PlanStep &s : folded->steps)
    foldedNames.insert(s.name);
  std::vector<std::string> generated = compiledSteps(*left);
  bool changed = false;
  for (const runtime::PlanStep &s : left->steps) {
    if (foldedNames.count(s.name))
      continue;
    changed = true;
    // The fused crop itself is an op only passes create.
    const OpDef *def = Registry::instance().find(s.op);
    if (!(def && def->internal) && std::find(generated.begin(), generated.end(),
                                             s.name) == generated.end())
      return false;
  }
  return changed;
}

} // namespace

bool codegenEpilogue(const std::vector<std::string> &disabledPasses) {
  return !isDisabled("sluice-fuse-crop-epilogue", disabledPasses) &&
         !isDisabled("sluice-fuse-remaps", disabledPasses) &&
         !switchedOff("SLUICE_NO_GENERATED_EPILOGUE");
}

std::vector<std::string> graphPassNames() {
  std::vector<std::string> names;
  for (const GraphPass &pass : graphPasses())
    names.push_back(pass.name);
  return names;
}

Status checkPassNames(const std::vector<std::string> &disabledPasses) {
  std::vector<std::string> names = graphPassNames();
  for (const std::string &disabled : disabledPasses)
    if (disabled != "all" &&
        std::find(names.begin(), names.end(), disabled) == names.end())
      return Status::error("--disable-pass: no graph pass '" + disabled + "'" +
                           didYouMean(disabled, names) + " (passes: " +
                           joined(names) + "; 'all' turns every one off)");
  return Status::ok();
}

Expected<runtime::Plan> buildPlan(const dsl::Spec &spec,
                                  const PlanOptions &opts, std::ostream &err) {
  if (Status names = checkPassNames(opts.disabledPasses); !names)
    return names;
  std::unique_ptr<MLIRContext> ctx = pipelineContext();
  bool leave = opts.codegen && leaveEpilogues(spec, opts.disabledPasses);
  SpecDiagnostics diagnostics(*ctx, spec, err);
  OwningOpRef<ModuleOp> module =
      compileGraph(*ctx, spec, opts.disabledPasses, opts.remarks, nullptr,
                   leave, opts.cachedSteps);
  FailureOr<runtime::Plan> plan = failure();
  if (module)
    plan = derivePlan(*module);
  size_t errors = diagnostics.flush();
  if (failed(plan))
    return compileFailure(spec, errors);
  return std::move(*plan);
}

int explain(const dsl::Spec &spec, const ExplainOptions &opts,
            std::ostream &out, std::ostream &err) {
  if (opts.ir != "graph" && opts.ir != "plan" && opts.ir != "kernels" &&
      opts.ir != "llvm") {
    err << "sluice: error: unknown --ir '" << opts.ir << "'"
        << didYouMean(opts.ir, {"graph", "plan", "kernels", "llvm"})
        << " (expected graph, plan, kernels or llvm)\n";
    return 2;
  }
  if (Status names = checkPassNames(opts.disabledPasses); !names) {
    err << "sluice: error: " << names.message() << "\n";
    return 2;
  }

  bool leave = opts.codegen && leaveEpilogues(spec, opts.disabledPasses);
  std::unique_ptr<MLIRContext> ctx = pipelineContext();
  SpecDiagnostics diagnostics(*ctx, spec, err);
  llvm::raw_os_ostream rawOut(out);
  OwningOpRef<ModuleOp> module =
      compileGraph(*ctx, spec, opts.disabledPasses, opts.remarks,
                   opts.printIrAfterAll ? &rawOut : nullptr, leave);
  rawOut.flush();
  if (!module) {
    diagnostics.flush();
    return 1;
  }

  if (opts.ir == "plan" || opts.ir == "kernels" || opts.ir == "llvm") {
    FailureOr<runtime::Plan> plan = derivePlan(*module);
    diagnostics.flush();
    if (failed(plan))
      return 1;
    if (opts.ir == "plan") {
      out << plan->serialize();
      return 0;
    }
    // The kernels the run would compile, as MLIR or as optimized LLVM IR.
    if (Status s = printKernels(*plan, opts.ir, out); !s) {
      err << "sluice: error: " << s.message() << "\n";
      return 1;
    }
    return 0;
  }
  diagnostics.flush();
  OpPrintingFlags flags;
  if (opts.locations)
    // The form the parser reads back: the module with its locations holds
    // everything derivePlan needs (MLIRGen.h).
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  module->print(rawOut, flags);
  rawOut << "\n";
  rawOut.flush();
  return 0;
}

} // namespace sluice::compiler
