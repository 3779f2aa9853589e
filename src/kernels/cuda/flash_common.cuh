#pragma once
// What the flash-attention forward and backward kernels (flash_fwd_kernel.cuh, flash_bwd_kernel.cuh) agree on: a
// sequence's token ranges in the packed q and k, which keys a query sees (bottom-right aligned causal masks: key c
// visible to query r iff c <= r + S_k − S_q), and how many keys a block of query rows can see.
// Test: tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

#include "vlpar/kernels/cuda/attention_params.hpp"

namespace vlpar::cuda_kernels {

inline constexpr float kLog2e = 1.4426950408889634f;

/// Sequence b's token ranges in the packed q and k.
struct FlashSeq {
  int64_t q_start, k_start;  // first token of the sequence in the packed q and k
  int seqlen_q, seqlen_k;
};

__device__ __forceinline__ FlashSeq flash_seq(const FlashFwdParams& p, int b) {
  FlashSeq s;
  s.q_start = p.cu_q[b];
  s.k_start = p.cu_k[b];
  s.seqlen_q = int(p.cu_q[b + 1] - s.q_start);
  s.seqlen_k = int(p.cu_k[b + 1] - s.k_start);
  return s;
}

/// True when key c (sequence-local) exists and, causal, lies on or left of query row r's diagonal.
__device__ __forceinline__ bool flash_key_visible(const FlashFwdParams& p, const FlashSeq& s, int r, int c) {
  return c < s.seqlen_k && (!p.causal || c <= r + s.seqlen_k - s.seqlen_q);
}

/// Keys [0, n) can be visible to some query row of [m0, m0 + rows): all S_k of them, or, causal, those up to the
/// last row's diagonal; 0 when none is.
__device__ __forceinline__ int flash_keys_seen(const FlashFwdParams& p, const FlashSeq& s, int m0, int rows) {
  const int causal_end = m0 + rows + s.seqlen_k - s.seqlen_q;  // one past the last key of the last row
  const int n = p.causal ? (causal_end < s.seqlen_k ? causal_end : s.seqlen_k) : s.seqlen_k;
  return n > 0 ? n : 0;
}

}  // namespace vlpar::cuda_kernels
