//===- WebDatasetSource.cpp - WebDataset tar shards
//------------------------===//
//
// A webdataset shard is a tar file whose consecutive members sharing a key
// form one sample: "train/000017.jpg" and "train/000017.cls" are the fields
// "jpg" and "cls" of sample "train/000017". The key is the member path up to
// the first '.' of its basename, the extension is the rest. Members with no
// '.' in their basename, or whose basename starts with '.', belong to no
// sample and are skipped, as are directories and links. Extensions are
// matched exactly; a field may accept alternatives ("jpg;png").
//
// The tar reader handles ustar (prefix + name), pax extended headers (path,
// size), GNU long names ('L') and base-256 sizes, and verifies every header
// checksum. A bad checksum or a truncated member ends the shard: without a
// trustworthy header the next one cannot be found. The sample being
// assembled when that happens is still emitted (its members were intact) if
// it has all its fields; the damage is reported by the following call.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"

#include "sluice/ops/Allocation.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace sluice::runtime::detail {

namespace {

struct WdsField {
  std::vector<std::string> exts; // alternatives
  std::string name;
  ElemType elem = ElemType::Bytes;
};

class WebDatasetSource final : public SourceBase {
public:
  std::vector<std::string> shards;
  std::vector<WdsField> fields;

  size_t numShards() const override { return shards.size(); }
  std::string shardName(size_t i) const override { return shards[i]; }
  std::unique_ptr<ShardReader> open(size_t i) const override;

