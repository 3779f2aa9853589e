// Qwen3-VL frame sampling and temporal-patch timestamps. See include/vlpar/data/video_sampling.hpp.
#include "vlpar/data/video_sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace vlpar::data {

Status FrameSamplingConfig::validate() const {
  VLPAR_CHECK(std::isfinite(fps) && fps > 0, "FrameSamplingConfig: fps must be positive and finite, got {}", fps);
  VLPAR_CHECK(min_frames >= 1 && min_frames <= max_frames,
              "FrameSamplingConfig: need 1 <= min_frames <= max_frames, got min_frames {} and max_frames {}",
              min_frames, max_frames);
  return Status::Ok();
}

Result<std::vector<int64_t>> sample_frame_indices(int64_t total_frames, double video_fps,
                                                  const FrameSamplingConfig& config) {
  VLPAR_RETURN_IF_ERROR(config.validate());
  VLPAR_CHECK(total_frames >= 1, "sample_frame_indices: the video has {} frames, need at least 1", total_frames);
  VLPAR_CHECK(std::isfinite(video_fps) && video_fps > 0,
              "sample_frame_indices: video_fps must be positive and finite, got {}", video_fps);
  // HF: int(total_num_frames / metadata.fps * fps), then clamped.
  const double wanted = static_cast<double>(total_frames) / video_fps * config.fps;
  VLPAR_CHECK(wanted < 9.0e15, "sample_frame_indices: {} frames at {} fps asks for {} samples", total_frames,
              video_fps, wanted);
  int64_t n = static_cast<int64_t>(wanted);  // truncation toward zero, like Python int()
  n = std::min(std::min(std::max(n, config.min_frames), config.max_frames), total_frames);

  // numpy.linspace(0, total − 1, n): y_i = i·step (step = delta/(n−1)), y_{n−1} = stop; then .round() (half to
  // even, the default FE_TONEAREST mode of nearbyint).
  std::vector<int64_t> indices(static_cast<size_t>(n));
  if (n == 1) {
    indices[0] = 0;
    return indices;
  }
  const double stop = static_cast<double>(total_frames - 1);
  const double step = stop / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) {
    const double y = i == n - 1 ? stop : static_cast<double>(i) * step;
    indices[static_cast<size_t>(i)] = static_cast<int64_t>(std::nearbyint(y));
  }
  return indices;
}

Result<std::vector<double>> temporal_patch_timestamps(std::span<const int64_t> frame_indices, double video_fps,
                                                      int64_t merge_size) {
  VLPAR_CHECK(!frame_indices.empty(), "temporal_patch_timestamps: no frame indices");
  VLPAR_CHECK(merge_size >= 1, "temporal_patch_timestamps: merge_size must be at least 1, got {}", merge_size);
  VLPAR_CHECK(std::isfinite(video_fps) && video_fps > 0,
              "temporal_patch_timestamps: video_fps must be positive and finite, got {}", video_fps);
  const int64_t n = static_cast<int64_t>(frame_indices.size());
  const int64_t groups = (n + merge_size - 1) / merge_size;
  // Padding repeats the last index; t = idx / fps; one value per group: (first + last) / 2.
  auto seconds = [&](int64_t i) {
    return static_cast<double>(frame_indices[static_cast<size_t>(std::min(i, n - 1))]) / video_fps;
  };
  std::vector<double> out(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g)
    out[static_cast<size_t>(g)] = (seconds(g * merge_size) + seconds(g * merge_size + merge_size - 1)) / 2;
  return out;
}

std::string timestamp_text(double seconds) {
  // glibc's printf rounds the exact binary value half-to-even like Python's format(x, ".1f").
  char buf[64];
  std::snprintf(buf, sizeof(buf), "<%.1f seconds>", seconds);
  return buf;
}

}  // namespace vlpar::data
