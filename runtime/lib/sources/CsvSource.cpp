//===- CsvSource.cpp - csv / tsv reader -----------------------------------===//
//
// RFC 4180 with the usual extensions: any one-character delimiter, CRLF or
// LF line ends, quoted fields holding delimiters, doubled quotes and
// newlines. Speed matters (tabular pipelines are parse-bound), so:
//  * The reader cuts its file into blocks of whole records (about 1 MiB;
//    a cheap pass finds the last record end, just memchr/memrchr when the
//    block has no quote) and parses each block into one buffer per numeric
//    column; a record's fields are views of its rows, so no allocation per
//    record (only string/bytes columns allocate). Given a ReadAhead, blocks
//    are parsed by tasks on other threads, several at a time, while the
//    reader hands out their records, errors and line numbers strictly in
//    file order: output is the same at any thread count. A record's view
//    keeps its block's column alive (about as many bytes as the block);
//    stages that keep records for long (shuffle, cache) store compact
//    copies (compactRecord), so what they count is what they hold.
//  * Cells are located 64 bytes at a time with vector compares, and plain
//    integers and empty floats convert without the general parser.
//
// Semantics worth knowing:
//  * Each of a column's `count` values is its own cell; a record must have
//    exactly sum(count) cells, else "too few/too many columns".
//  * Empty cell: NaN for float columns, "" for string/bytes, 0 for hex32
//    (Criteo leaves missing categoricals empty; DLRM's preprocessing reads
//    them as 0), an error for integer and bool columns.
//  * hex32: 1 to 8 hex digits, no prefix, read as an unsigned value into i64.
//  * Columns left out of `read` (sluice-push-projections sets it to the
//    columns the pipeline reads) are split and counted like the others, so
//    line structure errors stay, but never converted or checked: a
//    malformed value in them is not an error.
//  * Blank lines are skipped (and not counted as records); `header: true`
//    skips the first line. A UTF-8 byte order mark (Excel) is ignored.
//
//===----------------------------------------------------------------------===//

#include "SourceImpl.h"
#include "sluice/ops/Switches.h"

#include "sluice/ops/Registry.h"
#include "sluice/ops/Utf8.h"

#include "sluice/runtime/Memory.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice::runtime::detail {

namespace {

struct CsvColumn {
  std::string name;
  ElemType elem = ElemType::I64; // output element type
  bool hex32 = false;
  bool text = false; // bytes/string
  bool skip = false; // not in `read`: cells counted, never converted
  int64_t count = 1;
  std::string typeName; // as written, for messages
};

/// Which column and element a cell fills, and how to convert it; flat so
/// the per-cell work needs no chain of lookups.
struct CellTarget {
  enum Kind : uint8_t { Number, Hex, Text, Skip };
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
  bool replaceInvalid = false; ///< encoding: replace
  /// Blocks without quotes or carriage returns take RecordScanner's
  /// scanBlockRecord() (SLUICE_NO_FAST_CSV=1: every record takes scan()).
  bool fastParse = true;
  std::vector<CsvColumn> columns;
  std::vector<CellTarget> cells;

  size_t numShards() const override { return files.size(); }
  std::string shardName(size_t i) const override { return files[i]; }
  std::unique_ptr<ShardReader> open(size_t i) const override;
  bool readsRuns() const override {
    for (const CsvColumn &c : columns)
      if (!c.skip && c.text)
        return false;
    return true;
  }

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

enum class CellError : uint8_t { None, Parse, Hex, StrayQuote, Utf8 };

/// What RecordScanner::scan() found out about one record.
struct ScanResult {
  size_t len = 0;        // bytes, its line break included
  size_t numCells = 0;   // cells found (the record is bad unless sum(count))
  int64_t lines = 0;     // line breaks, the final one included
  size_t quoteStart = 0; // the last opening quote, from the record's start
  // The first bad cell.
  CellError err = CellError::None;
  ParseError parse = ParseError::None;
  size_t cell = 0;
  std::string_view text;
  size_t errOffset = 0; // from the record's start
};

/// Hex digit values, 0xff for other bytes. A table lookup instead of range
/// tests: digits and letters mix unpredictably in hashes, and the branches
/// cost more than the lookup.
struct HexTable {
  uint8_t v[256];
  HexTable() {
    std::memset(v, 0xff, sizeof v);
    for (int c = 0; c < 10; ++c)
      v['0' + c] = static_cast<uint8_t>(c);
    for (int c = 0; c < 6; ++c)
      v['a' + c] = v['A' + c] = static_cast<uint8_t>(10 + c);
  }
};
const HexTable &hexDigitTable() {
  static const HexTable table;
  return table;
}

bool parseHex32(std::string_view text, int64_t &out) {
  const HexTable &table = hexDigitTable();
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

/// Locates the cells of one record and converts them into the row its
/// caller points it at.
class RecordScanner {
public:
  explicit RecordScanner(const CsvSource &src)
      : src_(src), cells_(src.cells.data()), data_(src.columns.size()),
        strings_(src.columns.size()) {}

  /// Where the cells of the next record go: for each numeric column its
  /// row's bytes, for each text column its row's first string.
  std::vector<uint8_t *> &rowData() { return data_; }
  std::vector<std::string *> &rowStrings() { return strings_; }

  /// Scans the record at `b` (window [b, e); `eof`: nothing follows e),
  /// converting its cells when `store`.
  ScanStatus scan(const char *b, const char *e, bool eof, bool store,
                  ScanResult &r);

  /// The fast path for text with no quote and no carriage return (the
  /// caller checks): converts the record at `b` (the text ends at `e`,
  /// which ends the file or follows a line feed) and returns the byte after
  /// it, or null when the record is not simple and well formed (wrong cell
  /// count, a value that does not convert); scan() then does it again and
  /// says what is wrong, exactly as if this path did not exist.
  const char *scanSimple(const char *b, const char *e);

private:
  void storeCell(size_t cell, const char *b, const char *e, bool escaped,
                 size_t offset, ScanResult &r);
  static void noteError(ScanResult &r, size_t cell, CellError kind,
                        ParseError parse, std::string_view text,
                        size_t offset) {
    if (r.err != CellError::None)
      return;
    r.err = kind;
    r.parse = parse;
    r.cell = cell;
    r.text = text;
    r.errOffset = offset;
  }

  /// The first delimiter or line feed at or after p, or e.
  const char *cellEnd(const char *p, const char *e);

  const CsvSource &src_;
  const CellTarget *cells_;
  std::vector<uint8_t *> data_;
  std::vector<std::string *> strings_;
  // Separators (delimiter, line feed) of the 64 bytes from maskBase_, one
  // bit each: cells average a few bytes, so one vector compare locates the
  // ends of about ten of them.
  const char *maskBase_ = nullptr;
  uint64_t mask_ = 0;
};

#if defined(__SSE2__)
uint64_t separatorMask(const char *b, char delim) {
  const __m128i d = _mm_set1_epi8(delim), nl = _mm_set1_epi8('\n');
  uint64_t m = 0;
  for (int i = 0; i < 4; ++i) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 16 * i));
    __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, d), _mm_cmpeq_epi8(v, nl));
    m |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(hit)))
         << (16 * i);
  }
  return m;
}
#endif

