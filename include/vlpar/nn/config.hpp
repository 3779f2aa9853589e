#pragma once
// Typed configuration of the decoder-only transformer blocks in nn/ (STYLE §25: one struct per component,
// validate() explains a conflict in one sentence). Sizes use the STYLE §19 vocabulary:
//   H = hidden, heads = query heads, kv_heads = H_kv, D = head_dim, I = intermediate, V = vocab.
// Test: tests/unit/test_nn_shard.cpp (validation messages), tests/unit/test_nn_stack.cpp.
#include <cstdint>

#include "vlpar/core/status.hpp"

namespace vlpar::nn {

struct TransformerConfig {
  int64_t hidden = 0;        // H
  int heads = 0;             // query heads
  int kv_heads = 0;          // H_kv (GQA); divides heads
  int head_dim = 0;          // D (even: rotary pairs j and j + D/2)
  int64_t intermediate = 0;  // I, SwiGLU width
  int64_t vocab = 0;         // V
  int num_layers = 2;
  float eps = 1e-6f;             // RMSNorm epsilon
  float rope_theta = 10000.f;    // 1D rotary base
  float init_std = 0.02f;        // std of the normal init of every projection, embedding and LM head
  int64_t ignore_index = -100;   // label value that contributes nothing to the loss

  /// @brief Checks the sizes themselves ("kv_heads 3 does not divide heads 4").
  Status validate() const;
  /// @brief Checks that tensor parallelism of size tp can shard this model ("tp=3 does not divide 4 heads").
  Status validate_tp(int tp) const;
};

}  // namespace vlpar::nn
