//===- CurlLoader.cpp - libcurl loaded on first use -----------------------===//
//
// Remote sources (Remote.cpp) call libcurl, but most runs read local files
// and never make a request. Linking libcurl makes every process load it and
// the ~30 libraries it depends on (TLS, Kerberos, LDAP, IDN, SSH, HTTP/2)
// before main(): measured on the 2-core VM, an empty program linked against
// libcurl takes 15.5 ms of CPU and 493 page faults to start against 2.1 ms
// and 48 without it; a `sluice run` pays that on every start.
//
// So the runtime does not link libcurl. This file defines the libcurl
// functions Remote.cpp calls; the first call loads the installed
// libcurl.so.4 (the same Debian library, same ABI: curl's SONAME 4 has been
// stable since 2006) with dlopen and forwards every call to it. No HTTP is
// written here: this is only a loader, and there is no packaged library that
// defers a shared library's loading (ELF has no delay-load).
//
// curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are variadic
// with exactly one argument after the option, documented as a long, a
// curl_off_t, an object pointer or a function pointer: all of them are
// passed like one 64-bit integer (a general register or an 8-byte stack
// slot) on the ABIs sluice builds for (x86-64 System V, AArch64), so the
// argument is read as a pointer-sized value and passed on unchanged.
//
// When libcurl cannot be loaded, curlLoadable() says why (remoteConfigFor()
// turns that into the source's error before any request), and the
// functions fail the way libcurl reports failure (CURLE_FAILED_INIT, a null
// handle), never by crashing.
//
// SLUICE_LIBCURL names another library file to load (tests use it for the
// error). SLUICE_LINK_CURL=ON (CMake) links libcurl as before: this file
// then defines only curlLoadable(), which is always true.
//
//===----------------------------------------------------------------------===//

#include "Remote.h"

#ifdef SLUICE_LINK_CURL

namespace sluice::runtime::detail {
bool curlLoadable(std::string &) { return true; }
} // namespace sluice::runtime::detail

#else

#include <curl/curl.h>

#include <cstdarg>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <string>

namespace {

struct CurlApi {
  void *handle = nullptr;
  std::string name; ///< the file loaded (libcurl.so.4, or SLUICE_LIBCURL)
  std::string error;
  decltype(&::curl_global_init) global_init = nullptr;
  decltype(&::curl_global_init_mem) global_init_mem = nullptr;
  decltype(&::curl_easy_init) easy_init = nullptr;
  decltype(&::curl_easy_reset) easy_reset = nullptr;
  decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&::curl_easy_perform) easy_perform = nullptr;
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...) = nullptr;
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...) = nullptr;
  decltype(&::curl_easy_strerror) easy_strerror = nullptr;
  decltype(&::curl_multi_init) multi_init = nullptr;
  decltype(&::curl_multi_cleanup) multi_cleanup = nullptr;
  CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...) = nullptr;
  decltype(&::curl_multi_add_handle) multi_add_handle = nullptr;
  decltype(&::curl_multi_remove_handle) multi_remove_handle = nullptr;
  decltype(&::curl_multi_perform) multi_perform = nullptr;
  decltype(&::curl_multi_socket_action) multi_socket_action = nullptr;
  decltype(&::curl_multi_assign) multi_assign = nullptr;
  decltype(&::curl_multi_poll) multi_poll = nullptr;
  decltype(&::curl_multi_wakeup) multi_wakeup = nullptr;
  decltype(&::curl_multi_info_read) multi_info_read = nullptr;
  decltype(&::curl_slist_append) slist_append = nullptr;
  decltype(&::curl_slist_free_all) slist_free_all = nullptr;
};

template <typename F> bool bind(CurlApi &api, F &fn, const char *name) {
  fn = reinterpret_cast<F>(::dlsym(api.handle, name));
  if (!fn && api.error.empty())
    api.error =
        api.name + " has no " + name + " (libcurl 7.68 or newer is needed)";
  return fn != nullptr;
}

