// The nn decoder stack at TP1 (no MPI): loss and every parameter gradient against the fp64 reference stack
// (tests/nn_reference.hpp) under the derived rule (tolerances.hpp kDecoderStack), the reference backward against
// finite differences, determinism, and SP at TP1 being a no-op — for each config variant: Llama-style (1D rotary),
// q/k norm, interleaved MRoPE with three distinct position rows, tied LM head, and all three together (Qwen3-VL
// text). Also: MRoPE with equal rows is 1D rotary bit for bit; the blocks composed one by one outside DecoderModel
// (embedding → AttentionBlock/MlpBlock → LmHead) give DecoderModel's results bit for bit; frozen parameters (empty
// gradient views) leave every trainable gradient bitwise unchanged and are never reported ready; the embedding
// backward skips tokens marked overwritten (visual positions).
// Run: ./build/cpu/tests/test_nn_stack
#include <gtest/gtest.h>

#include "fd_check.hpp"
#include "nn_reference.hpp"
#include "test_util.hpp"
#include "vlpar/nn/decoder.hpp"
#include "vlpar/nn/lm_head.hpp"
#include "vlpar/nn/vocab_parallel.hpp"

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
  const Batch b = batch_views(hb);
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

// A config and the batch it runs on: MRoPE variants get three distinct position rows (add_mrope_positions).
struct Variant {
  std::string name;
  nn::TransformerConfig cfg;
  bool mrope = false;
};

std::vector<Variant> variants() {
  nn::TransformerConfig qkn = tiny_decoder_config();
  qkn.qk_norm = true;
  nn::TransformerConfig mrope = tiny_qwen3_config(false);
  mrope.qk_norm = false;
  nn::TransformerConfig tied = tiny_decoder_config();
  tied.tie_word_embeddings = true;
  return {Variant{"llama (1D rotary)", tiny_decoder_config(), false}, Variant{"qk_norm", qkn, false},
          Variant{"mrope (3 distinct rows)", mrope, true}, Variant{"tied head", tied, false},
          Variant{"qwen3 (qk_norm + mrope + tied)", tiny_qwen3_config(true), true}};
}

HostBatch variant_batch(const Variant& v) {
  HostBatch hb = make_host_batch({11, 9}, v.cfg.vocab, 5, v.cfg.ignore_index);
  if (v.mrope) add_mrope_positions(hb);
  return hb;
}

TEST(NnStack, Tp1MatchesFp64Reference) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    const nn::TransformerConfig& cfg = v.cfg;
    HostBatch hb = variant_batch(v);
    const StackRun got = run_tp1(cfg, hb, false);
    const auto ref = reference_decoder<double>(cfg, got.weights, hb);
    const auto naive = reference_decoder<float>(cfg, cast_all<float>(got.weights), hb);
    EXPECT_TRUE(close_to_reference(v.name + " loss", std::vector<double>{got.loss}, std::vector<double>{ref.loss},
                                   std::vector<double>{double(naive.loss)}, Shape{1}, TolOp::kDecoderStack,
                                   DType::kF32));
    const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
    ASSERT_EQ(got.grads.size(), layout.size());
    for (size_t i = 0; i < layout.size(); ++i)
      EXPECT_TRUE(close_to_reference(v.name + " grad " + layout[i].name, got.grads[i], ref.grads[i],
                                     to_double(naive.grads[i]), layout[i].full_shape, TolOp::kDecoderStack,
                                     DType::kF32));
  }
}

