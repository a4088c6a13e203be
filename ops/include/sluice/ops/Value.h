//===- Value.h - Parameter values with source locations ---------*- C++ -*-===//
//
// Op parameters after the front end has read them from YAML: a small tree of
// typed scalars, lists and ordered maps, each node carrying the line:col it
// came from so that a type rule can point an error at the exact value.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_VALUE_H
#define SLUICE_OPS_VALUE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

/// A 1-based position in the spec file; line 0 means unknown.
struct SourceLoc {
  int line = 0;
  int col = 0;
  bool valid() const { return line > 0; }
};

/// A parameter value.
class Value {
public:
  enum class Kind { Null, Bool, Int, Float, String, List, Map };

  Value() = default;
  static Value null(SourceLoc loc = {});
  static Value boolean(bool b, SourceLoc loc = {});
  static Value integer(int64_t i, SourceLoc loc = {});
  static Value real(double d, SourceLoc loc = {});
  static Value string(std::string s, SourceLoc loc = {});
  static Value list(std::vector<Value> items, SourceLoc loc = {});
  static Value map(SourceLoc loc = {});

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::Null; }
  bool isBool() const { return kind_ == Kind::Bool; }
  bool isInt() const { return kind_ == Kind::Int; }
  bool isFloat() const { return kind_ == Kind::Float; }
  bool isNumber() const { return isInt() || isFloat(); }
  bool isString() const { return kind_ == Kind::String; }
  bool isList() const { return kind_ == Kind::List; }
  bool isMap() const { return kind_ == Kind::Map; }

  bool asBool() const { return b_; }
  int64_t asInt() const { return isFloat() ? static_cast<int64_t>(d_) : i_; }
  double asDouble() const { return isInt() ? static_cast<double>(i_) : d_; }
  const std::string &asString() const { return s_; }
  const std::vector<Value> &items() const { return list_; }
  std::vector<Value> &items() { return list_; }
  std::vector<int64_t> asIntList() const;
  std::vector<double> asDoubleList() const;
  std::vector<std::string> asStringList() const;

  /// Map access. Keys keep their insertion order.
  const std::vector<std::pair<std::string, Value>> &entries() const {
    return map_;
  }
  const Value *get(std::string_view key) const;
  Value *get(std::string_view key);
  /// Like get() but returns a static Null value when absent.
  const Value &operator[](std::string_view key) const;
  void set(std::string key, Value v);
  bool has(std::string_view key) const { return get(key) != nullptr; }

  /// Where this value was written (for a map entry: where the value starts).
  SourceLoc loc() const { return loc_; }
  void setLoc(SourceLoc l) { loc_ = l; }
  /// For strings: column offset of the first character of the content
  /// relative to loc().col (1 for a quoted scalar, 0 for a plain one), so
  /// errors inside expressions can point at the right character.
  int contentOffset() const { return contentOffset_; }
  void setContentOffset(int o) { contentOffset_ = o; }

  /// A compact YAML flow rendering: `{size: [224, 224], scale: 0.5}`.
  std::string str() const;

  bool operator==(const Value &o) const;
  bool operator!=(const Value &o) const { return !(*this == o); }

private:
  Kind kind_ = Kind::Null;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::vector<Value> list_;
  std::vector<std::pair<std::string, Value>> map_;
  SourceLoc loc_;
  int contentOffset_ = 0;
};

} // namespace sluice

#endif // SLUICE_OPS_VALUE_H
