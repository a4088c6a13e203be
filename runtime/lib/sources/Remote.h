//===- Remote.h - Objects read over S3 and HTTP(S) through libcurl -*- C++
//-*-===//
//
// Internal to runtime/lib/sources. Every file parameter of a source may name
// objects instead of local files: `s3://bucket/key` (S3 and its compatibles,
// signed with libcurl's built-in AWS SigV4), `http://` and `https://` (range
// requests), and `file://` (a local path). A source resolves its `remote`
// parameter and the environment into a RemoteConfig once; BufferedInput and
// the per-file readers then fetch through one process-wide libcurl multi
// handle driven by its own thread, which keeps connections alive and many
// requests in flight, and retries 5xx/429/connection failures with capped
// exponential backoff and jitter (as the AWS SDKs do).
//
// Credentials live only in the RemoteConfig's Credentials (never formatted
// into a message, a stat or a state file): a URL names a bucket and a key,
// nothing else.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_RUNTIME_LIB_SOURCES_REMOTE_H
#define SLUICE_RUNTIME_LIB_SOURCES_REMOTE_H

#include "sluice/ops/Allocation.h"
#include "sluice/ops/Status.h"
#include "sluice/ops/Value.h"

#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::runtime::detail {

/// True for s3://, http:// and https:// names (read through libcurl).
bool isRemoteUrl(std::string_view name);
/// Whether `given` (a source's file parameter, as written) can be read:
/// an error naming `kind` and `param` for a URL of a scheme sluice does not
/// read (gs://, hdfs://, ...; a known one in capitals), an s3:// URL
/// without its bucket (or, with `objectNeeded`, without a key), or an
/// http(s):// URL without its host. Plain paths pass.
Status checkSourceUrl(const std::string &kind, const std::string &param,
                      const std::string &given, bool objectNeeded);

/// True for file:// names.
inline bool isFileUrl(std::string_view name) {
  return name.substr(0, 7) == "file://";
}
/// The local path of a file:// URL (`file:///data/x` -> `/data/x`,
/// `file://relative/x` -> `relative/x`); `name` itself otherwise.
std::string stripFileUrl(const std::string &name);

class ObjectCache;

/// Secrets: never printed, never copied into anything that is.
struct Credentials {
  std::string accessKey, secretKey, sessionToken;
};

/// Credentials that expire, fetched again before they do
/// (AwsCredentials.cpp): a container's credentials endpoint (ECS, EKS Pod
/// Identity), a web identity token exchanged with STS (EKS's IAM roles for
/// service accounts), the EC2 instance metadata service (IMDSv2), or a
/// profile's assumed role, SSO sign-in or credential_process. One per place
/// for the whole process: its pipelines share the credentials and their
/// refresh.
class CredentialProvider {
public:
  virtual ~CredentialProvider() = default;
  /// Credentials to sign with now: those held, fetched (again) when none
  /// are held or they expire within 5 minutes (within less, at half their
  /// time left). A fetch that fails while the ones held are still valid
  /// keeps them (tried again 10 s later). Null with `error` set when there
  /// are none; null with `error` empty for the instance metadata service
  /// that did not answer its first fetch (no instance role: anonymous
  /// requests, as before it was asked).
  virtual std::shared_ptr<const Credentials> get(std::string &error) = 0;
  /// Where they come from, for messages: "the EC2 instance metadata
  /// service at http://169.254.169.254".
  virtual std::string source() const = 0;
};

/// The container credentials endpoint's provider
/// (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
/// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN); null when neither URI
/// is set.
std::shared_ptr<CredentialProvider> containerCredentials();
/// The web identity provider (AWS_WEB_IDENTITY_TOKEN_FILE and
/// AWS_ROLE_ARN, AWS_ROLE_SESSION_NAME, or a profile's
/// web_identity_token_file, role_arn and role_session_name given here; STS
/// at AWS_ENDPOINT_URL_STS, else https://sts.REGION.amazonaws.com); null
/// when no token file is set.
std::shared_ptr<CredentialProvider>
webIdentityCredentials(const std::string &region, std::string tokenFile = "",
                       std::string role = "", std::string session = "");
