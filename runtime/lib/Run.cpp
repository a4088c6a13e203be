//===- Run.cpp - `sluice run`: pipeline into a sink, progress, accounting -===//
//
// Progress comes from a separate thread that reads the live counters, so a
// pipeline that emits one huge batch every few seconds still shows progress:
// on a terminal a bar redrawn in place, otherwise a plain line every few
// seconds (logs stay readable), nothing with Progress::Off.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Metrics.h"
#include "sluice/runtime/Pipeline.h"
#include "sluice/runtime/Sink.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace sluice::runtime {

namespace {

std::string fmtRate(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2fM", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(buf, sizeof(buf), "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string fmtDuration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s / 60),
                  static_cast<int>(s) % 60);
  else if (s >= 10)
    std::snprintf(buf, sizeof(buf), "%.0fs", s);
  else
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
  return buf;
}

class Progress {
public:
  Progress(const Pipeline &p, std::ostream &err, bool bar, double interval)
      : p_(p), err_(err), bar_(bar), interval_(interval) {
    // Count progress in outputs when their number is known, else in
    // records read from the source.
    totalOutputs_ = p.expectedOutputs();
    total_ = p.expectedSourceRecords();
    start_ = std::chrono::steady_clock::now();
    thread_ = std::thread([this] { loop(); });
  }
  ~Progress() { finish(); }

  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_)
        return;
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (bar_ && drew_)
      err_ << "\r" << line() << "\n" << std::flush;
  }

private:
  std::string line() {
    RunStats s = p_.stats();
    // Source records, counting passes served from a cache as the records
    // they stand for (RunStats::records()).
    int64_t read = s.records();
    double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    double rate = secs > 0 ? static_cast<double>(read) / secs : 0;
    // Progress as a fraction: outputs if their total is known, else source
    // records.
    std::optional<double> frac;
    if (totalOutputs_ && *totalOutputs_ > 0)
      frac =
          static_cast<double>(s.outputs) / static_cast<double>(*totalOutputs_);
    else if (total_ && *total_ > 0)
      frac = static_cast<double>(read) / static_cast<double>(*total_);
    std::string l;
    if (frac) {
      *frac = std::min(1.0, *frac);
      if (bar_) {
        int w = 24, filled = static_cast<int>(*frac * w);
        l += "[" + std::string(static_cast<size_t>(filled), '=') +
             std::string(static_cast<size_t>(w - filled), ' ') + "] ";
      }
      char pct[16];
      std::snprintf(pct, sizeof(pct), "%3.0f%% ", *frac * 100);
      l += pct;
    }
    l += std::to_string(read) + " records";
    if (!totalOutputs_ && total_)
      l += " of " + std::to_string(*total_);
    l += ", " + std::to_string(s.outputs);
    if (totalOutputs_)
      l += "/" + std::to_string(*totalOutputs_);
    double outRate = secs > 0 ? static_cast<double>(s.outputs) / secs : 0;
    l += " outputs, " + fmtRate(rate) + " records/s, " + fmtRate(outRate) +
         " outputs/s, " + fmtDuration(secs);
    if (frac && *frac > 0 && *frac < 1)
      l += ", ETA " + fmtDuration(secs * (1 - *frac) / *frac);
    return l;
  }

  void loop() {
    auto period = std::chrono::duration<double>(bar_ ? 0.25 : interval_);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (cv_.wait_for(lock, period, [&] { return done_; }))
        return;
      std::string l = line();
      if (bar_) {
        // Pad so a shorter line fully overwrites the previous one.
        if (l.size() < last_)
          l += std::string(last_ - l.size(), ' ');
        last_ = l.size();
        err_ << "\r" << l << std::flush;
        drew_ = true;
      } else {
        err_ << "sluice: " << l << "\n" << std::flush;
      }
    }
  }

  const Pipeline &p_;
  std::ostream &err_;
  bool bar_;
  double interval_;
  std::optional<int64_t> total_, totalOutputs_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool drew_ = false;
  size_t last_ = 0;
  std::thread thread_;
};

void printError(std::ostream &err, const std::string &msg) {
  // Messages located in the spec already carry "file:line:col: error:".
  if (msg.find(": error: ") != std::string::npos)
    err << msg << "\n";
  else
    err << "sluice: error: " << msg << "\n";
}

} // namespace

