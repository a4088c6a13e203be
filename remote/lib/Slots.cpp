//===- Slots.cpp - Outputs handed over in shared memory (Slots.h) ---------===//
//
// Both ends: the trainer's pool of memfd slots and the worker's writes into
// them through a small cache of the slots it has open (a slot is opened and
// mapped once, not once per output: its pages then stay in place and cost
// no faults).
//
// Both ends map a slot with MAP_POPULATE: the kernel fills the whole
// mapping's page table in the mmap call, instead of one fault per 4 KiB
// page at the first write (trainer: the slot's pages allocated; worker: the
// trainer's pages entered into its own table). A 77 MB f32 batch is 18,800
// pages, and on a virtual machine each fault is a trap of ~20-30 µs
// (bench/results.md, seventh session); populated, the same pages cost a
// fraction of that. Off: SLUICE_NO_SLOT_POPULATE=1 (either end).
//
// A worker writes a slot it has written fewer than kMapAfterWrites times
// (kMapAfterWritesMadeIn where its pipelines make batches in the slots)
// with pwrite(2) on the slot's file, and maps it only from then on (its
// header page, with the state word, is always mapped). On this host's VM
// the first touch of every page of a new mapping costs ~10 µs even when
// populated (the hypervisor's own page tables: no fault the guest counts):
// ~110-190 ms of CPU for a 77 MB slot, once per worker and slot, against
// ~5 ms for each later copy (the guest is a PVM one: its page tables are
// shadowed by the hypervisor). pwrite copies through the kernel's mapping
// of the same pages, which costs no such first touch and ~6 ms more per 77 MB
// than a copy into a warm mapping (bench/results.md, seventh session: two
// workers, each mapping 8-11 slots in 4 epochs of 15 batches, lost ~60 ms
// of CPU per batch to it). Writing through pwrite until what it cost
// extra reaches what a mapping costs once, then mapping, is the
// rent-or-buy rule: never more than about twice the better choice made in
// hindsight, whether a worker writes a slot twice (a slot lent to
// another worker while its own were busy) or a thousand times.
// SLUICE_NO_SLOT_PWRITE=1 maps every slot at its first write (the way
// before); SLUICE_SLOT_MAP_AFTER=N maps after N writes instead.
//
// The rule's two costs are measured on the worker's host, once: a
// mapping's first touch at the first write of a slot it does not map at
// once (measureTouch: a new mapping's first copy of three 512 KiB windows
// of that slot against a second copy, this thread's CPU time, ~4 ms on
// this host), a pwrite's cost per byte on its first 8 pwrites of outputs
// (notePwrite: the cheapest); the fixed rule until then. About 15 writes
// on this PVM guest, 0-1 where a populated mapping's first touch costs
// about what a warm copy does (an ordinary host or VM), which then maps
// at once. SLUICE_NO_SLOT_MAP_CALIBRATION=1: the constants below
// (kMapAfterWrites, kMapAfterWritesMadeIn).
//
// The rule is for slots a worker may write a few times only. A trainer
// that bounds the slots it lends a worker (its chunk, those lent ahead and
// the one its consumer holds: 7 with chunk=4; ProduceRequest.slot_bound)
// lends the same few again and again for as long as the worker serves it:
// the worker maps that many of the trainer's slots at their first write
// (withinBound), which costs at most the bound's first touches once (~1 s
// of CPU for 7 f32 slots on this host, ~0 on an ordinary one) against a
// pwrite per batch for the rest of the run (11-15 ms per f32 batch here),
// and puts those first touches in the run's first batches instead of
// wherever each slot's Nth write falls. A slot beyond the bound (one made
// while the consumer kept batches, or two trainers' pools) follows the
// measured rule. SLUICE_NO_SLOT_MAP_BOUND=1: every slot by the rule.
//
// Once a worker maps a slot, its pipeline makes the batch lent that slot
// in the mapping itself (SlotBatches, a runtime::OutputBuffers for the
// batch step): the send path then copies nothing (the copy was 16.8 ms of
// the worker's CPU per f32 batch of 77 MB with pwrite). A slot-backed
// buffer comes through the tensor pool's BufferSource hook, as pinned
// batches' do, so only fields of kPoolMinBytes and up are made there (the
// small ones, a batch's labels, are copied at the send); the budget counts
// it as any batch buffer (it is the trainer's memory: the worker's use is
// then below what it counts, never above). A mapped slot then saves the
// whole pwrite, so a slot is mapped sooner (after kMapAfterWritesMadeIn
// writes, 10, against kMapAfterWrites, 32, for copies; a --share-outputs
// worker, which copies, uses 10 too). A batch for which no slot is
// known when it is allocated (read ahead past its request's outputs), a short
// last batch, or an output that is not the buffer the batch step made, is
// copied as before. SLUICE_NO_SLOT_DIRECT=1: every output copied.
//
//===----------------------------------------------------------------------===//
#include "Slots.h"
#include "sluice/ops/MapAligned.h"
#include "sluice/ops/Switches.h"
#include "sluice/ops/WriteAll.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace sluice::remote::detail {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', '1'};
/// Slots are made in steps of this many data bytes (a batch that grows by a
/// few bytes does not need a new one).
constexpr size_t kSlotStep = 2 << 20;

struct Header {
  char magic[8];
  uint64_t nonce[2];
  uint64_t capacity;
  std::atomic<uint64_t> state;
};
static_assert(sizeof(Header) <= kSlotDataOffset);
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the state word is shared between processes");

Header *headerOf(uint8_t *map) { return reinterpret_cast<Header *>(map); }

