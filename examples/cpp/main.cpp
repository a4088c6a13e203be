//===- main.cpp - Running a sluice spec from C++ --------------------------===//
//
// sluice_example SPEC [NPY_DIR]
//
// Opens the spec with sluice::Pipeline (checked and compiled, its value-wise
// steps generated as native kernels), applies the spec's schedule
// (`schedule: auto`: the autotuner's, probed or from the schedule cache),
// then pulls every batch and prints its fields' types and a digest of their
// bytes. With NPY_DIR it also writes each numeric field as NPY_DIR/
// <batch:06d>.<field>.npy, the files `sluice run SPEC --sink npy:DIR`
// writes, so the two can be compared byte for byte.
//
//===----------------------------------------------------------------------===//
#include "sluice/Pipeline.h"
#include "sluice/runtime/Sink.h"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

namespace {

/// FNV-1a over a tensor's bytes: enough to tell two outputs apart.
uint64_t digest(const sluice::Tensor &t) {
  const auto *p = static_cast<const unsigned char *>(t.raw());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < t.nbytes(); ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: sluice_example SPEC [NPY_DIR]\n";
    return 2;
  }
  sluice::OpenOptions opts;
  opts.diagnostics = &std::cerr; // spec errors with line, column and caret
  auto opened = sluice::Pipeline::open(argv[1], opts);
  if (!opened) {
    std::cerr << opened.status().message() << "\n";
    return 2;
  }
  sluice::Pipeline &pipeline = **opened;
  // Generates the kernels and, for `schedule: auto`, tunes the schedule.
  if (sluice::Status s = pipeline.prepare(); !s) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  std::cout << "pipeline " << pipeline.plan().name << ": "
            << pipeline.generatedKernels() << " generated kernels, schedule "
            << (pipeline.autoSchedule() ? "tuned by schedule: auto"
                                        : "as written")
            << "\n";
  sluice::runtime::Batch batch;
  int64_t n = 0;
  for (;; ++n) {
    sluice::Expected<bool> more = pipeline.next(batch);
    if (!more) {
      std::cerr << "error: " << more.status().message() << "\n";
      return 1;
    }
    if (!*more)
      break;
    std::cout << "batch " << n << ":";
    const sluice::RecordType &type = batch.type();
    for (size_t i = 0; i < batch.numFields(); ++i) {
      const sluice::Tensor &t = batch.field(i);
      const std::string &name = type.fields()[i].name;
      std::cout << " " << name << " " << sluice::elemTypeName(t.elem()) << "[";
      for (size_t d = 0; d < t.shape().size(); ++d)
        std::cout << (d ? "," : "") << t.shape()[d];
      std::cout << "]";
      if (!t.isNumeric())
        continue;
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx",
                    static_cast<unsigned long long>(digest(t)));
      std::cout << " " << hex;
      if (argc == 3) {
        char file[32];
        std::snprintf(file, sizeof file, "%06lld.", static_cast<long long>(n));
        std::string path = std::string(argv[2]) + "/" + file + name + ".npy";
        if (sluice::Status s = sluice::runtime::writeNpy(path, t); !s) {
          std::cerr << "error: " << s.message() << "\n";
          return 1;
        }
      }
    }
    std::cout << "\n";
  }
  sluice::runtime::RunStats stats = pipeline.stats();
  std::cout << n << " batches, " << stats.records() << " records read\n";
  return 0;
}