/// The instance metadata service's provider
/// (AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254); null
/// when AWS_EC2_METADATA_DISABLED=true.
std::shared_ptr<CredentialProvider> instanceCredentials();
/// A profile's `credential_process`: `command` split into words as a POSIX
/// shell splits them (quotes and backslashes; no expansion, no shell), run
/// with the caller's stdin and stderr, its stdout read as AWS's JSON
/// (Version 1, AccessKeyId, SecretAccessKey, SessionToken, Expiration).
/// Run again 5 minutes before the keys expire; shared by the process.
/// `where` names the profile, for messages.
std::shared_ptr<CredentialProvider>
processCredentials(const std::string &command, const std::string &where);
/// Keys that do not expire (a profile's), as a provider: the source of an
/// assumed role.
std::shared_ptr<CredentialProvider>
staticCredentials(std::shared_ptr<const Credentials> creds, std::string source);
/// A profile's role_arn: STS AssumeRole, signed with `source`'s keys (its
/// source_profile's or its credential_source's).
struct AssumeRoleParams {
  std::string roleArn, sessionName, externalId;
  long durationSeconds = 0; ///< 0: STS's default (an hour)
  std::string region;       ///< STS's, and the signature's
  std::string where;        ///< the profile, for messages
  std::shared_ptr<CredentialProvider> source;
  /// Tells sources apart for sharing (a key id, a provider's place): the
  /// same role from the same source is one provider per process.
  std::string sourceKey;
};
std::shared_ptr<CredentialProvider>
assumeRoleCredentials(const AssumeRoleParams &p);
/// A profile that signs in through IAM Identity Center (SSO): the role's
/// keys from the SSO portal's GetRoleCredentials, with the access token
/// `aws sso login` cached (~/.aws/sso/cache/SHA1.json, SHA1 of the
/// sso_session's name, or of the start URL for a profile of the older
/// form); the portal at AWS_ENDPOINT_URL_SSO, else
/// https://portal.sso.REGION.amazonaws.com.
struct SsoParams {
  std::string profile, where;
  std::string session; ///< the sso_session's name; empty: the older form
  std::string startUrl, region, accountId, roleName;
};
std::shared_ptr<CredentialProvider> ssoCredentials(const SsoParams &p);

/// How a source reads remote objects: its `remote` parameter over the
/// environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...,
/// AWS_PROFILE and ~/.aws/credentials).
struct RemoteConfig {
  /// S3 endpoint ("http://127.0.0.1:9000"); empty: AWS's own, virtual-host
  /// style (https://<bucket>.s3.<region>.amazonaws.com).
  std::string endpoint;
  std::string region = "us-east-1";
  /// Where region came from, for messages: "remote.region", "AWS_REGION",
  /// "AWS_DEFAULT_REGION", "profile 'x' of ~/.aws/config", "the default".
  std::string regionSource = "the default";
  /// Where the credentials came from, for messages: "environment",
  /// "profile 'x' of ~/.aws/credentials", "none (anonymous requests)".
  std::string credentialSource;
  double timeoutSeconds = 60;
  /// Requests in flight per stream (ranged chunks of a shard) or per
  /// per-file source (whole objects ahead of the reader): the spec's
  /// `remote.concurrency` (concurrencyPinned), else the schedule's (the
  /// tuner's Little's-law choice, Source::setRequestsInFlight), else 8.
  int concurrency = 8;
  bool concurrencyPinned = false;
  /// Attempts after the first for a retryable failure.
  int retries = 5;
  /// First backoff; doubled per attempt up to maxBackoffMs, with jitter.
  int backoffMs = 50;
  int maxBackoffMs = 5000;
  /// Bytes per ranged request of a sequential reader.
  size_t chunkBytes = size_t(4) << 20;
  std::shared_ptr<const Credentials> credentials; // null: anonymous
  /// `remote.sign: false`: unsigned whatever the host has.
  bool unsigned_ = false;
  /// Credentials that expire (a role's), in place of `credentials`.
  std::shared_ptr<CredentialProvider> provider;
  /// The credentials to sign an s3:// request with now: `credentials`,
  /// else the provider's; null: anonymous, or `error` set.
  std::shared_ptr<const Credentials>
  signingCredentials(std::string &error) const {
    if (!provider)
      return credentials;
    return provider->get(error);
  }
  /// `remote.cache`: fetched objects kept on disk (null: none).
  std::shared_ptr<ObjectCache> cache;
  /// The PEM file of the certificate authorities that https:// servers
  /// (and an https endpoint) are checked against: `remote.ca_bundle`, else
  /// AWS_CA_BUNDLE; empty: libcurl's default (the system's store). For a
  /// server whose certificate a private CA signed (a MinIO or Ceph gateway
  /// inside a cluster). Certificates are always verified.
  std::string caBundle;
  /// Where caBundle came from, for messages: "remote.ca_bundle" or
  /// "AWS_CA_BUNDLE".
  std::string caBundleFrom;
};

