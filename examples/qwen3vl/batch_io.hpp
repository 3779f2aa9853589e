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
// The file is read into the data pipeline's data::PackedBatch, the one owning form of the packed batch: the MRoPE
// positions are computed here, once (the model reads them from the batch), and pack.view() is what the model takes.
// Test: examples/qwen3vl/tests/test_batch_io.cpp; test_parity.cpp reads every golden fixture through it.
#include <cstdint>
#include <string>
#include <string_view>

#include "vlpar/data/mrope_positions.hpp"
#include "vlpar/data/packing.hpp"

namespace qwen3vl {

/// @brief Reads and checks the batch file `path` (errors name the file and the tensor) and computes its MRoPE
/// positions with `desc` (Config::mrope_desc()). Pixels are widened to f32; sample keys are "<path>#<i>".
vlpar::Result<vlpar::data::PackedBatch> load_batch(const std::string& path, const vlpar::data::MropeDesc& desc);

/// @brief A pack as the model with vocabulary `vocab` may read it (data::check_pack_inputs): token ids and labels
/// outside the vocabulary are an error naming the sample (for a batch file "<path>#<i>"), the tensor and the row;
/// NaN/Inf pixels are logged as a warning with the first one's place (`where` says who read the pack), and the
/// trainer's non-finite policy then applies to the loss.
vlpar::Status check_model_inputs(const vlpar::data::PackedBatch& pack, int64_t vocab, std::string_view where);

/// @brief Sequence parallelism splits a micro-batch's N tokens evenly over the tp ranks: appends
/// (multiple − N mod multiple) mod multiple tokens to `pack` as one more sample (ids `pad_id`, labels −100, positions
/// 0, 1, … on the three MRoPE rows, no image, key "<padding>"). Being their own sample they attend only to each other
/// and carry no label; they do pass through the MoE routers (their rows count in the router statistics, as the rows
/// of a padded HF batch do without an attention mask). Returns how many tokens were appended.
int64_t pad_for_sequence_parallel(vlpar::data::PackedBatch& pack, int64_t multiple, int64_t pad_id);

}  // namespace qwen3vl
