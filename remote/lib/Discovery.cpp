//===- Discovery.cpp - Worker addresses from DNS names
//---------------------===//
//
// A Kubernetes headless Service, a Consul or CoreDNS zone, or a plain DNS
// round-robin name stands for a set of workers: the name resolves to one
// address per worker. gRPC's own "dns:" target would make one channel
// that balances calls over them; the client needs one connection per
// worker instead (each takes chunks and fails on its own), so it resolves
// the name itself, with c-ares (the resolver gRPC uses, from Debian's
// libc-ares), and re-resolves it while an epoch runs: an address that
// appears is a worker added. Entries follow gRPC's naming: dns:///NAME:PORT
// asks the system's resolvers (/etc/resolv.conf, /etc/hosts);
// dns://SERVER[:PORT]/NAME:PORT asks that DNS server.
//
//===----------------------------------------------------------------------===//
#include "sluice/remote/Remote.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/select.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace sluice::remote {

namespace {

struct Lookup {
  bool done = false;
  int status = ARES_SUCCESS;
  std::vector<std::string> hosts;
};

void onAddrInfo(void *arg, int status, int, ares_addrinfo *res) {
  auto *l = static_cast<Lookup *>(arg);
  l->done = true;
  l->status = status;
  if (status == ARES_SUCCESS && res) {
    for (ares_addrinfo_node *n = res->nodes; n; n = n->ai_next) {
      char buf[INET6_ADDRSTRLEN] = {0};
      if (n->ai_family == AF_INET) {
        auto *sa = reinterpret_cast<sockaddr_in *>(n->ai_addr);
        if (inet_ntop(AF_INET, &sa->sin_addr, buf, sizeof buf))
          l->hosts.push_back(buf);
      } else if (n->ai_family == AF_INET6) {
        auto *sa = reinterpret_cast<sockaddr_in6 *>(n->ai_addr);
        if (inet_ntop(AF_INET6, &sa->sin6_addr, buf, sizeof buf))
          l->hosts.push_back("[" + std::string(buf) + "]");
      }
    }
  }
  if (res)
    ares_freeaddrinfo(res);
}

} // namespace

bool isDnsWorker(const std::string &entry) {
  return entry.rfind("dns:", 0) == 0;
}

Expected<std::vector<std::string>> resolveWorkers(const std::string &entry,
                                                  double timeoutSeconds) {
  auto bad = [&](const std::string &why) {
    return Status::error("worker entry '" + entry + "': " + why +
                         " (write dns:///NAME:PORT, or "
                         "dns://DNS-SERVER[:PORT]/NAME:PORT)");
  };
  if (entry.rfind("dns://", 0) != 0)
    return bad("a DNS name starts with dns://");
  std::string rest = entry.substr(6);
  size_t slash = rest.find('/');
  if (slash == std::string::npos)
    return bad("no '/' before the name");
  std::string server = rest.substr(0, slash);
  std::string target = rest.substr(slash + 1);
  size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size() ||
      target.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    return bad("the name needs a port (NAME:PORT)");
  std::string name = target.substr(0, colon);
  std::string port = target.substr(colon + 1);

  static std::once_flag once;
  static int initStatus = ARES_SUCCESS;
  std::call_once(once,
                 [] { initStatus = ares_library_init(ARES_LIB_INIT_ALL); });
  if (initStatus != ARES_SUCCESS)
    return Status::error(std::string("c-ares: ") + ares_strerror(initStatus));
  ares_channel ch;
  ares_options o{};
  o.timeout = std::max(100, static_cast<int>(timeoutSeconds * 1000 / 2));
  o.tries = 2;
  int rc = ares_init_options(&ch, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
  if (rc != ARES_SUCCESS)
    return Status::error("cannot start a DNS lookup for '" + entry +
                         "': " + ares_strerror(rc));
  if (!server.empty()) {
    rc = ares_set_servers_ports_csv(ch, server.c_str());
    if (rc != ARES_SUCCESS) {
      ares_destroy(ch);
      return bad("DNS server '" + server + "' is not an address[:port] (" +
                 ares_strerror(rc) + ")");
    }
  }
  Lookup l;
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  ares_getaddrinfo(ch, name.c_str(), nullptr, &hints, onAddrInfo, &l);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(int64_t(timeoutSeconds * 1000));
  while (!l.done) {
    fd_set rd, wr;
    FD_ZERO(&rd);
    FD_ZERO(&wr);
    int nfds = ares_fds(ch, &rd, &wr);
    if (nfds == 0)
      break;
    timeval most{0, 100000}, tv;
    timeval *tvp = ares_timeout(ch, &most, &tv);
    select(nfds, &rd, &wr, nullptr, tvp);
    ares_process(ch, &rd, &wr);
    if (std::chrono::steady_clock::now() > deadline)
      break;
  }
  ares_destroy(ch); // calls the callback with ARES_EDESTRUCTION if pending
  if (!l.done || l.status == ARES_EDESTRUCTION)
    return Status::error("DNS lookup of '" + name + "'" +
                         (server.empty() ? "" : " at " + server) +
                         " timed out after " +
                         std::to_string(int(timeoutSeconds * 1000)) + " ms");
  if (l.status == ARES_ENOTFOUND || l.status == ARES_ENODATA)
    return std::vector<std::string>{};
  if (l.status != ARES_SUCCESS)
    return Status::error("DNS lookup of '" + name + "'" +
                         (server.empty() ? "" : " at " + server) + ": " +
                         ares_strerror(l.status));
  std::sort(l.hosts.begin(), l.hosts.end());
  l.hosts.erase(std::unique(l.hosts.begin(), l.hosts.end()), l.hosts.end());
  std::vector<std::string> out;
  for (const std::string &h : l.hosts)
    out.push_back(h + ":" + port);
  return out;
}

} // namespace sluice::remote
