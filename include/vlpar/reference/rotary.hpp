#pragma once
// fp64 reference (STYLE §9): rotary embeddings (1D, interleaved MRoPE, vision 2D) over contiguous
// [N_tok, H, D]. Frequencies are computed here independently of rotary_math.hpp, in S, straight from the
// spec's formulas (qwen3vl.md §3.3, §4.4): 1/θ^(2q/dim), axis by j mod 3, vision row/column halves.
#include <cmath>
#include <cstdint>

#include "vlpar/kernels/rotary_math.hpp"

namespace vlpar::reference {

/// @brief Angle of pair j for token t: pos[axis][t] · inv_freq, positions [num_axes, N_tok].
template <class S>
S rotary_angle(const RotaryDesc& d, const int64_t* pos, int64_t n_tok, int64_t t, int j) {
  const int D = d.head_dim;
  int axis = 0, q = j, dim = D;
  if (d.kind == RotaryKind::kMRoPE) {
    if (j % 3 == 1 && j < 3 * d.mrope_section[1]) axis = 1;
    else if (j % 3 == 2 && j < 3 * d.mrope_section[2]) axis = 2;
  } else if (d.kind == RotaryKind::kVision2D) {
    dim = D / 2;
    axis = j < D / 4 ? 0 : 1;
    q = j - axis * (D / 4);
  }
  const S inv = S(1) / std::pow(S(d.theta), S(2 * q) / S(dim));
  return S(pos[axis * n_tok + t]) * inv;
}

/// @brief y = R(±θ) x; sign = +1 forward, −1 backward (the transpose).
template <class S>
void rotary_apply(S* y, const S* x, const int64_t* pos, int64_t n_tok, int64_t H, const RotaryDesc& d, int sign) {
  const int D = d.head_dim, half = D / 2;
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int j = 0; j < half; ++j) {
        const S a = rotary_angle<S>(d, pos, n_tok, t, j);
        const S c = std::cos(a), s = S(sign) * std::sin(a);
        const S* xr = x + (t * H + h) * D;
        S* yr = y + (t * H + h) * D;
        const S lo = xr[j], hi = xr[j + half];
        yr[j] = lo * c - hi * s;
        yr[j + half] = hi * c + lo * s;
      }
}

}  // namespace vlpar::reference