/// The environment variable `name`, or `fallback` when it is unset or
/// empty.
std::string envOr(const char *name, const std::string &fallback = "");

/// `s` percent-encoded as SigV4 wants it (every byte but A-Z a-z 0-9 - _ .
/// ~, and '/' with keepSlash): S3 keys, query values.
std::string uriEncode(std::string_view s, bool keepSlash);

/// The text of the first <tag>...</tag> of an S3 or STS answer, entities
/// decoded; empty when there is none.
std::string xmlFirst(std::string_view xml, std::string_view tag);

/// Whether libcurl is there to serve remote URLs (CurlLoader.cpp loads it
/// on first use); false with `why` saying what is missing and how to
/// install it.
bool curlLoadable(std::string &why);

/// SigV4.cpp: the SHA-1 of `data` in lowercase hex (libcrypto's), as the
/// AWS CLI names its cached SSO sign-ins; false when libcrypto cannot be
/// loaded.
bool sha1Hex(std::string_view data, std::string &out);

/// SigV4.cpp: whether S3 object GETs are signed by sluice (libcrypto's
/// SHA-256 and HMAC, the derived key kept for its day) rather than by
/// libcurl; false when libcrypto cannot be loaded or with
/// SLUICE_NO_REMOTE_OWN_SIGNING=1.
bool ownSigningAvailable();
/// The headers that sign a GET of `httpUrl` (http(s)://authority/path, no
/// query) with AWS Signature Version 4 at `when` for service s3 in
/// `region`, appended to `headers` ("x-amz-content-sha256: ...",
/// "x-amz-date: ...", the session token's if any, "Authorization: ...");
/// false (nothing appended) when it cannot: another URL form, a path
/// with characters it would have to encode, libcrypto missing.
bool signS3Get(std::string_view httpUrl, const Credentials &cred,
               const std::string &region, std::time_t when,
               std::vector<std::string> &headers);

/// The source's RemoteConfig: params["remote"] (a mapping: endpoint, region,
/// profile, request_timeout, concurrency, retries, chunk_size, cache,
/// cache_size, ca_bundle) over the environment. A relative cache directory
/// or CA bundle resolves against `base` (the spec's directory). Errors name the
/// kind and what to fix.
Expected<std::shared_ptr<const RemoteConfig>>
remoteConfigFor(const std::string &kind, const Value &params,
                const std::string &base = "");

/// Expands one file pattern that is a URL into the objects it names, sorted:
/// braces first (`{a,b}`, `{000..099}` as in bash and WebDataset), then for
/// s3:// the glob characters `*?[` are matched against a ListObjectsV2
/// listing of the pattern's literal prefix (`*` does not cross `/`). HTTP
/// cannot list: a glob there is refused with the brace form to use.
Expected<std::vector<std::string>>
expandRemotePattern(const std::string &kind, const std::string &param,
                    const std::string &pattern, const RemoteConfig &cfg);

/// Every object under an s3:// prefix (recursive), as full URLs, sorted.
Expected<std::vector<std::string>> listRemotePrefix(const std::string &url,
                                                    const RemoteConfig &cfg);

/// Expands `{a,b}` and `{N..M}` (zero-padded like the wider bound) in
/// `pattern`; no braces: the pattern itself.
std::vector<std::string> expandBraces(const std::string &pattern);

