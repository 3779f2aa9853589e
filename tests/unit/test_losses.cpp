// Embedding, cross-entropy (plain and fused/chunked) and the MoE router + aux loss: references vs finite
// differences; kernels vs references; ignore_index; chunking invariance; named errors.
// Run: ./build/cpu/tests/test_losses
#include <gtest/gtest.h>

#include <algorithm>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/cross_entropy.hpp"
#include "vlpar/kernels/embedding.hpp"
#include "vlpar/kernels/router.hpp"
#include "vlpar/reference/linear.hpp"
#include "vlpar/reference/loss.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

TEST(Embedding, ForwardGathersAndBackwardAccumulatesExactly) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t V = 11, H = 9, N = 20;
  Tensor table = integer_tensor(a, {V, H}, DType::kF32, 1, -8, 8), ids = integer_tensor(a, {N}, DType::kI64, 2, 0, 10);
  Tensor out = Tensor::empty(a, {N, H}, DType::kF32).value();
  ASSERT_TRUE(embedding_forward(ctx, out, table, ids).ok());
  Tensor dout = integer_tensor(a, {N, H}, DType::kF32, 3, -5, 5), dtable = Tensor::zeros(a, {V, H}, DType::kF32).value();
  ASSERT_TRUE(embedding_backward(ctx, dtable, dout, ids).ok());
  std::vector<double> want(size_t(V * H), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids.ptr<int64_t>()[n];
    for (int64_t h = 0; h < H; ++h) {
      ASSERT_EQ(out.ptr<float>()[n * H + h], table.ptr<float>()[id * H + h]);
      want[size_t(id * H + h)] += dout.ptr<float>()[n * H + h];
    }
  }
  EXPECT_TRUE(all_close("embedding dtable", to_f64(dtable), want, dtable.shape(), 0.0));
  ids.ptr<int64_t>()[7] = V;  // out of range
  const Status s = embedding_forward(ctx, out, table, ids);
  EXPECT_NE(s.message().find("token id 11 at position 7 is outside the vocabulary [0, 11)"), std::string::npos)
      << s.message();
}

TEST(Embedding, VocabBlocksAddUpToTheWholeTableAndSkipMarkedRows) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t V = 12, H = 5, N = 17;
  const std::vector<int64_t> cut = {0, 5, 7, 12};  // three blocks of unequal size
  Tensor table = integer_tensor(a, {V, H}, DType::kF32, 1, -8, 8), ids = integer_tensor(a, {N}, DType::kI64, 2, 0, 11);
  Tensor skip = integer_tensor(a, {N}, DType::kI32, 4, 0, 1);
  Tensor dout = integer_tensor(a, {N, H}, DType::kF32, 3, -5, 5), dtable = Tensor::zeros(a, {V, H}, DType::kF32).value();
  std::vector<double> sum(size_t(N * H), 0.0);
  for (size_t b = 0; b + 1 < cut.size(); ++b) {
    const VocabBlock blk{cut[b], V};
    Tensor out = Tensor::empty(a, {N, H}, DType::kF32).value();
    ASSERT_TRUE(embedding_forward(ctx, out, table.view().slice(0, cut[b], cut[b + 1]), ids, blk).ok());
    for (int64_t i = 0; i < N * H; ++i) sum[size_t(i)] += out.ptr<float>()[i];
    const Status s = embedding_backward(ctx, dtable.view().slice(0, cut[b], cut[b + 1]), dout, ids, blk, skip);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::vector<double> want_dt(size_t(V * H), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids.ptr<int64_t>()[n];
    for (int64_t h = 0; h < H; ++h) {
      ASSERT_EQ(sum[size_t(n * H + h)], table.ptr<float>()[id * H + h]) << "row " << n << " is not one block's row";
      if (skip.ptr<int32_t>()[n] == 0) want_dt[size_t(id * H + h)] += dout.ptr<float>()[n * H + h];
    }
  }
  EXPECT_TRUE(all_close("blocked embedding dtable", to_f64(dtable), want_dt, dtable.shape(), 0.0));
  Tensor out = Tensor::empty(a, {N, H}, DType::kF32).value();
  ids.ptr<int64_t>()[3] = V;  // inside no block of the vocabulary
  Status s = embedding_forward(ctx, out, table.view().slice(0, 5, 7), ids, VocabBlock{5, V});
  EXPECT_NE(s.message().find("token id 12 at position 3 is outside the vocabulary [0, 12)"), std::string::npos)
      << s.message();
  ids.ptr<int64_t>()[3] = 0;
  s = embedding_forward(ctx, out, table.view().slice(0, 5, 12), ids, VocabBlock{6, V});
  EXPECT_NE(s.message().find("the vocab block [6, 13) is not inside a vocabulary of 12 ids"), std::string::npos)
      << s.message();
}

