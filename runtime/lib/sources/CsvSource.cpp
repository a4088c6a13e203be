//===- CsvSource.cpp - csv / tsv reader
//------------------------------------===//
//
// RFC 4180 with the usual extensions: any one-character delimiter, CRLF or
// LF line ends, quoted fields holding delimiters, doubled quotes and
// newlines. Speed matters (tabular pipelines are parse-bound), so a record is
// parsed straight out of the read buffer: cells are located with a tight
// scan and converted in place with std::from_chars into the output tensors;
// only string/bytes columns allocate.
//
// Semantics worth knowing:
//  * Each of a column's `count` values is its own cell; a record must have
//    exactly sum(count) cells, else "too few/too many columns".
//  * Empty cell: NaN for float columns, "" for string/bytes, 0 for hex32
//    (Criteo leaves missing categoricals empty; DLRM's preprocessing reads
//    them as 0), an error for integer and bool columns.
//  * hex32: 1 to 8 hex digits, no prefix, read as an unsigned value into i64.
//  * Blank lines are skipped (and not counted as records); `header: true`
//    skips the first line. A UTF-8 byte order mark (Excel) is ignored.
//  * A record that straddles two buffer fills is simply parsed again once
//    the buffer holds all of it.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"

#include <algorithm>

namespace sluice::runtime::detail {

namespace {

struct CsvColumn {
  std::string name;
  ElemType elem = ElemType::I64; // output element type
  bool hex32 = false;
  bool text = false; // bytes/string
  int64_t count = 1;
  std::string typeName; // as written, for messages
};

/// Which column and element a cell fills, and how to convert it; flat so
/// the per-cell work needs no chain of lookups.
struct CellTarget {
  enum Kind : uint8_t { Number, Hex, Text };
  Kind kind;
  ElemType elem;
  uint32_t column;
  uint32_t element;
};

class CsvSource final : public SourceBase {
public:
  std::vector<std::string> files;
  char delim = ',';
  bool header = false;
  std::vector<CsvColumn> columns;
  std::vector<CellTarget> cells;

  size_t numShards() const override { return files.size(); }
  std::string shardName(size_t i) const override { return files[i]; }
  std::unique_ptr<ShardReader> open(size_t i) const override;

  /// "label, dense x13, cat x26"
  std::string layout() const {
    std::string s;
    for (const CsvColumn &c : columns) {
      s += (s.empty() ? "" : ", ") + c.name;
      if (c.count != 1)
        s += " x" + std::to_string(c.count);
    }
    return s;
  }
};

enum class ScanStatus { Ok, NeedMore, Unterminated };

enum class CellError : uint8_t { None, Parse, Hex, StrayQuote };

class CsvReader final : public ReaderBase {
public:
  CsvReader(const CsvSource &src, size_t shard)
      : ReaderBase(src.files[shard], src.slots()), src_(src),
        cells_(src.cells.data()) {
    strings_.resize(src.columns.size());
    tensors_.resize(src.columns.size());
    columnData_.resize(src.columns.size());
  }

  ReadResult next(Record &out) override;
  uint64_t bytesRead() const override { return in_.bytesRead(); }

private:
  /// Scans one record at the start of the buffer window, converting cells
  /// when `store`.
  ScanStatus scan(bool store);
  void storeCell(size_t cell, const char *b, const char *e, bool escaped,
                 size_t offset);
  void noteError(size_t cell, CellError kind, ParseError parse,
                 std::string_view text, size_t offset) {
    if (err_ != CellError::None)
      return;
    err_ = kind;
    errParse_ = parse;
    errCell_ = cell;
    errText_.assign(text.data(), text.size());
    errOffset_ = offset;
  }
  /// Parses a record, refilling the buffer until it holds all of it.
  ScanStatus scanWhole(bool store) {
    while (true) {
      ScanStatus s = scan(store);
      if (s != ScanStatus::NeedMore)
        return s;
      if (!in_.fill() && in_.failed())
        return s;
    }
  }
  /// Skips blank lines; false at the end of the file.
  bool skipBlankLines();
  ReadResult unterminated();
  std::string cellName(size_t cell) const {
    const CellTarget &t = src_.cells[cell];
    const CsvColumn &c = src_.columns[t.column];
    if (c.count == 1)
      return c.name;
    return c.name + "[" + std::to_string(t.element) + "]";
  }

