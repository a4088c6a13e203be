//===- Tensor.h - Field values flowing through the runtime ------*- C++ -*-===//
//
// A Tensor holds one field of one record (or of a batch): a dense, 64-byte
// aligned buffer for numeric element types, or a list of byte strings for
// Bytes/String. Copies share the buffer (cache, shuffle and batch move
// records around without copying pixels); writers call mutableData() only on
// tensors they just created.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_TENSOR_H
#define SLUICE_OPS_TENSOR_H

#include "sluice/ops/Types.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

/// What a tensor's buffer costs besides its data, counted by
/// Tensor::memoryBytes(): allocator headers and alignment slack, the shared
/// buffer's control block and the shape's heap storage. Negligible for an
/// image, but as much as the data for the small fields of a tabular record,
/// which a shuffle buffer holds by the hundred thousand. A multiple of 64.
constexpr size_t kTensorOverheadBytes = 128;

/// The bytes a tensor of `nbytes` of data asks its allocator for (the
/// buffer pool from kPoolMinBytes up, or a BufferSource hook): whole
/// 64-byte lines, at least one, so that an empty tensor's buffer is valid.
size_t tensorBufferBytes(size_t nbytes);

class Tensor {
public:
  Tensor() = default;
  /// A numeric tensor with uninitialized contents.
  static Tensor empty(ElemType elem, std::vector<int64_t> shape);
  /// A numeric tensor filled with zeros.
  static Tensor zeros(ElemType elem, std::vector<int64_t> shape);
  /// A scalar numeric tensor.
  template <typename T> static Tensor scalar(ElemType elem, T v) {
    Tensor t = empty(elem, {});
    *t.mutableData<T>() = v;
    return t;
  }
  /// A Bytes/String tensor of the given shape with one string per element.
  static Tensor strings(ElemType elem, std::vector<int64_t> shape,
                        std::vector<std::string> values);
  /// A scalar Bytes/String tensor. `value` is moved in, never copied (a
  /// braced list would copy it: an initializer_list's elements are const),
  /// so a whole file read as one record is not copied a second time.
  static Tensor string(ElemType elem, std::string value) {
    std::vector<std::string> one(1);
    one[0] = std::move(value);
    return strings(elem, {}, std::move(one));
  }

  bool valid() const { return buf_ != nullptr || strs_ != nullptr; }
  ElemType elem() const { return elem_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t dim(size_t i) const { return shape_[i]; }
  int64_t numElements() const;
  FieldType type() const { return FieldType(elem_, shape_); }
  bool isNumeric() const { return sluice::isNumeric(elem_); }

  /// Numeric storage (nbytes() = numElements() * elemTypeSize()).
  template <typename T> const T *data() const {
    return reinterpret_cast<const T *>(buf_.get());
  }
  template <typename T> T *mutableData() {
    return reinterpret_cast<T *>(buf_.get());
  }
  const uint8_t *raw() const { return buf_.get(); }
  uint8_t *mutableRaw() { return buf_.get(); }
  size_t nbytes() const { return nbytes_; }

  /// Bytes/String storage, one entry per element in row-major order.
  const std::vector<std::string> &stringValues() const { return *strs_; }
  std::vector<std::string> &mutableStringValues() { return *strs_; }
  /// The single string of a scalar Bytes/String tensor.
  const std::string &str() const { return (*strs_)[0]; }

  /// Bytes this tensor keeps alive (for memory accounting): its data, as
  /// allocated, plus kTensorOverheadBytes of bookkeeping.
  size_t memoryBytes() const;
  /// memoryBytes() of a numeric tensor of `nbytes` data bytes.
  static size_t numericMemoryBytes(size_t nbytes);

  /// True when no other Tensor shares this one's buffer (no cache, view or
  /// copy can see writes to it), e.g. a batch just assembled.
  bool ownsBufferAlone() const {
    return buf_ ? buf_.use_count() == 1 : strs_.use_count() == 1;
  }

  /// Same shape, type and contents (bitwise for numeric data).
  bool sameAs(const Tensor &o) const;

  /// A view with a different shape over the same buffer (same element count).
  Tensor reshaped(std::vector<int64_t> shape) const;

  /// A numeric tensor of `elem` and `shape` over the bytes of `base` from
  /// `offset` on (one row of a batch buffer); shares and keeps alive base's
  /// buffer. The range must lie inside base's buffer.
  static Tensor viewOf(const Tensor &base, size_t offset, ElemType elem,
                       std::vector<int64_t> shape);
  /// True for a view that keeps a larger buffer alive than its own bytes
  /// (a row of a batch, a record parsed into a block of rows).
  bool pinsLargerBuffer() const { return baseBytes_ > nbytes_; }
  /// This tensor, or a copy of its own bytes when it pins a larger buffer:
  /// what a stage that keeps records for long (shuffle, cache) stores, so
  /// the bytes it counts are the bytes it holds.
  Tensor compacted() const;

private:
  ElemType elem_ = ElemType::U8;
  std::vector<int64_t> shape_;
  std::shared_ptr<uint8_t> buf_;
  size_t nbytes_ = 0;
  /// Views: bytes of the buffer they keep alive (0 when not a view).
  size_t baseBytes_ = 0;
  std::shared_ptr<std::vector<std::string>> strs_;
};

/// One record: field values in the order of its RecordType.
struct Record {
  std::vector<Tensor> fields;
  /// Position of the record in its source's enumeration for this epoch; the
  /// seed for every random choice made on it.
  uint64_t index = 0;
};

} // namespace sluice

#endif // SLUICE_OPS_TENSOR_H
