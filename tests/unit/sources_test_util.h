//===- sources_test_util.h - Helpers shared by the source reader tests ----===//
//
// A temporary directory, file writing, parameter maps and a "read every
// shard" loop, so each sources_*_test.cpp can focus on its format.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TESTS_UNIT_SOURCES_TEST_UTIL_H
#define SLUICE_TESTS_UNIT_SOURCES_TEST_UTIL_H

#include "sluice/runtime/Source.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <zlib.h>

namespace sluice::testing {

/// A fresh directory removed at the end of the test.
class TempDir {
public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "sluice-src-XXXXXX").string();
    char *made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &rel) const {
    return path_ + "/" + rel;
  }

  /// Writes `bytes` to path()/rel, creating parent directories.
  std::string write(const std::string &rel, const std::string &bytes) const {
    std::string full = *this / rel;
    std::filesystem::create_directories(
        std::filesystem::path(full).parent_path());
    std::ofstream out(full, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << full;
    return full;
  }
  /// Writes `bytes` gzip-compressed.
  std::string writeGz(const std::string &rel, const std::string &bytes) const {
    std::string full = *this / rel;
    std::filesystem::create_directories(
        std::filesystem::path(full).parent_path());
    gzFile f = gzopen(full.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
    return full;
  }

private:
  std::string path_;
};

/// {{"files", str("*.csv")}, {"header", boolean(true)}}
inline Value
params(std::initializer_list<std::pair<std::string, Value>> entries) {
  Value v = Value::map();
  for (const auto &e : entries)
    v.set(e.first, e.second);
  return v;
}
inline Value str(std::string s) { return Value::string(std::move(s)); }
inline Value integer(int64_t i) { return Value::integer(i); }
inline Value boolean(bool b) { return Value::boolean(b); }
inline Value list(std::vector<Value> items) {
  return Value::list(std::move(items));
}

/// Everything read from a source, shard by shard in order.
struct ReadAll {
  std::vector<Record> records;
  std::vector<runtime::DataError> errors;
  /// Order of events: 'r' record, 'e' error.
  std::string events;
};

/// Reads every shard to its end, collecting records and errors.
inline ReadAll readAll(const runtime::Source &src,
                       size_t maxEvents = 1u << 24) {
  ReadAll all;
  for (size_t s = 0; s < src.numShards(); ++s) {
    std::unique_ptr<runtime::ShardReader> reader = src.open(s);
    for (size_t n = 0; n < maxEvents; ++n) {
      Record rec;
      runtime::ReadResult r = reader->next(rec);
      if (r.isEnd())
        break;
      if (r.isError()) {
        all.errors.push_back(r.error());
        all.events += 'e';
        continue;
      }
      all.records.push_back(std::move(rec));
      all.events += 'r';
    }
    // After End, a reader keeps returning End.
    Record rec;
    EXPECT_TRUE(reader->next(rec).isEnd());
  }
  return all;
}

/// Creates a source or fails the test with the error.
inline std::unique_ptr<runtime::Source>
make(const std::string &kind, const Value &p, const std::string &base,
     const RecordType &type = RecordType()) {
  Expected<std::unique_ptr<runtime::Source>> src =
      runtime::Source::create(kind, p, type, base);
  EXPECT_TRUE(src.hasValue()) << src.status().message();
  if (!src)
    return nullptr;
  return src.take();
}

/// The error message of a create() that must fail.
inline std::string createError(const std::string &kind, const Value &p,
                               const std::string &base,
                               const RecordType &type = RecordType()) {
  Expected<std::unique_ptr<runtime::Source>> src =
      runtime::Source::create(kind, p, type, base);
  EXPECT_FALSE(src.hasValue());
  return src ? std::string() : src.status().message();
}

/// Field `name` of `rec` read through the source's record type.
inline const Tensor &field(const runtime::Source &src, const Record &rec,
                           const std::string &name) {
  int i = src.recordType().indexOf(name);
  EXPECT_GE(i, 0) << name;
  return rec.fields.at(static_cast<size_t>(i < 0 ? 0 : i));
}
template <typename T>
T scalarOf(const runtime::Source &src, const Record &rec,
           const std::string &name) {
  const Tensor &t = field(src, rec, name);
  EXPECT_EQ(t.numElements(), 1) << name;
  return *t.data<T>();
}
inline std::string strOf(const runtime::Source &src, const Record &rec,
                         const std::string &name) {
  return field(src, rec, name).str();
}

/// Little-endian bytes of a trivially copyable value.
template <typename T> std::string le(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(&s[0], &v, sizeof(T));
  return s;
}

} // namespace sluice::testing

#endif // SLUICE_TESTS_UNIT_SOURCES_TEST_UTIL_H
