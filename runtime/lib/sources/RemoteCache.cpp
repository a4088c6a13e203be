//===- RemoteCache.cpp - Fetched objects kept on a local disk -------------===//
//
// See ObjectCache in Remote.h. One file per object, named by a hash of its
// URL, holding a short text header (format, ETag, size, CRC-32C of the
// bytes, the URL) and then the object's bytes. A file is written under a
// temporary name and renamed into place, so a reader (this process or
// another sharing the directory) sees a whole entry or none. The ETag says
// which version of the object an entry holds: the client asks the server
// with If-None-Match and uses the entry only on 304 Not Modified, so a
// changed object is fetched again, never served stale. The CRC catches a
// damaged file (a disk error, a hand edit): such an entry is dropped and
// the object fetched.
//
// The size bound is kept per process with a running total seeded from the
// directory; when a store passes it, the least recently used entries (by
// mtime, which a hit refreshes) are removed until the cache is under 90%
// of it. Processes sharing a directory each keep the bound on what they
// see, so together they may pass it briefly.
//
//===----------------------------------------------------------------------===//

#include "Remote.h"

#include "sluice/ops/WriteAll.h"
#include "sluice/runtime/Source.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace sluice::runtime::detail {

namespace {

constexpr const char *kMagic = "sluice-object-cache 1\n";
/// The eviction leaves the cache at this share of its bound, so that not
/// every store evicts.
constexpr double kEvictTo = 0.9;

struct CacheCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, stale{0}, bytesRead{0},
      bytesStored{0}, evictions{0}, damaged{0};
};
CacheCounters &cacheCounters() {
  static CacheCounters *c = new CacheCounters;
  return *c;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string header(const std::string &url, const std::string &etag,
                   int64_t size, uint32_t crc) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "size %" PRId64 "\ncrc32c %08" PRIx32 "\n",
                size, crc);
  return std::string(kMagic) + "etag " + etag + "\n" + buf + "url " + url +
         "\n\n";
}

/// "<dir>/.<name>.<pid>.<random>.tmp": unique to this writer.
std::string tempName(const std::string &dir, const std::string &name) {
  static std::atomic<uint64_t> seq{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, ".%d.%" PRIx64 ".%" PRIu64 ".tmp",
                static_cast<int>(::getpid()), rng(), seq.fetch_add(1));
  return dir + "/." + name + buf;
}

} // namespace

ObjectCacheTotals objectCacheTotals() {
  CacheCounters &c = cacheCounters();
  ObjectCacheTotals t;
  t.hits = c.hits.load();
  t.misses = c.misses.load();
  t.stale = c.stale.load();
  t.bytesRead = c.bytesRead.load();
  t.bytesStored = c.bytesStored.load();
  t.evictions = c.evictions.load();
  t.damaged = c.damaged.load();
  return t;
}

Expected<std::shared_ptr<ObjectCache>> ObjectCache::open(const std::string &dir,
                                                         int64_t maxBytes) {
  static std::mutex m;
  static auto *caches = new std::map<std::string, std::weak_ptr<ObjectCache>>;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    return Status::error(
        "remote.cache: cannot use '" + dir +
        "' as the cache directory: " + (ec ? ec.message() : "not a directory") +
        "; name a writable directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return Status::error("remote.cache: '" + dir + "' is not writable (" +
                         std::strerror(errno) + "); name a writable directory");
  std::string key = fs::weakly_canonical(dir, ec).string();
  if (ec)
    key = dir;
  std::lock_guard<std::mutex> lock(m);
  auto &slot = (*caches)[key];
  std::shared_ptr<ObjectCache> c = slot.lock();
  if (!c) {
    c = std::shared_ptr<ObjectCache>(new ObjectCache(key, maxBytes));
    c->total_ = c->scanBytes();
    slot = c;
  }
  std::lock_guard<std::mutex> l2(c->m_);
  // Two sources naming one directory: the smaller bound holds.
  if (maxBytes > 0 && (c->maxBytes_ <= 0 || maxBytes < c->maxBytes_))
    c->maxBytes_ = maxBytes;
  return c;
}

ObjectCache::ObjectCache(std::string dir, int64_t maxBytes)
    : dir_(std::move(dir)), maxBytes_(maxBytes) {}

std::string ObjectCache::pathOf(const std::string &url) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 ".obj", fnv1a(url));
  return dir_ + "/" + buf;
}

