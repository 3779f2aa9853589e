// CUDA entry points of the varlen attention forward and backward (include/vlpar/kernels/cuda_ops.hpp), STYLE §3:
//   desc      : the views, already checked by src/kernels/ops/attention.cpp → FlashFwdParams / FlashBwdParams
//   check     : bf16/f16 (the tensor-core kernels' inputs), head dim with a compiled kernel (VLPAR_ATTN_HEAD_DIMS,
//               VLPAR_DTYPES), 16-byte aligned rows (cp.async)
//   workspace : cu_seqlens copied to the device (and the backward's delta [H, N] f32), stream-ordered on
//               ctx.stream or from ctx.allocator (Workspace)
//   run       : flash_fwd_run / flash_bwd_run<T, kernel head dim> (generated flash_{fwd,bwd}_hd<HD>_<dtype>.cu)
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

using cuda_kernels::FlashBwdParams;
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
  VLPAR_RETURN_IF_ERROR(check_cp_async_base(op, name, v));
  VLPAR_CHECK_CODE(v.stride(0) % 8 == 0 && v.stride(1) % 8 == 0, StatusCode::kNotSupported,
                   "{}: {} has token stride {} and head stride {} elements; the CUDA kernel needs multiples of 8 "
                   "(16-byte rows) ({})", op, name, v.stride(0), v.stride(1), v.to_string());
  return Status::Ok();
}

/// The longest segment of cu (i32 [B+1], host memory, checked by the op).
int max_segment(const TensorView& cu) {
  const int32_t* c = cu.ptr<int32_t>();
  int longest = 0;
  for (int64_t b = 0; b + 1 < cu.size(0); ++b) longest = std::max(longest, int(c[b + 1] - c[b]));
  return longest;
}

/// The checks every CUDA attention call shares (dtype, head dim); *max_q / *max_k receive the longest query and
/// key segments (no query: nothing to launch).
Status check_common(const char* op, const TensorView& q, const TensorView& cu_q, const TensorView& cu_k,
                    const VarlenAttentionDesc& desc, int* max_q, int* max_k) {
  VLPAR_CHECK_CODE(q.dtype == DType::kBF16 || q.dtype == DType::kF16, StatusCode::kNotSupported,
                   "{}: the CUDA kernel takes bf16 or f16 q/k/v, got {} (keep f32 attention on the CPU)", op,
                   dtype_name(q.dtype));
  VLPAR_CHECK_CODE(desc.head_dim % 8 == 0, StatusCode::kNotSupported,
                   "{}: head_dim {} is not a multiple of 8: the CUDA kernel loads 16-byte cp.async chunks of a row",
                   op, desc.head_dim);
  *max_q = max_segment(cu_q);
  *max_k = max_segment(cu_k);
  return Status::Ok();
}

/// Copies the segment arrays to the start of the device workspace (one copy when q and k share them; the space is
/// segment_bytes), queued on ctx.stream, and points p at them.
Status upload_segments(const Context& ctx, Workspace& ws, const TensorView& cu_q, const TensorView& cu_k,
                       FlashFwdParams& p) {
  const size_t bytes = size_t(p.batch + 1) * sizeof(int32_t);
  const bool shared = cu_q.data == cu_k.data;
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  int32_t* dev = ws.ptr<int32_t>();
  VLPAR_CUDA_CHECK(cudaMemcpyAsync(dev, cu_q.data, bytes, cudaMemcpyHostToDevice, stream));
  if (!shared) VLPAR_CUDA_CHECK(cudaMemcpyAsync(dev + p.batch + 1, cu_k.data, bytes, cudaMemcpyHostToDevice, stream));
  p.cu_q = dev;
  p.cu_k = shared ? dev : dev + p.batch + 1;
  return Status::Ok();
}

/// Device bytes upload_segments needs for B sequences (the public varlen_attention_cuda_workspace_bytes counts them
/// the same way).
size_t segment_bytes(int batch) { return varlen_attention_cuda_workspace_bytes(batch, 0, 0, false); }

FlashFwdParams fwd_params(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& cu_seqlens, const VarlenAttentionDesc& desc,
                          int max_len) {
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
  p.batch = int(cu_seqlens.size(0) - 1);
  p.max_seqlen_q = max_len;
  p.num_heads = desc.num_heads;
  p.num_kv_heads = desc.num_kv_heads;
  p.head_dim = desc.head_dim;
  p.causal = desc.causal ? 1 : 0;
  p.scale = desc.softmax_scale != 0.f ? desc.softmax_scale : 1.f / std::sqrt(float(desc.head_dim));
  return p;
}

