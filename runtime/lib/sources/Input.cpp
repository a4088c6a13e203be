//===- Input.cpp - File input, globbing and value parsing for sources -----===//

#include "SourceImpl.h"
#include "sluice/ops/kernels/Scalar.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

namespace sluice::runtime::detail {

//===----------------------------------------------------------------------===//
// BufferedInput
//===----------------------------------------------------------------------===//

BufferedInput::BufferedInput(size_t blockSize)
    : blockSize_(std::max<size_t>(blockSize, 4096)) {}

namespace {
/// zlib's input buffer for a .gz stream (gzbuffer; it adds an output buffer
/// of twice that); smaller for smaller files.
constexpr unsigned kGzipBufferBytes = 256 * 1024;
/// zlib's inflate state (~7 KiB) and its 32 KiB window, and gzFile's own.
constexpr int64_t kInflateStateBytes = 40 * 1024;
/// The least a buffer shrinks to when the budget cannot give more.
constexpr size_t kMinBlockBytes = 16 * 1024;
constexpr unsigned kMinGzipBufferBytes = 8 * 1024;
/// What one fill() copies of the next chunk while a record that straddles
/// two chunks is put together (BufferedInput::viewChunks_).
constexpr size_t kJoinBytes = 64 * 1024;

uint64_t roundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
} // namespace

BufferedInput::~BufferedInput() {
  if (fd_ >= 0)
    ::close(fd_);
  if (gz_)
    gzclose(static_cast<gzFile>(gz_));
}

bool BufferedInput::open(const std::string &path, bool decompress,
                         const std::shared_ptr<const RemoteConfig> &remote,
                         FirstChunk ahead) {
  path_ = path;
  if (isRemoteUrl(path))
    return openRemote(path, decompress, remote, ahead);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error_ = std::string("cannot open: ") + std::strerror(errno);
    eof_ = true;
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    error_ = "cannot open: is a directory";
    eof_ = true;
    return false;
  }
  const bool regular = S_ISREG(st.st_mode);
  const bool gzip = decompress && isGzipPath(path);
  // Buffers no larger than the file needs: a small file (a labels file, a
  // short shard) must not hold a 1 MiB block and 768 KiB of zlib buffers.
  unsigned gzBytes = kGzipBufferBytes;
  if (regular && !gzip)
    blockSize_ = std::clamp<size_t>(
        roundUp(static_cast<uint64_t>(st.st_size) + 1, 4096), 4096, blockSize_);
  if (regular && gzip) {
    gzBytes = static_cast<unsigned>(
        std::clamp<uint64_t>(roundUp(static_cast<uint64_t>(st.st_size), 4096),
                             8192, kGzipBufferBytes));
    // The gzip trailer's ISIZE: the (last member's) uncompressed size mod
    // 2^32, a hint for the block buffer only.
    unsigned char tail[4];
    if (st.st_size >= 18 && ::pread(fd, tail, 4, st.st_size - 4) == 4) {
      uint64_t isize = uint64_t(tail[0]) | uint64_t(tail[1]) << 8 |
                       uint64_t(tail[2]) << 16 | uint64_t(tail[3]) << 24;
      blockSize_ =
          std::clamp<size_t>(roundUp(isize + 1, 4096), 4096, blockSize_);
    }
  }
  // Counted in the budget while the stream is open (HeldAllocation): the
  // block buffer, and for .gz zlib's input buffer, its output buffer (twice
  // the input) and the inflate state with its 32 KiB window. Under a budget
  // that cannot give them now they shrink (reads are then shorter), down to
  // kMinBlockBytes and kMinGzipBufferBytes; only those are refused.
  auto zlibFor = [&](unsigned in) {
    return gzip ? 3 * int64_t(in) + kInflateStateBytes : 0;
  };
  // They take at most a quarter of what the budget has left, so that the
  // records they are read for still fit.
  const int64_t room = held_.available();
  while (
      (room >= 0 &&
       static_cast<int64_t>(blockSize_) + zlibFor(gzBytes) > room / 4) ||
      !held_.tryResize(static_cast<int64_t>(blockSize_) + zlibFor(gzBytes))) {
    if (blockSize_ <= kMinBlockBytes &&
        (!gzip || gzBytes <= kMinGzipBufferBytes))
      break;
    if (gzip && gzBytes > kMinGzipBufferBytes &&
        (3 * size_t(gzBytes) >= blockSize_ || blockSize_ <= kMinBlockBytes))
      gzBytes = std::max(kMinGzipBufferBytes, gzBytes / 2);
    else
      blockSize_ = std::max(kMinBlockBytes, blockSize_ / 2);
  }
  try {
    held_.resize(static_cast<int64_t>(blockSize_) + zlibFor(gzBytes),
                 "the read buffers of " + path);
  } catch (const AllocationRefused &e) {
    ::close(fd);
    error_ = e.what();
    eof_ = true;
    return false;
  }
  zlibBytes_ = zlibFor(gzBytes);
  if (gzip) {
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
      ::close(fd);
      held_.reset();
      error_ = "cannot open gzip stream";
      eof_ = true;
      return false;
    }
    gzbuffer(gz, gzBytes);
    gz_ = gz;
  } else {
    fd_ = fd;
    if (S_ISREG(st.st_mode))
      rawSize_ = static_cast<uint64_t>(st.st_size);
#ifdef POSIX_FADV_SEQUENTIAL
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  cap_ = blockSize_;
  buf_.reset(new char[cap_]);
  return true;
}

