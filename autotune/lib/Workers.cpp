//===- Workers.cpp - How many `sluice serve` workers a trainer needs ------===//
//
// Pecan's AutoPlacement for one trainer (docs/distributed.md): the trainer's
// demand (records/s: `sluice tune --demand`, or the stall meter of a run
// with the real consumer, `--consumer`) against what the pipeline makes. The
// trainer host's input cores make what the tuned schedule predicts for
// them; run as a worker of its own (`sluice serve --listen 127.0.0.1:PORT`
// in the trainer's worker list), they take chunks at their pace, and remote
// workers of C cores make the rest, each at the rate the profile, solved
// again for C cores, predicts: the same model that chose the schedule, so
// serial stages and their limits carry over to a worker's size. Chunks
// are pulled by whichever worker is free, so the split follows the rates
// with no configuration beyond the worker list.
//
// Receiving is not free: every record a remote worker makes costs the
// trainer's host CPU to take off the socket (two copies of each byte and
// the TCP stack's work: about 40 ms of a core per f32 batch of 77 MB on the
// measured host), and those cores are taken from its own worker. The split
// solves for that: remote workers make X records/s, receiving them takes
// X * r of the c cores here (r: receiving CPU per record, modelled from
// the output's bytes), the local worker makes L * (c - X * r) / c of its
// full rate L, and the two meet the demand D:
//   X = (D - L) / (1 - L * r / c),  feasible while D * r <= c
// (past that the trainer's cores cannot receive the demand at all: the
// advice says so and what makes outputs smaller). What the model leaves
// out: the network's own rate (the output bytes per record are in the
// advice, to divide into the link's rate).
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Tune.h"

#include "Format.h"

#include "sluice/runtime/Memory.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <time.h>
#include <vector>

