#pragma once
// Configuration of a Qwen3-VL-style vision tower (spec qwen3vl.md §1.4) and the packed vision batch it reads:
// grids (one per image / video), attention segments (vision cu_seqlens, spec §3.5) and each patch's 2D rotary
// coordinates (spec §3.3), all in the patch order of spec §2.1 (grids back to back, frames, merge windows).
// Test: tests/unit/test_vision_encoder.cpp (config validation, cu_seqlens, coordinates).
#include <cstdint>
#include <span>
#include <vector>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/pos_embed.hpp"

namespace vlpar::nn {

using vlpar::VisionGrid;  // {t, h, w} in patch units (kernels/pos_embed.hpp)

/// Vision tower hyper-parameters; defaults are HF's Qwen3VLVisionConfig defaults (the 8B/32B/MoE towers).
struct VisionConfig {
  int64_t hidden = 1152;         // Hv
  int heads = 16;                // head_dim = Hv / heads (72)
  int64_t intermediate = 4304;   // Iv, block MLP width
  int depth = 27;                // number of blocks
  int patch = 16;                // P
  int temporal_patch = 2;        // Tp
  int merge = 2;                 // m, spatial_merge_size: m² patches per merged (LLM) token
  int in_channels = 3;           // C
  int64_t out_hidden = 3584;     // D, the text hidden size
  int64_t num_position_embeddings = 2304;  // G² (a perfect square), learned pos table [G², Hv]
  std::vector<int> deepstack_indexes = {8, 16, 24};  // 0-based blocks whose output feeds deepstack merger j
  float eps = 1e-6f;             // every vision LayerNorm (hard-coded in HF)
  float rope_theta = 10000.f;    // vision 2D rotary base (hard-coded in HF)
  // How the pos-embed interpolation rounds torch's CPU linspace (kernels/pos_embed.hpp): kFused reproduces HF
  // run on AVX2/AVX512 CPUs (every current x86 machine), kSeparate HF under ATEN_CPU_CAPABILITY=default.
  LinspaceRounding pos_embed_linspace = LinspaceRounding::kFused;
  /// Activations, their gradients and the stashes of the tower: f32 or bf16 (DESIGN §6; see TransformerConfig).
  DType activation = DType::kF32;

  /// C·Tp·P·P, the length of one pixel-patch row (1536).
  int64_t patch_dim() const { return int64_t(in_channels) * temporal_patch * patch * patch; }
  int head_dim() const { return heads > 0 ? int(hidden / heads) : 0; }
  /// G, the side of the position table.
  int64_t pos_side() const;
  /// m²·Hv, the merger width.
  int64_t merged_hidden() const { return hidden * merge * merge; }
  /// @brief The first inconsistency as one sentence ("hidden 100 is not divisible by heads 16"), or Ok.
  /// deepstack_indexes must be strictly increasing (merger j's output is then output j, as in HF).
  Status validate() const;
};

/// @brief Σ t·h·w over the grids.
int64_t vision_num_patches(std::span<const VisionGrid> grids);

/// @brief Checks every grid against the config (t, h, w ≥ 1, h and w multiples of merge), naming the grid.
Status check_vision_grids(const VisionConfig& cfg, std::span<const VisionGrid> grids);

/// @brief Attention segments: one per image and one per temporal patch of a video, each h·w patches:
/// [0, cumsum(repeat_interleave(h·w, t))], i32 [Σ t + 1].
Result<std::vector<int32_t>> vision_cu_seqlens(const VisionConfig& cfg, std::span<const VisionGrid> grids);

/// @brief Full-resolution (row, col) of every patch within its frame, in patch order, as the 2-row rotary
/// positions [2, Np] (row-major: all rows first, then all columns). Coordinates repeat for every frame.
Result<std::vector<int32_t>> vision_patch_coords(const VisionConfig& cfg, std::span<const VisionGrid> grids);

/// @brief Grids from an image_grid_thw / video_grid_thw tensor: i32 or i64 [n, 3] on the CPU.
Result<std::vector<VisionGrid>> vision_grids_from_thw(TensorView grid_thw);

/// The packed vision batch as the blocks see it, built once per encoder call.
struct VisionSeq {
  Tensor cu_seqlens;                     // i32 [S + 1], S = Σ t segments, on the device the blocks run on
  Tensor positions;                      // i32 [2, Np] rotary (row, col) per patch, on the same device
  int64_t num_patches = 0;               // Np
  std::vector<int32_t> host_cu_seqlens;  // the same boundaries on the host (FLOP counts, per-segment loops)
};

/// @brief Builds the segments and rotary positions of `grids` (checked against the config) on `device`.
Result<VisionSeq> make_vision_seq(Allocator& alloc, const VisionConfig& cfg, std::span<const VisionGrid> grids,
                                  Device device = Device::cpu());

}  // namespace vlpar::nn
