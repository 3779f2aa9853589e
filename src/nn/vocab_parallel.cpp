// Vocab-parallel embedding, LM head and cross-entropy. See include/vlpar/nn/vocab_parallel.hpp.
#include "vlpar/nn/vocab_parallel.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "nn_util.hpp"
#include "vlpar/kernels/gemm.hpp"

namespace vlpar::nn {

using detail::check_shape;
using detail::scratch;

namespace {
Result<std::vector<int64_t>> read_ids(const char* op, const char* what, TensorView ids) {
  VLPAR_CHECK((ids.dtype == DType::kI32 || ids.dtype == DType::kI64) && ids.ndim() == 1 && ids.is_contiguous() &&
                  ids.device.is_cpu(),
              "{}: {} must be a contiguous 1D i32/i64 CPU tensor, got {}", op, what, ids.to_string());
  std::vector<int64_t> out(size_t(ids.numel()));
  for (int64_t i = 0; i < ids.numel(); ++i)
    out[size_t(i)] = ids.dtype == DType::kI32 ? int64_t(ids.ptr<int32_t>()[i]) : ids.ptr<int64_t>()[i];
  return out;
}
}  // namespace

Status vocab_parallel_embedding_forward(const Context& ctx, const TensorParallel& tp, TensorView out,
                                        TensorView table, TensorView ids, Range block, int64_t vocab) {
  const char* kName = "vocab_parallel_embedding_forward";
  VLPAR_ASSIGN_OR_RETURN(const std::vector<int64_t> id, read_ids(kName, "ids", ids));
  const int64_t N = int64_t(id.size()), H = table.size(-1);
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "table", table, {block.size(), H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {tp.local_tokens(N), H}));
  for (int64_t n = 0; n < N; ++n)
    VLPAR_CHECK(id[size_t(n)] >= 0 && id[size_t(n)] < vocab, "{}: id {} at position {} is outside the vocab [0, {})",
                kName, id[size_t(n)], n, vocab);
  VLPAR_ASSIGN_OR_RETURN(Tensor partial, scratch(ctx, {N, H}));
  float* p = partial.ptr<float>();
  const float* t = table.ptr<float>();
  parallel_for(ctx, N, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const int64_t local = vocab_local_index(id[size_t(n)], block);
      if (local >= 0) std::memcpy(p + n * H, t + local * H, size_t(H) * sizeof(float));
      else std::memset(p + n * H, 0, size_t(H) * sizeof(float));
    }
  });
  return region_exit_forward(tp, out, partial);
}

Status vocab_parallel_embedding_backward(const Context& ctx, const TensorParallel& tp, TensorView dtable,
                                         TensorView dout, TensorView ids, Range block, TensorView overwritten) {
  const char* kName = "vocab_parallel_embedding_backward";
  if (detail::frozen(dtable)) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(std::vector<int64_t> id, read_ids(kName, "ids", ids));
  const int64_t N = int64_t(id.size()), H = dtable.size(-1);
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dtable", dtable, {block.size(), H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dout", dout, {tp.local_tokens(N), H}));
  if (!overwritten.empty()) {
    VLPAR_ASSIGN_OR_RETURN(const std::vector<int64_t> skip, read_ids(kName, "overwritten", overwritten));
    VLPAR_CHECK(int64_t(skip.size()) == N, "{}: overwritten has {} entries but there are {} tokens", kName,
                skip.size(), N);
    for (int64_t n = 0; n < N; ++n)
      if (skip[size_t(n)] != 0) id[size_t(n)] = -1;  // owned by no rank: contributes nothing
  }
  VLPAR_ASSIGN_OR_RETURN(Tensor dpartial, scratch(ctx, {N, H}));
  VLPAR_RETURN_IF_ERROR(region_exit_backward(tp, dpartial, dout));
  float* dt = dtable.ptr<float>();
  const float* dp = dpartial.ptr<float>();
  // Columns split across threads, tokens in order: each row's sum is accumulated in a fixed order.
  parallel_for(ctx, H, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t local = vocab_local_index(id[size_t(n)], block);
      if (local < 0) continue;
      for (int64_t c = c0; c < c1; ++c) dt[local * H + c] += dp[n * H + c];
    }
  });
  return Status::Ok();
}

