// CUDA varlen flash-attention forward and backward (src/kernels/cuda/flash_{fwd,bwd}_kernel.cuh) through the
// public ops with CUDA views (out, lse, dq, dk, dv), against the fp64 reference
// (include/vlpar/reference/attention.hpp) with the derived rule of tests/tolerances.hpp, twice: naive = the float
// reference and naive = the CPU kernel on the same inputs. Every compiled instantiation (bf16/f16 × kernel head
// dim 64/96/128) with the head dims that map onto them (72, 80 → 96 with zero-filled columns), causal and
// bidirectional, MHA/GQA/MQA, default, custom and negative softmax scales, packed batches with sequences of length
// 0, 1 and lengths that are not multiples of any tile; large scores (no overflow, no NaN); strided views of one
// packed QKV buffer giving bitwise the results of contiguous ones; repeat runs bitwise equal (deterministic
// backward); named errors for what the kernels cannot take.
// Run: ctest --test-dir build/emu -R Attention (emulated, label emu), or on a GPU: ctest -L gpu
#include <fmt/core.h>
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
  std::vector<int> lens;    // sequence lengths of the packed batch (queries)
  float range = 2.f;        // q and k uniform in [-range, range)
  std::vector<int> k_lens = {};  // key lengths when they differ from the queries' (cross attention); empty: lens
};

std::string attn_case_name(const AttnCase& c) {
  std::string lens;
  for (int l : c.lens) lens += fmt::format("_{}", l);
  if (!c.k_lens.empty()) lens += "_keys";
  for (int l : c.k_lens) lens += fmt::format("_{}", l);
  return fmt::format("{}_{}_H{}kv{}_hd{}{}{}_len{}", dtype_name(c.dtype), c.causal ? "causal" : "bidir", c.H, c.H_kv,
                     c.D, c.scale == 0 ? "" : (c.scale > 0 ? "_scaled" : "_negscale"),
                     c.range > 2.f ? "_large" : "", lens);
}

/// Host inputs of one case: cu_seqlens (and cu_seqlens_k when the key lengths differ), q and dout [N, H, D], k
/// and v [N_k, H_kv, D] in the storage dtype.
struct AttnInputs {
  std::vector<int32_t> cu{0}, cu_k{0};
  Tensor cu_t, cu_k_t;  // cu_k_t aliases cu_t for self-attention (one array for queries and keys)
  Tensor q, k, v, dout;
  VarlenAttentionDesc desc;
  int64_t n = 0, n_k = 0;
};

Tensor i32_tensor(Allocator& a, const std::vector<int32_t>& x) {
  Tensor t = Tensor::empty(a, {int64_t(x.size())}, DType::kI32).value();
  std::memcpy(t.ptr<int32_t>(), x.data(), x.size() * sizeof(int32_t));
  return t;
}

AttnInputs make_attn_inputs(Allocator& a, const AttnCase& c, uint64_t seed) {
  AttnInputs in;
  for (int l : c.lens) in.cu.push_back(in.cu.back() + l);
  for (int l : c.k_lens.empty() ? c.lens : c.k_lens) in.cu_k.push_back(in.cu_k.back() + l);
  in.n = in.cu.back();
  in.n_k = in.cu_k.back();
  in.cu_t = i32_tensor(a, in.cu);
  in.cu_k_t = c.k_lens.empty() ? in.cu_t : i32_tensor(a, in.cu_k);
  in.q = random_tensor(a, {in.n, c.H, c.D}, c.dtype, seed, -c.range, c.range);
  in.k = random_tensor(a, {in.n_k, c.H_kv, c.D}, c.dtype, seed + 1, -c.range, c.range);
  in.v = random_tensor(a, {in.n_k, c.H_kv, c.D}, c.dtype, seed + 2);
  in.dout = random_tensor(a, {in.n, c.H, c.D}, c.dtype, seed + 3);
  in.desc = VarlenAttentionDesc{c.H, c.H_kv, c.D, c.causal, c.scale};
  return in;
}

/// out [N, H, D], lse [H, N] and, when asked, dq, dk, dv of the CUDA kernels on device views of the inputs
/// (q, k, v as given, dout uploaded), downloaded to host tensors.
struct AttnOut {
  Tensor out, lse, dq, dk, dv;
};

