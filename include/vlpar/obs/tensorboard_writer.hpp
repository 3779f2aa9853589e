#pragma once
// A TensorBoard event file writer without TensorFlow or protobuf (spec/formats-and-conventions.md §4).
// File: <log_dir>/events.out.tfevents.<unix time, 10 digits>.<host>.<pid><filename_suffix> (TensorBoard only reads
// files whose name contains "tfevents"; a ".1", ".2", ... is appended if the name is taken). Records are TFRecord
// framed (tfrecord.hpp) Event protos (event_proto.hpp): first Event{file_version "brain.Event:2"}, then, when
// resuming, Event{session_log START at resume_step + 1} so TensorBoard hides the steps of the earlier attempt that
// the resumed run redoes, then one Event per add_scalars call (every value a Summary.Value with simple_value, which
// the scalars dashboard shows). Each record is written with one fwrite and flushed (one event per logged step,
// so the cost is negligible and a crash loses nothing already logged).
// One writer per process directory (rank 0 only, or one <log_dir>/rank<r>/ per rank).
// Test: tests/unit/test_obs_tensorboard.cpp; tools/golden/check_tensorboard.py reads a file with TensorBoard's
// own EventAccumulator.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "vlpar/core/status.hpp"
#include "vlpar/obs/event_proto.hpp"
#include "vlpar/obs/metrics_line.hpp"

namespace vlpar::obs {

class TensorBoardWriter {
 public:
  struct Options {
    std::string filename_suffix;          // appended to the file name (e.g. ".rank0")
    std::optional<int64_t> resume_step;   // write the session-START purge marker at resume_step + 1
    std::optional<double> wall_time;      // wall time of the header events (default: now); for golden tests
  };

  TensorBoardWriter() = default;
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();

  /// @brief Creates `log_dir` (and parents) and a new event file in it, and writes the header events.
  static Result<TensorBoardWriter> create(const std::string& log_dir, const Options& options);
  static Result<TensorBoardWriter> create(const std::string& log_dir) { return create(log_dir, Options{}); }

  /// @brief One Event at `step` holding every scalar (values are stored as float, as TensorBoard does).
  /// wall_time defaults to now. Non-finite values are written as they are (TensorBoard shows them as NaN/Inf).
  Status add_scalars(int64_t step, std::span<const TbScalar> scalars, std::optional<double> wall_time = {});
  Status add_scalar(std::string_view tag, int64_t step, double value, std::optional<double> wall_time = {});
  /// @brief add_scalars of metrics_scalars(m) except "step" and "wall_time" (m.wall_time is the event's time);
  /// each tag is `tag_prefix` + key, e.g. "train/loss".
  Status add_metrics(const MetricsLine& m, std::string_view tag_prefix = "train/");

  const std::string& path() const { return path_; }
  bool is_open() const { return file_ != nullptr; }
  Status close();

 private:
  Status write_record(std::string_view event_bytes);
  std::FILE* file_ = nullptr;
  std::string path_;
};

/// @brief Seconds since the Unix epoch (system clock), as TensorBoard's wall_time.
double unix_time_now();

}  // namespace vlpar::obs
