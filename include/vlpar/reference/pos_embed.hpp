#pragma once
// fp64 reference (STYLE §9): the Qwen3-VL learned position-embedding interpolation (spec qwen3vl.md §3.2), written
// the way the spec states it, independently of the kernel's helpers: exact linspace i·(G−1)/(n−1) in S, bilinear
// weights in S, a raster [h, w] embedding per grid, repeated t times, then permuted to merge-window order as
// HF's view(t, h/m, m, w/m, m).permute(0, 1, 3, 2, 4) does. Templated on S (double reference, float naive).
//   table, dtable [G², Hv]      pe, dpe [Np, Hv], Np = Σ t·h·w
// Test: tests/unit/test_pos_embed.cpp
#include <algorithm>
#include <cstdint>
#include <vector>

#include "vlpar/kernels/pos_embed.hpp"

namespace vlpar::reference {

/// The raster embedding's corners and weights of one grid: for raster cell (r, c) entry k of 4.
template <class S>
struct RasterCorners {
  std::vector<int64_t> index;  // [h·w·4]
  std::vector<S> weight;       // [h·w·4]
};

template <class S>
RasterCorners<S> pos_embed_raster_corners(int64_t h, int64_t w, int64_t G) {
  auto axis = [&](int64_t i, int64_t n, int64_t& lo, int64_t& hi, S& frac) {
    const S v = n > 1 ? S(G - 1) * S(i) / S(n - 1) : S(0);
    lo = std::min<int64_t>(int64_t(v), G - 1);
    hi = std::min<int64_t>(lo + 1, G - 1);
    frac = v - S(lo);
  };
  RasterCorners<S> rc;
  rc.index.resize(size_t(h * w * 4));
  rc.weight.resize(size_t(h * w * 4));
  for (int64_t r = 0; r < h; ++r)
    for (int64_t c = 0; c < w; ++c) {
      int64_t fh, ch, fw, cw;
      S dh, dw;
      axis(r, h, fh, ch, dh);
      axis(c, w, fw, cw, dw);
      const int64_t idx[4] = {fh * G + fw, fh * G + cw, ch * G + fw, ch * G + cw};
      const S wt[4] = {(S(1) - dh) * (S(1) - dw), (S(1) - dh) * dw, dh * (S(1) - dw), dh * dw};
      for (int k = 0; k < 4; ++k) {
        rc.index[size_t((r * w + c) * 4 + k)] = idx[k];
        rc.weight[size_t((r * w + c) * 4 + k)] = wt[k];
      }
    }
  return rc;
}

/// Output row (within the grid) of raster cell (r, c) of frame f: (f, r/m, c/m, r%m, c%m) flattened.
inline int64_t pos_embed_merge_row(int64_t f, int64_t r, int64_t c, int64_t h, int64_t w, int64_t m) {
  return (((f * (h / m) + r / m) * (w / m) + c / m) * m + r % m) * m + c % m;
}

/// pe = Σ_k weight_k · table[index_k] per patch, in patch order.
template <class S>
void pos_embed_forward(S* pe, const S* table, const std::vector<VisionGrid>& grids, int64_t G, int64_t Hv,
                       int64_t m) {
  int64_t row0 = 0;
  for (const VisionGrid& g : grids) {
    const RasterCorners<S> rc = pos_embed_raster_corners<S>(g.h, g.w, G);
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t r = 0; r < g.h; ++r)
        for (int64_t c = 0; c < g.w; ++c) {
          S* y = pe + (row0 + pos_embed_merge_row(f, r, c, g.h, g.w, m)) * Hv;
          for (int64_t d = 0; d < Hv; ++d) {
            S acc = 0;
            for (int k = 0; k < 4; ++k)
              acc += rc.weight[size_t((r * g.w + c) * 4 + k)] * table[rc.index[size_t((r * g.w + c) * 4 + k)] * Hv + d];
            y[d] = acc;
          }
        }
    row0 += g.t * g.h * g.w;
  }
}

/// dtable += the adjoint of pos_embed_forward applied to dpe (accumulated).
template <class S>
void pos_embed_backward(S* dtable, const S* dpe, const std::vector<VisionGrid>& grids, int64_t G, int64_t Hv,
                        int64_t m) {
  int64_t row0 = 0;
  for (const VisionGrid& g : grids) {
    const RasterCorners<S> rc = pos_embed_raster_corners<S>(g.h, g.w, G);
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t r = 0; r < g.h; ++r)
        for (int64_t c = 0; c < g.w; ++c) {
          const S* dy = dpe + (row0 + pos_embed_merge_row(f, r, c, g.h, g.w, m)) * Hv;
          for (int k = 0; k < 4; ++k) {
            S* dst = dtable + rc.index[size_t((r * g.w + c) * 4 + k)] * Hv;
            const S wt = rc.weight[size_t((r * g.w + c) * 4 + k)];
            for (int64_t d = 0; d < Hv; ++d) dst[d] += wt * dy[d];
          }
        }
    row0 += g.t * g.h * g.w;
  }
}

}  // namespace vlpar::reference
