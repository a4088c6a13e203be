//===- Diagnostics.h - Spec errors with file:line:col and a caret -*- C++
//-*-===//
//
// Every problem found in a spec is collected here (the front end keeps going
// after the first one) and printed as
//   spec.yaml:12:5: error: unknown op 'decode_imgae'; did you mean
//   'decode_image'?
//     - decode_imgae: {field: data}
//       ^
// followed by optional notes/hints.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_DSL_DIAGNOSTICS_H
#define SLUICE_DSL_DIAGNOSTICS_H

#include "sluice/ops/Value.h"

#include <ostream>
#include <string>
#include <vector>

namespace sluice::dsl {

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  SourceLoc loc;
  std::string message;
  std::string hint; ///< printed as "note: ..." after the caret line
};

/// Collects diagnostics for one spec file.
class DiagnosticEngine {
public:
  DiagnosticEngine(std::string fileName, std::string sourceText)
      : file_(std::move(fileName)), text_(std::move(sourceText)) {}

  void error(SourceLoc loc, std::string message, std::string hint = "");
  void warning(SourceLoc loc, std::string message, std::string hint = "");

  const std::vector<Diagnostic> &diagnostics() const { return diags_; }
  size_t errorCount() const;
  bool hasErrors() const { return errorCount() > 0; }
  const std::string &fileName() const { return file_; }
  const std::string &sourceText() const { return text_; }

  /// Prints all diagnostics sorted by position (stable), with source line and
  /// caret. `color` adds ANSI colors.
  void print(std::ostream &os, bool color = false) const;

  /// The text of 1-based line `line`, without the newline.
  std::string lineText(int line) const;

private:
  std::string file_;
  std::string text_;
  std::vector<Diagnostic> diags_;
};

} // namespace sluice::dsl

#endif // SLUICE_DSL_DIAGNOSTICS_H