AttnOut run_gpu(Allocator& a, const AttnInputs& in, const TensorView& q, const TensorView& k, const TensorView& v,
                Status* status, bool backward = false) {
  const int H = in.desc.num_heads, H_kv = in.desc.num_kv_heads, D = in.desc.head_dim;
  const DType dt = in.q.dtype();
  const Device dev = Device::cuda(0);
  Tensor out = Tensor::zeros(a, {in.n, H, D}, dt, dev).value();
  Tensor lse = Tensor::zeros(a, {H, in.n}, DType::kF32, dev).value();
  *status = varlen_attention_forward(gpu_ctx(), out, lse, q, k, v, in.cu_t, in.cu_k_t, in.desc);
  AttnOut r{download(a, out), download(a, lse), {}, {}, {}};
  if (!backward || !status->ok()) return r;
  Tensor dq = Tensor::zeros(a, {in.n, H, D}, dt, dev).value();
  Tensor dk = Tensor::zeros(a, {in.n_k, H_kv, D}, dt, dev).value();
  Tensor dv = Tensor::zeros(a, {in.n_k, H_kv, D}, dt, dev).value();
  *status = varlen_attention_backward(gpu_ctx(), dq, dk, dv, upload(a, in.dout), q, k, v, out, lse, in.cu_t,
                                      in.cu_k_t, in.desc);
  r.dq = download(a, dq), r.dk = download(a, dk), r.dv = download(a, dv);
  return r;
}

class VLPAR_SUITE(Attention) : public ::testing::TestWithParam<AttnCase> {};

/// The reference forward and backward in scalar S on the (rounded) inputs, as fp64 vectors.
struct AttnRef {
  std::vector<double> out, lse, dq, dk, dv;
};

template <class S>
AttnRef run_reference(const AttnInputs& in, const AttnCase& c) {
  const reference::AttentionProblem prob{in.cu.data(), int(c.lens.size()), c.H, c.H_kv, c.D, c.causal,
                                         double(c.scale), in.cu_k.data()};
  const auto q = cast_vec<S>(to_f64(in.q)), k = cast_vec<S>(to_f64(in.k)), v = cast_vec<S>(to_f64(in.v));
  const auto g = cast_vec<S>(to_f64(in.dout));
  std::vector<S> out(q.size()), lse(size_t(c.H * in.n)), dq(q.size()), dk(k.size()), dv(v.size());  // k: N_k rows
  reference::attention_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), prob);
  reference::attention_backward<S>(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), prob);
  return {to_double(out), to_double(lse), to_double(dq), to_double(dk), to_double(dv)};
}

/// One case: the CUDA forward and backward against the fp64 reference and the CPU kernel (derived tolerance rule),
/// rows without keys exactly out 0 / lse +inf, every output finite.
void check_attention_case(const AttnCase& c) {
  Allocator a;
  const AttnInputs in = make_attn_inputs(a, c, 7);
  const Tensor qd = upload(a, in.q), kd = upload(a, in.k), vd = upload(a, in.v);
  Status st;
  const AttnOut gpu = run_gpu(a, in, qd, kd, vd, &st, /*backward=*/true);
  VLPAR_ASSERT_OK_OR_SKIP(st);

  const Context cpu = test_ctx(2);
  auto zeros = [&](Shape s, DType dt) { return Tensor::zeros(a, s, dt).value(); };
  Tensor out = zeros({in.n, c.H, c.D}, c.dtype), lse = zeros({c.H, in.n}, DType::kF32);
  Tensor dq = zeros({in.n, c.H, c.D}, c.dtype), dk = zeros({in.n_k, c.H_kv, c.D}, c.dtype);
  Tensor dv = zeros({in.n_k, c.H_kv, c.D}, c.dtype);
  ASSERT_TRUE(varlen_attention_forward(cpu, out, lse, in.q, in.k, in.v, in.cu_t, in.cu_k_t, in.desc).ok());
  ASSERT_TRUE(varlen_attention_backward(cpu, dq, dk, dv, in.dout, in.q, in.k, in.v, out, lse, in.cu_t, in.cu_k_t,
                                        in.desc).ok());
  const AttnRef r64 = run_reference<double>(in, c), rf = run_reference<float>(in, c);

  for (const Tensor* t : {&gpu.out, &gpu.dq, &gpu.dk, &gpu.dv})
    for (double x : to_f64(*t)) ASSERT_TRUE(std::isfinite(x)) << "non-finite output";
  // Rows that see no key (queries past a shorter key sequence's diagonal, or no keys at all): lse = +inf exactly,
  // in every implementation; the other rows go through the tolerance rule.
  std::vector<double> lse_gpu = to_f64(gpu.lse), lse_cpu = to_f64(lse), lse64 = r64.lse, lsef = rf.lse;
  for (size_t i = 0; i < lse64.size(); ++i) {
    ASSERT_EQ(std::isinf(lse64[i]), std::isinf(lse_gpu[i])) << "lse row " << i << ": gpu " << lse_gpu[i];
    ASSERT_EQ(std::isinf(lse64[i]), std::isinf(lse_cpu[i])) << "lse row " << i << ": cpu " << lse_cpu[i];
    if (std::isinf(lse64[i])) {
      EXPECT_GT(lse_gpu[i], 0.0) << "a row without keys has lse = +inf";
      lse_gpu[i] = lse_cpu[i] = lse64[i] = lsef[i] = 0.0;
    }
  }
  const Shape sq{in.n, c.H, c.D}, skv{in.n_k, c.H_kv, c.D};
  expect_gpu_close("attn_out", to_f64(gpu.out), to_f64(out), r64.out, rf.out, sq, TolOp::kAttentionFwd, c.dtype);
  expect_gpu_close("attn_lse", lse_gpu, lse_cpu, lse64, lsef, Shape{c.H, in.n}, TolOp::kAttentionFwd, DType::kF32);
  expect_gpu_close("attn_dq", to_f64(gpu.dq), to_f64(dq), r64.dq, rf.dq, sq, TolOp::kAttentionBwd, c.dtype);
  expect_gpu_close("attn_dk", to_f64(gpu.dk), to_f64(dk), r64.dk, rf.dk, skv, TolOp::kAttentionBwd, c.dtype);
  expect_gpu_close("attn_dv", to_f64(gpu.dv), to_f64(dv), r64.dv, rf.dv, skv, TolOp::kAttentionBwd, c.dtype);
}

