//===- autotune_remote_test.cpp - Requests in flight by Little's law ------===//
//
// A source over remote objects is modelled as I/O-bound: with N requests in
// flight, each taking T seconds (latency + transfer) and r requests per
// record, it serves N / (r T) records/s. The tuner picks N for the rate the
// rest of the pipeline sustains (with headroom), within the memory budget,
// unless the spec pins remote.concurrency. Synthetic profiles with answers
// worked out by hand.
//
//===----------------------------------------------------------------------===//
#include "sluice/autotune/Model.h"
#include "sluice/autotune/Solver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace sluice::autotune;
using sluice::Expected;

namespace {

StepProfile step(const std::string &name, double usPerElement, bool element) {
  StepProfile s;
  s.name = name;
  s.op = name;
  s.specSteps = {name};
  s.where = "spec.yaml:" + name;
  s.perRecord = element;
  s.element = element;
  s.bytesIn = s.bytesOut = 1000;
  s.secondsPerElement = s.cpuPerElement = usPerElement * 1e-6;
  return s;
}

/// image_folder over S3 (2 us of its own work per record) -> decode (a
/// parallel element step of `decodeUs`, scaling linearly) on `cores` cores;
/// one GET per record of 100 KB taking 20 ms.
Profile remotePipeline(double decodeUs = 1000, int64_t cores = 2) {
  Profile p;
  p.pipeline = "remote";
  p.epochs = 1;
  p.hostCores = cores;
  p.sourceRecordsPerEpoch = 100000;
  StepProfile src = step("image_folder", 2, false);
  src.source = true;
  p.steps.push_back(src);
  p.steps.push_back(step("decode", decodeUs, true));
  for (int64_t par : {int64_t(1), cores})
    p.scaling[1].push_back({par, decodeUs * 1e-6});
  p.remote.requestsPerRecord = 1;
  p.remote.requestSeconds = 0.020;
  p.remote.latencySeconds = 0.018;
  p.remote.bytesPerRequest = 100e3;
  p.remote.probeInFlight = 32;
  p.remote.requests = 1000;
  return p;
}

/// The rate `p` predicts for `s`'s configuration with the source unbounded
/// (what its requests in flight are chosen to serve).
double openRate(const Profile &p, const Solution &s, int64_t cores) {
  Config open = s.config;
  open.sourceInFlight = 0;
  return predict(p, open, cores).throughput;
}

/// Little's law with the model's headroom: 20 ms per request, x1.5.
int64_t inFlightAt(double rate) {
  return static_cast<int64_t>(std::ceil(rate * 0.020 * 1.5));
}

} // namespace

TEST(AutotuneRemote, CapacityIsLittlesLaw) {
  Profile p = remotePipeline();
  // 8 in flight, 20 ms each, one per record: 400 records/s.
  EXPECT_NEAR(remoteCapacity(p, 8), 400, 1e-9);
  EXPECT_NEAR(remoteCapacity(p, 40), 2000, 1e-9);
  // Ranged 4 MiB chunks of tar shards: 40 records per request.
  p.remote.requestsPerRecord = 1.0 / 40;
  EXPECT_NEAR(remoteCapacity(p, 8), 16000, 1e-6);
  // Unbounded: 0 requests (the solver's search), or a local source.
  EXPECT_TRUE(std::isinf(remoteCapacity(p, 0)));
  p.remote = RemoteProfile();
  EXPECT_TRUE(std::isinf(remoteCapacity(p, 8)));
  EXPECT_EQ(inFlightFor(p, 1000), 0);
}

