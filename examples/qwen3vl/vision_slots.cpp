// The vision tower over several data-parallel batches. See vision_slots.hpp.
#include "vision_slots.hpp"

#include <cstring>

#include "vlpar/nn/expert_dispatch.hpp"  // agree_on_outcome

namespace qwen3vl {

using vlpar::DType;
using vlpar::Shape;
using vlpar::Status;
using vlpar::Tensor;
using vlpar::TensorView;

namespace {

/// Rows [begin, end) of a contiguous [R, D] view.
TensorView rows(TensorView t, int64_t begin, int64_t end) { return t.slice(0, begin, end); }

}  // namespace

vlpar::Result<SharedImages> share_images(const vlpar::Context& ctx, const VisionSlots& s, TensorView pixels,
                                         const std::vector<vlpar::VisionGrid>& grids, int64_t patch_dim,
                                         int64_t merge) {
  VLPAR_CHECK(s.active() && s.group->size() % s.tp == 0, "share_images: the vision tp group ({} ranks) is not a "
              "multiple of tp = {} wider than it", s.group ? s.group->size() : 0, s.tp);
  const int64_t P = pixels.numel() == 0 ? 0 : pixels.size(0);
  // Checked before the group's first collective, and agreed on, so that no rank waits for one that failed.
  const Status pixels_ok = [&]() -> Status {
    VLPAR_CHECK(P == 0 || (pixels.ndim() == 2 && pixels.size(1) == patch_dim && pixels.is_contiguous() &&
                           pixels.dtype == DType::kF32 && pixels.device.is_cpu()),
                "share_images: pixel rows must be contiguous host f32 [P, {}], got {}", patch_dim, pixels.to_string());
    return Status::Ok();
  }();
  VLPAR_RETURN_IF_ERROR(vlpar::nn::agree_on_outcome(s.group, pixels_ok, "vision slots: rank",
                                                    "could not share their images"));
  // Every rank's (grids, pixel rows); slot s's are its first rank's.
  const int n = s.group->size(), m = s.slots();
  std::vector<int64_t> mine = {int64_t(grids.size()), P}, all(size_t(2 * n));
  VLPAR_RETURN_IF_ERROR(s.group->all_gather(TensorView(all.data(), DType::kI64, Shape{2 * n}),
                                            TensorView(mine.data(), DType::kI64, Shape{2})));
  int64_t total_rows = 0;
  for (int k = 0; k < m; ++k) total_rows += all[size_t(2 * k * s.tp + 1)];
  SharedImages out;
  VLPAR_ASSIGN_OR_RETURN(out.pixels, Tensor::empty(*ctx.allocator, Shape{total_rows, patch_dim}, DType::kF32));
  out.tokens.assign(size_t(m) + 1, 0);
  int64_t at = 0;
  for (int k = 0; k < m; ++k) {
    const int root = k * s.tp;
    const int64_t G = all[size_t(2 * root)], Pk = all[size_t(2 * root + 1)];
    std::vector<int64_t> g(size_t(3 * G));
    const bool mine_to_send = s.group->rank() == root;  // (a slot's other ranks hold the same; only the root sends)
    if (mine_to_send)
      for (int64_t i = 0; i < G; ++i) {
        g[size_t(3 * i)] = grids[size_t(i)].t, g[size_t(3 * i + 1)] = grids[size_t(i)].h;
        g[size_t(3 * i + 2)] = grids[size_t(i)].w;
      }
    if (G > 0) VLPAR_RETURN_IF_ERROR(s.group->broadcast(TensorView(g.data(), DType::kI64, Shape{3 * G}), root));
    int64_t merged = 0;
    for (int64_t i = 0; i < G; ++i) {
      const vlpar::VisionGrid v{g[size_t(3 * i)], g[size_t(3 * i + 1)], g[size_t(3 * i + 2)]};
      out.grids.push_back(v);
      merged += v.patches() / (merge * merge);
    }
    out.tokens[size_t(k) + 1] = out.tokens[size_t(k)] + merged;
    if (Pk == 0) continue;
    const TensorView dst = rows(out.pixels.view(), at, at + Pk);
    if (mine_to_send) std::memcpy(dst.data, pixels.data, size_t(pixels.nbytes()));
    VLPAR_RETURN_IF_ERROR(s.group->broadcast(dst, root));
    at += Pk;
  }
  return out;
}

Status share_rows(const VisionSlots& s, const std::vector<int64_t>& tokens, TensorView all, TensorView mine) {
  const int m = s.slots();
  VLPAR_CHECK(int64_t(tokens.size()) == m + 1 && all.ndim() == 2 && all.size(0) == tokens.back() &&
                  all.is_contiguous() && mine.is_contiguous() && mine.ndim() == 2 && all.device.is_cpu() &&
                  mine.device.is_cpu() &&
                  mine.size(0) == tokens[size_t(s.slot()) + 1] - tokens[size_t(s.slot())] &&
                  mine.size(1) == all.size(1) && mine.dtype == all.dtype,
              "share_rows: [{}, D] rows of every slot from this slot's {} and {} slot bounds", all.size(0),
              mine.to_string(), tokens.size());
  for (int k = 0; k < m; ++k) {
    const TensorView dst = rows(all, tokens[size_t(k)], tokens[size_t(k) + 1]);
    if (dst.numel() == 0) continue;
    if (s.group->rank() == k * s.tp) std::memcpy(dst.data, mine.data, size_t(mine.nbytes()));
    VLPAR_RETURN_IF_ERROR(s.group->broadcast(dst, k * s.tp));
  }
  return Status::Ok();
}

}  // namespace qwen3vl
