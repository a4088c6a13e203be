//===- Metrics.cpp - Prometheus text exposition of a run's counters -------===//
//
// See Metrics.h. The server answers GET /metrics (and / with a pointer to
// it) on one cpp-httplib thread; the file writer wakes every interval and
// renames a fully written temporary file over the target.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Metrics.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace sluice::runtime {

namespace {

/// A label value as the format wants it: backslash, quote and newline
/// escaped.
std::string escapeLabel(const std::string &v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class Writer {
public:
  explicit Writer(std::string pipeline)
      : base_("pipeline=\"" + escapeLabel(pipeline) + "\"") {}

  /// Starts a metric family: its HELP and TYPE lines.
  void family(const std::string &name, const char *type,
              const std::string &help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " "
         << type << "\n";
  }
  void sample(const std::string &name, double v,
              const std::string &labels = "") {
    out_ << name << "{" << base_ << (labels.empty() ? "" : ",") << labels
         << "} " << number(v) << "\n";
  }
  /// A family with one sample.
  void one(const std::string &name, const char *type, const std::string &help,
           double v) {
    family(name, type, help);
    sample(name, v);
  }
  std::string text() const { return out_.str(); }

private:
  std::string base_;
  std::ostringstream out_;
};

} // namespace

std::string prometheusText(const RunStats &s) {
  Writer w(s.pipeline);
  const RunStats::Consumer &c = s.consumer;
  w.one("sluice_outputs_total", "counter",
        "Outputs (batches) the pipeline delivered.", double(s.outputs));
  w.one("sluice_records_total", "counter",
        "Source records the run went through (cache replays included).",
        double(s.records()));
  w.one("sluice_output_bytes_total", "counter",
        "Bytes of the outputs delivered.", double(s.outputBytes));
  w.one("sluice_epochs_done", "gauge", "Epochs finished.",
        double(s.epochsDone));
  w.one("sluice_threads", "gauge", "Worker threads.", double(s.threads));
  w.one("sluice_wall_seconds", "gauge",
        "Seconds since the first output was asked for.", s.wallSeconds);
  w.one("sluice_consumer_first_wait_seconds", "gauge",
        "How long the consumer waited for the first output (start-up).",
        c.firstWaitSeconds);
  w.one("sluice_consumer_wait_seconds_total", "counter",
        "Time the consumer waited for outputs after the first.", c.waitSeconds);
  w.one("sluice_consumer_max_wait_seconds", "gauge",
        "The longest wait for one output after the first.", c.maxWaitSeconds);
  w.one("sluice_consumer_stalls_total", "counter",
        "Outputs after the first the consumer waited for longer than " +
            number(RunStats::Consumer::kStallSeconds) + " s.",
        double(c.stalls));
  w.one("sluice_consumer_away_seconds_total", "counter",
        "Time the consumer spent between outputs (its own work).",
        c.awaySeconds);
  w.one("sluice_consumer_headspace_seconds_total", "counter",
        "Consumer time before outputs that were ready without a stall: "
        "an upper bound on how long the pipeline idled for a slow "
        "consumer.",
        c.headspaceSeconds);
  w.family("sluice_memory_bytes", "gauge",
           "Budget accounting: bytes reserved now, the peak, the limit (0: "
           "none), the process's resident set.");
  w.sample("sluice_memory_bytes", double(s.memoryInUse), "kind=\"in_use\"");
  w.sample("sluice_memory_bytes", double(s.memoryPeak), "kind=\"peak\"");
  w.sample("sluice_memory_bytes", double(s.memoryLimit), "kind=\"limit\"");
  w.sample("sluice_memory_bytes", double(s.rss), "kind=\"rss\"");

  struct PerStage {
    const char *name, *type, *help;
    double (*get)(const StageStats &);
  };
  static const PerStage perStage[] = {
      {"sluice_stage_read_total", "counter", "Elements a stage read.",
       [](const StageStats &t) { return double(t.read); }},
      {"sluice_stage_emitted_total", "counter", "Elements a stage passed on.",
       [](const StageStats &t) { return double(t.emitted); }},
      {"sluice_stage_filtered_total", "counter",
       "Elements a stage dropped by design (filter, shard, drop_remainder).",
       [](const StageStats &t) { return double(t.filtered); }},
      {"sluice_stage_skipped_total", "counter",
       "Bad elements a stage dropped under on_error: skip.",
       [](const StageStats &t) { return double(t.skippedTotal()); }},
      {"sluice_stage_cpu_seconds_total", "counter",
       "CPU time of a stage's own work.",
       [](const StageStats &t) { return t.cpuSeconds; }},
      {"sluice_stage_wall_seconds_total", "counter",
       "Wall time of a stage's own work, summed over its workers.",
       [](const StageStats &t) { return t.wallSeconds; }},
      {"sluice_stage_parallelism", "gauge", "A stage's workers.",
       [](const StageStats &t) { return double(t.parallelism); }},
      {"sluice_stage_buffer_occupancy", "gauge",
       "Mean occupancy of a stage's buffer, in elements (0: no buffer).",
       [](const StageStats &t) { return t.occupancyMean; }},
  };
  for (const PerStage &m : perStage) {
    w.family(m.name, m.type, m.help);
    for (const StageStats &t : s.stages)
      w.sample(m.name, m.get(t), "stage=\"" + escapeLabel(t.name) + "\"");
  }
  return w.text();
}

struct MetricsExporter::Impl {
  std::function<RunStats()> stats;
  std::string file;
  double interval = 5;
  std::unique_ptr<httplib::Server> server;
  std::thread serverThread, fileThread;
  std::mutex mu;
  std::condition_variable cv;
  bool quit = false;
  std::mutex fileMu;
};

MetricsExporter::MetricsExporter() : impl_(std::make_unique<Impl>()) {}

Expected<std::unique_ptr<MetricsExporter>>
MetricsExporter::start(std::function<RunStats()> stats,
                       const std::string &address, int port,
                       const std::string &file, double interval) {
  std::unique_ptr<MetricsExporter> e(new MetricsExporter());
  Impl &im = *e->impl_;
  im.stats = std::move(stats);
  im.file = file;
  im.interval = interval > 0 ? interval : 5;
  if (!file.empty()) {
    if (Status s = e->writeFile(); !s)
      return s;
    im.fileThread = std::thread([&im, self = e.get()] {
      std::unique_lock<std::mutex> lock(im.mu);
      auto period = std::chrono::duration<double>(im.interval);
      while (!im.cv.wait_for(lock, period, [&] { return im.quit; })) {
        lock.unlock();
        (void)self->writeFile(); // the next write (or the last) retries
        lock.lock();
      }
    });
  }
  if (port > 0) {
    im.server = std::make_unique<httplib::Server>();
    im.server->Get("/metrics", [&im](const httplib::Request &,
                                     httplib::Response &res) {
      res.set_content(prometheusText(im.stats()), "text/plain; version=0.0.4; "
                                                  "charset=utf-8");
    });
    im.server->Get("/", [](const httplib::Request &, httplib::Response &res) {
      res.set_content("sluice: the counters are at /metrics\n", "text/plain");
    });
    if (!im.server->bind_to_port(address.c_str(), port))
      return Status::error(
          "--metrics-port: cannot listen on " + address + ":" +
          std::to_string(port) +
          " (is another program using the port, or is the address not one "
          "of this host's?); choose another port with --metrics-port");
    im.serverThread = std::thread([&im] { im.server->listen_after_bind(); });
  }
  return e;
}

Status MetricsExporter::writeFile() {
  Impl &im = *impl_;
  if (im.file.empty())
    return Status::ok();
  std::lock_guard<std::mutex> lock(im.fileMu);
  std::string tmp = im.file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (f)
      f << prometheusText(im.stats());
    if (!f || !f.flush()) {
      std::remove(tmp.c_str());
      return Status::error("--metrics-file: cannot write " + im.file +
                           " (does its folder exist and is it writable?)");
    }
  }
  if (std::rename(tmp.c_str(), im.file.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error("--metrics-file: cannot replace " + im.file);
  }
  return Status::ok();
}

MetricsExporter::~MetricsExporter() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->quit = true;
  }
  impl_->cv.notify_all();
  if (impl_->fileThread.joinable())
    impl_->fileThread.join();
  if (impl_->server) {
    impl_->server->stop();
    if (impl_->serverThread.joinable())
      impl_->serverThread.join();
  }
  (void)writeFile(); // the final counters
}

} // namespace sluice::runtime
