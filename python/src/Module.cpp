//===- Module.cpp - The sluice Python extension (pybind11) ----------------===//
//
// A thin layer over the C++ API: sluice::Pipeline (sluice/Pipeline.h) opens,
// compiles, schedules and runs a spec exactly as `sluice run` does (same
// diagnostics, passes, kernels and `schedule: auto`). Nothing here decides
// anything about the pipeline; this file only converts between the two
// languages:
//
//  - outputs: each numeric field becomes a numpy array over the runtime's
//    own buffer (no copy). The array's base is a `sluice.Buffer` that owns
//    the tensor; when Python drops the last array over it the buffer goes
//    back to the runtime's buffer pool. While Python holds it, its bytes are
//    reserved on the pipeline's "outputs held by the caller" budget
//    account. bytes/string fields become numpy object arrays of Python
//    `bytes` / `str` (those are copies: Python objects own their text).
//  - errors: spec errors raise sluice.SpecError with the text the CLI
//    prints (file:line:col: error: ..., source line, caret); data and
//    budget errors raise sluice.PipelineError with the runtime's message
//    (file, record, byte offset, step).
//  - threads: the GIL is released while the runtime produces a batch. On
//    Python's main thread (the only one Python runs signal handlers on) the
//    batch is produced by a helper thread while the main thread waits and
//    runs pending signal handlers every 20 ms: when one raises (Ctrl-C's
//    KeyboardInterrupt), the pipeline is cancelled, which reaches into the
//    batch being assembled (runtime::Pipeline::cancel), its threads are
//    joined, and the exception propagates. A handler that does not raise
//    leaves the batch to finish. Other threads call the runtime directly.
//    Calls that drive a pipeline (next, close, the state calls) are
//    serialized per Pipeline, each waiting with the GIL released; close()
//    from another thread cancels the output being made first.
//  - fork: a pipeline made before the process forked is refused in the
//    child with an error (its threads exist only in the parent); new
//    pipelines made in the child work.
//
//===----------------------------------------------------------------------===//
#include "Dtypes.h"
#include "Pinned.h"
#include "sluice/Pipeline.h"
#include "sluice/autotune/Tune.h"
#include "sluice/dsl/Spec.h"
#include "sluice/ops/Registry.h"
#include "sluice/runtime/Memory.h"
#include "sluice/runtime/Pinned.h"
#include "sluice/runtime/Pipeline.h"

#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

namespace py = pybind11;
using namespace sluice;

namespace {

py::object specErrorType;
py::object pipelineErrorType;

[[noreturn]] void raise(const py::object &type, const std::string &msg) {
  PyErr_SetString(type.ptr(), msg.c_str());
  throw py::error_already_set();
}

/// Counts the forks this process came out of (pthread_atfork's child
/// handler: os.fork, multiprocessing's fork start method). A pipeline
/// records it when made: its threads, locks and buffers belong to the
/// process that made it, and in a forked child only the calling thread
/// exists, so an inherited pipeline would wait forever for workers that are
/// not there. It is refused with an error instead, and never stopped or
/// freed in the child (that would join threads that do not exist there).
std::atomic<uint64_t> forkGeneration{0};

void afterForkInChild() { forkGeneration.fetch_add(1); }

/// Reads and checks a spec; raises SpecError with the CLI's diagnostics.
std::unique_ptr<dsl::Spec> loadSpec(const std::string &path) {
  Expected<std::unique_ptr<dsl::Spec>> spec = sluice::Pipeline::loadSpec(path);
  if (!spec)
    raise(specErrorType, spec.status().message());
  return spec.take();
}

/// Opens and compiles a spec as `sluice run` does; raises SpecError
/// (diagnostics as the CLI prints them), ValueError (an unknown pass) or
/// PipelineError.
std::shared_ptr<sluice::Pipeline> openSpec(const std::string &path,
                                           const OpenOptions &opts) {
  ErrorKind kind;
  Expected<std::unique_ptr<sluice::Pipeline>> p =
      sluice::Pipeline::open(path, opts, &kind);
  if (!p) {
    const std::string &msg = p.status().message();
    if (kind == ErrorKind::Usage)
      throw py::value_error(msg);
    raise(kind == ErrorKind::Kernels ? pipelineErrorType : specErrorType, msg);
  }
  return p.take();
}

/// Generates the pipeline's kernels (when `jit=` and not SLUICE_NO_JIT=1)
/// with the GIL released; raises PipelineError.
void compileKernels(sluice::Pipeline &p) {
  Status s;
  {
    py::gil_scoped_release release;
    s = p.compileKernels();
  }
  if (!s)
    raise(pipelineErrorType, "sluice: error: " + s.message());
}

/// An integer argument in [min, max], read with its name in every error:
/// pybind11's own cast says only "Unable to cast Python instance to C++
/// type", without the argument.
int64_t intArg(const py::handle &v, const std::string &name, int64_t min,
               int64_t max = std::numeric_limits<int64_t>::max()) {
  std::string got = py::repr(v).cast<std::string>();
  if (got.size() > 60)
    got = got.substr(0, 57) + "...";
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
    throw py::type_error(name + " must be an integer, got " +
                         std::string(Py_TYPE(v.ptr())->tp_name) + " " + got);
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow == 0 && x == -1 && PyErr_Occurred())
    throw py::error_already_set();
  if (overflow != 0 || x < min || x > max)
    throw py::value_error(
        name + " must be " +
        (max == std::numeric_limits<int64_t>::max()
             ? ">= " + std::to_string(min) + " (and below 2^63)"
             : "in [" + std::to_string(min) + ", " + std::to_string(max) +
                   "]") +
        ", got " + got);
  return x;
}

