//===- ScheduleCache.cpp - Tuned schedules kept for the next run ----------===//
//
// `schedule: auto` probes a pipeline for about a second before its first
// batch. A second run of the same plan on the same host with the same data
// would measure the same thing, so the tuned result is kept on disk, as
// compiled kernels are, and reused: the second run starts at once.
//
// What is kept is everything applyAutoSchedule() derives from its probes:
// the schedule, the explanation, and the profile, budget and configuration
// the in-flight re-planner starts from, so a reused schedule behaves as the
// freshly tuned one did. The key is the plan (its serialized form: steps,
// parameters, types, pinned knobs, budget), the run's threads, memory
// budget, rank and world size, the host (cores, CPU model), the data (the
// source's shard count and the sizes of a sample of its files) and this
// file's format version. The entry stores the key text itself, compared
// exactly on load: the file name is only a digest of it, so a digest
// collision or a damaged file is a miss, never a wrong schedule. Entries
// are written through a temporary file and a rename.
//
//===----------------------------------------------------------------------===//
#include "ScheduleCache.h"
#include "sluice/ops/Switches.h"

#include "sluice/runtime/Source.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::autotune {

using nlohmann::json;

namespace {

/// Also bumped when the solver would choose other knobs for the same
/// profile, so that no run reuses an older solver's schedule (3: no
/// prefetch between a lane and the batch whose rows it writes; 4: prefetch
/// depths capped by their buffers' first touch in a short run; 5: ties
/// between parallelisms go to more workers).
constexpr const char *kFormat = "sluice-schedule-cache-5";

std::string envOr(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// Two FNV-1a passes with different offsets: a 128-bit file name. Not a
/// security measure: the entry's key text is compared exactly on load.
std::string digest(const std::string &text) {
  auto fnv = [&](uint64_t h) {
    for (unsigned char c : text) {
      h ^= c;
      h *= 1099511628211ull;
    }
    return h;
  };
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx",
                static_cast<unsigned long long>(fnv(1469598103934665603ull)),
                static_cast<unsigned long long>(fnv(0x9e3779b97f4a7c15ull)));
  return buf;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 1);
    }
  return "unknown cpu";
}

/// The data's size as the key sees it: the shard count and the sizes of up
/// to 256 shards spread over the list (statting a million image files would
/// cost seconds; a changed data set changes the count or a sampled size).
std::string dataKey(const runtime::Plan &plan,
                    const runtime::RunOptions &opts) {
  // The run's own listing when the caller made it (RunOptions::source),
  // else one made here.
  std::shared_ptr<const runtime::Source> shared = opts.source;
  if (!shared) {
    Expected<std::unique_ptr<runtime::Source>> made =
        runtime::Source::create(plan.source.op, plan.source.params,
                                plan.source.outputType, plan.baseDir);
    if (!made)
      return "source: " + made.status().message();
    shared = made.take();
  }
  const runtime::Source *src = shared.get();
  size_t n = src->numShards();
  std::ostringstream os;
  os << "shards " << n << " sizes";
  size_t step = std::max<size_t>(1, n / 256);
  for (size_t i = 0; i < n; i += step) {
    struct stat sb;
    if (::stat(src->shardName(i).c_str(), &sb) == 0)
      os << ' ' << sb.st_size << '@' << sb.st_mtime;
    else
      os << " ?";
  }
  return os.str();
}

// JSON forms of the tuner's plain data.

json toJson(const StepProfile &s) {
  return {{"name", s.name},
          {"op", s.op},
          {"where", s.where},
          {"specSteps", s.specSteps},
          {"source", s.source},
          {"perRecord", s.perRecord},
          {"element", s.element},
          {"stochastic", s.stochastic},
          // The pinned knobs in the entries' encoding: 0 / -1 / "" unset,
          // "-" a cache pinned to none.
          {"pinnedParallelism", s.pinned.parallelism.value_or(0)},
          {"pinnedPrefetch", s.pinned.prefetch.value_or(-1)},
          {"pinnedCache", !s.pinned.cache             ? std::string()
                          : *s.pinned.cache == "none" ? std::string("-")
                                                      : *s.pinned.cache},
          {"threadBoundary", s.threadBoundary},
          {"heldRecords", s.heldRecords},
          {"visits", s.visits},
          {"selectivity", s.selectivity},
          {"bytesIn", s.bytesIn},
          {"bytesOut", s.bytesOut},
          {"secondsPerElement", s.secondsPerElement},
          {"cpuPerElement", s.cpuPerElement},
          {"poolCpuPerElement", s.poolCpuPerElement},
          {"rateCv", s.rateCv},
          {"occupancyMean", s.occupancyMean},
          {"bufferCapacity", s.bufferCapacity}};
}