const char *RecordScanner::cellEnd(const char *p, const char *const e) {
  const char delim = src_.delim;
#if defined(__SSE2__)
  while (e - p >= 64) {
    size_t off = maskBase_ ? static_cast<size_t>(p - maskBase_) : 64;
    if (off < 64) {
      if (uint64_t m = mask_ >> off)
        return p + __builtin_ctzll(m);
      p = maskBase_ + 64;
      continue;
    }
    maskBase_ = p;
    mask_ = separatorMask(p, delim);
  }
#endif
  while (p < e && *p != delim && *p != '\n')
    ++p;
  return p;
}

/// Digits only, at most 18 of them (so they fit an int64 exactly); -1 for
/// anything else, which then takes the general conversion.
inline int64_t plainDigits(const char *b, const char *e) {
  if (b == e || e - b > 18)
    return -1;
  int64_t v = 0;
  for (; b < e; ++b) {
    unsigned d = static_cast<unsigned>(*b - '0');
    if (d > 9)
      return -1;
    v = v * 10 + d;
  }
  return v;
}

void RecordScanner::storeCell(size_t cell, const char *b, const char *e,
                              bool escaped, size_t offset, ScanResult &r) {
  const CellTarget &t = cells_[cell];
  if (t.kind == CellTarget::Skip)
    return;
  if (t.kind == CellTarget::Text) {
    std::string &s = strings_[t.column][t.element];
    if (!escaped) {
      s.assign(b, static_cast<size_t>(e - b));
    } else {
      s.clear();
      for (const char *p = b; p < e; ++p) {
        s.push_back(*p);
        if (*p == '"')
          ++p; // a doubled quote stands for one
      }
    }
    // String columns are UTF-8 text (bytes columns are anything).
    if (t.elem == ElemType::String) {
      size_t bad = invalidUtf8At(s);
      if (bad != std::string::npos) {
        if (src_.replaceInvalid)
          s = replaceInvalidUtf8(s);
        else
          noteError(r, cell, CellError::Utf8, ParseError::None,
                    std::string_view(b, static_cast<size_t>(e - b)),
                    offset + bad);
      }
    }
    return;
  }
  std::string_view text(b, static_cast<size_t>(e - b));
  if (t.kind == CellTarget::Hex) {
    int64_t v;
    if (!parseHex32(text, v)) {
      noteError(r, cell, CellError::Hex, ParseError::Syntax, text, offset);
      return;
    }
    std::memcpy(data_[t.column] + 8 * t.element, &v, 8);
    return;
  }
  // The common cells of numeric tables (plain integers, and empty floats)
  // without parseNumber's trimming and dispatch; each stores exactly what
  // parseNumber would: an integer of at most 15 digits converts to double
  // exactly and from there to float with one rounding (parseNumber's own
  // fast path), and at most 18 digits are an exact int64.
  uint8_t *dst = data_[t.column];
  if (t.elem == ElemType::F32) {
    if (b == e) {
      float nan = static_cast<float>(std::numeric_limits<double>::quiet_NaN());
      std::memcpy(dst + 4 * t.element, &nan, 4);
      return;
    }
    int64_t v = e - b <= 15 ? plainDigits(b, e) : -1;
    if (v >= 0) {
      float f = static_cast<float>(static_cast<double>(v));
      std::memcpy(dst + 4 * t.element, &f, 4);
      return;
    }
  } else if (t.elem == ElemType::I64) {
    int64_t v = plainDigits(b, e);
    if (v >= 0) {
      std::memcpy(dst + 8 * t.element, &v, 8);
      return;
    }
  }
  ParseError pe = parseNumber(text, t.elem, dst, t.element);
  if (pe != ParseError::None)
    noteError(r, cell, CellError::Parse, pe, text, offset);
}

