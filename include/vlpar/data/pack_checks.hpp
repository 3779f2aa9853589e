#pragma once
// The input check of a packed batch against the model that will read it (issue 18, item 6): every token id and
// label inside the model's vocabulary, and every pixel finite. Run where a pack enters a program (the trainer's
// micro-batches, qwen3vl-forward, -generate, -bench), so that a bad value is reported where it is in the input:
// the sample's key (for a batch file "<path>#<sample>"), the tensor, its row in the pack (= the row in the batch
// file) and the token's position within its sample. Without it the first op to notice is the loss, which sees the
// labels shifted by one within each sample and knows neither the tensor's name nor the file.
// Test: tests/unit/test_data_packing.cpp (PackChecks.*).
#include <cstdint>
#include <string>

#include "vlpar/core/status.hpp"
#include "vlpar/data/packing.hpp"

namespace vlpar::data {

/// What check_pack_inputs found that is not an error.
struct PackInputReport {
  int64_t nonfinite_pixels = 0;  // NaN and ±Inf values in pixel_values and pixel_values_videos
  std::string first_nonfinite;   // where the first one is: "sample '<key>': pixel_values row R, column C"
};

/// @brief Checks token ids against [0, vocab) and labels against [0, vocab) ∪ {kIgnoreLabel}, and counts
/// non-finite pixels. Errors (kInvalidArgument) name the sample key, the tensor (input_ids or labels), the row in
/// the pack and the position in the sample, e.g. "sample 'b.safetensors#1': labels row 37 (position 5 of the
/// sample) is 99999, outside [0, 32000) and not the ignore label -100". NaN/Inf pixels are not an error here: the
/// caller warns with the report, and a non-finite loss then meets the trainer's policy (skip, then abort).
/// vocab must be >= 1.
Result<PackInputReport> check_pack_inputs(const PackedBatch& pack, int64_t vocab);

}  // namespace vlpar::data
