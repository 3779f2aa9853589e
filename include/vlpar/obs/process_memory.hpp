#pragma once
// The process's resident memory from /proc/self/status (Linux): VmRSS (current) and VmHWM (peak since start).
// On CPU this is what "memory current/peak" in the metrics line reports next to the Allocator's tensor bytes
// (which leave out the code, the thread stacks, the data pipeline's buffers and the allocator's own overhead).
// Test: tests/unit/test_obs_metrics.cpp.
#include <cstdint>
#include <string_view>

#include "vlpar/core/status.hpp"

namespace vlpar::obs {

struct ProcessMemory {
  int64_t rss_bytes = 0;       // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM
};

/// @brief Reads /proc/self/status; kNotSupported where it does not exist.
Result<ProcessMemory> read_process_memory();

/// @brief Parses the text of a /proc/<pid>/status file (values in kB).
Result<ProcessMemory> parse_proc_status(std::string_view text);

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace vlpar::obs
