//===- Source.h - Readers that turn files into records ----------*- C++ -*-===//
//
// A Source is the first stage of every pipeline: it lists its units of work
// (shards: files, in a sorted, deterministic order) when it is created, and
// opens a ShardReader per shard that yields records one at a time. The stage
// graph decides which shards to read, in which order and on which threads
// (shard, interleave, parallel reads); readers only read.
//
// Bad data never crashes a reader and never throws: next() returns a
// DataError with the exact location (file, line, record, byte offset), a
// short reason category for counting ("csv: too few columns") and whether
// reading can continue after it. The stage graph applies the spec's
// `on_error` policy (fail: print and exit 1; skip: count by reason).
//
// Kinds and their records (field order follows the RecordType given to
// create(); the list below is the reader's natural order):
//   image_folder {root, extensions}    path: string, data: bytes, label: i64
//   files        {glob}                path: string, data: bytes
//   csv, tsv     {files, delimiter, header, columns}  one field per column
//   tfrecord     {files, features}     one field per feature
//   idx          {images, labels}      image: u8[rows,cols] (type and shape
//                                      from the header), label: i64
//   npy          {files, field}        <field>: <dtype>[shape[1:]]
//   webdataset   {shards, fields}      key: string, one field per entry
//   text_lines   {files}               line: string
// Each kind's file (e.g. CsvSource.cpp) documents its format details.
// File patterns (`files`, `glob`, `shards`: a string or a list of strings)
// are globs relative to baseDir (the spec's directory); the union of their
// matches is sorted bytewise. A pattern that matches nothing is an error.
// Files whose name ends in ".gz" are decompressed on the fly (except for
// image_folder and files, which return raw bytes).
//
// Thread safety: a Source is immutable after create(); open() may be called
// from any number of threads at once. A ShardReader is used by one thread at
// a time; a reader given a ReadAhead may run its own tasks on other threads
// behind the scenes (csv and tsv parse blocks of a file in parallel), with
// records, errors and positions exactly as if it read alone.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_SOURCE_H
#define SLUICE_RUNTIME_SOURCE_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Tensor.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::runtime {

class MemoryAccount;

/// How the pipeline reacts to a bad record (the spec's `on_error`).
enum class OnError { Fail, Skip };

/// Parses "fail" / "skip"; nullopt otherwise.
std::optional<OnError> parseOnError(std::string_view text);

/// Where a problem was found. Unknown parts are -1 / empty.
struct DataLocation {
  std::string file;
  /// 0-based index of the record within the file (for CSV: data rows,
  /// without the header; for webdataset: samples).
  int64_t record = -1;
  /// 1-based line for text formats (csv, text_lines).
  int64_t line = -1;
  /// Byte offset in the file (in the decompressed stream for .gz files).
  int64_t offset = -1;
  /// The column, feature or member the problem is in, if any.
  std::string field;

  /// "data/x.csv:17: record 15, byte 1234, 'label'".
  std::string str() const;
};

/// A problem with the data: where, a short category, and the details.
struct DataError {
  DataLocation where;
  /// A short, fixed category used to count skipped records by reason, e.g.
  /// "csv: too few columns", "tfrecord: data CRC mismatch".
  std::string reason;
  /// The specifics: "expected 40 columns, found 39".
  std::string detail;
  /// True when the reader can go on with the next record after this one.
  /// False when the rest of the file cannot be read (a TFRecord length with
  /// a bad CRC, a truncated file, an I/O error): next() then returns End.
  bool recoverable = true;

  /// "data/x.csv:17: record 15, byte 1234: csv: too few columns: expected
  /// 40 columns, found 39", plus a note when the rest of the file is lost.
  std::string message() const;
};

/// DataError::reason of a record refused by budget.memory (its buffers
/// would exceed the budget), not by a problem of its bytes: the file window
/// reads such a file again alone, when the budget has room.
inline constexpr const char *kRecordDoesNotFit = "memory: record does not fit";

/// The outcome of ShardReader::next().
class ReadResult {
public:
  enum class Kind : uint8_t { Record, End, Error };