/// mmap's flags for a slot: MAP_SHARED, populated unless
/// SLUICE_NO_SLOT_POPULATE is set (and not "0"); read at each mapping (a
/// slot is mapped once per worker, not per output).
int slotMapFlags() {
  return MAP_SHARED |
         (switchedOff("SLUICE_NO_SLOT_POPULATE") ? 0 : MAP_POPULATE);
}

} // namespace

bool shmemAllowsHugePages(const std::string &setting) {
  size_t b = setting.find('['), e = setting.find(']');
  if (b == std::string::npos || e == std::string::npos || e < b)
    return false;
  std::string mode = setting.substr(b + 1, e - b - 1);
  return mode == "always" || mode == "within_size" || mode == "advise" ||
         mode == "force";
}

bool slotHugePagesEnabled() {
  static const bool allowed = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    std::string line;
    return std::getline(f, line) && shmemAllowsHugePages(line);
  }();
  return allowed && !switchedOff("SLUICE_NO_SLOT_HUGE_PAGES");
}

bool slotCollapseEnabled() {
  return !switchedOff("SLUICE_NO_SLOT_HUGE_PAGES") &&
         !switchedOff("SLUICE_NO_SLOT_COLLAPSE");
}

namespace {

/// mmap of `bytes` of `fd` from its start with `flags` (MAP_SHARED and
/// more), at an address on a 2 MiB boundary when bytes is 2 MiB or more
/// (sluice::mapAligned; anywhere when that fails).
void *mapSlotAligned(int fd, size_t bytes, int flags) {
  if (bytes >= kHugePageBytes)
    if (void *p = mapAligned(bytes, PROT_READ | PROT_WRITE, flags, fd);
        p != MAP_FAILED)
      return p;
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 // Linux 6.1; older kernels refuse it (EINVAL)
#endif

void *mapSlotFile(int fd, size_t bytes, bool huge);

/// Maps a new slot file of `bytes` (whole 2 MiB pages) for the trainer and
/// has the kernel make its pages huge ones with MADV_COLLAPSE, which
/// shmem_enabled's "never" (the kernels' default) does not forbid (only
/// "deny" does): one 4 KiB page written in each 2 MiB, then collapsed (the
/// rest of each huge page zeroed), then populated. Sets `collapsed` when
/// the kernel did; where it did not (a kernel before 6.1, "deny", memory
/// too fragmented) the slot is mapped again as 4 KiB pages, as before. On the
/// 2-core PVM guest a 64 MiB slot took ~6 ms this way against ~300 ms for
/// the first touch of its 4 KiB pages (and again at the worker's end),
/// and a slot of huge pages is what let one f32 worker match the
/// in-process pipeline with shmem_enabled at "advise" (bench/results.md,
/// thirteenth session). Off: SLUICE_NO_SLOT_COLLAPSE=1 (on the trainer).
void *collapseSlot(int fd, size_t bytes, bool &collapsed) {
  collapsed = false;
  void *p = mapSlotAligned(fd, bytes, MAP_SHARED);
  if (p == MAP_FAILED)
    return p;
  volatile uint8_t *b = static_cast<uint8_t *>(p);
  for (size_t o = 0; o < bytes; o += kHugePageBytes)
    b[o] = 0;
  collapsed = madvise(p, bytes, MADV_COLLAPSE) == 0;
  if (!collapsed) {
    // Mapped again as before (populated by MAP_POPULATE, which kernels
    // before 5.14 have and MADV_POPULATE_WRITE not).
    munmap(p, bytes);
    return mapSlotFile(fd, bytes, false);
  }
#ifdef MADV_POPULATE_WRITE
  if (!switchedOff("SLUICE_NO_SLOT_POPULATE"))
    madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  return p;
}

/// Maps `bytes` of slot file `fd` from its start, read-write and shared:
/// populated (slotMapFlags), and with `huge` (slotHugePagesEnabled()), advised
/// huge pages (MADV_HUGEPAGE) before any of its pages is touched, then
/// populated by MADV_POPULATE_WRITE. A slot of huge pages is written
/// through one TLB entry per 2 MiB instead of per 4 KiB: one f32 worker on
/// the 2-core PVM guest spent ~6 ms more CPU per 77 MB batch than the
/// in-process pipeline writing its THP-backed batch buffers (the TLB's
/// misses, by the likeliest reading), and with the host's shmem_enabled at
/// "advise" the same worker matched it (bench/results.md, thirteenth
/// session); the trainer's population takes one page allocation per 2 MiB
/// too. A kernel without MADV_POPULATE_WRITE (before 5.14) faults the pages
/// in as they are written.
///
/// A mapping of a slot of 2 MiB or more starts on a 2 MiB boundary (as the
/// kernel places one of huge pages by itself where shmem_enabled allows
/// them): a slot whose pages the trainer collapsed into huge ones
/// (collapseSlot) is then mapped by 2 MiB entries at this end too, whatever
/// this host's setting.
void *mapSlotFile(int fd, size_t bytes, bool huge) {
  if (!huge)
    return mapSlotAligned(fd, bytes, slotMapFlags());
  void *p = mapSlotAligned(fd, bytes, MAP_SHARED);
  if (p == MAP_FAILED)
    return p;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  if (!switchedOff("SLUICE_NO_SLOT_POPULATE"))
    madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  return p;
}

/// Writes of a slot by a worker before it maps the slot (Slots.cpp's
/// header), for a worker whose pipelines copy their batches into the slots
/// (SLUICE_NO_SLOT_DIRECT=1): a first touch of a 77 MB mapping (~190 ms)
/// over what pwrite costs more per write than a copy into a warm mapping
/// (~6 ms).
constexpr uint64_t kMapAfterWrites = 32;

/// The same for a worker whose pipelines make their batches in the slots
/// it maps (SlotBatches, the default): a mapped slot then saves the whole
/// pwrite, not only its difference to a copy. Measured on this host's VM
/// (docs/distributed.md, "One worker, f32: where the worker's time goes"):
/// a 77 MB slot's first touch through a populated mapping costs 110-140 ms
/// of CPU, a pwrite of it 11-15 ms (the kernel's copy, page by page), so
/// buying the mapping pays after ~10 writes. h25g had tried 12 and went
/// back to 32 on a bench of 45 batches over 8 slots, in which no slot is
/// written 12 times: the two rules did the same there, and the difference
/// measured was the host's noise. With 10, the bench's steady state (every
/// slot mapped: 6 untimed epochs) makes each batch in its slot.
constexpr uint64_t kMapAfterWritesMadeIn = 10;

} // namespace

namespace {

/// The rule set by hand for every slot: 0 under SLUICE_NO_SLOT_PWRITE=1
/// (every slot mapped at its first write) or SLUICE_SLOT_MAP_AFTER=N; -1:
/// not (the bound rule, then the measured one).
int64_t handMapAfter() {
  static const int64_t n = [] {
    if (switchedOff("SLUICE_NO_SLOT_PWRITE"))
      return int64_t(0);
    const char *after = std::getenv("SLUICE_SLOT_MAP_AFTER");
    if (after && *after) {
      char *end = nullptr;
      unsigned long long v = std::strtoull(after, &end, 10);
      if (end && *end == '\0' && after[0] != '-')
        return static_cast<int64_t>(v);
      std::fprintf(stderr,
                   "sluice: warning: SLUICE_SLOT_MAP_AFTER='%s' is not a "
                   "number of writes (0, 1, 2, ...); ignored\n",
                   after);
    }
    return int64_t(-1);
  }();
  return n;
}

/// Whether the rent-or-buy rule is measured on this host (unless
/// SLUICE_NO_SLOT_MAP_CALIBRATION is set: the fixed constants).
bool calibrationOn() {
  static const bool on = !switchedOff("SLUICE_NO_SLOT_MAP_CALIBRATION");
  return on && handMapAfter() < 0;
}

/// The measured rule (notePwrite): -1 until measured; its costs per byte
/// (measureTouch, notePwrite; -1: not yet), guarded by measureMu.
std::atomic<int64_t> measuredAfter{-1};
std::atomic<double> touchPerByte{-1};
double warmPerByte = 0, pwritePerByte = 0;
int pwriteSamples = 0;
std::mutex measureMu;

/// Whether a slot within the trainer's bound (SlotRef::bound) is mapped at
/// its first write: unless SLUICE_NO_SLOT_MAP_BOUND is set (or the rule is
/// set by hand).
bool boundRuleOn() {
  static const bool on = !switchedOff("SLUICE_NO_SLOT_MAP_BOUND");
  return on && handMapAfter() < 0;
}

/// Slots of each trainer's pool (SlotRef::nonce[0]) this worker maps now,
/// and mappings made in all.
std::mutex poolMapsMu;
std::map<uint64_t, uint64_t> poolMaps;
std::atomic<int64_t> mappingsMade{0};

double threadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

} // namespace

uint64_t slotMapAfterWrites() {
  int64_t n = handMapAfter();
  if (n < 0 && calibrationOn())
    n = measuredAfter.load(std::memory_order_acquire);
  return n >= 0
             ? static_cast<uint64_t>(n)
             : (slotDirectEnabled() ? kMapAfterWritesMadeIn : kMapAfterWrites);
}

int64_t slotMappingsMade() { return mappingsMade.load(); }

namespace {

/// "/proc/DIGITS/fd/DIGITS": the only paths a worker opens for a trainer.
bool slotPathOk(const std::string &p) {
  auto digits = [&](size_t &i) {
    size_t from = i;
    while (i < p.size() && p[i] >= '0' && p[i] <= '9')
      ++i;
    return i > from;
  };
  if (p.rfind("/proc/", 0) != 0)
    return false;
  size_t i = 6;
  if (!digits(i) || p.compare(i, 4, "/fd/") != 0)
    return false;
  i += 4;
  return digits(i) && i == p.size();
}

/// A worker's hold on a trainer's slot: the file open, its header page
/// mapped, and the whole slot mapped once the rule says so (mapDue; before:
/// written with pwrite).
struct Mapping {
  int fd = -1;
  uint8_t *head = nullptr; ///< the header page
  uint8_t *map = nullptr;  ///< the whole file, or null
  size_t bytes = 0;        ///< the file's size
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t stamp = 0;
  /// The trainer's pool (SlotRef::nonce[0]) counted in poolMaps while
  /// mapped.
  uint64_t pool = 0;
  bool counted = false;
  /// Guards writes and map (a slot's lease already keeps two streams from
  /// writing it at once; this keeps the two fields plainly ordered).
  std::mutex mu;
  uint64_t writes = 0; ///< by this worker
  /// No longer counted among its pool's mapped slots (when it was).
  void uncount() {
    if (!counted)
      return;
    std::lock_guard<std::mutex> lock(poolMapsMu);
    if (--poolMaps[pool] == 0)
      poolMaps.erase(pool);
    counted = false;
  }
  ~Mapping() {
    uncount();
    if (map)
      munmap(map, bytes);
    if (head)
      munmap(head, kSlotDataOffset);
    if (fd >= 0)
      close(fd);
  }
};

/// The worker's open slots by path. A path whose file changed (the trainer
/// closed the slot, a new one has its fd number) is opened again; at most
/// kMappings are kept, and at each stream's start the ones whose slot is
/// gone are dropped, so a worker does not keep a finished trainer's memory.
constexpr size_t kMappings = 32;
std::mutex cacheMu;
std::map<std::string, std::shared_ptr<Mapping>> cache;
uint64_t cacheStamp = 0;

/// Whether a slot within the trainer's bound is mapped now (the bound rule,
/// Slots.cpp's header): `r` says the bound, and this worker maps fewer of
/// that pool's slots. `reserve`: counts `m` among them when it is.
bool withinBound(Mapping &m, const SlotRef &r, bool reserve) {
  if (!r.bound || !boundRuleOn())
    return false;
  std::lock_guard<std::mutex> lock(poolMapsMu);
  auto it = poolMaps.find(r.nonce[0]);
  if (it != poolMaps.end() && it->second >= r.bound)
    return false;
  if (reserve) {
    ++poolMaps[r.nonce[0]];
    m.pool = r.nonce[0];
    m.counted = true;
  }
  return true;
}

/// The rent-or-buy rule's first cost measured on this host (Slots.cpp's
/// header), once per process, on the slot `fd` (of `capacity` data bytes)
/// this worker is writing (held at lease + 1: its data are the worker's to
/// overwrite): a new populated mapping's first copy of a window of it
/// against a second copy through the same mapping, on three windows of
/// kProbeBytes (medians, this thread's CPU time): what a mapping's first
/// touch costs per byte more than a warm copy. Its second cost, a pwrite
/// per byte, is timed on the worker's own pwrites of whole outputs
/// (notePwrite): a window this small stays in the CPU's caches, and
/// would make pwrite look 2x cheaper than it is on a 77 MB batch.
void measureTouch(int fd, uint64_t capacity) {
  constexpr size_t kProbeBytes = 512 << 10;
  constexpr int kWindows = 3;
  if (touchPerByte.load(std::memory_order_acquire) >= 0 ||
      capacity < kWindows * kProbeBytes)
    return;
  std::lock_guard<std::mutex> lock(measureMu);
  if (touchPerByte.load(std::memory_order_acquire) >= 0)
    return;
  std::vector<uint8_t> src(kProbeBytes, 0x5a);
  double first[kWindows], warm[kWindows];
  for (int j = 0; j < kWindows; ++j) {
    off_t off = static_cast<off_t>(kSlotDataOffset + j * kProbeBytes);
    double t0 = threadCpuUs();
    void *p = mmap(nullptr, kProbeBytes, PROT_READ | PROT_WRITE, slotMapFlags(),
                   fd, off);
    if (p == MAP_FAILED)
      return;
    std::memcpy(p, src.data(), kProbeBytes);
    double t1 = threadCpuUs();
    std::memcpy(p, src.data(), kProbeBytes);
    double t2 = threadCpuUs();
    munmap(p, kProbeBytes);
    first[j] = t1 - t0;
    warm[j] = t2 - t1;
  }
  std::sort(first, first + kWindows);
  std::sort(warm, warm + kWindows);
  warmPerByte = warm[1] / kProbeBytes;
  touchPerByte.store(std::max(0.0, first[1] - warm[1]) / kProbeBytes,
                     std::memory_order_release);
}

/// A pwrite of `bytes` took `us` of this thread's CPU: once kPwriteSamples
/// are known and the first touch is measured, the rule is the writes whose
/// pwrites cost what a mapping's first touch costs more than a warm copy:
/// writes x (a pwrite's cost, or for copies what it costs more than a
/// copy into a warm mapping) >= first touch. The cheapest pwrite seen per
/// byte is taken (noise only adds; a buffer's first pwrite also pays the
/// kernel's first look at it).
void notePwrite(size_t bytes, double us) {
  constexpr int kPwriteSamples = 8;
  if (!calibrationOn() || bytes < (256u << 10) ||
      measuredAfter.load(std::memory_order_acquire) >= 0)
    return;
  std::lock_guard<std::mutex> lock(measureMu);
  double touch = touchPerByte.load(std::memory_order_acquire);
  if (measuredAfter.load(std::memory_order_acquire) >= 0 || touch < 0)
    return;
  double per = us / static_cast<double>(bytes);
  pwritePerByte = pwriteSamples++ ? std::min(pwritePerByte, per) : per;
  if (pwriteSamples < kPwriteSamples)
    return;
  double rent =
      slotDirectEnabled() ? pwritePerByte : pwritePerByte - warmPerByte;
  constexpr double kMost = 1000;
  double n = rent > 0 ? std::min(kMost, std::ceil(touch / rent)) : kMost;
  measuredAfter.store(static_cast<int64_t>(n), std::memory_order_release);
  std::fprintf(stderr,
               "sluice: serve: slots mapped after %lld writes, measured "
               "here (per MiB of a slot: a new mapping's first touch %.0f "
               "us over a warm copy's %.0f, a pwrite %.0f)\n",
               static_cast<long long>(n), touch * 1048576.0,
               warmPerByte * 1048576.0, pwritePerByte * 1048576.0);
}

/// Whether `m`'s slot, not mapped yet, is mapped at this write (`r`: the
/// slot as lent now): within the trainer's bound (withinBound), or once
/// the rent-or-buy rule says so (slotMapAfterWrites: by hand, measured,
/// or before the measurement the fixed rule).
bool mapDue(Mapping &m, const SlotRef &r) {
  if (withinBound(m, r, false))
    return true;
  return m.writes >= slotMapAfterWrites();
}

/// Counts a write of `m`'s slot (lent as `r`, held by this worker at
/// lease + 1) by this worker; its whole mapping, made now if this is the
/// write it is due at (as mapDue says), or null (write it with pwrite).
uint8_t *countWrite(Mapping &m, const SlotRef &r) {
  std::lock_guard<std::mutex> hold(m.mu);
  if (!m.map) {
    bool due = withinBound(m, r, true);
    if (!due && calibrationOn())
      measureTouch(m.fd, r.capacity);
    if (due || m.writes >= slotMapAfterWrites()) {
      void *p = mapSlotFile(m.fd, m.bytes, slotHugePagesEnabled());
      if (p != MAP_FAILED) {
        m.map = static_cast<uint8_t *>(p);
        ++mappingsMade;
      }
    }
    if (!m.map)
      m.uncount(); // the mapping failed: the slot is not one of them
  }
  ++m.writes;
  return m.map;
}

void sweepMappings() {
  std::lock_guard<std::mutex> lock(cacheMu);
  for (auto it = cache.begin(); it != cache.end();) {
    struct stat st;
    if (stat(it->first.c_str(), &st) != 0 || st.st_ino != it->second->ino ||
        st.st_dev != it->second->dev)
      it = cache.erase(it);
    else
      ++it;
  }
}

std::shared_ptr<Mapping> mapSlot(const SlotRef &r) {
  if (!slotPathOk(r.path))
    return nullptr;
  struct stat st;
  if (stat(r.path.c_str(), &st) != 0)
    return nullptr;
  size_t need = kSlotDataOffset + r.capacity;
  std::shared_ptr<Mapping> m;
  {
    std::lock_guard<std::mutex> lock(cacheMu);
    auto it = cache.find(r.path);
    if (it != cache.end() && it->second->ino == st.st_ino &&
        it->second->dev == st.st_dev && it->second->bytes >= need)
      m = it->second;
  }
  if (!m) {
    int fd = open(r.path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0)
      return nullptr;
    struct stat fst;
    if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) ||
        static_cast<uint64_t>(fst.st_size) < need) {
      close(fd);
      return nullptr;
    }
    m = std::make_shared<Mapping>();
    m->fd = fd;
    void *p = mmap(nullptr, kSlotDataOffset, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    if (p == MAP_FAILED)
      return nullptr;
    m->head = static_cast<uint8_t *>(p);
    m->bytes = static_cast<size_t>(fst.st_size);
    m->dev = fst.st_dev;
    m->ino = fst.st_ino;
    std::lock_guard<std::mutex> lock(cacheMu);
    cache[r.path] = m;
    while (cache.size() > kMappings) {
      auto oldest = cache.begin();
      for (auto it = cache.begin(); it != cache.end(); ++it)
        if (it->second->stamp < oldest->second->stamp)
          oldest = it;
      cache.erase(oldest);
    }
  }
  {
    std::lock_guard<std::mutex> lock(cacheMu);
    m->stamp = ++cacheStamp;
  }
  // Someone else's file at that path (another host's process, a reused fd
  // number) has no such header: nothing is written to it.
  Header *h = headerOf(m->head);
  if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0 ||
      h->nonce[0] != r.nonce[0] || h->nonce[1] != r.nonce[1] ||
      h->capacity < r.capacity)
    return nullptr;
  return m;
}

} // namespace

