//===- Metrics.cpp - Prometheus text exposition of a run's counters -------===//
//
// See Metrics.h. The server answers GET /metrics (and / with a pointer to
// it) on one cpp-httplib thread, in libsluice_metrics_http.so
// (module/MetricsHttp.cpp), which is loaded the first time a run asks for a
// port, so that no other run loads cpp-httplib and the TLS and compression
// libraries it links; the file writer wakes every interval and renames a
// fully written temporary file over the target.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

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

namespace {

/// libsluice_metrics_http.so's two functions (module/MetricsHttp.cpp).
struct HttpModule {
  void *(*start)(const char *address, int port,
                 void (*text)(void *ctx, std::string *out), void *ctx,
                 char *err, size_t errSize) = nullptr;
  void (*stop)(void *server) = nullptr;
  std::string error; ///< why it could not be loaded
};

std::string dirName(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

/// Loads the module once per process: $SLUICE_METRICS_HTTP when set;
/// otherwise beside the executable or library that holds this code (a
/// compiled executable copied with its .so files), in lib/ beside its bin/,
/// where `cmake --install` put it, in the build tree, and last by name
/// (LD_LIBRARY_PATH).
const HttpModule &httpModule() {
  static const HttpModule module = [] {
    HttpModule m;
    const char *name = "libsluice_metrics_http.so";
    std::vector<std::string> tries;
    if (const char *env = std::getenv("SLUICE_METRICS_HTTP"); env && *env) {
      tries.push_back(env);
    } else {
      std::vector<std::string> dirs;
      Dl_info info;
      if (dladdr(reinterpret_cast<void *>(&dirName), &info) && info.dli_fname &&
          info.dli_fname[0] == '/')
        dirs.push_back(dirName(info.dli_fname));
      char self[4096];
      ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
      // The executable's folder, unless it is the one dladdr gave (the
      // driver and compiled executables hold this code themselves).
      if (n > 0) {
        std::string exeDir = dirName(std::string(self, static_cast<size_t>(n)));
        if (dirs.empty() || dirs[0] != exeDir)
          dirs.push_back(exeDir);
      }
      for (const std::string &d : dirs) {
        tries.push_back(d + "/" + name);
        tries.push_back(d + "/../lib/" + name);
#ifdef SLUICE_METRICS_HTTP_LIBDIR
        // An installed tree moved elsewhere: bin/../<libdir>/sluice/.
        tries.push_back(d + "/../" SLUICE_METRICS_HTTP_LIBDIR "/sluice/" +
                        name);
#endif
      }
#ifdef SLUICE_METRICS_HTTP_INSTALLED
      tries.push_back(SLUICE_METRICS_HTTP_INSTALLED);
#endif
#ifdef SLUICE_METRICS_HTTP_BUILT
      tries.push_back(SLUICE_METRICS_HTTP_BUILT);
#endif
      tries.push_back(name);
    }
    std::string why;
    for (const std::string &t : tries) {
      if (t.find('/') != std::string::npos && access(t.c_str(), R_OK) != 0)
        continue;
      void *h = dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char *e = dlerror();
        why = e ? e : "dlopen failed";
        continue;
      }
      m.start = reinterpret_cast<decltype(m.start)>(
          dlsym(h, "sluice_metrics_http_start"));
      m.stop = reinterpret_cast<decltype(m.stop)>(
          dlsym(h, "sluice_metrics_http_stop"));
      if (m.start && m.stop)
        return m;
      why = t + " lacks sluice_metrics_http_start/stop";
      m.start = nullptr;
      m.stop = nullptr;
    }
    std::string where;
    for (size_t i = 0; i < tries.size(); ++i)
      where += (i ? ", " : "") + tries[i];
    m.error = "--metrics-port: the HTTP server module " + std::string(name) +
              " could not be loaded (looked for " + where +
              (why.empty() ? "" : "; " + why) +
              "); reinstall sluice, set SLUICE_METRICS_HTTP to the module's "
              "path, or write the same counters to a file with "
              "--metrics-file";
    return m;
  }();
  return module;
}

} // namespace

struct MetricsExporter::Impl {
  std::function<RunStats()> stats;
  std::string file;
  double interval = 5;
  void *server = nullptr; ///< the module's, while serving
  std::thread fileThread;
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
    const HttpModule &http = httpModule();
    if (!http.start)
      return Status::error(http.error);
    char err[256] = "";
    im.server = http.start(
        address.c_str(), port,
        [](void *ctx, std::string *out) {
          *out = prometheusText(static_cast<Impl *>(ctx)->stats());
        },
        &im, err, sizeof err);
    if (!im.server)
      return Status::error(
          "--metrics-port: cannot listen on " + address + ":" +
          std::to_string(port) +
          " (is another program using the port, or is the address not one "
          "of this host's?); choose another port with --metrics-port");
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
  if (impl_->server)
    httpModule().stop(impl_->server);
  (void)writeFile(); // the final counters
}

} // namespace sluice::runtime