ScanStatus RecordScanner::scan(const char *const b, const char *const e,
                               const bool eof, const bool store,
                               ScanResult &r) {
  const char delim = src_.delim;
  const size_t want = src_.cells.size();
  const char *p = b;
  size_t cell = 0;
  int64_t lines = 0;
  r.err = CellError::None;
  maskBase_ = nullptr; // the caller may have moved or refilled its buffer

  while (true) {
    const char *cs, *ce;
    bool escaped = false;
    if (p < e && *p == '"') {
      r.quoteStart = static_cast<size_t>(p - b);
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
                r, cell, CellError::StrayQuote, ParseError::None,
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
      p = cellEnd(p, e);
      if (p == e && !eof)
        return ScanStatus::NeedMore;
      ce = p;
      if (p < e && ce > cs && ce[-1] == '\r')
        --ce; // CRLF
    }
    if (store && cell < want)
      storeCell(cell, cs, ce, escaped, size_t(cs - b), r);
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
  r.len = static_cast<size_t>(p - b);
  r.numCells = cell;
  r.lines = lines;
  return ScanStatus::Ok;
}

/// Separators (delimiter, line feed) of the 64 bytes at p, one bit each;
/// bytes at or after e count as none.
inline uint64_t separatorMaskUpTo(const char *p, const char *e, char delim) {
  size_t n = static_cast<size_t>(e - p);
#if defined(__SSE2__)
  if (n >= 64)
    return separatorMask(p, delim);
  char tail[64] = {};
  std::memcpy(tail, p, n);
  return separatorMask(tail, delim) & ((uint64_t(1) << n) - 1);
#else
  uint64_t m = 0;
  for (size_t i = 0; i < std::min<size_t>(n, 64); ++i)
    m |= uint64_t(p[i] == delim || p[i] == '\n') << i;
  return m;
#endif
}

const char *RecordScanner::scanSimple(const char *const b,
                                      const char *const e) {
  const char delim = src_.delim;
  const size_t want = src_.cells.size();
  const char *p = b;
  // The separator mask of the 64 bytes from `base`; refilled as the cells
  // move past it. Each cell costs a shift and a count of trailing zeros.
  const char *base = b;
  uint64_t mask = separatorMaskUpTo(b, e, delim);
  for (size_t cell = 0;; ++cell) {
    const char *q, *at = p;
    while (true) {
      if (size_t off = static_cast<size_t>(at - base); off < 64) {
        if (uint64_t m = mask >> off) {
          q = at + __builtin_ctzll(m);
          break;
        }
        at = base + 64;
      }
      if (at >= e) {
        q = e;
        break;
      }
      base = at;
      mask = separatorMaskUpTo(at, e, delim);
    }
    // The cell is [p, q).
    if (cell >= want)
      return nullptr;
    const CellTarget &t = cells_[cell];
    switch (t.kind) {
    case CellTarget::Skip:
      break;
    case CellTarget::Hex: {
      int64_t v;
      size_t n = static_cast<size_t>(q - p);
      const uint8_t *digit = hexDigitTable().v;
      const auto *u = reinterpret_cast<const unsigned char *>(p);
      if (n == 8) {
        // Criteo's ids: always 8 digits, unrolled (no loop-carried chain).
        uint32_t d0 = digit[u[0]], d1 = digit[u[1]], d2 = digit[u[2]],
                 d3 = digit[u[3]], d4 = digit[u[4]], d5 = digit[u[5]],
                 d6 = digit[u[6]], d7 = digit[u[7]];
        if ((d0 | d1 | d2 | d3 | d4 | d5 | d6 | d7) & 0xf0)
          return nullptr;
        v = static_cast<int64_t>(d0 << 28 | d1 << 24 | d2 << 20 | d3 << 16 |
                                 d4 << 12 | d5 << 8 | d6 << 4 | d7);
      } else if (n < 8) {
        uint32_t x = 0, bad = 0;
        for (size_t i = 0; i < n; ++i) {
          uint32_t d = digit[u[i]];
          bad |= d;
          x = (x << 4) | (d & 0xf);
        }
        v = static_cast<int64_t>(x);
        if (bad & 0xf0)
          return nullptr;
      } else if (!parseHex32(std::string_view(p, n), v)) {
        return nullptr;
      }
      std::memcpy(data_[t.column] + 8 * t.element, &v, 8);
      break;
    }
    case CellTarget::Number: {
      // What storeCell() stores, and also a minus sign before the digits
      // (parseNumber's own fast path: -0 is -0.0).
      uint8_t *dst = data_[t.column];
      if (t.elem == ElemType::F32) {
        if (p == q) {
          float nan =
              static_cast<float>(std::numeric_limits<double>::quiet_NaN());
          std::memcpy(dst + 4 * t.element, &nan, 4);
          break;
        }
        bool neg = *p == '-';
        int64_t v = q - p - neg <= 15 ? plainDigits(p + neg, q) : -1;
        if (v >= 0) {
          double dv = static_cast<double>(neg ? -v : v);
          if (neg && v == 0)
            dv = -0.0;
          float f = static_cast<float>(dv);
          std::memcpy(dst + 4 * t.element, &f, 4);
          break;
        }
      } else if (t.elem == ElemType::I64) {
        bool neg = p < q && *p == '-';
        int64_t v = plainDigits(p + neg, q);
        if (v >= 0) {
          v = neg ? -v : v;
          std::memcpy(dst + 8 * t.element, &v, 8);
          break;
        }
      }
      if (parseNumber(std::string_view(p, size_t(q - p)), t.elem, dst,
                      t.element) != ParseError::None)
        return nullptr;
      break;
    }
    case CellTarget::Text: {
      ScanResult r;
      storeCell(cell, p, q, /*escaped=*/false, size_t(p - b), r);
      if (r.err != CellError::None)
        return nullptr;
      break;
    }
    }
    if (q == e)
      return cell + 1 == want ? e : nullptr;
    if (*q == '\n')
      return cell + 1 == want ? q + 1 : nullptr;
    p = q + 1;
  }
}

/// The end of the last whole record in [b, e) (just past its line break),
/// or null when no record ends there; `b` starts a record. Follows scan():
/// a quote opens a quoted field only at the start of a cell, and line
/// breaks inside one do not end the record. This is the only sequential
/// pass over the text when blocks are parsed in parallel, so text without
/// quotes (the common case) takes two library scans instead.
const char *lastRecordEnd(const char *b, const char *e, char delim) {
  size_t n = static_cast<size_t>(e - b);
  if (!std::memchr(b, '"', n)) {
    const void *nl = memrchr(b, '\n', n);
    return nl ? static_cast<const char *>(nl) + 1 : nullptr;
  }
  const char *last = nullptr;
  bool cellStart = true;
  for (const char *p = b; p < e; ++p) {
    if (*p == '"' && cellStart) {
      // The closing quote is one not followed by another; a quote at e
      // may still be doubled by the next byte, so nothing after it counts.
      for (++p;; p += 2) {
        p = static_cast<const char *>(std::memchr(p, '"', size_t(e - p)));
        if (!p || p + 1 == e)
          return last;
        if (p[1] != '"')
          break;
      }
      cellStart = false;
      continue;
    }
    if (*p == '\n')
      last = p + 1;
    cellStart = *p == '\n' || *p == delim;
  }
  return last;
}

/// The length of the empty line (LF or CRLF) at p, or 0 if none starts
/// there.
size_t blankLineAt(const char *p, const char *e) {
  if (p < e && *p == '\n')
    return 1;
  if (p + 1 < e && p[0] == '\r' && p[1] == '\n')
    return 2;
  return 0;
}

/// A record of a block that becomes an error: what scan() found, with the
/// record's position relative to the block.
struct CsvIssue {
  int64_t row;   // index of the record in the block
  int64_t line;  // line the record starts on, from the block's first
  size_t offset; // the record's first byte, from the block's first
  size_t numCells;
  CellError err;
  ParseError parse;
  size_t cell;
  std::string text;
  size_t errOffset; // from the record's first byte
};

/// A run of whole records cut from a shard, parsed (by a task or by the
/// reader itself) into one buffer per column; records are views of rows.
struct CsvBlock {
  // Set by the reader when it cuts the block.
  std::string text;
  int64_t offset = 0;     // stream offset of text[0]
  uint64_t bytesRead = 0; // the input's bytesRead() once text was read
  std::string ioError;    // a read error right after text
  int64_t ioOffset = 0;
  std::vector<Tensor> columns; // numeric columns: [capacity * count]
  std::vector<std::vector<std::string>> strings; // text columns
  int64_t charged = 0; // bytes reserved in the read-ahead account

  // Set by parse().
  int64_t rows = 0;             // records, good and bad
  int64_t lines = 0;            // line breaks in text
  std::vector<CsvIssue> issues; // in row order
  // A quoted field that never closes ends the shard after `rows` records.
  std::optional<std::pair<size_t, int64_t>> unterminated; // offset, line

  /// Parses text into the column buffers.
  void parse(const CsvSource &src);

  // Hand-over between a parse task and the reader: whoever claims a
  // queued block parses it; the other side waits for Done or drops it.
  enum class State : uint8_t { Queued, Parsing, Done, Cancelled };
  /// Called once the reader has filled in the block, before a task may see
  /// it: the lock orders those writes before the task's claim() also for
  /// ThreadSanitizer, which does not see oneTBB's own synchronization.
  void publish() { std::lock_guard<std::mutex> lock(mu_); }
  bool claim() {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::Queued)
      return false;
    state_ = State::Parsing;
    return true;
  }
  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::Done;
    cv_.notify_all();
  }
  void waitDone() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return state_ == State::Done; });
  }
  /// Keeps a task that has not started from parsing; waits for one that has.
  void cancel() {
    std::unique_lock<std::mutex> lock(mu_);
    if (state_ == State::Queued)
      state_ = State::Cancelled;
    cv_.wait(lock, [&] { return state_ != State::Parsing; });
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::Queued;
};

