//===- Json.h - A small JSON document model, writer and reader --*- C++ -*-===//
//
// The runtime writes JSON for serialized Plans, per-stage counters (read by
// the autotuner) and the npy sink's index, and reads serialized Plans back.
// Numbers keep the text they were read from (or were written as), so 64-bit
// integers and doubles round-trip exactly: a value is only converted when it
// is asked for as an int, a uint or a double.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_JSON_H
#define SLUICE_RUNTIME_JSON_H

#include "sluice/ops/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::runtime {

/// One JSON value: null, bool, number, string, array or object (members keep
/// their insertion order).
class Json {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Json() = default;
  static Json null() { return Json(); }
  static Json boolean(bool b);
  static Json number(int64_t v);
  static Json number(uint64_t v);
  static Json number(int v) { return number(static_cast<int64_t>(v)); }
  /// Shortest text that reads back as the same double. Non-finite values
  /// have no JSON spelling and become null.
  static Json number(double v);
  static Json string(std::string s);
  /// A number from its JSON text, kept verbatim (the reader uses this; the
  /// text must be a valid JSON number).
  static Json numberText(std::string text);
  static Json array();
  static Json object();

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::Null; }
  bool isBool() const { return kind_ == Kind::Bool; }
  bool isNumber() const { return kind_ == Kind::Number; }
  bool isString() const { return kind_ == Kind::String; }
  bool isArray() const { return kind_ == Kind::Array; }
  bool isObject() const { return kind_ == Kind::Object; }
  /// True for a number written without fraction or exponent.
  bool isInteger() const;

  bool asBool() const { return b_; }
  /// The number as an integer; false if it is not an integer in range.
  bool getInt(int64_t &out) const;
  bool getUint(uint64_t &out) const;
  bool getDouble(double &out) const;
  /// Convenience forms returning 0 when the conversion fails.
  int64_t asInt() const;
  double asDouble() const;
  /// The string value, or the number's text.
  const std::string &text() const { return s_; }

  const std::vector<Json> &items() const { return items_; }
  std::vector<Json> &items() { return items_; }
  Json &push(Json v);
  const std::vector<std::pair<std::string, Json>> &members() const {
    return members_;
  }
  /// Object member or null when absent.
  const Json *get(std::string_view key) const;
  /// Sets (replacing) an object member; returns it.
  Json &set(std::string key, Json v);

  /// Serializes; `indent` < 0 writes one line, otherwise pretty-prints.
  std::string dump(int indent = -1) const;
  /// Parses a whole document; errors name the line and column.
  static Expected<Json> parse(std::string_view text);

private:
  void write(std::string &out, int indent, int depth) const;

  Kind kind_ = Kind::Null;
  bool b_ = false;
  std::string s_; ///< string contents, or number text
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

/// Appends `s` to `out` as a quoted JSON string.
void appendJsonString(std::string &out, std::string_view s);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_JSON_H
