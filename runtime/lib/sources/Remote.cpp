//===- Remote.cpp - S3 and HTTP(S) objects through libcurl ----------------===//
//
// One libcurl multi handle, driven by one thread, carries every remote
// request of the process: libcurl keeps the connections alive between
// requests (its connection cache) and runs any number of transfers at once
// on that thread, so a reader that wants N chunks ahead just submits N
// requests and waits for the one it needs next. The thread waits on an epoll
// set of the connections (libcurl's socket interface), so a wake-up costs
// in proportion to the connections that have data, not to the requests in
// flight (ClientSwitches). When no other thread is driving the multi handle,
// a reader that waits for a response receives it itself and a thread that
// makes a request sends it (Client::lead), and the client thread stands by
// while readers do. Object GETs are signed by SigV4.cpp, the rest by
// libcurl's CURLOPT_AWS_SIGV4; nothing here parses HTTP.
//
// The XML of ListObjectsV2 and of S3 errors is small and flat; the few
// elements needed (Key, IsTruncated, NextContinuationToken, Code, Message)
// are picked out by name with entity decoding rather than pulling an XML
// library into the runtime.
//
//===----------------------------------------------------------------------===//

#include "Remote.h"
#include "sluice/ops/MapAligned.h"
#include "sluice/ops/Switches.h"

#include "SourceImpl.h"
#include "sluice/ops/FileFormats.h"
#include "sluice/ops/Registry.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <fnmatch.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::runtime::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// SHA-256 of the empty payload: S3 wants x-amz-content-sha256 on every
/// request, and libcurl 7.88 signs the empty body of a GET with this hash
/// without sending the header itself.
constexpr const char *kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

bool startsWith(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

/// Splits s3://bucket/key.
bool splitS3(std::string_view url, std::string &bucket, std::string &key) {
  if (!startsWith(url, "s3://"))
    return false;
  std::string_view rest = url.substr(5);
  size_t slash = rest.find('/');
  bucket = std::string(rest.substr(0, slash));
  key = slash == std::string_view::npos ? ""
                                        : std::string(rest.substr(slash + 1));
  return !bucket.empty();
}

/// The HTTP URL a request for `url` goes to.
std::string httpUrlOf(const RemoteConfig &cfg, const std::string &url,
                      std::string_view query = "") {
  std::string bucket, key;
  if (!splitS3(url, bucket, key))
    return url;
  std::string out;
  if (!cfg.endpoint.empty()) {
    std::string ep = cfg.endpoint;
    while (!ep.empty() && ep.back() == '/')
      ep.pop_back();
    out = ep + "/" + uriEncode(bucket, false) + "/" + uriEncode(key, true);
  } else {
    out = "https://" + bucket + ".s3." + cfg.region + ".amazonaws.com/" +
          uriEncode(key, true);
  }
  if (!query.empty())
    out += "?" + std::string(query);
  return out;
}

std::string xmlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out += s[i];
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      unsigned long cp =
          ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
              ? std::strtoul(std::string(ent.substr(2)).c_str(), nullptr, 16)
              : std::strtoul(std::string(ent.substr(1)).c_str(), nullptr, 10);
      // UTF-8 encoding of the code point.
      if (cp < 0x80)
        out += static_cast<char>(cp);
      else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

/// The raw text inside each <tag>...</tag> of `xml` (not decoded).
std::vector<std::string_view> xmlBlocks(std::string_view xml,
                                        std::string_view tag) {
  std::vector<std::string_view> out;
  std::string open = "<" + std::string(tag) + ">";
  std::string close = "</" + std::string(tag) + ">";
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string_view::npos) {
    size_t b = at + open.size();
    size_t e = xml.find(close, b);
    if (e == std::string_view::npos)
      break;
    out.push_back(xml.substr(b, e - b));
    at = e + close.size();
  }
  return out;
}

/// The decoded text of every <tag>...</tag> in `xml`, in order.
std::vector<std::string> xmlAll(std::string_view xml, std::string_view tag) {
  std::vector<std::string> out;
  for (std::string_view b : xmlBlocks(xml, tag))
    out.push_back(xmlDecode(b));
  return out;
}

} // namespace

std::string envOr(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

/// RFC 3986 percent-encoding of everything but unreserved characters (and
/// '/' when keepSlash), as SigV4's canonical form wants it.
std::string uriEncode(std::string_view s, bool keepSlash) {
  static const char *hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keepSlash && c == '/'))
      out += static_cast<char>(c);
    else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string xmlFirst(std::string_view xml, std::string_view tag) {
  std::vector<std::string> all = xmlAll(xml, tag);
  return all.empty() ? "" : all[0];
}

namespace {

//===----------------------------------------------------------------------===//
// The client: one multi handle on one thread
//===----------------------------------------------------------------------===//

/// Counters of every request (read without starting the client).
struct Counters {
  std::atomic<uint64_t> requests{0}, retries{0}, failures{0}, bytes{0};
  std::atomic<uint64_t> bodiesReused{0};
  std::atomic<uint64_t> bodiesPopulated{0};
  std::atomic<uint64_t> bodiesMapped{0};
  /// Blocks libcurl asked for that a block it freed earlier served
  /// (CurlMemory), and epoll_ctl calls made for libcurl's sockets.
  std::atomic<uint64_t> curlBuffersReused{0}, socketUpdates{0};
  /// Transfers finished on a thread that waited for one (or sent one)
  /// rather than on the client thread (ClientSwitches::waiterDrives).
  std::atomic<uint64_t> finishedByReaders{0};
  /// Clients (threads) made by this process (Client::get).
  std::atomic<uint64_t> clients{0};
  /// Requests in flight in all clients now (the peak's measure).
  std::atomic<uint64_t> inFlight{0};
  /// Responses arriving now in any client, since when (Client::receiving).
  std::mutex receivingMu;
  std::atomic<int> receiving{0};
  std::chrono::steady_clock::time_point receivingSince;
  std::atomic<uint64_t> peakInFlight{0}; // since resetRemotePeak()
  /// Nanoseconds during which at least one response was arriving (its
  /// first byte in, its last not yet): the bytes over this time are the
  /// bandwidth the client got while it received, whatever the requests'
  /// sizes and however many ran at once (RemoteTotals::receiveSeconds).
  std::atomic<uint64_t> receiveNs{0};
  /// Fetches of the next pass's first shards started before the current
  /// pass ended, and those a reader of the next pass took.
  std::atomic<uint64_t> nextPassAhead{0}, nextPassTaken{0};
  /// Listings of s3:// prefixes and patterns: ListObjectsV2 requests, the
  /// keys the listings returned, and the time spent in them
  /// (Source::listing).
  std::atomic<uint64_t> listRequests{0}, listedKeys{0}, listingNs{0};
  /// Streams (RemoteStream) opened over remote objects, and their objects'
  /// bytes: a sequential source's mean object (shard) size.
  std::atomic<uint64_t> streams{0}, streamBytes{0};
  /// SubmitBatch's batches and their requests; RequestBursts' stalls.
  std::atomic<uint64_t> bursts{0}, burstRequests{0}, readerStalls{0};
  std::mutex m;
  std::deque<double> latencies; // the last 1024, guarded by m
  /// Latencies of requests during which no other response was arriving
  /// (none when sent, none at their first byte): the server's and the
  /// network's time, without the wait behind other responses' bytes on
  /// the client's thread and link. The last 1024, guarded by m.
  std::deque<double> quietLatencies;
  std::deque<double> durations; // the last 1024 successful, guarded by m

  /// Keeps the milliseconds since `since` in `window` (latencies or
  /// durations), the last 1024 of them.
  void note(std::deque<double> &window, Clock::time_point since) {
    std::lock_guard<std::mutex> lock(m);
    window.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - since)
            .count());
    if (window.size() > 1024)
      window.pop_front();
  }
};
Counters &counters() {
  static Counters *c = new Counters; // never destroyed: see Client::get()
  return *c;
}

/// The client's optimizations, each off by name (read once per process);
/// the bytes received are the same either way (tests/python/test_remote.py)
/// and what each saves is in bench/results.md ("sixth session").
struct ClientSwitches {
  /// libcurl's socket interface over one epoll set: a wake-up runs only the
  /// transfers whose connection has data. Off (SLUICE_NO_REMOTE_SOCKET_EVENTS):
  /// curl_multi_perform runs every transfer in flight at each wake-up, and
  /// libcurl 7.88 poll()s each one's socket to find out whether it has data.
  bool socketEvents = true;
  /// An easy handle keeps what does not change between requests (callbacks,
  /// redirects, the signing and its keys) and a request sets only its URL,
  /// range and headers. Off (SLUICE_NO_REMOTE_HANDLE_REUSE): curl_easy_reset
  /// and every option again for each request.
  bool keepHandles = true;
  /// A body goes into one string reserved from the response's
  /// Content-Length before its first byte. Off (SLUICE_NO_REMOTE_PRESIZE):
  /// the string grows as the pieces arrive, copied at each doubling.
  bool presize = true;
  /// libcurl reads the socket kLargeReadBytes at a time instead of its
  /// default 16 KiB: fewer recv() calls and write callbacks per object. Off:
  /// SLUICE_NO_REMOTE_LARGE_READS.
  bool largeReads = true;
  /// A ranged chunk's body, once its reader has consumed it, is kept
  /// (BodyPool) for a later response's body (with presize): the pages of a
  /// buffer of megabytes are then written again instead of faulted in
  /// afresh, one fault per 4 KiB, which the allocator causes each time it
  /// returns a freed buffer of that size to the system. Off:
  /// SLUICE_NO_REMOTE_BODY_REUSE.
  bool reuseBodies = true;
  /// The client thread runs as SCHED_BATCH (no wake-up preemption of the
  /// pipeline's threads). Off: SLUICE_NO_REMOTE_BATCH_THREAD.
  bool batchThread = true;
  /// libcurl's allocations go through CurlMemory, which keeps the blocks of
  /// 16 KiB to 1 MiB its transfers free (each transfer's receive buffer)
  /// for the next ones. Off by default, on with
  /// SLUICE_REMOTE_CURL_BUFFER_REUSE=1: measured with glibc's trimming as it
  /// comes (image_folder over s3://, read only, one core, 20,000 objects, 3
  /// interleaved runs each), keeping them made the heap's top shrink and
  /// grow again around the bodies: 31,000-38,000 page faults and 1.48-1.59
  /// s against 7,800-10,400 and 1.11-1.27 s without; with the trimming held
  /// fixed (GLIBC_TUNABLES) 1.11-1.15 s against 1.12-1.16, and in the
  /// decoding pipeline 3.00-3.05 s against 2.93-3.09: no gain to pay that.
  bool keepCurlBuffers = false;
  /// A connection's socket stays in the epoll set while it waits in
  /// libcurl's connection cache, so reusing it changes nothing there (with
  /// socketEvents). Off: SLUICE_NO_REMOTE_LAZY_SOCKETS (an epoll_ctl each
  /// time libcurl adds, changes or removes a socket, as before).
  bool lazySockets = true;
  /// A reader that waits for a response no thread has received yet
  /// receives it itself (Client::lead), and a request is sent by the
  /// thread that makes it when no other thread is driving the transfers:
  /// the client thread steps aside while readers drive (with socketEvents).
  /// Off by default, on with SLUICE_REMOTE_WAITER_DRIVES=1: the reader is
  /// the source's thread, one for the whole pipeline, and driving put the
  /// client's work for every response that had arrived on it. Measured
  /// with requests in bursts (bench/results.md, nineteenth session; no
  /// added latency, not pinned), the source stage's CPU per record was
  /// 35-40 us driving against 16-19 without for image_folder over s3:// at
  /// 32 in flight (48-56 against 30-31 at 8; local files 14-17) and 35-38
  /// against 11-12 for webdataset over http:// (local 13): at 16 cores,
  /// where 16 decoders take ~29,000 records/s, 40 us of serial work caps
  /// the source at ~25,000. The whole run's CPU on one core was no higher
  /// without (image_folder 0.930x local at 8 in flight against 0.926x
  /// driving, 0.954x at 32 against 0.946x; webdataset within the noise).
  bool waiterDrives = false;
  /// A fresh ranged chunk's body of about 2 MiB or more is a mapping of
  /// huge pages of its own (Body::reserveMapped). Off:
  /// SLUICE_NO_REMOTE_HUGE_BODIES (a std::string, as a whole object's).
  bool hugeBodies = true;

  static const ClientSwitches &get() {
    static const ClientSwitches s = [] {
      auto off = [](const char *name) { return switchedOff(name); };
      ClientSwitches w;
      w.socketEvents = !off("SLUICE_NO_REMOTE_SOCKET_EVENTS");
      w.keepHandles = !off("SLUICE_NO_REMOTE_HANDLE_REUSE");
      w.presize = !off("SLUICE_NO_REMOTE_PRESIZE");
      w.largeReads = !off("SLUICE_NO_REMOTE_LARGE_READS");
      w.reuseBodies = !off("SLUICE_NO_REMOTE_BODY_REUSE");
      w.batchThread = !off("SLUICE_NO_REMOTE_BATCH_THREAD");
      // Named like the SLUICE_NO_ switches, read by the same rule: set to
      // anything but "" or "0" turns it on.
      w.keepCurlBuffers = off("SLUICE_REMOTE_CURL_BUFFER_REUSE");
      w.lazySockets = !off("SLUICE_NO_REMOTE_LAZY_SOCKETS");
      w.waiterDrives = off("SLUICE_REMOTE_WAITER_DRIVES"); // on when set
      w.hugeBodies = !off("SLUICE_NO_REMOTE_HUGE_BODIES");
      return w;
    }();
    return s;
  }
};

/// What an easy handle reads the socket with (ClientSwitches::largeReads):
/// one buffer of this size per handle, and the handles are as many as the
/// most requests ever in flight at once.
constexpr long kLargeReadBytes = 64 << 10;
/// A body is reserved from its Content-Length up to this; a larger one
/// grows from there as it arrives (a wrong length costs no more than this).
constexpr curl_off_t kPresizeMaxBytes = curl_off_t(64) << 20;

/// Bodies of consumed chunks kept for later responses (ClientSwitches::
/// reuseBodies): bounded in count and bytes, smaller ones not kept (the
/// allocator reuses their memory without faults anyway). A response takes
/// the smallest one that holds its Content-Length. The count (kMaxBuffers)
/// covers the bodies a stream and the shards fetched ahead hold at once
/// (8 requests in flight: 12 bodies at most); with 4, as before, every
/// burst of bodies handed back (an epoch's end) dropped the ones over 4,
/// and later responses took fresh memory again: webdataset over http, 10
/// epochs of 32 shards at 8 in flight, 38 fresh bodies of 320 with 4, 12
/// with 16. The bytes bound still rules (kMaxBytes, a sixteenth of the
/// budget).
///
/// While a pipeline that reads remote objects runs, the kept buffers are
/// counted in its budget (setRemoteBodyLimit: the "remote bodies (idle)"
/// account): a buffer is kept only if its capacity can be reserved there
/// now and the kept bytes stay within a sixteenth of the budget's limit
/// (kBudgetShare), so a small budget keeps fewer (none below 4 MiB for the
/// smallest kept buffer) and the pipeline's own buffers keep their room.
/// A buffer taken for a response leaves the account (the reader that waits
/// for the chunk counts it), and when the pipeline ends the kept buffers
/// are freed with its budget. Without a pipeline (no limit set) they are
/// kept uncounted, as a reader outside a pipeline is.
class BodyPool {
public:
  static constexpr size_t kMaxBuffers = 16;
  static constexpr size_t kMaxBytes = size_t(32) << 20;
  static constexpr size_t kMinBytes = size_t(256) << 10;
  /// The kept bytes are at most limit / kBudgetShare of a limited budget.
  static constexpr int64_t kBudgetShare = 16;

