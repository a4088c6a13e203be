//===- Layout.h - transpose, pad, truncate and batching kernels -*- C++ -*-===//
//
// Kernels that move elements without changing them. They work on the bytes,
// so every numeric element type is supported; where noted, Bytes/String
// tensors are supported too (batching text fields, truncating token lists).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_LAYOUT_H
#define SLUICE_OPS_KERNELS_LAYOUT_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace sluice {
namespace kernels {

/// out.shape[k] = in.shape[perm[k]] (numpy.transpose). Dimensions that stay
/// adjacent are merged first; if nothing moves, the result shares the input
/// buffer. Otherwise the two dimensions that are innermost in the input and
/// in the output are copied in 32x32 tiles so both sides stay in cache.
/// String tensors are supported (element by element).
Expected<Tensor> transpose(const Tensor &input,
                           const std::vector<int64_t> &perm);
/// [H,W,C] -> [C,H,W].
Expected<Tensor> hwcToChw(const Tensor &image);
/// [C,H,W] -> [H,W,C].
Expected<Tensor> chwToHwc(const Tensor &image);

/// Pads dimension d with padding[d].first elements before and
/// padding[d].second after, all equal to `value` (converted per Scalar.h).
/// padding has one entry per dimension; entries must be >= 0.
Expected<Tensor> pad(const Tensor &input,
                     const std::vector<std::pair<int64_t, int64_t>> &padding,
                     double value);

/// Keeps the first maxLength entries along `axis` (shares the input when it
/// is already short enough). Numeric and String tensors.
Expected<Tensor> truncate(const Tensor &input, int64_t maxLength,
                          int64_t axis = 0);

/// Stacks N tensors of one type and shape into [N, ...] (batch). Numeric and
/// String tensors. Fails on an empty list or a shape/type mismatch, naming
/// the first offending item.
Expected<Tensor> stack(const std::vector<Tensor> &items);

/// padded_batch: stacks N tensors of one type and rank whose shapes may
/// differ, padding each at the end of every dimension to `paddedShape` with
/// `value` (Strings pad with ""). paddedShape has one entry per item
/// dimension, -1 meaning "the largest in this batch"; an empty paddedShape
/// means -1 everywhere. Fails if an item is larger than a fixed size.
Expected<Tensor> paddedStack(const std::vector<Tensor> &items,
                             const std::vector<int64_t> &paddedShape,
                             double value);

/// unbatch: splits [N, ...] into N tensors of shape [...] (copies).
Expected<std::vector<Tensor>> unstack(const Tensor &batch);

} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_LAYOUT_H