TEST(Embedding, PaddingIdxRowGetsNoGradient) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t V = 9, H = 4, N = 30;
  Tensor ids = integer_tensor(a, {N}, DType::kI32, 7, 0, 8), dout = integer_tensor(a, {N, H}, DType::kF32, 8, -5, 5);
  const int64_t pad = index_at(ids, 0);  // an id that occurs
  Tensor with = Tensor::zeros(a, {V, H}, DType::kF32).value(), without = Tensor::zeros(a, {V, H}, DType::kF32).value();
  ASSERT_TRUE(embedding_backward(ctx, without, dout, ids).ok());
  ASSERT_TRUE(embedding_backward(ctx, with, dout, ids, VocabBlock{}, TensorView{}, pad).ok());
  for (int64_t r = 0; r < V; ++r)
    for (int64_t h = 0; h < H; ++h)
      ASSERT_EQ(with.ptr<float>()[r * H + h], r == pad ? 0.f : without.ptr<float>()[r * H + h]) << r << ", " << h;
  // In a vocab block that does not hold it, padding_idx changes nothing; outside the vocabulary it is an error.
  Tensor block = Tensor::zeros(a, {4, H}, DType::kF32).value();
  const int64_t other_pad = pad < 4 ? 8 : 0;
  ASSERT_TRUE(embedding_backward(ctx, block, dout, ids, VocabBlock{0, V}, TensorView{}, other_pad).ok());
  for (int64_t i = 0; i < 4 * H; ++i) ASSERT_EQ(block.ptr<float>()[i], (other_pad == 0 && i < H) ? 0.f : without.ptr<float>()[i]);
  const Status s = embedding_backward(ctx, with, dout, ids, VocabBlock{}, TensorView{}, V);
  EXPECT_NE(s.message().find("padding_idx 9 is neither -1 nor an id of the vocabulary [0, 9)"), std::string::npos)
      << s.message();
}

