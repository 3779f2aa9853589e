// The public attention ops: every argument checked once here (shapes, one storage dtype, devices, the segments of
// cu_seqlens), then the device's implementation (CPU: src/kernels/cpu/attention.cpp and kv_cache_attention.cpp
// through the CPU-path dispatch; CUDA: the varlen forward and backward run the flash-attention kernels,
// src/kernels/cuda/attention_ops.cu, with every tensor on the device and cu_seqlens in host memory; the cache
// attention has no CUDA kernel yet and gets kNotSupported naming the argument).
// Test: tests/unit/test_attention.cpp, tests/unit/test_kv_cache_attention.cpp.
#include "vlpar/kernels/attention.hpp"

#include <cmath>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/core.h>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

constexpr const char* kVarlen = "varlen_attention";

/// Every non-empty view on the CPU, for the ops without a CUDA kernel yet (a named kNotSupported, not a crash).
Status check_cpu_only(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  for (const auto& [name, v] : views)
    VLPAR_CHECK_CODE(!v->device.is_cuda(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({} is {})", op, name,
                     v->to_string());
  return Status::Ok();
}

/// Every view on q's kind of device (all in host memory, or all on CUDA devices: cuda_impl checks they share one),
/// and cu_seqlens in host memory (the op reads the segment lengths).
Status check_one_device(const TensorView& q, const TensorView& cu_seqlens,
                        std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  for (const auto& [name, v] : views)
    VLPAR_CHECK(v->device.is_cuda() == q.device.is_cuda(), "{}: {} is {} but q is {} (the operands live on one "
                "device)", kVarlen, name, v->to_string(), q.to_string());
  VLPAR_CHECK(!cu_seqlens.device.is_cuda(), "{}: cu_seqlens must be in host memory (the op reads the segment "
              "lengths), got {}", kVarlen, cu_seqlens.to_string());
  return Status::Ok();
}

/// A [n_tok, heads, D] view of storage dtype `dtype` with a contiguous last dim (token and head strides free);
/// tok names the token count in messages (N_tok for the query side, N_k for keys when their segments differ).
Status check_head_view(const char* name, const TensorView& v, int64_t n_tok, int heads, int D, DType dtype,
                       const char* tok = "N_tok") {
  const std::string what = std::string(kVarlen) + ": " + name;
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(kVarlen, name, v));
  VLPAR_CHECK(v.ndim() == 3 && v.size(0) == n_tok && v.size(1) == heads && v.size(2) == D,
              "{} must be [{}={}, {}, {}], got {}", what, tok, n_tok, heads, D, v.to_string());
  VLPAR_CHECK(v.dtype == dtype, "{} has dtype {} but q has {} (q, k, v, out and the gradients share one dtype)",
              what, dtype_name(v.dtype), dtype_name(dtype));
  VLPAR_CHECK(v.stride(2) == 1 || D == 1, "{} must have a contiguous last dim, got {}", what, v.to_string());
  VLPAR_CHECK(v.data != nullptr || v.numel() == 0, "{} has null data", what);
  return Status::Ok();
}

/// lse [H, N_tok] f32 with a contiguous last dim.
Status check_lse(const TensorView& lse, int64_t n_tok, int H) {
  VLPAR_CHECK(lse.dtype == DType::kF32, "{}: lse must be f32, got {}", kVarlen, lse.to_string());
  VLPAR_CHECK(lse.ndim() == 2 && lse.size(0) == H && lse.size(1) == n_tok, "{}: lse must be [H={}, N_tok={}], got {}",
              kVarlen, H, n_tok, lse.to_string());
  VLPAR_CHECK(lse.stride(1) == 1 || n_tok <= 1, "{}: lse must have a contiguous last dim, got {}", kVarlen,
              lse.to_string());
  VLPAR_CHECK(lse.data != nullptr || lse.empty(), "{}: lse has null data", kVarlen);
  return Status::Ok();
}

