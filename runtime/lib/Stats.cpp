//===- Stats.cpp - Counter snapshots, tables and JSON ---------------------===//
//
// Rendering of the per-stage counters: the accounting lines printed after
// every run, the `--stats` table, and the JSON the autotuner reads.
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Stats.h"
#include "sluice/runtime/JsonText.h"
#include "sluice/runtime/Memory.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace sluice::runtime {

int64_t StageStats::skippedTotal() const {
  int64_t n = 0;
  for (const auto &s : skipped)
    n += s.second;
  return n;
}

std::string StageStats::accountingLine() const {
  std::string s = "read " + std::to_string(read) + " = emitted " +
                  std::to_string(emitted) + " + filtered " +
                  std::to_string(filtered);
  if (filtered > 0 && !filterReason.empty())
    s += " (" + filterReason + ")";
  s += " + skipped " + std::to_string(skippedTotal());
  if (!skipped.empty()) {
    s += " (";
    for (size_t i = 0; i < skipped.size(); ++i)
      s += (i ? ", " : "") + std::to_string(skipped[i].second) + " " +
           skipped[i].first;
    s += ")";
  }
  if (failed > 0)
    s += " + failed " + std::to_string(failed);
  if (discarded > 0)
    s += " + discarded " + std::to_string(discarded) +
         " (in buffers when the run stopped)";
  if (!repaired.empty()) {
    s += "; repaired ";
    for (size_t i = 0; i < repaired.size(); ++i)
      s += (i ? ", " : "") + std::to_string(repaired[i].second) + " (" +
           repaired[i].first + ")";
  }
  return s;
}

int64_t RunStats::records() const {
  int64_t n = stages.empty() ? 0 : stages.front().read;
  for (const StageStats &s : stages)
    n += s.replayedSourceRecords;
  return n;
}

nlohmann::ordered_json StageStats::toJson() const {
  nlohmann::ordered_json j = {{"name", name},
                              {"op", op},
                              {"kind", kind},
                              {"where", where},
                              {"parallelism", parallelism},
                              {"read", read},
                              {"emitted", emitted},
                              {"filtered", filtered}};
  if (!filterReason.empty())
    j["filter_reason"] = filterReason;
  nlohmann::ordered_json sk = nlohmann::ordered_json::object();
  for (const auto &[reason, n] : skipped)
    sk[reason] = n;
  j["skipped"] = std::move(sk);
  j["failed"] = failed;
  j["discarded"] = discarded;
  j["elements_in"] = elementsIn;
  j["elements_out"] = elementsOut;
  j["bytes_in"] = bytesIn;
  j["bytes_out"] = bytesOut;
  j["cpu_seconds"] = cpuSeconds;
  if (poolCpuSeconds > 0)
    j["pool_cpu_seconds"] = poolCpuSeconds;
  if (threadCpuSeconds > 0)
    j["thread_cpu_seconds"] = threadCpuSeconds;
  j["wall_seconds"] = wallSeconds;
  if (bufferCapacity > 0)
    j["buffer"] = {{"capacity", bufferCapacity},
                   {"samples", occupancySamples},
                   {"mean", occupancyMean},
                   {"max", occupancyMax},
                   {"peak_bytes", bufferBytesPeak}};
  if (rowsInPlace > 0)
    j["rows_in_place"] = rowsInPlace;
  if (rowsDirect > 0)
    j["rows_direct"] = rowsDirect;
  if (replayedSourceRecords > 0)
    j["replayed_source_records"] = replayedSourceRecords;
  if (!repaired.empty()) {
    nlohmann::ordered_json rp = nlohmann::ordered_json::object();
    for (const auto &[reason, n] : repaired)
      rp[reason] = n;
    j["repaired"] = std::move(rp);
  }
  if (rowsFromRuns > 0)
    j["rows_from_runs"] = rowsFromRuns;
  if (slotsGiven > 0)
    j["slots_given"] = slotsGiven;
  return j;
}

