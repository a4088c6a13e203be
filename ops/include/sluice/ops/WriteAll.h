//===- WriteAll.h - Writing every byte of a buffer to a file ----*- C++ -*-===//
//
// write(2) and pwrite(2) may write fewer bytes than asked, and a signal may
// interrupt them: the object cache's entries and the workers' shared-memory
// slots are written through this one loop.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_WRITEALL_H
#define SLUICE_OPS_WRITEALL_H

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <unistd.h>

namespace sluice {

/// Writes all `n` bytes at `p` to `fd`: at its file offset when `offset` is
/// negative (write), else at `offset` (pwrite, the file offset unchanged),
/// retrying after EINTR. False on an error (errno says which) or a write
/// that made no progress.
inline bool writeAll(int fd, const void *p, size_t n, off_t offset = -1) {
  const auto *b = static_cast<const uint8_t *>(p);
  while (n) {
    ssize_t k = offset < 0 ? ::write(fd, b, n) : ::pwrite(fd, b, n, offset);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    b += k;
    n -= static_cast<size_t>(k);
    if (offset >= 0)
      offset += k;
  }
  return true;
}

} // namespace sluice

#endif // SLUICE_OPS_WRITEALL_H
