//===- Pipeline.cpp - sluice::Pipeline from a plan to batches -------------===//
//
// The half of the API that needs no compiler: schedules, kernels given as a
// table, `schedule: auto`, running, iterating, state and tuning. Compiled
// executables link only this half (with their linked-in kernel table);
// Open.cpp adds reading specs and generating kernels.
//
//===----------------------------------------------------------------------===//
#include "PipelineImpl.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace sluice {

std::string renderDiagnostics(const dsl::DiagnosticEngine &diags,
                              std::ostream *diagnostics, bool color) {
  if (diagnostics) {
    diags.print(*diagnostics, color);
    return "";
  }
  std::ostringstream os;
  diags.print(os, false);
  return os.str();
}

std::string Pipeline::Impl::render(const dsl::DiagnosticEngine &diags) const {
  return renderDiagnostics(diags, diagnostics, color);
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() {
  // The runner calls into the kernels: it goes first.
  if (impl_)
    impl_->runner.reset();
}

std::unique_ptr<Pipeline> Pipeline::fromPlan(runtime::Plan plan,
                                             const SluiceKernelInfo *kernels) {
  auto impl = std::make_unique<Impl>();
  impl->plan = std::move(plan);
  impl->table = kernels;
  if (kernels)
    impl->summary =
        "kernels: " + std::to_string(runtime::kernelTableSize(kernels)) +
        " linked in";
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

Expected<std::unique_ptr<dsl::Spec>>
Pipeline::loadSpec(const std::string &specPath, std::ostream *diagnostics,
                   bool color) {
  std::string text, err;
  if (!dsl::readFile(specPath, text, err))
    return Status::error("sluice: error: " + err);
  dsl::DiagnosticEngine diags(specPath, std::move(text));
  std::unique_ptr<dsl::Spec> spec = dsl::parseSpec(diags);
  std::string located = renderDiagnostics(diags, diagnostics, color);
  if (!spec) {
    size_t n = diags.errorCount();
    return Status::error(located + std::to_string(n) +
                         (n == 1 ? " error" : " errors") + " in " + specPath);
  }
  return spec;
}

void Pipeline::setDiagnostics(std::ostream *diagnostics, bool color,
                              const std::string &program) {
  impl_->diagnostics = diagnostics;
  impl_->color = color;
  impl_->program = program;
}

const dsl::Spec *Pipeline::spec() const { return impl_->spec.get(); }
runtime::Plan &Pipeline::plan() { return impl_->plan; }
const runtime::Plan &Pipeline::plan() const { return impl_->plan; }
runtime::RunOptions &Pipeline::options() { return impl_->opts; }
const runtime::RunOptions &Pipeline::options() const { return impl_->opts; }

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

Status Pipeline::useScheduleFile(const std::string &file,
                                 const dsl::Spec *names) {
  const dsl::Spec *spec = names ? names : impl_->spec.get();
  if (!spec)
    return Status::error(impl_->program +
                         ": error: a schedule file is checked against the "
                         "spec's step names, which a plan alone does not "
                         "have");
  std::string text, err;
  if (!dsl::readFile(file, text, err))
    return Status::error(impl_->program + ": error: " + err);
  dsl::DiagnosticEngine diags(file, std::move(text));
  std::map<std::string, dsl::StepSchedule> sched;
  bool ok = dsl::parseScheduleFile(diags, *spec, sched);
  std::string located = impl_->render(diags);
  if (!ok)
    return Status::error(located);
  // The file is the schedule, even one that sets no knob.
  impl_->autoWanted = false;
  for (const auto &[name, s] : sched)
    setStepSchedule(name, s);
  return Status::ok();
}

std::vector<std::string> Pipeline::scheduleNames() const {
  std::vector<std::string> names{"default"};
  auto add = [&](const std::string &n) {
    if (std::find(names.begin(), names.end(), n) == names.end())
      names.push_back(n);
  };
  if (const dsl::Spec *spec = impl_->spec.get()) {
    add(spec->source.name);
    for (const dsl::Step &st : spec->steps)
      add(st.name);
  }
  add(impl_->plan.source.name);
  // A step the compiler fused is named "a+b", as in the schedule of an
  // autotuned pipeline; the halves of a fused stage a cache splits
  // (runtime/Plan.h) as the autotuner names them.
  for (const runtime::PlanStep &st : impl_->plan.steps)
    add(st.name);
  for (const runtime::PlanStep &st : runtime::cacheSplitSteps(impl_->plan))
    add(st.name);
  return names;
}

void Pipeline::setStepSchedule(const std::string &step,
                               const StepSchedule &knobs) {
  impl_->opts.schedule[step] = knobs;
  impl_->autoWanted = false;
}

void Pipeline::setAutoSchedule(bool on) { impl_->autoWanted = on; }

bool Pipeline::autoScheduleWanted() const {
  return impl_->autoWanted.value_or(impl_->plan.scheduleAuto);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

Status Pipeline::compileKernels() {
  Impl &i = *impl_;
  if (i.kernelsDone)
    return Status::ok();
  if (i.generate)
    if (Status s = i.generate(i); !s)
      return s;
  if (i.table) {
    i.opts.binder = runtime::binderFromKernelTable(i.table);
    i.opts.rowsBinder = runtime::rowsBinderFromKernelTable(i.table);
  }
  i.kernelsDone = true;
  return Status::ok();
}

int64_t Pipeline::generatedKernels() const { return impl_->generated; }
bool Pipeline::hasKernels() const {
  return impl_->table != nullptr || impl_->generate != nullptr;
}
std::string Pipeline::kernelSummary() const { return impl_->summary; }

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

Status Pipeline::prepare() {
  Impl &i = *impl_;
  if (i.prepared)
    return Status::ok();
  if (Status s = compileKernels(); !s)
    return s;
  // After the kernels are bound: the probes time the kernels that run.
  if (autoScheduleWanted()) {
    // The probes' batches never reach a device: they are not page-locked
    // (RunOptions::pinBatches holds for the runs after prepare()).
    const bool pin = std::exchange(i.opts.pinBatches, false);
    Expected<autotune::AutoSchedule> a =
        autotune::applyAutoSchedule(i.plan, i.opts);
    i.opts.pinBatches = pin;
    if (!a)
      return Status::error("schedule: auto: " + a.status().message());
    if (a->applied)
      i.autoResult = a.take();
  }
  i.prepared = true;
  return Status::ok();
}

const autotune::AutoSchedule *Pipeline::autoSchedule() const {
  return impl_->autoResult ? &*impl_->autoResult : nullptr;
}

std::string Pipeline::scheduleExplanation() const {
  return impl_->autoResult ? impl_->autoResult->explanation : "";
}

Expected<std::vector<std::string>> Pipeline::checkData() const {
  Expected<std::unique_ptr<runtime::Pipeline>> p =
      runtime::Pipeline::create(impl_->plan, impl_->opts);
  if (!p)
    return p.status();
  return (*p)->stats().warnings();
}

Expected<std::unique_ptr<runtime::Pipeline>> Pipeline::makeRunner() {
  if (Status s = prepare(); !s)
    return s;
  return runtime::Pipeline::create(impl_->plan, impl_->opts);
}

int Pipeline::run(std::ostream &out, std::ostream &err) {
  if (Status s = prepare(); !s) {
    err << "sluice: error: " << s.message() << "\n";
    return 1;
  }
  if (impl_->autoResult && impl_->opts.stats)
    out << impl_->autoResult->explanation << "\n";
  return runtime::runPipeline(impl_->plan, impl_->opts, out, err);
}

Status Pipeline::start() {
  stop();
  impl_->runner.reset();
  Expected<std::unique_ptr<runtime::Pipeline>> r = makeRunner();
  if (!r)
    return r.status();
  impl_->runner = r.take();
  return Status::ok();
}

Expected<bool> Pipeline::next(runtime::Batch &out) {
  if (!impl_->runner)
    if (Status s = start(); !s)
      return s;
  return impl_->runner->next(out);
}

runtime::Pipeline *Pipeline::runner() { return impl_->runner.get(); }

runtime::RunStats Pipeline::stats() const {
  return impl_->runner ? impl_->runner->stats() : runtime::RunStats();
}

runtime::PipelineState Pipeline::state() const {
  return impl_->runner ? impl_->runner->state() : runtime::PipelineState();
}

Status Pipeline::resume(const runtime::PipelineState &state) {
  impl_->opts.resume = state;
  return start();
}

void Pipeline::stop() {
  if (impl_->runner)
    impl_->runner->stop();
}

//===----------------------------------------------------------------------===//
// Tuning
//===----------------------------------------------------------------------===//

Expected<autotune::TuneResult>
Pipeline::tune(const autotune::TuneOptions &opts) {
  if (Status s = compileKernels(); !s)
    return s;
  autotune::TuneOptions t = opts;
  // Every run the tuner makes (probes, the plan split for a cache inside a
  // fused stage, the measured run) copies profile.base: the kernels are
  // bound there. Their table also holds the split halves of fused stages.
  if (impl_->table) {
    t.profile.base.binder = impl_->opts.binder;
    t.profile.base.rowsBinder = impl_->opts.rowsBinder;
  }
  if (const dsl::Spec *spec = impl_->spec.get();
      spec && t.profile.specWhere.empty()) {
    auto add = [&](const dsl::Step &s) {
      t.profile.specWhere[s.name] = spec->file + ":" +
                                    std::to_string(s.loc.line) + ":" +
                                    std::to_string(s.loc.col);
    };
    add(spec->source);
    for (const dsl::Step &s : spec->steps)
      add(s);
  }
  Expected<autotune::TuneResult> r = autotune::tune(impl_->plan, t);
  if (!r)
    return r;
  r->kernels = impl_->table ? "generated" : "runtime";
  return r;
}

} // namespace sluice