nlohmann::ordered_json RunStats::toJson() const {
  nlohmann::ordered_json per = nlohmann::ordered_json::object();
  for (const auto &[buffer, bytes] : memoryPeaks)
    per[buffer] = bytes;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const StageStats &s : stages)
    list.push_back(s.toJson());
  return {{"pipeline", pipeline},
          {"epochs", epochs},
          {"epochs_done", epochsDone},
          {"threads", threads},
          {"wall_seconds", wallSeconds},
          {"consumer_cpu_seconds", consumerCpuSeconds},
          {"outputs", outputs},
          {"records", records()},
          {"output_bytes", outputBytes},
          {"memory",
           {{"limit", memoryLimit},
            {"peak", memoryPeak},
            {"process_peak", processMemoryPeak},
            {"baseline_rss", baselineRss},
            {"rss", rss},
            {"peaks", per}}},
          {"remote",
           {{"requests", remote.requests},
            {"retries", remote.retries},
            {"failures", remote.failures},
            {"bytes", remote.bytes},
            {"bodies_reused", remote.bodiesReused},
            {"bodies_populated", remote.bodiesPopulated},
            {"bodies_mapped", remote.bodiesMapped},
            {"curl_buffers_reused", remote.curlBuffersReused},
            {"socket_updates", remote.socketUpdates},
            {"finished_by_readers", remote.finishedByReaders},
            {"client_threads", remote.clientThreads},
            {"median_latency_ms", remote.medianLatencyMs},
            {"peak_in_flight", remote.peakInFlight},
            {"median_request_ms", remote.medianRequestMs},
            {"requests_in_flight", remote.requestsInFlight},
            {"in_flight_pinned", remote.inFlightPinned},
            {"receive_seconds", remote.receiveSeconds},
            {"chunk_bytes", remote.chunkBytes},
            {"next_pass_ahead", remote.nextPassAhead},
            {"next_pass_taken", remote.nextPassTaken},
            {"list_requests", remote.listRequests},
            {"listed_keys", remote.listedKeys},
            {"listing_seconds", remote.listingSeconds},
            {"unloaded_latency_ms", remote.unloadedLatencyMs},
            {"streams", remote.streams},
            {"stream_bytes", remote.streamBytes},
            {"bursts", remote.bursts},
            {"burst_requests", remote.burstRequests},
            {"reader_stalls", remote.readerStalls},
            {"cache",
             {{"hits", remote.cache.hits},
              {"misses", remote.cache.misses},
              {"stale", remote.cache.stale},
              {"bytes_read", remote.cache.bytesRead},
              {"bytes_stored", remote.cache.bytesStored},
              {"evictions", remote.cache.evictions},
              {"damaged", remote.cache.damaged}}}}},
          {"consumer",
           {{"outputs", consumer.outputs},
            {"first_wait_seconds", consumer.firstWaitSeconds},
            {"wait_seconds", consumer.waitSeconds},
            {"mean_wait_seconds", consumer.meanWaitSeconds()},
            {"max_wait_seconds", consumer.maxWaitSeconds},
            {"stalls", consumer.stalls},
            {"stall_threshold_seconds", Consumer::kStallSeconds},
            {"away_seconds", consumer.awaySeconds},
            {"headspace_seconds", consumer.headspaceSeconds}}},
          {"stages", std::move(list)}};
}

std::string RunStats::jsonText(bool pretty) const {
  // Reasons and names can quote bytes from the data: never throw on them.
  if (pretty)
    return prettyJson(toJson());
  return toJson().dump(-1, ' ', false,
                       nlohmann::ordered_json::error_handler_t::replace);
}

void ConsumerMeter::enter(int64_t nowNs) {
  enterNs_ = nowNs;
  pendingAwayNs_ = lastReturnNs_ ? nowNs - lastReturnNs_ : 0;
}