void fromJson(const json &j, StepProfile &s) {
  j.at("name").get_to(s.name);
  j.at("op").get_to(s.op);
  j.at("where").get_to(s.where);
  j.at("specSteps").get_to(s.specSteps);
  j.at("source").get_to(s.source);
  j.at("perRecord").get_to(s.perRecord);
  j.at("element").get_to(s.element);
  j.at("stochastic").get_to(s.stochastic);
  int64_t parallelism = 0, prefetch = -1;
  std::string cache;
  j.at("pinnedParallelism").get_to(parallelism);
  j.at("pinnedPrefetch").get_to(prefetch);
  j.at("pinnedCache").get_to(cache);
  s.pinned = StepSchedule();
  if (parallelism > 0)
    s.pinned.parallelism = parallelism;
  if (prefetch >= 0)
    s.pinned.prefetch = prefetch;
  if (!cache.empty())
    s.pinned.cache = cache == "-" ? std::string("none") : cache;
  j.at("threadBoundary").get_to(s.threadBoundary);
  j.at("heldRecords").get_to(s.heldRecords);
  j.at("visits").get_to(s.visits);
  j.at("selectivity").get_to(s.selectivity);
  j.at("bytesIn").get_to(s.bytesIn);
  j.at("bytesOut").get_to(s.bytesOut);
  j.at("secondsPerElement").get_to(s.secondsPerElement);
  j.at("cpuPerElement").get_to(s.cpuPerElement);
  // Absent from entries written before the source read ahead on the pool.
  s.poolCpuPerElement = j.value("poolCpuPerElement", 0.0);
  j.at("rateCv").get_to(s.rateCv);
  j.at("occupancyMean").get_to(s.occupancyMean);
  j.at("bufferCapacity").get_to(s.bufferCapacity);
}

json toJson(const Probe &p) {
  return {{"label", p.label},
          {"parallelism", p.parallelism},
          {"seconds", p.seconds},
          {"sourceRecordsPerSecond", p.sourceRecordsPerSecond},
          {"outputsPerSecond", p.outputsPerSecond},
          {"memoryPeak", p.memoryPeak},
          {"sourceRecords", p.sourceRecords},
          {"processCpuSeconds", p.processCpuSeconds},
          {"lastStepInputs", p.lastStepInputs},
          {"startupSeconds", p.startupSeconds}};
}

void fromJson(const json &j, Probe &p) {
  j.at("label").get_to(p.label);
  j.at("parallelism").get_to(p.parallelism);
  j.at("seconds").get_to(p.seconds);
  j.at("sourceRecordsPerSecond").get_to(p.sourceRecordsPerSecond);
  j.at("outputsPerSecond").get_to(p.outputsPerSecond);
  j.at("memoryPeak").get_to(p.memoryPeak);
  j.at("sourceRecords").get_to(p.sourceRecords);
  j.at("processCpuSeconds").get_to(p.processCpuSeconds);
  j.at("lastStepInputs").get_to(p.lastStepInputs);
  j.at("startupSeconds").get_to(p.startupSeconds);
}

json optionalJson(const std::optional<int64_t> &v) {
  return v ? json(*v) : json(nullptr);
}
std::optional<int64_t> optionalFrom(const json &j) {
  if (j.is_null())
    return std::nullopt;
  return j.get<int64_t>();
}

