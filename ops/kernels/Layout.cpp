//===- Layout.cpp - transpose, pad, truncate and batching kernels ---------===//

#include "sluice/ops/kernels/Layout.h"

#include "Dispatch.h"
#include "sluice/ops/Allocation.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

namespace sluice {
namespace kernels {

using detail::Tag;

namespace {

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    s[i - 1] = s[i] * shape[i];
  return s;
}

int64_t product(const std::vector<int64_t> &v) {
  int64_t p = 1;
  for (int64_t x : v)
    p *= x;
  return p;
}

/// Calls copy(srcIndex, dstIndex, rowLength) for every innermost row of
/// `region`, placed at srcOffset in a tensor of srcShape and at dstOffset in
/// one of dstShape (all element indices, row-major).
template <typename F>
void forEachRow(const std::vector<int64_t> &region,
                const std::vector<int64_t> &srcShape,
                const std::vector<int64_t> &srcOffset,
                const std::vector<int64_t> &dstShape,
                const std::vector<int64_t> &dstOffset, F &&copy) {
  size_t rank = region.size();
  if (rank == 0) {
    copy(0, 0, 1);
    return;
  }
  for (int64_t d : region)
    if (d <= 0)
      return;
  std::vector<int64_t> ss = stridesOf(srcShape), ds = stridesOf(dstShape);
  std::vector<int64_t> idx(rank, 0);
  int64_t rowLen = region[rank - 1];
  while (true) {
    int64_t s = srcOffset[rank - 1], d = dstOffset[rank - 1];
    for (size_t k = 0; k + 1 < rank; ++k) {
      s += (idx[k] + srcOffset[k]) * ss[k];
      d += (idx[k] + dstOffset[k]) * ds[k];
    }
    copy(s, d, rowLen);
    // Advance the odometer over all but the last dimension.
    size_t k = rank - 1;
    while (k > 0) {
      --k;
      if (++idx[k] < region[k])
        break;
      idx[k] = 0;
      if (k == 0)
        return;
    }
    if (rank == 1)
      return;
  }
}

/// Copies rows between two tensors of the same element type (numeric or
/// string) for forEachRow.
struct RowCopier {
  const Tensor &src;
  Tensor &dst;
  size_t es;
  void operator()(int64_t s, int64_t d, int64_t n) const {
    if (es) {
      std::memcpy(dst.mutableRaw() + d * es, src.raw() + s * es, n * es);
    } else {
      const auto &in = src.stringValues();
      std::copy(in.begin() + s, in.begin() + s + n,
                dst.mutableStringValues().begin() + d);
    }
  }
};

/// A tensor of `shape` filled with `value` (numeric) or "" (strings).
/// The heap bytes copies of `values` take: strings longer than fit inside
/// the string object (15 bytes in libstdc++) get size + 1.
int64_t stringPayload(std::vector<std::string>::const_iterator begin,
                      std::vector<std::string>::const_iterator end) {
  int64_t n = 0;
  for (auto it = begin; it != end; ++it)
    if (it->size() > 15)
      n += static_cast<int64_t>(it->size()) + 1;
  return n;
}

/// `shape` of "" strings, its bytes reserved first (the shape may come from
/// a parameter: pad's padding).
Tensor emptyStrings(ElemType elem, const std::vector<int64_t> &shape,
                    int64_t payloadBytes = 0) {
  chargeStringTensor(elem, shape, payloadBytes);
  return Tensor::strings(elem, shape,
                         std::vector<std::string>(size_t(product(shape))));
}

Tensor filled(ElemType elem, const std::vector<int64_t> &shape, double value) {
  if (!isNumeric(elem))
    return emptyStrings(elem, shape);
  Tensor t = Tensor::empty(elem, shape);
  size_t es = elemTypeSize(elem);
  uint8_t pattern[8] = {};
  storeFromDouble(elem, value, pattern, 0);
  size_t n = size_t(product(shape));
  bool zero = std::all_of(pattern, pattern + es, [](uint8_t b) { return !b; });
  if (zero) {
    std::memset(t.mutableRaw(), 0, n * es);
  } else {
    uint8_t *p = t.mutableRaw();
    for (size_t i = 0; i < n; ++i)
      std::memcpy(p + i * es, pattern, es);
  }
  return t;
}

Tensor emptyLike(ElemType elem, const std::vector<int64_t> &shape) {
  if (!isNumeric(elem))
    return emptyStrings(elem, shape);
  return Tensor::empty(elem, shape);
}

/// Merges dimensions that stay adjacent and in order under `perm` and drops
/// size-1 dimensions; a permutation of the result is equivalent.
void mergeDims(const std::vector<int64_t> &shape,
               const std::vector<int64_t> &perm, std::vector<int64_t> &inDims,
               std::vector<int64_t> &outPerm) {
  // Output-ordered list of non-trivial input dims.
  std::vector<int64_t> p;
  for (int64_t k : perm)
    if (shape[k] != 1)
      p.push_back(k);
  // Runs of consecutive input dims in output order.
  std::vector<std::pair<int64_t, int64_t>> groups; // (first input dim, size)
  for (size_t k = 0; k < p.size(); ++k) {
    if (k > 0 && p[k] == p[k - 1] + 1)
      groups.back().second *= shape[p[k]];
    else
      groups.push_back({p[k], shape[p[k]]});
  }
  // Groups are disjoint runs of input dims, so sorting them by their first
  // dim gives the merged input shape.
  std::vector<int64_t> starts;
  for (auto &g : groups)
    starts.push_back(g.first);
  std::vector<int64_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return starts[a] < starts[b]; });
  inDims.assign(groups.size(), 0);
  outPerm.assign(groups.size(), 0);
  std::vector<int64_t> rankOf(groups.size());
  for (size_t r = 0; r < order.size(); ++r) {
    rankOf[order[r]] = int64_t(r);
    inDims[r] = groups[order[r]].second;
  }
  for (size_t k = 0; k < groups.size(); ++k)
    outPerm[k] = rankOf[k];
}

