//===- Model.h - Operational analysis of a profiled pipeline ----*- C++ -*-===//
//
// From a Profile, the model predicts what any configuration (parallelism per
// parallel stage, prefetch depths, one cache) would sustain, the way Plumber
// does: each stage's capacity is the source records per second it can serve
// (its cores divided by its seconds of work per source record, i.e. scaled by
// the selectivity of everything before it); the pipeline runs at the minimum
// over stages and over the CPU (all work per record times the rate must fit
// on the cores); that stage is the bottleneck. Parallel stages do not scale
// linearly: their speedup is a Universal Scalability Law curve fitted to the
// measured probes by least squares (Eigen). A cache after step i divides the
// work of everything before it by the number of epochs. Buffers are sized
// from the measured variability of the rate feeding them (how many items a
// dip costs), where tf.data's model reasons with M/M/1/K buffer waits.
//
// The model's stages are the runtime's lanes (runtime::lanes): the workers of
// one parallel map stage, or the stages one thread runs in turn. Every figure
// maps back to plan steps and, through them, to spec lines.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_AUTOTUNE_MODEL_H
#define SLUICE_AUTOTUNE_MODEL_H

#include "sluice/autotune/Profile.h"
#include "sluice/runtime/StageGroups.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::autotune {

/// Universal Scalability Law: speedup(p) = p / (1 + sigma (p-1) + kappa p
/// (p-1)).
struct Usl {
  double sigma = 0; ///< contention
  double kappa = 0; ///< coherency
  double speedup(double p) const;
  /// The parallelism where the curve peaks (infinity when kappa is 0).
  double peak() const;
};

/// Least-squares fit of (sigma, kappa) >= 0 to measured speedups; with one
/// point beyond p = 1, kappa stays 0 (the data cannot tell them apart).
/// `samples` are (p, seconds per record at p); the p = 1 point is required.
Usl fitUsl(const std::vector<ScalingSample> &samples);

/// What one thread (or the workers of one parallel map stage) runs: the
/// runtime's lane (runtime/StageGroups.h), the model's unit of capacity.
using runtime::Lane;

/// "decode_image, random_flip": the plan steps of a lane, for reports.
std::string laneLabel(const Profile &p, const Lane &u);

/// Where a cache may go.
struct CacheOption {
  int64_t after = -1; ///< plan step index; -1 = no cache
  std::string to;     ///< "memory" or "disk"
  int64_t bytes = 0;  ///< materialized size of the stream there, one epoch
};

/// A configuration the model evaluates and the solver chooses.
struct Config {
  /// Per lane (as returned by lanes() for this config's cache), its
  /// parallelism (1 for serial lanes).
  std::vector<int64_t> parallelism;
  /// Prefetch depth per plan step index (only the buffered ones).
  std::map<size_t, int64_t> prefetch;
  CacheOption cache;
  /// Requests a remote source keeps in flight (0: unbounded, as when the
  /// solver compares the rest of a configuration; the source is local).
  int64_t sourceInFlight = 0;
};

/// Records/s a remote source serves with `inFlight` requests in flight
/// (Little's law: in-flight = rate x time per request, so rate =
/// inFlight / (requests per record x seconds per request)); infinite for a
/// local source or inFlight 0.
double remoteCapacity(const Profile &p, int64_t inFlight);

/// Headroom over Little's mean: request times vary (a slow request holds
/// its slot while later ones wait behind it in order), so the requests the
/// mean needs do not keep the reader fed at every moment.
constexpr double kInFlightHeadroom = 1.5;
/// Most requests in flight the tuner chooses (the client keeps at most 256
/// connections).
constexpr int64_t kMaxInFlight = 256;
/// Fewest requests in flight the tuner gives a per-file remote source
/// (image_folder, files over s3:// or http(s)://; in the profile, about a
/// request a record, RemoteProfile::requestsPerRecord >= 0.5): a window
/// that deep lets the source send its requests in bursts however little
/// latency there is to hide (the runtime's RequestBursts: with no added
/// latency, image_folder over s3:// spent 0.94-0.96x local's CPU per
/// record at 16 and 32 against 0.93-0.94x at 8, bench/results.md). A
/// budget that holds fewer objects still bounds it.
constexpr int64_t kBurstInFlight = 32;
/// Whether that floor applies: the runtime sends requests in bursts
/// (SLUICE_NO_REQUEST_BURSTS unset).
bool requestBurstsOn();

