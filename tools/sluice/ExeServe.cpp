//===- ExeServe.cpp - A compiled executable as a worker (--serve) ---------===//
//
// Linked whole (for its static initializer) into executables `sluice
// compile --serve` writes, and only into those (ExeServe.h). The worker
// it starts is `sluice serve`'s (remote::serve): the same flags
// (ServeFlags.h), protocol, refusals and exactness, on the executable's
// embedded plan and ahead-of-time kernels instead of a spec compiled at
// start-up.
//
//===----------------------------------------------------------------------===//
#include "ExeServe.h"
#include "ServeFlags.h"

#include "sluice/remote/Remote.h"

#include <iostream>

namespace sluice::tool {

namespace {

ServeFlags &flags() {
  static ServeFlags f;
  return f;
}

void addFlags(CLI::App &app) {
  addServeFlags(app, flags(), "--serve", /*required=*/false);
}

bool requested() { return !flags().listen.empty(); }

remote::ServeOptions &options() {
  static remote::ServeOptions so;
  return so;
}

int prepare(const RunFlags &run, uint64_t specDigest) {
  return makeServeOptions(flags(), run, specDigest, "", options());
}

int serve(const runtime::Plan &plan, const runtime::RunOptions &runOpts) {
  runtime::RunOptions opts = runOpts;
  opts.controller = nullptr;
  opts.handleSignals = false;
  return remote::serve(plan, opts, options(), std::cerr);
}

const ExeServeHook kHook = {addFlags, requested, prepare, serve};

[[maybe_unused]] const bool kRegistered = [] {
  exeServeHook() = &kHook;
  return true;
}();

} // namespace

} // namespace sluice::tool
