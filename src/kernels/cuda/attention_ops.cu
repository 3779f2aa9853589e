// CUDA entry point of the varlen attention forward (include/vlpar/kernels/cuda_ops.hpp), STYLE §3:
//   desc      : the views, already checked by src/kernels/ops/attention.cpp → FlashFwdParams
//   check     : bf16/f16 (the tensor-core kernel's inputs), head dim with a compiled kernel (VLPAR_ATTN_HEAD_DIMS,
//               VLPAR_DTYPES), 16-byte aligned rows (cp.async), lse row stride
//   workspace : cu_seqlens copied to the device, stream-ordered on ctx.stream (Workspace)
//   run       : flash_fwd_run<T, kernel head dim> (generated src/kernels/cuda/flash_fwd_hd<HD>_<dtype>.cu)
// Test: tests/gpu/test_cuda_attention.cpp (ctest -L gpu; -L emu in the emulated build)
#include "cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "op_helpers.cuh"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/kernels/attention.hpp"
#include "vlpar/kernels/cuda/attention_params.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar::cuda_impl {
namespace {

using cuda_kernels::FlashFwdParams;

/// Runs fn.template operator()<kHeadDim>() for the kernel head dim serving d, when this build compiled it.
template <class Fn>
Status with_kernel_head_dim(const char* op, int d, Fn&& fn) {
  const int hd = cuda_kernels::flash_kernel_head_dim(d);
#ifdef VLPAR_CUDA_ATTN_HD_64
  if (hd == 64) return fn.template operator()<64>();
#endif
#ifdef VLPAR_CUDA_ATTN_HD_96
  if (hd == 96) return fn.template operator()<96>();
#endif
#ifdef VLPAR_CUDA_ATTN_HD_128
  if (hd == 128) return fn.template operator()<128>();
#endif
  if (hd == 0)
    return VLPAR_STATUS(StatusCode::kNotSupported, "{}: head_dim {} exceeds the CUDA attention kernels' limit of 128",
                        op, d);
  return VLPAR_STATUS(StatusCode::kNotSupported, "{}: head_dim {} runs the kernel of head dim {}; this build of vlpar "
                      "was compiled without it (VLPAR_ATTN_HEAD_DIMS)", op, d, hd);
}

/// cp.async moves 16-byte chunks: the view's base and its token and head strides must keep every row 16-byte
/// aligned. Names the view and what breaks it.
Status check_rows_aligned(const char* op, const char* name, const TensorView& v) {
  VLPAR_CHECK_CODE(reinterpret_cast<uintptr_t>(v.data) % 16 == 0, StatusCode::kNotSupported,
                   "{}: {} is not 16-byte aligned ({}): the CUDA kernel loads rows with 16-byte cp.async", op, name,
                   v.to_string());
  VLPAR_CHECK_CODE(v.stride(0) % 8 == 0 && v.stride(1) % 8 == 0, StatusCode::kNotSupported,
                   "{}: {} has token stride {} and head stride {} elements; the CUDA kernel needs multiples of 8 "
                   "(16-byte rows) ({})", op, name, v.stride(0), v.stride(1), v.to_string());
  return Status::Ok();
}

}  // namespace

Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q, TensorView k,
                                TensorView v, TensorView cu_seqlens, const VarlenAttentionDesc& desc) {
  const char* op = "varlen_attention_forward";
  VLPAR_CHECK_CODE(q.dtype == DType::kBF16 || q.dtype == DType::kF16, StatusCode::kNotSupported,
                   "{}: the CUDA kernel takes bf16 or f16 q/k/v, got {} (keep f32 attention on the CPU)", op,
                   dtype_name(q.dtype));
  VLPAR_CHECK_CODE(desc.head_dim % 8 == 0, StatusCode::kNotSupported,
                   "{}: head_dim {} is not a multiple of 8: the CUDA kernel loads 16-byte cp.async chunks of a row",
                   op, desc.head_dim);
  VLPAR_CHECK(!cu_seqlens.device.is_cuda(), "{}: cu_seqlens must be in host memory (the op reads the segment "
              "lengths to size the grid), got {}", op, cu_seqlens.to_string());
  const int batch = int(cu_seqlens.size(0) - 1);
  const int32_t* cu = cu_seqlens.ptr<int32_t>();
  int max_len = 0;
  for (int b = 0; b < batch; ++b) max_len = std::max(max_len, int(cu[b + 1] - cu[b]));
  if (max_len == 0) return Status::Ok();  // no token: nothing to launch (and the views may hold no memory)
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"out", &out}, {"lse", &lse}, {"q", &q},
                                                               {"k", &k}, {"v", &v}}));
  for (const auto& [name, view] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v},
                                   std::pair{"out", &out}})
    VLPAR_RETURN_IF_ERROR(check_rows_aligned(op, name, *view));
  FlashFwdParams p{};
  p.out = out.data;
  p.lse = lse.ptr<float>();
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.q_tok_stride = q.stride(0), p.q_head_stride = q.stride(1);
  p.k_tok_stride = k.stride(0), p.k_head_stride = k.stride(1);
  p.v_tok_stride = v.stride(0), p.v_head_stride = v.stride(1);
  p.out_tok_stride = out.stride(0), p.out_head_stride = out.stride(1);
  p.lse_head_stride = lse.stride(0);
  p.batch = batch;
  p.max_seqlen_q = max_len;
  p.num_heads = desc.num_heads;
  p.num_kv_heads = desc.num_kv_heads;
  p.head_dim = desc.head_dim;
  p.causal = desc.causal ? 1 : 0;
  p.scale = desc.softmax_scale != 0.f ? desc.softmax_scale : 1.f / std::sqrt(float(desc.head_dim));
  return on_device(op, device, [&]() -> Status {
    Workspace ws(ctx, device);  // cu_seqlens on the device, queued before the kernel on the same stream
    const size_t bytes = size_t(batch + 1) * sizeof(int32_t);
    VLPAR_RETURN_IF_ERROR(ws.allocate(bytes));
    VLPAR_CUDA_CHECK(cudaMemcpyAsync(ws.ptr<int32_t>(), cu, bytes, cudaMemcpyHostToDevice,
                                     static_cast<cudaStream_t>(ctx.stream)));
    p.cu_q = p.cu_k = ws.ptr<int32_t>();
    return with_kernel_head_dim(op, desc.head_dim, [&]<int kHeadDim>() -> Status {
      auto run = [&]<class U>() { return cuda_kernels::flash_fwd_run<U, kHeadDim>(p, ctx.stream); };
      return q.dtype == DType::kBF16 ? if_compiled<bf16>(op, run) : if_compiled<f16>(op, run);
    });
  });
}

}  // namespace vlpar::cuda_impl