  const CsvSource &src_;
  BufferedInput in_;
  bool started_ = false;
  int64_t line_ = 1; // line at which the next record starts

  // Results of the last scan().
  size_t recordLen_ = 0;
  size_t numCells_ = 0;
  int64_t lines_ = 0;
  size_t quoteStart_ = 0;
  CellError err_ = CellError::None;
  ParseError errParse_ = ParseError::None;
  size_t errCell_ = 0;
  std::string errText_;
  size_t errOffset_ = 0;

  const CellTarget *cells_;
  std::vector<Tensor> tensors_;                   // numeric columns
  std::vector<uint8_t *> columnData_;             // their buffers
  std::vector<std::vector<std::string>> strings_; // text columns
};

bool parseHex32(std::string_view text, int64_t &out) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() &&
         (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  if (text.empty()) {
    out = 0;
    return true;
  }
  if (text.size() > 8)
    return false;
  // A table lookup instead of range tests: digits and letters mix
  // unpredictably in hashes, and the branches cost more than the lookup.
  static const struct HexTable {
    uint8_t v[256];
    HexTable() {
      std::memset(v, 0xff, sizeof v);
      for (int c = 0; c < 10; ++c)
        v['0' + c] = static_cast<uint8_t>(c);
      for (int c = 0; c < 6; ++c)
        v['a' + c] = v['A' + c] = static_cast<uint8_t>(10 + c);
    }
  } table;
  uint32_t v = 0, bad = 0;
  for (char c : text) {
    uint32_t digit = table.v[static_cast<unsigned char>(c)];
    bad |= digit;
    v = (v << 4) | (digit & 0xf);
  }
  if (bad & 0xf0)
    return false;
  out = static_cast<int64_t>(v);
  return true;
}

void CsvReader::storeCell(size_t cell, const char *b, const char *e,
                          bool escaped, size_t offset) {
  const CellTarget &t = cells_[cell];
  if (t.kind == CellTarget::Text) {
    std::string &s = strings_[t.column][t.element];
    if (!escaped) {
      s.assign(b, static_cast<size_t>(e - b));
      return;
    }
    s.clear();
    for (const char *p = b; p < e; ++p) {
      s.push_back(*p);
      if (*p == '"')
        ++p; // a doubled quote stands for one
    }
    return;
  }
  std::string_view text(b, static_cast<size_t>(e - b));
  if (t.kind == CellTarget::Hex) {
    int64_t v;
    if (!parseHex32(text, v)) {
      noteError(cell, CellError::Hex, ParseError::Syntax, text, offset);
      return;
    }
    std::memcpy(columnData_[t.column] + 8 * t.element, &v, 8);
    return;
  }
  ParseError pe = parseNumber(text, t.elem, columnData_[t.column], t.element);
  if (pe != ParseError::None)
    noteError(cell, CellError::Parse, pe, text, offset);
}

ScanStatus CsvReader::scan(bool store) {
  const char *const b = in_.data();
  const char *const e = b + in_.avail();
  const bool eof = in_.eof();
  const char delim = src_.delim;
  const size_t want = src_.cells.size();
  const char *p = b;
  size_t cell = 0;
  int64_t lines = 0;
  err_ = CellError::None;

  while (true) {
    const char *cs, *ce;
    bool escaped = false;
    if (p < e && *p == '"') {
      quoteStart_ = static_cast<size_t>(p - b);
      cs = ++p;
      while (true) {
        const char *q =
            static_cast<const char *>(std::memchr(p, '"', size_t(e - p)));
        if (!q)
          return eof ? ScanStatus::Unterminated : ScanStatus::NeedMore;
        lines += std::count(p, q, '\n');
        if (q + 1 < e && q[1] == '"') {
          escaped = true;
          p = q + 2;
          continue;
        }
        if (q + 1 == e && !eof)
          return ScanStatus::NeedMore;
        ce = q;
        p = q + 1;
        break;
      }
      if (p < e && *p != delim && *p != '\n') {
        if (*p == '\r' && p + 1 == e && !eof)
          return ScanStatus::NeedMore;
        if (!(*p == '\r' && p + 1 < e && p[1] == '\n')) {
          // Text after the closing quote: RFC 4180 forbids it; report it
          // and resynchronize at the next delimiter or line end.
          if (store)
            noteError(
                cell, CellError::StrayQuote, ParseError::None,
                std::string_view(cs - 1, size_t(e - cs + 1)).substr(0, 24),
                size_t(cs - 1 - b));
          while (p < e && *p != delim && *p != '\n')
            ++p;
          if (p == e && !eof)
            return ScanStatus::NeedMore;
        }
      }
    } else {
      cs = p;
      while (p < e && *p != delim && *p != '\n')
        ++p;
      if (p == e && !eof)
        return ScanStatus::NeedMore;
      ce = p;
      if (p < e && ce > cs && ce[-1] == '\r')
        --ce; // CRLF
    }
    if (store && cell < want)
      storeCell(cell, cs, ce, escaped, size_t(cs - b));
    ++cell;
    if (p < e && *p == delim) {
      ++p;
      continue;
    }
    if (p < e) {
      p += (*p == '\r') ? 2 : 1;
      ++lines;
    }
    break;
  }
  recordLen_ = static_cast<size_t>(p - b);
  numCells_ = cell;
  lines_ = lines;
  return ScanStatus::Ok;
}

bool CsvReader::skipBlankLines() {
  while (true) {
    if (!in_.ensure(2) && in_.avail() == 0)
      return false;
    const char *d = in_.data();
    if (d[0] == '\n') {
      in_.consume(1);
      ++line_;
    } else if (d[0] == '\r' && in_.avail() >= 2 && d[1] == '\n') {
      in_.consume(2);
      ++line_;
    } else {
      return true;
    }
  }
}

ReadResult CsvReader::unterminated() {
  int64_t at = in_.offset() + static_cast<int64_t>(quoteStart_);
  return fail(src_.kind() + ": unterminated quoted field",
              "a field opened with '\"' at byte " + std::to_string(at) +
                  " has no closing quote before the end of the file",
              at, false, "", line_);
}

ReadResult CsvReader::next(Record &out) {
  if (done_)
    return ReadResult::end();
  const std::string &kind = src_.kind();
  if (!started_) {
    started_ = true;
    if (!in_.open(file_))
      return fail(kind + ": cannot read file", in_.error(), -1, false);
    skipByteOrderMark(in_);
    if (src_.header && skipBlankLines()) {
      ScanStatus s = scanWhole(false);
      if (in_.failed())
        return ioError(in_);
      if (s == ScanStatus::Unterminated)
        return unterminated();
      in_.consume(recordLen_);
      line_ += lines_;
    }
  }
  if (!skipBlankLines()) {
    done_ = true;
    if (in_.failed())
      return ioError(in_);
    return ReadResult::end();
  }

  for (size_t c = 0; c < src_.columns.size(); ++c) {
    const CsvColumn &col = src_.columns[c];
    std::vector<int64_t> shape;
    if (col.count != 1)
      shape.push_back(col.count);
    if (col.text)
      strings_[c].resize(static_cast<size_t>(col.count));
    else {
      tensors_[c] = Tensor::empty(col.elem, std::move(shape));
      columnData_[c] = tensors_[c].mutableRaw();
    }
  }

  ScanStatus s = scanWhole(true);
  if (in_.failed())
    return ioError(in_);
  if (s == ScanStatus::Unterminated)
    return unterminated();

  const int64_t startLine = line_;
  const int64_t startOffset = in_.offset();
  in_.consume(recordLen_);
  line_ += lines_;
  struct Advance { // the record is consumed whatever happens below
    int64_t &r;
    ~Advance() { ++r; }
  } advance{record_};

  size_t want = src_.cells.size();
  if (numCells_ != want) {
    bool few = numCells_ < want;
    return fail(kind + (few ? ": too few columns" : ": too many columns"),
                "expected " + std::to_string(want) + " columns (" +
                    src_.layout() + "), found " + std::to_string(numCells_),
                startOffset, true, "", startLine);
  }
  if (err_ != CellError::None) {
    const CsvColumn &col = src_.columns[src_.cells[errCell_].column];
    std::string where = "column " + std::to_string(errCell_ + 1) + " '" +
                        cellName(errCell_) + "': ";
    int64_t at = startOffset + static_cast<int64_t>(errOffset_);
    switch (err_) {
    case CellError::StrayQuote:
      return fail(kind + ": bad quoting",
                  where + "text after the closing quote of a quoted field "
                          "(write a quote inside a quoted field as \"\")",
                  at, true, cellName(errCell_), startLine);
    case CellError::Hex:
      return fail(kind + ": bad hex32",
                  where + "'" + errText_.substr(0, 40) +
                      "' is not 1 to 8 hex digits",
                  at, true, cellName(errCell_), startLine);
    default: {
      std::string detail =
          where + describeParseError(errParse_, errText_, col.elem);
      if (errParse_ == ParseError::Empty)
        detail += " column (only float columns may have empty cells; use "
                  "f32/f64 and fill_missing, or fix the data)";
      return fail(kind + ": " + parseErrorReason(errParse_, col.elem), detail,
                  at, true, cellName(errCell_), startLine);
    }
    }
  }

  startRecord(out);
  for (size_t c = 0; c < src_.columns.size(); ++c) {
    const CsvColumn &col = src_.columns[c];
    if (!col.text) {
      put(out, c, std::move(tensors_[c]));
      continue;
    }
    std::vector<int64_t> shape;
    if (col.count != 1)
      shape.push_back(col.count);
    put(out, c,
        Tensor::strings(col.elem, std::move(shape), std::move(strings_[c])));
    strings_[c] = std::vector<std::string>();
  }
  return ReadResult::record();
}

std::unique_ptr<ShardReader> CsvSource::open(size_t i) const {
  return std::make_unique<CsvReader>(*this, i);
}

} // namespace

Expected<std::unique_ptr<Source>> createCsv(const std::string &kind,
                                            const Value &params,
                                            const std::string &base) {
  auto src = std::make_unique<CsvSource>();
  Expected<std::vector<std::string>> files =
      expandFiles(kind, params, "files", base);
  if (!files)
    return files.status();
  src->files = files.take();

  std::string delim =
      stringParam(params, "delimiter", kind == "tsv" ? "\t" : ",");
  if (delim == "\\t")
    delim = "\t";
  if (delim.size() != 1 || delim[0] == '"' || delim[0] == '\n' ||
      delim[0] == '\r')
    return Status::error(kind +
                         ": delimiter must be one character other "
                         "than a quote or a line break, got '" +
                         delim + "'");
  src->delim = delim[0];
  src->header = boolParam(params, "header", false);

  const Value &cols = params["columns"];
  if (!cols.isList() || cols.items().empty())
    return Status::error(kind + ": parameter 'columns' must list the columns, "
                                "e.g. [{name: label, type: i64}]");
  std::vector<Field> fields;
  for (const Value &c : cols.items()) {
    CsvColumn col;
    col.name = stringParam(c, "name", "");
    if (col.name.empty())
      return Status::error(kind + ": every column needs a name");
    for (const CsvColumn &other : src->columns)
      if (other.name == col.name)
        return Status::error(kind + ": column '" + col.name +
                             "' is declared twice");
    col.typeName = stringParam(c, "type", "");
    if (col.typeName == "hex32") {
      col.hex32 = true;
      col.elem = ElemType::I64;
    } else {
      Expected<ElemType> t =
          elemTypeParam(kind, c["type"], "column '" + col.name + "'");
      if (!t)
        return t.status();
      col.elem = *t;
      col.text = !isNumeric(col.elem);
    }
    col.count = intParam(c, "count", 1);
    if (col.count < 1)
      return Status::error(kind + ": column '" + col.name +
                           "': count must be at least 1");
    for (int64_t i = 0; i < col.count; ++i)
      src->cells.push_back({col.text    ? CellTarget::Text
                            : col.hex32 ? CellTarget::Hex
                                        : CellTarget::Number,
                            col.elem,
                            static_cast<uint32_t>(src->columns.size()),
                            static_cast<uint32_t>(i)});
    std::vector<int64_t> shape;
    if (col.count != 1)
      shape.push_back(col.count);
    fields.push_back({col.name, FieldType(col.elem, shape)});
    src->columns.push_back(std::move(col));
  }
  src->setNaturalType(kind, RecordType(std::move(fields)));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
