// Varlen (packed) attention: the CPU FlashAttention-2 kernel against the fp64 reference (forward out and lse,
// backward dq/dk/dv) under the derived tolerance rule; the reference backward against central finite
// differences; segment isolation; determinism; strided views; named argument errors.
// Run: ./build/cpu/tests/test_attention   (or ctest --test-dir build/cpu -R Attention)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/reference/attention.hpp"

namespace vlpar {
namespace {

// Segment lengths: a single token, an empty segment, lengths that are and are not multiples of the kernel's
// block sizes, and one longer than a block so tiles cross and stop short of the diagonal.
const std::vector<int> kLens = {150, 1, 37, 0, 64};

struct Case {
  DType dtype;
  bool causal;
  int H, H_kv, D;
  float scale;  // 0: 1/sqrt(D)
};

std::string case_name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + (c.causal ? "_causal" : "_bidir") + "_H" + std::to_string(c.H) + "kv" +
         std::to_string(c.H_kv) + "_hd" + std::to_string(c.D) + (c.scale != 0 ? "_scaled" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

std::vector<int32_t> cu_from_lens(const std::vector<int>& lens) {
  std::vector<int32_t> cu{0};
  for (int l : lens) cu.push_back(cu.back() + l);
  return cu;
}

/// Inputs of one problem, rounded to the storage dtype.
struct Inputs {
  std::vector<int32_t> cu;
  Tensor cu_t;
  Tensor q, k, v, dout;  // [N, H, D], [N, H_kv, D] ×2, [N, H, D]
  VarlenAttentionDesc desc;

  reference::AttentionProblem problem() const {
    return {cu.data(), int(cu.size()) - 1, desc.num_heads, desc.num_kv_heads, desc.head_dim, desc.causal,
            double(desc.softmax_scale)};
  }
};

Inputs make_inputs(Allocator& alloc, const Case& c, const std::vector<int>& lens, uint64_t seed) {
  Inputs in;
  in.cu = cu_from_lens(lens);
  in.cu_t = Tensor::empty(alloc, {int64_t(in.cu.size())}, DType::kI32).value();
  std::memcpy(in.cu_t.ptr<int32_t>(), in.cu.data(), in.cu.size() * sizeof(int32_t));
  const int64_t N = in.cu.back();
  // q, k in [-2, 2): scores have std ≈ 1.3 at the default scale, so the softmax is far from uniform.
  in.q = test::random_tensor(alloc, {N, c.H, c.D}, c.dtype, seed, -2.f, 2.f);
  in.k = test::random_tensor(alloc, {N, c.H_kv, c.D}, c.dtype, seed + 1, -2.f, 2.f);
  in.v = test::random_tensor(alloc, {N, c.H_kv, c.D}, c.dtype, seed + 2);
  in.dout = test::random_tensor(alloc, {N, c.H, c.D}, c.dtype, seed + 3);
  in.desc = VarlenAttentionDesc{c.H, c.H_kv, c.D, c.causal, c.scale};
  return in;
}

struct Outputs {
  Tensor out, lse, dq, dk, dv;
};

Outputs run_kernel(const Context& ctx, Allocator& alloc, const Inputs& in) {
  const DType dt = in.q.dtype();
  const int64_t N = in.q.shape()[0];
  const int H = in.desc.num_heads, H_kv = in.desc.num_kv_heads, D = in.desc.head_dim;
  Outputs o{Tensor::zeros(alloc, {N, H, D}, dt).value(), Tensor::zeros(alloc, {H, N}, DType::kF32).value(),
            Tensor::zeros(alloc, {N, H, D}, dt).value(), Tensor::zeros(alloc, {N, H_kv, D}, dt).value(),
            Tensor::zeros(alloc, {N, H_kv, D}, dt).value()};
  Status st = varlen_attention_forward(ctx, o.out, o.lse, in.q, in.k, in.v, in.cu_t, in.desc);
  EXPECT_TRUE(st.ok()) << st.to_string();
  st = varlen_attention_backward(ctx, o.dq, o.dk, o.dv, in.dout, in.q, in.k, in.v, o.out, o.lse, in.cu_t, in.desc);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

/// Reference forward + backward run in scalar S on fp64 copies of the (rounded) inputs.
struct RefOutputs {
  std::vector<double> out, lse, dq, dk, dv;
};

template <class S>
std::vector<S> cast(const std::vector<double>& x) {
  return std::vector<S>(x.begin(), x.end());
}

template <class S>
RefOutputs run_reference(const Inputs& in) {
  const reference::AttentionProblem p = in.problem();
  const std::vector<S> q = cast<S>(test::to_f64(in.q)), k = cast<S>(test::to_f64(in.k)),
                       v = cast<S>(test::to_f64(in.v)), dout = cast<S>(test::to_f64(in.dout));
  std::vector<S> out(q.size()), lse(size_t(p.H * p.num_tokens())), dq(q.size()), dk(k.size()), dv(v.size());
  reference::attention_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), p);
  reference::attention_backward<S>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), p);
  auto f64 = [](const std::vector<S>& x) { return std::vector<double>(x.begin(), x.end()); };
  return {f64(out), f64(lse), f64(dq), f64(dk), f64(dv)};
}

class AttentionVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionVsReference, ForwardAndBackwardWithinDerivedTolerance) {
  const Case c = GetParam();
  Allocator alloc;
  const Inputs in = make_inputs(alloc, c, kLens, 101);
  const Outputs o = run_kernel(test::test_ctx(2), alloc, in);
  const RefOutputs ref = run_reference<double>(in);
  const RefOutputs naive = run_reference<float>(in);  // out/dq/dk/dv rounded to storage below; lse is f32
  using test::TolOp;
  auto check = [&](const char* what, const Tensor& t, const std::vector<double>& r, const std::vector<double>& n,
                   TolOp op, DType dt) {
    EXPECT_TRUE(test::close_to_reference(case_name(c) + "_" + what, test::to_f64(t), r, test::round_to_dtype(n, dt),
                                         t.shape(), op, dt));
  };
  check("out", o.out, ref.out, naive.out, TolOp::kAttentionFwd, c.dtype);
  check("lse", o.lse, ref.lse, naive.lse, TolOp::kAttentionFwd, DType::kF32);
  check("dq", o.dq, ref.dq, naive.dq, TolOp::kAttentionBwd, c.dtype);
  check("dk", o.dk, ref.dk, naive.dk, TolOp::kAttentionBwd, c.dtype);
  check("dv", o.dv, ref.dv, naive.dv, TolOp::kAttentionBwd, c.dtype);
}

// Every pair of (f32/bf16, mask, GQA ratio, head dim) values appears; two cases use an explicit softmax_scale;
// one f16 case covers the third storage type.
INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionVsReference,
    ::testing::Values(Case{DType::kF32, true, 4, 4, 72, 0}, Case{DType::kF32, true, 4, 2, 128, 0},
                      Case{DType::kF32, true, 4, 1, 72, 0.2f}, Case{DType::kF32, false, 4, 4, 128, 0},
                      Case{DType::kF32, false, 4, 2, 72, 0}, Case{DType::kF32, false, 4, 1, 128, 0},
                      Case{DType::kBF16, true, 4, 4, 128, 0}, Case{DType::kBF16, true, 4, 2, 72, 0},
                      Case{DType::kBF16, true, 4, 1, 128, 0}, Case{DType::kBF16, false, 4, 4, 72, 0},
                      Case{DType::kBF16, false, 4, 2, 128, 0.1f}, Case{DType::kBF16, false, 4, 1, 72, 0},
                      Case{DType::kF16, true, 4, 2, 72, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// L = Σ out ∘ G; the reference backward with dout = G must match central differences of the reference forward.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const std::vector<int32_t> cu = cu_from_lens({3, 1, 4});
    const reference::AttentionProblem p{cu.data(), 3, 4, 2, 5, causal, 0.0};
    const int64_t N = p.num_tokens();
    auto rnd = [](size_t n, uint64_t seed) {
      std::vector<double> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = philox_uniform(seed, 0, i, -1.5f, 1.5f);
      return x;
    };
    std::vector<double> q = rnd(size_t(N * p.H * p.D), 1), k = rnd(size_t(N * p.H_kv * p.D), 2),
                        v = rnd(size_t(N * p.H_kv * p.D), 3), G = rnd(size_t(N * p.H * p.D), 4);
    auto loss = [&]() {
      std::vector<double> out(G.size()), lse(size_t(p.H * N));
      reference::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), p);
      double L = 0;
      for (size_t i = 0; i < G.size(); ++i) L += out[i] * G[i];
      return L;
    };
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    reference::attention_backward(dq.data(), dk.data(), dv.data(), G.data(), q.data(), k.data(), v.data(), p);
    for (auto [name, x, g] : {std::tuple{"q", &q, &dq}, std::tuple{"k", &k, &dk}, std::tuple{"v", &v, &dv}}) {
      const double tol = test::kFiniteDiffRelTol * std::max(1.0, test::max_abs(*g));
      ASSERT_GT(test::max_abs(*g), 0.0) << name << ": vacuous gradient";
      for (size_t i = 0; i < x->size(); ++i) {
        const double x0 = (*x)[i], h = test::kFiniteDiffStep * std::max(1.0, std::fabs(x0));
        (*x)[i] = x0 + h;
        const double lp = loss();
        (*x)[i] = x0 - h;
        const double lm = loss();
        (*x)[i] = x0;
        EXPECT_NEAR((lp - lm) / (2 * h), (*g)[i], tol) << "d" << name << " at flat index " << i;
      }
    }
  }
}

