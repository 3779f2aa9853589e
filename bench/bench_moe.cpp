// Benchmark: the MoE grouped expert GEMMs against one dense GEMM of the same FLOPs, and the whole MoE block.
// Counters (STYLE §16, CPU subset):
//   GFLOPs  : useful floating-point operations per second (2·M·N·K per GEMM; block: router + both expert GEMMs,
//             backward twice the forward's GEMM FLOPs plus the router's two)
//   x_dense : GFLOPs as a fraction of this run's dense GEMM of the same total shape ([R, Kd] · [Kd, N], one
//             weight), measured first (best of 3) and printed in the header: the cost of grouping by expert
//   rows_per_expert : mean permuted rows per expert, R/E (the grouped GEMM's M per group)
// Routing is uniform random top-k (distinct experts per token), so experts are balanced up to sampling noise.
// Shapes (rows per expert R/E = T·K/E sets the grouped GEMM's M): Qwen3-VL-30B-A3B widths (H 2048, I 768, K 8)
// with E cut to 16 so the weights fit a small machine, at 128 rows per expert (a 4k-token micro-batch over 128
// experts gives 256); the same widths at 32 rows per expert (small M); a large-M shape (512 rows per expert).
// Run: ./build/cpu/bench/bench_moe [--benchmark_filter=grouped]   (all hardware threads)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vlpar/core/init.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/kernels/moe.hpp"
#include "vlpar/nn/moe_block.hpp"

namespace {
using namespace vlpar;

struct Shape5 {
  const char* name;
  int64_t T, H, E, K, I;
  std::string tag() const {
    return std::string(name) + "/T:" + std::to_string(T) + "/H:" + std::to_string(H) + "/E:" + std::to_string(E) +
           "/K:" + std::to_string(K) + "/I:" + std::to_string(I);
  }
};

struct Bench {
  Allocator alloc;
  Context ctx = Context::cpu_default();
  Bench() { ctx.allocator = &alloc; }
  Tensor rand(Shape s, uint32_t id, float lo = -1.f, float hi = 1.f) {
    Tensor t = Tensor::empty(alloc, s, DType::kF32).value();
    if (!init_full(ctx, t, 1234, id, InitRule::uniform(lo, hi)).ok()) std::abort();
    return t;
  }
  Tensor zeros(Shape s) { return Tensor::zeros(alloc, s, DType::kF32).value(); }
};

Bench& bench() {
  static Bench b;  // owned by the benchmark binary, not the library
  return b;
}

/// Uniform random top-k routing: K distinct experts per token.
MoeDispatch random_plan(const Shape5& s) {
  Tensor idx = Tensor::empty(bench().alloc, {s.T, s.K}, DType::kI32).value();
  for (int64_t t = 0; t < s.T; ++t) {
    std::vector<int32_t> perm(static_cast<size_t>(s.E));
    for (int64_t e = 0; e < s.E; ++e) perm[size_t(e)] = int32_t(e);
    for (int64_t k = 0; k < s.K; ++k) {  // partial Fisher-Yates
      const int64_t j = k + int64_t(philox_element(99, 0, uint64_t(t * s.K + k)).v[0] % uint64_t(s.E - k));
      std::swap(perm[size_t(k)], perm[size_t(j)]);
      idx.ptr<int32_t>()[t * s.K + k] = perm[size_t(k)];
    }
  }
  MoeDispatch plan;
  if (!moe_dispatch_plan(Context{}, plan, idx, int(s.E)).ok()) std::abort();
  return plan;
}

double best_seconds(const std::function<Status()>& op, int reps = 3) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!op().ok()) std::abort();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void run_op(benchmark::State& state, double flops, double dense_gflops, const std::function<Status()>& op) {
  if (Status s = op(); !s.ok()) {
    state.SkipWithError(s.to_string().c_str());
    return;
  }
  for (auto _ : state) {
    Status s = op();
    benchmark::DoNotOptimize(s);
  }
  const double it = double(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops * it / 1e9, benchmark::Counter::kIsRate);
  if (dense_gflops > 0)
    state.counters["x_dense"] = benchmark::Counter(flops * it / 1e9 / dense_gflops, benchmark::Counter::kIsRate);
}

