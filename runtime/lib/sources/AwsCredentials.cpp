//===- AwsCredentials.cpp - Credentials that expire: roles, processes ----===//
//
// On AWS a training host rarely has keys of its own: it runs with a role,
// whose temporary keys a service hands out and renews. Three places give
// them, tried in the order AWS's SDKs try them after the environment's keys
// and the profiles (Remote.cpp, remoteConfigFor):
//
//  - a web identity token (EKS's IAM roles for service accounts):
//    AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, exchanged with STS's
//    AssumeRoleWithWebIdentity (an unsigned request: the token is the
//    proof) for keys, a session token and their expiry, answered in XML;
//  - a container's credentials endpoint (ECS tasks, EKS Pod Identity):
//    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (under http://169.254.170.2)
//    or _FULL_URI, with the Authorization header from
//    AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every fetch: it is
//    rotated) or _TOKEN, answered in JSON;
//  - the EC2 instance metadata service, IMDSv2: a session token from a PUT
//    to /latest/api/token, then the role's name and its keys under
//    /latest/meta-data/iam/security-credentials/, in JSON. A service that
//    refuses the PUT with an HTTP status (IMDSv1 only) is asked without the
//    token. On a host that is not an EC2 instance nothing answers: the
//    first fetch fails within a second and the requests go anonymous, as
//    they did before (AWS_EC2_METADATA_DISABLED=true skips the question).
//
// A profile (Remote.cpp, profileCredentials) may also name a role to
// assume with another profile's keys (role_arn and source_profile, or
// credential_source: the environment, the instance's or the container's
// role), which STS's AssumeRole exchanges for the role's (a request signed
// with those keys, by libcurl's CURLOPT_AWS_SIGV4), or a command that
// prints keys (credential_process: run without a shell, its JSON read from
// its stdout; what it writes to stderr goes to the user's, as it may ask
// for an MFA code there), or a role whose keys IAM Identity Center (SSO)
// hands out for the access token `aws sso login` cached (the SSO portal's
// GetRoleCredentials, in JSON; the token is read from its file at every
// fetch, so a new `aws sso login` is picked up). An sso-session's token is
// renewed with the refresh token cached beside it (SSO OIDC's CreateToken)
// within 15 minutes of its expiry, as AWS's CLI and SDKs renew it, and
// written back for them; one that cannot be renewed (the older form, which
// has no refresh token, or a refused renewal) and has expired is an error
// that says to sign in again.
//
// Each place's provider is shared by the process, so its pipelines share
// the keys and their renewal. The HTTP requests are libcurl's (an easy
// handle per fetch, a few an hour), never through a proxy (the endpoints
// are link-local or the host's own), and the answers are parsed with
// nlohmann-json and Remote.cpp's XML reader. Keys are never put in a
// message: a failed fetch says where it went and what came back, not what.
//
//===----------------------------------------------------------------------===//

#include "Remote.h"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <map>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <sys/file.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace sluice::runtime::detail {
namespace {

using SysClock = std::chrono::system_clock;

struct Answer {
  long status = 0;
  std::string body;
  std::string error; ///< a connection failure (no HTTP status)
};

size_t collect(char *p, size_t size, size_t n, void *user) {
  auto *out = static_cast<std::string *>(user);
  // Credentials documents are a few KB: anything past 1 MiB is not one.
  if (out->size() + size * n > (size_t(1) << 20))
    return 0;
  out->append(p, size * n);
  return size * n;
}

/// One request, waited for: at most `timeoutMs`, no proxy, no redirect;
/// signed (SigV4, libcurl's CURLOPT_AWS_SIGV4) for `signRegion`'s STS with
/// `signer` when given; `body` sent as the request's body when given.
Answer call(const char *method, const std::string &url,
            const std::vector<std::string> &headers, long timeoutMs,
            const Credentials *signer = nullptr,
            const std::string &signRegion = "",
            const std::string *body = nullptr) {
  Answer a;
  CURL *e = curl_easy_init();
  if (!e) {
    a.error = "libcurl could not make a request";
    return a;
  }
  curl_slist *list = nullptr;
  for (const std::string &h : headers)
    list = curl_slist_append(list, h.c_str());
  std::string sigv4 = "aws:amz:" + signRegion + ":sts";
  if (signer) {
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(e, CURLOPT_USERNAME, signer->accessKey.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, signer->secretKey.c_str());
    // Signed with the rest: libcurl signs every header of the request.
    if (!signer->sessionToken.empty())
      list = curl_slist_append(
          list, ("x-amz-security-token: " + signer->sessionToken).c_str());
  }
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  if (body) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(body->size()));
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &collect);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &a.body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeoutMs);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeoutMs, 1000L));
  CURLcode code = curl_easy_perform(e);
  if (code == CURLE_OK)
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &a.status);
  else
    a.error = std::string(curl_easy_strerror(code)) +
              (errbuf[0] ? std::string(": ") + errbuf : "");
  curl_easy_cleanup(e);
  curl_slist_free_all(list);
  return a;
}

