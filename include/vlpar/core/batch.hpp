#pragma once
// The packed batch (DESIGN §4): the one contract between the data pipeline and every model. B samples back to
// back in one row of N tokens, never padded, never attending to each other:
//   input_ids            i64 [N]              every sample's tokens
//   labels               i64 [N]              HF convention: unshifted (the model shifts within each sample),
//                                             −100 = ignored
//   cu_seqlens           i32 or i64 [B + 1]   0 = c0 < c1 < … < cB = N (the tensor the kernels read; it may live
//                                             on a device)
//   host_cu_seqlens      [B + 1] i64 on the host: the same boundaries, where checks and per-sample loops run
//   positions            i64 [3, N]           MRoPE rows T, H, W (get_rope_index), or [N] 1D rotary positions;
//                                             computed once, by the data pipeline (data/mrope_positions.hpp)
//   pixel_values         f32 [Σ image patches, patch_dim] + image_grids, every image in pack order (may be empty)
//   pixel_values_videos  f32 [Σ video patches, patch_dim] + video_grids (may be empty)
// Views only. Owners: data::PackedBatch (the loader's output; PackedBatch::view()), or a caller's tensors.
// Test: tests/unit/test_batch.cpp.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "vlpar/core/macros.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// One image or video in patch units (a row of image_grid_thw / video_grid_thw): t temporal patches (frames/2),
/// h × w spatial patches per frame. h and w are multiples of the merge size.
/// The products are exact once check_vision_grid() accepted the grid (every grid of a validated Batch).
struct VisionGrid {
  int64_t t = 1;
  int64_t h = 0;
  int64_t w = 0;
  VLPAR_HD int64_t frame_patches() const { return h * w; }
  VLPAR_HD int64_t patches() const { return t * h * w; }
};

/// The most patches one image or video may have: its patches are attention tokens and cu_seqlens are i32.
inline constexpr int64_t kMaxGridPatches = int64_t{2147483647};

/// @brief Every side ≥ 1 and t·h·w ≤ kMaxGridPatches, computed without overflow (a crafted grid whose product
/// wraps is rejected, never used as a size). `what` names the grid in the message, e.g. "image_grids[3]".
Status check_vision_grid(const VisionGrid& g, std::string_view what);

/// @brief Σ patches of grids each accepted by check_vision_grid(), or an error when the sum passes
/// kMaxGridPatches (`what` names the list).
Result<int64_t> total_grid_patches(std::span<const VisionGrid> grids, std::string_view what);

struct Batch {
  TensorView input_ids;
  TensorView labels;
  TensorView cu_seqlens;
  std::span<const int64_t> host_cu_seqlens;
  TensorView positions;
  TensorView pixel_values;
  std::vector<VisionGrid> image_grids;
  TensorView pixel_values_videos;
  std::vector<VisionGrid> video_grids;

  int64_t num_tokens() const { return input_ids.numel(); }
  int64_t num_samples() const { return int64_t(host_cu_seqlens.size()) - 1; }
  /// @brief Checks every field against the table above (dtypes, shapes, boundaries strictly increasing from 0 to
  /// N, the host copy equal to cu_seqlens when that is on the host, pixel rows = Σ grid patches). The message names
  /// the field and what is wrong.
  Status validate() const;
};

}  // namespace vlpar