size_t slotLayout(const std::vector<size_t> &nbytes,
                  std::vector<size_t> &offsets) {
  offsets.clear();
  size_t at = 0;
  for (size_t n : nbytes) {
    at = (at + 63) & ~size_t(63);
    offsets.push_back(at);
    at += n;
  }
  return at;
}

const std::string &bootId() {
  static const std::string id = [] {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(f, s);
    return s;
  }();
  return id;
}

struct SlotPool::Slot {
  int fd = -1;
  uint8_t *map = nullptr;
  size_t mapBytes = 0;
  uint64_t capacity = 0;
  uint64_t nonce[2] = {0, 0};
  std::string path;
  enum State { Free, Lent, Held, Aside, Retired } state = Free;
  uint64_t lease = 0;
  /// The worker it was last lent to (SlotPool::lend).
  const void *worker = nullptr;
  /// When it was last freed (SlotPool::clock_): the last freed is lent
  /// first.
  uint64_t freed = 0;
  Header *header() const { return headerOf(map); }
  void retire() {
    if (map)
      munmap(map, mapBytes);
    if (fd >= 0)
      close(fd);
    map = nullptr;
    fd = -1;
    state = Retired;
  }
};

std::shared_ptr<SlotPool> SlotPool::create() {
  int probe = memfd_create("sluice-slot", MFD_CLOEXEC);
  if (probe < 0)
    return nullptr;
  close(probe);
  std::shared_ptr<SlotPool> p(new SlotPool());
  std::random_device rd;
  p->nonce_[0] = (uint64_t(rd()) << 32) ^ rd();
  p->nonce_[1] = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid());
  p->pid_ = getpid();
  return p;
}

