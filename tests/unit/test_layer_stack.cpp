// The layer interface of nn (include/vlpar/nn/layer.hpp) on the decoder layer (nn/decoder_layer.hpp):
//   - DecoderModel with Recompute::kFull gives the loss and every gradient of Recompute::kNone bit for bit (the
//     recomputed stash is the forward's), and holds less memory at its peak;
//   - stash_bytes(N, mode) is exactly the bytes a layer's stash holds after forward under `mode` (the allocator's
//     count; a MoE layer's dispatch plan added), dense and MoE;
//   - MoE layers over one step's router statistics: selective and full recompute give the output, dx, every
//     gradient and the statistics of kNone bit for bit (recompute adds nothing to the statistics), with a lower
//     peak;
//   - a stack of layers [0, 1) and one of [1, 2), run one after the other, equal the whole stack bit for bit (the
//     pipeline-stage cut), forward and backward;
//   - flops() counts the projections and the causal attention pairs (checked against the formula by hand).
#include <gtest/gtest.h>

#include <optional>

#include "nn_reference.hpp"
#include "test_util.hpp"
#include "vlpar/core/weight_grad_queue.hpp"
#include "vlpar/nn/decoder.hpp"

namespace vlpar::test {
namespace {

constexpr uint64_t kSeed = 424242;

// A model of `cfg` on one thread, and the views of a batch of the given sample lengths.
struct ModelSetup {
  Allocator alloc;
  Context ctx = test_ctx(1);
  HostBatch hb;
  Batch batch;
  nn::PackedSeq seq;
  std::optional<nn::DecoderModel> model;
  ModelSetup(const nn::TransformerConfig& cfg, const std::vector<int>& lengths, uint64_t data_seed) {
    ctx.allocator = &alloc;
    hb = make_host_batch(lengths, cfg.vocab, data_seed, cfg.ignore_index);
    batch = batch_views(hb);
    seq = nn::PackedSeq{batch.cu_seqlens, batch.positions};
    auto m = nn::DecoderModel::create(ctx, cfg, {}, kSeed, alloc);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) model.emplace(std::move(m).value());
  }
};

struct StackRun {
  double loss = 0;
  std::vector<std::vector<double>> grads;
  int64_t peak = 0;
};

StackRun run(const nn::TransformerConfig& cfg, HostBatch& hb, nn::Recompute r) {
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kSeed, alloc);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  model->set_recompute(r);
  alloc.reset_peak(Device::cpu());
  const int64_t base = alloc.stats(Device::cpu()).current_bytes;
  nn::DecoderStash st;
  const Batch b = batch_views(hb);
  auto l = model->forward(ctx, b, st);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_TRUE(model->backward(ctx, b, st).ok());
  return {l.ok() ? l->loss : 0.0, views_as<double>(model->grads()), alloc.stats(Device::cpu()).peak_bytes - base};
}

TEST(LayerStack, FullRecomputeIsBitwiseTheSameAndSmaller) {
  nn::TransformerConfig cfg = tiny_decoder_config();
  cfg.num_layers = 3;
  HostBatch hb = make_host_batch({13, 7, 10}, cfg.vocab, 5, cfg.ignore_index);
  const StackRun keep = run(cfg, hb, nn::Recompute::kNone), redo = run(cfg, hb, nn::Recompute::kFull);
  EXPECT_EQ(keep.loss, redo.loss);
  ASSERT_EQ(keep.grads.size(), redo.grads.size());
  for (size_t i = 0; i < keep.grads.size(); ++i) EXPECT_EQ(keep.grads[i], redo.grads[i]) << "parameter " << i;
  EXPECT_LT(redo.peak, keep.peak);
}