Result<CrossEntropyResult> vocab_parallel_cross_entropy_forward(const Context& ctx, const TensorParallel& tp,
                                                                TensorView lse, TensorView logits, TensorView labels,
                                                                Range block, int64_t ignore_index) {
  const char* kName = "vocab_parallel_cross_entropy_forward";
  VLPAR_ASSIGN_OR_RETURN(const std::vector<int64_t> lab, read_ids(kName, "labels", labels));
  const int64_t N = int64_t(lab.size()), Vl = block.size(), V = Vl * tp.size();
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "logits", logits, {N, Vl}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "lse", lse, {N}));
  for (int64_t n = 0; n < N; ++n)
    VLPAR_CHECK(lab[size_t(n)] == ignore_index || (lab[size_t(n)] >= 0 && lab[size_t(n)] < V),
                "{}: label {} at position {} is neither in [0, {}) nor ignore_index {}", kName, lab[size_t(n)], n, V,
                ignore_index);
  const float* z = logits.ptr<float>();
  // 1. Row max over the full vocab: local max, then all-reduce (max).
  VLPAR_ASSIGN_OR_RETURN(Tensor row_max, scratch(ctx, {N}));
  float* m = row_max.ptr<float>();
  parallel_for(ctx, N, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < Vl; ++j) mx = std::max(mx, z[n * Vl + j]);
      m[n] = mx;
    }
  });
  if (tp.active()) VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(row_max, comm::ReduceOp::kMax));
  // 2. Σ exp(z − max) and the target logit (only its owner contributes), one all-reduce (sum) of [2, N].
  VLPAR_ASSIGN_OR_RETURN(Tensor sums, scratch(ctx, {2, N}));
  float* s = sums.ptr<float>();
  float* target = s + N;
  parallel_for(ctx, N, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      float acc = 0.f;
      for (int64_t j = 0; j < Vl; ++j) acc += std::exp(z[n * Vl + j] - m[n]);
      s[n] = acc;
      const int64_t local = lab[size_t(n)] == ignore_index ? -1 : vocab_local_index(lab[size_t(n)], block);
      target[n] = local >= 0 ? z[n * Vl + local] : 0.f;
    }
  });
  if (tp.active()) VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(sums, comm::ReduceOp::kSum));
  // 3. Loss, the same on every rank (rows in order, fp64 accumulation).
  CrossEntropyResult r;
  double total = 0.0;
  float* l = lse.ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    l[n] = m[n] + std::log(s[n]);
    if (lab[size_t(n)] == ignore_index) continue;
    total += double(l[n]) - double(target[n]);
    ++r.num_valid;
  }
  r.loss = r.num_valid > 0 ? total / double(r.num_valid) : 0.0;
  return r;
}

Status vocab_parallel_cross_entropy_backward(const Context& ctx, TensorView dlogits, TensorView logits,
                                             TensorView labels, TensorView lse, Range block, int64_t ignore_index,
                                             int64_t num_valid, float grad_loss) {
  const char* kName = "vocab_parallel_cross_entropy_backward";
  VLPAR_ASSIGN_OR_RETURN(const std::vector<int64_t> lab, read_ids(kName, "labels", labels));
  const int64_t N = int64_t(lab.size()), Vl = block.size();
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "logits", logits, {N, Vl}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dlogits", dlogits, {N, Vl}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "lse", lse, {N}));
  const float scale = num_valid > 0 ? grad_loss / float(num_valid) : 0.f;
  const float* z = logits.ptr<float>();
  const float* l = lse.ptr<float>();
  float* dz = dlogits.ptr<float>();
  parallel_for(ctx, N, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      if (lab[size_t(n)] == ignore_index) {
        std::memset(dz + n * Vl, 0, size_t(Vl) * sizeof(float));
        continue;
      }
      const int64_t local = vocab_local_index(lab[size_t(n)], block);
      for (int64_t j = 0; j < Vl; ++j)
        dz[n * Vl + j] = scale * (std::exp(z[n * Vl + j] - l[n]) - (j == local ? 1.f : 0.f));
    }
  });
  return Status::Ok();
}

Result<CrossEntropyResult> lm_head_loss_forward(const Context& ctx, const TensorParallel& tp, TensorView x,
                                                TensorView weight, TensorView labels, Range block,
                                                int64_t ignore_index, LmHeadLossStash& st) {
  const char* kName = "lm_head_loss_forward";
  const int64_t N = labels.numel(), H = x.size(-1);
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {tp.local_tokens(N), H}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "weight", weight, {block.size(), H}));
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {N, H}));
  VLPAR_ASSIGN_OR_RETURN(st.logits, scratch(ctx, {N, block.size()}));
  VLPAR_ASSIGN_OR_RETURN(st.lse, scratch(ctx, {N}));
  VLPAR_RETURN_IF_ERROR(region_enter_forward(tp, st.h, x));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.logits, st.h, weight, {}));
  VLPAR_ASSIGN_OR_RETURN(CrossEntropyResult r,
                         vocab_parallel_cross_entropy_forward(ctx, tp, st.lse, st.logits, labels, block, ignore_index));
  st.num_valid = r.num_valid;
  return r;
}

Status lm_head_loss_backward(const Context& ctx, const TensorParallel& tp, TensorView dx, TensorView dweight,
                             TensorView weight, TensorView labels, Range block, int64_t ignore_index,
                             LmHeadLossStash& st, float grad_loss) {
  const int64_t N = labels.numel(), H = weight.size(-1);
  VLPAR_RETURN_IF_ERROR(check_shape("lm_head_loss_backward", "dx", dx, {tp.local_tokens(N), H}));
  VLPAR_CHECK(st.logits.defined() && st.logits.shape() == Shape({N, block.size()}),
              "lm_head_loss_backward: the stash does not come from a forward over {} tokens", N);
  VLPAR_RETURN_IF_ERROR(vocab_parallel_cross_entropy_backward(ctx, st.logits, st.logits, labels, st.lse, block,
                                                              ignore_index, st.num_valid, grad_loss));
  VLPAR_ASSIGN_OR_RETURN(Tensor dh, scratch(ctx, {N, H}));
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dh, dweight, {}, st.logits, st.h, weight));
  return region_enter_backward(tp, dx, dh);
}

}  // namespace vlpar::nn
