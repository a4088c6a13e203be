//===- Format.h - Numbers in the autotuner's explanations -------*- C++ -*-===//
//
// Internal to autotune/lib: the solver's reasons, the re-planner's events,
// the reports and `schedule: auto`'s paragraph print rates and figures the
// same way, so a reader can compare a number across them.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_LIB_FORMAT_H
#define SLUICE_AUTOTUNE_LIB_FORMAT_H

#include <cmath>
#include <cstdio>
#include <string>

namespace sluice::autotune::detail {

/// `v` through printf's `f`.
inline std::string fmt(double v, const char *f = "%.1f") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

/// A rate: 512.0, 91.6k, 2.06M, or "unbounded".
inline std::string fmtRate(double v) {
  if (!std::isfinite(v))
    return "unbounded";
  if (v >= 1e6)
    return fmt(v / 1e6, "%.2fM");
  if (v >= 1e3)
    return fmt(v / 1e3, "%.1fk");
  return fmt(v, "%.1f");
}

} // namespace sluice::autotune::detail

#endif // SLUICE_AUTOTUNE_LIB_FORMAT_H
