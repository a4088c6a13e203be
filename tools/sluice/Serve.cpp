//===- Serve.cpp - `sluice serve`: a worker for trainers on other hosts ---===//
//
// Compiles the spec as `sluice run` does (same plan, same kernels, same
// bytes), applies `schedule: auto` once, and serves the plan over gRPC
// (remote/Remote.h, docs/distributed.md). It listens only where --listen
// says; a shared token (--token-file or $SLUICE_TOKEN) and TLS
// (--tls-cert/--tls-key) keep other clients out.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include "sluice/remote/Remote.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice::tool {

namespace {

struct ServeFlags {
  std::string listen, tokenFile, tlsCert, tlsKey, portFile;
  double statsInterval = 0;
  int64_t streams = 0;
};

bool readText(const std::string &path, const std::string &what,
              std::string &out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::cerr << "sluice serve: error: cannot read " << what << " '" << path
              << "'\n";
    return false;
  }
  std::ostringstream os;
  os << f.rdbuf();
  out = os.str();
  return true;
}

} // namespace

CommandAction addServeCommand(CLI::App &root) {
  auto st = std::make_shared<SpecRunFlags>();
  auto sf = std::make_shared<ServeFlags>();
  CLI::App *cmd = root.add_subcommand(
      "serve", "run the pipeline's work for trainers on other hosts (gRPC "
               "worker; docs/distributed.md)");
  addSpecRunFlags(*cmd, *st);
  cmd->add_option("--listen", sf->listen,
                  "host:port to listen on, e.g. 127.0.0.1:7070 (port 0: any "
                  "free port, see --port-file); required: a worker listens "
                  "only where it is told")
      ->type_name("ADDR")
      ->required();
  cmd->add_option("--token-file", sf->tokenFile,
                  "a file holding the shared token every trainer must send "
                  "(default: $SLUICE_TOKEN; none: no token)")
      ->type_name("FILE");
  cmd->add_option("--tls-cert", sf->tlsCert,
                  "the server's certificate chain (PEM) for TLS")
      ->type_name("FILE");
  cmd->add_option("--tls-key", sf->tlsKey,
                  "the server's private key (PEM) for TLS")
      ->type_name("FILE");
  cmd->add_option("--port-file", sf->portFile,
                  "write the address it listens on here once it listens")
      ->type_name("FILE");
  cmd->add_option("--stats-interval", sf->statsInterval,
                  "print per-trainer statistics every S seconds (default: "
                  "when it stops)")
      ->type_name("S");
  cmd->add_option("--streams", sf->streams,
                  "run at most N chunks (of any trainers) at once, each with "
                  "budget.memory / N, so that the worker stays within its "
                  "budget whatever the number of trainers; further chunks "
                  "wait (default 0: no limit, each chunk with the whole "
                  "budget)")
      ->type_name("N");
  return [st, sf] {
    // Outputs go to trainers: run's sink flags mean nothing here.
    if (st->run.sink != "null" || st->run.overwrite ||
        !st->run.statsJson.empty())
      return usageError("--sink, --overwrite and --stats-json are `sluice "
                        "run`'s; a worker's outputs go to its trainers",
                        "serve");
    RunSetup rs;
    int rc = setupSpecRun(*st, "serve", rs);
    if (rc >= 0)
      return rc;
    remote::ServeOptions so;
    so.listen = sf->listen;
    so.portFile = sf->portFile;
    so.statsInterval = sf->statsInterval;
    so.streams = sf->streams;
    if (sf->streams < 0)
      return usageError("--streams must be >= 0 (0: no limit), got " +
                            std::to_string(sf->streams),
                        "serve");
    so.quiet = st->run.quiet;
    if (sf->listen.find(':') == std::string::npos)
      return usageError("--listen needs host:port (e.g. 127.0.0.1:7070), "
                        "got '" +
                            sf->listen + "'",
                        "serve");
    if (!sf->tokenFile.empty()) {
      if (!readText(sf->tokenFile, "the token file", so.security.token))
        return kExitUsage;
      while (!so.security.token.empty() && (so.security.token.back() == '\n' ||
                                            so.security.token.back() == '\r'))
        so.security.token.pop_back();
      if (so.security.token.empty())
        return usageError("the token file '" + sf->tokenFile + "' is empty",
                          "serve");
    } else if (const char *t = std::getenv("SLUICE_TOKEN"); t && *t) {
      so.security.token = t;
    }
    if (sf->tlsCert.empty() != sf->tlsKey.empty())
      return usageError("TLS needs both --tls-cert and --tls-key", "serve");
    if (!sf->tlsCert.empty() &&
        (!readText(sf->tlsCert, "the TLS certificate", so.security.tlsCert) ||
         !readText(sf->tlsKey, "the TLS key", so.security.tlsKey)))
      return kExitUsage;
    std::string text;
    if (!readText(st->specs[0], "the spec", text))
      return kExitUsage;
    so.specDigest = remote::specDigest(text);
    // A worker runs many chunks: tune once here, not per chunk.
    if ((rc = prepareRun(rs, std::cout, std::cerr)) >= 0)
      return rc;
    rs.opts().controller = nullptr;
    rs.opts().handleSignals = false;
    return remote::serve(rs.plan(), rs.opts(), so, std::cerr);
  };
}

} // namespace sluice::tool