/// "HTTP 404" or the connection's failure, for messages.
std::string what(const Answer &a) {
  return a.error.empty() ? "HTTP " + std::to_string(a.status) : a.error;
}

/// An ISO 8601 UTC time ("2026-12-01T07:00:00Z", fractions allowed) as
/// seconds since the epoch; 0 when it is not one.
std::time_t parseExpiry(const std::string &s) {
  std::tm tm{};
  const char *end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end)
    return 0;
  return ::timegm(&tm);
}

/// Keys and their expiry (0: none given).
struct Issued {
  Credentials creds;
  std::time_t expires = 0;
};

/// A string member of a JSON object, or "".
std::string member(const nlohmann::json &j, const char *k) {
  return j.is_object() && j.contains(k) && j[k].is_string()
             ? j[k].get<std::string>()
             : "";
}

/// The JSON document of the container endpoint and of the instance
/// metadata service: AccessKeyId, SecretAccessKey, Token, Expiration.
bool fromJson(const std::string &body, Issued &out, std::string &error) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  auto str = [&](const char *k) { return member(j, k); };
  if (j.is_discarded() || !j.is_object()) {
    error = "the answer is not a JSON object";
    return false;
  }
  if (std::string code = str("Code"); !code.empty() && code != "Success") {
    error = "the answer's Code is '" + code + "'";
    return false;
  }
  out.creds.accessKey = str("AccessKeyId");
  out.creds.secretKey = str("SecretAccessKey");
  out.creds.sessionToken = str("Token");
  if (out.creds.accessKey.empty() || out.creds.secretKey.empty()) {
    error = "the answer holds no AccessKeyId and SecretAccessKey";
    return false;
  }
  std::string exp = str("Expiration");
  out.expires = exp.empty() ? 0 : parseExpiry(exp);
  if (!exp.empty() && out.expires == 0) {
    error = "the answer's Expiration is not a time";
    return false;
  }
  return true;
}

/// STS's answer to AssumeRole or AssumeRoleWithWebIdentity (XML): the
/// keys, or `why` with its HTTP status and STS's error code and message.
bool fromSts(const Answer &a, Issued &f, std::string &why) {
  if (!a.error.empty() || a.status != 200) {
    why = what(a);
    if (std::string code = xmlFirst(a.body, "Code"); !code.empty())
      why += " (" + code + ": " + xmlFirst(a.body, "Message") + ")";
    return false;
  }
  f.creds.accessKey = xmlFirst(a.body, "AccessKeyId");
  f.creds.secretKey = xmlFirst(a.body, "SecretAccessKey");
  f.creds.sessionToken = xmlFirst(a.body, "SessionToken");
  if (f.creds.accessKey.empty() || f.creds.secretKey.empty()) {
    why = "the answer holds no AccessKeyId and SecretAccessKey";
    return false;
  }
  std::string exp = xmlFirst(a.body, "Expiration");
  f.expires = exp.empty() ? 0 : parseExpiry(exp);
  return true;
}

/// How many fork()s this process descends through: a child made while a
/// thread of its parent held a provider's lock (a fetch takes up to
/// seconds) would wait for it forever, so a child uses providers of its
/// own (Provider::get), in a registry of its own.
std::atomic<unsigned> forkGeneration{0};

class Provider;

/// The process's providers, by where they fetch from. A child's is new:
/// the parent's, whose lock a thread that the child does not have may
/// hold, is left alone (not freed).
struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<CredentialProvider>> all;
};
std::atomic<Registry *> registry{nullptr};

std::shared_ptr<CredentialProvider>
shared(const std::string &key,
       const std::function<std::shared_ptr<CredentialProvider>()> &make);