/// A response's bytes: a std::string, or, for a ranged chunk of about 2 MiB
/// or more (reserveMapped), a mapping of its own that starts on a 2 MiB
/// boundary and is advised as transparent huge pages (MADV_HUGEPAGE), so
/// that where the host allows them (`madvise` or `always`) a fresh chunk's
/// memory is a few 2 MiB pages instead of hundreds of 4 KiB ones. Each 4
/// KiB page of a fresh body cost 9-18 us at its first write on the 2-core
/// VM, faulted in beforehand (MADV_POPULATE_WRITE) or not: ~40 us a record
/// of webdataset over http:// in a 2-epoch run, the first bodies before the
/// kept ones (BodyPool) serve. Whole objects (a record's bytes, moved into
/// its std::string) stay strings. Off: SLUICE_NO_REMOTE_HUGE_BODIES=1.
class Body {
public:
  Body() = default;
  Body(Body &&o) noexcept { *this = std::move(o); }
  Body &operator=(Body &&o) noexcept;
  Body &operator=(std::string &&s);
  Body(const Body &) = delete;
  Body &operator=(const Body &) = delete;
  ~Body() { unmap(); }

  const char *data() const { return big_ ? big_ : str_.data(); }
  size_t size() const { return big_ ? bigSize_ : str_.size(); }
  size_t capacity() const { return big_ ? bigCap_ : str_.capacity(); }
  bool empty() const { return size() == 0; }
  std::string_view view() const { return {data(), size()}; }
  /// In a mapping of its own (reserveMapped).
  bool mapped() const { return big_ != nullptr; }
  void clear() {
    if (big_)
      bigSize_ = 0;
    else
      str_.clear();
  }
  void append(const char *p, size_t n);
  /// Room for `n` bytes in all, in the string (a mapped body's bytes move
  /// there when n is more than its mapping holds).
  void reserve(size_t n);
  /// An empty body becomes a mapping of hugeCapacity(n) bytes advised as
  /// huge pages; false (and nothing changed) when the switch is off, n is
  /// too small for one, the body is not empty, or mmap fails.
  bool reserveMapped(size_t n);
  /// The bytes as a std::string: moved when they are one, else copied.
  std::string takeString();
  /// The capacity a mapping for n bytes gets (whole 2 MiB pages where that
  /// adds at most a quarter, else whole 4 KiB pages above the last 2 MiB),
  /// or 0 where n is too small for one (under 1.6 MiB).
  static size_t hugeCapacity(size_t n);

private:
  void unmap();
  std::string str_;
  char *big_ = nullptr;
  size_t bigSize_ = 0, bigCap_ = 0;
};

/// The result of one request.
struct Fetched {
  bool ok = false;
  long status = 0;
  Body body;
  std::string etag;
  /// The object's size (Content-Range's total, or the body of a 200).
  int64_t totalSize = -1;
  /// Why it failed: "HTTP 404 (NoSuchKey: The specified key does not
  /// exist.)", "connection refused after 6 attempts", ...
  std::string error;
  /// The server answered 304 Not Modified to a request that named the
  /// cached entry's ETag: the entry (cacheEntry) holds the object's bytes,
  /// and `body` is empty.
  bool notModified = false;
};

/// A request on its way. wait() blocks until it is done (retries included).
class PendingFetch {
public:
  virtual ~PendingFetch();
  virtual Fetched &wait() = 0;
};

/// While one is alive on a thread, the requests the thread starts are held
/// back and sent together as the last one ends: one pass of the client
/// (its code and the server's connections woken once) for the burst
/// instead of one per request. Inert with SLUICE_NO_REQUEST_BURSTS=1.
/// Counts the bursts (RemoteTotals::bursts, burstRequests).
class SubmitBatch {
public:
  SubmitBatch();
  ~SubmitBatch();
  SubmitBatch(const SubmitBatch &) = delete;
  SubmitBatch &operator=(const SubmitBatch &) = delete;
};