TEST(CrossEntropyVocabShard, BlocksGiveTheWholeVocabularysLossAndGradient) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t N = 23, V = 1000;
  const std::vector<int64_t> cut = {0, 300, 500, 1000};
  Tensor z = random_tensor(a, {N, V}, DType::kF32, 5, -6.f, 6.f), y = integer_tensor(a, {N}, DType::kI64, 6, 0, 999);
  for (int64_t n : {0, 5, 22}) y.ptr<int64_t>()[n] = -100;
  // Row max and sums per block, reduced over the blocks as the vocab group's all-reduces would.
  Tensor row_max = Tensor::empty(a, {N}, DType::kF32).value(), part = Tensor::empty(a, {N}, DType::kF32).value();
  for (size_t b = 0; b + 1 < cut.size(); ++b) {
    ASSERT_TRUE(vocab_shard_row_max(ctx, b == 0 ? row_max.view() : part.view(), z.view().slice(1, cut[b], cut[b + 1])).ok());
    for (int64_t n = 0; b > 0 && n < N; ++n) row_max.ptr<float>()[n] = std::max(row_max.ptr<float>()[n], part.ptr<float>()[n]);
  }
  Tensor sums = Tensor::zeros(a, {2, N}, DType::kF32).value(), block_sums = Tensor::empty(a, {2, N}, DType::kF32).value();
  CrossEntropyDesc desc;
  for (size_t b = 0; b + 1 < cut.size(); ++b) {
    desc.block = VocabBlock{cut[b], V};
    const Status s = vocab_shard_sums(ctx, block_sums, z.view().slice(1, cut[b], cut[b + 1]), row_max, y, desc);
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (int64_t i = 0; i < 2 * N; ++i) sums.ptr<float>()[i] += block_sums.ptr<float>()[i];
  }
  Tensor lse = Tensor::empty(a, {N}, DType::kF32).value(), dz = Tensor::empty(a, {N, V}, DType::kF32).value();
  auto res = vocab_shard_loss(ctx, lse, row_max, sums, y, desc);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_EQ(res->num_valid, N - 3);
  for (size_t b = 0; b + 1 < cut.size(); ++b) {
    desc.block = VocabBlock{cut[b], V};
    const TensorView zb = z.view().slice(1, cut[b], cut[b + 1]), dzb = dz.view().slice(1, cut[b], cut[b + 1]);
    ASSERT_TRUE(cross_entropy_backward(ctx, dzb, zb, y, lse, desc, res->num_valid, 1.f).ok());
  }
  auto zv = to_f64(z);
  std::vector<double> dz64(zv.size());
  const double l64 = reference::cross_entropy(dz64.data(), zv.data(), y.ptr<int64_t>(), N, V, -100, true);
  std::vector<float> zf(zv.begin(), zv.end()), dzf(zv.size());
  const float lf = reference::cross_entropy(dzf.data(), zf.data(), y.ptr<int64_t>(), N, V, -100, true);
  EXPECT_TRUE(close_to_reference("sharded ce loss", {res->loss}, {l64}, {double(lf)}, Shape{1}, TolOp::kCrossEntropy,
                                 DType::kF32));
  EXPECT_TRUE(close_to_reference("sharded ce dlogits", to_f64(dz), dz64, to_double(dzf), dz.shape(),
                                 TolOp::kCrossEntropy, DType::kF32));
  desc.block = VocabBlock{300, V};  // the plain forward needs every logit of a row
  const Status s = cross_entropy_forward(ctx, lse, z.view().slice(1, 300, 500), y, desc).status();
  EXPECT_NE(s.message().find("a vocab block needs the vocab_shard_* ops"), std::string::npos) << s.message();
}

TEST(CrossEntropyReference, GradientMatchesFiniteDifferences) {
  Allocator a;
  const int64_t N = 4, V = 7;
  auto z = to_f64(random_tensor(a, {N, V}, DType::kF32, 4, -3.f, 3.f));
  std::vector<int64_t> y = {3, -100, 0, 6};
  std::vector<double> dz(z.size());
  reference::cross_entropy(dz.data(), z.data(), y.data(), N, V, -100, true);
  auto L = [&](const std::vector<double>& zz) {
    return reference::cross_entropy<double>(nullptr, zz.data(), y.data(), N, V, -100, true);
  };
  EXPECT_TRUE(finite_diff_matches("cross-entropy dlogits", L, z, dz));
}

class CrossEntropyKernel : public ::testing::TestWithParam<std::tuple<DType, Reduction>> {};