/// The requests in flight that let a remote source serve `rate` records/s:
/// ceil(rate x requests per record x seconds per request x headroom), at
/// least 1 (kBurstInFlight with requestBurstsOn) and at most kMaxInFlight,
/// and no more than `memoryBytes` (>0)
/// holds at the measured bytes per request. 0 for a local source. A
/// windowed source (RemoteProfile::windowed) is chosen in bytes instead:
/// windowedInFlightFor.
int64_t inFlightFor(const Profile &p, double rate, int64_t memoryBytes = 0);

/// A windowed source (a sequential one reading shards in ranged chunks)
/// at N requests in flight holds a window of N chunks of the shard it reads
/// and asks for the first window (N chunks, at most the shard) of each of
/// the N / 2 shards ahead of it (SourceBase::prefetchDepth): those are the
/// bytes it has asked for ahead of its reader, which Little's law in bytes
/// weighs against the consumer's demand (records/s x bytes per record)
/// times the time one such request takes: its latency without queueing
/// plus its bytes at the bandwidth received at. Nothing here reads the
/// probes' requests' own sizes or times, which follow the probes' N.

/// The fewest a windowed source keeps in flight when the tuner chooses: at
/// 4, two shards are asked for ahead of the one read, so one is on its way
/// while the next is opened, and a stream's window holds 4 chunks.
constexpr int64_t kMinWindowedInFlight = 4;

/// Bytes of a windowed source's largest request at `inFlight`: a shard's
/// first window, N chunks, at most the mean shard.
double windowedRequestBytes(const Profile &p, int64_t inFlight);

/// The latency without queueing (RemoteProfile::unloadedLatencySeconds,
/// else latencySeconds).
double unloadedLatency(const Profile &p);

/// Seconds that request takes: the latency without queueing
/// (RemoteProfile::unloadedLatencySeconds, else latencySeconds) plus its
/// bytes at the bandwidth received at.
double windowedRequestSeconds(const Profile &p, int64_t inFlight);

/// Bytes a windowed source has asked for ahead of its reader (and holds) at
/// `inFlight`: its window of chunks plus the first windows of the
/// inFlight / 2 (at least 1) shards ahead.
int64_t windowedBytes(const Profile &p, int64_t inFlight);

/// The fewest requests in flight (at least kMinWindowedInFlight, at most
/// kMaxInFlight) whose bytes ahead cover the demand of `rate` records/s
/// for the time a request takes, x kInFlightHeadroom, and whose first
/// window of a shard is the whole shard or lasts the reader the latency x
/// kInFlightHeadroom (the rest of a larger shard is asked for when its
/// reader opens it, a round trip before it is read); fewer when
/// windowedBytes exceeds `memoryBytes` (>0). remoteCapacity bounds the
/// source by the same two: bytes ahead per request time, and a window per
/// latency while the window is smaller than a shard.
int64_t windowedInFlightFor(const Profile &p, double rate,
                            int64_t memoryBytes = 0);

/// The report's reason for the requests in flight chosen (`chosen`, where
/// `wanted` is the choice without the memory budget's cap) for the `rate`
/// the rest of the pipeline sustains: "source: N requests in flight, M ms
/// median latency (...)". `rateNote` follows the rate (where it came from).
std::string describeInFlight(const Profile &p, double rate, int64_t chosen,
                             int64_t wanted, const std::string &rateNote = "");

