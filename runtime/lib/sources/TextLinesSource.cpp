//===- TextLinesSource.cpp - text_lines: one record per line
//---------------===//
//
// Each line, without its "\n" or "\r\n", is a record; empty lines are
// records too (they can carry meaning, e.g. document breaks). A last line
// without a newline is a record; the empty "line" after a final newline is
// not. A UTF-8 byte order mark at the start of a file is not part of the
// first line.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"

#include "sluice/ops/Utf8.h"

#include <cstdio>

namespace sluice::runtime::detail {

namespace {

class TextLinesSource final : public SourceBase {
public:
  std::vector<std::string> files;
  bool replaceInvalid = false; ///< encoding: replace

  size_t numShards() const override { return files.size(); }
  std::string shardName(size_t i) const override { return files[i]; }
  std::unique_ptr<ShardReader> open(size_t i) const override;
};

class TextLinesReader final : public ReaderBase {
public:
  TextLinesReader(const TextLinesSource &src, size_t shard)
      : ReaderBase(src.files[shard], src.slots()), src_(src), shard_(shard),
        replace_(src.replaceInvalid) {}

  ReadResult next(Record &out) override {
    if (done_)
      return ReadResult::end();
    if (!started_) {
      started_ = true;
      if (!in_.open(file_, true, src_.remote(), src_.takeAhead(shard_)))
        return fail("text_lines: cannot read file", in_.error(), -1, false);
      skipByteOrderMark(in_);
    }
    size_t scanned = 0;
    const char *nl = nullptr;
    while (true) {
      nl = static_cast<const char *>(
          std::memchr(in_.data() + scanned, '\n', in_.avail() - scanned));
      if (nl)
        break;
      scanned = in_.avail();
      if (!in_.fill())
        break;
    }
    if (in_.failed()) {
      done_ = true;
      return ioError(in_);
    }
    size_t len = nl ? static_cast<size_t>(nl - in_.data()) : in_.avail();
    if (!nl && len == 0) {
      done_ = true;
      return ReadResult::end();
    }
    size_t textLen = len;
    if (nl && textLen > 0 && in_.data()[textLen - 1] == '\r')
      --textLen;
    std::string_view text(in_.data(), textLen);
    size_t bad = invalidUtf8At(text);
    if (bad != std::string::npos && !replace_) {
      char detail[160];
      std::snprintf(detail, sizeof detail,
                    "byte 0x%02x at column %zu is not valid UTF-8; fix the "
                    "file, or read it with `encoding: replace` (U+FFFD)",
                    static_cast<unsigned char>(text[bad]), bad + 1);
      int64_t at = in_.offset() + static_cast<int64_t>(bad);
      in_.consume(nl ? len + 1 : len);
      ReadResult r =
          fail("text_lines: invalid UTF-8", detail, at, true, "", record_ + 1);
      ++record_;
      return r;
    }
    startRecord(out);
    put(out, 0,
        Tensor::string(ElemType::String, bad == std::string::npos
                                             ? std::string(text)
                                             : replaceInvalidUtf8(text)));
    in_.consume(nl ? len + 1 : len);
    ++record_;
    return ReadResult::record();
  }
  uint64_t bytesRead() const override { return in_.bytesRead(); }

private:
  const TextLinesSource &src_;
  size_t shard_; ///< for the first chunk asked for ahead
  BufferedInput in_;
  bool started_ = false;
  bool replace_;
};

std::unique_ptr<ShardReader> TextLinesSource::open(size_t i) const {
  return std::make_unique<TextLinesReader>(*this, i);
}

} // namespace

Expected<std::unique_ptr<Source>> createTextLines(const std::string &kind,
                                                  const Value &params,
                                                  const std::string &base) {
  auto src = std::make_unique<TextLinesSource>();
  std::shared_ptr<const RemoteConfig> remote;
  Expected<std::vector<std::string>> files =
      expandFiles(kind, params, "files", base, &remote);
  if (!files)
    return files.status();
  src->setRemote(remote);
  src->files = files.take();
  src->replaceInvalid = stringParam(params, "encoding", "strict") == "replace";
  src->setNaturalType(kind,
                      RecordType({{"line", FieldType(ElemType::String)}}));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
