//===- Json.cpp - JSON writer and reader ----------------------------------===//
//
// Numbers are stored as text so that int64, uint64 and double values survive
// a write/read cycle bit for bit; the reader is a recursive-descent parser
// with a depth limit so a hostile document cannot overflow the stack.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sluice::runtime {

Json Json::boolean(bool b) {
  Json j;
  j.kind_ = Kind::Bool;
  j.b_ = b;
  return j;
}

Json Json::number(int64_t v) {
  Json j;
  j.kind_ = Kind::Number;
  j.s_ = std::to_string(v);
  return j;
}

Json Json::number(uint64_t v) {
  Json j;
  j.kind_ = Kind::Number;
  j.s_ = std::to_string(v);
  return j;
}

Json Json::number(double v) {
  if (!std::isfinite(v))
    return Json();
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string text(buf, res.ptr);
  // Keep doubles recognizable as non-integers so a reader can tell 3 from 3.0.
  if (text.find_first_of(".eEn") == std::string::npos)
    text += ".0";
  Json j;
  j.kind_ = Kind::Number;
  j.s_ = std::move(text);
  return j;
}

Json Json::string(std::string s) {
  Json j;
  j.kind_ = Kind::String;
  j.s_ = std::move(s);
  return j;
}

Json Json::numberText(std::string text) {
  Json j;
  j.kind_ = Kind::Number;
  j.s_ = std::move(text);
  return j;
}

Json Json::array() {
  Json j;
  j.kind_ = Kind::Array;
  return j;
}

Json Json::object() {
  Json j;
  j.kind_ = Kind::Object;
  return j;
}

bool Json::isInteger() const {
  return kind_ == Kind::Number && s_.find_first_of(".eE") == std::string::npos;
}

bool Json::getInt(int64_t &out) const {
  if (!isInteger())
    return false;
  auto res = std::from_chars(s_.data(), s_.data() + s_.size(), out);
  return res.ec == std::errc() && res.ptr == s_.data() + s_.size();
}

bool Json::getUint(uint64_t &out) const {
  if (!isInteger() || s_.empty() || s_[0] == '-')
    return false;
  auto res = std::from_chars(s_.data(), s_.data() + s_.size(), out);
  return res.ec == std::errc() && res.ptr == s_.data() + s_.size();
}

bool Json::getDouble(double &out) const {
  if (kind_ != Kind::Number)
    return false;
  auto res = std::from_chars(s_.data(), s_.data() + s_.size(), out);
  return res.ec == std::errc() && res.ptr == s_.data() + s_.size();
}

int64_t Json::asInt() const {
  int64_t v = 0;
  if (getInt(v))
    return v;
  double d = 0;
  if (getDouble(d) && std::isfinite(d))
    return static_cast<int64_t>(d);
  return 0;
}

double Json::asDouble() const {
  double d = 0;
  return getDouble(d) ? d : 0.0;
}

Json &Json::push(Json v) {
  items_.push_back(std::move(v));
  return items_.back();
}

const Json *Json::get(std::string_view key) const {
  for (const auto &m : members_)
    if (m.first == key)
      return &m.second;
  return nullptr;
}

Json &Json::set(std::string key, Json v) {
  for (auto &m : members_)
    if (m.first == key) {
      m.second = std::move(v);
      return m.second;
    }
  members_.emplace_back(std::move(key), std::move(v));
  return members_.back().second;
}

void appendJsonString(std::string &out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
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
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

void Json::write(std::string &out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0)
      return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
  case Kind::Null:
    out += "null";
    return;
  case Kind::Bool:
    out += b_ ? "true" : "false";
    return;
  case Kind::Number:
    out += s_;
    return;
  case Kind::String:
    appendJsonString(out, s_);
    return;
  case Kind::Array: {
    if (items_.empty()) {
      out += "[]";
      return;
    }
    // Arrays of scalars stay on one line even when pretty-printing: shapes
    // and small lists read better that way.
    bool flat = true;
    for (const Json &v : items_)
      flat &= !v.isArray() && !v.isObject();
    out += '[';
    for (size_t i = 0; i < items_.size(); ++i) {
      if (i)
        out += indent >= 0 && flat ? ", " : ",";
      if (!flat)
        newline(depth + 1);
      items_[i].write(out, indent, depth + 1);
    }
    if (!flat)
      newline(depth);
    out += ']';
    return;
  }
  case Kind::Object: {
    if (members_.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < members_.size(); ++i) {
      if (i)
        out += ',';
      newline(depth + 1);
      appendJsonString(out, members_[i].first);
      out += indent >= 0 ? ": " : ":";
      members_[i].second.write(out, indent, depth + 1);
    }
    newline(depth);
    out += '}';
    return;
  }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  return out;
}

namespace {

class Parser {
public:
  explicit Parser(std::string_view text) : t_(text) {}

  Expected<Json> document() {
    Json v;
    if (!value(v, 0))
      return Status::error(error_);
    skipSpace();
    if (pos_ != t_.size()) {
      fail("unexpected text after the JSON value");
      return Status::error(error_);
    }
    return v;
  }

private:
  static constexpr int kMaxDepth = 512;

