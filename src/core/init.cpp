// Layout-invariant initialisation: each element's value is a pure function of (seed, param_id, global index).
#include "vlpar/core/init.hpp"

#include <vector>

#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/philox.hpp"

namespace vlpar {

namespace {
float init_value(const InitRule& rule, uint64_t seed, uint32_t param_id, uint64_t index) {
  switch (rule.kind) {
    case InitKind::kZeros: return 0.f;
    case InitKind::kOnes: return 1.f;
    case InitKind::kConstant: return rule.a;
    case InitKind::kNormal: return rule.a + rule.b * philox_normal(seed, param_id, index);
    case InitKind::kUniform: return philox_uniform(seed, param_id, index, rule.a, rule.b);
  }
  return 0.f;
}
}  // namespace

Status init_shard(const Context& ctx, TensorView shard, const Shape& full_shape, const int64_t* offsets,
                  uint64_t seed, uint32_t param_id, InitRule rule) {
  VLPAR_CHECK(shard.device.is_cpu(), "init_shard: param {} view {} must be on the CPU (initialise on host, then "
              "copy_)", param_id, shard.to_string());
  VLPAR_CHECK(shard.is_contiguous(), "init_shard: param {} view {} must be contiguous", param_id, shard.to_string());
  VLPAR_CHECK(shard.ndim() == full_shape.ndim, "init_shard: param {} shard {} and full shape {} differ in rank",
              param_id, shard.to_string(), full_shape.to_string());
  for (int d = 0; d < shard.ndim(); ++d)
    VLPAR_CHECK(offsets[d] >= 0 && offsets[d] + shard.size(d) <= full_shape[d],
                "init_shard: param {} shard {} at offset {} in dim {} exceeds full shape {}", param_id,
                shard.shape.to_string(), offsets[d], d, full_shape.to_string());
  const int nd = shard.ndim();
  const int64_t n = shard.numel();
  std::vector<int64_t> full_strides(size_t(nd), 1);
  for (int d = nd - 2; d >= 0; --d) full_strides[size_t(d)] = full_strides[size_t(d) + 1] * full_shape[d + 1];
  VLPAR_FLOAT_SWITCH(shard.dtype, T, "init_shard", {
    T* out = shard.ptr<T>();
    parallel_for(ctx, n, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // Local multi-index → global flat index in the full tensor.
        int64_t rem = i, global = 0;
        for (int d = nd - 1; d >= 0; --d) {
          const int64_t local = rem % shard.size(d);
          rem /= shard.size(d);
          global += (local + offsets[d]) * full_strides[size_t(d)];
        }
        out[i] = from_float<T>(init_value(rule, seed, param_id, uint64_t(global)));
      }
    });
  });
  return Status::Ok();
}

Status init_full(const Context& ctx, TensorView t, uint64_t seed, uint32_t param_id, InitRule rule) {
  int64_t zeros[kMaxDims] = {};
  return init_shard(ctx, t, t.shape, zeros, seed, param_id, rule);
}

}  // namespace vlpar
