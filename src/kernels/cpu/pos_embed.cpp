// CPU bilinear position-embedding interpolation (Qwen3-VL vision, spec §3.2), forward and backward.
// Forward: each thread computes whole output rows of frame 0 of a grid; the other frames copy them.
// Backward: threads own column ranges of dtable and walk every patch in the fixed patch order, so each
// element's accumulation order is independent of the thread count (bitwise reproducible, no atomics).
// The computation only: src/kernels/ops/pos_embed.cpp checks the arguments. Test: tests/unit/test_pos_embed.cpp
#include "vlpar/kernels/pos_embed.hpp"

#include <cstring>
#include <vector>


#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

/// Corners of every frame position of every grid, in patch order (frame 0 of each grid only).
std::vector<PosEmbedCorners> frame_corners(std::span<const VisionGrid> grids, const PosEmbedDesc& d) {
  std::vector<PosEmbedCorners> out;
  std::vector<PosEmbedAxis> rows, cols;
  for (const VisionGrid& g : grids) {
    rows.resize(size_t(g.h));
    cols.resize(size_t(g.w));
    for (int64_t i = 0; i < g.h; ++i) rows[size_t(i)] = pos_embed_axis(i, g.h, d.side, d.linspace);
    for (int64_t i = 0; i < g.w; ++i) cols[size_t(i)] = pos_embed_axis(i, g.w, d.side, d.linspace);
    for (int64_t q = 0; q < g.frame_patches(); ++q) {
      int64_t r = 0, c = 0;
      merge_window_coords(q, g.w, d.merge, r, c);
      out.push_back(pos_embed_corners(rows[size_t(r)], cols[size_t(c)], d.side));
    }
  }
  return out;
}

}  // namespace

namespace {

// T: the table's dtype, P: the output's (each f32, bf16 or f16). The products and sums are f32 in HF's order; a
// 16-bit table is widened exactly and a 16-bit output rounded once (HF's bf16 path would round the weights and each
// step to bf16: vlpar keeps the f32 arithmetic for every storage dtype).
template <class T, class P>
void interpolate(const Context& ctx, const T* table, P* out, int64_t hv, std::span<const VisionGrid> grids,
                 const std::vector<PosEmbedCorners>& corners) {
  int64_t row0 = 0;    // first output row of the grid
  size_t corner0 = 0;  // first corner entry of the grid
  for (const VisionGrid& g : grids) {
    const int64_t hw = g.frame_patches();
    parallel_for(ctx, hw, 8 * hv, [&](int64_t begin, int64_t end) {
      for (int64_t q = begin; q < end; ++q) {
        const PosEmbedCorners& k = corners[corner0 + size_t(q)];
        const T* t0 = table + int64_t(k.index[0]) * hv;
        const T* t1 = table + int64_t(k.index[1]) * hv;
        const T* t2 = table + int64_t(k.index[2]) * hv;
        const T* t3 = table + int64_t(k.index[3]) * hv;
        P* y = out + (row0 + q) * hv;
        for (int64_t c = 0; c < hv; ++c) {
          // HF order: four products, then ((p0 + p1) + p2) + p3, every step rounded to fp32.
          const float v = ((f32_mul(k.weight[0], to_float(t0[c])) + f32_mul(k.weight[1], to_float(t1[c]))) +
                           f32_mul(k.weight[2], to_float(t2[c]))) +
                          f32_mul(k.weight[3], to_float(t3[c]));
          y[c] = from_float<P>(v);
        }
      }
    });
    // Every frame of a grid has the same embedding (HF: pos_embed.repeat(t, 1)).
    for (int64_t f = 1; f < g.t; ++f)
      std::memcpy(out + (row0 + f * hw) * hv, out + row0 * hv, size_t(hw * hv) * sizeof(P));
    row0 += g.patches();
    corner0 += size_t(hw);
  }
}

template <class P>
void scatter_grads(const Context& ctx, float* dT, const P* dy, int64_t hv, std::span<const VisionGrid> grids,
                   const std::vector<PosEmbedCorners>& corners) {
  parallel_for(ctx, hv, [&](int64_t c0, int64_t c1) {
    int64_t row0 = 0;
    size_t corner0 = 0;
    for (const VisionGrid& g : grids) {
      const int64_t hw = g.frame_patches();
      for (int64_t f = 0; f < g.t; ++f)
        for (int64_t q = 0; q < hw; ++q) {
          const PosEmbedCorners& k = corners[corner0 + size_t(q)];
          const P* src = dy + (row0 + f * hw + q) * hv;
          for (int j = 0; j < 4; ++j) {
            float* dst = dT + int64_t(k.index[j]) * hv;
            const float w = k.weight[j];
            for (int64_t c = c0; c < c1; ++c) dst[c] += w * to_float(src[c]);
          }
        }
      row0 += g.patches();
      corner0 += size_t(hw);
    }
  });
}

}  // namespace

Status pos_embed_forward(const Context& ctx, TensorView pe, TensorView table, std::span<const VisionGrid> grids,
                         const PosEmbedDesc& desc) {
  const std::vector<PosEmbedCorners> corners = frame_corners(grids, desc);
  VLPAR_FLOAT_SWITCH(table.dtype, T, "pos_embed_forward", {
    VLPAR_FLOAT_SWITCH(pe.dtype, P, "pos_embed_forward",
                       { interpolate<T, P>(ctx, table.ptr<T>(), pe.ptr<P>(), table.size(1), grids, corners); });
  });
  return Status::Ok();
}

Status pos_embed_backward(const Context& ctx, TensorView dtable, TensorView dpe, std::span<const VisionGrid> grids,
                          const PosEmbedDesc& desc) {
  const std::vector<PosEmbedCorners> corners = frame_corners(grids, desc);
  VLPAR_FLOAT_SWITCH(dpe.dtype, P, "pos_embed_backward",
                     { scatter_grads<P>(ctx, dtable.ptr<float>(), dpe.ptr<P>(), dtable.size(1), grids, corners); });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
