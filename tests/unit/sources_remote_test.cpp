//===- sources_remote_test.cpp - URL patterns and remote settings ---------===//
//
// What needs no server: brace lists (WebDataset's shard-{000..099}.tar),
// HTTP globs refused with the brace form, and where a source's remote
// settings and credentials come from (its `remote` parameter over the
// environment and ~/.aws/credentials), never echoing a secret. Reads from
// real servers are tested in tests/python/test_remote.py.
//
//===----------------------------------------------------------------------===//

#include "sources_test_util.h"

#include "../../runtime/lib/sources/Remote.h"

#include <cstdlib>
#include <fstream>

#include <sys/wait.h>
#include <unistd.h>

using namespace sluice;
using namespace sluice::testing;
using namespace sluice::runtime::detail;

namespace {

struct BraceCase {
  const char *pattern;
  std::vector<std::string> want;
};

class Braces : public ::testing::TestWithParam<BraceCase> {};

TEST_P(Braces, Expand) {
  EXPECT_EQ(expandBraces(GetParam().pattern), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Patterns, Braces,
    ::testing::Values(
        BraceCase{"plain.tar", {"plain.tar"}},
        BraceCase{"s-{000..002}.tar", {"s-000.tar", "s-001.tar", "s-002.tar"}},
        BraceCase{"s-{8..10}", {"s-8", "s-9", "s-10"}},
        BraceCase{"s-{3..1}", {"s-3", "s-2", "s-1"}},
        BraceCase{"{train,val}.csv", {"train.csv", "val.csv"}},
        BraceCase{"{a,b}{1,2}", {"a1", "a2", "b1", "b2"}},
        BraceCase{"{a,b{1,2}}", {"a", "b1", "b2"}},
        BraceCase{"{x}", {"{x}"}},          // one alternative: literal, as bash
        BraceCase{"open{a,b", {"open{a,b"}} // unclosed: literal
        ));

/// Sets environment variables for one test and restores them after.
class Env {
public:
  void set(const char *name, const std::string &value) {
    save(name);
    ::setenv(name, value.c_str(), 1);
  }
  void unset(const char *name) {
    save(name);
    ::unsetenv(name);
  }
  ~Env() {
    for (auto &[name, old] : saved_) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

private:
  void save(const char *name) {
    for (auto &s : saved_)
      if (s.first == name)
        return;
    const char *v = std::getenv(name);
    saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

/// A clean AWS environment with the credentials file in `dir`.
void cleanAws(Env &env, const TempDir &dir) {
  for (const char *v :
       {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN"})
    env.unset(v);
  env.set("AWS_SHARED_CREDENTIALS_FILE", dir / "credentials");
  env.set("AWS_CONFIG_FILE", dir / "config");
  env.set("AWS_EC2_METADATA_DISABLED", "true");
}

/// Credentials are looked for only for a source that names an s3:// URL.
const char *kS3Url = "s3://bucket/key";

Value remoteParams(std::initializer_list<std::pair<std::string, Value>> r) {
  Value m = Value::map();
  for (const auto &[k, v] : r)
    m.set(k, v);
  return params({{"remote", m}, {"files", str(kS3Url)}});
}

TEST(RemoteConfig, SpecOverridesTheEnvironment) {
  TempDir dir;
  Env env;
  cleanAws(env, dir);
  env.set("AWS_REGION", "eu-west-1");
  env.set("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
  env.set("AWS_ACCESS_KEY_ID", "AKIDENV");
  env.set("AWS_SECRET_ACCESS_KEY", "secret-env");
  auto fromEnv = remoteConfigFor("csv", params({{"files", str(kS3Url)}}));
  ASSERT_TRUE(fromEnv) << fromEnv.status().message();
  EXPECT_EQ((*fromEnv)->region, "eu-west-1");
  EXPECT_EQ((*fromEnv)->endpoint, "http://127.0.0.1:1");
  ASSERT_TRUE((*fromEnv)->credentials);
  EXPECT_EQ((*fromEnv)->credentials->accessKey, "AKIDENV");
  EXPECT_EQ((*fromEnv)->credentialSource, "environment");

  auto fromSpec = remoteConfigFor(
      "csv", remoteParams({{"region", str("ap-south-1")},
                           {"endpoint", str("http://127.0.0.1:2")},
                           {"concurrency", integer(32)},
                           {"chunk_size", str("1MiB")}}));
  ASSERT_TRUE(fromSpec) << fromSpec.status().message();
  EXPECT_EQ((*fromSpec)->region, "ap-south-1");
  EXPECT_EQ((*fromSpec)->endpoint, "http://127.0.0.1:2");
  EXPECT_EQ((*fromSpec)->concurrency, 32);
  EXPECT_EQ((*fromSpec)->chunkBytes, size_t(1) << 20);
}

TEST(RemoteConfig, ProfilesOfTheCredentialsFile) {
  TempDir dir;
  Env env;
  cleanAws(env, dir);
  dir.write("credentials", "[default]\naws_access_key_id = AKIDDEFAULT\n"
                           "aws_secret_access_key = secret-default\n"
                           "\n[train]\naws_access_key_id=AKIDTRAIN\n"
                           "aws_secret_access_key=secret-train\n"
                           "aws_session_token = token-train\n");
  auto def = remoteConfigFor("csv", params({{"files", str(kS3Url)}}));
  ASSERT_TRUE(def);
  EXPECT_EQ((*def)->credentials->accessKey, "AKIDDEFAULT");

  env.set("AWS_PROFILE", "train");
  auto train = remoteConfigFor("csv", params({{"files", str(kS3Url)}}));
  ASSERT_TRUE(train);
  EXPECT_EQ((*train)->credentials->accessKey, "AKIDTRAIN");
  EXPECT_EQ((*train)->credentials->sessionToken, "token-train");

  // A profile named in the spec wins over the environment's keys.
  env.unset("AWS_PROFILE");
  env.set("AWS_ACCESS_KEY_ID", "AKIDENV");
  env.set("AWS_SECRET_ACCESS_KEY", "secret-env");
  auto named =
      remoteConfigFor("csv", remoteParams({{"profile", str("train")}}));
  ASSERT_TRUE(named);
  EXPECT_EQ((*named)->credentials->accessKey, "AKIDTRAIN");

  auto missing = remoteConfigFor("csv", remoteParams({{"profile", str("x")}}));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("no profile 'x'"),
            std::string::npos);
  EXPECT_EQ(missing.status().message().find("secret-"), std::string::npos);
}

TEST(RemoteConfig, AnonymousWithoutCredentialsAndHalfSetKeysRefused) {
  TempDir dir;
  Env env;
  cleanAws(env, dir);
  auto anon = remoteConfigFor("csv", params({{"files", str(kS3Url)}}));
  ASSERT_TRUE(anon);
  EXPECT_FALSE((*anon)->credentials);
  EXPECT_EQ((*anon)->region, "us-east-1");

  env.set("AWS_ACCESS_KEY_ID", "AKID");
  auto half = remoteConfigFor("csv", params({{"files", str(kS3Url)}}));
  ASSERT_FALSE(half);
  EXPECT_NE(half.status().message().find("AWS_SECRET_ACCESS_KEY is not"),
            std::string::npos);
}

TEST(RemoteConfig, CredentialsAreLookedForOnlyForS3Urls) {
  TempDir dir;
  Env env;
  cleanAws(env, dir);
  // A default profile that signs in through SSO without its sso-session
  // section: an error for s3://, which needs its keys, and no matter to an
  // https:// source.
  {
    std::ofstream f(dir / "config");
    f << "[default]\nsso_session = corp\nregion = eu-west-1\n";
  }
  auto s3 = remoteConfigFor("csv", params({{"files", str(kS3Url)}}));
  ASSERT_FALSE(s3);
  EXPECT_NE(s3.status().message().find("names sso_session 'corp', and"),
            std::string::npos)
      << s3.status().message();
  auto https = remoteConfigFor(
      "csv", params({{"files", str("https://example.invalid/a.csv")}}));
  ASSERT_TRUE(https) << https.status().message();
  EXPECT_FALSE((*https)->credentials);
  EXPECT_FALSE((*https)->provider);
  EXPECT_EQ((*https)->credentialSource, "none (no s3:// URL)");
  EXPECT_EQ((*https)->region, "eu-west-1");
}

TEST(RemotePatterns, HttpGlobIsRefusedWithTheBraceForm) {
  RemoteConfig cfg;
  auto r = expandRemotePattern("webdataset", "files",
                               "https://example.invalid/shard-*.tar", cfg);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("HTTP has no listing"),
            std::string::npos);
  EXPECT_NE(r.status().message().find("shard-{000000..000099}.tar"),
            std::string::npos);
  // A brace list needs no listing: its names come back as they are.
  auto ok = expandRemotePattern("webdataset", "files",
                                "https://example.invalid/s-{0..2}.tar", cfg);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, (std::vector<std::string>{"https://example.invalid/s-0.tar",
                                           "https://example.invalid/s-1.tar",
                                           "https://example.invalid/s-2.tar"}));
}

TEST(RemotePatterns, FileUrlsAreLocalPaths) {
  EXPECT_EQ(stripFileUrl("file:///data/x.csv"), "/data/x.csv");
  EXPECT_EQ(stripFileUrl("file://localhost/data/x.csv"), "/data/x.csv");
  EXPECT_EQ(stripFileUrl("/data/x.csv"), "/data/x.csv");
  TempDir dir;
  dir.write("a.txt", "one\ntwo\n");
  auto src =
      make("text_lines", params({{"files", str("file://" + dir / "a.txt")}}),
           dir.path());
  ASSERT_TRUE(src);
  EXPECT_EQ(src->numShards(), 1u);
  EXPECT_EQ(src->shardName(0), dir / "a.txt");
}

} // namespace

namespace {

std::string pattern(size_t n, char first) {
  std::string s(n, 0);
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>(first + i % 251);
  return s;
}

// A ranged chunk's body (Remote.h, Body): a mapping on a 2 MiB boundary of
// whole 2 MiB pages where that adds at most a quarter, else of its size in
// 4 KiB pages; none under 1.6 MiB. Its bytes are kept through moves, going
// over the mapping (a wrong Content-Length) moves them into a string, and
// takeString() copies them out.
TEST(RemoteBody, LargeChunkIsAMappingOfHugePages) {
  EXPECT_EQ(Body::hugeCapacity(1 << 20), 0u);
  EXPECT_EQ(Body::hugeCapacity(size_t(1700) << 10), size_t(2) << 20);
  EXPECT_EQ(Body::hugeCapacity(size_t(4) << 20), size_t(4) << 20);
  EXPECT_EQ(Body::hugeCapacity((size_t(4) << 20) - 5), size_t(4) << 20);
  // 2 MiB and 100 KiB: a second 2 MiB page would add 95%.
  EXPECT_EQ(Body::hugeCapacity((size_t(2) << 20) + 100 * 1024 - 3),
            (size_t(2) << 20) + 100 * 1024);

  const std::string want = pattern(size_t(3) << 20, 'a');
  Body b;
  ASSERT_TRUE(b.reserveMapped(want.size()));
  EXPECT_TRUE(b.mapped());
  // A fourth 1 MiB would add a third: 2 MiB in a huge page, 1 MiB in 4 KiB
  // ones.
  EXPECT_EQ(b.capacity(), size_t(3) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t(2) << 20), 0u);
  // Not twice.
  EXPECT_FALSE(b.reserveMapped(want.size()));
  for (size_t at = 0; at < want.size(); at += 16384)
    b.append(want.data() + at, std::min<size_t>(16384, want.size() - at));
  EXPECT_EQ(b.view(), want);

  Body moved = std::move(b);
  EXPECT_FALSE(b.mapped());
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(moved.mapped());
  EXPECT_EQ(moved.view(), want);

  // Past the mapping: into a string, the bytes kept.
  const std::string more = pattern(size_t(2) << 20, 'k');
  moved.append(more.data(), more.size());
  EXPECT_FALSE(moved.mapped());
  EXPECT_EQ(moved.view(), want + more);

  Body again;
  ASSERT_TRUE(again.reserveMapped(want.size()));
  again.append(want.data(), want.size());
  std::string out = again.takeString();
  EXPECT_EQ(out, want);
  EXPECT_FALSE(again.mapped());
  EXPECT_TRUE(again.empty());

  // Too small for a mapping, or not empty: a string, as before.
  Body small;
  EXPECT_FALSE(small.reserveMapped(1 << 20));
  small.reserve(1 << 20);
  small.append("xy", 2);
  EXPECT_FALSE(small.reserveMapped(size_t(4) << 20));
  EXPECT_EQ(small.takeString(), "xy");
  // SLUICE_NO_REMOTE_HUGE_BODIES=1 (read once per process) is
  // test_remote.py's test_large_chunk_bodies_are_mapped_on_huge_pages.
}

} // namespace

namespace {

// The client's thread does not survive fork(): a child (a DataLoader worker)
// must get a client of its own, not wait forever on the parent's.
TEST(RemoteClient, AForkedChildMakesItsOwnClient) {
  auto cfg = std::make_shared<RemoteConfig>();
  cfg->retries = 0;
  // Port 1 on loopback: refused at once, no server needed.
  const std::string url = "http://127.0.0.1:1/x";
  std::shared_ptr<PendingFetch> parent = startFetch(cfg, url);
  ASSERT_FALSE(parent->wait().ok);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20); // a hang ends the child with SIGALRM
    std::shared_ptr<PendingFetch> child = startFetch(cfg, url);
    Fetched &r = child->wait();
    ::_exit(!r.ok && r.error.find("onnect") != std::string::npos ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status))
      << "child killed by signal "
      << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

} // namespace

namespace {

// SigV4.cpp against signatures computed by a reference implementation of
// AWS's documented algorithm (Python's hashlib/hmac; the same reference
// reproduces AWS's published GET Object example, f0e8bdb8...): the
// documented example's request without its Range header (sluice signs
// host, x-amz-content-sha256 and x-amz-date), and a path-style request to
// an endpoint with a port, an encoded key and a session token.
TEST(RequestBursts, GrowWhileNoReaderStallsAndHalveAtAStall) {
  ASSERT_TRUE(RequestBursts::on());
  RequestBursts b;
  uint64_t stalls = 7;
  // Taken records, each with `unasked` slots of a window of 16 free; the
  // stalls before the first are not the window's.
  auto take = [&](size_t unasked) { return b.topUp(16, unasked, stalls); };
  // Bursts of 1 (one at a time, as without bursts) for 15 records.
  for (int i = 0; i < 15; ++i)
    EXPECT_TRUE(take(1));
  EXPECT_FALSE(take(1)) << "the 16th calm record doubles the burst: one "
                           "free slot waits for a second";
  EXPECT_EQ(b.burst(), 2u);
  EXPECT_TRUE(take(2));
  for (int i = 0; i < 16 * 4; ++i)
    take(15);
  EXPECT_EQ(b.burst(), 15u) << "at most the depth - 1";
  EXPECT_FALSE(take(14));
  EXPECT_TRUE(take(15));
  ++stalls; // a reader found its object not yet arrived
  EXPECT_FALSE(take(6));
  EXPECT_EQ(b.burst(), 7u);
  stalls += 3; // more stalls since: one halving a record that sees them
  take(1);
  EXPECT_EQ(b.burst(), 3u);
  take(1);
  EXPECT_EQ(b.burst(), 3u) << "no new stall, not a whole calm window yet";
  // A window of 1 (or 0) is always topped up when a slot is free.
  RequestBursts one;
  EXPECT_TRUE(one.topUp(1, 1, 0));
  EXPECT_FALSE(one.topUp(1, 0, 0));
}

TEST(SigV4, SignsAnObjectGetAsAwsDocumentsIt) {
  if (!ownSigningAvailable())
    GTEST_SKIP() << "libcrypto.so.3 could not be loaded";
  Credentials cred{"AKIAIOSFODNN7EXAMPLE",
                   "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  const std::time_t may24 = 1369353600; // 2013-05-24T00:00:00Z
  std::vector<std::string> h;
  ASSERT_TRUE(signS3Get("https://examplebucket.s3.amazonaws.com:443/test.txt",
                        cred, "us-east-1", may24, h));
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[1], "x-amz-date: 20130524T000000Z");
  EXPECT_EQ(h[2], "Authorization: AWS4-HMAC-SHA256 "
                  "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                  "aws4_request, SignedHeaders=host;x-amz-content-sha256;"
                  "x-amz-date, Signature=df548e2ce037944d03f3e68682813b0937"
                  "63996d597cf890ca3d9037fd231eb4");

  cred.sessionToken = "tok/en+1=";
  h.clear();
  ASSERT_TRUE(signS3Get("http://127.0.0.1:9000/bkt/a%20b/c.jpg", cred,
                        "us-east-1", may24, h));
  ASSERT_EQ(h.size(), 4u);
  EXPECT_EQ(h[2], "x-amz-security-token: tok/en+1=");
  EXPECT_NE(h[3].find("SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                      "x-amz-security-token, Signature=53d6aff2226252d5c59c6"
                      "baad10cca067fb2800f045aec30b0175ace8feca358"),
            std::string::npos)
      << h[3];
  // The key of the day is kept: the same request signs the same again.
  std::vector<std::string> again;
  ASSERT_TRUE(signS3Get("http://127.0.0.1:9000/bkt/a%20b/c.jpg", cred,
                        "us-east-1", may24, again));
  EXPECT_EQ(again, h);
  // Another secret in the same Credentials object (as a later pipeline's
  // may be made where an earlier one's was freed): its own key.
  cred.secretKey = "other/SECRET";
  again.clear();
  ASSERT_TRUE(signS3Get("http://127.0.0.1:9000/bkt/a%20b/c.jpg", cred,
                        "us-east-1", may24, again));
  ASSERT_EQ(again.size(), 4u);
  EXPECT_NE(again[3].find("Signature=f0b73b40a35ef10c7dbe693f163d341e4d0c101"
                          "61b94e87ea6013a604b3f54d5"),
            std::string::npos)
      << again[3];
  // A query string, or a path it would have to encode itself: libcurl signs.
  h.clear();
  EXPECT_FALSE(signS3Get("http://127.0.0.1:9000/bkt?list-type=2", cred,
                         "us-east-1", may24, h));
  EXPECT_FALSE(
      signS3Get("http://127.0.0.1:9000/bkt/a b", cred, "us-east-1", may24, h));
  EXPECT_TRUE(h.empty());
}

} // namespace

namespace {

// Local patterns take the same numeric ranges as URLs (glob's GLOB_BRACE
// knows only {a,b}); every name of a range must exist.
TEST(LocalPatterns, NumericBraceRanges) {
  TempDir dir;
  for (int i = 0; i < 3; ++i)
    dir.write("s-0" + std::to_string(i) + ".txt", "x\n");
  auto src = make("text_lines", params({{"files", str("s-{00..02}.txt")}}),
                  dir.path());
  ASSERT_TRUE(src);
  ASSERT_EQ(src->numShards(), 3u);
  EXPECT_EQ(src->shardName(2), dir / "s-02.txt");
  auto missing = runtime::Source::create(
      "text_lines", params({{"files", str("s-{00..03}.txt")}}), RecordType(),
      dir.path());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("'s-03.txt' matched no files"),
            std::string::npos)
      << missing.status().message();
}

} // namespace
