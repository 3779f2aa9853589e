// parallel::DistributedOptimizer at dp = 2 and 4 (mpirun), both modes (replicated state, ZeRO-1 sharded state),
// against a plain per-tensor AdamW on the mean gradient written here:
//   - dyadic gradients k/64 · (rank + 1): every partial sum is exact, so any reduction order (bucket all-reduce,
//     bucket reduce-scatter) gives the same bits, and AdamW is elementwise: parameters equal bit for bit after 5
//     steps, for buckets of one tensor, of a few tensors with shard edges inside tensors, and of everything; odd
//     tensor sizes make the shards padded; weight decay only where the parameter asks for it;
//   - clipping: the norm is a fixed-order fp64 sum, equal to the plain one within a few fp64 ulps;
//   - checkpoint state is the same per-parameter m and v in both modes: ZeRO state loads into a replicated
//     optimizer and back, and the runs continue bit for bit;
//   - pipeline stages (OptimizerGroups::stages): ranks holding different parameters (one stage also a vision
//     group the other lacks) clip by the norm over every stage's parameters;
//   - duplicates (ReplicaComms::duplicates): ranks that computed the same gradient from the same data count once;
//   - parts (ReplicaComms::parts): ranks holding parts of one replica's gradient average over the data replicas;
//     batches (ReplicaComms::batches): ranks whose gradients each sum several batches average over all of them;
//   - bad input is a named error; optim_params_from_registry skips frozen parameters and weights replicated ones.
// Run: ctest --preset cpu -R distributed_optimizer   (or: mpirun -np 2 ./build/cpu/tests/test_distributed_optimizer)
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <cmath>

#include "mpi/mpi_test_util.hpp"
#include "mpi/nn_equivalence.hpp"
#include "vlpar/kernels/elementwise.hpp"
#include "vlpar/kernels/optimizer.hpp"
#include "vlpar/nn/param_registry.hpp"
#include "vlpar/parallel/distributed_optimizer.hpp"

