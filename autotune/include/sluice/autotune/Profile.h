//===- Profile.h - What a short probe run measured about each stage -*- C++
//-*-===//
//
// The autotuner's input. A profile is taken by running the pipeline briefly
// (bounded by seconds and by source records) at a few probe parallelisms and
// reading the runtime's per-stage counters (sluice/runtime/Stats.h) at a
// fixed interval: per step the wall and CPU time of its own work per element,
// elements in and out (selectivity), bytes per element in and out, buffer
// occupancy, and the variability of its rate between intervals; for the
// pipeline the source's I/O rate and the throughput of every probe.
//
// Everything here is plain data, so the model and the solver can be tested
// on synthetic profiles with known answers (tests/unit/autotune_*_test.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_PROFILE_H
#define SLUICE_AUTOTUNE_PROFILE_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::autotune {

/// A schedule keyed by step name (sluice/ops/Schedule.h).
using sluice::Schedule;

/// One measured point of a parallel stage's scaling.
struct ScalingSample {
  int64_t parallelism = 1;
  /// Seconds of its own work per source record, summed over its workers.
  double secondsPerRecord = 0;
};

/// One plan stage (the source or a step; a fused step is one stage whose
/// name joins its spec steps with '+').
struct StepProfile {
  std::string name;
  std::string op;
  std::string where;                  ///< "spec.yaml:12:5"
  std::vector<std::string> specSteps; ///< the spec steps it stands for
  bool source = false;
  bool perRecord = false; ///< fused into map stages by the runtime
  bool element = false;   ///< an element op (makes its map stage parallel)
  /// Draws random numbers or reorders (shuffle): no cache may follow it,
  /// and nothing after it is deterministic.
  bool stochastic = false;
  /// The knobs the plan pins on the step (its PlanStep::schedule); an
  /// unset knob is the tuner's to choose. A cache of "none" pins no cache
  /// after the step (a re-plan keeps the run's buffers where they are).
  StepSchedule pinned;
  /// Whether the plan pins a cache (memory or disk) after the step.
  bool pinsCache() const { return pinned.cache && *pinned.cache != "none"; }
  /// Starts a new thread of its own (a `prefetch` record op).
  bool threadBoundary = false;

  /// Input records the stage holds at most by design (a shuffle buffer, two
  /// batches being assembled): counted in full against the memory budget.
  int64_t heldRecords = 0;

  double visits = 1;      ///< input elements per source record
  double selectivity = 1; ///< elements out per element in
  double bytesIn = 0;     ///< per input element
  double bytesOut = 0;    ///< per output element
  /// Seconds of own work per input element at parallelism 1 (wall time for
  /// inline stages, thread CPU + wait for parallel ones).
  double secondsPerElement = 0;
  /// CPU seconds per input element.
  double cpuPerElement = 0;
  /// The part of cpuPerElement a stage that runs on one thread had done on
  /// the pool's workers (the source's files read ahead): it competes for
  /// the cores but does not load the stage's own thread.
  double poolCpuPerElement = 0;
  /// Coefficient of variation of the stage's rate between sampling
  /// intervals (0 when too few samples).
  double rateCv = 0;
  double occupancyMean = 0;
  int64_t bufferCapacity = 0;
};

/// One probe run.
struct Probe {
  std::string label;       ///< "p=1", "tuned", ...
  int64_t parallelism = 0; ///< of every free parallel stage (0: a schedule)
  double seconds = 0;      ///< measured window (after warm-up)
  double sourceRecordsPerSecond = 0;
  double outputsPerSecond = 0;
  int64_t memoryPeak = 0; ///< budget-accounted bytes
  int64_t sourceRecords = 0;
  /// CPU seconds the whole process used in the window (getrusage), so
  /// overheads no stage counter sees (hand-offs, allocation) are counted.
  double processCpuSeconds = 0;
  /// Elements the plan's last step read in the window: with a cache the
  /// source stops reading after the first epoch, so throughput after a
  /// cache is counted here (in source-record equivalents: / its visits).
  int64_t lastStepInputs = 0;
  /// Seconds from the first next() to the first output beyond the work the
  /// records read by then took at the measured rate: opening and reading
  /// headers, decompressing an idx file, starting threads (-1: no output).
  double startupSeconds = -1;
};

