// Vision tower configuration and packed vision batch helpers. See include/vlpar/nn/vision_config.hpp.
#include "vlpar/nn/vision_config.hpp"

#include <cstring>

namespace vlpar::nn {

int64_t VisionConfig::pos_side() const {
  int64_t g = 0;
  while ((g + 1) * (g + 1) <= num_position_embeddings) ++g;
  return g;
}

Status VisionConfig::validate() const {
  VLPAR_CHECK(hidden > 0 && heads > 0, "vision config: hidden {} and heads {} must be positive", hidden, heads);
  VLPAR_CHECK(hidden % heads == 0, "vision config: hidden {} is not divisible by heads {}", hidden, heads);
  VLPAR_CHECK(head_dim() % 4 == 0,
              "vision config: head_dim {} (hidden {} / heads {}) is not a multiple of 4, which 2D rotary needs "
              "(head_dim/4 frequencies per axis)", head_dim(), hidden, heads);
  VLPAR_CHECK(intermediate > 0, "vision config: intermediate {} must be positive", intermediate);
  VLPAR_CHECK(activation == DType::kF32 || activation == DType::kBF16,
              "vision config: activation dtype {} is not supported (f32 or bf16; f16 would need loss scaling)",
              dtype_name(activation));
  VLPAR_CHECK(depth >= 0, "vision config: depth {} must not be negative", depth);
  VLPAR_CHECK(patch > 0 && temporal_patch > 0 && in_channels > 0,
              "vision config: patch {}, temporal_patch {} and in_channels {} must be positive", patch, temporal_patch,
              in_channels);
  VLPAR_CHECK(merge > 0, "vision config: merge {} must be positive", merge);
  VLPAR_CHECK(out_hidden > 0, "vision config: out_hidden {} must be positive", out_hidden);
  VLPAR_CHECK(num_position_embeddings > 0 && pos_side() * pos_side() == num_position_embeddings,
              "vision config: num_position_embeddings {} is not a perfect square (the table is a G x G grid)",
              num_position_embeddings);
  VLPAR_CHECK(pos_side() <= 46340, "vision config: num_position_embeddings {} is too large for i32 table indexes",
              num_position_embeddings);
  for (size_t j = 0; j < deepstack_indexes.size(); ++j) {
    const int l = deepstack_indexes[j];
    VLPAR_CHECK(l >= 0 && l < depth, "vision config: deepstack_indexes[{}] = {} is outside the blocks [0, {})", j, l,
                depth);
    VLPAR_CHECK(j == 0 || l > deepstack_indexes[j - 1],
                "vision config: deepstack_indexes must be strictly increasing, but [{}] = {} follows {}", j, l,
                deepstack_indexes[j - 1]);
  }
  VLPAR_CHECK(eps > 0.f, "vision config: eps {} must be positive", eps);
  VLPAR_CHECK(rope_theta > 0.f, "vision config: rope_theta {} must be positive", rope_theta);
  return Status::Ok();
}

int64_t vision_num_patches(std::span<const VisionGrid> grids) {
  int64_t n = 0;
  for (const VisionGrid& g : grids) n += g.patches();
  return n;
}

Status check_vision_grids(const VisionConfig& cfg, std::span<const VisionGrid> grids) {
  VLPAR_CHECK(cfg.merge > 0, "vision grids: merge {} must be positive", cfg.merge);
  return vlpar::check_vision_grids("vision grids", grids, cfg.merge);
}

Result<std::vector<int32_t>> vision_cu_seqlens(const VisionConfig& cfg, std::span<const VisionGrid> grids) {
  VLPAR_RETURN_IF_ERROR(check_vision_grids(cfg, grids));
  std::vector<int32_t> cu{0};
  for (const VisionGrid& g : grids)
    for (int64_t f = 0; f < g.t; ++f) cu.push_back(cu.back() + int32_t(g.frame_patches()));
  return cu;
}

Result<std::vector<int32_t>> vision_patch_coords(const VisionConfig& cfg, std::span<const VisionGrid> grids) {
  VLPAR_RETURN_IF_ERROR(check_vision_grids(cfg, grids));
  const int64_t np = vision_num_patches(grids);
  std::vector<int32_t> pos(size_t(2 * np));
  int64_t p = 0;
  for (const VisionGrid& g : grids)
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t q = 0; q < g.frame_patches(); ++q, ++p) {
        int64_t r = 0, c = 0;
        merge_window_coords(q, g.w, cfg.merge, r, c);
        pos[size_t(p)] = int32_t(r);
        pos[size_t(np + p)] = int32_t(c);
      }
  return pos;
}

Result<std::vector<VisionGrid>> vision_grids_from_thw(TensorView thw) {
  VLPAR_CHECK(thw.ndim() == 2 && thw.size(1) == 3, "vision grids: grid_thw must be [n, 3], got {}", thw.to_string());
  VLPAR_CHECK(thw.dtype == DType::kI32 || thw.dtype == DType::kI64, "vision grids: grid_thw must be i32 or i64, got {}",
              thw.to_string());
  VLPAR_CHECK(thw.device.is_cpu(), "vision grids: grid_thw must be on the CPU, got {}", thw.to_string());
  std::vector<VisionGrid> grids(size_t(thw.size(0)));
  for (int64_t i = 0; i < thw.size(0); ++i) {
    int64_t v[3];
    for (int k = 0; k < 3; ++k) {
      const int64_t at = i * thw.stride(0) + k * thw.stride(1);
      v[k] = thw.dtype == DType::kI32 ? int64_t(thw.ptr<int32_t>()[at]) : thw.ptr<int64_t>()[at];
    }
    grids[size_t(i)] = VisionGrid{v[0], v[1], v[2]};
  }
  return grids;
}

Result<VisionSeq> make_vision_seq(Allocator& alloc, const VisionConfig& cfg, std::span<const VisionGrid> grids,
                                  Device device) {
  VisionSeq seq;
  VLPAR_ASSIGN_OR_RETURN(seq.host_cu_seqlens, vision_cu_seqlens(cfg, grids));
  VLPAR_ASSIGN_OR_RETURN(std::vector<int32_t> pos, vision_patch_coords(cfg, grids));
  seq.num_patches = vision_num_patches(grids);
  const int64_t segments = int64_t(seq.host_cu_seqlens.size());
  VLPAR_ASSIGN_OR_RETURN(seq.cu_seqlens, Tensor::empty(alloc, {segments}, DType::kI32, device));
  VLPAR_ASSIGN_OR_RETURN(seq.positions, Tensor::empty(alloc, {2, seq.num_patches}, DType::kI32, device));
  VLPAR_RETURN_IF_ERROR(copy_(seq.cu_seqlens, TensorView(seq.host_cu_seqlens.data(), DType::kI32, {segments})));
  VLPAR_RETURN_IF_ERROR(copy_(seq.positions, TensorView(pos.data(), DType::kI32, {2, seq.num_patches})));
  return seq;
}

}  // namespace vlpar::nn