namespace sluice::autotune {

using detail::fmt;

namespace {

std::string cores(int64_t n) {
  return std::to_string(n) + (n == 1 ? " core" : " cores");
}

} // namespace

Status adviseWorkers(TuneResult &r, double demand,
                     const std::string &demandFrom, int64_t coresPerWorker,
                     double receiveCost) {
  if (!(demand > 0) || !std::isfinite(demand))
    return Status::error("the demand must be a positive number of records "
                         "per second, got " +
                         fmt(demand, "%g"));
  TuneResult::WorkerAdvice a;
  a.demand = demand;
  a.demandFrom = demandFrom;
  a.localCores = r.budget.cores;
  a.localRate = r.solution.prediction.throughput;
  a.coresPerWorker = coresPerWorker > 0 ? coresPerWorker : r.budget.cores;
  if (a.coresPerWorker == r.budget.cores) {
    a.workerRate = a.localRate;
  } else {
    Budget b = r.budget;
    b.cores = a.coresPerWorker;
    Expected<Solution> s = solveConfig(r.profile, b);
    if (!s)
      return Status::error("solving for a worker of " +
                           std::to_string(a.coresPerWorker) +
                           " cores: " + s.status().message());
    a.workerRate = s->prediction.throughput;
  }
  if (!(a.workerRate > 0) || !std::isfinite(a.workerRate))
    return Status::error("the model predicts no finite rate for a worker "
                         "of " +
                         std::to_string(a.coresPerWorker) + " cores");
  double cpu = r.profile.processCpuPerRecord;
  if (r.measured && r.measured->sourceRecords > 0 &&
      r.measured->processCpuSeconds > 0)
    cpu = r.measured->processCpuSeconds /
          static_cast<double>(r.measured->sourceRecords);
  a.cpuCores = cpu > 0 ? demand * cpu : 0;
  double outputBytes = 0;
  if (!r.profile.steps.empty()) {
    outputBytes = r.profile.steps.back().bytesOut;
    a.wireBytesPerRecord = outputBytes * r.profile.outputsPerSourceRecord;
  }
  if (a.wireBytesPerRecord > 0) {
    a.receiveSecondsPerByte =
        receiveCost >= 0 ? receiveCost : receiveSecondsPerByte();
    a.receiveSecondsPerRecord = a.wireBytesPerRecord * a.receiveSecondsPerByte;
  }
  double c = static_cast<double>(a.localCores);
  double rcv = a.receiveSecondsPerRecord;
  a.receiveLimit = rcv > 0 ? c / rcv : 0;
  bool canReceive = rcv <= 0 || demand * rcv <= c;
  if (demand > a.localRate) {
    // The split: remote X, local L (1 - X r / c), X = (D - L) / (1 - L r / c).
    double keep = 1 - a.localRate * rcv / c;
    a.remoteRate = canReceive && keep > 0
                       ? std::min(demand, (demand - a.localRate) / keep)
                       : demand;
  }
  a.receiveCores = a.remoteRate * rcv;
  double localShare = demand - a.remoteRate;
  a.remoteWorkers =
      a.remoteRate > 0
          ? static_cast<int64_t>(std::ceil(a.remoteRate / a.workerRate))
          : 0;
  a.workersAlone = static_cast<int64_t>(std::ceil(demand / a.workerRate));

  std::string s = "Workers: the trainer takes " + fmt(demand) + " records/s (" +
                  demandFrom + "); " + cores(a.localCores) + " here make " +
                  fmt(a.localRate) + " records/s (predicted), a worker of " +
                  cores(a.coresPerWorker) + " " + fmt(a.workerRate) +
                  " records/s. ";
  if (a.remoteWorkers == 0)
    s += "The cores here keep up (" + fmt(a.localRate / demand, "%.2f") +
         "x the demand): no remote workers needed.";
  else if (!canReceive)
    s += "Receiving " + fmt(demand) + " records/s would take " +
         fmt(demand * rcv, "%.1f") + " cores here, more than the " +
         cores(a.localCores) + " (at most " + fmt(a.receiveLimit) +
         " records/s): make the outputs smaller (a u8 output is a quarter of "
         "an f32 one; normalize on the accelerator) or give the trainer more "
         "cores; " +
         std::to_string(a.workersAlone) + " workers of " +
         cores(a.coresPerWorker) + " would make the demand.";
  else
    s += "Run " + std::to_string(a.remoteWorkers) + " remote worker" +
         (a.remoteWorkers == 1 ? "" : "s") + " of " + cores(a.coresPerWorker) +
         " beside a worker on the trainer's host (`sluice serve --listen "
         "127.0.0.1:PORT` with its " +
         cores(a.localCores) + ", in the worker list): " + "it makes " +
         fmt(localShare) + " records/s and the remote ones " +
         fmt(a.remoteRate) + " (" + fmt(100 * localShare / demand, "%.0f") +
         "% / " + fmt(100 * a.remoteRate / demand, "%.0f") + "% of the work)" +
         (rcv > 0 ? ", receiving the remote ones taking " +
                        fmt(a.receiveCores, "%.2f") + " of the cores here"
                  : std::string()) +
         "; " + std::to_string(a.workersAlone) +
         " workers if the trainer's host does none of it.";
  if (a.cpuCores > 0)
    s += " The demand is " + fmt(a.cpuCores, "%.1f") +
         " cores of pipeline work in all";
  if (a.wireBytesPerRecord > 0)
    s += std::string(a.cpuCores > 0 ? ";" : " The") + " outputs of " +
         runtime::formatBytes(static_cast<int64_t>(a.wireBytesPerRecord)) +
         " per record cross the network at " +
         fmt(demand * a.wireBytesPerRecord * 8 / 1e9, "%.2f") +
         " Gb/s (a u8 output is a quarter of an f32 one)";
  if (a.cpuCores > 0 || a.wireBytesPerRecord > 0)
    s += ".";
  if (rcv > 0)
    s += " Receiving costs the trainer " +
         fmt(1e6 * a.receiveSecondsPerRecord, "%.2f") +
         " us of CPU per record" +
         (receiveCost >= 0
              ? std::string(" (--receive-cost).")
              : " (modelled: " + fmt(kReceiveCopies, "%.0f") +
                    " copies of its bytes at this host's memcpy rate; "
                    "Dataset.advice() measures it on a running trainer).");
  a.text = s;
  r.workerAdvice = a;
  return Status::ok();
}

double receiveSecondsPerByte() {
  // Beyond the caches: received bytes stream through memory.
  size_t n = 64 << 20;
  std::vector<uint8_t> from(n, 1), to(n);
  auto cpuNow = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  std::memcpy(to.data(), from.data(), n); // faults the pages in
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    from[static_cast<size_t>(i) % n] = static_cast<uint8_t>(i);
    double t0 = cpuNow();
    std::memcpy(to.data(), from.data(), n);
    times.push_back(cpuNow() - t0);
    // Keeps the copy from being dropped as unused.
    asm volatile("" : : "r"(to.data()) : "memory");
  }
  std::nth_element(times.begin(), times.begin() + 2, times.end());
  return kReceiveCopies * times[2] / static_cast<double>(n);
}

} // namespace sluice::autotune
