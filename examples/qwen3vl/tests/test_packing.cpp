// A packed batch gives every sample the same logits and, with the loss weighting of a mean over the whole pack,
// the same gradients as running each sample alone: no attention across samples, MRoPE positions restarting per
// sample, labels shifted within each sample. Run on the dense and MoE fixtures (the MoE one with the aux
// coefficient set to 0: the load-balancing loss is a statistic of the whole pack by definition, so it is the one
// term that does not decompose over samples).
// Tolerance: both sides use the same fp32 kernels; only GEMM blocking over a different number of rows and the
// order of the weight-gradient sums over tokens change, a few u32 = 6e-8 per op over ~40 ops → bound 1e-5
// relative to each tensor's largest value.
#include "model_test_util.hpp"

namespace qwen3vl {
namespace {

void check_packing(const std::string& name) {
  test::Loaded packed, alone;
  auto no_aux = [](Config& c) { c.text.router_aux_loss_coef = 0.0; };
  test::load(packed, name, Freeze{}, no_aux);
  test::load(alone, name, Freeze{}, no_aux);
  ASSERT_FALSE(packed.batch->images_per_sample.empty());
  Stash ps;
  Result<StepLoss> pl = packed.model->forward(packed.ctx, packed.batch->view(), ps);
  ASSERT_TRUE(pl.ok()) << pl.status().message();
  Tensor plog = packed.model->logits(packed.ctx, ps, packed.alloc).value();
  ASSERT_TRUE(packed.model->backward(packed.ctx, packed.batch->view(), ps).ok());

  const int64_t B = packed.batch->num_samples();
  const std::vector<int64_t>& cu = packed.batch->cu_seqlens;
  ASSERT_GE(B, 2);
  double weighted = 0;
  for (int64_t s = 0; s < B; ++s) {
    const vlpar::data::PackedBatch sample = test::sample_of(*alone.batch, s);
    // The pack's positions restart per sample: its columns of sample s are the sample's positions alone.
    Result<vlpar::data::MropePositions> own = vlpar::data::mrope_positions(
        sample.input_ids, sample.cu_seqlens, sample.image_grids, sample.video_grids,
        alone.model->config().mrope_desc());
    ASSERT_TRUE(own.ok()) << own.status().message();
    EXPECT_EQ(own.value().positions, sample.positions) << name << " sample " << s;
    const Batch b = sample.view();
    Stash st;
    Result<StepLoss> l = alone.model->forward(alone.ctx, b, st);
    ASSERT_TRUE(l.ok()) << "sample " << s << ": " << l.status().message();
    Tensor log = alone.model->logits(alone.ctx, st, alone.alloc).value();
    EXPECT_LE(test::rel_diff(log, plog.view().slice(0, cu[s], cu[s + 1])), 1e-5) << name << " sample " << s;
    const double w = double(l.value().num_label_tokens) / double(pl.value().num_label_tokens);
    weighted += w * l.value().ce_loss;
    ASSERT_TRUE(alone.model->backward(alone.ctx, b, st, float(w)).ok());
  }
  EXPECT_NEAR(weighted, pl.value().ce_loss, 1e-5 * pl.value().ce_loss);
  const nn::ParamRegistry& pr = packed.model->registry();
  for (size_t i = 0; i < pr.size(); ++i)
    EXPECT_LE(test::rel_diff(alone.model->registry().grad(i), pr.grad(i)), 1e-5) << name << " " << pr.name(i);
}

TEST(Packing, DenseSamplesMatchRunningAlone) { check_packing("dense"); }
TEST(Packing, MoeSamplesMatchRunningAlone) { check_packing("moe"); }

}  // namespace
}  // namespace qwen3vl