// Perturbing segment 2's q/k/v leaves every other segment's out, lse, dq, dk, dv bit-identical.
TEST(Attention, SegmentsNeverInteract) {
  Allocator alloc;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const Case c{DType::kF32, causal, 4, 2, 72, 0};
    const Inputs a = make_inputs(alloc, c, kLens, 7);
    Inputs b = make_inputs(alloc, c, kLens, 7);
    const int64_t lo = a.cu[2], hi = a.cu[3];  // the 37-token segment
    for (Tensor* t : {&b.q, &b.k, &b.v}) {
      const int64_t row = t->numel() / t->shape()[0];
      for (int64_t i = lo * row; i < hi * row; ++i) t->ptr<float>()[i] = -2.f * t->ptr<float>()[i] + 0.25f;
    }
    const Outputs oa = run_kernel(test::test_ctx(2), alloc, a), ob = run_kernel(test::test_ctx(2), alloc, b);
    auto rows = [](const Tensor& t, int64_t begin, int64_t end) { return t.view().slice(0, begin, end); };
    for (auto [name, x, y] : {std::tuple{"out", &oa.out, &ob.out}, std::tuple{"dq", &oa.dq, &ob.dq},
                              std::tuple{"dk", &oa.dk, &ob.dk}, std::tuple{"dv", &oa.dv, &ob.dv}}) {
      EXPECT_TRUE(test::bitwise_equal(std::string(name) + " before", rows(*x, 0, lo), rows(*y, 0, lo)));
      EXPECT_TRUE(test::bitwise_equal(std::string(name) + " after", rows(*x, hi, a.cu.back()),
                                      rows(*y, hi, a.cu.back())));
      EXPECT_NE(std::memcmp(rows(*x, lo, hi).data, rows(*y, lo, hi).data, rows(*x, lo, hi).nbytes()), 0)
          << name << ": the perturbed segment did not change (vacuous test)";
    }
    for (int h = 0; h < c.H; ++h) {
      const float* la = oa.lse.ptr<float>() + h * a.cu.back();
      const float* lb = ob.lse.ptr<float>() + h * a.cu.back();
      EXPECT_EQ(std::memcmp(la, lb, size_t(lo) * 4), 0) << "lse head " << h;
      EXPECT_EQ(std::memcmp(la + hi, lb + hi, size_t(a.cu.back() - hi) * 4), 0) << "lse head " << h;
    }
  }
}

// Two runs are bitwise equal; so are runs with 1, 2 and 3 threads (every element has one fixed sum order).
TEST(Attention, BitwiseDeterministicAcrossRunsAndThreadCounts) {
  Allocator alloc;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const Inputs in = make_inputs(alloc, Case{DType::kBF16, causal, 4, 1, 128, 0}, kLens, 11);
    const Outputs first = run_kernel(test::test_ctx(2), alloc, in);
    for (int threads : {2, 1, 3}) {
      const Outputs again = run_kernel(test::test_ctx(threads), alloc, in);
      SCOPED_TRACE("threads " + std::to_string(threads));
      EXPECT_TRUE(test::bitwise_equal("out", first.out, again.out));
      EXPECT_TRUE(test::bitwise_equal("lse", first.lse, again.lse));
      EXPECT_TRUE(test::bitwise_equal("dq", first.dq, again.dq));
      EXPECT_TRUE(test::bitwise_equal("dk", first.dk, again.dk));
      EXPECT_TRUE(test::bitwise_equal("dv", first.dv, again.dv));
    }
  }
}