constexpr int64_t kTile = 32;

/// The transpose proper, on merged dims (rank >= 2, not the identity).
template <typename T>
void transposeImpl(const T *in, T *out, const std::vector<int64_t> &inDims,
                   const std::vector<int64_t> &perm) {
  size_t K = inDims.size();
  std::vector<int64_t> inStride = stridesOf(inDims);
  std::vector<int64_t> outDims(K), srcStride(K);
  for (size_t k = 0; k < K; ++k) {
    outDims[k] = inDims[perm[k]];
    srcStride[k] = inStride[perm[k]];
  }
  std::vector<int64_t> outStride = stridesOf(outDims);
  size_t last = K - 1;
  size_t q = 0;
  for (size_t k = 0; k < K; ++k)
    if (perm[k] == int64_t(K) - 1)
      q = k;
  std::vector<size_t> outer;
  for (size_t k = 0; k < K; ++k)
    if (k != last && k != q)
      outer.push_back(k);
  std::vector<int64_t> idx(outer.size(), 0);
  int64_t nL = outDims[last], sL = srcStride[last];
  int64_t nQ = outDims[q], oQ = outStride[q];
  while (true) {
    int64_t inOff = 0, outOff = 0;
    for (size_t j = 0; j < outer.size(); ++j) {
      inOff += idx[j] * srcStride[outer[j]];
      outOff += idx[j] * outStride[outer[j]];
    }
    const T *src = in + inOff;
    T *dst = out + outOff;
    if (q == last) {
      std::memcpy(dst, src, nL * sizeof(T));
    } else {
      // dst[qi * oQ + li] = src[qi + li * sL]: tiles keep both the strided
      // reads and the strided writes within a few cache lines.
      for (int64_t q0 = 0; q0 < nQ; q0 += kTile) {
        int64_t q1 = std::min(nQ, q0 + kTile);
        for (int64_t l0 = 0; l0 < nL; l0 += kTile) {
          int64_t l1 = std::min(nL, l0 + kTile);
          for (int64_t qi = q0; qi < q1; ++qi) {
            T *d = dst + qi * oQ;
            const T *s = src + qi;
            for (int64_t li = l0; li < l1; ++li)
              d[li] = s[li * sL];
          }
        }
      }
    }
    size_t j = outer.size();
    while (j > 0) {
      --j;
      if (++idx[j] < outDims[outer[j]])
        break;
      idx[j] = 0;
      if (j == 0)
        return;
    }
    if (outer.empty())
      return;
  }
}

} // namespace