TEST_P(CrossEntropyKernel, MatchesReferenceWithIgnoredRows) {
  const auto [dt, red] = GetParam();
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t N = 23, V = 1000;
  Tensor z = random_tensor(a, {N, V}, dt, 5, -6.f, 6.f), y = integer_tensor(a, {N}, DType::kI64, 6, 0, int(V - 1));
  for (int64_t n : {0, 5, 22}) y.ptr<int64_t>()[n] = -100;
  const CrossEntropyDesc desc{-100, red, 0, {}};
  Tensor lse = Tensor::empty(a, {N}, DType::kF32).value(), dz = Tensor::empty(a, {N, V}, dt).value();
  auto res = cross_entropy_forward(ctx, lse, z, y, desc);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_EQ(res->num_valid, N - 3);
  ASSERT_TRUE(cross_entropy_backward(ctx, dz, z, y, lse, desc, res->num_valid, 1.f).ok());
  auto zv = to_f64(z);
  std::vector<double> dz64(zv.size());
  const bool mean = red == Reduction::kMean;
  const double l64 = reference::cross_entropy(dz64.data(), zv.data(), y.ptr<int64_t>(), N, V, -100, mean);
  std::vector<float> zf(zv.begin(), zv.end()), dzf(zv.size());
  const float lf = reference::cross_entropy(dzf.data(), zf.data(), y.ptr<int64_t>(), N, V, -100, mean);
  EXPECT_TRUE(close_to_reference("ce loss", {res->loss}, {l64}, {double(lf)}, Shape{1}, TolOp::kCrossEntropy,
                                 DType::kF32));
  EXPECT_TRUE(close_to_reference("ce dlogits", to_f64(dz), dz64, round_to_dtype(to_double(dzf), dt), dz.shape(),
                                 TolOp::kCrossEntropy, dt));
  for (int64_t v = 0; v < V; ++v) ASSERT_EQ(to_f64(dz)[size_t(5 * V + v)], 0.0) << "ignored row 5 has gradient";
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossEntropyKernel,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Values(Reduction::kMean, Reduction::kSum)),
                         [](const auto& i) {
                           return std::string(dtype_name(std::get<0>(i.param))) +
                                  (std::get<1>(i.param) == Reduction::kMean ? "_mean" : "_sum");
                         });

TEST(LinearCrossEntropy, FusedChunkedMatchesReferenceForAnyChunk) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t N = 37, Hd = 24, V = 301;
  Tensor h = random_tensor(a, {N, Hd}, DType::kF32, 7), W = random_tensor(a, {V, Hd}, DType::kF32, 8, -0.5f, 0.5f);
  Tensor y = integer_tensor(a, {N}, DType::kI32, 9, 0, int(V - 1));
  y.ptr<int32_t>()[3] = -100;
  // Reference: logits = h·Wᵀ, CE, then dh = dz·W and dW = dzᵀ·h, all fp64.
  auto hv = to_f64(h), wv = to_f64(W);
  std::vector<int64_t> y64(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) y64[size_t(n)] = y.ptr<int32_t>()[n];
  std::vector<double> z(size_t(N * V)), dz(z.size()), dh(size_t(N * Hd)), dW(size_t(V * Hd));
  reference::gemm(z.data(), hv.data(), wv.data(), N, V, Hd, false, true, 1.0, 0.0);
  const double L = reference::cross_entropy(dz.data(), z.data(), y64.data(), N, V, -100, true);
  reference::gemm(dh.data(), dz.data(), wv.data(), N, Hd, V, false, false, 1.0, 0.0);
  reference::gemm(dW.data(), dz.data(), hv.data(), V, Hd, N, true, false, 1.0, 0.0);
  // Naive float: the same steps in float.
  auto hf = cast_vec<float>(hv), wf = cast_vec<float>(wv);
  std::vector<float> zf(z.size()), dzf(z.size()), dhf(dh.size()), dWf(dW.size());
  reference::gemm(zf.data(), hf.data(), wf.data(), N, V, Hd, false, true, 1.f, 0.f);
  const float Lf = reference::cross_entropy(dzf.data(), zf.data(), y64.data(), N, V, -100, true);
  reference::gemm(dhf.data(), dzf.data(), wf.data(), N, Hd, V, false, false, 1.f, 0.f);
  reference::gemm(dWf.data(), dzf.data(), hf.data(), V, Hd, N, true, false, 1.f, 0.f);
  for (int64_t chunk : {int64_t(1), int64_t(5), int64_t(37), int64_t(0)}) {
    Tensor gh = Tensor::empty(a, {N, Hd}, DType::kF32).value(), gW = Tensor::zeros(a, {V, Hd}, DType::kF32).value();
    auto r = linear_cross_entropy(ctx, gh, gW, h, W, y, CrossEntropyDesc{-100, Reduction::kMean, chunk, {}}, 1.f);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const std::string tag = " chunk " + std::to_string(chunk);
    EXPECT_TRUE(close_to_reference("fused loss" + tag, {r->loss}, {L}, {double(Lf)}, Shape{1}, TolOp::kCrossEntropy,
                                   DType::kF32));
    EXPECT_TRUE(close_to_reference("fused dh" + tag, to_f64(gh), dh, to_double(dhf), gh.shape(), TolOp::kCrossEntropy,
                                   DType::kF32));
    EXPECT_TRUE(close_to_reference("fused dW" + tag, to_f64(gW), dW, to_double(dWf), gW.shape(), TolOp::kCrossEntropy,
                                   DType::kF32));
  }
}