// q, k, v as head slices of one fused [N, H + 2·H_kv, D] qkv buffer (token stride (H + 2·H_kv)·D) give the
// same bits as contiguous copies.
TEST(Attention, StridedQkvViewsMatchContiguous) {
  Allocator alloc;
  const Case c{DType::kF32, true, 4, 2, 72, 0};
  const Inputs in = make_inputs(alloc, c, kLens, 5);
  const int64_t N = in.cu.back(), W = c.H + 2 * c.H_kv;
  const Tensor qkv = Tensor::empty(alloc, {N, W, c.D}, DType::kF32).value();
  for (int64_t t = 0; t < N; ++t)
    for (int w = 0; w < W; ++w) {
      const Tensor& src = w < c.H ? in.q : w < c.H + c.H_kv ? in.k : in.v;
      const int hs = int(src.shape()[1]), h = w < c.H ? w : w < c.H + c.H_kv ? w - c.H : w - c.H - c.H_kv;
      std::memcpy(qkv.ptr<float>() + (t * W + w) * c.D, src.ptr<float>() + (t * hs + h) * c.D, size_t(c.D) * 4);
    }
  const TensorView q = qkv.view().slice(1, 0, c.H), k = qkv.view().slice(1, c.H, c.H + c.H_kv),
                   v = qkv.view().slice(1, c.H + c.H_kv, W);
  const Outputs ref = run_kernel(test::test_ctx(2), alloc, in);
  Tensor out = Tensor::zeros(alloc, {N, c.H, c.D}, DType::kF32).value();
  Tensor lse = Tensor::zeros(alloc, {c.H, N}, DType::kF32).value();
  const Context ctx = test::test_ctx(2);
  ASSERT_TRUE(varlen_attention_forward(ctx, out, lse, q, k, v, in.cu_t, in.desc).ok());
  EXPECT_TRUE(test::bitwise_equal("out", ref.out, out));
  EXPECT_TRUE(test::bitwise_equal("lse", ref.lse, lse));
  Tensor dq = Tensor::zeros(alloc, {N, c.H, c.D}, DType::kF32).value();
  Tensor dk = Tensor::zeros(alloc, {N, c.H_kv, c.D}, DType::kF32).value();
  Tensor dv = Tensor::zeros(alloc, {N, c.H_kv, c.D}, DType::kF32).value();
  ASSERT_TRUE(varlen_attention_backward(ctx, dq, dk, dv, in.dout, q, k, v, out, lse, in.cu_t, in.desc).ok());
  EXPECT_TRUE(test::bitwise_equal("dq", ref.dq, dq));
  EXPECT_TRUE(test::bitwise_equal("dk", ref.dk, dk));
  EXPECT_TRUE(test::bitwise_equal("dv", ref.dv, dv));
}

/// Status of a forward call with `cu` (as i32 [size]) and `desc` on the f32 inputs of `in`.
Status forward_with(Allocator& alloc, const Inputs& in, const std::vector<int32_t>& cu, VarlenAttentionDesc desc) {
  Tensor cu_t = Tensor::empty(alloc, {int64_t(cu.size())}, DType::kI32).value();
  std::memcpy(cu_t.ptr<int32_t>(), cu.data(), cu.size() * 4);
  const int64_t N = in.q.shape()[0];
  Tensor out = Tensor::zeros(alloc, {N, desc.num_heads, desc.head_dim}, DType::kF32).value();
  Tensor lse = Tensor::zeros(alloc, {desc.num_heads, N}, DType::kF32).value();
  return varlen_attention_forward(test::test_ctx(2), out, lse, in.q, in.k, in.v, cu_t, desc);
}

