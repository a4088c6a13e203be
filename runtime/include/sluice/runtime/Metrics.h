//===- Metrics.h - A run's counters for Prometheus --------------*- C++ -*-===//
//
// `sluice run --metrics-port PORT` (and the executables `sluice compile`
// writes) serve the counters of the running pipeline at
// http://ADDRESS:PORT/metrics in Prometheus' text exposition format, and
// `--metrics-file FILE` writes the same text to a file every few seconds
// (node_exporter's textfile collector reads such files). The stall meter
// (RunStats::Consumer: how long the consumer waited for outputs, its stalls
// and the pipeline's headspace) is the part a training job watches: a
// pipeline whose consumer never waits needs no more cores.
//
// The text is written here, not by a library: Debian has no C++ Prometheus
// client (prometheus-cpp is not packaged; `apt-cache search prometheus`
// lists Go, Perl and Python clients only), and the format is a few lines
// of `name{labels} value` per metric (label values escaped as the format
// says). HTTP is cpp-httplib (Debian's libcpp-httplib-dev).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_METRICS_H
#define SLUICE_RUNTIME_METRICS_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/Stats.h"

#include <functional>
#include <memory>
#include <string>

namespace sluice::runtime {

/// `stats` in Prometheus' text exposition format (version 0.0.4): HELP and
/// TYPE lines, every metric labelled pipeline="NAME", per-stage metrics
/// also stage="STEP".
std::string prometheusText(const RunStats &stats);

/// Serves prometheusText(stats()) over HTTP and/or writes it to a file
/// while a run lasts. stats() is called on the exporter's threads (a
/// Pipeline's stats() is safe from any thread).
class MetricsExporter {
public:
  /// Listens on address:port (port 0: no server) and writes `file` every
  /// `interval` seconds (empty: no file). An error says what could not be
  /// opened (the port in use, a folder that does not exist).
  static Expected<std::unique_ptr<MetricsExporter>>
  start(std::function<RunStats()> stats, const std::string &address, int port,
        const std::string &file, double interval);
  /// Writes the file a last time (the final counters) and stops serving.
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter &) = delete;
  MetricsExporter &operator=(const MetricsExporter &) = delete;
  /// Writes the file now (replaced atomically: a reader never sees half).
  Status writeFile();

private:
  MetricsExporter();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_METRICS_H
