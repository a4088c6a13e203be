//===- Dtypes.h - numpy dtypes of sluice element types ---------*- C++ -*-===//
//
// Shared by the two extension modules (_sluice: Module.cpp, _remote:
// Remote.cpp), which hand batches to numpy the same way.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_PYTHON_DTYPES_H
#define SLUICE_PYTHON_DTYPES_H

#include "sluice/ops/Types.h"

#include <pybind11/numpy.h>

namespace sluice::python {

/// The numpy dtype an array of `e` elements is handed over as; bf16 as its
/// bits (uint16), which sluice.torch views as torch.bfloat16; strings and
/// bytes as object.
inline pybind11::dtype dtypeOf(ElemType e) {
  switch (e) {
  case ElemType::U8:
    return pybind11::dtype("uint8");
  case ElemType::I8:
    return pybind11::dtype("int8");
  case ElemType::U16:
    return pybind11::dtype("uint16");
  case ElemType::I16:
    return pybind11::dtype("int16");
  case ElemType::I32:
    return pybind11::dtype("int32");
  case ElemType::I64:
    return pybind11::dtype("int64");
  case ElemType::F16:
    return pybind11::dtype("float16");
  case ElemType::BF16:
    return pybind11::dtype("uint16");
  case ElemType::F32:
    return pybind11::dtype("float32");
  case ElemType::F64:
    return pybind11::dtype("float64");
  case ElemType::Bool:
    return pybind11::dtype("bool");
  default:
    return pybind11::dtype("object");
  }
}

} // namespace sluice::python

#endif // SLUICE_PYTHON_DTYPES_H
