//===- MathCalls.h - libm entry points for generated kernels ----*- C++ -*-===//
//
// Generated kernels call these instead of `log`, `pow`, ... directly: LLVM
// knows the libm names and rewrites calls to them (pow(x, 0.5) into a
// sqrt that loses the sign of a NaN, exp(x) - 1 into expm1, ...), which
// would make generated code round differently from the interpreter. Behind
// a name LLVM does not know, each call computes exactly what the
// interpreter's std:: call computes. A JIT binds them by address
// (mathCallTable()); a compiled executable links them from sluice_ops.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_MATHCALLS_H
#define SLUICE_OPS_KERNELS_MATHCALLS_H

#include <cstdint>

extern "C" {
double sluice_exp(double x);
double sluice_log(double x);
double sluice_log1p(double x);
double sluice_sin(double x);
double sluice_cos(double x);
double sluice_tanh(double x);
double sluice_pow(double x, double y);
double sluice_fmod(double x, double y);
float sluice_expf(float x);
float sluice_logf(float x);
float sluice_log1pf(float x);
float sluice_sinf(float x);
float sluice_cosf(float x);
float sluice_tanhf(float x);
float sluice_powf(float x, float y);
float sluice_fmodf(float x, float y);
/// The interpreter's numpy operations that are loops or branchy (copies of
/// powI, floorDivF and modF in ExprEval.cpp; compiler_codegen_test checks
/// that generated code calling them equals the interpreter).
int64_t sluice_powi(int64_t b, int64_t n);
double sluice_floordiv_f64(double a, double b);
double sluice_mod_f64(double a, double b);
float sluice_floordiv_f32(float a, float b);
float sluice_mod_f32(float a, float b);
}

namespace sluice::kernels {

/// One entry point: its C name and address.
struct MathCall {
  const char *name;
  void *fn;
};

/// All of the above, ending with {nullptr, nullptr}.
const MathCall *mathCallTable();

} // namespace sluice::kernels

#endif // SLUICE_OPS_KERNELS_MATHCALLS_H
