#pragma once
// Packing tokenized samples into micro-batches (issue 5, item 6; DESIGN §4: the packed batch is the one contract
// between data and model, never padded) and balancing packs' vision cost across data-parallel ranks.
//
// Online best-fit from a lookahead buffer (Packer): samples enter in stream order into a buffer; once it holds
// `lookahead` samples and at least a pack's budget of tokens, a pack is built from it by plan_pack (and at the
// end of the stream the buffer drains pack by pack):
//   1. the OLDEST buffered sample goes in first (so a sample leaves within as many packs as there are samples
//      ahead of it in the buffer: no starvation, and the loader's resume state stays bounded);
//   2. then, repeatedly, the buffered sample with the MOST tokens that still fits every budget (tokens, vision
//      patches, samples per pack) goes in (best fit: it leaves the smallest gap); ties → the older sample;
//   3. when nothing fits, the pack is closed; its samples keep stream order inside the pack.
// A pure function of the buffer contents and the config, so the same input order gives the same packs.
// A sample that alone exceeds a budget is skipped (counted, warned with its key) when it is pushed: never a hang.
//
// The packed batch (PackedBatch, the model's Batch contract: examples/qwen3vl/README.md "The batch file"):
//   input_ids, labels [N]; cu_seqlens [B+1]; positions [3, N] = compute_mrope_positions (restarting per sample,
//   grid rows consumed in pack order); pixel_values [Σ image patches, patch_dim] and pixel_values_videos in pack
//   order with image_grids / video_grids; images_per_sample / videos_per_sample [B].
// Packing efficiency = real tokens / token budget, per pack and over a run (PackerStats).
//
// Data-parallel vision balancing (balance_packs): given the next K·dp packs and their vision costs
// (vision_cost: a·patches + b·Σ_segments (h·w)², one attention segment per image and per video frame), assign K
// packs to each rank minimising the largest rank cost by greedy LPT (heaviest pack first, to the least loaded rank
// that still has room; ties → lower pack index, lower rank). Deterministic; every rank gets exactly K packs.
// LPT with equal cardinalities is within 4/3 of the optimum in the classic bound; the test compares it with the
// exhaustive optimum on small cases.
// Test: tests/unit/test_data_packing.cpp (named so: examples/qwen3vl/tests/test_packing.cpp exists).
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "vlpar/core/batch.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/data/conversation.hpp"
#include "vlpar/data/mrope_positions.hpp"

namespace vlpar::data {

struct PackingConfig {
  int64_t max_tokens = 16384;  // token budget per pack (Σ sample lengths)
  int64_t max_patches = 0;     // vision-patch budget per pack (Σ t·h·w over images and videos); 0 = no limit
  int64_t max_samples = 0;     // samples per pack; 0 = no limit
  int64_t lookahead = 64;      // samples held for best fit (>= 1); the buffer also always holds a pack's worth of
                               // tokens before a pack is made, so 1 = first-fit over just enough samples
  /// @brief max_tokens >= 1, max_patches >= 0, max_samples >= 0, lookahead >= 1.
  Status validate() const;
};

/// The sizes plan_pack looks at.
struct PackItem {
  int64_t tokens = 0;
  int64_t patches = 0;
};

/// @brief Indices (ascending) of the buffer items forming the next pack (rules 1–3 of the file comment). Items
/// that alone exceed a budget must not be in the buffer. Empty buffer → empty result.
std::vector<size_t> plan_pack(std::span<const PackItem> buffer, const PackingConfig& config);

/// A packed micro-batch: several samples back to back, never attending to each other.
struct PackedBatch {
  std::vector<int64_t> input_ids;            // [N]
  std::vector<int64_t> labels;               // [N] unshifted, kIgnoreLabel (−100) = ignored
  std::vector<int64_t> cu_seqlens;           // [B+1] 0 = c0 < c1 < … < cB = N
  std::vector<int64_t> positions;            // [3, N] MRoPE rows T, H, W
  std::vector<int64_t> rope_deltas;          // [B] HF mrope_position_deltas (for generation; training ignores)
  std::vector<float> pixel_values;           // [Σ image t·h·w, patch_dim] in pack order
  std::vector<float> pixel_values_videos;    // [Σ video t·h·w, patch_dim]
  std::vector<VisionGrid> image_grids;       // [n_img] (t, h, w) patch units, pack order
  std::vector<VisionGrid> video_grids;       // [n_vid]
  std::vector<int64_t> images_per_sample;    // [B]
  std::vector<int64_t> videos_per_sample;    // [B]
  std::vector<std::string> sample_keys;      // [B] for logs and tests
  int64_t patch_dim = 0;                     // C·Tp·P·P (0 when the pack has no vision input)
  int64_t real_tokens = 0;                   // N
  int64_t token_budget = 0;                  // PackingConfig::max_tokens the pack was made under
  int64_t num_images = 0;
  int64_t num_videos = 0;
  int64_t vision_patches = 0;                // Σ t·h·w over images and videos
  int64_t num_label_tokens = 0;              // labels != −100 (before the shift)

