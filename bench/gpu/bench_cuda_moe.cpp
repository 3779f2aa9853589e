// The CUDA MoE path on the GPU through the public ops (CUDA views), timed with CUDA events, at the shapes of
// Qwen3-VL-30B-A3B's MoE layers (128 experts, top-8, hidden 2048, expert dim 768) for 4096 and 16384 tokens, with
// uniform and skewed routing (a Zipf-like choice: the first experts take most tokens):
//   plan       moe_dispatch_plan from device indices (includes the device → host copy of the plan)
//   permute    moe_permute of the tokens' rows and moe_unpermute (weighted combine), GB/s = bytes read + written,
//              next to cudaMemcpy device → device of the same bytes (the copy-bandwidth baseline, same run)
//   grouped    four expert GEMMs of a training step: gate_up forward (x · W_guᵀ), down forward, down dX
//              (dY · W_down) and down dW (actᵀ · dY, fp32 accumulate), TFLOP/s = 2·R·N·K, next to one dense
//              cuBLAS bf16 GEMM (fp32 compute) of the same total FLOPs, same run
// Prints CSV lines (and each routing's expert end offsets, for bench/gpu/bench_moe_vs_torch.py to give
// torch._grouped_mm the same groups); the last column is baseline time / vlpar time. Built in CUDA builds only (bench/gpu/validate.sh
// step benchmarks). Usage: bench_cuda_moe [--iters N]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "bench_util.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/moe.hpp"

namespace {

using namespace vlpar;
using bench::check;
using bench::random_device;
using bench::time_ms;

constexpr int kExperts = 128, kTopK = 8;
constexpr int64_t kHidden = 2048, kInter = 768;

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s: cuBLAS status %d\n", what, int(s));
  std::exit(1);
}

/// [T, K] i32 host routing: K distinct experts per token, uniform or skewed (expert e drawn with weight 1/(e+1)).
Tensor routing(Allocator& a, int64_t tokens, bool skewed) {
  Tensor idx = Tensor::empty(a, {tokens, kTopK}, DType::kI32).value();
  std::vector<double> cdf(kExperts);
  double sum = 0;
  for (int e = 0; e < kExperts; ++e) cdf[size_t(e)] = (sum += skewed ? 1.0 / (e + 1) : 1.0);
  uint64_t draw = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    int32_t* row = idx.ptr<int32_t>() + t * kTopK;
    for (int k = 0; k < kTopK; ++k) {
      int32_t e = 0;
      do {  // rejection of repeats keeps the K ids of a token distinct
        const double u = philox_uniform(7, 0, draw++, 0.f, 1.f) * sum;
        e = int32_t(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
        e = std::min(e, kExperts - 1);
      } while (std::find(row, row + k, e) != row + k);
      row[k] = e;
    }
  }
  return idx;
}

