// Benchmark: CPU varlen attention (FlashAttention-2) forward and backward against the same run's fp32 Eigen GEMM.
//   BM gemm_f32            : C[M, N] = A[M, K] · B[K, N], M = N = K = 2048, Eigen with every hardware thread.
//   BM attn_{fwd,bwd}_...  : vlpar::varlen_attention_{forward,backward}, same thread count.
// Counters: GFLOPs (useful FLOPs / wall second), pct_of_gemm (GFLOPs / the gemm_f32 GFLOPs of this run, in %),
// and for the forward max_err_ratio = max|kernel − ref64| / bound of the derived test rule on head 0 of segment 0
// (must be ≤ 1).
// FLOP counts (per segment of S tokens, per query head, D = head dim):
//   forward  : 4·S²·D   (QKᵀ and PV, 2·S²·D each)
//   backward : 10·S²·D  (the 5 GEMMs of FlashAttention-2: QKᵀ, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q;
//              this kernel recomputes QKᵀ and dP once more for its atomic-free dQ pass, uncounted)
//   causal   : half of the above (only the unmasked lower triangle is useful work).
// Run: ./build/cpu/bench/bench_attention   (all hardware threads; e.g. --benchmark_filter=fwd)
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "vlpar/core/philox.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/reference/attention.hpp"

namespace {

using vlpar::Context;
using vlpar::DType;
using vlpar::Tensor;

struct AttnShape {
  int B, S, H, H_kv, D;
  bool causal;
  DType dtype;
};

std::string shape_name(const char* op, const AttnShape& s) {
  return std::string("attn_") + op + "_" + std::string(vlpar::dtype_name(s.dtype)) + "_hd" + std::to_string(s.D) +
         (s.causal ? "_causal" : "_bidir") + "/B:" + std::to_string(s.B) + "/S:" + std::to_string(s.S) +
         "/H:" + std::to_string(s.H) + "/Hkv:" + std::to_string(s.H_kv);
}

double attention_flops(const AttnShape& s, bool backward) {
  const double per_head = (backward ? 10.0 : 4.0) * double(s.S) * s.S * s.D;
  return per_head * s.H * s.B * (s.causal ? 0.5 : 1.0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fill_uniform(const Tensor& t, uint64_t seed) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = vlpar::philox_uniform(seed, 0, uint64_t(i), -1.f, 1.f);
    if (t.dtype() == DType::kF32) t.ptr<float>()[i] = x;
    else t.ptr<vlpar::bf16>()[i] = vlpar::float_to_bf16(x);
  }
}

float element(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? t.ptr<float>()[i] : vlpar::bf16_to_float(t.ptr<vlpar::bf16>()[i]);
}

/// Tensors of one attention problem (every segment S tokens).
struct AttnProblem {
  std::vector<int32_t> cu;
  Tensor cu_t, q, k, v, out, lse, dout, dq, dk, dv;
  vlpar::VarlenAttentionDesc desc;

  AttnProblem(vlpar::Allocator& alloc, const AttnShape& s) {
    for (int b = 0; b <= s.B; ++b) cu.push_back(b * s.S);
    const int64_t N = int64_t(s.B) * s.S;
    cu_t = Tensor::empty(alloc, {s.B + 1}, DType::kI32).value();
    std::memcpy(cu_t.ptr<int32_t>(), cu.data(), cu.size() * 4);
    q = Tensor::empty(alloc, {N, s.H, s.D}, s.dtype).value();
    k = Tensor::empty(alloc, {N, s.H_kv, s.D}, s.dtype).value();
    v = Tensor::empty(alloc, {N, s.H_kv, s.D}, s.dtype).value();
    dout = Tensor::empty(alloc, {N, s.H, s.D}, s.dtype).value();
    fill_uniform(q, 1), fill_uniform(k, 2), fill_uniform(v, 3), fill_uniform(dout, 4);
    out = Tensor::zeros(alloc, {N, s.H, s.D}, s.dtype).value();
    lse = Tensor::zeros(alloc, {s.H, N}, DType::kF32).value();
    dq = Tensor::zeros(alloc, {N, s.H, s.D}, s.dtype).value();
    dk = Tensor::zeros(alloc, {N, s.H_kv, s.D}, s.dtype).value();
    dv = Tensor::zeros(alloc, {N, s.H_kv, s.D}, s.dtype).value();
    desc = vlpar::VarlenAttentionDesc{s.H, s.H_kv, s.D, s.causal, 0.f};
  }
  vlpar::Status forward(const Context& ctx) {
    return vlpar::varlen_attention_forward(ctx, out, lse, q, k, v, cu_t, desc);
  }
  vlpar::Status backward(const Context& ctx) {
    return vlpar::varlen_attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, cu_t, desc);
  }
};