json toJson(const Profile &p) {
  json steps = json::array(), probes = json::array(), scaling = json::array();
  for (const StepProfile &s : p.steps)
    steps.push_back(toJson(s));
  for (const Probe &pr : p.probes)
    probes.push_back(toJson(pr));
  for (const auto &[step, samples] : p.scaling) {
    json ss = json::array();
    for (const ScalingSample &s : samples)
      ss.push_back({s.parallelism, s.secondsPerRecord});
    scaling.push_back({step, ss});
  }
  json byLevel = json::array(), probePrefetch = json::array(),
       specWhere = json::object();
  for (const auto &[level, c] : p.calibrationByLevel)
    byLevel.push_back({level, c});
  for (const auto &[step, depth] : p.probePrefetch)
    probePrefetch.push_back({step, depth});
  return {
      {"pipeline", p.pipeline},
      {"specFile", p.specFile},
      {"hostCores", p.hostCores},
      {"epochs", p.epochs},
      {"sourceRecordsPerEpoch", optionalJson(p.sourceRecordsPerEpoch)},
      {"sourceBytesPerSecond", p.sourceBytesPerSecond},
      {"remote",
       {{"requestsPerRecord", p.remote.requestsPerRecord},
        {"requestSeconds", p.remote.requestSeconds},
        {"latencySeconds", p.remote.latencySeconds},
        {"bytesPerRequest", p.remote.bytesPerRequest},
        {"probeInFlight", p.remote.probeInFlight},
        {"pinned", p.remote.pinned},
        {"requests", p.remote.requests},
        {"chunkBytes", p.remote.chunkBytes},
        {"receiveBytesPerSecond", p.remote.receiveBytesPerSecond},
        {"unloadedLatencySeconds", p.remote.unloadedLatencySeconds},
        {"objectBytes", p.remote.objectBytes}}},
      {"outputsPerSourceRecord", p.outputsPerSourceRecord},
      {"steps", steps},
      {"scaling", scaling},
      {"probes", probes},
      {"fixedMemoryBytes", p.fixedMemoryBytes},
      {"diskBytesPerSecond", p.diskBytesPerSecond},
      {"diskFreeBytes", p.diskFreeBytes},
      {"counterOverhead", p.counterOverhead},
      {"seconds", p.seconds},
      {"startupSeconds", p.startupSeconds},
      {"processCpuPerRecord", p.processCpuPerRecord},
      {"cpuOverheadFactor", p.cpuOverheadFactor},
      {"calibration", p.calibration},
      {"calibrationByLevel", byLevel},
      {"probePrefetch", probePrefetch},
      {"estimatedRecordsPerEpoch", optionalJson(p.estimatedRecordsPerEpoch)},
      {"cachedCalibration", p.cachedCalibration},
      {"cachedMeasured", p.cachedMeasured},
      {"firstCalibration", p.firstCalibration},
      {"firstMeasured", p.firstMeasured}};
}

