//===- Sink.h - Where `sluice run` puts a pipeline's outputs ----*- C++ -*-===//
//
//   null     counts outputs (benchmarking).
//   npy:DIR  writes output i (a batch, or a record when nothing batches) as
//            one file per field:
//              numeric fields  DIR/<i:06d>.<field>.npy  (descr and shape of
//                              the tensor; readable with numpy.load)
//              string fields   DIR/<i:06d>.<field>.npy  as numpy unicode
//                              ('<U<n>', UTF-32; invalid UTF-8 becomes
//                              U+FFFD), so no pickle is needed
//              bytes fields    DIR/<i:06d>.<field>.bin, the elements
//                              concatenated, plus
//                              DIR/<i:06d>.<field>.lengths.npy (int64, the
//                              field's shape) giving each element's length
//            and DIR/index.json: the pipeline, its fields (name, dtype,
//            declared shape with -1 for dynamic dims, storage) and every
//            output (number, epoch, per field: file and shape).
//
// The npy sink never presents an incomplete run as complete:
//   - every file is written under a temporary name (NAME.tmp) and renamed
//     into place once written, and an output is listed only after all its
//     files are in place;
//   - index.json is written last (also through a temporary name) and says
//     how the run ended: "complete": true and "status": "complete", or
//     "complete": false, "status": "failed" | "interrupted" | "stopped"
//     (--stop-after) and a "reason",
//     with "count" the number of complete outputs listed. A folder without
//     index.json (the process was killed) is not a complete run either;
//   - DIR and its missing parents are created; a DIR that is not empty is
//     refused unless SinkOptions::overwrite (`--overwrite`), which first
//     clears it, and only if everything in it looks like a sluice npy
//     output (index.json, NNNNNN.field.npy/.bin/.lengths.npy, *.tmp).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_SINK_H
#define SLUICE_RUNTIME_SINK_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/Pipeline.h"

#include <memory>
#include <string>

namespace sluice::runtime {

/// How a run ended, for Sink::close().
struct RunOutcome {
  enum class Status { Complete, Failed, Interrupted, Stopped };
  Status status = Status::Complete;
  /// Why it did not complete (the error, "interrupted by SIGINT").
  std::string reason;
  int64_t epochsDone = 0;
  /// "complete", "failed", "interrupted", "stopped" (RunOptions::stopAfter).
  const char *statusName() const;
};

class Sink {
public:
  virtual ~Sink();
  /// Called once before the first output. An error here is about the
  /// destination (`sluice run` exits 2: fix the --sink flag).
  virtual Status open(const std::string &pipeline, const RecordType &type) = 0;
  /// Writes one output; all of it or (on an error) none of it.
  virtual Status write(const Batch &batch) = 0;
  /// Called once after the last output, also after an error or an
  /// interruption: records how the run ended and removes partial files.
  virtual Status close(const RunOutcome &outcome) = 0;
  /// "wrote 235 outputs to out/ (12 MiB)", or "" for the null sink.
  virtual std::string summary() const = 0;
};

struct SinkOptions {
  /// Clear a non-empty npy output folder (if it holds only sluice npy
  /// output) instead of refusing it (`--overwrite`).
  bool overwrite = false;
};

/// Parses a sink spec ("null", "npy:DIR"); errors say what is accepted.
Expected<std::unique_ptr<Sink>> makeSink(const std::string &spec,
                                         const SinkOptions &opts = {});

/// Writes one numeric tensor as a .npy file (format version 1.0).
Status writeNpy(const std::string &path, const Tensor &t);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_SINK_H
