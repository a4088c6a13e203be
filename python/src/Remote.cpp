//===- Remote.cpp - sluice._remote: the trainer's gRPC client in Python ---===//
//
// A thin pybind11 layer over remote::RemoteDataset (remote/Remote.h): each
// output's numeric fields become numpy arrays over the received message's
// bytes (no copy after receipt; the array's base owns the message), string
// fields object arrays of bytes/str. Errors raise sluice.PipelineError, as
// the local module's do. The GIL is released while waiting for workers.
// A module of its own (not part of _sluice): it needs gRPC, not the
// compiler, and sluice/remote.py imports it only when used.
//
//===----------------------------------------------------------------------===//
#include "sluice/remote/Remote.h"
#include "Dtypes.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fstream>
#include <sstream>

namespace py = pybind11;
using namespace sluice;

namespace {

py::object pipelineError() {
  return py::module_::import("sluice._sluice").attr("PipelineError");
}

[[noreturn]] void raisePipelineError(const std::string &msg) {
  PyErr_SetString(pipelineError().ptr(), msg.c_str());
  throw py::error_already_set();
}

using sluice::python::dtypeOf;

/// Keeps a received message alive under the arrays that view it.
struct Owner {
  std::shared_ptr<const void> msg;
};

py::dict toPython(remote::RemoteOutput &out) {
  py::dict d;
  for (remote::RemoteField &f : out.fields) {
    std::vector<py::ssize_t> shape(f.shape.begin(), f.shape.end());
    if (!isNumeric(f.elem)) {
      py::array arr(py::dtype("object"), shape);
      auto **slots = static_cast<PyObject **>(arr.mutable_data());
      bool isBytes = f.elem == ElemType::Bytes;
      for (size_t i = 0; i < f.items.size(); ++i) {
        py::object o = isBytes ? py::object(py::bytes(f.items[i]))
                               : py::object(py::str(f.items[i]));
        Py_XDECREF(slots[i]);
        slots[i] = o.release().ptr();
      }
      d[py::str(f.name)] = std::move(arr);
      continue;
    }
    int64_t n = 1;
    for (int64_t s : f.shape)
      n *= s;
    if (static_cast<size_t>(n) * elemTypeSize(f.elem) != f.nbytes)
      raisePipelineError("a worker sent field '" + f.name +
                         "' with the wrong number of bytes");
    auto *owner = new Owner{out.owner};
    py::capsule base(owner, [](void *p) { delete static_cast<Owner *>(p); });
    d[py::str(f.name)] = py::array(dtypeOf(f.elem), shape, {}, f.data, base);
  }
  return d;
}

std::string readText(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw py::value_error("cannot read '" + path + "'");
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

class PyClient {
public:
  PyClient(const std::string &specPath, std::vector<std::string> workers,
           const std::string &workersFile, int64_t rank, int64_t worldSize,
           const std::string &token, py::object tlsRoots,
           const std::string &tlsServerName, int64_t chunk, int64_t window,
           double workerTimeout, const std::string &trainer, double dnsInterval,
           bool sharedMemory, bool chunkRuns) {
    remote::ClientOptions o;
    o.specPath = specPath;
    o.specText = readText(specPath);
    o.workers = std::move(workers);
    o.workersFile = workersFile;
    o.rank = rank;
    o.worldSize = worldSize;
    o.security.token = token;
    if (!tlsRoots.is_none()) {
      o.security.tls = true;
      std::string path = tlsRoots.cast<std::string>();
      if (!path.empty())
        o.security.tlsRoots = readText(path);
    }
    o.security.tlsServerName = tlsServerName;
    o.chunk = chunk;
    o.window = window;
    o.workerTimeout = workerTimeout;
    o.trainer = trainer;
    o.dnsInterval = dnsInterval;
    o.sharedMemory = sharedMemory;
    o.chunkRuns = chunkRuns;
    Expected<std::unique_ptr<remote::RemoteDataset>> c = [&] {
      py::gil_scoped_release nogil;
      return remote::RemoteDataset::connect(std::move(o));
    }();
    if (!c)
      raisePipelineError(c.status().message());
    client_ = c.take();
  }

  void start(int64_t epoch, const std::string &resume) {
    Status s = client_->start(epoch, resume);
    if (!s)
      throw py::value_error(s.message());
  }

  py::object next() {
    Expected<std::optional<remote::RemoteOutput>> r = [&] {
      py::gil_scoped_release nogil;
      return client_->next();
    }();
    if (!r)
      raisePipelineError(r.status().message());
    if (!*r)
      return py::none();
    return toPython(**r);
  }

  std::string state() const { return client_->state(); }
  void addWorker(const std::string &a) { client_->addWorker(a); }
  void close() {
    py::gil_scoped_release nogil;
    client_->close();
  }
  py::dict stats() const {
    remote::ClientStats s = client_->stats();
    py::dict d;
    d["outputs"] = s.outputs;
    d["wire_bytes"] = s.wireBytes;
    d["duplicates"] = s.duplicates;
    d["reassigned"] = s.reassigned;
    d["worker_failures"] = s.workerFailures;
    d["chunks"] = s.chunks;
    d["runs"] = s.runs;
    d["steals"] = s.steals;
    d["shared_memory_outputs"] = s.slotOutputs;
    d["slots_made"] = s.slotsMade;
    d["slot_waits"] = s.slotWaits;
    d["slots_huge"] = s.slotsHuge;
    d["worker_cpu_seconds"] = s.workerCpuSeconds;
    d["receive_cpu_seconds"] = s.receiveCpuSeconds;
    d["wait_seconds"] = s.waitSeconds;
    d["trainer_seconds"] = s.trainerSeconds;
    d["worker_threads"] = s.workerThreads;
    return d;
  }
  int64_t epochs() const { return client_->epochs(); }
  std::string outputType() const { return client_->outputType(); }
  std::string fingerprint() const {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx",
                  static_cast<unsigned long long>(client_->fingerprint()));
    return buf;
  }

private:
  std::unique_ptr<remote::RemoteDataset> client_;
};

} // namespace

PYBIND11_MODULE(_remote, m) {
  m.doc() = "sluice's trainer-side gRPC client (see sluice.remote)";
  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string &, std::vector<std::string>,
                    const std::string &, int64_t, int64_t, const std::string &,
                    py::object, const std::string &, int64_t, int64_t, double,
                    const std::string &, double, bool, bool>(),
           py::arg("spec_path"), py::arg("workers"), py::arg("workers_file"),
           py::arg("rank"), py::arg("world_size"), py::arg("token"),
           py::arg("tls_roots"), py::arg("tls_server_name"), py::arg("chunk"),
           py::arg("window"), py::arg("worker_timeout"), py::arg("trainer"),
           py::arg("dns_interval") = 5.0, py::arg("shared_memory") = true,
           py::arg("chunk_runs") = true)
      .def("start", &PyClient::start, py::arg("epoch"), py::arg("resume"))
      .def("next", &PyClient::next)
      .def("state", &PyClient::state)
      .def("add_worker", &PyClient::addWorker)
      .def("close", &PyClient::close)
      .def("stats", &PyClient::stats)
      .def_property_readonly("epochs", &PyClient::epochs)
      .def_property_readonly("output_type", &PyClient::outputType)
      .def_property_readonly("fingerprint", &PyClient::fingerprint);
}