void fromJson(const json &j, Profile &p) {
  j.at("pipeline").get_to(p.pipeline);
  j.at("specFile").get_to(p.specFile);
  j.at("hostCores").get_to(p.hostCores);
  j.at("epochs").get_to(p.epochs);
  p.sourceRecordsPerEpoch = optionalFrom(j.at("sourceRecordsPerEpoch"));
  j.at("sourceBytesPerSecond").get_to(p.sourceBytesPerSecond);
  if (j.contains("remote")) {
    const json &r = j.at("remote");
    r.at("requestsPerRecord").get_to(p.remote.requestsPerRecord);
    r.at("requestSeconds").get_to(p.remote.requestSeconds);
    r.at("latencySeconds").get_to(p.remote.latencySeconds);
    r.at("bytesPerRequest").get_to(p.remote.bytesPerRequest);
    r.at("probeInFlight").get_to(p.remote.probeInFlight);
    r.at("pinned").get_to(p.remote.pinned);
    r.at("requests").get_to(p.remote.requests);
    // Entries written before these were measured: a per-request model.
    if (r.contains("chunkBytes"))
      r.at("chunkBytes").get_to(p.remote.chunkBytes);
    if (r.contains("receiveBytesPerSecond"))
      r.at("receiveBytesPerSecond").get_to(p.remote.receiveBytesPerSecond);
    if (r.contains("unloadedLatencySeconds"))
      r.at("unloadedLatencySeconds").get_to(p.remote.unloadedLatencySeconds);
    if (r.contains("objectBytes"))
      r.at("objectBytes").get_to(p.remote.objectBytes);
  }
  j.at("outputsPerSourceRecord").get_to(p.outputsPerSourceRecord);
  for (const json &s : j.at("steps")) {
    StepProfile sp;
    fromJson(s, sp);
    p.steps.push_back(std::move(sp));
  }
  for (const json &e : j.at("scaling")) {
    std::vector<ScalingSample> samples;
    for (const json &s : e.at(1))
      samples.push_back({s.at(0).get<int64_t>(), s.at(1).get<double>()});
    p.scaling[e.at(0).get<size_t>()] = std::move(samples);
  }
  for (const json &pr : j.at("probes")) {
    Probe probe;
    fromJson(pr, probe);
    p.probes.push_back(std::move(probe));
  }
  j.at("fixedMemoryBytes").get_to(p.fixedMemoryBytes);
  j.at("diskBytesPerSecond").get_to(p.diskBytesPerSecond);
  j.at("diskFreeBytes").get_to(p.diskFreeBytes);
  j.at("counterOverhead").get_to(p.counterOverhead);
  j.at("seconds").get_to(p.seconds);
  j.at("startupSeconds").get_to(p.startupSeconds);
  j.at("processCpuPerRecord").get_to(p.processCpuPerRecord);
  j.at("cpuOverheadFactor").get_to(p.cpuOverheadFactor);
  j.at("calibration").get_to(p.calibration);
  for (const json &e : j.at("calibrationByLevel"))
    p.calibrationByLevel[e.at(0).get<int64_t>()] = e.at(1).get<double>();
  for (const json &e : j.at("probePrefetch"))
    p.probePrefetch[e.at(0).get<size_t>()] = e.at(1).get<int64_t>();
  p.estimatedRecordsPerEpoch = optionalFrom(j.at("estimatedRecordsPerEpoch"));
  j.at("cachedCalibration").get_to(p.cachedCalibration);
  j.at("cachedMeasured").get_to(p.cachedMeasured);
  j.at("firstCalibration").get_to(p.firstCalibration);
  j.at("firstMeasured").get_to(p.firstMeasured);
}

json toJson(const Config &c) {
  json prefetch = json::array();
  for (const auto &[step, depth] : c.prefetch)
    prefetch.push_back({step, depth});
  return {{"parallelism", c.parallelism}, {"prefetch", prefetch},
          {"cacheAfter", c.cache.after},  {"cacheTo", c.cache.to},
          {"cacheBytes", c.cache.bytes},  {"sourceInFlight", c.sourceInFlight}};
}

void fromJson(const json &j, Config &c) {
  j.at("parallelism").get_to(c.parallelism);
  for (const json &e : j.at("prefetch"))
    c.prefetch[e.at(0).get<size_t>()] = e.at(1).get<int64_t>();
  j.at("cacheAfter").get_to(c.cache.after);
  j.at("cacheTo").get_to(c.cache.to);
  j.at("cacheBytes").get_to(c.cache.bytes);
  c.sourceInFlight = j.value("sourceInFlight", int64_t(0));
}

json toJson(const Schedule &s) {
  json out = json::object();
  for (const auto &[name, o] : s) {
    json e = json::object();
    if (o.parallelism)
      e["parallelism"] = *o.parallelism;
    if (o.prefetch)
      e["prefetch"] = *o.prefetch;
    if (o.cache)
      e["cache"] = *o.cache;
    out[name] = e;
  }
  return out;
}

void fromJson(const json &j, Schedule &s) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    StepSchedule o;
    if (it->contains("parallelism"))
      o.parallelism = it->at("parallelism").get<int64_t>();
    if (it->contains("prefetch"))
      o.prefetch = it->at("prefetch").get<int64_t>();
    if (it->contains("cache"))
      o.cache = it->at("cache").get<std::string>();
    s[it.key()] = o;
  }
}

} // namespace

std::string scheduleCacheDirectory() {
  if (std::string d = envOr("SLUICE_CACHE_DIR"); !d.empty())
    return d + "/schedules";
  if (std::string d = envOr("XDG_CACHE_HOME"); !d.empty())
    return d + "/sluice/schedules";
  if (std::string d = envOr("HOME"); !d.empty())
    return d + "/.cache/sluice/schedules";
  return "";
}