/// A seed: an integer in [0, 2^64), as the spec's `seed:`.
uint64_t seedArg(const py::handle &v) {
  std::string got = py::repr(v).cast<std::string>();
  if (got.size() > 60)
    got = got.substr(0, 57) + "...";
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
    throw py::type_error("seed must be an integer, got " +
                         std::string(Py_TYPE(v.ptr())->tp_name) + " " + got);
  int negative = PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT);
  if (negative < 0)
    throw py::error_already_set();
  unsigned long long x = negative ? 0 : PyLong_AsUnsignedLongLong(v.ptr());
  if (negative ||
      (x == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
    PyErr_Clear();
    throw py::value_error("seed must be in [0, 2^64), got " + got);
  }
  return x;
}

/// Per-step schedule overrides from a dict {step: {parallelism, prefetch,
/// cache}} (a schedule file's path goes to OpenOptions::scheduleFile).
void applySchedule(sluice::Pipeline &p, const py::object &schedule) {
  if (schedule.is_none() || py::isinstance<py::str>(schedule))
    return;
  if (!py::isinstance<py::dict>(schedule))
    throw py::type_error("schedule must be a schedule file path or a dict "
                         "{step: {parallelism, prefetch, cache}}");
  // A dict, even an empty one, is the schedule: no `schedule: auto`.
  p.setAutoSchedule(false);
  std::vector<std::string> names = p.scheduleNames();
  for (auto item : schedule.cast<py::dict>()) {
    std::string name = py::str(item.first);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string m = closestMatch(name, names);
      throw py::value_error("schedule: no step named '" + name + "'" +
                            (m.empty() ? "" : "; did you mean '" + m + "'?"));
    }
    if (!py::isinstance<py::dict>(item.second))
      throw py::type_error("schedule['" + name +
                           "'] must be a dict {parallelism, prefetch, cache}");
    StepSchedule s;
    for (auto kv : item.second.cast<py::dict>()) {
      std::string k = py::str(kv.first);
      if (k == "parallelism")
        s.parallelism =
            intArg(kv.second, "schedule['" + name + "']['parallelism']", 1);
      else if (k == "prefetch")
        s.prefetch =
            intArg(kv.second, "schedule['" + name + "']['prefetch']", 0);
      else if (k == "cache") {
        if (!py::isinstance<py::str>(kv.second))
          throw py::type_error("schedule['" + name +
                               "']['cache'] must be 'memory', 'disk' or "
                               "'none', got " +
                               py::repr(kv.second).cast<std::string>());
        s.cache = kv.second.cast<std::string>();
      } else
        throw py::value_error("schedule['" + name + "']: unknown knob '" + k +
                              "' (parallelism, prefetch, cache)");
    }
    p.setStepSchedule(name, s);
  }
}

int64_t parseMemory(const py::object &memory) {
  if (memory.is_none())
    return 0;
  if (py::isinstance<py::int_>(memory)) {
    return intArg(memory, "memory (bytes)", 1);
  }
  std::string text = py::str(memory);
  std::optional<int64_t> b = parseByteSize(text);
  if (!b || *b <= 0)
    throw py::value_error("memory needs a size such as 512MiB or 4GiB, got '" +
                          text + "'");
  return *b;
}

/// Produces outputs on a thread of its own for a caller that must stay free
/// to run Python's signal handlers meanwhile. One request at a time.
class Fetcher {
public:
  /// forkGeneration when it was made: in a forked child its thread does not
  /// exist, and its owner leaks it instead of destroying it (which joins).
  const uint64_t generation = forkGeneration.load();

  ~Fetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

  /// Starts p->next(*out) on the fetcher's thread.
  void post(runtime::Pipeline *p, runtime::Batch *out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable())
      thread_ = std::thread([this] { loop(); });
    pipeline_ = p;
    out_ = out;
    result_.reset();
    pending_ = true;
    cv_.notify_all();
  }

  /// Waits up to `timeout` for the posted request; true when it is done.
  bool waitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return result_.has_value(); });
  }

  Expected<bool> take() {
    std::lock_guard<std::mutex> lock(mu_);
    Expected<bool> r = std::move(*result_);
    result_.reset();
    return r;
  }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return pending_ || quit_; });
      if (quit_)
        return;
      pending_ = false;
      runtime::Pipeline *p = pipeline_;
      runtime::Batch *out = out_;
      lock.unlock();
      Expected<bool> r = p->next(*out);
      lock.lock();
      result_.emplace(std::move(r));
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  runtime::Pipeline *pipeline_ = nullptr;
  runtime::Batch *out_ = nullptr;
  std::optional<Expected<bool>> result_;
  bool pending_ = false, quit_ = false;
};

