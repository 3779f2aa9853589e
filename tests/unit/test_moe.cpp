// Sparse MoE block (Qwen3-VL-MoE MLP) and its kernels: dispatch plan, permute/combine order, grouped GEMMs,
// the fp64 reference backward (including the cross-layer load-balancing loss) against central differences,
// the block against the reference under the derived rule (tolerances.hpp), tie-breaking, unused experts,
// frozen parameters, thread-count invariance and named errors.
// Run: ./build/cpu/tests/test_moe
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/moe.hpp"
#include "vlpar/nn/moe_block.hpp"
#include "vlpar/reference/linear.hpp"
#include "vlpar/reference/moe.hpp"

namespace vlpar::test {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// Shared fixtures: sizes, host weights (fp32-representable doubles), the kernel and the reference drivers.

struct Dims {
  int64_t N = 20, H = 16, E = 6, K = 2, I = 8;
  double capacity_factor = 0;  // > 0: ⌈factor · N·K / E⌉ rows per expert (MoeConfig::capacity_factor)
  int64_t capacity() const {
    return capacity_factor > 0 ? int64_t(std::ceil(capacity_factor * double(N * K) / double(E))) : 0;
  }
  reference::MoeDims ref() const { return reference::MoeDims{N, H, E, K, I, capacity()}; }
  /// The packed samples for the sequence-level aux: uneven, one of them empty.
  std::vector<int32_t> cu() const { return {0, 3, 3, int32_t(N / 2), int32_t(N)}; }
  nn::MoeConfig moe() const { return nn::MoeConfig{int(E), int(K), I, capacity_factor}; }
  nn::TransformerConfig cfg() const {
    nn::TransformerConfig c;
    c.hidden = H;
    c.eps = 1e-6f;
    return c;
  }
};

constexpr float kEps = 1e-6f;
enum Param { kNorm = 0, kRouter = 1, kGateUp = 2, kDown = 3 };
const char* const kParamName[4] = {"norm", "router", "gate_up", "down"};

using Host = std::vector<double>;
struct Layer {
  std::array<Host, 4> p;  // norm [H], router [E, H], gate_up [E, H, 2I], down [E, I, H]
};

Host uniform(int64_t n, uint64_t seed, float lo, float hi) {
  Host v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = philox_uniform(seed, 7, uint64_t(i), lo, hi);  // fp32 values
  return v;
}

std::array<Shape, 4> param_shapes(const Dims& d) {
  return {Shape{d.H}, Shape{d.E, d.H}, Shape{d.E, d.H, 2 * d.I}, Shape{d.E, d.I, d.H}};
}

Layer make_layer(const Dims& d, uint64_t seed, float router_scale = 1.f) {
  Layer l;
  l.p[kNorm] = uniform(d.H, seed + 1, 0.5f, 1.5f);
  l.p[kRouter] = uniform(d.E * d.H, seed + 2, -router_scale, router_scale);
  l.p[kGateUp] = uniform(d.E * d.H * 2 * d.I, seed + 3, -0.5f, 0.5f);
  l.p[kDown] = uniform(d.E * d.I * d.H, seed + 4, -0.5f, 0.5f);
  return l;
}

Tensor from_host(Allocator& alloc, Shape s, const Host& v) {
  Tensor t = Tensor::empty(alloc, s, DType::kF32).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = float(v[size_t(i)]);
  return t;
}

Tensor filled(Allocator& alloc, Shape s, float value) {
  Tensor t = Tensor::empty(alloc, s, DType::kF32).value();
  std::fill(t.ptr<float>(), t.ptr<float>() + t.numel(), value);
  return t;
}

/// Everything a run produces, as doubles. grads[l][p] is empty for a frozen parameter.
struct MoeRun {
  Host out, dx;
  double aux = 0, z = 0, seq = 0;  // the load-balancing loss, the router z-loss, the sequence-level aux
  int64_t aux_rows = 0;
  std::vector<std::array<Host, 4>> grads;
  std::vector<std::vector<int32_t>> idx;  // [layer][N·K]
  std::vector<Host> probs;                // [layer][N·E]
};

struct KernelOptions {
  int threads = 2;
  std::array<bool, 4> frozen = {false, false, false, false};
  float grad_fill = 0.f;  // initial value of every gradient buffer (backward accumulates)
  float z_coef = 0.f;     // the router z-loss's coefficient in the loss
  float seq_coef = 0.f;   // the sequence-level aux's (over Dims::cu())
};

/// L MoE blocks in sequence on x [N, H]; loss = Σ out_L ⊙ G + coef · aux + o.z_coef · z over all layers; one
/// backward.
MoeRun run_kernel(const Dims& d, const std::vector<Layer>& layers, const Host& x, const Host& G, float coef,
               const KernelOptions& o = {}) {
  Allocator alloc;
  Context ctx = test_ctx(o.threads);
  ctx.allocator = &alloc;
  const auto shapes = param_shapes(d);
  const size_t L = layers.size();
  std::vector<std::array<Tensor, 4>> w(L), g(L);
  std::vector<nn::MoeBlock> blocks;
  for (size_t l = 0; l < L; ++l) {
    TensorView gv[4];
    for (int p = 0; p < 4; ++p) {
      w[l][size_t(p)] = from_host(alloc, shapes[size_t(p)], layers[l].p[size_t(p)]);
      if (!o.frozen[size_t(p)]) {
        g[l][size_t(p)] = filled(alloc, shapes[size_t(p)], o.grad_fill);
        gv[p] = g[l][size_t(p)];
      }
    }
    blocks.emplace_back(d.cfg(), d.moe(), nn::TensorParallel{}, nn::MoeWeights{w[l][0], w[l][1], w[l][2], w[l][3]},
                        nn::MoeWeights{gv[0], gv[1], gv[2], gv[3]}, 4 * l);
  }
  std::vector<Tensor> acts(L + 1);
  acts[0] = from_host(alloc, {d.N, d.H}, x);
  std::vector<nn::MoeStash> stash(L);
  RouterAuxStats stats;
  MoeRun r;
  std::vector<int32_t> cu = d.cu();
  const TensorView cu_view(cu.data(), DType::kI32, Shape{int64_t(cu.size())});
  for (size_t l = 0; l < L; ++l) {
    acts[l + 1] = Tensor::empty(alloc, {d.N, d.H}, DType::kF32).value();
    const Status s = blocks[l].forward(ctx, acts[l + 1], acts[l], d.N, stash[l], &stats, cu_view);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return r;
    r.idx.push_back(std::vector<int32_t>(stash[l].indices.ptr<int32_t>(),
                                         stash[l].indices.ptr<int32_t>() + d.N * d.K));
    r.probs.push_back(to_f64(stash[l].probs));
  }
  r.out = to_f64(acts[L]);
  r.aux = router_aux_loss(stats).value();
  r.z = stats.z_sum;
  r.seq = stats.seq_aux_sum;
  r.aux_rows = stats.rows;
  Tensor dout = from_host(alloc, {d.N, d.H}, G);
  for (size_t l = L; l-- > 0;) {
    Tensor dx = Tensor::empty(alloc, {d.N, d.H}, DType::kF32).value();
    const Status s =
        blocks[l].backward(ctx, dx, dout, d.N, stash[l], {}, nn::RouterLossGrads{&stats, coef, o.z_coef, o.seq_coef});
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return r;
    dout = dx;
  }
  r.dx = to_f64(dout);
  r.grads.resize(L);
  for (size_t l = 0; l < L; ++l)
    for (int p = 0; p < 4; ++p)
      if (!o.frozen[size_t(p)]) r.grads[l][size_t(p)] = to_f64(g[l][size_t(p)]);
  return r;
}

/// The same computation with the plain-loop reference in scalar S (double: ref64; float: the naive baseline).
template <class S>
MoeRun run_reference(const Dims& d, const std::vector<Layer>& layers, const Host& x, const Host& G, double coef,
                  double* loss = nullptr, bool backward = true, double z_coef = 0, double seq_coef = 0) {
  const size_t L = layers.size();
  std::vector<std::array<std::vector<S>, 4>> w(L), g(L);
  std::vector<reference::MoeParams<S>> params(L);
  for (size_t l = 0; l < L; ++l) {
    for (int p = 0; p < 4; ++p) {
      w[l][size_t(p)] = cast_vec<S>(layers[l].p[size_t(p)]);
      g[l][size_t(p)].assign(layers[l].p[size_t(p)].size(), S(0));
    }
    params[l] = {w[l][0].data(), w[l][1].data(), w[l][2].data(), w[l][3].data()};
  }
  std::vector<std::vector<S>> acts(L + 1);
  acts[0] = cast_vec<S>(x);
  std::vector<reference::MoeCache<S>> cache(L);
  reference::MoeAux<S> aux;
  aux.cu = d.cu();
  MoeRun r;
  for (size_t l = 0; l < L; ++l) {
    acts[l + 1].assign(size_t(d.N * d.H), S(0));
    reference::moe_forward(acts[l + 1].data(), cache[l], acts[l].data(), params[l], d.ref(), S(kEps));
    aux.add(cache[l], d.ref());
    r.idx.push_back(cache[l].idx);
    r.probs.push_back(to_double(cache[l].probs));
  }
  r.out = to_double(acts[L]);
  r.aux = double(aux.value());
  r.z = double(aux.z_sum);
  r.seq = double(aux.seq_sum);
  r.aux_rows = aux.rows;
  if (loss) *loss = dot(r.out, G) + coef * r.aux + z_coef * r.z + seq_coef * r.seq;
  if (!backward) return r;
  std::vector<S> dout = cast_vec<S>(G);
  for (size_t l = L; l-- > 0;) {
    std::vector<S> dx(size_t(d.N * d.H));
    reference::moe_backward(dx.data(), reference::MoeGrads<S>{g[l][0].data(), g[l][1].data(), g[l][2].data(),
                                                              g[l][3].data()},
                            dout.data(), cache[l], acts[l].data(), params[l], d.ref(), &aux, S(coef), S(z_coef),
                            S(seq_coef));
    dout = dx;
  }
  r.dx = to_double(dout);
  r.grads.resize(L);
  for (size_t l = 0; l < L; ++l)
    for (int p = 0; p < 4; ++p) r.grads[l][size_t(p)] = to_double(g[l][size_t(p)]);
  return r;
}

/// Equality of every value (a bitwise-reproducibility check on fp32 results), with a mismatch report.
::testing::AssertionResult identical(const std::string& what, const Host& a, const Host& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  return all_close(what + " (must be identical)", a, b, Shape{int64_t(a.size())}, 0.0);
}

/// Every layer's parameter gradients of `got` against the fp64 reference under the bound `op` (tolerances.hpp).
void expect_grads_close(const Dims& d, const MoeRun& got, const MoeRun& ref, const MoeRun& naive, TolOp op) {
  const auto shapes = param_shapes(d);
  for (size_t l = 0; l < got.grads.size(); ++l)
    for (int p = 0; p < 4; ++p)
      EXPECT_TRUE(close_to_reference("layer " + std::to_string(l) + " grad " + kParamName[p], got.grads[l][size_t(p)],
                                     ref.grads[l][size_t(p)], naive.grads[l][size_t(p)], shapes[size_t(p)], op,
                                     DType::kF32));
}

/// Smallest gap p_(K) − p_(K+1) between the last chosen and the first unchosen probability over all rows.
double min_topk_gap(const MoeRun& r, const Dims& d) {
  double gap = 1.0;
  for (const Host& p : r.probs)
    for (int64_t t = 0; t < d.N; ++t) {
      Host row(p.begin() + t * d.E, p.begin() + (t + 1) * d.E);
      std::sort(row.rbegin(), row.rend());
      if (d.K < d.E) gap = std::min(gap, row[size_t(d.K - 1)] - row[size_t(d.K)]);
    }
  return gap;
}

/// A 2-layer problem whose routing is far from ties (so float and double, and ±h perturbations, pick the same
/// experts): the first seed, in a fixed scan, with every top-k margin above 2e-3.
struct Problem {
  Dims d;
  std::vector<Layer> layers;
  Host x, G;
};

Problem well_separated_problem(const Dims& d, int num_layers) {
  for (uint64_t seed = 100;; seed += 10) {
    Problem pb{d, {}, uniform(d.N * d.H, seed, -1.f, 1.f), uniform(d.N * d.H, seed + 5, -1.f, 1.f)};
    for (int l = 0; l < num_layers; ++l) pb.layers.push_back(make_layer(d, seed + 1000 * uint64_t(l + 1)));
    if (min_topk_gap(run_reference<double>(d, pb.layers, pb.x, pb.G, 0.0, nullptr, false), d) > 2e-3) return pb;
    EXPECT_LT(seed, 1000u) << "no well-separated routing found";
    if (seed >= 1000) return pb;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Config

TEST(MoeConfig, ValidateNamesTheConflict) {
  EXPECT_TRUE((nn::MoeConfig{8, 2, 32}.validate().ok()));
  const Status a = nn::MoeConfig{4, 5, 32}.validate();
  EXPECT_NE(a.message().find("top_k 5 exceeds num_experts 4"), std::string::npos) << a.to_string();
  const Status b = nn::MoeConfig{0, 1, 32}.validate();
  EXPECT_NE(b.message().find("num_experts must be positive"), std::string::npos) << b.to_string();
  const Status c = nn::MoeConfig{4, 0, 32}.validate();
  EXPECT_NE(c.message().find("top_k must be positive"), std::string::npos) << c.to_string();
  const Status e = nn::MoeConfig{4, 2, 0}.validate();
  EXPECT_NE(e.message().find("intermediate"), std::string::npos) << e.to_string();
}

// ---------------------------------------------------------------------------------------------------------------
// Dispatch, permute and combine

// Rank-encoded payloads (STYLE §12): row t of x holds 100·t + f, so every permuted row names its origin.
TEST(MoeDispatch, PlanIsAStableSortByExpertAndRoundTrips) {
  Allocator alloc;
  const Context ctx = test_ctx();
  const int64_t T = 7, K = 2, F = 3;
  const int E = 5;  // expert 3 receives nothing
  const std::vector<int32_t> ids = {4, 0, 1, 4, 0, 2, 2, 1, 4, 1, 0, 4, 2, 0};
  Tensor idx = Tensor::empty(alloc, {T, K}, DType::kI32).value();
  std::copy(ids.begin(), ids.end(), idx.ptr<int32_t>());
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(ctx, plan, idx, E).ok());
  const std::vector<int64_t> want_offsets = {0, 4, 7, 10, 10, 14};
  EXPECT_EQ(plan.offsets, want_offsets);
  EXPECT_EQ(plan.expert_rows(3), 0);
  for (int64_t r = 0; r < T * K; ++r) {
    const int32_t a = plan.row_assignment[size_t(r)];
    EXPECT_EQ(plan.assignment_row[size_t(a)], r);
    const int e = ids[size_t(a)];
    EXPECT_TRUE(r >= plan.offsets[size_t(e)] && r < plan.offsets[size_t(e) + 1]) << "row " << r << " expert " << e;
    if (r > plan.offsets[size_t(e)]) {
      EXPECT_LT(plan.row_assignment[size_t(r - 1)], a) << "not stable at row " << r;
    }
  }
  Tensor x = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f) x.ptr<float>()[t * F + f] = float(100 * t + f);
  Tensor w = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  for (int64_t i = 0; i < T * K; ++i) w.ptr<float>()[i] = float(1 + i % 3);  // exact small weights
  Tensor xp = Tensor::empty(alloc, {T * K, F}, DType::kF32).value();
  Tensor xw = Tensor::empty(alloc, {T * K, F}, DType::kF32).value();
  ASSERT_TRUE(moe_permute(ctx, xp, x, {}, plan).ok());
  ASSERT_TRUE(moe_permute(ctx, xw, x, w, plan).ok());
  for (int64_t r = 0; r < T * K; ++r) {
    const int32_t a = plan.row_assignment[size_t(r)];
    for (int64_t f = 0; f < F; ++f) {
      EXPECT_EQ(xp.ptr<float>()[r * F + f], float(100 * (a / K) + f)) << "row " << r;
      EXPECT_EQ(xw.ptr<float>()[r * F + f], w.ptr<float>()[a] * float(100 * (a / K) + f)) << "row " << r;
    }
  }
  // combine ∘ dispatch = x · K (unweighted) and x · Σ_k w (weighted): exact with these integers.
  Tensor back = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  Tensor backw = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(ctx, back, xp, {}, plan).ok());
  ASSERT_TRUE(moe_unpermute(ctx, backw, xp, w, plan).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f) {
      const float v = float(100 * t + f), ws = w.ptr<float>()[t * K] + w.ptr<float>()[t * K + 1];
      EXPECT_EQ(back.ptr<float>()[t * F + f], float(K) * v);
      EXPECT_EQ(backw.ptr<float>()[t * F + f], ws * v);
    }
  // Routing-weight gradient and in-place scaling address the same (token, slot) ↔ row map.
  Tensor dw = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  ASSERT_TRUE(moe_row_dot(ctx, dw, xp, xp, plan).ok());
  ASSERT_TRUE(moe_scale_rows(ctx, xp, w, plan).ok());
  EXPECT_TRUE(bitwise_equal("scaled rows", xp, xw));
  for (int64_t t = 0; t < T; ++t) {
    float want = 0.f;
    for (int64_t f = 0; f < F; ++f) want += float(100 * t + f) * float(100 * t + f);
    EXPECT_EQ(dw.ptr<float>()[t * K], want);
    EXPECT_EQ(dw.ptr<float>()[t * K + 1], want);
  }
}