class Provider final : public CredentialProvider {
public:
  using Fetch = std::function<bool(Issued &, std::string &)>;
  using Make = std::function<std::shared_ptr<CredentialProvider>()>;
  Provider(std::string source, Fetch fetch, bool lastResort)
      : source_(std::move(source)), fetch_(std::move(fetch)),
        lastResort_(lastResort),
        generation_(forkGeneration.load(std::memory_order_relaxed)) {}

  /// What shared() made it from: a forked child makes it again.
  void madeBy(std::string key, Make make) {
    key_ = std::move(key);
    make_ = std::move(make);
  }

  std::shared_ptr<const Credentials> get(std::string &error) override {
    if (generation_ != forkGeneration.load(std::memory_order_relaxed))
      return shared(key_, make_)->get(error);
    SysClock::time_point now = SysClock::now();
    {
      std::lock_guard<std::mutex> lock(m_);
      if (absent_)
        return nullptr;
      if (creds_ && now < refreshAt_)
        return creds_;
    }
    // One thread fetches; while the keys held are still valid the others
    // go on with them instead of waiting.
    std::unique_lock<std::mutex> fetching(fetchMu_, std::try_to_lock);
    if (!fetching.owns_lock()) {
      {
        std::lock_guard<std::mutex> lock(m_);
        if (creds_ && now < expires_)
          return creds_;
      }
      fetching.lock();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      if (absent_)
        return nullptr;
      if (creds_ && SysClock::now() < refreshAt_)
        return creds_;
    }
    Issued f;
    std::string why;
    bool ok = fetch_(f, why);
    std::lock_guard<std::mutex> lock(m_);
    now = SysClock::now();
    if (ok) {
      creds_ = std::make_shared<const Credentials>(std::move(f.creds));
      ever_ = true;
      if (f.expires == 0) {
        // No expiry given: asked again in an hour.
        expires_ = SysClock::time_point::max();
        refreshAt_ = now + std::chrono::hours(1);
      } else {
        expires_ = SysClock::from_time_t(f.expires);
        refreshAt_ = expires_ - std::chrono::minutes(5);
        if (refreshAt_ < now + std::chrono::seconds(1))
          refreshAt_ = now + std::max<SysClock::duration>(
                                 std::chrono::seconds(1), (expires_ - now) / 2);
      }
      return creds_;
    }
    if (creds_ && now < expires_) {
      refreshAt_ = std::min(now + std::chrono::seconds(10), expires_);
      return creds_;
    }
    if (lastResort_ && !ever_) {
      // No instance role here (or not an instance): anonymous requests.
      absent_ = true;
      return nullptr;
    }
    creds_.reset();
    error = "cannot get credentials from " + source_ + ": " + why;
    return nullptr;
  }

  std::string source() const override { return source_; }

private:
  const std::string source_;
  const Fetch fetch_;
  const bool lastResort_;
  const unsigned generation_;
  std::string key_;
  Make make_;
  std::mutex fetchMu_; ///< held by the thread that fetches
  std::mutex m_;       ///< guards what follows
  std::shared_ptr<const Credentials> creds_;
  SysClock::time_point expires_{}, refreshAt_{};
  bool ever_ = false;   ///< a fetch has succeeded
  bool absent_ = false; ///< lastResort_ and the first fetch failed
};

std::shared_ptr<CredentialProvider>
shared(const std::string &key,
       const std::function<std::shared_ptr<CredentialProvider>()> &make) {
  static const bool registered = [] {
    registry.store(new Registry);
    ::pthread_atfork(nullptr, nullptr, [] {
      registry.store(new Registry); // the parent's is left as it is
      forkGeneration.fetch_add(1, std::memory_order_relaxed);
    });
    return true;
  }();
  (void)registered;
  Registry &r = *registry.load();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<CredentialProvider> &p = r.all[key];
  if (!p) {
    p = make();
    static_cast<Provider &>(*p).madeBy(key, make);
  }
  return p;
}

std::string readTrimmed(const std::string &path, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    return "";
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' ||
                        s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  if (s.empty())
    error = path + " is empty";
  return s;
}