/// Separate query and key segments (cross attention; causal masks bottom-right aligned): more queries than keys
/// (the leading rows see no key), fewer, a sequence without keys and one without queries. Rows that see no key
/// get out = 0 and lse = +inf exactly; everything else follows the derived rule against the fp64 reference.
TEST(Attention, SeparateQueryAndKeySegmentsMatchReference) {
  Allocator alloc;
  const Context ctx = test::test_ctx(2);
  const std::vector<int32_t> cu_q = cu_from_lens({40, 0, 9, 3, 12}), cu_k = cu_from_lens({17, 6, 0, 25, 12});
  const int H = 4, H_kv = 2, D = 16;
  const int64_t n_q = cu_q.back(), n_k = cu_k.back();
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const VarlenAttentionDesc desc{H, H_kv, D, causal, 0.f};
    Tensor cq = Tensor::empty(alloc, {int64_t(cu_q.size())}, DType::kI32).value();
    Tensor ck = Tensor::empty(alloc, {int64_t(cu_k.size())}, DType::kI32).value();
    std::memcpy(cq.ptr<int32_t>(), cu_q.data(), cu_q.size() * sizeof(int32_t));
    std::memcpy(ck.ptr<int32_t>(), cu_k.data(), cu_k.size() * sizeof(int32_t));
    const Tensor q = test::random_tensor(alloc, {n_q, H, D}, DType::kF32, 1, -2.f, 2.f);
    const Tensor k = test::random_tensor(alloc, {n_k, H_kv, D}, DType::kF32, 2, -2.f, 2.f);
    const Tensor v = test::random_tensor(alloc, {n_k, H_kv, D}, DType::kF32, 3);
    const Tensor dout = test::random_tensor(alloc, {n_q, H, D}, DType::kF32, 4);
    auto zeros = [&](Shape shape) { return Tensor::zeros(alloc, shape, DType::kF32).value(); };
    Tensor out = zeros({n_q, H, D}), lse = zeros({H, n_q}), dq = zeros({n_q, H, D});
    Tensor dk = zeros({n_k, H_kv, D}), dv = zeros({n_k, H_kv, D});
    ASSERT_TRUE(varlen_attention_forward(ctx, out, lse, q, k, v, cq, ck, desc).ok());
    ASSERT_TRUE(varlen_attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, cq, ck, desc).ok());

    reference::AttentionProblem p{cu_q.data(), int(cu_q.size()) - 1, H, H_kv, D, causal, 0.0, cu_k.data()};
    auto ref = [&](auto zero) {
      using S = decltype(zero);
      const auto q_s = cast<S>(test::to_f64(q)), k_s = cast<S>(test::to_f64(k)), v_s = cast<S>(test::to_f64(v));
      const auto g_s = cast<S>(test::to_f64(dout));
      std::vector<S> o(q_s.size()), l(size_t(H * n_q)), gq(q_s.size()), gk(k_s.size()), gv(v_s.size());
      reference::attention_forward<S>(o.data(), l.data(), q_s.data(), k_s.data(), v_s.data(), p);
      reference::attention_backward<S>(gq.data(), gk.data(), gv.data(), g_s.data(), q_s.data(), k_s.data(),
                                       v_s.data(), p);
      auto f64 = [](const std::vector<S>& x) { return std::vector<double>(x.begin(), x.end()); };
      return std::vector<std::vector<double>>{f64(o), f64(l), f64(gq), f64(gk), f64(gv)};
    };
    auto r64 = ref(0.0), rf = ref(0.f);
    std::vector<double> lse_k = test::to_f64(lse);
    int empty_rows = 0;
    for (size_t i = 0; i < lse_k.size(); ++i) {
      ASSERT_EQ(std::isinf(r64[1][i]), std::isinf(lse_k[i])) << "lse row " << i << ": " << lse_k[i];
      if (std::isinf(r64[1][i])) {
        EXPECT_EQ(lse_k[i], std::numeric_limits<double>::infinity());
        lse_k[i] = r64[1][i] = rf[1][i] = 0.0;
        ++empty_rows;
      }
    }
    EXPECT_GT(empty_rows, 0) << "the case has rows without keys";
    const Shape sq{n_q, H, D}, sk{n_k, H_kv, D};
    EXPECT_TRUE(test::close_to_reference("out", test::to_f64(out), r64[0], rf[0], sq, test::TolOp::kAttentionFwd,
                                         DType::kF32));
    EXPECT_TRUE(test::close_to_reference("lse", lse_k, r64[1], rf[1], Shape{H, n_q}, test::TolOp::kAttentionFwd,
                                         DType::kF32));
    EXPECT_TRUE(test::close_to_reference("dq", test::to_f64(dq), r64[2], rf[2], sq, test::TolOp::kAttentionBwd,
                                         DType::kF32));
    EXPECT_TRUE(test::close_to_reference("dk", test::to_f64(dk), r64[3], rf[3], sk, test::TolOp::kAttentionBwd,
                                         DType::kF32));
    EXPECT_TRUE(test::close_to_reference("dv", test::to_f64(dv), r64[4], rf[4], sk, test::TolOp::kAttentionBwd,
                                         DType::kF32));
  }
}