/// When a per-file source (image_folder, files over remote objects) tops up
/// its window of objects asked for ahead (SourceStage, PositionalSource):
/// once `burst` of its `depth` slots are free, all at once (in a
/// SubmitBatch), rather than one request per record taken: one pass of the
/// client (its code run once between two decodes, not cold for each
/// request) and the server's connections woken together
/// (bench/results.md, nineteenth session: image_folder over s3:// with no
/// added latency, 32 in flight, 0.94-0.96x local's CPU per record against
/// 0.91-0.94x one at a time). The lead then falls to depth - burst
/// objects before a top-up, so the burst adapts as TCP's window does: it
/// doubles after each window of records during which no reader stalled
/// (found its object not yet arrived; RemoteTotals::readerStalls) and
/// halves at a stall, between 1 and depth - 1. With latency that the
/// window only just covers it stays near 1 (as before); with latency to
/// spare it reaches depth - 1. SLUICE_NO_REQUEST_BURSTS=1: one at a time.
class RequestBursts {
public:
  /// Called once per record taken, with the window's depth, how many of
  /// its slots are not asked for yet, and readerStalls() now: whether to
  /// ask for them now.
  bool topUp(size_t depth, size_t unasked, uint64_t stalls);
  /// Whether bursts are on (SLUICE_NO_REQUEST_BURSTS unset).
  static bool on();
  size_t burst() const { return burst_; }

private:
  size_t burst_ = 1;
  size_t calm_ = 0;         ///< records taken since the last change
  uint64_t stallsSeen_ = 0; ///< RemoteTotals::readerStalls then
  bool started_ = false;
};

/// Starts a GET of `url` (s3:// or http(s)://): the whole object when
/// length < 0, else bytes [offset, offset + length). `ifNoneMatch` (an
/// ETag) makes it conditional: Fetched::notModified when it still is.
std::shared_ptr<PendingFetch>
startFetch(std::shared_ptr<const RemoteConfig> cfg, const std::string &url,
           int64_t offset = 0, int64_t length = -1,
           std::string ifNoneMatch = "");

/// Starts a GET of the whole object `url` through cfg.cache when the source
/// has one: a cached entry is asked for with If-None-Match, and on 304 the
/// result's body is read from the entry (size and CRC checked; a damaged
/// entry is dropped and the object fetched); a 200 is stored (temporary
/// file + rename). Without a cache, startFetch(cfg, url).
std::shared_ptr<PendingFetch>
startObjectFetch(std::shared_ptr<const RemoteConfig> cfg,
                 const std::string &url);

/// Fetched objects kept on a local disk (`remote: {cache: DIR, cache_size:
/// SIZE}`), so a later epoch reads them locally: one file per object with
/// its ETag, size and CRC-32C, written to a temporary name and renamed
/// (processes sharing the directory never see half an entry), bounded in
/// bytes (least recently used entries are removed), used only when the
/// server says the object has not changed (If-None-Match: 304).
class ObjectCache : public std::enable_shared_from_this<ObjectCache> {
public:
  /// The process's cache of `dir` (created if missing); maxBytes <= 0: no
  /// bound.
  static Expected<std::shared_ptr<ObjectCache>> open(const std::string &dir,
                                                     int64_t maxBytes);
  struct Entry {
    std::string path, etag;
    int64_t size = -1;      ///< of the object
    int64_t dataOffset = 0; ///< where its bytes start in the file
    uint32_t crc = 0;       ///< CRC-32C of the bytes
  };
  /// The entry of `url`, if there is one (its header only is read).
  std::optional<Entry> lookup(const std::string &url);
  /// The entry's bytes, checked (size, CRC); false (and the entry removed)
  /// when it is gone or damaged.
  bool read(const Entry &e, std::string &out);
  /// The entry's file positioned at its bytes (size checked), or -1 (and
  /// the entry removed when damaged). The caller closes it.
  int openData(const Entry &e);
  /// Keeps `bytes` as version `etag` of `url`; false when not kept (no
  /// ETag, larger than the bound, a write error).
  bool store(const std::string &url, const std::string &etag,
             std::string_view bytes);

