//===- Types.cpp - Element, field and record types ------------------------===//
//
// Spellings and sizes of element types, and the textual forms of field and
// record types that error messages, `sluice check` and tests all rely on.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Types.h"

#include <algorithm>
#include <limits>

namespace sluice {

namespace {
struct ElemInfo {
  ElemType type;
  std::string_view name;
  unsigned size;
};

// Order matches the enum so that the table can be indexed by it.
constexpr ElemInfo kElemInfo[] = {
    {ElemType::U8, "u8", 1},       {ElemType::I8, "i8", 1},
    {ElemType::U16, "u16", 2},     {ElemType::I16, "i16", 2},
    {ElemType::I32, "i32", 4},     {ElemType::I64, "i64", 8},
    {ElemType::F16, "f16", 2},     {ElemType::F32, "f32", 4},
    {ElemType::F64, "f64", 8},     {ElemType::Bool, "bool", 1},
    {ElemType::Bytes, "bytes", 0}, {ElemType::String, "string", 0},
    {ElemType::BF16, "bf16", 2},
};
constexpr size_t kNumElemTypes = sizeof(kElemInfo) / sizeof(kElemInfo[0]);

const ElemInfo &info(ElemType t) {
  size_t i = static_cast<size_t>(t);
  return kElemInfo[i < kNumElemTypes ? i : 0];
}
} // namespace

std::string_view elemTypeName(ElemType t) { return info(t).name; }

std::optional<ElemType> parseElemType(std::string_view s) {
  for (const ElemInfo &e : kElemInfo)
    if (e.name == s)
      return e.type;
  return std::nullopt;
}

const std::vector<std::string_view> &allElemTypeNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const ElemInfo &e : kElemInfo)
      v.push_back(e.name);
    return v;
  }();
  return names;
}

unsigned elemTypeSize(ElemType t) { return info(t).size; }

std::pair<int64_t, int64_t> integerRange(ElemType t) {
  switch (t) {
  case ElemType::U8:
    return {0, 255};
  case ElemType::I8:
    return {-128, 127};
  case ElemType::U16:
    return {0, 65535};
  case ElemType::I16:
    return {-32768, 32767};
  case ElemType::I32:
    return {std::numeric_limits<int32_t>::min(),
            std::numeric_limits<int32_t>::max()};
  case ElemType::Bool:
    return {0, 1};
  default:
    return {std::numeric_limits<int64_t>::min(),
            std::numeric_limits<int64_t>::max()};
  }
}

bool FieldType::hasStaticShape() const {
  return std::all_of(shape.begin(), shape.end(),
                     [](int64_t d) { return d >= 0; });
}

std::optional<int64_t> FieldType::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return std::nullopt; // would overflow: not a usable static size
    n *= d;
  }
  return n;
}

std::optional<int64_t> FieldType::staticBytes() const {
  if (!isNumeric(elem))
    return std::nullopt;
  std::optional<int64_t> n = numElements();
  if (!n)
    return std::nullopt;
  int64_t size = elemTypeSize(elem);
  if (*n > std::numeric_limits<int64_t>::max() / size)
    return std::nullopt;
  return *n * size;
}

std::string FieldType::str() const {
  std::string s(elemTypeName(elem));
  if (shape.empty())
    return s;
  s += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ',';
    s += shape[i] < 0 ? std::string("?") : std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

int RecordType::indexOf(std::string_view name) const {
  for (size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].name == name)
      return static_cast<int>(i);
  return -1;
}

const Field *RecordType::find(std::string_view name) const {
  int i = indexOf(name);
  return i < 0 ? nullptr : &fields_[i];
}

Field *RecordType::find(std::string_view name) {
  int i = indexOf(name);
  return i < 0 ? nullptr : &fields_[i];
}

void RecordType::set(const std::string &name, FieldType type) {
  if (Field *f = find(name)) {
    f->type = std::move(type);
    return;
  }
  fields_.push_back(Field{name, std::move(type)});
}

void RecordType::remove(std::string_view name) {
  int i = indexOf(name);
  if (i >= 0)
    fields_.erase(fields_.begin() + i);
}

std::vector<std::string> RecordType::names() const {
  std::vector<std::string> v;
  v.reserve(fields_.size());
  for (const Field &f : fields_)
    v.push_back(f.name);
  return v;
}

std::string RecordType::str() const {
  std::string s;
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i)
      s += ", ";
    s += fields_[i].name;
    s += ": ";
    s += fields_[i].type.str();
  }
  return s;
}

} // namespace sluice
