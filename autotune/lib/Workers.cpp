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
// What the model does not see: the trainer's own cost of receiving (1-3
// cores for ~13,600 u8 images/s on the measured host), and the network
// (the output bytes per record are in the advice, to divide into the
// link's rate).
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Tune.h"

#include "Format.h"

#include "sluice/runtime/Memory.h"

#include <cmath>

namespace sluice::autotune {

using detail::fmt;

namespace {

std::string cores(int64_t n) {
  return std::to_string(n) + (n == 1 ? " core" : " cores");
}

} // namespace

Status adviseWorkers(TuneResult &r, double demand,
                     const std::string &demandFrom, int64_t coresPerWorker) {
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
  double rest = std::max(0.0, demand - a.localRate);
  a.remoteWorkers =
      rest > 0 ? static_cast<int64_t>(std::ceil(rest / a.workerRate)) : 0;
  a.workersAlone = static_cast<int64_t>(std::ceil(demand / a.workerRate));
  double cpu = r.profile.processCpuPerRecord;
  if (r.measured && r.measured->sourceRecords > 0 &&
      r.measured->processCpuSeconds > 0)
    cpu = r.measured->processCpuSeconds /
          static_cast<double>(r.measured->sourceRecords);
  a.cpuCores = cpu > 0 ? demand * cpu : 0;
  if (!r.profile.steps.empty())
    a.wireBytesPerRecord =
        r.profile.steps.back().bytesOut * r.profile.outputsPerSourceRecord;

  std::string s = "Workers: the trainer takes " + fmt(demand) + " records/s (" +
                  demandFrom + "); " + cores(a.localCores) + " here make " +
                  fmt(a.localRate) + " records/s (predicted), a worker of " +
                  cores(a.coresPerWorker) + " " + fmt(a.workerRate) +
                  " records/s. ";
  if (a.remoteWorkers == 0)
    s += "The cores here keep up (" + fmt(a.localRate / demand, "%.2f") +
         "x the demand): no remote workers needed.";
  else
    s += "Run " + std::to_string(a.remoteWorkers) + " remote worker" +
         (a.remoteWorkers == 1 ? "" : "s") + " of " + cores(a.coresPerWorker) +
         " beside a worker on the trainer's host (`sluice serve --listen "
         "127.0.0.1:PORT` with its " +
         cores(a.localCores) + ", in the worker list): " + "it makes " +
         fmt(a.localRate) + " records/s and the remote ones " + fmt(rest) +
         " (" + fmt(100 * a.localRate / demand, "%.0f") + "% / " +
         fmt(100 * rest / demand, "%.0f") + "% of the work); " +
         std::to_string(a.workersAlone) +
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
  s += " Receiving costs the trainer cores of its own (not modelled here: "
       "Dataset.advice() measures it).";
  a.text = s;
  r.workerAdvice = a;
  return Status::ok();
}

} // namespace sluice::autotune