bool scheduleCacheEnabled() {
  return !switchedOff("SLUICE_NO_SCHEDULE_CACHE") &&
         !scheduleCacheDirectory().empty();
}

std::string scheduleCacheKey(const runtime::Plan &plan,
                             const runtime::RunOptions &given, int64_t cores) {
  const runtime::RunOptions opts = given.inEffect();
  std::ostringstream os;
  os << kFormat << "\nplan " << plan.serialize() << "\nthreads " << opts.threads
     << " cores " << cores << " memory " << opts.memoryBytes << " rank "
     << opts.rank << " of "
     << opts.worldSize
     // Switches that change the rates the probes would measure.
     << "\nkernels " << (opts.binder ? "compiled" : "interpreted")
     << " placement " << opts.batchRowPlacement << " direct "
     << opts.directOutput << " handoff " << opts.batchedHandoff << " slicing "
     << opts.arenaSlicing << '/' << opts.arenaSliceMicros << " parse "
     << opts.parallelParse << " runs " << opts.recordRuns << " files "
     << opts.fileReadAhead << " order "
     << opts.positionalShuffle
     // Switches that change the solver's rules.
     << "\nsolver " << solverRulesKey() << "\nhost " << cpuModel() << "\ndata "
     << dataKey(plan, opts) << "\n";
  return os.str();
}

std::optional<CachedSchedule> loadCachedSchedule(const std::string &key,
                                                 std::string *path) {
  std::string dir = scheduleCacheDirectory();
  if (dir.empty())
    return std::nullopt;
  std::string file = dir + "/" + digest(key) + ".json";
  if (path)
    *path = file;
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return std::nullopt;
  try {
    if (j.at("key").get<std::string>() != key)
      return std::nullopt;
    CachedSchedule c;
    fromJson(j.at("schedule"), c.schedule);
    j.at("explanation").get_to(c.explanation);
    j.at("throughput").get_to(c.prediction.throughput);
    j.at("wholeRun").get_to(c.prediction.wholeRun);
    j.at("outputsPerSecond").get_to(c.prediction.outputsPerSecond);
    j.at("bottleneck").get_to(c.prediction.bottleneckLabel);
    fromJson(j.at("profile"), c.profile);
    j.at("budgetCores").get_to(c.budget.cores);
    j.at("budgetMemory").get_to(c.budget.memoryBytes);
    j.at("budgetDisk").get_to(c.budget.diskBytes);
    fromJson(j.at("config"), c.config);
    j.at("tunedAt").get_to(c.tunedAt);
    j.at("loweredForMemory").get_to(c.loweredForMemory);
    return c;
  } catch (const json::exception &) {
    return std::nullopt; // a damaged or foreign entry: tune afresh
  }
}

Status storeCachedSchedule(const std::string &key, const CachedSchedule &c) {
  std::string dir = scheduleCacheDirectory();
  if (dir.empty())
    return Status::ok();
  json j = {{"format", kFormat},
            {"key", key},
            {"schedule", toJson(c.schedule)},
            {"explanation", c.explanation},
            {"throughput", c.prediction.throughput},
            {"wholeRun", c.prediction.wholeRun},
            {"outputsPerSecond", c.prediction.outputsPerSecond},
            {"bottleneck", c.prediction.bottleneckLabel},
            {"profile", toJson(c.profile)},
            {"budgetCores", c.budget.cores},
            {"budgetMemory", c.budget.memoryBytes},
            {"budgetDisk", c.budget.diskBytes},
            {"config", toJson(c.config)},
            {"tunedAt", c.tunedAt},
            {"loweredForMemory", c.loweredForMemory}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create the schedule cache " + dir + ": " +
                         ec.message());
  std::string file = dir + "/" + digest(key) + ".json";
  std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << "\n";
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return Status::error("cannot write the schedule cache entry " + tmp);
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::error("cannot rename into " + file + ": " + ec.message());
  }
  return Status::ok();
}

} // namespace sluice::autotune