void CsvBlock::parse(const CsvSource &src) {
  RecordScanner scanner(src);
  std::vector<uint8_t *> &data = scanner.rowData();
  std::vector<std::string *> &strs = scanner.rowStrings();
  const size_t want = src.cells.size();
  const char *const b = text.data(), *const e = b + text.size();
  const char *p = b;
  int64_t line = 0, row = 0;
  ScanResult r;
  // Text without quotes and carriage returns (most tables) takes the fast
  // path, which falls back to scan() for each record it cannot take.
  const bool simple = src.fastParse && !std::memchr(b, '"', size_t(e - b)) &&
                      !std::memchr(b, '\r', size_t(e - b));
  for (;;) {
    // Blank lines are not records.
    for (size_t n; (n = blankLineAt(p, e)) > 0; p += n)
      ++line;
    if (p == e)
      break;
    for (size_t c = 0; c < src.columns.size(); ++c) {
      const CsvColumn &col = src.columns[c];
      if (col.skip)
        continue;
      if (col.text)
        strs[c] = strings[c].data() + row * col.count;
      else
        data[c] =
            columns[c].mutableRaw() +
            row * col.count * static_cast<int64_t>(elemTypeSize(col.elem));
    }
    if (simple) {
      if (const char *next = scanner.scanSimple(p, e)) {
        line += next[-1] == '\n';
        p = next;
        ++row;
        continue;
      }
    }
    // The text ends with a whole record (or with the file), so the scan
    // never needs more.
    ScanStatus s = scanner.scan(p, e, /*eof=*/true, /*store=*/true, r);
    if (s == ScanStatus::Unterminated) {
      unterminated.emplace(size_t(p - b) + r.quoteStart, line);
      break;
    }
    if (r.numCells != want || r.err != CellError::None)
      issues.push_back({row, line, size_t(p - b), r.numCells, r.err, r.parse,
                        r.cell, std::string(r.text), r.errOffset});
    p += r.len;
    line += r.lines;
    ++row;
  }
  rows = row;
  lines = line;
}

