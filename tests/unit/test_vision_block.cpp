// Qwen3-VL vision block and patch mergers (nn/vision_block.hpp, nn/patch_merger.hpp), TP = 1, f32 on the CPU:
// the fp64 reference backward (reference/vision.hpp) against finite differences; the kernels' forward, input
// gradient and every parameter gradient against the fp64 reference with the derived tolerance (kDecoderStack:
// the default rule); gradients accumulate; frozen parameters (empty gradient views) stay untouched while the
// others equal the unfrozen run bit for bit; the dx-free backward gives the same parameter gradients.
// Run: ./build/cpu/tests/test_vision_block
#include <gtest/gtest.h>

#include <string>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/nn/patch_merger.hpp"
#include "vlpar/nn/vision_block.hpp"
#include "vlpar/reference/vision.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;
namespace R = vlpar::reference;

// Hv 16, 2 heads of head_dim 8 (2D rotary: 2 row and 2 column frequencies), Iv 24, merge 2, D 12.
nn::VisionConfig tiny_config() {
  nn::VisionConfig c;
  c.hidden = 16;
  c.heads = 2;
  c.intermediate = 24;
  c.depth = 1;
  c.patch = 2;
  c.temporal_patch = 2;
  c.in_channels = 3;
  c.out_hidden = 12;
  c.num_position_embeddings = 16;
  c.deepstack_indexes = {0};
  return c;
}

// An image of 2×4 patches, a video of 2 frames of 4×2 and an image of 4×4: 8 + 16 + 16 = 40 patches, 4 segments.
const std::vector<VisionGrid> kGrids = {{1, 2, 4}, {2, 4, 2}, {1, 4, 4}};

/// Deterministic parameter values by name, rounded to f32: norm weights near 1, biases small, linear weights
/// with unit-variance outputs.
std::vector<double> init_param(const R::VisionParam& p, uint64_t seed) {
  Allocator a;
  const std::string& n = p.name;
  const bool bias = n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0;
  const bool norm = n.find("norm") != std::string::npos;
  float lo = -0.2f, hi = 0.2f;
  if (norm && !bias) lo = 0.5f, hi = 1.5f;
  if (!norm && !bias) {
    const float s = std::sqrt(3.f / float(p.shape[p.shape.ndim - 1]));
    lo = -s, hi = s;
  }
  return to_f64(random_tensor(a, p.shape, DType::kF32, seed, lo, hi));
}

Tensor make_f32(Allocator& a, const Shape& s, const std::vector<double>& v) {
  Tensor t = Tensor::empty(a, s, DType::kF32).value();
  for (size_t i = 0; i < v.size(); ++i) t.ptr<float>()[i] = float(v[i]);
  return t;
}

template <class S>
std::vector<std::vector<S>> cast_all(const std::vector<std::vector<double>>& w) {
  std::vector<std::vector<S>> out;
  for (const auto& v : w) out.push_back(cast_vec<S>(v));
  return out;
}

/// The encoder's parameters on the host (fp64 copies of f32 values) and as f32 tensors with gradient buffers.
struct Params {
  std::vector<R::VisionParam> info;
  std::vector<std::vector<double>> host;
  std::vector<Tensor> w, g;
};

Params make_params(Allocator& a, const nn::VisionConfig& cfg, uint64_t seed) {
  Params p;
  p.info = R::vision_encoder_params(cfg);
  for (size_t i = 0; i < p.info.size(); ++i) {
    p.host.push_back(init_param(p.info[i], seed + i));
    p.w.push_back(make_f32(a, p.info[i].shape, p.host.back()));
    // Gradients start non-zero to check that backward accumulates.
    p.g.push_back(random_tensor(a, p.info[i].shape, DType::kF32, seed + 1000 + i));
  }
  return p;
}

nn::VisionBlockWeights block_views(const std::vector<Tensor>& t, size_t p0) {
  auto v = [&](int k) { return t[p0 + size_t(k)].view(); };
  return {v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7), v(8), v(9), v(10), v(11)};
}
nn::PatchMergerWeights merger_views(const std::vector<Tensor>& t, size_t p0) {
  auto v = [&](int k) { return t[p0 + size_t(k)].view(); };
  return {v(0), v(1), v(2), v(3), v(4), v(5)};
}