TEST(LayerStack, StashBytesAreWhatTheStashHolds) {
  nn::TransformerConfig cfg = tiny_decoder_config();
  for (bool qk : {false, true}) {
    cfg.qk_norm = qk;
    ModelSetup t(cfg, {9, 6}, 7);
    ASSERT_TRUE(t.model);
    Allocator& alloc = t.alloc;
    const Context& ctx = t.ctx;
    const nn::PackedSeq& seq = t.seq;
    const int64_t N = t.batch.input_ids.numel();
    const nn::DecoderModel* model = &*t.model;
    Tensor x = random_tensor(alloc, {N, cfg.hidden}, DType::kF32, 3), y = Tensor::empty(alloc, {N, cfg.hidden}, DType::kF32).value();
    const nn::DecoderLayer layer = model->layer(0);
    const int64_t before = alloc.stats(Device::cpu()).current_bytes;
    nn::DecoderLayer::Stash st;
    ASSERT_TRUE(layer.forward(ctx, y, x, seq, st).ok());
    EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes - before, layer.stash_bytes(N, nn::Recompute::kNone))
        << "qk_norm " << qk;
    layer.drop(st, nn::Recompute::kSelective);
    EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes - before, layer.stash_bytes(N, nn::Recompute::kSelective))
        << "qk_norm " << qk;
    layer.drop(st, nn::Recompute::kFull);
    EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes, before);
    EXPECT_EQ(layer.stash_bytes(N, nn::Recompute::kFull), 0);
    EXPECT_EQ(layer.params(), (nn::ParamRange{1, nn::DecoderModel::params_per_layer(cfg)}));
  }
}

TEST(LayerStack, TwoRangesEqualTheWholeStack) {
  nn::TransformerConfig cfg = tiny_decoder_config();
  cfg.num_layers = 2;
  ModelSetup t(cfg, {11, 8}, 9);
  ASSERT_TRUE(t.model);
  Allocator& alloc = t.alloc;
  const Context& ctx = t.ctx;
  const nn::PackedSeq& seq = t.seq;
  nn::DecoderModel* model = &*t.model;
  const int64_t N = t.batch.input_ids.numel(), H = cfg.hidden;
  Tensor x = random_tensor(alloc, {N, H}, DType::kF32, 11), dout = random_tensor(alloc, {N, H}, DType::kF32, 12);
  Tensor dx_whole = Tensor::empty(alloc, {N, H}, DType::kF32).value(), dx_split = Tensor::empty(alloc, {N, H}, DType::kF32).value();
  const nn::LayerStack<nn::DecoderLayer> whole = model->layers();
  nn::LayerStack<nn::DecoderLayer>::Stash sw;
  auto yw = whole.forward(ctx, x, seq, sw);
  ASSERT_TRUE(yw.ok());
  const std::vector<double> out_whole = to_f64(yw.value());
  ASSERT_TRUE(whole.backward(ctx, dx_whole, dout, seq, sw, {}).ok());
  const std::vector<std::vector<double>> g_whole = views_as<double>(model->grads());
  ASSERT_TRUE(model->zero_grads().ok());
  // Stage 0 = layer 0, stage 1 = layer 1: stage 1's input is stage 0's output, its dx is stage 0's dout.
  const nn::LayerStack<nn::DecoderLayer> s0 = whole.range(0, 1), s1 = whole.range(1, 2);
  nn::LayerStack<nn::DecoderLayer>::Stash st0, st1;
  auto y0 = s0.forward(ctx, x, seq, st0);
  ASSERT_TRUE(y0.ok());
  auto y1 = s1.forward(ctx, y0.value(), seq, st1);
  ASSERT_TRUE(y1.ok());
  EXPECT_EQ(to_f64(y1.value()), out_whole);
  Tensor d_mid = Tensor::empty(alloc, {N, H}, DType::kF32).value();
  ASSERT_TRUE(s1.backward(ctx, d_mid, dout, seq, st1, {}).ok());
  ASSERT_TRUE(s0.backward(ctx, dx_split, d_mid, seq, st0, {}).ok());
  EXPECT_TRUE(bitwise_equal("dx", dx_split, dx_whole));
  EXPECT_EQ(views_as<double>(model->grads()), g_whole);
}