// moe_pad_plan: every expert's rows padded to a multiple of 4, order inside an expert kept, padding rows zero after
// permute and scale_rows, and the token path through the padded layout bitwise the unpadded one.
TEST(MoeDispatch, PaddedPlanKeepsTheRowsAndZeroFillsThePadding) {
  Allocator alloc;
  const Context ctx = test_ctx();
  const int64_t T = 7, K = 2, F = 3;
  const std::vector<int32_t> ids = {4, 0, 1, 4, 0, 2, 2, 1, 4, 1, 0, 4, 2, 0};
  Tensor idx = Tensor::empty(alloc, {T, K}, DType::kI32).value();
  std::copy(ids.begin(), ids.end(), idx.ptr<int32_t>());
  MoeDispatch plan, padded;
  ASSERT_TRUE(moe_dispatch_plan(ctx, plan, idx, 5).ok());
  ASSERT_TRUE(moe_dispatch_plan(ctx, padded, idx, 5).ok());
  ASSERT_TRUE(moe_pad_plan(padded, 4).ok());
  EXPECT_EQ(padded.offsets, (std::vector<int64_t>{0, 4, 8, 12, 12, 16}));  // counts 4, 3, 3, 0, 4
  EXPECT_EQ(padded.num_rows(), 16);
  for (int e = 0; e < 5; ++e)
    for (int64_t i = 0; i < padded.expert_rows(e); ++i) {
      const int32_t a = padded.row_assignment[size_t(padded.offsets[size_t(e)] + i)];
      EXPECT_EQ(a, i < plan.expert_rows(e) ? plan.row_assignment[size_t(plan.offsets[size_t(e)] + i)] : -1);
      if (a >= 0) {
        EXPECT_EQ(padded.assignment_row[size_t(a)], padded.offsets[size_t(e)] + i);
      }
    }
  Tensor x = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  for (int64_t i = 0; i < T * F; ++i) x.ptr<float>()[i] = float(i % 11) - 4.5f;
  Tensor w = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  for (int64_t i = 0; i < T * K; ++i) w.ptr<float>()[i] = 0.25f * float(1 + i % 3);
  Tensor xp = Tensor::empty(alloc, {T * K, F}, DType::kF32).value();
  Tensor xq = Tensor::empty(alloc, {16, F}, DType::kF32).value();
  std::fill(xq.ptr<float>(), xq.ptr<float>() + 16 * F, 7.f);  // the padding rows must be overwritten
  ASSERT_TRUE(moe_permute(ctx, xp, x, w, plan).ok());
  ASSERT_TRUE(moe_permute(ctx, xq, x, w, padded).ok());
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const int32_t a = padded.row_assignment[size_t(r)];
      EXPECT_EQ(xq.ptr<float>()[r * F + f], a < 0 ? 0.f : xp.ptr<float>()[plan.assignment_row[size_t(a)] * F + f]);
    }
  Tensor back = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  Tensor backq = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(ctx, back, xp, w, plan).ok());
  ASSERT_TRUE(moe_unpermute(ctx, backq, xq, w, padded).ok());
  EXPECT_TRUE(bitwise_equal("combine through the padded layout", back, backq));
  Tensor dw = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  Tensor dwq = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  ASSERT_TRUE(moe_row_dot(ctx, dw, xp, xp, plan).ok());
  ASSERT_TRUE(moe_row_dot(ctx, dwq, xq, xq, padded).ok());
  EXPECT_TRUE(bitwise_equal("routing-weight gradient through the padded layout", dw, dwq));
  for (int64_t i = 0; i < 16 * F; ++i) xq.ptr<float>()[i] = 5.f;
  ASSERT_TRUE(moe_scale_rows(ctx, xq, w, padded).ok());
  for (int64_t r = 0; r < 16; ++r) {
    const int32_t a = padded.row_assignment[size_t(r)];
    EXPECT_EQ(xq.ptr<float>()[r * F], a < 0 ? 0.f : 5.f * w.ptr<float>()[a]) << "row " << r;
  }
  EXPECT_FALSE(moe_pad_plan(padded, 4).ok()) << "padding twice";
  EXPECT_FALSE(moe_pad_plan(plan, 0).ok());
}