TEST(AutotuneRemote, InFlightForARateWithHeadroomAndBounds) {
  // Without the floor for bursts (APerFileSourceKeepsAWindowForBursts).
  ::setenv("SLUICE_NO_REQUEST_BURSTS", "1", 1);
  Profile p = remotePipeline();
  // 1000 records/s x 1 request x 20 ms = 20 in flight on average, x1.5.
  EXPECT_EQ(inFlightFor(p, 1000), 30);
  EXPECT_EQ(inFlightFor(p, 1), 1);
  // More than the client's connections: capped.
  EXPECT_EQ(inFlightFor(p, 1e6), kMaxInFlight);
  // 1 MB of memory holds 10 objects of 100 KB.
  EXPECT_EQ(inFlightFor(p, 1000, 1000000), 10);
  // Memory for less than one object still keeps one request going.
  EXPECT_EQ(inFlightFor(p, 1000, 1000), 1);
  // Chunks of 40 records each need 40 times fewer requests.
  p.remote.requestsPerRecord = 1.0 / 40;
  EXPECT_EQ(inFlightFor(p, 1000), 1); // 0.75 rounds up
  EXPECT_EQ(inFlightFor(p, 8000), 6);
  ::unsetenv("SLUICE_NO_REQUEST_BURSTS");
}

TEST(AutotuneRemote, APerFileSourceKeepsAWindowForBursts) {
  Profile p = remotePipeline();
  ASSERT_TRUE(requestBurstsOn());
  // Little's law asks for 1 and for 30: the window stays deep enough for
  // the runtime to send its requests in bursts.
  EXPECT_EQ(inFlightFor(p, 1), kBurstInFlight);
  EXPECT_EQ(inFlightFor(p, 1000), kBurstInFlight);
  EXPECT_NE(describeInFlight(p, 1000, kBurstInFlight, kBurstInFlight, "")
                .find("at least 32, so requests go in bursts"),
            std::string::npos);
  // Above the floor, Little's law as before.
  EXPECT_EQ(inFlightFor(p, 2000), 60);
  EXPECT_EQ(describeInFlight(p, 2000, 60, 60, "").find("at least 32"),
            std::string::npos);
  // The budget still bounds it: 1 MB holds 10 objects of 100 KB.
  EXPECT_EQ(inFlightFor(p, 1000, 1000000), 10);
  // Many records a request (not a per-file source): no floor.
  p.remote.requestsPerRecord = 1.0 / 40;
  EXPECT_EQ(inFlightFor(p, 8000), 6);
}

TEST(AutotuneRemote, TooFewRequestsBoundThePrediction) {
  Profile p = remotePipeline();
  Config c;
  for (const Lane &u : lanes(p, -1))
    c.parallelism.push_back(u.parallel ? 2 : 1);
  // Decode on 2 cores: 2000 records/s of CPU; 8 requests serve 400.
  c.sourceInFlight = 8;
  Prediction few = predict(p, c, 2);
  EXPECT_NEAR(few.throughput, 400, 1e-6);
  EXPECT_EQ(few.bottleneck, -2);
  EXPECT_EQ(few.bottleneckLabel, "source requests (8 in flight)");
  EXPECT_NEAR(few.remoteCapacity, 400, 1e-6);
  // The objects in flight are held in memory.
  c.sourceInFlight = 0;
  Prediction open = predict(p, c, 2);
  EXPECT_NE(open.bottleneck, -2);
  EXPECT_GT(open.throughput, 1500);
  c.sourceInFlight = 80;
  Prediction many = predict(p, c, 2);
  EXPECT_NEAR(many.throughput, open.throughput, 1e-6);
  EXPECT_EQ(many.memoryBytes - open.memoryBytes, 80 * 100000);
}

