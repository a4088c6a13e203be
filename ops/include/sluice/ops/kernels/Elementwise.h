//===- Elementwise.h - normalize, cast, clamp, fill_missing -----*- C++ -*-===//
//
// Element-wise kernels that the compiler may also fuse; these are the
// reference (unfused) implementations the runtime calls and the fused code is
// tested against. Conversions follow Scalar.h (saturating float->int).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_ELEMENTWISE_H
#define SLUICE_OPS_KERNELS_ELEMENTWISE_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/ops/kernels/Scalar.h"

#include <optional>
#include <vector>

namespace sluice {
namespace kernels {

/// f32 out = (float(x) - mean[c]) * invStd[c] with c the index along the
/// last dimension, mean[c] = float(mean) and invStd[c] = float(1.0 / std).
/// `mean` and `std` have one entry (applied to every element) or one per
/// channel (the size of the last dimension). Input: any numeric type (u8
/// and f32 take the vectorized path). Multiplying by the reciprocal instead
/// of dividing differs from (x - mean) / std by at most 2 ulp (tested), and
/// is what the fused compiled kernels compute too. With `out` f16 or bf16
/// each f32 value is rounded to it (Scalar.h's floatToHalf / floatToBf16),
/// in the same pass.
Expected<Tensor> normalize(const Tensor &input, const std::vector<double> &mean,
                           const std::vector<double> &stddev,
                           ElemType out = ElemType::F32);

/// The element types normalize writes: f32, f16, bf16.
inline bool isNormalizeOutput(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16;
}

/// The bits of an f16 / a bf16 element: distinct types, so that a kernel
/// templated on its output type picks the rounding (NormalizeOut).
struct HalfBits {
  uint16_t bits;
};
struct Bf16Bits {
  uint16_t bits;
};

/// How a normalized f32 value is stored as OutT (float, HalfBits, Bf16Bits).
template <typename OutT> struct NormalizeOut {
  static float store(float v) { return v; }
};
template <> struct NormalizeOut<HalfBits> {
  static HalfBits store(float v) { return {floatToHalf(v)}; }
};
template <> struct NormalizeOut<Bf16Bits> {
  static Bf16Bits store(float v) { return {floatToBf16(v)}; }
};

/// normalize's per-channel constants: m[c] = float(mean), scale[c] =
/// float(1.0 / std), one list value standing for every channel. `mean` and
/// `stddev` have 1 or `channels` values. Kernels that normalize as part of
/// something else (the fused crop epilogue) take these and
/// normalizeValue(), so that their bytes are normalize's.
void normalizeTables(const std::vector<double> &mean,
                     const std::vector<double> &stddev, int64_t channels,
                     std::vector<float> &m, std::vector<float> &scale);

/// normalize's expression for one element.
inline float normalizeValue(float x, float m, float scale) {
  return (x - m) * scale;
}

/// Converts every element to `to` (any numeric pair, incl. f16 and bool) with
/// the rules of Scalar.h: float->int truncates toward zero then saturates,
/// NaN->0; narrowing int->int saturates; ->bool is != 0. Returns the input
/// itself when it already has type `to`.
Expected<Tensor> cast(const Tensor &input, ElemType to);

/// Clamps every element into [lo, hi] (either bound optional), keeping the
/// element type. Integer tensors use ceil(lo) and floor(hi). NaN stays NaN.
Expected<Tensor> clamp(const Tensor &input, std::optional<double> lo,
                       std::optional<double> hi);

/// Replaces NaN by `value` in float tensors (the CSV reader's missing cells).
/// Integer tensors have no missing marker and are returned unchanged.
Expected<Tensor> fillMissing(const Tensor &input, double value);

} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_ELEMENTWISE_H