/// zlib's inflate state and the compressed bytes waiting for it.
struct BufferedInput::RemoteGunzip {
  z_stream z{};
  std::unique_ptr<unsigned char[]> in;
  size_t inCap = 0;
  bool inEnd = false;   ///< the object's bytes are all read
  bool inMember = true; ///< inside a gzip member (its end not yet seen)
  bool live = false;    ///< inflateInit2 succeeded
  ~RemoteGunzip() {
    if (live)
      inflateEnd(&z);
  }
};

void BufferedInput::GunzipDeleter::operator()(RemoteGunzip *g) const {
  delete g;
}

long BufferedInput::gunzipRead(char *dst, size_t n) {
  RemoteGunzip &g = *rgz_;
  n = std::min<size_t>(n, std::numeric_limits<uInt>::max());
  g.z.next_out = reinterpret_cast<Bytef *>(dst);
  g.z.avail_out = static_cast<uInt>(n);
  while (g.z.avail_out == n) {
    if (g.z.avail_in == 0 && !g.inEnd) {
      long got =
          remote_->read(reinterpret_cast<char *>(g.in.get()), g.inCap, error_);
      if (got < 0)
        return -1;
      if (got == 0) {
        g.inEnd = true;
      } else {
        rawBytes_ += static_cast<uint64_t>(got);
        g.z.next_in = g.in.get();
        g.z.avail_in = static_cast<uInt>(got);
      }
    }
    if (g.z.avail_in == 0 && g.inEnd) {
      if (g.inMember) {
        // A cut-off object must not pass for a complete one.
        error_ = "gzip: the compressed stream ends early after " +
                 std::to_string(rawBytes_) +
                 " bytes (the object is truncated or not all of it was "
                 "stored)";
        return -1;
      }
      return 0;
    }
    if (!g.inMember) {
      // Another member follows (gzip(1) and zlib's gzread read
      // concatenated members as one stream).
      inflateReset(&g.z);
      g.inMember = true;
    }
    int rc = inflate(&g.z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END)
      g.inMember = false;
    else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      error_ = std::string("gzip: ") +
               (g.z.msg ? g.z.msg : "cannot decompress") + " at byte " +
               std::to_string(rawBytes_ - g.z.avail_in) +
               " of the compressed object";
      return -1;
    }
  }
  return static_cast<long>(n - g.z.avail_out);
}

