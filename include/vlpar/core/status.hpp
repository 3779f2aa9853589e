#pragma once
// The single error vocabulary of vlpar (STYLE §4).
//   Status / StatusCode   : what every fallible library call returns; library code never exits the process.
//   Result<T>             : a value or a Status.
//   VLPAR_CHECK(cond,...) : host invariant; returns a Status with file:line, rank@host and an fmt message.
//   VLPAR_RETURN_IF_ERROR : propagate.
//   VLPAR_CUDA_CHECK      : turn a cudaError_t into a Status (only in CUDA translation units).
// All macros can be overridden by defining them before including this header.
#include <fmt/core.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace vlpar {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // wrong shape, dtype, device, stride or config value
  kNotSupported,     // valid request this build or device cannot serve (compiled-out head_dim, no CUDA, ...)
  kOutOfMemory,
  kIoError,
  kTimeout,
  kCudaError,
  kCommError,
  kInternal,
  kNonFinite,        // a computed value that must be finite is NaN/Inf (router logits): the trainer skips the step
};

const char* status_code_name(StatusCode code);

/// @brief "rank R@host" of this process, derived from the launcher's environment (mpirun, srun, torchrun);
/// "rank 0@host" for a plain process. Pure function of the environment: no mutable global.
const std::string& process_tag();

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "InvalidArgument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

/// @brief Builds a Status whose message carries file:line and the process tag.
Status make_status(StatusCode code, const char* file, int line, std::string message);

/// @brief A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace vlpar

#ifndef VLPAR_STATUS
#define VLPAR_STATUS(code, ...) ::vlpar::make_status((code), __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
#endif

#ifndef VLPAR_CHECK
/// Returns kInvalidArgument from the enclosing function (which returns Status or Result<T>) when cond is false.
#define VLPAR_CHECK(cond, ...)                                                            \
  do {                                                                                    \
    if (!(cond)) return VLPAR_STATUS(::vlpar::StatusCode::kInvalidArgument, __VA_ARGS__); \
  } while (0)
#endif

#ifndef VLPAR_CHECK_CODE
#define VLPAR_CHECK_CODE(cond, code, ...)                     \
  do {                                                        \
    if (!(cond)) return VLPAR_STATUS((code), __VA_ARGS__);    \
  } while (0)
#endif

#ifndef VLPAR_RETURN_IF_ERROR
#define VLPAR_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::vlpar::Status vlpar_status_ = (expr);  \
    if (!vlpar_status_.ok()) return vlpar_status_; \
  } while (0)
#endif

#define VLPAR_CONCAT_INNER(a, b) a##b
#define VLPAR_CONCAT(a, b) VLPAR_CONCAT_INNER(a, b)
#ifndef VLPAR_ASSIGN_OR_RETURN
/// VLPAR_ASSIGN_OR_RETURN(auto x, make_result());
#define VLPAR_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto VLPAR_CONCAT(vlpar_result_, __LINE__) = (expr);                 \
  if (!VLPAR_CONCAT(vlpar_result_, __LINE__).ok())                     \
    return VLPAR_CONCAT(vlpar_result_, __LINE__).status();             \
  lhs = std::move(VLPAR_CONCAT(vlpar_result_, __LINE__)).value()
#endif

#if defined(__CUDACC__) || defined(VLPAR_CUDA_RUNTIME_INCLUDED)
#ifndef VLPAR_CUDA_CHECK
#define VLPAR_CUDA_CHECK(expr)                                                                         \
  do {                                                                                                 \
    cudaError_t vlpar_err_ = (expr);                                                                   \
    if (vlpar_err_ != cudaSuccess)                                                                     \
      return VLPAR_STATUS(::vlpar::StatusCode::kCudaError, "{} failed: {}", #expr,                   \
                          cudaGetErrorString(vlpar_err_));                                             \
  } while (0)
#endif
#endif

#ifndef VLPAR_DEVICE_ASSERT
#if defined(__CUDA_ARCH__)
#define VLPAR_DEVICE_ASSERT(cond)                                                        \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      printf("vlpar device assert %s failed at %s:%d\n", #cond, __FILE__, __LINE__);     \
      __trap();                                                                          \
    }                                                                                    \
  } while (0)
#else
#define VLPAR_DEVICE_ASSERT(cond) ((void)0)
#endif
#endif