Expected<Tensor> transpose(const Tensor &input,
                           const std::vector<int64_t> &perm) {
  if (!input.valid())
    return Status::error("transpose: input tensor is empty");
  size_t r = input.rank();
  std::string permStr;
  for (int64_t p : perm)
    permStr += (permStr.empty() ? "" : ", ") + std::to_string(p);
  std::vector<bool> seen(r, false);
  bool ok = perm.size() == r;
  for (int64_t p : perm) {
    if (!ok || p < 0 || p >= int64_t(r) || seen[p]) {
      ok = false;
      break;
    }
    seen[p] = true;
  }
  if (!ok)
    return Status::error("transpose: [" + permStr +
                         "] is not a permutation of the " + std::to_string(r) +
                         " dimensions of " + input.type().str());
  std::vector<int64_t> outShape(r);
  for (size_t k = 0; k < r; ++k)
    outShape[k] = input.dim(perm[k]);
  if (input.numElements() == 0)
    return emptyLike(input.elem(), outShape);

  if (!input.isNumeric()) {
    Tensor out = emptyLike(input.elem(), outShape);
    std::vector<int64_t> inStride = stridesOf(input.shape());
    std::vector<int64_t> idx(r, 0);
    const auto &src = input.stringValues();
    auto &dst = out.mutableStringValues();
    for (size_t o = 0; o < dst.size(); ++o) {
      int64_t s = 0;
      for (size_t k = 0; k < r; ++k)
        s += idx[k] * inStride[perm[k]];
      dst[o] = src[s];
      for (size_t k = r; k-- > 0;) {
        if (++idx[k] < outShape[k])
          break;
        idx[k] = 0;
      }
    }
    return out;
  }

  std::vector<int64_t> inDims, mperm;
  mergeDims(input.shape(), perm, inDims, mperm);
  bool identity = true;
  for (size_t k = 0; k < mperm.size(); ++k)
    identity &= mperm[k] == int64_t(k);
  if (identity)
    return input.reshaped(outShape);
  Tensor out = Tensor::empty(input.elem(), outShape);
  detail::visitBySize(elemTypeSize(input.elem()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    transposeImpl(reinterpret_cast<const T *>(input.raw()),
                  reinterpret_cast<T *>(out.mutableRaw()), inDims, mperm);
  });
  return out;
}

Expected<Tensor> hwcToChw(const Tensor &image) {
  if (image.rank() != 3)
    return Status::error("transpose to CHW: expects [H,W,C], got " +
                         image.type().str());
  return transpose(image, {2, 0, 1});
}

Expected<Tensor> chwToHwc(const Tensor &image) {
  if (image.rank() != 3)
    return Status::error("transpose to HWC: expects [C,H,W], got " +
                         image.type().str());
  return transpose(image, {1, 2, 0});
}

Expected<Tensor> pad(const Tensor &input,
                     const std::vector<std::pair<int64_t, int64_t>> &padding,
                     double value) {
  if (!input.valid() || !input.isNumeric())
    return Status::error("pad: expects a numeric tensor, got " +
                         (input.valid() ? input.type().str() : "nothing"));
  if (padding.size() != input.rank())
    return Status::error(
        "pad: " + std::to_string(padding.size()) + " padding entries for the " +
        std::to_string(input.rank()) + " dimensions of " + input.type().str());
  std::vector<int64_t> outShape = input.shape(), before(input.rank());
  for (size_t d = 0; d < padding.size(); ++d) {
    if (padding[d].first < 0 || padding[d].second < 0)
      return Status::error("pad: padding of dimension " + std::to_string(d) +
                           " must be non-negative");
    outShape[d] += padding[d].first + padding[d].second;
    before[d] = padding[d].first;
  }
  if (outShape == input.shape())
    return input;
  Tensor out = filled(input.elem(), outShape, value);
  forEachRow(input.shape(), input.shape(),
             std::vector<int64_t>(input.rank(), 0), outShape, before,
             RowCopier{input, out, elemTypeSize(input.elem())});
  return out;
}

Expected<Tensor> truncate(const Tensor &input, int64_t maxLength,
                          int64_t axis) {
  if (!input.valid())
    return Status::error("truncate: input tensor is empty");
  int64_t r = int64_t(input.rank());
  if (axis < 0)
    axis += r;
  if (axis < 0 || axis >= r)
    return Status::error("truncate: axis out of range for " +
                         input.type().str());
  if (maxLength < 0)
    return Status::error("truncate: length must be non-negative");
  if (input.dim(axis) <= maxLength)
    return input;
  std::vector<int64_t> outShape = input.shape();
  outShape[axis] = maxLength;
  Tensor out = emptyLike(input.elem(), outShape);
  std::vector<int64_t> zero(r, 0);
  forEachRow(outShape, input.shape(), zero, outShape, zero,
             RowCopier{input, out, elemTypeSize(input.elem())});
  return out;
}

