//===- Remote.h - sluice workers over gRPC and the trainer's client -*- C++
//-*-===//
//
// Beyond one host (docs/distributed.md): `sluice serve` runs a pipeline's
// work on CPU nodes and streams its outputs to trainers; a trainer reads its
// rank's share of each epoch from any number of such workers and gets the
// bytes a local run at the same rank would give, in the same order.
//
// The unit of work is a run of outputs of the trainer's share ("chunk"):
// outputs [first, first + count) after a base PipelineState that resumes by
// position. A worker resumes the pipeline there (Pipeline::create with
// RunOptions::resume: free for a positional state) and streams the outputs;
// it keeps nothing after the call that the bytes depend on (a pipeline it
// keeps for the trainer's next chunk stands where a resume would start).
// The trainer hands chunks to workers,
// keeps the outputs in order, drops duplicates, and gives a dead worker's
// undelivered outputs to the others, so every output of the share arrives
// exactly once whatever the workers do. Its state after an output is the
// state the worker's pipeline had there: what a local run's state() says.
//
// This library holds the protocol's code (generated from
// proto/sluice_remote.proto) and both ends; it depends on the runtime and
// gRPC, never on the compiler: the caller builds the Plan.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_REMOTE_REMOTE_H
#define SLUICE_REMOTE_REMOTE_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Plan.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::remote {