  static BodyPool &get() {
    static BodyPool *p = new BodyPool; // never destroyed: see Client::get()
    return *p;
  }
  /// The capacity a new body of `want` bytes is given: a size that the
  /// pool may keep is rounded up to a quarter of its power of two (at most
  /// a quarter more), so that a kept buffer also serves the next objects
  /// of about its size (shards differ by a few percent; without the
  /// rounding a response a little larger than every kept buffer took
  /// fresh memory, faulted in page by page). Off:
  /// SLUICE_NO_REMOTE_BODY_CLASSES=1 (the exact Content-Length).
  static size_t sizeClass(size_t want) {
    static const bool off = switchedOff("SLUICE_NO_REMOTE_BODY_CLASSES");
    if (off || !ClientSwitches::get().reuseBodies || want < kMinBytes ||
        want > kMaxBytes)
      return want;
    size_t top = size_t(1) << (63 - __builtin_clzll(want));
    size_t step = top / 4;
    return std::min(kMaxBytes, (want + step - 1) / step * step);
  }
  void put(Body &&body) {
    const size_t cap = body.capacity();
    if (!ClientSwitches::get().reuseBodies || cap < kMinBytes ||
        cap > kMaxBytes)
      return;
    body.clear();
    Body dropped; // freed outside the lock
    std::lock_guard<std::mutex> lock(m_);
    const size_t most = mostBytes();
    if (cap > most)
      return;
    if (free_.size() >= kMaxBuffers || bytes_ + cap > most) {
      // Full: a larger buffer replaces the smallest (it serves more).
      auto smallest = std::min_element(free_.begin(), free_.end(),
                                       [](const auto &a, const auto &b) {
                                         return a.capacity() < b.capacity();
                                       });
      if (smallest == free_.end() || smallest->capacity() >= cap ||
          bytes_ - smallest->capacity() + cap > most)
        return;
      const int64_t old = static_cast<int64_t>(smallest->capacity());
      if (limit_ && !limit_->tryReserveNow(static_cast<int64_t>(cap) - old))
        return;
      bytes_ -= smallest->capacity();
      dropped = std::move(*smallest);
      free_.erase(smallest);
    } else if (limit_ && !limit_->tryReserveNow(static_cast<int64_t>(cap))) {
      return;
    }
    bytes_ += cap;
    free_.push_back(std::move(body));
  }
  /// An empty buffer of at least `want` bytes' capacity into `out`; false
  /// when none is kept. A mapped one (Body::reserveMapped) only when
  /// `mappedOk` (a ranged chunk's body, never made into a std::string).
  bool take(size_t want, Body &out, bool mappedOk) {
    if (!ClientSwitches::get().reuseBodies || want < kMinBytes)
      return false;
    std::lock_guard<std::mutex> lock(m_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->capacity() >= want && (mappedOk || !it->mapped()) &&
          (best == free_.end() || it->capacity() < best->capacity()))
        best = it;
    if (best == free_.end())
      return false;
    bytes_ -= best->capacity();
    if (limit_)
      limit_->release(static_cast<int64_t>(best->capacity()));
    out = std::move(*best);
    free_.erase(best);
    counters().bodiesReused.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  /// Counts the kept buffers in `limit` from now on (null: uncounted). What
  /// the old limit held is released; what the new one cannot hold is freed.
  /// With `onlyIf`, does nothing unless the limit now is `onlyIf`.
  void setLimit(AllocationLimit *limit, AllocationLimit *onlyIf, bool check) {
    std::vector<Body> dropped; // freed outside the lock
    std::lock_guard<std::mutex> lock(m_);
    if (check && limit_ != onlyIf)
      return;
    if (limit_ && bytes_ > 0)
      limit_->release(static_cast<int64_t>(bytes_));
    limit_ = limit;
    if (check) {
      // The pipeline ends: its kept buffers go with its budget.
      dropped.swap(free_);
      bytes_ = 0;
      return;
    }
    std::vector<Body> kept;
    size_t keptBytes = 0;
    const size_t most = mostBytes();
    for (Body &b : free_) {
      const size_t cap = b.capacity();
      if (keptBytes + cap <= most &&
          (!limit_ || limit_->tryReserveNow(static_cast<int64_t>(cap)))) {
        keptBytes += cap;
        kept.push_back(std::move(b));
      } else {
        dropped.push_back(std::move(b));
      }
    }
    free_.swap(kept);
    bytes_ = keptBytes;
  }
  /// Bytes kept now.
  size_t keptBytes() {
    std::lock_guard<std::mutex> lock(m_);
    return bytes_;
  }

private:
  /// The most bytes kept under limit_ (under m_).
  size_t mostBytes() const {
    if (!limit_ || limit_->limit() <= 0)
      return kMaxBytes;
    return std::min(kMaxBytes,
                    static_cast<size_t>(limit_->limit() / kBudgetShare));
  }
  std::mutex m_;
  std::vector<Body> free_;
  size_t bytes_ = 0;
  AllocationLimit *limit_ = nullptr;
};

} // namespace