/// Row-major C[M, N] = A[M, K] · B[N, K]ᵀ in bf16 with fp32 compute (column-major: Cᵀ = B · Aᵀ).
void cublas_nt(cublasHandle_t h, void* c, const void* a, const void* b, int64_t m, int64_t n, int64_t k) {
  const float one = 1.f, zero = 0.f;
  check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, b, CUDA_R_16BF, int(k), a,
                            CUDA_R_16BF, int(k), &zero, c, CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

/// One CSV line: the rate is amount per second / scale (unit names it); the ratio is baseline time / vlpar time.
void print_row(const char* what, int64_t tokens, bool skewed, double ms, double amount, double scale,
               const char* unit, double base_ms) {
  std::printf("%s,%lld,%s,%.4f,%.1f,%s,%.4f,%.2f\n", what, static_cast<long long>(tokens),
              skewed ? "skewed" : "uniform", ms, amount / (ms * 1e-3) / scale, unit, base_ms,
              base_ms > 0 ? base_ms / ms : 0.0);
  std::fflush(stdout);
}

void run(int64_t tokens, bool skewed, int iters, cublasHandle_t blas) {
  Allocator a;
  Context ctx;
  ctx.device = Device::cuda(0);
  const int64_t R = tokens * kTopK;
  const Tensor idx_dev = [&] {
    Tensor host = routing(a, tokens, skewed);
    Tensor dev = Tensor::empty(a, host.shape(), DType::kI32, Device::cuda(0)).value();
    check(copy_(dev, host), "upload indices");
    return dev;
  }();
  MoeDispatch plan;
  const double plan_ms = time_ms(iters, [&] { check(moe_dispatch_plan(ctx, plan, idx_dev, kExperts), "plan"); });
  print_row("plan", tokens, skewed, plan_ms, double(R), 1e6, "M assignments/s", 0);
  std::printf("offsets,%lld,%s,", static_cast<long long>(tokens), skewed ? "skewed" : "uniform");
  for (int e = 1; e <= kExperts; ++e) std::printf("%lld%s", static_cast<long long>(plan.offsets[size_t(e)]),
                                                  e < kExperts ? ";" : ",,,\n");

  const Tensor x = random_device(a, {tokens, kHidden}, DType::kBF16, 1);
  const Tensor w = [&] {
    Tensor d = Tensor::empty(a, {tokens, kTopK}, DType::kF32, Device::cuda(0)).value();
    Tensor h = Tensor::empty(a, {tokens, kTopK}, DType::kF32).value();
    for (int64_t i = 0; i < h.numel(); ++i) h.ptr<float>()[i] = 1.f / kTopK;
    check(copy_(d, h), "upload weights");
    return d;
  }();
  Tensor xp = Tensor::empty(a, {R, kHidden}, DType::kBF16, Device::cuda(0)).value();
  Tensor y = Tensor::empty(a, {tokens, kHidden}, DType::kBF16, Device::cuda(0)).value();
  const double bytes = 2.0 * double(R) * kHidden * 2;  // permute: R rows read (gathered) and written
  const double copy_ms = [&] {  // the copy-bandwidth baseline: R rows device → device (the same bytes)
    Tensor src = Tensor::zeros(a, {R, kHidden}, DType::kBF16, Device::cuda(0)).value();
    return time_ms(iters, [&] {
      const size_t n = size_t(R) * kHidden * 2;
      if (cudaMemcpyAsync(xp.ptr<void>(), src.ptr<void>(), n, cudaMemcpyDeviceToDevice) != cudaSuccess) std::abort();
    });
  }();
  const double perm_ms = time_ms(iters, [&] { check(moe_permute(ctx, xp, x, {}, plan), "permute"); });
  print_row("permute", tokens, skewed, perm_ms, bytes, 1e9, "GB/s", copy_ms);
  const double unperm_ms = time_ms(iters, [&] { check(moe_unpermute(ctx, y, xp, w, plan), "unpermute"); });
  print_row("unpermute", tokens, skewed, unperm_ms, double(R + tokens) * kHidden * 2, 1e9, "GB/s",
            copy_ms * double(R + tokens) / (2.0 * double(R)));

  const Tensor w_gu = random_device(a, {kExperts, 2 * kInter, kHidden}, DType::kBF16, 2, -0.05f, 0.05f);
  const Tensor w_dn = random_device(a, {kExperts, kHidden, kInter}, DType::kBF16, 3, -0.05f, 0.05f);
  Tensor gu = Tensor::empty(a, {R, 2 * kInter}, DType::kBF16, Device::cuda(0)).value();
  const Tensor act = random_device(a, {R, kInter}, DType::kBF16, 4);
  const Tensor dy = random_device(a, {R, kHidden}, DType::kBF16, 5);
  Tensor yp = Tensor::empty(a, {R, kHidden}, DType::kBF16, Device::cuda(0)).value();
  Tensor dact = Tensor::empty(a, {R, kInter}, DType::kBF16, Device::cuda(0)).value();
  Tensor dw_dn = Tensor::zeros(a, {kExperts, kInter, kHidden}, DType::kF32, Device::cuda(0)).value();
  const GemmDesc nt{false, true, 1.f, 0.f}, nn{false, false, 1.f, 0.f};
  struct Gemm {
    const char* name;
    int64_t n, k;
    std::function<Status()> op;
  };
  const std::vector<Gemm> gemms = {
      {"grouped_gate_up_fwd", 2 * kInter, kHidden, [&] { return grouped_gemm(ctx, gu, xp, w_gu, plan.offsets, nt); }},
      {"grouped_down_fwd", kHidden, kInter, [&] { return grouped_gemm(ctx, yp, act, w_dn, plan.offsets, nt); }},
      {"grouped_down_dx", kInter, kHidden, [&] { return grouped_gemm(ctx, dact, dy, w_dn, plan.offsets, nn); }},
      {"grouped_down_dw", kHidden, kInter, [&] { return grouped_weight_grad(ctx, dw_dn, act, dy, plan.offsets); }},
  };
  for (const Gemm& g : gemms) {
    const double flops = 2.0 * double(R) * double(g.n) * double(g.k);
    const double ms = time_ms(iters, [&] { check(g.op(), g.name); });
    // the dense baseline of equal FLOPs: one cuBLAS C[R, n] = A[R, k] · B[n, k]ᵀ
    Tensor c = Tensor::empty(a, {R, g.n}, DType::kBF16, Device::cuda(0)).value();
    const Tensor lhs = random_device(a, {R, g.k}, DType::kBF16, 6), rhs = random_device(a, {g.n, g.k}, DType::kBF16, 7, -0.05f, 0.05f);
    const double base = time_ms(iters, [&] {
      cublas_nt(blas, c.ptr<void>(), lhs.ptr<void>(), rhs.ptr<void>(), R, g.n, g.k);
    });
    print_row(g.name, tokens, skewed, ms, flops, 1e12, "TFLOP/s", base);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = vlpar::bench::iters_or_no_device(argc, argv);
  if (iters == 0) return 0;
  cublasHandle_t blas;
  check_cublas(cublasCreate(&blas), "cublasCreate");
  std::printf("what,tokens,routing,ms,rate,unit,baseline_ms,baseline_ms_over_ms\n");
  for (const int64_t tokens : {int64_t{4096}, int64_t{16384}})
    for (const bool skewed : {false, true}) run(tokens, skewed, iters, blas);
  cublasDestroy(blas);
  return 0;
}
