// Expert-parallel dispatch and combine (nn/expert_dispatch.hpp) under mpirun -np 2 and 4, E = 3 · P experts
// (3 per rank), top-2 routing, a different number of tokens per rank and one rank with none:
//   - round trip: dispatch, every local expert multiplies its rows by (global expert id + 1), combine with the
//     routing weights: bitwise equal to EP = 1 (every rank alone with all experts, the same kernels on the same rows
//     in the same order) and within 1e-6 of Σ_k w·(e+1)·x computed here;
//   - payloads that encode (source rank, token, slot, expert) arrive at the rank owning the expert, each local
//     expert's rows ordered by (source rank, token), the counts equal the all-reduced router counts, and come back
//     unchanged;
//   - dispatch with weights and combine with weights are adjoint (⟨D x, y⟩ = ⟨x, C y⟩ over all ranks), so each is
//     the other's backward;
//   - every token to experts 0 and 1: rank 0 receives everything; a receive bound below that is a named error on
//     every rank, naming the rank and the rows; a bad expert id on one rank is named there and reported by the
//     others; experts not divisible by the ep size are named.
// And the MoE block on it (nn/moe_block.hpp with nn::ExpertParallel), MoeExpertParallel.*: the ep group is every
// rank, E = 2 · P experts (2 per rank), top-2, every rank its own tokens (9, 0, 13, 6 at ranks 0..3),
// the full weights from one seed, each rank holding its experts' [2, …] slices. Against every rank running the
// block alone with all E experts on its own tokens (EP = 1), with the load-balancing term:
//   - the output, the input gradient and the router and norm gradients are bitwise equal (the experts see each
//     token's rows in the same order and the combine sums at the source in the same order);
//   - each local expert's weight gradient equals the sum over the ranks of the EP = 1 gradients of that expert
//     (one grouped GEMM over every source's rows against a per-rank GEMM then a sum: fp32 reassociation, within
//     1e-5 relative of the largest element);
//   - the ready() order is unchanged; experts that do not divide over the ranks are a named error.
// MoeSequenceParallel.*: the world as a tp group with sequence parallelism (each rank routes its own N / tp tokens),
// with and without the experts split over the same ranks, against one process running the whole micro-batch.
// Run: ctest --preset emu -R test_expert_dispatch   (mpirun -np 2 and -np 4)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>

#include "mpi/mpi_test_util.hpp"
#include "test_util.hpp"
#include "vlpar/nn/expert_dispatch.hpp"
#include "vlpar/nn/moe_block.hpp"

namespace vlpar::test {
namespace {

using nn::ExpertDispatch;

constexpr int kTopK = 2;
constexpr int64_t kWidth = 5;

int64_t tokens_of(int rank) { return std::vector<int64_t>{7, 0, 11, 4}[size_t(rank % 4)]; }

/// Distinct top-2 ids per token, spread over every expert (a rank-dependent pattern).
std::vector<int32_t> route(int rank, int64_t T, int E) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    const int e0 = int((t * 7 + rank * 3) % E);
    const int e1 = (e0 + 1 + int((t + rank) % (E - 1))) % E;
    ids.push_back(e0);
    ids.push_back(e1);
  }
  return ids;
}

/// Dyadic routing weights (exact products with small integers).
std::vector<float> weights_of(int64_t T) {
  std::vector<float> w;
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < kTopK; ++k) w.push_back(float(1 + (t + k) % 3) / 8.f);
  return w;
}

struct Routed {
  std::unique_ptr<comm::Communicator> ep;
  Allocator alloc;
  Context ctx;
  int rank = 0, P = 1, E = 0;
  int64_t T = 0;
  std::vector<int32_t> ids;
  std::vector<float> w;
  Routed() {
    ep = world_comm("ep");
    rank = ep->rank();
    P = ep->size();
    E = 3 * P;
    T = tokens_of(rank);
    ids = route(rank, T, E);
    w = weights_of(T);
    ctx.allocator = &alloc;
  }
  TensorView indices() { return TensorView(ids.data(), DType::kI32, Shape{T, kTopK}); }
  TensorView weights() { return TensorView(w.data(), DType::kF32, Shape{T, kTopK}); }
};

/// Each local expert multiplies its rows by (global id + 1) (the "experts" of the round trip).
void run_experts(const ExpertDispatch& d, Tensor& rows) {
  for (int e = 0; e < d.local_experts; ++e) {
    const float f = float(d.ep_rank * d.local_experts + e + 1);
    for (int64_t r = d.expert_offsets[size_t(e)]; r < d.expert_offsets[size_t(e) + 1]; ++r)
      for (int64_t c = 0; c < kWidth; ++c) rows.ptr<float>()[r * kWidth + c] *= f;
  }
}