// bf16 (parameters and activations bf16; gradients, statistics and logits f32) against the fp64 reference on the
// same bf16 weights, under the default rule with naive = the reference in float that rounds to bf16 wherever the
// model stores a bf16 tensor (RoundTo<bf16>, nn_reference.hpp): the model differs from that only by f32 summation
// order, so its error is at most twice the naive's, plus the f32 output rounding (tolerances.hpp kDecoderStack).
TEST(NnStack, Bf16Tp1MatchesFp64ReferenceUnderTheBf16Rule) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    nn::TransformerConfig cfg = v.cfg;
    cfg.activation = DType::kBF16;
    HostBatch hb = variant_batch(v);
    const StackRun got = run_tp1(cfg, hb, false);  // weights: the bf16 values, widened exactly
    const auto ref = reference_decoder<double>(cfg, got.weights, hb);
    const auto naive = reference_decoder<float>(cfg, cast_all<float>(got.weights), hb, RoundTo<bf16>{});
    const auto f32_naive = reference_decoder<float>(cfg, cast_all<float>(got.weights), hb);
    EXPECT_TRUE(close_to_reference(v.name + " loss", std::vector<double>{got.loss}, std::vector<double>{ref.loss},
                                   std::vector<double>{double(naive.loss)}, Shape{1}, TolOp::kDecoderStack,
                                   DType::kF32));
    const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
    ASSERT_EQ(got.grads.size(), layout.size());
    double err = 0, f32_err = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
      EXPECT_TRUE(close_to_reference(v.name + " grad " + layout[i].name, got.grads[i], ref.grads[i],
                                     to_double(naive.grads[i]), layout[i].full_shape, TolOp::kDecoderStack,
                                     DType::kF32));
      err = std::max(err, max_abs_diff(got.grads[i], ref.grads[i]));
      f32_err = std::max(f32_err, max_abs_diff(to_double(f32_naive.grads[i]), ref.grads[i]));
    }
    EXPECT_GT(err, 100 * f32_err) << "the bf16 run is as exact as f32: its activations are not bf16";
  }
}

// The fp64 reference backward itself, against central differences of its forward, on a few tensors per variant:
// embedding (tied: both of its uses), layer-0 input norm, q, k, q_norm, k_norm; layer-1 o, gate/up, down; final
// norm, LM head.
TEST(NnStack, ReferenceBackwardMatchesFiniteDifferences) {
  const std::vector<std::string> names = {
      "model.embed_tokens.weight",          "model.layers.0.input_layernorm.weight",
      "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
      "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight",
      "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.gate_up_proj.weight",
      "model.layers.1.mlp.down_proj.weight",  "model.norm.weight",
      "lm_head.weight"};
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    const nn::TransformerConfig& cfg = v.cfg;
    HostBatch hb = variant_batch(v);
    const StackRun got = run_tp1(cfg, hb, false);
    const auto ref = reference_decoder<double>(cfg, got.weights, hb);
    const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
    int checked = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
      if (std::find(names.begin(), names.end(), layout[i].name) == names.end()) continue;
      auto loss = [&](const std::vector<double>& x) {
        auto w = got.weights;
        w[i] = x;
        return reference_decoder<double>(cfg, w, hb).loss;
      };
      const int64_t stride = std::max<int64_t>(1, int64_t(got.weights[i].size()) / 40);
      EXPECT_TRUE(finite_diff_matches(v.name + " " + layout[i].name, loss, got.weights[i], ref.grads[i], stride));
      ++checked;
    }
    // Every name applies except q/k norm without qk_norm and lm_head when tied.
    EXPECT_EQ(checked, int(names.size()) - (cfg.qk_norm ? 0 : 2) - (cfg.tie_word_embeddings ? 1 : 0));
  }
}

// For pure text the three MRoPE rows are equal and MRoPE is 1D rotary (spec §4.4): [3, N] positions with equal rows,
// [N] positions under an MRoPE config and a 1D config all give the same loss and gradients bit for bit.
TEST(NnStack, MropeWithEqualRowsIsOneDimensionalRotary) {
  nn::TransformerConfig one_d = tiny_qwen3_config(false);
  one_d.rope = nn::RopeKind::k1D;
  const nn::TransformerConfig mrope = tiny_qwen3_config(false);
  HostBatch flat = make_host_batch({11, 9}, mrope.vocab, 5, mrope.ignore_index);
  HostBatch rows = flat;
  for (int a = 0; a < 3; ++a) rows.mrope.insert(rows.mrope.end(), flat.positions.begin(), flat.positions.end());
  const StackRun a = run_tp1(one_d, flat, false), b = run_tp1(mrope, flat, false), c = run_tp1(mrope, rows, false);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.loss, c.loss);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_EQ(a.grads[i], b.grads[i]) << "param " << i;
    EXPECT_EQ(a.grads[i], c.grads[i]) << "param " << i;
  }
  // Guard against a vacuous pass: distinct rows must change the loss.
  HostBatch image = flat;
  add_mrope_positions(image);
  EXPECT_NE(run_tp1(mrope, image, false).loss, c.loss);
}

