//===- FileFormats.h - Headers of IDX and .npy array files ------*- C++ -*-===//
//
// The idx and npy sources read their file headers twice: the type rules at
// check time (so `sluice check` shows static shapes) and the runtime sources
// at create() (to read the data). Both parse them here, so they agree on what
// a valid header is and word its problems the same way. The parsers work on
// bytes the caller read (plain, or decompressed from .gz): check time and the
// runtime read files differently. MLIR-free; no I/O.
//
// Error messages name the problem but not the file ("not a .npy file (no
// \x93NUMPY magic)"); callers put the file name in front.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_FILEFORMATS_H
#define SLUICE_OPS_FILEFORMATS_H

#include "sluice/ops/Status.h"
#include "sluice/ops/Types.h"
#include "sluice/ops/Value.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

//===----------------------------------------------------------------------===//
// IDX (MNIST): magic 00 00 <type code> <ndims>, then ndims big-endian u32
// sizes, then the big-endian array.
//===----------------------------------------------------------------------===//

/// What an IDX header says about the array that follows it.
struct IdxHeader {
  ElemType elem = ElemType::U8;
  std::vector<int64_t> dims;
  /// Offset of the array in the (decompressed) file.
  size_t dataOffset = 0;
};

/// The longest IDX header: the magic and 255 dims.
constexpr size_t kIdxMaxHeaderBytes = 4 + 4 * 255;

/// Parses the IDX header at the start of `bytes`, the first bytes of the
/// file: kIdxMaxHeaderBytes of them, or all of a shorter file.
Expected<IdxHeader> parseIdxHeader(std::string_view bytes);

//===----------------------------------------------------------------------===//
// .npy (format 1.0, 2.0, 3.0): "\x93NUMPY", major, minor, the dict's length
// (u16 LE in v1, u32 LE in v2/v3), a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1000, 28, 28), }
// and then the array.
//===----------------------------------------------------------------------===//

/// What a .npy header says about the array that follows it. Whether a
/// big-endian or Fortran-order array is usable is up to the reader.
struct NpyHeader {
  ElemType elem = ElemType::U8;
  /// The descr as written, e.g. "<f4".
  std::string descr;
  /// The descr's byte order is '>'.
  bool bigEndian = false;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  /// Offset of the array in the file: the preamble and the dict.
  size_t dataOffset = 0;
};

/// Leading bytes that hold the magic, the version and the dict's length.
constexpr size_t kNpyPreambleBytes = 12;

/// The size of the whole header (the array's offset), from the first
/// kNpyPreambleBytes bytes of the file, or all of a shorter file.
Expected<size_t> npyHeaderSize(std::string_view bytes);

/// Parses the .npy header at the start of `bytes`, the first bytes of the
/// file: at least npyHeaderSize() of them, or all of a shorter file.
Expected<NpyHeader> parseNpyHeader(std::string_view bytes);

/// The descr numpy writes for `t` ("|u1", "<f4"; bf16, which numpy lacks:
/// its bits as "<u2"); empty for bytes and strings, which have no .npy
/// dtype here.
std::string npyDescr(ElemType t);

/// Reads the first `n` bytes (fewer for a shorter object) of the remote
/// object `url` (s3://, http(s)://), inflated when its name ends in .gz,
/// with the settings of a source's `remote` parameter; errors say what
/// failed, not the URL. The runtime holds the HTTP client and sets it
/// (runtime/lib/sources/Remote.cpp), so that the idx and npy type rules read
/// remote headers at check time; unset, they fall back to the parameters.
using RemoteHeadReader = std::function<Expected<std::string>(
    const std::string &kind, const std::string &url, const Value &remote,
    size_t n)>;
void setRemoteHeadReader(RemoteHeadReader reader);
const RemoteHeadReader &remoteHeadReader();
/// Whether `path` names a remote object (s3://, http://, https://).
bool isRemoteName(std::string_view path);

} // namespace sluice

#endif // SLUICE_OPS_FILEFORMATS_H
