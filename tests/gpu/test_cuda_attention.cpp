// CUDA varlen flash-attention forward (src/kernels/cuda/flash_fwd_kernel.cuh) through the public op with CUDA
// views, against the fp64 reference (include/vlpar/reference/attention.hpp) with the derived rule of
// tests/tolerances.hpp, twice: naive = the float reference and naive = the CPU kernel on the same inputs. Every
// compiled instantiation (bf16/f16 × kernel head dim 64/96/128) with the head dims that map onto them (72, 80 →
// 96 with zero-filled columns), causal and bidirectional, MHA/GQA/MQA, default, custom and negative softmax
// scales, packed batches with sequences of length 0, 1 and lengths that are not multiples of any tile; large
// scores (no overflow, no NaN); strided views of one packed QKV buffer giving bitwise the results of contiguous
// ones; repeat runs bitwise equal; named errors for what the kernel cannot take.
// Run: ctest --test-dir build/emu -R Attention (emulated, label emu), or on a GPU: ctest -L gpu
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/reference/attention.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

struct AttnCase {
  DType dtype;
  bool causal;
  int H, H_kv, D;
  float scale;              // 0: 1/sqrt(D)
  std::vector<int> lens;    // sequence lengths of the packed batch
  float range = 2.f;        // q and k uniform in [-range, range)
};

std::string attn_case_name(const AttnCase& c) {
  std::string lens;
  for (int l : c.lens) lens += fmt::format("_{}", l);
  return fmt::format("{}_{}_H{}kv{}_hd{}{}{}_len{}", dtype_name(c.dtype), c.causal ? "causal" : "bidir", c.H, c.H_kv,
                     c.D, c.scale == 0 ? "" : (c.scale > 0 ? "_scaled" : "_negscale"),
                     c.range > 2.f ? "_large" : "", lens);
}

/// Host inputs of one case: cu_seqlens, q [N, H, D], k and v [N, H_kv, D] in the storage dtype.
struct AttnInputs {
  std::vector<int32_t> cu{0};
  Tensor cu_t, q, k, v;
  VarlenAttentionDesc desc;
  int64_t n = 0;
};

AttnInputs make_attn_inputs(Allocator& a, const AttnCase& c, uint64_t seed) {
  AttnInputs in;
  for (int l : c.lens) in.cu.push_back(in.cu.back() + l);
  in.n = in.cu.back();
  in.cu_t = Tensor::empty(a, {int64_t(in.cu.size())}, DType::kI32).value();
  std::memcpy(in.cu_t.ptr<int32_t>(), in.cu.data(), in.cu.size() * sizeof(int32_t));
  in.q = random_tensor(a, {in.n, c.H, c.D}, c.dtype, seed, -c.range, c.range);
  in.k = random_tensor(a, {in.n, c.H_kv, c.D}, c.dtype, seed + 1, -c.range, c.range);
  in.v = random_tensor(a, {in.n, c.H_kv, c.D}, c.dtype, seed + 2);
  in.desc = VarlenAttentionDesc{c.H, c.H_kv, c.D, c.causal, c.scale};
  return in;
}

/// out [N, H, D] and lse [H, N] of the CUDA kernel on device copies of the inputs, downloaded.
struct AttnOut {
  Tensor out, lse;
};

AttnOut run_gpu(Allocator& a, const AttnInputs& in, const TensorView& q, const TensorView& k, const TensorView& v,
                Status* status) {
  const int H = in.desc.num_heads, D = in.desc.head_dim;
  Tensor out = Tensor::zeros(a, {in.n, H, D}, in.q.dtype(), Device::cuda(0)).value();
  Tensor lse = Tensor::zeros(a, {H, in.n}, DType::kF32, Device::cuda(0)).value();
  *status = varlen_attention_forward(gpu_ctx(), out, lse, q, k, v, in.cu_t, in.desc);
  return {download(a, out), download(a, lse)};
}

class VLPAR_SUITE(Attention) : public ::testing::TestWithParam<AttnCase> {};