namespace vlpar::test {
namespace {

const std::vector<Shape> kShapes = {Shape{5}, Shape{7}, Shape{3}, Shape{3, 4}};  // 27 elements

struct Model {
  std::vector<Tensor> p, g;
  /// bf16: which parameters store bf16 values (the optimizer keeps their fp32 masters).
  Model(Allocator& alloc, uint64_t seed, std::vector<bool> bf16 = {}) {
    for (size_t i = 0; i < kShapes.size(); ++i) {
      const DType dt = i < bf16.size() && bf16[i] ? DType::kBF16 : DType::kF32;
      p.push_back(random_tensor(alloc, kShapes[i], dt, seed + i));
      g.push_back(Tensor::zeros(alloc, kShapes[i], DType::kF32).value());
    }
  }
  std::vector<parallel::OptimParam> params() const {
    std::vector<parallel::OptimParam> out;
    for (size_t i = 0; i < p.size(); ++i)
      out.push_back({fmt::format("p{}", i), p[i].view(), g[i].view(), kShapes[i].ndim >= 2, 1.0});
    return out;
  }
  void fill_grads(int rank, int64_t t) {
    for (size_t i = 0; i < g.size(); ++i)
      for (int64_t k = 0; k < g[i].numel(); ++k)
        g[i].ptr<float>()[k] = float(int64_t((k * 7 + int64_t(i) * 3 + t) % 11) - 5) / 64.f * float(rank + 1);
  }
};

/// Zeroed AdamW moments, one per kShapes tensor (the plain references' m and v).
std::vector<Tensor> zero_state(Allocator& alloc) {
  std::vector<Tensor> out;
  for (const Shape& s : kShapes) out.push_back(Tensor::zeros(alloc, s, DType::kF32).value());
  return out;
}

// Plain AdamW on the dp-mean gradient, per tensor, with the clipping rule of kernels/optimizer.hpp.
struct Plain {
  Model model;
  std::vector<Tensor> m, v;
  Plain(Allocator& alloc, uint64_t seed) : model(alloc, seed), m(zero_state(alloc)), v(zero_state(alloc)) {}
  double step(const Context& ctx, comm::Communicator& dp, const parallel::OptimizerConfig& cfg, int64_t t) {
    double sq = 0;
    for (Tensor& g : model.g) {
      EXPECT_TRUE(dp.all_reduce(g, comm::ReduceOp::kSum).ok());
      EXPECT_TRUE(scale_(ctx, g, 1.0f / float(dp.size())).ok());
      for (int64_t k = 0; k < g.numel(); ++k) sq += double(g.ptr<float>()[k]) * g.ptr<float>()[k];
    }
    const double norm = std::sqrt(sq);
    for (size_t i = 0; i < kShapes.size(); ++i) {
      if (cfg.max_grad_norm > 0 && norm > cfg.max_grad_norm) {
        EXPECT_TRUE(scale_(ctx, model.g[i], float(cfg.max_grad_norm / (norm + 1e-6))).ok());
      }
      AdamWConfig c = cfg.adamw;
      if (kShapes[i].ndim < 2) c.weight_decay = 0.f;
      EXPECT_TRUE(adamw_step(ctx, model.p[i], {}, model.g[i], m[i], v[i], c, t).ok());
    }
    return norm;
  }
};

parallel::OptimizerConfig config(bool zero1, size_t bucket_bytes, double max_norm = 0.0) {
  parallel::OptimizerConfig c;
  c.adamw.lr = 1e-2f;
  c.adamw.weight_decay = 0.1f;
  c.zero1 = zero1;
  c.bucket_bytes = bucket_bytes;
  c.max_grad_norm = max_norm;
  return c;
}

::testing::AssertionResult same_params(const std::string& what, const Model& a, const Model& b) {
  for (size_t i = 0; i < a.p.size(); ++i) {
    auto eq = bitwise_equal(what + " p" + std::to_string(i), a.p[i], b.p[i]);
    if (!eq) return eq;
  }
  return ::testing::AssertionSuccess();
}

struct Mode {
  bool zero1;
  size_t bucket_bytes;
};
class Optimizer : public ::testing::TestWithParam<Mode> {};

TEST_P(Optimizer, FiveStepsEqualPlainAdamWBitwise) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  Allocator alloc;
  const Context ctx = test_ctx(1);
  const parallel::OptimizerConfig cfg = config(GetParam().zero1, GetParam().bucket_bytes);
  Plain plain(alloc, 7);
  Model mine(alloc, 7);
  auto opt = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), mine.params(), cfg, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  if (cfg.bucket_bytes == 4) {
    EXPECT_EQ(opt->num_buckets(), kShapes.size());
  }
  if (cfg.zero1) {
    EXPECT_LT(opt->state_elements(), 3 * 27);
  }
  for (int64_t t = 1; t <= 5; ++t) {
    mine.fill_grads(dp->rank(), t);
    plain.model.fill_grads(dp->rank(), t);
    const double want = plain.step(ctx, *dp, cfg, t);
    // Report gradients ready in backward order for odd steps (reductions start early), none for even steps
    // (step() starts them): the result must not depend on it.
    if (t % 2 == 1) {
      for (size_t i = 0; i < kShapes.size(); ++i) ASSERT_TRUE(opt->grad_ready(i).ok());
    }
    auto r = opt->step(ctx, cfg.adamw.lr);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->applied);
    EXPECT_NEAR(r->grad_norm, want, 1e-14 * want);  // fp64 sums of sqrt(Σg²)² per tensor or slice: a few ulps
    const auto eq = same_params("step " + std::to_string(t), mine, plain.model);
    EXPECT_TRUE(eq);
    if (!all_ranks_ok(*dp, bool(eq))) break;
  }
  EXPECT_EQ(opt->steps_taken(), 5);
}
INSTANTIATE_TEST_SUITE_P(Modes, Optimizer,
                         ::testing::Values(Mode{false, 4}, Mode{false, 40}, Mode{true, 4}, Mode{true, 40},
                                           Mode{true, size_t(1) << 20}),
                         [](const auto& info) {
                           return std::string(info.param.zero1 ? "Zero1" : "Replicated") + "Bucket" +
                                  std::to_string(info.param.bucket_bytes);
                         });