/// `command` split into words as a POSIX shell splits them: blanks
/// separate words, single quotes keep everything, double quotes keep all
/// but a backslash before " \ $ `, a backslash outside quotes keeps the
/// next character; nothing is expanded. False (with `error`) on an
/// unfinished quote.
bool splitWords(const std::string &command, std::vector<std::string> &words,
                std::string &error) {
  std::string word;
  bool inWord = false;
  for (size_t i = 0; i < command.size(); ++i) {
    char c = command[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (inWord)
        words.push_back(std::move(word));
      word.clear();
      inWord = false;
      continue;
    }
    inWord = true;
    if (c == '\\') {
      if (++i < command.size())
        word += command[i];
    } else if (c == '\'') {
      size_t end = command.find('\'', i + 1);
      if (end == std::string::npos) {
        error = "a single quote is not closed";
        return false;
      }
      word += command.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= command.size()) {
          error = "a double quote is not closed";
          return false;
        }
        if (command[i] == '"')
          break;
        if (command[i] == '\\' && i + 1 < command.size() &&
            std::strchr("\"\\$`", command[i + 1]))
          ++i;
        word += command[i];
      }
    } else {
      word += c;
    }
  }
  if (inWord)
    words.push_back(std::move(word));
  if (words.empty())
    error = "it is empty";
  return error.empty();
}

/// How long a credential_process may take (it may ask for an MFA code on
/// the terminal) before it is killed and the fetch fails: 120 s, or
/// SLUICE_CREDENTIAL_PROCESS_TIMEOUT seconds (1 to 3600).
int processTimeoutSeconds() {
  std::string v = envOr("SLUICE_CREDENTIAL_PROCESS_TIMEOUT");
  char *end = nullptr;
  long n = v.empty() ? 0 : std::strtol(v.c_str(), &end, 10);
  return n >= 1 && n <= 3600 && *end == '\0' ? static_cast<int>(n) : 120;
}

/// Runs `words` (PATH searched) with stdin and stderr the caller's and its
/// stdout read whole (1 MiB at most): true with `out` when it exits 0.
bool runForOutput(const std::vector<std::string> &words, std::string &out,
                  std::string &error) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = std::string("cannot make a pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char *> argv;
  for (const std::string &w : words)
    argv.push_back(const_cast<char *>(w.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc =
      ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    error = "cannot run " + words[0] + ": " + std::strerror(rc);
    return false;
  }
  const int timeout = processTimeoutSeconds();
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
  bool tooLong = false, timedOut = false;
  char buf[16384];
  for (;;) {
    int left =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())
                             .count());
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = ::poll(&p, 1, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      continue; // the deadline is checked above
    ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    if (out.size() + static_cast<size_t>(got) > (size_t(1) << 20)) {
      tooLong = true;
      break;
    }
    out.append(buf, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  // A process that closed its stdout is given until the deadline to exit.
  int status = 0;
  while (!timedOut && !tooLong) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR))
      break;
    if (std::chrono::steady_clock::now() >= deadline)
      timedOut = true;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (timedOut || tooLong) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
  }
  if (timedOut) {
    error = "it did not finish within " + std::to_string(timeout) +
            " s (killed; SLUICE_CREDENTIAL_PROCESS_TIMEOUT=SECONDS allows "
            "more)";
    return false;
  }
  if (tooLong) {
    error = "it wrote more than 1 MiB (killed)";
    return false;
  }
  if (WIFSIGNALED(status)) {
    error = "it was killed by signal " + std::to_string(WTERMSIG(status));
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error = "it exited with status " + std::to_string(WEXITSTATUS(status)) +
            " (what it wrote to stderr is above)";
    return false;
  }
  return true;
}

/// Keys of a profile, which do not expire.
class StaticProvider final : public CredentialProvider {
public:
  StaticProvider(std::shared_ptr<const Credentials> c, std::string source)
      : creds_(std::move(c)), source_(std::move(source)) {}
  std::shared_ptr<const Credentials> get(std::string &) override {
    return creds_;
  }
  std::string source() const override { return source_; }

private:
  const std::shared_ptr<const Credentials> creds_;
  const std::string source_;
};

} // namespace

std::shared_ptr<CredentialProvider>
staticCredentials(std::shared_ptr<const Credentials> creds,
                  std::string source) {
  return std::make_shared<StaticProvider>(std::move(creds), std::move(source));
}