  /// Writes an entry as its bytes arrive (ranged chunks, in order); the
  /// entry appears at commit() only, complete, or never.
  class Writer {
  public:
    Writer(std::shared_ptr<ObjectCache> cache, std::string url,
           std::string etag, int64_t size);
    ~Writer();
    bool ok() const { return fd_ >= 0; }
    bool append(const char *p, size_t n);
    bool commit();

  private:
    void fail();
    std::shared_ptr<ObjectCache> cache_;
    std::string url_, etag_, final_, temp_;
    int64_t size_ = 0, written_ = 0, headerBytes_ = 0;
    uint32_t crc_ = 0;
    int fd_ = -1;
  };

  const std::string &dir() const { return dir_; }

private:
  ObjectCache(std::string dir, int64_t maxBytes);
  std::string pathOf(const std::string &url) const;
  int64_t scanBytes() const;
  void drop(const Entry &e);
  void touch(const Entry &e);
  /// A new entry of `bytes` was renamed into place: evict beyond the bound.
  void added(int64_t bytes, const std::string &keep);

  std::string dir_;
  std::mutex m_;
  int64_t maxBytes_ = 0; ///< guarded by m_
  int64_t total_ = 0;    ///< guarded by m_
};

/// The first bytes of a ranged stream (RemoteStream), requested before its
/// reader opens it: the next shards of a sequential source are asked for
/// while the current one is read (FetchAhead::startStream), so a shard's
/// first round trips do not stall the reader. One request of up to a whole
/// window of chunks (FetchAhead::windowAhead): the chunks after it are asked
/// for only when the reader opens the shard, and with one chunk ahead the
/// reader would wait a round trip for the second. open() uses it when it
/// asks for whole chunks of the size it reads (its budget did not shrink
/// the chunk below a divisor of it).
struct FirstChunk {
  std::shared_ptr<PendingFetch> fetch; ///< null: none was started
  /// The cached entry it asked the server about (If-None-Match).
  std::optional<ObjectCache::Entry> entry;
  size_t chunk = 0; ///< bytes asked for
};

/// Starts `url`'s first `bytes` (0: one chunk, cfg.chunkBytes, as
/// RemoteStream::open would ask), with If-None-Match when cfg.cache holds an
/// entry.
FirstChunk startFirstChunk(std::shared_ptr<const RemoteConfig> cfg,
                           const std::string &url, size_t bytes = 0);

/// The fetches a source starts ahead of its readers: shard -> its GET.
/// Per-file sources (image_folder, files) fetch whole objects
/// (startObject); sequential sources (webdataset, tfrecord, csv, text
/// lines, npy) fetch the first window of chunks of the next shards'
/// streams (startStream), `depth` shards ahead (SourceBase::prefetchDepth).
/// Bounded by a few windows of the source's concurrency and by the budget: each
/// fetch reserves, as it is started, what it will hold (a stream's chunk; for a
/// whole object the size of the largest object taken so far, kFirstGuessBytes
/// before the first) in the pipeline's "objects ahead" account
/// (SourceBase::setPrefetchLimit), and a fetch the budget cannot reserve (more
/// than a quarter of what it has left) is not started (the shard is then
/// fetched when opened). The reservation goes when a reader takes the fetch
/// (the reader counts what it holds itself) or when the pipeline ends and drops
/// what is still ahead. An object larger than every earlier one is counted at
/// the earlier size until taken.
class FetchAhead {
public:
  static constexpr int64_t kFirstGuessBytes = int64_t(256) << 10;

