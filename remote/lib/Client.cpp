//===- Client.cpp - The trainer's side: chunks to workers, outputs in order
//===//
//
// One thread per worker takes a chunk (a run of output numbers of the
// trainer's share) and streams it from its worker. Received outputs wait in
// a window keyed by number until the trainer asks for them, in order; a
// number seen twice is dropped, so outputs arrive exactly once whatever
// happens to the workers:
//  - a worker that fails (killed, unreachable, cut off) has the numbers it
//    had not delivered put back, and another worker's thread takes them
//    first (lowest first); the failed worker's thread keeps trying to
//    reconnect (a restarted worker at the same address rejoins);
//  - each worker takes a run of consecutive chunks (a range of numbers it
//    owns), so that its next chunk is the one after its last and the
//    worker continues the pipeline it kept (Server.cpp) instead of starting
//    one per chunk; a run is as long as the window lets every worker's run
//    be read at once (runLength), and a worker whose run is done while no
//    new one fits in the window steals the back half of the longest
//    run not handed out yet (SLUICE_NO_CHUNK_RUNS=1: every chunk a run of
//    its own, handed out in turn); which worker makes an output never
//    changes its bytes or its place;
//  - a worker added (addWorker, or a line appended to the workers file)
//    starts taking chunks at once (a new run, or half of another's);
//  - the window bounds what the client holds: a thread whose next output
//    lies `window` or more beyond the one the trainer wants next waits
//    (not reading its stream, so HTTP/2 flow control stops its worker),
//    unless an earlier chunk is waiting for a worker: then it gives its
//    own chunk back and takes the earlier one, so the output the trainer
//    waits for always has a worker.
// Data errors (a bad record under `on_error: fail` on a worker), a wrong
// token or a worker serving another pipeline end the epoch with that error.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Switches.h"
#include "sluice/remote/Remote.h"

#include "Slots.h"
#include "sluice_remote.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include "sluice/ops/Allocation.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <time.h>

namespace sluice::remote {

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<grpc::Channel> makeChannel(const std::string &address,
                                           const Security &sec) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(16 << 20);
  // Fail fast on a dead worker instead of waiting minutes for TCP.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Socket reads into buffers of at most 256 KiB (gRPC grows them to
  // megabytes by default): fewer of them are fresh mmaps, whose every 4 KiB
  // page faults when written (docs/distributed.md, "Performance").
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 256 << 10);
  args.SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 64 << 10);
  args.SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 256 << 10);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (sec.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = sec.tlsRoots;
    creds = grpc::SslCredentials(ssl);
    if (!sec.tlsServerName.empty())
      args.SetSslTargetNameOverride(sec.tlsServerName);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

void authorize(grpc::ClientContext &ctx, const Security &sec) {
  if (!sec.token.empty())
    ctx.AddMetadata("authorization", "Bearer " + sec.token);
}

/// Failures of the worker (or the way to it), after which its chunk goes
/// to another worker; every other status is the pipeline's or the
/// trainer's error and ends the epoch.
bool workerFailure(const grpc::Status &s) {
  switch (s.error_code()) {
  case grpc::StatusCode::UNAVAILABLE:
  case grpc::StatusCode::CANCELLED:
  case grpc::StatusCode::DEADLINE_EXCEEDED:
  case grpc::StatusCode::UNKNOWN:
  case grpc::StatusCode::INTERNAL:
  case grpc::StatusCode::RESOURCE_EXHAUSTED:
  case grpc::StatusCode::ABORTED:
    return true;
  default:
    return false;
  }
}

std::string describeStatus(const std::string &address, const grpc::Status &s) {
  return "worker " + address + ": " + s.error_message() + " (gRPC status " +
         std::to_string(int(s.error_code())) + ")";
}

/// A received message's bytes, read across gRPC's slices without joining
/// them: a data part's bytes go from the slices gRPC read the socket into
/// straight to the output's buffer (one copy; a Part parsed by protobuf
/// would first copy them into a fresh string of its own, whose allocation
/// and pages cost as much again).
class WireCursor {
public:
  explicit WireCursor(grpc::ByteBuffer &bb) {
    ok_ = bb.Dump(&slices_).ok();
    for (const grpc::Slice &s : slices_)
      left_ += s.size();
  }
  bool ok() const { return ok_; }
  size_t left() const { return left_; }
  bool byte(uint8_t &b) {
    while (i_ < slices_.size() && off_ == slices_[i_].size()) {
      ++i_;
      off_ = 0;
    }
    if (i_ == slices_.size())
      return false;
    b = slices_[i_].begin()[off_++];
    --left_;
    return true;
  }
  bool varint(uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!byte(b))
        return false;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
    return false;
  }
  /// Copies the next n bytes (n <= left()).
  void copyTo(uint8_t *dst, size_t n) {
    left_ -= n;
    while (n) {
      const grpc::Slice &s = slices_[i_];
      size_t k = std::min(n, s.size() - off_);
      std::memcpy(dst, s.begin() + off_, k);
      dst += k;
      n -= k;
      off_ += k;
      if (off_ == s.size()) {
        ++i_;
        off_ = 0;
      }
    }
  }

  /// Lets go of the slices (gRPC's read buffers go back to the heap
  /// before it reads the next message into new ones).
  void drop() {
    slices_.clear();
    left_ = 0;
  }

private:
  std::vector<grpc::Slice> slices_;
  size_t i_ = 0, off_ = 0, left_ = 0;
  bool ok_ = false;
};