/// Block column capacities are multiples of this many rows.
constexpr int64_t kCapacityRows = 512;

class CsvReader final : public ReaderBase {
public:
  CsvReader(const CsvSource &src, size_t shard)
      : ReaderBase(src.files[shard], src.slots()), src_(src), shard_(shard) {
    for (const CsvColumn &c : src.columns) {
      shapes_.push_back(c.count == 1 ? std::vector<int64_t>{}
                                     : std::vector<int64_t>{c.count});
      rowBytes_.push_back(static_cast<size_t>(c.count) * elemTypeSize(c.elem));
    }
  }
  ~CsvReader() override {
    for (const std::shared_ptr<CsvBlock> &b : queue_) {
      b->cancel();
      uncharge(*b);
    }
    if (cur_)
      uncharge(*cur_);
  }

  void setReadAhead(ReadAhead ra) override {
    ra_ = std::move(ra);
    if (ra_.blockBytes > 0)
      blockBytes_ = ra_.blockBytes;
  }
  ReadResult next(Record &out) override;
  int64_t nextRun(RecordRun &run, int64_t max) override;
  uint64_t bytesRead() const override { return bytesRead_; }

private:
  /// Opens the file and skips the byte order mark and the header; an
  /// error, or nothing to go on.
  std::optional<ReadResult> start();
  /// Cuts the next block from the input; null when none is left.
  std::shared_ptr<CsvBlock> cut();
  /// Cuts and hands out blocks to parse tasks up to the read-ahead limit.
  void refill();
  /// Makes the next block, parsed, the current one; false at the end.
  bool nextBlock();
  /// Lets go of the current block, which has been read to its end.
  void finishBlock();
  ReadResult emit(Record &out);
  ReadResult report(const CsvIssue &issue);
  ReadResult unterminated(int64_t at, int64_t line);
  void uncharge(CsvBlock &b) {
    if (ra_.memory && b.charged > 0)
      ra_.memory->release(b.charged);
    b.charged = 0;
  }
  std::string cellName(size_t cell) const {
    const CellTarget &t = src_.cells[cell];
    const CsvColumn &c = src_.columns[t.column];
    if (c.count == 1)
      return c.name;
    return c.name + "[" + std::to_string(t.element) + "]";
  }

  const CsvSource &src_;
  size_t shard_; ///< for the first chunk asked for ahead
  BufferedInput in_;
  ReadAhead ra_;
  size_t blockBytes_ = size_t(1) << 20;
  bool started_ = false;
  bool inputDone_ = false; // every byte of the input is in a block
  int64_t lineBase_ = 1;   // line at which cur_ (then the next block) starts
  uint64_t bytesRead_ = 0;
  std::deque<std::shared_ptr<CsvBlock>> queue_; // cut, in file order
  std::shared_ptr<CsvBlock> cur_;               // the block being emitted
  int64_t row_ = 0;                             // next row of cur_
  size_t issue_ = 0;                            // next issue of cur_
  std::vector<std::string> spare_; // text buffers of finished blocks
  HeldAllocation spareHeld_;       // their bytes, in the budget
  void noteSpare();
  std::vector<std::vector<int64_t>> shapes_; // of one row, per column
  std::vector<size_t> rowBytes_;             // per numeric column
};

