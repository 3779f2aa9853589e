#pragma once
// The 3-row (T, H, W) MRoPE position ids of a packed batch (spec qwen3vl.md §4.5): HF transformers 4.57.1
// Qwen3VLModel.get_rope_index, applied to each sample of the pack on its own (positions restart at 0 per sample)
// while image and video grid rows are consumed in order across the whole pack, as HF's batch-global counters do.
//
// Per sample, walking its tokens with `next` = 1 + the largest position given so far (0 at the start):
//   text token (everything outside a vision span, <|vision_start|> and <|vision_end|> included):
//     T = H = W = next, next += 1
//   vision span = <|vision_start|> followed by a run of n pads of one kind, taking the next grid row of that kind
//   (t, h, w) (patch units; every video row is first split into t rows (1, h, w), one per frame, since Qwen3-VL
//   puts each frame in its own span behind a timestamp), with merged sizes (t, h/m, w/m) and n = t·(h/m)·(w/m):
//     pad k = (ti, i, j) in raster order: T = next + ti, H = next + i, W = next + j;
//     then next += max(t, h/m, w/m)
//   rope_delta[b] = (largest position of sample b) + 1 − (length of sample b)   (HF mrope_position_deltas)
// Errors (Status naming the sample, the pack index and the grid row): a pad run whose length is not the grid's
// token count, a pad token outside any span, more spans than grid rows of that kind, grid rows left over, a grid
// with t, h or w < 1 or h, w not multiples of the merge size, malformed cu_seqlens, out spans of the wrong size.
// HF differences by design: HF ignores all of these defects (it mis-positions or raises later), and with no grid
// rows at all it returns arange even if pads are present, where this returns the "more spans" error.
// Test: tests/unit/test_mrope_positions.cpp (hand cases + HF get_rope_index outputs in
// tests/fixtures/mrope/hf_get_rope_index.txt, made by tests/fixtures/mrope/make_fixture.py).
#include <cstdint>
#include <span>
#include <vector>

#include "vlpar/core/batch.hpp"  // VisionGrid: one row of image_grid_thw / video_grid_thw
#include "vlpar/core/status.hpp"

namespace vlpar::data {

/// The token ids and merge size get_rope_index reads from the model config.
struct MropeDesc {
  int64_t image_token_id = 151655;         // <|image_pad|>
  int64_t video_token_id = 151656;         // <|video_pad|>
  int64_t vision_start_token_id = 151652;  // <|vision_start|>
  int64_t spatial_merge_size = 2;          // m: a grid (t, h, w) gives t·(h/m)·(w/m) pad tokens
};

/// Positions of a whole pack.
struct MropePositions {
  int64_t num_tokens = 0;            // N
  std::vector<int64_t> positions;    // [3, N] row-major: row 0 = T, row 1 = H, row 2 = W
  std::vector<int64_t> rope_deltas;  // [B]
  int64_t at(int axis, int64_t i) const { return positions[static_cast<size_t>(axis * num_tokens + i)]; }
};

/// @brief Writes the [3, N] positions and [B] rope deltas of a packed batch (see the file comment).
/// @param positions   [3, N] written (row-major, rows T, H, W)
/// @param rope_deltas [B] written
/// @param input_ids   [N] token ids of all samples back to back
/// @param cu_seqlens  [B+1] sample boundaries: 0 = cu[0] < cu[1] < ... < cu[B] = N (no empty sample)
/// @param image_grids one row per image, in pack order (patch units)
/// @param video_grids one row per video, in pack order (patch units; split into frames here)
Status compute_mrope_positions(std::span<int64_t> positions, std::span<int64_t> rope_deltas,
                               std::span<const int64_t> input_ids, std::span<const int64_t> cu_seqlens,
                               std::span<const VisionGrid> image_grids, std::span<const VisionGrid> video_grids,
                               const MropeDesc& desc);
/// @brief The same with i32 cu_seqlens (the attention kernels' type).
Status compute_mrope_positions(std::span<int64_t> positions, std::span<int64_t> rope_deltas,
                               std::span<const int64_t> input_ids, std::span<const int32_t> cu_seqlens,
                               std::span<const VisionGrid> image_grids, std::span<const VisionGrid> video_grids,
                               const MropeDesc& desc);

/// @brief compute_mrope_positions into freshly allocated vectors.
Result<MropePositions> mrope_positions(std::span<const int64_t> input_ids, std::span<const int64_t> cu_seqlens,
                                       std::span<const VisionGrid> image_grids,
                                       std::span<const VisionGrid> video_grids, const MropeDesc& desc);

}  // namespace vlpar::data
