//===- Stats.h - Per-stage counters of a running pipeline -------*- C++ -*-===//
//
// Every stage counts what it reads and what becomes of it, in its input
// units (records, or batches for a stage after `batch`):
//
//   read = emitted + filtered + skipped + failed + discarded
//
//  - emitted:   passed downstream (for batch: records placed in batches),
//  - filtered:  dropped by design (a false `where`, shard, skip,
//               drop_remainder), with the reason,
//  - skipped:   bad data dropped under `on_error: skip`, by reason,
//  - failed:    the record that stopped the run under `on_error: fail`,
//  - discarded: still in the stage's buffers when the run stopped early
//               (a `take`, or the consumer stopped reading).
//
// The engine checks the equation for every stage at the end of every run.
// The same counters, plus time, bytes and buffer occupancy, are what
// `--stats` prints and what the autotuner reads (toJson()).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_STATS_H
#define SLUICE_RUNTIME_STATS_H

#include "sluice/ops/Status.h"
#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sluice::runtime {

/// A snapshot of one stage's counters.
struct StageStats {
  std::string
      name;       ///< step name ("decode_image", "map.2"), or "<step>/prefetch"
  std::string op; ///< registry op, or "prefetch"/"cache" for inserted buffers
  std::string kind;        ///< "source", "element", "record", "buffer"
  std::string where;       ///< "spec.yaml:12:5"
  int64_t parallelism = 1; ///< workers (1 for stages that run inline)

  // Accounting, in input units.
  int64_t read = 0;
  int64_t emitted = 0;
  int64_t filtered = 0;
  std::string filterReason; ///< why this stage filters ("where is false")
  std::vector<std::pair<std::string, int64_t>> skipped; ///< by reason
  /// Things a person should know that are not errors (an empty input file,
  /// the rest of a file dropped under on_error: skip); the first few, and
  /// how many more there were.
  std::vector<std::string> warnings;
  int64_t warningsMore = 0;
  int64_t failed = 0;
  int64_t discarded = 0;

  // Throughput.
  int64_t elementsIn = 0;  ///< = read
  int64_t elementsOut = 0; ///< what the stage produced (batches for batch)
  int64_t bytesIn = 0;
  int64_t bytesOut = 0;
  /// CPU time of the stage's own work: thread CPU clocks of the workers
  /// for parallel steps (shared among fused steps by their wall time); for
  /// stages that run inline, their own wall time (reading the thread CPU
  /// clock per record would cost more than many steps do).
  double cpuSeconds = 0;
  /// The part of cpuSeconds that ran on the pool's workers for a stage
  /// that otherwise runs on one thread (the source's files read ahead on
  /// the arena): work that scales with the threads, not serial work.
  double poolCpuSeconds = 0;
  /// CPU time of the thread of its own the stage runs (a parallel step's
  /// feeder, which pulls every upstream record; a prefetch's producer),
  /// from that thread's CPU clock; 0 for stages without one. With
  /// RunStats::consumerCpuSeconds these are the pipeline's serial threads.
  double threadCpuSeconds = 0;
  /// Wall time of the stage's own work, summed over workers, excluding the
  /// time spent waiting for its input.
  double wallSeconds = 0;

  // Buffer occupancy (stages with a queue, window or buffer).
  int64_t bufferCapacity = 0; ///< records (0: the stage has no buffer)
  int64_t occupancySamples = 0;
  double occupancyMean = 0;
  int64_t occupancyMax = 0;
  int64_t bufferBytesPeak = 0;

  /// batch: records the map stage before it had already written into their
  /// rows of the batch buffer (RunOptions::batchRowPlacement).
  int64_t rowsInPlace = 0;
  /// batch: rows a step wrote its result straight into (direct output,
  /// RunOptions::directOutput), a subset of rowsInPlace.
  int64_t rowsDirect = 0;
  /// batch: rows copied from runs of rows held as columns instead of from
  /// records (RunOptions::recordRuns).
  int64_t rowsFromRuns = 0;
  /// Parallel step: times one of its workers gave its arena slot to a
  /// task waiting for one after a slice (RunOptions::arenaSlicing).
  int64_t slotsGiven = 0;