// Capacity (moe_capacity_plan, the position policy): each expert keeps its first C rows by token, the rest of its
// assignments map to −1; permute writes only kept rows, unpermute sums the kept rows of a token (computed here in
// double by hand), row_dot gives dropped assignments 0; padding after capacity keeps both markers apart.
TEST(MoeDispatch, CapacityDropsTheLaterTokensOfAnExpertAndTheOpsSkipThem) {
  Allocator alloc;
  const Context ctx = test_ctx();
  const int64_t T = 7, K = 2, F = 3;
  const std::vector<int32_t> ids = {4, 0, 1, 4, 0, 2, 2, 1, 4, 1, 0, 4, 2, 0};  // counts 4, 3, 3, 0, 4
  Tensor idx = Tensor::empty(alloc, {T, K}, DType::kI32).value();
  std::copy(ids.begin(), ids.end(), idx.ptr<int32_t>());
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(ctx, plan, idx, 5).ok());
  const Result<int64_t> dropped = moe_capacity_plan(plan, 2);
  ASSERT_TRUE(dropped.ok()) << dropped.status().to_string();
  EXPECT_EQ(dropped.value(), 2 + 1 + 1 + 0 + 2);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 2, 4, 6, 6, 8}));
  // Expert e keeps its two lowest tokens: ids of token t at slot k are ids[t·K + k].
  std::vector<int> seen(5, 0);
  for (int64_t a = 0; a < T * K; ++a) {
    const int e = ids[size_t(a)];
    const bool kept = seen[size_t(e)]++ < 2;
    EXPECT_EQ(plan.assignment_row[size_t(a)] >= 0, kept) << "assignment " << a;
    if (kept) {
      EXPECT_EQ(plan.row_assignment[size_t(plan.assignment_row[size_t(a)])], a);
    }
  }
  Tensor x = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  for (int64_t i = 0; i < T * F; ++i) x.ptr<float>()[i] = float(i % 11) - 4.5f;
  Tensor w = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  for (int64_t i = 0; i < T * K; ++i) w.ptr<float>()[i] = 0.25f * float(1 + i % 3);
  Tensor xp = Tensor::empty(alloc, {8, F}, DType::kF32).value();
  ASSERT_TRUE(moe_permute(ctx, xp, x, {}, plan).ok());
  Tensor out = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(ctx, out, xp, w, plan).ok());
  Tensor dw = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  ASSERT_TRUE(moe_row_dot(ctx, dw, xp, xp, plan).ok());
  for (int64_t t = 0; t < T; ++t) {
    double dot_sum = 0;
    for (int64_t f = 0; f < F; ++f) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k)
        if (plan.assignment_row[size_t(t * K + k)] >= 0)
          want += double(w.ptr<float>()[t * K + k]) * x.ptr<float>()[t * F + f];
      EXPECT_NEAR(out.ptr<float>()[t * F + f], want, 1e-6) << "token " << t;
      dot_sum += double(x.ptr<float>()[t * F + f]) * x.ptr<float>()[t * F + f];
    }
    for (int64_t k = 0; k < K; ++k)
      EXPECT_NEAR(dw.ptr<float>()[t * K + k], plan.assignment_row[size_t(t * K + k)] >= 0 ? dot_sum : 0.0, 1e-5);
  }
  ASSERT_TRUE(moe_pad_plan(plan, 4).ok());  // capacity, then padding: offsets 0 4 8 12 12 16
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 4, 8, 12, 12, 16}));
  for (int64_t a = 0; a < T * K; ++a) {
    const int32_t r = plan.assignment_row[size_t(a)];
    if (r >= 0) {
      EXPECT_EQ(plan.row_assignment[size_t(r)], a);
    }
  }
  EXPECT_FALSE(moe_capacity_plan(plan, 2).ok()) << "capacity after padding";
  EXPECT_FALSE(moe_capacity_plan(plan, -1).ok());
}