/// Python's main thread (where signal handlers run), looked up when the
/// module is imported and again in a forked child (whose main thread is the
/// one that forked). Not a function-local static: its first use could come
/// from two threads at once, and the one left waiting on the static's guard
/// would hold the GIL the other needs to finish the lookup (a deadlock of
/// two threads' first next()).
std::atomic<unsigned long> mainThreadId{0};

void noteMainThread() {
  mainThreadId.store(py::module_::import("threading")
                         .attr("main_thread")()
                         .attr("ident")
                         .cast<unsigned long>());
}

bool onMainThread() { return PyThread_get_thread_ident() == mainThreadId; }

/// Owns a running pipeline. Shared by the Python Pipeline object and every
/// Buffer it handed out, so a batch Python still holds keeps its budget
/// account (and the pool it returns to) alive after the pipeline object is
/// gone.
struct Box {
  /// The compiled pipeline whose generated code the runtime pipeline's
  /// stages call: declared first, so it outlives the runtime pipeline.
  std::shared_ptr<sluice::Pipeline> api;
  std::unique_ptr<runtime::Pipeline> pipeline;
  /// forkGeneration and the process when the pipeline was made.
  const uint64_t generation = forkGeneration.load();
  const pid_t pid = ::getpid();

  bool inherited() const { return generation != forkGeneration.load(); }

  ~Box() {
    // In a forked child the pipeline's threads do not exist: stopping it
    // would wait for them forever. Its memory is the parent's copy; left.
    if (inherited()) {
      (void)pipeline.release();
      new std::shared_ptr<sluice::Pipeline>(std::move(api));
    }
  }
};

/// One output tensor handed to Python: the base object of its numpy array.
class Buffer {
public:
  Buffer(std::shared_ptr<Box> box, Tensor t)
      : box_(std::move(box)), tensor_(std::move(t)) {
    bytes_ = static_cast<int64_t>(tensor_.memoryBytes());
    box_->pipeline->heldOutputs().forceReserve(bytes_);
  }
  ~Buffer() { box_->pipeline->heldOutputs().release(bytes_); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  const Tensor &tensor() const { return tensor_; }
  uintptr_t address() const {
    return reinterpret_cast<uintptr_t>(tensor_.raw());
  }
  int64_t nbytes() const { return static_cast<int64_t>(tensor_.nbytes()); }

private:
  std::shared_ptr<Box> box_;
  Tensor tensor_;
  int64_t bytes_ = 0;
};

using sluice::python::dtypeOf;

py::object toPython(const std::shared_ptr<Box> &box, Tensor t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (!t.isNumeric()) {
    py::array out(py::dtype("object"), shape);
    auto **slots = static_cast<PyObject **>(out.mutable_data());
    const std::vector<std::string> &vals = t.stringValues();
    bool isBytes = t.elem() == ElemType::Bytes;
    for (size_t i = 0; i < vals.size(); ++i) {
      py::object o = isBytes ? py::object(py::bytes(vals[i]))
                             : py::object(py::str(vals[i]));
      // numpy filled the slots with None references; replace them.
      Py_XDECREF(slots[i]);
      slots[i] = o.release().ptr();
    }
    return std::move(out);
  }
  ElemType elem = t.elem();
  const void *data = t.raw();
  // Writable only when nothing else in the runtime (a cache, a shuffle
  // buffer, another output) can see the bytes.
  bool writable = t.ownsBufferAlone();
  auto holder = std::make_unique<Buffer>(box, std::move(t));
  py::object base =
      py::cast(holder.release(), py::return_value_policy::take_ownership);
  py::array arr(dtypeOf(elem), shape, {}, data, base);
  if (!writable)
    py::detail::array_proxy(arr.ptr())->flags &=
        ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return std::move(arr);
}

/// The Python Pipeline object.
class PyPipeline {
public:
  PyPipeline(const std::string &path, py::object epochs, py::object schedule,
             int64_t threads, py::object seed, py::object memory,
             int64_t firstEpoch, std::vector<std::string> disablePasses,
             py::object rank, py::object worldSize, bool jit, bool pinMemory) {
    OpenOptions o;
    o.disabledPasses = std::move(disablePasses);
    o.jit = jit;
    bool wantAuto = false;
    if (py::isinstance<py::str>(schedule)) {
      std::string s = schedule.cast<std::string>();
      if (s == "auto")
        wantAuto = true;
      else
        o.scheduleFile = s;
    }
    api_ = openSpec(path, o);
    runtime::Plan &plan = api_->plan();
    runtime::RunOptions &opts = api_->options();
    if (!epochs.is_none()) {
      int64_t n = intArg(epochs, "epochs", -1);
      if (n < 1 && n != -1)
        throw py::value_error("epochs must be >= 1 (or -1: forever)");
      opts.epochs = n;
    }
    if (threads < 0)
      throw py::value_error("threads must be >= 0 (0: the budget's cores)");
    opts.threads = threads;
    if (!seed.is_none())
      plan.seed = seedArg(seed);
    opts.memoryBytes = parseMemory(memory);
    opts.firstEpoch = firstEpoch;
    // The batches page-locked (runtime/Pinned.h).
    opts.pinBatches = pinMemory;
    applySchedule(*api_, schedule);
    setRanks(plan, rank, worldSize, opts);
    // Of the final plan (its seed set), bound before the autotuner copies
    // opts: its probes time the kernels the pipeline runs.
    compileKernels(*api_);
    // `schedule: auto` in the spec (and no schedule given here), or
    // schedule="auto": profile, solve and apply, as `sluice run` does.
    // SLUICE_NO_AUTOTUNE=1 turns it off, as for `sluice run`.
    if (wantAuto)
      api_->setAutoSchedule(true);
    Status s;
    {
      py::gil_scoped_release release;
      s = api_->prepare();
    }
    if (!s)
      raise(pipelineErrorType, s.message());
    start();
  }

