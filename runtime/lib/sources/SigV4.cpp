//===- SigV4.cpp - AWS Signature Version 4 for S3 object GETs -------------===//
//
// The S3 client (Remote.cpp) signs its object GETs here instead of asking
// libcurl to (CURLOPT_AWS_SIGV4), because libcurl derives the signing key
// afresh for every request (four HMACs), formats and sorts its canonical
// headers with its printf, and fetches OpenSSL's algorithms by name at each
// digest: measured on the 2-core VM, 28-30 us of CPU per request (reading
// 43 KB pictures from s3:// without decoding, 10 epochs of 2,000, the
// allocator's trimming held constant), about half of what the client adds
// over reading local files. AWS's own SDKs keep the derived key for its day;
// so does this file, and a request then costs one SHA-256 of a ~300-byte
// canonical request and one HMAC.
//
// No cryptography is written here: SHA-256 and HMAC are OpenSSL's libcrypto
// (the same library libcurl signs with), loaded with dlopen like libcurl
// itself (CurlLoader.cpp) so that a run of local files does not load it,
// with the algorithms fetched once (EVP_MD_fetch, EVP_MAC_fetch). What is
// here is the protocol: the canonical request, the string to sign and the
// Authorization header, as AWS documents them ("Signature Calculations for
// the Authorization Header: Transferring Payload in a Single Chunk").
//
// Only plain GETs of an object (no query string) are signed here; listings
// and anything else keep libcurl's signing. When libcrypto cannot be loaded
// (or lacks OpenSSL 3's EVP_MAC), libcurl signs every request, as before.
// Off: SLUICE_NO_REMOTE_OWN_SIGNING=1.
//
//===----------------------------------------------------------------------===//

#include "Remote.h"
#include "sluice/ops/Switches.h"

#include <openssl/core.h>
#include <openssl/evp.h>

#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <mutex>