/// FNV-1a (64 bits) of a spec file's bytes: trainers and workers compare it
/// to be sure they run the same spec. Inline: `sluice compile --serve`
/// records it without linking the gRPC half of this library.
inline uint64_t specDigest(const std::string &text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

/// Makes glibc keep the memory it frees for reuse instead of returning it
/// to the kernel (mallopt: trim threshold 512 MiB, mmap threshold 32 MiB),
/// once per process; called when a worker starts serving and when a trainer
/// connects. gRPC reads the socket into fresh heap buffers of up to 256 KiB
/// per read and frees them once copied out; with glibc's defaults, which
/// trim the heap's top and mmap such blocks after adjusting its threshold,
/// their pages were returned and faulted in again: measured on the 2-core
/// host, 150-2,900 page faults and 58-185 ms of trainer CPU per f32 batch
/// of 77 MB, against no faults and 21-30 ms with the memory kept
/// (docs/distributed.md, "Performance"). The cost is that the process's
/// RSS stays at its high-water mark. SLUICE_NO_MALLOC_TUNING=1 leaves the
/// allocator as it is. Returns whether it changed anything.
bool keepFreedMemory();

/// Whether a worker entry is a DNS name standing for several workers
/// ("dns:///NAME:PORT" or "dns://DNS-SERVER[:PORT]/NAME:PORT").
bool isDnsWorker(const std::string &entry);

/// The workers a DNS entry stands for: "ADDRESS:PORT" for every address the
/// name has (A and AAAA records, IPv6 in brackets), sorted; none when the
/// name has no address. Asks the system's resolvers, or the DNS server the
/// entry names (Discovery.cpp). Errors: a malformed entry, a failed or
/// timed-out lookup.
Expected<std::vector<std::string>> resolveWorkers(const std::string &entry,
                                                  double timeoutSeconds = 2);

/// Credentials shared by both ends.
struct Security {
  /// A shared secret every call must carry (metadata "authorization:
  /// Bearer TOKEN"); empty: none.
  std::string token;
  /// TLS: the server's certificate chain and private key (PEM text), and
  /// for the client the root certificates it trusts (PEM; empty: the
  /// system's roots). Empty cert/key on the server: plaintext.
  std::string tlsCert, tlsKey, tlsRoots;
  /// The client's TLS target name override (tests on 127.0.0.1 with a
  /// certificate for "localhost").
  std::string tlsServerName;
  bool tls = false;
};

/// `sluice serve`: what the worker runs.
struct ServeOptions {
  /// host:port to listen on (never all interfaces unless asked for).
  std::string listen;
  Security security;
  /// Written with the bound address ("127.0.0.1:PORT") once the server
  /// listens (--port-file; PORT 0 asks the system for a free port).
  std::string portFile;
  /// The spec's text digest (specDigest) and the version reported.
  uint64_t specDigest = 0;
  /// Per-trainer statistics on stderr every `statsInterval` seconds (0:
  /// only when the worker stops).
  double statsInterval = 0;
  bool quiet = false;
  /// Streams (chunks of any trainers) the worker runs at once (--streams);
  /// 0: no limit, each chunk's pipeline having the whole budget.memory.
  /// N > 0: the worker's budget is shared: each chunk's pipeline gets
  /// budget.memory / N, and a chunk asked for while N run waits for one
  /// to end. A trainer that stops reading holds its stream's share (its
  /// worker's writes wait for it), so with several trainers on one worker
  /// give N at least the number of trainers.
  int64_t streams = 0;
  /// Outputs shared across trainers (--share-outputs SIZE): a chunk's
  /// outputs are kept, up to this many bytes of their data, keyed by the
  /// plan's fingerprint, the base state and the chunk's first output and
  /// count, which decide every byte of them; another trainer asking for the
  /// same chunk (a job of the same spec at the same rank and world size,
  /// e.g. a hyperparameter search) is sent the kept outputs instead of a
  /// second decode, or waits for the chunk another stream is making. 0:
  /// nothing kept (each chunk is made for its trainer).
  int64_t shareBytes = 0;
};

/// Runs a worker until SIGINT/SIGTERM (or stop() from another thread).
/// `opts` is how each chunk's pipeline runs (threads, memory, schedule,
/// binder). A plan that resumes by position is served by position; one
/// with a shuffle step or a filter by replaying its order (Replay.h).
/// Refuses, before listening, a plan with a step a worker cannot cut at
/// an arbitrary output (take, repeat, a cache, ...), naming the step and
/// what to write instead. Returns an exit code (0 ok, 1 for an error printed to
/// `err`, 2 for a bad address or credentials).
int serve(const runtime::Plan &plan, const runtime::RunOptions &opts,
          const ServeOptions &serveOpts, std::ostream &err);

/// Whether `plan` can be served, with the step and the reason when it
/// cannot.
Status checkServable(const runtime::Plan &plan,
                     const runtime::RunOptions &opts);

/// One field of a received output. Numeric data points into the received
/// message (no copy after receipt), which `RemoteOutput::owner` keeps alive.
struct RemoteField {
  std::string name;
  ElemType elem = ElemType::U8;
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr;
  size_t nbytes = 0;
  /// bytes/string fields: one entry per element.
  std::vector<std::string> items;
};

/// One output as the client received it.
struct RemoteOutput {
  int64_t index = 0;
  int64_t epoch = 0;
  std::vector<RemoteField> fields;
  /// Owns the bytes the fields point into.
  std::shared_ptr<const void> owner;
  /// PipelineState JSON after this output.
  std::string state;
  /// Bytes of the message on the wire (its protobuf size).
  int64_t wireBytes = 0;
  /// CPU seconds the worker spent on it (Output.cpu_seconds).
  double workerCpu = 0;
  /// Its numeric fields are in this process's shared memory, where a
  /// worker on this host wrote them (a slot: remote/lib/Slots.h), not
  /// received over the socket.
  bool sharedMemory = false;
};

/// What the client asks of the workers.
struct ClientOptions {
  /// host:port of each worker, or a DNS name standing for several
  /// ("dns:///NAME:PORT", isDnsWorker): resolved when connecting and again
  /// every `dnsInterval` seconds while an epoch runs, so an address that
  /// appears is a worker added (a StatefulSet scaled up).
  std::vector<std::string> workers;
  double dnsInterval = 5;
  /// A file listing workers (one host:port a line, '#' comments); re-read
  /// whenever a chunk is handed out, so workers can be added while an
  /// epoch runs.
  std::string workersFile;
  Security security;
  /// The spec the trainer means (its text): must match every worker's.
  std::string specText;
  std::string specPath;
  int64_t rank = 0, worldSize = 1;
  /// Outputs per chunk handed to a worker; 0 (the default, as Python's
  /// chunk=None): chosen by the outputs' size (kAutoChunk; per-output
  /// chunks once an output's numeric fields take kPerOutputChunkBytes or
  /// more in a shared-memory slot).
  int64_t chunk = 0;
  /// The chunk of `chunk = 0` while outputs are small or not in slots.
  static constexpr int64_t kAutoChunk = 2;
  /// Outputs whose numeric fields take this much in a slot go one per
  /// chunk under `chunk = 0`: a worker then needs 1 + 2 + 1 slots at once
  /// instead of kAutoChunk + 3, and writes its batches into fewer distinct
  /// pages (docs/distributed.md, "One worker, f32: per-output chunks").
  /// SLUICE_NO_PER_OUTPUT_CHUNKS=1: kAutoChunk whatever the size.
  static constexpr size_t kPerOutputChunkBytes = size_t(16) << 20;
  /// Outputs the client may hold ahead of the one the trainer asks for
  /// next (received, not yet delivered): bounds its memory.
  int64_t window = 16;
  /// How long to wait with no worker reachable before failing.
  double workerTimeout = 60;
  std::string trainer = "trainer";
  /// Lend workers on this host shared memory for the outputs' numeric
  /// fields (remote/lib/Slots.h): the worker writes them there and only
  /// headers cross the socket. Workers elsewhere ignore it. Off (or
  /// SLUICE_NO_SHARED_MEMORY=1): everything over the socket.
  bool sharedMemory = true;
  /// Hand each worker runs of consecutive chunks (Client.cpp), so that a
  /// worker continues the pipeline of its previous chunk (Server.cpp)
  /// with any number of workers. Off (or SLUICE_NO_CHUNK_RUNS=1): chunks
  /// in turn to whichever worker asks, the same outputs.
  bool chunkRuns = true;
};

/// Counters of a client, for stats and benchmarks.
struct ClientStats {
  int64_t outputs = 0;    ///< delivered to the trainer
  int64_t wireBytes = 0;  ///< protobuf bytes received (delivered ones)
  int64_t duplicates = 0; ///< outputs received twice and dropped
  int64_t reassigned = 0; ///< outputs handed out again after a failure
  int64_t workerFailures = 0;
  int64_t chunks = 0;
  /// Chunks that did not follow their worker's previous chunk (the worker
  /// started a pipeline for them), and runs taken from another worker.
  int64_t runs = 0;
  int64_t steals = 0;
  /// Delivered outputs that came in shared memory (ClientOptions::
  /// sharedMemory); their bytes are not in wireBytes.
  int64_t slotOutputs = 0;
  /// Shared-memory slots this trainer made (each costs it the slot's page
  /// faults and its worker a first write through every page), and the
  /// times it waited for one to be freed instead (Slots.h, SlotPool::lend;
  /// SLUICE_NO_SLOT_BOUND=1: never).
  int64_t slotsMade = 0;
  int64_t slotWaits = 0;
  /// Of slotsMade, those made of huge pages: where the host's
  /// /sys/kernel/mm/transparent_hugepage/shmem_enabled allows them
  /// (Slots.h, slotHugePagesEnabled), or collapsed into them
  /// (slotCollapseEnabled; SLUICE_NO_SLOT_HUGE_PAGES=1: neither).
  int64_t slotsHuge = 0;
  /// What the advice on the number of workers is made of (Dataset.advice
  /// in Python): the workers' CPU for the delivered outputs, this
  /// process's CPU receiving them (the streams' threads), the time the
  /// trainer waited inside next(), and the time it spent between one
  /// next() returning and the next call (its own work per batch).
  double workerCpuSeconds = 0;
  double receiveCpuSeconds = 0;
  double waitSeconds = 0;
  double trainerSeconds = 0;
  /// Threads of each worker's pipelines (DescribeReply.threads).
  int64_t workerThreads = 0;
};

/// The trainer's side: one epoch (its rank's share) at a time.
class RemoteDataset {
public:
  /// Connects to the workers (at least one must answer Describe within
  /// workerTimeout) and checks that they serve the trainer's spec.
  static Expected<std::unique_ptr<RemoteDataset>> connect(ClientOptions opts);
  ~RemoteDataset();

  /// Starts the share of epoch `epoch` from its beginning, or from `resume`
  /// (a PipelineState JSON from state() of this or a local pipeline of the
  /// same spec, saved at this rank or, when positional, any rank; a
  /// replayed pipeline's state (a shuffle step, a filter) continues at the
  /// rank and world size it was saved at, as a local one does).
  Status start(int64_t epoch, const std::string &resume = "");
  /// The next output of the epoch's share, or nullopt at its end. Errors:
  /// a data error on a worker (its message), no worker reachable.
  Expected<std::optional<RemoteOutput>> next();
  /// PipelineState JSON after the last output next() returned (or the
  /// start's state).
  std::string state() const;
  /// Adds a worker while an epoch runs; it takes chunks from the next one.
  void addWorker(const std::string &address);
  /// Stops the epoch's workers' streams (next() then returns nullopt).
  void close();

  uint64_t fingerprint() const;
  int64_t epochs() const;
  std::string outputType() const;
  ClientStats stats() const;

  class Impl;

private:
  explicit RemoteDataset(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace sluice::remote

#endif // SLUICE_REMOTE_REMOTE_H