TEST(LayerStack, FlopsCountProjectionsAndCausalPairs) {
  nn::TransformerConfig cfg = tiny_decoder_config();
  ModelSetup t(cfg, {5, 3}, 1);
  ASSERT_TRUE(t.model);
  const double H = double(cfg.hidden), D = double(cfg.head_dim), hq = cfg.heads, hkv = cfg.kv_heads,
               I = double(cfg.intermediate), N = 8;
  const double proj = 2 * N * H * (hq + 2 * hkv) * D + 2 * N * hq * D * H + 2 * N * H * 2 * I + 2 * N * I * H;
  const double pairs = 5 * 6 / 2 + 3 * 4 / 2;
  EXPECT_DOUBLE_EQ(t.model->layer(0).flops(t.seq), proj + 4 * D * hq * pairs);
}

// The split backward of the zero-bubble pipeline schedules (core/weight_grad_queue.hpp): a LayerStack's backward
// with ctx.weight_grads set (I) writes the same dx as the full backward and queues exactly
// DecoderLayer::weight_stash_bytes of operands (nothing else stays allocated); running the queue (W) then gives
// every gradient and the order of the ready() hooks of the full backward, bitwise. Dense layers with and without
// q/k norm, under kNone and kFull recompute.
TEST(LayerStack, PipelineSplitBackwardEqualsTheFullOneBitwise) {
  nn::TransformerConfig cfg = tiny_decoder_config();
  cfg.num_layers = 2;
  for (bool qk : {false, true})
    for (nn::Recompute mode : {nn::Recompute::kNone, nn::Recompute::kFull}) {
      SCOPED_TRACE(fmt::format("qk_norm {} recompute {}", qk, int(mode)));
      cfg.qk_norm = qk;
      ModelSetup t(cfg, {11, 8}, 9);
      ASSERT_TRUE(t.model);
      Allocator& alloc = t.alloc;
      const Context& ctx = t.ctx;
      nn::DecoderModel* model = &*t.model;
      model->set_recompute(mode);
      const int64_t N = t.batch.input_ids.numel(), H = cfg.hidden;
      Tensor x = random_tensor(alloc, {N, H}, DType::kF32, 11), dout = random_tensor(alloc, {N, H}, DType::kF32, 12);
      Tensor dx_full = Tensor::empty(alloc, {N, H}, DType::kF32).value();
      Tensor dx_split = Tensor::empty(alloc, {N, H}, DType::kF32).value();
      const nn::LayerStack<nn::DecoderLayer> stack = model->layers();
      std::vector<size_t> ready_full, ready_split;
      auto hook = [](std::vector<size_t>& v) {
        return nn::GradReadyFn([&v](size_t i) { v.push_back(i); return Status::Ok(); });
      };
      nn::LayerStack<nn::DecoderLayer>::Stash st;
      ASSERT_TRUE(stack.forward(ctx, x, t.seq, st).ok());
      ASSERT_TRUE(stack.backward(ctx, dx_full, dout, t.seq, st, hook(ready_full)).ok());
      const std::vector<std::vector<double>> g_full = views_as<double>(model->grads());
      ASSERT_TRUE(model->zero_grads().ok());

      const int64_t before = alloc.stats(Device::cpu()).current_bytes;
      ASSERT_TRUE(stack.forward(ctx, x, t.seq, st).ok());
      WeightGradQueue queue;
      Context ictx = ctx;
      ictx.weight_grads = &queue;
      ASSERT_TRUE(stack.backward(ictx, dx_split, dout, t.seq, st, hook(ready_split)).ok());
      EXPECT_EQ(to_f64(dx_split), to_f64(dx_full));
      EXPECT_TRUE(ready_split.empty()) << "a gradient was declared ready before W";
      int64_t predicted = 0;
      for (size_t l = 0; l < stack.size(); ++l) predicted += stack.layer(l).weight_stash_bytes(N);
      EXPECT_EQ(queue.bytes(), predicted);
      // The stash and the layers' outputs are gone: only the queue's operands stay.
      EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes - before, predicted);
      ASSERT_TRUE(queue.run(ctx).ok());
      EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes, before);
      EXPECT_TRUE(queue.empty());
      EXPECT_EQ(queue.bytes(), 0);
      const std::vector<std::vector<double>> g_split = views_as<double>(model->grads());
      ASSERT_EQ(g_split.size(), g_full.size());
      for (size_t i = 0; i < g_full.size(); ++i) EXPECT_EQ(g_split[i], g_full[i]) << "parameter " << i;
      EXPECT_EQ(ready_split, ready_full);
    }
}

