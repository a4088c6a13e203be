//===- sources_test_util.h - Helpers shared by the source reader tests ----===//
//
// Parameter maps and a "read every shard" loop (and, from test_util.h, a
// temporary directory), so each sources_*_test.cpp can focus on its format.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_TESTS_UNIT_SOURCES_TEST_UTIL_H
#define SLUICE_TESTS_UNIT_SOURCES_TEST_UTIL_H

#include "test_util.h"

#include "sluice/runtime/Source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace sluice::testing {

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
