//===- ServeFlags.cpp - The worker's flags (serve, compiled executables) --===//
//
// See ServeFlags.h. The messages name the flag as the command spells it
// (--listen or --serve) and the program (sluice, or the executable).
//
//===----------------------------------------------------------------------===//
#include "ServeFlags.h"

#include "sluice/ops/Registry.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice::tool {

namespace {

bool readText(const std::string &path, const std::string &what,
              const std::string &command, std::string &out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    usageError("cannot read " + what + " '" + path + "'", command);
    return false;
  }
  std::ostringstream os;
  os << f.rdbuf();
  out = os.str();
  return true;
}

} // namespace

void addServeFlags(CLI::App &cmd, ServeFlags &f, const std::string &listenFlag,
                   bool required) {
  f.listenFlag = listenFlag;
  CLI::Option *listen =
      cmd.add_option(
             listenFlag, f.listen,
             required
                 ? "host:port to listen on, e.g. 127.0.0.1:7070 (port 0: any "
                   "free port, see --port-file); required: a worker listens "
                   "only where it is told"
                 : "serve the pipeline to trainers on other hosts instead of "
                   "running it: listen on host:port, e.g. 127.0.0.1:7070 "
                   "(port 0: any free port, see --port-file), as `sluice "
                   "serve` does (docs/distributed.md)")
          ->type_name("ADDR");
  if (required)
    listen->required();
  cmd.add_option("--token-file", f.tokenFile,
                 "a file holding the shared token every trainer must send "
                 "(default: $SLUICE_TOKEN; none: no token)")
      ->type_name("FILE");
  cmd.add_option("--tls-cert", f.tlsCert,
                 "the server's certificate chain (PEM) for TLS")
      ->type_name("FILE");
  cmd.add_option("--tls-key", f.tlsKey,
                 "the server's private key (PEM) for TLS")
      ->type_name("FILE");
  cmd.add_option("--port-file", f.portFile,
                 "write the address it listens on here once it listens")
      ->type_name("FILE");
  cmd.add_option("--stats-interval", f.statsInterval,
                 "print per-trainer statistics every S seconds (default: "
                 "when it stops)")
      ->type_name("S");
  cmd.add_option("--streams", f.streams,
                 "run at most N chunks (of any trainers) at once, each with "
                 "budget.memory / N, so that the worker stays within its "
                 "budget whatever the number of trainers; further chunks "
                 "wait (default 0: no limit, each chunk with the whole "
                 "budget)")
      ->type_name("N");
  cmd.add_option("--share-outputs", f.shareOutputs,
                 "keep made chunks, up to SIZE bytes of outputs (e.g. 2GiB, "
                 "beside budget.memory), for other trainers asking for the "
                 "same ones: jobs of the same spec at the same rank and "
                 "world size then share one decode (docs/distributed.md; "
                 "default: none kept)")
      ->type_name("SIZE");
}

int makeServeOptions(const ServeFlags &f, const RunFlags &run,
                     uint64_t specDigest, const std::string &command,
                     remote::ServeOptions &so) {
  // Outputs go to trainers: run's sink flags mean nothing here.
  if (run.sink != "null" || run.overwrite || !run.statsJson.empty())
    return usageError("--sink, --overwrite and --stats-json are for running "
                      "the pipeline here; a worker's outputs go to its "
                      "trainers",
                      command);
  if (f.listen.find(':') == std::string::npos)
    return usageError(f.listenFlag +
                          " needs host:port (e.g. 127.0.0.1:7070), "
                          "got '" +
                          f.listen + "'",
                      command);
  if (f.streams < 0)
    return usageError("--streams must be >= 0 (0: no limit), got " +
                          std::to_string(f.streams),
                      command);
  if (f.statsInterval < 0)
    return usageError("--stats-interval must be >= 0 seconds", command);
  if (!f.shareOutputs.empty()) {
    std::optional<int64_t> n = parseByteSize(f.shareOutputs);
    if (!n || *n < 0)
      return usageError("--share-outputs needs a size such as 512MiB or "
                        "2GiB (0: none kept), got '" +
                            f.shareOutputs + "'",
                        command);
    so.shareBytes = *n;
  }
  so.listen = f.listen;
  so.portFile = f.portFile;
  so.statsInterval = f.statsInterval;
  so.streams = f.streams;
  so.quiet = run.quiet;
  so.specDigest = specDigest;
  if (!f.tokenFile.empty()) {
    if (!readText(f.tokenFile, "the token file", command, so.security.token))
      return kExitUsage;
    while (!so.security.token.empty() && (so.security.token.back() == '\n' ||
                                          so.security.token.back() == '\r'))
      so.security.token.pop_back();
    if (so.security.token.empty())
      return usageError("the token file '" + f.tokenFile + "' is empty",
                        command);
  } else if (const char *t = std::getenv("SLUICE_TOKEN"); t && *t) {
    so.security.token = t;
  }
  if (f.tlsCert.empty() != f.tlsKey.empty())
    return usageError("TLS needs both --tls-cert and --tls-key", command);
  if (!f.tlsCert.empty() &&
      (!readText(f.tlsCert, "the TLS certificate", command,
                 so.security.tlsCert) ||
       !readText(f.tlsKey, "the TLS key", command, so.security.tlsKey)))
    return kExitUsage;
  return -1;
}

} // namespace sluice::tool