void register_shape(const Shape5& s) {
  Bench& b = bench();
  const Context& ctx = b.ctx;
  const int64_t R = s.T * s.K, H = s.H, I2 = 2 * s.I;
  const auto plan = std::make_shared<MoeDispatch>(random_plan(s));
  Tensor a = b.rand({R, H}, 1), gate_up = b.rand({s.E, H, I2}, 2, -0.05f, 0.05f), c = b.zeros({R, I2});
  Tensor w_dense = b.rand({H, I2}, 3, -0.05f, 0.05f), dc = b.rand({R, I2}, 4), dw = b.zeros({s.E, H, I2}),
         dw_dense = b.zeros({H, I2});
  const double flops = 2.0 * double(R) * double(H) * double(I2);
  // The same run's dense rate for this exact shape: forward [R, H]·[H, 2I] and weight gradient [H, R]·[R, 2I].
  const double dense_fwd = flops / 1e9 / best_seconds([&] { return gemm(ctx, c, a, w_dense, GemmDesc{}); });
  const double dense_wgrad =
      flops / 1e9 / best_seconds([&] { return gemm(ctx, dw_dense, a, dc, GemmDesc{true, false, 1.f, 1.f}); });
  benchmark::AddCustomContext("dense_fwd_gflops " + s.tag(), std::to_string(dense_fwd));
  benchmark::AddCustomContext("dense_wgrad_gflops " + s.tag(), std::to_string(dense_wgrad));
  const double rows_per_expert = double(R) / double(s.E);
  auto reg = [&](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark((name + "/" + s.tag()).c_str(), fn)->UseRealTime();
  };
  reg("dense_gemm_fwd_same_flops", [=, &ctx](benchmark::State& st) {
    run_op(st, flops, dense_fwd, [&] { return gemm(ctx, c, a, w_dense, GemmDesc{}); });
  });
  reg("grouped_gemm_fwd", [=, &ctx](benchmark::State& st) {
    run_op(st, flops, dense_fwd, [&] { return grouped_gemm(ctx, c, a, gate_up, plan->offsets, GemmDesc{}); });
    st.counters["rows_per_expert"] = rows_per_expert;
  });
  reg("dense_gemm_wgrad_same_flops", [=, &ctx](benchmark::State& st) {
    run_op(st, flops, dense_wgrad, [&] { return gemm(ctx, dw_dense, a, dc, GemmDesc{true, false, 1.f, 1.f}); });
  });
  reg("grouped_weight_grad", [=, &ctx](benchmark::State& st) {
    run_op(st, flops, dense_wgrad, [&] { return grouped_weight_grad(ctx, dw, a, dc, plan->offsets); });
    st.counters["rows_per_expert"] = rows_per_expert;
  });

  // The whole block (RMSNorm, router, dispatch, experts, combine, residual), forward and backward.
  nn::TransformerConfig cfg;
  cfg.hidden = H;
  const nn::MoeConfig moe{int(s.E), int(s.K), s.I};
  // The block holds views: its tensors live in `owned`, which the benchmark lambdas keep alive.
  const auto owned = std::make_shared<std::vector<Tensor>>(std::vector<Tensor>{
      b.rand({H}, 5, 0.5f, 1.5f), b.rand({s.E, H}, 6, -0.1f, 0.1f), gate_up, b.rand({s.E, s.I, H}, 7, -0.05f, 0.05f),
      b.zeros({H}), b.zeros({s.E, H}), dw, b.zeros({s.E, s.I, H})});
  const std::vector<Tensor>& o = *owned;
  const auto block = std::make_shared<nn::MoeBlock>(cfg, moe, nn::TensorParallel{},
                                                    nn::MoeWeights{o[0], o[1], o[2], o[3]},
                                                    nn::MoeWeights{o[4], o[5], o[6], o[7]}, 0);
  Tensor x = b.rand({s.T, H}, 8), out = b.zeros({s.T, H}), dout = b.rand({s.T, H}, 9), dx = b.zeros({s.T, H});
  const double gemm_fwd = 2.0 * double(s.T) * H * double(s.E) + 1.5 * flops;  // router + gate_up + down (half)
  reg("moe_block_fwd", [=, &ctx](benchmark::State& st) {
    (void)owned;
    nn::MoeStash stash;
    run_op(st, gemm_fwd, 0, [&] { return block->forward(ctx, out, x, s.T, stash); });
  });
  reg("moe_block_bwd", [=, &ctx](benchmark::State& st) {
    (void)owned;
    nn::MoeStash stash;
    RouterAuxStats aux;
    if (!block->forward(ctx, out, x, s.T, stash, &aux).ok()) std::abort();
    run_op(st, 2 * gemm_fwd, 0, [&] {
      return block->backward(ctx, dx, dout, s.T, stash, {}, vlpar::nn::RouterLossGrads{&aux, 1e-3f});
    });
  });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("threads", std::to_string(bench().ctx.num_threads));
  register_shape(Shape5{"a3b_widths", 256, 2048, 16, 8, 768});
  register_shape(Shape5{"small_m", 128, 2048, 16, 4, 768});
  register_shape(Shape5{"large_m", 2048, 1024, 8, 2, 512});
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