TEST(AutotuneRemote, SolverChoosesInFlightForTheRestsRate) {
  Profile p = remotePipeline();
  Budget b;
  b.cores = 2;
  Expected<Solution> s = solve(p, b);
  ASSERT_TRUE(s) << s.status().message();
  // The rest sustains T records/s; 20 ms per request; x1.5.
  double t = openRate(p, *s, 2);
  int64_t want = inFlightAt(t);
  EXPECT_EQ(s->config.sourceInFlight, want);
  EXPECT_GT(want, 20);
  // With that many in flight the source is not the bottleneck.
  EXPECT_NE(s->prediction.bottleneck, -2);
  EXPECT_NEAR(s->prediction.throughput, t, t * 1e-9);
  // The schedule sets it as the source's parallelism, and the knob says it.
  Schedule sched = toSchedule(p, s->config);
  ASSERT_TRUE(sched["image_folder"].parallelism.has_value());
  EXPECT_EQ(*sched["image_folder"].parallelism, want);
  bool said = false;
  for (const KnobChoice &k : s->knobs)
    if (k.step == "image_folder" && k.knob == "requests in flight") {
      said = true;
      EXPECT_EQ(k.value, std::to_string(want));
      EXPECT_EQ(k.reason.rfind("source: " + std::to_string(want) +
                                   " requests in flight, 18 ms median latency",
                               0),
                0u)
          << k.reason;
    }
  EXPECT_TRUE(said);

  // A faster rest needs proportionally more.
  Profile fast = remotePipeline(250);
  Expected<Solution> f = solve(fast, b);
  ASSERT_TRUE(f);
  EXPECT_GT(f->config.sourceInFlight, 3 * want);
}

TEST(AutotuneRemote, InFlightServesTheModelsRateWhenTheProbesCalibrateItDown) {
  // Probes on a loaded host measured 0.6 of the model: the prediction is
  // calibrated down, but the requests in flight serve the model's own rate
  // (too few cap the pipeline, too many cost 100 KB each).
  Profile p = remotePipeline();
  Budget b;
  b.cores = 2;
  Expected<Solution> s = solve(p, b);
  ASSERT_TRUE(s) << s.status().message();
  const double model = openRate(p, *s, 2);
  const int64_t full = inFlightAt(model);
  EXPECT_EQ(s->config.sourceInFlight, full);

  p.calibration = 0.6;
  p.calibrationByLevel = {{1, 0.6}, {2, 0.6}};
  s = solve(p, b);
  ASSERT_TRUE(s) << s.status().message();
  const double calibrated = openRate(p, *s, 2);
  EXPECT_NEAR(calibrated, 0.6 * model, 1e-6 * model);
  EXPECT_EQ(s->config.sourceInFlight, full);
  std::string reason;
  for (const KnobChoice &k : s->knobs)
    if (k.knob == "requests in flight")
      reason = k.reason;
  EXPECT_NE(reason.find("the model before calibration: the probes measured "
                        "0.60 of it"),
            std::string::npos)
      << reason;
  // The predicted rate stays the calibrated one.
  EXPECT_NEAR(s->prediction.throughput, calibrated, 1e-6 * calibrated);

  // Switched off by name: the calibrated rate alone, as before.
  ::setenv("SLUICE_NO_IN_FLIGHT_UNCALIBRATED", "1", 1);
  s = solve(p, b);
  ::unsetenv("SLUICE_NO_IN_FLIGHT_UNCALIBRATED");
  ASSERT_TRUE(s) << s.status().message();
  EXPECT_EQ(s->config.sourceInFlight, inFlightAt(calibrated));
  EXPECT_LT(s->config.sourceInFlight, full);
}

