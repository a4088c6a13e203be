//===- SourceImpl.h - Shared machinery of the source readers ----*- C++ -*-===//
//
// Internal to runtime/lib/sources: buffered (optionally gzip) file input,
// glob expansion, parameter access and the factory of every source kind.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_LIB_SOURCES_SOURCEIMPL_H
#define SLUICE_RUNTIME_LIB_SOURCES_SOURCEIMPL_H

#include "Remote.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/Switches.h"
#include "sluice/runtime/Source.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::runtime::detail {

/// Sequential reads from a file through a growable buffer. Names ending in
/// ".gz" are gzip-decompressed (offsets then count decompressed bytes).
/// The buffers are sized to the file (at most the block size; a .gz file's
/// trailer tells its size) and, opened in a source stage's allocation
/// scope, counted in budget.memory while the file is open; open() fails
/// (error() says why) when the budget cannot hold them.
/// Readers parse straight out of the buffer: data()/avail() is the window of
/// bytes read but not yet consumed.
class BufferedInput {
public:
  explicit BufferedInput(size_t blockSize = size_t(1) << 20);
  ~BufferedInput();
  BufferedInput(const BufferedInput &) = delete;
  BufferedInput &operator=(const BufferedInput &) = delete;

  /// Opens `path`; false with error() set on failure. A remote URL
  /// (s3://, http(s)://) is read with `remote`'s settings in ranged chunks,
  /// several in flight (RemoteStream), and a remote .gz is inflated as it
  /// arrives (zlib; concatenated members as gzip(1) reads them).
  /// `ahead`: the remote object's first chunk asked for before (a
  /// source's prefetch()), used when it fits.
  bool open(const std::string &path, bool decompress = true,
            const std::shared_ptr<const RemoteConfig> &remote = nullptr,
            FirstChunk ahead = {});
  bool isOpen() const {
    return fd_ >= 0 || gz_ != nullptr || remote_ != nullptr;
  }
  /// What went wrong ("cannot open: No such file or directory"); empty if
  /// nothing did. A read error ends the stream (eof() becomes true).
  const std::string &error() const { return error_; }
  bool failed() const { return !error_.empty(); }

  const char *data() const { return (view_ ? view_ : buf_.get()) + pos_; }
  size_t avail() const { return lim_ - pos_; }
  /// True once the end of the stream (or a read error) has been reached:
  /// the bytes in the window are all that is left.
  bool eof() const { return eof_; }
  /// Reads more bytes into the window (compacting or growing the buffer so
  /// at least one block fits). False when nothing more could be read.
  bool fill();
  /// Makes at least n bytes available unless the stream ends first.
  bool ensure(size_t n);
  void consume(size_t n) { pos_ += n; }
  /// Stream offset of data().
  int64_t offset() const { return base_ + static_cast<int64_t>(pos_); }
  /// Copies up to n bytes to dst; returns how many were copied (< n only at
  /// the end of the stream or on error).
  size_t read(void *dst, size_t n);
  /// Skips up to n bytes; returns how many were skipped.
  size_t skip(size_t n);
  /// Bytes taken from storage (compressed bytes for .gz).
  uint64_t bytesRead() const;
  /// The block size the buffer was opened with (smaller than asked for a
  /// small file or a budget that could not give more): readers that ask
  /// for whole blocks (ensure) ask for at most this.
  size_t blockSize() const { return blockSize_; }
  /// Size of the file on disk when it is not decompressed.
  std::optional<uint64_t> rawSize() const { return rawSize_; }

private:
  long rawRead(char *dst, size_t n);
  /// Makes the buffer hold at least newCap bytes (keeping its first lim_):
  /// false (with error_) only when `must` and the budget refuses.
  bool growBuffer(size_t newCap, bool must);
  /// The window over a remote chunk (viewChunks_): true with the next
  /// chunk's bytes as the window, false at the end or on error (eof_).
  bool fillView();
  bool openRemote(const std::string &url, bool decompress,
                  const std::shared_ptr<const RemoteConfig> &remote,
                  FirstChunk &ahead);