/// dispatch → experts → combine over `ep` (null: EP = 1 on this rank alone).
Tensor round_trip(Routed& s, comm::Communicator* ep, const Tensor& x, const nn::DispatchOptions& o = {}) {
  auto d = nn::plan_expert_dispatch(s.ctx, ep, s.indices(), s.E, o);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  Tensor rows = Tensor::empty(s.alloc, Shape{d->received(), kWidth}, DType::kF32).value();
  EXPECT_TRUE(nn::dispatch_rows(s.ctx, ep, d.value(), rows, x).ok());
  run_experts(d.value(), rows);
  Tensor out = Tensor::empty(s.alloc, Shape{s.T, kWidth}, DType::kF32).value();
  const Status st = nn::combine_rows(s.ctx, ep, d.value(), out, rows, s.weights());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST(ExpertDispatch, RoundTripEqualsOneRankBitwise) {
  Routed s;
  const Tensor x = random_tensor(s.alloc, Shape{s.T, kWidth}, DType::kF32, 100 + uint64_t(s.rank));
  const Tensor ep_out = round_trip(s, s.ep.get(), x);
  const Tensor one = round_trip(s, nullptr, x);
  EXPECT_EQ(std::memcmp(ep_out.view().data, one.view().data, size_t(one.view().nbytes())), 0)
      << "EP = " << s.P << " differs from EP = 1";
  for (int64_t t = 0; t < s.T; ++t) {
    // Σ over the token's slots in ascending expert order.
    std::vector<int> slots = {0, 1};
    std::sort(slots.begin(), slots.end(),
              [&](int a, int b) { return s.ids[size_t(t * kTopK + a)] < s.ids[size_t(t * kTopK + b)]; });
    for (int64_t c = 0; c < kWidth; ++c) {
      double want = 0;
      for (int k : slots)
        want += double(s.w[size_t(t * kTopK + k)]) * double(s.ids[size_t(t * kTopK + k)] + 1) *
                double(x.ptr<float>()[t * kWidth + c]);
      EXPECT_NEAR(ep_out.ptr<float>()[t * kWidth + c], want, 1e-6 * (1 + std::abs(want))) << "token " << t;
    }
  }
}

TEST(ExpertDispatch, PayloadsArriveAtTheirExpertsInSourceTokenOrder) {
  Routed s;
  // Per assignment: (source rank, token, slot, expert), exact in f32.
  std::vector<float> tag;
  for (int64_t t = 0; t < s.T; ++t)
    for (int k = 0; k < kTopK; ++k)
      for (float v : {float(s.rank), float(t), float(k), float(s.ids[size_t(t * kTopK + k)])}) tag.push_back(v);
  const TensorView in(tag.data(), DType::kF32, Shape{s.T * kTopK, 4});
  auto d = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Tensor got = Tensor::empty(s.alloc, Shape{d->received(), 4}, DType::kF32).value();
  ASSERT_TRUE(nn::dispatch_assignments(s.ctx, s.ep.get(), d.value(), got, in).ok());
  // Global per-expert counts, all-reduced.
  std::vector<double> counts(size_t(s.E), 0.0);
  for (int32_t e : s.ids) counts[size_t(e)] += 1;
  ASSERT_TRUE(s.ep->all_reduce(TensorView(counts.data(), DType::kF64, Shape{s.E}), comm::ReduceOp::kSum).ok());
  const float* g = got.ptr<float>();
  for (int e = 0; e < d->local_experts; ++e) {
    const int ge = s.rank * d->local_experts + e;
    EXPECT_EQ(d->expert_rows(e), int64_t(counts[size_t(ge)])) << "expert " << ge;
    for (int64_t r = d->expert_offsets[size_t(e)]; r < d->expert_offsets[size_t(e) + 1]; ++r) {
      EXPECT_EQ(g[r * 4 + 3], float(ge)) << "row " << r << " of expert " << ge;
      if (r > d->expert_offsets[size_t(e)]) {
        const auto prev = std::make_tuple(g[(r - 1) * 4], g[(r - 1) * 4 + 1]);
        EXPECT_LT(prev, std::make_tuple(g[r * 4], g[r * 4 + 1])) << "rows of expert " << ge << " out of order";
      }
    }
  }
  // Token rows travel like the assignments' first two fields.
  std::vector<float> tok;
  for (int64_t t = 0; t < s.T; ++t) tok.insert(tok.end(), {float(s.rank), float(t)});
  Tensor rows = Tensor::empty(s.alloc, Shape{d->received(), 2}, DType::kF32).value();
  ASSERT_TRUE(nn::dispatch_rows(s.ctx, s.ep.get(), d.value(), rows,
                                      TensorView(tok.data(), DType::kF32, Shape{s.T, 2})).ok());
  for (int64_t r = 0; r < d->received(); ++r) {
    EXPECT_EQ(rows.ptr<float>()[r * 2], g[r * 4]);
    EXPECT_EQ(rows.ptr<float>()[r * 2 + 1], g[r * 4 + 1]);
  }
  // And back, unchanged.
  std::vector<float> back(tag.size(), -1.f);
  ASSERT_TRUE(nn::combine_assignments(s.ctx, s.ep.get(), d.value(),
                                            TensorView(back.data(), DType::kF32, Shape{s.T * kTopK, 4}), got).ok());
  EXPECT_EQ(back, tag);
}

TEST(ExpertDispatch, WeightedDispatchAndCombineAreAdjoint) {
  Routed s;
  auto d = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const Tensor x = random_tensor(s.alloc, Shape{s.T, kWidth}, DType::kF32, 200 + uint64_t(s.rank));
  const Tensor y = random_tensor(s.alloc, Shape{d->received(), kWidth}, DType::kF32, 300 + uint64_t(s.rank));
  Tensor dx = Tensor::empty(s.alloc, Shape{d->received(), kWidth}, DType::kF32).value();
  Tensor cy = Tensor::empty(s.alloc, Shape{s.T, kWidth}, DType::kF32).value();
  ASSERT_TRUE(nn::dispatch_rows(s.ctx, s.ep.get(), d.value(), dx, x, s.weights()).ok());
  ASSERT_TRUE(nn::combine_rows(s.ctx, s.ep.get(), d.value(), cy, y, s.weights()).ok());
  double dots[2] = {0, 0};  // ⟨D x, y⟩ on the experts' side, ⟨x, C y⟩ on the tokens' side
  for (int64_t i = 0; i < dx.numel(); ++i) dots[0] += double(dx.ptr<float>()[i]) * y.ptr<float>()[i];
  for (int64_t i = 0; i < cy.numel(); ++i) dots[1] += double(x.ptr<float>()[i]) * cy.ptr<float>()[i];
  ASSERT_TRUE(s.ep->all_reduce(TensorView(dots, DType::kF64, Shape{2}), comm::ReduceOp::kSum).ok());
  EXPECT_NEAR(dots[0], dots[1], 1e-5 * (std::abs(dots[0]) + 1));
  EXPECT_NE(dots[0], 0.0);
}

TEST(ExpertDispatch, EverythingToOneExpertAndTheReceiveBound) {
  Routed s;
  for (int64_t t = 0; t < s.T; ++t) {
    s.ids[size_t(t * kTopK)] = 1;
    s.ids[size_t(t * kTopK + 1)] = 0;
  }
  const Tensor x = random_tensor(s.alloc, Shape{s.T, kWidth}, DType::kF32, 400 + uint64_t(s.rank));
  const Tensor ep_out = round_trip(s, s.ep.get(), x);
  const Tensor one = round_trip(s, nullptr, x);
  EXPECT_EQ(std::memcmp(ep_out.view().data, one.view().data, size_t(one.view().nbytes())), 0);
  double total = double(s.T * kTopK);
  ASSERT_TRUE(s.ep->all_reduce(TensorView(&total, DType::kF64, Shape{1}), comm::ReduceOp::kSum).ok());
  auto d = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(double(d->received()), s.rank == 0 ? total : 0.0);
  nn::DispatchOptions bounded;
  bounded.max_recv_rows = int64_t(total) - 1;
  auto refused = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E, bounded);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(fmt::format("ep rank 0 would receive {} rows, more than max_recv_rows = {}",
                                                        int64_t(total), int64_t(total) - 1)),
            std::string::npos)
      << refused.status().to_string();
}