/// Head 0 of segment 0 against the reference (fp64) with the test rule's bound: 2·max|naive − ref| + 2u·max|ref|,
/// naive = the reference in float. Returns max|out − ref| / bound.
template <class S>
std::vector<S> head0_segment0(const Tensor& t, int S_len, int heads, int D) {
  std::vector<S> x(size_t(S_len) * D);
  for (int64_t i = 0; i < S_len; ++i)
    for (int d = 0; d < D; ++d) x[size_t(i * D + d)] = S(element(t, (i * heads) * D + d));
  return x;
}

template <class S>
std::vector<double> reference_head0(const AttnProblem& p, const AttnShape& s) {
  const std::vector<int32_t> cu{0, s.S};
  const vlpar::reference::AttentionProblem rp{cu.data(), 1, 1, 1, s.D, s.causal, 0.0};
  const std::vector<S> q = head0_segment0<S>(p.q, s.S, s.H, s.D), k = head0_segment0<S>(p.k, s.S, s.H_kv, s.D),
                       v = head0_segment0<S>(p.v, s.S, s.H_kv, s.D);
  std::vector<S> out(q.size()), lse(size_t(s.S));
  vlpar::reference::attention_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), rp);
  return std::vector<double>(out.begin(), out.end());
}

double forward_error_ratio(const AttnProblem& p, const AttnShape& s) {
  const std::vector<double> ref = reference_head0<double>(p, s), naive = reference_head0<float>(p, s);
  const std::vector<float> got = head0_segment0<float>(p.out, s.S, s.H, s.D);
  const double u = s.dtype == DType::kF32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
  double naive_err = 0, ref_max = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double n = s.dtype == DType::kF32 ? naive[i] : vlpar::bf16_to_float(vlpar::float_to_bf16(float(naive[i])));
    naive_err = std::max(naive_err, std::fabs(n - ref[i]));
    ref_max = std::max(ref_max, std::fabs(ref[i]));
    err = std::max(err, std::fabs(double(got[i]) - ref[i]));
  }
  return err / (2 * naive_err + 2 * u * ref_max);
}

/// What the benchmarks of one run share: the GEMM rate (written by gemm_f32, registered first) and whether any
/// benchmark failed (an error, or a forward beyond its error bound), which makes the exit code non-zero.
struct RunState {
  double gemm_gflops = 0;
  bool failed = false;
};

void bm_gemm(benchmark::State& state, int threads, RunState* run) {
  const Eigen::Index n = state.range(0);
  Eigen::setNbThreads(threads);
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n);
  Eigen::MatrixXf c(n, n);
  c.noalias() = a * b;  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  const double flops = 2.0 * double(n) * n * n * double(state.iterations());
  run->gemm_gflops = flops / seconds_since(t0) / 1e9;
  state.counters["GFLOPs"] = run->gemm_gflops;
  state.counters["threads"] = threads;
}

void bm_attention(benchmark::State& state, AttnShape s, bool backward, const Context& ctx, RunState* run) {
  vlpar::Allocator alloc;
  AttnProblem p(alloc, s);
  vlpar::Status st = p.forward(ctx);  // warm-up, and the saved out/lse the backward needs
  if (st.ok() && backward) st = p.backward(ctx);
  if (!st.ok()) {
    state.SkipWithError(st.to_string().c_str());
    run->failed = true;
    return;
  }
  if (!backward) {
    state.counters["max_err_ratio"] = forward_error_ratio(p, s);
    if (!(state.counters["max_err_ratio"] <= 1.0)) run->failed = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    st = backward ? p.backward(ctx) : p.forward(ctx);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      run->failed = true;
      return;
    }
  }
  const double gflops = attention_flops(s, backward) * double(state.iterations()) / seconds_since(t0) / 1e9;
  state.counters["GFLOPs"] = gflops;
  state.counters["pct_of_gemm"] = run->gemm_gflops > 0 ? 100.0 * gflops / run->gemm_gflops : 0.0;
  state.counters["threads"] = ctx.num_threads;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const Context ctx = Context::cpu_default();
  RunState run;
  benchmark::RegisterBenchmark("gemm_f32", bm_gemm, ctx.num_threads, &run)
      ->Arg(2048)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  const AttnShape llm{4, 2048, 16, 16, 128, true, DType::kF32};
  const AttnShape vision{8, 1024, 16, 16, 72, false, DType::kF32};
  const AttnShape llm_bf16{4, 2048, 16, 16, 128, true, DType::kBF16};
  for (const auto& [s, backward] : {std::pair{llm, false}, std::pair{llm, true}, std::pair{vision, false},
                                    std::pair{vision, true}, std::pair{llm_bf16, false}}) {
    benchmark::RegisterBenchmark(shape_name(backward ? "bwd" : "fwd", s).c_str(), bm_attention, s, backward, ctx,
                                 &run)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return run.failed ? 1 : 0;
}
