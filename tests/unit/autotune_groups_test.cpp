//===- autotune_groups_test.cpp - The tuner models the runtime's stages ---===//
//
// The runtime groups a plan's steps into stages (runtime::stageGroups, what
// Engine::build builds) and the autotuner models lanes of the same steps
// (autotune::lanes over describeSteps). Both read each step's shape, one
// from the plan, the other from the tuner's description of it; here, on
// every example and bench spec, with no schedule and with a prefetch or a
// cache pinned on each step in turn, the shapes agree and every lane is
// made of whole runtime stages: a parallel lane is exactly one map stage
// on the workers, a serial lane a run of the others up to a thread hand-off.
//
//===----------------------------------------------------------------------===//
#include "compiler_test_util.h"

#include "sluice/autotune/Model.h"
#include "sluice/autotune/Profile.h"
#include "sluice/runtime/StageGroups.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace sluice;

namespace {

std::vector<std::string> specFiles() {
  std::vector<std::string> out;
  for (const char *dir : {"examples", "bench/specs", "bench/specs/autotune"})
    for (const auto &e : std::filesystem::directory_iterator(
             std::string(SLUICE_SOURCE_DIR) + "/" + dir))
      if (e.path().extension() == ".yaml")
        out.push_back(std::string(dir) + "/" + e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string describe(const std::vector<size_t> &steps) {
  std::string s;
  for (size_t i : steps)
    s += (s.empty() ? "" : ",") + std::to_string(i);
  return "{" + s + "}";
}

/// Checks that the tuner's lanes of `plan` are made of the runtime's stages.
void expectAgree(const runtime::Plan &plan, const std::string &what) {
  SCOPED_TRACE(what);
  std::vector<runtime::StepShape> shapes = runtime::stepShapes(plan);
  autotune::Profile prof;
  prof.steps = autotune::describeSteps(plan);
  ASSERT_EQ(prof.steps.size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const autotune::StepProfile &s = prof.steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + " '" + s.name + "'");
    EXPECT_EQ(s.source, shapes[i].source);
    EXPECT_EQ(s.perRecord, shapes[i].perRecord);
    EXPECT_EQ(s.element, shapes[i].element);
    EXPECT_EQ(s.threadBoundary, shapes[i].threadBoundary);
    EXPECT_EQ(s.pinned.parallelism, shapes[i].pinned.parallelism);
    EXPECT_EQ(s.pinned.prefetch, shapes[i].pinned.prefetch);
    EXPECT_EQ(s.pinsCache(), shapes[i].cacheAfter);
  }
  std::vector<runtime::StageGroup> groups = runtime::groupSteps(shapes);
  std::vector<runtime::Lane> us = autotune::lanes(prof, -1);
  // Which runtime stage each step runs in.
  std::vector<size_t> stageOf(shapes.size(), SIZE_MAX);
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i : groups[g].steps)
      stageOf[i] = g;
  size_t covered = 0;
  for (const runtime::Lane &u : us) {
    ASSERT_FALSE(u.steps.empty());
    covered += u.steps.size();
    size_t first = stageOf[u.steps.front()], last = stageOf[u.steps.back()];
    ASSERT_NE(first, SIZE_MAX);
    // Whole stages: the lane starts at a stage's first step and ends at one's
    // last.
    EXPECT_EQ(groups[first].steps.front(), u.steps.front())
        << describe(u.steps);
    EXPECT_EQ(groups[last].steps.back(), u.steps.back()) << describe(u.steps);
    if (u.parallel) {
      EXPECT_EQ(first, last) << describe(u.steps);
      EXPECT_TRUE(groups[first].parallel) << describe(u.steps);
      EXPECT_EQ(groups[first].steps, u.steps);
      EXPECT_EQ(groups[first].parallelism, u.pinned);
    } else {
      for (size_t g = first; g <= last; ++g) {
        EXPECT_FALSE(groups[g].parallel) << describe(u.steps);
        // A serial lane is one thread: no hand-off inside it.
        if (g < last)
          EXPECT_FALSE(groups[g].threadAfter) << describe(u.steps);
      }
    }
  }
  EXPECT_EQ(covered, shapes.size());
  size_t parallelGroups = 0;
  for (const runtime::StageGroup &g : groups)
    parallelGroups += g.parallel;
  size_t parallelLanes = 0;
  for (const runtime::Lane &u : us)
    parallelLanes += u.parallel;
  EXPECT_EQ(parallelGroups, parallelLanes);
}

class StageGroupsAgree : public ::testing::TestWithParam<std::string> {};

TEST_P(StageGroupsAgree, LanesAreRuntimeStages) {
  runtime::Plan plan = sluice::testing::planOfSpecFile(
      std::string(SLUICE_SOURCE_DIR) + "/" + GetParam());
  ASSERT_FALSE(plan.steps.empty());
  expectAgree(plan, "as written");
  // Each step in turn with a pinned prefetch, a pinned parallelism, and a
  // cache after it (the placement rule is the schedule's business; the
  // grouping must agree whatever the schedule says).
  for (size_t i = 0; i <= plan.steps.size(); ++i) {
    for (int variant = 0; variant < 3; ++variant) {
      runtime::Plan p = plan;
      runtime::PlanStep &st = i == 0 ? p.source : p.steps[i - 1];
      if (variant == 0)
        st.schedule.prefetch = 3;
      else if (variant == 1)
        st.schedule.parallelism = 2;
      else
        st.schedule.cache = "memory";
      expectAgree(p, "variant " + std::to_string(variant) + " on step " +
                         std::to_string(i) + " '" + st.name + "'");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, StageGroupsAgree,
                         ::testing::ValuesIn(specFiles()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           std::string n = info.param;
                           for (char &c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c)))
                               c = '_';
                           return n;
                         });

/// Written-out step shapes: the source, decode (element), select, shuffle
/// (a stream step), rename, normalize (element) and a last stream step.
std::vector<runtime::StepShape> writtenOutShapes() {
  auto step = [](bool perRecord, bool element) {
    runtime::StepShape s;
    s.perRecord = perRecord;
    s.element = element;
    return s;
  };
  runtime::StepShape source;
  source.source = true;
  return {source,
          step(true, true),   // decode
          step(true, false),  // select
          step(false, false), // shuffle
          step(true, false),  // rename
          step(true, true),   // normalize
          step(false, false)};
}

/// The grouping itself, on shapes written out: per-record steps share a map
/// stage until a stream step or a cache; an element op puts it on the
/// workers; an inline map stage's prefetch is a thread of its own.
TEST(StageGroups, GroupsShapes) {
  using runtime::StageGroup;
  using runtime::StepShape;
  std::vector<StepShape> shapes = writtenOutShapes();
  shapes[2].cacheAfter = true;
  shapes[4].pinned.prefetch = 4;
  shapes[1].pinned.parallelism = 3;
  std::vector<StageGroup> g = runtime::groupSteps(shapes);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0].kind, StageGroup::Kind::Source);
  EXPECT_EQ(g[1].steps, (std::vector<size_t>{1, 2}));
  EXPECT_TRUE(g[1].parallel);
  EXPECT_EQ(g[1].parallelism, 3);
  EXPECT_TRUE(g[1].cacheAfter);
  EXPECT_EQ(g[2].kind, StageGroup::Kind::Stream);
  EXPECT_EQ(g[3].steps, (std::vector<size_t>{4, 5}));
  EXPECT_TRUE(g[3].parallel);
  // On the workers the prefetch deepens the window: no thread after it.
  EXPECT_EQ(g[3].prefetch, 4);
  EXPECT_FALSE(g[3].prefetchAfter);
  EXPECT_EQ(g[4].steps, (std::vector<size_t>{6}));

  shapes[5].element = false; // the second map stage now runs inline
  g = runtime::groupSteps(shapes);
  EXPECT_FALSE(g[3].parallel);
  EXPECT_TRUE(g[3].prefetchAfter);
  EXPECT_TRUE(g[3].threadAfter);
}

