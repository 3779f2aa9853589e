// kv_cache_attention_forward (include/vlpar/kernels/attention.hpp) against the fp64 reference attention: n new
// tokens at cache rows [past, past + n) equal the last n output rows of a causal segment of past + n tokens
// (tests/tolerances.hpp default rule for attention forward: a factor over the naive f32 loop's error plus a few
// u32 of the output scale). Rows past past + n hold garbage the kernel must not read. Bad inputs are named errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tolerances.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/reference/attention.hpp"

namespace vlpar {
namespace {

void check(int hq, int hkv, int d, int64_t past, int64_t n, int64_t cap, int threads) {
  std::mt19937 rng(uint32_t(hq * 1000 + hkv * 100 + d + past * 7 + n));
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> q(size_t(n * hq * d)), k(size_t(cap * hkv * d)), v(k.size()), out(q.size());
  for (float& x : q) x = float(nd(rng));
  for (float& x : k) x = float(nd(rng));
  for (float& x : v) x = float(nd(rng));
  const int64_t len = past + n;
  for (int64_t i = len * hkv * d; i < cap * hkv * d; ++i) k[size_t(i)] = v[size_t(i)] = 1e4f;
  Context ctx = Context::cpu_default();
  ctx.num_threads = threads;
  ASSERT_TRUE(kv_cache_attention_forward(ctx, TensorView(out.data(), DType::kF32, Shape{n, hq, d}),
                                         TensorView(q.data(), DType::kF32, Shape{n, hq, d}),
                                         TensorView(k.data(), DType::kF32, Shape{cap, hkv, d}),
                                         TensorView(v.data(), DType::kF32, Shape{cap, hkv, d}), past)
                  .ok());
  // Reference: one causal segment of len tokens whose last n query rows are q (earlier rows never compared).
  auto run = [&](auto zero) {
    using S = decltype(zero);
    std::vector<S> qs(size_t(len * hq * d), S(0)), ks(size_t(len * hkv * d)), vs(ks.size()), os(qs.size()),
        lse(size_t(hq * len));
    for (int64_t i = 0; i < n * hq * d; ++i) qs[size_t(past * hq * d + i)] = S(q[size_t(i)]);
    for (size_t i = 0; i < ks.size(); ++i) {
      ks[i] = S(k[i]);
      vs[i] = S(v[i]);
    }
    const int32_t cu[2] = {0, int32_t(len)};
    reference::AttentionProblem p;
    p.cu_seqlens = cu;
    p.num_seqs = 1;
    p.H = hq;
    p.H_kv = hkv;
    p.D = d;
    reference::attention_forward(os.data(), lse.data(), qs.data(), ks.data(), vs.data(), p);
    return std::vector<S>(os.end() - n * hq * d, os.end());
  };
  const std::vector<double> ref = run(0.0);
  const std::vector<float> naive = run(0.f);
  double err = 0, naive_err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(double(out[i]) - ref[i]));
    naive_err = std::max(naive_err, std::abs(double(naive[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  const test::Tolerance tol = test::tolerance(test::TolOp::kAttentionFwd, DType::kF32);
  EXPECT_LE(err, tol.naive_factor * naive_err + tol.atol_ulps * test::unit_roundoff(DType::kF32) * scale)
      << "hq " << hq << " hkv " << hkv << " d " << d << " past " << past << " n " << n;
}

TEST(KvCacheAttention, MatchesTheFp64Reference) {
  check(4, 2, 16, 0, 1, 4, 1);      // the first token: attends to itself only
  check(4, 2, 16, 36, 1, 40, 2);    // one decode step
  check(3, 1, 24, 63, 1, 64, 3);    // a full cache
  check(2, 2, 8, 128, 1, 200, 2);
  check(4, 2, 16, 10, 5, 20, 2);    // several new tokens at once: causal among them
  check(6, 3, 8, 0, 33, 40, 3);     // a prefill through the cache
}

TEST(KvCacheAttention, SameBitsForAnyThreadCount) {
  std::vector<float> q(size_t(3 * 4 * 8)), k(size_t(16 * 2 * 8)), a(q.size()), b(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(std::sin(0.3 * double(i)));
  for (size_t i = 0; i < k.size(); ++i) k[i] = float(std::cos(0.7 * double(i)));
  const TensorView kv(k.data(), DType::kF32, Shape{16, 2, 8}), qv(q.data(), DType::kF32, Shape{3, 4, 8});
  Context one = Context::cpu_default(), three = Context::cpu_default();
  one.num_threads = 1;
  three.num_threads = 3;
  ASSERT_TRUE(kv_cache_attention_forward(one, TensorView(a.data(), DType::kF32, Shape{3, 4, 8}), qv, kv, kv, 9).ok());
  ASSERT_TRUE(kv_cache_attention_forward(three, TensorView(b.data(), DType::kF32, Shape{3, 4, 8}), qv, kv, kv, 9).ok());
  EXPECT_EQ(a, b);
}

TEST(KvCacheAttention, RejectsBadInputs) {
  std::vector<float> q(8), k(4 * 8), out(8);
  const Context ctx = Context::cpu_default();
  const TensorView qv(q.data(), DType::kF32, Shape{1, 2, 4}), ov(out.data(), DType::kF32, Shape{1, 2, 4});
  const TensorView kv(k.data(), DType::kF32, Shape{4, 2, 4});
  EXPECT_FALSE(kv_cache_attention_forward(ctx, ov, qv, kv, kv, -1).ok());
  const Status full = kv_cache_attention_forward(ctx, ov, qv, kv, kv, 4);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.message().find("exceed the cache capacity 4"), std::string::npos) << full.message();
  EXPECT_FALSE(kv_cache_attention_forward(ctx, ov, qv, TensorView(k.data(), DType::kF32, Shape{4, 2, 2}), kv, 2).ok());
  EXPECT_FALSE(kv_cache_attention_forward(ctx, ov, TensorView(q.data(), DType::kF32, Shape{2, 4}), kv, kv, 2).ok());
  const Status heads = kv_cache_attention_forward(ctx, ov, qv, TensorView(k.data(), DType::kF32, Shape{2, 3, 4}),
                                                  TensorView(k.data(), DType::kF32, Shape{2, 3, 4}), 1);
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.message().find("kv heads"), std::string::npos) << heads.message();
  EXPECT_TRUE(kv_cache_attention_forward(ctx, ov, qv, kv, kv, 3).ok());
}

}  // namespace
}  // namespace vlpar
