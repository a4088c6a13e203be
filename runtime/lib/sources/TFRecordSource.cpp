//===- TFRecordSource.cpp - TFRecord files of tf.train.Example ------------===//
//
// Framing (little-endian): u64 length, u32 masked CRC-32C of the 8 length
// bytes, `length` bytes of data, u32 masked CRC-32C of the data. Both CRCs
// are checked. A bad data CRC costs one record (the length was verified, so
// the next record is found); a bad length CRC or a truncated record ends the
// file, because nothing after it can be located reliably.
//
// The payload is a tf.train.Example, decoded here straight from the
// protobuf wire format (no protobuf dependency):
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }  // entry: key=1, value=2
//   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
//                      Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed]; }   // packed or not
//   Int64List { repeated int64 value = 1 [packed]; }   // packed or not
// Protobuf merge rules apply: a repeated map key or oneof keeps the last.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"
#include "sluice/ops/Allocation.h"
#include "sluice/ops/kernels/Scalar.h"

#include <algorithm>
#include <cstdio>

namespace sluice::runtime::detail {

namespace {

enum class ListKind : uint8_t { None = 0, Bytes = 1, Float = 2, Int64 = 3 };

const char *listName(ListKind k) {
  switch (k) {
  case ListKind::Bytes:
    return "bytes_list";
  case ListKind::Float:
    return "float_list";
  case ListKind::Int64:
    return "int64_list";
  case ListKind::None:
    break;
  }
  return "empty Feature";
}

struct FeatureSpec {
  std::string key;   // name in the Example
  std::string field; // output field (`as`, else the key)
  ElemType elem = ElemType::F32;
  ListKind list = ListKind::Float;
  std::vector<int64_t> shape; // kDynamic allowed in one place
  int64_t staticCount = 1;    // product of the static dims
  int dynamicDim = -1;
};

/// A read-only cursor over protobuf wire data.
struct Wire {
  const uint8_t *p, *end;

  bool atEnd() const { return p >= end; }
  bool varint(uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end)
        return false;
      uint8_t byte = *p++;
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return false;
  }
  bool bytes(Wire &sub) {
    uint64_t n;
    if (!varint(n) || n > static_cast<uint64_t>(end - p))
      return false;
    sub = Wire{p, p + n};
    p += n;
    return true;
  }
  /// Skips a field of wire type `wt`.
  bool skip(uint32_t wt) {
    uint64_t v;
    switch (wt) {
    case 0:
      return varint(v);
    case 1:
      if (end - p < 8)
        return false;
      p += 8;
      return true;
    case 2: {
      Wire sub;
      return bytes(sub);
    }
    case 5:
      if (end - p < 4)
        return false;
      p += 4;
      return true;
    default: // groups (3, 4) are not used by Example
      return false;
    }
  }
  bool tag(uint32_t &field, uint32_t &wt) {
    uint64_t t;
    if (!varint(t))
      return false;
    field = static_cast<uint32_t>(t >> 3);
    wt = static_cast<uint32_t>(t & 7);
    return field != 0;
  }
};

class TFRecordSource final : public SourceBase {
public:
  std::vector<std::string> files;
  std::vector<FeatureSpec> features;

  size_t numShards() const override { return files.size(); }
  std::string shardName(size_t i) const override { return files[i]; }
  std::unique_ptr<ShardReader> open(size_t i) const override;
};

class TFRecordReader final : public ReaderBase {
public:
  TFRecordReader(const TFRecordSource &src, size_t shard)
      : ReaderBase(src.files[shard], src.slots()), src_(src), shard_(shard),
        spans_(src.features.size()) {}

  ReadResult next(Record &out) override;
  uint64_t bytesRead() const override { return in_.bytesRead(); }

private:
  /// Parses payload_ into out; an error result on malformed data.
  ReadResult parseExample(Record &out, int64_t offset);
  ReadResult decodeFeature(size_t j, Wire feature, Record &out, int64_t offset);
  std::string presentKeys();
  ReadResult malformed(int64_t offset, const std::string &what) {
    return fail("tfrecord: malformed Example",
                what + " (the record is not a valid tf.train.Example)", offset,
                true);
  }

