//===- Types.h - Record and field types of a sluice pipeline ----*- C++ -*-===//
//
// The type system every layer shares: a record is an ordered list of named
// fields; a field is an N-d array of an element type (numeric, bytes or
// string) whose dims are static or dynamic. A scalar is a rank-0 array, so
// `label: i64` batched by 128 is `label: i64[128]` with no special case.
// MLIR-free on purpose: the runtime and ops use it too.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_TYPES_H
#define SLUICE_OPS_TYPES_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

/// Element type of a field.
enum class ElemType : uint8_t {
  U8,
  I8,
  U16,
  I16,
  I32,
  I64,
  F16,
  F32,
  F64,
  Bool,
  Bytes,  ///< an opaque byte string per element (e.g. an encoded JPEG)
  String, ///< a UTF-8 string per element (paths, text lines)
  /// bfloat16: the top 16 bits of an f32 (torch.bfloat16). Last so the
  /// numbers of the others (written in disk caches) stay as they were.
  BF16,
};

/// Canonical spelling: "u8", "i64", "f32", "bytes", "string", ...
std::string_view elemTypeName(ElemType t);
/// Parses a canonical spelling; nullopt if unknown.
std::optional<ElemType> parseElemType(std::string_view s);
/// All canonical spellings, for "did you mean" and docs.
const std::vector<std::string_view> &allElemTypeNames();

/// Size in bytes of one element; 0 for Bytes/String (variable length).
unsigned elemTypeSize(ElemType t);
inline bool isNumeric(ElemType t) {
  return t != ElemType::Bytes && t != ElemType::String;
}
inline bool isFloat(ElemType t) {
  return t == ElemType::F16 || t == ElemType::BF16 || t == ElemType::F32 ||
         t == ElemType::F64;
}
inline bool isInteger(ElemType t) { return isNumeric(t) && !isFloat(t); }
/// Smallest and largest value of an integer element type (bool: 0 and 1).
/// Only meaningful when isInteger(t); other types get the i64 range.
std::pair<int64_t, int64_t> integerRange(ElemType t);

/// A dimension size; kDynamic marks a size only known per element.
constexpr int64_t kDynamic = -1;

/// The type of one field: element type + shape (empty shape = scalar).
struct FieldType {
  ElemType elem = ElemType::F32;
  std::vector<int64_t> shape;

  FieldType() = default;
  FieldType(ElemType e, std::vector<int64_t> s = {})
      : elem(e), shape(std::move(s)) {}

  size_t rank() const { return shape.size(); }
  bool isScalar() const { return shape.empty(); }
  bool hasStaticShape() const;
  /// Number of elements when static, nullopt otherwise.
  std::optional<int64_t> numElements() const;
  /// Size in bytes when the element type is numeric and the shape static.
  std::optional<int64_t> staticBytes() const;
  /// "u8[224,224,3]", "i64", "f32[?,13]", "bytes".
  std::string str() const;

  bool operator==(const FieldType &o) const {
    return elem == o.elem && shape == o.shape;
  }
  bool operator!=(const FieldType &o) const { return !(*this == o); }
};

/// A named field of a record.
struct Field {
  std::string name;
  FieldType type;
  bool operator==(const Field &o) const {
    return name == o.name && type == o.type;
  }
};

/// An ordered list of uniquely named fields.
class RecordType {
public:
  RecordType() = default;
  explicit RecordType(std::vector<Field> fields) : fields_(std::move(fields)) {}

  const std::vector<Field> &fields() const { return fields_; }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }

  /// Index of a field, or -1.
  int indexOf(std::string_view name) const;
  const Field *find(std::string_view name) const;
  Field *find(std::string_view name);
  /// Sets (replacing in place, or appending) a field.
  void set(const std::string &name, FieldType type);
  /// Removes a field if present.
  void remove(std::string_view name);
  std::vector<std::string> names() const;

  /// "image: u8[224,224,3], label: i64".
  std::string str() const;

  bool operator==(const RecordType &o) const { return fields_ == o.fields_; }
  bool operator!=(const RecordType &o) const { return !(*this == o); }

private:
  std::vector<Field> fields_;
};

} // namespace sluice

#endif // SLUICE_OPS_TYPES_H