// A capacity factor of 0.5 (⌈0.5 · T·K / E⌉ rows per expert and source rank): every expert keeps the rows of its
// lowest tokens on each source; the round trip at EP = np equals each rank alone bitwise (the capacity is per
// source rank, so the same rows drop), the dropped count is the one counted here, and each token's sum has exactly
// its kept experts' terms; the dropped assignments come back from combine_assignments as zeros.
TEST(ExpertDispatch, CapacityDropsTheSameRowsAtAnyEpAndCountsThem) {
  Routed s;
  nn::DispatchOptions o;
  o.capacity_factor = 0.5;
  const int64_t C = int64_t(std::ceil(0.5 * double(s.T * kTopK) / double(s.E)));
  std::vector<int64_t> taken(size_t(s.E), 0);
  std::vector<bool> kept(s.ids.size());
  int64_t dropped = 0;
  for (size_t a = 0; a < s.ids.size(); ++a) {
    kept[a] = taken[size_t(s.ids[a])]++ < C;
    dropped += !kept[a];
  }
  const Tensor x = random_tensor(s.alloc, Shape{s.T, kWidth}, DType::kF32, 500 + uint64_t(s.rank));
  const Tensor ep_out = round_trip(s, s.ep.get(), x, o);
  const Tensor one = round_trip(s, nullptr, x, o);
  EXPECT_EQ(std::memcmp(ep_out.view().data, one.view().data, size_t(one.view().nbytes())), 0)
      << "EP = " << s.P << " with a capacity differs from EP = 1";
  auto d = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E, o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->capacity, s.T > 0 ? C : 0);
  EXPECT_EQ(d->dropped, dropped);
  double all_dropped = double(dropped);
  ASSERT_TRUE(s.ep->all_reduce(TensorView(&all_dropped, DType::kF64, Shape{1}), comm::ReduceOp::kSum).ok());
  EXPECT_GT(all_dropped, 0) << "the capacity dropped nothing anywhere";
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t c = 0; c < kWidth; ++c) {
      double want = 0;
      for (int k = 0; k < kTopK; ++k)
        if (kept[size_t(t * kTopK + k)])
          want += double(s.w[size_t(t * kTopK + k)]) * double(s.ids[size_t(t * kTopK + k)] + 1) *
                  double(x.ptr<float>()[t * kWidth + c]);
      EXPECT_NEAR(ep_out.ptr<float>()[t * kWidth + c], want, 1e-6 * (1 + std::abs(want))) << "token " << t;
    }
  std::vector<float> tag(s.ids.size(), 0.f), back(s.ids.size(), -1.f);
  for (size_t a = 0; a < tag.size(); ++a) tag[a] = float(a + 1);
  Tensor rows = Tensor::empty(s.alloc, Shape{d->received(), 1}, DType::kF32).value();
  ASSERT_TRUE(nn::dispatch_assignments(s.ctx, s.ep.get(), d.value(), rows,
                                       TensorView(tag.data(), DType::kF32, Shape{s.T * kTopK, 1})).ok());
  ASSERT_TRUE(nn::combine_assignments(s.ctx, s.ep.get(), d.value(),
                                      TensorView(back.data(), DType::kF32, Shape{s.T * kTopK, 1}), rows).ok());
  for (size_t a = 0; a < tag.size(); ++a) EXPECT_EQ(back[a], kept[a] ? tag[a] : 0.f) << "assignment " << a;
  nn::DispatchOptions bad;
  bad.capacity_factor = -1;
  auto refused = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("capacity_factor must be finite and >= 0"), std::string::npos)
      << refused.status().to_string();
}

