// Placements (include/vlpar/parallel/placement.hpp) on a non-Qwen module over two mesh axes (mpirun -np 4:
// tp 2 × dp 2 from ProcessGroups). A two-layer tanh MLP y = tanh(x·W1ᵀ)·W2ᵀ, loss ½Σy²:
//   W1 [F, H] Shard{0} on tp (column-parallel), W2 [H, F] Shard{1} on tp (row-parallel); each dp rank its own
//   tokens; y is Partial on tp → redistribute to Replicate (all-reduce); the weight gradients are Partial on dp →
//   Replicate (all-reduce), then Shard{0} / Shard{1}(last) on tp → Replicate (all-gather) to compare with the
//   single-process fp64 run; dW1 also Partial on dp → Shard{0} (reduce-scatter) equals the fp64 block that
//   local_block() names for tp Shard{0} nested with dp Shard{0}.
// Tolerance: f32 sums of ≤ 8 products of values ≤ 1 against fp64: 1e-5 relative to the largest reference value.
// Also: blocks of shards over two axes, names of bad placements, and the unsupported redistributions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "test_util.hpp"
#include "vlpar/parallel/placement.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace vlpar::test {
namespace {

using parallel::Axis;
using parallel::Partial;
using parallel::Placements;
using parallel::Replicate;
using parallel::Shard;

TEST(Placement, BlocksOverTwoAxes) {
  // tp: size 2, index 1; dp: size 3, index 2.
  auto size_of = [](Axis a) { return a == Axis::kTp ? 2 : a == Axis::kDp ? 3 : 1; };
  auto index_of = [](Axis a) { return a == Axis::kTp ? 1 : a == Axis::kDp ? 2 : 0; };
  auto b = parallel::local_block(Shape{8, 6}, Placements{}.on(Axis::kTp, Shard{0}).on(Axis::kDp, Shard{1}), size_of,
                                 index_of);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->dims[0], (Range{4, 8}));
  EXPECT_EQ(b->dims[1], (Range{4, 6}));
  EXPECT_EQ(b->shape(), Shape({4, 2}));
  // Two axes on one dim nest in kAllAxes order: tp cuts first, dp cuts tp's block.
  auto nested = parallel::local_block(Shape{12, 2}, Placements{}.on(Axis::kTp, Shard{0}).on(Axis::kDp, Shard{0}),
                                      size_of, index_of);
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->dims[0], (Range{10, 12}));
  const Placements p = Placements{}.on(Axis::kTp, Shard{1}).on(Axis::kDp, Partial{});
  EXPECT_EQ(p.to_string(), "tp: shard(1), dp: partial");
  EXPECT_EQ(Placements{}.to_string(), "replicate");
  auto bad_dim = parallel::local_block(Shape{8, 6}, Placements{}.on(Axis::kTp, Shard{2}), size_of, index_of);
  ASSERT_FALSE(bad_dim.ok());
  EXPECT_NE(bad_dim.status().message().find("has no dim 2"), std::string::npos) << bad_dim.status().message();
  auto uneven = parallel::local_block(Shape{7, 6}, Placements{}.on(Axis::kTp, Shard{0}), size_of, index_of);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("not divisible by the axis size 2"), std::string::npos)
      << uneven.status().message();
}

constexpr int64_t H = 4, F = 8, N = 3;  // hidden, MLP width, tokens per dp rank

float x_at(int64_t row, int64_t c) { return float(std::sin(0.7 * double(row * H + c) + 0.1)); }
float w1_at(int64_t f, int64_t h) { return float(std::cos(0.3 * double(f * H + h))) * 0.5f; }
float w2_at(int64_t h, int64_t f) { return float(std::sin(0.45 * double(h * F + f) + 0.2)) * 0.5f; }

Tensor fill(Allocator& alloc, Shape s, float (*at)(int64_t, int64_t)) {
  Tensor t = Tensor::empty(alloc, s, DType::kF32).value();
  for (int64_t i = 0; i < s[0]; ++i)
    for (int64_t j = 0; j < s[1]; ++j) t.ptr<float>()[i * s[1] + j] = at(i, j);
  return t;
}

// C[M, K] += alpha · op(A) · op(B) in plain loops (the placements are under test, not the GEMM).
void matmul(float* c, const float* a, bool ta, const float* b, bool tb, int64_t M, int64_t K, int64_t inner,
            int64_t lda, int64_t ldb) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      float s = 0.f;
      for (int64_t j = 0; j < inner; ++j) s += (ta ? a[j * lda + i] : a[i * lda + j]) * (tb ? b[k * ldb + j] : b[j * ldb + k]);
      c[i * K + k] += s;
    }
}

