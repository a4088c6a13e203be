//===- Internal.h - Helpers shared by the ops/lib implementation -*- C++
//-*-===//
//
// Not installed: the number formatting and identifier rules that Value,
// Expr and the registry entries must agree on.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_LIB_INTERNAL_H
#define SLUICE_OPS_LIB_INTERNAL_H

#include <string>
#include <string_view>

namespace sluice::detail {

/// Shortest text that reads back as the same double; always contains a '.'
/// or an exponent so it never reads back as an integer ("1.0", "0.001").
std::string formatDouble(double d);

/// [A-Za-z_][A-Za-z0-9_]*: names an expression can refer to.
bool isIdentifier(std::string_view s);

} // namespace sluice::detail

#endif // SLUICE_OPS_LIB_INTERNAL_H
