#pragma once
// Pre-norm SwiGLU MLP block with its residual, sharded over the tp group:
//   out = x + down( silu(gate) ⊙ up ),  [gate | up] = gate_up(RMSNorm(x))
// gate_up is the fused column-parallel weight [2I, H] (rows [0, I) gate, [I, 2I) up); rank r holds gate rows
// [r·I/tp, (r+1)·I/tp) followed by the matching up rows (make_fused_gate_up_param), so its SwiGLU needs no
// communication. down is row-parallel [H, I] (columns [r·I/tp, ...)), closed by region_exit. Under SP the
// RMSNorm runs on the rank's token slice and its weight gradient is summed over tp.
// An empty gradient view freezes that parameter (nn/block.hpp): its weight-gradient GEMM is skipped, input
// gradients still flow. This forward/backward signature is the interface every position-wise feed-forward block
// of a decoder layer follows (the MoE block too), so a model can hold either per layer.
// Activations in cfg.activation (f32 or bf16), weights f32 or bf16, gradients f32. Test: tests/unit/test_nn_stack.cpp,
// tests/mpi/test_tp_equivalence.cpp.
#include <cstddef>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/block.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn {

/// Weights (or gradients; an empty gradient view = frozen) of one MLP block on one rank; Il = I/tp.
struct MlpWeights {
  TensorView norm;     // [H]        post-attention RMSNorm weight, replicated
  TensorView gate_up;  // [2·Il, H]  local gate rows then local up rows
  TensorView down;     // [H, Il]    columns of the full [H, I]
};

/// What backward needs from forward. x is the caller's input view: it must stay alive until backward.
struct MlpStash {
  TensorView x;  // [N_loc, H]
  Tensor rstd;   // [N_loc] f32
  Tensor h;      // [N_tok, H]     normed input after region entry
  Tensor gu;     // [N_tok, 2·Il]  gate | up
  Tensor act;    // [N_tok, Il]    silu(gate) ⊙ up
};

class MlpBlock {
 public:
  /// Model-wide parameter indices this block owns: norm, gate_up, down = first_param + 0..2.
  static size_t num_params(const TransformerConfig&) { return 3; }

  /// @param first_param model-wide index of `norm`; gate_up and down are first_param + 1, + 2.
  MlpBlock(const TransformerConfig& cfg, TensorParallel tp, MlpWeights w, MlpWeights grads, size_t first_param);

  /// @param out [N_loc, H] written; x [N_loc, H]
  Status forward(const Context& ctx, TensorView out, TensorView x, int64_t num_tokens, MlpStash& stash) const;
  /// @brief dx [N_loc, H] written (= dout + MLP path); gradients accumulated (frozen ones skipped);
  /// ready(down, gate_up, norm) in that order, never for a frozen parameter.
  Status backward(const Context& ctx, TensorView dx, TensorView dout, int64_t num_tokens, const MlpStash& stash,
                  const GradReadyFn& ready) const;

 private:
  TransformerConfig cfg_;
  TensorParallel tp_;
  MlpWeights w_, g_;
  size_t first_param_ = 0;
  int64_t il_ = 0;
};

}  // namespace vlpar::nn
