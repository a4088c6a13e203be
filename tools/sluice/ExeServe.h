//===- ExeServe.h - What a compiled executable links to serve --*- C++ -*-===//
//
// `sluice compile --serve` links an executable that can also be a worker
// (`EXE --serve ADDR`, the protocol of `sluice serve`); a plain `sluice
// compile` does not, so that its executables need none of gRPC, protobuf
// and c-ares (some twenty shared libraries to carry to a host without
// them). main() (ExeMain.cpp) knows only this hook: ExeServe.cpp, linked
// whole into the serving variant alone (the second link manifest,
// cmake/SluiceInstall.cmake), fills it in from a static initializer.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TOOLS_EXESERVE_H
#define SLUICE_TOOLS_EXESERVE_H

#include "RunFlags.h"

#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <CLI/CLI.hpp>

#include <cstdint>

namespace sluice::tool {

/// What the serving part of an executable provides.
struct ExeServeHook {
  /// Registers --serve ADDR and the worker's flags (ServeFlags.h).
  void (*addFlags)(CLI::App &app);
  /// Whether --serve was given.
  bool (*requested)();
  /// Checks the worker's flags against the run flags and reads the token
  /// and TLS files, before any work; `specDigest` is the compiled spec's
  /// text digest (trainers compare it with their spec's). -1 when ready,
  /// else the exit code (the error printed).
  int (*prepare)(const RunFlags &run, uint64_t specDigest);
  /// Serves `plan` run with `opts` until SIGINT/SIGTERM; the exit code.
  int (*serve)(const runtime::Plan &plan, const runtime::RunOptions &opts);
};

/// The hook, null in an executable compiled without --serve.
inline const ExeServeHook *&exeServeHook() {
  static const ExeServeHook *hook = nullptr;
  return hook;
}

} // namespace sluice::tool

#endif // SLUICE_TOOLS_EXESERVE_H