VLPAR_TEST_P(VLPAR_SUITE(Attention), ForwardBackwardMatchReferenceAndCpu) {
  VLPAR_REQUIRE_GPU();
  check_attention_case(GetParam());
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
        AttnCase{DType::kBF16, false, 1, 1, 128, 0.f, {200}, 8.f},                   // one long sequence, large
        AttnCase{DType::kBF16, true, 8, 1, 128, 0.f, {65, 1, 30}},                  // GQA 8 (Qwen3's 32/4 ratio)
        // Separate key lengths (cross attention; causal masks bottom-right aligned): more queries than keys
        // (leading rows see no key: out 0, lse +inf), fewer, no keys at all, no queries with keys.
        AttnCase{DType::kBF16, true, 4, 2, 64, 0.f, {100, 5, 0, 9}, 2.f, {30, 77, 6, 0}},
        AttnCase{DType::kF16, false, 2, 1, 128, 0.f, {70, 3, 20}, 2.f, {130, 0, 1}},
        AttnCase{DType::kBF16, true, 2, 2, 80, 0.f, {17, 64, 1}, 2.f, {150, 64, 40}}),
    [](const auto& info) { return attn_case_name(info.param); });

/// The full shape sweep (ctest label `long`: tests/CMakeLists.txt gives *Sweep* suites their own discovery, left
/// out of CI's test preset; run it with `ctest --test-dir build/emu -L long`, and on a GPU day): every head dim
/// (64, 72, 80, 96, 128) × q/kv head ratio 1, 2, 4, 8 × causal and bidirectional × bf16 and f16, over one packed
/// batch with sequences of 0, 1, 63, 64, 65, 127, 129 and 300 tokens (below, at and past every tile).
std::vector<AttnCase> attention_sweep() {
  std::vector<AttnCase> cases;
  for (const DType dt : {DType::kBF16, DType::kF16})
    for (const int d : {64, 72, 80, 96, 128})
      for (const int ratio : {1, 2, 4, 8})
        for (const bool causal : {false, true})
          cases.push_back(AttnCase{dt, causal, 8, 8 / ratio, d, 0.f, {0, 1, 63, 64, 65, 127, 129, 300}});
  return cases;
}

class VLPAR_SUITE(AttentionSweep) : public ::testing::TestWithParam<AttnCase> {};

VLPAR_TEST_P(VLPAR_SUITE(AttentionSweep), ForwardBackwardMatchReferenceAndCpu) {
  VLPAR_REQUIRE_GPU();
  check_attention_case(GetParam());
}

VLPAR_INSTANTIATE(All, VLPAR_SUITE(AttentionSweep), ::testing::ValuesIn(attention_sweep()),
                  [](const auto& info) { return attn_case_name(info.param); });

