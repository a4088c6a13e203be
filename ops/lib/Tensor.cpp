//===- Tensor.cpp - Aligned, shared field buffers -------------------------===//
//
// Numeric buffers are 64-byte aligned and padded to a multiple of 64 bytes so
// vectorized kernels may load whole cache lines at the tail without reading
// past the allocation. Buffers over 64 KiB come from and go back to
// the process-wide pool of BufferPool.h (same alignment and padding), and
// those of at most 64 KiB to its size-class pool of small buffers.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/BufferPool.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace sluice {

namespace {
constexpr size_t kAlignment = 64;

/// Allocates a small buffer's shared_ptr control block from the small-buffer
/// pool too (its 64-byte class), so that a small tensor's bookkeeping costs
/// what it is counted at and is reused across threads like its data.
template <typename T> struct ControlBlockAllocator {
  using value_type = T;
  ControlBlockAllocator() = default;
  template <typename U>
  ControlBlockAllocator(const ControlBlockAllocator<U> &) noexcept {}
  T *allocate(size_t n) {
    static_assert(alignof(T) <= kAlignment);
    return static_cast<T *>(
        detail::smallPoolAllocate(classBytes(n), /*evenIfDisabled=*/true));
  }
  void deallocate(T *p, size_t n) noexcept {
    detail::smallPoolRelease(p, classBytes(n));
  }
  static size_t classBytes(size_t n) {
    return (n * sizeof(T) + kAlignment - 1) / kAlignment * kAlignment;
  }
  template <typename U>
  bool operator==(const ControlBlockAllocator<U> &) const {
    return true;
  }
};

std::shared_ptr<uint8_t> pooledBuffer(void *p, size_t rounded) {
  return std::shared_ptr<uint8_t>(
      static_cast<uint8_t *>(p),
      [rounded](uint8_t *q) { detail::poolRelease(q, rounded); });
}

std::shared_ptr<uint8_t> allocateAligned(size_t nbytes) {
  size_t rounded = tensorBufferBytes(nbytes);
  if (rounded >= kPoolMinBytes)
    return pooledBuffer(detail::poolAllocate(rounded), rounded);
  if (rounded <= kSmallPoolMaxBytes)
    if (void *p = detail::smallPoolAllocate(rounded))
      return std::shared_ptr<uint8_t>(
          static_cast<uint8_t *>(p),
          [rounded](uint8_t *q) { detail::smallPoolRelease(q, rounded); },
          ControlBlockAllocator<uint8_t>());
  void *p = ::operator new(rounded, std::align_val_t(kAlignment));
  return std::shared_ptr<uint8_t>(static_cast<uint8_t *>(p), [](uint8_t *q) {
    ::operator delete(q, std::align_val_t(kAlignment));
  });
}

int64_t product(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    assert(d >= 0 && "runtime tensors have static shapes");
    n *= d;
  }
  return n;
}
} // namespace

Tensor Tensor::empty(ElemType elem, std::vector<int64_t> shape) {
  assert(sluice::isNumeric(elem) && "use Tensor::strings for bytes/string");
  // Shapes come from headers and parameters: multiply without overflow, and
  // reserve the bytes in the thread's allocation scope (Allocation.h) before
  // touching them.
  std::optional<int64_t> bytes = elemTypeSize(elem);
  for (int64_t d : shape)
    if (bytes && (d < 0 || __builtin_mul_overflow(*bytes, d, &*bytes)))
      bytes.reset();
  if (bytes && *bytes > std::numeric_limits<int64_t>::max() - 4096)
    bytes.reset();
  Tensor t;
  if (bytes && AllocationScope::current() &&
      tensorBufferBytes(static_cast<size_t>(*bytes)) >= kPoolMinBytes) {
    // An idle pooled buffer gives its reservation back as it is taken:
    // take it before charging the scope, or the budget would count the
    // same resident bytes twice for a moment (a 77 MB batch buffer, at the
    // budget's peak).
    size_t rounded = tensorBufferBytes(static_cast<size_t>(*bytes));
    if (void *p = detail::poolTakeIdle(rounded)) {
      t.buf_ = pooledBuffer(p, rounded);
      chargeTensorAllocation(
          static_cast<int64_t>(numericMemoryBytes(static_cast<size_t>(*bytes))),
          elem, shape); // refused: t.buf_ goes back to the pool
    }
  }
  if (!t.buf_ && (!bytes || AllocationScope::current()))
    chargeTensorAllocation(
        bytes ? std::optional<int64_t>(static_cast<int64_t>(
                    numericMemoryBytes(static_cast<size_t>(*bytes))))
              : std::nullopt,
        elem, shape);
  t.elem_ = elem;
  t.nbytes_ = static_cast<size_t>(*bytes);
  t.shape_ = std::move(shape);
  if (!t.buf_)
    t.buf_ = allocateAligned(t.nbytes_);
  return t;
}