/// The lanes of written-out groups: a map stage on the workers is a lane of
/// its own; the other stages share one thread up to a thread hand-off.
TEST(StageGroups, LanesOfGroups) {
  using runtime::Lane;
  using runtime::StepShape;
  using Steps = std::vector<size_t>;
  std::vector<StepShape> shapes = writtenOutShapes();
  shapes[1].pinned.parallelism = 3;
  std::vector<Lane> l = runtime::lanes(runtime::groupSteps(shapes));
  ASSERT_EQ(l.size(), 5u);
  EXPECT_EQ(l[0].steps, Steps{0});
  EXPECT_FALSE(l[0].parallel);
  EXPECT_EQ(l[1].steps, (Steps{1, 2}));
  EXPECT_TRUE(l[1].parallel);
  EXPECT_EQ(l[1].pinned, 3);
  EXPECT_EQ(l[2].steps, Steps{3});
  EXPECT_FALSE(l[2].parallel);
  EXPECT_EQ(l[3].steps, (Steps{4, 5}));
  EXPECT_TRUE(l[3].parallel);
  EXPECT_EQ(l[3].pinned, 0);
  EXPECT_EQ(l[4].steps, Steps{6});
  for (const Lane &x : l)
    EXPECT_FALSE(x.beforeCache); // the autotuner's to set

  // The second map stage inline with a prefetch: the shuffle and it share a
  // thread, and the prefetch hands the records to the batch's.
  shapes[5].element = false;
  shapes[4].pinned.prefetch = 2;
  l = runtime::lanes(runtime::groupSteps(shapes));
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[2].steps, (Steps{3, 4, 5}));
  EXPECT_FALSE(l[2].parallel);
  EXPECT_EQ(l[3].steps, Steps{6});

  // Without the hand-off, everything after the decode is one thread.
  shapes[4].pinned.prefetch.reset();
  l = runtime::lanes(runtime::groupSteps(shapes));
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[2].steps, (Steps{3, 4, 5, 6}));
}

} // namespace