/// The lanes of the profile's steps when a cache follows `cacheAfter` (-1:
/// no cache): runtime::lanes of the runtime's stage groups, where a cache
/// ends the map stage it falls in, as the runtime does.
std::vector<Lane> lanes(const Profile &p, int64_t cacheAfter);

/// Steps `par` (one entry per lane of `us`) to the next parallelism vector
/// of an exhaustive enumeration: each free parallel lane in turn counts
/// 1..cores, like an odometer; serial and pinned lanes keep their entry.
/// Returns false once every combination has been visited (`par` then holds
/// 1 for every counting lane again). Used by the solver's refinement and the
/// bench's grid; the unit tests' brute force keeps its own loop on purpose.
bool nextParallelism(const std::vector<Lane> &us, std::vector<int64_t> &par,
                     int64_t cores);

/// Workers that compete for the cores at once under parallelism `par` (per
/// lane of `us`, the lanes of a configuration of `p`). With a cache and at
/// least two epochs, the parallel lanes before the cache and those after it
/// are counted apart and the larger count is returned: the lanes before it
/// run in the first epoch only, so over the run they mostly do not share
/// the cores with the later ones (all the work together stays bounded by
/// the CPU: in a CPU-bound first epoch that bound is what the two sets
/// share). Otherwise all parallel lanes' workers together.
int64_t concurrentWorkers(const Profile &p, const std::vector<Lane> &us,
                          const std::vector<int64_t> &par);

/// Every place a cache may go: after the source or a step, while everything
/// up to it is deterministic and the epoch's size is known; memory and disk.
std::vector<CacheOption> cacheOptions(const Profile &p);

/// Whether no cache may go at or after step `s` whatever came before it:
/// the op keeps records itself (OpTraits::materializes), forbids a cache
/// after it (OpTraits::noCacheAfter), or hands records to another thread.
bool cacheStopsAt(const StepProfile &s);

/// Materialized bytes of the stream after plan step `i` over one epoch (0
/// when the epoch's size is unknown).
int64_t materializedBytes(const Profile &p, size_t i);

/// Seconds of work per source record of lane `u` at parallelism 1.
double laneSeconds(const Profile &p, const Lane &u);
/// The fitted scaling of a parallel lane (its steps' samples summed).
Usl laneUsl(const Profile &p, const Lane &u);

/// Buffered slots a parallel lane's reorder window holds at parallelism p.
int64_t windowSlots(int64_t p, int64_t prefetch);
/// Bytes per slot of a lane's window.
double laneSlotBytes(const Profile &p, const Lane &u);

/// Recommended buffer depth, in items, after a stage whose rate between
/// sampling intervals of `window` seconds varies with coefficient of
/// variation `cv`, at `itemsPerSecond`: enough buffered items to ride out a
/// dip of two standard deviations for one interval, plus one; 1..64.
int64_t queueDepth(double cv, double itemsPerSecond, double window = 0.05);

/// The probe level a configuration corresponds to: the largest parallelism
/// of a parallel lane the spec did not pin (probes set all of them to one
/// level); 0 when there is none (every probe ran the same configuration).
int64_t configLevel(const Profile &p, const Config &c);

/// Profile::calibrationByLevel at `level`: the measured value at a probed
/// level, linear between two probed levels, the nearest one outside them;
/// Profile::calibration when nothing was measured per level or level is 0.
double calibrationAt(const Profile &p, double level);

/// Throughput of two stages in tandem, the upstream one serving `up` items/s
/// and the downstream one `down`, with `slots` buffered items between them
/// (the classic M/M/1/K blocking result, as tf.data's model reasons about
/// buffers): with N = slots + 1 places and rho = up / down,
/// up (1 - rho^N) / (1 - rho^(N+1)), or down N / (N + 1) at rho = 1. Tends to
/// min(up, down) as the buffer grows; without a buffer two equal stages
/// reach half their rate. An infinite side leaves the other's rate.
double tandemThroughput(double up, double down, double slots);