SlotPool::~SlotPool() {
  for (auto &s : slots_)
    s->retire();
}

SlotPool::Slot *SlotPool::make(size_t bytes) {
  uint64_t capacity = (bytes + kSlotStep - 1) / kSlotStep * kSlotStep;
  int fd = memfd_create("sluice-slot", MFD_CLOEXEC);
  if (fd < 0)
    return nullptr;
  size_t total = kSlotDataOffset + capacity;
  // Whole huge pages (a last one past the file's end would be small ones
  // where shmem_enabled is "within_size").
  const bool huge = slotHugePagesEnabled();
  const bool collapse = !huge && slotCollapseEnabled();
  if (huge || collapse)
    total = (total + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    close(fd);
    return nullptr;
  }
  bool collapsed = false;
  void *p = collapse ? collapseSlot(fd, total, collapsed)
                     : mapSlotFile(fd, total, huge);
  if (p == MAP_FAILED) {
    close(fd);
    return nullptr;
  }
  auto s = std::make_unique<Slot>();
  s->fd = fd;
  s->map = static_cast<uint8_t *>(p);
  s->mapBytes = total;
  s->capacity = capacity;
  s->nonce[0] = nonce_[0];
  s->nonce[1] = nonce_[1] + ++serial_;
  s->path = "/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(fd);
  Header *h = new (s->map) Header();
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->nonce[0] = s->nonce[0];
  h->nonce[1] = s->nonce[1];
  h->capacity = capacity;
  h->state.store(0, std::memory_order_release);
  slots_.push_back(std::move(s));
  ++made_;
  madeHuge_ += huge || collapsed;
  // SLUICE_SLOT_TRACE=1: each slot made, with what the others were doing
  // (docs/distributed.md, "One worker, f32: fewer slots").
  static const bool trace = switchedOff("SLUICE_SLOT_TRACE");
  if (trace) {
    size_t n[5] = {0, 0, 0, 0, 0};
    for (auto &o : slots_)
      ++n[o->state];
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    std::fprintf(stderr,
                 "sluice: slot %lld made at %.3f s: %zu free (too small), "
                 "%zu lent, %zu held by the trainer, %zu set aside\n",
                 static_cast<long long>(made_), ts.tv_sec + ts.tv_nsec * 1e-9,
                 n[Slot::Free] - 1, n[Slot::Lent], n[Slot::Held],
                 n[Slot::Aside]);
  }
  return slots_.back().get();
}

