//===- Server.cpp - `sluice serve`: a worker streaming outputs over gRPC --===//
//
// Each Produce call is a chunk of one trainer's share of an epoch: the
// worker turns (base state, first) into the PipelineState a local run has
// after `first` outputs, resumes a Pipeline there (positional resume reads
// from that position on: no replay), and writes `count` outputs to the
// stream. gRPC's synchronous Write returns only once the transport has room
// (HTTP/2 flow control), so a trainer that stops reading stops the worker's
// pipeline within its budget: back-pressure needs no code of its own here.
// Every chunk is independent (docs/distributed.md): the one thing kept
// after a call is the pipeline of a whole chunk made by position, which the
// same trainer's next chunk continues (the positions it would resume at),
// and which any other chunk stops.
// A pipeline with a shuffle step or a filter is served by replaying its
// order (Replay.h): the chunk's rows are then explicit positions.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/Allocation.h"
#include "sluice/ops/Switches.h"
#include "sluice/remote/Remote.h"

#include "Replay.h"
#include "Slots.h"
#include "sluice_remote.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iomanip>
#include <malloc.h>
#include <map>
#include <mutex>
#include <ostream>
#include <pthread.h>
#include <sstream>
#include <thread>
#include <time.h>

namespace sluice::remote {

bool keepFreedMemory() {
  static const bool done = [] {
    if (switchedOff("SLUICE_NO_MALLOC_TUNING"))
      return false;
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    return true;
  }();
  return done;
}

namespace {

/// The most bytes of a field one data part carries.
constexpr size_t kPartBytes = 256 << 10;

double threadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/// Compares without an early exit (the token is a secret).
bool sameSecret(const std::string &a, std::string_view b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

struct TrainerStats {
  int64_t chunks = 0, outputs = 0, bytes = 0;
  /// Outputs sent from a chunk kept for another trainer (--share-outputs).
  int64_t shared = 0;
  /// Outputs whose fields went into the trainer's shared memory (Slots.h),
  /// and how many of them were written with pwrite (not yet mapped).
  int64_t slotOutputs = 0, slotPwrites = 0;
  /// Outputs the pipeline made in their slots (SlotBatches): not copied.
  int64_t slotDirect = 0;
  /// Chunks made by the pipeline kept from the trainer's previous chunk.
  int64_t continued = 0;
  /// Pipelines started for the trainer's chunks, and the threads the last
  /// one ran (threadsFor).
  int64_t started = 0, threads = 0;
  double encodeCpu = 0, seconds = 0;
};

/// A data part (Part.data) whose bytes are the tensor's own: a slice with
/// the field's tag and length, then a slice over the tensor's buffer that
/// keeps the tensor alive until gRPC has sent it. No copy is made before
/// the socket's (SLUICE_REMOTE_COPY_PARTS=1 copies each part into a
/// message of its own first, as the generated code would).
grpc::ByteBuffer dataPart(const Tensor &x, size_t off, size_t n) {
  uint8_t head[16];
  size_t h = 0;
  head[h++] = 0x12; // field 2 (data), length-delimited
  for (uint64_t v = n;; v >>= 7) {
    head[h++] = static_cast<uint8_t>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    if (v <= 0x7f)
      break;
  }
  static const bool copy =
      std::getenv("SLUICE_REMOTE_COPY_PARTS") &&
      std::string(std::getenv("SLUICE_REMOTE_COPY_PARTS")) == "1";
  const char *bytes = reinterpret_cast<const char *>(x.raw()) + off;
  if (copy) {
    Part part;
    part.set_data(bytes, n);
    std::string wire = part.SerializeAsString();
    grpc::Slice one(wire);
    return grpc::ByteBuffer(&one, 1);
  }
  grpc::Slice slices[2] = {grpc::Slice(head, h),
                           grpc::Slice(
                               const_cast<char *>(bytes), n,
                               [](void *t) { delete static_cast<Tensor *>(t); },
                               new Tensor(x))};
  return grpc::ByteBuffer(slices, 2);
}

/// The worker's gRPC service. Registered by hand rather than through the
/// generated Worker::Service so that Produce writes raw messages
/// (grpc::ByteBuffer, the proto's wire format): the data parts then point
/// into the batch's own buffers instead of being copied into a protobuf
/// string and again into gRPC's buffers (two copies of every byte on a
/// worker whose CPU is the pipeline's). The trainer reads them raw too
/// (Client.cpp).
class WorkerService final : public grpc::Service {
public:
  WorkerService(const runtime::Plan &plan, const runtime::RunOptions &opts,
                const ServeOptions &so, detail::ServePlan &sp)
      : plan_(plan), opts_(opts), so_(so), sp_(sp), rows_(sp.batchRows()),
        fingerprint_(runtime::planFingerprint(plan)),
        sourceRecords_(sp.sourceRecords()) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.remote.Worker/Describe", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<
            WorkerService, DescribeRequest, DescribeReply,
            grpc::protobuf::MessageLite, grpc::protobuf::MessageLite>(
            [](WorkerService *svc, grpc::ServerContext *ctx,
               const DescribeRequest *req,
               DescribeReply *reply) { return svc->Describe(ctx, req, reply); },
            this)));
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/sluice.remote.Worker/Produce",
        grpc::internal::RpcMethod::SERVER_STREAMING,
        new grpc::internal::ServerStreamingHandler<
            WorkerService, ProduceRequest, grpc::ByteBuffer>(
            [](WorkerService *svc, grpc::ServerContext *ctx,
               const ProduceRequest *req,
               Writer *writer) { return svc->Produce(ctx, req, writer); },
            this)));
  }

  using Writer = grpc::ServerWriter<grpc::ByteBuffer>;

  grpc::Status Describe(grpc::ServerContext *ctx, const DescribeRequest *req,
                        DescribeReply *reply) {
    if (grpc::Status s = authorize(ctx); !s.ok())
      return s;
    reply->set_fingerprint(fingerprint_);
    reply->set_seed(plan_.seed);
    reply->set_pipeline(plan_.name);
    reply->set_spec_digest(so_.specDigest);
    RecordType t = outputType();
    reply->set_output_type(t.str());
    reply->set_batch_rows(rows_);
    reply->set_epochs(opts_.epochs.value_or(plan_.epochs));
    reply->set_version("1");
    reply->set_replay(sp_.replay());
    reply->set_threads(sp_.threads());
    (void)req;
    return grpc::Status::OK;
  }

  grpc::Status Produce(grpc::ServerContext *ctx, const ProduceRequest *req,
                       Writer *writer) {
    if (grpc::Status s = authorize(ctx); !s.ok())
      return s;
    auto started = std::chrono::steady_clock::now();
    StreamSlot slot(*this);
    if (!slot.wait(ctx))
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "the trainer gave up while the chunk waited for "
                          "one of the worker's --streams");
    if (req->fingerprint() != fingerprint_)
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this worker serves another pipeline (its plan's "
                          "fingerprint differs from the trainer's): run the "
                          "trainer and the workers with the same spec");
    if (req->first() < 0 || req->count() < 0)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "first and count must be >= 0");
    Expected<runtime::PipelineState> base =
        runtime::PipelineState::fromJson(req->base_state());
    if (!base)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "base state: " + base.status().message());
    if (so_.shareBytes <= 0)
      return produce(ctx, req, *base, writer, started, nullptr);
    // Sharing: one stream makes a chunk, others asking for the same one
    // are sent what it kept (or wait for it while it is being made).
    std::string key = std::to_string(req->fingerprint()) + "|" +
                      req->base_state() + "|" + std::to_string(req->first()) +
                      "|" + std::to_string(req->count());
    std::shared_ptr<SharedChunk> chunk;
    bool mine = false;
    {
      std::unique_lock<std::mutex> lock(shareMu_);
      auto it = shared_.find(key);
      if (it == shared_.end()) {
        chunk = std::make_shared<SharedChunk>();
        shared_[key] = chunk;
        mine = true;
      } else {
        chunk = it->second;
        while (chunk->state == SharedChunk::kMaking) {
          if (ctx->IsCancelled())
            return grpc::Status(grpc::StatusCode::CANCELLED,
                                "the trainer gave up while another stream "
                                "made the chunk");
          shareCv_.wait_for(lock, std::chrono::milliseconds(100));
        }
      }
    }
    if (!mine) {
      if (chunk->state == SharedChunk::kKept)
        return replayShared(ctx, req, *chunk, writer, started);
      // Not kept (failed, cut, or larger than the bound): made again.
      return produce(ctx, req, *base, writer, started, nullptr);
    }
    grpc::Status st = produce(ctx, req, *base, writer, started, chunk.get());
    {
      std::lock_guard<std::mutex> lock(shareMu_);
      if (st.ok() && chunk->state == SharedChunk::kMaking &&
          chunk->bytes <= so_.shareBytes) {
        chunk->state = SharedChunk::kKept;
        keptOrder_.push_back(key);
        keptBytes_ += chunk->bytes;
        // The oldest kept chunks go first.
        while (keptBytes_ > so_.shareBytes && !keptOrder_.empty()) {
          auto old = shared_.find(keptOrder_.front());
          if (old != shared_.end()) {
            keptBytes_ -= old->second->bytes;
            shared_.erase(old);
          }
          keptOrder_.pop_front();
        }
      } else {
        chunk->state = SharedChunk::kNotKept;
        chunk->outputs.clear();
        shared_.erase(key);
      }
    }
    shareCv_.notify_all();
    return st;
  }

  /// A chunk's outputs kept for other trainers, encoded once: each
  /// output's header (its CPU left out: the maker's stream carried it) and
  /// its data parts, slices over the numeric fields it holds. Every job is
  /// sent these same bytes (or the fields copied into its slots).
  struct SharedChunk {
    enum State { kMaking, kKept, kNotKept } state = kMaking;
    struct Kept {
      grpc::Slice head;
      std::vector<Tensor> data;
      std::vector<grpc::ByteBuffer> parts;
    };
    std::vector<Kept> outputs;
    int64_t bytes = 0;
  };

  /// Sends a kept chunk: the messages its maker encoded.
  grpc::Status replayShared(grpc::ServerContext *ctx, const ProduceRequest *req,
                            const SharedChunk &chunk, Writer *writer,
                            std::chrono::steady_clock::time_point started) {
    TrainerStats ts;
    ts.chunks = 1;
    detail::SlotWriter slots = slotWriter(*req);
    bool cut = false;
    for (size_t i = 0; i < chunk.outputs.size(); ++i) {
      const SharedChunk::Kept &k = chunk.outputs[i];
      if (ctx->IsCancelled()) {
        cut = true;
        break;
      }
      double cpu0 = threadCpuSeconds();
      cut = !sendOutput(writer, slots, nullptr, i, k.head, k.data, k.parts, ts);
      ts.encodeCpu += threadCpuSeconds() - cpu0;
      if (cut)
        break;
      ++ts.outputs;
      ++ts.shared;
    }
    return finishStream(ctx, req, started, ts, cut);
  }

  /// Threads for a new pipeline of `req` when fewer than the worker's own
  /// (--threads, or the budget's cores), else 0 (its own): its share of
  /// this host's cores, when the trainer is on this host (its boot id) and
  /// says `host_workers` of its workers may be here. Otherwise workers
  /// started without --threads on the trainer's host each run a thread per
  /// core, and their pipelines' threads outnumber the cores
  /// (bench/results.md, eighth session: on 2 cores, 2 workers of 2 threads
  /// took 2% more CPU per f32 batch than split to 1 each, within that
  /// host's noise). The bytes never depend on threads.
  /// SLUICE_NO_HOST_CORE_SPLIT=1: always the worker's own count.
  int64_t threadsFor(const ProduceRequest &req) const {
    int64_t own = sp_.threads();
    static const bool off = switchedOff("SLUICE_NO_HOST_CORE_SPLIT");
    if (off || req.host_workers() <= 1 || req.boot_id().empty() ||
        req.boot_id() != detail::bootId())
      return 0;
    int64_t cores = hostCores();
    int64_t share = std::max<int64_t>(1, cores / req.host_workers());
    return share < own ? share : 0;
  }

  /// Where a new pipeline for `req` makes its batches: in the slots the
  /// trainer lends (SlotBatches) when the trainer is on this host, unless
  /// SLUICE_NO_SLOT_DIRECT=1 or the worker keeps chunks for other jobs
  /// (--share-outputs: a kept output's bytes must outlive the slot the
  /// trainer takes over); null: ordinary buffers.
  std::shared_ptr<detail::SlotBatches>
  slotBatches(const ProduceRequest &req) const {
    if (!detail::slotDirectEnabled() || so_.shareBytes > 0 ||
        req.boot_id().empty() || req.boot_id() != detail::bootId())
      return nullptr;
    auto b = std::make_shared<detail::SlotBatches>(req.first(), req.boot_id());
    // Before the pipeline starts: its first batches are made right away.
    b->lend(req.first(), slotRefs(req));
    return b;
  }

  /// The request's slots (Slots.h), for its outputs' numeric fields.
  static detail::SlotWriter slotWriter(const ProduceRequest &req) {
    return detail::SlotWriter(slotRefs(req), req.boot_id());
  }

  /// The slots `req` lends, in its outputs' order.
  static std::vector<detail::SlotRef> slotRefs(const ProduceRequest &req) {
    std::vector<detail::SlotRef> refs;
    for (const Slot &s : req.slots()) {
      detail::SlotRef r;
      r.path = s.path();
      r.nonce[0] = s.nonce0();
      r.nonce[1] = s.nonce1();
      r.lease = s.lease();
      r.capacity = s.capacity() > 0 ? static_cast<uint64_t>(s.capacity()) : 0;
      r.bound =
          req.slot_bound() > 0 ? static_cast<uint32_t>(req.slot_bound()) : 0;
      refs.push_back(std::move(r));
    }
    return refs;
  }

  /// The data parts of an output's numeric fields: slices over their
  /// buffers, at most kPartBytes each.
  static std::vector<grpc::ByteBuffer>
  dataParts(const std::vector<Tensor> &data) {
    std::vector<grpc::ByteBuffer> parts;
    for (const Tensor &x : data)
      for (size_t off = 0; off < x.nbytes(); off += kPartBytes)
        parts.push_back(
            dataPart(x, off, std::min(kPartBytes, x.nbytes() - off)));
    return parts;
  }

  /// Sends the chunk's `i`-th output: its header (`head`, the Part
  /// serialised), then its numeric fields `data`: written into the slot the
  /// trainer lent for it when this worker can (the header then says so, in
  /// a few bytes after it that protobuf merges into the Output), else as
  /// data parts (`parts`, or made here when empty). False: the stream was
  /// cut.
  bool sendOutput(Writer *writer, detail::SlotWriter &slots,
                  detail::SlotBatches *batches, size_t i,
                  const grpc::Slice &head, const std::vector<Tensor> &data,
                  std::vector<grpc::ByteBuffer> parts, TrainerStats &ts) {
    int64_t pwritten = slots.pwritten();
    // Made in its slot by the pipeline: nothing to copy.
    bool direct = !data.empty() && batches && slots.ref(i) &&
                  batches->handOver(*slots.ref(i), data);
    if (direct) {
      slots.wroteElsewhere();
      ++ts.slotDirect;
    }
    bool inSlot = direct || (!data.empty() && slots.write(i, data));
    ts.slotPwrites += slots.pwritten() - pwritten;
    grpc::Slice headSlices[2] = {head, grpc::Slice()};
    size_t n = 1;
    if (inSlot || slots.unreachable()) {
      Part note;
      note.mutable_output()->set_in_slot(inSlot);
      note.mutable_output()->set_slots_unreachable(slots.unreachable());
      headSlices[n++] = grpc::Slice(note.SerializeAsString());
    }
    grpc::ByteBuffer headBuf(headSlices, n);
    ts.bytes += static_cast<int64_t>(headBuf.Length());
    if (!writer->Write(headBuf))
      return false;
    if (inSlot) {
      ++ts.slotOutputs;
      return true;
    }
    if (parts.empty())
      parts = dataParts(data);
    for (const grpc::ByteBuffer &part : parts) {
      ts.bytes += static_cast<int64_t>(part.Length());
      if (!writer->Write(part))
        return false;
    }
    return true;
  }

  /// The end of a Produce stream: its time and counts into the trainer's
  /// stats, and the status (never OK when cut short: that would tell the
  /// trainer its share ended here).
  grpc::Status finishStream(grpc::ServerContext *ctx, const ProduceRequest *req,
                            std::chrono::steady_clock::time_point started,
                            TrainerStats &ts, bool cut) {
    ts.seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - started)
                     .count();
    record(req->trainer() + " (" + ctx->peer() + ")", ts);
    if (cut)
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the stream was cut (the worker is stopping or the "
                          "trainer went away)");
    holdStreamEnd(ctx);
    return grpc::Status::OK;
  }

  /// Fault injection for tests: SLUICE_TEST_HOLD_STREAM_END=S makes every
  /// stream end S seconds after its last output (or when the trainer
  /// cancels it), as a worker stopped or hung after its last write would;
  /// test_distributed.py checks that the trainer does not wait for it.
  static void holdStreamEnd(grpc::ServerContext *ctx) {
    static const double hold = [] {
      const char *v = std::getenv("SLUICE_TEST_HOLD_STREAM_END");
      return v ? std::atof(v) : 0.0;
    }();
    auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(hold);
    while (hold > 0 && !ctx->IsCancelled() &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  /// Makes the chunk (by position, or by the replayed order), keeping its
  /// outputs in `keep` when given.
  grpc::Status produce(grpc::ServerContext *ctx, const ProduceRequest *req,
                       const runtime::PipelineState &baseState, Writer *writer,
                       std::chrono::steady_clock::time_point started,
                       SharedChunk *keep) {
    const runtime::PipelineState *base = &baseState;
    if (sp_.replay())
      return produceReplay(ctx, req, *base, writer, started, keep);
    if (base->positionStart < 0)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the base state does not resume by position");
    runtime::PipelineState st = *base;
    st.outputs += req->first();
    st.rows += req->first() * rows_;
    // The engine's own bound (Engine::checkResumeState): past it the share
    // has nothing left, which is an empty chunk, not an error.
    if (sourceRecords_) {
      int64_t left = *sourceRecords_ - st.positionStart;
      int64_t most = left / st.worldSize + (left % st.worldSize != 0);
      if (st.rows > most || req->count() == 0)
        return grpc::Status::OK;
    }
    // The trainer's next chunk after the one this worker made last: the
    // pipeline kept from it continues (the same positions, so the same
    // bytes, without a new pipeline's start and the read-ahead a stop
    // throws away). Any other chunk stops the kept pipeline first, so the
    // worker holds one pipeline's budget per stream at most.
    std::string continuation = req->trainer() + "|" + req->base_state();
    std::unique_ptr<runtime::Pipeline> pipe;
    std::shared_ptr<detail::SlotBatches> batches;
    {
      std::lock_guard<std::mutex> lock(keptMu_);
      if (kept_ && keptKey_ == continuation && keptNext_ == req->first()) {
        pipe = std::move(kept_);
        batches = std::move(keptBatches_);
      } else if (kept_)
        kept_->stop();
      kept_.reset();
      keptBatches_.reset();
    }
    bool continued = pipe != nullptr;
    if (!pipe) {
      runtime::RunOptions o = opts_;
      if (int64_t t = threadsFor(*req))
        o.threads = t;
      o.resume = st;
      o.rank = st.rank;
      o.worldSize = st.worldSize;
      o.epochs = st.epoch + 1;
      o.outputBuffers = batches = slotBatches(*req);
      auto created = runtime::Pipeline::create(plan_, o);
      if (!created)
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            created.status().message());
      pipe = created.take();
    }
    int64_t rowsDone = st.rows;
    bool reusable = false;
    grpc::Status status = streamOutputs(
        ctx, req, *pipe, st.epoch, writer, started,
        [&](const runtime::Batch &batch, int64_t i) {
          // The state a local run has here: positions counted from the
          // base, not from this chunk's resume point (the same positions
          // either way).
          rowsDone += batch.rows();
          runtime::PipelineState after = pipe->state();
          if (after.epoch == st.epoch && after.positionStart >= 0) {
            after.positionStart = st.positionStart;
            after.rows = rowsDone;
            after.outputs = st.outputs + i + 1;
          }
          return after;
        },
        nullptr, keep, batches.get(), continueChunks() ? &reusable : nullptr,
        continued);
    if (reusable) {
      std::lock_guard<std::mutex> lock(keptMu_);
      if (kept_)
        kept_->stop();
      kept_ = std::move(pipe);
      keptBatches_ = std::move(batches);
      keptKey_ = continuation;
      keptNext_ = req->first() + req->count();
    }
    return status;
  }

  /// Whether a chunk's pipeline is kept for the trainer's next chunk
  /// (SLUICE_NO_CHUNK_CONTINUATION=1: every chunk starts its own).
  static bool continueChunks() {
    static const bool on = !switchedOff("SLUICE_NO_CHUNK_CONTINUATION");
    return on;
  }

  /// A chunk of a replayed pipeline (Replay.h): the share's row order says
  /// which positions its outputs hold; the plan without its shuffle steps
  /// makes them from those positions.
  grpc::Status produceReplay(grpc::ServerContext *ctx,
                             const ProduceRequest *req,
                             const runtime::PipelineState &base, Writer *writer,
                             std::chrono::steady_clock::time_point started,
                             SharedChunk *keep) {
    if (base.positionStart >= 0)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "this worker replays the pipeline's order: the base "
                          "state must count outputs, not positions");
    Expected<std::shared_ptr<const std::vector<int64_t>>> order =
        sp_.order(base.epoch, base.rank, base.worldSize);
    if (!order)
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          order.status().message());
    const std::vector<int64_t> &rows = **order;
    int64_t total = static_cast<int64_t>(rows.size());
    int64_t first = base.outputs + req->first();
    int64_t from = first * rows_;
    if (req->count() == 0 || from >= total)
      return grpc::Status::OK;
    int64_t to = std::min<int64_t>(total, (first + req->count()) * rows_);
    runtime::RunOptions o = opts_;
    if (int64_t t = threadsFor(*req))
      o.threads = t;
    o.resume.reset();
    o.rank = 0;
    o.worldSize = 1;
    o.firstEpoch = base.epoch;
    o.epochs = base.epoch + 1;
    o.controller = nullptr;
    o.positions = std::make_shared<const std::vector<int64_t>>(
        rows.begin() + from, rows.begin() + to);
    std::shared_ptr<detail::SlotBatches> batches = slotBatches(*req);
    o.outputBuffers = batches;
    auto created = runtime::Pipeline::create(sp_.chunkPlan(), o);
    if (!created)
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          created.status().message());
    std::unique_ptr<runtime::Pipeline> pipe = created.take();
    int64_t epochOutputs = sp_.outputsFor(total);
    int64_t rowsDone = 0;
    // Rows the chunk's positions must give (a short last batch dropped):
    // fewer means a position held no record (an empty file), which a
    // local run would have skipped, moving every later row.
    int64_t want = to - from;
    if (sp_.dropRemainder())
      want -= want % rows_;
    return streamOutputs(
        ctx, req, *pipe, base.epoch, writer, started,
        [&](const runtime::Batch &batch, int64_t i) {
          rowsDone += batch.rows();
          // What a local run's state() says after this output: a replay
          // state, which names the next epoch after the last output when
          // the epoch's outputs are known in advance (no filter).
          runtime::PipelineState after = base;
          after.outputs = first + i + 1;
          if (sp_.countKnown() && after.outputs >= epochOutputs) {
            ++after.epoch;
            after.outputs = 0;
          }
          return after;
        },
        [&]() -> std::optional<std::string> {
          if (rowsDone == want)
            return std::nullopt;
          return "positions " + std::to_string(from) + ".." +
                 std::to_string(to - 1) + " of the share's order gave " +
                 std::to_string(rowsDone) + " rows instead of " +
                 std::to_string(want) +
                 " (an empty file in the source?): a replayed order needs "
                 "one record per position; remove empty files";
        },
        keep, batches.get());
  }

  /// Streams up to req->count() outputs of `pipe` (of epoch `epoch`):
  /// each an Output header, then its numeric fields' bytes in parts.
  /// `stateAfter(batch, i)` is the state after the chunk's i-th output;
  /// `checkEnd`, when given, checks the chunk once the pipeline ran out.
  grpc::Status streamOutputs(
      grpc::ServerContext *ctx, const ProduceRequest *req,
      runtime::Pipeline &pipeRef, int64_t epoch, Writer *writer,
      std::chrono::steady_clock::time_point started,
      const std::function<runtime::PipelineState(const runtime::Batch &,
                                                 int64_t)> &stateAfter,
      const std::function<std::optional<std::string>()> &checkEnd,
      SharedChunk *keep, detail::SlotBatches *batches, bool *reusable = nullptr,
      bool continued = false) {
    runtime::Pipeline *pipe = &pipeRef;
    runtime::Batch batch;
    TrainerStats ts;
    ts.chunks = 1;
    ts.continued = continued;
    if (!continued) {
      ts.started = 1;
      ts.threads = pipe->stats().threads;
    }
    // Cut short (the trainer cancelled, or this worker is shutting down):
    // never OK, which would tell the trainer its share ended here.
    bool cut = false;
    // Reused for every output: their strings keep their capacity.
    Part head;
    detail::SlotWriter slots = slotWriter(*req);
    // The batches the pipeline makes from here go into the request's slots
    // (those lent ahead too: a kept pipeline reads ahead into them after
    // the stream's end). A slot the trainer took back since fails the
    // lease's check, so none is forgotten at the end.
    if (batches)
      batches->lend(req->first(), slots.refs());
    // The pipeline's CPU (RunStats, summed over its stages and serial
    // threads) is sampled at most every 20 ms: a record-sized output would
    // otherwise pay for a stats snapshot each. Each output carries what
    // was spent since the last sample, plus the encoding of the outputs
    // before it.
    double cpuSampled = 0, encodeOwed = 0;
    auto lastSample = std::chrono::steady_clock::now();
    auto pipelineCpu = [&] {
      runtime::RunStats rs = pipe->stats();
      double c = rs.consumerCpuSeconds;
      for (const runtime::StageStats &st : rs.stages)
        c += st.cpuSeconds + st.threadCpuSeconds;
      return c;
    };
    // A continued pipeline's earlier CPU went with the earlier chunk.
    if (continued)
      cpuSampled = pipelineCpu();
    for (int64_t i = 0; i < req->count(); ++i) {
      if (ctx->IsCancelled()) {
        cut = true;
        break;
      }
      Expected<bool> more = pipe->next(batch);
      if (!more) {
        pipe->stop();
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            more.status().message());
      }
      if (!*more || batch.epoch() != epoch) {
        if (checkEnd)
          if (std::optional<std::string> bad = checkEnd()) {
            pipe->stop();
            return grpc::Status(grpc::StatusCode::DATA_LOSS, *bad);
          }
        break;
      }
      double cpu0 = threadCpuSeconds();
      Output &out = *head.mutable_output();
      out.Clear();
      out.set_index(req->first() + i);
      out.set_epoch(batch.epoch());
      encode(batch, out);
      out.set_state(stateAfter(batch, i).toJson());
      std::vector<Tensor> data;
      for (size_t f = 0; f < batch.numFields(); ++f)
        if (batch.field(f).isNumeric())
          data.push_back(batch.field(f));
      auto now = std::chrono::steady_clock::now();
      if (now - lastSample >= std::chrono::milliseconds(20) ||
          i + 1 == req->count()) {
        double c = pipelineCpu();
        out.set_cpu_seconds(c - cpuSampled + encodeOwed);
        cpuSampled = c;
        encodeOwed = 0;
        lastSample = now;
      }
      std::vector<grpc::ByteBuffer> parts;
      if (keep && keep->bytes <= so_.shareBytes) {
        // Kept for other jobs: encoded once, here, for all of them.
        SharedChunk::Kept k;
        k.data = data;
        k.parts = parts = dataParts(data);
        double cpu = out.cpu_seconds();
        out.clear_cpu_seconds();
        k.head = grpc::Slice(head.SerializeAsString());
        out.set_cpu_seconds(cpu);
        for (const Tensor &x : data)
          keep->bytes += static_cast<int64_t>(x.nbytes());
        keep->outputs.push_back(std::move(k));
      }
      cut = !sendOutput(writer, slots, batches, static_cast<size_t>(i),
                        grpc::Slice(head.SerializeAsString()), data,
                        std::move(parts), ts);
      ts.encodeCpu += threadCpuSeconds() - cpu0;
      encodeOwed += threadCpuSeconds() - cpu0;
      if (cut)
        break;
      ++ts.outputs;
    }
    // All `count` outputs made and sent: the pipeline can go on with the
    // trainer's next chunk (the caller keeps it running); else it stops.
    if (reusable && !cut && ts.outputs == req->count())
      *reusable = true;
    else
      pipe->stop();
    return finishStream(ctx, req, started, ts, cut);
  }

  /// One of the worker's --streams, held for a Produce call.
  class StreamSlot {
  public:
    explicit StreamSlot(WorkerService &s) : s_(s) {}
    bool wait(grpc::ServerContext *ctx) {
      if (s_.so_.streams <= 0)
        return true;
      std::unique_lock<std::mutex> lock(s_.slotMu_);
      while (s_.running_ >= s_.so_.streams) {
        if (ctx->IsCancelled())
          return false;
        s_.slotCv_.wait_for(lock, std::chrono::milliseconds(100));
      }
      ++s_.running_;
      held_ = true;
      return true;
    }
    ~StreamSlot() {
      if (!held_)
        return;
      std::lock_guard<std::mutex> lock(s_.slotMu_);
      --s_.running_;
      s_.slotCv_.notify_one();
    }

  private:
    WorkerService &s_;
    bool held_ = false;
  };

  std::string statsText(const std::string &address) {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream os;
    for (const auto &[who, t] : stats_) {
      os << "sluice serve " << address << ": trainer " << who << ": "
         << t.chunks << " chunks, " << t.outputs << " outputs, ";
      if (so_.shareBytes > 0)
        os << t.shared << " of them from chunks kept for sharing, ";
      if (t.slotOutputs)
        os << t.slotOutputs << " of them in the trainer's shared memory ("
           << t.slotPwrites << " written with pwrite), " << t.slotDirect
           << " of them made there by the pipeline (not copied), "
           << detail::slotMappingsMade() << " slots mapped by this worker, ";
      if (t.continued)
        os << t.continued << " chunks continued the previous one's pipeline, ";
      if (t.started)
        os << t.started << " pipelines started (the last of " << t.threads
           << " threads), ";
      os << std::fixed << std::setprecision(1) << t.bytes / 1048576.0
         << " MiB sent";
      if (t.outputs)
        os << ", " << std::setprecision(3) << 1e3 * t.encodeCpu / t.outputs
           << " ms CPU per output encoding and writing, " << t.bytes / t.outputs
           << " bytes per output";
      os << "\n";
    }
    return os.str();
  }

