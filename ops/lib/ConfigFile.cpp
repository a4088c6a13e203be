//===- ConfigFile.cpp - Reading the small files a user names --------------===//
//
// O_NONBLOCK on open is what keeps a FIFO with no writer from blocking the
// open itself; fstat on the descriptor (not stat on the path) is what is
// then refused or read, so a path swapped in between cannot slip past.
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/ConfigFile.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice {

namespace {

const char *fileKind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

} // namespace

std::string configSizeText(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t(1) << 30) && bytes % (size_t(1) << 30) == 0)
    std::snprintf(buf, sizeof(buf), "%zu GiB", bytes >> 30);
  else if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0)
    std::snprintf(buf, sizeof(buf), "%zu MiB", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(buf, sizeof(buf), "%zu KiB", bytes >> 10);
  else
    std::snprintf(buf, sizeof(buf), "%zu bytes", bytes);
  return buf;
}

Status readConfigFile(const std::string &path, const std::string &what,
                      size_t maxBytes, std::string &contents) {
  contents.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::error("cannot read '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("'" + path + "' is " + fileKind(st.st_mode) +
                         ", not a file; " + what +
                         " is read from a regular file");
  }
  auto tooBig = [&](std::string size) {
    return Status::error("'" + path + "' is " + size + ", more than the " +
                         configSizeText(maxBytes) + " " + what +
                         " may have; is this the right file?");
  };
  if (st.st_size > 0 && static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return tooBig(std::to_string(st.st_size) + " bytes");
  }
  // Regular files ignore O_NONBLOCK; it is cleared anyway so that a read
  // never returns EAGAIN on some odd file system.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // The size from fstat is a hint only (0 for /proc files; the file may
  // grow): the limit is applied to what is read.
  std::string out;
  out.resize(std::min<size_t>(static_cast<size_t>(st.st_size), maxBytes) + 1);
  size_t done = 0;
  while (true) {
    if (done == out.size()) {
      if (out.size() > maxBytes) {
        ::close(fd);
        return tooBig("more than " + configSizeText(maxBytes));
      }
      out.resize(
          std::min(maxBytes + 1, std::max<size_t>(4096, out.size() * 2)));
    }
    ssize_t got = ::read(fd, &out[done], out.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      int e = errno;
      ::close(fd);
      return Status::error("cannot read '" + path + "': " + std::strerror(e));
    }
    if (got == 0)
      break;
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  if (done > maxBytes)
    return tooBig("more than " + configSizeText(maxBytes));
  out.resize(done);
  contents = std::move(out);
  return Status::ok();
}

} // namespace sluice
