//===- Pinned.h - Python bindings of the host memory registrar --*- C++ -*-===//
#ifndef SLUICE_PYTHON_PINNED_H
#define SLUICE_PYTHON_PINNED_H

#include <pybind11/pybind11.h>

namespace sluice::python {
/// Adds install_host_registrar, host_registrar and host_registrar_log.
void definePinned(pybind11::module_ &m);
} // namespace sluice::python

#endif // SLUICE_PYTHON_PINNED_H
