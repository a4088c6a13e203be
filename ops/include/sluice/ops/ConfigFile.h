//===- ConfigFile.h - Reading the small files a user names -------*- C++
//-*-===//
//
// A spec, a `--schedule` file, a tokenize vocabulary, a `--resume` state, a
// `tune --check` baseline: files a person names on a command line or in a
// spec, read whole into memory before anything runs. A path can name
// something that is not a file at all (/dev/zero, /dev/urandom, a FIFO with
// no writer, a directory), which a plain read would read without end or wait
// on forever. Every such read goes through readConfigFile: it opens without
// blocking, refuses what is not a regular file, and stops at a size limit
// while reading (a /proc file says it is 0 bytes long and is not).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_CONFIGFILE_H
#define SLUICE_OPS_CONFIGFILE_H

#include "sluice/ops/Status.h"

#include <cstddef>
#include <string>

namespace sluice {

/// Reads all of `path` into `contents`. `what` names the kind of file in
/// errors ("a spec", "a vocabulary"). Errors (each naming the path): it
/// cannot be opened, it is not a regular file (a device, a FIFO, a socket, a
/// directory: refused without blocking on it), it holds more than `maxBytes`
/// bytes, or a read fails.
Status readConfigFile(const std::string &path, const std::string &what,
                      size_t maxBytes, std::string &contents);

/// "4 MiB", "1.5 GiB": a limit as errors print it.
std::string configSizeText(size_t bytes);

} // namespace sluice

#endif // SLUICE_OPS_CONFIGFILE_H