const CurlApi &api() {
  static CurlApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *name = std::getenv("SLUICE_LIBCURL");
    a.name = name && *name ? name : "libcurl.so.4";
    a.handle = ::dlopen(a.name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!a.handle) {
      const char *why = ::dlerror();
      a.error = a.name + " could not be loaded (" +
                (why ? why : "unknown reason") +
                "); remote URLs need it: install libcurl (Debian: apt-get "
                "install libcurl4)";
      return;
    }
    bool ok = bind(a, a.global_init, "curl_global_init") &&
              bind(a, a.global_init_mem, "curl_global_init_mem") &&
              bind(a, a.easy_init, "curl_easy_init") &&
              bind(a, a.easy_reset, "curl_easy_reset") &&
              bind(a, a.easy_cleanup, "curl_easy_cleanup") &&
              bind(a, a.easy_perform, "curl_easy_perform") &&
              bind(a, a.easy_setopt, "curl_easy_setopt") &&
              bind(a, a.easy_getinfo, "curl_easy_getinfo") &&
              bind(a, a.easy_strerror, "curl_easy_strerror") &&
              bind(a, a.multi_init, "curl_multi_init") &&
              bind(a, a.multi_cleanup, "curl_multi_cleanup") &&
              bind(a, a.multi_setopt, "curl_multi_setopt") &&
              bind(a, a.multi_add_handle, "curl_multi_add_handle") &&
              bind(a, a.multi_remove_handle, "curl_multi_remove_handle") &&
              bind(a, a.multi_perform, "curl_multi_perform") &&
              bind(a, a.multi_socket_action, "curl_multi_socket_action") &&
              bind(a, a.multi_assign, "curl_multi_assign") &&
              bind(a, a.multi_poll, "curl_multi_poll") &&
              bind(a, a.multi_wakeup, "curl_multi_wakeup") &&
              bind(a, a.multi_info_read, "curl_multi_info_read") &&
              bind(a, a.slist_append, "curl_slist_append") &&
              bind(a, a.slist_free_all, "curl_slist_free_all");
    if (!ok) {
      ::dlclose(a.handle);
      a.handle = nullptr;
    }
  });
  return a;
}

/// The one argument after the option of a variadic libcurl call. The last
/// named parameter is one of curl's option enums, as curl.h declares it;
/// clang's -Wvarargs notes that an enum could be promoted, which does not
/// happen to these int-sized enums on the ABIs above.
#define SLUICE_CURL_VA_ARG(last, out)                                          \
  void *out;                                                                   \
  {                                                                            \
    _Pragma("clang diagnostic push")                                           \
        _Pragma("clang diagnostic ignored \"-Wvarargs\"") va_list ap;          \
    va_start(ap, last);                                                        \
    _Pragma("clang diagnostic pop") out = va_arg(ap, void *);                  \
    va_end(ap);                                                                \
  }

} // namespace

namespace sluice::runtime::detail {

bool curlLoadable(std::string &why) {
  const CurlApi &a = api();
  if (a.handle)
    return true;
  why = a.error;
  return false;
}

} // namespace sluice::runtime::detail

// The definitions stay inside the library that links this file (the driver,
// the Python module): a process that also loads libcurl itself keeps its
// own functions.
#define SLUICE_CURL_SHIM __attribute__((visibility("hidden")))