  /// The schedule in effect as {step: {knob: value}}.
  py::dict scheduleDict() const {
    py::dict d;
    for (const auto &[name, o] : api_->options().schedule) {
      py::dict knobs;
      if (o.parallelism)
        knobs["parallelism"] = *o.parallelism;
      if (o.prefetch)
        knobs["prefetch"] = *o.prefetch;
      if (o.cache)
        knobs["cache"] = o.cache->empty() ? std::string("none") : *o.cache;
      d[py::str(name)] = knobs;
    }
    return d;
  }

  /// Rank and world size: the arguments, else the spec's `distributed:`,
  /// else torchrun's RANK/WORLD_SIZE or a Kubernetes Indexed Job's
  /// JOB_COMPLETION_INDEX, else 0 of 1 (runtime::resolveRanks).
  static void setRanks(const runtime::Plan &plan, const py::object &rank,
                       const py::object &world, runtime::RunOptions &opts) {
    runtime::RankArgs args;
    args.rankName = "rank=";
    args.worldSizeName = "world_size=";
    if (!rank.is_none())
      args.rank = intArg(rank, "rank", 0);
    if (!world.is_none())
      args.worldSize = intArg(world, "world_size", 1);
    // A torch.distributed process group, when the program made one: looked
    // up only if torch.distributed is imported already (importing torch
    // here would cost a second or more for programs that do not use it).
    py::object dist = py::module_::import("sys").attr("modules").attr("get")(
        "torch.distributed");
    if (!dist.is_none() && dist.attr("is_available")().cast<bool>() &&
        dist.attr("is_initialized")().cast<bool>()) {
      args.groupRank = dist.attr("get_rank")().cast<int64_t>();
      args.groupWorldSize = dist.attr("get_world_size")().cast<int64_t>();
    }
    if (Status s = runtime::resolveRanks(plan, args, opts); !s)
      throw py::value_error(s.message());
  }

  ~PyPipeline() {
    // In a forked child the fetcher's thread is the parent's: destroying
    // the fetcher would join a thread that is not there.
    if (fetcher_ && fetcher_->generation != forkGeneration.load())
      (void)fetcher_.release();
  }
  PyPipeline(const PyPipeline &) = delete;
  PyPipeline &operator=(const PyPipeline &) = delete;

  void start() {
    std::optional<Expected<std::unique_ptr<runtime::Pipeline>>> p;
    {
      py::gil_scoped_release release;
      p.emplace(api_->makeRunner());
    }
    if (!*p)
      raise(pipelineErrorType, p->status().message());
    if (box_)
      box_->pipeline->stop();
    box_ = std::make_shared<Box>();
    box_->api = api_;
    box_->pipeline = p->take();
    started_ = false;
  }

  py::dict stateDict() {
    std::unique_lock<std::mutex> lock = lockCalls();
    std::string js = pipe().state().toJson();
    return py::module_::import("json").attr("loads")(js);
  }

  void loadStateDict(const py::dict &state) {
    std::unique_lock<std::mutex> lock = lockCalls();
    (void)liveBox();
    if (started_)
      throw py::value_error(
          "load_state_dict() must come before the first batch; create a "
          "new Pipeline to resume");
    std::string js =
        py::module_::import("json").attr("dumps")(state).cast<std::string>();
    Expected<runtime::PipelineState> st = runtime::PipelineState::fromJson(js);
    if (!st)
      throw py::value_error(st.status().message());
    api_->options().resume = st.take();
    start();
  }