  int fd_ = -1;
  void *gz_ = nullptr; // gzFile
  std::unique_ptr<RemoteStream> remote_;
  /// Inflates a remote .gz object (Input.cpp).
  struct RemoteGunzip;
  struct GunzipDeleter {
    void operator()(RemoteGunzip *g) const;
  };
  std::unique_ptr<RemoteGunzip, GunzipDeleter> rgz_;
  long gunzipRead(char *dst, size_t n);
  size_t blockSize_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0, pos_ = 0, lim_ = 0;
  /// A plain remote object's window is the chunk the client received
  /// (RemoteStream::borrow), not a copy of it in buf_: view_ points into
  /// it while the window is there, null while the window is in buf_ (a
  /// record that straddles two chunks is put together there). Off:
  /// SLUICE_NO_REMOTE_CHUNK_VIEW=1 (every byte copied into buf_ first).
  bool viewChunks_ = false;
  const char *view_ = nullptr;
  int64_t base_ = 0; // stream offset of buf_[0]
  bool eof_ = false;
  uint64_t rawBytes_ = 0;
  std::optional<uint64_t> rawSize_;
  std::string path_, error_;
  /// The buffer and zlib's state, counted in the budget (Allocation.h).
  HeldAllocation held_;
  int64_t zlibBytes_ = 0;
};

/// Consumes a UTF-8 byte order mark at the current position, if any.
inline void skipByteOrderMark(BufferedInput &in) {
  in.ensure(3);
  if (in.avail() >= 3 && std::memcmp(in.data(), "\xEF\xBB\xBF", 3) == 0)
    in.consume(3);
}

/// Reads a whole file as raw bytes (no decompression). Its size is reserved
/// first in the thread's allocation scope (reserveScratch): when the budget
/// cannot hold it, false with `*refused` (if given) set and nothing read.
/// A remote URL is fetched with `remote`'s settings (or taken from
/// `pending`, a fetch of it started ahead).
bool readWholeFile(const std::string &path, std::string &out,
                   std::string &error, bool *refused = nullptr,
                   const std::shared_ptr<const RemoteConfig> &remote = nullptr,
                   std::shared_ptr<PendingFetch> pending = nullptr);

/// Bytes of a dense array of numeric `elem` with the given dims.
uint64_t arrayBytes(ElemType elem, const std::vector<int64_t> &dims);
/// "truncated: the header promises N bytes of data, the file has M" when the
/// file `in` reads is too short for a header of `dataOffset` bytes and
/// `dataBytes` of data; "" when it is long enough or its size is unknown
/// before reading (.gz: the reader then reports the end of the data).
std::string dataSizeProblem(const BufferedInput &in, uint64_t dataOffset,
                            uint64_t dataBytes);

/// `path` if absolute, else baseDir/path.
std::string joinPath(const std::string &baseDir, const std::string &path);
/// True if `path` ends with `suffix`.
inline bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
inline bool isGzipPath(std::string_view path) { return endsWith(path, ".gz"); }

/// Expands the glob(s) of parameter `name` (a string or a list of strings)
/// relative to baseDir into the sorted, de-duplicated regular files they
/// match. Errors name the kind, the parameter and the pattern.
/// Patterns that are URLs: s3:// globs are listed (ListObjectsV2), brace
/// lists expanded, and `remote` (when given) is set to the source's
/// RemoteConfig if any pattern is remote; file:// names are local paths.
Expected<std::vector<std::string>>
expandFiles(const std::string &kind, const Value &params,
            const std::string &name, const std::string &baseDir,
            std::shared_ptr<const RemoteConfig> *remote = nullptr);

/// A string or a list of strings as a list.
std::vector<std::string> stringList(const Value &v);
std::string stringParam(const Value &params, std::string_view name,
                        const std::string &fallback);