std::optional<ReadResult> CsvReader::start() {
  const std::string &kind = src_.kind();
  if (!in_.open(file_, true, src_.remote(), src_.takeAhead(shard_)))
    return fail(kind + ": cannot read file", in_.error(), -1, false);
  // Blocks no larger than the input buffer the budget gave (a small budget
  // reads in smaller blocks instead of failing).
  blockBytes_ = std::min(blockBytes_, std::max<size_t>(in_.blockSize(), 4096));
  skipByteOrderMark(in_);
  if (!src_.header)
    return std::nullopt;
  // The header is skipped here rather than by a block's parse, which cannot
  // tell whether an earlier block held it.
  while (true) {
    if (!in_.ensure(2) && in_.avail() == 0)
      return in_.failed() ? std::optional(ioError(in_)) : std::nullopt;
    const char *d = in_.data();
    size_t blank = blankLineAt(d, d + in_.avail());
    if (blank == 0)
      break;
    in_.consume(blank);
    ++lineBase_;
  }
  RecordScanner scanner(src_);
  ScanResult r;
  ScanStatus s;
  while ((s = scanner.scan(in_.data(), in_.data() + in_.avail(), in_.eof(),
                           /*store=*/false, r)) == ScanStatus::NeedMore)
    if (!in_.fill() && in_.failed())
      break;
  if (in_.failed())
    return ioError(in_);
  if (s == ScanStatus::Unterminated)
    return unterminated(in_.offset() + static_cast<int64_t>(r.quoteStart),
                        lineBase_);
  in_.consume(r.len);
  lineBase_ += r.lines;
  return std::nullopt;
}

std::shared_ptr<CsvBlock> CsvReader::cut() {
  if (inputDone_)
    return nullptr;
  in_.ensure(blockBytes_);
  size_t len = 0;
  while (true) {
    const char *b = in_.data();
    size_t n = in_.avail();
    if (in_.eof() && !in_.failed()) {
      len = n;
      inputDone_ = true;
      break;
    }
    // Cut near blockBytes_, so blocks stay about that size; look further
    // (twice as far each time) only for records longer than that.
    const char *end = nullptr;
    for (size_t limit = blockBytes_; !end; limit *= 2) {
      end = lastRecordEnd(b, b + std::min(n, limit), src_.delim);
      if (limit >= n)
        break;
    }
    if (end) {
      len = static_cast<size_t>(end - b);
      break;
    }
    if (in_.failed()) {
      // The records before the read error, then the error.
      inputDone_ = true;
      break;
    }
    in_.fill();
  }
  if (len == 0 && !in_.failed())
    return nullptr;

  auto blk = std::make_shared<CsvBlock>();
  if (!spare_.empty()) {
    blk->text = std::move(spare_.back());
    spare_.pop_back();
    noteSpare();
  }
  blk->offset = in_.offset();
  // Exactly one block's room (std::string's own growth would double a
  // reused buffer that is a few bytes short, half of it never touched but
  // counted): blocks are cut at most blockBytes_ long unless a record is
  // longer, so every text buffer fits every block.
  if (blk->text.capacity() < len) {
    std::string room;
    room.reserve(std::max(len, blockBytes_));
    blk->text.swap(room);
  }
  blk->text.assign(in_.data(), len);
  in_.consume(len);
  blk->bytesRead = in_.bytesRead();
  if (inputDone_ && in_.failed()) {
    blk->ioError = in_.error();
    blk->ioOffset = in_.offset();
  }
  // Every record but the last ends with a line break. (Lines are far apart:
  // memchr finds each faster than a byte-wise count.)
  int64_t capacity = 1;
  for (const char *p = blk->text.data(), *e = p + len;
       (p = static_cast<const char *>(std::memchr(p, '\n', size_t(e - p))));
       ++p)
    ++capacity;
  // Rounded up to a multiple of kCapacityRows rows, so that the columns of
  // blocks of about the same size have exactly the same size and the buffer
  // pool recycles them (resident, counted pages) instead of every block
  // mapping fresh ones (bench/specs/autotune/selective_filter.yaml: peak
  // RSS 15 MiB lower, 28% fewer page faults).
  // SLUICE_NO_CSV_CAPACITY_ROUNDING=1 sizes them exactly.
  static const bool exact = switchedOff("SLUICE_NO_CSV_CAPACITY_ROUNDING");
  if (!exact)
    capacity = (capacity + kCapacityRows - 1) / kCapacityRows * kCapacityRows;
  blk->columns.resize(src_.columns.size());
  blk->strings.resize(src_.columns.size());
  // With read-ahead the block is counted in ra_.memory below, for as long as
  // it lives: not in the reading scope as well.
  std::optional<AllocationScope> uncounted;
  if (ra_.memory)
    uncounted.emplace(nullptr);
  int64_t bytes = static_cast<int64_t>(blk->text.capacity());
  for (size_t c = 0; c < src_.columns.size(); ++c) {
    const CsvColumn &col = src_.columns[c];
    if (col.skip)
      continue;
    if (col.text) {
      blk->strings[c].resize(static_cast<size_t>(capacity * col.count));
      bytes += capacity * col.count * static_cast<int64_t>(sizeof(std::string));
    } else {
      blk->columns[c] = Tensor::empty(col.elem, {capacity * col.count});
      bytes += static_cast<int64_t>(blk->columns[c].nbytes());
    }
  }
  if (ra_.memory) {
    ra_.memory->forceReserve(bytes);
    blk->charged = bytes;
  }
  return blk;
}

