//===- FileFormats.cpp - Headers of IDX and .npy array files --------------===//
//
// Check time and the runtime both parse with these, so a header the runtime
// refuses cannot pass `sluice check`. Each reader still decides whether it
// can use what a valid header describes (byte order, Fortran order, 0-d).
//
//===----------------------------------------------------------------------===//
#include "sluice/ops/FileFormats.h"

#include <cctype>
#include <cstdio>

namespace sluice {

//===----------------------------------------------------------------------===//
// IDX
//===----------------------------------------------------------------------===//

namespace {

/// The element type of an IDX type code (the magic's third byte).
std::optional<ElemType> idxElemType(unsigned char code) {
  switch (code) {
  case 0x08:
    return ElemType::U8;
  case 0x09:
    return ElemType::I8;
  case 0x0B:
    return ElemType::I16;
  case 0x0C:
    return ElemType::I32;
  case 0x0D:
    return ElemType::F32;
  case 0x0E:
    return ElemType::F64;
  default:
    return std::nullopt;
  }
}

} // namespace

Expected<IdxHeader> parseIdxHeader(std::string_view bytes) {
  if (bytes.size() < 4)
    return Status::error("the file is too short for an IDX header");
  const auto *m = reinterpret_cast<const unsigned char *>(bytes.data());
  char buf[64];
  if (m[0] != 0 || m[1] != 0) {
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", m[0], m[1], m[2],
                  m[3]);
    return Status::error(std::string("not an IDX file: it starts with ") + buf +
                         ", an IDX magic number starts with 00 00");
  }
  IdxHeader h;
  std::optional<ElemType> elem = idxElemType(m[2]);
  if (!elem) {
    // The IDX description lists the codes in hex.
    std::snprintf(buf, sizeof buf, "0x%02x", m[2]);
    return Status::error(std::string("unknown IDX element type code ") + buf);
  }
  h.elem = *elem;
  size_t ndims = m[3];
  if (ndims == 0)
    return Status::error("an IDX file with no dimensions");
  h.dataOffset = 4 + 4 * ndims;
  if (bytes.size() < h.dataOffset)
    return Status::error("the file ends inside its IDX header");
  for (size_t d = 0; d < ndims; ++d) {
    const unsigned char *p = m + 4 + 4 * d;
    h.dims.push_back((int64_t(p[0]) << 24) | (int64_t(p[1]) << 16) |
                     (int64_t(p[2]) << 8) | int64_t(p[3]));
  }
  return h;
}

//===----------------------------------------------------------------------===//
// .npy
//===----------------------------------------------------------------------===//

namespace {

/// numpy's spelling of each element type, without the byte order.
struct NpyType {
  const char *code;
  ElemType elem;
};
constexpr NpyType kNpyTypes[] = {
    {"b1", ElemType::Bool}, {"u1", ElemType::U8},  {"i1", ElemType::I8},
    {"u2", ElemType::U16},  {"i2", ElemType::I16}, {"i4", ElemType::I32},
    {"i8", ElemType::I64},  {"f2", ElemType::F16}, {"f4", ElemType::F32},
    {"f8", ElemType::F64},
};

/// numpy writes headers of a few hundred bytes at most; a longer length is a
/// corrupt file, not a reason to allocate.
constexpr size_t kNpyMaxDictBytes = size_t(1) << 20;

/// A cursor over the header's dict literal.
struct DictParser {
  std::string_view s;
  size_t i = 0;

  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
      ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool string(std::string &out) {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"'))
      return false;
    char q = s[i++];
    size_t end = s.find(q, i);
    if (end == std::string_view::npos)
      return false;
    out.assign(s.substr(i, end - i));
    i = end + 1;
    return true;
  }
  bool word(std::string_view w) {
    ws();
    if (s.substr(i, w.size()) != w)
      return false;
    i += w.size();
    return true;
  }
  bool integer(int64_t &v) {
    ws();
    size_t start = i;
    v = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      if (v > (int64_t(1) << 55))
        return false;
      v = v * 10 + (s[i++] - '0');
    }
    if (i < s.size() && s[i] == 'L') // Python 2 longs
      ++i;
    return i > start;
  }
  bool tuple(std::vector<int64_t> &out) {
    if (!eat('('))
      return false;
    out.clear();
    while (true) {
      if (eat(')'))
        return true;
      int64_t v;
      if (!integer(v))
        return false;
      out.push_back(v);
      if (eat(','))
        continue;
      return eat(')');
    }
  }
};