TEST(AutotuneRemote, MemoryBudgetBoundsTheRequests) {
  Profile p = remotePipeline(250);
  Budget b;
  b.cores = 2;
  b.memoryBytes = 64LL << 20;
  Expected<Solution> roomy = solve(p, b);
  ASSERT_TRUE(roomy);
  // A budget whose quarter left over holds only 12 objects of 100 KB.
  Config open = roomy->config;
  open.sourceInFlight = 0;
  int64_t used = predict(p, open, 2).memoryBytes;
  b.memoryBytes = used + 4 * 1200000;
  Expected<Solution> tight = solve(p, b);
  ASSERT_TRUE(tight);
  EXPECT_EQ(tight->config.sourceInFlight, 12);
  EXPECT_LT(tight->config.sourceInFlight, roomy->config.sourceInFlight);
  EXPECT_EQ(tight->prediction.bottleneck, -2);
  bool said = false;
  for (const KnobChoice &k : tight->knobs)
    if (k.knob == "requests in flight")
      said = k.reason.find("memory") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(AutotuneRemote, TheSpecsConcurrencyIsKept) {
  Profile p = remotePipeline();
  p.remote.pinned = 4;
  Budget b;
  b.cores = 2;
  Expected<Solution> s = solve(p, b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->config.sourceInFlight, 4);
  EXPECT_NEAR(s->prediction.throughput, 200, 1e-6); // 4 / 20 ms
  EXPECT_EQ(s->prediction.bottleneck, -2);
  bool pinned = false;
  for (const KnobChoice &k : s->knobs)
    if (k.knob == "requests in flight")
      pinned = k.pinned;
  EXPECT_TRUE(pinned);
}

TEST(AutotuneRemote, LocalSourcesChooseNothing) {
  Profile p = remotePipeline();
  p.remote = RemoteProfile();
  Budget b;
  b.cores = 2;
  Expected<Solution> s = solve(p, b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->config.sourceInFlight, 0);
  EXPECT_FALSE(toSchedule(p, s->config)["image_folder"].parallelism);
  for (const KnobChoice &k : s->knobs)
    EXPECT_NE(k.knob, "requests in flight");
}

TEST(AutotuneRemote, CachedEpochsReadNoObjects) {
  // Three epochs with a memory cache after the source: only the first
  // epoch's records are fetched, so 8 in flight bound the first epoch and
  // not the cached ones.
  Profile p = remotePipeline();
  p.epochs = 3;
  p.sourceRecordsPerEpoch = 1000;
  Config c;
  for (const CacheOption &o : cacheOptions(p))
    if (o.after == 0 && o.to == "memory")
      c.cache = o;
  ASSERT_EQ(c.cache.after, 0);
  for (const Lane &u : lanes(p, 0))
    c.parallelism.push_back(u.parallel ? 2 : 1);
  c.sourceInFlight = 8;
  Prediction r = predict(p, c, 2);
  EXPECT_NEAR(r.firstEpoch, 400, 1e-6);
  EXPECT_GT(r.cachedEpochs, 1500);
}

namespace {

constexpr double kMiB = 1048576;
constexpr double kShard = 10.5 * kMiB; ///< 64 pictures of 170 KB
constexpr double kPerRecord = 170e3;

/// webdataset shards over HTTP read in windows of 1 MiB chunks, 170 KB per
/// record, shards of 10.5 MiB, decoded at 0.7 ms per record on 2 cores (the
/// rest sustains about 2,800 records/s, 480 MB/s): a profile as the probes
/// (32 in flight) measure it, with their requests of `requestMiB` each
/// taking `requestSeconds` (a shard's first window asked for ahead arrives
/// as one response of up to the whole shard), the median latency to the
/// first byte `latency` (queued behind other responses) and without
/// queueing `unloaded`.
Profile windowedPipeline(double requestMiB, double requestSeconds,
                         double latency, double unloaded) {
  Profile p = remotePipeline(700);
  p.steps.front().name = "webdataset";
  p.steps.front().op = "webdataset";
  p.remote.bytesPerRequest = requestMiB * kMiB;
  p.remote.requestsPerRecord = kPerRecord / p.remote.bytesPerRequest;
  p.remote.requestSeconds = requestSeconds;
  p.remote.latencySeconds = latency;
  p.remote.unloadedLatencySeconds = unloaded;
  p.remote.chunkBytes = kMiB;
  p.remote.objectBytes = kShard;
  p.remote.receiveBytesPerSecond = 800e6;
  return p;
}

/// The rate the rest of the solved configuration sustains.
double restRate(const Profile &p, const Solution &s) {
  Config open = s.config;
  open.sourceInFlight = 0;
  return predict(p, open, 2).throughput;
}

/// By hand: the fewest N >= 4 whose bytes ahead (N chunks + N/2 shards'
/// first windows of min(N chunks, a shard)) cover the demand for the time
/// a first window takes (latency without queueing + its bytes at 800 MB/s),
/// x1.5, and whose window of N chunks is a whole shard or covers the
/// demand for the latency x1.5.
int64_t byHand(double rate, double unloaded) {
  for (int64_t n = 4;; ++n) {
    double window = static_cast<double>(n) * kMiB;
    double request = std::min(window, kShard);
    double ahead =
        window + static_cast<double>(std::max<int64_t>(1, n / 2)) * request;
    double t = unloaded + request / 800e6;
    double demand = rate * kPerRecord;
    bool covers = window >= kShard || window >= demand * unloaded * 1.5;
    if (covers && ahead >= demand * t * 1.5)
      return n;
  }
}

} // namespace

TEST(AutotuneRemote, WindowedCapacityIsLittlesLawInBytes) {
  Profile p = windowedPipeline(10.5, 0.35, 0.063, 0.020);
  ASSERT_TRUE(p.remote.windowed());
  // At 4: a window of 4 MiB and 2 shards' first 4 MiB ahead, 12 MiB; a
  // first window takes 20 ms + 4 MiB at 800 MB/s (500 MB/s together).
  EXPECT_EQ(windowedBytes(p, 4), static_cast<int64_t>(12 * kMiB));
  double t = 0.020 + 4 * kMiB / 800e6;
  EXPECT_NEAR(windowedRequestSeconds(p, 4), t, 1e-12);
  // But the rest of each shard is asked for as its reader opens it: a
  // window of 4 MiB per 20 ms bounds it lower.
  EXPECT_NEAR(remoteCapacity(p, 4), 4 * kMiB / 0.020 / kPerRecord, 1e-6);
  // A shard no larger than the window waits for no rest: bytes ahead per
  // request time.
  Profile whole = p;
  whole.remote.objectBytes = 4 * kMiB;
  EXPECT_NEAR(remoteCapacity(whole, 4), 12 * kMiB / t / kPerRecord, 1e-6);
  // At 16 (the whole shard in a window), 87 MiB ahead over 33 ms would be
  // 2.8 GB/s: the bandwidth received at bounds it.
  EXPECT_NEAR(remoteCapacity(p, 16), 800e6 / kPerRecord, 1e-6);
  EXPECT_EQ(windowedBytes(p, 8), static_cast<int64_t>(40 * kMiB));
  // A first window is at most a shard.
  EXPECT_EQ(windowedRequestBytes(p, 32), kShard);
  EXPECT_EQ(windowedBytes(p, 1), static_cast<int64_t>(2 * kMiB));
  // The probes' own requests (whole shards or single chunks, and how long
  // they took) play no part.
  Profile q = windowedPipeline(1, 0.024, 0.022, 0.020);
  EXPECT_NEAR(remoteCapacity(q, 4), remoteCapacity(p, 4), 1e-6);
}

TEST(AutotuneRemote, WindowedChoiceDoesNotFollowTheProbesRequests) {
  // The three profiles that made a per-request choice unstable (11, 4 and
  // 1 in flight in three runs): the probes' requests were whole shards of
  // 10.5 MiB taking 350 ms with the latency queued to 63 ms (big), single
  // 1 MiB chunks taking 24 ms (small), or the latency was high (200 ms).
  // The first two describe one source and get one choice.
  Budget b;
  b.cores = 2;
  Profile big = windowedPipeline(10.5, 0.350, 0.063, 0.021);
  Profile small = windowedPipeline(1, 0.024, 0.022, 0.021);
  Profile slow = windowedPipeline(4, 0.600, 0.260, 0.200);
  Profile *ps[3] = {&big, &small, &slow};
  int64_t chosen[3];
  for (int i = 0; i < 3; ++i) {
    Expected<Solution> s = solve(*ps[i], b);
    ASSERT_TRUE(s) << s.status().message();
    double rate = restRate(*ps[i], *s);
    EXPECT_GT(rate, 2000) << i;
    chosen[i] = s->config.sourceInFlight;
    EXPECT_EQ(chosen[i], byHand(rate, ps[i]->remote.unloadedLatencySeconds))
        << i;
    // With it the source is not the bottleneck.
    EXPECT_NE(s->prediction.bottleneck, -2) << i;
    EXPECT_GT(remoteCapacity(*ps[i], chosen[i]), rate) << i;
    bool said = false;
    for (const KnobChoice &k : s->knobs)
      if (k.knob == "requests in flight") {
        said = true;
        EXPECT_EQ(k.value, std::to_string(chosen[i]));
        char lead[80];
        std::snprintf(lead, sizeof lead,
                      "source: %lld requests in flight, %.0f ms median latency",
                      static_cast<long long>(chosen[i]),
                      ps[i]->remote.latencySeconds * 1e3);
        EXPECT_EQ(k.reason.rfind(lead, 0), 0u) << k.reason;
        EXPECT_NE(k.reason.find("Little's law in bytes"), std::string::npos)
            << k.reason;
      }
    EXPECT_TRUE(said);
  }
  // ~480 MB/s for 21 ms + a window of N MiB at 800 MB/s, x1.5: 6 in flight
  // (24 MiB ahead) would do, but a first window of 6 MiB lasts the reader
  // 13 ms, less than a round trip x1.5: 11, a whole shard of 10.5 MiB, for
  // both; for 200 ms, about 24.
  EXPECT_EQ(chosen[0], chosen[1]);
  EXPECT_EQ(chosen[0], 11);
  EXPECT_GE(chosen[2], 20);
  EXPECT_LE(chosen[2], 28);
  // Four times the probes' request time changes nothing.
  Profile again = big;
  again.remote.requestSeconds *= 4;
  Expected<Solution> s = solve(again, b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->config.sourceInFlight, chosen[0]);
  // A demand that latency x 1.5 covers with less still gets 4: two shards
  // ahead.
  Profile light = windowedPipeline(1, 0.024, 0.002, 0.001);
  Expected<Solution> l = solve(light, b);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->config.sourceInFlight, kMinWindowedInFlight);
}

