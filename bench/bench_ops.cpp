// Benchmark: every CPU op of vlpar (forward and backward) on Qwen3-VL-like shapes.
// Counters (STYLE §16, CPU subset):
//   GFLOPs      : useful floating-point operations per second (counted per op below)
//   GBps        : bytes of the op's inputs and outputs moved per second (each tensor read or written once)
//   AI          : arithmetic intensity, FLOPs per byte
//   pct_of_gemm : GFLOPs as a percentage of this run's own fp32 GEMM rate (measured first, printed in the
//                 header as fp32_gemm_gflops), so numbers compare across noisy shared machines
// Every benchmark name carries its shape, e.g. rmsnorm_fwd_f32/N:4096/H:2048.
// Run: ./build/cpu/bench/bench_ops [--benchmark_filter=rmsnorm]   (all hardware threads)
#include <benchmark/benchmark.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "vlpar/core/init.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/cross_entropy.hpp"
#include "vlpar/kernels/embedding.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/optimizer.hpp"
#include "vlpar/kernels/rotary.hpp"
#include "vlpar/kernels/router.hpp"

namespace {
using namespace vlpar;

/// State shared by every benchmark of one run.
struct Bench {
  Allocator alloc;
  Context ctx = Context::cpu_default();
  double gemm_gflops = 0;

  Tensor rand(Shape s, DType dt, uint32_t id, float lo = -1.f, float hi = 1.f) {
    Tensor t = Tensor::empty(alloc, s, dt).value();
    if (!init_full(ctx, t, 1234, id, InitRule::uniform(lo, hi)).ok()) std::abort();
    return t;
  }
  Tensor ints(Shape s, int64_t hi) {
    Tensor t = Tensor::empty(alloc, s, DType::kI64).value();
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<int64_t>()[i] = int64_t(philox_element(7, 0, uint64_t(i)).v[0] % uint64_t(hi));
    return t;
  }
  Tensor zeros(Shape s, DType dt) { return Tensor::zeros(alloc, s, dt).value(); }
};

Bench& bench() {
  static Bench b;  // owned by the benchmark binary, not the library
  return b;
}

/// Runs `op` in the timing loop and sets the fixed counters from per-iteration flops and bytes.
void run_op(benchmark::State& state, double flops, double bytes, const std::function<Status()>& op) {
  if (Status s = op(); !s.ok()) {  // correctness of arguments checked once before timing
    state.SkipWithError(s.to_string().c_str());
    return;
  }
  for (auto _ : state) {
    Status s = op();
    benchmark::DoNotOptimize(s);
  }
  const double it = double(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops * it / 1e9, benchmark::Counter::kIsRate);
  state.counters["GBps"] = benchmark::Counter(bytes * it / 1e9, benchmark::Counter::kIsRate);
  state.counters["AI"] = bytes > 0 ? flops / bytes : 0.0;
  state.counters["pct_of_gemm"] =
      benchmark::Counter(bench().gemm_gflops > 0 ? 100.0 * flops * it / 1e9 / bench().gemm_gflops : 0.0,
                         benchmark::Counter::kIsRate);
}

double sz(DType dt) { return double(dtype_size(dt)); }

/// fp32 GEMM rate of this machine and run: C[n, n] = A·B with vlpar::gemm, best of 3.
double measure_gemm_gflops(int64_t n) {
  Bench& b = bench();
  Tensor A = b.rand({n, n}, DType::kF32, 1), B = b.rand({n, n}, DType::kF32, 2), C = b.zeros({n, n}, DType::kF32);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!gemm(b.ctx, C, A, B, GemmDesc{}).ok()) std::abort();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(n) * n * n / s / 1e9);
  }
  return best;
}