TEST(OptimizerClip, BothModesClipLikePlainAdamW) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Plain plain(alloc, 3);
  Model rep(alloc, 3), zero(alloc, 3);
  auto a = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), rep.params(), config(false, 40, 0.05), alloc);
  auto b = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), zero.params(), config(true, 40, 0.05), alloc);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t t = 1; t <= 3; ++t) {
    rep.fill_grads(dp->rank(), t);
    zero.fill_grads(dp->rank(), t);
    plain.model.fill_grads(dp->rank(), t);
    const double want = plain.step(ctx, *dp, config(false, 40, 0.05), t);
    ASSERT_GT(want, 0.05);  // clipping is active
    auto ra = a->step(ctx, 1e-2);
    auto rb = b->step(ctx, 1e-2);
    ASSERT_TRUE(ra.ok() && rb.ok());
    // The norms are fp64 sums in another order (sqrt then square per tensor or slice): a few ulps apart.
    EXPECT_NEAR(ra->grad_norm, want, 1e-14 * want);
    EXPECT_NEAR(rb->grad_norm, want, 1e-14 * want);
    for (size_t i = 0; i < kShapes.size(); ++i) {
      const std::vector<double> w = to_f64(plain.model.p[i]), x = to_f64(rep.p[i]), y = to_f64(zero.p[i]);
      for (size_t k = 0; k < w.size(); ++k) {
        EXPECT_NEAR(x[k], w[k], 1e-6 * (1 + std::abs(w[k])));
        EXPECT_NEAR(y[k], w[k], 1e-6 * (1 + std::abs(w[k])));
      }
    }
  }
}

// Three steps in one mode, the checkpoint state (gathered) loaded into a fresh optimizer of the other mode over a
// copy of the parameters, then two more steps on both: bit for bit.
void continue_in_other_mode(bool first_zero1) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Model a(alloc, 11), b(alloc, 99);
  auto oa = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), a.params(), config(first_zero1, 40), alloc);
  ASSERT_TRUE(oa.ok());
  for (int64_t t = 1; t <= 3; ++t) {
    a.fill_grads(dp->rank(), t);
    ASSERT_TRUE(oa->step(ctx, 1e-2).ok());
  }
  for (size_t i = 0; i < a.p.size(); ++i) ASSERT_TRUE(copy_(b.p[i], a.p[i]).ok());
  auto ob = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), b.params(), config(!first_zero1, 4), alloc);
  ASSERT_TRUE(ob.ok());
  auto saved = oa->state(true);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  auto target = ob->state(false);
  ASSERT_TRUE(target.ok());
  for (size_t i = 0; i < a.p.size(); ++i) {  // what a checkpoint save + load does, tensor by tensor
    ASSERT_TRUE(copy_(target->m[i], saved->m[i]).ok());
    ASSERT_TRUE(copy_(target->v[i], saved->v[i]).ok());
  }
  ASSERT_TRUE(ob->load_state(target.value()).ok());
  ob->set_steps_taken(oa->steps_taken());
  for (int64_t t = 4; t <= 5; ++t) {
    a.fill_grads(dp->rank(), t);
    b.fill_grads(dp->rank(), t);
    ASSERT_TRUE(oa->step(ctx, 1e-2).ok());
    ASSERT_TRUE(ob->step(ctx, 1e-2).ok());
  }
  EXPECT_TRUE(same_params("after resume in the other mode", a, b));
}
TEST(OptimizerState, ZeroStateContinuesReplicated) { continue_in_other_mode(true); }
TEST(OptimizerState, ReplicatedStateContinuesZero) { continue_in_other_mode(false); }