  /// `nextPass`: the shard is one of the next pass's first (counted in
  /// RemoteTotals::nextPassAhead, and nextPassTaken when a reader takes it).
  void startObject(const std::shared_ptr<const RemoteConfig> &cfg, size_t shard,
                   const std::string &url, bool nextPass = false);
  void startStream(const std::shared_ptr<const RemoteConfig> &cfg, size_t shard,
                   const std::string &url, size_t depth, bool nextPass = false);
  /// Whether a shard's first request ahead covers a window of chunks (on)
  /// or one chunk (SLUICE_NO_SHARD_WINDOW_AHEAD=1).
  static bool windowAhead();
  /// The fetch of `shard` started ahead (fetch null: none), done for a
  /// whole object; its reservation is released.
  FirstChunk take(size_t shard);
  void setLimit(AllocationLimit *limit);

private:
  struct Ahead {
    FirstChunk first;
    int64_t bytes = 0; ///< reserved in limit_
    bool nextPass = false;
  };
  /// Reserves `bytes` for a fetch of `shard` ahead; false: not started.
  bool reserve(const std::shared_ptr<const RemoteConfig> &cfg, size_t shard,
               int64_t bytes);
  std::mutex m_;
  std::unordered_map<size_t, Ahead> ahead_;
  AllocationLimit *limit_ = nullptr;
  int64_t largest_ = -1; ///< -1: no whole object taken yet
};

/// Process-wide counters of the object caches (stats).
struct ObjectCacheTotals {
  uint64_t hits = 0;      ///< objects read from the cache (304)
  uint64_t misses = 0;    ///< objects fetched with a cache (stored if kept)
  uint64_t stale = 0;     ///< misses where the cached ETag had changed
  uint64_t bytesRead = 0; ///< object bytes read from the cache
  uint64_t bytesStored = 0;
  uint64_t evictions = 0;
  uint64_t damaged = 0; ///< entries dropped (wrong size or CRC, vanished)
};
ObjectCacheTotals objectCacheTotals();
void countCacheHit();
void countCacheMiss(bool stale);
void countCacheBytes(uint64_t n);

/// Process-wide counters of remote reads (stats, the tuner).
struct RemoteTotals {
  uint64_t requests = 0;      ///< attempts sent, retries included
  uint64_t retries = 0;       ///< attempts repeated after a retryable failure
  uint64_t failures = 0;      ///< requests that failed for good
  uint64_t bytes = 0;         ///< body bytes received
  uint64_t bodiesReused = 0;  ///< responses written into a kept buffer
  uint64_t bodiesPopulated = 0; ///< fresh bodies faulted in at once
  uint64_t bodiesMapped = 0;    ///< fresh chunk bodies on huge pages (Body)
  /// libcurl's allocations served by a block it freed before (its
  /// transfers' receive buffers, kept on the client threads).
  uint64_t curlBuffersReused = 0;
  /// epoll_ctl calls made for libcurl's sockets.
  uint64_t socketUpdates = 0;
  /// Transfers finished by a reader that waited for one (or a thread that
  /// sent one) rather than by a client thread.
  uint64_t finishedByReaders = 0;
  uint64_t clientThreads = 0;   ///< client threads made by the process
  double medianLatencyMs = 0; ///< time to the first byte, recent requests
  /// Time from sending to the last byte (latency + transfer), recent
  /// successful requests: what Little's law multiplies by the rate.
  double medianRequestMs = 0;
  uint64_t peakInFlight = 0; ///< most requests at once since the reset
  /// Seconds during which at least one response was arriving: `bytes` over
  /// these is the bandwidth the client received at, however many requests
  /// ran at once and whatever their sizes (the tuner's model of a windowed
  /// source).
  double receiveSeconds = 0;
  /// Fetches of the next pass's first shards started before the current
  /// pass ended (FetchAhead, nextPass), and those a reader took.
  uint64_t nextPassAhead = 0;
  uint64_t nextPassTaken = 0;
  /// Median latency of the recent requests during which no other response
  /// was arriving (the fastest tenth of all when fewer than 8 were): the
  /// latency without queueing behind other requests' bytes.
  double unloadedLatencyMs = 0;
  /// Ranged streams opened and their objects' bytes (a sequential source's
  /// mean shard size).
  uint64_t streams = 0;
  uint64_t streamBytes = 0;
  /// Requests sent together (SubmitBatch): how many batches, and their
  /// requests.
  uint64_t bursts = 0;
  uint64_t burstRequests = 0;
  /// Waits of a reader for a response that had not arrived: a reader that
  /// slept until another thread (the client's) received it slept over a
  /// millisecond, or, where readers drive (SLUICE_REMOTE_WAITER_DRIVES=1),
  /// epoll had nothing for the one that drove (RequestBursts).
  uint64_t readerStalls = 0;
};
RemoteTotals remoteTotals();
/// RemoteTotals::readerStalls alone (one atomic load, per record).
uint64_t readerStalls();
/// The process's listings of s3:// prefixes and patterns so far: the
/// ListObjectsV2 requests, the keys they returned, and the seconds spent
/// waiting for them (three counters read, for Source::create's before and
/// after; remoteTotals() also takes a lock and computes medians).
struct ListingTotals {
  uint64_t requests = 0;
  uint64_t keys = 0;
  double seconds = 0;
};
ListingTotals listingTotals();
/// Starts counting peakInFlight anew (a pipeline being built).
void resetRemotePeak();