/// Bytes before the dict: magic, version and the dict's length.
size_t npyPreambleBytes(std::string_view bytes) {
  return static_cast<unsigned char>(bytes[6]) == 1 ? 10 : 12;
}

} // namespace

Expected<size_t> npyHeaderSize(std::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY"))
    return Status::error("not a .npy file (no \\x93NUMPY magic)");
  const auto *u = reinterpret_cast<const unsigned char *>(bytes.data());
  unsigned major = u[6];
  if (major < 1 || major > 3)
    return Status::error("unsupported .npy format version " +
                         std::to_string(major) +
                         " (versions 1, 2 and 3 are supported)");
  uint32_t dictLen = u[8] | (uint32_t(u[9]) << 8);
  if (major >= 2) {
    if (bytes.size() < 12)
      return Status::error("the file ends inside its .npy header");
    dictLen |= (uint32_t(u[10]) << 16) | (uint32_t(u[11]) << 24);
  }
  if (dictLen > kNpyMaxDictBytes)
    return Status::error("implausibly long .npy header (" +
                         std::to_string(dictLen) + " bytes)");
  return npyPreambleBytes(bytes) + dictLen;
}

Expected<NpyHeader> parseNpyHeader(std::string_view bytes) {
  Expected<size_t> size = npyHeaderSize(bytes);
  if (!size)
    return size.status();
  if (bytes.size() < *size)
    return Status::error("the file ends inside its .npy header");
  size_t dictStart = npyPreambleBytes(bytes);
  std::string text(bytes.substr(dictStart, *size - dictStart));
  NpyHeader h;
  h.dataOffset = *size;

  DictParser p{text};
  bool haveDescr = false, haveOrder = false, haveShape = false;
  auto malformed = [&] { return Status::error("malformed header: " + text); };
  if (!p.eat('{'))
    return malformed();
  while (!p.eat('}')) {
    std::string key;
    if (!p.string(key) || !p.eat(':'))
      return malformed();
    if (key == "descr") {
      if (!p.string(h.descr))
        return Status::error("structured dtypes are not supported (descr must "
                             "be a simple type like '<f4')");
      haveDescr = true;
    } else if (key == "fortran_order") {
      if (p.word("True"))
        h.fortranOrder = true;
      else if (!p.word("False"))
        return malformed();
      haveOrder = true;
    } else if (key == "shape") {
      if (!p.tuple(h.shape))
        return Status::error("malformed shape in header: " + text);
      haveShape = true;
    } else {
      return Status::error("unexpected key '" + key + "' in header");
    }
    if (!p.eat(',')) {
      if (!p.eat('}'))
        return malformed();
      break;
    }
  }
  if (!haveDescr || !haveOrder || !haveShape)
    return Status::error("header lacks descr, fortran_order or shape: " + text);

  // descr: byte order ('|' = not applicable, '=' = native), kind, item size.
  const std::string &d = h.descr;
  char order = d.empty() ? '?' : d[0];
  bool known = false;
  if (order == '<' || order == '>' || order == '|' || order == '=')
    for (const NpyType &t : kNpyTypes)
      if (d.compare(1, std::string::npos, t.code) == 0) {
        h.elem = t.elem;
        known = true;
      }
  if (!known)
    return Status::error("unsupported dtype '" + d +
                         "' (supported: bool, u1, i1, u2, i2, i4, i8, f2, f4, "
                         "f8; convert with arr.astype(...))");
  h.bigEndian = order == '>';
  return h;
}

std::string npyDescr(ElemType t) {
  // numpy has no bfloat16: its bits as u2 (ml_dtypes' .view(bfloat16)).
  if (t == ElemType::BF16)
    return "<u2";
  for (const NpyType &n : kNpyTypes)
    if (n.elem == t)
      return (elemTypeSize(t) == 1 ? "|" : "<") + std::string(n.code);
  return "";
}

namespace {
RemoteHeadReader &headReader() {
  static RemoteHeadReader *r = new RemoteHeadReader;
  return *r;
}
} // namespace

void setRemoteHeadReader(RemoteHeadReader reader) {
  headReader() = std::move(reader);
}
const RemoteHeadReader &remoteHeadReader() { return headReader(); }

bool isRemoteName(std::string_view path) {
  return path.substr(0, 5) == "s3://" || path.substr(0, 7) == "http://" ||
         path.substr(0, 8) == "https://";
}

} // namespace sluice