size_t Body::hugeCapacity(size_t n) {
  constexpr size_t kPage = 4096;
  // Under 1.6 MiB a 2 MiB page adds more than a quarter.
  if (n < kHugePageBytes - kHugePageBytes / 5)
    return 0;
  const size_t whole =
      (n + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (whole - n <= n / 4)
    return whole;
  return (n + kPage - 1) / kPage * kPage;
}

bool Body::reserveMapped(size_t n) {
  const size_t cap = hugeCapacity(n);
  if (!ClientSwitches::get().hugeBodies || cap == 0 || big_ || !str_.empty())
    return false;
  void *p =
      mapAligned(cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (p == MAP_FAILED)
    return false;
  // Without transparent huge pages (`never`) the advice changes nothing:
  // the mapping is then 4 KiB pages, as the string's memory would be.
  ::madvise(p, cap, MADV_HUGEPAGE);
  std::string().swap(str_);
  big_ = static_cast<char *>(p);
  bigCap_ = cap;
  bigSize_ = 0;
  return true;
}

void Body::unmap() {
  if (big_)
    ::munmap(big_, bigCap_);
  big_ = nullptr;
  bigSize_ = bigCap_ = 0;
}

Body &Body::operator=(Body &&o) noexcept {
  if (this != &o) {
    unmap();
    str_ = std::move(o.str_);
    o.str_.clear();
    big_ = o.big_;
    bigSize_ = o.bigSize_;
    bigCap_ = o.bigCap_;
    o.big_ = nullptr;
    o.bigSize_ = o.bigCap_ = 0;
  }
  return *this;
}

Body &Body::operator=(std::string &&s) {
  unmap();
  str_ = std::move(s);
  return *this;
}

void Body::reserve(size_t n) {
  if (n <= capacity())
    return;
  if (big_) {
    std::string s;
    s.reserve(n);
    s.append(big_, bigSize_);
    unmap();
    str_ = std::move(s);
    return;
  }
  str_.reserve(n);
}

void Body::append(const char *p, size_t n) {
  if (big_ && bigSize_ + n > bigCap_)
    // More than the Content-Length the mapping was made for: on in a
    // string, grown as strings grow.
    reserve(std::max(2 * bigCap_, bigSize_ + n));
  if (big_) {
    std::memcpy(big_ + bigSize_, p, n);
    bigSize_ += n;
  } else {
    str_.append(p, n);
  }
}

std::string Body::takeString() {
  if (!big_)
    return std::move(str_);
  std::string s(big_, bigSize_);
  unmap();
  return s;
}

namespace {

/// libcurl's memory (ClientSwitches::keepCurlBuffers). libcurl 7.88 mallocs
/// each transfer's receive buffer (CURLOPT_BUFFERSIZE + 1 bytes: 64 KiB
/// with largeReads) as the transfer starts and frees it as the transfer
/// ends (multi.c, multi_done), so every request allocated and freed one:
/// with glibc's trimming of the heap's top, the pages went back to the
/// system and the next request's buffer was faulted in again as the kernel
/// copied the response into it (image_folder over s3://, read only: 36% of
/// the run's page faults were in that copy). libcurl lets a process give
/// it its allocator (curl_global_init_mem, before the first
/// curl_global_init): these functions keep up to kKept freed blocks of
/// kMinBytes to kMaxBytes and hand one to the next allocation of about its
/// size, whichever thread frees or asks; every other allocation is
/// malloc's. The blocks kept are libcurl's own (at most kKept x 1 MiB, 64
/// KiB each in practice), never counted in a pipeline's budget, as the rest
/// of libcurl's memory is not.
struct CurlMemory {
  static constexpr size_t kMinBytes = size_t(16) << 10;
  static constexpr size_t kMaxBytes = size_t(1) << 20;
  static constexpr int kKept = 8;

  /// curl_global_init, with these functions unless the switch is off.
  /// libcurl counts its initializations and installs the functions only at
  /// the first, so a process whose libcurl was initialized before (by
  /// another library) keeps malloc's: nothing is then reused.
  static void init() {
    if (!ClientSwitches::get().keepCurlBuffers) {
      curl_global_init(CURL_GLOBAL_DEFAULT);
      return;
    }
    // A fork while another thread holds the lock would leave the child's
    // copy locked for good: held across fork() instead (as malloc's own).
    static const bool forkSafe = [] {
      ::pthread_atfork([] { kept().m.lock(); }, [] { kept().m.unlock(); },
                       [] { kept().m.unlock(); });
      return true;
    }();
    (void)forkSafe;
    curl_global_init_mem(CURL_GLOBAL_DEFAULT, &allocate, &release, &resize,
                         &duplicate, &allocateZeroed);
  }

private:
  struct Kept {
    std::mutex m;
    int n = 0;
    void *block[kKept];
    size_t size[kKept];
  };
  /// Never destroyed: libcurl may free after static destructors ran.
  static Kept &kept() {
    static Kept *k = new Kept;
    return *k;
  }
  static void *allocate(size_t n) {
    if (n >= kMinBytes && n <= kMaxBytes) {
      Kept &k = kept();
      std::lock_guard<std::mutex> lock(k.m);
      // A block of at least n but not more than a quarter larger (libcurl
      // asks for the same sizes again: its buffers).
      for (int i = k.n - 1; i >= 0; --i) {
        if (k.size[i] >= n && k.size[i] - n <= n / 4) {
          void *p = k.block[i];
          --k.n;
          k.block[i] = k.block[k.n];
          k.size[i] = k.size[k.n];
          counters().curlBuffersReused.fetch_add(1, std::memory_order_relaxed);
          return p;
        }
      }
    }
    return std::malloc(n);
  }
  static void release(void *p) {
    if (!p)
      return;
    const size_t usable = ::malloc_usable_size(p);
    if (usable >= kMinBytes && usable <= kMaxBytes) {
      Kept &k = kept();
      std::lock_guard<std::mutex> lock(k.m);
      if (k.n < kKept) {
        k.block[k.n] = p;
        k.size[k.n] = usable;
        ++k.n;
        return;
      }
    }
    std::free(p);
  }
  static void *resize(void *p, size_t n) { return std::realloc(p, n); }
  static char *duplicate(const char *s) { return ::strdup(s); }
  static void *allocateZeroed(size_t n, size_t size) {
    return std::calloc(n, size);
  }
};

/// A libcurl easy handle and the options it holds (ClientSwitches::
/// keepHandles).
struct EasyHandle {
  CURL *easy = nullptr;
  bool prepared = false; ///< the options every request shares are set
  /// The keys and provider it signs with (null: no signing); held so that
  /// the keys it was given cannot be freed and others take their address.
  std::shared_ptr<const Credentials> signedAs;
  std::string provider;
  /// The CA bundle it verifies servers with (RemoteConfig::caBundle; empty:
  /// libcurl's default).
  std::string caBundle;
};

class Client;

/// What a SubmitBatch on this thread holds back: the clients its requests
/// went to (sent as the outermost batch ends) and how many requests.
struct HeldBack {
  int depth = 0;
  size_t requests = 0;
  std::vector<Client *> clients;
};
HeldBack &heldBack() {
  static thread_local HeldBack h;
  return h;
}
/// SubmitBatch and RequestBursts are on (SLUICE_NO_REQUEST_BURSTS unset).
bool burstsOn() {
  static const bool on = !switchedOff("SLUICE_NO_REQUEST_BURSTS");
  return on;
}

struct Transfer final : PendingFetch {
  std::shared_ptr<const RemoteConfig> cfg;
  std::string url;     // as named (s3://, https://): for messages
  std::string httpUrl; // what is requested
  int64_t offset = 0, length = -1;
  std::string ifNoneMatch; // an ETag: a conditional GET
  int attempt = 0;
  Clock::time_point due, sent;
  bool firstByte = false;
  bool quiet = false;           // no other response arriving when sent
  void *client = nullptr;       // the Client running it (onBody)
  EasyHandle *handle = nullptr; // while in flight
  curl_slist *headers = nullptr;
  /// Signed by signS3Get (SigV4.cpp) rather than by libcurl; libcurlSigns:
  /// not again (the request was redirected to another host, which libcurl
  /// does not send a caller's Authorization header to).
  bool ownSigned = false, libcurlSigns = false;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::string contentRange;
  /// What an s3:// request is signed with (RemoteConfig::
  /// signingCredentials when it was submitted; null: anonymous).
  std::shared_ptr<const Credentials> credentials;
  /// S3's x-amz-bucket-region header, for the message of a request sent
  /// to (or signed for) the bucket's wrong region.
  std::string bucketRegion;
  Fetched result;

  std::mutex m;
  std::condition_variable cv;
  /// Set under m (and cv notified); read without m by the thread that
  /// drives the transfers for it (Client::lead).
  std::atomic<bool> finished{false};
  /// The client it was submitted to.
  Client *owner = nullptr;

  Fetched &wait() override;
  /// `result` is final: the waiters wake.
  void markFinished() {
    {
      std::lock_guard<std::mutex> lock(m);
      finished.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
};

class Client {
public:
  /// The process's client, made on first use. It is never destroyed: its
  /// thread may still be finishing a transfer nobody waits for while the
  /// process exits. A child made by fork() (a DataLoader worker) has no
  /// copy of the thread, so it makes a client of its own (the parent's
  /// state it inherited is left alone).
  /// A child is told by a fork handler (pthread_atfork) rather than by
  /// getpid(), which is a system call per request (glibc does not cache
  /// the pid).
  ///
  /// A process has clientThreads() clients, each with its own thread,
  /// libcurl multi handle and connections; requests go to them in turn.
  /// One thread spends ~50 us of CPU per object it fetches (image_folder
  /// over s3://, bench/remote_latency.py --floor), so one carries at most
  /// ~20,000 objects a second, less than 16 cores decode: the serial part
  /// of a per-object source at 16 cores and more.
  static Client &get() {
    static std::mutex m;
    static std::vector<Client *> clients;
    static unsigned owner = 0;
    static size_t turn = 0;
    std::lock_guard<std::mutex> lock(m);
    const unsigned now = forks().load(std::memory_order_relaxed);
    if (clients.empty() || owner != now) {
      // A forked child's copies of its parent's clients are left alone.
      clients.assign(clientThreads(), nullptr);
      owner = now;
    }
    Client *&c = clients[turn++ % clients.size()];
    if (!c) {
      c = new Client();
      counters().clients.fetch_add(1, std::memory_order_relaxed);
    }
    return *c;
  }

  /// How many clients (threads) a process runs: one per 12 of the host's
  /// cores, rounded up, at most 8 (1 up to 12 cores, 2 at 16, 6 at 64);
  /// SLUICE_REMOTE_CLIENT_THREADS=N sets it (1-16) and
  /// SLUICE_NO_REMOTE_CLIENT_THREADS=1 keeps one.
  static size_t clientThreads() {
    static const size_t n = [] {
      if (switchedOff("SLUICE_NO_REMOTE_CLIENT_THREADS"))
        return size_t(1);
      if (const char *v = std::getenv("SLUICE_REMOTE_CLIENT_THREADS");
          v && *v) {
        char *end = nullptr;
        long k = std::strtol(v, &end, 10);
        if (*end == '\0' && k >= 1 && k <= 16)
          return static_cast<size_t>(k);
        std::fprintf(stderr,
                     "sluice: SLUICE_REMOTE_CLIENT_THREADS=%s is not a "
                     "number from 1 to 16; using one client thread per 12 "
                     "cores\n",
                     v);
      }
      const int64_t cores = std::max<int64_t>(1, hostCores());
      return static_cast<size_t>(std::min<int64_t>(8, (cores + 11) / 12));
    }();
    return n;
  }

  void submit(std::shared_ptr<Transfer> t) {
    bool wake;
    t->owner = this;
    if (startsWith(t->url, "s3://")) {
      // A role's keys may be fetched (again) here, by the thread that asks
      // for the object, not by the thread that drives every transfer.
      std::string error;
      t->credentials = t->cfg->signingCredentials(error);
      if (!error.empty()) {
        t->result = Fetched();
        t->result.error = error;
        counters().failures.fetch_add(1, std::memory_order_relaxed);
        t->markFinished();
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      // A queue that was not empty has a wake-up on its way already: the
      // client thread takes the whole queue when it wakes (with
      // ClientSwitches::socketEvents; off, every submit wakes it, as before).
      wake = incoming_.empty();
      incoming_.push_back(std::move(t));
    }
    if (HeldBack &h = heldBack(); h.depth > 0) {
      // Sent with the rest of the batch (sendHeldBack).
      ++h.requests;
      if (std::find(h.clients.begin(), h.clients.end(), this) ==
          h.clients.end())
        h.clients.push_back(this);
      return;
    }
    if (drives_ && sendNow())
      return;
    if (wake || !sw_.socketEvents)
      wakeUp();
  }

  /// The requests a SubmitBatch held back: sent by this thread when no
  /// other drives the transfers, else by the client thread, woken.
  void sendHeldBack() {
    if (!drives_ || !sendNow())
      wakeUp();
  }

  /// Nobody drives the transfers now (the client thread waits): this
  /// thread sends the queued requests itself instead of waking it, and
  /// true. False when another thread drives.
  bool sendNow() {
    std::unique_lock<std::mutex> drive(drive_, std::try_to_lock);
    if (!drive.owns_lock())
      return false;
    startReady();
    runTimer();
    finishDone();
    ++passes_;
    stepAside(drive);
    return true;
  }

  /// Transfer::wait of a transfer not done yet (ClientSwitches::
  /// waiterDrives): when no other thread drives the transfers, this one
  /// does (libcurl's multi handle, under drive_) until `t` is done, and
  /// true. False at once when another thread drives: the caller sleeps
  /// until `t` is done, counted in sleepers_ (which the driver, as it
  /// stops, hands to the client thread).
  ///
  /// Why: with the client thread alone receiving, a reader whose response
  /// had arrived but was not yet read slept, the client thread woke to
  /// read it and woke the reader: on a busy core, two context switches and
  /// a futex wake-up for every few objects, and the client's work
  /// interleaved with the decoding. Leading, the reader reads the response
  /// itself (on its own core, in its own time slice), and the client
  /// thread waits on its wake-up descriptor only (stands by, eventLoop) as
  /// long as readers drive.
  bool lead(Transfer &t) {
    sleepers_.fetch_add(1);
    std::unique_lock<std::mutex> drive(drive_, std::try_to_lock);
    if (!drive.owns_lock())
      return false;
    sleepers_.fetch_sub(1);
    epoll_event events[64];
    bool first = true;
    while (!t.finished.load(std::memory_order_acquire)) {
      int n =
          ::epoll_wait(epoll_, events, 64, first ? 0 : waitBound(startReady()));
      if (first && n == 0) {
        // Nothing has arrived: the reader stalls (RequestBursts).
        counters().readerStalls.fetch_add(1, std::memory_order_relaxed);
        n = ::epoll_wait(epoll_, events, 64, waitBound(startReady()));
      }
      first = false;
      dispatch(events, n);
      runTimer();
      finishDone();
      ++passes_;
    }
    stepAside(drive);
    return true;
  }

  /// A thread other than the client's stops driving: when requests were
  /// queued meanwhile, retries wait to be sent, or readers sleep for other
  /// responses, the client thread takes over (woken; it does not stand by
  /// while a reader sleeps).
  void stepAside(std::unique_lock<std::mutex> &drive) {
    const bool unsent = !delayed_.empty();
    drive.unlock();
    bool queued;
    {
      std::lock_guard<std::mutex> lock(m_);
      queued = !incoming_.empty();
    }
    if (queued || unsent || sleepers_.load() > 0)
      wakeUp();
  }

  /// Whether the calling thread is a client thread.
  static bool &onClientThread() {
    static thread_local bool on = false;
    return on;
  }

  /// A sleeper of lead() woke.
  void sleeperDone() { sleepers_.fetch_sub(1); }
  /// Whether a reader may drive this client's transfers: with
  /// waiterDrives, in the process that made it (a forked child's copy of
  /// its parent's client shares the parent's sockets and epoll set; its
  /// readers wait, as they did before, and never take the parent's
  /// responses).
  bool drivesTransfers() const {
    return drives_ && forks().load(std::memory_order_relaxed) == madeAfter_;
  }

private:
  /// How many fork()s this process descends through since the first
  /// client was made: a child's count differs from its parent's.
  static std::atomic<unsigned> &forks() {
    static std::atomic<unsigned> n{0};
    static const bool registered = [] {
      ::pthread_atfork(nullptr, nullptr,
                       [] { forks().fetch_add(1, std::memory_order_relaxed); });
      return true;
    }();
    (void)registered;
    return n;
  }

  Client()
      : sw_(ClientSwitches::get()),
        madeAfter_(forks().load(std::memory_order_relaxed)) {
    CurlMemory::init();
    multi_ = curl_multi_init();
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 256L);
    if (sw_.socketEvents) {
      epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
      wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = wake_;
      if (epoll_ >= 0 && wake_ >= 0 &&
          ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev) == 0) {
        curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &Client::onSocket);
        curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
        curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &Client::onTimer);
        curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
        events_ = true;
        lazy_ = sw_.lazySockets;
        drives_ = sw_.waiterDrives;
      } else {
        // No epoll here (it never fails on Linux but for lack of memory or
        // descriptors): the polling loop works everywhere.
        if (epoll_ >= 0)
          ::close(epoll_);
        if (wake_ >= 0)
          ::close(wake_);
        epoll_ = wake_ = -1;
      }
    }
    std::thread([this] {
      onClientThread() = true;
      if (sw_.batchThread) {
        // SCHED_BATCH: woken by a response, the client thread does not
        // preempt the pipeline's thread on its core; it runs when that
        // thread waits or its slice ends and then takes every response
        // that arrived meanwhile. image_folder over s3://, one core, 8 in
        // flight: 2.0 context switches per record instead of 2.6, 1.5%
        // less CPU (bench/results.md, "eleventh session").
        sched_param none{};
        ::sched_setscheduler(0, SCHED_BATCH, &none);
      }
      if (events_)
        eventLoop();
      else
        pollLoop();
    }).detach();
  }

  void wakeUp() {
    if (events_) {
      uint64_t one = 1;
      // EAGAIN: the counter is full, so a wake-up is pending anyway.
      [[maybe_unused]] ssize_t w = ::write(wake_, &one, sizeof one);
    } else {
      curl_multi_wakeup(multi_);
    }
  }

  /// libcurl says which events a socket waits for (CURL_POLL_*): the epoll
  /// set follows. `socketp` is non-null once the socket is in the set.
  static int onSocket(CURL *, curl_socket_t s, int what, void *user,
                      void *socketp) {
    auto *c = static_cast<Client *>(user);
    if (c->lazy_)
      return c->onSocketLazily(s, what, socketp);
    if (what == CURL_POLL_REMOVE) {
      // The socket may be closed already (then epoll dropped it itself).
      c->epollCtl(EPOLL_CTL_DEL, s, nullptr);
      return 0;
    }
    c->setEvents(s, epollEvents(what), socketp != nullptr);
    if (!socketp)
      curl_multi_assign(c->multi_, s, c);
    return 0;
  }

  /// The epoll events of libcurl's CURL_POLL_IN / _OUT / _INOUT.
  static uint32_t epollEvents(int what) {
    return ((what & CURL_POLL_IN) ? EPOLLIN : 0u) |
           ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  }

  /// Watches `s` for `events`: modified if `registered` (as far as this
  /// side knows), else added.
  void setEvents(curl_socket_t s, uint32_t events, bool registered) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = s;
    int op = registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epollCtl(op, s, &ev) != 0) {
      // A descriptor number reused by a new socket, or one that epoll
      // dropped when it was closed: the other operation fits.
      epollCtl(op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &ev);
    }
  }

  int epollCtl(int op, int fd, epoll_event *ev) {
    counters().socketUpdates.fetch_add(1, std::memory_order_relaxed);
    return ::epoll_ctl(epoll_, op, fd, ev);
  }

  /// What the epoll set holds for a socket (ClientSwitches::lazySockets).
  /// libcurl removes a connection's socket when its transfer ends and adds
  /// it again when the next transfer reuses the connection: two epoll_ctl
  /// calls a request, or three (read only, image_folder over s3://: 1.94 a
  /// request). A connection's socket stays in the set instead while it
  /// waits in libcurl's connection cache (`wanted` false), and adding it
  /// again with the events it has changes nothing. An event on a socket
  /// nobody wants (the server closed the idle connection) takes it out of
  /// the set then; libcurl finds the connection dead when it checks it
  /// before reuse. Only sockets that onOpenSocket made are kept so: their
  /// closing passes through onCloseSocket, which forgets them, so a
  /// descriptor number reused by a new socket is never taken for the old
  /// one (which epoll dropped as it was closed).
  struct Watch {
    bool registered = false; ///< in the epoll set, with `events`
    bool wanted = false;     ///< libcurl waits for `events` on it now
    bool ours = false;       ///< a connection made through onOpenSocket
    uint32_t events = 0;
  };
  Watch &watch(curl_socket_t s) {
    const size_t i = static_cast<size_t>(s);
    if (i >= watches_.size())
      watches_.resize(std::max<size_t>(i + 1, 64));
    return watches_[i];
  }

  int onSocketLazily(curl_socket_t s, int what, void *socketp) {
    Watch &w = watch(s);
    if (what == CURL_POLL_REMOVE) {
      w.wanted = false;
      if (w.registered && !w.ours) {
        epollCtl(EPOLL_CTL_DEL, s, nullptr);
        w.registered = false;
      }
      return 0;
    }
    const uint32_t events = epollEvents(what);
    w.wanted = true;
    if (!w.registered || w.events != events) {
      setEvents(s, events, w.registered);
      w.registered = true;
      w.events = events;
    }
    if (!socketp)
      curl_multi_assign(multi_, s, this);
    return 0;
  }

  /// CURLOPT_OPENSOCKETFUNCTION (with lazySockets): the socket libcurl
  /// would make, remembered as a connection's.
  static curl_socket_t onOpenSocket(void *user, curlsocktype,
                                    curl_sockaddr *addr) {
    auto *c = static_cast<Client *>(user);
    curl_socket_t s = ::socket(addr->family, addr->socktype, addr->protocol);
    if (s >= 0)
      c->watch(s) = Watch{false, false, true, 0};
    return s >= 0 ? s : CURL_SOCKET_BAD;
  }
  /// CURLOPT_CLOSESOCKETFUNCTION: the socket is forgotten as it closes
  /// (epoll drops it itself).
  static int onCloseSocket(void *user, curl_socket_t s) {
    auto *c = static_cast<Client *>(user);
    if (s >= 0)
      c->watch(s) = Watch{};
    return ::close(s);
  }

  /// libcurl's one timer: due in `ms` (0: now), or none (-1).
  static int onTimer(CURLM *, long ms, void *user) {
    auto *c = static_cast<Client *>(user);
    c->timerSet_ = ms >= 0;
    if (ms >= 0)
      c->timerDue_ = Clock::now() + std::chrono::milliseconds(ms);
    return 0;
  }

  static size_t onBody(char *p, size_t size, size_t n, void *user) {
    auto *t = static_cast<Transfer *>(user);
    if (!t->firstByte) {
      t->firstByte = true;
      counters().note(counters().latencies, t->sent);
      if (t->quiet && noneArriving())
        counters().note(counters().quietLatencies, t->sent);
      receiving(+1);
      curl_off_t length = -1;
      if (ClientSwitches::get().presize &&
          curl_easy_getinfo(t->handle->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T,
                            &length) == CURLE_OK &&
          length > 0) {
        const size_t want =
            static_cast<size_t>(std::min(length, kPresizeMaxBytes));
        // A ranged chunk (length given) is consumed in place and handed
        // back to the pool; a whole object becomes a record's string.
        const bool chunk = t->length >= 0;
        if (!BodyPool::get().take(want, t->result.body, chunk)) {
          if (chunk && t->result.body.reserveMapped(want))
            counters().bodiesMapped.fetch_add(1, std::memory_order_relaxed);
          else
            t->result.body.reserve(BodyPool::sizeClass(want));
          populate(t->result.body);
        }
      }
    }
    t->result.body.append(p, size * n);
    return size * n;
  }

  /// A fresh body of BodyPool::kMinBytes or more (a kept one would have
  /// served otherwise) has its pages faulted in by one
  /// madvise(MADV_POPULATE_WRITE) before its bytes arrive, instead of a
  /// fault per 4 KiB page as libcurl's pieces are appended: on the 2-core
  /// VM a fault costs ~14 us against ~6 us a page populated (webdataset
  /// over http, 2 epochs: 14,000 faults a run down to 5,000). Off:
  /// SLUICE_NO_REMOTE_BODY_POPULATE=1.
  static void populate(Body &body) {
    static const bool on = !switchedOff("SLUICE_NO_REMOTE_BODY_POPULATE");
    if (!on || body.capacity() < BodyPool::kMinBytes)
      return;
#ifdef MADV_POPULATE_WRITE
    const uintptr_t page = 4096;
    uintptr_t b = reinterpret_cast<uintptr_t>(body.data());
    uintptr_t e = b + body.capacity();
    b = (b + page - 1) & ~(page - 1);
    e &= ~(page - 1);
    // Kernels before 5.14 refuse the advice (EINVAL): the pages are then
    // faulted in as they are written, as without it.
    if (e > b &&
        ::madvise(reinterpret_cast<void *>(b), e - b, MADV_POPULATE_WRITE) == 0)
      counters().bodiesPopulated.fetch_add(1, std::memory_order_relaxed);
#endif
  }

  static size_t onHeader(char *p, size_t size, size_t n, void *user) {
    auto *t = static_cast<Transfer *>(user);
    std::string_view line(p, size * n);
    // Only the lines needed are looked at, by their first letter: every
    // response has a dozen.
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (line.size() <= name.size() + 1 || line[name.size()] != ':')
        return std::nullopt;
      for (size_t i = 0; i < name.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(line[i])) != name[i])
          return std::nullopt;
      std::string_view v = line.substr(name.size() + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
        v.remove_prefix(1);
      while (!v.empty() &&
             (v.back() == '\r' || v.back() == '\n' || v.back() == ' '))
        v.remove_suffix(1);
      return std::string(v);
    };
    if (line.empty())
      return size * n;
    char first =
        static_cast<char>(std::tolower(static_cast<unsigned char>(line[0])));
    if (first == 'h' && startsWith(line, "HTTP/")) {
      // A new response (after a redirect).
      t->result.etag.clear();
      t->contentRange.clear();
      t->bucketRegion.clear();
    } else if (first == 'e') {
      if (auto v = value("etag"))
        t->result.etag = *v;
    } else if (first == 'c') {
      if (auto v = value("content-range"))
        t->contentRange = *v;
    } else if (first == 'x') {
      if (auto v = value("x-amz-bucket-region"))
        t->bucketRegion = *v;
    }
    return size * n;
  }

  /// Options every request of a handle shares.
  void prepare(EasyHandle &h) {
    CURL *e = h.easy;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Client::onBody);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Client::onHeader);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    // The bytes must arrive as stored: no transparent decompression.
    curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
    if (sw_.largeReads)
      curl_easy_setopt(e, CURLOPT_BUFFERSIZE, kLargeReadBytes);
    if (lazy_) {
      curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &Client::onOpenSocket);
      curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, this);
      curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &Client::onCloseSocket);
      curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
    }
    h.prepared = true;
  }

  void start(const std::shared_ptr<Transfer> &t) {
    EasyHandle *h;
    if (!idle_.empty()) {
      h = idle_.back();
      idle_.pop_back();
      // A handle set up for another CA bundle starts again from
      // libcurl's defaults (the default bundle among them): a process
      // rarely reads with two.
      if (!sw_.keepHandles || h->caBundle != t->cfg->caBundle) {
        curl_easy_reset(h->easy);
        h->prepared = false;
        h->signedAs.reset();
        h->provider.clear();
        h->caBundle.clear();
      }
    } else {
      h = new EasyHandle; // kept for the process's life (idle_)
      h->easy = curl_easy_init();
    }
    if (!h->prepared)
      prepare(*h);
    CURL *e = h->easy;
    if (h->caBundle != t->cfg->caBundle) {
      curl_easy_setopt(e, CURLOPT_CAINFO, t->cfg->caBundle.c_str());
      h->caBundle = t->cfg->caBundle;
    }
    t->handle = h;
    t->client = this;
    t->result = Fetched();
    t->contentRange.clear();
    t->bucketRegion.clear();
    t->firstByte = false;
    t->errbuf[0] = 0;
    const RemoteConfig &cfg = *t->cfg;
    curl_easy_setopt(e, CURLOPT_URL, t->httpUrl.c_str());
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(cfg.timeoutSeconds * 1000));
    curl_easy_setopt(
        e, CURLOPT_CONNECTTIMEOUT_MS,
        static_cast<long>(std::min(cfg.timeoutSeconds, 30.0) * 1000));
    if (t->length >= 0) {
      std::string range = std::to_string(t->offset) + "-" +
                          std::to_string(t->offset + t->length - 1);
      curl_easy_setopt(e, CURLOPT_RANGE, range.c_str());
    } else {
      curl_easy_setopt(e, CURLOPT_RANGE, nullptr);
    }
    if (t->headers) {
      curl_slist_free_all(t->headers);
      t->headers = nullptr;
    }
    if (!t->ifNoneMatch.empty())
      t->headers = curl_slist_append(
          t->headers, ("If-None-Match: " + t->ifNoneMatch).c_str());
    const bool s3 = startsWith(t->url, "s3://");
    std::shared_ptr<const Credentials> signer =
        s3 ? t->credentials : std::shared_ptr<const Credentials>();
    // An object's plain GET is signed here (SigV4.cpp: the day's signing
    // key kept), the rest (listings, a request redirected) by libcurl.
    std::vector<std::string> own;
    t->ownSigned =
        signer && !t->libcurlSigns &&
        t->httpUrl.find('?') == std::string::npos &&
        signS3Get(t->httpUrl, *signer, cfg.region, std::time(nullptr), own);
    if (t->ownSigned)
      signer.reset();
    std::string provider = signer ? "aws:amz:" + cfg.region + ":s3" : "";
    if (signer != h->signedAs || provider != h->provider) {
      if (signer) {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, provider.c_str());
        curl_easy_setopt(e, CURLOPT_USERNAME, signer->accessKey.c_str());
        curl_easy_setopt(e, CURLOPT_PASSWORD, signer->secretKey.c_str());
      } else {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, nullptr);
        curl_easy_setopt(e, CURLOPT_USERNAME, nullptr);
        curl_easy_setopt(e, CURLOPT_PASSWORD, nullptr);
        // Setting CURLOPT_AWS_SIGV4 chose it as the authentication: back
        // to libcurl's default.
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
      }
      h->signedAs = std::move(signer);
      h->provider = std::move(provider);
    }
    if (t->ownSigned) {
      for (const std::string &line : own)
        t->headers = curl_slist_append(t->headers, line.c_str());
    } else if (s3) {
      t->headers =
          curl_slist_append(t->headers, (std::string("x-amz-content-sha256: ") +
                                         kEmptyPayloadSha256)
                                            .c_str());
      if (h->signedAs && !h->signedAs->sessionToken.empty())
        t->headers = curl_slist_append(
            t->headers,
            ("x-amz-security-token: " + h->signedAs->sessionToken).c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    t->sent = Clock::now();
    t->quiet = noneArriving();
    counters().requests.fetch_add(1, std::memory_order_relaxed);
    active_[e] = t;
    curl_multi_add_handle(multi_, e);
    // In flight in all of the process's clients.
    uint64_t n =
        counters().inFlight.fetch_add(1, std::memory_order_relaxed) + 1;
    std::atomic<uint64_t> &peak = counters().peakInFlight;
    for (uint64_t p = peak.load(); n > p && !peak.compare_exchange_weak(p, n);)
      ;
  }

  /// A response starts (+1) or stops (-1) arriving, in any of the
  /// process's clients: the time with at least one arriving is added to
  /// Counters::receiveNs as it passes.
  static void receiving(int delta) {
    Counters &c = counters();
    std::lock_guard<std::mutex> lock(c.receivingMu);
    Clock::time_point now = Clock::now();
    if (c.receiving.load(std::memory_order_relaxed) > 0)
      c.receiveNs.fetch_add(
          static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(
                  now - c.receivingSince)
                  .count()),
          std::memory_order_relaxed);
    c.receivingSince = now;
    c.receiving.fetch_add(delta, std::memory_order_relaxed);
  }
  static bool noneArriving() {
    return counters().receiving.load(std::memory_order_relaxed) == 0;
  }

  static bool retryableStatus(long s) {
    return s == 429 || s == 408 || s == 500 || s == 502 || s == 503 || s == 504;
  }
  static bool retryableCode(CURLcode c) {
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
    }
  }

  /// What to do about a TLS failure that retrying cannot mend: the
  /// server's certificate is not trusted, or the CA bundle is no good.
  static std::string tlsHint(CURLcode c, const RemoteConfig &cfg,
                             const char *detail) {
    // OpenSSL's words for a first answer that is not TLS: a plain HTTP
    // server at an https:// URL (retried: a handshake can fail in transit).
    if (c == CURLE_SSL_CONNECT_ERROR &&
        std::strstr(detail, "wrong version number"))
      return "; the server at this address does not answer in TLS: if it "
             "serves plain HTTP, write http:// (in the URL or the "
             "endpoint)";
    // OpenSSL's words when the certificate is trusted but made out to
    // other names than the URL's host.
    if (c == CURLE_PEER_FAILED_VERIFICATION &&
        (std::strstr(detail, "does not match") ||
         std::strstr(detail, "subject name")))
      return "; the server's TLS certificate does not name the host of the "
             "URL: write the host (name or address) it was issued for";
    if (c == CURLE_PEER_FAILED_VERIFICATION)
      return cfg.caBundle.empty()
                 ? "; the server's TLS certificate is not signed by a "
                   "certificate authority this host trusts: name the PEM "
                   "file of the one that signed it with the source's "
                   "remote.ca_bundle (or AWS_CA_BUNDLE)"
                 : "; the server's TLS certificate is not signed by a "
                   "certificate authority in " +
                       cfg.caBundle + " (" + cfg.caBundleFrom +
                       "), or does not name the host of the URL";
    if (c == CURLE_SSL_CACERT_BADFILE)
      return "; " + cfg.caBundle + " (" + cfg.caBundleFrom +
             ") holds no certificate this host's TLS library can use: it "
             "must be PEM";
    return "";
  }

  /// "HTTP 404 (NoSuchKey: The specified key does not exist.)"; for an
  /// S3 bucket in another region than the requests were signed for (S3's
  /// 301 PermanentRedirect or 400 AuthorizationHeaderMalformed), which
  /// region to set.
  static std::string describeStatus(long status, std::string_view body,
                                    const Transfer &t) {
    std::string s = "HTTP " + std::to_string(status);
    std::string code = xmlFirst(body, "Code"), msg = xmlFirst(body, "Message");
    if (!code.empty())
      s += " (" + code + (msg.empty() ? "" : ": " + msg) + ")";
    else if (status == 404)
      s += " (not found)";
    else if (status == 403)
      s += " (forbidden)";
    std::string region = bucketRegionOf(body, t.bucketRegion);
    if (!region.empty() && region != t.cfg->region &&
        startsWith(t.url, "s3://")) {
      s += "; the bucket is in region " + region +
           ", and the requests were made for " + t.cfg->region + " (" +
           t.cfg->regionSource +
           "): set the source's remote.region: " + region +
           " (or AWS_REGION=" + region + ")";
    } else if ((status == 403 || status == 401) && t.credentials) {
      s += "; check the credentials (from " + t.cfg->credentialSource +
           ") and the bucket's permissions";
    } else if ((status == 403 || status == 401) && startsWith(t.url, "s3://")) {
      if (t.cfg->unsigned_)
        s += "; the request was unsigned (remote.sign: false), and the "
             "bucket does not allow anonymous reads: leave remote.sign out "
             "to sign with the host's credentials";
      else
        s += "; the request was anonymous (no AWS_ACCESS_KEY_ID, profile or "
             "role was found): give credentials, or read a public bucket";
    }
    return s;
  }

  /// The bucket's region as an S3 error answer names it: <Region> (400
  /// AuthorizationHeaderMalformed), the x-amz-bucket-region header (301
  /// PermanentRedirect, 403), or the host of <Endpoint>
  /// (bucket.s3.REGION.amazonaws.com, bucket.s3-REGION.amazonaws.com).
  static std::string bucketRegionOf(std::string_view body,
                                    const std::string &header) {
    std::string region = xmlFirst(body, "Region");
    if (region.empty())
      region = header;
    if (region.empty()) {
      std::string ep = xmlFirst(body, "Endpoint");
      size_t end = ep.find(".amazonaws.com");
      size_t at = ep.rfind(".s3.", end);
      if (at == std::string::npos)
        at = ep.rfind(".s3-", end);
      if (end != std::string::npos && at != std::string::npos && at + 4 < end)
        region = ep.substr(at + 4, end - at - 4);
    }
    // A region is letters, digits and dashes (eu-west-1): anything else
    // (a malformed answer) is not repeated into the message.
    for (char c : region)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-')
        return "";
    return region;
  }

  void finish(CURL *e, CURLcode code) {
    auto it = active_.find(e);
    std::shared_ptr<Transfer> t = it->second;
    active_.erase(it);
    counters().inFlight.fetch_sub(1, std::memory_order_relaxed);
    if (t->firstByte)
      receiving(-1);
    curl_multi_remove_handle(multi_, e);
    long status = 0, redirects = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(e, CURLINFO_REDIRECT_COUNT, &redirects);
    // The transfer's buffer goes with it: nothing may write there now.
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, nullptr);
    idle_.push_back(t->handle);
    t->handle = nullptr;
    Fetched &r = t->result;
    r.status = status;
    counters().bytes.fetch_add(r.body.size(), std::memory_order_relaxed);
    bool retry = false;
    if (code != CURLE_OK) {
      r.error = code == CURLE_PARTIAL_FILE
                    ? "truncated body: the connection closed after " +
                          std::to_string(r.body.size()) + " bytes"
                    : std::string(curl_easy_strerror(code)) +
                          (t->errbuf[0] ? std::string(": ") + t->errbuf : "") +
                          tlsHint(code, *t->cfg, t->errbuf);
      retry = retryableCode(code);
    } else if (status == 200 || status == 206) {
      r.ok = true;
      r.totalSize = static_cast<int64_t>(r.body.size());
      if (status == 206) {
        size_t slash = t->contentRange.rfind('/');
        if (slash != std::string::npos && t->contentRange[slash + 1] != '*')
          r.totalSize =
              std::strtoll(t->contentRange.c_str() + slash + 1, nullptr, 10);
      }
    } else if (status == 304 && !t->ifNoneMatch.empty()) {
      // The cached version is current (startObjectFetch, RemoteStream).
      r.ok = true;
      r.notModified = true;
      r.body.clear();
    } else if (status == 416 && t->offset == 0) {
      // A range of an empty object: nothing to read.
      r.ok = true;
      r.body.clear();
      r.totalSize = 0;
    } else {
      r.error = describeStatus(status, r.body.view(), *t);
      retry = retryableStatus(status);
    }
    if (!r.ok && t->ownSigned && (status == 401 || status == 403) &&
        redirects > 0) {
      // Redirected to another host (an S3 region's endpoint): libcurl did
      // not carry the Authorization header there. Again, signed by libcurl
      // for wherever it is sent.
      t->libcurlSigns = true;
      t->due = Clock::now();
      delayed_.push_back(t);
      return;
    }
    if (!r.ok && retry && t->attempt < t->cfg->retries) {
      // Capped exponential backoff with jitter: half fixed, half random,
      // so retries of many readers spread out instead of arriving together.
      ++t->attempt;
      counters().retries.fetch_add(1, std::memory_order_relaxed);
      double cap =
          std::min<double>(t->cfg->maxBackoffMs,
                           t->cfg->backoffMs * std::pow(2.0, t->attempt - 1));
      std::uniform_real_distribution<double> jitter(0.5, 1.0);
      t->due = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(
                                  cap * jitter(rng_) * 1000));
      delayed_.push_back(t);
      return;
    }
    if (r.ok)
      counters().note(counters().durations, t->sent);
    if (!r.ok) {
      counters().failures.fetch_add(1, std::memory_order_relaxed);
      if (t->attempt > 0)
        r.error += " (after " + std::to_string(t->attempt + 1) + " attempts)";
    }
    if (t->headers) {
      curl_slist_free_all(t->headers);
      t->headers = nullptr;
    }
    if (!onClientThread())
      counters().finishedByReaders.fetch_add(1, std::memory_order_relaxed);
    t->markFinished();
  }

  /// Starts what was submitted and the retries that are due: how long the
  /// loop may then wait for the next retry (at most a second).
  int startReady() {
    std::vector<std::shared_ptr<Transfer>> fresh;
    {
      std::lock_guard<std::mutex> lock(m_);
      fresh.assign(incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    for (auto &t : fresh)
      start(t);
    Clock::time_point now = Clock::now();
    int waitMs = 1000;
    for (size_t i = 0; i < delayed_.size();) {
      if (delayed_[i]->due <= now) {
        std::shared_ptr<Transfer> t = delayed_[i];
        delayed_.erase(delayed_.begin() + static_cast<long>(i));
        start(t);
      } else {
        waitMs = std::min<int>(
            waitMs, static_cast<int>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            delayed_[i]->due - now)
                            .count()) +
                        1);
        ++i;
      }
    }
    return waitMs;
  }

  void finishDone() {
    int queued = 0;
    while (CURLMsg *msg = curl_multi_info_read(multi_, &queued))
      if (msg->msg == CURLMSG_DONE)
        finish(msg->easy_handle, msg->data.result);
  }

  /// How long a wait may last after startReady(): the next retry's due
  /// time, and libcurl's timer.
  int waitBound(int waitMs) const {
    if (timerSet_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      timerDue_ - Clock::now())
                      .count();
      waitMs = std::min<int>(
          waitMs, left <= 0 ? 0 : static_cast<int>(std::min<long>(left, 1000)));
    }
    return waitMs;
  }

  /// Hands the events epoll_wait returned to libcurl.
  void dispatch(const epoll_event *events, int n) {
    int running = 0;
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_) {
        uint64_t count;
        [[maybe_unused]] ssize_t r = ::read(wake_, &count, sizeof count);
        continue;
      }
      uint32_t ev = events[i].events;
      if (lazy_ && static_cast<size_t>(fd) < watches_.size() &&
          watches_[static_cast<size_t>(fd)].registered &&
          !watches_[static_cast<size_t>(fd)].wanted) {
        // An idle connection in libcurl's cache (closed by the server):
        // out of the set until a transfer wants it again.
        epollCtl(EPOLL_CTL_DEL, fd, nullptr);
        watches_[static_cast<size_t>(fd)].registered = false;
        continue;
      }
      int flags = ((ev & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                  ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0);
      // A closed or failed connection: libcurl finds out by reading or
      // writing it, whichever its transfer waits for.
      if (ev & (EPOLLERR | EPOLLHUP))
        flags |= CURL_CSELECT_IN | CURL_CSELECT_OUT;
      curl_multi_socket_action(multi_, fd, flags, &running);
    }
  }

  /// libcurl's timer, when due.
  void runTimer() {
    if (timerSet_ && Clock::now() >= timerDue_) {
      // One-shot: libcurl sets the next one (onTimer) as it runs.
      timerSet_ = false;
      int running = 0;
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
  }

  /// ClientSwitches::socketEvents: epoll says which connections have
  /// data, and libcurl runs only their transfers (and those its timer
  /// names). With waiterDrives the thread holds drive_ while it works and
  /// lets go of it while it waits; when readers drove during its last wait
  /// (and none sleeps for a response), it stands by: it waits for its
  /// wake-up descriptor only (requests queued while a reader drove,
  /// retries, a reader left waiting), at most kStandbyMs, instead of for
  /// every response, which the readers take themselves.
  void eventLoop() {
    static constexpr int kStandbyMs = 10;
    epoll_event events[64];
    std::unique_lock<std::mutex> drive(drive_, std::defer_lock);
    if (drives_)
      drive.lock();
    bool othersDrove = false; // during this thread's last wait
    for (;;) {
      int waitMs = waitBound(startReady());
      const bool standby = drives_ && othersDrove && sleepers_.load() == 0;
      const uint64_t before = passes_;
      int n;
      if (drives_)
        drive.unlock();
      if (standby) {
        pollfd wake{wake_, POLLIN, 0};
        ::poll(&wake, 1, std::min(waitMs, kStandbyMs));
        n = 0;
      } else {
        n = ::epoll_wait(epoll_, events, 64, waitMs);
      }
      if (drives_) {
        drive.lock();
        othersDrove = passes_ != before;
        // This thread stood by, or a reader drove meanwhile (the events
        // returned may be read already): what is ready now.
        if (standby || othersDrove)
          n = ::epoll_wait(epoll_, events, 64, 0);
      }
      dispatch(events, n);
      runTimer();
      finishDone();
    }
  }

  /// With SLUICE_NO_REMOTE_SOCKET_EVENTS: curl_multi_perform runs every
  /// transfer at each wake-up.
  void pollLoop() {
    for (;;) {
      int waitMs = startReady();
      int running = 0;
      curl_multi_perform(multi_, &running);
      finishDone();
      curl_multi_poll(multi_, nullptr, 0, waitMs, nullptr);
    }
  }

  const ClientSwitches &sw_;
  const unsigned madeAfter_; ///< forks() when it was made
  CURLM *multi_ = nullptr;
  bool events_ = false;
  bool lazy_ = false; ///< ClientSwitches::lazySockets, with events_
  /// ClientSwitches::waiterDrives, with events_: libcurl's multi handle and
  /// what the client thread owns below are used under drive_ by whichever
  /// thread holds it.
  bool drives_ = false;
  std::mutex drive_;
  uint64_t passes_ = 0; ///< passes made by other threads (under drive_)
  std::atomic<int> sleepers_{0}; ///< readers waiting while others drive
  int epoll_ = -1, wake_ = -1;
  std::mutex m_;
  std::deque<std::shared_ptr<Transfer>> incoming_;
  // Owned by the client thread:
  bool timerSet_ = false;
  Clock::time_point timerDue_;
  std::unordered_map<CURL *, std::shared_ptr<Transfer>> active_;
  std::vector<std::shared_ptr<Transfer>> delayed_;
  std::vector<EasyHandle *> idle_;
  std::vector<Watch> watches_; ///< by descriptor (lazy_)
  std::mt19937_64 rng_{0x5eed};
};