void register_all() {
  Bench& b = bench();
  const Context& ctx = b.ctx;
  auto reg = [](const std::string& name, auto fn) { benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime(); };

  // GEMM / linear: Qwen3-VL-2B-like MLP projection, N tokens × 2048 → 6144.
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t N = 1024, in = 2048, out = 6144;
    const std::string sh = std::string(dtype_name(dt)) + "/N:" + std::to_string(N) + "/in:" + std::to_string(in) +
                           "/out:" + std::to_string(out);
    Tensor x = b.rand({N, in}, dt, 3), w = b.rand({out, in}, dt, 4), bias = b.rand({out}, dt, 5);
    Tensor y = b.zeros({N, out}, dt), dy = b.rand({N, out}, dt, 6), dx = b.zeros({N, in}, dt);
    Tensor dw = b.zeros({out, in}, DType::kF32), db = b.zeros({out}, DType::kF32);
    const double bytes = (N * in + out * in + N * out) * sz(dt);
    reg("linear_fwd_" + sh, [=, &ctx](benchmark::State& s) {
      run_op(s, 2.0 * N * in * out, bytes, [&] { return linear_forward(ctx, y, x, w, bias); });
    });
    reg("linear_bwd_" + sh, [=, &ctx](benchmark::State& s) {
      run_op(s, 4.0 * N * in * out, 2 * bytes, [&] { return linear_backward(ctx, dx, dw, db, dy, x, w); });
    });
  }
  // Embedding: 4096 tokens of a 151936 × 2048 table (only the gathered rows move).
  {
    const int64_t V = 151936, H = 2048, N = 4096;
    Tensor table = b.rand({V, H}, DType::kF32, 7), ids = b.ints({N}, V), out = b.zeros({N, H}, DType::kF32);
    Tensor dtable = b.zeros({V, H}, DType::kF32);
    const std::string sh = "f32/N:4096/V:151936/H:2048";
    reg("embedding_fwd_" + sh, [=, &ctx](benchmark::State& s) {
      run_op(s, 0, 2.0 * N * H * 4, [&] { return embedding_forward(ctx, out, table, ids); });
    });
    reg("embedding_bwd_" + sh, [=, &ctx](benchmark::State& s) {
      run_op(s, double(N) * H, 3.0 * N * H * 4, [&] { return embedding_backward(ctx, dtable, out, ids); });
    });
  }
  // Norms: 4096 rows × 2048 (text RMSNorm) and 4096 × 1152 (vision LayerNorm).
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t N = 4096, H = 2048, Hv = 1152;
    const std::string d = std::string(dtype_name(dt));
    Tensor x = b.rand({N, H}, dt, 8), w = b.rand({H}, dt, 9), y = b.zeros({N, H}, dt), r = b.zeros({N}, DType::kF32);
    Tensor dy = b.rand({N, H}, dt, 10), dx = b.zeros({N, H}, dt), dw = b.zeros({H}, DType::kF32);
    reg("rmsnorm_fwd_" + d + "/N:4096/H:2048", [=, &ctx](benchmark::State& s) {
      run_op(s, 4.0 * N * H, 2.0 * N * H * sz(dt), [&] { return rmsnorm_forward(ctx, y, r, x, w, 1e-6f); });
    });
    reg("rmsnorm_bwd_" + d + "/N:4096/H:2048", [=, &ctx](benchmark::State& s) {
      run_op(s, 8.0 * N * H, 3.0 * N * H * sz(dt), [&] { return rmsnorm_backward(ctx, dx, dw, dy, x, w, r); });
    });
    Tensor xv = b.rand({N, Hv}, dt, 11), wv = b.rand({Hv}, dt, 12), bv = b.rand({Hv}, dt, 13);
    Tensor yv = b.zeros({N, Hv}, dt), mv = b.zeros({N}, DType::kF32), rv = b.zeros({N}, DType::kF32);
    Tensor dyv = b.rand({N, Hv}, dt, 14), dxv = b.zeros({N, Hv}, dt), dwv = b.zeros({Hv}, DType::kF32),
           dbv = b.zeros({Hv}, DType::kF32);
    reg("layernorm_fwd_" + d + "/N:4096/H:1152", [=, &ctx](benchmark::State& s) {
      run_op(s, 7.0 * N * Hv, 2.0 * N * Hv * sz(dt), [&] { return layernorm_forward(ctx, yv, mv, rv, xv, wv, bv, 1e-6f); });
    });
    reg("layernorm_bwd_" + d + "/N:4096/H:1152", [=, &ctx](benchmark::State& s) {
      run_op(s, 12.0 * N * Hv, 3.0 * N * Hv * sz(dt),
             [&] { return layernorm_backward(ctx, dxv, dwv, dbv, dyv, xv, wv, mv, rv); });
    });
  }
  // Activations: 4096 × 6144 (text MLP intermediate) and the vision MLP's GELU.
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t N = 4096, I = 6144;
    const std::string d = std::string(dtype_name(dt)) + "/N:4096/I:6144";
    Tensor g = b.rand({N, I}, dt, 15), u = b.rand({N, I}, dt, 16), y = b.zeros({N, I}, dt), dy = b.rand({N, I}, dt, 17);
    Tensor dg = b.zeros({N, I}, dt), du = b.zeros({N, I}, dt);
    const double e = double(N) * I;
    reg("swiglu_fwd_" + d, [=, &ctx](benchmark::State& s) {
      run_op(s, 5.0 * e, 3.0 * e * sz(dt), [&] { return swiglu_forward(ctx, y, g, u); });
    });
    reg("swiglu_bwd_" + d, [=, &ctx](benchmark::State& s) {
      run_op(s, 10.0 * e, 5.0 * e * sz(dt), [&] { return swiglu_backward(ctx, dg, du, dy, g, u); });
    });
    reg("gelu_tanh_fwd_" + d, [=, &ctx](benchmark::State& s) {
      run_op(s, 9.0 * e, 2.0 * e * sz(dt), [&] { return gelu_forward(ctx, y, g, GeluKind::kTanh); });
    });
    reg("gelu_erf_bwd_" + d, [=, &ctx](benchmark::State& s) {
      run_op(s, 12.0 * e, 3.0 * e * sz(dt), [&] { return gelu_backward(ctx, dg, dy, g, GeluKind::kErf); });
    });
    reg("silu_fwd_" + d, [=, &ctx](benchmark::State& s) {
      run_op(s, 4.0 * e, 2.0 * e * sz(dt), [&] { return silu_forward(ctx, y, g); });
    });
  }
  // Rotary: text MRoPE on q [4096, 16, 128] and vision 2D on [4096, 16, 72].
  {
    const int64_t N = 4096, H = 16;
    for (auto [kind, D, name] : {std::tuple{RotaryKind::kMRoPE, 128, "mrope"}, std::tuple{RotaryKind::kVision2D, 72, "vision2d"}}) {
      const RotaryDesc desc{kind, D, kind == RotaryKind::kMRoPE ? 5e6f : 1e4f, {24, 20, 20}};
      Tensor x = b.rand({N, H, D}, DType::kF32, 18), y = b.zeros({N, H, D}, DType::kF32);
      Tensor pos = b.ints({desc.num_axes(), N}, 4096);
      reg(std::string("rotary_fwd_") + name + "_f32/N:4096/H:16/D:" + std::to_string(D), [=, &ctx](benchmark::State& s) {
        run_op(s, 6.0 * N * H * D / 2, 2.0 * N * H * D * 4, [&] { return rotary_forward(ctx, y, x, pos, desc); });
      });
    }
  }
  // Fused LM head + cross-entropy: 1024 tokens, hidden 1024, vocab 32768 (forward + backward).
  {
    const int64_t N = 1024, Hd = 1024, V = 32768;
    Tensor h = b.rand({N, Hd}, DType::kF32, 19), w = b.rand({V, Hd}, DType::kF32, 20, -0.05f, 0.05f);
    Tensor y = b.ints({N}, V), dh = b.zeros({N, Hd}, DType::kF32), dw = b.zeros({V, Hd}, DType::kF32);
    Tensor logits = b.rand({N, V}, DType::kF32, 21), lse = b.zeros({N}, DType::kF32);
    reg("linear_cross_entropy_f32/N:1024/H:1024/V:32768", [=, &ctx](benchmark::State& s) {
      run_op(s, 6.0 * N * Hd * V, (N * Hd * 2 + V * Hd * 2) * 4.0, [&] {
        return linear_cross_entropy(ctx, dh, dw, h, w, y, CrossEntropyDesc{}, 1.f).status();
      });
    });
    reg("cross_entropy_fwd_f32/N:1024/V:32768", [=, &ctx](benchmark::State& s) {
      run_op(s, 3.0 * N * V, N * V * 4.0, [&] { return cross_entropy_forward(ctx, lse, logits, y, CrossEntropyDesc{}).status(); });
    });
  }
  // Router: 4096 tokens, 128 experts, top-8 (Qwen3-VL-30B-A3B).
  {
    const int64_t T = 4096, E = 128, K = 8;
    Tensor z = b.rand({T, E}, DType::kF32, 22), w = b.zeros({T, K}, DType::kF32), p = b.zeros({T, E}, DType::kF32);
    Tensor idx = Tensor::zeros(b.alloc, {T, K}, DType::kI32).value(), dz = b.zeros({T, E}, DType::kF32);
    Tensor dw = b.rand({T, K}, DType::kF32, 23);
    const RouterDesc desc{int(E), int(K)};
    reg("router_fwd_f32/T:4096/E:128/K:8", [=, &ctx](benchmark::State& s) {
      run_op(s, 4.0 * T * E, T * E * 8.0, [&] { return router_forward(ctx, w, idx, p, z, desc); });
    });
    reg("router_bwd_f32/T:4096/E:128/K:8", [=, &ctx](benchmark::State& s) {
      run_op(s, 4.0 * T * E, T * E * 8.0, [&] { return router_backward(ctx, dz, dw, p, idx, w, desc); });
    });
  }
  // AdamW over 16M parameters (reads p, g, m, v; writes p, m, v).
  {
    const int64_t n = int64_t(1) << 24;
    Tensor p = b.rand({n}, DType::kF32, 24), g = b.rand({n}, DType::kF32, 25), m = b.zeros({n}, DType::kF32),
           v = b.zeros({n}, DType::kF32);
    reg("adamw_f32/n:16777216", [=, &ctx](benchmark::State& s) {
      int64_t step = 0;
      run_op(s, 12.0 * n, 7.0 * n * 4, [&] { return adamw_step(ctx, p, TensorView(), g, m, v, AdamWConfig{}, ++step); });
    });
    reg("grad_norm_f32/n:16777216", [=, &ctx](benchmark::State& s) {
      const TensorView gs[] = {g.view()};
      run_op(s, 2.0 * n, 4.0 * n, [&] { return global_grad_norm(ctx, gs).status(); });
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  bench().gemm_gflops = measure_gemm_gflops(1536);
  benchmark::AddCustomContext("fp32_gemm_gflops", std::to_string(bench().gemm_gflops));
  benchmark::AddCustomContext("threads", std::to_string(bench().ctx.num_threads));
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