  /// The compiled pipeline: plan, options, kernels and schedule.
  std::shared_ptr<sluice::Pipeline> api_;
  bool started_ = false;

  /// The running pipeline, kept alive by the caller's copy while the GIL
  /// is released (another thread may replace box_ meanwhile). Refused in a
  /// process forked after it was made.
  std::shared_ptr<Box> liveBox() {
    std::shared_ptr<Box> b = box_;
    if (!b)
      throw py::value_error("the pipeline is closed");
    if (b->inherited())
      raise(pipelineErrorType,
            "sluice: error: this Pipeline was made in process " +
                std::to_string(b->pid) +
                ", which then forked; it cannot run in the child (process " +
                std::to_string(::getpid()) +
                "): its worker threads exist only in the parent. Make a new "
                "sluice.Pipeline in the child (e.g. in a DataLoader "
                "worker's init), or use the 'spawn' start method");
    return b;
  }

  runtime::Pipeline &pipe() { return *liveBox()->pipeline; }

  /// Serializes the calls that drive the pipeline (next, close, the state
  /// calls): the runtime's Pipeline is driven by one thread at a time.
  /// Waited for with the GIL released, so a thread waiting here never holds
  /// what the thread inside needs to finish.
  std::unique_lock<std::mutex> lockCalls() {
    std::unique_lock<std::mutex> lock(callMu_, std::defer_lock);
    if (!lock.try_lock()) {
      py::gil_scoped_release release;
      lock.lock();
    }
    return lock;
  }
  std::mutex callMu_;
  /// close() was called (from any thread).
  std::atomic<bool> closed_{false};

  /// The runtime's next output, with Python's signal handlers running
  /// meanwhile (on the main thread): a handler that raises cancels the
  /// pipeline, and the exception propagates once its threads are joined.
  Expected<bool> fetch(runtime::Pipeline &p, runtime::Batch &b) {
    if (!onMainThread()) {
      py::gil_scoped_release release;
      return p.next(b);
    }
    if (!fetcher_)
      fetcher_ = std::make_unique<Fetcher>();
    fetcher_->post(&p, &b);
    for (;;) {
      bool done;
      {
        py::gil_scoped_release release;
        done = fetcher_->waitFor(std::chrono::milliseconds(20));
      }
      if (done)
        return fetcher_->take();
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set e;
        {
          py::gil_scoped_release release;
          p.cancel();
          while (!fetcher_->waitFor(std::chrono::milliseconds(1000))) {
          }
          (void)fetcher_->take();
          p.stop(); // joins the workers
        }
        throw e;
      }
    }
  }

  py::dict next() {
    std::unique_lock<std::mutex> lock = lockCalls();
    std::shared_ptr<Box> box = liveBox();
    runtime::Pipeline &p = *box->pipeline;
    started_ = true;
    runtime::Batch b;
    Expected<bool> r = fetch(p, b);
    if (PyErr_CheckSignals() != 0) {
      // A signal handler raised just as the output came: join the workers
      // before the exception propagates.
      py::error_already_set e;
      {
        py::gil_scoped_release release;
        p.stop();
      }
      throw e;
    }
    if (!r && closed_)
      raise(pipelineErrorType,
            "sluice: the pipeline was closed (close() on another thread) "
            "while this thread waited for its next output");
    if (!r)
      raise(pipelineErrorType, r.status().message());
    if (!*r)
      throw py::stop_iteration();
    lastEpoch_ = b.epoch();
    py::dict out;
    const RecordType &type = b.type();
    std::vector<Tensor> fields = b.fields();
    b = runtime::Batch(); // the arrays own the only references now
    for (size_t i = 0; i < fields.size(); ++i)
      out[py::str(type.fields()[i].name)] = toPython(box, std::move(fields[i]));
    return out;
  }

  /// Stops the pipeline. Safe while another thread is in next(): the
  /// pipeline is cancelled first (which reaches into the output being
  /// made), then stopped once that call has returned, so the runtime is
  /// never stopped under a thread that is still driving it.
  void close() {
    std::shared_ptr<Box> b = box_;
    closed_ = true;
    if (!b || b->inherited())
      return; // a forked child has no threads of it to stop
    b->pipeline->cancel();
    std::unique_lock<std::mutex> lock = lockCalls();
    py::gil_scoped_release release;
    b->pipeline->stop();
  }

  py::dict outputType() {
    py::dict d;
    for (const Field &f : pipe().outputType().fields())
      d[py::str(f.name)] = f.type.str();
    return d;
  }

  py::object stats() {
    std::shared_ptr<Box> box = liveBox();
    std::string js = box->pipeline->stats().toJson().dump();
    return py::module_::import("json").attr("loads")(js);
  }