  /// cache: the source records its replayed passes stand for (each replay
  /// pass counts the source records read while it was recorded, spread
  /// over the records it serves). Not part of the accounting equation.
  int64_t replayedSourceRecords = 0;
  /// Records kept after a repair, by reason (`encoding: replace` turning
  /// invalid UTF-8 into U+FFFD). Not part of the accounting equation: a
  /// repaired record is also counted as emitted.
  std::vector<std::pair<std::string, int64_t>> repaired;

  int64_t skippedTotal() const;
  bool balanced() const {
    return read == emitted + filtered + skippedTotal() + failed + discarded;
  }
  /// "read 1000 = emitted 896 + filtered 104 (drop_remainder) + skipped 2
  /// (2 decode_image: corrupt JPEG data)".
  std::string accountingLine() const;
  /// The counters as JSON (include <nlohmann/json.hpp> to use it).
  nlohmann::ordered_json toJson() const;
};

/// A snapshot of a whole run.
struct RunStats {
  std::string pipeline;
  int64_t epochsDone = 0;
  int64_t epochs = 0;
  int64_t threads = 0;
  double wallSeconds = 0;
  int64_t outputs = 0; ///< elements the pipeline emitted (batches)
  /// CPU time of the threads that called next() (the consumer: it runs the
  /// inline stages, such as batch, shuffle and select), from their CPU
  /// clocks.
  double consumerCpuSeconds = 0;
  int64_t outputBytes = 0;
  int64_t memoryLimit = 0; ///< 0: no budget
  int64_t memoryPeak = 0;
  /// processMemoryPeak() when the stats were taken: at least memoryPeak;
  /// more when another pipeline of the process (a schedule probe) held
  /// more.
  int64_t processMemoryPeak = 0;
  /// processBaselineRss() (Memory.h): the process's resident set before its
  /// first pipeline started; 0 when unknown.
  int64_t baselineRss = 0;
  /// currentRss() when the stats were taken (0: unknown).
  int64_t rss = 0;
  /// Bytes the pipeline's buffers reserve now: 0 once the pipeline has
  /// stopped, when every reservation was released. (Idle buffers of the
  /// tensor buffer pool are never reserved: sluice/ops/BufferPool.h.)
  int64_t memoryInUse = 0;
  std::vector<std::pair<std::string, int64_t>> memoryPeaks; ///< per buffer
  std::vector<StageStats> stages; ///< source first, in stream order
  /// Requests to remote objects (s3://, http(s)://) since the pipeline was
  /// built (the process's client is shared: counts of pipelines running
  /// at the same time mix). All zero for local files.
  struct Remote {
    int64_t requests = 0; ///< attempts sent, retries included
    int64_t retries = 0;  ///< attempts repeated after 5xx/429/a broken link
    int64_t failures = 0; ///< requests that failed for good
    int64_t bytes = 0;    ///< body bytes received
    /// Responses received into the kept buffer of a consumed chunk (the
    /// client's body reuse) instead of a fresh one.
    int64_t bodiesReused = 0;
    /// Fresh bodies of 256 KiB and more whose pages were faulted in by one
    /// madvise before the bytes arrived (SLUICE_NO_REMOTE_BODY_POPULATE).
    int64_t bodiesPopulated = 0;
    /// Fresh ranged chunks' bodies of ~2 MiB and more put in a mapping of
    /// their own advised as huge pages (SLUICE_NO_REMOTE_HUGE_BODIES).
    int64_t bodiesMapped = 0;
    /// libcurl's allocations (its transfers' receive buffers) served by a
    /// block it freed before (none unless SLUICE_REMOTE_CURL_BUFFER_REUSE=1).
    int64_t curlBuffersReused = 0;
    /// epoll_ctl calls the client made for its connections' sockets
    /// (SLUICE_NO_REMOTE_LAZY_SOCKETS: two or three a request).
    int64_t socketUpdates = 0;
    /// Transfers finished by the pipeline's own threads (a reader that
    /// waited for its response received it) rather than by the client
    /// thread (none unless SLUICE_REMOTE_WAITER_DRIVES=1).
    int64_t finishedByReaders = 0;
    /// Client threads the process runs (each its own libcurl multi handle
    /// and connections): one per 12 host cores, or
    /// SLUICE_REMOTE_CLIENT_THREADS.
    int64_t clientThreads = 0;
    double medianLatencyMs = 0; ///< to the first byte, recent requests
    int64_t peakInFlight = 0;   ///< most requests in flight at once
    /// Send to last byte (latency + transfer), recent successful requests.
    double medianRequestMs = 0;
    /// The source's setting: requests it keeps in flight (per stream of
    /// ranged chunks, or objects ahead of a per-file source), and whether
    /// the spec pinned it (remote.concurrency) or a schedule chose it.
    int64_t requestsInFlight = 0;
    bool inFlightPinned = false;
    /// Seconds during which at least one response was arriving: `bytes`
    /// over them is the bandwidth received at (the tuner's model of a
    /// windowed source: Profile's RemoteProfile::receiveBytesPerSecond).
    double receiveSeconds = 0;
    /// The bytes of the ranged chunks a sequential source reads its
    /// objects in (the unit of its window of requests in flight); 0 for a
    /// per-file source, which fetches whole objects.
    int64_t chunkBytes = 0;
    /// Fetches of the next epoch's first shards started before the pass
    /// before it ended (no round trip at the epoch boundary), and those
    /// the next pass's readers took.
    int64_t nextPassAhead = 0;
    int64_t nextPassTaken = 0;
    /// The source's listing of s3:// prefixes and patterns as it was made
    /// (Source::listing; before the run, and once for a source a tune and
    /// its run share): requests, keys returned, seconds.
    int64_t listRequests = 0;
    int64_t listedKeys = 0;
    double listingSeconds = 0;
    /// Median latency of recent requests during which no other response
    /// was arriving: the latency without queueing behind other requests.
    double unloadedLatencyMs = 0;
    /// Ranged streams opened over remote objects and their objects' bytes.
    int64_t streams = 0;
    int64_t streamBytes = 0;
    /// Requests sent together (a per-file source's window topped up in a
    /// burst): batches and their requests; and the reader's waits for a
    /// response that had not arrived, which shrink the bursts.
    int64_t bursts = 0;
    int64_t burstRequests = 0;
    int64_t readerStalls = 0;
    /// The on-disk cache of fetched objects (remote.cache): objects read
    /// from it (the server said 304 Not Modified), fetched (and stored),
    /// fetched again because their ETag changed, bytes read from it and
    /// stored in it, entries evicted for the size bound, and entries
    /// dropped as damaged (wrong size or CRC).
    struct Cache {
      int64_t hits = 0, misses = 0, stale = 0, bytesRead = 0, bytesStored = 0,
              evictions = 0, damaged = 0;
    } cache;
  } remote;

