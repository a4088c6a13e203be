//===- IdxSource.cpp - MNIST-style idx files ------------------------------===//
//
// An idx file is a big-endian header (magic 0x00000800 | type << 8 | ndims,
// then ndims u32 sizes; parsed by sluice/ops/FileFormats.h, as at check
// time) followed by the raw big-endian array. MNIST images are 0x00000803
// (u8; count, rows, cols) and labels 0x00000801 (u8; count); other element
// types (i8, i16, i32, f32, f64) and ranks are read too, as the registry's
// type rule allows them. Labels must be 1-D integers.
// Headers are checked at create() so a wrong file or mismatched counts stop
// the pipeline before it starts; the count gives sizeHint().
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"
#include "sluice/ops/FileFormats.h"

#include <algorithm>

namespace sluice::runtime::detail {

namespace {

/// Reads and checks an idx header.
Status readHeader(const std::string &kind, const std::string &path,
                  IdxHeader &h,
                  const std::shared_ptr<const RemoteConfig> &remote) {
  auto bad = [&](const std::string &what) {
    return Status::error(kind + ": " + path + ": " + what);
  };
  BufferedInput in(4096);
  if (!in.open(path, true, remote))
    return bad(in.error());
  in.ensure(kIdxMaxHeaderBytes);
  Expected<IdxHeader> parsed = parseIdxHeader({in.data(), in.avail()});
  if (!parsed) // a read error is why the header looks short
    return bad(in.failed() ? in.error() : parsed.status().message());
  h = parsed.take();
  std::string problem =
      dataSizeProblem(in, h.dataOffset, arrayBytes(h.elem, h.dims));
  if (!problem.empty())
    return bad(problem);
  return Status::ok();
}

/// idx data is big-endian.
void toHostOrder(uint8_t *p, size_t bytes, size_t width) {
  if (width > 1)
    for (size_t i = 0; i + width <= bytes; i += width)
      std::reverse(p + i, p + i + width);
}

class IdxSource final : public SourceBase {
public:
  std::string images, labels;
  IdxHeader imageHeader, labelHeader;
  std::vector<int64_t> imageShape;
  size_t imageBytes = 0;
  int64_t count = 0;

  size_t numShards() const override { return 1; }
  std::string shardName(size_t) const override { return images; }
  std::optional<int64_t> sizeHint() const override { return count; }
  std::unique_ptr<ShardReader> open(size_t) const override;
};

class IdxReader final : public ReaderBase {
public:
  explicit IdxReader(const IdxSource &src)
      : ReaderBase(src.images, src.slots()), src_(src), images_(1 << 20),
        labels_(4096) {}

  ReadResult next(Record &out) override {
    if (done_)
      return ReadResult::end();
    if (!started_) {
      started_ = true;
      if (!images_.open(src_.images, true, src_.remote()))
        return fail("idx: cannot read file", images_.error(), -1, false);
      images_.skip(src_.imageHeader.dataOffset);
      if (!src_.labels.empty()) {
        if (!labels_.open(src_.labels, true, src_.remote())) {
          file_ = src_.labels;
          return fail("idx: cannot read file", labels_.error(), -1, false);
        }
        labels_.skip(src_.labelHeader.dataOffset);
      }
    }
    if (record_ >= src_.count) {
      done_ = true;
      return ReadResult::end();
    }
    startRecord(out);
    const int64_t at = images_.offset();
    ElemType elem = src_.imageHeader.elem;
    Tensor image = Tensor::empty(elem, src_.imageShape);
    if (images_.read(image.mutableRaw(), src_.imageBytes) != src_.imageBytes) {
      if (images_.failed())
        return ioError(images_);
      return fail("idx: truncated file",
                  "the header promises " + std::to_string(src_.count) +
                      " images, the data ends inside image " +
                      std::to_string(record_),
                  at, false);
    }
    toHostOrder(image.mutableRaw(), src_.imageBytes, elemTypeSize(elem));
    put(out, 0, std::move(image));
    if (!src_.labels.empty()) {
      ElemType lt = src_.labelHeader.elem;
      size_t width = elemTypeSize(lt);
      unsigned char raw[8] = {};
      const int64_t labelAt = labels_.offset();
      if (labels_.read(raw, width) != width) {
        file_ = src_.labels;
        if (labels_.failed())
          return ioError(labels_);
        return fail("idx: truncated file",
                    "the header promises " + std::to_string(src_.count) +
                        " labels, the data ends before label " +
                        std::to_string(record_),
                    labelAt, false);
      }
      toHostOrder(raw, width, width);
      int64_t label = 0;
      switch (lt) {
      case ElemType::I8:
        label = static_cast<int8_t>(raw[0]);
        break;
      case ElemType::I16: {
        int16_t v;
        std::memcpy(&v, raw, 2);
        label = v;
        break;
      }
      case ElemType::I32: {
        int32_t v;
        std::memcpy(&v, raw, 4);
        label = v;
        break;
      }
      default:
        label = raw[0];
        break;
      }
      put(out, 1, Tensor::scalar<int64_t>(ElemType::I64, label));
    }
    ++record_;
    return ReadResult::record();
  }

