//===- runtime_task_arena_test.cpp - Tasks outlive no TaskArena -----------===//
//
// oneTBB neither runs nor frees a task still queued when its task_arena is
// destroyed; a pipeline's arena (TaskArena) must wait for every task it
// was given, and destroy each task's callable (what it captured) before
// the wait ends. Found by LeakSanitizer: CSV parse tasks queued when a
// pipeline ended leaked their blocks. Both with and without turns (the
// arena's own queue that runs tasks in the order enqueued, for arena
// slicing).
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/TaskHandoff.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

using sluice::runtime::enqueueTask;
using sluice::runtime::TaskArena;

namespace {

/// Counts its live copies, so a test sees when captured state is gone.
struct Tracked {
  explicit Tracked(std::atomic<int> &live) : live(&live) { ++*this->live; }
  Tracked(const Tracked &o) : live(o.live) { ++*live; }
  ~Tracked() { --*live; }
  std::atomic<int> *live;
};

TEST(TaskArena, DestructorWaitsForQueuedTasks) {
  for (bool turns : {false, true}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads) +
                   (turns ? ", turns" : ""));
      constexpr int kTasks = 500;
      std::atomic<int> ran{0}, live{0};
      {
        TaskArena arena(threads, 0, turns);
        for (int i = 0; i < kTasks; ++i) {
          Tracked t(live);
          enqueueTask(arena, [t, &ran] { ran.fetch_add(1); });
        }
      } // destroyed while most tasks are still queued
      EXPECT_EQ(ran.load(), kTasks);
      EXPECT_EQ(live.load(), 0) << "a task's captures outlived the arena";
    }
  }
}

TEST(TaskArena, WaitIdleSeesTheTasksWrites) {
  for (bool turns : {false, true}) {
    SCOPED_TRACE(turns ? "turns" : "no turns");
    TaskArena arena(2, 0, turns);
    std::vector<int> out(64, 0); // plain writes: TSan checks the hand-back
    for (size_t i = 0; i < out.size(); ++i)
      enqueueTask(arena, [&out, i] { out[i] = static_cast<int>(i) + 1; });
    arena.waitIdle();
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_EQ(out[i], static_cast<int>(i) + 1);
    // Usable again after waiting.
    std::atomic<int> n{0};
    enqueueTask(arena, [&n] { n = 7; });
    arena.waitIdle();
    EXPECT_EQ(n.load(), 7);
  }
}

} // namespace