/// q, k, v as head slices of one packed [N, H + 2·H_kv, D] buffer (the fused QKV projection's output) give
/// bitwise the results of contiguous tensors, forward and backward, and a second run repeats them bitwise (the
/// backward has no atomics: every output element is written once, after a fixed-order loop).
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
      std::memcpy(static_cast<char*>(qkv.view().data) + size_t(t * W + h0) * row_bytes,
                  static_cast<const char*>(src->view().data) + size_t(t * heads) * row_bytes,
                  size_t(heads) * row_bytes);
  const Tensor qkvd = upload(a, qkv), qd = upload(a, in.q), kd = upload(a, in.k), vd = upload(a, in.v);
  Status st;
  const AttnOut packed = run_gpu(a, in, qkvd.view().slice(1, 0, c.H), qkvd.view().slice(1, c.H, c.H + c.H_kv),
                                 qkvd.view().slice(1, c.H + c.H_kv, W), &st, /*backward=*/true);
  VLPAR_ASSERT_OK_OR_SKIP(st);
  const AttnOut contiguous = run_gpu(a, in, qd, kd, vd, &st, true);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const AttnOut again = run_gpu(a, in, qd, kd, vd, &st, true);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (const auto& [name, x, y, z] : {std::tuple{"out", &packed.out, &contiguous.out, &again.out},
                                      std::tuple{"lse", &packed.lse, &contiguous.lse, &again.lse},
                                      std::tuple{"dq", &packed.dq, &contiguous.dq, &again.dq},
                                      std::tuple{"dk", &packed.dk, &contiguous.dk, &again.dk},
                                      std::tuple{"dv", &packed.dv, &contiguous.dv, &again.dv}}) {
    EXPECT_TRUE(bitwise_equal(std::string(name) + " packed vs contiguous", *x, *y));
    EXPECT_TRUE(bitwise_equal(std::string(name) + " run 1 vs run 2", *y, *z));
  }
}

/// With ctx.allocator set, the workspace comes from it: exactly varlen_attention_cuda_workspace_bytes at the peak,
/// all of it returned after the call (the backward's segments and delta; the forward's segments).
VLPAR_TEST(VLPAR_SUITE(AttentionProps), WorkspaceComesFromTheContextAllocator) {
  VLPAR_REQUIRE_GPU();
  Allocator a;
  const AttnCase c{DType::kF16, true, 4, 2, 64, 0.f, {33, 0, 70}, 2.f, {40, 5, 64}};
  const AttnInputs in = make_attn_inputs(a, c, 9);
  const Tensor qd = upload(a, in.q), kd = upload(a, in.k), vd = upload(a, in.v), god = upload(a, in.dout);
  const Device dev = Device::cuda(0);
  auto zeros = [&](Shape s, DType dt) { return Tensor::zeros(a, s, dt, dev).value(); };
  Tensor out = zeros({in.n, c.H, c.D}, c.dtype), dq = zeros({in.n, c.H, c.D}, c.dtype);
  Tensor lse = zeros({c.H, in.n}, DType::kF32);
  Tensor dk = zeros({in.n_k, c.H_kv, c.D}, c.dtype), dv = zeros({in.n_k, c.H_kv, c.D}, c.dtype);
  Allocator workspace;
  Context ctx = gpu_ctx();
  ctx.allocator = &workspace;
  VLPAR_ASSERT_OK_OR_SKIP(varlen_attention_forward(ctx, out, lse, qd, kd, vd, in.cu_t, in.cu_k_t, in.desc));
  const int64_t batch = int64_t(c.lens.size());
  EXPECT_EQ(workspace.stats(dev).peak_bytes, int64_t(varlen_attention_cuda_workspace_bytes(batch, in.n, c.H, false)));
  workspace.reset_peak(dev);
  ASSERT_TRUE(
      varlen_attention_backward(ctx, dq, dk, dv, god, qd, kd, vd, out, lse, in.cu_t, in.cu_k_t, in.desc).ok());
  EXPECT_EQ(workspace.stats(dev).peak_bytes,
            int64_t(varlen_attention_cuda_workspace_bytes(batch, in.n, c.H, true)));
  EXPECT_EQ(workspace.stats(dev).current_bytes, 0) << "the workspace is returned";
}

/// A batch whose sequences are all empty launches nothing and succeeds.
VLPAR_TEST(VLPAR_SUITE(AttentionProps), EmptySequencesOnly) {
  VLPAR_REQUIRE_GPU();
  Allocator a;
  const AttnInputs in = make_attn_inputs(a, AttnCase{DType::kBF16, true, 2, 2, 64, 0.f, {0, 0}}, 3);
  Status st;
  run_gpu(a, in, upload(a, in.q), upload(a, in.k), upload(a, in.v), &st, /*backward=*/true);
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