TEST(NnStack, BitwiseDeterministicAndSequenceParallelIsANoOpAtTp1) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    HostBatch hb = variant_batch(v);
    const StackRun a = run_tp1(v.cfg, hb, false), b = run_tp1(v.cfg, hb, false), c = run_tp1(v.cfg, hb, true);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.loss, c.loss);
    for (size_t i = 0; i < a.grads.size(); ++i) {
      EXPECT_EQ(a.grads[i], b.grads[i]) << "param " << i;
      EXPECT_EQ(a.grads[i], c.grads[i]) << "param " << i;
    }
  }
}

TEST(NnStack, BackwardAccumulatesAndReportsGradientsInReverseOrder) {
  for (const Variant& v : {variants().front(), variants().back()}) {
    SCOPED_TRACE(v.name);
    const nn::TransformerConfig& cfg = v.cfg;
    HostBatch hb = variant_batch(v);
    Allocator alloc;
    Context ctx = test_ctx();
    ctx.allocator = &alloc;
    auto model = nn::DecoderModel::create(ctx, cfg, {}, kSeed, alloc).value();
    const Batch b = batch_views(hb);
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
      // A gradient reported ready is final: nothing changes it later in the same backward (tied: the embedding
      // is reported only after both the LM head and the embedding lookup have added to it).
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
}

// ---- the blocks one by one, as a multimodal model composes them (no DecoderModel) ----------------------------

struct Composed {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // DecoderModel order; a frozen parameter's buffer as left after backward
  std::vector<size_t> ready;               // GradReadyFn calls, in order
};

constexpr float kSentinel = 7.25f;  // what a frozen parameter's (never passed) gradient buffer holds

// embedding → L × (AttentionBlock → MlpBlock) → LmHead on DecoderModel's weights (same seed), gradients into own
// buffers; frozen[i] passes an empty gradient view for parameter i instead of its buffer (filled with kSentinel).
Composed run_composed(const nn::TransformerConfig& cfg, HostBatch& hb, const std::vector<bool>& frozen) {
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  Composed out;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kSeed, alloc);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return out;
  const std::vector<TensorView> w = model->params();
  const size_t P = w.size();
  EXPECT_EQ(frozen.size(), P);
  std::vector<Tensor> buf;
  std::vector<TensorView> g(P);
  for (size_t i = 0; i < P; ++i) {
    buf.push_back(Tensor::zeros(alloc, w[i].shape, DType::kF32).value());
    if (frozen[i]) {
      for (int64_t k = 0; k < buf[i].numel(); ++k) buf[i].ptr<float>()[k] = kSentinel;
    } else {
      g[i] = buf[i].view();
    }
  }
  const nn::TensorParallel tp{};
  const Batch b = batch_views(hb);
  const nn::PackedSeq seq{b.cu_seqlens, b.positions};
  const int64_t N = b.input_ids.numel(), H = cfg.hidden;
  const int L = cfg.num_layers;
  const size_t per_layer = nn::DecoderModel::params_per_layer(cfg);
  std::vector<nn::AttentionBlock> attn;
  std::vector<nn::MlpBlock> mlp;
  for (int l = 0; l < L; ++l) {
    const size_t base = 1 + per_layer * size_t(l), o = base + nn::AttentionBlock::o_offset(cfg);
    auto pick = [&](const std::vector<TensorView>& t) {
      nn::AttentionWeights a{t[base], t[base + 1], t[base + 2], t[base + 3], t[o], {}, {}};
      if (cfg.qk_norm) {
        a.q_norm = t[base + nn::AttentionBlock::kQNormOffset];
        a.k_norm = t[base + nn::AttentionBlock::kKNormOffset];
      }
      return a;
    };
    attn.emplace_back(cfg, tp, pick(w), pick(g), base);
    const size_t m = base + nn::AttentionBlock::num_params(cfg);
    mlp.emplace_back(cfg, tp, nn::MlpWeights{w[m], w[m + 1], w[m + 2]}, nn::MlpWeights{g[m], g[m + 1], g[m + 2]}, m);
  }
  const size_t fn = 1 + per_layer * size_t(L), hw = cfg.tie_word_embeddings ? 0 : fn + 1;
  const nn::LmHead head(cfg, tp, {w[fn], w[hw]}, {g[fn], g[hw]}, fn);
  const Range vocab{0, cfg.vocab};

  std::vector<Tensor> x;
  for (int i = 0; i < 2 * L + 1; ++i) x.push_back(Tensor::empty(alloc, {N, H}, DType::kF32).value());
  std::vector<nn::AttentionStash> ast(static_cast<size_t>(L));
  std::vector<nn::MlpStash> mst(static_cast<size_t>(L));
  nn::LmHeadStash hst;
  EXPECT_TRUE(nn::vocab_parallel_embedding_forward(ctx, tp, x[0], w[0], b.input_ids, vocab, cfg.vocab).ok());
  for (int l = 0; l < L; ++l) {
    const size_t i = size_t(2 * l);
    EXPECT_TRUE(attn[size_t(l)].forward(ctx, x[i + 1], x[i], seq, ast[size_t(l)]).ok());
    EXPECT_TRUE(mlp[size_t(l)].forward(ctx, x[i + 2], x[i + 1], N, mst[size_t(l)]).ok());
  }
  const TensorView shifted(hb.labels.data(), DType::kI64, {int64_t(hb.labels.size())});  // the head's targets
  auto r = head.forward(ctx, x.back(), shifted, hst);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return out;
  out.loss = r->loss;

  const nn::GradReadyFn ready = [&](size_t i) {
    out.ready.push_back(i);
    return Status::Ok();
  };
  Tensor cur = Tensor::empty(alloc, {N, H}, DType::kF32).value(), next = Tensor::empty(alloc, {N, H}, DType::kF32).value();
  Status s = head.backward(ctx, cur, shifted, hst, 1.f, ready);
  EXPECT_TRUE(s.ok()) << s.to_string();
  for (int l = L - 1; l >= 0; --l) {
    s = mlp[size_t(l)].backward(ctx, next, cur, N, mst[size_t(l)], ready);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::swap(cur, next);
    s = attn[size_t(l)].backward(ctx, next, cur, seq, ast[size_t(l)], ready);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::swap(cur, next);
  }
  s = nn::vocab_parallel_embedding_backward(ctx, tp, g[0], cur, b.input_ids, vocab);
  EXPECT_TRUE(s.ok()) << s.to_string();
  if (!frozen[0]) {
    EXPECT_TRUE(ready(0).ok());
  }
  for (const Tensor& t : buf) out.grads.push_back(to_f64(t));
  return out;
}

