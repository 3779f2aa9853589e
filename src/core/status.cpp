// Status formatting and the process tag used in every error and log line.
#include "vlpar/core/status.hpp"

#include <unistd.h>

#include <cstdlib>

namespace vlpar {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kOutOfMemory: return "OutOfMemory";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kCudaError: return "CudaError";
    case StatusCode::kCommError: return "CommError";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kNonFinite: return "NonFinite";
  }
  return "Unknown";
}

namespace {
std::string compute_process_tag() {
  // Launchers export the rank under different names; the first one present wins.
  const char* rank = nullptr;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"}) {
    if ((rank = std::getenv(var)) != nullptr) break;
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
  return fmt::format("rank {}@{}", rank ? rank : "0", host);
}
}  // namespace

const std::string& process_tag() {
  static const std::string tag = compute_process_tag();  // immutable after first use
  return tag;
}

std::string Status::to_string() const {
  if (ok()) return "Ok";
  return fmt::format("{}: {}", status_code_name(code_), message_);
}

Status make_status(StatusCode code, const char* file, int line, std::string message) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  return Status(code, fmt::format("{} [{} {}:{}]", message, process_tag(), base, line));
}

}  // namespace vlpar