  uint64_t bytesRead() const override {
    return images_.bytesRead() + labels_.bytesRead();
  }

private:
  const IdxSource &src_;
  BufferedInput images_, labels_;
  bool started_ = false;
};

std::unique_ptr<ShardReader> IdxSource::open(size_t) const {
  return std::make_unique<IdxReader>(*this);
}

} // namespace

Expected<std::unique_ptr<Source>> createIdx(const std::string &kind,
                                            const Value &params,
                                            const std::string &base) {
  auto src = std::make_unique<IdxSource>();
  std::string images = stringParam(params, "images", "");
  if (images.empty())
    return Status::error(kind + ": parameter 'images' (the idx image file, "
                                "e.g. t10k-images-idx3-ubyte.gz) is required");
  src->images = joinPath(base, images);
  std::string labels = stringParam(params, "labels", "");
  for (const auto &[param, given] :
       {std::pair<const char *, const std::string &>{"images", images},
        {"labels", labels}})
    if (Status st = checkSourceUrl(kind, param, given, true); !st)
      return st;
  if (isRemoteUrl(images) || isRemoteUrl(labels)) {
    Expected<std::shared_ptr<const RemoteConfig>> cfg =
        remoteConfigFor(kind, params, base);
    if (!cfg)
      return cfg.status();
    src->setRemote(cfg.take());
  }
  Status s = readHeader(kind, src->images, src->imageHeader, src->remote());
  if (!s)
    return s;
  const std::vector<int64_t> &dims = src->imageHeader.dims;
  if (dims.size() < 2)
    return Status::error(kind + ": " + src->images +
                         " is a 1-D idx file (a labels file?); 'images' "
                         "needs a file of images, e.g. "
                         "train-images-idx3-ubyte.gz");
  src->count = dims[0];
  src->imageShape.assign(dims.begin() + 1, dims.end());
  src->imageBytes = arrayBytes(src->imageHeader.elem, src->imageShape);

  std::vector<Field> fields = {
      {"image", FieldType(src->imageHeader.elem, src->imageShape)}};
  if (!labels.empty()) {
    src->labels = joinPath(base, labels);
    s = readHeader(kind, src->labels, src->labelHeader, src->remote());
    if (!s)
      return s;
    const IdxHeader &lh = src->labelHeader;
    if (lh.dims.size() != 1 || isFloat(lh.elem))
      return Status::error(kind + ": " + src->labels +
                           " is not a labels file: labels are a 1-D idx "
                           "file of integers (magic 0x00000801 for u8)");
    if (lh.dims[0] != src->count)
      return Status::error(
          kind + ": " + src->images + " holds " + std::to_string(src->count) +
          " images but " + src->labels + " holds " +
          std::to_string(lh.dims[0]) + " labels; they must be a matching pair");
    fields.push_back({"label", FieldType(ElemType::I64)});
  }
  src->setNaturalType(kind, RecordType(std::move(fields)));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