bool BufferedInput::openRemote(
    const std::string &url, bool decompress,
    const std::shared_ptr<const RemoteConfig> &remote, FirstChunk &ahead) {
  eof_ = true;
  const bool gzip = decompress && isGzipPath(url);
  if (!remote) {
    error_ = "cannot open: the source has no settings for remote URLs";
    return false;
  }
  auto stream = std::make_unique<RemoteStream>(remote, url);
  if (!stream->open(error_, &ahead))
    return false;
  remote_ = std::move(stream);
  eof_ = false;
  // A .gz object's inflated size is unknown until its end (its trailer
  // would cost a request of its own): the block keeps its default size.
  if (!gzip) {
    rawSize_ = remote_->size();
    blockSize_ =
        std::clamp<size_t>(roundUp(*rawSize_ + 1, 4096), 4096, blockSize_);
  }
  // For .gz: the compressed bytes waiting for zlib, and its state.
  const size_t gzIn = gzip ? std::clamp<size_t>(roundUp(remote_->size(), 4096),
                                                8192, kGzipBufferBytes)
                           : 0;
  const int64_t zlib = gzip ? int64_t(gzIn) + kInflateStateBytes : 0;
  const int64_t room = held_.available();
  while (((room >= 0 && static_cast<int64_t>(blockSize_) + zlib > room / 4) ||
          !held_.tryResize(static_cast<int64_t>(blockSize_) + zlib)) &&
         blockSize_ > kMinBlockBytes)
    blockSize_ = std::max(kMinBlockBytes, blockSize_ / 2);
  try {
    held_.resize(static_cast<int64_t>(blockSize_) + zlib,
                 "the read buffer of " + url);
  } catch (const AllocationRefused &e) {
    error_ = e.what();
    eof_ = true;
    remote_.reset();
    return false;
  }
  if (gzip) {
    rgz_.reset(new RemoteGunzip);
    rgz_->inCap = gzIn;
    rgz_->in.reset(new unsigned char[gzIn]);
    // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and size checked).
    if (inflateInit2(&rgz_->z, 16 + MAX_WBITS) != Z_OK) {
      error_ = "cannot open gzip stream";
      eof_ = true;
      rgz_.reset();
      remote_.reset();
      return false;
    }
    rgz_->live = true;
    zlibBytes_ = zlib;
  }
  cap_ = blockSize_;
  buf_.reset(new char[cap_]);
  static const bool noView = switchedOff("SLUICE_NO_REMOTE_CHUNK_VIEW");
  viewChunks_ = !gzip && !noView;
  return true;
}

long BufferedInput::rawRead(char *dst, size_t n) {
  if (rgz_)
    return gunzipRead(dst, n);
  if (remote_) {
    long got = remote_->read(dst, n, error_);
    if (got > 0)
      rawBytes_ += static_cast<uint64_t>(got);
    return got;
  }
  if (gz_) {
    gzFile gz = static_cast<gzFile>(gz_);
    unsigned chunk = static_cast<unsigned>(
        std::min<size_t>(n, std::numeric_limits<int>::max() / 2));
    int got = gzread(gz, dst, chunk);
    if (got < 0) {
      int code = 0;
      const char *msg = gzerror(gz, &code);
      error_ = std::string("gzip: ") + (msg ? msg : "read error");
      return -1;
    }
    // zlib reports a stream that ends early as a plain EOF; tell the reader
    // so it does not mistake a cut-off download for a complete file.
    if (got == 0) {
      int code = 0;
      const char *msg = gzerror(gz, &code);
      if (code != Z_OK && code != Z_STREAM_END) {
        error_ = std::string("gzip: ") + (msg ? msg : "read error");
        return -1;
      }
    }
    return got;
  }
  if (fd_ < 0)
    return 0;
  while (true) {
    ssize_t got = ::read(fd_, dst, n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      error_ = std::string("read failed: ") + std::strerror(errno);
      return -1;
    }
    if (got == 0 && n > 0 && rawSize_) {
      // The end before the size the file had when it was opened: it was
      // cut short (rewritten in place) while being read. Without this the
      // records past the cut would be missing without a word.
      off_t at = ::lseek(fd_, 0, SEEK_CUR);
      if (at >= 0 && static_cast<uint64_t>(at) < *rawSize_) {
        struct stat st;
        std::string now = ::fstat(fd_, &st) == 0
                              ? std::to_string(st.st_size) + " bytes now"
                              : "smaller now";
        error_ = "the file shrank while being read (" +
                 std::to_string(*rawSize_) + " bytes when opened, " + now +
                 ", the end reached at byte " + std::to_string(at) + ")";
        return -1;
      }
    }
    rawBytes_ += static_cast<uint64_t>(got);
    return static_cast<long>(got);
  }
}

