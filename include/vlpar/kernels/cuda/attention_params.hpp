#pragma once
// Parameters and launcher declaration of the CUDA varlen flash-attention forward (STYLE §2: the params part of
// the family  attention_params.hpp (this file) · src/kernels/cuda/flash_fwd_kernel.cuh (the kernel) ·
// src/kernels/cuda/flash_fwd_launch.cuh (tiles per head dim, launch) · generated instantiation files
// src/kernels/cuda/flash_fwd_hd<HD>_<dtype>.cu · public API include/vlpar/kernels/attention.hpp).
// FlashAttention-2 algorithm (design: ../shared/spec/cuda-kernels.md §1): one CTA of 4 warps per (query tile,
// head, sequence), online softmax in fp32 registers, mma.sync m16n8k16 with ldmatrix and cp.async.
// Test: tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu in the emulated build)
#include <cstddef>
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::cuda_kernels {

/// The head dims with a compiled kernel (kernel head dim, each a multiple of 16); a head dim d runs the smallest
/// instantiation >= d, its columns beyond d zero-filled on load and never stored (72 and 80 run the 96 kernel).
inline constexpr int kFlashHeadDims[] = {64, 96, 128};

/// The kernel head dim that serves head dim d, or 0 when none does (d > 128).
constexpr int flash_kernel_head_dim(int d) {
  for (int hd : kFlashHeadDims)
    if (d <= hd) return hd;
  return 0;
}

struct FlashFwdParams {
  void* out;                // [N_q, H, D] T
  float* lse;               // [H, N_q] f32, row stride lse_head_stride; natural log of Σ_k exp(scale·q·k)
  const void* q;            // [N_q, H, D] T
  const void* k;            // [N_k, H_kv, D] T
  const void* v;            // [N_k, H_kv, D] T
  const int32_t* cu_q;      // [B+1] device, exclusive prefix sums of the query lengths
  const int32_t* cu_k;      // [B+1] device, of the key lengths (may equal cu_q)
  int64_t q_tok_stride, q_head_stride;      // elements; multiples of 8 (16-byte cp.async rows)
  int64_t k_tok_stride, k_head_stride;
  int64_t v_tok_stride, v_head_stride;
  int64_t out_tok_stride, out_head_stride;
  int64_t lse_head_stride;  // elements between two heads' LSE rows
  int batch;                // B sequences
  int max_seqlen_q;         // max_b (cu_q[b+1] − cu_q[b]): sizes the grid
  int num_heads;            // H
  int num_kv_heads;         // H_kv, divides H (GQA: query head h reads kv head h / (H / H_kv))
  int head_dim;             // D, a multiple of 8, at most 128
  int causal;               // 1: key c visible to query r iff c <= r + (S_k − S_q) (bottom-right aligned)
  float scale;              // softmax scale (already resolved: 1/sqrt(D) when the op was given 0)
};

/// @brief out, lse of every (sequence, head, query) row; rows with no visible key get out = 0 and lse = +inf.
/// Pointers 16-byte aligned and strides multiples of 8 elements (the op checks and names what breaks it).
template <class T, int kHeadDim>
Status flash_fwd_run(const FlashFwdParams& p, void* stream);

/// The backward, deterministic without atomics (../shared/spec/cuda-kernels.md §2.3, vlpar's two-kernel split):
///   1. flash_bwd_dot_do_o: delta[h, i] = Σ_d dO[i, h, d] · O[i, h, d] (fp32, the stored O)
///   2. flash_bwd_dkdv: one CTA per (key block, kv head, sequence) accumulates dK, dV in fp32 registers over the
///      query heads of its GQA group and every query block that sees its keys; writes dK, dV once
///   3. flash_bwd_dq: one CTA per (query block, head, sequence) accumulates dQ over the key blocks; writes once
/// P is recomputed from the forward's lse; dS = P ∘ (dP − delta); dQ = scale·dS·K, dK = scale·dSᵀ·Q, dV = Pᵀ·dO.
struct FlashBwdParams {
  FlashFwdParams fwd;       // q, k, v, out, lse (read), cu_q, cu_k, strides, dims, causal, scale
  const void* dout;         // [N_q, H, D] T
  void* dq;                 // [N_q, H, D] T, written
  void* dk;                 // [N_k, H_kv, D] T, written
  void* dv;                 // [N_k, H_kv, D] T, written
  float* delta;             // [H, N_q] f32 workspace (flash_bwd_workspace_bytes)
  int64_t dout_tok_stride, dout_head_stride;
  int64_t dq_tok_stride, dq_head_stride;
  int64_t dk_tok_stride, dk_head_stride;
  int64_t dv_tok_stride, dv_head_stride;
  int64_t n_q;              // N_q (delta's row length)
  int max_seqlen_k;         // max_b (cu_k[b+1] − cu_k[b]): sizes the dK/dV grid
};

/// Device workspace of the backward: delta [H, N_q] f32.
constexpr size_t flash_bwd_workspace_bytes(int64_t n_q, int num_heads) {
  return size_t(n_q) * size_t(num_heads) * sizeof(float);
}

template <class T, int kHeadDim>
Status flash_bwd_run(const FlashBwdParams& p, void* stream);

}  // namespace vlpar::cuda_kernels