  int64_t num_samples() const { return static_cast<int64_t>(sample_keys.size()); }
  /// The pack as the model reads it (vlpar/core/batch.hpp): views of these vectors, no copies; valid while the
  /// pack lives unchanged. Empty pixel vectors give empty views.
  Batch view() const;
  /// Sets real_tokens, num_images, num_videos, vision_patches and num_label_tokens from the vectors above (the
  /// counts every maker of a pack fills in the same way).
  void recount();
  /// real_tokens / token_budget.
  double efficiency() const;
  /// FNV-1a 64 over every field's bytes: equal batches give equal fingerprints (for determinism checks and logs).
  uint64_t fingerprint() const;
};

/// @brief Concatenates samples (in the given order) into a PackedBatch and computes the MRoPE positions.
/// Errors: no samples, an inconsistent sample (labels/ids lengths, pixel rows vs grids), patch_dim differing
/// between samples, and compute_mrope_positions' errors (named with the sample key).
Result<PackedBatch> make_packed_batch(std::span<const TokenizedSample* const> samples, const MropeDesc& desc,
                                      int64_t token_budget);

/// @brief Sample `sample` of a pack as a pack of its own (copies): its tokens, labels, positions (the pack's
/// columns: positions restart per sample), images and videos; with prefix_tokens > 0 only its first prefix_tokens
/// tokens (a generation prompt; the grids and pixels stay the sample's). rope_deltas are recomputed from the
/// positions. Errors, naming the pack's sample count: a sample outside [0, B), prefix_tokens outside [0, length],
/// a pack of several samples with vision input but no images_per_sample / videos_per_sample.
Result<PackedBatch> sample_of_pack(const PackedBatch& pack, int64_t sample, int64_t prefix_tokens = 0);

/// @brief Checks a sample before packing: ids and labels the same non-zero length, pixel values = patches ×
/// patch_dim. The message names the key.
Status validate_tokenized_sample(const TokenizedSample& sample);

struct PackerStats {
  int64_t samples_in = 0;          // samples pushed
  int64_t samples_packed = 0;      // samples emitted in packs
  int64_t skipped_too_long = 0;    // samples over max_tokens alone
  int64_t skipped_too_many_patches = 0;  // samples over max_patches alone
  int64_t packs = 0;
  int64_t real_tokens = 0;         // Σ pack tokens
  int64_t budget_tokens = 0;       // packs × max_tokens
  /// real_tokens / budget_tokens (0 before the first pack).
  double efficiency() const;
};

/// Online best-fit packer over a lookahead buffer (file comment). Not thread-safe: one packing stage.
class Packer {
 public:
  /// One buffered sample with the caller's tag (the loader's sequence number).
  struct Entry {
    uint64_t tag = 0;
    TokenizedSample sample;
  };
  enum class Admit { kBuffered, kSkippedTooLong, kSkippedTooManyPatches };

  static Result<Packer> create(PackingConfig config, MropeDesc desc);

  /// @brief Buffers a sample, or skips it (counted, warned with its key) when it alone exceeds a budget.
  /// Error (the sample is not buffered): an inconsistent sample (validate_tokenized_sample) or vision spans that
  /// disagree with its grids (compute_mrope_positions on the sample alone), named with its key.
  Result<Admit> push(TokenizedSample sample, uint64_t tag = 0);
  /// @brief Time to pop a pack: the buffer holds at least `lookahead` samples AND at least max_tokens tokens (so
  /// a pack is never closed early for want of candidates while the source still has samples).
  bool ready() const {
    return static_cast<int64_t>(buffer_.size()) >= config_.lookahead && buffered_tokens_ >= config_.max_tokens;
  }
  bool empty() const { return buffer_.empty(); }
  /// @brief Takes one pack's samples out of the buffer (plan_pack) and builds the batch. `taken_tags` (optional)
  /// receives the tags of the packed samples. Error: an empty buffer.
  Result<PackedBatch> pop(std::vector<uint64_t>* taken_tags = nullptr);

  /// The buffered samples, oldest first (their tags make the loader's resume state).
  const std::deque<Entry>& buffer() const { return buffer_; }
  const PackerStats& stats() const { return stats_; }
  void set_stats(const PackerStats& stats) { stats_ = stats; }
  const PackingConfig& config() const { return config_; }

 private:
  Packer(PackingConfig config, MropeDesc desc) : config_(config), desc_(desc) {}
  PackingConfig config_;
  MropeDesc desc_;
  std::deque<Entry> buffer_;
  int64_t buffered_tokens_ = 0;  // Σ tokens in buffer_
  PackerStats stats_;
};

/// Vision cost of a pack for data-parallel balancing: per_patch · patches + per_attention_pair · Σ (h·w)² over
/// attention segments (each image, each video frame). The default ratio is the Qwen3-VL vision tower's: per patch
/// and layer ≈ 24·Hv² FLOPs of linear layers, per attention pair ≈ 4·Hv, so b/a = 1/(6·Hv) with Hv = 1152.
struct VisionCostModel {
  double per_patch = 1.0;
  double per_attention_pair = 1.0 / (6.0 * 1152.0);
};

/// @brief The cost of the given grids under `model` (file comment).
double vision_cost(std::span<const VisionGrid> image_grids, std::span<const VisionGrid> video_grids,
                   const VisionCostModel& model = {});
/// @brief vision_cost of a packed batch's grids.
double vision_cost(const PackedBatch& batch, const VisionCostModel& model = {});

/// @brief Assigns costs.size() = K·dp_size packs to dp_size ranks, K each, by greedy LPT (file comment).
/// @return [dp_size] lists of pack indices, each ascending (stream order within a rank).
/// Errors: dp_size < 1, costs.size() not a multiple of dp_size, a negative or non-finite cost.
Result<std::vector<std::vector<int64_t>>> balance_packs(std::span<const double> costs, int64_t dp_size);

}  // namespace vlpar::data