bool BufferedInput::growBuffer(size_t newCap, bool must) {
  // Growth the budget cannot give is done without while the buffer has
  // room left (a shorter read); a record longer than the whole buffer
  // needs it.
  bool grow = held_.tryResize(static_cast<int64_t>(newCap) + zlibBytes_);
  if (!grow && must) {
    try {
      held_.resize(static_cast<int64_t>(newCap) + zlibBytes_,
                   "the read buffer of " + path_ + " (grown to " +
                       std::to_string(newCap) +
                       " bytes for a record that "
                       "does not fit in " +
                       std::to_string(cap_) + ")");
      grow = true;
    } catch (const AllocationRefused &e) {
      error_ = e.what();
      eof_ = true;
      return false;
    }
  }
  if (grow) {
    std::unique_ptr<char[]> bigger(new char[newCap]);
    std::memcpy(bigger.get(), buf_.get(), lim_);
    buf_ = std::move(bigger);
    cap_ = newCap;
  }
  return true;
}

bool BufferedInput::fillView() {
  const char *p = nullptr;
  long got = remote_->borrow(p, error_);
  if (got == -2) {
    // A cached entry's file: read() into the buffer instead.
    viewChunks_ = false;
    return fill();
  }
  base_ += static_cast<int64_t>(lim_);
  pos_ = lim_ = 0;
  view_ = nullptr;
  if (got <= 0) {
    eof_ = true;
    return false;
  }
  view_ = p;
  lim_ = static_cast<size_t>(got);
  rawBytes_ += static_cast<uint64_t>(got);
  return true;
}

bool BufferedInput::fill() {
  if (eof_ || !buf_)
    return false;
  if (viewChunks_ && pos_ == lim_)
    return fillView();
  if (view_) {
    // A record goes on in the next chunk: what is left of this one is put
    // together with the next one's first bytes in the buffer (the chunk
    // stays lent until the next read from the stream).
    const char *rest = view_ + pos_;
    const size_t keep = lim_ - pos_;
    base_ += static_cast<int64_t>(pos_);
    pos_ = lim_ = 0;
    view_ = nullptr;
    if (keep + blockSize_ / 2 > cap_ &&
        !growBuffer(std::max(cap_ * 2, keep + blockSize_), keep >= cap_))
      return false;
    std::memcpy(buf_.get(), rest, keep);
    lim_ = keep;
  }
  if (pos_ > 0) {
    size_t keep = lim_ - pos_;
    if (keep > 0)
      std::memmove(buf_.get(), buf_.get() + pos_, keep);
    base_ += static_cast<int64_t>(pos_);
    pos_ = 0;
    lim_ = keep;
  }
  if (cap_ - lim_ < blockSize_ / 2 &&
      !growBuffer(std::max(cap_ * 2, lim_ + blockSize_), lim_ == cap_))
    return false;
  // While the window is a view of the chunks, the buffer only joins a
  // record's two pieces: a little of the next chunk is copied, and the
  // window goes back to the chunk once the joined bytes are consumed.
  size_t want = cap_ - lim_;
  if (viewChunks_)
    want = std::min(want, kJoinBytes);
  long got = rawRead(buf_.get() + lim_, want);
  if (got <= 0) {
    eof_ = true;
    return false;
  }
  lim_ += static_cast<size_t>(got);
  return true;
}

bool BufferedInput::ensure(size_t n) {
  while (avail() < n)
    if (!fill())
      return false;
  return true;
}

