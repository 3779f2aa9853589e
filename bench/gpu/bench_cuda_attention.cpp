// Varlen flash-attention forward and backward on the GPU through the public ops (CUDA views), timed with CUDA
// events: FA2-bench shapes (16k tokens per batch as sequences of equal length; head dim 64 with 32 heads and 128
// with 16, i.e. hidden 2048; causal and not) and Qwen3-VL's vision tower (head dim 72, 16 heads, bidirectional,
// images of 1024 patches). FLOPs as FlashAttention's benchmark counts them: forward 4·S²·D·H per sequence (half
// when causal), backward 2.5× forward (vlpar's deterministic backward does 7 of those GEMM-equivalents, not 5,
// so its TFLOP/s read low by design). Prints one CSV line per shape; bench/gpu/bench_attention_vs_torch.py runs
// it next to torch's flash SDPA on the same device and prints the ratios. Built in CUDA builds only
// (bench/gpu/validate.sh step benchmarks). Usage: bench_cuda_attention [--iters N]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/kernels/attention.hpp"

namespace {

using namespace vlpar;
using bench::check;
using bench::random_device;
using bench::time_ms;

struct BenchShape {
  const char* name;
  int seqlen, heads, head_dim;
  bool causal;
  DType dtype;
};

void run(const BenchShape& s, int iters) {
  constexpr int64_t kTokens = 16384;
  const int64_t batch = kTokens / s.seqlen, n = batch * s.seqlen;
  Allocator a;
  Tensor cu = Tensor::empty(a, {batch + 1}, DType::kI32).value();
  for (int64_t b = 0; b <= batch; ++b) cu.ptr<int32_t>()[b] = int32_t(b * s.seqlen);
  const Shape qs{n, s.heads, s.head_dim};
  Tensor q = random_device(a, qs, s.dtype, 1), k = random_device(a, qs, s.dtype, 2), v = random_device(a, qs, s.dtype, 3);
  Tensor dout = random_device(a, qs, s.dtype, 4);
  Tensor out = Tensor::empty(a, qs, s.dtype, Device::cuda(0)).value();
  Tensor lse = Tensor::empty(a, {s.heads, n}, DType::kF32, Device::cuda(0)).value();
  Tensor dq = Tensor::empty(a, qs, s.dtype, Device::cuda(0)).value();
  Tensor dk = Tensor::empty(a, qs, s.dtype, Device::cuda(0)).value();
  Tensor dv = Tensor::empty(a, qs, s.dtype, Device::cuda(0)).value();
  Context ctx;
  ctx.device = Device::cuda(0);
  const VarlenAttentionDesc desc{s.heads, s.heads, s.head_dim, s.causal, 0.f};
  const double fwd_ms = time_ms(iters, [&] {
    check(varlen_attention_forward(ctx, out, lse, q, k, v, cu, desc), "forward");
  });
  const double bwd_ms = time_ms(iters, [&] {
    check(varlen_attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, cu, desc), "backward");
  });
  const double flops = 4.0 * double(s.seqlen) * s.seqlen * s.head_dim * s.heads * batch / (s.causal ? 2 : 1);
  const std::string dt(dtype_name(s.dtype));
  std::printf("%s,%s,%d,%d,%d,%d,%lld,%.4f,%.2f,%.4f,%.2f\n", s.name, dt.c_str(), s.causal ? 1 : 0, s.seqlen,
              s.heads, s.head_dim, static_cast<long long>(batch), fwd_ms, flops / fwd_ms * 1e-9, bwd_ms,
              2.5 * flops / bwd_ms * 1e-9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = vlpar::bench::iters_or_no_device(argc, argv);
  if (iters == 0) return 0;
  const std::vector<BenchShape> shapes = {
      {"fa2_hd64", 512, 32, 64, false, DType::kBF16},   {"fa2_hd64", 2048, 32, 64, false, DType::kBF16},
      {"fa2_hd64", 2048, 32, 64, true, DType::kBF16},   {"fa2_hd128", 512, 16, 128, false, DType::kBF16},
      {"fa2_hd128", 2048, 16, 128, false, DType::kBF16}, {"fa2_hd128", 2048, 16, 128, true, DType::kBF16},
      {"fa2_hd128", 8192, 16, 128, true, DType::kBF16}, {"fa2_hd128_f16", 2048, 16, 128, true, DType::kF16},
      {"qwen3vl_vision", 1024, 16, 72, false, DType::kBF16},
  };
  std::printf("name,dtype,causal,seqlen,heads,head_dim,batch,fwd_ms,fwd_tflops,bwd_ms,bwd_tflops\n");
  for (const BenchShape& s : shapes) run(s, iters);
  return 0;
}
