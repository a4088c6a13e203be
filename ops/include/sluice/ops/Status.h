//===- Status.h - Error values for runtime and ops code ---------*- C++ -*-===//
//
// runtime/ and ops/ report failures as values with context (file, record,
// field) instead of exceptions, so errors can cross MLIR/LLVM code, which is
// built without exception support.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_STATUS_H
#define SLUICE_OPS_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace sluice {

/// Success, or an error message a person can act on.
class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.failed_ = true;
    return s;
  }
  bool isOk() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string &message() const { return message_; }
  /// Prefixes context, e.g. "data/x.csv:17: " + message.
  Status withContext(const std::string &prefix) const {
    if (!failed_)
      return *this;
    return error(prefix + message_);
  }

private:
  bool failed_ = false;
  std::string message_;
};

/// A value or a Status error.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : value_(std::move(value)) {}
  Expected(Status error) : error_(std::move(error)) {
    assert(!error_.isOk() && "Expected constructed from an ok Status");
  }
  explicit operator bool() const { return value_.has_value(); }
  bool hasValue() const { return value_.has_value(); }
  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }
  T take() { return std::move(*value_); }
  const Status &status() const { return error_; }

private:
  std::optional<T> value_;
  Status error_;
};

} // namespace sluice

#endif // SLUICE_OPS_STATUS_H