TEST(ExpertDispatch, BadInputIsNamedOnEveryRank) {
  Routed s;
  const int bad = 0;  // a rank with tokens
  if (s.rank == bad) s.ids[0] = s.E + 5;
  auto d = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E);
  ASSERT_FALSE(d.ok());
  if (s.rank == bad) {
    EXPECT_NE(d.status().message().find(fmt::format("indices[0, 0] = {} is outside [0, {})", s.E + 5, s.E)),
              std::string::npos) << d.status().to_string();
  } else {
    EXPECT_NE(d.status().message().find(fmt::format("ep rank(s) {} could not route or plan the dispatch", bad)),
              std::string::npos) << d.status().to_string();
  }
  auto uneven = nn::plan_expert_dispatch(s.ctx, s.ep.get(), s.indices(), s.E + 1);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("experts cannot be split evenly over the"), std::string::npos)
      << uneven.status().to_string();
}

// ---- the MoE block with expert parallelism ----------------------------------------------------------------------

namespace block {


constexpr int64_t kH = 16, kI = 8;
constexpr int kK = 2;

int64_t tokens_of(int rank) { return std::vector<int64_t>{9, 0, 13, 6}[size_t(rank % 4)]; }

nn::TransformerConfig block_config(DType activation = DType::kF32) {
  nn::TransformerConfig c;
  c.hidden = kH;
  c.eps = 1e-6f;
  c.activation = activation;
  return c;
}

/// The full weights (same on every rank; the expert matrices in `dt`) and zeroed gradients (f32), with E experts.
struct Weights {
  Tensor norm, router, gate_up, down;
  Weights(Allocator& a, int64_t E, bool grads, DType dt = DType::kF32) {
    if (grads) {
      norm = Tensor::zeros(a, {kH}, DType::kF32).value();
      router = Tensor::zeros(a, {E, kH}, DType::kF32).value();
      gate_up = Tensor::zeros(a, {E, kH, 2 * kI}, DType::kF32).value();
      down = Tensor::zeros(a, {E, kI, kH}, DType::kF32).value();
      return;
    }
    norm = random_tensor(a, {kH}, DType::kF32, 1, 0.5f, 1.5f);
    router = random_tensor(a, {E, kH}, DType::kF32, 2, -1.f, 1.f);
    gate_up = random_tensor(a, {E, kH, 2 * kI}, dt, 3, -0.3f, 0.3f);
    down = random_tensor(a, {E, kI, kH}, dt, 4, -0.3f, 0.3f);
  }
  /// Experts [first, first + n) of the expert weights; norm and router whole.
  nn::MoeWeights slice(int64_t first, int64_t n) const {
    return {norm, router, gate_up.view().slice(0, first, first + n), down.view().slice(0, first, first + n)};
  }
};

struct BlockRun {
  Tensor out, dx;
};

BlockRun run_block(const Context& ctx, Allocator& alloc, const nn::MoeBlock& block, const Tensor& x, const Tensor& dout,
              int64_t N, std::vector<size_t>* order) {
  BlockRun r{Tensor::empty(alloc, {N, kH}, x.dtype()).value(), Tensor::empty(alloc, {N, kH}, x.dtype()).value()};
  nn::MoeStash st;
  RouterAuxStats stats;
  Status s = block.forward(ctx, r.out, x, N, st, &stats);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = block.backward(ctx, r.dx, dout, N, st, [&](size_t i) {
    if (order) order->push_back(i);
    return Status::Ok();
  }, nn::RouterLossGrads{&stats, 0.25f});
  EXPECT_TRUE(s.ok()) << s.to_string();
  return r;
}

::testing::AssertionResult same_bits(const char* what, TensorView a, TensorView b) {
  if (a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, size_t(a.nbytes())) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " differs from EP = 1";
}

void check_expert_parallel(double capacity_factor) {
  auto ep = world_comm("ep");
  ASSERT_TRUE(ep);
  const int P = ep->size(), rank = ep->rank();
  const int64_t E = 2 * P, El = 2, N = tokens_of(rank);
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const Weights w(alloc, E, false);
  Weights g_one(alloc, E, true), g_ep(alloc, E, true);
  const Tensor x = random_tensor(alloc, {N, kH}, DType::kF32, 10 + uint64_t(rank));
  const Tensor dout = random_tensor(alloc, {N, kH}, DType::kF32, 20 + uint64_t(rank));
  const nn::MoeConfig mc{int(E), kK, kI, capacity_factor};

  const nn::MoeBlock one(block_config(), mc, {}, w.slice(0, E), g_one.slice(0, E), 0);
  const BlockRun a = run_block(ctx, alloc, one, x, dout, N, nullptr);
  std::vector<size_t> order;
  const nn::MoeBlock sharded(block_config(), mc, {}, w.slice(rank * El, El), g_ep.slice(rank * El, El), 0,
                             nn::ExpertParallel{ep.get()});
  const BlockRun b = run_block(ctx, alloc, sharded, x, dout, N, &order);

  EXPECT_TRUE(same_bits("out", a.out, b.out));
  EXPECT_TRUE(same_bits("dx", a.dx, b.dx));
  EXPECT_TRUE(same_bits("router gradient", g_one.router, g_ep.router));
  EXPECT_TRUE(same_bits("norm gradient", g_one.norm, g_ep.norm));
  EXPECT_EQ(order, (std::vector<size_t>{3, 2, 1, 0}));
  // Expert gradients: Σ over ranks of the EP = 1 gradients, against this rank's slice.
  for (Tensor* t : {&g_one.gate_up, &g_one.down})
    ASSERT_TRUE(ep->all_reduce(*t, comm::ReduceOp::kSum).ok());
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> experts[] = {
      {"gate_up", {&g_one.gate_up, &g_ep.gate_up}}, {"down", {&g_one.down, &g_ep.down}}};
  for (const auto& [name, pair] : experts) {
    const TensorView want = pair.first->view().slice(0, rank * El, (rank + 1) * El);
    const TensorView got = pair.second->view().slice(0, rank * El, (rank + 1) * El);
    const std::vector<double> wv = to_f64(want), gv = to_f64(got);
    double scale = 0;
    for (double v : wv) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0.0) << name << ": no rows reached this rank's experts";
    for (size_t i = 0; i < wv.size(); ++i) ASSERT_NEAR(gv[i], wv[i], 1e-5 * scale) << name << " element " << i;
  }
}