namespace {

/// One entry of a cache directory.
struct DirEntry {
  std::string path;
  int64_t bytes = 0;
  fs::file_time_type when;
};

/// The entries (.obj files) of a cache directory, with their sizes and
/// last write times; one that vanishes while it is walked (another process
/// sharing the directory evicted it) is left out.
std::vector<DirEntry> cacheEntries(const std::string &dir) {
  std::vector<DirEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().extension() != ".obj")
      continue;
    std::error_code e2;
    uintmax_t n = it->file_size(e2);
    fs::file_time_type t = it->last_write_time(e2);
    if (!e2)
      out.push_back({it->path().string(), static_cast<int64_t>(n), t});
  }
  return out;
}

} // namespace

int64_t ObjectCache::scanBytes() const {
  int64_t total = 0;
  for (const DirEntry &e : cacheEntries(dir_))
    total += e.bytes;
  return total;
}

std::optional<ObjectCache::Entry> ObjectCache::lookup(const std::string &url) {
  Entry e;
  e.path = pathOf(url);
  int fd = ::open(e.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  // The header is short: the URL is most of it.
  std::string head(4096 + url.size(), '\0');
  ssize_t got = ::pread(fd, head.data(), head.size(), 0);
  ::close(fd);
  if (got <= 0)
    return std::nullopt;
  head.resize(static_cast<size_t>(got));
  size_t end = head.find("\n\n");
  if (head.rfind(kMagic, 0) != 0 || end == std::string::npos)
    return std::nullopt;
  e.dataOffset = static_cast<int64_t>(end + 2);
  std::string gotUrl;
  size_t at = std::strlen(kMagic);
  while (at < end) {
    size_t nl = head.find('\n', at);
    std::string line = head.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("etag ", 0) == 0)
      e.etag = line.substr(5);
    else if (line.rfind("size ", 0) == 0)
      e.size = std::strtoll(line.c_str() + 5, nullptr, 10);
    else if (line.rfind("crc32c ", 0) == 0)
      e.crc =
          static_cast<uint32_t>(std::strtoul(line.c_str() + 7, nullptr, 16));
    else if (line.rfind("url ", 0) == 0)
      gotUrl = line.substr(4);
  }
  // Another URL with the same hash, or an entry without a version.
  if (gotUrl != url || e.etag.empty() || e.size < 0)
    return std::nullopt;
  return e;
}