TEST(MoeDispatch, BadIndicesAreNamedErrors) {
  Allocator alloc;
  const Context ctx = test_ctx();
  MoeDispatch plan;
  Tensor idx = Tensor::zeros(alloc, {3, 2}, DType::kI32).value();
  idx.ptr<int32_t>()[1] = 1;
  idx.ptr<int32_t>()[2] = 1;
  idx.ptr<int32_t>()[3] = 4;  // out of range for E = 4
  Status s = moe_dispatch_plan(ctx, plan, idx, 4);
  EXPECT_NE(s.message().find("indices[1, 1] = 4 is outside [0, 4)"), std::string::npos) << s.to_string();
  idx.ptr<int32_t>()[3] = 1;  // row 1 = {1, 1}
  s = moe_dispatch_plan(ctx, plan, idx, 4);
  EXPECT_NE(s.message().find("row 1 selects expert 1 twice"), std::string::npos) << s.to_string();
  Tensor f = Tensor::zeros(alloc, {3, 2}, DType::kF32).value();
  s = moe_dispatch_plan(ctx, plan, f, 4);
  EXPECT_NE(s.message().find("indices must be i32"), std::string::npos) << s.to_string();
  Allocator a2;
  Tensor out = Tensor::empty(a2, {5, 3}, DType::kF32).value();
  Tensor in = Tensor::empty(a2, {3, 3}, DType::kF32).value();
  s = moe_permute(ctx, out, in, {}, MoeDispatch{});
  EXPECT_NE(s.message().find("plan is not built"), std::string::npos) << s.to_string();
}

// The combine adds a token's experts in ascending expert id, starting from 0 (HF v4.57 train mode), regardless of
// the order of the top-k slots. The values make fp32 addition order visible: 1e8 + 1 rounds back to 1e8.
TEST(MoeDispatch, CombineAddsExpertsInAscendingIdOrderBitwise) {
  Allocator alloc;
  const Context ctx = test_ctx();
  const int64_t T = 2, K = 3, F = 2;
  const std::vector<int32_t> ids = {2, 0, 3, 3, 0, 2};
  Tensor idx = Tensor::empty(alloc, {T, K}, DType::kI32).value();
  std::copy(ids.begin(), ids.end(), idx.ptr<int32_t>());
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(ctx, plan, idx, 4).ok());
  auto value = [](int32_t e, int64_t f) {  // by expert: 0 → 1, 2 → +big, 3 → −big (w·big cancel per token)
    const float big = f == 0 ? 1e8f : 3e8f;
    return e == 2 ? big : e == 3 ? -big : 1.f;
  };
  Tensor w = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  const std::vector<float> wv = {0.5f, 1.f, 0.5f, 1.f, 1.f, 1.f};
  std::copy(wv.begin(), wv.end(), w.ptr<float>());
  Tensor y = Tensor::empty(alloc, {T * K, F}, DType::kF32).value();
  for (int64_t r = 0; r < T * K; ++r)
    for (int64_t f = 0; f < F; ++f) y.ptr<float>()[r * F + f] = value(ids[size_t(plan.row_assignment[size_t(r)])], f);
  Tensor out = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(ctx, out, y, w, plan).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < F; ++f) {
      float asc = 0.f, desc = 0.f;
      for (int32_t e = 0; e < 4; ++e)
        for (int64_t k = 0; k < K; ++k)
          if (ids[size_t(t * K + k)] == e) asc = asc + wv[size_t(t * K + k)] * value(e, f);
      for (int32_t e = 3; e >= 0; --e)
        for (int64_t k = 0; k < K; ++k)
          if (ids[size_t(t * K + k)] == e) desc = desc + wv[size_t(t * K + k)] * value(e, f);
      ASSERT_NE(asc, desc) << "the order must be observable for this test to mean anything";
      EXPECT_EQ(out.ptr<float>()[t * F + f], asc) << "token " << t << " feature " << f;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Grouped GEMMs: small-integer operands make every result exact, so the comparison is bitwise (STYLE §11).

TEST(MoeGroupedGemm, MatchesPerGroupReferenceExactly) {
  Allocator alloc;
  const Context ctx = test_ctx(3);
  const int64_t R = 330, Kd = 12, N = 600;  // groups > kMoeTileRows rows, N > kMoeTileCols
  const std::vector<int64_t> off = {10, 150, 150, 300, 320};  // group 1 empty; rows [0,10) and [320,330) untouched
  const int64_t G = int64_t(off.size()) - 1;
  static_assert(kMoeTileRows < 140 && kMoeTileCols < 600, "the test must span several tiles");
  Tensor a = integer_tensor(alloc, {R, Kd}, DType::kF32, 1, -3, 3);
  Tensor b = integer_tensor(alloc, {G, Kd, N}, DType::kF32, 2, -3, 3);
  Tensor bt = Tensor::empty(alloc, {G, N, Kd}, DType::kF32).value();  // the same matrices stored transposed
  for (int64_t g = 0; g < G; ++g)
    for (int64_t k = 0; k < Kd; ++k)
      for (int64_t n = 0; n < N; ++n) bt.ptr<float>()[(g * N + n) * Kd + k] = b.ptr<float>()[(g * Kd + k) * N + n];
  const Host a64 = to_f64(a), b64 = to_f64(b), c0 = to_f64(integer_tensor(alloc, {R, N}, DType::kF32, 3, -5, 5));
  // want = c0 outside the groups, c0 + a_g · b_g inside (beta = 1); also b broadcast (batch 1 = b[0]).
  auto expected = [&](bool broadcast) {
    Host want = c0;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t m = off[size_t(g) + 1] - off[size_t(g)];
      if (m == 0) continue;
      reference::gemm(&want[size_t(off[size_t(g)] * N)], &a64[size_t(off[size_t(g)] * Kd)],
                      &b64[size_t((broadcast ? 0 : g) * Kd * N)], m, N, Kd, false, false, 1.0, 1.0);
    }
    return want;
  };
  for (int variant = 0; variant < 3; ++variant) {  // 0: b, 1: bᵀ with trans_b, 2: b[0] broadcast
    Tensor c = from_host(alloc, {R, N}, c0);
    TensorView bv = variant == 0 ? TensorView(b) : variant == 1 ? TensorView(bt) : TensorView(b).slice(0, 0, 1);
    const Status s = grouped_gemm(ctx, c, a, bv, off, GemmDesc{false, variant == 1, 1.f, 1.f});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(all_close("grouped_gemm variant " + std::to_string(variant), to_f64(c), expected(variant == 2),
                          Shape{R, N}, 0.0));
  }
  // Weight gradient: dw[g] += a_gᵀ · dc_g; the empty group's slice keeps its initial value.
  Tensor dc = integer_tensor(alloc, {R, N}, DType::kF32, 4, -3, 3);
  const Host dc64 = to_f64(dc), dw0 = to_f64(integer_tensor(alloc, {G, Kd, N}, DType::kF32, 5, -5, 5));
  Tensor dw = from_host(alloc, {G, Kd, N}, dw0);
  ASSERT_TRUE(grouped_weight_grad(ctx, dw, a, dc, off).ok());
  Host want = dw0;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t m = off[size_t(g) + 1] - off[size_t(g)];
    if (m > 0)
      reference::gemm(&want[size_t(g * Kd * N)], &a64[size_t(off[size_t(g)] * Kd)], &dc64[size_t(off[size_t(g)] * N)],
                      Kd, N, m, true, false, 1.0, 1.0);
  }
  EXPECT_TRUE(all_close("grouped_weight_grad", to_f64(dw), want, Shape{G, Kd, N}, 0.0));
  EXPECT_GT(max_abs_diff(want, dw0), 0.0) << "vacuous: the weight gradient added nothing";
}

// Expert parallelism moves a row to another tile of its expert's group (other rows before it, another group size):
// its result must not change. A group of 40 rows against the same rows split into groups of 7, m and the rest,
// for m from 1 to 13, inner sizes below and above Eigen's K blocking: every row bitwise equal; and the same with
// one thread instead of the context's.
TEST(MoeGroupedGemm, RowResultDependsOnlyOnItsRow) {
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  for (const int64_t K : {8, 16, 300}) {
    for (const int64_t N : {16, 40}) {
      const Tensor a = random_tensor(alloc, {40, K}, DType::kF32, 1);
      const Tensor b = random_tensor(alloc, {1, K, N}, DType::kF32, 2);
      Tensor whole = Tensor::zeros(alloc, {40, N}, DType::kF32).value();
      ASSERT_TRUE(grouped_gemm(ctx, whole, a, b, std::vector<int64_t>{0, 40}, GemmDesc{}).ok());
      // One thread instead of the context's: the tiles' GEMMs run on the calling thread, and no row may change.
      Tensor threaded = Tensor::zeros(alloc, {40, N}, DType::kF32).value();
      Context one = ctx;
      one.num_threads = 1;
      ASSERT_TRUE(grouped_gemm(one, threaded, a, b, std::vector<int64_t>{0, 40}, GemmDesc{}).ok());
      EXPECT_EQ(std::memcmp(whole.view().data, threaded.view().data, size_t(whole.view().nbytes())), 0)
          << "K " << K << ", N " << N << ": the thread count changed the result";
      for (const int64_t m : {1, 2, 3, 5, 8, 13}) {
        Tensor split = Tensor::zeros(alloc, {40, N}, DType::kF32).value();
        ASSERT_TRUE(grouped_gemm(ctx, split, a, b, std::vector<int64_t>{0, 7, 7 + m, 40}, GemmDesc{}).ok());
        EXPECT_EQ(std::memcmp(whole.view().data, split.view().data, size_t(whole.view().nbytes())), 0)
            << "K " << K << ", N " << N << ", middle group of " << m << " rows";
      }
    }
  }
}

