//===- Pinned.cpp - Page-locked batch buffers through a registrar ---------===//
//
// The CUDA registrar loads the CUDA runtime with dlopen, so the runtime
// builds and runs on hosts without one; the recording registrar is the
// same contract without a GPU, for tests. PinnedPool keeps registered
// buffers by size (see Pinned.h for the accounting).
//
//===----------------------------------------------------------------------===//
#include "sluice/runtime/Pinned.h"

#include "sluice/ops/Allocation.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>

namespace sluice::runtime {

HostRegistrar::~HostRegistrar() = default;

namespace {

std::mutex registrarMu;
std::shared_ptr<HostRegistrar> &installed() {
  static std::shared_ptr<HostRegistrar> r;
  return r;
}

/// The CUDA runtime's entry points this needs (cuda_runtime_api.h's
/// signatures; cudaError_t is an int, 0 = cudaSuccess).
class CudaRegistrar final : public HostRegistrar {
public:
  using RegisterFn = int (*)(void *, size_t, unsigned);
  using UnregisterFn = int (*)(void *);
  using ErrorStringFn = const char *(*)(int);
  CudaRegistrar(void *lib, std::string path, RegisterFn reg, UnregisterFn unreg,
                ErrorStringFn err)
      : lib_(lib), path_(std::move(path)), register_(reg), unregister_(unreg),
        errorString_(err) {}
  // The library stays loaded: buffers of a pool may outlive this object's
  // last pipeline only through it, and unloading a CUDA runtime torch also
  // uses gains nothing.
  ~CudaRegistrar() override { (void)lib_; }

  std::string name() const override { return "cuda (" + path_ + ")"; }

  Status registerRange(void *p, size_t bytes) override {
    constexpr unsigned kPortable = 1; // cudaHostRegisterPortable
    int e = register_(p, bytes, kPortable);
    if (e == 0)
      return Status::ok();
    return Status::error("cudaHostRegister of " + formatSize(bytes) +
                         " failed: " + errorText(e));
  }

  void unregisterRange(void *p, size_t) override { (void)unregister_(p); }

private:
  static std::string formatSize(size_t bytes) {
    return std::to_string(bytes) + " bytes";
  }
  std::string errorText(int e) const {
    const char *s = errorString_ ? errorString_(e) : nullptr;
    return (s ? std::string(s) : "error") + " (cudaError " + std::to_string(e) +
           ")";
  }

  void *lib_;
  std::string path_;
  RegisterFn register_;
  UnregisterFn unregister_;
  ErrorStringFn errorString_;
};

/// Paths of the libcudart libraries mapped into this process (torch's).
std::vector<std::string> loadedCudaRuntimes() {
  std::vector<std::string> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos)
      continue;
    std::string path = line.substr(slash);
    size_t base = path.rfind('/');
    if (path.compare(base + 1, 9, "libcudart") != 0)
      continue;
    bool seen = false;
    for (const std::string &p : out)
      seen = seen || p == path;
    if (!seen)
      out.push_back(path);
  }
  return out;
}

class RecordingRegistrar final : public HostRegistrar {
public:
  explicit RecordingRegistrar(bool lock) : lock_(lock) {}
  std::string name() const override { return lock_ ? "mlock" : "record"; }

  Status registerRange(void *p, size_t bytes) override {
    if (lock_ && mlock(p, bytes) != 0)
      return Status::error("mlock of " + std::to_string(bytes) +
                           " bytes failed: " + std::strerror(errno) +
                           " (raise RLIMIT_MEMLOCK, ulimit -l)");
    std::lock_guard<std::mutex> g(mu_);
    auto key = reinterpret_cast<uintptr_t>(p);
    if (!live_.emplace(key, bytes).second)
      ++log_.doubleRegistrations;
    ++log_.registrations;
    return Status::ok();
  }

  void unregisterRange(void *p, size_t bytes) override {
    if (lock_)
      (void)munlock(p, bytes);
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    if (it == live_.end() || it->second != bytes)
      ++log_.strayUnregistrations;
    else
      live_.erase(it);
    ++log_.unregistrations;
  }