void ConsumerMeter::leave(int64_t nowNs, bool gotOutput) {
  lastReturnNs_ = nowNs;
  if (!gotOutput)
    return; // the end (or an error): no output was waited for
  int64_t wait = nowNs - enterNs_;
  int64_t n = outputs_.load(std::memory_order_relaxed);
  if (n == 0) {
    firstWaitNs_.store(wait, std::memory_order_relaxed);
  } else {
    waitNs_.fetch_add(wait, std::memory_order_relaxed);
    if (wait > maxWaitNs_.load(std::memory_order_relaxed))
      maxWaitNs_.store(wait, std::memory_order_relaxed);
    awayNs_.fetch_add(pendingAwayNs_, std::memory_order_relaxed);
    if (static_cast<double>(wait) * 1e-9 > RunStats::Consumer::kStallSeconds)
      stalls_.fetch_add(1, std::memory_order_relaxed);
    else
      headspaceNs_.fetch_add(pendingAwayNs_, std::memory_order_relaxed);
  }
  outputs_.store(n + 1, std::memory_order_relaxed);
}

RunStats::Consumer ConsumerMeter::snapshot() const {
  RunStats::Consumer c;
  auto sec = [](const std::atomic<int64_t> &ns) {
    return static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9;
  };
  c.outputs = outputs_.load(std::memory_order_relaxed);
  c.firstWaitSeconds = sec(firstWaitNs_);
  c.waitSeconds = sec(waitNs_);
  c.maxWaitSeconds = sec(maxWaitNs_);
  c.stalls = stalls_.load(std::memory_order_relaxed);
  c.awaySeconds = sec(awayNs_);
  c.headspaceSeconds = sec(headspaceNs_);
  return c;
}