std::shared_ptr<CredentialProvider>
processCredentials(const std::string &command, const std::string &where) {
  std::string source = "the credential_process of " + where;
  return shared("process " + command, [=] {
    return std::make_shared<Provider>(
        source,
        [=](Issued &f, std::string &why) {
          std::vector<std::string> words;
          if (!splitWords(command, words, why)) {
            why = "cannot split its command into words: " + why;
            return false;
          }
          std::string out;
          if (!runForOutput(words, out, why))
            return false;
          // Never quoted in a message: the output holds the keys.
          nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
          if (j.is_discarded() || !j.is_object()) {
            why = "its output is not a JSON object";
            return false;
          }
          if (!j.contains("Version") || j["Version"] != 1) {
            why = "its output's Version is not 1 (the only version of the "
                  "credential_process format)";
            return false;
          }
          if (j.contains("SessionToken") && j["SessionToken"].is_string()) {
            j["Token"] = j["SessionToken"];
            j.erase("SessionToken");
          }
          j.erase("Version");
          if (fromJson(j.dump(), f, why))
            return true;
          if (why.compare(0, 10, "the answer") == 0)
            why = "its output" + why.substr(10);
          return false;
        },
        /*lastResort=*/false);
  });
}

namespace {

/// One AssumeRole: the role's keys for `p.source`'s, from STS at `sts`.
bool assumeRole(const AssumeRoleParams &p, const std::string &sts, Issued &f,
                std::string &why) {
  std::shared_ptr<const Credentials> keys = p.source->get(why);
  if (!keys) {
    if (why.empty())
      why = p.source->source() + " gives no keys";
    return false;
  }
  // The query in the order SigV4's canonical request sorts it: libcurl
  // 7.88 signs the query as it is given.
  std::string url = sts + "/?Action=AssumeRole";
  if (p.durationSeconds > 0)
    url += "&DurationSeconds=" + std::to_string(p.durationSeconds);
  if (!p.externalId.empty())
    url += "&ExternalId=" + uriEncode(p.externalId, false);
  url += "&RoleArn=" + uriEncode(p.roleArn, false) +
         "&RoleSessionName=" + uriEncode(p.sessionName, false) +
         "&Version=2011-06-15";
  return fromSts(call("GET", url, {}, 10000, keys.get(), p.region), f, why);
}

} // namespace

std::shared_ptr<CredentialProvider>
assumeRoleCredentials(const AssumeRoleParams &p) {
  std::string sts = envOr("AWS_ENDPOINT_URL_STS");
  if (sts.empty())
    sts = "https://sts." + p.region + ".amazonaws.com";
  while (!sts.empty() && sts.back() == '/')
    sts.pop_back();
  std::string source = "STS AssumeRole of " + p.roleArn + " at " + sts + " (" +
                       p.where + ", signed with " + p.source->source() + ")";
  std::string key = "assume " + sts + " " + p.roleArn + " " + p.sessionName +
                    " " + p.externalId + " " +
                    std::to_string(p.durationSeconds) + " " + p.sourceKey;
  return shared(key, [=] {
    return std::make_shared<Provider>(
        source,
        [=](Issued &f, std::string &why) { return assumeRole(p, sts, f, why); },
        /*lastResort=*/false);
  });
}

namespace {

/// How long before the cached sign-in expires it is renewed (AWS's CLI and
/// SDKs renew within 15 minutes too).
constexpr std::time_t kSignInRenewSeconds = 15 * 60;

/// "2026-12-01T07:00:00Z", as the CLI writes expiresAt.
std::string isoTime(std::time_t t) {
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// Holds an exclusive flock on a directory (the SSO cache's) while alive:
/// the processes renewing one sign-in take turns. Given up after 30 s (a
/// holder that hangs does not stop the run; the renewal goes on unlocked).
class DirectoryLock {
public:
  explicit DirectoryLock(const std::string &dir)
      : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    for (int i = 0; fd_ >= 0 && i < 600; ++i) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0)
        return;
      if (errno != EWOULDBLOCK && errno != EINTR)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }
  ~DirectoryLock() {
    if (fd_ >= 0)
      ::close(fd_); // releases the lock
  }
  DirectoryLock(const DirectoryLock &) = delete;
  DirectoryLock &operator=(const DirectoryLock &) = delete;

private:
  int fd_;
};

/// Writes `text` to `file` whole or not at all: a temporary file (mode
/// 0600: it holds tokens) in the same directory, renamed over it.
bool replaceFile(const std::string &file, const std::string &text) {
  std::string temp = file + ".sluice-" + std::to_string(::getpid()) + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return false;
  bool ok = true;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (ok && ::rename(temp.c_str(), file.c_str()) == 0)
    return true;
  ::unlink(temp.c_str());
  return false;
}

