//===- MapAligned.h - A mapping that starts on a 2 MiB boundary -*- C++ -*-===//
//
// A mapping can be backed by transparent huge pages only over the 2 MiB
// pages wholly inside it, so buffers meant for huge pages are mapped at a 2
// MiB boundary: the remote client's chunk bodies (runtime/lib/sources,
// Body) and the workers' shared-memory slots (remote/lib/Slots.cpp), both
// through this one function. kHugePageBytes is the one size for every
// buffer meant for huge pages (ops/lib/BufferPool.cpp's large buffers too).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_MAPALIGNED_H
#define SLUICE_OPS_MAPALIGNED_H

#include <cstddef>
#include <cstdint>
#include <sys/mman.h>

namespace sluice {

/// The transparent huge page size (x86-64; arm64 with 4 KiB pages): what
/// mapAligned aligns to and what buffers meant for huge pages are sized in.
constexpr size_t kHugePageBytes = size_t(2) << 20;

/// mmap(nullptr, bytes, prot, flags, fd, 0), but at an address on a 2 MiB
/// boundary: 2 MiB more are reserved first (PROT_NONE), the mapping is
/// placed on the boundary inside them (MAP_FIXED), and the slack on either
/// side is unmapped. MAP_FAILED when either mmap fails (nothing is left
/// mapped then).
inline void *mapAligned(size_t bytes, int prot, int flags, int fd) {
  void *room = ::mmap(nullptr, bytes + kHugePageBytes, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (room == MAP_FAILED)
    return MAP_FAILED;
  const uintptr_t r = reinterpret_cast<uintptr_t>(room);
  const uintptr_t a = (r + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  void *p = ::mmap(reinterpret_cast<void *>(a), bytes, prot, flags | MAP_FIXED,
                   fd, 0);
  if (p == MAP_FAILED) {
    ::munmap(room, bytes + kHugePageBytes);
    return MAP_FAILED;
  }
  if (a > r)
    ::munmap(room, a - r);
  const uintptr_t end = r + bytes + kHugePageBytes;
  if (end > a + bytes)
    ::munmap(reinterpret_cast<void *>(a + bytes), end - (a + bytes));
  return p;
}

} // namespace sluice

#endif // SLUICE_OPS_MAPALIGNED_H