  RegistrarLog log() const {
    std::lock_guard<std::mutex> g(mu_);
    RegistrarLog l = log_;
    l.live.assign(live_.begin(), live_.end());
    return l;
  }

private:
  bool lock_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> live_;
  RegistrarLog log_;
};

size_t pageBytes() {
  static const size_t page = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t(4096);
  }();
  return page;
}

/// Idle buffers of one size a pool keeps at most (the budget bounds the
/// bytes; this bounds a pipeline whose consumer returned many at once).
constexpr size_t kMaxIdlePerSize = 64;

/// What an idle buffer of `bytes` reserves: its pages and the Tensor
/// bookkeeping its batch was counted with.
int64_t idleCharge(size_t bytes) {
  return static_cast<int64_t>(bytes + kTensorOverheadBytes);
}

} // namespace

void setHostRegistrar(std::shared_ptr<HostRegistrar> registrar) {
  std::lock_guard<std::mutex> g(registrarMu);
  installed() = std::move(registrar);
}

std::shared_ptr<HostRegistrar> hostRegistrar() {
  std::lock_guard<std::mutex> g(registrarMu);
  return installed();
}

Expected<std::shared_ptr<HostRegistrar>>
makeCudaRegistrar(const std::string &library) {
  std::vector<std::string> tried;
  void *lib = nullptr;
  std::string path;
  auto open = [&](const std::string &p, int extra) {
    if (lib)
      return;
    tried.push_back(p);
    lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | extra);
    if (lib)
      path = p;
  };
  if (!library.empty()) {
    open(library, 0);
  } else {
    for (const std::string &p : loadedCudaRuntimes())
      open(p, RTLD_NOLOAD);
    for (const char *p :
         {"libcudart.so.12", "libcudart.so", "libcudart.so.11.0"})
      open(p, 0);
  }
  if (!lib) {
    std::string list;
    for (const std::string &p : tried)
      list += (list.empty() ? "" : ", ") + p;
    return Status::error("no CUDA runtime library could be loaded (tried " +
                         list +
                         "); pinned batch buffers need libcudart (torch "
                         "with CUDA ships one)");
  }
  auto reg = reinterpret_cast<CudaRegistrar::RegisterFn>(
      dlsym(lib, "cudaHostRegister"));
  auto unreg = reinterpret_cast<CudaRegistrar::UnregisterFn>(
      dlsym(lib, "cudaHostUnregister"));
  auto err = reinterpret_cast<CudaRegistrar::ErrorStringFn>(
      dlsym(lib, "cudaGetErrorString"));
  auto count =
      reinterpret_cast<int (*)(int *)>(dlsym(lib, "cudaGetDeviceCount"));
  if (!reg || !unreg || !count)
    return Status::error(path +
                         " lacks cudaHostRegister/cudaHostUnregister/"
                         "cudaGetDeviceCount: not a CUDA runtime library");
  int devices = 0;
  if (int e = count(&devices); e != 0 || devices < 1)
    return Status::error(
        path + ": no CUDA device (cudaGetDeviceCount: " +
        (e != 0 && err ? std::string(err(e)) : std::to_string(devices)) +
        "); pinned batch buffers only help copies to a GPU");
  return std::shared_ptr<HostRegistrar>(
      std::make_shared<CudaRegistrar>(lib, path, reg, unreg, err));
}

std::shared_ptr<HostRegistrar> makeRecordingRegistrar(bool lock) {
  return std::make_shared<RecordingRegistrar>(lock);
}

std::optional<RegistrarLog> registrarLog() {
  std::shared_ptr<HostRegistrar> r = hostRegistrar();
  if (auto *rec = dynamic_cast<RecordingRegistrar *>(r.get()))
    return rec->log();
  return std::nullopt;
}

namespace {
std::mutex totalsMu;
PinnedStats &totals() {
  static PinnedStats t;
  return t;
}
/// Adds `d` to a pool's counters and the process's.
template <typename F> void count(PinnedStats &pool, F &&d) {
  d(pool);
  std::lock_guard<std::mutex> g(totalsMu);
  d(totals());
}
} // namespace

