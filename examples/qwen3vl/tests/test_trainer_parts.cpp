// The trainer's pieces: the library's DistributedOptimizer over the Qwen3-VL registry (replicated and ZeRO-1 state on one rank) against a
// plain per-tensor AdamW written here (weight decay only on matrices, clipping by the global norm, non-finite norms
// skip the update).
#include <gtest/gtest.h>

#include <cmath>

#include "model_test_util.hpp"
#include "vlpar/comm/single_communicator.hpp"
#include "vlpar/parallel/distributed_optimizer.hpp"

namespace qwen3vl {
namespace {

class RegistryOptimizer : public ::testing::TestWithParam<bool> {};

TEST_P(RegistryOptimizer, MatchesPlainAdamWWithDecayOnMatricesAndClipping) {
  test::Loaded l;
  test::load(l, "dense");
  Model& m = *l.model;
  nn::ParamRegistry& reg = m.registry();
  // Deterministic fake gradients.
  for (size_t i = 0; i < reg.size(); ++i)
    for (int64_t k = 0; k < reg.grad(i).numel(); ++k) reg.grad(i).ptr<float>()[k] = float(std::sin(0.37 * double(k + 13 * i)));
  // Expected: plain AdamW per tensor in double precision.
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, max_norm = 1.0;
  double sq = 0;
  for (size_t i = 0; i < reg.size(); ++i)
    for (int64_t k = 0; k < reg.grad(i).numel(); ++k) sq += double(reg.grad(i).ptr<float>()[k]) * reg.grad(i).ptr<float>()[k];
  const double norm = std::sqrt(sq), clip = norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
  std::vector<std::vector<double>> want;
  for (size_t i = 0; i < reg.size(); ++i) {
    std::vector<double> p(reg.value(i).ptr<float>(), reg.value(i).ptr<float>() + reg.value(i).numel());
    const bool decay = reg.entry(i).shard.full_shape.ndim >= 2;
    for (size_t k = 0; k < p.size(); ++k) {
      const double g = float(reg.grad(i).ptr<float>()[k] * float(clip));
      const double mm = (1 - b1) * g, vv = (1 - b2) * g * g;
      if (decay) p[k] -= lr * wd * p[k];
      p[k] -= lr * (mm / (1 - b1)) / (std::sqrt(vv / (1 - b2)) + eps);
    }
    want.push_back(std::move(p));
  }
  vlpar::parallel::OptimizerConfig oc;
  oc.adamw.lr = float(lr);
  oc.adamw.beta1 = float(b1);
  oc.adamw.beta2 = float(b2);
  oc.adamw.eps = float(eps);
  oc.adamw.weight_decay = float(wd);
  oc.max_grad_norm = max_norm;
  oc.zero1 = GetParam();
  oc.bucket_bytes = 4096;  // several buckets, parameters split across bucket edges
  vlpar::comm::SingleCommunicator dp;
  auto params = vlpar::parallel::optim_params_from_registry(reg, m.backward_order(), vlpar::parallel::OptimizerGroups{});
  ASSERT_TRUE(params.ok()) << params.status().to_string();
  auto o = vlpar::parallel::DistributedOptimizer::create(l.ctx, vlpar::parallel::OptimizerGroups::uniform(&dp, nullptr),
                                                        std::move(params).value(), oc, l.alloc);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  Result<vlpar::parallel::StepReport> r = o.value().step(l.ctx, lr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r.value().applied);
  EXPECT_NEAR(r.value().grad_norm, norm, 1e-9 * norm);
  for (size_t i = 0; i < reg.size(); ++i)
    for (int64_t k = 0; k < reg.value(i).numel(); ++k)
      ASSERT_NEAR(reg.value(i).ptr<float>()[k], want[i][size_t(k)], 1e-6 + 1e-6 * std::abs(want[i][size_t(k)]))
          << reg.name(i) << "[" << k << "]";
  Result<vlpar::parallel::OptimizerState> st = o.value().state(true);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st.value().m.size(), reg.size());
  // A non-finite gradient norm leaves the parameters alone.
  const float before = reg.value(0).ptr<float>()[0];
  reg.grad(0).ptr<float>()[0] = NAN;
  Result<vlpar::parallel::StepReport> bad = o.value().step(l.ctx, lr);
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad.value().applied);
  EXPECT_EQ(reg.value(0).ptr<float>()[0], before);
  EXPECT_EQ(o.value().steps_taken(), 1);
}
INSTANTIATE_TEST_SUITE_P(Zero1, RegistryOptimizer, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Sharded" : "Replicated"; });

}  // namespace
}  // namespace qwen3vl