std::vector<SlotRef> SlotPool::lend(size_t n, size_t bytes, size_t limit,
                                    const void *worker, size_t bound,
                                    const std::function<bool()> &mayWait,
                                    std::chrono::milliseconds maxWait) {
  std::vector<SlotRef> out;
  // A forked child has the parent's memfds under the parent's paths: the
  // two would lend the same memory.
  if (getpid() != pid_)
    return out;
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + maxWait;
  bool waited = false;
  for (size_t k = 0; k < n; ++k) {
    Slot *pick = nullptr, *small = nullptr;
    size_t live = 0, owned = 0;
    while (true) {
      live = owned = 0;
      pick = small = nullptr;
      for (auto &s : slots_) {
        // A slot set aside is free once its worker let go of it: written
        // (L + 2), or back at L (a batch made in it was freed unsent:
        // SlotBatches), taken from L as giveBack does, so that a worker's
        // move from L cannot slip in between.
        uint64_t expect = s->lease;
        if (s->state == Slot::Aside &&
            (s->header()->state.compare_exchange_strong(
                 expect, 0, std::memory_order_acq_rel) ||
             expect == s->lease + 2)) {
          s->header()->state.store(0, std::memory_order_release);
          s->state = Slot::Free;
          s->freed = ++clock_;
        }
        if (s->state == Slot::Retired)
          continue;
        ++live;
        owned += s->worker == worker && s->capacity >= bytes;
        if (s->state != Slot::Free)
          continue;
        if (s->capacity < bytes) {
          small = s.get();
          continue;
        }
        // The worker's own slots first, the last freed of them first
        // (without a bound: the first of them, as before).
        bool mine = s->worker == worker,
             pickMine = pick && pick->worker == worker;
        if (!pick || (mine && !pickMine) ||
            (bound && mine == pickMine && s->freed > pick->freed))
          pick = s.get();
      }
      if (pick)
        break;
      // None free: wait for one rather than make one, while the worker
      // has what it needs and one is about to be freed.
      if (!bound || owned < bound || !mayWait ||
          std::chrono::steady_clock::now() >= deadline || !mayWait())
        break;
      if (!waited) {
        waited = true;
        ++waits_;
      }
      freed_.wait_for(lock, std::chrono::milliseconds(2));
    }
    if (!pick && (live < limit || small)) {
      // Too small for today's outputs: its memory goes, a larger one comes.
      if (live >= limit) {
        small->retire();
        --live;
      }
      pick = make(bytes);
      if (pick)
        ++live;
    }
    if (!pick)
      break;
    pick->lease = nextLease_;
    nextLease_ += 4;
    pick->state = Slot::Lent;
    pick->worker = worker;
    pick->header()->state.store(pick->lease, std::memory_order_release);
    SlotRef r;
    r.path = pick->path;
    r.nonce[0] = pick->nonce[0];
    r.nonce[1] = pick->nonce[1];
    r.lease = pick->lease;
    r.capacity = pick->capacity;
    out.push_back(std::move(r));
  }
  return out;
}