Tensor Tensor::zeros(ElemType elem, std::vector<int64_t> shape) {
  Tensor t = empty(elem, std::move(shape));
  std::memset(t.buf_.get(), 0, t.nbytes_);
  return t;
}

Tensor Tensor::strings(ElemType elem, std::vector<int64_t> shape,
                       std::vector<std::string> values) {
  assert(!sluice::isNumeric(elem) && "use Tensor::empty for numeric types");
  assert(static_cast<int64_t>(values.size()) == product(shape) &&
         "one string per element");
  Tensor t;
  t.elem_ = elem;
  t.shape_ = std::move(shape);
  t.strs_ = std::make_shared<std::vector<std::string>>(std::move(values));
  return t;
}

int64_t Tensor::numElements() const { return product(shape_); }

size_t Tensor::memoryBytes() const {
  if (strs_) {
    size_t n = kTensorOverheadBytes + sizeof(std::vector<std::string>) +
               strs_->capacity() * sizeof(std::string);
    for (const std::string &s : *strs_)
      // Short strings live inside the std::string object itself.
      if (s.capacity() > sizeof(std::string))
        n += s.capacity();
    return n;
  }
  if (!buf_)
    return 0;
  return numericMemoryBytes(nbytes_);
}

size_t Tensor::numericMemoryBytes(size_t nbytes) {
  // As allocateAligned() allocates: whole lines, at least one.
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return kTensorOverheadBytes + (rounded == 0 ? kAlignment : rounded);
}

bool Tensor::sameAs(const Tensor &o) const {
  if (elem_ != o.elem_ || shape_ != o.shape_ || valid() != o.valid())
    return false;
  if (!valid())
    return true;
  if (strs_ || o.strs_)
    return strs_ && o.strs_ && *strs_ == *o.strs_;
  return nbytes_ == o.nbytes_ &&
         (nbytes_ == 0 || std::memcmp(buf_.get(), o.buf_.get(), nbytes_) == 0);
}

Tensor Tensor::viewOf(const Tensor &base, size_t offset, ElemType elem,
                      std::vector<int64_t> shape) {
  assert(base.buf_ && sluice::isNumeric(elem) && "views are of numeric data");
  Tensor t;
  t.elem_ = elem;
  t.nbytes_ = static_cast<size_t>(product(shape)) * elemTypeSize(elem);
  assert(offset + t.nbytes_ <= base.nbytes_ && "view inside its base");
  t.shape_ = std::move(shape);
  // The aliasing constructor: owns base's buffer, points into it.
  t.buf_ = std::shared_ptr<uint8_t>(base.buf_, base.buf_.get() + offset);
  t.baseBytes_ = std::max(base.baseBytes_, base.nbytes_);
  return t;
}

Tensor Tensor::compacted() const {
  if (!pinsLargerBuffer())
    return *this;
  Tensor t = empty(elem_, shape_);
  std::memcpy(t.buf_.get(), buf_.get(), nbytes_);
  return t;
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  assert(product(shape) == numElements() && "reshape keeps the element count");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

size_t tensorBufferBytes(size_t nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

} // namespace sluice