  int match(std::string_view ext) const {
    for (size_t f = 0; f < fields.size(); ++f)
      for (const std::string &e : fields[f].exts)
        if (e == ext)
          return static_cast<int>(f);
    return -1;
  }
};

/// A regular-file member, with the stream positioned at its data.
struct Member {
  std::string name;
  uint64_t size = 0;
  int64_t offset = 0; // of its (first) header
  std::string key, ext;
  int field = -1;
};

struct TarProblem {
  std::string reason, detail;
  int64_t offset = -1;
};

/// Parses an octal numeric field (or GNU base-256); false if malformed.
bool tarNumber(const char *p, size_t n, uint64_t &v) {
  v = 0;
  if (static_cast<unsigned char>(p[0]) & 0x80) {
    v = static_cast<unsigned char>(p[0]) & 0x7f;
    for (size_t i = 1; i < n; ++i)
      v = (v << 8) | static_cast<unsigned char>(p[i]);
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ')
    ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = (v << 3) | static_cast<uint64_t>(p[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != '\0')
      return false;
  return any;
}

std::string cString(const char *p, size_t n) {
  return std::string(p, strnlen(p, n));
}

uint64_t padding(uint64_t size) { return (512 - size % 512) % 512; }

class WebDatasetReader final : public ReaderBase {
public:
  WebDatasetReader(const WebDatasetSource &src, size_t shard)
      : ReaderBase(src.shards[shard], src.slots()), src_(src), shard_(shard),
        values_(src.fields.size()), have_(src.fields.size()) {}

  ReadResult next(Record &out) override;
  uint64_t bytesRead() const override { return in_.bytesRead(); }

private:
  /// Reads member_'s data into `v`. A plain file's header was checked
  /// against the bytes left in the file, so `v` is sized at once; a .tar.gz
  /// cannot tell what is left before inflating it, so `v` grows by
  /// kGzipChunk as the bytes arrive: a header that declares more than the
  /// stream holds (up to what budget.memory allows) ends at the stream's end
  /// having allocated about what was there, not what it claimed. False when
  /// the stream ends first.
  bool readMember(std::string &v) {
    v.clear();
    if (in_.rawSize()) {
      v.resize(member_.size);
      return in_.read(&v[0], member_.size) == member_.size;
    }
    constexpr uint64_t kGzipChunk = uint64_t(1) << 20;
    uint64_t got = 0;
    while (got < member_.size) {
      uint64_t n = std::min(kGzipChunk, member_.size - got);
      v.resize(got + n); // capacity grows geometrically: linear in total
      uint64_t r = in_.read(&v[got], n);
      got += r;
      if (r != n) {
        v.clear();
        v.shrink_to_fit();
        return false;
      }
    }
    // Geometric growth may leave up to twice the bytes allocated: give the
    // slack back, the record is counted by what it holds.
    if (v.capacity() > v.size() + v.size() / 8)
      v.shrink_to_fit();
    return true;
  }

  /// Reads headers up to the next regular-file member. False at the end of
  /// the archive (problem_.reason empty) or on a problem.
  bool nextMember(Member &m);
  void splitKey(Member &m) const;
  ReadResult tarError() {
    return fail(problem_.reason, problem_.detail, problem_.offset, false);
  }

  const WebDatasetSource &src_;
  size_t shard_; ///< for the first chunk asked for ahead
  BufferedInput in_;
  bool started_ = false;
  bool pending_ = false;  // member_ read but not yet added to a sample
  bool deferred_ = false; // problem_ is to be reported by the next call
  Member member_;
  TarProblem problem_;
  std::vector<std::string> values_;
  std::vector<uint8_t> have_;
};

bool WebDatasetReader::nextMember(Member &m) {
  std::string longName;
  std::optional<uint64_t> paxSize;
  int64_t first = -1;
  problem_ = TarProblem();
  while (true) {
    const int64_t at = in_.offset();
    if (first < 0)
      first = at;
    if (!in_.ensure(512)) {
      if (in_.failed()) {
        problem_ = {"io: read error", in_.error(), at};
        return false;
      }
      if (in_.avail() == 0 && longName.empty() && !paxSize)
        return false; // no end-of-archive blocks; accept the plain end
      problem_ = {"webdataset: truncated tar",
                  "the file ends inside a 512-byte tar header", at};
      return false;
    }
    const char *h = in_.data();
    if (std::all_of(h, h + 512, [](char c) { return c == 0; }))
      return false; // end-of-archive marker
    uint64_t stored;
    if (!tarNumber(h + 148, 8, stored)) {
      problem_ = {"webdataset: bad tar header",
                  "the checksum field is not a number; not a tar file, or "
                  "corrupt",
                  at};
      return false;
    }
    uint64_t sumUnsigned = 0;
    int64_t sumSigned = 0;
    for (int i = 0; i < 512; ++i) {
      char c = (i >= 148 && i < 156) ? ' ' : h[i];
      sumUnsigned += static_cast<unsigned char>(c);
      sumSigned += static_cast<signed char>(c);
    }
    if (stored != sumUnsigned && static_cast<int64_t>(stored) != sumSigned) {
      problem_ = {"webdataset: bad tar header checksum",
                  "stored " + std::to_string(stored) + ", computed " +
                      std::to_string(sumUnsigned) +
                      "; the archive is corrupt from here on",
                  at};
      return false;
    }
    uint64_t size;
    if (!tarNumber(h + 124, 12, size)) {
      problem_ = {"webdataset: bad tar header",
                  "the size field is not a number", at};
      return false;
    }
    char type = h[156];
    std::string name = cString(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != '\0')
      name = cString(h + 345, 155) + "/" + name;
    in_.consume(512);

    if (type == 'x' || type == 'L') {
      // Metadata for the next header: pax records or a GNU long name.
      if (size > (uint64_t(1) << 24)) {
        problem_ = {"webdataset: bad tar header",
                    "an extended header of " + std::to_string(size) + " bytes",
                    at};
        return false;
      }
      std::string data(size, '\0');
      if (in_.read(&data[0], size) != size ||
          in_.skip(padding(size)) != padding(size)) {
        problem_ = {"webdataset: truncated tar",
                    "the file ends inside an extended header", at};
        return false;
      }
      if (type == 'L') {
        longName = data.substr(0, strnlen(data.c_str(), data.size()));
        continue;
      }
      // Records: "<len> <key>=<value>\n", len counting the whole record.
      size_t pos = 0;
      while (pos < data.size()) {
        size_t sp = data.find(' ', pos);
        if (sp == std::string::npos)
          break;
        uint64_t len = std::strtoull(data.c_str() + pos, nullptr, 10);
        if (len == 0 || pos + len > data.size())
          break;
        std::string rec = data.substr(sp + 1, pos + len - sp - 2);
        size_t eq = rec.find('=');
        if (eq != std::string::npos) {
          std::string k = rec.substr(0, eq), v = rec.substr(eq + 1);
          if (k == "path")
            longName = v;
          else if (k == "size")
            paxSize = std::strtoull(v.c_str(), nullptr, 10);
        }
        pos += len;
      }
      continue;
    }
    if (paxSize)
      size = *paxSize;
    if (!longName.empty())
      name = longName;
    if (type == '0' || type == '\0' || type == '7') {
      m.name = std::move(name);
      m.size = size;
      m.offset = first;
      return true;
    }
    // Directories, links, global pax headers, ...: not sample members.
    uint64_t skip = (type == '1' || type == '2' || type == '5') ? 0 : size;
    skip += padding(skip);
    if (in_.skip(skip) != skip) {
      problem_ = {"webdataset: truncated tar",
                  "the file ends inside member '" + name + "'", at};
      return false;
    }
    longName.clear();
    paxSize.reset();
    first = -1;
  }
}

void WebDatasetReader::splitKey(Member &m) const {
  std::string_view path = m.name;
  while (path.substr(0, 2) == "./")
    path.remove_prefix(2);
  size_t slash = path.rfind('/');
  size_t baseStart = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = path.find('.', baseStart);
  m.key.clear();
  m.ext.clear();
  m.field = -1;
  if (dot == std::string_view::npos || dot == baseStart)
    return; // no extension, or a hidden file: not part of a sample
  m.key.assign(path.substr(0, dot));
  m.ext.assign(path.substr(dot + 1));
  m.field = src_.match(m.ext);
}

ReadResult WebDatasetReader::next(Record &out) {
  if (done_)
    return ReadResult::end();
  if (!started_) {
    started_ = true;
    if (!in_.open(file_, true, src_.remote(), src_.takeAhead(shard_)))
      return fail("webdataset: cannot read file", in_.error(), -1, false);
  }
  if (deferred_)
    return tarError();
  std::fill(have_.begin(), have_.end(), 0);
  std::string key;
  int64_t sampleOffset = -1;
  std::optional<TarProblem> problem; // first problem in this sample
  std::string problemField;
  bool any = false;

  while (true) {
    if (!pending_) {
      if (!nextMember(member_)) {
        if (!problem_.reason.empty()) {
          if (!any)
            return tarError();
          // The members read so far had good headers: finish their sample
          // and report the damage on the next call.
          deferred_ = true;
          break;
        }
        done_ = true;
        break;
      }
      splitKey(member_);
      if (member_.key.empty()) {
        uint64_t skip = member_.size + padding(member_.size);
        if (in_.skip(skip) != skip)
          return fail("webdataset: truncated tar",
                      "the file ends inside member '" + member_.name + "'",
                      member_.offset, false);
        continue;
      }
      pending_ = true;
    }
    if (any && member_.key != key)
      break; // member_ starts the next sample
    pending_ = false;
    if (!any) {
      any = true;
      key = member_.key;
      sampleOffset = member_.offset;
    }
    uint64_t pad = padding(member_.size);
    int f = member_.field;
    if (f >= 0 && !have_[static_cast<size_t>(f)]) {
      // The header's size is a claim: check it against the bytes the file
      // has left and against budget.memory before allocating for it.
      if (std::optional<uint64_t> total = in_.rawSize()) {
        uint64_t left = *total > uint64_t(in_.offset())
                            ? *total - uint64_t(in_.offset())
                            : 0;
        if (member_.size > left)
          return fail("webdataset: truncated tar",
                      "member '" + member_.name + "' declares " +
                          std::to_string(member_.size) + " bytes, but only " +
                          std::to_string(left) + " bytes are left in the file",
                      member_.offset, false, member_.ext);
      }
      if (member_.size > uint64_t(std::numeric_limits<int64_t>::max()))
        return fail("webdataset: bad tar header",
                    "member '" + member_.name + "' declares an impossible size",
                    member_.offset, false, member_.ext);
      if (Status st = checkAllocation(int64_t(member_.size),
                                      "member '" + member_.name + "'");
          !st) {
        // Skip its bytes and fail the sample once it is complete, so the
        // next sample starts at the right member.
        if (!problem) {
          problem = TarProblem{"webdataset: member too large", st.message(),
                               member_.offset};
          problemField = src_.fields[static_cast<size_t>(f)].name;
        }
        have_[static_cast<size_t>(f)] = 1;
        if (in_.skip(member_.size + pad) != member_.size + pad)
          return fail("webdataset: truncated tar",
                      "the file ends inside member '" + member_.name +
                          "' (it declares " + std::to_string(member_.size) +
                          " bytes)",
                      member_.offset, false);
        continue;
      }
      std::string &v = values_[static_cast<size_t>(f)];
      if (!readMember(v) || in_.skip(pad) != pad)
        return fail("webdataset: truncated tar",
                    "the file ends inside member '" + member_.name + "'" +
                        (in_.rawSize()
                             ? ""
                             : " (it declares " + std::to_string(member_.size) +
                                   " bytes)"),
                    member_.offset, false, member_.ext);
      have_[static_cast<size_t>(f)] = 1;
      continue;
    }
    if (f >= 0 && !problem) {
      problem = TarProblem{"webdataset: duplicate member",
                           "sample '" + key + "' has two members for field '" +
                               src_.fields[static_cast<size_t>(f)].name +
                               "' (the second is '" + member_.name + "')",
                           member_.offset};
      problemField = src_.fields[static_cast<size_t>(f)].name;
    }
    if (in_.skip(member_.size + pad) != member_.size + pad)
      return fail("webdataset: truncated tar",
                  "the file ends inside member '" + member_.name + "'",
                  member_.offset, false);
  }
  if (!any)
    return ReadResult::end();

  struct Advance {
    int64_t &r;
    ~Advance() { ++r; }
  } advance{record_};
  if (problem)
    return fail(problem->reason, problem->detail, problem->offset, true,
                problemField);
  for (size_t f = 0; f < src_.fields.size(); ++f) {
    if (have_[f])
      continue;
    std::string exts;
    for (const std::string &e : src_.fields[f].exts)
      exts += (exts.empty() ? "'" : "' or '") + e;
    return fail("webdataset: missing field",
                "sample '" + key + "' has no member with extension " + exts +
                    "'",
                sampleOffset, true, src_.fields[f].name);
  }
  startRecord(out);
  put(out, 0, Tensor::string(ElemType::String, key));
  for (size_t f = 0; f < src_.fields.size(); ++f) {
    const WdsField &field = src_.fields[f];
    if (!isNumeric(field.elem)) {
      put(out, f + 1, Tensor::string(field.elem, std::move(values_[f])));
      values_[f] = std::string();
      continue;
    }
    Tensor t = Tensor::empty(field.elem, {});
    ParseError pe = parseNumber(values_[f], field.elem, t.mutableRaw(), 0);
    if (pe != ParseError::None)
      return fail(std::string("webdataset: ") +
                      parseErrorReason(pe, field.elem),
                  "sample '" + key + "', member ." + field.exts[0] + ": " +
                      describeParseError(pe, values_[f], field.elem),
                  sampleOffset, true, field.name);
    put(out, f + 1, std::move(t));
  }
  return ReadResult::record();
}

std::unique_ptr<ShardReader> WebDatasetSource::open(size_t i) const {
  return std::make_unique<WebDatasetReader>(*this, i);
}

} // namespace

Expected<std::unique_ptr<Source>> createWebDataset(const std::string &kind,
                                                   const Value &params,
                                                   const std::string &base) {
  auto src = std::make_unique<WebDatasetSource>();
  const char *name = params.has("shards") ? "shards" : "files";
  std::shared_ptr<const RemoteConfig> remote;
  Expected<std::vector<std::string>> shards =
      expandFiles(kind, params, name, base, &remote);
  if (!shards)
    return shards.status();
  src->setRemote(remote);
  src->shards = shards.take();

  const Value &list = params["fields"];
  if (!list.isList() || list.items().empty())
    return Status::error(kind + ": parameter 'fields' must list the member "
                                "extensions to read, e.g. [{ext: jpg, name: "
                                "image}, {ext: cls, name: label, type: i64}]");
  std::vector<Field> fields = {{"key", FieldType(ElemType::String)}};
  for (const Value &v : list.items()) {
    WdsField f;
    std::string exts = stringParam(v, "ext", "");
    size_t start = 0;
    while (start <= exts.size()) {
      size_t semi = exts.find(';', start);
      if (semi == std::string::npos)
        semi = exts.size();
      std::string e = exts.substr(start, semi - start);
      if (!e.empty() && e[0] == '.')
        e.erase(0, 1);
      if (!e.empty())
        f.exts.push_back(e);
      start = semi + 1;
    }
    if (f.exts.empty())
      return Status::error(kind + ": every field needs an 'ext' (the member "
                                  "extension, e.g. jpg)");
    // Same default as the registry's type rule: the extension as written,
    // with characters a field name cannot hold replaced by '_'.
    std::string fallback;
    for (char c : exts)
      fallback +=
          std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
    if (fallback.empty() ||
        std::isdigit(static_cast<unsigned char>(fallback[0])))
      fallback = "_" + fallback;
    f.name = stringParam(v, "name", fallback);
    if (!v["type"].isNull()) {
      Expected<ElemType> t =
          elemTypeParam(kind, v["type"], "field '" + f.name + "'");
      if (!t)
        return t.status();
      f.elem = *t;
    }
    for (const Field &other : fields)
      if (other.name == f.name)
        return Status::error(kind + ": field name '" + f.name +
                             "' is used twice (the sample key is 'key')");
    for (const WdsField &other : src->fields)
      for (const std::string &e : f.exts)
        if (std::find(other.exts.begin(), other.exts.end(), e) !=
            other.exts.end())
          return Status::error(kind + ": extension '" + e +
                               "' is read by two fields");
    fields.push_back({f.name, FieldType(f.elem)});
    src->fields.push_back(std::move(f));
  }
  src->setNaturalType(kind, RecordType(std::move(fields)));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
