//===- MetricsHttp.cpp - The --metrics-port server, loaded on demand ------===//
//
// libsluice_metrics_http.so: cpp-httplib's server behind two C functions,
// dlopen'd by lib/Metrics.cpp the first time a run asks for --metrics-port.
// Debian's cpp-httplib is a shared library built with OpenSSL, zlib and
// brotli; linked into the runtime, it loaded libssl, libcrypto and the
// brotli libraries into every process that runs a pipeline (the driver,
// compiled executables, `import sluice`): ~300 page faults and ~10-20 ms
// of CPU at each start, for a server most runs never open.
//
// The interface is C (no C++ type crosses it but the std::string the
// caller's callback fills, which both sides build with the same library):
//   void *sluice_metrics_http_start(address, port, text, ctx, err, errSize)
//     listens on address:port and answers GET /metrics with what
//     text(ctx, &out) writes into `out`, on a thread of its own; nullptr
//     (with a message in err) when it cannot bind;
//   void sluice_metrics_http_stop(void *server)
//     stops it and joins its thread.
//
//===----------------------------------------------------------------------===//
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

namespace {

struct Server {
  httplib::Server http;
  std::thread thread;
  /// listen_after_bind() returned (the server stopped, or could not run).
  std::atomic<bool> done{false};
};

} // namespace

extern "C" __attribute__((visibility("default"))) void *
sluice_metrics_http_start(const char *address, int port,
                          void (*text)(void *ctx, std::string *out), void *ctx,
                          char *err, size_t errSize) {
  auto s = std::make_unique<Server>();
  s->http.Get("/metrics", [text, ctx](const httplib::Request &,
                                      httplib::Response &res) {
    std::string body;
    text(ctx, &body);
    res.set_content(body, "text/plain; version=0.0.4; charset=utf-8");
  });
  s->http.Get("/", [](const httplib::Request &, httplib::Response &res) {
    res.set_content("sluice: the counters are at /metrics\n", "text/plain");
  });
  if (!s->http.bind_to_port(address, port)) {
    if (err && errSize)
      std::snprintf(err, errSize, "cannot listen on %s:%d", address, port);
    return nullptr;
  }
  Server *raw = s.release();
  raw->thread = std::thread([raw] {
    raw->http.listen_after_bind();
    raw->done = true;
  });
  return raw;
}

extern "C" __attribute__((visibility("default"))) void
sluice_metrics_http_stop(void *server) {
  auto *s = static_cast<Server *>(server);
  if (!s)
    return;
  // cpp-httplib's stop() does nothing until the server's thread has marked
  // it running (listen_internal sets is_running_ as it starts): a run that
  // ends before then would join a thread that then waits in accept() for
  // ever. Wait for the thread to start listening (or to have returned).
  while (!s->http.is_running() && !s->done)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s->http.stop();
  if (s->thread.joinable())
    s->thread.join();
  delete s;
}
