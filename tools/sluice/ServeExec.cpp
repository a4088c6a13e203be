//===- ServeExec.cpp - `sluice serve` runs in sluice-serve ----------------===//
//
// The `sluice` executable does not link gRPC: loading libgrpc++, protobuf
// and absl cost every command ~24 ms of CPU and ~640 page faults at start
// (bench/results.md, sixth and seventh sessions), and only `serve` uses
// them. `sluice serve ...` therefore replaces this process with
// `sluice-serve`, the same driver built with Serve.cpp and gRPC, found
// beside this executable (the build tree's bin/) or in
// ../libexec/sluice/ (an installed tree); $SLUICE_SERVE_BIN names another.
// The arguments pass unchanged, so flags, messages and exit codes are
// those of the command itself.
//
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace sluice::tool {

CommandAction addServeCommand(CLI::App &root) {
  // Listed in `sluice --help`; never parsed here (serveElsewhere runs first).
  root.add_subcommand("serve", kServeDescription);
  return [] { return kExitUsage; };
}

int serveElsewhere(int argc, char **argv) {
  bool serve = argc >= 2 && std::strcmp(argv[1], "serve") == 0;
  bool help = argc >= 3 && std::strcmp(argv[1], "help") == 0 &&
              std::strcmp(argv[2], "serve") == 0;
  if (!serve && !help)
    return -1;
  std::vector<std::string> tried;
  if (const char *env = std::getenv("SLUICE_SERVE_BIN"); env && *env) {
    tried.push_back(env);
  } else {
    std::string dir = dirName(selfPath());
    tried.push_back(dir + "/sluice-serve");
    tried.push_back(dir + "/../libexec/sluice/sluice-serve");
  }
  std::vector<char *> args(argv, argv + argc);
  args.push_back(nullptr);
  int err = ENOENT;
  for (const std::string &path : tried) {
    if (access(path.c_str(), X_OK) != 0) {
      err = errno;
      continue;
    }
    execv(path.c_str(), args.data());
    err = errno; // execv returns only on failure
  }
  std::string where;
  for (size_t i = 0; i < tried.size(); ++i)
    where += (i ? " or " : "") + tried[i];
  std::cerr << "sluice: error: 'serve' runs in the worker executable "
               "sluice-serve, which is not at "
            << where << " (" << std::strerror(err)
            << "); it is built and installed with sluice (the target "
               "'sluice-serve'), or set SLUICE_SERVE_BIN to its path\n";
  return kExitUsage;
}

} // namespace sluice::tool
