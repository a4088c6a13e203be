//===- embed.cpp - A program built against an installed sluice runtime ----===//
//
// Reads a serialized Plan (`sluice explain SPEC --ir plan`), pulls its
// outputs through the Pipeline API, then runs it again into an npy sink the
// way `sluice run` does. Usage: embed PLAN.json OUTDIR.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <fstream>
#include <iostream>
#include <sstream>

using namespace sluice;

int main(int argc, char **argv) {
  if (argc != 3) {
    std::cerr << "usage: embed PLAN.json OUTDIR\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  Expected<runtime::Plan> plan = runtime::Plan::deserialize(text.str());
  if (!plan) {
    std::cerr << "embed: " << plan.status().message() << "\n";
    return 1;
  }
  auto made = runtime::Pipeline::create(*plan);
  if (!made) {
    std::cerr << "embed: " << made.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<runtime::Pipeline> p = made.take();
  runtime::Batch b;
  int64_t outputs = 0, rows = 0;
  for (;;) {
    Expected<bool> more = p->next(b);
    if (!more) {
      std::cerr << "embed: " << more.status().message() << "\n";
      return 1;
    }
    if (!*more)
      break;
    ++outputs;
    rows += b.rows();
  }
  std::cout << "pipeline " << plan->name << ": " << outputs << " outputs, "
            << rows << " rows\n";
  runtime::RunOptions opts;
  opts.sink = std::string("npy:") + argv[2];
  opts.progress = runtime::RunOptions::Progress::Off;
  return runtime::runPipeline(*plan, opts, std::cout, std::cerr);
}