namespace {

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string padRight(std::string s, size_t w) {
  if (s.size() < w)
    s.append(w - s.size(), ' ');
  return s;
}

std::string padLeft(const std::string &s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

} // namespace

std::string RunStats::table() const {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"stage", "op", "par", "in", "out", "filtered", "skipped",
                  "cpu s", "wall s", "us/in", "in", "out", "buffer"});
  for (const StageStats &s : stages) {
    std::string buffer = "-";
    if (s.bufferCapacity > 0)
      buffer = fmt("%.1f", s.occupancyMean) + "/" +
               std::to_string(s.occupancyMax) + "/" +
               std::to_string(s.bufferCapacity);
    double usPer = s.elementsIn > 0
                       ? s.wallSeconds * 1e6 / static_cast<double>(s.elementsIn)
                       : 0;
    rows.push_back({s.name, s.op, std::to_string(s.parallelism),
                    std::to_string(s.elementsIn), std::to_string(s.elementsOut),
                    std::to_string(s.filtered),
                    std::to_string(s.skippedTotal()), fmt("%.3f", s.cpuSeconds),
                    fmt("%.3f", s.wallSeconds), fmt("%.2f", usPer),
                    formatBytes(s.bytesIn), formatBytes(s.bytesOut), buffer});
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto &r : rows)
    for (size_t c = 0; c < r.size(); ++c)
      widths[c] = std::max(widths[c], r[c].size());
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t c = 0; c < rows[i].size(); ++c) {
      // Names left-aligned, numbers right-aligned.
      std::string cell = c < 2 ? padRight(rows[i][c], widths[c])
                               : padLeft(rows[i][c], widths[c]);
      out += (c ? "  " : "") + cell;
    }
    while (!out.empty() && out.back() == ' ')
      out.pop_back();
    out += "\n";
  }
  out += "buffer = mean/max/capacity occupancy in records; us/in = wall "
         "microseconds per input element\n";
  out += "total " + fmt("%.3f", wallSeconds) + " s, " +
         std::to_string(outputs) + " outputs, " + formatBytes(outputBytes) +
         " out";
  if (wallSeconds > 0)
    out += ", " + fmt("%.1f", static_cast<double>(outputs) / wallSeconds) +
           " outputs/s";
  out += "; memory peak " + formatBytes(memoryPeak);
  if (memoryLimit > 0)
    out += " of budget " + formatBytes(memoryLimit);
  if (processMemoryPeak > memoryPeak)
    out += " (process peak " + formatBytes(processMemoryPeak) +
           ", with the pipelines run before, e.g. a schedule probe)";
  out += "\n";
  if (consumer.outputs > 0) {
    const Consumer &c = consumer;
    out += "consumer: first output after " + fmt("%.3f", c.firstWaitSeconds) +
           " s; then waited " + fmt("%.3f", c.waitSeconds) + " s (" +
           fmt("%.3f", c.meanWaitSeconds() * 1e3) + " ms per output, max " +
           fmt("%.3f", c.maxWaitSeconds * 1e3) + " ms), " +
           std::to_string(c.stalls) + " of " +
           std::to_string(std::max<int64_t>(0, c.outputs - 1)) +
           " outputs stalled (> " + fmt("%.0f", Consumer::kStallSeconds * 1e3) +
           " ms); headspace " + fmt("%.3f", c.headspaceSeconds) + " s of " +
           fmt("%.3f", c.awaySeconds) +
           " s the consumer spent between outputs\n";
  }
  // The response buffers the client kept for reuse, counted in the budget
  // (the "remote bodies (idle)" account).
  auto keptBodies = [&]() -> std::string {
    if (remote.bodiesReused == 0)
      return "";
    int64_t peak = 0;
    for (const auto &[account, bytes] : memoryPeaks)
      if (account == "remote bodies (idle)")
        peak = bytes;
    return "; " + std::to_string(remote.bodiesReused) +
           " bodies written into kept buffers (" + formatBytes(peak) +
           " kept at most, in the budget)";
  };
  if (remote.requests > 0)
    out +=
        "source: " + std::to_string(remote.requestsInFlight) +
        " requests in flight (up to " + std::to_string(remote.peakInFlight) +
        " at once" +
        (remote.inFlightPinned ? ", set by remote.concurrency" : "") + "), " +
        fmt("%.1f", remote.medianLatencyMs) +
        " ms median latency (to the first byte), " +
        fmt("%.1f", remote.medianRequestMs) +
        " ms per request; remote: " + std::to_string(remote.requests) +
        " requests (" + std::to_string(remote.retries) + " retried, " +
        std::to_string(remote.failures) + " failed), " +
        formatBytes(remote.bytes) + keptBodies() +
        (remote.receiveSeconds > 0 ? "; received at " +
                                         formatBytes(static_cast<int64_t>(
                                             static_cast<double>(remote.bytes) /
                                             remote.receiveSeconds)) +
                                         "/s"
                                   : "") +
        (remote.nextPassAhead > 0
             ? "; " + std::to_string(remote.nextPassAhead) +
                   " next-epoch shards asked for before their epoch"
             : "") +
        (remote.bursts > 0
             ? "; sent " +
                   fmt("%.1f", static_cast<double>(remote.burstRequests) /
                                   static_cast<double>(remote.bursts)) +
                   " at a time (" + std::to_string(remote.readerStalls) +
                   " reader stalls)"
             : "") +
        (remote.listRequests > 0
             ? "; listed " + std::to_string(remote.listedKeys) + " keys in " +
                   fmt("%.2f", remote.listingSeconds) + " s (" +
                   std::to_string(remote.listRequests) +
                   " list requests) before the run"
             : "") +
        "\n";
  if (remote.cache.hits + remote.cache.misses > 0)
    out += "object cache: " + std::to_string(remote.cache.hits) +
           " read locally (" + formatBytes(remote.cache.bytesRead) + "), " +
           std::to_string(remote.cache.misses) + " fetched (" +
           std::to_string(remote.cache.stale) + " changed since cached; " +
           formatBytes(remote.cache.bytesStored) + " stored), " +
           std::to_string(remote.cache.evictions) + " evicted, " +
           std::to_string(remote.cache.damaged) + " damaged\n";
  return out;
}

std::string RunStats::accounting() const {
  size_t w = 0;
  for (const StageStats &s : stages)
    w = std::max(w, s.name.size());
  std::string out;
  for (const StageStats &s : stages)
    out += "  " + padRight(s.name, w) + "  " + s.accountingLine() + "\n";
  return out;
}