TEST(OptimizerBadInput, NamedErrors) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Model m(alloc, 1);
  auto expect_error = [&](std::vector<parallel::OptimParam> p, parallel::OptimizerConfig c, comm::Communicator* g,
                          const std::string& needle) {
    auto o = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(g, nullptr), std::move(p), c, alloc);
    ASSERT_FALSE(o.ok()) << needle;
    EXPECT_NE(o.status().to_string().find(needle), std::string::npos) << o.status().to_string();
  };
  Tensor bf = random_tensor(alloc, {5}, DType::kBF16, 3);
  std::vector<parallel::OptimParam> p = m.params();
  p[0].value = bf;
  p = m.params();
  p[2].grad = TensorView{};
  expect_error(p, config(true, 40), dp.get(), "a frozen parameter has no gradient");
  expect_error(m.params(), config(true, 40), nullptr, "zero1");
  expect_error(m.params(), config(false, 2), dp.get(), "bucket_bytes");
  p = m.params();
  p[0].value = bf;
  auto ok = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr), p, config(true, 40), alloc);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_FALSE(ok->grad_ready(4).ok());
  parallel::OptimizerState wrong;
  EXPECT_FALSE(ok->load_state(wrong).ok());
  // A master for an f32 parameter (its own master) is a named error, and nothing is loaded.
  auto state = ok->state(false);
  ASSERT_TRUE(state.ok());
  Tensor extra = Tensor::zeros(alloc, kShapes[1], DType::kF32).value();
  state->master[1] = extra;
  const std::vector<double> before = to_f64(p[0].value);
  const Status own = ok->load_state(state.value());
  ASSERT_FALSE(own.ok());
  EXPECT_NE(own.message().find("'p1' is f32, its own master"), std::string::npos) << own.to_string();
  EXPECT_EQ(to_f64(p[0].value), before) << "a rejected state changed a value";
}

// bf16 values (p0, p3) with fp32 masters, against plain AdamW on an fp32 master per tensor whose rounding is the
// value: five steps bitwise in every mode (the masters too, through state()); then the gathered state (masters
// included) loaded into the other mode over values that differ, and two more steps: bit for bit.
void bf16_values(bool zero1, size_t bucket_bytes) {
  auto dp = world_comm("dp");
  ASSERT_TRUE(dp);
  Allocator alloc;
  const Context ctx = test_ctx(1);
  const std::vector<bool> bf = {true, false, false, true};
  const parallel::OptimizerConfig cfg = config(zero1, bucket_bytes);
  Model mine(alloc, 5, bf), plain(alloc, 5, bf);
  std::vector<Tensor> master, m = zero_state(alloc), v = zero_state(alloc);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    master.push_back(Tensor::empty(alloc, kShapes[i], DType::kF32).value());
    ASSERT_TRUE(convert_(master[i], plain.p[i]).ok());
  }
  auto opt = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr),
                                                    mine.params(), cfg, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  for (int64_t t = 1; t <= 5; ++t) {
    mine.fill_grads(dp->rank(), t);
    plain.fill_grads(dp->rank(), t);
    for (size_t i = 0; i < kShapes.size(); ++i) {
      ASSERT_TRUE(dp->all_reduce(plain.g[i], comm::ReduceOp::kSum).ok());
      ASSERT_TRUE(scale_(ctx, plain.g[i], 1.0f / float(dp->size())).ok());
      AdamWConfig c = cfg.adamw;
      if (kShapes[i].ndim < 2) c.weight_decay = 0.f;
      const bool low = plain.p[i].dtype() != DType::kF32;
      ASSERT_TRUE(adamw_step(ctx, low ? master[i].view() : plain.p[i].view(), low ? plain.p[i].view() : TensorView{},
                             plain.g[i], m[i], v[i], c, t).ok());
    }
    ASSERT_TRUE(opt->step(ctx, cfg.adamw.lr).ok());
    ASSERT_TRUE(same_params("step " + std::to_string(t), mine, plain));
  }
  auto saved = opt->state(true);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  ASSERT_EQ(saved->master.size(), kShapes.size());
  for (size_t i = 0; i < kShapes.size(); ++i) {
    EXPECT_EQ(saved->master[i].empty(), !bf[i]) << i;  // an f32 value is its own master
    if (bf[i]) {
      EXPECT_TRUE(bitwise_equal("master " + std::to_string(i), saved->master[i], master[i]));
    }
  }
  Model other(alloc, 77, bf);  // values from elsewhere: the loaded masters replace them
  auto o2 = parallel::DistributedOptimizer::create(ctx, parallel::OptimizerGroups::uniform(dp.get(), nullptr),
                                                   other.params(), config(!zero1, bucket_bytes), alloc);
  ASSERT_TRUE(o2.ok());
  auto target = o2->state(false);
  ASSERT_TRUE(target.ok());
  for (size_t i = 0; i < kShapes.size(); ++i) {  // a checkpoint load: m, v; each parameter as its master or value
    ASSERT_TRUE(copy_(target->m[i], saved->m[i]).ok());
    ASSERT_TRUE(copy_(target->v[i], saved->v[i]).ok());
    if (bf[i]) {
      ASSERT_TRUE(copy_(target->master[i], saved->master[i]).ok());
    } else {
      ASSERT_TRUE(copy_(other.p[i], mine.p[i]).ok());
    }
  }
  ASSERT_TRUE(o2->load_state(target.value()).ok());
  EXPECT_TRUE(same_params("after load", other, mine));
  o2->set_steps_taken(opt->steps_taken());
  for (int64_t t = 6; t <= 7; ++t) {
    mine.fill_grads(dp->rank(), t);
    other.fill_grads(dp->rank(), t);
    ASSERT_TRUE(opt->step(ctx, 1e-2).ok());
    ASSERT_TRUE(o2->step(ctx, 1e-2).ok());
  }
  EXPECT_TRUE(same_params("after resume in the other mode", mine, other));
}
TEST(OptimizerBf16, MastersReplicatedBucket4) { bf16_values(false, 4); }
TEST(OptimizerBf16, MastersReplicatedBucket40) { bf16_values(false, 40); }
TEST(OptimizerBf16, MastersZero1Bucket4) { bf16_values(true, 4); }
TEST(OptimizerBf16, MastersZero1Bucket40) { bf16_values(true, 40); }

