//===- ServeFlags.h - The worker's flags, shared by serve and executables -===//
//
// A worker serves the plan it was given over gRPC (remote/Remote.h,
// docs/distributed.md): `sluice serve SPEC --listen ADDR` compiles the spec
// first, an executable `sluice compile --serve` wrote serves its embedded
// plan with `--serve ADDR`. Both take the same flags (token, TLS, port
// file, stats, streams), registered and checked here once, so the two
// workers refuse and accept the same command lines and speak the same
// protocol. Depends on the remote library and the run flags, never on the
// front end or MLIR (a compiled executable links it).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TOOLS_SERVEFLAGS_H
#define SLUICE_TOOLS_SERVEFLAGS_H

#include "RunFlags.h"

#include "sluice/remote/Remote.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace sluice::tool {

/// The worker's flags as given on the command line.
struct ServeFlags {
  std::string listen, tokenFile, tlsCert, tlsKey, portFile;
  double statsInterval = 0;
  int64_t streams = 0;
  std::string shareOutputs;
  /// How the address flag is spelled ("--listen", "--serve"), for messages.
  std::string listenFlag = "--listen";
};

/// Registers the address flag (`listenFlag`: "--listen" for `sluice serve`,
/// required there; "--serve" for a compiled executable, where it chooses
/// serving over running), --token-file, --tls-cert, --tls-key,
/// --port-file, --stats-interval and --streams on `cmd`.
void addServeFlags(CLI::App &cmd, ServeFlags &flags,
                   const std::string &listenFlag, bool required);

/// Checks `flags` (and that `run` asks for nothing a worker cannot do: a
/// sink, --stats-json) and fills `so`, reading the token and TLS files.
/// `specDigest` is remote::specDigest of the spec's text, which trainers
/// compare with their own spec's. Prints a usage error naming `command`'s
/// help and returns its exit code, or -1 when `so` is ready.
int makeServeOptions(const ServeFlags &flags, const RunFlags &run,
                     uint64_t specDigest, const std::string &command,
                     remote::ServeOptions &so);

} // namespace sluice::tool

#endif // SLUICE_TOOLS_SERVEFLAGS_H