  bool fail(const std::string &what) {
    if (!error_.empty())
      return false;
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    error_ = "JSON " + std::to_string(line) + ":" + std::to_string(col) + ": " +
             what;
    return false;
  }

  void skipSpace() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\n' ||
                                t_[pos_] == '\r' || t_[pos_] == '\t'))
      ++pos_;
  }

  bool literal(std::string_view word) {
    if (t_.substr(pos_, word.size()) != word)
      return fail("invalid literal");
    pos_ += word.size();
    return true;
  }

  bool value(Json &out, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than " + std::to_string(kMaxDepth));
    skipSpace();
    if (pos_ >= t_.size())
      return fail("unexpected end of input");
    char c = t_[pos_];
    if (c == 'n') {
      out = Json::null();
      return literal("null");
    }
    if (c == 't') {
      out = Json::boolean(true);
      return literal("true");
    }
    if (c == 'f') {
      out = Json::boolean(false);
      return literal("false");
    }
    if (c == '"') {
      std::string s;
      if (!string(s))
        return false;
      out = Json::string(std::move(s));
      return true;
    }
    if (c == '[') {
      ++pos_;
      out = Json::array();
      skipSpace();
      if (pos_ < t_.size() && t_[pos_] == ']') {
        ++pos_;
        return true;
      }
      for (;;) {
        Json item;
        if (!value(item, depth + 1))
          return false;
        out.push(std::move(item));
        skipSpace();
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < t_.size() && t_[pos_] == ']') {
          ++pos_;
          return true;
        }
        return fail("expected ',' or ']' in array");
      }
    }
    if (c == '{') {
      ++pos_;
      out = Json::object();
      skipSpace();
      if (pos_ < t_.size() && t_[pos_] == '}') {
        ++pos_;
        return true;
      }
      for (;;) {
        skipSpace();
        if (pos_ >= t_.size() || t_[pos_] != '"')
          return fail("expected a string key in object");
        std::string key;
        if (!string(key))
          return false;
        skipSpace();
        if (pos_ >= t_.size() || t_[pos_] != ':')
          return fail("expected ':' after object key");
        ++pos_;
        Json member;
        if (!value(member, depth + 1))
          return false;
        out.set(std::move(key), std::move(member));
        skipSpace();
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < t_.size() && t_[pos_] == '}') {
          ++pos_;
          return true;
        }
        return fail("expected ',' or '}' in object");
      }
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return number(out);
    return fail(std::string("unexpected character '") + c + "'");
  }

  bool number(Json &out) {
    size_t start = pos_;
    if (t_[pos_] == '-')
      ++pos_;
    auto digits = [&] {
      size_t s = pos_;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9')
        ++pos_;
      return pos_ > s;
    };
    if (pos_ + 1 < t_.size() && t_[pos_] == '0' && t_[pos_ + 1] >= '0' &&
        t_[pos_ + 1] <= '9') {
      ++pos_;
      return fail("leading zeros are not allowed in numbers");
    }
    if (!digits())
      return fail("invalid number");
    if (pos_ < t_.size() && t_[pos_] == '.') {
      ++pos_;
      if (!digits())
        return fail("invalid number: digits expected after '.'");
    }
    if (pos_ < t_.size() && (t_[pos_] == 'e' || t_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < t_.size() && (t_[pos_] == '+' || t_[pos_] == '-'))
        ++pos_;
      if (!digits())
        return fail("invalid number: digits expected in exponent");
    }
    out = Json::numberText(std::string(t_.substr(start, pos_ - start)));
    return true;
  }

  static void appendUtf8(std::string &s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(uint32_t &cp) {
    if (pos_ + 4 > t_.size())
      return fail("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char h = t_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9')
        cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        cp |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return fail("invalid \\u escape");
    }
    return true;
  }

  bool string(std::string &s) {
    ++pos_; // opening quote
    for (;;) {
      if (pos_ >= t_.size())
        return fail("unterminated string");
      char c = t_[pos_++];
      if (c == '"')
        return true;
      if (static_cast<unsigned char>(c) < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= t_.size())
        return fail("unterminated string");
      char e = t_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        s += e;
        break;
      case 'n':
        s += '\n';
        break;
      case 'r':
        s += '\r';
        break;
      case 't':
        s += '\t';
        break;
      case 'b':
        s += '\b';
        break;
      case 'f':
        s += '\f';
        break;
      case 'u': {
        uint32_t cp;
        if (!hex4(cp))
          return false;
        if (cp >= 0xD800 && cp < 0xDC00 && t_.substr(pos_, 2) == "\\u") {
          size_t save = pos_;
          pos_ += 2;
          uint32_t lo;
          if (!hex4(lo))
            return false;
          if (lo >= 0xDC00 && lo < 0xE000)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          else
            pos_ = save;
        }
        appendUtf8(s, cp);
        break;
      }
      default:
        return fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  std::string_view t_;
  size_t pos_ = 0;
  std::string error_;
};

} // namespace

Expected<Json> Json::parse(std::string_view text) {
  return Parser(text).document();
}

} // namespace sluice::runtime