Fetched &Transfer::wait() {
  std::unique_lock<std::mutex> lock(m);
  bool slept = false;
  if (!finished.load(std::memory_order_acquire) && owner &&
      owner->drivesTransfers()) {
    lock.unlock();
    slept = !owner->lead(*this);
    lock.lock();
  }
  if (!finished.load(std::memory_order_acquire)) {
    const Clock::time_point from = Clock::now();
    cv.wait(lock, [&] { return finished.load(std::memory_order_acquire); });
    if (Clock::now() - from > std::chrono::milliseconds(1))
      counters().readerStalls.fetch_add(1, std::memory_order_relaxed);
  }
  if (slept)
    owner->sleeperDone();
  return result;
}

//===----------------------------------------------------------------------===//
// Configuration
//===----------------------------------------------------------------------===//

std::string homeDir() { return envOr("HOME", "/root"); }

/// The [profile] section of an INI file (~/.aws/credentials): key -> value.
std::optional<std::map<std::string, std::string>>
iniSection(const std::string &path, const std::string &section) {
  std::ifstream in(path);
  if (!in)
    return std::nullopt;
  std::map<std::string, std::string> out;
  bool inside = false, found = false;
  std::string line;
  auto trim = [](std::string s) {
    size_t b = s.find_first_not_of(" \t\r");
    size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';')
      continue;
    if (line.front() == '[' && line.back() == ']') {
      std::string name = trim(line.substr(1, line.size() - 2));
      if (startsWith(name, "profile "))
        name = trim(name.substr(8));
      inside = name == section;
      found |= inside;
      continue;
    }
    size_t eq = line.find('=');
    if (inside && eq != std::string::npos)
      out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  if (!found)
    return std::nullopt;
  return out;
}

} // namespace

