//===- Utf8.h - Checking and repairing UTF-8 text ---------------*- C++ -*-===//
//
// Text fields are UTF-8. Readers of text (text_lines, csv/tsv string
// columns) check what they read against it: `encoding: strict` (the
// default) makes invalid bytes a located data error that on_error decides
// about, `encoding: replace` turns each invalid sequence into U+FFFD, the
// way Python's errors="replace" does.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_UTF8_H
#define SLUICE_OPS_UTF8_H

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

/// Offset of the first byte of `s` that does not start (or continue) a
/// well-formed UTF-8 sequence (overlong forms, surrogates and code points
/// above U+10FFFF are ill-formed), or std::string::npos when `s` is valid.
size_t invalidUtf8At(std::string_view s);

/// `s` with every maximal ill-formed subsequence replaced by U+FFFD.
/// `replaced` (optional) receives how many replacements were made.
std::string replaceInvalidUtf8(std::string_view s, size_t *replaced = nullptr);

} // namespace sluice

#endif // SLUICE_OPS_UTF8_H
