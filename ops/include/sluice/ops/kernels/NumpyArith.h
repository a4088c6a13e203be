//===- NumpyArith.h - numpy's integer power, floor division and modulo -*- C++
//-*-===//
//
// One definition for the interpreter (ExprEval.cpp) and for the entry points
// generated kernels call (MathCalls.cpp), so that turning codegen off changes
// no byte: numpy's npy_divmod for `//` and `%` on floats, and `**` on
// integers with wrap-around.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_NUMPYARITH_H
#define SLUICE_OPS_KERNELS_NUMPYARITH_H

#include <cmath>
#include <cstdint>

namespace sluice::math {

/// Integer power with wrap-around; a negative exponent truncates 1/b^n.
inline int64_t powI(int64_t b, int64_t n) {
  if (n < 0)
    return b == 1 ? 1 : b == -1 ? (n % 2 ? -1 : 1) : 0;
  uint64_t r = 1, x = static_cast<uint64_t>(b);
  for (uint64_t k = static_cast<uint64_t>(n); k; k >>= 1) {
    if (k & 1)
      r *= x;
    x *= x;
  }
  return static_cast<int64_t>(r);
}

/// numpy's npy_divmod in precision F: the floor quotient.
template <typename F> inline F floorDivF(F a, F b) {
  if (b == 0)
    return a / b;
  F mod = std::fmod(a, b);
  F div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0))
      div -= F(1);
  }
  if (div != 0) {
    F fl = std::floor(div);
    if (div - fl > F(0.5))
      fl += F(1);
    return fl;
  }
  return std::copysign(F(0), a / b);
}

/// numpy's npy_divmod in precision F: the remainder, with the divisor's sign.
template <typename F> inline F modF(F a, F b) {
  F mod = std::fmod(a, b);
  if (b == 0)
    return mod;
  if (mod != 0) {
    if ((b < 0) != (mod < 0))
      mod += b;
  } else {
    mod = std::copysign(F(0), b);
  }
  return mod;
}

} // namespace sluice::math

#endif // SLUICE_OPS_KERNELS_NUMPYARITH_H