SubmitBatch::SubmitBatch() {
  if (burstsOn())
    ++heldBack().depth;
}

SubmitBatch::~SubmitBatch() {
  if (!burstsOn())
    return;
  HeldBack &h = heldBack();
  if (--h.depth > 0)
    return;
  if (h.requests > 0) {
    counters().bursts.fetch_add(1, std::memory_order_relaxed);
    counters().burstRequests.fetch_add(h.requests, std::memory_order_relaxed);
  }
  h.requests = 0;
  std::vector<Client *> clients;
  clients.swap(h.clients);
  for (Client *c : clients)
    c->sendHeldBack();
}

bool RequestBursts::on() { return burstsOn(); }

bool RequestBursts::topUp(size_t depth, size_t unasked, uint64_t stalls) {
  if (!burstsOn() || depth <= 1)
    return unasked > 0;
  if (!started_) {
    // The process's stalls so far are not this window's.
    started_ = true;
    stallsSeen_ = stalls;
  }
  if (stalls != stallsSeen_) {
    stallsSeen_ = stalls;
    burst_ = std::max<size_t>(1, burst_ / 2);
    calm_ = 0;
  } else if (++calm_ >= depth) {
    calm_ = 0;
    burst_ *= 2;
  }
  burst_ = std::min(burst_, depth - 1);
  return unasked >= burst_;
}

uint64_t readerStalls() {
  return counters().readerStalls.load(std::memory_order_relaxed);
}

PendingFetch::~PendingFetch() = default;

