// CPU attention of new tokens over a key/value cache (incremental decoding). See include/vlpar/kernels/attention.hpp.
// One (token, head) pair per work item: scores over the visible cache rows, a two-pass fp32 softmax (max, then
// Σ exp), the weighted sum of values. Each pair is computed by one thread in a fixed order, so the result does not
// depend on the thread count. Test: tests/unit/test_kv_cache_attention.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/kernels/attention.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {

Status kv_cache_attention_forward(const Context& ctx, TensorView out, TensorView q, TensorView k_cache,
                                  TensorView v_cache, int64_t past) {
  const int64_t n = q.size(0), hq = q.size(1), d = q.size(2), hkv = k_cache.size(1);  // checked by ops/attention.cpp
  const int64_t group = hq / hkv, row = hkv * d;  // cache row stride (one token)
  const float scale = 1.f / std::sqrt(float(d));   // as the varlen kernel (softmax_scale 0 = D^-½)
  const float* qp = q.ptr<float>();
  const float* kp = k_cache.ptr<float>();
  const float* vp = v_cache.ptr<float>();
  float* op = out.ptr<float>();
  parallel_for(ctx, n * hq, [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(past + n));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / hq, h = item % hq, len = past + i + 1;  // token i sees rows [0, past + i]
      const float* qh = qp + item * d;
      const int64_t kvh = h / group;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        const float* kj = kp + j * row + kvh * d;
        float s = 0.f;
        for (int64_t c = 0; c < d; ++c) s += qh[c] * kj[c];
        p[size_t(j)] = s * scale;
        m = std::max(m, p[size_t(j)]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j < len; ++j) {
        p[size_t(j)] = std::exp(p[size_t(j)] - m);
        sum += p[size_t(j)];
      }
      float* oh = op + item * d;
      std::fill(oh, oh + d, 0.f);
      for (int64_t j = 0; j < len; ++j) {
        const float* vj = vp + j * row + kvh * d;
        const float w = p[size_t(j)];
        for (int64_t c = 0; c < d; ++c) oh[c] += w * vj[c];
      }
      const float inv = 1.f / sum;
      for (int64_t c = 0; c < d; ++c) oh[c] *= inv;
    }
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
