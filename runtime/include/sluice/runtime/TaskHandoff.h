//===- TaskHandoff.h - Enqueue a task on a oneTBB arena ---------*- C++ -*-===//
//
// Every task sluice runs on a oneTBB arena goes through enqueueTask(), so
// that ThreadSanitizer sees the hand-off. Debian's libtbb is not built with
// -fsanitize=thread: the queue inside the arena that carries a task from the
// thread that enqueues it to the worker that runs it synchronizes with
// atomics and futexes TSan cannot see, so everything the enqueuing thread
// wrote before the call (the stage state the task reads) would be reported
// as a race with the task. Under TSan, enqueueTask() moves the task to the
// heap, marks that object released (__tsan_release) before handing its
// address to oneTBB, and the worker acquires it (__tsan_acquire) before
// touching anything else: the one happens-before edge oneTBB provides is
// made visible, and nothing else is hidden (no suppression matches our own
// frames, which would also hide real races on the worker side). The
// worker's read of the pointer out of oneTBB's task object is done with
// instrumentation off, like the rest of oneTBB (the TBB headers are also
// compiled uninstrumented in TSan builds: cmake/tsan-ignorelist.txt).
// Without TSan it is a plain task_arena::enqueue.
//
// TaskArena is the arena a pipeline owns: it counts the tasks enqueued on
// it and its destructor waits until each has run. oneTBB (2021.8) neither
// runs nor frees a task still queued when its task_arena is destroyed (a
// queued CSV parse task whose block the reader took back holds that block:
// its text and columns leaked with every pipeline, found by LeakSanitizer).
//
// Turns (TaskArena's `turns` mode, RunOptions::arenaSlicing): a pipeline's
// arena has one slot per core, and a parallel step's worker keeps its slot
// while its step has input, so a task of another step (the crop/flip after
// a costly map and its cache) waited until the map's reorder window filled
// and its workers ran dry: the cores took turns idling. In turns mode the
// arena counts the tasks enqueued but not started (waiting()), and runs its
// tasks strictly in the order they were enqueued: each oneTBB task it hands
// over runs the oldest callable of its own queue, not the one it was made
// for (oneTBB spreads enqueued tasks over random lanes, so a worker that
// re-enqueued itself to give way could come straight back before the task
// it gave way to). A long-running worker that sees waiting() > 0 after a
// slice re-enqueues its continuation and returns its slot (MapStage.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_TASKHANDOFF_H
#define SLUICE_RUNTIME_TASKHANDOFF_H

#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <type_traits>
#include <utility>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_TSAN 1
#endif
#endif
#if !defined(SLUICE_TSAN) && defined(__SANITIZE_THREAD__)
#define SLUICE_TSAN 1
#endif

#ifdef SLUICE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace sluice::runtime {

#ifdef SLUICE_TSAN
namespace detail {
/// What oneTBB copies and runs: only the address of the heap-held task.
template <class F> struct AnnotatedTask {
  F *fn;
  // Reads `fn` out of oneTBB's task object uninstrumented (it was written
  // by oneTBB's code on the enqueuing thread), then takes the edge.
  __attribute__((no_sanitize("thread"))) void operator()() const {
    F *f = fn;
    runAcquired(f);
  }
  __attribute__((noinline)) static void runAcquired(F *f) {
    __tsan_acquire(f);
    (*f)();
    delete f;
  }
};
} // namespace detail
#endif

/// Runs `f` on a worker of `arena` (task_arena::enqueue), with the
/// enqueuing thread's writes visible to ThreadSanitizer in the task.
template <class F> void enqueueTask(oneapi::tbb::task_arena &arena, F &&f) {
#ifdef SLUICE_TSAN
  using Fn = std::decay_t<F>;
  Fn *heap = new Fn(std::forward<F>(f));
  __tsan_release(heap);
  arena.enqueue(detail::AnnotatedTask<Fn>{heap});
#else
  arena.enqueue(std::forward<F>(f));
#endif
}

