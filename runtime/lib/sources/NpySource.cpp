//===- NpySource.cpp - NumPy .npy files, one record per axis-0 slice ------===//
//
// Format: "\x93NUMPY", major, minor, header length (u16 LE in v1, u32 LE in
// v2/v3), then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1000, 28, 28), }
// padded with spaces, then the C-order array. Headers of all files are read
// at create(): every file must have the same dtype and trailing shape (the
// record type), and the shapes give sizeHint(). Big-endian arrays are
// byte-swapped; Fortran order is refused for ndim > 1 (the slices would not
// be contiguous).
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"

#include <algorithm>
#include <cctype>

namespace sluice::runtime::detail {

namespace {

struct NpyHeader {
  ElemType elem = ElemType::U8;
  bool swap = false; // stored big-endian
  std::vector<int64_t> shape;
  uint64_t dataOffset = 0;
  std::string descr;
};

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

/// Reads and checks the header of one file.
Status readNpyHeader(const std::string &kind, const std::string &path,
                     NpyHeader &h, uint64_t &rows) {
  auto bad = [&](const std::string &what) {
    return Status::error(kind + ": " + path + ": " + what);
  };
  BufferedInput in(4096);
  if (!in.open(path))
    return bad(in.error());
  if (!in.ensure(10) || std::memcmp(in.data(), "\x93NUMPY", 6) != 0)
    return bad(in.failed() ? in.error()
                           : "not a .npy file (no \\x93NUMPY magic)");
  int major = static_cast<unsigned char>(in.data()[6]);
  uint64_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(in.data()[8]) |
                (static_cast<unsigned char>(in.data()[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (!in.ensure(12))
      return bad("truncated header");
    uint32_t n;
    std::memcpy(&n, in.data() + 8, 4);
    headerLen = n;
    headerStart = 12;
  } else {
    return bad("unsupported .npy format version " + std::to_string(major));
  }
  if (headerLen > (1u << 24) || !in.ensure(headerStart + headerLen))
    return bad("truncated header");
  std::string text(in.data() + headerStart, headerLen);
  h.dataOffset = headerStart + headerLen;

  DictParser p{text};
  bool haveDescr = false, haveOrder = false, haveShape = false;
  bool fortran = false;
  if (!p.eat('{'))
    return bad("malformed header: " + text);
  while (!p.eat('}')) {
    std::string key;
    if (!p.string(key) || !p.eat(':'))
      return bad("malformed header: " + text);
    if (key == "descr") {
      if (!p.string(h.descr))
        return bad("structured dtypes are not supported (descr must be a "
                   "simple type like '<f4')");
      haveDescr = true;
    } else if (key == "fortran_order") {
      if (p.word("True"))
        fortran = true;
      else if (!p.word("False"))
        return bad("malformed header: " + text);
      haveOrder = true;
    } else if (key == "shape") {
      if (!p.tuple(h.shape))
        return bad("malformed shape in header: " + text);
      haveShape = true;
    } else {
      return bad("unexpected key '" + key + "' in header");
    }
    if (!p.eat(',')) {
      if (!p.eat('}'))
        return bad("malformed header: " + text);
      break;
    }
  }
  if (!haveDescr || !haveOrder || !haveShape)
    return bad("header lacks descr, fortran_order or shape: " + text);

  // descr: byte order, kind, item size.
  const std::string &d = h.descr;
  char order = d.empty() ? '?' : d[0];
  std::string body =
      (order == '<' || order == '>' || order == '|' || order == '=')
          ? d.substr(1)
          : d;
  static const std::pair<const char *, ElemType> table[] = {
      {"b1", ElemType::Bool}, {"u1", ElemType::U8},  {"i1", ElemType::I8},
      {"u2", ElemType::U16},  {"i2", ElemType::I16}, {"i4", ElemType::I32},
      {"i8", ElemType::I64},  {"f2", ElemType::F16}, {"f4", ElemType::F32},
      {"f8", ElemType::F64}};
  bool found = false;
  for (const auto &entry : table)
    if (body == entry.first) {
      h.elem = entry.second;
      found = true;
    }
  if (!found)
    return bad("unsupported dtype '" + d +
               "' (supported: bool, u1, i1, u2, i2, i4, i8, f2, f4, f8; "
               "convert with arr.astype(...))");
  h.swap = order == '>' && elemTypeSize(h.elem) > 1;
  if (h.shape.empty())
    return bad("a 0-d array has no axis 0 to read records along; save it "
               "with shape (1,)");
  if (fortran && h.shape.size() > 1)
    return bad("fortran_order arrays are not supported; save with "
               "np.save(path, np.ascontiguousarray(arr))");
  rows = static_cast<uint64_t>(h.shape[0]);
  if (std::optional<uint64_t> size = in.rawSize()) {
    uint64_t bytes = elemTypeSize(h.elem);
    for (int64_t n : h.shape)
      bytes *= static_cast<uint64_t>(n);
    if (*size < h.dataOffset + bytes)
      return bad("truncated: the header promises " + std::to_string(bytes) +
                 " bytes of data, the file has " +
                 std::to_string(*size - std::min(*size, h.dataOffset)));
  }
  return Status::ok();
}

struct NpyFile {
  std::string path;
  NpyHeader header;
  int64_t rows = 0;
};

class NpySource final : public SourceBase {
public:
  std::vector<NpyFile> files;
  ElemType elem = ElemType::U8;
  std::vector<int64_t> recordShape;
  size_t recordBytes = 0;
  int64_t total = 0;

  size_t numShards() const override { return files.size(); }
  std::string shardName(size_t i) const override { return files[i].path; }
  std::optional<int64_t> sizeHint() const override { return total; }
  std::unique_ptr<ShardReader> open(size_t i) const override;
};

class NpyReader final : public ReaderBase {
public:
  NpyReader(const NpySource &src, size_t shard)
      : ReaderBase(src.files[shard].path, src.slots()), src_(src),
        info_(src.files[shard]) {}

  ReadResult next(Record &out) override {
    if (done_)
      return ReadResult::end();
    if (!started_) {
      started_ = true;
      if (!in_.open(file_))
        return fail("npy: cannot read file", in_.error(), -1, false);
      if (in_.skip(info_.header.dataOffset) != info_.header.dataOffset)
        return fail("npy: truncated file", "the file ends inside its header",
                    in_.offset(), false);
    }
    if (record_ >= info_.rows) {
      done_ = true;
      return ReadResult::end();
    }
    startRecord(out);
    const int64_t at = in_.offset();
    Tensor t = Tensor::empty(src_.elem, src_.recordShape);
    if (in_.read(t.mutableRaw(), src_.recordBytes) != src_.recordBytes) {
      if (in_.failed())
        return ioError(in_);
      return fail("npy: truncated file",
                  "the header promises " + std::to_string(info_.rows) +
                      " rows, the data ends inside row " +
                      std::to_string(record_),
                  at, false);
    }
    if (info_.header.swap) {
      size_t w = elemTypeSize(src_.elem);
      uint8_t *p = t.mutableRaw();
      for (size_t i = 0; i + w <= src_.recordBytes; i += w)
        std::reverse(p + i, p + i + w);
    }
    put(out, 0, std::move(t));
    ++record_;
    return ReadResult::record();
  }
  uint64_t bytesRead() const override { return in_.bytesRead(); }

private:
  const NpySource &src_;
  const NpyFile &info_;
  BufferedInput in_;
  bool started_ = false;
};

std::unique_ptr<ShardReader> NpySource::open(size_t i) const {
  return std::make_unique<NpyReader>(*this, i);
}

} // namespace

Expected<std::unique_ptr<Source>> createNpy(const std::string &kind,
                                            const Value &params,
                                            const std::string &base) {
  auto src = std::make_unique<NpySource>();
  Expected<std::vector<std::string>> paths =
      expandFiles(kind, params, "files", base);
  if (!paths)
    return paths.status();
  for (const std::string &path : *paths) {
    NpyFile f;
    f.path = path;
    uint64_t rows = 0;
    Status s = readNpyHeader(kind, path, f.header, rows);
    if (!s)
      return s;
    f.rows = static_cast<int64_t>(rows);
    std::vector<int64_t> rest(f.header.shape.begin() + 1, f.header.shape.end());
    if (src->files.empty()) {
      src->elem = f.header.elem;
      src->recordShape = rest;
    } else if (f.header.elem != src->elem || rest != src->recordShape) {
      const NpyFile &first = src->files.front();
      return Status::error(
          kind + ": " + path + " holds records of " +
          FieldType(f.header.elem, rest).str() + " but " + first.path +
          " holds " + FieldType(src->elem, src->recordShape).str() +
          "; all files of one source must agree on dtype and trailing shape");
    }
    src->total += f.rows;
    src->files.push_back(std::move(f));
  }
  src->recordBytes = elemTypeSize(src->elem);
  for (int64_t n : src->recordShape)
    src->recordBytes *= static_cast<size_t>(n);
  std::string field = stringParam(params, "field", "data");
  src->setNaturalType(
      kind, RecordType({{field, FieldType(src->elem, src->recordShape)}}));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