/// Runs fn.template operator()<T, kHeadDim>() for q's dtype and the kernel head dim, when compiled.
template <class Fn>
Status with_kernel(const char* op, DType dtype, int head_dim, Fn&& fn) {
  return with_kernel_head_dim(op, head_dim, [&]<int kHeadDim>() -> Status {
    auto run = [&]<class U>() { return fn.template operator()<U, kHeadDim>(); };
    return dtype == DType::kBF16 ? if_compiled<bf16>(op, run) : if_compiled<f16>(op, run);
  });
}

}  // namespace

Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q, TensorView k,
                                TensorView v, TensorView cu_seqlens_q, TensorView cu_seqlens_k,
                                const VarlenAttentionDesc& desc) {
  const char* op = "varlen_attention_forward";
  int max_q = 0, max_k = 0;
  VLPAR_RETURN_IF_ERROR(check_common(op, q, cu_seqlens_q, cu_seqlens_k, desc, &max_q, &max_k));
  if (max_q == 0) return Status::Ok();  // no query: nothing to launch (and the views may hold no memory)
  VLPAR_ASSIGN_OR_RETURN(const int device, cuda_device_of(op, {{"out", &out}, {"lse", &lse}, {"q", &q},
                                                               {"k", &k}, {"v", &v}}));
  for (const auto& [name, view] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v},
                                   std::pair{"out", &out}})
    VLPAR_RETURN_IF_ERROR(check_rows_aligned(op, name, *view));
  FlashFwdParams p = fwd_params(out, lse, q, k, v, cu_seqlens_q, desc, max_q);
  return on_device(op, device, [&]() -> Status {
    Workspace ws(ctx, device);  // the segments on the device, queued before the kernel on the same stream
    VLPAR_RETURN_IF_ERROR(ws.allocate(segment_bytes(p.batch)));
    VLPAR_RETURN_IF_ERROR(upload_segments(ctx, ws, cu_seqlens_q, cu_seqlens_k, p));
    return with_kernel(op, q.dtype, desc.head_dim, [&]<class T, int kHeadDim>() {
      return cuda_kernels::flash_fwd_run<T, kHeadDim>(p, ctx.stream);
    });
  });
}

Status varlen_attention_backward(const Context& ctx, TensorView dq, TensorView dk, TensorView dv, TensorView dout,
                                 TensorView q, TensorView k, TensorView v, TensorView out, TensorView lse,
                                 TensorView cu_seqlens_q, TensorView cu_seqlens_k, const VarlenAttentionDesc& desc) {
  const char* op = "varlen_attention_backward";
  int max_q = 0, max_k = 0;
  VLPAR_RETURN_IF_ERROR(check_common(op, q, cu_seqlens_q, cu_seqlens_k, desc, &max_q, &max_k));
  if (max_q == 0 && max_k == 0) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(const int device,
                         cuda_device_of(op, {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"dout", &dout}, {"q", &q},
                                             {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}}));
  for (const auto& [name, view] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v},
                                   std::pair{"out", &out}, std::pair{"dout", &dout}, std::pair{"dq", &dq},
                                   std::pair{"dk", &dk}, std::pair{"dv", &dv}})
    VLPAR_RETURN_IF_ERROR(check_rows_aligned(op, name, *view));
  FlashBwdParams p{};
  p.fwd = fwd_params(out, lse, q, k, v, cu_seqlens_q, desc, max_q);
  p.dout = dout.data;
  p.dq = dq.data;
  p.dk = dk.data;
  p.dv = dv.data;
  p.dout_tok_stride = dout.stride(0), p.dout_head_stride = dout.stride(1);
  p.dq_tok_stride = dq.stride(0), p.dq_head_stride = dq.stride(1);
  p.dk_tok_stride = dk.stride(0), p.dk_head_stride = dk.stride(1);
  p.dv_tok_stride = dv.stride(0), p.dv_head_stride = dv.stride(1);
  p.n_q = q.size(0);
  p.max_seqlen_k = max_k;
  return on_device(op, device, [&]() -> Status {
    // One workspace: the segments (padded to 256 bytes), then delta [H, N_q] f32.
    const size_t seg_bytes = segment_bytes(p.fwd.batch);
    Workspace ws(ctx, device);
    VLPAR_RETURN_IF_ERROR(ws.allocate(seg_bytes + cuda_kernels::flash_bwd_workspace_bytes(p.n_q, desc.num_heads)));
    VLPAR_RETURN_IF_ERROR(upload_segments(ctx, ws, cu_seqlens_q, cu_seqlens_k, p.fwd));
    p.delta = reinterpret_cast<float*>(ws.ptr<char>() + seg_bytes);
    return with_kernel(op, q.dtype, desc.head_dim, [&]<class T, int kHeadDim>() {
      return cuda_kernels::flash_bwd_run<T, kHeadDim>(p, ctx.stream);
    });
  });
}

}  // namespace vlpar::cuda_impl