size_t BufferedInput::read(void *dst, size_t n) {
  char *out = static_cast<char *>(dst);
  size_t done = std::min(n, avail());
  std::memcpy(out, data(), done);
  pos_ += done;
  // Big payloads (images in a TFRecord) go straight to the destination.
  while (done < n && n - done >= blockSize_ && !eof_) {
    base_ += static_cast<int64_t>(lim_);
    pos_ = lim_ = 0;
    view_ = nullptr;
    long got = rawRead(out + done, n - done);
    if (got <= 0) {
      eof_ = true;
      break;
    }
    base_ += got;
    done += static_cast<size_t>(got);
  }
  while (done < n) {
    if (avail() == 0 && !fill())
      break;
    size_t take = std::min(n - done, avail());
    std::memcpy(out + done, data(), take);
    pos_ += take;
    done += take;
  }
  return done;
}

size_t BufferedInput::skip(size_t n) {
  size_t done = std::min(n, avail());
  pos_ += done;
  if (done < n && fd_ >= 0 && n - done >= blockSize_ && rawSize_ && !eof_) {
    // Seek over members nobody asked for instead of reading them.
    int64_t here = base_ + static_cast<int64_t>(lim_);
    int64_t want = here + static_cast<int64_t>(n - done);
    int64_t target = std::min<int64_t>(want, static_cast<int64_t>(*rawSize_));
    if (::lseek(fd_, target, SEEK_SET) == target) {
      base_ = target;
      pos_ = lim_ = 0;
      done += static_cast<size_t>(target - here);
    }
  }
  while (done < n) {
    if (avail() == 0 && !fill())
      break;
    size_t take = std::min(n - done, avail());
    pos_ += take;
    done += take;
  }
  return done;
}

uint64_t BufferedInput::bytesRead() const {
  if (gz_)
    return static_cast<uint64_t>(gzoffset(static_cast<gzFile>(gz_)));
  return rawBytes_;
}

bool readWholeFile(const std::string &path, std::string &out,
                   std::string &error, bool *refused,
                   const std::shared_ptr<const RemoteConfig> &remote,
                   std::shared_ptr<PendingFetch> pending) {
  if (isRemoteUrl(path)) {
    if (!pending && !remote) {
      error = "the source has no settings for remote URLs";
      return false;
    }
    if (!pending)
      pending = startObjectFetch(remote, path);
    Fetched &f = pending->wait();
    if (!f.ok) {
      error = f.error;
      return false;
    }
    // Counted as a local file's bytes are, once they are here (the fetch
    // ahead is bounded by the source's concurrency).
    if (Status r = reserveScratch(static_cast<int64_t>(f.body.size()),
                                  "the " + std::to_string(f.body.size()) +
                                      "-byte object");
        !r) {
      error = r.message();
      if (refused)
        *refused = true;
      return false;
    }
    out = f.body.takeString();
    return true;
  }
  // O_NONBLOCK: a FIFO among the files is refused below instead of blocking
  // the open until some writer appears (regular files ignore the flag).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    error = "not a regular file";
    return false;
  }
  // The file's bytes are the record's: reserved in the thread's allocation
  // scope (the source stage's "<source> reading") before they are read, so
  // a file larger than budget.memory is refused instead of allocated.
  if (Status r =
          reserveScratch(static_cast<int64_t>(st.st_size),
                         "the " + std::to_string(st.st_size) + "-byte file");
      !r) {
    ::close(fd);
    error = r.message();
    if (refused)
      *refused = true;
    return false;
  }
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t got = ::read(fd, &out[done], out.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      error = std::string("read failed: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (got == 0)
      break;
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  if (done != out.size()) {
    error = "file shrank while being read (" + std::to_string(done) + " of " +
            std::to_string(out.size()) + " bytes)";
    return false;
  }
  return true;
}

uint64_t arrayBytes(ElemType elem, const std::vector<int64_t> &dims) {
  uint64_t bytes = elemTypeSize(elem);
  for (int64_t n : dims)
    bytes *= static_cast<uint64_t>(n);
  return bytes;
}

std::string dataSizeProblem(const BufferedInput &in, uint64_t dataOffset,
                            uint64_t dataBytes) {
  std::optional<uint64_t> size = in.rawSize();
  if (!size || *size >= dataOffset + dataBytes)
    return "";
  return "truncated: the header promises " + std::to_string(dataBytes) +
         " bytes of data, the file has " +
         std::to_string(*size - std::min(*size, dataOffset));
}

//===----------------------------------------------------------------------===//
// Paths and globs
//===----------------------------------------------------------------------===//

std::string joinPath(const std::string &baseDir, const std::string &path) {
  if (isRemoteUrl(path))
    return path;
  if (isFileUrl(path))
    return joinPath(baseDir, stripFileUrl(path));
  if (path.empty() || path[0] == '/' || path[0] == '~' || baseDir.empty() ||
      baseDir == ".")
    return path;
  if (baseDir.back() == '/')
    return baseDir + path;
  return baseDir + "/" + path;
}

namespace {

/// Escapes glob metacharacters so a directory name is matched literally.
std::string globEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\' || c == '{' ||
        c == '}')
      out += '\\';
    out += c;
  }
  return out;
}

