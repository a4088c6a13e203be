//===- CacheStage.cpp - Materializing a stream for later epochs -----------===//
//
// The first complete pass records every record that goes by; later passes
// (epochs, or repetitions under `repeat`) replay the recording instead of
// running the stages above. A pass that stops early leaves an incomplete
// recording, which is thrown away so the next pass records again.
//
// A replayed pass stands for the source records its recording pass went
// through (RunStats::records(), so records/s means the same with or without
// a cache): each record it serves credits its share of them, and the end of
// the pass the rest (a recording of 0 records, after a filter that dropped
// everything, still stands for the records read to make it).
//
// `to: memory` keeps the records (sharing their buffers) and counts their
// bytes against budget.memory; `to: disk` writes them to a file in a simple
// length-prefixed format, for data sets larger than RAM:
//   file   = "SLCACHE1" record*
//   record = u32 numFields, u64 index, i64 shard, i64 recordInShard, field*
//   field  = u8 elemType, u8 rank, i64 dims[rank], payload
//   payload (numeric) = the row-major bytes
//   payload (bytes/string) = per element: u64 length, bytes
//
//===----------------------------------------------------------------------===//
#include "Engine.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::runtime::detail {

namespace {

void inc(std::atomic<int64_t> &a, int64_t n = 1) {
  a.fetch_add(n, std::memory_order_relaxed);
}

constexpr char kMagic[8] = {'S', 'L', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr size_t kMaxRank = 32;

class CacheStage : public Stage {
public:
  CacheStage(Shared &s, std::unique_ptr<Stage> up, StageCounters *c,
             std::string to, std::string dir, RecordType type,
             std::string where)
      : Stage(s, std::move(up), c), disk_(to == "disk"), dir_(std::move(dir)),
        type_(std::move(type)), where_(std::move(where)) {
    if (!disk_)
      account_ = s.memory->account(c->name());
  }

  ~CacheStage() override {
    closeFile();
    if (!path_.empty())
      ::unlink(path_.c_str());
    if (account_)
      account_->release(bytes_);
  }

protected:
  Status onStart(uint64_t epoch) override {
    pos_ = 0;
    served_ = credited_ = 0;
    if (complete_) {
      replaying_ = true;
      if (disk_)
        return openForRead();
      return Status::ok(); // the stages above are not run at all
    }
    replaying_ = false;
    discardRecording();
    recordStart_ = shared_.recordsSoFar();
    recorded_ = 0;
    if (disk_) {
      Status s = openForWrite();
      if (!s)
        return s;
    }
    return Stage::onStart(epoch);
  }

  void onStop() override {
    if (!replaying_ && !complete_)
      discardRecording();
    closeFile();
  }

  Expected<bool> produce(Item &out) override {
    if (replaying_)
      return replay(out);
    Expected<bool> r = pull(out);
    if (!r)
      return r;
    if (!*r) {
      complete_ = true;
      perPass_ = shared_.recordsSoFar() - recordStart_;
      if (disk_) {
        if (std::fflush(file_) != 0)
          return ioError("write");
        closeFile();
      }
      return false;
    }
    Status s = disk_ ? writeRecord(out) : keep(out);
    if (!s) {
      inc(c_->failed);
      return s;
    }
    inc(c_->emitted);
    ++recorded_;
    return true;
  }

private:
  /// Credits the replayed pass with the source records it stands for, up
  /// to `upTo` in total for this pass.
  void credit(int64_t upTo) {
    if (upTo <= credited_)
      return;
    int64_t n = upTo - credited_;
    credited_ = upTo;
    inc(c_->replayedSourceRecords, n);
    if (shared_.replayedSourceRecords)
      shared_.replayedSourceRecords->fetch_add(n, std::memory_order_relaxed);
  }
  /// One more record served by the replayed pass (false: the pass ended).
  void noteServed(bool more) {
    if (!more) {
      credit(perPass_);
      return;
    }
    ++served_;
    if (recorded_ > 0)
      credit(static_cast<int64_t>(static_cast<__int128>(perPass_) * served_ /
                                  recorded_));
  }

  /// Keeps the record (shared with the copy passed on, compacted first so
  /// a row of a larger block does not keep the block alive).
  Status keep(Item &item) {
    compactRecord(item.rec);
    int64_t b = recordBytes(item.rec);
    if (!account_->tryReserve(b))
      return Status::error(
          where_ + ": error: the memory cache of '" + c_->name() + "' holds " +
          std::to_string(items_.size()) + " records (" + formatBytes(bytes_) +
          ") and the next one does not fit in budget.memory " +
          formatBytes(shared_.memory->limit()) +
          " (buffers in use: " + shared_.memory->usageSummary() +
          "); cache to disk instead (`cache: disk`) or raise budget.memory");
    bytes_ += b;
    c_->notePeakBytes(bytes_);
    items_.push_back(item);
    return Status::ok();
  }

  Expected<bool> replay(Item &out) {
    if (disk_) {
      Expected<bool> r = readRecord(out);
      if (r && *r) {
        inc(c_->read);
        inc(c_->emitted);
        if (shared_.timing)
          c_->bytesIn.fetch_add(recordBytes(out.rec),
                                std::memory_order_relaxed);
      }
      if (r)
        noteServed(*r);
      return r;
    }
    if (pos_ >= items_.size()) {
      noteServed(false);
      return false;
    }
    out = items_[pos_++];
    inc(c_->read);
    inc(c_->emitted);
    noteServed(true);
    return true;
  }

  void discardRecording() {
    items_.clear();
    if (account_)
      account_->release(bytes_);
    bytes_ = 0;
    closeFile();
  }

  Status ioError(const char *what) {
    return Status::error(c_->name() + " (" + where_ + "): cannot " + what +
                         " the disk cache " + path_ + ": " +
                         std::strerror(errno));
  }

  Status openForWrite() {
    if (path_.empty()) {
      std::string tmpl = dir_ + "/sluice-cache-XXXXXX";
      std::vector<char> buf(tmpl.begin(), tmpl.end());
      buf.push_back('\0');
      int fd = ::mkstemp(buf.data());
      if (fd < 0)
        return Status::error(c_->name() + " (" + where_ +
                             "): cannot create a disk cache file in " + dir_ +
                             ": " + std::strerror(errno) +
                             "; set the cache's `path` to a writable "
                             "directory");
      ::close(fd);
      path_ = buf.data();
    }
    file_ = std::fopen(path_.c_str(), "wb");
    if (!file_)
      return ioError("create");
    std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
    if (std::fwrite(kMagic, 1, sizeof(kMagic), file_) != sizeof(kMagic))
      return ioError("write");
    return Status::ok();
  }

  Status openForRead() {
    closeFile();
    file_ = std::fopen(path_.c_str(), "rb");
    if (!file_)
      return ioError("open");
    std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
    char magic[sizeof(kMagic)];
    if (std::fread(magic, 1, sizeof(magic), file_) != sizeof(magic) ||
        std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
      return Status::error(c_->name() + ": the disk cache " + path_ +
                           " is damaged (bad header)");
    return Status::ok();
  }

  void closeFile() {
    if (file_)
      std::fclose(file_);
    file_ = nullptr;
  }

  template <typename T> bool put(const T &v) {
    return std::fwrite(&v, sizeof(T), 1, file_) == 1;
  }
  template <typename T> bool get(T &v) {
    return std::fread(&v, sizeof(T), 1, file_) == 1;
  }

  Status writeRecord(const Item &item) {
    bool ok = put(static_cast<uint32_t>(item.rec.fields.size())) &&
              put(static_cast<uint64_t>(item.rec.index)) &&
              put(static_cast<int64_t>(item.origin.shard)) &&
              put(static_cast<int64_t>(item.origin.record));
    for (const Tensor &t : item.rec.fields) {
      if (!ok)
        break;
      ok = put(static_cast<uint8_t>(t.elem())) &&
           put(static_cast<uint8_t>(t.rank()));
      for (int64_t d : t.shape())
        ok = ok && put(d);
      if (!ok)
        break;
      if (t.isNumeric()) {
        ok = t.nbytes() == 0 ||
             std::fwrite(t.raw(), 1, t.nbytes(), file_) == t.nbytes();
      } else {
        for (const std::string &s : t.stringValues()) {
          ok = put(static_cast<uint64_t>(s.size())) &&
               (s.empty() ||
                std::fwrite(s.data(), 1, s.size(), file_) == s.size());
          if (!ok)
            break;
        }
      }
    }
    if (!ok)
      return ioError("write");
    return Status::ok();
  }

  Expected<bool> readRecord(Item &out) {
    uint32_t n;
    if (!get(n)) {
      if (std::feof(file_))
        return false;
      return ioError("read");
    }
    auto damaged = [&](const std::string &what) {
      return Status::error(c_->name() + ": the disk cache " + path_ +
                           " is damaged (" + what + ")");
    };
    uint64_t index;
    int64_t shard, record;
    if (!get(index) || !get(shard) || !get(record))
      return damaged("truncated record header");
    out.rec.index = index;
    out.origin.shard = shard;
    out.origin.record = record;
    out.rec.fields.clear();
    if (n > 4096)
      return damaged("implausible field count");
    for (uint32_t f = 0; f < n; ++f) {
      uint8_t elem, rank;
      if (!get(elem) || !get(rank) || rank > kMaxRank ||
          elem > static_cast<uint8_t>(ElemType::BF16))
        return damaged("bad field header");
      std::vector<int64_t> shape(rank);
      int64_t count = 1;
      for (auto &d : shape) {
        if (!get(d) || d < 0)
          return damaged("bad shape");
        count *= d;
      }
      ElemType e = static_cast<ElemType>(elem);
      if (isNumeric(e)) {
        Tensor t = Tensor::empty(e, shape);
        if (t.nbytes() > 0 &&
            std::fread(t.mutableRaw(), 1, t.nbytes(), file_) != t.nbytes())
          return damaged("truncated data");
        out.rec.fields.push_back(std::move(t));
      } else {
        std::vector<std::string> values(static_cast<size_t>(count));
        for (auto &s : values) {
          uint64_t len;
          if (!get(len) || len > (uint64_t(1) << 40))
            return damaged("bad string length");
          s.resize(len);
          if (len > 0 && std::fread(&s[0], 1, len, file_) != len)
            return damaged("truncated string");
        }
        out.rec.fields.push_back(Tensor::strings(e, shape, std::move(values)));
      }
    }
    return true;
  }

  bool disk_;
  std::string dir_;
  RecordType type_;
  std::string where_;
  MemoryAccount *account_ = nullptr;
  bool complete_ = false;
  bool replaying_ = false;
  std::vector<Item> items_;
  size_t pos_ = 0;
  int64_t bytes_ = 0;
  /// RunStats::records() when the recording pass started; the source
  /// records it went through (perPass_) and the records it kept.
  int64_t recordStart_ = 0, perPass_ = 0, recorded_ = 0;
  /// This replayed pass: records served, source records credited.
  int64_t served_ = 0, credited_ = 0;
  std::string path_;
  std::FILE *file_ = nullptr;
};

} // namespace

std::unique_ptr<Stage> makeCacheStage(Shared &shared,
                                      std::unique_ptr<Stage> upstream,
                                      StageCounters *c, std::string to,
                                      std::string dir, RecordType type,
                                      std::string where) {
  return std::make_unique<CacheStage>(shared, std::move(upstream), c,
                                      std::move(to), std::move(dir),
                                      std::move(type), std::move(where));
}

namespace {

Expected<std::unique_ptr<Stage>> cache(StageBuild &b) {
  const Value &p = b.step.params;
  std::string to = p["to"].isString() ? p["to"].asString() : "memory";
  if (to != "memory" && to != "disk")
    return Status::error(b.where + ": cache `to` must be memory or disk");
  std::string dir = b.shared.tempDir;
  if (p["path"].isString()) {
    dir = p["path"].asString();
    const std::string &base = b.shared.plan->baseDir;
    if (!dir.empty() && dir[0] != '/' && !base.empty())
      dir = base + "/" + dir;
  }
  if (!dir.empty()) {
    struct stat sb;
    if (to == "disk" && (::stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)))
      return Status::error(b.where + ": cache path '" + dir +
                           "' is not a directory; create it or choose "
                           "another `path`");
  }
  if (to == "memory" && b.count && b.countExact) {
    StaticNeed n;
    n.what = "the memory cache of " + std::to_string(*b.count) + " records";
    n.records = *b.count;
    n.type = b.step.inputType;
    n.knob = "cache: disk";
    n.where = b.where;
    b.needs.push_back(n);
  }
  return makeCacheStage(b.shared, std::move(b.upstream), b.counters, to, dir,
                        b.step.inputType, b.where);
}

StageRegistration cacheRegistration("cache", cache);

} // namespace

} // namespace sluice::runtime::detail