// bf16 operands on the CPU: widened exactly into f32, computed by the f32 path, a bf16 result rounded once. So
// every op on bf16 views equals the f32 op on the widened values, rounded to bf16 where the output is bf16: bitwise.
Tensor widened(Allocator& alloc, const Tensor& t) {
  Tensor out = Tensor::empty(alloc, t.shape(), DType::kF32).value();
  EXPECT_TRUE(convert_(out, t).ok());
  return out;
}
::testing::AssertionResult rounded_equal(Allocator& alloc, const std::string& what, const Tensor& low,
                                         const Tensor& f32) {
  Tensor r = Tensor::empty(alloc, f32.shape(), low.dtype()).value();
  EXPECT_TRUE(convert_(r, f32).ok());
  return bitwise_equal(what, low, r);
}

TEST(MoeGroupedGemm, Bf16OperandsGiveTheRoundedF32Result) {
  Allocator alloc;
  Context ctx = test_ctx(2);
  ctx.allocator = &alloc;
  const int64_t R = 150, Kd = 24, N = 40;
  const std::vector<int64_t> off = {10, 70, 70, 140};  // rows [0, 10) and [140, 150) belong to no group
  const int64_t G = int64_t(off.size()) - 1;
  const Tensor a = random_tensor(alloc, {R, Kd}, DType::kBF16, 1);
  const Tensor b = random_tensor(alloc, {G, Kd, N}, DType::kBF16, 2);
  const Tensor bt = random_tensor(alloc, {G, N, Kd}, DType::kBF16, 3);
  const Tensor a32 = widened(alloc, a), b32 = widened(alloc, b), bt32 = widened(alloc, bt);
  for (const bool trans : {false, true}) {
    Tensor c = random_tensor(alloc, {R, N}, DType::kBF16, 4);
    Tensor c32 = widened(alloc, c);
    const GemmDesc desc{false, trans, 1.f, 1.f};
    ASSERT_TRUE(grouped_gemm(ctx, c, a, trans ? bt : b, off, desc).ok());
    ASSERT_TRUE(grouped_gemm(ctx, c32, a32, trans ? bt32 : b32, off, desc).ok());
    EXPECT_TRUE(rounded_equal(alloc, trans ? "c (trans_b)" : "c", c, c32));
    Tensor cf = Tensor::zeros(alloc, {R, N}, DType::kF32).value();  // bf16 operands, f32 result: no rounding
    Tensor cf32 = Tensor::zeros(alloc, {R, N}, DType::kF32).value();
    ASSERT_TRUE(grouped_gemm(ctx, cf, a, trans ? bt : b, off, GemmDesc{false, trans, 1.f, 0.f}).ok());
    ASSERT_TRUE(grouped_gemm(ctx, cf32, a32, trans ? bt32 : b32, off, GemmDesc{false, trans, 1.f, 0.f}).ok());
    EXPECT_TRUE(bitwise_equal("f32 c of bf16 operands", cf, cf32));
    // beta = 0 into a bf16 c: the groups' rows written, every other row untouched.
    Tensor c0 = random_tensor(alloc, {R, N}, DType::kBF16, 6);
    Tensor keep = random_tensor(alloc, {R, N}, DType::kBF16, 6);
    ASSERT_TRUE(grouped_gemm(ctx, c0, a, trans ? bt : b, off, GemmDesc{false, trans, 1.f, 0.f}).ok());
    EXPECT_TRUE(bitwise_equal("rows before the groups", c0.view().slice(0, 0, 10), keep.view().slice(0, 0, 10)));
    EXPECT_TRUE(bitwise_equal("rows after the groups", c0.view().slice(0, 140, R), keep.view().slice(0, 140, R)));
  }
  const Tensor dc = random_tensor(alloc, {R, N}, DType::kBF16, 5);
  Tensor dw = Tensor::zeros(alloc, {G, Kd, N}, DType::kF32).value();
  Tensor dw32 = Tensor::zeros(alloc, {G, Kd, N}, DType::kF32).value();
  ASSERT_TRUE(grouped_weight_grad(ctx, dw, a, dc, off).ok());
  ASSERT_TRUE(grouped_weight_grad(ctx, dw32, a32, widened(alloc, dc), off).ok());
  EXPECT_TRUE(bitwise_equal("dw", dw, dw32));
  EXPECT_GT(max_abs_diff(to_f64(dw), Host(size_t(G * Kd * N), 0.0)), 0.0);
}

TEST(MoeDispatch, Bf16RowOpsGiveTheRoundedF32Result) {
  Allocator alloc;
  Context ctx = test_ctx(2);
  ctx.allocator = &alloc;
  const int64_t T = 9, K = 2, E = 4, F = 12;
  Tensor idx = Tensor::empty(alloc, {T, K}, DType::kI32).value();
  int32_t* ids = idx.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t) {  // two distinct experts per token
    ids[t * K] = int32_t((t * 3) % E);
    ids[t * K + 1] = int32_t((t * 3 + 1 + t % 2) % E);
  }
  MoeDispatch plan;
  ASSERT_TRUE(moe_dispatch_plan(ctx, plan, idx, int(E)).ok());
  const Tensor w = random_tensor(alloc, {T, K}, DType::kF32, 1);
  const Tensor x = random_tensor(alloc, {T, F}, DType::kBF16, 2), x32 = widened(alloc, x);
  Tensor p = Tensor::empty(alloc, {T * K, F}, DType::kBF16).value();
  Tensor p32 = Tensor::empty(alloc, {T * K, F}, DType::kF32).value();
  ASSERT_TRUE(moe_permute(ctx, p, x, w, plan).ok());
  ASSERT_TRUE(moe_permute(ctx, p32, x32, w, plan).ok());
  EXPECT_TRUE(rounded_equal(alloc, "permute", p, p32));
  const Tensor y = random_tensor(alloc, {T * K, F}, DType::kBF16, 3), y32 = widened(alloc, y);
  Tensor o = Tensor::empty(alloc, {T, F}, DType::kBF16).value();
  Tensor o32 = Tensor::empty(alloc, {T, F}, DType::kF32).value();
  ASSERT_TRUE(moe_unpermute(ctx, o, y, w, plan).ok());
  ASSERT_TRUE(moe_unpermute(ctx, o32, y32, w, plan).ok());
  EXPECT_TRUE(rounded_equal(alloc, "unpermute (the sum rounded once)", o, o32));
  Tensor dw = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  Tensor dw32 = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  ASSERT_TRUE(moe_row_dot(ctx, dw, y, p, plan).ok());
  ASSERT_TRUE(moe_row_dot(ctx, dw32, y32, widened(alloc, p), plan).ok());
  EXPECT_TRUE(bitwise_equal("row_dot", dw, dw32));
  Tensor s = random_tensor(alloc, {T * K, F}, DType::kBF16, 4), s32 = widened(alloc, s);
  ASSERT_TRUE(moe_scale_rows(ctx, s, w, plan).ok());
  ASSERT_TRUE(moe_scale_rows(ctx, s32, w, plan).ok());
  EXPECT_TRUE(rounded_equal(alloc, "scale_rows", s, s32));
  const Status mixed = moe_unpermute(ctx, o32, y, w, plan);  // rows bf16, out f32
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.message().find("differ in dtype"), std::string::npos) << mixed.to_string();
}