TEST(OptimParamsFromRegistry, SkipsFrozenAndWeightsReplicas) {
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  nn::ParamRegistry reg;
  const InitRule init = InitRule::normal(0.f, 0.02f);
  // tp 2, rank 0: a row-split matrix (each element on one rank), a replicated norm (on both), a frozen one.
  ASSERT_TRUE(reg.add(make_split_param("w", Shape{4, 3}, 0, Range{0, 2}, 0, init), "lm").ok());
  ASSERT_TRUE(reg.add(make_replicated_param("norm", Shape{3}, 1, InitRule::ones()), "lm").ok());
  ASSERT_TRUE(reg.add(make_replicated_param("frozen", Shape{3}, 2, init), "vision").ok());
  ASSERT_TRUE(reg.freeze_group("vision").ok());
  ASSERT_TRUE(reg.materialize(ctx, alloc, 1).ok());
  const std::vector<size_t> order = {2, 1, 0};
  auto tp = world_comm("tp");  // the norm group: n ranks, each holding half of w (rows [0, 2) of 4)
  ASSERT_TRUE(tp);
  const double n = tp->size();
  const auto groups = parallel::OptimizerGroups::uniform(nullptr, tp.get());
  auto p = parallel::optim_params_from_registry(reg, order, groups);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ(p.value()[0].name, "norm");
  EXPECT_DOUBLE_EQ(p.value()[0].norm_weight, 1.0 / n);  // a copy on every rank of the norm group
  EXPECT_FALSE(p.value()[0].weight_decay);
  EXPECT_EQ(p.value()[1].name, "w");
  EXPECT_DOUBLE_EQ(p.value()[1].norm_weight, 2.0 / n);  // half of it on each rank: n / 2 copies of each element
  EXPECT_TRUE(p.value()[1].weight_decay);
  EXPECT_EQ(p.value()[0].registry_index, 1u);
  EXPECT_EQ(p.value()[1].registry_index, 0u);
  EXPECT_EQ(parallel::optim_slots(p.value(), reg.size()), (std::vector<size_t>{1, 0, SIZE_MAX}));
  const std::vector<size_t> missing = {2, 1}, twice = {0, 1, 0}, out_of_range = {0, 1, 7};
  auto e1 = parallel::optim_params_from_registry(reg, missing, groups);
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.status().to_string().find("'w'"), std::string::npos) << e1.status().to_string();
  EXPECT_FALSE(parallel::optim_params_from_registry(reg, twice, groups).ok());
  EXPECT_FALSE(parallel::optim_params_from_registry(reg, out_of_range, groups).ok());
  // w holds half of its elements, but no norm group says where the other half is: named.
  auto e2 = parallel::optim_params_from_registry(reg, order, parallel::OptimizerGroups{});
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().to_string().find("'w' holds 6 of 12 elements, less than 1/1"), std::string::npos)
      << e2.status().to_string();
}

