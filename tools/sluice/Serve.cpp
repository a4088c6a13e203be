//===- Serve.cpp - `sluice serve`: a worker for trainers on other hosts ---===//
//
// Compiles the spec as `sluice run` does (same plan, same kernels, same
// bytes), applies `schedule: auto` once, and serves the plan over gRPC
// (remote/Remote.h, docs/distributed.md). It listens only where --listen
// says; a shared token (--token-file or $SLUICE_TOKEN) and TLS
// (--tls-cert/--tls-key) keep other clients out.
//
// This file is linked into `sluice-serve`, the driver with gRPC; the
// `sluice` executable runs it for `sluice serve` (ServeExec.cpp), so that
// every other command starts without loading gRPC, protobuf and absl.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"
#include "ServeFlags.h"

#include "sluice/remote/Remote.h"

#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice::tool {

CommandAction addServeCommand(CLI::App &root) {
  auto st = std::make_shared<SpecRunFlags>();
  auto sf = std::make_shared<ServeFlags>();
  CLI::App *cmd = root.add_subcommand("serve", kServeDescription);
  addSpecRunFlags(*cmd, *st);
  addServeFlags(*cmd, *sf, "--listen", /*required=*/true);
  return [st, sf] {
    remote::ServeOptions so;
    int rc = makeServeOptions(*sf, st->run, 0, "serve", so);
    if (rc >= 0)
      return rc;
    RunSetup rs;
    rc = setupSpecRun(*st, "serve", rs);
    if (rc >= 0)
      return rc;
    std::ifstream in(st->specs[0], std::ios::binary);
    if (!in)
      return usageError("cannot read the spec '" + st->specs[0] + "'", "serve");
    std::ostringstream text;
    text << in.rdbuf();
    so.specDigest = remote::specDigest(text.str());
    // A worker runs many chunks: tune once here, not per chunk.
    if ((rc = prepareRun(rs, std::cout, std::cerr)) >= 0)
      return rc;
    rs.opts().controller = nullptr;
    rs.opts().handleSignals = false;
    return remote::serve(rs.plan(), rs.opts(), so, std::cerr);
  };
}

int serveElsewhere(int, char **) { return -1; }

} // namespace sluice::tool