/// An sso-session's cached sign-in `j` (read from `file`) renewed as AWS's
/// CLI and SDKs renew it: SSO OIDC's CreateToken with grant type
/// refresh_token and the client registration `aws sso login` cached beside
/// the token, at AWS_ENDPOINT_URL_SSO_OIDC, else
/// https://oidc.REGION.amazonaws.com (unsigned: the client secret and the
/// refresh token are the proof). The renewed sign-in replaces `j` and is
/// written back to `file`, so the CLI and other processes use it (the
/// server may have retired the old refresh token). Processes renewing at
/// once take turns (DirectoryLock); one that finds the file renewed
/// meanwhile takes that. False, with `why` (never a token), when it cannot
/// be renewed.
bool renewSignIn(const SsoParams &p, const std::string &file, nlohmann::json &j,
                 std::string &why) {
  std::string refresh = member(j, "refreshToken"),
              clientId = member(j, "clientId"),
              secret = member(j, "clientSecret"),
              registered = member(j, "registrationExpiresAt");
  if (refresh.empty() || clientId.empty() || secret.empty()) {
    why = "it holds no refreshToken, clientId and clientSecret to renew it "
          "with";
    return false;
  }
  if (!registered.empty() && parseExpiry(registered) <= std::time(nullptr)) {
    why = "its client registration expired at " + registered;
    return false;
  }
  DirectoryLock lock(file.substr(0, file.rfind('/')));
  std::string unread;
  nlohmann::json now =
      nlohmann::json::parse(readTrimmed(file, unread), nullptr, false);
  if (member(now, "accessToken") != member(j, "accessToken") &&
      parseExpiry(member(now, "expiresAt")) >
          std::time(nullptr) + kSignInRenewSeconds) {
    j = std::move(now); // renewed by another process meanwhile
    return true;
  }
  if (std::string latest = member(now, "refreshToken"); !latest.empty())
    refresh = latest; // the file's own, should another process have renewed
  std::string oidc = envOr("AWS_ENDPOINT_URL_SSO_OIDC");
  if (oidc.empty())
    oidc = "https://oidc." + p.region + ".amazonaws.com";
  while (!oidc.empty() && oidc.back() == '/')
    oidc.pop_back();
  std::string body = nlohmann::json{
      {"clientId", clientId},
      {"clientSecret", secret},
      {"grantType", "refresh_token"},
      {"refreshToken",
       refresh}}.dump();
  Answer a = call("POST", oidc + "/token", {"Content-Type: application/json"},
                  10000, nullptr, "", &body);
  nlohmann::json r = nlohmann::json::parse(a.body, nullptr, false);
  std::string token = member(r, "accessToken");
  if (!a.error.empty() || a.status != 200) {
    why = "SSO OIDC at " + oidc + " answered " + what(a);
    std::string code = member(r, "error");
    if (code.empty())
      code = member(r, "__type");
    std::string text = member(r, "error_description");
    if (text.empty())
      text = member(r, "message");
    if (!code.empty() || !text.empty())
      why +=
          " (" + code + (code.empty() || text.empty() ? "" : ": ") + text + ")";
    return false;
  }
  if (token.empty() || !r.contains("expiresIn") ||
      !r["expiresIn"].is_number() || r["expiresIn"].get<double>() <= 0) {
    why = "the answer of SSO OIDC at " + oidc +
          " holds no accessToken and expiresIn";
    return false;
  }
  j["accessToken"] = token;
  j["expiresAt"] =
      isoTime(std::time(nullptr) +
              static_cast<std::time_t>(r["expiresIn"].get<double>()));
  if (std::string next = member(r, "refreshToken"); !next.empty())
    j["refreshToken"] = next;
  // Where it cannot be written back (a read-only cache), this process goes
  // on with it all the same.
  replaceFile(file, j.dump());
  return true;
}

