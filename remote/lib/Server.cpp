//===- Server.cpp - `sluice serve`: a worker streaming outputs over gRPC --===//
//
// Each Produce call is a chunk of one trainer's share of an epoch: the
// worker turns (base state, first) into the PipelineState a local run has
// after `first` outputs, resumes a Pipeline there (positional resume reads
// from that position on: no replay), and writes `count` outputs to the
// stream. gRPC's synchronous Write returns only once the transport has room
// (HTTP/2 flow control), so a trainer that stops reading stops the worker's
// pipeline within its budget: back-pressure needs no code of its own here.
// Nothing outlives a call; every chunk is independent (docs/distributed.md).
//
//===----------------------------------------------------------------------===//
#include "sluice/remote/Remote.h"

#include "sluice_remote.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <ostream>
#include <pthread.h>
#include <sstream>
#include <thread>
#include <time.h>

namespace sluice::remote {

uint64_t specDigest(const std::string &text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

/// The most bytes of a field one data part carries.
constexpr size_t kPartBytes = 256 << 10;

double threadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/// Rows of a full output: the size of the plan's batch step, 1 without one.
int64_t batchRows(const runtime::Plan &plan) {
  for (const runtime::PlanStage &st : plan.stages)
    if ((st.op == "batch" || st.op == "padded_batch") &&
        st.params["size"].isNumber())
      return st.params["size"].asInt();
  return 1;
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
  double encodeCpu = 0, seconds = 0;
};

class WorkerService final : public Worker::Service {
public:
  WorkerService(const runtime::Plan &plan, const runtime::RunOptions &opts,
                const ServeOptions &so)
      : plan_(plan), opts_(opts), so_(so), rows_(batchRows(plan)),
        fingerprint_(runtime::planFingerprint(plan)) {}

  /// Source records of one epoch, when the source knows (for the check that
  /// a chunk starts inside the epoch).
  void setSourceRecords(std::optional<int64_t> n) { sourceRecords_ = n; }

  grpc::Status Describe(grpc::ServerContext *ctx, const DescribeRequest *req,
                        DescribeReply *reply) override {
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
    (void)req;
    return grpc::Status::OK;
  }

  grpc::Status Produce(grpc::ServerContext *ctx, const ProduceRequest *req,
                       grpc::ServerWriter<Part> *writer) override {
    if (grpc::Status s = authorize(ctx); !s.ok())
      return s;
    auto started = std::chrono::steady_clock::now();
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
    runtime::RunOptions o = opts_;
    o.resume = st;
    o.rank = st.rank;
    o.worldSize = st.worldSize;
    o.epochs = st.epoch + 1;
    auto created = runtime::Pipeline::create(plan_, o);
    if (!created)
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          created.status().message());
    std::unique_ptr<runtime::Pipeline> pipe = created.take();
    runtime::Batch batch;
    TrainerStats ts;
    ts.chunks = 1;
    int64_t rowsDone = st.rows;
    // Cut short (the trainer cancelled, or this worker is shutting down):
    // never OK, which would tell the trainer its share ended here.
    bool cut = false;
    // Reused for every output: their strings keep their capacity.
    Part head, data;
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
      if (!*more || batch.epoch() != st.epoch)
        break;
      double cpu0 = threadCpuSeconds();
      Output &out = *head.mutable_output();
      out.Clear();
      out.set_index(req->first() + i);
      out.set_epoch(batch.epoch());
      encode(batch, out);
      // The state a local run has here: positions counted from the base,
      // not from this chunk's resume point (the same positions either way).
      rowsDone += batch.rows();
      runtime::PipelineState after = pipe->state();
      if (after.epoch == st.epoch && after.positionStart >= 0) {
        after.positionStart = st.positionStart;
        after.rows = rowsDone;
        after.outputs = st.outputs + i + 1;
      }
      out.set_state(after.toJson());
      ts.bytes += static_cast<int64_t>(head.ByteSizeLong());
      if (!writer->Write(head)) {
        cut = true;
        break;
      }
      for (size_t f = 0; f < batch.numFields() && !cut; ++f) {
        const Tensor &x = batch.field(f);
        if (!x.isNumeric())
          continue;
        for (size_t off = 0; off < x.nbytes(); off += kPartBytes) {
          size_t n = std::min(kPartBytes, x.nbytes() - off);
          data.set_data(reinterpret_cast<const char *>(x.raw()) + off, n);
          ts.bytes += static_cast<int64_t>(data.ByteSizeLong());
          if (!writer->Write(data)) {
            cut = true;
            break;
          }
        }
      }
      ts.encodeCpu += threadCpuSeconds() - cpu0;
      if (cut)
        break;
      ++ts.outputs;
    }
    pipe->stop();
    ts.seconds = std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - started)
                     .count();
    record(req->trainer() + " (" + ctx->peer() + ")", ts);
    if (cut)
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the stream was cut (the worker is stopping or the "
                          "trainer went away)");
    return grpc::Status::OK;
  }

  std::string statsText(const std::string &address) {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream os;
    for (const auto &[who, t] : stats_) {
      os << "sluice serve " << address << ": trainer " << who << ": "
         << t.chunks << " chunks, " << t.outputs << " outputs, " << std::fixed
         << std::setprecision(1) << t.bytes / 1048576.0 << " MiB sent";
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
    return plan_.stages.empty() ? plan_.source.outputType
                                : plan_.stages.back().outputType;
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
    s.seconds += t.seconds;
  }

  const runtime::Plan &plan_;
  const runtime::RunOptions &opts_;
  const ServeOptions &so_;
  const int64_t rows_;
  const uint64_t fingerprint_;
  std::optional<int64_t> sourceRecords_;
  std::mutex mu_;
  std::map<std::string, TrainerStats> stats_;
};

std::string readFile(const std::string &path, std::string &err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    err = "cannot read '" + path + "'";
    return "";
  }
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

} // namespace

Status checkServable(const runtime::Plan &plan,
                     const runtime::RunOptions &opts) {
  runtime::RunOptions o = opts;
  o.epochs = 1;
  o.controller = nullptr;
  auto created = runtime::Pipeline::create(plan, o);
  if (!created)
    return created.status();
  runtime::PipelineState st = (*created)->state();
  (*created)->stop();
  if (st.positionStart < 0)
    return Status::error(
        "pipeline '" + plan.name +
        "' cannot be served: a worker resumes it at any output by position, "
        "and this pipeline only resumes by replaying its epoch (a shuffle "
        "step's buffer, a filter, take/skip, repeat, unbatch, interleave, "
        "a cache or `on_error: skip` hold state that positions cannot "
        "describe); read the source by position instead: `shuffle: true` on "
        "the source in place of a shuffle step, and no filter "
        "(docs/distributed.md)");
  return Status::ok();
}

int serve(const runtime::Plan &plan, const runtime::RunOptions &opts,
          const ServeOptions &so, std::ostream &err) {
  if (Status s = checkServable(plan, opts); !s) {
    err << "sluice serve: error: " << s.message() << "\n";
    return 1;
  }
  // One epoch's source records, for the end-of-share check.
  std::optional<int64_t> sourceRecords;
  {
    runtime::RunOptions o = opts;
    o.epochs = 1;
    o.rank = 0;
    o.worldSize = 1;
    o.controller = nullptr;
    auto p = runtime::Pipeline::create(plan, o);
    if (p) {
      sourceRecords = (*p)->expectedSourceRecords();
      (*p)->stop();
    }
  }

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
  WorkerService service(plan, opts, so);
  service.setSourceRecords(sourceRecords);
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
