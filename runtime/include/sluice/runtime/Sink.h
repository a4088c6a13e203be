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
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_SINK_H
#define SLUICE_RUNTIME_SINK_H

#include "sluice/ops/Status.h"
#include "sluice/runtime/Pipeline.h"

#include <memory>
#include <string>

namespace sluice::runtime {

class Sink {
public:
  virtual ~Sink();
  /// Called once before the first output.
  virtual Status open(const std::string &pipeline, const RecordType &type) = 0;
  virtual Status write(const Batch &batch) = 0;
  /// Called once after the last output (also after an error).
  virtual Status close() = 0;
  /// "wrote 235 outputs to out/ (12 MiB)", or "" for the null sink.
  virtual std::string summary() const = 0;
};

/// Parses a sink spec ("null", "npy:DIR"); errors say what is accepted.
Expected<std::unique_ptr<Sink>> makeSink(const std::string &spec);

/// Writes one numeric tensor as a .npy file (format version 1.0).
Status writeNpy(const std::string &path, const Tensor &t);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_SINK_H