void SlotPool::giveBack(const SlotRef &ref) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto &s : slots_) {
    if (s->state != Slot::Lent || s->lease != ref.lease)
      continue;
    uint64_t expect = s->lease;
    if (s->header()->state.compare_exchange_strong(expect, 0,
                                                   std::memory_order_acq_rel) ||
        expect == s->lease + 2) {
      s->header()->state.store(0, std::memory_order_release);
      s->state = Slot::Free;
      s->freed = ++clock_;
      freed_.notify_all();
    } else {
      s->state = Slot::Aside;
    }
    return;
  }
}

std::shared_ptr<const void> SlotPool::take(const SlotRef &ref,
                                           const uint8_t *&data) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto &s : slots_) {
    if (s->state != Slot::Lent || s->lease != ref.lease)
      continue;
    if (s->header()->state.load(std::memory_order_acquire) != s->lease + 2)
      return nullptr;
    s->state = Slot::Held;
    data = s->map + kSlotDataOffset;
    std::shared_ptr<SlotPool> self = shared_from_this();
    return std::shared_ptr<const void>(
        static_cast<const void *>(s.get()), [self](const void *p) {
          self->release(const_cast<Slot *>(static_cast<const Slot *>(p)));
        });
  }
  return nullptr;
}

void SlotPool::release(Slot *s) {
  std::lock_guard<std::mutex> lock(mu_);
  s->header()->state.store(0, std::memory_order_release);
  s->state = Slot::Free;
  s->freed = ++clock_;
  freed_.notify_all();
}