extern "C" {

SLUICE_CURL_SHIM CURLcode curl_global_init(long flags) {
  const CurlApi &a = api();
  return a.handle ? a.global_init(flags) : CURLE_FAILED_INIT;
}

SLUICE_CURL_SHIM CURLcode curl_global_init_mem(
    long flags, curl_malloc_callback m, curl_free_callback f,
    curl_realloc_callback r, curl_strdup_callback s, curl_calloc_callback c) {
  const CurlApi &a = api();
  return a.handle ? a.global_init_mem(flags, m, f, r, s, c) : CURLE_FAILED_INIT;
}

SLUICE_CURL_SHIM CURL *curl_easy_init(void) {
  const CurlApi &a = api();
  return a.handle ? a.easy_init() : nullptr;
}

SLUICE_CURL_SHIM void curl_easy_reset(CURL *e) {
  const CurlApi &a = api();
  if (a.handle)
    a.easy_reset(e);
}

SLUICE_CURL_SHIM void curl_easy_cleanup(CURL *e) {
  const CurlApi &a = api();
  if (a.handle)
    a.easy_cleanup(e);
}

SLUICE_CURL_SHIM CURLcode curl_easy_perform(CURL *e) {
  const CurlApi &a = api();
  return a.handle ? a.easy_perform(e) : CURLE_FAILED_INIT;
}

SLUICE_CURL_SHIM CURLcode curl_easy_setopt(CURL *e, CURLoption option, ...) {
  SLUICE_CURL_VA_ARG(option, arg);
  const CurlApi &a = api();
  return a.handle ? a.easy_setopt(e, option, arg) : CURLE_FAILED_INIT;
}

SLUICE_CURL_SHIM CURLcode curl_easy_getinfo(CURL *e, CURLINFO info, ...) {
  SLUICE_CURL_VA_ARG(info, arg);
  const CurlApi &a = api();
  return a.handle ? a.easy_getinfo(e, info, arg) : CURLE_FAILED_INIT;
}

SLUICE_CURL_SHIM const char *curl_easy_strerror(CURLcode code) {
  const CurlApi &a = api();
  return a.handle ? a.easy_strerror(code) : "libcurl is not loaded";
}

SLUICE_CURL_SHIM CURLM *curl_multi_init(void) {
  const CurlApi &a = api();
  return a.handle ? a.multi_init() : nullptr;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_cleanup(CURLM *m) {
  const CurlApi &a = api();
  return a.handle ? a.multi_cleanup(m) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_setopt(CURLM *m, CURLMoption option,
                                             ...) {
  SLUICE_CURL_VA_ARG(option, arg);
  const CurlApi &a = api();
  return a.handle ? a.multi_setopt(m, option, arg) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_add_handle(CURLM *m, CURL *e) {
  const CurlApi &a = api();
  return a.handle ? a.multi_add_handle(m, e) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_remove_handle(CURLM *m, CURL *e) {
  const CurlApi &a = api();
  return a.handle ? a.multi_remove_handle(m, e) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_perform(CURLM *m, int *running) {
  const CurlApi &a = api();
  return a.handle ? a.multi_perform(m, running) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_socket_action(CURLM *m, curl_socket_t s,
                                                    int events, int *running) {
  const CurlApi &a = api();
  return a.handle ? a.multi_socket_action(m, s, events, running)
                  : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_assign(CURLM *m, curl_socket_t s,
                                             void *data) {
  const CurlApi &a = api();
  return a.handle ? a.multi_assign(m, s, data) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                                           unsigned int extraCount,
                                           int timeoutMs, int *ret) {
  const CurlApi &a = api();
  return a.handle ? a.multi_poll(m, extra, extraCount, timeoutMs, ret)
                  : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMcode curl_multi_wakeup(CURLM *m) {
  const CurlApi &a = api();
  return a.handle ? a.multi_wakeup(m) : CURLM_BAD_HANDLE;
}

SLUICE_CURL_SHIM CURLMsg *curl_multi_info_read(CURLM *m, int *left) {
  const CurlApi &a = api();
  return a.handle ? a.multi_info_read(m, left) : nullptr;
}

SLUICE_CURL_SHIM struct curl_slist *curl_slist_append(struct curl_slist *list,
                                                      const char *s) {
  const CurlApi &a = api();
  return a.handle ? a.slist_append(list, s) : nullptr;
}

SLUICE_CURL_SHIM void curl_slist_free_all(struct curl_slist *list) {
  const CurlApi &a = api();
  if (a.handle)
    a.slist_free_all(list);
}

} // extern "C"

#endif // SLUICE_LINK_CURL
