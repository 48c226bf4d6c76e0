// Status: the result of a setup, configuration or control operation.
//
// Setup paths return a Status whose message names the bad value and says how
// to fix it. Hot paths never use Status (they return small enums and bump
// counters). Thread safety: a Status is a value; copies are independent.
#pragma once

#include <string>
#include <utility>

namespace switchml {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed a bad value
  kFailedPrecondition,  // the object is in the wrong state for this call
  kResourceExhausted,   // a fixed-size resource (pool, job table) is full
  kAlreadyExists,       // e.g. the same rank registered twice
  kNotFound,            // e.g. unknown job
  kDeadlineExceeded,    // timed out waiting for a late rank, or the switch stopped answering
  kDataLoss,            // the inputs cannot be reduced faithfully (NaN/Inf)
  kAborted,             // the job was cancelled or failed elsewhere
  kInternal,            // a bug in switchml
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok()
  const T& value() const& { return value_; }
  T& value() & { return value_; }
  T&& value() && { return std::move(value_); }

 private:
  Status status_;
  T value_{};
};

}  // namespace switchml
