// Activation recompute: selective (MLP/MoE blocks recomputed) and full (both blocks of every layer recomputed)
// give bitwise the same loss and gradients as keeping every stash, on the dense and the MoE fixture, and lower the
// step's peak activation memory (allocator peak above parameters, gradients and batch): full < selective < none.
#include "model_test_util.hpp"

namespace qwen3vl {
namespace {

struct Run {
  double loss = 0;
  int64_t activation_peak = 0;
  std::vector<std::vector<float>> grads;
};

Run run(const std::string& fixture, Recompute mode) {
  test::Loaded l;
  test::load(l, fixture);
  l.model->set_recompute(mode);
  const int64_t base = l.alloc.stats(vlpar::Device::cpu()).current_bytes;
  l.alloc.reset_peak(vlpar::Device::cpu());
  Run r;
  {
    Stash st;
    Result<StepLoss> loss = l.model->forward(l.ctx, l.batch->view(), st);
    EXPECT_TRUE(loss.ok());
    r.loss = loss.ok() ? loss.value().loss : 0;
    EXPECT_TRUE(l.model->backward(l.ctx, l.batch->view(), st).ok());
  }
  r.activation_peak = l.alloc.stats(vlpar::Device::cpu()).peak_bytes - base;
  const nn::ParamRegistry& reg = l.model->registry();
  for (size_t i = 0; i < reg.size(); ++i)
    r.grads.emplace_back(reg.grad(i).ptr<float>(), reg.grad(i).ptr<float>() + reg.grad(i).numel());
  return r;
}

void check(const std::string& fixture) {
  const Run none = run(fixture, Recompute::kNone);
  const Run sel = run(fixture, Recompute::kSelective);
  const Run full = run(fixture, Recompute::kFull);
  EXPECT_EQ(sel.loss, none.loss);
  EXPECT_EQ(full.loss, none.loss);
  EXPECT_TRUE(sel.grads == none.grads) << fixture << ": selective recompute changed a gradient";
  EXPECT_TRUE(full.grads == none.grads) << fixture << ": full recompute changed a gradient";
  EXPECT_LT(sel.activation_peak, none.activation_peak) << fixture;
  EXPECT_LT(full.activation_peak, sel.activation_peak) << fixture;
  std::printf("[recompute %s] activation peak: none %lld B, selective %lld B, full %lld B\n", fixture.c_str(),
              (long long)none.activation_peak, (long long)sel.activation_peak, (long long)full.activation_peak);
}

TEST(Recompute, DenseSameGradientsLessMemory) { check("dense"); }
TEST(Recompute, MoeSameGradientsLessMemory) { check("moe"); }

}  // namespace
}  // namespace qwen3vl