size_t SlotPool::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto &s : slots_)
    n += s->state != Slot::Retired;
  return n;
}

size_t SlotPool::setAside() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto &s : slots_)
    n += s->state == Slot::Aside;
  return n;
}

int64_t SlotPool::made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

int64_t SlotPool::waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_;
}

int64_t SlotPool::madeHuge() const {
  std::lock_guard<std::mutex> lock(mu_);
  return madeHuge_;
}

SlotWriter::SlotWriter(std::vector<SlotRef> refs,
                       const std::string &trainerBootId)
    : refs_(std::move(refs)), trainerBoot_(trainerBootId) {
  if (!refs_.empty())
    sweepMappings();
}

bool SlotWriter::write(size_t i, const std::vector<Tensor> &fields) {
  if (i >= refs_.size() || unreachable_)
    return false;
  if (!checked_) {
    checked_ = true;
    if (trainerBoot_.empty() || trainerBoot_ != bootId()) {
      unreachable_ = true;
      return false;
    }
  }
  const SlotRef &r = refs_[i];
  std::vector<size_t> sizes, offsets;
  for (const Tensor &t : fields)
    sizes.push_back(t.nbytes());
  if (slotLayout(sizes, offsets) > r.capacity)
    return false;
  std::shared_ptr<Mapping> m = mapSlot(r);
  if (!m) {
    // The first slot decides whether this worker reaches the trainer's.
    unreachable_ = !wrote_;
    return false;
  }
  Header *h = headerOf(m->head);
  uint64_t expect = r.lease;
  // Taken back by the trainer (its stream was cut): not ours any more.
  if (!h->state.compare_exchange_strong(expect, r.lease + 1,
                                        std::memory_order_acq_rel))
    return false;
  uint8_t *map = countWrite(*m, r);
  bool ok = true;
  if (map) {
    uint8_t *data = map + kSlotDataOffset;
    for (size_t f = 0; f < fields.size(); ++f)
      if (sizes[f])
        std::memcpy(data + offsets[f], fields[f].raw(), sizes[f]);
    ++mapped_;
  } else {
    double t0 = threadCpuUs();
    size_t total = 0;
    for (size_t f = 0; f < fields.size() && ok; ++f)
      if (sizes[f]) {
        ok = writeAll(m->fd, fields[f].raw(), sizes[f],
                      static_cast<off_t>(kSlotDataOffset + offsets[f]));
        total += sizes[f];
      }
    if (ok)
      notePwrite(total, threadCpuUs() - t0);
    pwritten_ += ok;
  }
  // Written, or not (the output then goes over the socket, and the trainer
  // takes the slot back at the stream's end): the worker's last touch.
  h->state.store(r.lease + 2, std::memory_order_release);
  wrote_ |= ok;
  return ok;
}

bool slotDirectEnabled() {
  static const bool on = !switchedOff("SLUICE_NO_SLOT_DIRECT");
  return on;
}

namespace {
/// The slot memory allocate(bytes) hands out next on this thread (set by
/// SlotBatches::allocate around the Tensor::empty that asks for it).
thread_local uint8_t *pendingSlotMemory = nullptr;
thread_local size_t pendingSlotBytes = 0;

/// Slot memory a batch buffer of some SlotBatches holds now, in this
/// process: a slot lent again (to another pipeline of this worker) is not
/// made in while a buffer of its earlier lease lives, since the tensor
/// pool's BufferSource hook knows buffers by address.
std::mutex liveMu;
std::set<const void *> liveSlotBuffers;
} // namespace

/// A slot a batch is made in: held at lease + 1 (being written) from the
/// batch's allocation until the output is handed over (lease + 2, the
/// trainer's) or, never handed over, until its last slot-backed buffer is
/// freed (back to lease L then: the send path may still copy its output
/// there, and the trainer takes it back from L at its stream's end, or as
/// a slot set aside).
struct SlotBatches::Claim {
  std::shared_ptr<Mapping> m;
  SlotRef ref;
  std::vector<size_t> sizes, offsets;
  /// Fields made in the slot, and how many of their buffers are alive.
  std::vector<bool> placed;
  int live = 0;
  bool handed = false;
  Header *header() const { return headerOf(m->head); }
  uint8_t *data() const { return m->map + kSlotDataOffset; }
};

SlotBatches::SlotBatches(int64_t first, std::string trainerBootId)
    : first_(first), trainerBoot_(std::move(trainerBootId)) {}

SlotBatches::~SlotBatches() = default;

void SlotBatches::lend(int64_t first, std::vector<SlotRef> refs) {
  std::lock_guard<std::mutex> lock(mu_);
  refsFirst_ = first;
  refs_ = std::move(refs);
}

int64_t SlotBatches::made() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