namespace sluice::runtime::detail {
namespace {

/// The libcrypto functions used, bound by name from the loaded library.
struct Crypto {
  bool ok = false;
  EVP_MD *sha256 = nullptr;
  EVP_MAC *hmac = nullptr;
  decltype(&::EVP_Digest) digest = nullptr;
  decltype(&::EVP_MAC_CTX_new) macNew = nullptr;
  decltype(&::EVP_MAC_CTX_free) macFree = nullptr;
  decltype(&::EVP_MAC_CTX_dup) macDup = nullptr;
  decltype(&::EVP_MAC_init) macInit = nullptr;
  decltype(&::EVP_MAC_update) macUpdate = nullptr;
  decltype(&::EVP_MAC_final) macFinal = nullptr;
  OSSL_PARAM digestName[2];
};

template <typename F> bool bind(void *lib, F &fn, const char *name) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

const Crypto &crypto() {
  static Crypto c;
  static std::once_flag once;
  std::call_once(once, [] {
    if (switchedOff("SLUICE_NO_REMOTE_OWN_SIGNING"))
      return;
    // libcurl (loaded first) depends on it: this finds the loaded copy.
    void *lib = ::dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return;
    decltype(&::EVP_MD_fetch) mdFetch = nullptr;
    decltype(&::EVP_MAC_fetch) macFetch = nullptr;
    decltype(&::OSSL_PARAM_construct_utf8_string) utf8 = nullptr;
    decltype(&::OSSL_PARAM_construct_end) end = nullptr;
    if (!(bind(lib, mdFetch, "EVP_MD_fetch") &&
          bind(lib, macFetch, "EVP_MAC_fetch") &&
          bind(lib, utf8, "OSSL_PARAM_construct_utf8_string") &&
          bind(lib, end, "OSSL_PARAM_construct_end") &&
          bind(lib, c.digest, "EVP_Digest") &&
          bind(lib, c.macNew, "EVP_MAC_CTX_new") &&
          bind(lib, c.macFree, "EVP_MAC_CTX_free") &&
          bind(lib, c.macDup, "EVP_MAC_CTX_dup") &&
          bind(lib, c.macInit, "EVP_MAC_init") &&
          bind(lib, c.macUpdate, "EVP_MAC_update") &&
          bind(lib, c.macFinal, "EVP_MAC_final")))
      return;
    c.sha256 = mdFetch(nullptr, "SHA256", nullptr);
    c.hmac = macFetch(nullptr, "HMAC", nullptr);
    static char sha[] = "SHA256";
    c.digestName[0] = utf8("digest", sha, 0);
    c.digestName[1] = end();
    c.ok = c.sha256 && c.hmac;
  });
  return c;
}

constexpr size_t kDigest = 32;

std::string hex(const unsigned char *p, size_t n) {
  static const char *digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

/// HMAC-SHA256 of `data` under `key` into `out` (kDigest bytes).
bool hmac(const Crypto &c, const unsigned char *key, size_t keyLen,
          std::string_view data, unsigned char *out) {
  EVP_MAC_CTX *ctx = c.macNew(c.hmac);
  if (!ctx)
    return false;
  size_t len = 0;
  bool ok =
      c.macInit(ctx, key, keyLen, c.digestName) == 1 &&
      c.macUpdate(ctx, reinterpret_cast<const unsigned char *>(data.data()),
                  data.size()) == 1 &&
      c.macFinal(ctx, out, &len, kDigest) == 1 && len == kDigest;
  c.macFree(ctx);
  return ok;
}

/// The derived signing key of one day, region and secret, as a MAC context
/// set up with it (duplicated per request). The secret is compared, not
/// the Credentials' address: a later pipeline's credentials may be made
/// where an earlier one's were freed.
struct SigningKey {
  std::string day, region, service, secret;
  EVP_MAC_CTX *ctx = nullptr;
};

/// The signing keys in use: few (one per credentials and region a run
/// reads with), re-derived when the day changes. Only the client thread
/// signs, but the lock keeps this safe for any caller.
class KeyCache {
public:
  EVP_MAC_CTX *dup(const Crypto &c, const Credentials &cred,
                   const std::string &day, const std::string &region,
                   const std::string &service) {
    std::lock_guard<std::mutex> lock(m_);
    for (SigningKey &k : keys_)
      if (k.day == day && k.region == region && k.service == service &&
          k.secret == cred.secretKey)
        return c.macDup(k.ctx);
    // Derive: kDate = HMAC("AWS4" + secret, day), then region, service,
    // "aws4_request".
    unsigned char a[kDigest], b[kDigest];
    std::string first = "AWS4" + cred.secretKey;
    bool ok = hmac(c, reinterpret_cast<const unsigned char *>(first.data()),
                   first.size(), day, a) &&
              hmac(c, a, kDigest, region, b) &&
              hmac(c, b, kDigest, service, a) &&
              hmac(c, a, kDigest, "aws4_request", b);
    std::memset(a, 0, sizeof a);
    std::fill(first.begin(), first.end(), '\0');
    if (!ok)
      return nullptr;
    EVP_MAC_CTX *ctx = c.macNew(c.hmac);
    if (!ctx || c.macInit(ctx, b, kDigest, c.digestName) != 1) {
      if (ctx)
        c.macFree(ctx);
      return nullptr;
    }
    std::memset(b, 0, sizeof b);
    // An old day's key of the same secret is replaced in place (a run
    // keeps a handful).
    for (SigningKey &k : keys_)
      if (k.secret == cred.secretKey && k.region == region &&
          k.service == service) {
        c.macFree(k.ctx);
        k.day = day;
        k.ctx = ctx;
        return c.macDup(ctx);
      }
    if (keys_.size() >= 16) {
      c.macFree(keys_.front().ctx);
      keys_.erase(keys_.begin());
    }
    keys_.push_back({day, region, service, cred.secretKey, ctx});
    return c.macDup(ctx);
  }

private:
  std::mutex m_;
  std::vector<SigningKey> keys_;
};

KeyCache &keyCache() {
  static KeyCache *k = new KeyCache; // never destroyed (the client thread)
  return *k;
}

/// Characters a canonical URI keeps as they are (S3: encoded once).
bool canonicalPathChar(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
         (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' ||
         ch == '~' || ch == '/' || ch == '%';
}

} // namespace

bool sha1Hex(std::string_view data, std::string &out) {
  // Apart from crypto(): needed whatever SLUICE_NO_REMOTE_OWN_SIGNING says,
  // and only to name a file (a few times a run).
  using Sha1 = const EVP_MD *(*)();
  static Sha1 sha1 = nullptr;
  static decltype(&::EVP_Digest) digest = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void *lib = ::dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (lib &&
        !(bind(lib, sha1, "EVP_sha1") && bind(lib, digest, "EVP_Digest")))
      sha1 = nullptr;
  });
  if (!sha1 || !digest)
    return false;
  unsigned char md[20];
  unsigned int len = 0;
  if (digest(data.data(), data.size(), md, &len, sha1(), nullptr) != 1 ||
      len != sizeof md)
    return false;
  out = hex(md, sizeof md);
  return true;
}

bool ownSigningAvailable() { return crypto().ok; }

bool signS3Get(std::string_view httpUrl, const Credentials &cred,
               const std::string &region, std::time_t when,
               std::vector<std::string> &headers) {
  const Crypto &c = crypto();
  if (!c.ok)
    return false;
  // scheme://authority/path, no query, no fragment, no user info.
  size_t scheme = httpUrl.find("://");
  if (scheme == std::string_view::npos)
    return false;
  std::string_view rest = httpUrl.substr(scheme + 3);
  const bool https = httpUrl.substr(0, scheme) == "https";
  if (!https && httpUrl.substr(0, scheme) != "http")
    return false;
  size_t slash = rest.find('/');
  std::string_view authority =
      slash == std::string_view::npos ? rest : rest.substr(0, slash);
  std::string_view path =
      slash == std::string_view::npos ? "/" : rest.substr(slash);
  if (authority.empty() ||
      authority.find_first_of("@?#") != std::string_view::npos)
    return false;
  for (char ch : path)
    if (!canonicalPathChar(ch))
      return false;
  // The Host header libcurl sends: the authority without the scheme's
  // default port.
  std::string_view host = authority;
  if (https && host.size() > 4 && host.substr(host.size() - 4) == ":443")
    host.remove_suffix(4);
  else if (!https && host.size() > 3 && host.substr(host.size() - 3) == ":80")
    host.remove_suffix(3);

  std::tm utc{};
  ::gmtime_r(&when, &utc);
  char stamp[17], day[9];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  std::strftime(day, sizeof day, "%Y%m%d", &utc);
  static constexpr const char *kEmpty =
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  const bool token = !cred.sessionToken.empty();

  std::string canonical;
  canonical.reserve(256 + path.size() + cred.sessionToken.size());
  canonical.append("GET\n").append(path).append("\n\nhost:").append(host);
  canonical.append("\nx-amz-content-sha256:").append(kEmpty);
  canonical.append("\nx-amz-date:").append(stamp);
  if (token)
    canonical.append("\nx-amz-security-token:").append(cred.sessionToken);
  const char *signedHeaders =
      token ? "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
            : "host;x-amz-content-sha256;x-amz-date";
  canonical.append("\n\n").append(signedHeaders).append("\n").append(kEmpty);

  unsigned char h[kDigest];
  unsigned int hlen = 0;
  if (c.digest(canonical.data(), canonical.size(), h, &hlen, c.sha256,
               nullptr) != 1 ||
      hlen != kDigest)
    return false;
  std::string scope = std::string(day) + "/" + region + "/s3/aws4_request";
  std::string toSign = std::string("AWS4-HMAC-SHA256\n") + stamp + "\n" +
                       scope + "\n" + hex(h, kDigest);

  EVP_MAC_CTX *ctx = keyCache().dup(c, cred, day, region, "s3");
  if (!ctx)
    return false;
  unsigned char sig[kDigest];
  size_t len = 0;
  bool ok =
      c.macUpdate(ctx, reinterpret_cast<const unsigned char *>(toSign.data()),
                  toSign.size()) == 1 &&
      c.macFinal(ctx, sig, &len, kDigest) == 1 && len == kDigest;
  c.macFree(ctx);
  if (!ok)
    return false;
  headers.push_back(std::string("x-amz-content-sha256: ") + kEmpty);
  headers.push_back(std::string("x-amz-date: ") + stamp);
  if (token)
    headers.push_back("x-amz-security-token: " + cred.sessionToken);
  headers.push_back(
      "Authorization: AWS4-HMAC-SHA256 Credential=" + cred.accessKey + "/" +
      scope + ", SignedHeaders=" + signedHeaders +
      ", Signature=" + hex(sig, kDigest));
  return true;
}

} // namespace sluice::runtime::detail