  /// Makes a new runtime pipeline of the same compiled plan, kernels and
  /// schedule that starts at `firstEpoch` (no parsing, compiling, kernel
  /// generation or profiling again): sluice.torch.Dataset's next epoch
  /// after one it left early, or an epoch out of order.
  void restart(int64_t firstEpoch) {
    if (firstEpoch < 0)
      throw py::value_error("first_epoch must be >= 0");
    std::unique_lock<std::mutex> lock = lockCalls();
    if (box_ && box_->inherited())
      (void)liveBox(); // raises: made before a fork
    if (box_) {
      std::shared_ptr<Box> b = box_;
      py::gil_scoped_release release;
      b->pipeline->stop();
    }
    runtime::RunOptions &opts = api_->options();
    opts.firstEpoch = firstEpoch;
    opts.resume.reset();
    // The re-planner of `schedule: auto` watched the pipeline it started
    // with (its last counters, the knobs it changed there): the new one
    // runs the tuned schedule without it, as every later epoch of a
    // Dataset always did.
    opts.controller.reset();
    lastEpoch_ = -1;
    closed_ = false;
    start();
  }

  py::object perEpoch() {
    std::optional<int64_t> n = pipe().expectedOutputsPerEpoch();
    return n ? py::object(py::int_(*n)) : py::object(py::none());
  }

  py::object length() {
    std::optional<int64_t> n = pipe().expectedOutputs();
    if (!n)
      throw py::type_error("the number of outputs is not known in advance "
                           "(a filter, unbatch or endless repeat)");
    return py::int_(*n);
  }

  int64_t lastEpoch_ = -1;
  std::shared_ptr<Box> box_;
  /// Declared after box_ so it is destroyed (its thread joined) first.
  std::unique_ptr<Fetcher> fetcher_;
};

py::list check(const std::string &path) {
  std::unique_ptr<dsl::Spec> spec = loadSpec(path);
  py::list out;
  auto add = [&](const dsl::Step &st) {
    py::dict d;
    d["name"] = st.name;
    d["op"] = st.op;
    d["line"] = st.loc.line;
    d["col"] = st.loc.col;
    py::dict fields;
    for (const Field &f : st.outputType.fields())
      fields[py::str(f.name)] = f.type.str();
    d["type"] = fields;
    out.append(d);
  };
  add(spec->source);
  for (const dsl::Step &st : spec->steps)
    add(st);
  return out;
}