// Two replica groups over different communicators: p0, p2 dense (replicas: all ranks), p1, p3 experts (replicas:
// pairs of ranks {2k, 2k+1}, pieces over the ranks with the same position in their pair). Against plain AdamW on
// each group's own mean gradient; the norm adds the dense Σg² and the experts' Σg² summed over the expert pieces.
void two_replica_groups(bool zero1) {
  auto world = world_comm("dp");
  ASSERT_TRUE(world);
  const int rank = world->rank();
  auto edp_or = world->split(rank / 2, rank, test_options("edp"));
  auto ep_or = world->split(rank % 2, rank, test_options("ep"));
  ASSERT_TRUE(edp_or.ok() && ep_or.ok());
  std::unique_ptr<comm::Communicator> edp = std::move(edp_or).value(), ep = std::move(ep_or).value();
  parallel::OptimizerGroups groups = parallel::OptimizerGroups::uniform(world.get(), nullptr);
  groups[ReplicaGroup::kExpert] = {edp.get(), {ep.get()}};
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Model mine(alloc, 11), plain(alloc, 11);
  std::vector<parallel::OptimParam> params = mine.params();
  const auto is_expert = [](size_t i) { return i % 2 == 1; };
  for (size_t i = 0; i < params.size(); ++i)
    if (is_expert(i)) params[i].replica = ReplicaGroup::kExpert;
  const parallel::OptimizerConfig cfg = config(zero1, 40);
  auto opt = parallel::DistributedOptimizer::create(ctx, groups, params, cfg, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  std::vector<Tensor> m = zero_state(alloc), v = zero_state(alloc);
  for (int64_t t = 1; t <= 3; ++t) {
    mine.fill_grads(rank, t);
    plain.fill_grads(rank, t);
    double dense_sq = 0, expert_sq = 0;
    for (size_t i = 0; i < kShapes.size(); ++i) {  // plain: each group's mean over its own replicas
      comm::Communicator& c = is_expert(i) ? *edp : *world;
      ASSERT_TRUE(c.all_reduce(plain.g[i], comm::ReduceOp::kSum).ok());
      ASSERT_TRUE(scale_(ctx, plain.g[i], 1.0f / float(c.size())).ok());
      for (int64_t k = 0; k < plain.g[i].numel(); ++k)
        (is_expert(i) ? expert_sq : dense_sq) += double(plain.g[i].ptr<float>()[k]) * plain.g[i].ptr<float>()[k];
      AdamWConfig ac = cfg.adamw;
      if (kShapes[i].ndim < 2) ac.weight_decay = 0.f;
      ASSERT_TRUE(adamw_step(ctx, plain.p[i], {}, plain.g[i], m[i], v[i], ac, t).ok());
    }
    ASSERT_TRUE(ep->all_reduce(TensorView(&expert_sq, DType::kF64, {1}), comm::ReduceOp::kSum).ok());
    for (size_t i = kShapes.size(); i-- > 0;) ASSERT_TRUE(opt->grad_ready(i).ok());
    auto r = opt->step(ctx, 1e-2);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->grad_norm, std::sqrt(dense_sq + expert_sq), 1e-12 * std::sqrt(dense_sq + expert_sq)) << "step " << t;
  }
  EXPECT_TRUE(same_params(zero1 ? "two groups, zero1" : "two groups, replicated", mine, plain));
}
TEST(ReplicaGroups, ExpertsReduceOverTheirOwnReplicasReplicated) { two_replica_groups(false); }
TEST(ReplicaGroups, ExpertsReduceOverTheirOwnReplicasZero1) { two_replica_groups(true); }