  /// The stall meter: the caller's side of next(). `wait` is time the
  /// caller spent inside next() (its thread blocked on the pipeline, the
  /// inline stages' work on that thread included); `away` is time between
  /// an output's return and the next call (the caller's own work: a
  /// training step). The first output's wait is the start-up latency and is
  /// kept apart. An output is a stall when the caller waited for it longer
  /// than kStallSeconds. Headspace is the away time before outputs that came
  /// without a stall: time the caller spent on its own work while the
  /// pipeline kept up, an upper bound on how long the pipeline sat idle
  /// because the caller was slow. A pipeline with no stalls and headspace
  /// needs no more cores; one with stalls starves its caller for
  /// waitSeconds.
  struct Consumer {
    static constexpr double kStallSeconds = 0.001;
    int64_t outputs = 0;         ///< outputs handed to the caller
    double firstWaitSeconds = 0; ///< from the first next() to its output
    double waitSeconds = 0;      ///< in next(), outputs after the first
    double maxWaitSeconds = 0;   ///< the longest of those waits
    int64_t stalls = 0;          ///< of those, waits over kStallSeconds
    double awaySeconds = 0;      ///< between outputs, in the caller
    double headspaceSeconds = 0; ///< away time before outputs not stalled
    /// Mean wait per output after the first (0 before the second).
    double meanWaitSeconds() const {
      return outputs > 1 ? waitSeconds / double(outputs - 1) : 0;
    }
  } consumer;

