//===- Pinned.cpp - Python bindings of the host memory registrar ----------===//
//
// sluice.torch installs the process's registrar (runtime/Pinned.h) before
// it makes a pipeline with pin_memory: the CUDA runtime torch loaded, or a
// recording one for tests on hosts without a GPU. Kept apart from
// Module.cpp: the registrar is process state, not a pipeline's.
//
//===----------------------------------------------------------------------===//
#include "Pinned.h"

#include "sluice/runtime/Pinned.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace sluice::python {

void definePinned(py::module_ &m) {
  m.def(
      "install_host_registrar",
      [](const std::string &kind, const std::string &library) -> py::object {
        using namespace runtime;
        std::shared_ptr<HostRegistrar> r;
        if (kind == "cuda") {
          Expected<std::shared_ptr<HostRegistrar>> made =
              makeCudaRegistrar(library);
          if (!made)
            throw std::runtime_error(made.status().message());
          r = made.take();
        } else if (kind == "record" || kind == "mlock") {
          r = makeRecordingRegistrar(kind == "mlock");
        } else if (kind != "none") {
          throw py::value_error("host registrar kind must be 'cuda', "
                                "'record', 'mlock' or 'none', got '" +
                                kind + "'");
        }
        setHostRegistrar(r);
        return r ? py::object(py::str(r->name())) : py::object(py::none());
      },
      py::arg("kind"), py::arg("library") = "",
      R"(Installs the registrar that page-locks the batch buffers of
pipelines made with ``pin_memory=True`` from now on, and returns its name.
"cuda": the CUDA runtime (libcudart: ``library``, else the one the process
loaded, else the system's), RuntimeError when none loads or it sees no
device. "record" (calls recorded, nothing locked) and "mlock" (mlock(2)
too) need no GPU: for tests of the bookkeeping (``host_registrar_log``).
"none" uninstalls.)");
  m.def(
      "host_registrar",
      []() -> py::object {
        auto r = runtime::hostRegistrar();
        return r ? py::object(py::str(r->name())) : py::object(py::none());
      },
      "The installed registrar's name, or None.");
  m.def(
      "pinned_stats",
      []() {
        runtime::PinnedStats t = runtime::pinnedTotals();
        py::dict d;
        d["registrar"] = t.registrar;
        d["buffers"] = t.buffers;
        d["bytes"] = t.bytes;
        d["peak_bytes"] = t.peakBytes;
        d["idle_buffers"] = t.idleBuffers;
        d["registered"] = t.registered;
        d["unregistered"] = t.unregistered;
        d["reused"] = t.reused;
        d["dropped"] = t.dropped;
        d["failures"] = t.failures;
        d["first_error"] = t.firstError;
        return d;
      },
      R"(Counters of the process's page-locked batch buffers (every
pipeline made with pin_memory=True so far): buffers and bytes registered now
(and the peak), idle_buffers kept for reuse, registered / unregistered (the
calls made), reused (batches that took an idle buffer), dropped (buffers
unregistered because the budget could not hold them idle), failures (batches
left in ordinary memory because registering failed) and first_error.)");
  m.def(
      "host_registrar_log",
      []() -> py::object {
        std::optional<runtime::RegistrarLog> log = runtime::registrarLog();
        if (!log)
          return py::none();
        py::dict d;
        d["registrations"] = log->registrations;
        d["unregistrations"] = log->unregistrations;
        d["double_registrations"] = log->doubleRegistrations;
        d["stray_unregistrations"] = log->strayUnregistrations;
        py::list live;
        for (const auto &[addr, bytes] : log->live)
          live.append(py::make_tuple(addr, bytes));
        d["live"] = live;
        return d;
      },
      R"(What a recording registrar ("record"/"mlock") saw: registrations,
unregistrations, double_registrations and stray_unregistrations (both 0
when the bookkeeping is right) and ``live``, the (address, bytes) ranges
registered now; None for another registrar.)");
}

} // namespace sluice::python
