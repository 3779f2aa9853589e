#pragma once
// Qwen3-VL video frame sampling and per-temporal-patch timestamps (spec qwen3vl.md §2.2), as HF transformers
// 4.57.1 computes them in Qwen3VLVideoProcessor.sample_frames and Qwen3VLProcessor._calculate_timestamps:
//   n       = int(total_frames / video_fps · fps)            (float division, truncation toward zero)
//   n       = min(min(max(n, min_frames), max_frames), total_frames)
//   indices = round_half_even(linspace(0, total_frames − 1, n))   (numpy: i·step with step = (total−1)/(n−1),
//             the last one exactly total−1; n = 1 gives [0])
//   timestamps: indices padded to a multiple of merge_size by repeating the last, t_i = idx_i / video_fps,
//             one value per group of merge_size: (t_first + t_last) / 2, written "<{:.1f} seconds>"
// HF groups the timestamps by the *spatial* merge_size (2), not temporal_patch_size (also 2 on every published
// config); this mirrors that. The processor (image_processor.hpp, process_video) checks the two agree.
// Test: tests/unit/test_video_sampling.cpp (hand cases + HF outputs in tests/fixtures/processor/).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar::data {

/// Qwen3VLVideoProcessor class defaults (the hub video_preprocessor_config.json does not change them).
struct FrameSamplingConfig {
  double fps = 2.0;          // frames sampled per second of video
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  /// @brief fps > 0 and finite, 1 <= min_frames <= max_frames.
  Status validate() const;
};

/// @brief Indices of the frames to keep, ascending, in [0, total_frames).
/// @param total_frames frames in the decoded video (>= 1)
/// @param video_fps    the video's native frame rate (> 0)
Result<std::vector<int64_t>> sample_frame_indices(int64_t total_frames, double video_fps,
                                                  const FrameSamplingConfig& config);

/// @brief Seconds of each temporal patch: [ceil(n / merge_size)] for n = frame_indices.size() (see the file comment).
Result<std::vector<double>> temporal_patch_timestamps(std::span<const int64_t> frame_indices, double video_fps,
                                                      int64_t merge_size);

/// @brief "<{seconds:.1f} seconds>", rounded like Python's format (round-half-even on the exact binary value).
std::string timestamp_text(double seconds);

}  // namespace vlpar::data