int64_t intParam(const Value &params, std::string_view name, int64_t fallback);
bool boolParam(const Value &params, std::string_view name, bool fallback);

/// "u8", "f32", ... or an error naming the kind and parameter.
Expected<ElemType> elemTypeParam(const std::string &kind, const Value &v,
                                 const std::string &what);

/// Shared bookkeeping of readers: where fields go in the output record and
/// the position in the shard.
class ReaderBase : public ShardReader {
public:
  ReaderBase(std::string file, const std::vector<int> &slots)
      : file_(std::move(file)), slots_(slots) {}

protected:
  /// Prepares `out` to receive slots_.size() fields.
  void startRecord(Record &out) const {
    out.fields.resize(slots_.size());
    out.index = static_cast<uint64_t>(record_);
  }
  /// Stores the reader's natural field k.
  void put(Record &out, size_t k, Tensor t) const {
    out.fields[static_cast<size_t>(slots_[k])] = std::move(t);
  }
  /// An error at the current record of this file.
  ReadResult fail(std::string reason, std::string detail, int64_t offset,
                  bool recoverable, std::string field = "", int64_t line = -1) {
    DataError e;
    e.where.file = file_;
    e.where.record = record_;
    e.where.line = line;
    e.where.offset = offset;
    e.where.field = std::move(field);
    e.reason = std::move(reason);
    e.detail = std::move(detail);
    e.recoverable = recoverable;
    if (!recoverable)
      done_ = true;
    return ReadResult::error(std::move(e));
  }
  /// A non-recoverable I/O error of `in`.
  ReadResult ioError(const BufferedInput &in) {
    return fail("io: read error", in.error(), in.offset(), false);
  }

  std::string file_;
  const std::vector<int> &slots_;
  int64_t record_ = 0; ///< index of the record being read
  bool done_ = false;  ///< no more records (end reached or fatal error)
};

/// Why a text value could not be converted.
enum class ParseError : uint8_t { None, Empty, Syntax, Range };
/// Parses an integer/float/bool written as text (surrounding whitespace and
/// a leading '+' allowed) into element `i` of a numeric buffer of type
/// `elem`. An empty text is NaN for float types and Empty otherwise.
ParseError parseNumber(std::string_view text, ElemType elem, void *dst,
                       size_t i);
/// "'abc' is not a valid i64", "'300' does not fit u8", ...
std::string describeParseError(ParseError err, std::string_view text,
                               ElemType elem);
/// A short category: "empty value", "bad number", "bad bool", ...
const char *parseErrorReason(ParseError err, ElemType elem);

// Factories: each returns a source with kind_ and type_ (natural order) set.
using Factory = Expected<std::unique_ptr<Source>> (*)(const std::string &kind,
                                                      const Value &params,
                                                      const std::string &base);
Expected<std::unique_ptr<Source>> createImageFolder(const std::string &kind,
                                                    const Value &params,
                                                    const std::string &base);
Expected<std::unique_ptr<Source>> createFiles(const std::string &kind,
                                              const Value &params,
                                              const std::string &base);
Expected<std::unique_ptr<Source>> createCsv(const std::string &kind,
                                            const Value &params,
                                            const std::string &base);
Expected<std::unique_ptr<Source>> createTFRecord(const std::string &kind,
                                                 const Value &params,
                                                 const std::string &base);
Expected<std::unique_ptr<Source>> createIdx(const std::string &kind,
                                            const Value &params,
                                            const std::string &base);
Expected<std::unique_ptr<Source>> createNpy(const std::string &kind,
                                            const Value &params,
                                            const std::string &base);
Expected<std::unique_ptr<Source>> createWebDataset(const std::string &kind,
                                                   const Value &params,
                                                   const std::string &base);
Expected<std::unique_ptr<Source>> createTextLines(const std::string &kind,
                                                  const Value &params,
                                                  const std::string &base);