std::vector<std::string> readWorkersFile(const std::string &path) {
  std::vector<std::string> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (size_t hash = line.find('#'); hash != std::string::npos)
      line.resize(hash);
    size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos)
      continue;
    size_t b = line.find_last_not_of(" \t\r");
    out.push_back(line.substr(a, b - a + 1));
  }
  return out;
}

} // namespace

class RemoteDataset::Impl {
public:
  explicit Impl(ClientOptions o) : opts(std::move(o)) {}
  ~Impl() { close(); }

  ClientOptions opts;
  uint64_t fingerprint = 0, seed = 0;
  int64_t rows = 1, epochs = 1;
  std::string outputType;
  /// The workers replay the order (DescribeReply.replay): base states count
  /// outputs instead of positions.
  bool replay = false;

  struct WorkerConn {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<Worker::Stub> stub;
    std::thread thread;
    std::mutex ctxMu;
    grpc::ClientContext *current = nullptr;
    std::string lastError;
    /// Whether the worker can write into this process's slots (until it
    /// says it cannot: another host).
    std::atomic<bool> slotsWork{true};
    /// Its run (under mu): the numbers [runNext, runLimit) it takes its
    /// next chunks from, and where its last chunk ended (-1: none yet in
    /// this epoch).
    int64_t runNext = 0, runLimit = 0, lastEnd = -1;
    /// Failed and not described again since (not counted in runLength).
    bool failed = false;
    /// Its stream has delivered every output of its chunk and its end is
    /// still to come (under mu), since `deliveredAt`: a worker stopped or
    /// hung after its last write stays so until its failure is detected
    /// (freeStuckRuns).
    bool delivered = false;
    Clock::time_point deliveredAt;
    /// Slots lent with its last chunk for the outputs after it (under
    /// ctxMu): its pipeline, kept for its next chunk, makes the batches it
    /// reads ahead in them (remote/lib/Slots.h, SlotBatches). Carried into
    /// its next chunk when that one starts at `aheadFirst` of the same base
    /// state, else given back.
    std::vector<detail::SlotRef> ahead;
    std::string aheadBase;
    int64_t aheadFirst = -1;
  };

  /// Slots lent ahead with each chunk (WorkerConn::ahead): a kept
  /// pipeline has made or begun about two batches past its chunk's last
  /// when the next chunk's request comes. SLUICE_NO_SLOTS_AHEAD=1: none.
  size_t slotsAhead = 2;

  /// Runs of consecutive chunks (ClientOptions::chunkRuns).
  bool runsOn = true;

  /// ClientOptions::kPerOutputChunkBytes applies (chunk = 0).
  bool perOutputChunks = true;
  /// Outputs per chunk now: the option, or with 0 one per chunk once the
  /// outputs are known to be large ones in slots, else kAutoChunk.
  int64_t chunkNow() const {
    if (opts.chunk > 0)
      return opts.chunk;
    return perOutputChunks && slots &&
                   slotBytes.load(std::memory_order_relaxed) >=
                       ClientOptions::kPerOutputChunkBytes
               ? 1
               : ClientOptions::kAutoChunk;
  }

  /// Each worker's slots bounded to what it needs at once (SlotPool::lend:
  /// its chunk's outputs in flight, up to the window, those lent ahead, and
  /// the batch the consumer holds while it waits for the next), the pool
  /// waiting for a slot to be freed rather than growing while the consumer
  /// is busy with one. SLUICE_NO_SLOT_BOUND=1: slots made whenever none is
  /// free, as before.
  bool slotBound = true;
  /// The consumer waits inside next() with no output to take (it then
  /// holds only what its own code keeps: waiting for it to free a slot
  /// cannot help; set and cleared under mu: an output it can take clears
  /// it before the consumer wakes), or the dataset is closing.
  std::atomic<bool> consumerWaits{false}, closingNow{false};

  /// Slots lent to workers on this host (Slots.h); null: all outputs come
  /// over the socket.
  std::shared_ptr<detail::SlotPool> slots;
  /// The most bytes an output's numeric fields took in a slot's layout so
  /// far: the size of the slots lent (none before the first output).
  std::atomic<size_t> slotBytes{0};

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<WorkerConn>> workers;
  std::set<std::string> known;
  // The epoch being read.
  bool running = false, closing = false;
  int64_t generation = 0;
  std::string baseState;
  int64_t nextChunk = 0;                      // first number not handed out yet
  std::set<std::pair<int64_t, int64_t>> redo; // [first, end) to hand out again
  std::optional<int64_t> end;                 // number of outputs of the share
  std::map<int64_t, RemoteOutput> ready;
  int64_t nextDeliver = 0;
  std::string state;
  std::optional<Status> error;
  Clock::time_point lastAlive;
  ClientStats stats;
  /// When next() last returned (unset before the epoch's first output).
  std::optional<Clock::time_point> lastReturned;