/// The directories glob() could not read while expanding one pattern, with
/// why (glob's error callback has no user pointer; one expansion at a time
/// per thread).
thread_local std::vector<std::string> *globErrors = nullptr;

int onGlobError(const char *path, int err) {
  // A directory that does not exist is no match, reported as such; one that
  // exists but cannot be read would hide its files.
  if (globErrors && err != ENOENT && err != ENOTDIR)
    globErrors->push_back(std::string(path) + ": " + std::strerror(err));
  return 0;
}

} // namespace

std::vector<std::string> stringList(const Value &v) {
  if (v.isString())
    return {v.asString()};
  std::vector<std::string> out;
  if (v.isList())
    for (const Value &item : v.items())
      if (item.isString())
        out.push_back(item.asString());
  return out;
}

Expected<std::vector<std::string>>
expandFiles(const std::string &kind, const Value &params,
            const std::string &name, const std::string &baseDir,
            std::shared_ptr<const RemoteConfig> *remote) {
  std::vector<std::string> patterns = stringList(params[name]);
  if (patterns.empty())
    return Status::error(kind + ": parameter '" + name +
                         "' must be a file pattern or a list of them");
  std::vector<std::string> files;
  std::shared_ptr<const RemoteConfig> cfg;
  for (const std::string &given : patterns) {
    if (Status st = checkSourceUrl(kind, name, given, /*objectNeeded=*/true);
        !st)
      return st;
    if (isRemoteUrl(given)) {
      if (!cfg) {
        Expected<std::shared_ptr<const RemoteConfig>> made =
            remoteConfigFor(kind, params, baseDir);
        if (!made)
          return made.status();
        cfg = made.take();
        if (remote)
          *remote = cfg;
      }
      Expected<std::vector<std::string>> urls =
          expandRemotePattern(kind, name, given, *cfg);
      if (!urls)
        return urls.status();
      files.insert(files.end(), urls->begin(), urls->end());
      continue;
    }
    // Numeric ranges ({000..099}, as WebDataset shard lists are written)
    // are expanded here: glob's GLOB_BRACE knows only {a,b}. Each name of a
    // range must then exist, as each pattern must match.
    const std::string stripped = stripFileUrl(given);
    std::vector<std::string> alternatives = {stripped};
    if (stripped.find('{') != std::string::npos &&
        stripped.find("..") != std::string::npos)
      alternatives = expandBraces(stripped);
    for (const std::string &pattern : alternatives) {
      std::string full = pattern;
      if (!(pattern.empty() || pattern[0] == '/' || pattern[0] == '~' ||
            baseDir.empty() || baseDir == "."))
        full = joinPath(globEscape(baseDir), pattern);
      glob_t g;
      std::vector<std::string> unreadable;
      globErrors = &unreadable;
      int rc = ::glob(full.c_str(), GLOB_NOSORT | GLOB_BRACE | GLOB_TILDE,
                      onGlobError, &g);
      globErrors = nullptr;
      size_t before = files.size();
      size_t dirs = 0;
      if (rc == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) {
          struct stat st;
          if (::stat(g.gl_pathv[i], &st) != 0)
            // A match that cannot be looked at (a dangling symbolic link, a
            // link loop) is kept: reading it fails with its name and the
            // error, under the source's on_error, instead of vanishing.
            files.emplace_back(g.gl_pathv[i]);
          else if (S_ISREG(st.st_mode))
            files.emplace_back(g.gl_pathv[i]);
          else
            ++dirs;
        }
      }
      globfree(&g);
      if (!unreadable.empty())
        return Status::error(
            kind + ": " + name + ": cannot expand pattern '" + pattern +
            "': cannot list " + unreadable[0] +
            (unreadable.size() > 1
                 ? " (and " + std::to_string(unreadable.size() - 1) +
                       " more directories)"
                 : "") +
            "; the files in it would be missing from the data set");
      if (rc != 0 && rc != GLOB_NOMATCH)
        return Status::error(kind + ": " + name + ": cannot expand pattern '" +
                             pattern + "' (" +
                             (rc == GLOB_ABORTED ? "a directory is unreadable"
                                                 : "out of memory") +
                             ")");
      if (files.size() == before) {
        std::string where = baseDir.empty() ? std::string(".") : baseDir;
        return Status::error(
            kind + ": " + name + ": pattern '" + pattern + "' matched " +
            (dirs ? "only directories" : "no files") +
            (pattern[0] == '/' ? std::string()
                               : " (relative to '" + where + "')") +
            "; check the path, or write an absolute one");
      }
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

std::string stringParam(const Value &params, std::string_view name,
                        const std::string &fallback) {
  const Value &v = params[name];
  return v.isString() ? v.asString() : fallback;
}

int64_t intParam(const Value &params, std::string_view name, int64_t fallback) {
  const Value &v = params[name];
  return v.isNumber() ? v.asInt() : fallback;
}

bool boolParam(const Value &params, std::string_view name, bool fallback) {
  const Value &v = params[name];
  return v.isBool() ? v.asBool() : fallback;
}

Expected<ElemType> elemTypeParam(const std::string &kind, const Value &v,
                                 const std::string &what) {
  if (v.isString())
    if (std::optional<ElemType> t = parseElemType(v.asString()))
      return *t;
  return Status::error(kind + ": " + what + ": unknown type " + v.str());
}

//===----------------------------------------------------------------------===//
// Numbers in text
//===----------------------------------------------------------------------===//

namespace {

std::string_view trim(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' ||
           c == '\v';
  };
  while (!s.empty() && space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && space(s.back()))
    s.remove_suffix(1);
  return s;
}

template <typename T> void store(void *dst, size_t i, T v) {
  std::memcpy(static_cast<char *>(dst) + i * sizeof(T), &v, sizeof(T));
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

} // namespace

ParseError parseNumber(std::string_view text, ElemType elem, void *dst,
                       size_t i) {
  text = trim(text);
  if (text.size() > 1 && text[0] == '+' && text[1] != '-')
    text.remove_prefix(1);
  const char *b = text.data(), *e = text.data() + text.size();
  if (isFloat(elem)) {
    if (text.empty()) {
      double nan = std::numeric_limits<double>::quiet_NaN();
      if (elem == ElemType::F64)
        store(dst, i, nan);
      else if (elem == ElemType::F32)
        store(dst, i, static_cast<float>(nan));
      else
        store(dst, i, kernels::floatToHalf(static_cast<float>(nan)));
      return ParseError::None;
    }
    // Fast path for integers written in float columns (Criteo's dense
    // features): up to 15 digits convert to double exactly, and from there
    // to float with a single rounding.
    {
      const char *q = b;
      bool neg = q < e && *q == '-';
      q += neg;
      if (q < e && e - q <= 15) {
        int64_t iv = 0;
        while (q < e && static_cast<unsigned>(*q - '0') < 10)
          iv = iv * 10 + (*q++ - '0');
        if (q == e) {
          double dv = static_cast<double>(neg ? -iv : iv);
          if (neg && iv == 0)
            dv = -0.0;
          if (elem == ElemType::F64)
            store(dst, i, dv);
          else if (elem == ElemType::F32)
            store(dst, i, static_cast<float>(dv));
          else if (std::fabs(dv) > 65504.0)
            return ParseError::Range;
          else
            store(dst, i, kernels::floatToHalf(static_cast<float>(dv)));
          return ParseError::None;
        }
      }
    }
    if (elem == ElemType::F32) {
      float f;
      auto rf = std::from_chars(b, e, f);
      if (rf.ec == std::errc() && rf.ptr == e) {
        store(dst, i, f);
        return ParseError::None;
      }
    }
    double d;
    auto r = std::from_chars(b, e, d);
    if (r.ec == std::errc::result_out_of_range && r.ptr == e) {
      // from_chars refuses underflow; strtod rounds it to a subnormal or 0.
      std::string copy(text);
      d = std::strtod(copy.c_str(), nullptr);
      if (std::isinf(d))
        return ParseError::Range;
    } else if (r.ec != std::errc() || r.ptr != e) {
      return ParseError::Syntax;
    }
    if (elem == ElemType::F64) {
      store(dst, i, d);
      return ParseError::None;
    }
    if (elem == ElemType::F32) {
      float f;
      auto rf = std::from_chars(b, e, f); // correctly rounded, unlike (float)d
      if (rf.ec != std::errc()) {
        if (std::fabs(d) > std::numeric_limits<float>::max())
          return ParseError::Range;
        f = static_cast<float>(d);
      }
      store(dst, i, f);
      return ParseError::None;
    }
    if (std::fabs(d) > 65504.0 && !std::isinf(d) && !std::isnan(d))
      return ParseError::Range;
    store(dst, i, kernels::floatToHalf(static_cast<float>(d)));
    return ParseError::None;
  }
  if (elem == ElemType::Bool) {
    if (text.empty())
      return ParseError::Empty;
    bool v;
    if (text == "1" || iequals(text, "true"))
      v = true;
    else if (text == "0" || iequals(text, "false"))
      v = false;
    else
      return ParseError::Syntax;
    store(dst, i, static_cast<uint8_t>(v));
    return ParseError::None;
  }
  if (text.empty())
    return ParseError::Empty;
  int64_t v;
  auto r = std::from_chars(b, e, v);
  if (r.ec == std::errc::result_out_of_range)
    return ParseError::Range;
  if (r.ec != std::errc() || r.ptr != e)
    return ParseError::Syntax;
  if (!isInteger(elem))
    return ParseError::Syntax;
  auto [lo, hi] = integerRange(elem);
  if (v < lo || v > hi)
    return ParseError::Range;
  kernels::storeFromInt(elem, v, static_cast<uint8_t *>(dst), i);
  return ParseError::None;
}

std::string describeParseError(ParseError err, std::string_view text,
                               ElemType elem) {
  std::string type(elemTypeName(elem));
  std::string shown(text.substr(0, 40));
  if (text.size() > 40)
    shown += "...";
  switch (err) {
  case ParseError::None:
    return "";
  case ParseError::Empty:
    return "empty value for " + type;
  case ParseError::Syntax:
    return "'" + shown + "' is not a valid " + type;
  case ParseError::Range:
    return "'" + shown + "' does not fit " + type;
  }
  return "";
}

const char *parseErrorReason(ParseError err, ElemType elem) {
  switch (err) {
  case ParseError::None:
    return "";
  case ParseError::Empty:
    return "empty value";
  case ParseError::Syntax:
    return elem == ElemType::Bool ? "bad bool" : "bad number";
  case ParseError::Range:
    return "value out of range";
  }
  return "";
}

} // namespace sluice::runtime::detail