/// A oneTBB arena that outlives every task enqueued on it: the destructor
/// (or waitIdle()) waits until each has run and its callable is destroyed.
/// With `turns`, callables run in the order they were enqueued and
/// waiting() counts those not started yet (see the file comment).
/// Whether this process is a child forked after oneTBB's worker threads
/// were started (by a TaskArena made before the fork). Only the forking
/// thread exists in such a child, but oneTBB's shared state still counts
/// the parent's workers: a task enqueued there never runs, and a pipeline
/// made in the child (a DataLoader worker, a Python multiprocessing child)
/// waited forever. TaskArena then runs each task on a thread of its own.
bool forkedAfterTaskArenas();
/// Notes that a TaskArena exists (and registers the fork handler once).
void noteTaskArenaMade();

class TaskArena {
public:
  TaskArena(int maxConcurrency, unsigned reservedForMasters, bool turns = false)
      : arena_(maxConcurrency, reservedForMasters), turns_(turns) {
    noteTaskArenaMade();
  }
  TaskArena(const TaskArena &) = delete;
  TaskArena &operator=(const TaskArena &) = delete;
  ~TaskArena() { waitIdle(); }

  /// Runs `f` on a worker (enqueueTask); `f` is destroyed before the task
  /// counts as finished, so nothing it captured outlives waitIdle().
  template <class F> void enqueue(F &&f) {
    using Fn = std::decay_t<F>;
    Queued q{new Fn(std::forward<F>(f)), [](void *p) {
               Fn *fn = static_cast<Fn *>(p);
               (*fn)();
               delete fn;
             }};
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
      if (turns_)
        fifo_.push_back(q);
      waiting_.fetch_add(1, std::memory_order_relaxed);
    }
    if (forkedAfterTaskArenas()) {
      // Oldest first, as with turns; on a thread of its own (see above).
      runOnThread([this, q] {
        Queued next = q;
        if (turns_) {
          std::lock_guard<std::mutex> lock(mu_);
          next = fifo_.front();
          fifo_.pop_front();
        }
        run(next);
      });
      return;
    }
    if (turns_) {
      // Whichever callable is oldest when a worker takes this task.
      enqueueTask(arena_, [this] {
        Queued next;
        {
          std::lock_guard<std::mutex> lock(mu_);
          next = fifo_.front();
          fifo_.pop_front();
        }
        run(next);
      });
    } else {
      enqueueTask(arena_, [this, q] { run(q); });
    }
  }

  /// Tasks enqueued and not started yet (only counted with `turns`;
  /// relaxed: a hint for a worker deciding whether to give its slot away).
  int64_t waiting() const {
    return turns_ ? waiting_.load(std::memory_order_relaxed) : 0;
  }
  bool turns() const { return turns_; }

  /// Waits until every task enqueued so far has run.
  void waitIdle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return pending_ == 0; });
  }

private:
  /// A callable of any type and how to run (and then delete) it.
  struct Queued {
    void *fn = nullptr;
    void (*call)(void *) = nullptr;
  };

  /// Starts `f` on a new detached thread (forked children only).
  static void runOnThread(std::function<void()> f);

  void run(Queued q) {
    waiting_.fetch_sub(1, std::memory_order_relaxed);
    q.call(q.fn);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0)
      idle_.notify_all();
  }

  oneapi::tbb::task_arena arena_;
  const bool turns_;
  std::mutex mu_;
  std::condition_variable idle_;
  int64_t pending_ = 0;
  std::deque<Queued> fifo_;
  std::atomic<int64_t> waiting_{0};
};

/// Runs `f` on a worker of `arena`, counted until it has run.
template <class F> void enqueueTask(TaskArena &arena, F &&f) {
  arena.enqueue(std::forward<F>(f));
}

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_TASKHANDOFF_H
