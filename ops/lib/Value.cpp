//===- Value.cpp - Parameter values with source locations -----------------===//
//
// Construction, map access and a compact YAML flow rendering used in error
// messages, generated docs and `explain` output.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Value.h"
#include "Internal.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sluice {

namespace detail {
std::string formatDouble(double d) {
  if (std::isnan(d))
    return ".nan";
  if (std::isinf(d))
    return d < 0 ? "-.inf" : ".inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d)
      break;
  }
  std::string s = buf;
  // %g switches to an exponent early ("3e+02"); people read 300.0 better.
  double mag = std::fabs(d);
  if (s.find('e') != std::string::npos && mag >= 1e-4 && mag < 1e16) {
    for (int decimals = 0; decimals <= 20; ++decimals) {
      std::snprintf(buf, sizeof(buf), "%.*f", decimals, d);
      if (std::strtod(buf, nullptr) == d)
        break;
    }
    s = buf;
  }
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

bool isIdentifier(std::string_view s) {
  if (s.empty() ||
      !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return true;
}
} // namespace detail

Value Value::null(SourceLoc loc) {
  Value v;
  v.loc_ = loc;
  return v;
}

Value Value::boolean(bool b, SourceLoc loc) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  v.loc_ = loc;
  return v;
}

Value Value::integer(int64_t i, SourceLoc loc) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  v.loc_ = loc;
  return v;
}

Value Value::real(double d, SourceLoc loc) {
  Value v;
  v.kind_ = Kind::Float;
  v.d_ = d;
  v.loc_ = loc;
  return v;
}

Value Value::string(std::string s, SourceLoc loc) {
  Value v;
  v.kind_ = Kind::String;
  v.s_ = std::move(s);
  v.loc_ = loc;
  return v;
}

Value Value::list(std::vector<Value> items, SourceLoc loc) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::move(items);
  v.loc_ = loc;
  return v;
}

Value Value::map(SourceLoc loc) {
  Value v;
  v.kind_ = Kind::Map;
  v.loc_ = loc;
  return v;
}

// A scalar reads as a one-element list so that rules can treat `size: 224`
// and `size: [224]` alike.
std::vector<int64_t> Value::asIntList() const {
  std::vector<int64_t> out;
  if (isNumber())
    return {asInt()};
  for (const Value &v : list_)
    out.push_back(v.asInt());
  return out;
}

std::vector<double> Value::asDoubleList() const {
  std::vector<double> out;
  if (isNumber())
    return {asDouble()};
  for (const Value &v : list_)
    out.push_back(v.asDouble());
  return out;
}

std::vector<std::string> Value::asStringList() const {
  std::vector<std::string> out;
  if (isString())
    return {s_};
  for (const Value &v : list_)
    out.push_back(v.asString());
  return out;
}

const Value *Value::get(std::string_view key) const {
  for (const auto &[k, v] : map_)
    if (k == key)
      return &v;
  return nullptr;
}

Value *Value::get(std::string_view key) {
  for (auto &[k, v] : map_)
    if (k == key)
      return &v;
  return nullptr;
}

const Value &Value::operator[](std::string_view key) const {
  static const Value kNull;
  const Value *v = get(key);
  return v ? *v : kNull;
}

void Value::set(std::string key, Value v) {
  if (Value *existing = get(key)) {
    *existing = std::move(v);
    return;
  }
  map_.emplace_back(std::move(key), std::move(v));
}

namespace {
bool looksLikeNumber(const std::string &s) {
  if (s.empty())
    return false;
  const char *begin = s.c_str();
  char *end = nullptr;
  std::strtod(begin, &end);
  return end == begin + s.size();
}

// Plain (unquoted) only when a YAML reader would give back the same string.
bool needsQuotes(const std::string &s) {
  if (s.empty() || looksLikeNumber(s))
    return true;
  static const char *const kReserved[] = {"true", "false", "null", "yes",
                                          "no",   "on",    "off",  "~"};
  std::string lower;
  for (char c : s)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char *r : kReserved)
    if (lower == r)
      return true;
  unsigned char first = s[0];
  if (!(std::isalnum(first) || first == '_' || first == '.' || first == '/'))
    return true;
  for (char c : s) {
    unsigned char u = c;
    if (!(std::isalnum(u) || u == '_' || u == '.' || u == '/' || u == '-' ||
          u == '*' || u == '+' || u >= 0x80))
      return true;
  }
  return false;
}

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02x",
                      static_cast<unsigned char>(c));
        out += buf;
      } else {
        out += c;
      }
    }
  }
  out += '"';
  return out;
}
} // namespace

std::string Value::str() const {
  switch (kind_) {
  case Kind::Null:
    return "null";
  case Kind::Bool:
    return b_ ? "true" : "false";
  case Kind::Int:
    return std::to_string(i_);
  case Kind::Float:
    return detail::formatDouble(d_);
  case Kind::String:
    return needsQuotes(s_) ? quote(s_) : s_;
  case Kind::List: {
    std::string s = "[";
    for (size_t i = 0; i < list_.size(); ++i) {
      if (i)
        s += ", ";
      s += list_[i].str();
    }
    return s + "]";
  }
  case Kind::Map: {
    std::string s = "{";
    for (size_t i = 0; i < map_.size(); ++i) {
      if (i)
        s += ", ";
      s += needsQuotes(map_[i].first) ? quote(map_[i].first) : map_[i].first;
      s += ": ";
      s += map_[i].second.str();
    }
    return s + "}";
  }
  }
  return "";
}

// Locations are not part of a value's identity: a default and the same value
// written in a spec compare equal.
bool Value::operator==(const Value &o) const {
  if (kind_ != o.kind_)
    return false;
  switch (kind_) {
  case Kind::Null:
    return true;
  case Kind::Bool:
    return b_ == o.b_;
  case Kind::Int:
    return i_ == o.i_;
  case Kind::Float:
    return d_ == o.d_ || (std::isnan(d_) && std::isnan(o.d_));
  case Kind::String:
    return s_ == o.s_;
  case Kind::List:
    return list_ == o.list_;
  case Kind::Map:
    return map_ == o.map_;
  }
  return false;
}

} // namespace sluice
