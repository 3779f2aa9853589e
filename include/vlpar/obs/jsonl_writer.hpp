#pragma once
// metrics.jsonl: one JSON object per logged step, e.g.
//   {"step":12,"loss":2.345,"grad_norm":1.2,"lr":0.0003,"tokens_per_s":12345.0,...}
// with the keys of metrics_scalars (metrics_line.hpp); non-finite values are written as null. Each line is written
// with one write and flushed, so a crash loses at most the line being written.
// Resuming: open(path, resume_step) keeps only the entries with step <= resume_step (and drops a torn last line),
// rewriting the file atomically before appending, so the curve of a resumed run has no duplicated or orphaned
// steps from the attempt that died after its last checkpoint. open(path, std::nullopt) starts a fresh file.
// Test: tests/unit/test_obs_metrics.cpp.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "vlpar/core/status.hpp"
#include "vlpar/obs/metrics_line.hpp"

namespace vlpar::obs {

class JsonlWriter {
 public:
  JsonlWriter() = default;
  JsonlWriter(JsonlWriter&& other) noexcept;
  JsonlWriter& operator=(JsonlWriter&& other) noexcept;
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  ~JsonlWriter();

  /// @brief Opens `path` for appending. resume_step = nullopt: truncate (a new run). Otherwise keep the existing
  /// entries with "step" <= *resume_step; lines that are not a JSON object with an integer "step" are dropped.
  static Result<JsonlWriter> open(const std::string& path, std::optional<int64_t> resume_step);

  /// @brief Appends {"step":..., <present fields>..., <extra>...} and flushes.
  Status append(const MetricsLine& m);
  /// @brief Appends {"step": step, key: value, ...} (for records that are not a training step, e.g. evaluation).
  Status append(int64_t step, std::span<const NamedScalar> scalars);

  const std::string& path() const { return path_; }
  /// Entries removed by open() because their step was past the resume step (or unreadable).
  int64_t dropped_on_open() const { return dropped_on_open_; }
  bool is_open() const { return file_ != nullptr; }
  Status close();

 private:
  Status write_line(const std::string& line);
  std::FILE* file_ = nullptr;
  std::string path_;
  int64_t dropped_on_open_ = 0;
};

/// @brief The JSON text (one line, no newline) JsonlWriter writes for `m`.
std::string metrics_json(const MetricsLine& m);

}  // namespace vlpar::obs