struct Reference {
  std::vector<double> dw1, dw2;  // [F, H], [H, F]
};

Reference reference(int64_t rows) {  // single process, fp64, all dp ranks' tokens
  Reference r{std::vector<double>(size_t(F * H)), std::vector<double>(size_t(H * F))};
  for (int64_t n = 0; n < rows; ++n) {
    std::vector<double> a(static_cast<size_t>(F)), y(static_cast<size_t>(H), 0.0), da(static_cast<size_t>(F), 0.0);
    for (int64_t f = 0; f < F; ++f) {
      double h = 0;
      for (int64_t c = 0; c < H; ++c) h += double(x_at(n, c)) * w1_at(f, c);
      a[size_t(f)] = std::tanh(h);
    }
    for (int64_t c = 0; c < H; ++c)
      for (int64_t f = 0; f < F; ++f) y[size_t(c)] += a[size_t(f)] * w2_at(c, f);
    for (int64_t c = 0; c < H; ++c)
      for (int64_t f = 0; f < F; ++f) {
        r.dw2[size_t(c * F + f)] += y[size_t(c)] * a[size_t(f)];
        da[size_t(f)] += y[size_t(c)] * w2_at(c, f);
      }
    for (int64_t f = 0; f < F; ++f) {
      const double dh = da[size_t(f)] * (1 - a[size_t(f)] * a[size_t(f)]);
      for (int64_t c = 0; c < H; ++c) r.dw1[size_t(f * H + c)] += dh * x_at(n, c);
    }
  }
  return r;
}

void expect_close(const std::string& what, const TensorView& got, const std::vector<double>& want,
                  const parallel::Block& block, int64_t full_cols) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  const int64_t cols = block.dims[1].size();
  for (int64_t i = 0; i < block.dims[0].size(); ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double w = want[size_t((block.dims[0].begin + i) * full_cols + block.dims[1].begin + j)];
      ASSERT_NEAR(got.ptr<float>()[i * cols + j], w, 1e-5 * scale) << what << "[" << i << ", " << j << "]";
    }
}