TEST(AutotuneRemote, WindowedChoiceWithinTheMemoryBudget) {
  Profile slow = windowedPipeline(4, 0.600, 0.260, 0.200);
  Budget b;
  b.cores = 2;
  Expected<Solution> roomy = solve(slow, b);
  ASSERT_TRUE(roomy);
  // A budget whose quarter left over holds 61 MiB: 10 in flight hold a
  // 10 MiB window and 5 shards' first 10 MiB (60 MiB), 11 hold 11 MiB and
  // 5 x 10.5 MiB (63.5 MiB).
  Config open = roomy->config;
  open.sourceInFlight = 0;
  int64_t used = predict(slow, open, 2).memoryBytes;
  b.memoryBytes = used + 4 * static_cast<int64_t>(61 * kMiB);
  Expected<Solution> tight = solve(slow, b);
  ASSERT_TRUE(tight);
  EXPECT_EQ(tight->config.sourceInFlight, 10);
  EXPECT_LT(tight->config.sourceInFlight, roomy->config.sourceInFlight);
  // The model charges what the source holds.
  Config c = tight->config;
  int64_t without = (c.sourceInFlight = 0, predict(slow, c, 2).memoryBytes);
  EXPECT_EQ(tight->prediction.memoryBytes - without, windowedBytes(slow, 10));
  bool said = false;
  for (const KnobChoice &k : tight->knobs)
    if (k.knob == "requests in flight")
      said = k.reason.find("memory") != std::string::npos;
  EXPECT_TRUE(said);
}
