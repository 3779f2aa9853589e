#pragma once
// The packed batch of the example's programs, read from a safetensors file (format documented in README.md):
//   input_ids            I64 or I32 [N]          every sample's tokens back to back          (required)
//   cu_seqlens           I64 or I32 [B + 1]      sample boundaries; absent = one sample [0, N)
//   labels               I64 or I32 [N]          HF convention, unshifted, −100 = ignored;  absent = all −100
//   pixel_values         F32/BF16/F16 [Np, C·Tp·P·P]  the images' patches, in image order
//   image_grid_thw       I64 or I32 [n_img, 3]   (t, h, w) per image, patch units
//   pixel_values_videos  F32/BF16/F16 [Nv, C·Tp·P·P]  the videos' patches, in video order
//   video_grid_thw       I64 or I32 [n_vid, 3]
//   images_per_sample    I64 or I32 [B]          optional: how many images / videos each sample holds (lets a
//   videos_per_sample    I64 or I32 [B]          pack be split back into samples; tools/golden writes them)
// Missing modality = the tensor absent or with 0 rows. Unknown tensor names are an error (typos are common).
// Test: examples/qwen3vl/tests/test_parity.cpp reads every golden fixture through it.
#include <string>

#include "model.hpp"
#include "vlpar/data/packing.hpp"

namespace qwen3vl {

/// A Batch with the memory it views.
struct LoadedBatch {
  Tensor input_ids, labels, cu_seqlens, pixel_values, pixel_values_videos;
  std::vector<int64_t> images_per_sample, videos_per_sample;  // empty when the file does not say
  Batch batch;  // views of the tensors above plus the grids
};

/// @brief Reads and checks the batch file `path` (errors name the file and the tensor).
Result<LoadedBatch> load_batch(const std::string& path, Allocator& alloc);

/// @brief The data pipeline's packed micro-batch (vlpar/data/packing.hpp) as a LoadedBatch: ids, labels and
/// cu_seqlens widened to i64, pixels copied into f32 tensors from `alloc`, grids and per-sample counts kept.
/// Errors: pixel rows that disagree with the grids or patch_dim (a malformed pack).
Result<LoadedBatch> batch_from_packed(const vlpar::data::PackedBatch& pack, Allocator& alloc);

}  // namespace qwen3vl
