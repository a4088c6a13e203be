//===- NpySource.cpp - NumPy .npy files, one record per axis-0 slice ------===//
//
// Format: "\x93NUMPY", major, minor, header length (u16 LE in v1, u32 LE in
// v2/v3), then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1000, 28, 28), }
// padded with spaces, then the C-order array. sluice/ops/FileFormats.h
// parses the header, as at check time. Headers of all files are read at
// create(): every file must have the same dtype and trailing shape (the
// record type), and the shapes give sizeHint(). Big-endian arrays are
// byte-swapped; Fortran order is refused for ndim > 1 (the slices would not
// be contiguous).
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"
#include "sluice/ops/FileFormats.h"

#include <algorithm>

namespace sluice::runtime::detail {

namespace {

struct NpyFile {
  std::string path;
  NpyHeader header;
  bool swap = false; ///< stored big-endian, elements wider than a byte
  int64_t rows = 0;
};

/// Reads and checks the header of `f.path`.
Status readHeader(const std::string &kind, NpyFile &f,
                  const std::shared_ptr<const RemoteConfig> &remote) {
  auto bad = [&](const std::string &what) {
    return Status::error(kind + ": " + f.path + ": " + what);
  };
  BufferedInput in(4096);
  if (!in.open(f.path, true, remote))
    return bad(in.error());
  in.ensure(kNpyPreambleBytes);
  if (Expected<size_t> size = npyHeaderSize({in.data(), in.avail()}))
    in.ensure(*size);
  Expected<NpyHeader> parsed = parseNpyHeader({in.data(), in.avail()});
  if (!parsed) // a read error is why the header looks short
    return bad(in.failed() ? in.error() : parsed.status().message());
  f.header = parsed.take();
  const NpyHeader &h = f.header;
  f.swap = h.bigEndian && elemTypeSize(h.elem) > 1;
  if (h.shape.empty())
    return bad("a 0-d array has no axis 0 to read records along; save it "
               "with shape (1,)");
  if (h.fortranOrder && h.shape.size() > 1)
    return bad("fortran_order arrays are not supported; save with "
               "np.save(path, np.ascontiguousarray(arr))");
  f.rows = h.shape[0];
  std::string problem =
      dataSizeProblem(in, h.dataOffset, arrayBytes(h.elem, h.shape));
  if (!problem.empty())
    return bad(problem);
  return Status::ok();
}

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
        shard_(shard), info_(src.files[shard]) {}

  ReadResult next(Record &out) override {
    if (done_)
      return ReadResult::end();
    if (!started_) {
      started_ = true;
      if (!in_.open(file_, true, src_.remote(), src_.takeAhead(shard_)))
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
    if (info_.swap) {
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
  size_t shard_; ///< for the first chunk asked for ahead
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
  std::shared_ptr<const RemoteConfig> remote;
  Expected<std::vector<std::string>> paths =
      expandFiles(kind, params, "files", base, &remote);
  if (!paths)
    return paths.status();
  src->setRemote(remote);
  for (const std::string &path : *paths) {
    NpyFile f;
    f.path = path;
    Status s = readHeader(kind, f, remote);
    if (!s)
      return s;
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
  src->recordBytes = arrayBytes(src->elem, src->recordShape);
  std::string field = stringParam(params, "field", "data");
  src->setNaturalType(
      kind, RecordType({{field, FieldType(src->elem, src->recordShape)}}));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