PinnedStats pinnedTotals() {
  std::lock_guard<std::mutex> g(totalsMu);
  return totals();
}

PinnedPool::PinnedPool(std::shared_ptr<HostRegistrar> registrar,
                       AllocationLimit *idle)
    : registrar_(std::move(registrar)), idleLimit_(idle) {
  stats_.registrar = registrar_->name();
  std::lock_guard<std::mutex> g(totalsMu);
  totals().registrar = stats_.registrar;
}

PinnedPool::~PinnedPool() { close(); }

Tensor PinnedPool::allocate(ElemType elem, std::vector<int64_t> shape) {
  sluice::detail::BufferSourceScope scope(this);
  return Tensor::empty(elem, std::move(shape));
}

void *PinnedPool::takeIdle(size_t bytes) {
  void *p = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = idle_.find(bytes);
    if (closed_ || it == idle_.end() || it->second.empty())
      return nullptr;
    p = it->second.back();
    it->second.pop_back();
    count(stats_, [](PinnedStats &s) {
      --s.idleBuffers;
      ++s.reused;
    });
  }
  // Its idle reservation goes before its holder's begins (as the tensor
  // buffer pool's does), so the bytes are never counted twice.
  idleLimit_->release(idleCharge(bytes));
  return p;
}

void *PinnedPool::allocate(size_t bytes) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (closed_)
      return nullptr;
  }
  // Tensor::empty has charged the buffer's bytes already: registering
  // faults in and locks every page of it.
  size_t mapped = (bytes + pageBytes() - 1) / pageBytes() * pageBytes();
  void *m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return nullptr;
  Status s = registrar_->registerRange(m, mapped);
  std::lock_guard<std::mutex> g(mu_);
  if (!s) {
    munmap(m, mapped);
    count(stats_, [&](PinnedStats &t) {
      if (t.failures++ == 0)
        t.firstError = s.message();
    });
    return nullptr;
  }
  count(stats_, [&](PinnedStats &t) {
    ++t.registered;
    ++t.buffers;
    t.bytes += static_cast<int64_t>(mapped);
    t.peakBytes = std::max(t.peakBytes, t.bytes);
  });
  sluice::detail::recordSourcedBuffer(m, shared_from_this());
  return m;
}

void PinnedPool::release(void *p, size_t bytes) {
  {
    // Reserved under the lock, so close() cannot let the limit go between
    // the check and the reservation (tryReserveNow never waits).
    std::lock_guard<std::mutex> g(mu_);
    if (!closed_) {
      std::vector<void *> &list = idle_[bytes];
      if (list.size() < kMaxIdlePerSize &&
          idleLimit_->tryReserveNow(idleCharge(bytes))) {
        list.push_back(p);
        count(stats_, [](PinnedStats &t) { ++t.idleBuffers; });
        return;
      }
      count(stats_, [](PinnedStats &t) { ++t.dropped; });
    }
  }
  unregisterAndFree(p, bytes);
}

void PinnedPool::unregisterAndFree(void *p, size_t bytes) {
  size_t mapped = (bytes + pageBytes() - 1) / pageBytes() * pageBytes();
  registrar_->unregisterRange(p, mapped);
  munmap(p, mapped);
  {
    std::lock_guard<std::mutex> g(mu_);
    count(stats_, [&](PinnedStats &t) {
      ++t.unregistered;
      --t.buffers;
      t.bytes -= static_cast<int64_t>(mapped);
    });
  }
  // Last: it may drop the last reference to this pool.
  sluice::detail::forgetSourcedBuffer(p);
}

void PinnedPool::close() {
  std::map<size_t, std::vector<void *>> idle;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (closed_)
      return;
    closed_ = true;
    idle.swap(idle_);
    int64_t n = 0;
    for (auto &[bytes, list] : idle)
      n += static_cast<int64_t>(list.size());
    count(stats_, [&](PinnedStats &t) { t.idleBuffers -= n; });
  }
  for (auto &[bytes, list] : idle)
    for (void *p : list) {
      idleLimit_->release(idleCharge(bytes));
      unregisterAndFree(p, bytes);
    }
}

PinnedStats PinnedPool::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

} // namespace sluice::runtime