/// One GetRoleCredentials: the role's keys for the access token that `aws
/// sso login` cached (renewed first when it expires within
/// kSignInRenewSeconds and can be), from the portal at `portal`.
bool ssoRoleCredentials(const SsoParams &p, const std::string &portal,
                        Issued &f, std::string &why) {
  std::string login = "run `aws sso login --profile " + p.profile + "`";
  std::string name;
  if (!sha1Hex(p.session.empty() ? p.startUrl : p.session, name)) {
    why = "libcrypto (OpenSSL 3) cannot be loaded to find the cached sign-in";
    return false;
  }
  std::string file =
      envOr("HOME", "/root") + "/.aws/sso/cache/" + name + ".json";
  std::string unread;
  std::string text = readTrimmed(file, unread);
  if (text.empty() && unread.rfind("cannot read ", 0) == 0) {
    why = "no sign-in is cached for it (" + file + "): " + login;
    return false;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("accessToken") ||
      !j["accessToken"].is_string() || !j.contains("expiresAt") ||
      !j["expiresAt"].is_string()) {
    why = "the cached sign-in " + file +
          " holds no accessToken and expiresAt: " + login;
    return false;
  }
  std::string expiresAt = j["expiresAt"].get<std::string>();
  std::time_t tokenExpires = parseExpiry(expiresAt);
  std::string unrenewed; // why renewing failed
  if (!p.session.empty() &&
      tokenExpires < std::time(nullptr) + kSignInRenewSeconds &&
      renewSignIn(p, file, j, unrenewed)) {
    expiresAt = member(j, "expiresAt");
    tokenExpires = parseExpiry(expiresAt);
  }
  if (tokenExpires <= std::time(nullptr)) {
    why = "the sign-in cached in " + file + " expired at " + expiresAt +
          (unrenewed.empty() ? "" : " and cannot be renewed: " + unrenewed) +
          ": " + login;
    return false;
  }
  std::string url = portal + "/federation/credentials?account_id=" +
                    uriEncode(p.accountId, false) +
                    "&role_name=" + uriEncode(p.roleName, false);
  Answer a =
      call("GET", url,
           {"x-amz-sso_bearer_token: " + j["accessToken"].get<std::string>()},
           10000);
  if (!a.error.empty() || a.status != 200) {
    why = what(a);
    nlohmann::json e = nlohmann::json::parse(a.body, nullptr, false);
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      why += " (" + e["message"].get<std::string>() + ")";
    if (a.status == 401 || a.status == 403)
      why += ": " + login;
    return false;
  }
  nlohmann::json r = nlohmann::json::parse(a.body, nullptr, false);
  const nlohmann::json *c = r.is_object() && r.contains("roleCredentials") &&
                                    r["roleCredentials"].is_object()
                                ? &r["roleCredentials"]
                                : nullptr;
  auto str = [&](const char *k) { return c ? member(*c, k) : ""; };
  f.creds.accessKey = str("accessKeyId");
  f.creds.secretKey = str("secretAccessKey");
  f.creds.sessionToken = str("sessionToken");
  if (f.creds.accessKey.empty() || f.creds.secretKey.empty()) {
    why = "the answer holds no roleCredentials with accessKeyId and "
          "secretAccessKey";
    return false;
  }
  // Milliseconds since the epoch.
  if (c->contains("expiration") && (*c)["expiration"].is_number())
    f.expires =
        static_cast<std::time_t>((*c)["expiration"].get<double>() / 1000);
  return true;
}

} // namespace

std::shared_ptr<CredentialProvider> ssoCredentials(const SsoParams &p) {
  std::string portal = envOr("AWS_ENDPOINT_URL_SSO");
  if (portal.empty())
    portal = "https://portal.sso." + p.region + ".amazonaws.com";
  while (!portal.empty() && portal.back() == '/')
    portal.pop_back();
  std::string source = "the SSO portal at " + portal + " (" + p.where +
                       ", account " + p.accountId + ", role " + p.roleName +
                       ")";
  std::string key = "sso " + portal + " " + p.session + " " + p.startUrl + " " +
                    p.accountId + " " + p.roleName;
  return shared(key, [=] {
    return std::make_shared<Provider>(
        source,
        [=](Issued &f, std::string &why) {
          return ssoRoleCredentials(p, portal, f, why);
        },
        /*lastResort=*/false);
  });
}