py::dict tune(const std::string &path, py::object cores, py::object memory,
              double seconds, py::object reportDir,
              std::vector<std::string> disablePasses, bool jit) {
  OpenOptions o;
  o.disabledPasses = std::move(disablePasses);
  o.jit = jit;
  std::shared_ptr<sluice::Pipeline> p = openSpec(path, o);
  compileKernels(*p);
  autotune::TuneOptions opts;
  if (!cores.is_none()) {
    opts.cores = intArg(cores, "cores", 1);
    if (opts.cores < 1)
      throw py::value_error("cores must be >= 1");
  }
  opts.memoryBytes = parseMemory(memory);
  if (!(seconds > 0) || seconds > 600)
    throw py::value_error("seconds must be in (0, 600]");
  opts.profile.secondsPerProbe = seconds;
  opts.verifySeconds = std::max(1.0, seconds * 1.5);
  std::optional<Expected<autotune::TuneResult>> r;
  {
    py::gil_scoped_release release;
    r.emplace(p->tune(opts));
  }
  if (!*r)
    raise(pipelineErrorType, r->status().message());
  if (!reportDir.is_none()) {
    if (Status s = autotune::writeReports(**r, py::str(reportDir)); !s)
      raise(pipelineErrorType, s.message());
  }
  std::string js = autotune::reportJson(**r).dump();
  py::dict out = py::module_::import("json").attr("loads")(js);
  out["schedule_yaml"] = autotune::scheduleYaml(**r);
  return out;
}

} // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice: declarative input pipelines, compiled and run natively; "
            "batches come out as numpy arrays over the runtime's buffers.";

  py::object base = py::module_::import("builtins");
  specErrorType = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "sluice.SpecError",
      "A spec that does not check or compile; the message is what `sluice "
      "check` prints (file:line:col: error: ..., the line, a caret).",
      PyExc_ValueError, nullptr));
  pipelineErrorType =
      py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
          "sluice.PipelineError",
          "A data or budget error while running: a bad record under "
          "`on_error: fail` (its file, record and byte offset), a buffer "
          "that does not fit in budget.memory.",
          PyExc_RuntimeError, nullptr));
  m.attr("SpecError") = specErrorType;
  m.attr("PipelineError") = pipelineErrorType;

  // Fork safety (see forkGeneration): pthread_atfork counts every fork,
  // whoever makes it; Python's own hook looks the main thread up again in
  // the child (the thread that forked), with the interpreter ready.
  noteMainThread();
  // pybind11's numpy API table is a function-local static that imports
  // numpy on its first use: made there by the first output two threads
  // convert at once, one thread imported numpy while the other waited on
  // the static's guard holding the GIL (a deadlock). Made here, on import.
  py::module_::import("numpy");
  (void)py::detail::npy_api::get();
  (void)py::dtype("uint8"); // its parser is another such static

  static bool atforkRegistered = false;
  if (!atforkRegistered) {
    atforkRegistered = true;
    ::pthread_atfork(nullptr, nullptr, afterForkInChild);
  }
  py::module_::import("os").attr("register_at_fork")(
      py::arg("after_in_child") = py::cpp_function([] { noteMainThread(); }));

  py::class_<Buffer>(m, "Buffer", R"(The runtime buffer under an output array.

Every numeric array a Pipeline yields is a view whose ``base`` is a Buffer:
it owns the runtime's tensor, keeps its bytes counted against the
pipeline's memory budget, and returns the memory to the runtime's pool when
the last array over it is gone.)")
      .def_property_readonly("address", &Buffer::address,
                             "Address of the first byte of the data.")
      .def_property_readonly("nbytes", &Buffer::nbytes,
                             "Bytes of data in the buffer.");

  py::class_<PyPipeline>(m, "Pipeline", R"(A compiled, running pipeline.

Iterating yields one dict per output (a batch, or a record when the spec
has no batch step) mapping field names to numpy arrays. Numeric arrays share
memory with the runtime (no copy; ``torch.from_numpy`` takes them as they
are); bytes and string fields are numpy object arrays of ``bytes`` /
``str``.)")
      .def(py::init<const std::string &, py::object, py::object, int64_t,
                    py::object, py::object, int64_t, std::vector<std::string>,
                    py::object, py::object, bool, bool>(),
           py::arg("spec_path"), py::kw_only(), py::arg("epochs") = py::none(),
           py::arg("schedule") = py::none(), py::arg("threads") = 0,
           py::arg("seed") = py::none(), py::arg("memory") = py::none(),
           py::arg("first_epoch") = 0,
           py::arg("disable_passes") = std::vector<std::string>{},
           py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
           py::arg("jit") = true, py::arg("pin_memory") = false,
           R"(Checks and compiles ``spec_path`` and builds the stage graph.

epochs: overrides the spec's ``epochs`` (-1: forever).
schedule: a schedule file (what ``sluice tune`` writes), a dict
    ``{step: {"parallelism": n, "prefetch": n, "cache": "memory"}}``, or
    "auto". When None and the spec says ``schedule: auto``, or with
    "auto", the autotuner profiles the pipeline for about two seconds and
    its schedule is applied, as ``sluice run`` does (SLUICE_NO_AUTOTUNE=1
    turns that off; ``schedule={}`` runs with the runtime's defaults). The
    outputs are the same bytes under any schedule; the ``schedule``
    property shows the one in effect.
threads: worker threads (0: the spec's budget.cores, or all cores).
seed: overrides the spec's ``seed``.
memory: budget.memory override, in bytes or as "512MiB".
first_epoch: start at this epoch (epochs before it are not read).
disable_passes: compiler passes not to run (as ``--disable-pass``).
rank, world_size: this process's share of the data, each from the first
    of: this argument, the spec's ``distributed: {rank, world_size}``,
    torch.distributed's get_rank() / get_world_size() when the program
    initialised a process group, torchrun's RANK / WORLD_SIZE (or a Kubernetes Indexed Job's
    JOB_COMPLETION_INDEX for the rank), else 0 of 1. Rank r reads the
    positions p of each epoch's global order with p % world_size == r.
    ValueError names where a bad value came from.
jit: compile the value-wise steps to native kernels, as ``sluice run``
    does (the default); False runs the runtime's own kernels, as
    ``sluice run --no-jit`` (SLUICE_NO_JIT=1 also turns it off). The
    outputs are the same bytes either way; ``kernels`` tells which ran.
pin_memory: the last batch step's buffers (of 64 KiB or more) are
    page-locked where they are allocated, by the registrar that
    ``install_host_registrar`` installed (the CUDA runtime's
    cudaHostRegister), and kept registered for reuse, counted in the memory
    budget; ``pinned_stats()`` counts them. PipelineError when no registrar
    is installed. The same bytes either way.

Raises SpecError (file:line:col) for a spec that does not check, and
PipelineError when the pipeline cannot start (e.g. its buffers cannot fit
in the memory budget).)")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyPipeline::next,
           "The next output as a dict of numpy arrays. The GIL is released "
           "while the runtime works.")
      .def("__len__", &PyPipeline::length,
           "Outputs over all epochs, when known in advance.")
      .def("restart", &PyPipeline::restart, py::kw_only(),
           py::arg("first_epoch"),
           R"(Starts over at epoch ``first_epoch`` with the same compiled
plan, generated kernels and schedule (nothing is parsed, compiled or
profiled again; the re-planner of ``schedule: auto`` is not carried over).
Outputs handed out before stay valid; the stall meter and the other
counters start again from zero.)")
      .def_property_readonly(
          "outputs_per_epoch", &PyPipeline::perEpoch,
          "Outputs (batches) of one epoch when every step keeps a known "
          "count (no filter, unbatch or skipped records), else None.")
      .def("close", &PyPipeline::close,
           "Stops the pipeline's threads now; arrays already handed out stay "
           "valid.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyPipeline &p, py::object, py::object, py::object) { p.close(); })
      .def("state_dict", &PyPipeline::stateDict,
           R"(Where the pipeline stands after the batches delivered so far.

A small dict (positions and counts, never data) that ``load_state_dict``
turns back into exactly the batches this pipeline would produce next. With
ranks, save it on every rank after the same number of batches; a job may
resume at another world size when the pipeline reads its source by position
(see README).)")
      .def("load_state_dict", &PyPipeline::loadStateDict, py::arg("state"),
           R"(Continues from a ``state_dict()``: the next batches are exactly
those the saved pipeline would have produced next, bit for bit. Call it
before the first batch.)")
      .def("stats", &PyPipeline::stats,
           "Per-stage counters now, as the dict `sluice run --stats-json` "
           "writes; its \"consumer\" entry is the stall meter (how long "
           "the caller waited for outputs, its stalls and headspace).")
      .def_property_readonly(
          "output_type", &PyPipeline::outputType,
          "The output record type: {field: 'f32[128,3,224,224]', ...}.")
      .def_property_readonly("schedule", &PyPipeline::scheduleDict,
                             R"(The per-step schedule overrides in effect, as
``{step: {"parallelism": n, "prefetch": n, "cache": "memory"}}``: those
given as ``schedule=``, or the autotuner's choice for ``schedule: auto``
(steps the compiler fused are named "a+b"). Pass it as ``schedule=`` to
another Pipeline of the same spec to skip the profiling.)")
      .def_property_readonly(
          "autotuned",
          [](PyPipeline &p) { return p.api_->autoSchedule() != nullptr; },
          "Whether the autotuner chose the schedule (``schedule: auto``).")
      .def_property_readonly(
          "kernels",
          [](PyPipeline &p) -> int64_t { return p.api_->generatedKernels(); },
          "Generated kernel functions the pipeline runs (0 with jit=False or "
          "SLUICE_NO_JIT=1, or when no step is compiled).")
      .def_property_readonly(
          "schedule_explanation",
          [](PyPipeline &p) { return p.api_->scheduleExplanation(); },
          "What the autotuner chose and why (what `sluice run --stats` "
          "prints for ``schedule: auto``); empty when it did not run.")
      .def_property_readonly(
          "epochs", [](PyPipeline &p) { return p.pipe().epochs(); },
          "Epochs this pipeline runs (-1: forever).")
      .def_property_readonly(
          "threads", [](PyPipeline &p) { return p.pipe().threads(); },
          "Worker threads it uses.")
      .def_property_readonly(
          "epoch", [](PyPipeline &p) { return p.lastEpoch_; },
          "Epoch of the last output (-1 before the first).")
      .def_property_readonly(
          "rank", [](PyPipeline &p) { return p.api_->options().rank; },
          "This pipeline's rank (from the call, the spec's ``distributed:``, "
          "the environment, or 0).")
      .def_property_readonly(
          "world_size",
          [](PyPipeline &p) { return p.api_->options().worldSize; },
          "The world size its share is cut for (1: the whole data).")
      .def_property_readonly(
          "held_bytes",
          [](PyPipeline &p) { return p.pipe().heldOutputs().used(); },
          "Bytes of outputs Python still holds, counted in the budget.");

  sluice::python::definePinned(m);
  m.def("tune", &tune, py::arg("spec_path"), py::kw_only(),
        py::arg("cores") = py::none(), py::arg("memory") = py::none(),
        py::arg("seconds") = 1.5, py::arg("report_dir") = py::none(),
        py::arg("disable_passes") = std::vector<std::string>{},
        py::arg("jit") = true,
        R"(Runs the autotuner on a spec, as `sluice tune` does.

Profiles the pipeline (``seconds`` per probe), solves for ``cores`` and
``memory`` (default: the spec's budget, else the host), runs the chosen
schedule to measure it, and returns report.json's contents as a dict (schema
in docs/autotune.md) plus ``schedule_yaml``, the schedule to save and pass
as ``Pipeline(..., schedule=FILE)`` or ``sluice run --schedule FILE``.
``report_dir`` also writes schedule.yaml, report.json, report.md and the
SVG there. ``jit`` as for Pipeline: the tuner times the kernels the
pipeline will run. Raises SpecError or PipelineError like Pipeline.)");
  m.def("check", &check, py::arg("spec_path"),
        R"(Checks a spec and returns its typed stages.

One dict per stage (the source first): ``name``, ``op``, ``line``, ``col``
and ``type``, the record type after the stage as ``{field: type}``. Raises
SpecError with every problem, located as file:line:col.)");
}