// Pairs of ranks {2k, 2k+1} saw the same data (as the tp ranks of a vision tower replicated under tp): with
// duplicates = 2 the reduced gradient is the sum over the distinct data only, as plain AdamW on that sum (dyadic:
// exact), in both modes; without, it would be twice that.
void duplicates(bool zero1) {
  auto world = world_comm("dp");
  ASSERT_TRUE(world);
  if (world->size() % 2 != 0) GTEST_SKIP() << "needs pairs of ranks";
  parallel::OptimizerGroups groups = parallel::OptimizerGroups::uniform(world.get(), nullptr);
  groups[ReplicaGroup::kDense].duplicates = 2;
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Model mine(alloc, 21), plain(alloc, 21);
  parallel::OptimizerConfig cfg = config(zero1, 40);
  cfg.average_grads = false;
  auto opt = parallel::DistributedOptimizer::create(ctx, groups, mine.params(), cfg, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  std::vector<Tensor> m = zero_state(alloc), v = zero_state(alloc);
  const int data = world->rank() / 2, distinct = world->size() / 2;
  for (int64_t t = 1; t <= 3; ++t) {
    mine.fill_grads(data, t);
    for (int d = 0; d < distinct; ++d) {  // plain: Σ over the distinct data
      Model one(alloc, 0);
      one.fill_grads(d, t);
      for (size_t i = 0; i < kShapes.size(); ++i) {
        const Status st = d == 0 ? copy_(plain.g[i], one.g[i]) : add_(ctx, plain.g[i], one.g[i]);
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
    }
    for (size_t i = 0; i < kShapes.size(); ++i) {
      AdamWConfig ac = cfg.adamw;
      if (kShapes[i].ndim < 2) ac.weight_decay = 0.f;
      ASSERT_TRUE(adamw_step(ctx, plain.p[i], {}, plain.g[i], m[i], v[i], ac, t).ok());
    }
    auto r = opt->step(ctx, 1e-2);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  EXPECT_TRUE(same_params(zero1 ? "duplicates, zero1" : "duplicates, replicated", mine, plain));
}
TEST(ReplicaGroups, DuplicatesCountOnceReplicated) { duplicates(false); }
TEST(ReplicaGroups, DuplicatesCountOnceZero1) { duplicates(true); }

// Pairs of ranks {2k, 2k+1} each hold a part of one data replica's gradient (as the tp ranks of experts under
// sequence parallelism): with parts = 2 and averaging, the reduced gradient is the mean over the size / 2 data
// replicas of their whole gradients, Σ over every rank ÷ (size / 2), as plain AdamW on that (dyadic: exact);
// without, it would be half that.
// With batches = 2 instead (a wide vision tower: each rank's gradient sums two data-parallel batches) the average
// is Σ ÷ (size · 2).
void averaged(bool zero1, int parts, int batches) {
  auto world = world_comm("dp");
  ASSERT_TRUE(world);
  if (world->size() % parts != 0) GTEST_SKIP() << "needs pairs of ranks";
  parallel::OptimizerGroups groups = parallel::OptimizerGroups::uniform(world.get(), nullptr);
  groups[ReplicaGroup::kDense].parts = parts;
  groups[ReplicaGroup::kDense].batches = batches;
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Model mine(alloc, 21), plain(alloc, 21);
  parallel::OptimizerConfig cfg = config(zero1, 40);
  cfg.average_grads = true;
  auto opt = parallel::DistributedOptimizer::create(ctx, groups, mine.params(), cfg, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  std::vector<Tensor> m = zero_state(alloc), v = zero_state(alloc);
  const int replicas = world->size() / parts * batches;  // the average's divisor
  for (int64_t t = 1; t <= 3; ++t) {
    mine.fill_grads(world->rank(), t);
    for (int r = 0; r < world->size(); ++r) {  // plain: Σ over every rank's part, ÷ the data replicas
      Model one(alloc, 0);
      one.fill_grads(r, t);
      for (size_t i = 0; i < kShapes.size(); ++i) {
        const Status st = r == 0 ? copy_(plain.g[i], one.g[i]) : add_(ctx, plain.g[i], one.g[i]);
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
    }
    for (size_t i = 0; i < kShapes.size(); ++i) {
      for (int64_t k = 0; k < plain.g[i].numel(); ++k) plain.g[i].ptr<float>()[k] /= float(replicas);
      AdamWConfig ac = cfg.adamw;
      if (kShapes[i].ndim < 2) ac.weight_decay = 0.f;
      ASSERT_TRUE(adamw_step(ctx, plain.p[i], {}, plain.g[i], m[i], v[i], ac, t).ok());
    }
    auto r = opt->step(ctx, 1e-2);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  EXPECT_TRUE(same_params(zero1 ? "averaged, zero1" : "averaged, replicated", mine, plain));
}
TEST(ReplicaGroups, PartsAverageOverDataReplicasReplicated) { averaged(false, 2, 1); }
TEST(ReplicaGroups, PartsAverageOverDataReplicasZero1) { averaged(true, 2, 1); }
TEST(ReplicaGroups, BatchesAverageOverEveryBatchReplicated) { averaged(false, 1, 2); }
TEST(ReplicaGroups, BatchesAverageOverEveryBatchZero1) { averaged(true, 1, 2); }

// Two pipeline stages (stage = rank / (world / 2); dp = the ranks of a stage, pp = the ranks with the same
// position in their stage): stage 0 holds p0, p1 and p3 as a vision parameter, stage 1 only p2. The clipping norm
// is the one over every stage's parameters (each counted once), so every stage clips by the same factor.
TEST(PipelineStages, NormSumsOverStagesHoldingDifferentParameters) {
  auto world = world_comm("world");
  ASSERT_TRUE(world);
  const int rank = world->rank(), half = world->size() / 2, stage = rank / half;
  auto dp_or = world->split(stage, rank, test_options("dp"));
  auto pp_or = world->split(rank % half, rank, test_options("pp"));
  ASSERT_TRUE(dp_or.ok() && pp_or.ok());
  std::unique_ptr<comm::Communicator> dp = std::move(dp_or).value(), pp = std::move(pp_or).value();
  parallel::OptimizerGroups groups = parallel::OptimizerGroups::uniform(dp->size() > 1 ? dp.get() : nullptr, nullptr);
  groups.stages = pp.get();
  Allocator alloc;
  const Context ctx = test_ctx(1);
  Model mine(alloc, 5), plain(alloc, 5);
  const auto on_stage = [](size_t i) { return i == 2 ? 1 : 0; };
  std::vector<parallel::OptimParam> params = mine.params();
  std::vector<parallel::OptimParam> held;
  std::vector<size_t> held_index;
  for (size_t i = 0; i < params.size(); ++i) {
    if (on_stage(i) != stage) continue;
    if (i == 3) params[i].replica = ReplicaGroup::kVision;
    held.push_back(params[i]);
    held_index.push_back(i);
  }
  const parallel::OptimizerConfig cfg = config(false, 40, 0.05);
  auto opt = parallel::DistributedOptimizer::create(ctx, groups, held, cfg, alloc);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  std::vector<Tensor> m = zero_state(alloc), v = zero_state(alloc);
  for (int64_t t = 1; t <= 3; ++t) {
    mine.fill_grads(rank % half, t);
    plain.fill_grads(rank % half, t);
    // Plain: every parameter's dp-mean gradient on every rank, one norm over all of them.
    double sq = 0;
    for (Tensor& g : plain.g) {
      ASSERT_TRUE(dp->all_reduce(g, comm::ReduceOp::kSum).ok());
      ASSERT_TRUE(scale_(ctx, g, 1.0f / float(dp->size())).ok());
      for (int64_t k = 0; k < g.numel(); ++k) sq += double(g.ptr<float>()[k]) * g.ptr<float>()[k];
    }
    const double want = std::sqrt(sq);
    ASSERT_GT(want, cfg.max_grad_norm);  // clipping is active
    auto r = opt->step(ctx, 1e-2);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->grad_norm, want, 1e-14 * want) << "stage " << stage << ", step " << t;
    for (size_t i : held_index) {
      ASSERT_TRUE(scale_(ctx, plain.g[i], float(cfg.max_grad_norm / (want + 1e-6))).ok());
      AdamWConfig ac = cfg.adamw;
      if (kShapes[i].ndim < 2) ac.weight_decay = 0.f;
      ASSERT_TRUE(adamw_step(ctx, plain.p[i], {}, plain.g[i], m[i], v[i], ac, t).ok());
    }
  }
  // The clip factor and AdamW are the same on both sides; the norms differ by fp64 ulps, so the factors by f32 ulps.
  for (size_t i : held_index) {
    const std::vector<double> w = to_f64(plain.p[i]), x = to_f64(mine.p[i]);
    for (size_t k = 0; k < w.size(); ++k) EXPECT_NEAR(x[k], w[k], 1e-6 * (1 + std::abs(w[k]))) << "p" << i;
  }
}

}  // namespace
}  // namespace vlpar::test