std::shared_ptr<CredentialProvider> containerCredentials() {
  std::string relative = envOr("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  std::string full = envOr("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (relative.empty() && full.empty())
    return nullptr;
  std::string url =
      !relative.empty() ? "http://169.254.170.2" + relative : full;
  std::string tokenFile = envOr("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  std::string token = envOr("AWS_CONTAINER_AUTHORIZATION_TOKEN");
  std::string source =
      "the container credentials endpoint " + url +
      (!relative.empty() ? " (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)"
                         : " (AWS_CONTAINER_CREDENTIALS_FULL_URI)");
  return shared("container " + url + " " + tokenFile, [=] {
    return std::make_shared<Provider>(
        source,
        [=](Issued &f, std::string &why) {
          std::vector<std::string> headers;
          std::string auth = token;
          if (!tokenFile.empty()) {
            auth = readTrimmed(tokenFile, why);
            if (!why.empty()) {
              why = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: " + why;
              return false;
            }
          }
          if (!auth.empty())
            headers.push_back("Authorization: " + auth);
          Answer a = call("GET", url, headers, 5000);
          if (!a.error.empty() || a.status != 200) {
            why = what(a);
            return false;
          }
          return fromJson(a.body, f, why);
        },
        /*lastResort=*/false);
  });
}

std::shared_ptr<CredentialProvider>
webIdentityCredentials(const std::string &region, std::string tokenFile,
                       std::string role, std::string session) {
  // A profile's values, else the environment's.
  bool fromProfile = !tokenFile.empty();
  if (!fromProfile) {
    tokenFile = envOr("AWS_WEB_IDENTITY_TOKEN_FILE");
    role = envOr("AWS_ROLE_ARN");
    session = envOr("AWS_ROLE_SESSION_NAME");
  }
  if (tokenFile.empty())
    return nullptr;
  if (session.empty())
    session = "sluice-" + std::to_string(::getpid());
  std::string sts = envOr("AWS_ENDPOINT_URL_STS");
  if (sts.empty())
    sts = "https://sts." + region + ".amazonaws.com";
  while (!sts.empty() && sts.back() == '/')
    sts.pop_back();
  std::string source =
      "STS AssumeRoleWithWebIdentity at " + sts +
      (fromProfile
           ? " (web_identity_token_file " + tokenFile + ", role_arn "
           : " (AWS_WEB_IDENTITY_TOKEN_FILE " + tokenFile + ", AWS_ROLE_ARN ") +
      role + ")";
  return shared("web " + sts + " " + tokenFile + " " + role, [=] {
    return std::make_shared<Provider>(
        source,
        [=](Issued &f, std::string &why) {
          if (role.empty()) {
            why = "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is "
                  "not: set the role to assume";
            return false;
          }
          // The token is read at every fetch: Kubernetes rotates it.
          std::string token = readTrimmed(tokenFile, why);
          if (!why.empty())
            return false;
          std::string url =
              sts + "/?Action=AssumeRoleWithWebIdentity&Version=2011-06-15" +
              "&RoleArn=" + uriEncode(role, false) +
              "&RoleSessionName=" + uriEncode(session, false) +
              "&WebIdentityToken=" + uriEncode(token, false);
          return fromSts(call("GET", url, {}, 10000), f, why);
        },
        /*lastResort=*/false);
  });
}

std::shared_ptr<CredentialProvider> instanceCredentials() {
  std::string disabled = envOr("AWS_EC2_METADATA_DISABLED");
  for (char &c : disabled)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (disabled == "true")
    return nullptr;
  std::string base = envOr("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (base.empty())
    base = "http://169.254.169.254";
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  std::string source = "the EC2 instance metadata service at " + base;
  return shared("imds " + base, [=] {
    return std::make_shared<Provider>(
        source,
        [=](Issued &f, std::string &why) {
          std::vector<std::string> headers;
          Answer t =
              call("PUT", base + "/latest/api/token",
                   {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}, 1000);
          if (!t.error.empty()) {
            why = "asking for a session token: " + t.error;
            return false;
          }
          // An HTTP refusal of the PUT: a service of IMDSv1 only.
          if (t.status == 200 && !t.body.empty())
            headers.push_back("X-aws-ec2-metadata-token: " + t.body);
          std::string dir =
              base + "/latest/meta-data/iam/security-credentials/";
          Answer r = call("GET", dir, headers, 1000);
          if (!r.error.empty() || r.status != 200) {
            why = "asking for the instance's role: " + what(r) +
                  (r.status == 404 ? " (the instance has no role)" : "");
            return false;
          }
          std::string role = r.body.substr(0, r.body.find('\n'));
          while (!role.empty() && (role.back() == '\r' || role.back() == ' '))
            role.pop_back();
          if (role.empty()) {
            why = "the instance has no role";
            return false;
          }
          Answer c = call("GET", dir + role, headers, 1000);
          if (!c.error.empty() || c.status != 200) {
            why = "asking for role " + role + "'s credentials: " + what(c);
            return false;
          }
          if (!fromJson(c.body, f, why)) {
            why = "role " + role + ": " + why;
            return false;
          }
          return true;
        },
        /*lastResort=*/true);
  });
}

} // namespace sluice::runtime::detail