std::vector<bool> frozen_by_name(const nn::TransformerConfig& cfg, const std::vector<std::string>& names) {
  const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
  std::vector<bool> f(layout.size(), false);
  size_t hits = 0;
  for (size_t i = 0; i < layout.size(); ++i)
    if (std::find(names.begin(), names.end(), layout[i].name) != names.end()) {
      f[i] = true;
      ++hits;
    }
  EXPECT_EQ(hits, names.size()) << "a name to freeze is not a parameter";
  return f;
}

// The public blocks composed by hand reproduce DecoderModel bit for bit (so a multimodal model can insert its own
// steps between them), and freezing parameters changes no trainable gradient by a single bit.
TEST(NnStack, BlocksComposedOneByOneMatchDecoderModelAndFreezingIsExact) {
  struct Case {
    std::string name;
    Variant v;
    std::vector<std::string> freeze;
  };
  const std::vector<Variant> vs = variants();
  const std::vector<Case> cases = {
      // Tied: freezing the embedding freezes the LM head too (one parameter).
      Case{"qwen3, frozen embedding/head + parts of every block", vs.back(),
           {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.o_proj.weight",
            "model.layers.1.input_layernorm.weight", "model.layers.1.self_attn.k_norm.weight",
            "model.layers.1.self_attn.v_proj.weight", "model.layers.1.mlp.gate_up_proj.weight",
            "model.norm.weight"}},
      Case{"llama, frozen LM head, down, k", vs.front(),
           {"lm_head.weight", "model.layers.0.mlp.down_proj.weight", "model.layers.0.post_attention_layernorm.weight",
            "model.layers.1.self_attn.k_proj.weight"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const nn::TransformerConfig& cfg = c.v.cfg;
    HostBatch hb = variant_batch(c.v);
    const StackRun model = run_tp1(cfg, hb, false);
    const std::vector<bool> none(model.grads.size(), false), frozen = frozen_by_name(cfg, c.freeze);
    const Composed all = run_composed(cfg, hb, none), some = run_composed(cfg, hb, frozen);
    EXPECT_EQ(all.loss, model.loss);
    EXPECT_EQ(some.loss, model.loss);
    ASSERT_EQ(all.grads.size(), model.grads.size());
    ASSERT_EQ(some.grads.size(), model.grads.size());
    std::vector<size_t> want_ready;
    for (size_t i = model.grads.size(); i-- > 0;) {
      EXPECT_EQ(all.grads[i], model.grads[i]) << "composed vs DecoderModel, param " << i;
      if (frozen[i]) {
        const std::vector<double> sentinel(some.grads[i].size(), double(kSentinel));
        EXPECT_EQ(some.grads[i], sentinel) << "frozen param " << i << "'s buffer was written";
      } else {
        EXPECT_EQ(some.grads[i], model.grads[i]) << "trainable param " << i << " changed by freezing others";
        want_ready.push_back(i);
      }
    }
    EXPECT_EQ(some.ready, want_ready) << "ready() must report exactly the trainable params, in reverse order";
    EXPECT_EQ(all.ready.size(), model.grads.size());
  }
}

// Visual positions (spec §4.1): the embedding rows of tokens marked overwritten get no gradient from them. Integer
// payloads make every sum exact, so the comparisons are bitwise.
TEST(NnStack, EmbeddingBackwardSkipsOverwrittenTokensAndFrozenTables) {
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  const int64_t V = 8, H = 5, N = 7;
  std::vector<int64_t> ids = {3, 1, 3, 7, 1, 0, 3};
  std::vector<int64_t> overwritten = {0, 1, 0, 0, 1, 0, 1};  // tokens 1, 4 and 6 carry visual embeddings
  const TensorView idv(ids.data(), DType::kI64, {N}), ov(overwritten.data(), DType::kI64, {N});
  Tensor dout = integer_tensor(alloc, {N, H}, DType::kF32, 11, -5, 5);
  Tensor masked = Tensor::zeros(alloc, {V, H}, DType::kF32).value();
  ASSERT_TRUE(nn::vocab_parallel_embedding_backward(ctx, {}, masked, dout, idv, {0, V}, ov).ok());
  std::vector<double> want(size_t(V * H), 0.0);
  for (int64_t n = 0; n < N; ++n)
    if (overwritten[size_t(n)] == 0)
      for (int64_t c = 0; c < H; ++c) want[size_t(ids[size_t(n)] * H + c)] += dout.ptr<float>()[n * H + c];
  EXPECT_EQ(to_f64(masked), want);
  EXPECT_GT(max_abs(want), 0.0);
  // Token 1 (id 1) and token 4 (id 1) are both overwritten: row 1 stays zero; row 3 keeps only tokens 0 and 2.
  for (int64_t c = 0; c < H; ++c) EXPECT_EQ(masked.ptr<float>()[1 * H + c], 0.f);
  // Zeroing those rows of dout instead is the same.
  for (int64_t n = 0; n < N; ++n)
    if (overwritten[size_t(n)] != 0)
      for (int64_t c = 0; c < H; ++c) dout.ptr<float>()[n * H + c] = 0.f;
  Tensor zeroed = Tensor::zeros(alloc, {V, H}, DType::kF32).value();
  ASSERT_TRUE(nn::vocab_parallel_embedding_backward(ctx, {}, zeroed, dout, idv, {0, V}).ok());
  EXPECT_TRUE(bitwise_equal("mask vs zeroed rows", masked, zeroed));
  // A frozen table (empty gradient view) is a no-op, not an error; a wrong-length mask is a named error.
  EXPECT_TRUE(nn::vocab_parallel_embedding_backward(ctx, {}, TensorView{}, dout, idv, {0, V}, ov).ok());
  const Status s = nn::vocab_parallel_embedding_backward(ctx, {}, zeroed, dout, idv, {0, V},
                                                         TensorView(overwritten.data(), DType::kI64, {N - 1}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("overwritten has 6 entries but there are 7 tokens"), std::string::npos) << s.to_string();
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
  // 3-row positions need an MRoPE config; an MRoPE config needs [3, N] or [N].
  add_mrope_positions(hb);
  r = model.forward(ctx, batch_views(hb), st);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("but 1D rotary takes [20]"), std::string::npos) << r.status().to_string();
  const nn::TransformerConfig q = tiny_qwen3_config();
  auto qwen = nn::DecoderModel::create(ctx, q, {}, kSeed, alloc).value();
  Batch two_rows = batch_views(hb);
  two_rows.positions = TensorView(hb.mrope.data(), DType::kI64, {2, 20});
  r = qwen.forward(ctx, two_rows, st);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("positions must be contiguous i64 [3, 20] (MRoPE) or [20]"), std::string::npos)
      << r.status().to_string();
}

}  // namespace
}  // namespace vlpar::test
