//===- FileWindow.h - Reading whole-file shards ahead on the arena -*- C++
//-*-===//
//
// Not installed. A per-file source (image_folder, files) holds one record
// per shard, and reading it is opening one file and copying its bytes
// (with the page faults of the fresh buffer). On one thread that costs
// 40-450 µs per image on a 2-core host, which is nothing beside a decode
// at 2 threads but caps the pipeline at a few thousand images/s at 16
// (issue 20: the source thread was the busiest serial stage once the
// shuffle moved next to it). The window reads the next `width` shards on
// the pipeline's arena, several files at once, on the same workers as the
// parallel steps (so the reads are counted in the core budget, not an
// extra thread); the stage takes them back strictly in the order it named
// them, so records, their numbering, errors and counts are those of
// reading one file after another on the stage's own thread.
//
// The stage names shards in bulk (when the window is half empty it fills
// it up), and a few reader tasks take named shards in turn until none is
// left, so the workers are not woken once per file (a task per file cost
// four context switches per image). A reader gives its arena slot back
// after a few files when more are named (it enqueues its continuation),
// as the parallel steps' workers do under arena slicing. A stage that
// finds the oldest shard unread (a shuffle buffer filling takes files as
// fast as they come) waits until a run of a quarter of the window is read
// at the head, and the readers wake it once then, not for every file.
//
// What a shard's read allocates is counted in the source's "reading"
// account while it is read (readCounted), and the records held in the
// window in its "read-ahead" account until the stage takes them.
// RunOptions::fileReadAhead = false or SLUICE_NO_FILE_READ_AHEAD=1 reads
// on the stage's thread as before.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_LIB_FILEWINDOW_H
#define SLUICE_RUNTIME_LIB_FILEWINDOW_H

#include "Engine.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace sluice::runtime::detail {

class FileWindow {
public:
  /// One record (or error, or the end) read from a shard.
  struct Entry {
    ReadResult result = ReadResult::end();
    Record rec;
    int64_t bytes = 0; ///< recordBytes(rec), held in the read-ahead account
  };
  /// Everything one shard gave, in order; the last entry is its end.
  struct Shard {
    size_t shard = 0;
    std::vector<Entry> entries;
    int64_t bytesRead = 0; ///< the reader's bytesRead() once it ended
    /// Whether a read of it ended in a refusal of the memory budget
    /// (readCounted's reason): the stage reads it again alone.
    bool refusedByBudget() const;
  };

  /// `reading` counts what a read allocates, `held` what the window holds;
  /// `cpuNs` and `poolCpuNs` (the stage's counters) get the tasks' CPU time.
  /// At most `readers` tasks read at once.
  FileWindow(Shared &shared, AccountAllocationLimit &reading,
             MemoryAccount *held, StageCounters *counters, size_t width,
             size_t readers);
  ~FileWindow() { clear(); }
  FileWindow(const FileWindow &) = delete;
  FileWindow &operator=(const FileWindow &) = delete;

  /// How many shards the window reads at once.
  size_t width() const { return width_; }
  /// Shards named and not yet taken.
  size_t size() const { return slots_.size(); }
  /// Whether the stage should name more: the window is half empty.
  bool wantsMore() const { return slots_.size() <= width_ / 2; }
  /// Whether one more shard may be named: always when none is; else while
  /// budget.memory has room for one more of the largest file read so far
  /// beside every shard named (so a tight budget reads fewer files at once
  /// instead of refusing reads that one at a time would fit).
  bool roomForMore() const;
  /// Starts reading `shard` on the arena; taken after every shard named
  /// before it.
  void push(size_t shard);
  /// Waits for the oldest shard named and hands it over; `waitedNs` gets
  /// the time spent waiting for it. Only when size() > 0.
  Shard pop(int64_t *waitedNs = nullptr);
  /// Waits for the reads under way and drops every shard held (their
  /// records released from the account); returns the bytes the dropped
  /// shards' readers had read.
  int64_t clear();

  /// The window width for `threads` threads: four shards per thread, so a
  /// worker finishing a file finds the next one named (at least 16, at
  /// most 64).
  static size_t widthFor(int64_t threads);
  /// Reader tasks for `threads` threads: half of them (reading a file costs
  /// a fraction of decoding it), at least one.
  static size_t readersFor(int64_t threads);

private:
  struct Slot {
    Shard shard;
    bool done = false;
  };
  /// A reader task: reads named shards until none is left unclaimed.
  void readLoop();
  void read(Slot &s);

  Shared &shared_;
  AccountAllocationLimit &reading_;
  MemoryAccount *held_;
  StageCounters *c_;
  size_t width_;
  std::mutex mu_;
  std::condition_variable cv_;
  /// Oldest first. Slots are heap-held so a task's reference stays valid
  /// while the deque grows and shrinks.
  std::deque<std::unique_ptr<Slot>> slots_;
  /// Named shards no reader has taken yet, oldest first.
  std::deque<Slot *> unclaimed_;
  size_t readers_;
  /// Reader tasks enqueued or running.
  size_t tasks_ = 0;
  /// While the stage waits in pop(): how many shards at the head must be
  /// read before it is woken (0: nobody waits).
  size_t wantHead_ = 0;
  /// Shards read at the head of the window (under mu_).
  size_t doneAtHead() const;
  /// Bytes of the largest record read so far.
  std::atomic<int64_t> largest_{0};
};

} // namespace sluice::runtime::detail

#endif // SLUICE_RUNTIME_LIB_FILEWINDOW_H