void expect_error(const Status& st, StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << "expected \"" << needle << "\" in: " << st.message();
}

TEST(Attention, BadArgumentsAreNamedErrors) {
  Allocator alloc;
  const Inputs in = make_inputs(alloc, Case{DType::kF32, true, 4, 2, 8, 0}, {3, 5}, 3);  // N = 8
  const StatusCode bad = StatusCode::kInvalidArgument;
  ASSERT_TRUE(forward_with(alloc, in, {0, 3, 8}, in.desc).ok());
  expect_error(forward_with(alloc, in, {1, 3, 8}, in.desc), bad, "cu_seqlens[0] must be 0, got 1");
  expect_error(forward_with(alloc, in, {0, 5, 3, 8}, in.desc), bad, "cu_seqlens[2] = 3 is less than cu_seqlens[1]");
  expect_error(forward_with(alloc, in, {0, 3, 7}, in.desc), bad, "cu_seqlens[2] = 7 must equal N_tok = 8");
  VarlenAttentionDesc gqa = in.desc;
  gqa.num_kv_heads = 3;
  expect_error(forward_with(alloc, in, in.cu, gqa), bad, "num_heads 4 is not a multiple of num_kv_heads 3");
  VarlenAttentionDesc hd = in.desc;
  hd.head_dim = 16;
  expect_error(forward_with(alloc, in, in.cu, hd), bad, "varlen_attention: q must be [N_tok=8, 4, 16]");

  const Context ctx = test::test_ctx(2);
  Tensor out = Tensor::zeros(alloc, {8, 4, 8}, DType::kF32).value();
  Tensor lse = Tensor::zeros(alloc, {4, 8}, DType::kF32).value();
  Tensor k16 = Tensor::zeros(alloc, {8, 2, 8}, DType::kBF16).value();
  expect_error(varlen_attention_forward(ctx, out, lse, in.q, k16, in.v, in.cu_t, in.desc), bad,
               "varlen_attention: k has dtype bf16 but q has f32");
  Tensor lse_t = Tensor::zeros(alloc, {8, 4}, DType::kF32).value();
  expect_error(varlen_attention_forward(ctx, out, lse_t, in.q, in.k, in.v, in.cu_t, in.desc), bad,
               "lse must be [H=4, N_tok=8]");
  TensorView null_v = in.v.view();
  null_v.data = nullptr;
  expect_error(varlen_attention_forward(ctx, out, lse, in.q, in.k, null_v, in.cu_t, in.desc), bad,
               "varlen_attention: v has null data");
  TensorView cuda_q = in.q.view();
  cuda_q.device = Device::cuda(0);
  expect_error(varlen_attention_forward(ctx, out, lse, cuda_q, in.k, in.v, in.cu_t, in.desc), bad,
               "varlen_attention: out is f32[8, 4, 8]");
  expect_error(varlen_attention_backward(ctx, out, out, in.v, in.dout, cuda_q, in.k, in.v, out, lse, in.cu_t,
                                         in.desc),
               bad, "varlen_attention: dq is f32[8, 4, 8]");
  Tensor dk_wrong = Tensor::zeros(alloc, {8, 4, 8}, DType::kF32).value();
  expect_error(varlen_attention_backward(ctx, out, dk_wrong, in.v, in.dout, in.q, in.k, in.v, out, lse, in.cu_t,
                                         in.desc),
               bad, "varlen_attention: dk must be [N_tok=8, 2, 8]");
}

}  // namespace
}  // namespace vlpar