  static ReadResult record() { return ReadResult(Kind::Record); }
  static ReadResult end() { return ReadResult(Kind::End); }
  static ReadResult error(DataError e) {
    ReadResult r(Kind::Error);
    r.error_ = std::move(e);
    return r;
  }

  Kind kind() const { return kind_; }
  bool isRecord() const { return kind_ == Kind::Record; }
  bool isEnd() const { return kind_ == Kind::End; }
  bool isError() const { return kind_ == Kind::Error; }
  /// The problem, when isError().
  const DataError &error() const { return error_; }

private:
  explicit ReadResult(Kind k) : kind_(k) {}
  Kind kind_;
  DataError error_;
};

/// Lets a reader work ahead of its consumer on the pipeline's threads.
struct ReadAhead {
  /// Runs a task on another thread (the pipeline's oneTBB arena).
  std::function<void(std::function<void()>)> spawn;
  /// Counts the bytes the reader holds ahead (null: not counted). At least
  /// one unit of work is always let through, so a tight budget slows the
  /// reader down instead of stopping it.
  MemoryAccount *memory = nullptr;
  /// Input bytes per unit of work (0: the reader's default). Tests use
  /// tiny blocks to put records across block boundaries.
  size_t blockBytes = 0;
  /// Units of work in flight at most (read, being parsed or parsed).
  size_t maxInFlight = 4;
};

/// A run of consecutive good records of one shard held as columns: field f
/// of the run's i-th record is row i of columns[f] (shape [rows, ...the
/// field's shape]), usually views of the reader's own buffers.
struct RecordRun {
  std::vector<Tensor> columns;
  int64_t rows = 0;
  /// Position in the shard of the first record (DataLocation::record).
  int64_t first = 0;
};

/// Reads the records of one shard, in order.
class ShardReader {
public:
  virtual ~ShardReader();
  /// Allows the reader to parse ahead with `ra` (call before the first
  /// next()). Outputs, errors and their locations do not change. Readers
  /// that cannot use it ignore it.
  virtual void setReadAhead(ReadAhead ra) { (void)ra; }
  /// Reads the next record into `out` (fields in the Source's recordType()
  /// order; out.index = the record's 0-based position within the shard,
  /// counting bad records too, so it equals DataLocation::record). On an
  /// Error, `out` is unspecified; if the error is recoverable the following
  /// call reads the next record, otherwise it returns End.
  virtual ReadResult next(Record &out) = 0;
  /// Reads up to `max` records as one run when the next ones are good
  /// records the reader already holds as columns (a parsed CSV/TSV block),
  /// and returns how many; 0 when it cannot now (the next record is an
  /// error, in another block, or not read yet): next() then reads it. The
  /// records are the ones next() would have read one by one.
  virtual int64_t nextRun(RecordRun &run, int64_t max) {
    (void)run;
    (void)max;
    return 0;
  }
  /// Bytes read from storage so far (compressed bytes for .gz files).
  virtual uint64_t bytesRead() const = 0;
};

/// A source of records: a sorted list of shards and a reader for each.
class Source {
public:
  virtual ~Source();

  /// Creates the source `kind` (a registry name: "csv", "tfrecord", ...).
  /// `params` is the validated, defaulted parameter map; `type` is the
  /// record type the registry's type rule computed (empty: use the reader's
  /// own); relative paths resolve against `baseDir`. Lists and checks the
  /// files now (patterns that match nothing, bad idx/npy headers) so that
  /// problems show up before the pipeline starts.
  static Expected<std::unique_ptr<Source>> create(const std::string &kind,
                                                  const Value &params,
                                                  const RecordType &type,
                                                  const std::string &baseDir);
  /// How many calls of create() this process has made (each lists its
  /// files again), for tests of RunOptions::source.
  static int64_t createCalls();

  /// The kinds create() knows, sorted.
  static const std::vector<std::string> &kinds();

  const std::string &kind() const { return kind_; }
  /// The type of the records the readers produce.
  const RecordType &recordType() const { return type_; }
  /// The `on_error` parameter (Fail when absent).
  OnError onError() const { return onError_; }