  Expected<DescribeReply> describe(WorkerConn &w, double timeout,
                                   grpc::StatusCode *code = nullptr) {
    grpc::ClientContext ctx;
    authorize(ctx, opts.security);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(int64_t(timeout * 1000)));
    ctx.set_wait_for_ready(true);
    DescribeRequest req;
    req.set_trainer(opts.trainer);
    DescribeReply reply;
    grpc::Status s = w.stub->Describe(&ctx, req, &reply);
    if (code)
      *code = s.error_code();
    if (!s.ok())
      return Status::error(describeStatus(w.address, s));
    return reply;
  }

  Status checkWorker(const DescribeReply &r, const std::string &address) {
    uint64_t digest = specDigest(opts.specText);
    if (r.spec_digest() != digest)
      return Status::error(
          "worker " + address + " serves pipeline '" + r.pipeline() +
          "' from a spec whose text differs from " + opts.specPath +
          ": start the workers with the trainer's spec");
    if (fingerprint && r.fingerprint() != fingerprint)
      return Status::error("worker " + address +
                           " compiled the spec to another plan than the "
                           "other workers (another sluice version, or "
                           "--disable-pass): start every worker alike");
    return Status::ok();
  }

  WorkerConn &newConn(const std::string &address) {
    auto w = std::make_unique<WorkerConn>();
    w->address = address;
    w->channel = makeChannel(address, opts.security);
    w->stub = Worker::NewStub(w->channel);
    workers.push_back(std::move(w));
    known.insert(address);
    return *workers.back();
  }

  /// DNS names standing for workers (isDnsWorker), when each was last
  /// resolved, and whether a thread is resolving them now.
  std::vector<std::string> dnsEntries;
  Clock::time_point lastDns;
  bool resolving = false;

  /// Resolves the DNS entries again when dnsInterval has passed and adds
  /// the addresses not seen yet (called under mu, which it lets go of while
  /// it asks: a slow DNS server must not stop the other threads).
  void refreshDns(std::unique_lock<std::mutex> &lock) {
    if (dnsEntries.empty() || resolving ||
        Clock::now() - lastDns <
            std::chrono::milliseconds(int64_t(opts.dnsInterval * 1000)))
      return;
    resolving = true;
    std::vector<std::string> entries = dnsEntries;
    lock.unlock();
    std::vector<std::string> found;
    for (const std::string &e : entries)
      if (Expected<std::vector<std::string>> r = resolveWorkers(e))
        found.insert(found.end(), r->begin(), r->end());
    lock.lock();
    resolving = false;
    lastDns = Clock::now();
    if (closing)
      return;
    for (const std::string &a : found)
      if (!known.count(a))
        startThread(newConn(a));
  }

  /// Adds the addresses of the workers file not seen yet (under mu).
  void refreshWorkersFile() {
    if (opts.workersFile.empty())
      return;
    for (const std::string &a : readWorkersFile(opts.workersFile))
      if (!known.count(a))
        startThread(newConn(a));
  }

  void startThread(WorkerConn &w) {
    w.thread = std::thread([this, &w] { workerLoop(w); });
  }

  /// Outputs of a new run (under mu). With N workers, runs started at once
  /// at the frontier lie N-1 runs apart, and the last one's outputs must
  /// fit in the window while the trainer reads the first's: (N-1) runs <
  /// window, so every worker makes its run at full rate with at most
  /// `window` outputs held. One worker: the window.
  int64_t runLength() const {
    const int64_t chunk = chunkNow();
    if (!runsOn)
      return chunk;
    int64_t n = 0;
    for (const auto &w : workers)
      n += !w->failed;
    if (n <= 1)
      return std::max(opts.window, chunk);
    return std::max(chunk, (opts.window - 1) / (n - 1));
  }

  /// Gives `w` the back half of the run with the most numbers not handed
  /// out yet (at least 2) of another worker (under mu). False: none.
  bool steal(WorkerConn &w, int64_t stop) {
    WorkerConn *victim = nullptr;
    int64_t most = 1;
    for (const auto &v : workers) {
      if (v.get() == &w)
        continue;
      int64_t left = std::min(v->runLimit, stop) - v->runNext;
      if (left > most) {
        most = left;
        victim = v.get();
      }
    }
    if (!victim)
      return false;
    int64_t mid = victim->runNext + (most + 1) / 2;
    w.runNext = mid;
    w.runLimit = std::min(victim->runLimit, stop);
    victim->runLimit = mid;
    ++stats.steals;
    return true;
  }

  /// The output the trainer waits for is the next of a run whose worker
  /// delivered its chunk a second ago or more but has not ended its stream
  /// (stopped or hung after its last write; worker_timeout would say it
  /// failed only much later, and until then nobody else takes its run):
  /// that run goes back (redo), so that another worker takes it now,
  /// giving back the rest of a chunk far ahead if need be (under mu).
  /// Nothing of it was handed out: no output is produced twice. A stream's
  /// end follows its last output within milliseconds; a worker merely late
  /// with it loses the rest of its run (a new pipeline for whoever takes
  /// it), never an output. True: a run went back.
  bool freeStuckRuns() {
    if (!runsOn || ready.count(nextDeliver))
      return false;
    const int64_t stop = end ? *end : INT64_MAX;
    const auto stuck = Clock::now() - std::chrono::seconds(1);
    for (const auto &v : workers) {
      int64_t limit = std::min(v->runLimit, stop);
      if (v->delivered && v->deliveredAt < stuck && v->runNext <= nextDeliver &&
          nextDeliver < limit) {
        redo.insert({v->runNext, limit});
        v->runLimit = v->runNext;
        ++stats.steals;
        return true;
      }
    }
    return false;
  }

  /// The next chunk for worker `w` (under mu): from a range given back
  /// first (the trainer may be waiting for it; what is left of w's run goes
  /// back in its place), else from w's run, else from a new run at the
  /// frontier within the window, else from half of another worker's run
  /// (steal).
  bool takeChunk(std::unique_lock<std::mutex> &lock, int64_t gen, WorkerConn &w,
                 int64_t &first, int64_t &count) {
    while (true) {
      if (closing || gen != generation || error)
        return false;
      refreshWorkersFile();
      refreshDns(lock);
      if (closing || gen != generation || error)
        return false;
      const int64_t stop = end ? *end : INT64_MAX;
      if (!redo.empty()) {
        if (w.runNext < std::min(w.runLimit, stop))
          redo.insert({w.runNext, w.runLimit});
        auto r = *redo.begin();
        redo.erase(redo.begin());
        w.runNext = r.first;
        w.runLimit = r.second;
      } else if (w.runNext >= std::min(w.runLimit, stop)) {
        w.runNext = w.runLimit = 0;
        bool done = end && nextChunk >= *end;
        if (!done && nextChunk < nextDeliver + opts.window) {
          w.runNext = nextChunk;
          w.runLimit = std::min(nextChunk + runLength(), stop);
          nextChunk = w.runLimit;
        } else {
          // Half of another's run, at the share's end or while the trainer
          // waits (for a slower worker's run); not while the trainer is
          // what holds the workers back (it has its next output): a steal
          // costs the thief a new pipeline and the victim its read-ahead.
          bool worth = runsOn && (done || !ready.count(nextDeliver));
          if (!worth || !steal(w, stop)) {
            if (done && ready.empty() && nextDeliver >= *end)
              return false;
            cv.wait_for(lock, std::chrono::milliseconds(200));
            continue;
          }
        }
      }
      first = w.runNext;
      count = std::min(chunkNow(), w.runLimit - w.runNext);
      w.runNext += count;
      ++stats.chunks;
      if (first != w.lastEnd)
        ++stats.runs;
      w.lastEnd = first + count;
      return true;
    }
  }

  void workerLoop(WorkerConn &w) {
    std::unique_lock<std::mutex> lock(mu);
    bool described = false;
    while (!closing) {
      if (!running) {
        cv.wait(lock);
        continue;
      }
      int64_t gen = generation;
      if (!described) {
        lock.unlock();
        Expected<DescribeReply> d = describe(w, 1.0);
        lock.lock();
        if (!d) {
          w.lastError = d.status().message();
          cv.wait_for(lock, std::chrono::milliseconds(500));
          continue;
        }
        if (Status s = checkWorker(*d, w.address); !s) {
          if (!error)
            error = s;
          cv.notify_all();
          return;
        }
        described = true;
        w.failed = false;
      }
      int64_t first = 0, count = 0;
      if (!takeChunk(lock, gen, w, first, count)) {
        if (closing)
          return;
        cv.wait_for(lock, std::chrono::milliseconds(200));
        continue;
      }
      std::string base = baseState;
      lock.unlock();
      int64_t got = 0;
      bool gaveBack = false;
      grpc::Status s = stream(w, gen, base, first, count, got, gaveBack);
      lock.lock();
      w.delivered = false; // set only while stream() runs
      if (gaveBack || gen != generation || closing || error)
        continue;
      if (s.ok()) {
        lastAlive = Clock::now();
        if (got < count && gen == generation) {
          // The share ends inside this chunk.
          int64_t e = first + got;
          if (!end || e < *end)
            end = e;
        }
        cv.notify_all();
        continue;
      }
      if (!workerFailure(s)) {
        if (!error)
          error = Status::error(describeStatus(w.address, s));
        cv.notify_all();
        continue;
      }
      // The worker failed: its undelivered numbers go back, with the rest
      // of its run (not handed out: not counted as reassigned).
      int64_t back = first + count;
      if (w.runNext == back && w.runNext < w.runLimit)
        back = w.runLimit;
      else if (w.runNext < w.runLimit)
        redo.insert({w.runNext, w.runLimit});
      w.runNext = w.runLimit = 0;
      w.lastEnd = -1;
      w.failed = true;
      if (got < count)
        stats.reassigned += count - got;
      if (first + got < back)
        redo.insert({first + got, back});
      ++stats.workerFailures;
      w.lastError = describeStatus(w.address, s);
      described = false;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::milliseconds(300));
    }
  }

  /// Streams one chunk; `got` counts the outputs received in order.
  grpc::Status stream(WorkerConn &w, int64_t gen, const std::string &base,
                      int64_t first, int64_t count, int64_t &got,
                      bool &gaveBack) {
    grpc::ClientContext ctx;
    authorize(ctx, opts.security);
    {
      std::lock_guard<std::mutex> l(w.ctxMu);
      w.current = &ctx;
    }
    ProduceRequest req;
    req.set_trainer(opts.trainer);
    req.set_fingerprint(fingerprint);
    req.set_base_state(base);
    req.set_first(first);
    req.set_count(count);
    // Slots for the chunk's outputs, when a worker on this host can take
    // them; what the stream does not deliver goes back at its end.
    std::vector<detail::SlotRef> lent;
    {
      // The slots lent ahead with this worker's last chunk: this chunk's
      // first ones when it continues that chunk, else the trainer's again.
      std::lock_guard<std::mutex> l(w.ctxMu);
      if (slots && w.slotsWork && w.aheadBase == base && w.aheadFirst == first)
        lent.swap(w.ahead);
      else if (slots)
        for (const detail::SlotRef &r : w.ahead)
          slots->giveBack(r);
      w.ahead.clear();
      w.aheadFirst = -1;
    }
    if (slots && w.slotsWork) {
      req.set_boot_id(detail::bootId());
      // The workers that may share this host (they take slots): each runs
      // its pipelines on its share of the cores. A worker elsewhere is
      // counted until its first output says it cannot reach the slots.
      // Said before the first output too (no slots lent yet): the chunk
      // that starts a run starts the pipeline its run continues.
      int32_t local = 0;
      size_t limit;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto &o : workers)
          local += o->slotsWork && !o->failed;
        // The window, each worker's chunk, and a few the trainer holds.
        limit =
            static_cast<size_t>(opts.window + chunkNow() * workers.size() + 4) +
            slotsAhead * workers.size();
      }
      req.set_host_workers(std::max<int32_t>(local, 1));
      size_t want = static_cast<size_t>(count) + slotsAhead;
      size_t bound =
          slotBound ? static_cast<size_t>(std::min(chunkNow(), opts.window)) +
                          slotsAhead + 1
                    : 0;
      // Said to the worker: it maps that many slots at their first write.
      req.set_slot_bound(static_cast<int32_t>(bound));
      if (slotBytes > 0 && lent.size() < want) {
        std::vector<detail::SlotRef> more = slots->lend(
            want - lent.size(), slotBytes, limit, &w, bound,
            [this] { return !consumerWaits && !closingNow; },
            std::chrono::milliseconds(1000));
        lent.insert(lent.end(), more.begin(), more.end());
      }
      for (const detail::SlotRef &r : lent) {
        Slot *sl = req.add_slots();
        sl->set_path(r.path);
        sl->set_nonce0(r.nonce[0]);
        sl->set_nonce1(r.nonce[1]);
        sl->set_lease(r.lease);
        sl->set_capacity(static_cast<int64_t>(r.capacity));
      }
    }
    std::vector<bool> taken(lent.size(), false);
    // Whether the chunk ended whole: its slots lent ahead are then kept for
    // the worker's next chunk.
    bool whole = false;
    struct GiveBack {
      detail::SlotPool *pool;
      const std::vector<detail::SlotRef> &lent;
      const std::vector<bool> &taken;
      WorkerConn &w;
      const bool &whole;
      size_t count;
      const std::string &base;
      int64_t next;
      ~GiveBack() {
        std::vector<detail::SlotRef> ahead;
        for (size_t k = 0; k < lent.size(); ++k) {
          if (taken[k])
            continue;
          if (whole && k >= count)
            ahead.push_back(lent[k]);
          else
            pool->giveBack(lent[k]);
        }
        if (ahead.empty())
          return;
        std::lock_guard<std::mutex> l(w.ctxMu);
        for (const detail::SlotRef &r : w.ahead)
          pool->giveBack(r);
        w.ahead = std::move(ahead);
        w.aheadBase = base;
        w.aheadFirst = next;
      }
    } giveBack{slots.get(), lent,         taken,
               w,           whole,        static_cast<size_t>(count),
               base,        first + count};
    // Produce read raw (the proto's wire format in a grpc::ByteBuffer, as
    // the generated stub would read a Part), so that data parts are copied
    // once, from gRPC's slices to the output (WireCursor). The factory is
    // what the generated stub calls.
    grpc::internal::RpcMethod method(
        "/sluice.remote.Worker/Produce",
        grpc::internal::RpcMethod::SERVER_STREAMING, w.channel);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            w.channel.get(), method, &ctx, req));
    bool early = false;
    // The output being received: its header came, its data parts follow.
    std::optional<RemoteOutput> cur;
    std::shared_ptr<std::vector<Tensor>> bufs;
    // What owns the current output's bytes: bufs, or a slot.
    std::shared_ptr<const void> owner;
    std::vector<size_t> pending; // fields whose bytes are still to come
    size_t pendingAt = 0, offset = 0;
    grpc::Status protocolError;
    // The pool of batch-sized buffers (BufferPool.h) serves these Tensors
    // under a scope without a limit: a batch buffer the trainer dropped is
    // the next one's, without fresh pages.
    AllocationScope scope(nullptr);
    grpc::ByteBuffer raw;
    Part part;
    // This thread's CPU receiving the chunk (ClientStats).
    struct CpuClock {
      Impl &d;
      double start = now();
      static double now() {
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
      }
      ~CpuClock() {
        std::lock_guard<std::mutex> l(d.mu);
        d.stats.receiveCpuSeconds += now() - start;
      }
    } cpuClock{*this};
    auto fail = [&](const std::string &why) {
      protocolError = grpc::Status(grpc::StatusCode::DATA_LOSS,
                                   "worker " + w.address + " sent " + why);
      early = true;
    };
    // SLUICE_REMOTE_PARSE_PARTS=1: every message parsed as a Part by
    // protobuf, as the generated stub would (read per chunk, so a test can
    // compare both ways in one process).
    const char *parseEnv = std::getenv("SLUICE_REMOTE_PARSE_PARTS");
    const bool parseParts = parseEnv && std::string(parseEnv) == "1";
    while (reader->Read(&raw)) {
      int64_t wire = static_cast<int64_t>(raw.Length());
      WireCursor in(raw);
      uint64_t tag = 0, len = 0;
      if (!in.ok() || !in.varint(tag)) {
        fail("an empty or unreadable message");
        break;
      }
      bool isData = tag == 0x12 && !parseParts;
      if (isData && (!in.varint(len) || len != in.left())) {
        fail("a malformed data part");
        break;
      }
      if (!isData) {
        part.Clear();
        if (!grpc::SerializationTraits<Part>::Deserialize(&raw, &part).ok()) {
          fail("a message that is not a Part");
          break;
        }
        if (!part.has_output() && !part.has_data()) {
          fail("an empty part");
          break;
        }
      }
      if (!isData && part.has_output()) {
        if (cur) {
          fail("an output before the previous one's data");
          break;
        }
        const Output &msg = part.output();
        int64_t index = msg.index();
        {
          std::unique_lock<std::mutex> lock(mu);
          // Hold back outputs far ahead of the trainer (back-pressure: not
          // reading stops the worker), unless an earlier range needs a
          // worker: then give this chunk's rest back.
          while (index - nextDeliver >= opts.window && !closing &&
                 gen == generation && !error) {
            if (!redo.empty() && redo.begin()->first < index) {
              redo.insert({index, first + count});
              gaveBack = true;
              break;
            }
            cv.wait_for(lock, std::chrono::milliseconds(200));
          }
          if (gaveBack || closing || gen != generation || error) {
            early = true;
            break;
          }
        }
        if (msg.slots_unreachable())
          w.slotsWork = false;
        const uint8_t *slotData = nullptr;
        size_t slotAt = 0, slotCapacity = 0;
        owner.reset();
        if (msg.in_slot()) {
          int64_t k = index - first;
          if (k < 0 || k >= static_cast<int64_t>(lent.size()) || taken[k]) {
            fail("output " + std::to_string(index) +
                 " in a slot it was not lent");
            break;
          }
          owner = slots->take(lent[k], slotData);
          if (!owner) {
            fail("output " + std::to_string(index) +
                 " in a slot it had not written");
            break;
          }
          taken[k] = true;
          slotCapacity = lent[k].capacity;
        }
        cur.emplace();
        cur->index = index;
        cur->epoch = msg.epoch();
        cur->state = msg.state();
        cur->workerCpu = msg.cpu_seconds();
        cur->wireBytes = wire;
        cur->sharedMemory = msg.in_slot();
        bufs = std::make_shared<std::vector<Tensor>>();
        if (!owner)
          owner = bufs;
        pending.clear();
        pendingAt = offset = 0;
        // The fields' layout in a slot (slotLayout), whether or not this
        // output came in one: the size of the slots lent next.
        size_t layout = 0;
        for (const Field &f : msg.fields()) {
          RemoteField rf;
          rf.name = f.name();
          std::optional<ElemType> elem = parseElemType(f.dtype());
          if (!elem) {
            fail("field '" + f.name() + "' of unknown type '" + f.dtype() +
                 "'");
            break;
          }
          rf.elem = *elem;
          rf.shape.assign(f.shape().begin(), f.shape().end());
          if (isNumeric(rf.elem)) {
            int64_t n = elemTypeSize(rf.elem);
            for (int64_t d : rf.shape)
              if (d < 0 || __builtin_mul_overflow(n, d, &n))
                n = -1;
            if (n != f.nbytes() || n < 0) {
              fail("field '" + f.name() +
                   "' with a size that does not "
                   "match its shape");
              break;
            }
            layout = ((layout + 63) & ~size_t(63)) + static_cast<size_t>(n);
            rf.nbytes = static_cast<size_t>(n);
            if (slotData) {
              slotAt = (slotAt + 63) & ~size_t(63);
              if (slotAt + rf.nbytes > slotCapacity) {
                fail("field '" + f.name() + "' beyond its slot");
                break;
              }
              rf.data = slotData + slotAt;
              slotAt += rf.nbytes;
            } else {
              bufs->push_back(Tensor::empty(rf.elem, rf.shape));
              rf.data = bufs->back().raw();
              if (n > 0)
                pending.push_back(cur->fields.size());
            }
          } else {
            for (const std::string &item : f.items())
              rf.items.push_back(item);
          }
          cur->fields.push_back(std::move(rf));
        }
        if (early)
          break;
        for (size_t seen = slotBytes; layout > seen;)
          if (slotBytes.compare_exchange_weak(seen, layout))
            break;
      } else {
        if (!cur || pendingAt >= pending.size()) {
          fail("data outside an output");
          break;
        }
        RemoteField &rf = cur->fields[pending[pendingAt]];
        size_t size = isData ? static_cast<size_t>(len) : part.data().size();
        if (size > rf.nbytes - offset) {
          fail("more bytes than field '" + rf.name + "' holds");
          break;
        }
        uint8_t *to = const_cast<uint8_t *>(rf.data) + offset;
        if (isData) {
          in.copyTo(to, size);
          in.drop();
          raw.Clear();
        } else
          std::memcpy(to, part.data().data(), size);
        offset += size;
        cur->wireBytes += wire;
        if (offset == rf.nbytes) {
          ++pendingAt;
          offset = 0;
        }
      }
      if (!cur || pendingAt < pending.size())
        continue;
      // The output is whole.
      cur->owner = owner;
      int64_t index = cur->index;
      std::unique_lock<std::mutex> lock(mu);
      if (closing || gen != generation || error) {
        early = true;
        break;
      }
      if (index < nextDeliver || ready.count(index))
        ++stats.duplicates;
      else {
        ready.emplace(index, std::move(*cur));
        // The consumer is about to take it (and let go of the batch before
        // it): no longer waiting with nothing to take.
        if (index == nextDeliver)
          consumerWaits = false;
      }
      cur.reset();
      ++got;
      lastAlive = Clock::now();
      w.delivered = got == count;
      w.deliveredAt = lastAlive;
      cv.notify_all();
    }
    {
      std::lock_guard<std::mutex> l(w.ctxMu);
      w.current = nullptr;
    }
    if (early) {
      // Not reading on would leave the worker blocked in its Write.
      ctx.TryCancel();
      grpc::Status finished = reader->Finish();
      if (!protocolError.ok())
        return protocolError;
      (void)finished;
      return grpc::Status(grpc::StatusCode::CANCELLED, "given up");
    }
    if (cur) {
      // The stream ended inside an output: the worker failed mid-write.
      grpc::Status finished = reader->Finish();
      return finished.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "worker " + w.address +
                                              " ended inside an output")
                           : finished;
    }
    grpc::Status finished = reader->Finish();
    whole = finished.ok() && got == count;
    return finished;
  }

  void cancelStreams() {
    for (auto &w : workers) {
      std::lock_guard<std::mutex> l(w->ctxMu);
      if (w->current)
        w->current->TryCancel();
    }
  }

  void close() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (closing)
        return;
      closing = true;
      closingNow = true;
      cv.notify_all();
    }
    cancelStreams();
    for (auto &w : workers)
      if (w->thread.joinable())
        w->thread.join();
  }
};