namespace {

/// The signal that asked the current run to stop (0: none). Written by the
/// handler, read by the run loop and its watchdog.
std::atomic<int> gStopSignal{0};

extern "C" void onStopSignal(int sig) {
  int none = 0;
  if (!gStopSignal.compare_exchange_strong(none, sig)) {
    // A second signal: the default action now (async-signal-safe calls).
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

/// Installs the SIGINT/SIGTERM handlers for one run and restores the
/// previous ones afterwards.
class SignalScope {
public:
  explicit SignalScope(bool on) : on_(on) {
    if (!on_)
      return;
    gStopSignal.store(0);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = onStopSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &oldInt_);
    ::sigaction(SIGTERM, &sa, &oldTerm_);
  }
  ~SignalScope() {
    if (!on_)
      return;
    ::sigaction(SIGINT, &oldInt_, nullptr);
    ::sigaction(SIGTERM, &oldTerm_, nullptr);
  }
  int signal() const { return on_ ? gStopSignal.load() : 0; }

private:
  bool on_;
  struct sigaction oldInt_, oldTerm_;
};

/// Writes a state file whole or not at all: a temporary file in the same
/// directory, written, fsync'ed and renamed over `path` (then the directory
/// fsync'ed), so a full disk or a crash leaves the previous state, never a
/// cut or empty one. "" or what went wrong.
std::string writeStateFile(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return "cannot create " + tmp + ": " + std::strerror(errno);
  std::string error;
  for (size_t done = 0; done < text.size() && error.empty();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      error = std::string("cannot write: ") +
              (n < 0 ? std::strerror(errno) : "no progress");
    else
      done += static_cast<size_t>(n);
  }
  // On file systems that allocate late (NFS, some quota setups) a full disk
  // shows only at fsync or close.
  if (error.empty() && ::fsync(fd) != 0)
    error = std::string("cannot write (fsync): ") + std::strerror(errno);
  if (::close(fd) != 0 && error.empty())
    error = std::string("cannot write (close): ") + std::strerror(errno);
  if (error.empty() && ::rename(tmp.c_str(), path.c_str()) != 0)
    error = std::string("cannot rename ") + tmp +
            " into place: " + std::strerror(errno);
  if (!error.empty()) {
    ::unlink(tmp.c_str());
    return error;
  }
  size_t slash = path.find_last_of('/');
  std::string dir =
      slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return "";
}

std::string signalName(int sig) {
  return sig == SIGINT    ? "SIGINT (Ctrl-C)"
         : sig == SIGTERM ? "SIGTERM"
                          : "signal " + std::to_string(sig);
}

/// The final line: outputs, time, records (RunStats::records()), rates,
/// epochs, threads, the sink.
std::string finalLine(const RunStats &stats, const std::string &sinkSummary) {
  double secs = stats.wallSeconds > 0 ? stats.wallSeconds : 0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "%lld outputs in %.2f s (%lld records, %s records/s, %s "
                "outputs/s) over %lld epoch%s with %lld threads",
                static_cast<long long>(stats.outputs), secs,
                static_cast<long long>(stats.records()),
                fmtRate(secs > 0 ? stats.records() / secs : 0).c_str(),
                fmtRate(secs > 0 ? stats.outputs / secs : 0).c_str(),
                static_cast<long long>(stats.epochsDone),
                stats.epochsDone == 1 ? "" : "s",
                static_cast<long long>(stats.threads));
  std::string l = line;
  if (!sinkSummary.empty())
    l += "; " + sinkSummary;
  return l + "\n";
}

/// How long after a stop signal the run may take to wind down before the
/// watchdog writes the index itself and ends the process.
constexpr double kStopGraceSeconds = 0.8;

} // namespace