Status checkSourceUrl(const std::string &kind, const std::string &param,
                      const std::string &given, bool objectNeeded) {
  // A scheme: a letter, then letters, digits, '+', '-' or '.', then "://".
  size_t sep = given.find("://");
  if (sep == std::string::npos || sep == 0 ||
      !std::isalpha(static_cast<unsigned char>(given[0])))
    return Status::ok();
  for (size_t i = 0; i < sep; ++i) {
    char c = given[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' &&
        c != '.')
      return Status::ok();
  }
  std::string scheme = given.substr(0, sep);
  std::string lower = scheme;
  for (char &c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string at = kind + ": " + param + ": '" + given + "': ";
  bool known =
      lower == "s3" || lower == "http" || lower == "https" || lower == "file";
  if (known && scheme != lower)
    return Status::error(at + "write the scheme in lowercase (" + lower +
                         "://)");
  if (!known) {
    std::string hint;
    if (lower == "gs" || lower == "gcs")
      hint = " (Google Cloud Storage: its S3-compatible API, as s3://BUCKET/"
             "KEY with remote: {endpoint: https://storage.googleapis.com} and "
             "an HMAC key)";
    else if (lower == "r2" || lower == "minio" || lower == "ceph")
      hint = " (an S3-compatible store: s3://BUCKET/KEY with its "
             "remote.endpoint)";
    return Status::error(at + scheme +
                         ":// URLs are not read; sluice reads s3://, "
                         "https://, http:// and file://" +
                         hint);
  }
  std::string rest = given.substr(sep + 3);
  if (lower == "s3") {
    size_t slash = rest.find('/');
    std::string bucket = rest.substr(0, slash);
    if (bucket.empty())
      return Status::error(at + "an s3:// URL names its bucket first: "
                                "s3://BUCKET/KEY");
    if (objectNeeded &&
        (slash == std::string::npos || slash + 1 == rest.size()))
      return Status::error(at + "names bucket '" + bucket +
                           "' but no object in it: s3://" + bucket +
                           "/KEY, or a glob of keys (s3://" + bucket +
                           "/shards/*.tar)");
  } else if (lower == "http" || lower == "https") {
    if (rest.empty() || rest[0] == '/')
      return Status::error(at + "an " + lower +
                           ":// URL names its host first: " + lower +
                           "://HOST/PATH");
  }
  return Status::ok();
}

bool isRemoteUrl(std::string_view name) {
  return startsWith(name, "s3://") || startsWith(name, "http://") ||
         startsWith(name, "https://");
}

std::string stripFileUrl(const std::string &name) {
  if (!isFileUrl(name))
    return name;
  std::string rest = name.substr(7);
  // file://localhost/x and file:///x are /x.
  if (startsWith(rest, "localhost/"))
    rest = rest.substr(9);
  return rest;
}

namespace {

/// Whether a source's parameters name an s3:// URL anywhere (its `remote`
/// block aside): only then are credentials looked for, so that an https://
/// source on a host whose default profile signs in through SSO, or whose
/// role cannot be had, reads as it did without them.
bool namesS3(const Value &v) {
  if (v.isString())
    return startsWith(v.asString(), "s3://");
  if (v.isList()) {
    for (const Value &x : v.items())
      if (namesS3(x))
        return true;
  } else if (v.isMap()) {
    for (const auto &[key, x] : v.entries())
      if (key != "remote" && namesS3(x))
        return true;
  }
  return false;
}

/// A profile's credentials: keys of its own, or a provider of keys that
/// expire (a credential_process, an assumed role).
struct ProfileCredentials {
  std::shared_ptr<Credentials> keys;
  std::shared_ptr<CredentialProvider> provider;
  std::string source;    ///< for messages and stats: never the keys
  std::string sourceKey; ///< tells sources apart (a key id, a place)
};

/// What to run instead when sluice cannot get a profile's keys itself.
std::string exportHint(const std::string &profile) {
  return "export them first (eval \"$(aws configure export-credentials "
         "--profile " +
         profile + " --format env)\")";
}

/// Profile `name`'s credentials, in the order AWS's SDKs take them within a
/// profile: an assumed role (role_arn, with source_profile or
/// credential_source, or with web_identity_token_file), then SSO (the keys
/// of the role IAM Identity Center gives for a cached sign-in), then keys in
/// the credentials file, then a credential_process (in either file), then
/// keys in the config file. Values in the credentials file's section win
/// over the config file's. Null when the profile gives none; an error when
/// it names a way sluice does not take (an MFA code) or names it wrong.
/// `chain`: the profiles whose source this one is (a role's
/// source_profile may itself assume a role), to refuse a cycle.
Expected<std::optional<ProfileCredentials>>
profileCredentials(const std::string &kind, const std::string &name,
                   const std::string &credFile, const std::string &configFile,
                   const std::string &region, std::vector<std::string> chain) {
  auto cred = iniSection(credFile, name);
  auto conf = iniSection(configFile, name);
  auto in = [](const std::optional<std::map<std::string, std::string>> &sec,
               const char *key) -> const std::string * {
    if (!sec)
      return nullptr;
    auto it = sec->find(key);
    return it == sec->end() ? nullptr : &it->second;
  };
  auto value = [&](const char *key) -> std::string {
    if (const std::string *v = in(cred, key))
      return *v;
    const std::string *v = in(conf, key);
    return v ? *v : "";
  };
  auto where = [&](const char *key) {
    return "profile '" + name + "' of " +
           (in(cred, key) ? credFile : configFile);
  };
  auto keysIn =
      [&](const std::optional<std::map<std::string, std::string>> &sec,
          const std::string &file) -> std::optional<ProfileCredentials> {
    const std::string *ak = in(sec, "aws_access_key_id");
    const std::string *sk = in(sec, "aws_secret_access_key");
    if (!ak || !sk)
      return std::nullopt;
    ProfileCredentials out;
    out.keys = std::make_shared<Credentials>();
    out.keys->accessKey = *ak;
    out.keys->secretKey = *sk;
    if (const std::string *t = in(sec, "aws_session_token"))
      out.keys->sessionToken = *t;
    out.source = "profile '" + name + "' of " + file;
    out.sourceKey = "keys " + *ak;
    return out;
  };
  auto fail = [&](const std::string &msg) {
    return Status::error(kind + ": " + msg);
  };

  if (std::string role = value("role_arn"); !role.empty()) {
    std::string at = where("role_arn");
    if (chain.size() >= 8)
      return fail(at + ": its role's source profiles go more than 8 deep");
    if (!value("mfa_serial").empty())
      return fail(at + " assumes role " + role +
                  " with an MFA code (mfa_serial), which sluice cannot ask "
                  "for: " +
                  exportHint(name));
    AssumeRoleParams ar;
    ar.roleArn = role;
    ar.region = region;
    ar.where = at;
    ar.externalId = value("external_id");
    ar.sessionName = value("role_session_name");
    if (ar.sessionName.empty())
      ar.sessionName = "sluice-" + std::to_string(::getpid());
    if (std::string d = value("duration_seconds"); !d.empty()) {
      char *end = nullptr;
      long v = std::strtol(d.c_str(), &end, 10);
      if (*end != '\0' || v < 900 || v > 43200)
        return fail(at + ": duration_seconds is '" + d +
                    "': give whole seconds from 900 to 43200");
      ar.durationSeconds = v;
    }
    std::string sourceProfile = value("source_profile");
    std::string credSource = value("credential_source");
    std::string tokenFile = value("web_identity_token_file");
    int ways =
        !sourceProfile.empty() + !credSource.empty() + !tokenFile.empty();
    if (ways != 1)
      return fail(at + " assumes role " + role +
                  (ways == 0 ? " without saying with which keys: give it "
                               "source_profile (a profile with keys) or "
                               "credential_source (Environment, "
                               "Ec2InstanceMetadata or EcsContainer)"
                             : " and gives more than one of source_profile, "
                               "credential_source and "
                               "web_identity_token_file: keep one"));
    ProfileCredentials out;
    if (!tokenFile.empty()) {
      out.provider = webIdentityCredentials(region, tokenFile, role,
                                            value("role_session_name"));
      out.source = out.provider->source() + " (" + at + ")";
      out.sourceKey = "web " + tokenFile + " " + role;
      return std::optional<ProfileCredentials>(std::move(out));
    }
    if (!sourceProfile.empty()) {
      if (sourceProfile == name) {
        // A profile may be its own source: its keys assume the role.
        auto own = keysIn(cred, credFile);
        if (!own)
          own = keysIn(conf, configFile);
        if (!own)
          return fail(at + " names itself as source_profile but holds no "
                           "aws_access_key_id and aws_secret_access_key");
        ar.source = staticCredentials(own->keys, own->source);
        ar.sourceKey = own->sourceKey;
      } else {
        chain.push_back(name);
        if (std::find(chain.begin(), chain.end(), sourceProfile) != chain.end())
          return fail(at + ": source_profile '" + sourceProfile +
                      "' leads back to profile '" + sourceProfile +
                      "' (a cycle)");
        auto src = profileCredentials(kind, sourceProfile, credFile, configFile,
                                      region, chain);
        if (!src)
          return src.status();
        if (!*src)
          return fail(at + ": source_profile '" + sourceProfile +
                      "' is not a profile with credentials in " + credFile +
                      " or " + configFile);
        ProfileCredentials &sp = **src;
        ar.source =
            sp.keys ? staticCredentials(sp.keys, sp.source) : sp.provider;
        ar.sourceKey = sp.sourceKey;
      }
    } else if (credSource == "Environment") {
      auto keys = std::make_shared<Credentials>();
      keys->accessKey = envOr("AWS_ACCESS_KEY_ID");
      keys->secretKey = envOr("AWS_SECRET_ACCESS_KEY");
      keys->sessionToken = envOr("AWS_SESSION_TOKEN");
      if (keys->accessKey.empty() || keys->secretKey.empty())
        return fail(at + ": credential_source is Environment, and "
                         "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not "
                         "both set");
      ar.sourceKey = "keys " + keys->accessKey;
      ar.source = staticCredentials(std::move(keys), "the environment");
    } else if (credSource == "Ec2InstanceMetadata" ||
               credSource == "EcsContainer") {
      bool ec2 = credSource == "Ec2InstanceMetadata";
      ar.source = ec2 ? instanceCredentials() : containerCredentials();
      if (!ar.source)
        return fail(at + ": credential_source is " + credSource + ", and " +
                    (ec2 ? "AWS_EC2_METADATA_DISABLED is true"
                         : "neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI "
                           "nor AWS_CONTAINER_CREDENTIALS_FULL_URI is set"));
      ar.sourceKey = ar.source->source();
    } else {
      return fail(at + ": credential_source is '" + credSource +
                  "': give Environment, Ec2InstanceMetadata or EcsContainer");
    }
    out.provider = assumeRoleCredentials(ar);
    out.source = out.provider->source();
    out.sourceKey = "role " + role + " " + ar.sourceKey;
    return std::optional<ProfileCredentials>(std::move(out));
  }
  // Single sign-on (IAM Identity Center): the role's keys for the sign-in
  // `aws sso login` cached; the sso_session's section (`[sso-session
  // NAME]` in the config file) gives the start URL and region, or the
  // profile itself does (the older form).
  std::string session = value("sso_session");
  if (!session.empty() || !value("sso_start_url").empty()) {
    SsoParams sp;
    sp.profile = name;
    sp.where = where(session.empty() ? "sso_start_url" : "sso_session");
    sp.accountId = value("sso_account_id");
    sp.roleName = value("sso_role_name");
    sp.session = session;
    if (!session.empty()) {
      auto sec = iniSection(configFile, "sso-session " + session);
      if (!sec)
        return fail(sp.where + " names sso_session '" + session + "', and " +
                    configFile + " has no [sso-session " + session +
                    "] section");
      sp.startUrl = (*sec)["sso_start_url"];
      sp.region = (*sec)["sso_region"];
    } else {
      sp.startUrl = value("sso_start_url");
      sp.region = value("sso_region");
    }
    std::string missing;
    for (const auto &[what, v] : {std::pair<const char *, const std::string &>{
                                      "sso_start_url", sp.startUrl},
                                  {"sso_region", sp.region},
                                  {"sso_account_id", sp.accountId},
                                  {"sso_role_name", sp.roleName}})
      if (v.empty())
        missing += (missing.empty() ? "" : ", ") + std::string(what);
    if (!missing.empty())
      return fail(sp.where + " signs in through SSO but gives no " + missing +
                  (session.empty() ? ""
                                   : " (in the profile or its [sso-session " +
                                         session + "] section)") +
                  ": add them as `aws configure sso` writes them");
    ProfileCredentials out;
    out.provider = ssoCredentials(sp);
    out.source = out.provider->source();
    out.sourceKey =
        "sso " + sp.startUrl + " " + sp.accountId + " " + sp.roleName;
    return std::optional<ProfileCredentials>(std::move(out));
  }
  if (auto own = keysIn(cred, credFile))
    return own;
  if (std::string command = value("credential_process"); !command.empty()) {
    ProfileCredentials out;
    out.provider = processCredentials(command, where("credential_process"));
    out.source = out.provider->source();
    out.sourceKey = "process " + command;
    return std::optional<ProfileCredentials>(std::move(out));
  }
  if (!value("web_identity_token_file").empty())
    return fail(where("web_identity_token_file") +
                " gives web_identity_token_file without role_arn: name the "
                "role to assume");
  return keysIn(conf, configFile);
}

} // namespace

Expected<std::shared_ptr<const RemoteConfig>>
remoteConfigFor(const std::string &kind, const Value &params,
                const std::string &base) {
  if (std::string why; !curlLoadable(why))
    return Status::error(kind + ": " + why);
  auto cfg = std::make_shared<RemoteConfig>();
  const Value &r = params["remote"];
  auto str = [&](const char *name) -> std::string {
    const Value &v = r[name];
    return v.isString() ? v.asString() : "";
  };
  // The profile: named in the spec, else AWS_PROFILE's, else "default".
  // Its section of the config file (~/.aws/config, as `aws configure`
  // writes it: [default], [profile NAME]) gives the region, endpoint_url
  // and keys that nothing before it in AWS's order gives.
  std::string profile = str("profile");
  bool explicitProfile = !profile.empty();
  if (profile.empty())
    profile = envOr("AWS_PROFILE", "default");
  std::string configFile = envOr("AWS_CONFIG_FILE", homeDir() + "/.aws/config");
  std::optional<std::map<std::string, std::string>> conf =
      iniSection(configFile, profile);
  auto confValue = [&](const char *key) -> std::string {
    if (!conf)
      return "";
    auto it = conf->find(key);
    return it == conf->end() ? "" : it->second;
  };
  std::string confSource = "profile '" + profile + "' of " + configFile;
  cfg->endpoint = str("endpoint");
  if (cfg->endpoint.empty())
    cfg->endpoint = envOr("AWS_ENDPOINT_URL_S3", envOr("AWS_ENDPOINT_URL"));
  if (cfg->endpoint.empty())
    cfg->endpoint = confValue("endpoint_url");
  std::pair<const char *, std::string> regions[] = {
      {"remote.region", str("region")},
      {"AWS_REGION", envOr("AWS_REGION")},
      {"AWS_DEFAULT_REGION", envOr("AWS_DEFAULT_REGION")},
      {nullptr, confValue("region")}};
  for (auto &[from, region] : regions)
    if (!region.empty()) {
      cfg->region = region;
      cfg->regionSource = from ? from : confSource;
      break;
    }
  if (r["request_timeout"].isNumber())
    cfg->timeoutSeconds = r["request_timeout"].asDouble();
  if (r["concurrency"].isNumber()) {
    cfg->concurrency = static_cast<int>(r["concurrency"].asInt());
    cfg->concurrencyPinned = true;
  }
  if (r["retries"].isNumber())
    cfg->retries = static_cast<int>(r["retries"].asInt());
  const Value &chunk = r["chunk_size"];
  if (chunk.isNumber())
    cfg->chunkBytes = static_cast<size_t>(chunk.asInt());
  else if (chunk.isString()) {
    std::optional<int64_t> n = parseByteSize(chunk.asString());
    if (!n || *n <= 0)
      return Status::error(kind + ": remote.chunk_size: '" + chunk.asString() +
                           "' is not a byte size (write e.g. 4MiB)");
    cfg->chunkBytes = static_cast<size_t>(*n);
  }
  if (std::string dir = str("cache"); !dir.empty()) {
    if (dir[0] != '/' && !base.empty())
      dir = base + "/" + dir;
    int64_t limit = int64_t(10) << 30;
    const Value &size = r["cache_size"];
    if (size.isNumber())
      limit = size.asInt();
    else if (size.isString()) {
      std::optional<int64_t> n = parseByteSize(size.asString());
      if (!n || *n <= 0)
        return Status::error(kind + ": remote.cache_size: '" + size.asString() +
                             "' is not a byte size (write e.g. 20GiB)");
      limit = *n;
    }
    if (limit <= 0)
      return Status::error(kind + ": remote.cache_size must be positive (the "
                                  "cache is bounded; write e.g. 20GiB)");
    Expected<std::shared_ptr<ObjectCache>> c = ObjectCache::open(dir, limit);
    if (!c)
      return Status::error(kind + ": " + c.status().message());
    cfg->cache = c.take();
  }
  cfg->caBundleFrom = "remote.ca_bundle";
  cfg->caBundle = str("ca_bundle");
  if (r["ca_bundle"].isString() && cfg->caBundle.empty())
    return Status::error(kind + ": remote.ca_bundle is empty: name the PEM "
                                "file of the certificate authorities, or "
                                "leave it out (AWS_CA_BUNDLE, else the "
                                "system's store)");
  if (cfg->caBundle.empty()) {
    cfg->caBundle = envOr("AWS_CA_BUNDLE");
    cfg->caBundleFrom = "AWS_CA_BUNDLE";
  } else if (cfg->caBundle[0] != '/' && !base.empty()) {
    cfg->caBundle = base + "/" + cfg->caBundle;
  }
  if (!cfg->caBundle.empty()) {
    // Checked now, not at the first https request: a wrong path is the
    // spec's (or the environment's) mistake.
    struct stat st;
    std::string why;
    if (::stat(cfg->caBundle.c_str(), &st) != 0)
      why = std::strerror(errno);
    else if (!S_ISREG(st.st_mode))
      why = "not a file";
    else if (::access(cfg->caBundle.c_str(), R_OK) != 0)
      why = std::strerror(errno);
    else {
      // A PEM bundle holds "-----BEGIN CERTIFICATE-----" blocks (OpenSSL's
      // "TRUSTED CERTIFICATE" too); anything else (a DER certificate, a
      // private key) would fail every https request. Read up to the first
      // block only: each remote pipeline checks it (a system store is
      // ~200 KB, its first block on its first lines).
      std::ifstream in(cfg->caBundle, std::ios::binary);
      bool pem = false;
      for (std::string line; !pem && std::getline(in, line);)
        pem = line.find("-----BEGIN CERTIFICATE-----") != std::string::npos ||
              line.find("-----BEGIN TRUSTED CERTIFICATE-----") !=
                  std::string::npos;
      if (!pem)
        why = "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)";
    }
    if (!why.empty())
      return Status::error(kind + ": " + cfg->caBundleFrom + ": cannot use '" +
                           cfg->caBundle + "': " + why +
                           " (it names the PEM file of the certificate "
                           "authorities that https servers are checked "
                           "against)");
  }
  cfg->concurrency = std::max(1, cfg->concurrency);
  cfg->retries = std::max(0, cfg->retries);
  cfg->chunkBytes = std::max<size_t>(cfg->chunkBytes, 4096);

  // Credentials, in AWS's order: a profile named in the spec, else the
  // environment's keys, else a web identity token (STS), else AWS_PROFILE's
  // (or the default) profile, else a container's credentials endpoint, else
  // the EC2 instance's role (AwsCredentials.cpp), else anonymous. A
  // profile's keys are in the credentials file or, as the AWS CLI also
  // reads them, in its section of the config file; or it assumes a role, or
  // runs a credential_process (profileCredentials).
  std::string credFile =
      envOr("AWS_SHARED_CREDENTIALS_FILE", homeDir() + "/.aws/credentials");
  // The profile's own way (profileCredentials). Keys that expire are
  // fetched now, so that a role that cannot be had or a credential_process
  // that fails is the spec's error, not each object's.
  auto fromProfile = [&]() -> Expected<bool> {
    auto pc = profileCredentials(kind, profile, credFile, configFile,
                                 cfg->region, {});
    if (!pc)
      return pc.status();
    if (!*pc)
      return false;
    ProfileCredentials &c = **pc;
    cfg->credentialSource = c.source;
    if (c.keys) {
      cfg->credentials = std::move(c.keys);
      return true;
    }
    std::string error;
    if (!c.provider->get(error))
      return Status::error(kind + ": " + error);
    cfg->provider = std::move(c.provider);
    return true;
  };
  if (!namesS3(params)) {
    cfg->credentialSource = "none (no s3:// URL)";
  } else if (r["sign"].isBool() && !r["sign"].asBool()) {
    if (explicitProfile)
      return Status::error(kind + ": remote.sign: false sends unsigned "
                                  "requests, and remote.profile names keys "
                                  "to sign with: keep one of them");
    cfg->credentialSource = "none (remote.sign: false)";
    cfg->unsigned_ = true;
  } else if (explicitProfile) {
    Expected<bool> found = fromProfile();
    if (!found)
      return found.status();
    if (!*found) {
      return Status::error(kind + ": remote.profile: no profile '" + profile +
                           "' with credentials (aws_access_key_id and "
                           "aws_secret_access_key, role_arn or "
                           "credential_process) in " +
                           credFile + " or " + configFile);
    }
  } else if (!envOr("AWS_ACCESS_KEY_ID").empty()) {
    auto c = std::make_shared<Credentials>();
    c->accessKey = envOr("AWS_ACCESS_KEY_ID");
    c->secretKey = envOr("AWS_SECRET_ACCESS_KEY");
    c->sessionToken = envOr("AWS_SESSION_TOKEN");
    if (c->secretKey.empty())
      return Status::error(kind + ": AWS_ACCESS_KEY_ID is set but "
                                  "AWS_SECRET_ACCESS_KEY is not; set both "
                                  "(or neither, for anonymous requests)");
    cfg->credentials = std::move(c);
    cfg->credentialSource = "environment";
  } else if (auto web = webIdentityCredentials(cfg->region)) {
    // EKS's IAM roles for service accounts: before the profiles, as AWS's
    // SDKs take it. Fetched now, so that a wrong role is the spec's error.
    std::string error;
    if (!web->get(error))
      return Status::error(kind + ": " + error);
    cfg->provider = std::move(web);
    cfg->credentialSource = cfg->provider->source();
  } else if (Expected<bool> found = fromProfile(); !found) {
    return found.status();
  } else if (!*found) {
    if (envOr("AWS_PROFILE").size())
      return Status::error(kind + ": AWS_PROFILE names profile '" + profile +
                           "', which neither " + credFile + " nor " +
                           configFile +
                           " holds with credentials (aws_access_key_id and "
                           "aws_secret_access_key, role_arn or "
                           "credential_process)");
    if (auto container = containerCredentials()) {
      std::string error;
      if (!container->get(error))
        return Status::error(kind + ": " + error);
      cfg->provider = std::move(container);
      cfg->credentialSource = cfg->provider->source();
    } else if (auto instance = instanceCredentials()) {
      // Asked on the first s3:// request (an https:// source needs no
      // keys); a host without an instance role reads anonymously.
      cfg->provider = std::move(instance);
      cfg->credentialSource =
          cfg->provider->source() + ", else none (anonymous requests)";
    } else {
      cfg->credentialSource = "none (anonymous requests)";
    }
  }
  return std::shared_ptr<const RemoteConfig>(std::move(cfg));
}

std::shared_ptr<PendingFetch>
startFetch(std::shared_ptr<const RemoteConfig> cfg, const std::string &url,
           int64_t offset, int64_t length, std::string ifNoneMatch) {
  auto t = std::make_shared<Transfer>();
  t->httpUrl = httpUrlOf(*cfg, url);
  t->cfg = std::move(cfg);
  t->url = url;
  t->offset = offset;
  t->length = length;
  t->ifNoneMatch = std::move(ifNoneMatch);
  Client::get().submit(t);
  return t;
}

namespace {

/// A whole object fetched through the source's ObjectCache: resolved on
/// the first wait() (by the reader that takes it, so the disk work is the
/// reader's, not the client thread's).
struct CachedObjectFetch final : PendingFetch {
  std::shared_ptr<const RemoteConfig> cfg;
  std::string url;
  std::optional<ObjectCache::Entry> entry;
  std::shared_ptr<PendingFetch> inner;
  std::mutex m;
  bool resolved = false;
  Fetched result;

  Fetched &wait() override {
    std::lock_guard<std::mutex> lock(m);
    if (resolved)
      return result;
    resolved = true;
    Fetched &f = inner->wait();
    if (f.ok && f.notModified) {
      std::string body;
      if (cfg->cache->read(*entry, body)) {
        countCacheHit();
        result = std::move(f);
        result.notModified = false;
        result.body = std::move(body);
        result.etag = entry->etag;
        result.totalSize = entry->size;
        return result;
      }
      // The entry was damaged or went away meanwhile (another process's
      // eviction): fetch the object itself.
      result = std::move(startFetch(cfg, url)->wait());
    } else {
      result = std::move(f);
    }
    if (result.ok) {
      countCacheMiss(entry && entry->etag != result.etag);
      cfg->cache->store(url, result.etag, result.body.view());
    }
    return result;
  }
};

} // namespace

std::shared_ptr<PendingFetch>
startObjectFetch(std::shared_ptr<const RemoteConfig> cfg,
                 const std::string &url) {
  if (!cfg->cache)
    return startFetch(std::move(cfg), url);
  auto c = std::make_shared<CachedObjectFetch>();
  c->entry = cfg->cache->lookup(url);
  c->inner = startFetch(cfg, url, 0, -1, c->entry ? c->entry->etag : "");
  c->cfg = std::move(cfg);
  c->url = url;
  return c;
}

void resetRemotePeak() { counters().peakInFlight.store(0); }

void setRemoteBodyLimit(AllocationLimit *limit) {
  BodyPool::get().setLimit(limit, nullptr, false);
}
void clearRemoteBodyLimit(AllocationLimit *limit) {
  BodyPool::get().setLimit(nullptr, limit, true);
}
size_t remoteBodiesKept() { return BodyPool::get().keptBytes(); }

ListingTotals listingTotals() {
  Counters &c = counters();
  return {c.listRequests.load(), c.listedKeys.load(),
          static_cast<double>(c.listingNs.load()) / 1e9};
}

RemoteTotals remoteTotals() {
  Counters &c = counters();
  RemoteTotals t;
  t.requests = c.requests.load();
  t.retries = c.retries.load();
  t.failures = c.failures.load();
  t.bytes = c.bytes.load();
  t.bodiesReused = c.bodiesReused.load();
  t.bodiesPopulated = c.bodiesPopulated.load();
  t.bodiesMapped = c.bodiesMapped.load();
  t.curlBuffersReused = c.curlBuffersReused.load();
  t.finishedByReaders = c.finishedByReaders.load();
  t.socketUpdates = c.socketUpdates.load();
  t.clientThreads = c.clients.load();
  t.peakInFlight = c.peakInFlight.load();
  t.receiveSeconds = static_cast<double>(c.receiveNs.load()) / 1e9;
  t.nextPassAhead = c.nextPassAhead.load();
  t.bursts = c.bursts.load();
  t.burstRequests = c.burstRequests.load();
  t.readerStalls = c.readerStalls.load();
  t.nextPassTaken = c.nextPassTaken.load();
  std::lock_guard<std::mutex> lock(c.m);
  auto median = [](const std::deque<double> &d) {
    if (d.empty())
      return 0.0;
    std::vector<double> v(d.begin(), d.end());
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2),
                     v.end());
    return v[v.size() / 2];
  };
  t.medianLatencyMs = median(c.latencies);
  // Too few quiet requests (every one overlapped another's body): the
  // fastest tenth of all, which queued least.
  if (c.quietLatencies.size() >= 8) {
    t.unloadedLatencyMs = median(c.quietLatencies);
  } else if (!c.latencies.empty()) {
    std::vector<double> v(c.latencies.begin(), c.latencies.end());
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 10),
                     v.end());
    t.unloadedLatencyMs = v[v.size() / 10];
  }
  t.streams = c.streams.load();
  t.streamBytes = c.streamBytes.load();
  t.medianRequestMs = median(c.durations);
  return t;
}