/// One segment array, i32 [B+1] (host memory): cu[0] = 0, non-decreasing, cu[B] = n_tok. `name` is how messages
/// call it (cu_seqlens, cu_seqlens_q or cu_seqlens_k), `of` the tensor whose token count it must end at.
Status check_segments(const TensorView& cu, int64_t n_tok, const char* name = "cu_seqlens",
                      const char* of = "N_tok = {} (q.size(0))") {
  VLPAR_CHECK(cu.dtype == DType::kI32 && cu.ndim() == 1 && cu.size(0) >= 1,
              "{}: {} must be i32 [B+1] with B >= 0, got {}", kVarlen, name, cu.to_string());
  VLPAR_CHECK(cu.stride(0) == 1 || cu.size(0) == 1, "{}: {} must be contiguous, got {}", kVarlen, name,
              cu.to_string());
  VLPAR_CHECK(cu.data != nullptr, "{}: {} has null data", kVarlen, name);
  const int32_t* c = cu.ptr<int32_t>();
  const int64_t B = cu.size(0) - 1;
  VLPAR_CHECK(c[0] == 0, "{}: {}[0] must be 0, got {}", kVarlen, name, c[0]);
  for (int64_t b = 0; b < B; ++b)
    VLPAR_CHECK(c[b + 1] >= c[b], "{}: {}[{}] = {} is less than {}[{}] = {}", kVarlen, name, b + 1, c[b + 1], name,
                b, c[b]);
  VLPAR_CHECK(c[B] == n_tok, "{}: {}[{}] = {} must equal {}", kVarlen, name, B, c[B],
              fmt::format(fmt::runtime(of), n_tok));
  return Status::Ok();
}

/// The query and key segments; returns N_k. One array for both (self-attention) is checked once, under the name
/// cu_seqlens; separate ones must have the same B, cu_seqlens_k ending at k.size(0).
Result<int64_t> check_qk_segments(const TensorView& cu_q, const TensorView& cu_k, const TensorView& k, int64_t n_q) {
  const bool shared = cu_q.data == cu_k.data && cu_q.shape == cu_k.shape;
  if (shared) {
    VLPAR_RETURN_IF_ERROR(check_segments(cu_q, n_q));
    return n_q;
  }
  VLPAR_CHECK(k.ndim() == 3, "{}: k must be [N_k, H_kv, D], got {}", kVarlen, k.to_string());
  VLPAR_RETURN_IF_ERROR(check_segments(cu_q, n_q, "cu_seqlens_q"));
  VLPAR_RETURN_IF_ERROR(check_segments(cu_k, k.size(0), "cu_seqlens_k", "N_k = {} (k.size(0))"));
  VLPAR_CHECK(cu_k.size(0) == cu_q.size(0), "{}: cu_seqlens_k has {} entries but cu_seqlens_q has {} (one query and "
              "one key segment per sequence)", kVarlen, cu_k.size(0), cu_q.size(0));
  return k.size(0);
}

/// q's token count, after the descriptor and q's rank are checked.
Result<int64_t> tokens_of(const TensorView& q, const VarlenAttentionDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_varlen_attention(desc));
  VLPAR_CHECK(q.ndim() == 3, "{}: q must be [N_tok, H, D], got {}", kVarlen, q.to_string());
  return q.size(0);
}

}  // namespace

Status check_varlen_attention(const VarlenAttentionDesc& desc) {
  VLPAR_CHECK(desc.num_heads > 0, "{}: num_heads must be positive, got {}", kVarlen, desc.num_heads);
  VLPAR_CHECK(desc.num_kv_heads > 0, "{}: num_kv_heads must be positive, got {}", kVarlen, desc.num_kv_heads);
  VLPAR_CHECK(desc.num_heads % desc.num_kv_heads == 0,
              "{}: num_heads {} is not a multiple of num_kv_heads {} (GQA needs H % H_kv == 0)", kVarlen,
              desc.num_heads, desc.num_kv_heads);
  VLPAR_CHECK(desc.head_dim > 0, "{}: head_dim must be positive, got {}", kVarlen, desc.head_dim);
  VLPAR_CHECK(std::isfinite(desc.softmax_scale), "{}: softmax_scale must be finite, got {}", kVarlen,
              desc.softmax_scale);
  return Status::Ok();
}

Status varlen_attention_forward(const Context& ctx, TensorView out, TensorView lse, TensorView q, TensorView k,
                                TensorView v, TensorView cu_seqlens_q, TensorView cu_seqlens_k,
                                const VarlenAttentionDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_one_device(q, cu_seqlens_q, {{"out", &out}, {"lse", &lse}, {"k", &k}, {"v", &v}}));
  VLPAR_RETURN_IF_ERROR(check_one_device(q, cu_seqlens_k, {}));
  VLPAR_ASSIGN_OR_RETURN(const int64_t n_q, tokens_of(q, desc));
  VLPAR_ASSIGN_OR_RETURN(const int64_t n_k, check_qk_segments(cu_seqlens_q, cu_seqlens_k, k, n_q));
  const int H = desc.num_heads, H_kv = desc.num_kv_heads, D = desc.head_dim;
  const char* tok_k = n_k == n_q ? "N_tok" : "N_k";
  for (const auto& [name, view, heads, n, tok] :
       {std::tuple{"q", &q, H, n_q, "N_tok"}, std::tuple{"k", &k, H_kv, n_k, tok_k},
        std::tuple{"v", &v, H_kv, n_k, tok_k}, std::tuple{"out", &out, H, n_q, "N_tok"}})
    VLPAR_RETURN_IF_ERROR(check_head_view(name, *view, n, heads, D, q.dtype, tok));
  VLPAR_RETURN_IF_ERROR(check_lse(lse, n_q, H));
  if (q.device.is_cuda())
    return cuda_impl::varlen_attention_forward(ctx, out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, desc);
  return cpu_impl::varlen_attention_forward(ctx, out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, desc);
}