bool ObjectCache::read(const Entry &e, std::string &out) {
  int fd = ::open(e.path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0;
  struct stat st;
  ok = ok && ::fstat(fd, &st) == 0 && st.st_size == e.dataOffset + e.size;
  if (ok) {
    out.resize(static_cast<size_t>(e.size));
    ok = ::pread(fd, out.data(), out.size(), e.dataOffset) ==
             static_cast<ssize_t>(out.size()) &&
         crc32c(out.data(), out.size()) == e.crc;
  }
  if (fd >= 0)
    ::close(fd);
  if (!ok) {
    drop(e);
    out.clear();
    return false;
  }
  touch(e);
  cacheCounters().bytesRead.fetch_add(static_cast<uint64_t>(e.size));
  return true;
}

int ObjectCache::openData(const Entry &e) {
  int fd = ::open(e.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size != e.dataOffset + e.size ||
      ::lseek(fd, e.dataOffset, SEEK_SET) != e.dataOffset) {
    ::close(fd);
    drop(e);
    return -1;
  }
  touch(e);
  return fd;
}

void ObjectCache::drop(const Entry &e) {
  cacheCounters().damaged.fetch_add(1);
  struct stat st;
  if (::stat(e.path.c_str(), &st) == 0 && ::unlink(e.path.c_str()) == 0) {
    std::lock_guard<std::mutex> lock(m_);
    total_ = std::max<int64_t>(0, total_ - static_cast<int64_t>(st.st_size));
  }
}

void ObjectCache::touch(const Entry &e) {
  // The eviction is by mtime: a hit makes the entry the most recent.
  ::utimensat(AT_FDCWD, e.path.c_str(), nullptr, 0);
}

bool ObjectCache::store(const std::string &url, const std::string &etag,
                        std::string_view bytes) {
  Writer w(shared_from_this(), url, etag, static_cast<int64_t>(bytes.size()));
  return w.append(bytes.data(), bytes.size()) && w.commit();
}

ObjectCache::Writer::Writer(std::shared_ptr<ObjectCache> cache, std::string url,
                            std::string etag, int64_t size)
    : cache_(std::move(cache)), url_(std::move(url)), etag_(std::move(etag)),
      size_(size) {
  // Nothing to keep: a version the cache could not check again, or an
  // object larger than the whole cache.
  if (etag_.empty() || etag_.find('\n') != std::string::npos ||
      (cache_->maxBytes_ > 0 && size_ > cache_->maxBytes_))
    return;
  final_ = cache_->pathOf(url_);
  temp_ = tempName(cache_->dir_, fs::path(final_).filename().string());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0)
    return;
  std::string h = header(url_, etag_, size_, 0);
  headerBytes_ = static_cast<int64_t>(h.size());
  if (!writeAll(fd_, h.data(), h.size()))
    fail();
}

ObjectCache::Writer::~Writer() {
  if (fd_ >= 0)
    fail();
}

void ObjectCache::Writer::fail() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
}

bool ObjectCache::Writer::append(const char *p, size_t n) {
  if (fd_ < 0)
    return false;
  if (written_ + static_cast<int64_t>(n) > size_ || !writeAll(fd_, p, n)) {
    fail();
    return false;
  }
  crc_ = crc32c(p, n, crc_);
  written_ += static_cast<int64_t>(n);
  return true;
}

bool ObjectCache::Writer::commit() {
  if (fd_ < 0 || written_ != size_) {
    fail();
    return false;
  }
  // The CRC is known only now: its field has a fixed width.
  std::string h = header(url_, etag_, size_, crc_);
  if (static_cast<int64_t>(h.size()) != headerBytes_ ||
      ::pwrite(fd_, h.data(), h.size(), 0) != static_cast<ssize_t>(h.size())) {
    fail();
    return false;
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    ::unlink(temp_.c_str());
    return false;
  }
  cacheCounters().bytesStored.fetch_add(static_cast<uint64_t>(size_));
  cache_->added(headerBytes_ + size_, final_);
  return true;
}

void ObjectCache::added(int64_t bytes, const std::string &keep) {
  std::lock_guard<std::mutex> lock(m_);
  total_ += bytes;
  if (maxBytes_ <= 0 || total_ <= maxBytes_)
    return;
  // Over the bound: the least recently used entries go first (the one just
  // written stays).
  std::vector<DirEntry> items;
  int64_t total = 0;
  for (DirEntry &e : cacheEntries(dir_)) {
    total += e.bytes;
    if (e.path != keep)
      items.push_back(std::move(e));
  }
  std::sort(
      items.begin(), items.end(),
      [](const DirEntry &a, const DirEntry &b) { return a.when < b.when; });
  const int64_t target =
      static_cast<int64_t>(static_cast<double>(maxBytes_) * kEvictTo);
  for (const DirEntry &i : items) {
    if (total <= target)
      break;
    if (::unlink(i.path.c_str()) == 0) {
      total -= i.bytes;
      cacheCounters().evictions.fetch_add(1);
    }
  }
  total_ = total;
}

void countCacheHit() { cacheCounters().hits.fetch_add(1); }
void countCacheBytes(uint64_t n) { cacheCounters().bytesRead.fetch_add(n); }
void countCacheMiss(bool stale) {
  cacheCounters().misses.fetch_add(1);
  if (stale)
    cacheCounters().stale.fetch_add(1);
}

} // namespace sluice::runtime::detail