//===----------------------------------------------------------------------===//
// Headers at check time
//===----------------------------------------------------------------------===//

namespace {

/// The idx and npy type rules read remote headers through this (ops has no
/// HTTP client): the first chunk of the object, inflated for .gz.
Expected<std::string> readRemoteHead(const std::string &kind,
                                     const std::string &url,
                                     const Value &remote, size_t n) {
  Value params = Value::map();
  if (remote.isMap())
    params.set("remote", remote);
  params.set("url", Value::string(url)); // credentials for an s3:// one
  Expected<std::shared_ptr<const RemoteConfig>> made =
      remoteConfigFor(kind, params);
  if (!made)
    return made.status();
  // A header needs one small request, not a window of large chunks, and is
  // not worth a cache entry.
  auto cfg = std::make_shared<RemoteConfig>(**made);
  cfg->chunkBytes = std::max<size_t>(64 << 10, n);
  cfg->concurrency = 1;
  cfg->cache.reset();
  BufferedInput in;
  if (!in.open(url, true, cfg))
    return Status::error(in.error());
  std::string out(n, '\0');
  out.resize(in.read(out.data(), n));
  if (in.failed())
    return Status::error(in.error());
  return out;
}

const bool kHeadReaderSet = [] {
  setRemoteHeadReader(&readRemoteHead);
  return true;
}();

} // namespace

//===----------------------------------------------------------------------===//
// Listing and patterns
//===----------------------------------------------------------------------===//

std::vector<std::string> expandBraces(const std::string &pattern) {
  // The first top-level {...} group; its alternatives are expanded
  // recursively together with the rest of the pattern.
  size_t open = pattern.find('{');
  if (open == std::string::npos)
    return {pattern};
  int depth = 0;
  size_t close = std::string::npos;
  std::vector<size_t> commas;
  for (size_t i = open; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '{')
      ++depth;
    else if (c == '}' && --depth == 0) {
      close = i;
      break;
    } else if (c == ',' && depth == 1)
      commas.push_back(i);
  }
  if (close == std::string::npos)
    return {pattern};
  std::string head = pattern.substr(0, open);
  std::string body = pattern.substr(open + 1, close - open - 1);
  std::string tail = pattern.substr(close + 1);
  std::vector<std::string> alts;
  size_t dots = body.find("..");
  if (commas.empty() && dots != std::string::npos) {
    std::string lo = body.substr(0, dots), hi = body.substr(dots + 2);
    auto digits = [](const std::string &s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit);
    };
    if (digits(lo) && digits(hi)) {
      long a = std::stol(lo), b = std::stol(hi);
      size_t width =
          (lo.size() > 1 && lo[0] == '0') || (hi.size() > 1 && hi[0] == '0')
              ? std::max(lo.size(), hi.size())
              : 0;
      for (long v = a;; v += a <= b ? 1 : -1) {
        std::string s = std::to_string(v);
        if (s.size() < width)
          s.insert(0, width - s.size(), '0');
        alts.push_back(s);
        if (v == b)
          break;
      }
    }
  }
  if (alts.empty()) {
    if (commas.empty())
      return {pattern}; // "{x}": literal, as in bash
    size_t from = open + 1;
    for (size_t c : commas) {
      alts.push_back(pattern.substr(from, c - from));
      from = c + 1;
    }
    alts.push_back(pattern.substr(from, close - from));
  }
  std::vector<std::string> out;
  for (const std::string &a : alts)
    for (std::string &s : expandBraces(head + a + tail))
      out.push_back(std::move(s));
  return out;
}

namespace {

/// One page of a ListObjectsV2 listing under `prefix` (from `token`; with
/// `delimited`, one level: the keys at it and the common prefixes below),
/// on its way.
std::shared_ptr<Transfer> listPage(const std::string &bucket,
                                   const std::string &prefix,
                                   const std::string &token, bool delimited,
                                   const std::shared_ptr<RemoteConfig> &cfg) {
  // Query parameters in SigV4's canonical (sorted) order.
  std::string query;
  if (!token.empty())
    query += "continuation-token=" + uriEncode(token, false) + "&";
  if (delimited)
    query += "delimiter=%2F&";
  query += "list-type=2&prefix=" + uriEncode(prefix, false);
  auto t = std::make_shared<Transfer>();
  t->cfg = cfg;
  t->url = "s3://" + bucket + "/";
  t->httpUrl = httpUrlOf(*cfg, "s3://" + bucket + "/") + "?" + query;
  counters().listRequests.fetch_add(1, std::memory_order_relaxed);
  Client::get().submit(t);
  return t;
}

/// A page's keys (and common prefixes) appended; the next page's token,
/// or empty after the last.
Expected<std::string> takePage(Transfer &t, const std::string &what,
                               std::vector<std::string> &keys,
                               std::vector<std::string> *prefixes) {
  Fetched &f = t.wait();
  if (!f.ok)
    return Status::error("cannot list " + what + ": " + f.error);
  std::string_view body = f.body.view();
  for (std::string_view c : xmlBlocks(body, "Contents"))
    keys.push_back(xmlFirst(c, "Key"));
  if (prefixes)
    for (std::string_view c : xmlBlocks(body, "CommonPrefixes"))
      prefixes->push_back(xmlFirst(c, "Prefix"));
  if (xmlFirst(body, "IsTruncated") != "true")
    return std::string();
  std::string token = xmlFirst(body, "NextContinuationToken");
  if (token.empty())
    return Status::error("cannot list " + what +
                         ": the listing is truncated but gives no "
                         "continuation token");
  return token;
}

/// Every key under `prefix`, page after page; with `delimited`, the keys at
/// its level only, and the common prefixes below it in `prefixes`.
Expected<std::vector<std::string>>
listKeys(const std::string &bucket, const std::string &prefix,
         const RemoteConfig &cfg, const std::string &what,
         bool delimited = false, std::vector<std::string> *prefixes = nullptr) {
  std::vector<std::string> keys;
  auto shared = std::make_shared<RemoteConfig>(cfg);
  std::string token;
  do {
    std::shared_ptr<Transfer> t =
        listPage(bucket, prefix, token, delimited, shared);
    Expected<std::string> next = takePage(*t, what, keys, prefixes);
    if (!next)
      return next.status();
    token = next.take();
  } while (!token.empty());
  return keys;
}

/// Listings in flight at once (an image folder's classes, a glob's
/// directories).
constexpr size_t kListingsInFlight = 32;

/// Every prefix in `prefixes` listed, up to kListingsInFlight listings in
/// flight, each paged on its own: their keys appended to `keys` and, with
/// `delimited` (one level each), their common prefixes to `below`.
Status listMany(const std::string &bucket,
                const std::vector<std::string> &prefixes,
                const RemoteConfig &cfg, const std::string &what,
                bool delimited, std::vector<std::string> &keys,
                std::vector<std::string> *below) {
  auto shared = std::make_shared<RemoteConfig>(cfg);
  struct Listing {
    size_t prefix;
    std::shared_ptr<Transfer> page;
  };
  std::deque<Listing> inFlight;
  size_t next = 0;
  while (next < prefixes.size() || !inFlight.empty()) {
    while (inFlight.size() < kListingsInFlight && next < prefixes.size()) {
      inFlight.push_back(
          {next, listPage(bucket, prefixes[next], "", delimited, shared)});
      ++next;
    }
    Listing l = std::move(inFlight.front());
    inFlight.pop_front();
    Expected<std::string> token = takePage(*l.page, what, keys, below);
    if (!token)
      return token.status(); // those in flight finish on their own
    if (!token->empty())
      inFlight.push_back({l.prefix, listPage(bucket, prefixes[l.prefix], *token,
                                             delimited, shared)});
  }
  return Status::ok();
}

/// Every key under `prefix`, the subtrees listed side by side: one level
/// first (the keys at it, and its common prefixes: an image folder's
/// classes), then each prefix's keys (listMany). A flat listing is one page
/// of 1,000 keys per round trip, one after the other: 1,281 pages (tens of
/// seconds to minutes) for ImageNet's training set, where its 1,000 classes
/// are 2 pages each, 32 at a time. The same keys either way (sorted by the
/// caller); SLUICE_NO_PARALLEL_LISTING=1 lists flat.
Expected<std::vector<std::string>> listTree(const std::string &bucket,
                                            const std::string &prefix,
                                            const RemoteConfig &cfg,
                                            const std::string &what) {
  if (switchedOff("SLUICE_NO_PARALLEL_LISTING"))
    return listKeys(bucket, prefix, cfg, what);
  std::vector<std::string> prefixes;
  Expected<std::vector<std::string>> top =
      listKeys(bucket, prefix, cfg, what, /*delimited=*/true, &prefixes);
  if (!top)
    return top;
  std::vector<std::string> keys = top.take();
  if (Status st = listMany(bucket, prefixes, cfg, what, false, keys, nullptr);
      !st)
    return st;
  return keys;
}

/// The keys a glob's key pattern (`pattern`, after the bucket; its
/// wildcards do not cross '/') can match, listed level by level: at each
/// level of the pattern that has a wildcard, the directories reached so
/// far are listed one level deep (side by side, listMany) and only the
/// common prefixes that level's part matches are gone into; the last level
/// gives the keys. A pattern over a deep tree (`shards/*/train-*.tar`, a
/// directory per part) then lists the directories it names and not the
/// rest of the tree, and many of them at once rather than page after page.
/// What it returns still has to be matched against the whole pattern.
Expected<std::vector<std::string>> listLevels(const std::string &bucket,
                                              const std::string &pattern,
                                              const RemoteConfig &cfg,
                                              const std::string &what) {
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    size_t slash = pattern.find('/', from);
    parts.push_back(pattern.substr(from, slash - from));
    if (slash == std::string::npos)
      break;
    from = slash + 1;
  }
  std::vector<std::string> frontier{""};
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string &part = parts[i];
    size_t meta = part.find_first_of("*?[");
    bool last = i + 1 == parts.size();
    if (meta == std::string::npos && !last) {
      for (std::string &p : frontier)
        p += part + "/";
      continue;
    }
    // Listed from the part's literal start: `shard-*` lists `shard-`.
    std::vector<std::string> prefixes;
    for (const std::string &p : frontier)
      prefixes.push_back(p + part.substr(0, meta));
    std::vector<std::string> keys, below;
    if (Status st = listMany(bucket, prefixes, cfg, what, true, keys,
                             last ? nullptr : &below);
        !st)
      return st;
    if (last)
      return keys;
    frontier.clear();
    for (std::string &b : below) {
      // "shards/part-007/": its last level, without the '/'.
      std::string name = b.substr(0, b.size() - 1);
      name = name.substr(name.rfind('/') + 1);
      if (::fnmatch(part.c_str(), name.c_str(), FNM_PATHNAME) == 0)
        frontier.push_back(std::move(b));
    }
    if (frontier.empty())
      return std::vector<std::string>();
  }
  return std::vector<std::string>();
}

/// A listing, its time and keys counted (listingTotals).
template <typename List>
Expected<std::vector<std::string>> timedListing(List list) {
  Clock::time_point start = Clock::now();
  Expected<std::vector<std::string>> keys = list();
  counters().listingNs.fetch_add(
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                               start)
              .count()),
      std::memory_order_relaxed);
  if (keys)
    counters().listedKeys.fetch_add(keys->size(), std::memory_order_relaxed);
  return keys;
}

} // namespace