Status varlen_attention_backward(const Context& ctx, TensorView dq, TensorView dk, TensorView dv, TensorView dout,
                                 TensorView q, TensorView k, TensorView v, TensorView out, TensorView lse,
                                 TensorView cu_seqlens_q, TensorView cu_seqlens_k, const VarlenAttentionDesc& desc) {
  VLPAR_RETURN_IF_ERROR(check_one_device(q, cu_seqlens_q, {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"dout", &dout},
                                                            {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}}));
  VLPAR_RETURN_IF_ERROR(check_one_device(q, cu_seqlens_k, {}));
  VLPAR_ASSIGN_OR_RETURN(const int64_t n_q, tokens_of(q, desc));
  VLPAR_ASSIGN_OR_RETURN(const int64_t n_k, check_qk_segments(cu_seqlens_q, cu_seqlens_k, k, n_q));
  const int H = desc.num_heads, H_kv = desc.num_kv_heads, D = desc.head_dim;
  const char* tok_k = n_k == n_q ? "N_tok" : "N_k";
  for (const auto& [name, view, heads, n, tok] :
       {std::tuple{"q", &q, H, n_q, "N_tok"}, std::tuple{"out", &out, H, n_q, "N_tok"},
        std::tuple{"dout", &dout, H, n_q, "N_tok"}, std::tuple{"dq", &dq, H, n_q, "N_tok"},
        std::tuple{"k", &k, H_kv, n_k, tok_k}, std::tuple{"v", &v, H_kv, n_k, tok_k},
        std::tuple{"dk", &dk, H_kv, n_k, tok_k}, std::tuple{"dv", &dv, H_kv, n_k, tok_k}})
    VLPAR_RETURN_IF_ERROR(check_head_view(name, *view, n, heads, D, q.dtype, tok));
  VLPAR_RETURN_IF_ERROR(check_lse(lse, n_q, H));
  if (q.device.is_cuda())
    return cuda_impl::varlen_attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q,
                                                cu_seqlens_k, desc);
  return cpu_impl::varlen_attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                             desc);
}

Status kv_cache_attention_forward(const Context& ctx, TensorView out, TensorView q, TensorView k_cache,
                                  TensorView v_cache, int64_t past) {
  const char* op = "kv_cache_attention_forward";
  VLPAR_RETURN_IF_ERROR(
      check_cpu_only(op, {{"out", &out}, {"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache}}));
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"out", &out}, {"q", &q},
                                {"k_cache", &k_cache}, {"v_cache", &v_cache}})
    VLPAR_CHECK(t->dtype == DType::kF32 && t->is_contiguous() && !t->empty(),
                "{}: {} must be a non-empty contiguous f32 tensor, got {}", op, name, t->to_string());
  VLPAR_CHECK(q.ndim() == 3, "{}: q must be [n, H, D], got {}", op, q.to_string());
  VLPAR_CHECK(out.shape == q.shape, "{}: out {} must be shaped like q {}", op, out.to_string(), q.to_string());
  const int64_t n = q.size(0), d = q.size(2);
  VLPAR_CHECK(k_cache.ndim() == 3 && k_cache.size(2) == d, "{}: k_cache must be [capacity, H_kv, {}], got {}", op, d,
              k_cache.to_string());
  VLPAR_CHECK(v_cache.shape == k_cache.shape, "{}: v_cache {} must be shaped like k_cache {}", op,
              v_cache.to_string(), k_cache.to_string());
  VLPAR_CHECK(q.size(1) % k_cache.size(1) == 0, "{}: {} query heads are not a multiple of {} kv heads", op,
              q.size(1), k_cache.size(1));
  VLPAR_CHECK(past >= 0 && past + n <= k_cache.size(0), "{}: rows [0, past {} + n {}) exceed the cache capacity {}",
              op, past, n, k_cache.size(0));
  return cpu_impl::kv_cache_attention_forward(ctx, out, q, k_cache, v_cache, past);
}

}  // namespace vlpar
