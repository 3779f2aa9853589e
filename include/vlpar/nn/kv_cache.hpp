#pragma once
// The key/value cache of a decoder for incremental decoding: per attention layer, the rotated keys and the
// values of every token seen so far, rows [0, length) of [capacity, kv_heads, head_dim] f32 tensors (this rank's
// kv heads). AttentionBlock::fill_kv_cache writes rows after a full forward (prefill); forward_decode appends the
// new tokens' rows and attends over the cache (kv_cache_attention_forward).
// Test: examples/qwen3vl/tests/test_generate.cpp (greedy decoding reproduces transformers' generate ids).
#include <cstdint>
#include <vector>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::nn {

class KvCache {
 public:
  /// @brief Zeroed caches for `layers` attention layers of `capacity` tokens each.
  static Result<KvCache> create(Allocator& alloc, int layers, int64_t capacity, int kv_heads, int head_dim);

  TensorView k(int layer) const { return k_.at(size_t(layer)).view(); }
  TensorView v(int layer) const { return v_.at(size_t(layer)).view(); }
  int layers() const { return int(k_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;

 private:
  std::vector<Tensor> k_, v_;
  int64_t capacity_ = 0;
};

}  // namespace vlpar::nn