  const TFRecordSource &src_;
  size_t shard_; ///< for the first chunk asked for ahead
  BufferedInput in_;
  bool started_ = false;
  std::string payload_;
  HeldAllocation payloadHeld_; ///< payload_'s capacity, in the budget
  std::vector<Wire> spans_;    // Feature bytes per wanted feature, or null
};

ReadResult TFRecordReader::next(Record &out) {
  if (done_)
    return ReadResult::end();
  if (!started_) {
    started_ = true;
    if (!in_.open(file_, true, src_.remote(), src_.takeAhead(shard_)))
      return fail("tfrecord: cannot read file", in_.error(), -1, false);
  }
  const int64_t start = in_.offset();
  struct Advance {
    int64_t &r;
    ~Advance() { ++r; }
  } advance{record_};

  if (!in_.ensure(12)) {
    if (in_.failed())
      return ioError(in_);
    if (in_.avail() == 0) {
      done_ = true;
      --record_; // no record was attempted
      return ReadResult::end();
    }
    return fail("tfrecord: truncated record",
                "the file ends " + std::to_string(in_.avail()) +
                    " bytes into a 12-byte record header",
                start, false);
  }
  uint64_t length;
  uint32_t lengthCrc;
  std::memcpy(&length, in_.data(), 8);
  std::memcpy(&lengthCrc, in_.data() + 8, 4);
  uint32_t expect = maskedCrc32c(in_.data(), 8);
  if (expect != lengthCrc) {
    char buf[96];
    std::snprintf(buf, sizeof buf,
                  "stored 0x%08x, computed 0x%08x over the length bytes",
                  lengthCrc, expect);
    return fail("tfrecord: length CRC mismatch",
                std::string(buf) + "; the record boundaries after this point "
                                   "are unknown",
                start, false);
  }
  in_.consume(12);
  const int64_t dataStart = in_.offset();
  if (std::optional<uint64_t> size = in_.rawSize()) {
    uint64_t left = *size - static_cast<uint64_t>(dataStart);
    if (length > left || left - length < 4)
      return fail("tfrecord: truncated record",
                  "the record needs " + std::to_string(length) +
                      " data bytes + 4 CRC bytes, the file has " +
                      std::to_string(left) + " left",
                  start, false);
  }
  // A record longer than budget.memory has left cannot be held: skip it
  // (its length CRC was good, so the next record is found).
  if (Status st = checkAllocation(
          length > uint64_t(INT64_MAX) ? std::nullopt
                                       : std::optional<int64_t>(length),
          "a record of " + std::to_string(length) + " bytes");
      !st) {
    if (in_.skip(length + 4) != length + 4)
      return fail("tfrecord: truncated record",
                  "the file ends inside a record of " + std::to_string(length) +
                      " bytes",
                  start, false);
    return fail("tfrecord: record too large", st.message(), start, true);
  }
  // Grow the payload as bytes arrive, so a corrupt stream (gzip: no size
  // known up front) cannot make us allocate a huge buffer for nothing.
  size_t have = 0;
  while (have < length) {
    size_t step = static_cast<size_t>(
        std::min<uint64_t>(length - have, uint64_t(64) << 20));
    // The payload buffer is kept for the next records: counted while the
    // reader lives (reserved before it grows).
    if (static_cast<int64_t>(have + step) > payloadHeld_.bytes())
      payloadHeld_.resize(static_cast<int64_t>(have + step),
                          "the record buffer of " + file_);
    payload_.resize(have + step);
    size_t got = in_.read(&payload_[have], step);
    have += got;
    if (got < step)
      break;
  }
  payload_.resize(have);
  // What it really holds (std::string may round its capacity up).
  payloadHeld_.tryResize(static_cast<int64_t>(payload_.capacity()));
  uint32_t dataCrc = 0;
  if (have < length || in_.read(&dataCrc, 4) != 4) {
    if (in_.failed())
      return ioError(in_);
    return fail("tfrecord: truncated record",
                "the file ends inside a record of " + std::to_string(length) +
                    " bytes",
                start, false);
  }
  uint32_t expectData = maskedCrc32c(payload_.data(), payload_.size());
  if (expectData != dataCrc) {
    char buf[128];
    std::snprintf(buf, sizeof buf,
                  "stored 0x%08x, computed 0x%08x over %llu data bytes at "
                  "byte %lld",
                  dataCrc, expectData, static_cast<unsigned long long>(length),
                  static_cast<long long>(dataStart));
    return fail("tfrecord: data CRC mismatch",
                std::string(buf) + "; the record is corrupt", start, true);
  }
  return parseExample(out, start);
}

ReadResult TFRecordReader::parseExample(Record &out, int64_t offset) {
  std::fill(spans_.begin(), spans_.end(), Wire{nullptr, nullptr});
  const uint8_t *data = reinterpret_cast<const uint8_t *>(payload_.data());
  Wire example{data, data + payload_.size()};
  uint32_t field, wt;
  while (!example.atEnd()) {
    if (!example.tag(field, wt))
      return malformed(offset, "bad field tag in Example");
    if (field != 1 || wt != 2) {
      if (!example.skip(wt))
        return malformed(offset, "bad field in Example");
      continue;
    }
    Wire features;
    if (!example.bytes(features))
      return malformed(offset, "Example.features overruns the record");
    while (!features.atEnd()) {
      if (!features.tag(field, wt))
        return malformed(offset, "bad field tag in Features");
      if (field != 1 || wt != 2) {
        if (!features.skip(wt))
          return malformed(offset, "bad field in Features");
        continue;
      }
      Wire entry;
      if (!features.bytes(entry))
        return malformed(offset, "a Features map entry overruns its message");
      std::string_view key;
      Wire value{nullptr, nullptr};
      bool hasValue = false;
      while (!entry.atEnd()) {
        if (!entry.tag(field, wt))
          return malformed(offset, "bad field tag in a Features map entry");
        Wire sub;
        if (wt == 2 && (field == 1 || field == 2)) {
          if (!entry.bytes(sub))
            return malformed(offset, "a map key or value overruns its entry");
          if (field == 1)
            key = std::string_view(reinterpret_cast<const char *>(sub.p),
                                   size_t(sub.end - sub.p));
          else {
            value = sub;
            hasValue = true;
          }
        } else if (!entry.skip(wt)) {
          return malformed(offset, "bad field in a Features map entry");
        }
      }
      for (size_t j = 0; j < src_.features.size(); ++j)
        if (src_.features[j].key == key) {
          // An entry without a value is an empty Feature.
          spans_[j] = hasValue ? value : Wire{data, data};
        }
    }
  }

  startRecord(out);
  for (size_t j = 0; j < src_.features.size(); ++j) {
    if (!spans_[j].p) {
      return fail("tfrecord: missing feature",
                  "feature '" + src_.features[j].key +
                      "' is not in the Example (it has: " + presentKeys() + ")",
                  offset, true, src_.features[j].key);
    }
    ReadResult r = decodeFeature(j, spans_[j], out, offset);
    if (!r.isRecord())
      return r;
  }
  return ReadResult::record();
}

/// The keys of the Example in payload_, for a "missing feature" message.
std::string TFRecordReader::presentKeys() {
  std::vector<std::string> keys;
  const uint8_t *data = reinterpret_cast<const uint8_t *>(payload_.data());
  Wire example{data, data + payload_.size()};
  uint32_t field, wt;
  while (!example.atEnd() && example.tag(field, wt)) {
    Wire features;
    if (field != 1 || wt != 2 || !example.bytes(features)) {
      if (!example.skip(wt))
        break;
      continue;
    }
    while (!features.atEnd() && features.tag(field, wt)) {
      Wire entry;
      if (wt != 2 || !features.bytes(entry))
        break;
      while (!entry.atEnd() && entry.tag(field, wt)) {
        Wire sub;
        if (wt != 2 || !entry.bytes(sub))
          break;
        if (field == 1)
          keys.emplace_back(reinterpret_cast<const char *>(sub.p),
                            size_t(sub.end - sub.p));
      }
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::string s;
  for (const std::string &k : keys)
    s += (s.empty() ? "" : ", ") + k;
  return s.empty() ? "no features" : s;
}

ReadResult TFRecordReader::decodeFeature(size_t j, Wire feature, Record &out,
                                         int64_t offset) {
  const FeatureSpec &spec = src_.features[j];
  auto bad = [&](const std::string &what) {
    return fail("tfrecord: malformed Example",
                "feature '" + spec.key + "': " + what, offset, true, spec.key);
  };
  // The oneof: the last list present wins.
  ListKind kind = ListKind::None;
  Wire list{nullptr, nullptr};
  uint32_t field, wt;
  while (!feature.atEnd()) {
    if (!feature.tag(field, wt))
      return bad("bad field tag in Feature");
    if (wt == 2 && field >= 1 && field <= 3) {
      if (!feature.bytes(list))
        return bad("the value list overruns the Feature");
      kind = static_cast<ListKind>(field);
    } else if (!feature.skip(wt)) {
      return bad("bad field in Feature");
    }
  }
  if (kind != ListKind::None && kind != spec.list)
    return fail("tfrecord: wrong feature type",
                "feature '" + spec.key + "' is a " + listName(kind) +
                    ", the spec reads it as " +
                    std::string(elemTypeName(spec.elem)) + " (a " +
                    listName(spec.list) + ")",
                offset, true, spec.key);

  // Pass 1: count the values.
  int64_t count = 0;
  if (kind != ListKind::None) {
    Wire w = list;
    while (!w.atEnd()) {
      if (!w.tag(field, wt))
        return bad("bad field tag in the value list");
      if (field != 1) {
        if (!w.skip(wt))
          return bad("bad field in the value list");
        continue;
      }
      if (kind == ListKind::Bytes) {
        Wire s;
        if (wt != 2 || !w.bytes(s))
          return bad("bad bytes value");
        ++count;
      } else if (kind == ListKind::Float) {
        if (wt == 2) {
          Wire packed;
          if (!w.bytes(packed) || (packed.end - packed.p) % 4 != 0)
            return bad("bad packed float values");
          count += (packed.end - packed.p) / 4;
        } else if (wt == 5 && w.skip(5)) {
          ++count;
        } else {
          return bad("bad float value");
        }
      } else {
        if (wt == 2) {
          Wire packed;
          if (!w.bytes(packed))
            return bad("bad packed int64 values");
          uint64_t v;
          while (!packed.atEnd()) {
            if (!packed.varint(v))
              return bad("bad packed int64 values");
            ++count;
          }
        } else if (wt == 0 && w.skip(0)) {
          ++count;
        } else {
          return bad("bad int64 value");
        }
      }
    }
  }

  // Check the count against the declared shape.
  std::vector<int64_t> shape = spec.shape;
  if (spec.dynamicDim >= 0) {
    if (spec.staticCount == 0 ? count != 0 : count % spec.staticCount != 0)
      return fail("tfrecord: wrong value count",
                  "feature '" + spec.key + "' has " + std::to_string(count) +
                      " values, not a multiple of " +
                      std::to_string(spec.staticCount) + " for shape " +
                      FieldType(spec.elem, spec.shape).str(),
                  offset, true, spec.key);
    shape[static_cast<size_t>(spec.dynamicDim)] =
        spec.staticCount == 0 ? 0 : count / spec.staticCount;
  } else if (count != spec.staticCount) {
    return fail("tfrecord: wrong value count",
                "feature '" + spec.key + "' has " + std::to_string(count) +
                    " values, shape " +
                    (spec.shape.empty()
                         ? std::string("[] (a scalar)")
                         : FieldType(spec.elem, spec.shape).str()) +
                    " needs " + std::to_string(spec.staticCount),
                offset, true, spec.key);
  }

  // Pass 2: fill.
  if (spec.list == ListKind::Bytes) {
    std::vector<std::string> values;
    values.reserve(static_cast<size_t>(count));
    Wire w = kind == ListKind::None ? Wire{nullptr, nullptr} : list;
    while (w.p && !w.atEnd()) {
      (void)w.tag(field, wt);
      if (field != 1) {
        (void)w.skip(wt);
        continue;
      }
      Wire s;
      (void)w.bytes(s);
      values.emplace_back(reinterpret_cast<const char *>(s.p),
                          size_t(s.end - s.p));
    }
    put(out, j,
        Tensor::strings(spec.elem, std::move(shape), std::move(values)));
    return ReadResult::record();
  }

  Tensor t = Tensor::empty(spec.elem, std::move(shape));
  size_t i = 0;
  auto storeFloat = [&](float f) {
    kernels::storeFromDouble(spec.elem, f, t.mutableRaw(), i++);
  };
  // Out-of-range values fail the record, so what is stored for them is moot.
  std::string rangeError;
  const std::pair<int64_t, int64_t> range = integerRange(spec.elem);
  auto storeInt = [&](int64_t v) {
    if ((v < range.first || v > range.second) && rangeError.empty())
      rangeError = std::to_string(v);
    kernels::storeFromInt(spec.elem, v, t.mutableRaw(), i++);
  };
  Wire w = kind == ListKind::None ? Wire{nullptr, nullptr} : list;
  while (w.p && !w.atEnd()) {
    (void)w.tag(field, wt);
    if (field != 1) {
      (void)w.skip(wt);
      continue;
    }
    if (spec.list == ListKind::Float) {
      if (wt == 2) {
        Wire packed;
        (void)w.bytes(packed);
        for (; packed.p < packed.end; packed.p += 4) {
          float f;
          std::memcpy(&f, packed.p, 4);
          storeFloat(f);
        }
      } else {
        float f;
        std::memcpy(&f, w.p, 4);
        w.p += 4;
        storeFloat(f);
      }
    } else {
      uint64_t v;
      if (wt == 2) {
        Wire packed;
        (void)w.bytes(packed);
        while (!packed.atEnd() && packed.varint(v))
          storeInt(static_cast<int64_t>(v));
      } else {
        (void)w.varint(v);
        storeInt(static_cast<int64_t>(v));
      }
    }
  }
  if (!rangeError.empty())
    return fail("tfrecord: value out of range",
                "feature '" + spec.key + "': " + rangeError + " does not fit " +
                    std::string(elemTypeName(spec.elem)),
                offset, true, spec.key);
  put(out, j, std::move(t));
  return ReadResult::record();
}

std::unique_ptr<ShardReader> TFRecordSource::open(size_t i) const {
  return std::make_unique<TFRecordReader>(*this, i);
}

} // namespace

Expected<std::unique_ptr<Source>> createTFRecord(const std::string &kind,
                                                 const Value &params,
                                                 const std::string &base) {
  auto src = std::make_unique<TFRecordSource>();
  std::shared_ptr<const RemoteConfig> remote;
  Expected<std::vector<std::string>> files =
      expandFiles(kind, params, "files", base, &remote);
  if (!files)
    return files.status();
  src->setRemote(remote);
  src->files = files.take();

  const Value &feats = params["features"];
  if (!feats.isList() || feats.items().empty())
    return Status::error(kind + ": parameter 'features' must list the "
                                "features to read, e.g. [{name: label, type: "
                                "i64}]");
  std::vector<Field> fields;
  for (const Value &f : feats.items()) {
    FeatureSpec spec;
    spec.key = stringParam(f, "name", "");
    if (spec.key.empty())
      return Status::error(kind + ": every feature needs a name");
    spec.field = stringParam(f, "as", spec.key);
    Expected<ElemType> t =
        elemTypeParam(kind, f["type"], "feature '" + spec.key + "'");
    if (!t)
      return t.status();
    spec.elem = *t;
    if (spec.elem == ElemType::Bytes || spec.elem == ElemType::String)
      spec.list = ListKind::Bytes;
    else if (isFloat(spec.elem))
      spec.list = ListKind::Float;
    else
      spec.list = ListKind::Int64;
    if (f["shape"].isList())
      spec.shape = f["shape"].asIntList();
    else if (f["shape"].isInt())
      spec.shape = {f["shape"].asInt()};
    spec.staticCount = 1;
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      int64_t n = spec.shape[d];
      if (n == kDynamic) {
        if (spec.dynamicDim >= 0)
          return Status::error(kind + ": feature '" + spec.key +
                               "': at most one dimension of shape can be -1");
        spec.dynamicDim = static_cast<int>(d);
      } else if (n < 0) {
        return Status::error(kind + ": feature '" + spec.key +
                             "': shape dimensions must be >= 0 or -1");
      } else {
        spec.staticCount *= n;
      }
    }
    for (const FeatureSpec &other : src->features)
      if (other.field == spec.field)
        return Status::error(kind + ": two features are read into field '" +
                             spec.field + "'; rename one with 'as'");
    fields.push_back({spec.field, FieldType(spec.elem, spec.shape)});
    src->features.push_back(std::move(spec));
  }
  src->setNaturalType(kind, RecordType(std::move(fields)));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
