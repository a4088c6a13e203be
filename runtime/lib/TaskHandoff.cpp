//===- TaskHandoff.cpp - Tasks in a process forked after oneTBB started ---===//
//
// A child process made with fork() (without exec) has only the thread that
// forked. oneTBB keeps no fork handler: its shared state in the child still
// counts the parent's worker threads, so a task enqueued there is never
// run, and the child's first pipeline waited forever. A pthread_atfork
// child handler notes the fork when a TaskArena existed before it, and the
// child's TaskArenas then run each task on a thread of its own (the tasks
// are long-lived loops, one per worker, so that is a handful of threads).
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/TaskHandoff.h"

#include <atomic>
#include <mutex>
#include <pthread.h>
#include <thread>

namespace sluice::runtime {

namespace {
std::atomic<bool> arenasMade{false};
std::atomic<bool> forked{false};
std::once_flag handlerOnce;

void afterForkInChild() {
  if (arenasMade.load(std::memory_order_relaxed))
    forked.store(true, std::memory_order_relaxed);
}
} // namespace

bool forkedAfterTaskArenas() { return forked.load(std::memory_order_relaxed); }

void noteTaskArenaMade() {
  std::call_once(handlerOnce,
                 [] { ::pthread_atfork(nullptr, nullptr, afterForkInChild); });
  arenasMade.store(true, std::memory_order_relaxed);
}

void TaskArena::runOnThread(std::function<void()> f) {
  std::thread(std::move(f)).detach();
}

} // namespace sluice::runtime
