// The nn decoder stack at TP1 (no MPI): loss and every parameter gradient against the fp64 reference stack
// (tests/nn_reference.hpp) under the derived rule (tolerances.hpp kDecoderStack), the reference backward against
// finite differences, determinism, and SP at TP1 being a no-op.
// StackRun: ./build/cpu/tests/test_nn_stack
#include <gtest/gtest.h>

#include "fd_check.hpp"
#include "nn_reference.hpp"
#include "test_util.hpp"
#include "vlpar/nn/decoder.hpp"

namespace vlpar::test {
namespace {

constexpr uint64_t kSeed = 987654321;

struct StackRun {
  double loss = 0;
  std::vector<std::vector<double>> grads;
  std::vector<std::vector<double>> weights;
};

StackRun run_tp1(const nn::TransformerConfig& cfg, HostBatch& hb, bool sp) {
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, nn::TensorParallel{nullptr, sp}, kSeed, alloc);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  nn::DecoderStash stash;
  const nn::DecoderBatch b = batch_views(hb);
  auto r = model->forward(ctx, b, stash);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  const Status s = model->backward(ctx, b, stash);
  EXPECT_TRUE(s.ok()) << s.to_string();
  StackRun out;
  out.loss = r.ok() ? r->loss : 0.0;
  out.grads = views_as<double>(model->grads());
  out.weights = views_as<double>(model->params());
  return out;
}

template <class S>
std::vector<std::vector<S>> cast_all(const std::vector<std::vector<double>>& w) {
  std::vector<std::vector<S>> out;
  for (const auto& v : w) out.push_back(cast_vec<S>(v));
  return out;
}

TEST(NnStack, Tp1MatchesFp64Reference) {
  const nn::TransformerConfig cfg = tiny_decoder_config();
  HostBatch hb = make_host_batch({11, 9}, cfg.vocab, 5, cfg.ignore_index);
  const StackRun got = run_tp1(cfg, hb, false);
  const auto ref = reference_decoder<double>(cfg, got.weights, hb);
  const auto naive = reference_decoder<float>(cfg, cast_all<float>(got.weights), hb);
  EXPECT_TRUE(close_to_reference("loss", std::vector<double>{got.loss}, std::vector<double>{ref.loss},
                                 std::vector<double>{double(naive.loss)}, Shape{1},
                                 TolOp::kDecoderStack, DType::kF32));
  const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
  for (size_t i = 0; i < layout.size(); ++i)
    EXPECT_TRUE(close_to_reference("grad " + layout[i].name, got.grads[i], ref.grads[i], to_double(naive.grads[i]),
                                   layout[i].full_shape, TolOp::kDecoderStack, DType::kF32));
}

// The fp64 reference backward itself, against central differences of its forward, on a few tensors.
TEST(NnStack, ReferenceBackwardMatchesFiniteDifferences) {
  const nn::TransformerConfig cfg = tiny_decoder_config();
  HostBatch hb = make_host_batch({11, 9}, cfg.vocab, 5, cfg.ignore_index);
  const StackRun got = run_tp1(cfg, hb, false);
  const auto ref = reference_decoder<double>(cfg, got.weights, hb);
  const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
  // embedding, layer-0 input norm, q, k, o; layer-1 gate/up, down; final norm, LM head
  for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(5), size_t(15), size_t(16), size_t(17),
                   size_t(18)}) {
    auto loss = [&](const std::vector<double>& x) {
      auto w = got.weights;
      w[i] = x;
      return reference_decoder<double>(cfg, w, hb).loss;
    };
    const int64_t stride = std::max<int64_t>(1, int64_t(got.weights[i].size()) / 40);
    EXPECT_TRUE(finite_diff_matches(layout[i].name, loss, got.weights[i], ref.grads[i], stride));
  }
}

TEST(NnStack, BitwiseDeterministicAndSequenceParallelIsANoOpAtTp1) {
  const nn::TransformerConfig cfg = tiny_decoder_config();
  HostBatch hb = make_host_batch({11, 9}, cfg.vocab, 5, cfg.ignore_index);
  const StackRun a = run_tp1(cfg, hb, false), b = run_tp1(cfg, hb, false), c = run_tp1(cfg, hb, true);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.loss, c.loss);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_EQ(a.grads[i], b.grads[i]) << "param " << i;
    EXPECT_EQ(a.grads[i], c.grads[i]) << "param " << i;
  }
}

TEST(NnStack, BackwardAccumulatesAndReportsGradientsInReverseOrder) {
  const nn::TransformerConfig cfg = tiny_decoder_config();
  HostBatch hb = make_host_batch({11, 9}, cfg.vocab, 5, cfg.ignore_index);
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kSeed, alloc).value();
  const nn::DecoderBatch b = batch_views(hb);
  nn::DecoderStash st;
  std::vector<size_t> order;
  std::vector<std::vector<double>> at_ready(model.num_params());
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_TRUE(model.forward(ctx, b, st).ok());
    ASSERT_TRUE(model.backward(ctx, b, st, 1.f, [&](size_t i) {
                  if (rep == 0) order.push_back(i);
                  at_ready[i] = to_f64(model.grads()[i]);  // what a DDP bucket would pack at this moment
                  return Status::Ok();
                }).ok());
    if (rep == 0) {
      ASSERT_EQ(order.size(), model.num_params());
      for (size_t k = 0; k < order.size(); ++k) EXPECT_EQ(order[k], model.num_params() - 1 - k);
    }
    // A gradient reported ready is final: nothing changes it later in the same backward.
    for (size_t i = 0; i < model.num_params(); ++i)
      EXPECT_EQ(at_ready[i], to_f64(model.grads()[i])) << model.layout()[i].name << " changed after ready()";
  }
  const StackRun once = run_tp1(cfg, hb, false);
  const auto twice = views_as<double>(model.grads());
  // Accumulation, not overwrite: twice the single-pass gradient up to the reordering of a few fp32 additions
  // (an overwrite would be off by 100%).
  for (size_t i = 0; i < twice.size(); ++i) {
    std::vector<double> doubled = once.grads[i];
    for (double& x : doubled) x *= 2;
    EXPECT_TRUE(all_close("accumulated param " + std::to_string(i), twice[i], doubled,
                          Shape{int64_t(doubled.size())}, 1e-5 * max_abs(doubled)));
  }
}

TEST(NnStack, BadInputsAreNamedErrors) {
  const nn::TransformerConfig cfg = tiny_decoder_config();
  HostBatch hb = make_host_batch({11, 9}, cfg.vocab, 5, cfg.ignore_index);
  hb.ids[3] = cfg.vocab + 1;
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kSeed, alloc).value();
  nn::DecoderStash st;
  auto r = model.forward(ctx, batch_views(hb), st);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("id 65 at position 3 is outside the vocab"), std::string::npos)
      << r.status().to_string();
  Context no_alloc = test_ctx();
  hb.ids[3] = 1;
  r = model.forward(no_alloc, batch_views(hb), st);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no allocator"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace vlpar::test