RemoteDataset::RemoteDataset(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
RemoteDataset::~RemoteDataset() = default;

Expected<std::unique_ptr<RemoteDataset>>
RemoteDataset::connect(ClientOptions opts) {
  if (opts.worldSize < 1 || opts.rank < 0 || opts.rank >= opts.worldSize)
    return Status::error("rank " + std::to_string(opts.rank) +
                         " is out of range for world size " +
                         std::to_string(opts.worldSize));
  if (opts.chunk < 0 || opts.window < 1)
    return Status::error("chunk must be >= 0 (outputs; 0: chosen by their "
                         "size) and window >= 1 (outputs)");
  std::vector<std::string> addrs, dns;
  for (const std::string &a : opts.workers)
    (isDnsWorker(a) ? dns : addrs).push_back(a);
  if (!opts.workersFile.empty())
    for (const std::string &a : readWorkersFile(opts.workersFile))
      (isDnsWorker(a) ? dns : addrs).push_back(a);
  if (addrs.empty() && dns.empty())
    return Status::error("no workers given (workers=[\"host:port\", ...] "
                         "or a workers file)");
  keepFreedMemory();
  auto impl = std::make_unique<Impl>(std::move(opts));
  Impl &d = *impl;
  if (d.opts.sharedMemory && !switchedOff("SLUICE_NO_SHARED_MEMORY"))
    d.slots = detail::SlotPool::create();
  d.runsOn = d.opts.chunkRuns && !switchedOff("SLUICE_NO_CHUNK_RUNS");
  if (switchedOff("SLUICE_NO_SLOTS_AHEAD"))
    d.slotsAhead = 0;
  d.slotBound = !switchedOff("SLUICE_NO_SLOT_BOUND");
  d.perOutputChunks = !switchedOff("SLUICE_NO_PER_OUTPUT_CHUNKS");
  d.dnsEntries = dns;
  // A DNS name with no address yet (its workers are starting) is not an
  // error: it is asked again below until a worker answers.
  auto resolveAll = [&]() -> Status {
    for (const std::string &e : dns) {
      Expected<std::vector<std::string>> r = resolveWorkers(e);
      if (!r)
        return r.status();
      addrs.insert(addrs.end(), r->begin(), r->end());
    }
    d.lastDns = Clock::now();
    return Status::ok();
  };
  if (Status s = resolveAll(); !s)
    return s;
  std::unique_lock<std::mutex> lock(d.mu);
  for (const std::string &a : addrs)
    if (!d.known.count(a))
      d.newConn(a);
  lock.unlock();
  // The first worker to answer says what the pipeline is; the others are
  // checked against it when their threads first reach them.
  std::string errors;
  auto deadline = Clock::now() + std::chrono::milliseconds(
                                     int64_t(d.opts.workerTimeout * 1000));
  std::optional<DescribeReply> first;
  while (!first && Clock::now() < deadline) {
    if (d.workers.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      errors = "no address for " + dns.front() + " yet";
      if (Status s = resolveAll(); !s)
        return s;
      for (const std::string &a : addrs)
        if (!d.known.count(a))
          d.newConn(a);
    }
    for (auto &w : d.workers) {
      grpc::StatusCode code = grpc::StatusCode::OK;
      Expected<DescribeReply> r = d.describe(*w, 0.5, &code);
      if (r) {
        first = *r;
        if (Status s = d.checkWorker(*first, w->address); !s)
          return s;
        break;
      }
      // A refusal (token, TLS) is not a matter of time.
      if (code != grpc::StatusCode::UNAVAILABLE &&
          code != grpc::StatusCode::DEADLINE_EXCEEDED)
        return r.status();
      errors = r.status().message();
    }
  }
  if (!first)
    return Status::error("no worker answered within " +
                         std::to_string(int(d.opts.workerTimeout)) +
                         " s; last: " + errors);
  d.fingerprint = first->fingerprint();
  d.seed = first->seed();
  d.rows = first->batch_rows();
  d.epochs = first->epochs();
  d.outputType = first->output_type();
  d.replay = first->replay();
  d.stats.workerThreads = first->threads();
  lock.lock();
  for (auto &w : d.workers)
    d.startThread(*w);
  lock.unlock();
  return std::unique_ptr<RemoteDataset>(new RemoteDataset(std::move(impl)));
}

Status RemoteDataset::start(int64_t epoch, const std::string &resume) {
  Impl &d = *impl_;
  runtime::PipelineState base;
  base.fingerprint = d.fingerprint;
  base.seed = d.seed;
  base.epoch = epoch;
  base.rank = d.opts.rank;
  base.worldSize = d.opts.worldSize;
  base.positionStart = d.replay ? -1 : 0;
  base.rows = d.replay ? -1 : 0;
  if (!resume.empty()) {
    Expected<runtime::PipelineState> st =
        runtime::PipelineState::fromJson(resume);
    if (!st)
      return st.status();
    if (st->fingerprint != d.fingerprint)
      return Status::error("the state was saved by another pipeline (its "
                           "steps, parameters or source differ from the "
                           "workers'); resume with the spec it came from");
    if (d.replay) {
      if (st->rank != d.opts.rank || st->worldSize != d.opts.worldSize)
        return Status::error(
            "the state was saved at rank " + std::to_string(st->rank) + " of " +
            std::to_string(st->worldSize) + " and cannot continue at rank " +
            std::to_string(d.opts.rank) + " of " +
            std::to_string(d.opts.worldSize) +
            ": this pipeline resumes by replaying the epoch's order (its "
            "shuffle step or filter), which needs the same share; to change "
            "the world size, read the source by position: `shuffle: true` on "
            "the source instead of a shuffle step");
      base = *st;
      base.positionStart = base.rows = -1;
    } else if (st->positionStart < 0) {
      return Status::error("the state does not resume by position");
    } else {
      base = *st;
    }
    if (!d.replay &&
        (base.rank != d.opts.rank || base.worldSize != d.opts.worldSize)) {
      // Saved at another share: the positions before it are done by every
      // rank; this rank continues from there (as a local positional resume
      // does).
      base.positionStart += base.worldSize * base.rows;
      base.rows = 0;
      base.outputs = 0;
      base.rank = d.opts.rank;
      base.worldSize = d.opts.worldSize;
    }
  }
  // Restart the workers' threads on the new epoch: streams of the old one
  // are cancelled and their outputs dropped.
  std::unique_lock<std::mutex> lock(d.mu);
  ++d.generation;
  d.cancelStreams();
  d.running = true;
  d.error.reset();
  d.baseState = base.toJson();
  d.state = resume.empty() ? d.baseState : resume;
  d.nextChunk = 0;
  d.nextDeliver = 0;
  for (auto &w : d.workers) {
    w->runNext = w->runLimit = 0;
    w->lastEnd = -1;
  }
  d.redo.clear();
  d.ready.clear();
  d.end.reset();
  d.lastAlive = Clock::now();
  d.lastReturned.reset();
  d.cv.notify_all();
  return Status::ok();
}

Expected<std::optional<RemoteOutput>> RemoteDataset::next() {
  Impl &d = *impl_;
  std::unique_lock<std::mutex> lock(d.mu);
  if (!d.running)
    return Status::error("start() an epoch first");
  // The trainer's own time since the last output it took, and the time it
  // waits here (the stall meter of the advice).
  Clock::time_point entered = Clock::now();
  if (d.lastReturned)
    d.stats.trainerSeconds +=
        std::chrono::duration<double>(entered - *d.lastReturned).count();
  struct Waited {
    Impl &d;
    Clock::time_point entered;
    ~Waited() {
      d.lastReturned = Clock::now();
      d.stats.waitSeconds +=
          std::chrono::duration<double>(*d.lastReturned - entered).count();
    }
  } waited{d, entered};
  while (true) {
    if (d.error)
      return *d.error;
    auto it = d.ready.find(d.nextDeliver);
    if (it != d.ready.end()) {
      RemoteOutput out = std::move(it->second);
      d.ready.erase(it);
      ++d.nextDeliver;
      d.state = out.state;
      ++d.stats.outputs;
      d.stats.wireBytes += out.wireBytes;
      d.stats.workerCpuSeconds += out.workerCpu;
      d.stats.slotOutputs += out.sharedMemory;
      d.cv.notify_all();
      return std::optional<RemoteOutput>(std::move(out));
    }
    if ((d.end && d.nextDeliver >= *d.end) || d.closing)
      return std::optional<RemoteOutput>();
    if (d.freeStuckRuns())
      d.cv.notify_all();
    if (Clock::now() - d.lastAlive >
        std::chrono::milliseconds(int64_t(d.opts.workerTimeout * 1000))) {
      std::string why;
      for (auto &w : d.workers)
        if (!w->lastError.empty())
          why += "; " + w->lastError;
      return Status::error("no worker delivered anything for " +
                           std::to_string(int(d.opts.workerTimeout)) +
                           " s (output " + std::to_string(d.nextDeliver) +
                           " of the epoch is outstanding)" + why);
    }
    d.consumerWaits = true;
    d.cv.wait_for(lock, std::chrono::milliseconds(100));
    d.consumerWaits = false;
  }
}

std::string RemoteDataset::state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->state;
}

void RemoteDataset::addWorker(const std::string &address) {
  Impl &d = *impl_;
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.known.count(address) || d.closing)
    return;
  d.startThread(d.newConn(address));
}

void RemoteDataset::close() { impl_->close(); }
uint64_t RemoteDataset::fingerprint() const { return impl_->fingerprint; }
int64_t RemoteDataset::epochs() const { return impl_->epochs; }
std::string RemoteDataset::outputType() const { return impl_->outputType; }
ClientStats RemoteDataset::stats() const {
  ClientStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s = impl_->stats;
  }
  if (impl_->slots) {
    s.slotsMade = impl_->slots->made();
    s.slotWaits = impl_->slots->waits();
    s.slotsHuge = impl_->slots->madeHuge();
  }
  return s;
}

} // namespace sluice::remote
