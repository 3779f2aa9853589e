// Decoder key/value cache. See include/vlpar/nn/kv_cache.hpp.
#include "vlpar/nn/kv_cache.hpp"

namespace vlpar::nn {

Result<KvCache> KvCache::create(Allocator& alloc, int layers, int64_t capacity, int kv_heads, int head_dim) {
  VLPAR_CHECK(layers >= 1 && capacity >= 1 && kv_heads >= 1 && head_dim >= 1,
              "KvCache: layers {}, capacity {}, kv heads {} and head_dim {} must all be >= 1", layers, capacity,
              kv_heads, head_dim);
  KvCache c;
  c.capacity_ = capacity;
  for (int l = 0; l < layers; ++l) {
    VLPAR_ASSIGN_OR_RETURN(Tensor k, Tensor::zeros(alloc, Shape{capacity, kv_heads, head_dim}, DType::kF32));
    VLPAR_ASSIGN_OR_RETURN(Tensor v, Tensor::zeros(alloc, Shape{capacity, kv_heads, head_dim}, DType::kF32));
    c.k_.push_back(std::move(k));
    c.v_.push_back(std::move(v));
  }
  return c;
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l) b += int64_t(k_[l].view().nbytes() + v_[l].view().nbytes());
  return b;
}

}  // namespace vlpar::nn