TEST(MoeGroupedGemm, BadShapesAreNamedErrors) {
  Allocator alloc;
  const Context ctx = test_ctx();
  Tensor a = Tensor::zeros(alloc, {10, 4}, DType::kF32).value();
  Tensor b = Tensor::zeros(alloc, {2, 4, 6}, DType::kF32).value();
  Tensor c = Tensor::zeros(alloc, {10, 6}, DType::kF32).value();
  const std::vector<int64_t> good = {0, 4, 10}, bad = {0, 6, 4}, three = {0, 2, 4, 10};
  EXPECT_TRUE(grouped_gemm(ctx, c, a, b, good, {}).ok());
  Status s = grouped_gemm(ctx, c, a, b, bad, {});
  EXPECT_NE(s.message().find("offsets must be non-decreasing"), std::string::npos) << s.to_string();
  s = grouped_gemm(ctx, c, a, b, three, {});
  EXPECT_NE(s.message().find("b must be 3D with 3 groups"), std::string::npos) << s.to_string();
  s = grouped_gemm(ctx, c, a, b, good, GemmDesc{false, true, 1.f, 0.f});
  EXPECT_NE(s.message().find("b must be [2, 6, 4] (trans_b)"), std::string::npos) << s.to_string();
  Tensor c_bad = Tensor::zeros(alloc, {9, 6}, DType::kF32).value();
  s = grouped_gemm(ctx, c_bad, a, b, good, {});
  EXPECT_NE(s.message().find("c must be [10, 6]"), std::string::npos) << s.to_string();
  Tensor a64 = Tensor::zeros(alloc, {10, 4}, DType::kF64).value();  // f64 has no kernel (f32/bf16/f16 do)
  s = grouped_gemm(ctx, c, a64, b, good, {});
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("a must be f32, bf16 or f16"), std::string::npos) << s.to_string();
  Tensor dw16 = Tensor::zeros(alloc, {2, 4, 6}, DType::kBF16).value();  // gradients accumulate in f32
  s = grouped_weight_grad(ctx, dw16, a, c, good);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("dw must be f32"), std::string::npos) << s.to_string();
  Tensor dw = Tensor::zeros(alloc, {2, 4, 5}, DType::kF32).value();
  s = grouped_weight_grad(ctx, dw, a, c, good);
  EXPECT_NE(s.message().find("dw must be contiguous [2, 4, 6]"), std::string::npos) << s.to_string();
}

// ---------------------------------------------------------------------------------------------------------------
// The fp64 reference against central differences: two layers, loss = Σ out_2 ⊙ G + coef · aux, where aux couples
// the layers (f and P̄ are means over both layers' rows).