private:
  grpc::Status authorize(grpc::ServerContext *ctx) const {
    if (so_.security.token.empty())
      return grpc::Status::OK;
    const auto &md = ctx->client_metadata();
    auto it = md.find("authorization");
    std::string want = "Bearer " + so_.security.token;
    if (it == md.end() ||
        !sameSecret(want,
                    std::string_view(it->second.data(), it->second.size())))
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this worker needs its shared token (the trainer's "
                          "token= / SLUICE_TOKEN must equal the worker's "
                          "--token-file)");
    return grpc::Status::OK;
  }

  RecordType outputType() const {
    return plan_.steps.empty() ? plan_.source.outputType
                               : plan_.steps.back().outputType;
  }

  static void encode(const runtime::Batch &b, Output &out) {
    const RecordType &t = b.type();
    for (size_t i = 0; i < b.numFields(); ++i) {
      const Tensor &x = b.field(i);
      Field *f = out.add_fields();
      f->set_name(t.fields()[i].name);
      f->set_dtype(std::string(elemTypeName(x.elem())));
      for (int64_t d : x.shape())
        f->add_shape(d);
      if (x.isNumeric())
        f->set_nbytes(static_cast<int64_t>(x.nbytes()));
      else
        for (const std::string &s : x.stringValues())
          f->add_items(s);
    }
  }

  void record(const std::string &who, const TrainerStats &t) {
    std::lock_guard<std::mutex> lock(mu_);
    TrainerStats &s = stats_[who];
    s.chunks += t.chunks;
    s.outputs += t.outputs;
    s.bytes += t.bytes;
    s.encodeCpu += t.encodeCpu;
    s.shared += t.shared;
    s.slotOutputs += t.slotOutputs;
    s.slotPwrites += t.slotPwrites;
    s.slotDirect += t.slotDirect;
    s.continued += t.continued;
    s.started += t.started;
    if (t.threads)
      s.threads = t.threads;
    s.seconds += t.seconds;
  }

  const runtime::Plan &plan_;
  const runtime::RunOptions &opts_;
  const ServeOptions &so_;
  detail::ServePlan &sp_;
  const int64_t rows_;
  const uint64_t fingerprint_;
  std::optional<int64_t> sourceRecords_;
  std::mutex mu_;
  std::map<std::string, TrainerStats> stats_;
  std::mutex shareMu_;
  std::condition_variable shareCv_;
  std::map<std::string, std::shared_ptr<SharedChunk>> shared_;
  std::deque<std::string> keptOrder_;
  int64_t keptBytes_ = 0;
  std::mutex slotMu_;
  std::condition_variable slotCv_;
  int64_t running_ = 0;
  /// The pipeline kept from the last chunk made by position (whole, not
  /// cut), for the same trainer's next chunk: its key (trainer and base
  /// state) and the first output it would make.
  std::mutex keptMu_;
  std::unique_ptr<runtime::Pipeline> kept_;
  /// The kept pipeline's SlotBatches (null: it makes ordinary buffers).
  std::shared_ptr<detail::SlotBatches> keptBatches_;
  std::string keptKey_;
  int64_t keptNext_ = 0;
};

} // namespace