TEST(CrossEntropy, ShiftLabelsStaysInsideEachSegment) {
  Allocator a;
  Tensor labels = Tensor::empty(a, {7}, DType::kI64).value(), out = Tensor::empty(a, {7}, DType::kI64).value();
  for (int i = 0; i < 7; ++i) labels.ptr<int64_t>()[i] = 10 + i;
  Tensor cu = Tensor::empty(a, {3}, DType::kI32).value();
  cu.ptr<int32_t>()[0] = 0;
  cu.ptr<int32_t>()[1] = 3;
  cu.ptr<int32_t>()[2] = 7;
  ASSERT_TRUE(shift_labels_for_causal_lm(out, labels, cu, -100).ok());
  const int64_t want[7] = {11, 12, -100, 14, 15, 16, -100};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(out.ptr<int64_t>()[i], want[i]) << "position " << i;
  // Boundaries that go backwards are an error that names the entry, and nothing is written.
  Tensor bad = Tensor::empty(a, {4}, DType::kI32).value();
  const int32_t bad_cu[4] = {0, 5, 3, 7};
  std::copy(bad_cu, bad_cu + 4, bad.ptr<int32_t>());
  const Status sb = shift_labels_for_causal_lm(out, labels, bad, -100);
  ASSERT_FALSE(sb.ok());
  EXPECT_NE(sb.message().find("cu_seqlens decreases at entry 2 (5 -> 3)"), std::string::npos) << sb.message();
  for (int i = 0; i < 7; ++i) EXPECT_EQ(out.ptr<int64_t>()[i], want[i]) << "position " << i << " was written";
  Tensor y = Tensor::empty(a, {2}, DType::kI64).value();
  y.ptr<int64_t>()[0] = 5;
  y.ptr<int64_t>()[1] = 9;
  Tensor z = random_tensor(a, {2, 8}, DType::kF32, 1);
  auto r = cross_entropy_forward(test_ctx(1), TensorView(), z, y, CrossEntropyDesc{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("label 9 at row 1 is outside [0, 8)"), std::string::npos)
      << r.status().message();
}

TEST(RouterReference, BackwardAndAuxMatchFiniteDifferences) {
  Allocator a;
  const int64_t T = 5, E = 6, K = 2;
  auto z = to_f64(random_tensor(a, {T, E}, DType::kF32, 10, -2.f, 2.f));
  auto G = to_f64(random_tensor(a, {T, K}, DType::kF32, 11));
  std::vector<double> p(size_t(T * E)), w(size_t(T * K)), dz(size_t(T * E));
  std::vector<int32_t> idx(size_t(T * K));
  for (int64_t t = 0; t < T; ++t) reference::router_row(&p[size_t(t * E)], &idx[size_t(t * K)], &w[size_t(t * K)], &z[size_t(t * E)], E, K);
  for (int64_t t = 0; t < T; ++t)
    reference::router_row_backward(&dz[size_t(t * E)], &G[size_t(t * K)], &p[size_t(t * E)], &idx[size_t(t * K)], E, K);
  // Loss Σ w·G with the selection held fixed (finite steps this small never change the top-k set here).
  auto L = [&](const std::vector<double>& zz) {
    double s = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> pp(static_cast<size_t>(E)), ww(static_cast<size_t>(K));
      std::vector<int32_t> ii(static_cast<size_t>(K));
      reference::router_row(pp.data(), ii.data(), ww.data(), &zz[size_t(t * E)], E, K);
      for (int64_t k = 0; k < K; ++k) s += ww[size_t(k)] * G[size_t(t * K + k)];
    }
    return s;
  };
  EXPECT_TRUE(finite_diff_matches("router dlogits", L, z, dz));
}