Expected<std::vector<std::string>> listRemotePrefix(const std::string &url,
                                                    const RemoteConfig &cfg) {
  std::string bucket, key;
  if (!splitS3(url, bucket, key))
    return Status::error(url + ": only s3:// prefixes can be listed (HTTP has "
                               "no listing)");
  if (!key.empty() && key.back() != '/')
    key += '/';
  Expected<std::vector<std::string>> keys = timedListing(
      [&] { return listTree(bucket, key, cfg, "s3://" + bucket + "/" + key); });
  if (!keys)
    return keys.status();
  std::vector<std::string> out;
  for (const std::string &k : *keys)
    out.push_back("s3://" + bucket + "/" + k);
  std::sort(out.begin(), out.end());
  return out;
}

Expected<std::vector<std::string>>
expandRemotePattern(const std::string &kind, const std::string &param,
                    const std::string &pattern, const RemoteConfig &cfg) {
  std::vector<std::string> out;
  for (const std::string &p : expandBraces(pattern)) {
    size_t meta = p.find_first_of("*?[");
    if (meta == std::string::npos) {
      out.push_back(p);
      continue;
    }
    std::string bucket, key;
    if (!splitS3(p, bucket, key))
      return Status::error(
          kind + ": " + param + ": '" + pattern +
          "': HTTP has no listing, so a glob cannot be expanded; name the "
          "files with a brace list instead, e.g. shard-{000000..000099}.tar "
          "or {train,val}.csv");
    std::string prefix = key.substr(0, key.find_first_of("*?["));
    // `*`, `?` and `[...]` do not cross '/': the pattern's levels are
    // listed one by one (listLevels; a pattern with no '/' after its
    // prefix is one listing of that level), not every key under the
    // prefix page after page (SLUICE_NO_PARALLEL_LISTING=1).
    bool byLevel = !switchedOff("SLUICE_NO_PARALLEL_LISTING");
    std::string what = "s3://" + bucket + "/" + prefix;
    Expected<std::vector<std::string>> keys = timedListing([&] {
      return byLevel ? listLevels(bucket, key, cfg, what)
                     : listKeys(bucket, prefix, cfg, what);
    });
    if (!keys)
      return Status::error(kind + ": " + param + ": '" + pattern +
                           "': " + keys.status().message());
    size_t before = out.size();
    for (const std::string &k : *keys)
      if (::fnmatch(key.c_str(), k.c_str(), FNM_PATHNAME) == 0)
        out.push_back("s3://" + bucket + "/" + k);
    if (out.size() == before)
      return Status::error(kind + ": " + param + ": pattern '" + pattern +
                           "' matched no objects (listed " +
                           std::to_string(keys->size()) + " under 's3://" +
                           bucket + "/" + prefix +
                           "'); check the bucket and "
                           "prefix");
  }
  return out;
}

//===----------------------------------------------------------------------===//
// RemoteStream
//===----------------------------------------------------------------------===//

RemoteStream::RemoteStream(std::shared_ptr<const RemoteConfig> cfg,
                           std::string url)
    : cfg_(std::move(cfg)), url_(std::move(url)) {}

RemoteStream::~RemoteStream() {
  // A reader may stop before the object's end (a tar's padding after its
  // end-of-archive blocks): when little is left, the rest is read so that
  // the cache keeps the whole object. Otherwise the entry is not kept (the
  // writer removes its temporary file), and requests still in flight finish
  // on the client thread and are dropped (they hold their own reference).
  if (writer_ && size_ - curEnd_ <= 4 * static_cast<int64_t>(chunk_)) {
    std::string error;
    char sink[65536];
    while (writer_ && read(sink, sizeof sink, error) > 0) {
    }
  }
  if (cacheFd_ >= 0)
    ::close(cacheFd_);
  // A reader that stops before the end (a tar's padding) leaves the last
  // chunk unconsumed: its buffer serves the next response all the same.
  BodyPool::get().put(std::move(cur_));
}

FirstChunk startFirstChunk(std::shared_ptr<const RemoteConfig> cfg,
                           const std::string &url, size_t bytes) {
  FirstChunk c;
  c.chunk = bytes ? bytes : cfg->chunkBytes;
  if (cfg->cache)
    c.entry = cfg->cache->lookup(url);
  c.fetch = startFetch(cfg, url, 0, static_cast<int64_t>(c.chunk),
                       c.entry ? c.entry->etag : "");
  return c;
}

bool FetchAhead::reserve(const std::shared_ptr<const RemoteConfig> &cfg,
                         size_t shard, int64_t bytes) {
  if (ahead_.count(shard) ||
      ahead_.size() >= 4 * static_cast<size_t>(std::max(1, cfg->concurrency)))
    return false;
  if (!limit_)
    return true;
  // At most a quarter of what the budget has left, as a ranged stream's
  // read-ahead (RemoteStream): the rest of the pipeline keeps room for the
  // records it makes of them.
  int64_t room = limit_->limit() - limit_->used();
  return !(limit_->limit() > 0 && bytes > room / 4) &&
         limit_->tryReserveNow(bytes);
}

void FetchAhead::startObject(const std::shared_ptr<const RemoteConfig> &cfg,
                             size_t shard, const std::string &url,
                             bool nextPass) {
  std::lock_guard<std::mutex> lock(m_);
  const int64_t bytes =
      !limit_
          ? 0
          : (largest_ >= 0 ? std::max<int64_t>(largest_, 1) : kFirstGuessBytes);
  if (!reserve(cfg, shard, bytes))
    return;
  Ahead a;
  a.first.fetch = startObjectFetch(cfg, url);
  a.bytes = bytes;
  a.nextPass = nextPass;
  if (nextPass)
    counters().nextPassAhead.fetch_add(1, std::memory_order_relaxed);
  ahead_.emplace(shard, std::move(a));
}

bool FetchAhead::windowAhead() {
  static const bool on = !switchedOff("SLUICE_NO_SHARD_WINDOW_AHEAD");
  return on;
}

void FetchAhead::startStream(const std::shared_ptr<const RemoteConfig> &cfg,
                             size_t shard, const std::string &url, size_t depth,
                             bool nextPass) {
  std::lock_guard<std::mutex> lock(m_);
  // A window of chunks (what the stream keeps in flight once open) in one
  // request: a shard no larger arrives whole before its reader opens it,
  // and a larger one has the rest of its window asked for (at open) while
  // this is read. The shards ahead together stay within the quarter of the
  // budget's room that reserve() allows.
  size_t chunks =
      windowAhead() ? static_cast<size_t>(std::max(1, cfg->concurrency)) : 1;
  if (limit_ && limit_->limit() > 0) {
    const int64_t room = (limit_->limit() - limit_->used()) / 4;
    while (chunks > 1 &&
           static_cast<int64_t>(chunks * cfg->chunkBytes *
                                std::max<size_t>(1, depth)) > room)
      chunks /= 2;
  }
  const size_t asked = chunks * cfg->chunkBytes;
  const int64_t bytes = limit_ ? static_cast<int64_t>(asked) : 0;
  if (!reserve(cfg, shard, bytes))
    return;
  Ahead a;
  a.first = startFirstChunk(cfg, url, asked);
  a.bytes = bytes;
  a.nextPass = nextPass;
  if (nextPass)
    counters().nextPassAhead.fetch_add(1, std::memory_order_relaxed);
  ahead_.emplace(shard, std::move(a));
}

FirstChunk FetchAhead::take(size_t shard) {
  Ahead a;
  {
    std::lock_guard<std::mutex> lock(m_);
    auto it = ahead_.find(shard);
    if (it == ahead_.end())
      return {};
    a = std::move(it->second);
    ahead_.erase(it);
  }
  Fetched &f = a.first.fetch->wait(); // what the reader does first anyway
  if (a.nextPass)
    counters().nextPassTaken.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(m_);
  if (f.ok && a.first.chunk == 0)
    largest_ = std::max(largest_, static_cast<int64_t>(f.body.size()));
  if (a.bytes > 0 && limit_)
    limit_->release(a.bytes);
  return std::move(a.first);
}

void FetchAhead::setLimit(AllocationLimit *limit) {
  std::unordered_map<size_t, Ahead> drop; // waited for outside the lock
  {
    std::lock_guard<std::mutex> lock(m_);
    if (limit_)
      for (auto &[shard, a] : ahead_)
        limit_->release(a.bytes);
    drop.swap(ahead_);
    limit_ = limit;
  }
}

bool RemoteStream::open(std::string &error, FirstChunk *ahead) {
  chunk_ = cfg_->chunkBytes;
  window_ = std::max(1, cfg_->concurrency);
  // The read-ahead is counted in the budget: at most a quarter of what is
  // left, as BufferedInput's own buffers; a tight budget reads one chunk
  // at a time, and chunks shrink to 64 KiB before that.
  const int64_t room = held_.available();
  while (room >= 0 && window_ > 1 &&
         static_cast<int64_t>(chunk_) * window_ > room / 4)
    --window_;
  while (room >= 0 && chunk_ > (size_t(64) << 10) &&
         static_cast<int64_t>(chunk_) > room / 4)
    chunk_ /= 2;
  if (!held_.tryResize(static_cast<int64_t>(chunk_) * (window_ + 1))) {
    window_ = 1;
    held_.tryResize(static_cast<int64_t>(chunk_) * 2);
  }
  std::optional<ObjectCache::Entry> entry;
  std::shared_ptr<PendingFetch> first;
  // The bytes the first request asked for: whole chunks, so that the
  // chunks after it start on chunk boundaries.
  size_t asked = chunk_;
  if (ahead && ahead->fetch && ahead->chunk >= chunk_ &&
      ahead->chunk % chunk_ == 0) {
    // Asked for while the shards before it were read.
    entry = std::move(ahead->entry);
    first = std::move(ahead->fetch);
    asked = ahead->chunk;
  } else {
    if (cfg_->cache)
      entry = cfg_->cache->lookup(url_);
    first = startFetch(cfg_, url_, 0, static_cast<int64_t>(chunk_),
                       entry ? entry->etag : "");
  }
  Fetched *fp = &first->wait();
  if (fp->ok && fp->notModified) {
    int fd = cfg_->cache->openData(*entry);
    if (fd >= 0) {
      // The cached version is current: read it from the disk.
      countCacheHit();
      cacheFd_ = fd;
      etag_ = entry->etag;
      size_ = entry->size;
      held_.tryResize(0);
      return true;
    }
    // Damaged or evicted meanwhile: fetch the object itself.
    first = startFetch(cfg_, url_, 0, static_cast<int64_t>(chunk_));
    fp = &first->wait();
  }
  Fetched &f = *fp;
  if (!f.ok) {
    error = "cannot open: " + f.error;
    return false;
  }
  etag_ = f.etag;
  size_ = f.totalSize;
  counters().streams.fetch_add(1, std::memory_order_relaxed);
  counters().streamBytes.fetch_add(
      static_cast<uint64_t>(std::max<int64_t>(0, size_)),
      std::memory_order_relaxed);
  cur_ = std::move(f.body);
  curPos_ = 0;
  curEnd_ = static_cast<int64_t>(cur_.size());
  nextStart_ = curEnd_;
  if (f.status == 206 &&
      static_cast<int64_t>(cur_.size()) !=
          std::min<int64_t>(size_, static_cast<int64_t>(asked))) {
    error = "truncated body: asked for bytes 0-" + std::to_string(asked - 1) +
            " of " + std::to_string(size_) + ", received " +
            std::to_string(cur_.size());
    return false;
  }
  if (asked > chunk_ &&
      !held_.tryResize(static_cast<int64_t>(chunk_) * window_ +
                       static_cast<int64_t>(cur_.size()))) {
    // The first piece is larger than the chunk the reservation was made
    // for: without room for both, the rest is read one chunk at a time.
    window_ = 1;
    held_.tryResize(static_cast<int64_t>(chunk_ + cur_.size()));
  }
  if (cfg_->cache) {
    countCacheMiss(entry && entry->etag != etag_);
    writer_ =
        std::make_unique<ObjectCache::Writer>(cfg_->cache, url_, etag_, size_);
    keepChunk();
  }
  topUp();
  return true;
}

void RemoteStream::keepChunk() {
  if (!writer_)
    return;
  if (!writer_->append(cur_.data(), cur_.size()))
    writer_.reset();
  else if (curEnd_ == size_) {
    writer_->commit();
    writer_.reset();
  }
}

void RemoteStream::topUp() {
  while (static_cast<int>(inFlight_.size()) < window_ && nextStart_ < size_) {
    int64_t len =
        std::min<int64_t>(static_cast<int64_t>(chunk_), size_ - nextStart_);
    inFlight_.emplace_back(nextStart_, startFetch(cfg_, url_, nextStart_, len));
    nextStart_ += len;
  }
}

int RemoteStream::nextChunk(std::string &error) {
  if (inFlight_.empty())
    return 0;
  int64_t start = inFlight_.front().first;
  std::shared_ptr<PendingFetch> p = std::move(inFlight_.front().second);
  inFlight_.erase(inFlight_.begin());
  Fetched &f = p->wait();
  int64_t want = std::min<int64_t>(static_cast<int64_t>(chunk_), size_ - start);
  if (!f.ok) {
    error = f.error + " (reading bytes " + std::to_string(start) + "-" +
            std::to_string(start + want - 1) + ")";
    return -1;
  }
  if (f.etag != etag_) {
    error = "the object changed while being read (ETag " + etag_ +
            " when opened, " + f.etag + " at byte " + std::to_string(start) +
            "); its records would mix two versions";
    return -1;
  }
  if (f.status != 206) {
    error = "the server answered HTTP " + std::to_string(f.status) +
            " to a range request (bytes " + std::to_string(start) + "-" +
            std::to_string(start + want - 1) +
            "): it does not serve byte ranges of this object";
    return -1;
  }
  if (static_cast<int64_t>(f.body.size()) != want || f.totalSize != size_) {
    error =
        "truncated body: asked for bytes " + std::to_string(start) + "-" +
        std::to_string(start + want - 1) + " of " + std::to_string(size_) +
        ", received " + std::to_string(f.body.size()) +
        (f.totalSize != size_
             ? " (the object is " + std::to_string(f.totalSize) + " bytes now)"
             : "");
    return -1;
  }
  cur_ = std::move(f.body);
  curPos_ = 0;
  curEnd_ = start + want;
  keepChunk();
  topUp();
  return 1;
}

void RemoteStream::releaseLent() {
  if (!lent_)
    return;
  lent_ = false;
  BodyPool::get().put(std::move(cur_));
  cur_ = Body();
  curPos_ = 0;
}

long RemoteStream::read(char *dst, size_t n, std::string &error) {
  if (cacheFd_ >= 0) {
    for (;;) {
      ssize_t got = ::read(cacheFd_, dst, n);
      if (got < 0 && errno == EINTR)
        continue;
      if (got < 0) {
        error = std::string("reading the cached copy: ") + std::strerror(errno);
        return -1;
      }
      countCacheBytes(static_cast<uint64_t>(got));
      return static_cast<long>(got);
    }
  }
  releaseLent();
  if (curPos_ == cur_.size())
    if (int r = nextChunk(error); r <= 0)
      return r;
  size_t take = std::min(n, cur_.size() - curPos_);
  std::memcpy(dst, cur_.data() + curPos_, take);
  curPos_ += take;
  if (curPos_ == cur_.size()) {
    // Hand the chunk's memory back now rather than at the next read: to
    // the next response's body (BodyPool) or to the allocator.
    BodyPool::get().put(std::move(cur_));
    cur_ = Body();
    curPos_ = 0;
  }
  return static_cast<long>(take);
}

long RemoteStream::borrow(const char *&p, std::string &error) {
  if (cacheFd_ >= 0)
    return -2;
  releaseLent();
  if (curPos_ == cur_.size())
    if (int r = nextChunk(error); r <= 0)
      return r;
  p = cur_.data() + curPos_;
  const size_t n = cur_.size() - curPos_;
  curPos_ = cur_.size();
  lent_ = true;
  return static_cast<long>(n);
}

} // namespace sluice::runtime::detail