// Two MoE decoder layers (attention without q/k norm, E = 4 experts, top-2) over random weights and one step's
// router statistics, run as a LayerStack under a recompute policy.
struct MoeStackRun {
  std::vector<double> out, dx;
  std::vector<std::vector<double>> grads;
  RouterAuxStats stats;
  int64_t peak = 0;
};

constexpr int kMoeLayers = 2;

MoeStackRun run_moe(nn::Recompute mode, bool check_bytes = false, bool split = false, int expert_inter = 24) {
  nn::TransformerConfig cfg = tiny_decoder_config();
  const nn::MoeConfig mc{4, 2, expert_inter};
  const int64_t H = cfg.hidden, D = cfg.head_dim, hq = cfg.heads, hkv = cfg.kv_heads, E = mc.num_experts,
                I = mc.intermediate;
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  HostBatch hb = make_host_batch({9, 6, 4}, cfg.vocab, 3, cfg.ignore_index);
  const Batch b = batch_views(hb);
  const nn::PackedSeq seq{b.cu_seqlens, b.positions};
  const int64_t N = b.input_ids.numel();
  const std::vector<Shape> shapes = {{H}, {hq * D, H}, {hkv * D, H}, {hkv * D, H}, {H, hq * D},
                                     {H}, {E, H},      {E, H, 2 * I}, {E, I, H}};
  std::vector<Tensor> w, g;
  for (int l = 0; l < kMoeLayers; ++l)
    for (size_t p = 0; p < shapes.size(); ++p) {
      w.push_back(random_tensor(alloc, shapes[p], DType::kF32, 100 * uint64_t(l) + p, -0.3f, 0.3f));
      g.push_back(Tensor::zeros(alloc, shapes[p], DType::kF32).value());
    }
  MoeStackRun r;
  std::vector<nn::DecoderLayer> layers;
  for (size_t l = 0; l < kMoeLayers; ++l) {
    auto at = [&](const std::vector<Tensor>& t, size_t p) { return t[l * shapes.size() + p].view(); };
    const size_t first = l * shapes.size();
    auto attn = [&](const std::vector<Tensor>& t) {
      nn::AttentionWeights a;
      a.norm = at(t, 0), a.q = at(t, 1), a.k = at(t, 2), a.v = at(t, 3), a.o = at(t, 4);
      return a;
    };
    auto moe = [&](const std::vector<Tensor>& t) { return nn::MoeWeights{at(t, 5), at(t, 6), at(t, 7), at(t, 8)}; };
    layers.emplace_back(cfg, nn::TensorParallel{}, nn::AttentionBlock(cfg, {}, attn(w), attn(g), first),
                        nn::MoeBlock(cfg, mc, {}, moe(w), moe(g), first + 5),
                        nn::ParamRange{first, shapes.size()}, nn::MoeLoss{&r.stats, 0.25f});
  }
  if (check_bytes) {  // one layer's stash after forward (and after a selective drop) = stash_bytes
    Tensor x = random_tensor(alloc, {N, H}, DType::kF32, 5), y = Tensor::empty(alloc, {N, H}, DType::kF32).value();
    const int64_t before = alloc.stats(Device::cpu()).current_bytes;
    nn::DecoderLayer::Stash st;
    EXPECT_TRUE(layers[0].forward(ctx, y, x, seq, st).ok());
    const int64_t plan_bytes = st.moe.dispatch.host_bytes();
    EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes - before + plan_bytes,
              layers[0].stash_bytes(N, nn::Recompute::kNone));
    layers[0].drop(st, nn::Recompute::kSelective);
    EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes - before, layers[0].stash_bytes(N, nn::Recompute::kSelective));
    return r;
  }
  const nn::LayerStack<nn::DecoderLayer> stack(std::move(layers), mode);
  Tensor x = random_tensor(alloc, {N, H}, DType::kF32, 7), dout = random_tensor(alloc, {N, H}, DType::kF32, 8);
  Tensor dx = Tensor::empty(alloc, {N, H}, DType::kF32).value();
  alloc.reset_peak(Device::cpu());
  const int64_t base = alloc.stats(Device::cpu()).current_bytes;
  {
    nn::LayerStack<nn::DecoderLayer>::Stash st;
    auto y = stack.forward(ctx, x, seq, st);
    EXPECT_TRUE(y.ok()) << y.status().to_string();
    if (!y.ok()) return r;
    r.out = to_f64(y.value());
    if (!split) {
      EXPECT_TRUE(stack.backward(ctx, dx, dout, seq, st, {}).ok());
    } else {  // I, then W: only the queue's operands stay in between
      WeightGradQueue queue;
      Context ictx = ctx;
      ictx.weight_grads = &queue;
      EXPECT_TRUE(stack.backward(ictx, dx, dout, seq, st, {}).ok());
      int64_t predicted = 0;
      for (size_t l = 0; l < stack.size(); ++l) predicted += stack.layer(l).weight_stash_bytes(N);
      EXPECT_EQ(queue.bytes(), predicted);
      EXPECT_EQ(alloc.stats(Device::cpu()).current_bytes - base, predicted) << "recompute " << int(mode);
      EXPECT_TRUE(queue.run(ctx).ok());
    }
  }
  r.peak = alloc.stats(Device::cpu()).peak_bytes - base;
  r.dx = to_f64(dx);
  for (const Tensor& t : g) r.grads.push_back(to_f64(t));
  return r;
}

