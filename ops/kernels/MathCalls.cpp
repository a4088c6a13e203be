//===- MathCalls.cpp - libm entry points for generated kernels ------------===//
//
// Each is the std:: function the interpreter calls, compiled without
// fast-math, so a generated kernel rounds as the interpreter does.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/kernels/MathCalls.h"
#include "sluice/ops/kernels/MathImpl.h"
#include "sluice/ops/kernels/NumpyArith.h"

#include <cmath>

extern "C" {
double sluice_exp(double x) { return std::exp(x); }
double sluice_log(double x) { return std::log(x); }
double sluice_log1p(double x) { return std::log1p(x); }
double sluice_sin(double x) { return std::sin(x); }
double sluice_cos(double x) { return std::cos(x); }
double sluice_tanh(double x) { return std::tanh(x); }
double sluice_pow(double x, double y) { return std::pow(x, y); }
double sluice_fmod(double x, double y) { return std::fmod(x, y); }
float sluice_expf(float x) { return std::exp(x); }
float sluice_logf(float x) { return std::log(x); }
float sluice_log1pf(float x) { return std::log1p(x); }
float sluice_sinf(float x) { return std::sin(x); }
float sluice_cosf(float x) { return std::cos(x); }
float sluice_tanhf(float x) { return std::tanh(x); }
float sluice_powf(float x, float y) { return std::pow(x, y); }
float sluice_fmodf(float x, float y) { return std::fmod(x, y); }
}

extern "C" {
int64_t sluice_powi(int64_t b, int64_t n) { return sluice::math::powI(b, n); }
double sluice_floordiv_f64(double a, double b) {
  return sluice::math::floorDivF(a, b);
}
double sluice_mod_f64(double a, double b) { return sluice::math::modF(a, b); }
float sluice_floordiv_f32(float a, float b) {
  return sluice::math::floorDivF(a, b);
}
float sluice_mod_f32(float a, float b) { return sluice::math::modF(a, b); }
}

namespace sluice::math {

// One rounding per operation, as in the generated code.
#ifdef __clang__
#pragma clang fp contract(off)
#endif
double log(double x) {
  ScalarOps ops;
  return logImpl(ops, x);
}

// Not under ThreadSanitizer: the clones' ifunc resolver runs before the
// TSan runtime is set up and crashed every program in __tsan_func_entry
// before main (as ImageResample.h's SLUICE_AA_CLONES).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_MATH_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && defined(__clang__) && !defined(SLUICE_MATH_NO_CLONES)
__attribute__((target_clones("avx2", "default")))
#endif
void logArray(const double *x, double *out, int64_t n) {
  ScalarOps ops;
  for (int64_t i = 0; i < n; ++i)
    out[i] = logImpl(ops, x[i]);
}

} // namespace sluice::math

namespace sluice::kernels {

const MathCall *mathCallTable() {
  static const MathCall table[] = {
      {"sluice_exp", reinterpret_cast<void *>(&sluice_exp)},
      {"sluice_log", reinterpret_cast<void *>(&sluice_log)},
      {"sluice_log1p", reinterpret_cast<void *>(&sluice_log1p)},
      {"sluice_sin", reinterpret_cast<void *>(&sluice_sin)},
      {"sluice_cos", reinterpret_cast<void *>(&sluice_cos)},
      {"sluice_tanh", reinterpret_cast<void *>(&sluice_tanh)},
      {"sluice_pow", reinterpret_cast<void *>(&sluice_pow)},
      {"sluice_fmod", reinterpret_cast<void *>(&sluice_fmod)},
      {"sluice_expf", reinterpret_cast<void *>(&sluice_expf)},
      {"sluice_logf", reinterpret_cast<void *>(&sluice_logf)},
      {"sluice_log1pf", reinterpret_cast<void *>(&sluice_log1pf)},
      {"sluice_sinf", reinterpret_cast<void *>(&sluice_sinf)},
      {"sluice_cosf", reinterpret_cast<void *>(&sluice_cosf)},
      {"sluice_tanhf", reinterpret_cast<void *>(&sluice_tanhf)},
      {"sluice_powf", reinterpret_cast<void *>(&sluice_powf)},
      {"sluice_fmodf", reinterpret_cast<void *>(&sluice_fmodf)},
      {"sluice_powi", reinterpret_cast<void *>(&sluice_powi)},
      {"sluice_floordiv_f64", reinterpret_cast<void *>(&sluice_floordiv_f64)},
      {"sluice_mod_f64", reinterpret_cast<void *>(&sluice_mod_f64)},
      {"sluice_floordiv_f32", reinterpret_cast<void *>(&sluice_floordiv_f32)},
      {"sluice_mod_f32", reinterpret_cast<void *>(&sluice_mod_f32)},
      {nullptr, nullptr}};
  return table;
}

} // namespace sluice::kernels