TEST(MoeReference, BackwardMatchesFiniteDifferencesTwoLayersWithAux) {
  const Dims d;
  const Problem pb = well_separated_problem(d, 2);
  struct Case {
    double aux, z, seq;
    bool with_out;  // the Σ out ⊙ G term (without it: the router terms alone)
    const char* tag;
  };
  for (const Case& k : {Case{0.3, 0.0, 0.0, true, ""}, Case{1.0, 0.0, 0.0, false, " (aux only)"},
                        Case{0.0, 0.5, 0.0, false, " (z-loss only)"}, Case{0.3, 0.2, 0.0, true, " (with z-loss)"},
                        Case{0.0, 0.0, 1.0, false, " (sequence aux only)"}}) {
    const Host G = k.with_out ? pb.G : Host(pb.G.size(), 0.0);
    const MoeRun ref = run_reference<double>(d, pb.layers, pb.x, G, k.aux, nullptr, true, k.z, k.seq);
    const std::string tag = k.tag;
    auto loss_with = [&](size_t layer, int p) {
      return [&, layer, p](const Host& v) {
        std::vector<Layer> ls = pb.layers;
        ls[layer].p[size_t(p)] = v;
        double l = 0;
        run_reference<double>(d, ls, pb.x, G, k.aux, &l, false, k.z, k.seq);
        return l;
      };
    };
    for (size_t l = 0; l < 2; ++l)
      for (int p = 0; p < 4; ++p) {
        if (!k.with_out && l == 1 && (p == kGateUp || p == kDown)) {
          // The last layer's experts do not feed any router: no router-term gradient at all. (Layer 0's experts
          // do, through layer 1's router input: the cross-layer coupling.)
          EXPECT_EQ(max_abs(ref.grads[l][size_t(p)]), 0.0) << kParamName[p];
          continue;
        }
        EXPECT_TRUE(finite_diff_matches("layer " + std::to_string(l) + " " + kParamName[p] + tag, loss_with(l, p),
                                        pb.layers[l].p[size_t(p)], ref.grads[l][size_t(p)]));
      }
    auto loss_x = [&](const Host& v) {
      double l = 0;
      run_reference<double>(d, pb.layers, v, G, k.aux, &l, false, k.z, k.seq);
      return l;
    };
    EXPECT_TRUE(finite_diff_matches("x" + tag, loss_x, pb.x, ref.dx));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The block against the reference

TEST(MoeBlock, MatchesFp64ReferenceTwoLayersWithAux) {
  const Dims d;
  const Problem pb = well_separated_problem(d, 2);
  const float coef = 0.3f;
  const MoeRun got = run_kernel(d, pb.layers, pb.x, pb.G, coef);
  const MoeRun ref = run_reference<double>(d, pb.layers, pb.x, pb.G, coef);
  const MoeRun naive = run_reference<float>(d, pb.layers, pb.x, pb.G, coef);
  ASSERT_EQ(got.idx, ref.idx) << "the kernel routed differently from the reference";
  EXPECT_EQ(got.aux_rows, 2 * d.N);
  // Composite block: the kernels reorder fp32 sums (GEMM blocking), nothing else, so the decoder stack's default
  // rule applies (tolerances.hpp kDecoderStack).
  const TolOp op = TolOp::kDecoderStack;
  EXPECT_TRUE(close_to_reference("out", got.out, ref.out, naive.out, Shape{d.N, d.H}, op, DType::kF32));
  EXPECT_TRUE(close_to_reference("aux", {got.aux}, {ref.aux}, {naive.aux}, Shape{1}, op, DType::kF32));
  EXPECT_TRUE(close_to_reference("dx", got.dx, ref.dx, naive.dx, Shape{d.N, d.H}, op, DType::kF32));
  expect_grads_close(d, got, ref, naive, op);
  const auto shapes = param_shapes(d);
  // The aux term reaches the router of both layers: dropping it moves their gradients far outside the bound.
  const MoeRun no_aux = run_kernel(d, pb.layers, pb.x, pb.G, 0.f);
  for (size_t l = 0; l < 2; ++l)
    EXPECT_GT(max_abs_diff(no_aux.grads[l][kRouter], got.grads[l][kRouter]),
              1e-3 * max_abs(got.grads[l][kRouter]));
  // With the router z-loss (coefficient 0.4): its value and the gradients it changes (routers, norms, x).
  KernelOptions zo;
  zo.z_coef = 0.4f;
  const MoeRun zgot = run_kernel(d, pb.layers, pb.x, pb.G, coef, zo);
  const MoeRun zref = run_reference<double>(d, pb.layers, pb.x, pb.G, coef, nullptr, true, 0.4);
  const MoeRun znaive = run_reference<float>(d, pb.layers, pb.x, pb.G, coef, nullptr, true, 0.4);
  EXPECT_TRUE(close_to_reference("z", {zgot.z}, {zref.z}, {znaive.z}, Shape{1}, op, DType::kF32));
  EXPECT_TRUE(close_to_reference("dx (z-loss)", zgot.dx, zref.dx, znaive.dx, Shape{d.N, d.H}, op, DType::kF32));
  for (size_t l = 0; l < 2; ++l)
    for (const int p : {kNorm, kRouter})
      EXPECT_TRUE(close_to_reference("layer " + std::to_string(l) + " grad " + kParamName[p] + " (z-loss)",
                                     zgot.grads[l][size_t(p)], zref.grads[l][size_t(p)], znaive.grads[l][size_t(p)],
                                     shapes[size_t(p)], op, DType::kF32));
  for (size_t l = 0; l < 2; ++l)  // and it does reach them
    EXPECT_GT(max_abs_diff(zgot.grads[l][kRouter], got.grads[l][kRouter]), 1e-3 * max_abs(got.grads[l][kRouter]));
  // With the sequence-level aux (coefficient 0.6 over Dims::cu(), an empty sample included): value and gradients.
  KernelOptions so;
  so.seq_coef = 0.6f;
  const MoeRun sgot = run_kernel(d, pb.layers, pb.x, pb.G, coef, so);
  const MoeRun sref = run_reference<double>(d, pb.layers, pb.x, pb.G, coef, nullptr, true, 0, 0.6);
  const MoeRun snaive = run_reference<float>(d, pb.layers, pb.x, pb.G, coef, nullptr, true, 0, 0.6);
  EXPECT_TRUE(close_to_reference("seq aux", {sgot.seq}, {sref.seq}, {snaive.seq}, Shape{1}, op, DType::kF32));
  EXPECT_TRUE(close_to_reference("dx (seq aux)", sgot.dx, sref.dx, snaive.dx, Shape{d.N, d.H}, op, DType::kF32));
  for (size_t l = 0; l < 2; ++l) {
    EXPECT_TRUE(close_to_reference("layer " + std::to_string(l) + " grad router (seq aux)", sgot.grads[l][kRouter],
                                   sref.grads[l][kRouter], snaive.grads[l][kRouter], shapes[kRouter], op,
                                   DType::kF32));
    EXPECT_GT(max_abs_diff(sgot.grads[l][kRouter], got.grads[l][kRouter]), 1e-3 * max_abs(got.grads[l][kRouter]));
  }
}

// A capacity factor of 0.7 (5 rows per expert for 40 assignments over 6 experts): the kernel drops what the fp64
// reference drops (each expert's later tokens), and output, input and parameter gradients match it under the same
// bound as dropless; the reference's own gradients with drops match central differences; and drops change the
// output (the capacity bites).
TEST(MoeBlock, CapacityDropsMatchTheFp64ReferenceAndFiniteDifferences) {
  Dims d;
  d.capacity_factor = 0.7;
  ASSERT_EQ(d.capacity(), 5);
  const Problem pb = well_separated_problem(d, 2);
  const float coef = 0.3f;
  const MoeRun got = run_kernel(d, pb.layers, pb.x, pb.G, coef);
  const MoeRun ref = run_reference<double>(d, pb.layers, pb.x, pb.G, coef);
  const MoeRun naive = run_reference<float>(d, pb.layers, pb.x, pb.G, coef);
  ASSERT_EQ(got.idx, ref.idx) << "the kernel routed differently from the reference";
  const TolOp op = TolOp::kDecoderStack;
  EXPECT_TRUE(close_to_reference("out", got.out, ref.out, naive.out, Shape{d.N, d.H}, op, DType::kF32));
  EXPECT_TRUE(close_to_reference("dx", got.dx, ref.dx, naive.dx, Shape{d.N, d.H}, op, DType::kF32));
  expect_grads_close(d, got, ref, naive, op);
  Dims dropless = d;
  dropless.capacity_factor = 0;
  const MoeRun all = run_reference<double>(dropless, pb.layers, pb.x, pb.G, coef);
  EXPECT_GT(max_abs_diff(all.out, ref.out), 1e-2) << "no row was dropped";
  auto loss_with = [&](size_t layer, int p) {
    return [&, layer, p](const Host& v) {
      std::vector<Layer> ls = pb.layers;
      ls[layer].p[size_t(p)] = v;
      double l = 0;
      run_reference<double>(d, ls, pb.x, pb.G, coef, &l, false);
      return l;
    };
  };
  for (size_t l = 0; l < 2; ++l)
    for (int p = 0; p < 4; ++p)
      EXPECT_TRUE(finite_diff_matches("capacity: layer " + std::to_string(l) + " " + kParamName[p], loss_with(l, p),
                                      pb.layers[l].p[size_t(p)], ref.grads[l][size_t(p)]));
}

// A larger problem (several tiles per expert, several norm chunks): bitwise identical for 1, 2 and 3 threads
// and from run to run.
TEST(MoeBlock, BitwiseIdenticalForAnyThreadCount) {
  Dims d;
  d.N = 300;
  d.H = 64;
  d.E = 4;
  d.K = 2;
  d.I = 40;
  std::vector<Layer> layers = {make_layer(d, 11), make_layer(d, 22)};
  const Host x = uniform(d.N * d.H, 33, -1.f, 1.f), G = uniform(d.N * d.H, 44, -1.f, 1.f);
  KernelOptions o1, o2, o3;
  o1.threads = 1;
  o2.threads = 2;
  o3.threads = 3;
  const MoeRun a = run_kernel(d, layers, x, G, 0.01f, o1), b = run_kernel(d, layers, x, G, 0.01f, o2),
            c = run_kernel(d, layers, x, G, 0.01f, o3), b2 = run_kernel(d, layers, x, G, 0.01f, o2);
  ASSERT_FALSE(a.out.empty());
  bool multi_tile = false;
  for (int e = 0; e < d.E; ++e) {
    int64_t rows = 0;
    for (int32_t i : a.idx[0]) rows += i == e;
    multi_tile = multi_tile || rows > kMoeTileRows;
  }
  EXPECT_TRUE(multi_tile) << "no expert spans two row tiles";
  for (const MoeRun* r : {&b, &c, &b2}) {
    EXPECT_TRUE(identical("out", a.out, r->out));
    EXPECT_TRUE(identical("dx", a.dx, r->dx));
    EXPECT_EQ(a.aux, r->aux);
    for (size_t l = 0; l < 2; ++l)
      for (int p = 0; p < 4; ++p)
        EXPECT_TRUE(identical("layer " + std::to_string(l) + " grad " + kParamName[p], a.grads[l][size_t(p)],
                              r->grads[l][size_t(p)]));
  }
}

// Equal router rows give bitwise-equal logits; the tie goes to the lower expert id (top-1: expert 1, never 2;
// top-2 at the boundary: {0, 1}, never 2). h > 0 (positive x and norm weight) fixes the ranking of the others.
TEST(MoeBlock, TiesGoToTheLowerExpertId) {
  for (const int64_t K : {1, 2}) {
    Dims d;
    d.E = 4;
    d.K = K;
    Layer l = make_layer(d, 5);
    const Host v = uniform(d.H, 6, 0.1f, 1.f);
    for (int64_t i = 0; i < d.H; ++i) {
      l.p[kRouter][size_t(0 * d.H + i)] = K == 1 ? 0.0 : 2 * v[size_t(i)];  // K=2: expert 0 first
      l.p[kRouter][size_t(1 * d.H + i)] = v[size_t(i)];
      l.p[kRouter][size_t(2 * d.H + i)] = v[size_t(i)];
      l.p[kRouter][size_t(3 * d.H + i)] = -v[size_t(i)];
    }
    const Host x = uniform(d.N * d.H, 7, 0.1f, 1.f), G = uniform(d.N * d.H, 8, -1.f, 1.f);
    const MoeRun r = run_kernel(d, {l}, x, G, 0.f);
    ASSERT_FALSE(r.idx.empty());
    for (int64_t t = 0; t < d.N; ++t) {
      ASSERT_EQ(r.probs[0][size_t(t * d.E + 1)], r.probs[0][size_t(t * d.E + 2)]) << "not a tie at token " << t;
      if (K == 1) {
        EXPECT_EQ(r.idx[0][size_t(t)], 1) << "token " << t;
      } else {
        EXPECT_EQ(r.idx[0][size_t(t * 2)], 0) << "token " << t;
        EXPECT_EQ(r.idx[0][size_t(t * 2 + 1)], 1) << "token " << t;
      }
    }
    // Expert 2 lost every tie: no expert-weight gradient at all.
    const int64_t gu = d.H * 2 * d.I, dn = d.I * d.H;
    for (int64_t i = 0; i < gu; ++i) ASSERT_EQ(r.grads[0][kGateUp][size_t(2 * gu + i)], 0.0);
    for (int64_t i = 0; i < dn; ++i) ASSERT_EQ(r.grads[0][kDown][size_t(2 * dn + i)], 0.0);
    EXPECT_GT(max_abs(Host(r.grads[0][kDown].begin() + dn, r.grads[0][kDown].begin() + 2 * dn)), 0.0);
  }
}

// An expert no token selects keeps its gradient buffers untouched (bitwise: still the fill value), while the
// experts that do receive tokens change. Its router row still gets a gradient (the softmax couples all logits).
TEST(MoeBlock, ExpertWithoutTokensGetsNoExpertGradient) {
  Dims d;
  Layer l = make_layer(d, 9);
  const int64_t unused = 3;
  for (int64_t i = 0; i < d.H; ++i) l.p[kRouter][size_t(unused * d.H + i)] = -1.0;  // h > 0, |others| < 1 ⇒ lowest
  const Host x = uniform(d.N * d.H, 10, 0.1f, 1.f), G = uniform(d.N * d.H, 11, -1.f, 1.f);
  KernelOptions o;
  o.grad_fill = 0.25f;
  const MoeRun r = run_kernel(d, {l}, x, G, 0.1f, o);
  ASSERT_FALSE(r.idx.empty());
  for (const int32_t e : r.idx[0]) ASSERT_NE(e, unused);
  const int64_t gu = d.H * 2 * d.I, dn = d.I * d.H;
  for (int64_t e = 0; e < d.E; ++e) {
    const Host g(r.grads[0][kGateUp].begin() + e * gu, r.grads[0][kGateUp].begin() + (e + 1) * gu);
    const Host w(r.grads[0][kDown].begin() + e * dn, r.grads[0][kDown].begin() + (e + 1) * dn);
    const bool used = std::count(r.idx[0].begin(), r.idx[0].end(), int32_t(e)) > 0;
    EXPECT_EQ(max_abs_diff(g, Host(g.size(), 0.25)) == 0.0, !used) << "expert " << e << " gate_up";
    EXPECT_EQ(max_abs_diff(w, Host(w.size(), 0.25)) == 0.0, !used) << "expert " << e << " down";
  }
  const Host router_row(r.grads[0][kRouter].begin() + unused * d.H, r.grads[0][kRouter].begin() + (unused + 1) * d.H);
  EXPECT_GT(max_abs_diff(router_row, Host(size_t(d.H), 0.25)), 0.0);
}

// An empty gradient view freezes a parameter: its gradient is not computed, and dx and every other gradient are
// bitwise those of the unfrozen run.
TEST(MoeBlock, FrozenParametersSkipTheirGradientsOnly) {
  const Dims d;
  const Problem pb = well_separated_problem(d, 2);
  const MoeRun full = run_kernel(d, pb.layers, pb.x, pb.G, 0.3f);
  const std::array<std::array<bool, 4>, 5> masks = {{{true, false, false, false},
                                                     {false, true, false, false},
                                                     {false, false, true, true},
                                                     {false, true, true, false},
                                                     {true, true, true, true}}};
  for (const auto& m : masks) {
    KernelOptions o;
    o.frozen = m;
    const MoeRun r = run_kernel(d, pb.layers, pb.x, pb.G, 0.3f, o);
    EXPECT_TRUE(identical("out", r.out, full.out));
    EXPECT_TRUE(identical("dx", r.dx, full.dx));
    for (size_t l = 0; l < 2; ++l)
      for (int p = 0; p < 4; ++p) {
        if (m[size_t(p)]) {
          EXPECT_TRUE(r.grads[l][size_t(p)].empty());
        } else {
          EXPECT_TRUE(identical(std::string("grad ") + kParamName[p], r.grads[l][size_t(p)], full.grads[l][size_t(p)]));
        }
      }
  }
}

TEST(MoeBlock, BackwardAccumulatesAndReportsReadyInReverseOrder) {
  const Dims d;
  const Problem pb = well_separated_problem(d, 1);
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  const auto shapes = param_shapes(d);
  std::array<Tensor, 4> w, g;
  for (int p = 0; p < 4; ++p) {
    w[size_t(p)] = from_host(alloc, shapes[size_t(p)], pb.layers[0].p[size_t(p)]);
    g[size_t(p)] = Tensor::zeros(alloc, shapes[size_t(p)], DType::kF32).value();
  }
  const size_t first = 17;
  nn::MoeBlock block(d.cfg(), d.moe(), {}, {w[0], w[1], w[2], w[3]}, {g[0], g[1], g[2], g[3]}, first);
  Tensor x = from_host(alloc, {d.N, d.H}, pb.x), dout = from_host(alloc, {d.N, d.H}, pb.G);
  Tensor out = Tensor::empty(alloc, {d.N, d.H}, DType::kF32).value(), dx = Tensor::empty(alloc, {d.N, d.H},
                                                                                           DType::kF32).value();
  std::vector<Host> once;
  for (int rep = 0; rep < 2; ++rep) {
    nn::MoeStash st;
    RouterAuxStats stats;
    ASSERT_TRUE(block.forward(ctx, out, x, d.N, st, &stats).ok());
    std::vector<size_t> order;
    std::array<Host, 4> at_ready;
    ASSERT_TRUE(block.backward(ctx, dx, dout, d.N, st, [&](size_t i) {
                       order.push_back(i);
                       at_ready[i - first] = to_f64(g[i - first]);
                       return Status::Ok();
                     }, nn::RouterLossGrads{&stats, 0.5f}).ok());
    const std::vector<size_t> want = {first + 3, first + 2, first + 1, first};
    EXPECT_EQ(order, want);
    for (int p = 0; p < 4; ++p) {
      EXPECT_EQ(at_ready[size_t(p)], to_f64(g[size_t(p)])) << kParamName[p] << " changed after ready()";
      if (rep == 0) once.push_back(to_f64(g[size_t(p)]));
    }
  }
  for (int p = 0; p < 4; ++p) {  // accumulation, not overwrite
    Host doubled = once[size_t(p)];
    for (double& v : doubled) v *= 2;
    EXPECT_TRUE(all_close(std::string("accumulated ") + kParamName[p], to_f64(g[size_t(p)]), doubled,
                          shapes[size_t(p)], 0.0));
  }
}

TEST(MoeBlock, BadInputsAreNamedErrors) {
  const Dims d;
  Allocator alloc;
  Context ctx = test_ctx();
  ctx.allocator = &alloc;
  const auto shapes = param_shapes(d);
  const Layer l = make_layer(d, 3);
  std::array<Tensor, 4> w;
  for (int p = 0; p < 4; ++p) w[size_t(p)] = from_host(alloc, shapes[size_t(p)], l.p[size_t(p)]);
  Tensor x = Tensor::zeros(alloc, {d.N, d.H}, DType::kF32).value();
  Tensor out = Tensor::zeros(alloc, {d.N, d.H}, DType::kF32).value();
  Tensor x_bad = Tensor::zeros(alloc, {d.N, d.H + 1}, DType::kF32).value();
  Tensor gu_bad = Tensor::zeros(alloc, {d.E, d.H, d.I}, DType::kF32).value();  // gate half only
  Tensor router_grad_bad = Tensor::zeros(alloc, {d.H, d.E}, DType::kF32).value();
  const nn::MoeWeights good{w[0], w[1], w[2], w[3]};
  auto expect_error = [&](const Status& s, const std::string& what) {
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.to_string();
  };
  nn::MoeStash st;
  nn::MoeBlock ok_block(d.cfg(), d.moe(), {}, good, {}, 0);
  expect_error(ok_block.forward(ctx, out, x_bad, d.N, st), "x is f32[20, 17] cpu but must be a contiguous f32 [20, 16]");
  nn::MoeBlock gu_block(d.cfg(), d.moe(), {}, {w[0], w[1], gu_bad, w[3]}, {}, 0);
  expect_error(gu_block.forward(ctx, out, x, d.N, st),
               "gate_up weight is f32[6, 16, 8] cpu but must be a contiguous f32 or bf16 [6, 16, 16]");
  nn::MoeBlock g_block(d.cfg(), d.moe(), {}, good, {{}, router_grad_bad, {}, {}}, 0);
  expect_error(g_block.forward(ctx, out, x, d.N, st), "router gradient");
  nn::MoeBlock k_block(d.cfg(), nn::MoeConfig{int(d.E), int(d.E) + 1, d.I}, {}, good, {}, 0);
  expect_error(k_block.forward(ctx, out, x, d.N, st), "top_k 7 exceeds num_experts 6");
  // Backward: a stash from another token count, and grad_aux without statistics.
  ASSERT_TRUE(ok_block.forward(ctx, out, x, d.N, st).ok());
  Tensor dx_small = Tensor::zeros(alloc, {d.N - 1, d.H}, DType::kF32).value();
  expect_error(ok_block.backward(ctx, dx_small, dx_small, d.N - 1, st, {}), "the stash does not come from a "
                                                                           "forward over 19 tokens");
  expect_error(ok_block.backward(ctx, out, x, d.N, st, {}, nn::RouterLossGrads{nullptr, 0.1f}),
               "needs the finished aux statistics");
  nn::RouterLossGrads seq_only;
  seq_only.seq_aux = 0.1f;
  expect_error(ok_block.backward(ctx, out, x, d.N, st, {}, seq_only), "needs the sample bounds (cu_seqlens)");
  Context no_alloc = test_ctx();
  expect_error(ok_block.forward(no_alloc, out, x, d.N, st), "no allocator");
  // A NaN in token 5's input makes its router logits NaN: a kNonFinite error naming the token (never a ranking of
  // NaNs); an infinite logit likewise.
  x.ptr<float>()[5 * d.H + 2] = NAN;
  const Status nan = ok_block.forward(ctx, out, x, d.N, st);
  EXPECT_EQ(nan.code(), StatusCode::kNonFinite) << nan.to_string();
  expect_error(nan, "router_forward: the router logits of token 5 are not finite (expert 0: nan)");
  Tensor logits = Tensor::zeros(alloc, {2, d.E}, DType::kF32).value();
  logits.ptr<float>()[d.E + 3] = INFINITY;
  Tensor rw = Tensor::zeros(alloc, {2, 2}, DType::kF32).value(), ri = Tensor::zeros(alloc, {2, 2}, DType::kI32).value();
  Tensor rp = Tensor::zeros(alloc, {2, d.E}, DType::kF32).value();
  const Status inf = router_forward(ctx, rw, ri, rp, logits, RouterDesc{int(d.E), 2});
  EXPECT_EQ(inf.code(), StatusCode::kNonFinite);
  expect_error(inf, "the router logits of token 1 are not finite (expert 3: inf)");
}

}  // namespace
}  // namespace vlpar::test
