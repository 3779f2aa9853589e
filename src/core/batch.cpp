// The packed batch's checks. See include/vlpar/core/batch.hpp.
#include "vlpar/core/batch.hpp"

#include <fmt/core.h>

#include "vlpar/core/checked.hpp"

namespace vlpar {

Status check_vision_grid(const VisionGrid& g, std::string_view what) {
  VLPAR_CHECK(g.t >= 1 && g.h >= 1 && g.w >= 1, "{} is ({}, {}, {}): every side must be >= 1", what, g.t, g.h, g.w);
  const std::optional<int64_t> hw = checked_mul(g.h, g.w);
  const std::optional<int64_t> thw = hw ? checked_mul(g.t, *hw) : std::nullopt;
  VLPAR_CHECK(thw && *thw <= kMaxGridPatches, "{} is ({}, {}, {}): t·h·w is out of range (more than {} patches)",
              what, g.t, g.h, g.w, kMaxGridPatches);
  return Status::Ok();
}

Result<int64_t> total_grid_patches(std::span<const VisionGrid> grids, std::string_view what) {
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    VLPAR_RETURN_IF_ERROR(check_vision_grid(grids[i], fmt::format("{}[{}]", what, i)));
    const std::optional<int64_t> sum = checked_add(total, grids[i].patches());
    VLPAR_CHECK(sum && *sum <= kMaxGridPatches, "{}: the {} grids give more than {} patches in all", what,
                grids.size(), kMaxGridPatches);
    total = *sum;
  }
  return total;
}

namespace {

bool is_index(const TensorView& t) { return t.dtype == DType::kI32 || t.dtype == DType::kI64; }

Status check_pixels(const char* name, const TensorView& pixels, const char* grids_name,
                    const std::vector<VisionGrid>& grids) {
  VLPAR_ASSIGN_OR_RETURN(const int64_t patches, total_grid_patches(grids, fmt::format("batch: {}", grids_name)));
  if (grids.empty() && pixels.empty()) return Status::Ok();
  VLPAR_CHECK(pixels.dtype == DType::kF32 && pixels.ndim() == 2 && pixels.is_contiguous(),
              "batch: {} must be a contiguous f32 [patches, patch_dim] tensor, got {}", name, pixels.to_string());
  VLPAR_CHECK(pixels.size(0) == patches, "batch: {} has {} rows but its {} grids give {} patches", name,
              pixels.size(0), grids.size(), patches);
  return Status::Ok();
}

}  // namespace

Status Batch::validate() const {
  VLPAR_CHECK(input_ids.dtype == DType::kI64 && input_ids.ndim() == 1 && input_ids.is_contiguous() &&
                  input_ids.numel() > 0,
              "batch: input_ids must be a non-empty contiguous i64 [N] tensor, got {}", input_ids.to_string());
  const int64_t N = input_ids.numel();
  VLPAR_CHECK(labels.dtype == DType::kI64 && labels.ndim() == 1 && labels.numel() == N && labels.is_contiguous(),
              "batch: labels must be contiguous i64 [{}] like input_ids, got {}", N, labels.to_string());
  const int64_t B = num_samples();
  VLPAR_CHECK(B >= 1, "batch: host_cu_seqlens must hold B + 1 >= 2 boundaries, got {}", host_cu_seqlens.size());
  VLPAR_CHECK(is_index(cu_seqlens) && cu_seqlens.ndim() == 1 && cu_seqlens.numel() == B + 1 &&
                  cu_seqlens.is_contiguous(),
              "batch: cu_seqlens must be contiguous i32/i64 [{}] (the host copy's length), got {}", B + 1,
              cu_seqlens.to_string());
  for (int64_t i = 0; i <= B; ++i) {
    const int64_t c = host_cu_seqlens[size_t(i)];
    VLPAR_CHECK(i == 0 ? c == 0 : c > host_cu_seqlens[size_t(i - 1)],
                "batch: cu_seqlens must start at 0 and increase strictly, got {} at index {}", c, i);
    VLPAR_CHECK(!cu_seqlens.device.is_cpu() || index_at(cu_seqlens, i) == c,
                "batch: cu_seqlens[{}] = {} but its host copy says {}", i, index_at(cu_seqlens, i), c);
  }
  VLPAR_CHECK(host_cu_seqlens.back() == N, "batch: cu_seqlens ends at {} but input_ids has {} tokens",
              host_cu_seqlens.back(), N);
  const bool mrope = positions.ndim() == 2 && positions.size(0) == 3 && positions.size(1) == N;
  VLPAR_CHECK(positions.dtype == DType::kI64 && positions.is_contiguous() &&
                  (mrope || (positions.ndim() == 1 && positions.numel() == N)),
              "batch: positions must be contiguous i64 [3, {}] (MRoPE) or [{}], got {}", N, N, positions.to_string());
  VLPAR_RETURN_IF_ERROR(check_pixels("pixel_values", pixel_values, "image_grids", image_grids));
  return check_pixels("pixel_values_videos", pixel_values_videos, "video_grids", video_grids);
}

}  // namespace vlpar