Status RunStats::checkBalanced() const {
  std::string bad;
  for (const StageStats &s : stages)
    if (!s.balanced())
      bad += "\n  " + s.name + ": " + s.accountingLine() + " (does not add up)";
  if (bad.empty())
    return Status::ok();
  return Status::error("internal error: record accounting does not balance; "
                       "this is a bug in sluice, please report it:" +
                       bad);
}

void StageCounters::addSkipped(const std::string &reason, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  skipped_[reason] += n;
}

void StageCounters::addRepaired(const std::string &reason, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  repaired_[reason] += n;
}

void StageCounters::sampleOccupancy(int64_t occupancy) {
  occupancySamples.fetch_add(1, std::memory_order_relaxed);
  occupancySum.fetch_add(occupancy, std::memory_order_relaxed);
  int64_t m = occupancyMax.load(std::memory_order_relaxed);
  while (occupancy > m && !occupancyMax.compare_exchange_weak(
                              m, occupancy, std::memory_order_relaxed))
    ;
}

void StageCounters::notePeakBytes(int64_t bytes) {
  int64_t m = bufferBytesPeak.load(std::memory_order_relaxed);
  while (bytes > m && !bufferBytesPeak.compare_exchange_weak(
                          m, bytes, std::memory_order_relaxed))
    ;
}

void StageCounters::addWarning(std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (warnings_.size() < kMaxWarnings)
    warnings_.push_back(std::move(message));
  else
    ++warningsMore_;
}

std::vector<std::string> RunStats::warnings() const {
  std::vector<std::string> out;
  for (const StageStats &s : stages) {
    for (const std::string &w : s.warnings)
      out.push_back(w);
    if (s.warningsMore > 0)
      out.push_back(s.name + ": " + std::to_string(s.warningsMore) +
                    " more warnings like these");
  }
  return out;
}

StageStats StageCounters::snapshot() const {
  StageStats s;
  s.name = name_;
  s.op = op_;
  s.kind = kind_;
  s.where = where_;
  auto ld = [](const std::atomic<int64_t> &a) {
    return a.load(std::memory_order_relaxed);
  };
  s.parallelism = ld(parallelism);
  s.read = ld(read);
  s.emitted = ld(emitted);
  s.filtered = ld(filtered);
  s.filterReason = filterReason_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.skipped.assign(skipped_.begin(), skipped_.end());
    s.repaired.assign(repaired_.begin(), repaired_.end());
    s.warnings = warnings_;
    s.warningsMore = warningsMore_;
  }
  s.failed = ld(failed);
  s.discarded = ld(discarded);
  s.elementsIn = s.read;
  s.elementsOut = ld(elementsOut);
  s.bytesIn = ld(bytesIn);
  s.bytesOut = ld(bytesOut);
  s.cpuSeconds = static_cast<double>(ld(cpuNs)) * 1e-9;
  s.poolCpuSeconds = static_cast<double>(ld(poolCpuNs)) * 1e-9;
  s.threadCpuSeconds = static_cast<double>(ld(threadCpuNs)) * 1e-9;
  s.wallSeconds = static_cast<double>(ld(wallNs)) * 1e-9;
  s.bufferCapacity = ld(bufferCapacity);
  s.occupancySamples = ld(occupancySamples);
  s.occupancyMean = s.occupancySamples > 0
                        ? static_cast<double>(ld(occupancySum)) /
                              static_cast<double>(s.occupancySamples)
                        : 0;
  s.occupancyMax = ld(occupancyMax);
  s.bufferBytesPeak = ld(bufferBytesPeak);
  s.rowsInPlace = ld(rowsInPlace);
  s.rowsDirect = ld(rowsDirect);
  s.replayedSourceRecords = ld(replayedSourceRecords);
  s.rowsFromRuns = ld(rowsFromRuns);
  s.slotsGiven = ld(slotsGiven);
  return s;
}

} // namespace sluice::runtime
