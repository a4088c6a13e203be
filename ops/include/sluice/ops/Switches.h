//===- Switches.h - The SLUICE_NO_* switches' one rule ----------*- C++ -*-===//
//
// Every optimization can be turned off by name: an environment variable
// SLUICE_NO_<NAME> (README, "Optimizations"). One rule for all of them: a
// switch is on (the optimization off) when its variable is set to anything
// but the empty string or "0". So SLUICE_NO_X=1, =yes or =true turn X off,
// and SLUICE_NO_X=0 or SLUICE_NO_X= leave it on, for every X.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_SWITCHES_H
#define SLUICE_OPS_SWITCHES_H

#include <cstdlib>
#include <cstring>

namespace sluice {

/// Whether the switch `name` (a SLUICE_NO_* variable) is set: to anything
/// but "" or "0". Reads the environment at each call.
inline bool switchedOff(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

} // namespace sluice

#endif // SLUICE_OPS_SWITCHES_H
