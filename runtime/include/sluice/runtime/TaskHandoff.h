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
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_TASKHANDOFF_H
#define SLUICE_RUNTIME_TASKHANDOFF_H

#include <oneapi/tbb/task_arena.h>

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

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_TASKHANDOFF_H