Expected<Tensor> stack(const std::vector<Tensor> &items) {
  if (items.empty())
    return Status::error("batch: no elements to stack");
  const Tensor &first = items[0];
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].valid())
      return Status::error("batch: element " + std::to_string(i) + " is empty");
    if (items[i].elem() != first.elem() || items[i].shape() != first.shape())
      return Status::error(
          "batch: element " + std::to_string(i) + " has type " +
          items[i].type().str() + " but element 0 has " + first.type().str() +
          " (use padded_batch for varying shapes, or resize first)");
  }
  std::vector<int64_t> shape = first.shape();
  shape.insert(shape.begin(), int64_t(items.size()));
  if (!first.isNumeric()) {
    int64_t payload = 0;
    for (const Tensor &t : items)
      payload +=
          stringPayload(t.stringValues().begin(), t.stringValues().end());
    chargeStringTensor(first.elem(), shape, payload);
    std::vector<std::string> all;
    all.reserve(size_t(product(shape)));
    for (const Tensor &t : items)
      all.insert(all.end(), t.stringValues().begin(), t.stringValues().end());
    return Tensor::strings(first.elem(), shape, std::move(all));
  }
  Tensor out = Tensor::empty(first.elem(), shape);
  size_t bytes = first.nbytes();
  uint8_t *dst = out.mutableRaw();
  for (size_t i = 0; i < items.size(); ++i)
    std::memcpy(dst + i * bytes, items[i].raw(), bytes);
  return out;
}

Expected<Tensor> paddedStack(const std::vector<Tensor> &items,
                             const std::vector<int64_t> &paddedShape,
                             double value) {
  if (items.empty())
    return Status::error("padded_batch: no elements to stack");
  const Tensor &first = items[0];
  size_t r = first.rank();
  if (!paddedShape.empty() && paddedShape.size() != r)
    return Status::error("padded_batch: padded_shapes has " +
                         std::to_string(paddedShape.size()) +
                         " entries but the elements are " + first.type().str());
  std::vector<int64_t> target(r, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const Tensor &t = items[i];
    if (!t.valid() || t.elem() != first.elem() || t.rank() != r)
      return Status::error("padded_batch: element " + std::to_string(i) +
                           " has type " +
                           (t.valid() ? t.type().str() : "nothing") +
                           " but element 0 has " + first.type().str());
    for (size_t d = 0; d < r; ++d)
      target[d] = std::max(target[d], t.dim(d));
  }
  for (size_t d = 0; d < paddedShape.size(); ++d) {
    if (paddedShape[d] < 0)
      continue;
    if (target[d] > paddedShape[d]) {
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].dim(d) > paddedShape[d])
          return Status::error(
              "padded_batch: element " + std::to_string(i) + " (" +
              items[i].type().str() + ") is longer than the padded size " +
              std::to_string(paddedShape[d]) + " in dimension " +
              std::to_string(d) + " (truncate it first)");
    }
    target[d] = paddedShape[d];
  }
  std::vector<int64_t> outShape = target;
  outShape.insert(outShape.begin(), int64_t(items.size()));
  Tensor out = filled(first.elem(), outShape, value);
  size_t es = elemTypeSize(first.elem());
  std::vector<int64_t> zero(r + 1, 0);
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<int64_t> region = items[i].shape();
    region.insert(region.begin(), 1);
    std::vector<int64_t> dstOff = zero;
    dstOff[0] = int64_t(i);
    forEachRow(region, region, zero, outShape, dstOff,
               RowCopier{items[i], out, es});
  }
  return out;
}

Expected<std::vector<Tensor>> unstack(const Tensor &batch) {
  if (!batch.valid() || batch.rank() == 0)
    return Status::error("unbatch: expects a tensor with a batch dimension, "
                         "got " +
                         (batch.valid() ? batch.type().str() : "nothing"));
  std::vector<int64_t> shape(batch.shape().begin() + 1, batch.shape().end());
  int64_t n = batch.dim(0);
  int64_t per = product(shape);
  std::vector<Tensor> out;
  out.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    if (!batch.isNumeric()) {
      const auto &s = batch.stringValues();
      chargeStringTensor(
          batch.elem(), shape,
          stringPayload(s.begin() + i * per, s.begin() + (i + 1) * per));
      out.push_back(
          Tensor::strings(batch.elem(), shape,
                          std::vector<std::string>(s.begin() + i * per,
                                                   s.begin() + (i + 1) * per)));
      continue;
    }
    Tensor t = Tensor::empty(batch.elem(), shape);
    size_t bytes = t.nbytes();
    std::memcpy(t.mutableRaw(), batch.raw() + i * bytes, bytes);
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace kernels
} // namespace sluice
