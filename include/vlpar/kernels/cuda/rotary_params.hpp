#pragma once
// Parameters and launcher declaration of the CUDA rotary kernel (STYLE §2: the params part of the family
//   rotary_params.hpp (this file) · src/kernels/cuda/rotary_kernel.cuh · src/kernels/cuda/rotary_launch.cuh ·
//   public API include/vlpar/kernels/rotary.hpp, angle conventions in include/vlpar/kernels/rotary_math.hpp).
// The (axis, inv_freq) table of the D/2 pairs is evaluated on the host with rotary_freq() — the very call the
// CPU kernel makes — and travels in the kernel parameters, so CPU and GPU use bit-identical frequencies
// (device powf may differ from the host's by 2 ulp, which at position 32768 would move an angle by ~8e-3 rad).
// The launcher is explicitly instantiated per T in the generated src/kernels/cuda/rotary_<dtype>.cu.
// Test: tests/gpu/test_cuda_kernels.cpp (ctest -L gpu)
#include <cstdint>

#include "vlpar/core/status.hpp"
#include "vlpar/kernels/rotary_math.hpp"

namespace vlpar::cuda_kernels {

/// Largest supported D/2 (head_dim ≤ 512); the table costs 5 bytes of kernel parameters per pair.
inline constexpr int kRotaryMaxPairs = 256;

struct RotaryParams {
  void* y;                  // [N_tok, H, D] T, may alias x
  const void* x;            // [N_tok, H, D] T
  const void* pos;          // [num_axes, N_tok] i32 or i64, contiguous along tokens
  int64_t n_tok;            // N_tok
  int64_t n_heads;          // H
  int64_t x_tok_stride;     // elements
  int64_t x_head_stride;    // elements
  int64_t y_tok_stride;     // elements
  int64_t y_head_stride;    // elements
  int64_t pos_axis_stride;  // elements between the position rows of two axes
  int half;                 // D/2 pairs; pair j couples dims j and j + D/2
  int pos_is_i64;           // 1: positions are int64, 0: int32
  float sign;               // +1 forward (rotate by θ), −1 backward (rotate by −θ, the transpose)
  float inv_freq[kRotaryMaxPairs];  // [half] radians per position unit of pair j (rotary_freq(desc, j))
  uint8_t axis[kRotaryMaxPairs];    // [half] position row driving pair j (0..num_axes−1)
};

/// @brief y = R(sign·θ) x for every (token, head, pair), fp32 math, one rounding to T.
template <class T>
Status rotary_run(const RotaryParams& p, void* stream);

}  // namespace vlpar::cuda_kernels