TEST(MoeExpertParallel, MatchesEveryExpertOnOneRank) { check_expert_parallel(0); }
// With a capacity factor of 0.6 the same rows drop at EP = np as on one rank (per-source capacity): still bitwise.
TEST(MoeExpertParallel, WithACapacityMatchesEveryExpertOnOneRank) { check_expert_parallel(0.6); }

TEST(MoeExpertParallel, ExpertsNotDividingTheRanksAreNamed) {
  auto ep = world_comm("ep");
  ASSERT_TRUE(ep);
  const int P = ep->size();
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const int64_t E = 2 * P + 1;
  const Weights w(alloc, E, false);
  const nn::MoeBlock block(block_config(), nn::MoeConfig{int(E), kK, kI}, {}, w.slice(0, 2), {}, 0,
                           nn::ExpertParallel{ep.get()});
  Tensor x = Tensor::zeros(alloc, {3, kH}, DType::kF32).value();
  Tensor out = Tensor::zeros(alloc, {3, kH}, DType::kF32).value();
  nn::MoeStash st;
  const Status s = block.forward(ctx, out, x, 3, st);
  EXPECT_NE(s.message().find(std::to_string(E) + " experts cannot be split evenly over " + std::to_string(P) +
                             " expert-parallel ranks"),
            std::string::npos) << s.to_string();
}