VLPAR_TEST_P(VLPAR_SUITE(Attention), ForwardMatchesReferenceAndCpu) {
  VLPAR_REQUIRE_GPU();
  const AttnCase& c = GetParam();
  Allocator a;
  const AttnInputs in = make_attn_inputs(a, c, 7);
  const Tensor qd = upload(a, in.q), kd = upload(a, in.k), vd = upload(a, in.v);
  Status st;
  const AttnOut gpu = run_gpu(a, in, qd, kd, vd, &st);
  VLPAR_ASSERT_OK_OR_SKIP(st);

  Tensor out_cpu = Tensor::zeros(a, {in.n, c.H, c.D}, c.dtype).value();
  Tensor lse_cpu = Tensor::zeros(a, {c.H, in.n}, DType::kF32).value();
  ASSERT_TRUE(varlen_attention_forward(test_ctx(2), out_cpu, lse_cpu, in.q, in.k, in.v, in.cu_t, in.desc).ok());

  const reference::AttentionProblem prob{in.cu.data(), int(c.lens.size()), c.H, c.H_kv, c.D, c.causal,
                                         double(c.scale)};
  const auto q64 = to_f64(in.q), k64 = to_f64(in.k), v64 = to_f64(in.v);
  std::vector<double> out64(q64.size()), lse64(size_t(c.H * in.n));
  reference::attention_forward<double>(out64.data(), lse64.data(), q64.data(), k64.data(), v64.data(), prob);
  const auto qf = cast_vec<float>(q64), kf = cast_vec<float>(k64), vf = cast_vec<float>(v64);
  std::vector<float> outf(qf.size()), lsef(lse64.size());
  reference::attention_forward<float>(outf.data(), lsef.data(), qf.data(), kf.data(), vf.data(), prob);

  const std::vector<double> out_gpu = to_f64(gpu.out), lse_gpu = to_f64(gpu.lse);
  for (double x : out_gpu) ASSERT_TRUE(std::isfinite(x)) << "non-finite output";
  for (double x : lse_gpu) ASSERT_TRUE(std::isfinite(x)) << "non-finite lse (every row sees a key here)";
  expect_gpu_close("attn_out", out_gpu, to_f64(out_cpu), out64, to_double(outf), Shape{in.n, c.H, c.D},
                   TolOp::kAttentionFwd, c.dtype);
  expect_gpu_close("attn_lse", lse_gpu, to_f64(lse_cpu), lse64, to_double(lsef), Shape{c.H, in.n},
                   TolOp::kAttentionFwd, DType::kF32);
}

// Sequences of length 0 and 1, lengths below, at and past a tile (64/128 query rows, 64 keys): 0, 1, 2, 15, 16,
// 17, 63, 64, 65, 127, 129; each case names its kernel (bf16/f16 × 64/96/128).
VLPAR_INSTANTIATE(Shapes, VLPAR_SUITE(Attention),
    ::testing::Values(
        AttnCase{DType::kBF16, true, 4, 2, 64, 0.f, {150, 1, 37, 0, 64}},           // bf16 · 64, GQA 2
        AttnCase{DType::kF16, false, 2, 2, 64, 0.3f, {129, 0, 17}},                  // f16 · 64
        AttnCase{DType::kBF16, false, 2, 2, 72, 0.f, {100, 16, 2}},                  // bf16 · 96 (72 zero-padded)
        AttnCase{DType::kF16, true, 3, 3, 80, 0.f, {65, 63, 1}},                     // f16 · 96 (80 zero-padded)
        AttnCase{DType::kBF16, true, 6, 2, 96, -0.125f, {129, 15}},                  // bf16 · 96, negative scale
        AttnCase{DType::kF16, false, 4, 1, 128, 0.f, {70, 1, 0, 65}},                // f16 · 128, MQA
        AttnCase{DType::kBF16, true, 2, 1, 128, 0.f, {127, 64}},                     // bf16 · 128
        AttnCase{DType::kF16, true, 2, 2, 64, 0.f, {96, 33}, 16.f},                  // scores ~±2000: no overflow
        AttnCase{DType::kBF16, false, 1, 1, 128, 0.f, {200}, 8.f}),                  // one long sequence, large
    [](const auto& info) { return attn_case_name(info.param); });

