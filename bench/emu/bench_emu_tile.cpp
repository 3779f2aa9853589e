// Cost of the CUDA emulation tier (docs/cuda-emulation.md): one 128×128×64 bf16 tile computed by 4 warps with
// cp.async + ldmatrix + mma.sync (tests/emu/warp_matrix_kernels.cu) under fiber emulation, on the calling thread
// (one core). Target: ≤ 10 ms per tile (issue 13). Reported next to the same run's fp64 host GEMM of that tile,
// the baseline measured in the same process (the machine is shared and noisy). Emulated builds only.
// Run: build/emu/bench/bench_emu_tile [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "vlpar/core/dtype.hpp"
#include "warp_matrix_kernels.hpp"

namespace {

struct Tile {
  std::vector<uint16_t> a, b;
  std::vector<double> a64, b64;
  uint16_t* da = nullptr;
  uint16_t* db = nullptr;
  float* dd = nullptr;

  Tile() : a(128 * 64), b(64 * 128), a64(a.size()), b64(b.size()) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = vlpar::float_to_bf16(u(rng)).bits;
      a64[i] = vlpar::bf16_to_float(vlpar::bf16{a[i]});
    }
    for (size_t i = 0; i < b.size(); ++i) {
      b[i] = vlpar::float_to_bf16(u(rng)).bits;
      b64[i] = vlpar::bf16_to_float(vlpar::bf16{b[i]});
    }
    (void)cudaMalloc(reinterpret_cast<void**>(&da), a.size() * 2);
    (void)cudaMalloc(reinterpret_cast<void**>(&db), b.size() * 2);
    (void)cudaMalloc(reinterpret_cast<void**>(&dd), 128 * 128 * 4);
    (void)cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
    (void)cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  }
  ~Tile() {
    (void)cudaFree(da);
    (void)cudaFree(db);
    (void)cudaFree(dd);
  }
};

void BM_EmulatedTile128x128x64(benchmark::State& state) {
  Tile t;
  for (auto _ : state) {
    const vlpar::Status s = vlpar::emu_test::mma_block_tile(t.da, t.db, t.dd);
    if (!s.ok()) state.SkipWithError(s.message().c_str());
  }
  state.counters["flop/s"] = benchmark::Counter(2.0 * 128 * 128 * 64, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EmulatedTile128x128x64)->Unit(benchmark::kMillisecond);

/// Baseline: the same tile as a plain fp64 triple loop on the host.
void BM_HostFp64Tile128x128x64(benchmark::State& state) {
  Tile t;
  std::vector<double> d(128 * 128);
  for (auto _ : state) {
    for (int m = 0; m < 128; ++m)
      for (int n = 0; n < 128; ++n) {
        double acc = 0;
        for (int k = 0; k < 64; ++k) acc += t.a64[size_t(m * 64 + k)] * t.b64[size_t(k * 128 + n)];
        d[size_t(m * 128 + n)] = acc;
      }
    benchmark::DoNotOptimize(d.data());
  }
  state.counters["flop/s"] = benchmark::Counter(2.0 * 128 * 128 * 64, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_HostFp64Tile128x128x64)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