nn::VisionSeq make_seq(Allocator& a, const nn::VisionConfig& cfg) {
  auto s = nn::make_vision_seq(a, cfg, kGrids);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

// --- reference backward vs finite differences ----------------------------------------------------------------

TEST(VisionBlockReference, BackwardMatchesFiniteDifferences) {
  const nn::VisionConfig cfg = tiny_config();
  Allocator a;
  Params p = make_params(a, cfg, 100);
  const R::VisionRefSeq seq = R::vision_ref_seq(kGrids, cfg.merge);
  const int64_t N = seq.num_patches;
  const auto x = to_f64(random_tensor(a, {N, cfg.hidden}, DType::kF32, 7));
  const auto G = to_f64(random_tensor(a, {N, cfg.hidden}, DType::kF32, 8));
  const size_t p0 = R::vision_block_param0(0);
  auto loss = [&](const std::vector<std::vector<double>>& w, const std::vector<double>& xx) {
    std::vector<double> y;
    R::VisionBlockRefStash<double> st;
    R::vision_block_forward(y, st, cfg, w, p0, xx, seq);
    return dot(y, G);
  };
  std::vector<double> y, dx;
  R::VisionBlockRefStash<double> st;
  R::vision_block_forward(y, st, cfg, p.host, p0, x, seq);
  std::vector<std::vector<double>> g;
  for (const auto& w : p.host) g.emplace_back(w.size(), 0.0);
  R::vision_block_backward(dx, g, G, st, cfg, p.host, p0, seq);
  EXPECT_TRUE(finite_diff_matches("block dx", [&](const std::vector<double>& v) { return loss(p.host, v); }, x, dx, 7));
  for (int k = 0; k < R::kVisionBlockParams; ++k) {
    auto lw = [&](const std::vector<double>& v) {
      auto w = p.host;
      w[p0 + size_t(k)] = v;
      return loss(w, x);
    };
    const int64_t stride = std::max<int64_t>(1, int64_t(g[p0 + size_t(k)].size()) / 30);
    EXPECT_TRUE(finite_diff_matches(p.info[p0 + size_t(k)].name, lw, p.host[p0 + size_t(k)], g[p0 + size_t(k)], stride));
  }
}

TEST(VisionBlockReference, MergerBackwardMatchesFiniteDifferences) {
  const nn::VisionConfig cfg = tiny_config();
  Allocator a;
  Params p = make_params(a, cfg, 200);
  const int64_t N = 40;
  const auto x = to_f64(random_tensor(a, {N, cfg.hidden}, DType::kF32, 9, -2.f, 2.f));
  const auto G = to_f64(random_tensor(a, {N / 4, cfg.out_hidden}, DType::kF32, 10));
  for (bool post : {false, true}) {
    const size_t p0 = post ? R::vision_deepstack_param0(cfg, 0) : R::vision_merger_param0(cfg);
    auto loss = [&](const std::vector<std::vector<double>>& w, const std::vector<double>& xx) {
      std::vector<double> y;
      R::MergerRefStash<double> st;
      R::merger_forward(y, st, cfg, post, w, p0, xx);
      return dot(y, G);
    };
    std::vector<double> y, dx;
    R::MergerRefStash<double> st;
    R::merger_forward(y, st, cfg, post, p.host, p0, x);
    std::vector<std::vector<double>> g;
    for (const auto& w : p.host) g.emplace_back(w.size(), 0.0);
    R::merger_backward(dx, g, G, st, cfg, post, p.host, p0);
    const std::string tag = post ? "deepstack merger " : "merger ";
    EXPECT_TRUE(finite_diff_matches(tag + "dx", [&](const std::vector<double>& v) { return loss(p.host, v); }, x, dx, 5));
    for (int k = 0; k < R::kMergerParams; ++k) {
      auto lw = [&](const std::vector<double>& v) {
        auto w = p.host;
        w[p0 + size_t(k)] = v;
        return loss(w, x);
      };
      const int64_t stride = std::max<int64_t>(1, int64_t(g[p0 + size_t(k)].size()) / 30);
      EXPECT_TRUE(finite_diff_matches(tag + p.info[p0 + size_t(k)].name, lw, p.host[p0 + size_t(k)],
                                      g[p0 + size_t(k)], stride));
    }
  }
}

// --- kernels vs the fp64 reference ---------------------------------------------------------------------------

TEST(VisionBlock, ForwardAndBackwardMatchFp64Reference) {
  const nn::VisionConfig cfg = tiny_config();
  Allocator a;
  Context ctx = test_ctx(3);
  ctx.allocator = &a;
  Params p = make_params(a, cfg, 300);
  const nn::VisionSeq seq = make_seq(a, cfg);
  const int64_t N = seq.num_patches, Hv = cfg.hidden;
  const Tensor x = random_tensor(a, {N, Hv}, DType::kF32, 11, -2.f, 2.f);
  const Tensor dout = random_tensor(a, {N, Hv}, DType::kF32, 12);
  const size_t p0 = R::vision_block_param0(0);
  std::vector<std::vector<double>> g0;  // the gradient buffers' initial contents
  for (const Tensor& t : p.g) g0.push_back(to_f64(t));

  nn::VisionBlock block(cfg, block_views(p.w, p0), block_views(p.g, p0));
  nn::VisionBlockStash st;
  Tensor out = Tensor::empty(a, {N, Hv}, DType::kF32).value();
  Tensor dx = Tensor::empty(a, {N, Hv}, DType::kF32).value();
  ASSERT_TRUE(block.forward(ctx, out, x, seq, st).ok());
  const Status s = block.backward(ctx, dx, dout, seq, st);
  ASSERT_TRUE(s.ok()) << s.to_string();

  const R::VisionRefSeq rseq = R::vision_ref_seq(kGrids, cfg.merge);
  auto run_ref = [&](auto tag) {
    using S = decltype(tag);
    auto w = cast_all<S>(p.host);
    auto g = cast_all<S>(g0);
    std::vector<S> y, dxr;
    R::VisionBlockRefStash<S> rst;
    R::vision_block_forward(y, rst, cfg, w, p0, cast_vec<S>(to_f64(x)), rseq);
    R::vision_block_backward(dxr, g, cast_vec<S>(to_f64(dout)), rst, cfg, w, p0, rseq);
    return std::make_tuple(to_double(y), to_double(dxr), g);
  };
  const auto [y64, dx64, g64] = run_ref(double{});
  const auto [y32, dx32, g32] = run_ref(float{});
  EXPECT_TRUE(close_to_reference("block out", to_f64(out), y64, y32, out.shape(), TolOp::kDecoderStack, DType::kF32));
  EXPECT_TRUE(close_to_reference("block dx", to_f64(dx), dx64, dx32, dx.shape(), TolOp::kDecoderStack, DType::kF32));
  for (int k = 0; k < R::kVisionBlockParams; ++k) {
    const size_t i = p0 + size_t(k);
    EXPECT_TRUE(close_to_reference("grad " + p.info[i].name, to_f64(p.g[i]), g64[i], to_double(g32[i]),
                                   p.info[i].shape, TolOp::kDecoderStack, DType::kF32));
  }
}

TEST(VisionBlock, MergersMatchFp64Reference) {
  const nn::VisionConfig cfg = tiny_config();
  Allocator a;
  Context ctx = test_ctx(2);
  ctx.allocator = &a;
  Params p = make_params(a, cfg, 400);
  const int64_t N = 40, M = N / 4;
  const Tensor x = random_tensor(a, {N, cfg.hidden}, DType::kF32, 13, -2.f, 2.f);
  const Tensor dout = random_tensor(a, {M, cfg.out_hidden}, DType::kF32, 14);
  std::vector<std::vector<double>> g0;
  for (const Tensor& t : p.g) g0.push_back(to_f64(t));
  for (bool post : {false, true}) {
    const size_t p0 = post ? R::vision_deepstack_param0(cfg, 0) : R::vision_merger_param0(cfg);
    const std::string tag = post ? "deepstack merger " : "merger ";
    nn::PatchMerger merger(cfg, post, merger_views(p.w, p0), merger_views(p.g, p0));
    nn::PatchMergerStash st;
    Tensor out = Tensor::empty(a, {M, cfg.out_hidden}, DType::kF32).value();
    Tensor dx = Tensor::empty(a, {N, cfg.hidden}, DType::kF32).value();
    ASSERT_TRUE(merger.forward(ctx, out, x, st).ok());
    ASSERT_TRUE(merger.backward(ctx, dx, dout, st).ok());
    auto run_ref = [&](auto tag_s) {
      using S = decltype(tag_s);
      auto w = cast_all<S>(p.host);
      auto g = cast_all<S>(g0);
      std::vector<S> y, dxr;
      R::MergerRefStash<S> rst;
      R::merger_forward(y, rst, cfg, post, w, p0, cast_vec<S>(to_f64(x)));
      R::merger_backward(dxr, g, cast_vec<S>(to_f64(dout)), rst, cfg, post, w, p0);
      return std::make_tuple(to_double(y), to_double(dxr), g);
    };
    const auto [y64, dx64, g64] = run_ref(double{});
    const auto [y32, dx32, g32] = run_ref(float{});
    EXPECT_TRUE(close_to_reference(tag + "out", to_f64(out), y64, y32, out.shape(), TolOp::kDecoderStack, DType::kF32));
    EXPECT_TRUE(close_to_reference(tag + "dx", to_f64(dx), dx64, dx32, dx.shape(), TolOp::kDecoderStack, DType::kF32));
    for (int k = 0; k < R::kMergerParams; ++k) {
      const size_t i = p0 + size_t(k);
      EXPECT_TRUE(close_to_reference(tag + "grad " + p.info[i].name, to_f64(p.g[i]), g64[i], to_double(g32[i]),
                                     p.info[i].shape, TolOp::kDecoderStack, DType::kF32));
    }
  }
}

// Freezing: empty gradient views are skipped, the rest is bitwise what the unfrozen run produces; a backward
// without dx (nothing below trains) gives the same parameter gradients.
TEST(VisionBlock, FrozenParametersAndNoInputGradient) {
  const nn::VisionConfig cfg = tiny_config();
  Allocator a;
  Context ctx = test_ctx(2);
  ctx.allocator = &a;
  Params p = make_params(a, cfg, 500);
  const nn::VisionSeq seq = make_seq(a, cfg);
  const int64_t N = seq.num_patches, Hv = cfg.hidden;
  const Tensor x = random_tensor(a, {N, Hv}, DType::kF32, 15);
  const Tensor dout = random_tensor(a, {N, Hv}, DType::kF32, 16);
  const size_t p0 = R::vision_block_param0(0);
  auto fresh_grads = [&]() {
    std::vector<Tensor> g;
    for (int k = 0; k < R::kVisionBlockParams; ++k) g.push_back(Tensor::zeros(a, p.info[p0 + size_t(k)].shape, DType::kF32).value());
    return g;
  };
  auto run = [&](const std::vector<bool>& trainable, bool with_dx, std::vector<Tensor>& g, Tensor* dx_out) {
    nn::VisionBlockWeights gv = block_views(g, 0);
    TensorView* views[] = {&gv.norm1_w, &gv.norm1_b, &gv.qkv_w, &gv.qkv_b, &gv.proj_w, &gv.proj_b,
                           &gv.norm2_w, &gv.norm2_b, &gv.fc1_w, &gv.fc1_b, &gv.fc2_w, &gv.fc2_b};
    for (int k = 0; k < R::kVisionBlockParams; ++k)
      if (!trainable[size_t(k)]) *views[k] = TensorView{};
    nn::VisionBlock block(cfg, block_views(p.w, p0), gv);
    nn::VisionBlockStash st;
    Tensor out = Tensor::empty(a, {N, Hv}, DType::kF32).value();
    ASSERT_TRUE(block.forward(ctx, out, x, seq, st).ok());
    const Status s = block.backward(ctx, with_dx ? dx_out->view() : TensorView{}, dout, seq, st);
    ASSERT_TRUE(s.ok()) << s.to_string();
  };
  std::vector<Tensor> full = fresh_grads();
  Tensor dx_full = Tensor::empty(a, {N, Hv}, DType::kF32).value();
  run(std::vector<bool>(12, true), true, full, &dx_full);

  // Patterns: only the attention projection; only the LN1 parameters (the deepest ones); only the MLP; none.
  const std::vector<std::vector<bool>> patterns = {
      {false, false, false, false, true, true, false, false, false, false, false, false},
      {true, true, false, false, false, false, false, false, false, false, false, false},
      {false, false, false, false, false, false, true, true, true, true, true, true},
      std::vector<bool>(12, false)};
  for (size_t pi = 0; pi < patterns.size(); ++pi)
    for (bool with_dx : {true, false}) {
      std::vector<Tensor> g = fresh_grads();
      Tensor dx = Tensor::empty(a, {N, Hv}, DType::kF32).value();
      run(patterns[pi], with_dx, g, &dx);
      const std::string tag = "pattern " + std::to_string(pi) + (with_dx ? " with dx: " : " without dx: ");
      for (int k = 0; k < R::kVisionBlockParams; ++k) {
        const std::string name = tag + p.info[p0 + size_t(k)].name;
        if (patterns[pi][size_t(k)]) {
          EXPECT_TRUE(bitwise_equal(name, g[size_t(k)], full[size_t(k)]));
        } else {
          EXPECT_EQ(max_abs(to_f64(g[size_t(k)])), 0.0) << name << " is frozen but received a gradient";
        }
      }
      if (with_dx) {
        EXPECT_TRUE(bitwise_equal(tag + "dx", dx, dx_full));
      }
    }
}

TEST(VisionBlock, BadWeightsAndStashNameTheProblem) {
  const nn::VisionConfig cfg = tiny_config();
  Allocator a;
  Context ctx = test_ctx();
  ctx.allocator = &a;
  Params p = make_params(a, cfg, 600);
  const nn::VisionSeq seq = make_seq(a, cfg);
  const size_t p0 = R::vision_block_param0(0);
  const Tensor x = random_tensor(a, {seq.num_patches, cfg.hidden}, DType::kF32, 17);
  Tensor out = Tensor::empty(a, {seq.num_patches, cfg.hidden}, DType::kF32).value();
  nn::VisionBlockWeights w = block_views(p.w, p0);
  w.qkv_w = p.w[p0 + 4].view();  // proj weight [Hv, Hv] where qkv [3Hv, Hv] belongs
  nn::VisionBlockStash st;
  Status s = nn::VisionBlock(cfg, w, {}).forward(ctx, out, x, seq, st);
  EXPECT_NE(s.message().find("qkv weight is f32[16, 16] cpu but must be a contiguous f32 or bf16 [48, 16]"),
            std::string::npos)
      << s.message();
  nn::VisionBlockWeights g = block_views(p.g, p0);
  g.fc1_w = p.g[p0 + 10].view();  // fc2's gradient buffer [Hv, Iv] for fc1 [Iv, Hv]
  s = nn::VisionBlock(cfg, block_views(p.w, p0), g).forward(ctx, out, x, seq, st);
  EXPECT_NE(s.message().find("fc1 weight gradient"), std::string::npos) << s.message();
  s = nn::VisionBlock(cfg, block_views(p.w, p0), {}).forward(ctx, x, x, seq, st);
  EXPECT_NE(s.message().find("out may not alias x"), std::string::npos) << s.message();
  nn::VisionBlockStash empty;
  s = nn::VisionBlock(cfg, block_views(p.w, p0), {}).backward(ctx, out, x, seq, empty);
  EXPECT_NE(s.message().find("stash does not come from a forward"), std::string::npos) << s.message();
  nn::PatchMergerStash mst;
  Tensor mout = Tensor::empty(a, {9, cfg.out_hidden}, DType::kF32).value();
  s = nn::PatchMerger(cfg, false, merger_views(p.w, R::vision_merger_param0(cfg)), {})
          .forward(ctx, mout, x.view().slice(0, 0, 38), mst);
  EXPECT_NE(s.message().find("38 patches are not a whole number of 4-patch merge windows"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace vlpar