std::vector<Tensor>
SlotBatches::allocate(uint64_t batch, const std::vector<ElemType> &elems,
                      const std::vector<std::vector<int64_t>> &shapes) {
  std::vector<Tensor> out;
  if (trainerBoot_.empty() || trainerBoot_ != bootId())
    return out;
  SlotRef r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t at = first_ + static_cast<int64_t>(batch) - refsFirst_;
    if (at < 0 || at >= static_cast<int64_t>(refs_.size()))
      return out;
    r = refs_[static_cast<size_t>(at)];
  }
  auto claim = std::make_shared<Claim>();
  claim->ref = r;
  bool anyLarge = false;
  for (size_t f = 0; f < elems.size(); ++f) {
    // Numeric fields of a fixed layout (RowLayout): always a static size.
    claim->sizes.push_back(static_cast<size_t>(
        FieldType(elems[f], shapes[f]).staticBytes().value_or(0)));
    claim->placed.push_back(tensorBufferBytes(claim->sizes.back()) >=
                            kPoolMinBytes);
    anyLarge = anyLarge || claim->placed.back();
  }
  // Only buffers the tensor pool would serve come through a BufferSource;
  // a batch of small fields is copied (it costs little).
  if (!anyLarge || slotLayout(claim->sizes, claim->offsets) > r.capacity)
    return out;
  // The slot's last field ends within its capacity, padding included.
  for (size_t f = 0; f < elems.size(); ++f)
    if (claim->placed[f] &&
        claim->offsets[f] + tensorBufferBytes(claim->sizes[f]) > r.capacity)
      claim->placed[f] = false;
  claim->m = mapSlot(r);
  if (!claim->m)
    return out;
  // A slot this worker does not map yet is written with pwrite (Slots.cpp's
  // header: mapping costs a first touch of every page); counted as a write
  // of the slot when it is, so the mapping comes when it is due.
  uint8_t *mapped = nullptr;
  {
    std::lock_guard<std::mutex> hold(claim->m->mu);
    if (!claim->m->map && !mapDue(*claim->m, r))
      return out;
    mapped = claim->m->map;
  }
  // A buffer of an earlier lease of this slot (handed over, still held by
  // the pipeline) has the same address: its release must not be taken for
  // this one's.
  if (mapped) {
    std::lock_guard<std::mutex> lock(liveMu);
    for (size_t f = 0; f < elems.size(); ++f)
      if (claim->placed[f] &&
          liveSlotBuffers.count(mapped + kSlotDataOffset + claim->offsets[f]))
        return out;
  }
  // Moved to lease + 1 before any byte is written: a slot the trainer took
  // back (its stream was cut) fails here, and one it takes back from now
  // on is set aside until the worker lets go of it (lease + 2 written, or
  // L again: nothing of this batch is there any more).
  uint64_t expect = r.lease;
  if (!claim->header()->state.compare_exchange_strong(
          expect, r.lease + 1, std::memory_order_acq_rel))
    return out;
  if (!countWrite(*claim->m, r)) {
    claim->header()->state.store(r.lease, std::memory_order_release);
    return out;
  }
  try {
    for (size_t f = 0; f < elems.size(); ++f) {
      if (!claim->placed[f]) {
        out.push_back(Tensor::empty(elems[f], shapes[f]));
        continue;
      }
      uint8_t *at = claim->data() + claim->offsets[f];
      pendingSlotMemory = at;
      pendingSlotBytes = tensorBufferBytes(claim->sizes[f]);
      {
        sluice::detail::BufferSourceScope scope(this);
        out.push_back(Tensor::empty(elems[f], shapes[f]));
      }
      bool mine = pendingSlotMemory == nullptr && out.back().raw() == at;
      pendingSlotMemory = nullptr;
      if (!mine) {
        claim->placed[f] = false;
        continue;
      }
      {
        std::lock_guard<std::mutex> live(liveMu);
        liveSlotBuffers.insert(at);
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++claim->live;
      byBuffer_[at] = claim;
    }
  } catch (...) {
    pendingSlotMemory = nullptr;
    out.clear(); // frees the slot-backed buffers made: L again at the last
    std::lock_guard<std::mutex> lock(mu_);
    if (claim->live == 0)
      claim->header()->state.store(r.lease, std::memory_order_release);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (claim->live == 0) {
    // Nothing landed in the slot: lent under L as before.
    claim->header()->state.store(r.lease, std::memory_order_release);
    return out;
  }
  byLease_[r.lease] = claim;
  ++made_;
  return out;
}

void *SlotBatches::takeIdle(size_t) { return nullptr; }

void *SlotBatches::allocate(size_t bytes) {
  uint8_t *p = pendingSlotMemory;
  if (!p || bytes != pendingSlotBytes)
    return nullptr;
  pendingSlotMemory = nullptr;
  sluice::detail::recordSourcedBuffer(p, shared_from_this());
  return p;
}

void SlotBatches::release(void *p, size_t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = byBuffer_.find(p);
    if (it != byBuffer_.end()) {
      std::shared_ptr<Claim> c = std::move(it->second);
      byBuffer_.erase(it);
      if (--c->live == 0) {
        byLease_.erase(c->ref.lease);
        // Never handed over (a short last batch made again at its size, a
        // stream cut): lent under L again, so the output that is sent may
        // still be copied into it; the trainer takes it back from L.
        if (!c->handed)
          c->header()->state.store(c->ref.lease, std::memory_order_release);
      }
    }
  }
  sluice::detail::forgetSourcedBuffer(p);
  std::lock_guard<std::mutex> live(liveMu);
  liveSlotBuffers.erase(p);
}

bool SlotBatches::handOver(const SlotRef &ref,
                           const std::vector<Tensor> &fields) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = byLease_.find(ref.lease);
  if (it == byLease_.end())
    return false;
  Claim &c = *it->second;
  if (c.handed || fields.size() != c.sizes.size() || c.ref.path != ref.path ||
      c.ref.capacity != ref.capacity)
    return false;
  // Every field made in the slot is the output's own field at its place
  // (the layout is the output's: the same sizes), so the bytes there are
  // the output's; the others go to their places, which no buffer uses.
  for (size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].nbytes() != c.sizes[f])
      return false;
    if (c.placed[f] && fields[f].raw() != c.data() + c.offsets[f])
      return false;
  }
  for (size_t f = 0; f < fields.size(); ++f)
    if (!c.placed[f] && c.sizes[f])
      std::memcpy(c.data() + c.offsets[f], fields[f].raw(), c.sizes[f]);
  c.handed = true;
  c.header()->state.store(c.ref.lease + 2, std::memory_order_release);
  return true;
}

} // namespace sluice::remote::detail