  /// The records the run went through, in source records: those read from
  /// the source, plus those that passes served from a cache stand for
  /// (StageStats::replayedSourceRecords). The same with or without a cache,
  /// so records/s (the progress and final lines, `sluice bench`) compares
  /// across runs; see docs/reliability.md.
  int64_t records() const;

  /// The counters as JSON (the autotuner's input; include
  /// <nlohmann/json.hpp> to use it).
  nlohmann::ordered_json toJson() const;
  /// toJson() as text (one line unless `pretty`); bytes that are not UTF-8
  /// (reasons may quote the data) become U+FFFD instead of throwing.
  std::string jsonText(bool pretty = false) const;
  /// The `--stats` table: one row per stage.
  std::string table() const;
  /// One accounting line per stage.
  std::string accounting() const;
  /// Every stage's warnings, in stage order, each "sluice: warning: ..."
  /// line.
  std::vector<std::string> warnings() const;
  /// An internal-error Status naming every stage whose accounting does not
  /// balance; ok when all do.
  Status checkBalanced() const;
};

/// The stall meter's live counters (RunStats::Consumer): the thread that
/// calls Pipeline::next() marks each call's start and end; snapshot() may
/// run on any thread meanwhile.
class ConsumerMeter {
public:
  /// next() was called at `nowNs` (steady clock).
  void enter(int64_t nowNs);
  /// That call returned at `nowNs`, with an output or not (the end).
  void leave(int64_t nowNs, bool gotOutput);
  RunStats::Consumer snapshot() const;

private:
  // Caller-thread state.
  int64_t enterNs_ = 0, lastReturnNs_ = 0, pendingAwayNs_ = 0;
  // Read by snapshot() from other threads.
  std::atomic<int64_t> outputs_{0}, firstWaitNs_{0}, waitNs_{0}, maxWaitNs_{0},
      stalls_{0}, awayNs_{0}, headspaceNs_{0};
};

/// Live counters of one stage, updated from any thread.
class StageCounters {
public:
  StageCounters(std::string name, std::string op, std::string kind,
                std::string where)
      : name_(std::move(name)), op_(std::move(op)), kind_(std::move(kind)),
        where_(std::move(where)) {}

  const std::string &name() const { return name_; }
  const std::string &op() const { return op_; }
  const std::string &where() const { return where_; }

  std::atomic<int64_t> read{0}, emitted{0}, filtered{0}, failed{0},
      discarded{0}, elementsOut{0}, bytesIn{0}, bytesOut{0}, cpuNs{0},
      wallNs{0}, poolCpuNs{0}, threadCpuNs{0};
  std::atomic<int64_t> occupancySamples{0}, occupancySum{0}, occupancyMax{0};
  std::atomic<int64_t> bufferCapacity{0}, bufferBytesPeak{0};
  std::atomic<int64_t> parallelism{1};
  std::atomic<int64_t> rowsInPlace{0};
  std::atomic<int64_t> rowsDirect{0};
  std::atomic<int64_t> replayedSourceRecords{0};
  std::atomic<int64_t> rowsFromRuns{0};
  std::atomic<int64_t> slotsGiven{0};

  void setFilterReason(std::string r) { filterReason_ = std::move(r); }
  void addSkipped(const std::string &reason, int64_t n = 1);
  /// Counts a record kept after a repair (StageStats::repaired).
  void addRepaired(const std::string &reason, int64_t n = 1);
  /// Records a warning (kept: the first kMaxWarnings; counted: all).
  void addWarning(std::string message);
  static constexpr size_t kMaxWarnings = 20;
  void sampleOccupancy(int64_t occupancy);
  void notePeakBytes(int64_t bytes);

  StageStats snapshot() const;

private:
  std::string name_, op_, kind_, where_;
  std::string filterReason_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> skipped_;
  std::map<std::string, int64_t> repaired_;
  std::vector<std::string> warnings_;
  int64_t warningsMore_ = 0;
};

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_STATS_H