/// How many of a parallel lane's `servers` workers are busy, when work
/// arrives at `offered` workers' worth (its CPU seconds per record times the
/// throughput, in cores): the M/M/c busy-server distribution (index n =
/// P(n busy), n = 0..servers; all busy when offered >= servers). Work comes
/// in bursts (a batch, a run of slots), so workers overlap more often than
/// independent ones would.
std::vector<double> busyWorkers(double offered, int64_t servers);

/// The share of a core a thread that wants to run gets on `cores` cores
/// while the other threads are busy with the given distributions (each a
/// vector of P(n of them busy)): E[min(1, cores / (1 + N))], N the number
/// of others busy, the distributions taken as independent (a fair
/// scheduler shares the cores equally among runnable threads).
double threadShare(const std::vector<std::vector<double>> &others,
                   double cores);

/// Per-lane prediction.
struct LanePrediction {
  std::string label;
  std::vector<size_t> steps;
  bool parallel = false;
  int64_t parallelism = 1;
  double secondsPerRecord = 0; ///< of work, epoch-averaged (cache)
  double capacity = 0;         ///< source records/s it could serve
  double utilization = 0;      ///< predicted throughput / capacity
  int64_t memoryBytes = 0;     ///< its window and prefetch
};

/// What a configuration is predicted to do.
struct Prediction {
  double throughput = 0; ///< source records/s, steady state
  /// Source records/s averaged over the spec's whole run, start-up
  /// included (wholeRunThroughput); = throughput for endless runs or an
  /// unknown epoch size.
  double wholeRun = 0;
  double outputsPerSecond = 0; ///< pipeline outputs/s
  int bottleneck = -1; ///< lane index; -1: the CPU; -2: the source's requests
  std::string bottleneckLabel;
  double cpuCapacity = 0; ///< source records/s all cores could serve
  /// Records/s at which a parallel lane's workers get only the cores the
  /// other threads leave them, or a serial lane's thread only its share of
  /// a core among the runnable threads (infinite when no lane is short of
  /// cores).
  double contentionBound = 0;
  /// Throughput factor from buffering beyond what the probes ran with
  /// (tandemThroughput; 1 with the probes' buffers).
  double bufferFactor = 1;
  /// calibrationAt(configLevel) applied to every capacity.
  double calibration = 1;
  /// With a cache and more than one epoch: the rate of the first epoch
  /// (everything runs and the cache is written) and of the cached epochs
  /// (only what follows the cache runs); `throughput` is the epochs'
  /// records over both phases' times. 0 without a cache.
  double firstEpoch = 0;
  double cachedEpochs = 0;
  int64_t memoryBytes = 0; ///< buffers + memory cache + fixed
  /// Records/s the source's requests in flight serve (remoteCapacity);
  /// infinite for a local source.
  double remoteCapacity = 0;
  int64_t diskBytes = 0;
  std::vector<LanePrediction> lanes;
};

/// A whole run's average rate at steady-state rate `steady`: its source
/// records (epochs x records per epoch) over Profile::startupSeconds plus
/// their time at `steady`. `steady` when the run is endless or the epoch's
/// size unknown.
double wholeRunThroughput(const Profile &p, double steady);

/// Whether a memory cache's first epoch is charged the first touch of the
/// memory it fills (Profile::freshMemorySecondsPerByte a byte);
/// SLUICE_NO_CACHE_TOUCH_COST=1 prices it as a copy alone, as before.
bool cacheTouchCostOn();

/// Evaluates `c` on `cores` cores. `c.parallelism` must match the lanes of
/// `c.cache.after`.
Prediction predict(const Profile &p, const Config &c, int64_t cores);

} // namespace sluice::autotune

#endif // SLUICE_AUTOTUNE_MODEL_H