/// |a − b| ≤ tol · max|b| elementwise (a sum over tp ranks against one sum over every row: fp32 reassociation).
::testing::AssertionResult near(const char* what, TensorView a, TensorView b, double tol) {
  const std::vector<double> av = to_f64(a), bv = to_f64(b);
  if (av.size() != bv.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double scale = 0;
  for (double v : bv) scale = std::max(scale, std::abs(v));
  if (scale == 0) return ::testing::AssertionFailure() << what << ": the reference is all zero";
  for (size_t i = 0; i < av.size(); ++i)
    if (std::abs(av[i] - bv[i]) > tol * scale)
      return ::testing::AssertionFailure() << what << " element " << i << ": " << av[i] << " vs " << bv[i];
  return ::testing::AssertionSuccess();
}

// ---- the MoE block with expert tensor parallelism -----------------------------------------------------------------

/// Experts [e0, e0 + n) of gate_up [E, H, 2I] / down [E, I, H], width slice w of T: gate_up keeps its gate columns
/// [w·I/T, (w+1)·I/T) then the same up columns, down those rows.
Tensor cut_gate_up(Allocator& a, const Tensor& full, int64_t e0, int64_t n, int w, int T) {
  const int64_t H = full.shape()[1], I = full.shape()[2] / 2, Il = I / T;
  const size_t es = dtype_size(full.dtype());
  Tensor out = Tensor::empty(a, {n, H, 2 * Il}, full.dtype()).value();
  for (int64_t e = 0; e < n; ++e)
    for (int64_t h = 0; h < H; ++h)
      for (int half = 0; half < 2; ++half)
        std::memcpy(out.ptr<char>() + size_t((e * H + h) * 2 * Il + half * Il) * es,
                    full.ptr<char>() + size_t(((e0 + e) * H + h) * 2 * I + half * I + w * Il) * es, size_t(Il) * es);
  return out;
}
Tensor cut_down(Allocator& a, const Tensor& full, int64_t e0, int64_t n, int w, int T) {
  const int64_t I = full.shape()[1], H = full.shape()[2], Il = I / T;
  const size_t es = dtype_size(full.dtype());
  Tensor out = Tensor::empty(a, {n, Il, H}, full.dtype()).value();
  for (int64_t e = 0; e < n; ++e)
    std::memcpy(out.ptr<char>() + size_t(e * Il * H) * es, full.ptr<char>() + size_t(((e0 + e) * I + w * Il) * H) * es,
                size_t(Il * H) * es);
  return out;
}

// Expert tensor parallelism: at np 2 the world is one etp pair (ep 1), at np 4 etp pairs {0,1} {2,3} with ep pairs
// {0,2} {1,3}; each rank routes its own tokens (at np 4 one rank none). Against every rank running the whole
// experts on its own tokens: outputs and input gradients within `tol` of their scale (the down projection's sum
// over I is split over the etp ranks and added back), the router and norm gradients (this rank's tokens) too, and
// each rank's slice of the expert weight gradients (its experts, its width) equals the slice of the world-summed
// whole gradients within `tol`. Activations and expert weights in `dt`.
void check_expert_tensor_parallel(DType dt, double tol) {
  auto world = world_comm("world");
  ASSERT_TRUE(world);
  const int P = world->size(), r = world->rank(), T = 2, EP = P / T;
  auto etp = world->split(r / T, r % T, test_options("etp"));
  auto epc = world->split(r % T, r / T, test_options("ep"));
  ASSERT_TRUE(etp.ok() && epc.ok());
  const int64_t E = 4, El = E / EP, e0 = (r / T) * El;
  const int64_t N = std::vector<int64_t>{9, 5, 13, 0}[size_t(r % 4)];  // both ranks of an etp pair hold rows at np 2
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const block::Weights w(alloc, E, false, dt);
  block::Weights g_one(alloc, E, true), g_etp(alloc, E, true);
  Tensor gu_l = cut_gate_up(alloc, w.gate_up, e0, El, r % T, T), dn_l = cut_down(alloc, w.down, e0, El, r % T, T);
  Tensor ggu_l = Tensor::zeros(alloc, gu_l.shape(), DType::kF32).value();
  Tensor gdn_l = Tensor::zeros(alloc, dn_l.shape(), DType::kF32).value();
  const Tensor x = random_tensor(alloc, {N, block::kH}, dt, 50 + uint64_t(r));
  const Tensor dout = random_tensor(alloc, {N, block::kH}, dt, 60 + uint64_t(r));
  const nn::MoeConfig mc{int(E), block::kK, block::kI};
  const block::BlockRun a = block::run_block(ctx, alloc, nn::MoeBlock(block::block_config(dt), mc, {}, w.slice(0, E),
                                                                      g_one.slice(0, E), 0), x, dout, N, nullptr);
  const nn::MoeBlock split(block::block_config(dt), mc, {}, {w.norm, w.router, gu_l, dn_l},
                           {g_etp.norm, g_etp.router, ggu_l, gdn_l}, 0,
                           nn::ExpertParallel{EP > 1 ? epc.value().get() : nullptr, etp.value().get()});
  const block::BlockRun b = block::run_block(ctx, alloc, split, x, dout, N, nullptr);
  if (N > 0) {
    EXPECT_TRUE(near("out", b.out, a.out, tol));
    EXPECT_TRUE(near("dx", b.dx, a.dx, tol));
    EXPECT_TRUE(near("router gradient", g_etp.router, g_one.router, tol));
    EXPECT_TRUE(near("norm gradient", g_etp.norm, g_one.norm, tol));
  }
  for (Tensor* t : {&g_one.gate_up, &g_one.down}) ASSERT_TRUE(world->all_reduce(*t, comm::ReduceOp::kSum).ok());
  EXPECT_TRUE(near("gate_up gradient", ggu_l, cut_gate_up(alloc, g_one.gate_up, e0, El, r % T, T), tol));
  EXPECT_TRUE(near("down gradient", gdn_l, cut_down(alloc, g_one.down, e0, El, r % T, T), tol));
}

TEST(MoeExpertTensorParallel, MatchesWholeExpertsOnEveryRank) { check_expert_tensor_parallel(DType::kF32, 1e-5); }
// bf16 activations and expert weights: each rank's partial down projection is rounded to bf16 before the partials
// are summed (in f32) and rounded again, where the whole experts round their f32 sum once: three roundings of
// 2^-9 relative each, so the outputs agree within 2^-7 of their scale (the gradients, f32, within the same).
TEST(MoeExpertTensorParallel, Bf16MatchesWholeExpertsOnEveryRank) {
  check_expert_tensor_parallel(DType::kBF16, 0.0078125);
}

// ---- the MoE block under sequence parallelism ---------------------------------------------------------------------


/// The world as the tp group with sequence parallelism: rank r holds rows [r·n, (r+1)·n) of one micro-batch of
/// P·n tokens in three samples that cross the ranks' boundaries, with the aux, z and sequence-level losses on.
/// Against one process running the whole micro-batch: outputs and input gradients bitwise (per-row arithmetic;
/// the loss gradients read only exact counts), the loss terms and the router and norm gradients (summed over tp)
/// and the experts' gradients (this rank's part; summed over tp here, as the optimizer's expert-dp reduction does)
/// within 1e-5. With `ep` the experts are also split over the same ranks (EP × TP: the ep group is the tp group).
void check_sequence_parallel(bool ep) {
  auto tp = world_comm("tp");
  ASSERT_TRUE(tp);
  const int P = tp->size(), rank = tp->rank();
  const int64_t n = 6, Ntok = P * n, E = 2 * P, El = ep ? 2 : E, first = rank * n;
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const Weights w(alloc, E, false);
  Weights g_one(alloc, E, true), g_sp(alloc, E, true);
  const Tensor x = random_tensor(alloc, {Ntok, kH}, DType::kF32, 30);
  const Tensor dout = random_tensor(alloc, {Ntok, kH}, DType::kF32, 31);
  std::vector<int32_t> cu = {0, 3, int32_t(Ntok - 2), int32_t(Ntok)};
  const TensorView cu_v(cu.data(), DType::kI32, Shape{4});
  const nn::MoeConfig mc{int(E), kK, kI};
  auto run = [&](const nn::MoeBlock& b, TensorView in, TensorView d, int64_t rows, Tensor& out, Tensor& dx,
                 RouterAuxStats& stats) {
    out = Tensor::empty(alloc, {rows, kH}, DType::kF32).value();
    dx = Tensor::empty(alloc, {rows, kH}, DType::kF32).value();
    nn::MoeStash st;
    Status s = b.forward(ctx, out, in, Ntok, st, &stats, cu_v);
    ASSERT_TRUE(s.ok()) << s.to_string();
    s = b.backward(ctx, dx, d, Ntok, st, {}, nn::RouterLossGrads{&stats, 0.25f, 0.125f, 0.5f});
    ASSERT_TRUE(s.ok()) << s.to_string();
  };
  Tensor out1, dx1, out2, dx2;
  RouterAuxStats s1, s2;
  run(nn::MoeBlock(block_config(), mc, {}, w.slice(0, E), g_one.slice(0, E), 0), x, dout, Ntok, out1, dx1, s1);
  const nn::MoeBlock sp(block_config(), mc, nn::TensorParallel{tp.get(), true},
                        w.slice(ep ? rank * El : 0, El), g_sp.slice(ep ? rank * El : 0, El), 0,
                        nn::ExpertParallel{ep ? tp.get() : nullptr});
  run(sp, x.view().slice(0, first, first + n), dout.view().slice(0, first, first + n), n, out2, dx2, s2);

  EXPECT_TRUE(same_bits("out", out2, out1.view().slice(0, first, first + n)));
  EXPECT_TRUE(same_bits("dx", dx2, dx1.view().slice(0, first, first + n)));
  EXPECT_EQ(s2.rows, Ntok);
  EXPECT_EQ(s2.counts, s1.counts);
  EXPECT_NEAR(router_aux_loss(s2).value(), router_aux_loss(s1).value(), 1e-6);
  EXPECT_NEAR(s2.z_sum, s1.z_sum, 1e-6 * std::abs(s1.z_sum));
  EXPECT_NEAR(s2.seq_aux_sum, s1.seq_aux_sum, 1e-6 * std::abs(s1.seq_aux_sum));
  EXPECT_TRUE(near("router gradient", g_sp.router, g_one.router, 1e-5));
  EXPECT_TRUE(near("norm gradient", g_sp.norm, g_one.norm, 1e-5));
  for (Tensor* t : {&g_sp.gate_up, &g_sp.down}) {  // without EP each rank holds its tokens' part
    if (!ep) {
      ASSERT_TRUE(tp->all_reduce(*t, comm::ReduceOp::kSum).ok());
    }
  }
  const int64_t e0 = ep ? rank * El : 0;
  EXPECT_TRUE(near("gate_up gradient", g_sp.gate_up.view().slice(0, e0, e0 + El),
                   g_one.gate_up.view().slice(0, e0, e0 + El), 1e-5));
  EXPECT_TRUE(near("down gradient", g_sp.down.view().slice(0, e0, e0 + El), g_one.down.view().slice(0, e0, e0 + El),
                   1e-5));
}

TEST(MoeSequenceParallel, MatchesTheWholeSequenceOnOneRank) { check_sequence_parallel(false); }
TEST(MoeSequenceParallel, ExpertParallelOverTheTpRanksMatches) { check_sequence_parallel(true); }

// A NaN in one rank's input (its router logits) is a kNonFinite error on every rank of the group that would meet
// it in a collective: the ep group (agreed in the dispatch plan) and the tp group under SP (agreed before the
// statistics' gather). The rank that has it names the token; the others name that rank. Nothing hangs.
void check_non_finite_router(bool sp) {
  auto group = world_comm("group");
  ASSERT_TRUE(group);
  const int P = group->size(), rank = group->rank(), bad = P - 1;
  const int64_t n = 6, E = 2 * P;
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const Weights w(alloc, E, false);
  Tensor x = random_tensor(alloc, {n, kH}, DType::kF32, 40 + uint64_t(rank));
  if (rank == bad) x.ptr<float>()[3 * kH + 1] = NAN;
  Tensor out = Tensor::empty(alloc, {n, kH}, DType::kF32).value();
  const nn::MoeBlock block(block_config(), nn::MoeConfig{int(E), kK, kI},
                           nn::TensorParallel{sp ? group.get() : nullptr, sp}, w.slice(rank * 2, 2), {}, 0,
                           nn::ExpertParallel{group.get()});
  nn::MoeStash st;
  RouterAuxStats stats;
  const Status s = block.forward(ctx, out, x, sp ? n * P : n, st, &stats);
  EXPECT_EQ(s.code(), StatusCode::kNonFinite) << s.to_string();
  const std::string want = rank == bad ? "the router logits of token 3 are not finite"
                                       : fmt::format("rank(s) {} ", bad);
  EXPECT_NE(s.message().find(want), std::string::npos) << s.to_string();
  ASSERT_TRUE(group->barrier().ok());  // every rank got here: none waits in a collective of the block
}

TEST(MoeExpertParallel, NonFiniteRouterLogitsAreANamedErrorOnEveryRank) { check_non_finite_router(false); }
TEST(MoeSequenceParallel, NonFiniteRouterLogitsAreANamedErrorOnEveryRank) { check_non_finite_router(true); }

TEST(MoeSequenceParallel, TokensNotSplittingOverTpAreNamed) {
  auto tp = world_comm("tp");
  ASSERT_TRUE(tp);
  const int P = tp->size();
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const Weights w(alloc, 4, false);
  const nn::MoeBlock block(block_config(), nn::MoeConfig{4, kK, kI}, nn::TensorParallel{tp.get(), true},
                           w.slice(0, 4), {}, 0);
  Tensor x = Tensor::zeros(alloc, {1, kH}, DType::kF32).value();
  Tensor out = Tensor::zeros(alloc, {1, kH}, DType::kF32).value();
  nn::MoeStash st;
  const Status s = block.forward(ctx, out, x, P + 1, st);
  EXPECT_NE(s.message().find(fmt::format("{} tokens do not split evenly over tp={}", P + 1, P)), std::string::npos)
      << s.to_string();
}

}  // namespace block

}  // namespace
}  // namespace vlpar::test