Status checkServable(const runtime::Plan &plan,
                     const runtime::RunOptions &opts) {
  auto sp = detail::ServePlan::make(plan, opts);
  return sp ? Status::ok() : sp.status();
}

int serve(const runtime::Plan &plan, const runtime::RunOptions &runOpts,
          const ServeOptions &so, std::ostream &err) {
  runtime::RunOptions opts = runOpts;
  if (so.streams > 0) {
    int64_t budget = opts.memoryBytes ? opts.memoryBytes : plan.memoryBytes;
    if (budget <= 0) {
      err << "sluice serve: error: --streams shares the worker's memory "
             "budget among its streams, and neither the spec's "
             "budget.memory nor --memory gives one\n";
      return 2;
    }
    opts.memoryBytes = std::max<int64_t>(1, budget / so.streams);
  }
  auto made = detail::ServePlan::make(plan, opts);
  if (!made) {
    err << "sluice serve: error: " << made.status().message();
    if (so.streams > 0)
      err << " (with --streams " << so.streams << " each stream has "
          << runtime::formatBytes(opts.memoryBytes)
          << " of the worker's budget: raise --memory or lower --streams)";
    err << "\n";
    return 1;
  }
  std::unique_ptr<detail::ServePlan> servePlan = made.take();
  keepFreedMemory();

  // SIGINT/SIGTERM are waited for below; gRPC's threads inherit the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!so.security.tlsCert.empty() || !so.security.tlsKey.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({so.security.tlsKey, so.security.tlsCert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  WorkerService service(plan, opts, so, *servePlan);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(so.listen, creds, &port);
  builder.RegisterService(&service);
  builder.SetMaxSendMessageSize(-1);
  builder.SetMaxReceiveMessageSize(16 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    err << "sluice serve: error: cannot listen on '" << so.listen
        << "' (give host:port, e.g. 127.0.0.1:7070 or [::1]:7070; the port "
           "may be in use, or the host is not an address of this machine)\n";
    return 2;
  }
  std::string host = so.listen.substr(0, so.listen.rfind(':'));
  std::string bound = host + ":" + std::to_string(port);
  if (!so.portFile.empty()) {
    std::string tmp = so.portFile + ".tmp";
    {
      std::ofstream f(tmp);
      f << bound << "\n";
    }
    std::rename(tmp.c_str(), so.portFile.c_str());
  }
  if (!so.quiet)
    err << "sluice serve: pipeline '" << plan.name << "' on " << bound
        << (so.security.tlsCert.empty() ? "" : " (TLS)")
        << (so.security.token.empty() ? "" : " (token required)") << "\n";

  std::atomic<bool> stopping{false};
  std::thread statsThread;
  if (so.statsInterval > 0)
    statsThread = std::thread([&] {
      auto next = std::chrono::steady_clock::now();
      while (!stopping) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (std::chrono::steady_clock::now() < next)
          continue;
        next += std::chrono::milliseconds(int64_t(so.statsInterval * 1000));
        err << service.statsText(bound) << std::flush;
      }
    });
  int sig = 0;
  sigwait(&sigs, &sig);
  stopping = true;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  if (statsThread.joinable())
    statsThread.join();
  if (!so.quiet)
    err << service.statsText(bound) << "sluice serve: stopped ("
        << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ")\n";
  return 0;
}

} // namespace sluice::remote