/// Gives factories access to the protected members they must set.
class SourceBase : public Source {
public:
  void setNaturalType(std::string kind, RecordType type) {
    kind_ = std::move(kind);
    type_ = std::move(type);
  }
  const std::vector<int> &slots() const { return slots_; }
  /// How this source reads remote URLs (set by factories whose file
  /// parameters name any).
  std::shared_ptr<const RemoteConfig> remote() const {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    return remote_;
  }
  void setRemote(std::shared_ptr<const RemoteConfig> r) {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    configured_ = r ? r->concurrency : 0;
    remote_ = std::move(r);
  }
  /// Where the objects fetched ahead (prefetch()) are reserved until a
  /// reader takes them: the engine's "<source> objects ahead" account, set
  /// as a pipeline starts and cleared (null) as it ends, when what is still
  /// ahead is dropped and its reservation released. A fetch the budget
  /// cannot reserve is not started ahead (open() fetches it then).
  virtual void setPrefetchLimit(AllocationLimit *limit) const {
    ahead_.setLimit(limit);
  }
  /// A source that reads each shard as one stream (all but the per-file
  /// ones, which override these) asks for the first chunk of the next
  /// shards' objects while it reads one, so that a shard's first round trip
  /// does not stall the reader: about half as many shards ahead as the
  /// requests in flight of a stream (at least one). Off with
  /// SLUICE_NO_SHARD_PREFETCH=1 (each shard's first chunk is then asked for
  /// as it is opened).
  size_t prefetchDepth() const override {
    static const bool off = switchedOff("SLUICE_NO_SHARD_PREFETCH");
    std::shared_ptr<const RemoteConfig> r = remote();
    return r && !off ? static_cast<size_t>(std::max(1, r->concurrency / 2)) : 0;
  }
  void prefetch(size_t shard, bool nextPass) const override {
    std::shared_ptr<const RemoteConfig> r = remote();
    if (!r || shard >= numShards())
      return;
    std::string url = shardName(shard);
    if (isRemoteUrl(url))
      ahead_.startStream(r, shard, url, prefetchDepth(), nextPass);
  }
  /// The first chunk of `shard`'s stream asked for ahead (fetch null:
  /// none), for the reader that opens it.
  FirstChunk takeAhead(size_t shard) const { return ahead_.take(shard); }
  int64_t requestsInFlight() const override {
    std::shared_ptr<const RemoteConfig> r = remote();
    return r ? r->concurrency : 0;
  }
  /// 0 for a source of one record per file (image_folder, files): it
  /// fetches whole objects and reads no chunks, whatever its config says
  /// (the tuner would model it as a stream's window: 4 in flight at 20
  /// ms, 0.14x local, where Little's law per record gives 46-70).
  int64_t remoteChunkBytes() const override {
    std::shared_ptr<const RemoteConfig> r = remote();
    return r && !oneRecordPerShard() ? static_cast<int64_t>(r->chunkBytes) : 0;
  }
  bool requestsInFlightPinned() const override {
    std::shared_ptr<const RemoteConfig> r = remote();
    return r && r->concurrencyPinned;
  }
  void setRequestsInFlight(int64_t n) const override {
    std::lock_guard<std::mutex> lock(remoteMutex_);
    if (!remote_ || remote_->concurrencyPinned)
      return;
    if (n < 1)
      n = configured_; // no schedule: the source's own default
    if (n == remote_->concurrency)
      return;
    // Readers already open keep the settings they took.
    auto changed = std::make_shared<RemoteConfig>(*remote_);
    changed->concurrency = static_cast<int>(std::min<int64_t>(n, 1024));
    remote_ = std::move(changed);
  }

protected:
  /// What was fetched ahead of the readers (prefetch()).
  mutable FetchAhead ahead_;

private:
  mutable std::mutex remoteMutex_;
  mutable std::shared_ptr<const RemoteConfig> remote_;
  int configured_ = 0; ///< remote_'s concurrency as made (setRemote)
};

} // namespace sluice::runtime::detail

#endif // SLUICE_RUNTIME_LIB_SOURCES_SOURCEIMPL_H
