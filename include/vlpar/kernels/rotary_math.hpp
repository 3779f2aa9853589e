#pragma once
// Rotary frequency tables, shared by CPU and CUDA rotary kernels (VLPAR_HD; covered by CPU tests).
//
// Convention (HF rotate_half): for head dim D, dim j pairs with j + D/2 and both rotate by angle θ_j,
//   y_j       = x_j · cos θ_j − x_{j+D/2} · sin θ_j
//   y_{j+D/2} = x_{j+D/2} · cos θ_j + x_j · sin θ_j,        j ∈ [0, D/2).
// θ_j = pos[axis(j)] · inv_freq(j) in fp32. The three kinds differ only in axis(j) and inv_freq(j):
//   k1D      : axis 0; inv_freq(j) = 1/θ^(2j/D)                                   (plain RoPE)
//   kMRoPE   : axis T/H/W interleaved (spec §4.4): H if j%3==1 && j < 3·sec[1], W if j%3==2 && j < 3·sec[2],
//              else T; inv_freq as 1D                                             (Qwen3-VL text)
//   kVision2D: R = D/2 rotary dims, Q = D/4 frequencies inv_v(q) = 1/θ^(2q/R); j < Q uses axis 0 (row) with
//              inv_v(j), j ≥ Q uses axis 1 (column) with inv_v(j − Q)             (Qwen3-VL vision, §3.3)
#include <cmath>
#include <cstdint>

#include "vlpar/core/macros.hpp"

namespace vlpar {

enum class RotaryKind : uint8_t { k1D = 0, kMRoPE = 1, kVision2D = 2 };

struct RotaryDesc {
  RotaryKind kind = RotaryKind::k1D;
  int head_dim = 128;                  // D (even; multiple of 4 for kVision2D)
  float theta = 10000.f;               // rope_theta (Qwen3-VL text: 5e6; vision: 1e4)
  int mrope_section[3] = {24, 20, 20}; // kMRoPE only: frequencies per (T, H, W); sum ≤ D/2

  /// Number of position rows the kernel reads: 1, 3 or 2.
  VLPAR_HD int num_axes() const { return kind == RotaryKind::k1D ? 1 : (kind == RotaryKind::kMRoPE ? 3 : 2); }
};

/// @brief torch's inv_freq: 1 / base^(float(2q)/float(dim)), every step in fp32 as HF computes it.
VLPAR_HD inline float rope_inv_freq(float base, int q, int dim) {
  const float exponent = float(2 * q) / float(dim);
  return 1.0f / ::powf(base, exponent);
}

/// @brief Interleaved-MRoPE axis (0 = T, 1 = H, 2 = W) of frequency j (apply_interleaved_mrope).
VLPAR_HD inline int mrope_axis(int j, const int* section) {
  if (j % 3 == 1 && j < 3 * section[1]) return 1;
  if (j % 3 == 2 && j < 3 * section[2]) return 2;
  return 0;
}

struct RotaryFreq {
  int axis;        // which position row drives this frequency
  float inv_freq;  // radians per position unit
};

/// @brief The axis and inverse frequency of rotary pair j ∈ [0, D/2).
VLPAR_HD inline RotaryFreq rotary_freq(const RotaryDesc& d, int j) {
  switch (d.kind) {
    case RotaryKind::kMRoPE: return {mrope_axis(j, d.mrope_section), rope_inv_freq(d.theta, j, d.head_dim)};
    case RotaryKind::kVision2D: {
      const int q = d.head_dim / 4;
      const int axis = j < q ? 0 : 1;
      return {axis, rope_inv_freq(d.theta, j - axis * q, d.head_dim / 2)};
    }
    case RotaryKind::k1D:
    default: return {0, rope_inv_freq(d.theta, j, d.head_dim)};
  }
}

/// @brief Rotates one pair (x_lo = x_j, x_hi = x_{j+D/2}) by ±θ in fp32. sign = +1 forward, −1 backward
/// (the transpose of a rotation is the rotation by −θ).
VLPAR_HD inline void rotate_pair(float x_lo, float x_hi, float c, float s, float& y_lo, float& y_hi) {
  y_lo = x_lo * c - x_hi * s;
  y_hi = x_hi * c + x_lo * s;
}

}  // namespace vlpar
