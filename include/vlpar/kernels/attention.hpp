#pragma once
// Variable-length (packed) multi-head attention, FlashAttention-2 algorithm (CPU and CUDA).
//   q [N_q, H, D], k/v [N_k, H_kv, D]; sequence b is queries [cu_q[b], cu_q[b+1]) and keys [cu_k[b], cu_k[b+1])
//   (i32 [B+1] each, cu[0] = 0, non-decreasing, cu_q[B] = N_q, cu_k[B] = N_k; self-attention passes one
//   cu_seqlens for both). Attention never crosses a sequence. Causal masks are bottom-right aligned: key j is
//   visible to query i iff j <= i + S_k − S_q (j <= i when S_q = S_k); a query that sees no key (S_q > S_k, or
//   S_k = 0) gets out = 0 and lse = +inf, and contributes no gradient. GQA: query head h reads kv head h / (H / H_kv).
//   Forward: tiled online softmax, never materialises a [S, S] score matrix; saves lse [H, N_q] (fp32,
//   natural log of Σ exp(scale·qk)) for the backward, which recomputes probabilities tile by tile.
// Checks: src/kernels/ops/attention.cpp (once, for every device). CPU kernel (src/kernels/cpu/attention.cpp):
//   storage f32, bf16 or f16 (one dtype for q/k/v/out and the
//   gradients), fp32 compute; views need a contiguous last dim, token and head strides are free. Results are
//   bitwise identical across runs and thread counts (no atomics). cu_seqlens always lives in host memory.
// CUDA (src/kernels/cuda/flash_{fwd,bwd}_kernel.cuh): FlashAttention-2 with mma.sync, bf16 or f16, head_dim a
//   multiple of 8 up to 128 (72/80 run the 96 kernel), 16-byte aligned rows (token and head strides multiples of 8
//   elements); rows with no visible key get out = 0, lse = +inf. The backward is deterministic without atomics
//   (dK/dV summed over the GQA group inside one CTA, dQ by a second kernel) and takes a device workspace of
//   (B+1)·4 bytes rounded to 256 plus H·N_tok·4 bytes from ctx.allocator (or stream-ordered when none is set).
//   The cache attention returns kNotSupported for CUDA views. Test: tests/gpu/test_cuda_attention.cpp.
// Test: tests/unit/test_attention.cpp. Bench: bench/bench_attention.cpp.
#include <cstddef>
#include <cstdint>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct VarlenAttentionDesc {
  int num_heads = 0;      // H, query heads
  int num_kv_heads = 0;   // H_kv, divides H
  int head_dim = 0;       // D, any positive value (72 and 128 are the Qwen3-VL ones)
  bool causal = true;
  float softmax_scale = 0.f;  // 0 means 1/sqrt(D)
};

Status check_varlen_attention(const VarlenAttentionDesc& desc);

/// @param out [N_q, H, D] written
/// @param lse [H, N_q] f32 written
Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q, TensorView k,
                                TensorView v, TensorView cu_seqlens_q, TensorView cu_seqlens_k,
                                const VarlenAttentionDesc& desc);

/// @param dq [N_q, H, D], dk/dv [N_k, H_kv, D], all written (not accumulated)
Status varlen_attention_backward(const Context& ctx, TensorView dq, TensorView dk, TensorView dv, TensorView dout,
                                 TensorView q, TensorView k, TensorView v, TensorView out, TensorView lse,
                                 TensorView cu_seqlens_q, TensorView cu_seqlens_k, const VarlenAttentionDesc& desc);

/// @brief Device bytes one CUDA attention call takes from ctx.allocator (or stream-ordered when none is set), for
/// callers that size a pool ahead: the B+1 query and key offsets (256-byte aligned) and, for the backward,
/// delta = rowsum(dO ∘ O) [H, N_q] f32. The backward needs no dQ partials (deterministic without atomics: dK/dV
/// and dQ are computed by separate kernels), so this is all of it. CPU calls take none.
inline size_t varlen_attention_cuda_workspace_bytes(int64_t batch, int64_t n_q, int num_heads, bool backward) {
  const size_t segments = (2 * size_t(batch + 1) * sizeof(int32_t) + 255) / 256 * 256;
  return segments + (backward ? size_t(n_q) * size_t(num_heads) * sizeof(float) : 0);
}

/// Self-attention over one packed batch: queries and keys share their segments.
inline Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q,
                                       TensorView k, TensorView v, TensorView cu_seqlens,
                                       const VarlenAttentionDesc& desc) {
  return varlen_attention_forward(ctx, out, lse, q, k, v, cu_seqlens, cu_seqlens, desc);
}

inline Status varlen_attention_backward(const Context& ctx, TensorView dq, TensorView dk, TensorView dv,
                                        TensorView dout, TensorView q, TensorView k, TensorView v, TensorView out,
                                        TensorView lse, TensorView cu_seqlens, const VarlenAttentionDesc& desc) {
  return varlen_attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens, cu_seqlens, desc);
}

/// @brief Attention of n new tokens over a key/value cache (incremental decoding). New token i sits at cache row
/// past + i and attends causally to rows [0, past + i]; rows [past, past + n) must already hold the new tokens'
/// keys and values. Two-pass fp32 softmax per (token, head), scale D^-½, GQA as above; rows past past + n are
/// never read. Bitwise identical for any thread count.
/// @param out [n, H, D] f32 written; q [n, H, D] f32; k_cache, v_cache [capacity, H_kv, D] f32; all contiguous
/// (kernel: src/kernels/cpu/kv_cache_attention.cpp; test: tests/unit/test_kv_cache_attention.cpp)
Status kv_cache_attention_forward(const Context& ctx, TensorView out, TensorView q, TensorView k_cache,
                                  TensorView v_cache, int64_t past);

}  // namespace vlpar