int runPipeline(const Plan &plan, const RunOptions &opts, std::ostream &out,
                std::ostream &err) {
  SinkOptions sinkOpts;
  sinkOpts.overwrite = opts.overwrite;
  Expected<std::unique_ptr<Sink>> madeSink = makeSink(opts.sink, sinkOpts);
  if (!madeSink) {
    printError(err, madeSink.status().message());
    return 2; // a usage error: the --sink value
  }
  Sink &sink = **madeSink;
  Expected<std::unique_ptr<Pipeline>> made = Pipeline::create(plan, opts);
  if (!made) {
    printError(err, made.status().message());
    return 1;
  }
  Pipeline &p = **made;
  Status st = sink.open(plan.name, p.outputType());
  if (!st) {
    printError(err, st.message());
    return 2; // the destination: fix --sink or add --overwrite
  }

  // Warnings known before the run (empty input files) come first; the
  // ones found while running are printed after it.
  size_t warned = 0;
  auto printWarnings = [&] {
    std::vector<std::string> ws = p.stats().warnings();
    for (; warned < ws.size(); ++warned)
      err << "sluice: warning: " << ws[warned] << "\n";
  };
  printWarnings();

  // Served/written while the run lasts; the destructor (on every return
  // below) writes the file a last time with the final counters.
  std::unique_ptr<MetricsExporter> metrics;
  if (opts.metricsPort > 0 || !opts.metricsFile.empty()) {
    Expected<std::unique_ptr<MetricsExporter>> m = MetricsExporter::start(
        [&p] { return p.stats(); }, opts.metricsAddress, opts.metricsPort,
        opts.metricsFile, opts.metricsInterval);
    if (!m) {
      printError(err, m.status().message());
      return 2; // the flag's value: another port or file
    }
    metrics = m.take();
  }

  SignalScope signals(opts.handleSignals);
  bool tty = isatty(2) != 0;
  RunOptions::Progress mode = opts.progress;
  if (mode == RunOptions::Progress::Auto)
    mode = tty ? RunOptions::Progress::Bar : RunOptions::Progress::Lines;
  std::unique_ptr<Progress> progress;
  if (mode != RunOptions::Progress::Off)
    progress = std::make_unique<Progress>(
        p, err, mode == RunOptions::Progress::Bar, opts.progressInterval);

  // The sink is written by this thread; the watchdog takes it over (under
  // sinkMu) only if a stop signal is not honoured within the grace period,
  // e.g. while a step is busy with one huge record.
  std::mutex sinkMu;
  std::atomic<bool> finalizing{false};
  bool abandoned = false; // guarded by sinkMu
  // The watchdog looks for a stop signal every 20 ms (a signal handler can
  // only set a flag); the end of the loop wakes it at once, so the run's
  // end does not wait out its sleep.
  bool loopDone = false; // guarded by doneMu
  std::mutex doneMu;
  std::condition_variable doneCv;
  std::thread watchdog;
  if (opts.handleSignals)
    watchdog = std::thread([&] {
      std::chrono::steady_clock::time_point seen{};
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(doneMu);
          if (doneCv.wait_for(lock, std::chrono::milliseconds(20),
                              [&] { return loopDone; }))
            break;
        }
        int sig = signals.signal();
        if (!sig)
          continue;
        auto now = std::chrono::steady_clock::now();
        if (seen == std::chrono::steady_clock::time_point{}) {
          seen = now;
          // The output being built (a batch being filled) is given up
          // after the record each worker is on; outputs already returned
          // are still written.
          p.cancel();
        }
        if (std::chrono::duration<double>(now - seen).count() <
                kStopGraceSeconds ||
            finalizing.exchange(true))
          continue;
        std::lock_guard<std::mutex> lock(sinkMu);
        abandoned = true;
        RunStats stats = p.stats();
        RunOutcome outcome;
        outcome.status = RunOutcome::Status::Interrupted;
        outcome.reason =
            "interrupted by " + signalName(sig) + " after " +
            std::to_string(stats.outputs) + " outputs; a step was still busy " +
            std::to_string(kStopGraceSeconds) + " s later and was abandoned";
        outcome.epochsDone = stats.epochsDone;
        Status closed = sink.close(outcome);
        if (progress)
          err << "\n";
        printError(err, outcome.reason);
        if (!closed)
          printError(err, closed.message());
        out << "accounting at the interruption (records still inside "
               "steps are in no column):\n"
            << stats.accounting() << finalLine(stats, sink.summary());
        out.flush();
        err.flush();
        std::fflush(nullptr);
        ::_exit(128 + sig);
      }
    });

  Status failure;
  int stopSignal = 0;
  Batch b;
  bool stoppedEarly = false;
  for (int64_t n = 0;; ++n) {
    if ((stopSignal = signals.signal()))
      break;
    if (opts.stopAfter > 0 && n >= opts.stopAfter) {
      stoppedEarly = true;
      break;
    }
    // An output in hand when a signal comes is still written: every output
    // the pipeline emitted reaches the sink, so the counts agree.
    Expected<bool> more = p.next(b);
    if (!more) {
      // Cancelled by the watchdog on a stop signal: an interruption, not a
      // failure.
      if (p.cancelled() && (stopSignal = signals.signal()))
        break;
      failure = more.status();
      break;
    }
    if (!*more)
      break;
    std::unique_lock<std::mutex> lock(sinkMu);
    if (abandoned)
      break;
    Status w = sink.write(b);
    if (!w) {
      failure = w;
      break;
    }
  }
  b = Batch();
  p.stop();
  if (progress)
    progress->finish();
  if (finalizing.exchange(true)) {
    // The watchdog is finishing the run and ends the process.
    for (;;)
      ::pause();
  }
  {
    std::lock_guard<std::mutex> lock(doneMu);
    loopDone = true;
  }
  doneCv.notify_all();
  if (watchdog.joinable())
    watchdog.join();
  if (!stopSignal)
    stopSignal = failure.isOk() ? 0 : signals.signal();
  if (!opts.saveStatePath.empty()) {
    if (std::string w =
            writeStateFile(opts.saveStatePath, p.state().toJson() + "\n");
        !w.empty()) {
      printError(err, "cannot write the state to " + opts.saveStatePath + ": " +
                          w + " (the file is left as it was)");
      return 1;
    }
  }

  RunStats stats = p.stats();
  // The engine fails a run whose budget a step took past its limit; this
  // holds the rule for whatever else might count past it: a peak above
  // budget.memory is never a success.
  if (failure.isOk() && !stopSignal && stats.memoryLimit > 0 &&
      stats.memoryPeak > stats.memoryLimit)
    failure = Status::error("memory peak " + formatBytes(stats.memoryPeak) +
                            " exceeded budget.memory " +
                            formatBytes(stats.memoryLimit) +
                            "; raise budget.memory or make the records "
                            "smaller");
  RunOutcome outcome;
  outcome.epochsDone = stats.epochsDone;
  if (stopSignal) {
    outcome.status = RunOutcome::Status::Interrupted;
    outcome.reason = "interrupted by " + signalName(stopSignal) + " after " +
                     std::to_string(stats.outputs) + " outputs";
  } else if (!failure.isOk()) {
    outcome.status = RunOutcome::Status::Failed;
    outcome.reason = failure.message();
  } else if (stoppedEarly) {
    outcome.status = RunOutcome::Status::Stopped;
    outcome.reason = "stopped after " + std::to_string(stats.outputs) +
                     " outputs, as asked (--stop-after)";
  }
  Status closed = sink.close(outcome);
  printWarnings();
  if (!failure.isOk())
    printError(err, failure.message());
  if (stopSignal)
    err << "sluice: " << outcome.reason << "\n";
  if (!closed) {
    printError(err, closed.message());
    if (failure.isOk())
      failure = closed;
  }
  out << "accounting (read = emitted + filtered + skipped, per stage):\n"
      << stats.accounting() << finalLine(stats, sink.summary());
  if (opts.stats) {
    out << "\n" << stats.table();
    if (opts.controller) {
      std::string r = opts.controller->report();
      if (!r.empty())
        out << "\n" << r;
    }
  }
  if (!opts.statsJsonPath.empty()) {
    std::ofstream f(opts.statsJsonPath);
    f << stats.jsonText(true) << "\n";
    if (!f) {
      printError(err, "cannot write the statistics to " + opts.statsJsonPath);
      return 1;
    }
  }
  Status balanced = stats.checkBalanced();
  if (!balanced) {
    printError(err, balanced.message());
    return 1;
  }
  if (stopSignal)
    return 128 + stopSignal;
  return failure.isOk() ? 0 : 1;
}

} // namespace sluice::runtime
