//===- JsonText.cpp - The runtime's JSON layout ---------------------------===//
//
// nlohmann-json's own pretty printer puts every array element on its own
// line, which turns a plan's shapes and spec locations into columns of
// numbers; this keeps the layout the runtime has always written while the
// escaping and number formatting stay nlohmann's.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/JsonText.h"

#include <nlohmann/json.hpp>

namespace sluice::runtime {

namespace {

using Json = nlohmann::ordered_json;

std::string scalar(const Json &j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void write(const Json &j, std::string &out, int depth) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(d), ' ');
  };
  if (j.is_array()) {
    if (j.empty()) {
      out += "[]";
      return;
    }
    bool flat = true;
    for (const Json &v : j)
      flat &= !v.is_structured();
    out += '[';
    bool first = true;
    for (const Json &v : j) {
      if (!first)
        out += flat ? ", " : ",";
      first = false;
      if (!flat)
        newline(depth + 1);
      write(v, out, depth + 1);
    }
    if (!flat)
      newline(depth);
    out += ']';
    return;
  }
  if (j.is_object()) {
    if (j.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first)
        out += ',';
      first = false;
      newline(depth + 1);
      out += scalar(Json(it.key()));
      out += ": ";
      write(it.value(), out, depth + 1);
    }
    newline(depth);
    out += '}';
    return;
  }
  out += scalar(j);
}

} // namespace

std::string prettyJson(const nlohmann::ordered_json &j) {
  std::string out;
  write(j, out, 0);
  return out;
}

} // namespace sluice::runtime