/// q, k, v as head slices of one packed [N, H + 2·H_kv, D] buffer (the fused QKV projection's output) give
/// bitwise the results of contiguous tensors, and a second run repeats them bitwise.
VLPAR_TEST(VLPAR_SUITE(AttentionProps), PackedQkvViewsAndRepeatsAreBitwiseEqual) {
  VLPAR_REQUIRE_GPU();
  const AttnCase c{DType::kBF16, true, 4, 2, 64, 0.f, {77, 0, 130}};
  Allocator a;
  const AttnInputs in = make_attn_inputs(a, c, 11);
  const int W = c.H + 2 * c.H_kv;
  Tensor qkv = Tensor::zeros(a, {in.n, W, c.D}, c.dtype).value();
  const size_t row_bytes = size_t(c.D) * dtype_size(c.dtype);
  for (const auto& [src, h0, heads] : {std::tuple{&in.q, 0, c.H}, std::tuple{&in.k, c.H, c.H_kv},
                                       std::tuple{&in.v, c.H + c.H_kv, c.H_kv}})
    for (int64_t t = 0; t < in.n; ++t)  // token t's heads of src into heads [h0, h0 + heads) of the packed row
      std::memcpy(static_cast<char*>(qkv.view().data) + (size_t(t * W) + size_t(h0)) * row_bytes,
                  static_cast<const char*>(src->view().data) + size_t(t * heads) * row_bytes, size_t(heads) * row_bytes);
  const Tensor qkvd = upload(a, qkv), qd = upload(a, in.q), kd = upload(a, in.k), vd = upload(a, in.v);
  Status st;
  const AttnOut packed = run_gpu(a, in, qkvd.view().slice(1, 0, c.H), qkvd.view().slice(1, c.H, c.H + c.H_kv),
                                 qkvd.view().slice(1, c.H + c.H_kv, W), &st);
  VLPAR_ASSERT_OK_OR_SKIP(st);
  const AttnOut contiguous = run_gpu(a, in, qd, kd, vd, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const AttnOut again = run_gpu(a, in, qd, kd, vd, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(bitwise_equal("out packed vs contiguous", packed.out, contiguous.out));
  EXPECT_TRUE(bitwise_equal("lse packed vs contiguous", packed.lse, contiguous.lse));
  EXPECT_TRUE(bitwise_equal("out run 1 vs run 2", contiguous.out, again.out));
  EXPECT_TRUE(bitwise_equal("lse run 1 vs run 2", contiguous.lse, again.lse));
}

/// A batch whose sequences are all empty launches nothing and succeeds.
VLPAR_TEST(VLPAR_SUITE(AttentionProps), EmptySequencesOnly) {
  VLPAR_REQUIRE_GPU();
  Allocator a;
  const AttnInputs in = make_attn_inputs(a, AttnCase{DType::kBF16, true, 2, 2, 64, 0.f, {0, 0}}, 3);
  Status st;
  run_gpu(a, in, upload(a, in.q), upload(a, in.k), upload(a, in.v), &st);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

void expect_attn_error(const Status& st, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(st.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

VLPAR_TEST(VLPAR_SUITE(AttentionProps), WhatTheKernelCannotTakeIsANamedError) {
  VLPAR_REQUIRE_GPU();
  Allocator a;
  const auto unsupported = StatusCode::kNotSupported;
  auto run = [&](const AttnCase& c, auto&& mutate) {
    AttnInputs in = make_attn_inputs(a, c, 5);
    Tensor qd = upload(a, in.q), kd = upload(a, in.k), vd = upload(a, in.v);
    TensorView q = qd.view(), k = kd.view(), v = vd.view();
    Tensor out = Tensor::zeros(a, {in.n, c.H, c.D}, c.dtype, Device::cuda(0)).value();
    Tensor lse = Tensor::zeros(a, {c.H, in.n}, DType::kF32, Device::cuda(0)).value();
    TensorView cu = in.cu_t.view();
    mutate(q, k, v, cu);
    return varlen_attention_forward(gpu_ctx(), out, lse, q, k, v, cu, in.desc);
  };
  auto keep = [](TensorView&, TensorView&, TensorView&, TensorView&) {};
  expect_attn_error(run(AttnCase{DType::kF32, true, 2, 2, 64, 0.f, {5}}, keep), unsupported,
                    "the CUDA kernel takes bf16 or f16 q/k/v, got f32");
  expect_attn_error(run(AttnCase{DType::kBF16, true, 2, 2, 36, 0.f, {5}}, keep), unsupported,
                    "head_dim 36 is not a multiple of 8");
  expect_attn_error(run(AttnCase{DType::kBF16, true, 2, 2, 136, 0.f, {5}}, keep), unsupported,
                    "head_dim 136 exceeds the CUDA attention kernels' limit of 128");
  Tensor wide = Tensor::zeros(a, {5, 2, 68}, DType::kBF16, Device::cuda(0)).value();  // rows of 68: head stride 68
  expect_attn_error(run(AttnCase{DType::kBF16, true, 2, 2, 64, 0.f, {5}},
                        [&](TensorView& q, TensorView&, TensorView&, TensorView&) {
                          q = wide.view().slice(2, 0, 64);
                        }),
                    unsupported, "q has token stride 136 and head stride 68 elements");
  Tensor cu_dev = Tensor::zeros(a, {2}, DType::kI32, Device::cuda(0)).value();
  expect_attn_error(run(AttnCase{DType::kBF16, true, 2, 2, 64, 0.f, {5}},
                        [&](TensorView&, TensorView&, TensorView&, TensorView& cu) { cu = cu_dev.view(); }),
                    StatusCode::kInvalidArgument, "cu_seqlens must be in host memory");
  expect_attn_error(run(AttnCase{DType::kBF16, true, 2, 2, 64, 0.f, {5}},
                        [&](TensorView&, TensorView& k, TensorView&, TensorView&) { k.device = Device::cpu(); }),
                    StatusCode::kInvalidArgument, "varlen_attention: k is bf16");
}

}  // namespace
}  // namespace vlpar