  /// Number of shards: one per file (image_folder and files: one per
  /// image/file, so shard(i of N) balances classes).
  virtual size_t numShards() const = 0;
  /// The path of shard `i`, for messages and reports.
  virtual std::string shardName(size_t i) const = 0;
  /// Total records over all shards, when cheap to know (file counts, idx
  /// and npy headers); nullopt otherwise.
  virtual std::optional<int64_t> sizeHint() const;
  /// Opens shard `i` (< numShards()). Never fails: a file that cannot be
  /// opened or read is reported as a DataError by the reader's first
  /// next(), so the on_error policy applies to it like to any bad record.
  /// The reader refers to this Source, which must outlive it.
  virtual std::unique_ptr<ShardReader> open(size_t shard) const = 0;
  /// Whether its readers hand out runs of records as columns
  /// (ShardReader::nextRun), so consumers may ask for them.
  virtual bool readsRuns() const { return false; }
  /// Whether every shard is one file holding one record (image_folder,
  /// files): positional reading opens the shard of a position directly,
  /// and the source stage may read the next shards on the pool's workers.
  virtual bool oneRecordPerShard() const { return false; }
  /// How many shards ahead of the one being opened the stage should name
  /// with prefetch(): a per-file source over remote objects keeps that many
  /// requests in flight; 0 (local files) asks for nothing.
  virtual size_t prefetchDepth() const { return 0; }
  /// Says that shard `i` will be opened soon, so its object can be fetched
  /// meanwhile (thread-safe; a hint: open() works without it). `nextPass`:
  /// it is one of the first shards of the pass after the current one, named
  /// before this pass ends so that an epoch boundary costs no round trip
  /// (counted apart in the stats).
  virtual void prefetch(size_t shard, bool nextPass = false) const {
    (void)shard;
    (void)nextPass;
  }
  /// Requests a source over remote objects keeps in flight (per stream of
  /// ranged chunks, or whole objects ahead of a per-file source); 0 for
  /// local files.
  virtual int64_t requestsInFlight() const { return 0; }
  /// Whether the spec set that number (`remote.concurrency`): a schedule
  /// does not change it then.
  virtual bool requestsInFlightPinned() const { return false; }
  /// Sets the requests in flight (a schedule's `parallelism` on the source
  /// step: the tuner's Little's-law choice). Ignored for local files and
  /// when pinned. Readers opened afterwards use it.
  virtual void setRequestsInFlight(int64_t n) const { (void)n; }
  /// The bytes of the ranged requests a sequential source over remote
  /// objects reads a shard in (its window of requestsInFlight() chunks);
  /// 0 for local files and for per-file sources (whole objects).
  virtual int64_t remoteChunkBytes() const { return 0; }

  /// What create() noticed that is not an error but should be said: empty
  /// input files ("data/b.csv is empty (0 bytes): no records").
  const std::vector<std::string> &warnings() const { return warnings_; }

  /// The listing create() made of s3:// prefixes and patterns (zeros when
  /// it listed nothing): ListObjectsV2 requests, the keys they returned,
  /// and the seconds they took. Counted process-wide while create() ran:
  /// sources made at the same time count into each other's.
  struct Listing {
    int64_t requests = 0;
    int64_t keys = 0;
    double seconds = 0;
  };
  const Listing &listing() const { return listing_; }

protected:
  Source() = default;
  std::string kind_;
  std::vector<std::string> warnings_;
  /// Set by the kind's factory to the reader's natural type; create() then
  /// replaces it with the type it was given and fills slots_.
  RecordType type_;
  /// Position in type_ of each field of the reader's natural order.
  std::vector<int> slots_;
  OnError onError_ = OnError::Fail;
  Listing listing_;
};

/// CRC-32C (Castagnoli), as used by TFRecord framing. Continues from
/// `crc` (0 to start). Uses SSE4.2 when the CPU has it, else slicing-by-8.
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t maskedCrc32c(const void *data, size_t size);

} // namespace sluice::runtime

#endif // SLUICE_RUNTIME_SOURCE_H