TEST(Placement, MlpShardedOverTpAndDpMatchesSingleProcess) {
  auto world = world_comm("world");
  ASSERT_TRUE(world);
  if (world->size() != 4) GTEST_SKIP() << "tp 2 x dp 2 needs 4 ranks";
  parallel::ParallelConfig pc;
  pc.world = 4;
  pc.tp = 2;
  auto groups = parallel::ProcessGroups::create(*world, pc);
  ASSERT_TRUE(groups.ok()) << groups.status().message();
  comm::Communicator& tp = groups->tp();
  comm::Communicator& dp = groups->dp();
  Allocator alloc;
  const Placements w1p = Placements{}.on(Axis::kTp, Shard{0}), w2p = Placements{}.on(Axis::kTp, Shard{1});
  auto b1 = parallel::local_block(Shape{F, H}, w1p, groups.value());
  auto b2 = parallel::local_block(Shape{H, F}, w2p, groups.value());
  ASSERT_TRUE(b1.ok() && b2.ok());
  const Tensor w1_full = fill(alloc, {F, H}, w1_at), w2_full = fill(alloc, {H, F}, w2_at);
  Tensor w1 = Tensor::empty(alloc, b1->shape(), DType::kF32).value(), w2 = Tensor::empty(alloc, b2->shape(), DType::kF32).value();
  ASSERT_TRUE(parallel::copy_block(w1, w1_full, b1.value()).ok());
  ASSERT_TRUE(parallel::copy_block(w2, w2_full, b2.value()).ok());
  const int64_t Fl = F / 2;
  // This dp rank's tokens: rows [dp·N, (dp+1)·N) of the global batch, replicated over tp.
  Tensor x = Tensor::empty(alloc, {N, H}, DType::kF32).value();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < H; ++c) x.ptr<float>()[n * H + c] = x_at(dp.rank() * N + n, c);
  // Forward: a = tanh(x·W1ᵀ) [N, F/2] is Shard{1} on tp; y [N, H] is Partial on tp.
  Tensor a = Tensor::zeros(alloc, {N, Fl}, DType::kF32).value(), y = Tensor::zeros(alloc, {N, H}, DType::kF32).value();
  matmul(a.ptr<float>(), x.ptr<float>(), false, w1.ptr<float>(), true, N, Fl, H, H, H);
  for (int64_t i = 0; i < a.numel(); ++i) a.ptr<float>()[i] = std::tanh(a.ptr<float>()[i]);
  matmul(y.ptr<float>(), a.ptr<float>(), false, w2.ptr<float>(), true, N, H, Fl, Fl, Fl);
  ASSERT_TRUE(parallel::redistribute(tp, Partial{}, Replicate{}, y, y).ok());
  // Backward: dy = y; dW2 = dyᵀ·a, da = dy·W2, dh = da ⊙ (1 − a²), dW1 = dhᵀ·x; weight grads Partial on dp.
  Tensor dw1 = Tensor::zeros(alloc, {Fl, H}, DType::kF32).value(), dw2 = Tensor::zeros(alloc, {H, Fl}, DType::kF32).value();
  Tensor da = Tensor::zeros(alloc, {N, Fl}, DType::kF32).value();
  matmul(dw2.ptr<float>(), y.ptr<float>(), true, a.ptr<float>(), false, H, Fl, N, H, Fl);
  matmul(da.ptr<float>(), y.ptr<float>(), false, w2.ptr<float>(), false, N, Fl, H, H, Fl);
  for (int64_t i = 0; i < da.numel(); ++i) da.ptr<float>()[i] *= 1.f - a.ptr<float>()[i] * a.ptr<float>()[i];
  matmul(dw1.ptr<float>(), da.ptr<float>(), true, x.ptr<float>(), false, Fl, H, N, Fl, H);
  // dW1 Partial on dp → Shard{0} on dp (reduce-scatter): the block of tp Shard{0} nested with dp Shard{0}.
  Tensor dw1_rs = Tensor::empty(alloc, {Fl / 2, H}, DType::kF32).value();
  ASSERT_TRUE(parallel::redistribute(dp, Partial{}, Shard{0}, dw1_rs, dw1).ok());
  const Reference ref = reference(2 * N);
  auto b_rs = parallel::local_block(Shape{F, H}, Placements{}.on(Axis::kTp, Shard{0}).on(Axis::kDp, Shard{0}),
                                    groups.value());
  ASSERT_TRUE(b_rs.ok());
  expect_close("dW1 reduce-scattered over dp", dw1_rs, ref.dw1, b_rs.value(), H);
  // Partial on dp → Replicate, then the tp shards → Replicate: the full gradients.
  ASSERT_TRUE(parallel::redistribute(dp, Partial{}, Replicate{}, dw1, dw1).ok());
  ASSERT_TRUE(parallel::redistribute(dp, Partial{}, Replicate{}, dw2, dw2).ok());
  Tensor dw1_full = Tensor::empty(alloc, {F, H}, DType::kF32).value(), dw2_full = Tensor::empty(alloc, {H, F}, DType::kF32).value();
  ASSERT_TRUE(parallel::redistribute(tp, Shard{0}, Replicate{}, dw1_full, dw1).ok());
  ASSERT_TRUE(parallel::redistribute(tp, Shard{1}, Replicate{}, dw2_full, dw2).ok());
  const parallel::Block all1{{{0, F}, {0, H}}}, all2{{{0, H}, {0, F}}};
  expect_close("dW1", dw1_full, ref.dw1, all1, H);
  expect_close("dW2", dw2_full, ref.dw2, all2, F);
  // Replicate → Shard{1} (last dim) → Replicate and Replicate → Partial → Replicate are identities.
  Tensor part = Tensor::empty(alloc, {H, Fl}, DType::kF32).value(), back = Tensor::empty(alloc, {H, F}, DType::kF32).value();
  ASSERT_TRUE(parallel::redistribute(tp, Replicate{}, Shard{1}, part, dw2_full).ok());
  ASSERT_TRUE(parallel::redistribute(tp, Shard{1}, Replicate{}, back, part).ok());
  EXPECT_TRUE(bitwise_equal("shard(1) round trip", back, dw2_full));
  ASSERT_TRUE(parallel::redistribute(tp, Replicate{}, Partial{}, back, dw2_full).ok());
  ASSERT_TRUE(parallel::redistribute(tp, Partial{}, Replicate{}, back, back).ok());
  EXPECT_TRUE(bitwise_equal("partial round trip", back, dw2_full));
}

TEST(Placement, UnsupportedRedistributionsAreNamed) {
  auto world = world_comm("placement");
  ASSERT_TRUE(world);
  Allocator alloc;
  Tensor t = Tensor::zeros(alloc, {2, 4, 6}, DType::kF32).value();
  Tensor o = Tensor::zeros(alloc, {2, 4 * world->size(), 6}, DType::kF32).value();
  const Status s = parallel::redistribute(*world, Shard{1}, Replicate{}, o, t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard(1) -> replicate of a tensor"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'placement'"), std::string::npos) << s.message();
  EXPECT_FALSE(parallel::redistribute(*world, Shard{0}, Partial{}, t, t).ok());
}

}  // namespace
}  // namespace vlpar::test