void CsvReader::refill() {
  while (queue_.size() < std::max<size_t>(1, ra_.maxInFlight) && !inputDone_) {
    // Within budget.memory, except that one block is always let through.
    // The estimate (text plus about as much of columns) is corrected to
    // the block's real size once it is cut.
    int64_t estimate = 2 * static_cast<int64_t>(blockBytes_);
    bool first = queue_.empty() && !cur_;
    if (ra_.memory && !first) {
      if (!ra_.memory->tryReserve(estimate))
        return;
      ra_.memory->release(estimate);
    }
    std::shared_ptr<CsvBlock> blk = cut();
    if (!blk)
      return;
    queue_.push_back(blk);
    blk->publish();
    ra_.spawn([blk, &src = src_] {
      // A block the reader dropped (or claimed itself) is left alone; the
      // source outlives the reader, which waits for a parse under way.
      if (!blk->claim())
        return;
      blk->parse(src);
      blk->finish();
    });
  }
}

bool CsvReader::nextBlock() {
  if (ra_.spawn) {
    refill();
    if (queue_.empty())
      return false;
    cur_ = std::move(queue_.front());
    queue_.pop_front();
    refill(); // keeps the workers busy while this block is emitted
  } else {
    cur_ = cut();
    if (!cur_)
      return false;
  }
  // A block no task has started yet is parsed right here rather than
  // waited for: the workers may be busy with later blocks or other steps.
  if (cur_->claim()) {
    cur_->parse(src_);
    cur_->finish();
  } else {
    cur_->waitDone();
  }
  row_ = 0;
  issue_ = 0;
  bytesRead_ = cur_->bytesRead;
  return true;
}

void CsvReader::finishBlock() {
  lineBase_ += cur_->lines;
  uncharge(*cur_);
  if (spare_.size() <= ra_.maxInFlight) {
    spare_.push_back(std::move(cur_->text));
    noteSpare();
  }
  cur_.reset();
}

void CsvReader::noteSpare() {
  int64_t bytes = 0;
  for (const std::string &t : spare_)
    bytes += static_cast<int64_t>(t.capacity());
  // Kept for the next blocks' text, and resident: counted (never refused:
  // the budget held them a moment ago as blocks).
  try {
    spareHeld_.resize(bytes, "the spare block buffers of " + file_);
  } catch (const AllocationRefused &) {
    spare_.clear();
    spareHeld_.resize(0, "");
  }
}

ReadResult CsvReader::unterminated(int64_t at, int64_t line) {
  return fail(src_.kind() + ": unterminated quoted field",
              "a field opened with '\"' at byte " + std::to_string(at) +
                  " has no closing quote before the end of the file",
              at, false, "", line);
}

ReadResult CsvReader::next(Record &out) {
  if (done_)
    return ReadResult::end();
  if (!started_) {
    started_ = true;
    if (std::optional<ReadResult> r = start())
      return *r;
  }
  while (true) {
    if (cur_) {
      if (row_ < cur_->rows)
        return emit(out);
      if (cur_->unterminated)
        return unterminated(cur_->offset +
                                static_cast<int64_t>(cur_->unterminated->first),
                            lineBase_ + cur_->unterminated->second);
      if (!cur_->ioError.empty())
        return fail("io: read error", cur_->ioError, cur_->ioOffset, false);
      finishBlock();
    }
    if (!nextBlock()) {
      done_ = true;
      bytesRead_ = in_.bytesRead();
      return ReadResult::end();
    }
  }
}

int64_t CsvReader::nextRun(RecordRun &run, int64_t max) {
  // Only within the current block, up to its next bad record; text columns
  // are strings per record, not rows of a buffer.
  if (done_ || !cur_ || row_ >= cur_->rows || max <= 0)
    return 0;
  const CsvBlock &b = *cur_;
  int64_t end = std::min(b.rows, row_ + max);
  if (issue_ < b.issues.size())
    end = std::min(end, b.issues[issue_].row);
  const int64_t k = end - row_;
  if (k <= 0)
    return 0;
  for (const CsvColumn &col : src_.columns)
    if (!col.skip && col.text)
      return 0;
  run.columns.resize(slots_.size());
  for (size_t c = 0, f = 0; c < src_.columns.size(); ++c) {
    const CsvColumn &col = src_.columns[c];
    if (col.skip)
      continue;
    std::vector<int64_t> shape{k};
    shape.insert(shape.end(), shapes_[c].begin(), shapes_[c].end());
    run.columns[static_cast<size_t>(slots_[f++])] =
        Tensor::viewOf(b.columns[c], static_cast<size_t>(row_) * rowBytes_[c],
                       col.elem, std::move(shape));
  }
  run.rows = k;
  run.first = record_;
  record_ += k;
  row_ += k;
  return k;
}

ReadResult CsvReader::emit(Record &out) {
  const CsvBlock &b = *cur_;
  const int64_t row = row_++;
  struct Advance { // the record is consumed whatever happens below
    int64_t &r;
    ~Advance() { ++r; }
  } advance{record_};
  if (issue_ < b.issues.size() && b.issues[issue_].row == row)
    return report(b.issues[issue_++]);

  startRecord(out);
  for (size_t c = 0, k = 0; c < src_.columns.size(); ++c) {
    const CsvColumn &col = src_.columns[c];
    if (col.skip)
      continue;
    const size_t field = k++; // natural field index: read columns only
    if (!col.text) {
      // A view of the block's column: no allocation per record.
      put(out, field,
          Tensor::viewOf(b.columns[c], static_cast<size_t>(row) * rowBytes_[c],
                         col.elem, shapes_[c]));
      continue;
    }
    auto first = cur_->strings[c].begin() + row * col.count;
    put(out, field,
        Tensor::strings(col.elem, shapes_[c],
                        std::vector<std::string>(
                            std::make_move_iterator(first),
                            std::make_move_iterator(first + col.count))));
  }
  return ReadResult::record();
}

