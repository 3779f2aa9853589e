// AdamW vs the fp64 reference over several steps (with weight decay, bf16 gradients and a bf16 parameter
// copy); global gradient norm (fp64 accumulation, bitwise reproducible); clipping.
// Run: ./build/cpu/tests/test_optimizer
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"
#include "vlpar/kernels/optimizer.hpp"
#include "vlpar/reference/loss.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

TEST(AdamW, FiveStepsMatchReference) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t n = 1000;
  const AdamWConfig cfg{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  Tensor p = random_tensor(a, {n}, DType::kF32, 1), m = Tensor::zeros(a, {n}, DType::kF32).value();
  Tensor v = Tensor::zeros(a, {n}, DType::kF32).value(), copy = Tensor::empty(a, {n}, DType::kBF16).value();
  auto p64 = to_f64(p);
  std::vector<double> m64(static_cast<size_t>(n), 0.0), v64(m64);
  std::vector<float> pf(p64.begin(), p64.end()), mf(m64.begin(), m64.end()), vf(mf);
  for (int64_t step = 1; step <= 5; ++step) {
    Tensor g = random_tensor(a, {n}, DType::kBF16, uint64_t(100 + step));
    ASSERT_TRUE(adamw_step(ctx, p, copy, g, m, v, cfg, step).ok());
    auto g64 = to_f64(g);
    std::vector<float> gf(g64.begin(), g64.end());
    reference::adamw(p64.data(), m64.data(), v64.data(), g64.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
    reference::adamw(pf.data(), mf.data(), vf.data(), gf.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
  }
  // The parameters themselves are O(1); the update is what the optimizer computes, so compare updates'
  // accumulated effect on p with the derived rule on p.
  EXPECT_TRUE(close_to_reference("adamw p", to_f64(p), p64, std::vector<double>(pf.begin(), pf.end()), p.shape(),
                                 TolOp::kAdamW, DType::kF32));
  EXPECT_TRUE(close_to_reference("adamw m", to_f64(m), m64, std::vector<double>(mf.begin(), mf.end()), m.shape(),
                                 TolOp::kAdamW, DType::kF32));
  EXPECT_TRUE(bitwise_equal("bf16 copy", copy, [&] {
    Tensor c = Tensor::empty(a, {n}, DType::kBF16).value();
    EXPECT_TRUE(convert_(c, p).ok());
    return c;
  }()));
}

TEST(AdamW, InvalidConfigIsNamed) {
  AdamWConfig cfg;
  cfg.beta2 = 1.0f;
  const Status s = cfg.validate();
  EXPECT_NE(s.message().find("beta2 must be in [0, 1), got 1"), std::string::npos) << s.message();
}

TEST(GradNorm, Fp64AccumulationAndClipping) {
  Allocator a;
  Context ctx = test_ctx(2);
  Tensor g1 = integer_tensor(a, {1001}, DType::kF32, 1, -3, 3), g2 = integer_tensor(a, {77}, DType::kBF16, 2, -3, 3);
  double want = 0;
  for (double x : to_f64(g1)) want += x * x;
  for (double x : to_f64(g2)) want += x * x;
  const TensorView gs[] = {g1.view(), g2.view()};
  auto norm = global_grad_norm(ctx, gs);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm.value(), std::sqrt(want));  // integer squares: exact in fp64 whatever the order
  auto pre = clip_grad_norm(ctx, gs, 1.0);
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(pre.value(), std::sqrt(want));
  auto post = global_grad_norm(ctx, gs);
  // After scaling by 1/(norm + 1e-6) the norm is 1 up to the fp32/bf16 rounding of each element.
  EXPECT_NEAR(post.value(), 1.0, 4.0 * unit_roundoff(DType::kBF16));
  auto again = clip_grad_norm(ctx, gs, 10.0);  // below max: untouched
  EXPECT_EQ(again.value(), post.value());
}

}  // namespace
}  // namespace vlpar
