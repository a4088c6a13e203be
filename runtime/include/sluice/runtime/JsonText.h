//===- JsonText.h - The runtime's JSON layout -------------------*- C++ -*-===//
//
// The runtime writes JSON (serialized Plans, --stats-json, the npy index)
// with nlohmann-json; this is the one layout they share, made for people
// reading `sluice explain --ir plan` and diffs of it: one member per line,
// arrays of scalars (shapes, locations) kept on one line.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_JSONTEXT_H
#define SLUICE_RUNTIME_JSONTEXT_H

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace sluice::runtime {

/// `j` as text: objects one member per line indented by one space per
/// level, arrays of scalars on one line ("[1, 2]"). Bytes in strings that
/// are not UTF-8 become U+FFFD (never an exception).
std::string prettyJson(const nlohmann::ordered_json &j);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_JSONTEXT_H