/// A source that reads remote objects (s3://, http(s)://), as the probes
/// saw it. Such a source is I/O-bound, not CPU-bound: a request takes its
/// latency plus its transfer whatever the cores do, so the records/s it
/// can serve with N requests in flight is, by Little's law,
/// N / (requestsPerRecord x requestSeconds).
struct RemoteProfile {
  double requestsPerRecord = 0; ///< 0: the source read nothing remote
  double requestSeconds = 0;    ///< median, send to last byte
  double latencySeconds = 0;    ///< median, send to first byte
  double bytesPerRequest = 0;
  int64_t probeInFlight = 0; ///< what the probes ran with
  int64_t pinned = 0;        ///< the spec's remote.concurrency (0: free)
  int64_t requests = 0;      ///< behind the figures
  /// A sequential source's ranged chunk (the unit of its window of
  /// requests in flight); 0 for a per-file source (whole objects).
  double chunkBytes = 0;
  /// Bytes per second received while at least one response was arriving:
  /// what the client's requests deliver together, whatever their sizes and
  /// however many ran at once (0: not measured).
  double receiveBytesPerSecond = 0;
  /// Latency of requests that did not wait behind other responses (median
  /// of those sent and answered while no other response arrived); 0: not
  /// measured (latencySeconds then).
  double unloadedLatencySeconds = 0;
  /// A windowed source's mean object (shard) size; 0: not measured.
  double objectBytes = 0;
  bool present() const { return requestsPerRecord > 0 && requestSeconds > 0; }
  /// A sequential source reading windows of ranged chunks, modelled in
  /// bytes (windowedInFlightFor), not in requests.
  bool windowed() const { return present() && chunkBytes > 0; }
  /// Source bytes fetched per source record.
  double bytesPerRecord() const { return bytesPerRequest * requestsPerRecord; }
};

/// A whole profile.
struct Profile {
  std::string pipeline;
  std::string specFile;
  int64_t hostCores = 1;
  int64_t epochs = 1; ///< of the plan (-1: endless)
  /// Whether the runs write batch rows in place (RunOptions::
  /// batchRowPlacement and no SLUICE_NO_BATCH_PLACEMENT): the solver offers
  /// no prefetch between a lane and a batch it fills while it is on.
  bool batchRowPlacement = true;
  /// Source records per epoch, when the source knows.
  std::optional<int64_t> sourceRecordsPerEpoch;
  double sourceBytesPerSecond = 0; ///< the source's read rate
  /// The source's remote requests (absent for local files).
  RemoteProfile remote;
  double outputsPerSourceRecord = 1;
  std::vector<StepProfile> steps; ///< source first, stream order
  /// Per plan step index: its measured scaling, for parallel steps.
  std::map<size_t, std::vector<ScalingSample>> scaling;
  std::vector<Probe> probes;
  /// Bytes the pipeline's buffers hold besides the reorder windows and
  /// prefetch queues the tuner sizes (shuffle buffer, batches...).
  int64_t fixedMemoryBytes = 0;
  /// Sequential write+read bandwidth of the disk cache directory.
  double diskBytesPerSecond = 0;
  /// Seconds per byte to fault in fresh memory (anonymous pages written the
  /// first time: the kernel's fault and zeroing), measured once per
  /// profile. A prefetch queue's buffers are touched the first time once per
  /// run: ~0.2-0.5 ns/B on a bare host, ~5 ns/B (22 us per 4 KiB page) on
  /// the 2-core VM the project is built on. 0: not measured (synthetic
  /// profiles): no cost.
  double freshMemorySecondsPerByte = 0;
  int64_t diskFreeBytes = 0;
  /// Counter cost per source record / work per source record.
  double counterOverhead = 0;
  double seconds = 0; ///< spent profiling
  /// A run's fixed start-up cost (median of the probes'
  /// Probe::startupSeconds): a short run's average rate is its records
  /// over this plus records / steady-state throughput.
  double startupSeconds = 0;
  /// Process CPU seconds per source record at parallelism 1, and its ratio
  /// to the CPU the stage counters account for (>= 1).
  double processCpuPerRecord = 0;
  double cpuOverheadFactor = 1;
  /// Measured / modelled throughput, median over the probes: the model's
  /// absolute level is set by what the probes achieved on this host (time
  /// no counter sees: thread hand-offs, wake-ups, other processes on a
  /// loaded machine); the model itself decides the relative merits of
  /// configurations. 1 for a synthetic profile.
  double calibration = 1;
  /// The same ratio per probe level (the parallelism every free parallel
  /// stage ran at), median over that level's windows. What no counter sees
  /// differs by level: at p = cores the workers share the cores with the
  /// source's and the consumer's threads and hand off more, and on a loaded
  /// host other processes take a different share of a 1-thread and of a
  /// many-thread pipeline. predict() uses the level of the configuration
  /// (calibrationAt); empty: `calibration` everywhere.
  std::map<int64_t, double> calibrationByLevel;
  /// Prefetch depths the probes ran with, per plan step index (the buffers
  /// the calibration already includes; predict() credits a configuration
  /// only with the buffering it has beyond them).
  std::map<size_t, int64_t> probePrefetch;
  /// Source records per epoch estimated from the size of the source's files
  /// and the bytes read per record, for a source that cannot count them
  /// (csv, text lines, tfrecord): used for the whole-run average
  /// (wholeRunThroughput), never to size a cache.
  std::optional<int64_t> estimatedRecordsPerEpoch;
  /// Source records per epoch: counted by the source, else estimated.
  std::optional<int64_t> recordsPerEpoch() const {
    return sourceRecordsPerEpoch ? sourceRecordsPerEpoch
                                 : estimatedRecordsPerEpoch;
  }
  /// Measured / modelled rate of a cached run's later epochs (only the
  /// lanes after the cache run, fed by it), from a probe that ran the
  /// chosen cached schedule past its first epoch (tune(),
  /// TuneOptions::probeCachedEpochs); predict() uses it for that phase
  /// instead of the probe level's calibration. 0: not measured. The
  /// uncached probes cannot tell it: what they miss is mostly a cost per
  /// item handed between threads, a small share of a record's time while
  /// the costly prefix runs and a large one when the cache feeds a few
  /// microseconds of work per record.
  double cachedCalibration = 0;
  /// The cached epochs' measured rate (source records/s) behind it.
  double cachedMeasured = 0;
  /// Measured / modelled rate of a cached run's first epoch (everything
  /// runs and the cache is written), from the same probe run as
  /// cachedCalibration (its first epoch, less Profile::startupSeconds);
  /// predict() uses it for that phase instead of the probe level's
  /// calibration. 0: not measured. The uncached probes miss what only the
  /// cached schedule does in its first epoch: keeping every record (its
  /// buffers are not reused, so the stage before the cache allocates
  /// afresh), the cache stage's bookkeeping and budget accounting, and the
  /// parallel stages on either side of the cache sharing the cores and the
  /// runtime's task slots.
  double firstCalibration = 0;
  /// The first epoch's measured rate (source records/s) behind it.
  double firstMeasured = 0;
};