TEST(RouterKernel, ForwardBackwardAndAuxMatchReference) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t T = 41, E = 16, K = 4;
  const RouterDesc desc{int(E), int(K)};
  Tensor z = random_tensor(a, {T, E}, DType::kF32, 12, -3.f, 3.f), dw = random_tensor(a, {T, K}, DType::kF32, 13);
  Tensor w = Tensor::empty(a, {T, K}, DType::kF32).value(), idx = Tensor::empty(a, {T, K}, DType::kI32).value();
  Tensor p = Tensor::empty(a, {T, E}, DType::kF32).value(), dz = Tensor::empty(a, {T, E}, DType::kF32).value();
  ASSERT_TRUE(router_forward(ctx, w, idx, p, z, desc).ok());
  ASSERT_TRUE(router_backward(ctx, dz, dw, p, idx, w, desc).ok());
  auto zv = to_f64(z), gv = to_f64(dw);
  std::vector<double> p64(size_t(T * E)), w64(size_t(T * K)), dz64(size_t(T * E));
  std::vector<int32_t> i64(size_t(T * K));
  std::vector<float> zf(zv.begin(), zv.end()), pf(p64.size()), wf(w64.size()), dzf(dz64.size()), gf(gv.begin(), gv.end());
  std::vector<int32_t> i32(i64.size());
  for (int64_t t = 0; t < T; ++t) {
    reference::router_row(&p64[size_t(t * E)], &i64[size_t(t * K)], &w64[size_t(t * K)], &zv[size_t(t * E)], E, K);
    reference::router_row_backward(&dz64[size_t(t * E)], &gv[size_t(t * K)], &p64[size_t(t * E)], &i64[size_t(t * K)], E, K);
    reference::router_row(&pf[size_t(t * E)], &i32[size_t(t * K)], &wf[size_t(t * K)], &zf[size_t(t * E)], E, K);
    reference::router_row_backward(&dzf[size_t(t * E)], &gf[size_t(t * K)], &pf[size_t(t * E)], &i32[size_t(t * K)], E, K);
  }
  for (size_t i = 0; i < i64.size(); ++i) ASSERT_EQ(idx.ptr<int32_t>()[i], i64[i]) << "top-k index " << i;
  EXPECT_TRUE(close_to_reference("router weights", to_f64(w), w64, to_double(wf), w.shape(), TolOp::kRouter, DType::kF32));
  EXPECT_TRUE(close_to_reference("router dlogits", to_f64(dz), dz64, to_double(dzf), dz.shape(), TolOp::kRouter,
                                 DType::kF32));
  // Aux over two "layers" = the formula over their concatenation.
  RouterAuxStats stats;
  ASSERT_TRUE(router_aux_accumulate(stats, p.view().slice(0, 0, 20), idx.view().slice(0, 0, 20), desc).ok());
  ASSERT_TRUE(router_aux_accumulate(stats, p.view().slice(0, 20, T), idx.view().slice(0, 20, T), desc).ok());
  auto aux = router_aux_loss(stats);
  ASSERT_TRUE(aux.ok());
  const double aux64 = reference::router_aux(p64.data(), i64.data(), T, E, K);
  const float auxf = reference::router_aux(pf.data(), i32.data(), T, E, K);
  EXPECT_TRUE(close_to_reference("aux", {aux.value()}, {aux64}, {double(auxf)}, Shape{1}, TolOp::kRouter, DType::kF32));
  // Aux gradient vs finite differences of the reference aux with the selection fixed.
  Tensor daux = Tensor::zeros(a, {T, E}, DType::kF32).value();
  ASSERT_TRUE(router_aux_backward(ctx, daux, p, stats, 1.f).ok());
  auto Laux = [&](const std::vector<double>& zz) {
    std::vector<double> pp(size_t(T * E)), ww(size_t(T * K));
    std::vector<int32_t> ii(size_t(T * K));
    for (int64_t t = 0; t < T; ++t) reference::router_row(&pp[size_t(t * E)], &ii[size_t(t * K)], &ww[size_t(t * K)], &zz[size_t(t * E)], E, K);
    return reference::router_aux(pp.data(), i64.data(), T, E, K);  // counts from the fixed selection
  };
  std::vector<double> zd(zv.begin(), zv.end());
  auto dv = to_f64(daux);
  // The kernel gradient is fp32 (relative error ~1e-7 on values ~1e-3), far inside the finite-difference bound.
  EXPECT_TRUE(finite_diff_matches("aux dlogits (kernel, fp32)", Laux, zd, dv, 7));
}

