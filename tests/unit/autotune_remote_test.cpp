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

#include <cmath>

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
  Config open = s->config;
  open.sourceInFlight = 0;
  double t = predict(p, open, 2).throughput;
  int64_t want = static_cast<int64_t>(std::ceil(t * 0.020 * 1.5));
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