/// How to profile.
struct ProfileOptions {
  /// Seconds per probe level, split over `rounds` interleaved windows. Three
  /// windows per level: the per-level calibration is their median, which
  /// drops one window a burst of other processes' load hit (with two it is
  /// their mean).
  double secondsPerProbe = 1.5;
  int rounds = 3;
  int64_t maxRecordsPerProbe = 4000000;
  /// A bound on the whole profile's wall time (0: none), for `schedule:
  /// auto` before a run's first batch: the windows shrink to share it, and
  /// once it has passed the windows left are dropped (each probe level keeps
  /// at least one).
  double totalSeconds = 0;
  /// Probe parallelisms; empty: 1 and the core budget (and 4 between when
  /// the budget is over 4).
  std::vector<int64_t> parallelisms;
  int64_t cores = 0; ///< 0: the plan's budget or the host
  /// binder, memory, tempDir... (epochs, schedule and sink are set here).
  runtime::RunOptions base;
  /// "decode_image" -> "spec.yaml:7:5" for spec steps (fused names are split
  /// on '+').
  std::map<std::string, std::string> specWhere;
};

/// What the tuner knows of `plan`'s steps before it measures them, the
/// source first: op, kind, randomness, thread boundaries, held records and
/// the schedule's pinned knobs (profilePipeline measures the rest).
std::vector<StepProfile>
describeSteps(const runtime::Plan &plan,
              const std::map<std::string, std::string> &specWhere = {});

/// Runs `plan` at the probe parallelisms and measures it.
Expected<Profile> profilePipeline(const runtime::Plan &plan,
                                  const ProfileOptions &opts);

/// Runs `plan` with `schedule` for up to `seconds` / `maxRecords` source
/// records and measures its steady-state throughput (one Probe), sampling
/// the counters every 50 ms. `samples` (optional) receives the snapshots.
Expected<Probe> measure(const runtime::Plan &plan,
                        const runtime::RunOptions &opts, double seconds,
                        int64_t maxRecords,
                        std::vector<runtime::RunStats> *samples = nullptr);

} // namespace sluice::autotune

#endif // SLUICE_AUTOTUNE_PROFILE_H