TEST(LayerStack, MoeRecomputeIsBitwiseTheSameAndLeavesTheRouterStatistics) {
  const MoeStackRun keep = run_moe(nn::Recompute::kNone);
  ASSERT_EQ(keep.stats.rows, int64_t(kMoeLayers) * 19);  // each layer's rows added once
  for (nn::Recompute mode : {nn::Recompute::kSelective, nn::Recompute::kFull}) {
    const MoeStackRun redo = run_moe(mode);
    const int m = int(mode);
    EXPECT_EQ(redo.out, keep.out) << m;
    EXPECT_EQ(redo.dx, keep.dx) << m;
    EXPECT_TRUE(redo.grads == keep.grads) << "recompute mode " << m << " changed a gradient";
    EXPECT_EQ(redo.stats.rows, keep.stats.rows) << m;
    EXPECT_EQ(redo.stats.counts, keep.stats.counts) << m;
    EXPECT_EQ(redo.stats.prob_sum, keep.stats.prob_sum) << m;
    EXPECT_LT(redo.peak, keep.peak) << m;
  }
}

TEST(LayerStack, MoeStashBytesAreWhatTheStashHolds) { run_moe(nn::Recompute::kNone, true); }

// The pipeline's split backward on MoE layers (router statistics, aux loss, grouped expert GEMMs): I then W equal
// the full backward bitwise, and the queue holds DecoderLayer::weight_stash_bytes between them. Expert width 16
// (2I = H): the full backward reuses the down projection's output-gradient buffer for d(gate|up), which the split
// one must not while W still reads it.
TEST(LayerStack, MoePipelineSplitBackwardEqualsTheFullOneBitwise) {
  for (int inter : {24, 16}) {
    for (nn::Recompute mode : {nn::Recompute::kNone, nn::Recompute::kSelective}) {
      SCOPED_TRACE(fmt::format("expert intermediate {}, recompute mode {}", inter, int(mode)));
      const MoeStackRun full = run_moe(mode, false, false, inter), split = run_moe(mode, false, true, inter);
      EXPECT_EQ(split.out, full.out);
      EXPECT_EQ(split.dx, full.dx);
      EXPECT_TRUE(split.grads == full.grads) << "I then W changed a gradient";
    }
  }
}

}  // namespace
}  // namespace vlpar::test
