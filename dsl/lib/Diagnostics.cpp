//===- Diagnostics.cpp - Printing spec errors with source and caret -------===//
#include "sluice/dsl/Diagnostics.h"

#include <algorithm>

namespace sluice::dsl {

void DiagnosticEngine::error(SourceLoc loc, std::string message,
                             std::string hint) {
  diags_.push_back({Severity::Error, loc, std::move(message), std::move(hint)});
}

void DiagnosticEngine::warning(SourceLoc loc, std::string message,
                               std::string hint) {
  diags_.push_back(
      {Severity::Warning, loc, std::move(message), std::move(hint)});
}

size_t DiagnosticEngine::errorCount() const {
  return std::count_if(diags_.begin(), diags_.end(), [](const Diagnostic &d) {
    return d.severity == Severity::Error;
  });
}

std::string DiagnosticEngine::lineText(int line) const {
  if (line <= 0)
    return "";
  size_t pos = 0;
  for (int l = 1; l < line; ++l) {
    pos = text_.find('\n', pos);
    if (pos == std::string::npos)
      return "";
    ++pos;
  }
  size_t end = text_.find('\n', pos);
  std::string s = text_.substr(pos, end == std::string::npos ? std::string::npos
                                                             : end - pos);
  if (!s.empty() && s.back() == '\r')
    s.pop_back();
  return s;
}

/// Makes a source line safe to echo on a terminal: control bytes and
/// invalid UTF-8 (binary junk) would garble the output.
static std::string printable(const std::string &s, size_t maxLen) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < maxLen; ++i) {
    unsigned char c = s[i];
    if (c == '\t')
      out += ' ';
    else if (c < 0x20 || c == 0x7f || c >= 0x80)
      out += '?';
    else
      out += static_cast<char>(c);
  }
  return out;
}

void DiagnosticEngine::print(std::ostream &os, bool color) const {
  std::vector<const Diagnostic *> sorted;
  for (const auto &d : diags_)
    sorted.push_back(&d);
  // By position, then in the order reported (the pointers point into one
  // vector). std::sort with a total order rather than std::stable_sort,
  // whose libstdc++ 12 implementation trips clang's deprecation warning.
  std::sort(sorted.begin(), sorted.end(),
            [](const Diagnostic *a, const Diagnostic *b) {
              if (a->loc.line != b->loc.line)
                return a->loc.line < b->loc.line;
              if (a->loc.col != b->loc.col)
                return a->loc.col < b->loc.col;
              return a < b;
            });
  const char *bold = color ? "\033[1m" : "";
  const char *red = color ? "\033[1;31m" : "";
  const char *magenta = color ? "\033[1;35m" : "";
  const char *cyan = color ? "\033[1;36m" : "";
  const char *green = color ? "\033[1;32m" : "";
  const char *reset = color ? "\033[0m" : "";
  for (const Diagnostic *d : sorted) {
    const char *kind = d->severity == Severity::Error     ? "error"
                       : d->severity == Severity::Warning ? "warning"
                                                          : "note";
    const char *kindColor = d->severity == Severity::Error     ? red
                            : d->severity == Severity::Warning ? magenta
                                                               : cyan;
    os << bold << file_;
    if (d->loc.valid())
      os << ':' << d->loc.line << ':' << d->loc.col;
    os << ": " << reset << kindColor << kind << ": " << reset << bold
       << d->message << reset << '\n';
    if (d->loc.valid()) {
      std::string line = lineText(d->loc.line);
      if (!line.empty() || d->loc.col <= 1) {
        const size_t maxLen = 200;
        std::string shown = printable(line, maxLen);
        os << "  " << shown << '\n';
        size_t caret = d->loc.col > 0 ? static_cast<size_t>(d->loc.col - 1) : 0;
        if (caret <= shown.size())
          os << "  " << std::string(caret, ' ') << green << '^' << reset
             << '\n';
      }
    }
    if (!d->hint.empty())
      os << bold << file_ << ": " << reset << cyan << "note: " << reset
         << d->hint << '\n';
  }
}

} // namespace sluice::dsl