/// Counts the response buffers the client keeps for reuse (consumed chunk
/// bodies, at most 4 and 32 MiB) in `limit` from now on: a pipeline that
/// reads remote objects lends its "remote bodies (idle)" account as it
/// starts. What the limit cannot hold is freed; the kept bytes stay within
/// a sixteenth of a limited budget.
void setRemoteBodyLimit(AllocationLimit *limit);
/// As the pipeline that lent `limit` ends: the kept buffers are freed and
/// their reservation released (nothing happens if another pipeline's limit
/// has replaced it).
void clearRemoteBodyLimit(AllocationLimit *limit);
/// Bytes of the kept response buffers now.
size_t remoteBodiesKept();

/// Sequential ranged reads of one object with up to cfg.concurrency chunks
/// in flight ahead of the reader. The chunks held (in flight or not yet
/// consumed) are counted in the budget of the allocation scope open when
/// open() is called; the window shrinks (down to one chunk) when the budget
/// cannot give more. Every chunk must come from the same version of the
/// object (its ETag) and be complete: otherwise read() fails.
class RemoteStream {
public:
  RemoteStream(std::shared_ptr<const RemoteConfig> cfg, std::string url);
  ~RemoteStream();
  /// Fetches the first chunk (or takes `ahead`'s, when it asked for the
  /// chunk open() would): false with `error` (404, 403, ...).
  bool open(std::string &error, FirstChunk *ahead = nullptr);
  /// Copies up to n bytes; 0 at the end, -1 with `error` on failure.
  long read(char *dst, size_t n, std::string &error);
  /// The rest of the current chunk (the next one's when it is used up),
  /// lent instead of copied (BufferedInput's window over it): `p` stays
  /// valid until the next read() or borrow(). 0 at the end, -1 with `error`
  /// on failure, -2 when the object is read from a cached entry's file
  /// (read() it instead).
  long borrow(const char *&p, std::string &error);
  uint64_t size() const { return static_cast<uint64_t>(size_); }

private:
  void topUp();
  /// Waits for the next chunk in flight into cur_: 1, 0 at the end, -1
  /// with `error` (failed, truncated, another version of the object).
  int nextChunk(std::string &error);
  /// Hands a chunk lent by borrow() back (to BodyPool or the allocator).
  void releaseLent();
  /// Appends the chunk just received to writer_ (commits after the last).
  void keepChunk();
  std::shared_ptr<const RemoteConfig> cfg_;
  std::string url_, etag_;
  int64_t size_ = 0;
  size_t chunk_ = 0;
  int window_ = 1;
  std::vector<std::pair<int64_t, std::shared_ptr<PendingFetch>>> inFlight_;
  Body cur_; ///< the chunk being consumed
  size_t curPos_ = 0;
  bool lent_ = false; ///< cur_ is lent whole (borrow()): kept until the next
                      ///< read() or borrow()
  int64_t nextStart_ = 0; ///< offset of the next chunk to request
  int64_t curEnd_ = 0;    ///< offset after cur_
  HeldAllocation held_;
  /// The cached entry being read instead (cfg.cache said 304), or -1.
  int cacheFd_ = -1;
  /// The entry being written as the chunks are consumed (cfg.cache).
  std::unique_ptr<ObjectCache::Writer> writer_;
};

} // namespace sluice::runtime::detail

#endif // SLUICE_RUNTIME_LIB_SOURCES_REMOTE_H