ReadResult CsvReader::report(const CsvIssue &is) {
  const std::string &kind = src_.kind();
  const int64_t startLine = lineBase_ + is.line;
  const int64_t startOffset = cur_->offset + static_cast<int64_t>(is.offset);
  size_t want = src_.cells.size();
  if (is.numCells != want) {
    bool few = is.numCells < want;
    return fail(kind + (few ? ": too few columns" : ": too many columns"),
                "expected " + std::to_string(want) + " columns (" +
                    src_.layout() + "), found " + std::to_string(is.numCells),
                startOffset, true, "", startLine);
  }
  const CsvColumn &col = src_.columns[src_.cells[is.cell].column];
  std::string where = "column " + std::to_string(is.cell + 1) + " '" +
                      cellName(is.cell) + "': ";
  int64_t at = startOffset + static_cast<int64_t>(is.errOffset);
  switch (is.err) {
  case CellError::StrayQuote:
    return fail(kind + ": bad quoting",
                where + "text after the closing quote of a quoted field "
                        "(write a quote inside a quoted field as \"\")",
                at, true, cellName(is.cell), startLine);
  case CellError::Utf8: {
    return fail(kind + ": invalid UTF-8",
                where + "bytes that are not UTF-8 in a string column; fix the "
                        "file, read the column as bytes, or set `encoding: "
                        "replace` (U+FFFD)",
                at, true, cellName(is.cell), startLine);
  }
  case CellError::Hex:
    return fail(kind + ": bad hex32",
                where + "'" + is.text.substr(0, 40) +
                    "' is not 1 to 8 hex digits",
                at, true, cellName(is.cell), startLine);
  default: {
    std::string detail =
        where + describeParseError(is.parse, is.text, col.elem);
    if (is.parse == ParseError::Empty)
      detail += " column (only float columns may have empty cells; use "
                "f32/f64 and fill_missing, or fix the data)";
    return fail(kind + ": " + parseErrorReason(is.parse, col.elem), detail, at,
                true, cellName(is.cell), startLine);
  }
  }
}

std::unique_ptr<ShardReader> CsvSource::open(size_t i) const {
  return std::make_unique<CsvReader>(*this, i);
}

} // namespace

Expected<std::unique_ptr<Source>> createCsv(const std::string &kind,
                                            const Value &params,
                                            const std::string &base) {
  auto src = std::make_unique<CsvSource>();
  std::shared_ptr<const RemoteConfig> remote;
  Expected<std::vector<std::string>> files =
      expandFiles(kind, params, "files", base, &remote);
  if (!files)
    return files.status();
  src->setRemote(remote);
  src->files = files.take();

  // Unwritten, the delimiter is the one the op's entry defaults to (a tab
  // for tsv).
  std::string fallback = ",";
  if (const OpDef *def = Registry::instance().find(kind))
    if (const ParamSpec *p = def->findParam("delimiter");
        p && p->defaultValue && p->defaultValue->isString())
      fallback = p->defaultValue->asString();
  std::string delim = stringParam(params, "delimiter", fallback);
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
  src->replaceInvalid = stringParam(params, "encoding", "strict") == "replace";
  if (switchedOff("SLUICE_NO_FAST_CSV"))
    src->fastParse = false;

  const Value &cols = params["columns"];
  if (!cols.isList() || cols.items().empty())
    return Status::error(kind + ": parameter 'columns' must list the columns, "
                                "e.g. [{name: label, type: i64}]");
  // `read` (set by sluice-push-projections, or by hand): the columns to
  // produce; the others are split and counted but never converted.
  std::vector<std::string> read;
  bool readAll = !params["read"].isList();
  if (!readAll)
    for (const Value &r : params["read"].items())
      read.push_back(r.isString() ? r.asString() : "");
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
    col.skip =
        !readAll && std::find(read.begin(), read.end(), col.name) == read.end();
    if (col.count < 1)
      return Status::error(kind + ": column '" + col.name +
                           "': count must be at least 1");
    for (int64_t i = 0; i < col.count; ++i)
      src->cells.push_back({col.skip    ? CellTarget::Skip
                            : col.text  ? CellTarget::Text
                            : col.hex32 ? CellTarget::Hex
                                        : CellTarget::Number,
                            col.elem,
                            static_cast<uint32_t>(src->columns.size()),
                            static_cast<uint32_t>(i)});
    std::vector<int64_t> shape;
    if (col.count != 1)
      shape.push_back(col.count);
    if (!col.skip)
      fields.push_back({col.name, FieldType(col.elem, shape)});
    src->columns.push_back(std::move(col));
  }
  for (const std::string &r : read)
    if (std::none_of(src->columns.begin(), src->columns.end(),
                     [&](const CsvColumn &c) { return c.name == r; }))
      return Status::error(kind + ": 'read' names '" + r +
                           "', which is not a column");
  if (fields.empty())
    return Status::error(kind + ": 'read' must name at least one column");
  src->setNaturalType(kind, RecordType(std::move(fields)));
  return std::unique_ptr<Source>(std::move(src));
}

} // namespace sluice::runtime::detail