TEST(RouterKernel, TopKTiesPreferLowerExpertAndErrorsAreNamed) {
  Allocator a;
  Tensor z = Tensor::zeros(a, {1, 4}, DType::kF32).value();  // all equal
  Tensor w = Tensor::empty(a, {1, 2}, DType::kF32).value(), idx = Tensor::empty(a, {1, 2}, DType::kI32).value();
  Tensor p = Tensor::empty(a, {1, 4}, DType::kF32).value();
  ASSERT_TRUE(router_forward(test_ctx(1), w, idx, p, z, RouterDesc{4, 2}).ok());
  EXPECT_EQ(idx.ptr<int32_t>()[0], 0);
  EXPECT_EQ(idx.ptr<int32_t>()[1], 1);
  EXPECT_FLOAT_EQ(w.ptr<float>()[0], 0.5f);
  const Status s = router_forward(test_ctx(1), w, idx, p, z, RouterDesc{4, 5});
  EXPECT_NE(s.message().find("top_k 5 must be in [1, num_experts = 4]"), std::string::npos) << s.message();
}

// The aux-loss-free expert bias: the selection ranks p + b (against the fp64 reference with the same bias), the
// weights stay the unbiased p renormalised over the chosen experts, and a strong bias on one expert puts it in
// every token's top-k without changing its weight's formula. Then the bias step and the named errors.
TEST(RouterKernel, ExpertBiasSteersSelectionOnly) {
  Allocator a;
  Context ctx = test_ctx(2);
  const int64_t T = 37, E = 8, K = 2;
  const RouterDesc desc{int(E), int(K)};
  Tensor z = random_tensor(a, {T, E}, DType::kF32, 21, -2.f, 2.f), bias = random_tensor(a, {E}, DType::kF32, 22, -0.3f, 0.3f);
  Tensor w = Tensor::empty(a, {T, K}, DType::kF32).value(), idx = Tensor::empty(a, {T, K}, DType::kI32).value();
  Tensor p = Tensor::empty(a, {T, E}, DType::kF32).value();
  ASSERT_TRUE(router_forward(ctx, w, idx, p, z, desc, bias).ok());
  const auto zv = to_f64(z), bv = to_f64(bias);
  std::vector<double> p64(size_t(T * E)), w64(size_t(T * K));
  std::vector<int32_t> i64(size_t(T * K)), plain(size_t(T * K));
  int changed = 0;  // tokens whose selection the bias changed (the test must exercise it)
  for (int64_t t = 0; t < T; ++t) {
    reference::router_row(&p64[size_t(t * E)], &i64[size_t(t * K)], &w64[size_t(t * K)], &zv[size_t(t * E)], E, K,
                          bv.data());
    std::vector<double> pp(static_cast<size_t>(E)), ww(static_cast<size_t>(K));
    reference::router_row(pp.data(), &plain[size_t(t * K)], ww.data(), &zv[size_t(t * E)], E, K);
    changed += !std::equal(&plain[size_t(t * K)], &plain[size_t(t * K + K)], &i64[size_t(t * K)]);
    double top = 0;  // the weights are the unbiased probabilities of the chosen experts, renormalised
    for (int64_t k = 0; k < K; ++k) top += p64[size_t(t * E + i64[size_t(t * K + k)])];
    for (int64_t k = 0; k < K; ++k)
      ASSERT_NEAR(w64[size_t(t * K + k)], p64[size_t(t * E + i64[size_t(t * K + k)])] / top, 1e-12);
  }
  EXPECT_GT(changed, 0);
  for (size_t i = 0; i < i64.size(); ++i) ASSERT_EQ(idx.ptr<int32_t>()[i], i64[i]) << "top-k index " << i;
  std::vector<float> zf(zv.begin(), zv.end()), bf(bv.begin(), bv.end()), pf(p64.size()), wf(w64.size());
  std::vector<int32_t> i32(i64.size());
  for (int64_t t = 0; t < T; ++t)  // the naive fp32 twin, for the tolerance
    reference::router_row(&pf[size_t(t * E)], &i32[size_t(t * K)], &wf[size_t(t * K)], &zf[size_t(t * E)], E, K,
                          bf.data());
  EXPECT_TRUE(close_to_reference("router weights (biased selection)", to_f64(w), w64, to_double(wf), w.shape(),
                                 TolOp::kRouter, DType::kF32));
  // lse written on request: logsumexp of each row (the z-loss), against fp64.
  Tensor lse = Tensor::empty(a, {T}, DType::kF32).value();
  ASSERT_TRUE(router_forward(ctx, w, idx, p, z, desc, {}, lse).ok());
  for (int64_t t = 0; t < T; ++t) {
    double m = zv[size_t(t * E)], s = 0;
    for (int64_t e = 1; e < E; ++e) m = std::max(m, zv[size_t(t * E + e)]);
    for (int64_t e = 0; e < E; ++e) s += std::exp(zv[size_t(t * E + e)] - m);
    EXPECT_NEAR(lse.ptr<float>()[t], m + std::log(s), 1e-6 * (1 + std::abs(m))) << "token " << t;
  }
  // Expert 5 pushed into every top-k; its weight is still its probability's share.
  Tensor strong = Tensor::zeros(a, {E}, DType::kF32).value();
  strong.ptr<float>()[5] = 2.f;
  ASSERT_TRUE(router_forward(ctx, w, idx, p, z, desc, strong).ok());
  for (int64_t t = 0; t < T; ++t) {
    ASSERT_EQ(idx.ptr<int32_t>()[t * K], 5) << "token " << t;
    const int32_t other = idx.ptr<int32_t>()[t * K + 1];
    const float* pt = p.ptr<float>() + t * E;
    EXPECT_FLOAT_EQ(w.ptr<float>()[t * K], pt[5] / (pt[5] + pt[other])) << "token " << t;
  }
  // The bias step: loads {4, 0, 2, 2, 1, 3, 2, 2} (mean 2) move the bias by −u, +u, 0, 0, +u, −u, 0, 0.
  Tensor b = Tensor::zeros(a, {E}, DType::kF32).value();
  const std::vector<double> load = {4, 0, 2, 2, 1, 3, 2, 2};
  ASSERT_TRUE(router_bias_update(b, load, 1e-3f).ok());
  const std::vector<float> want = {-1e-3f, 1e-3f, 0.f, 0.f, 1e-3f, -1e-3f, 0.f, 0.f};
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(b.ptr<float>()[e], want[size_t(e)]) << "expert " << e;
  // Named errors: a NaN bias, a bias of the wrong length, a negative rate.
  strong.ptr<float>()[3] = std::nanf("");
  Status s = router_forward(ctx, w, idx, p, z, desc, strong);
  EXPECT_NE(s.message().find("expert_bias[3] = nan is not finite"), std::string::npos) << s.message();
  s = router_forward(ctx, w, idx, p, z, desc, b.view().slice(0, 0, 4));
  EXPECT_NE(s.message().find("expert_bias must be contiguous f32 [8]"), std::string::npos) << s.message();
  s = router_bias_update(b, load, -1.f);
  EXPECT_NE(s.message().find("rate must be finite and not negative"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vlpar
