// The public cross-entropy ops (plain, fused with the LM-head GEMM, label shifting): every argument checked once
// here (labels against the vocabulary included), then the device's implementation (CPU:
// src/kernels/cpu/cross_entropy.cpp; no CUDA kernel yet). Test: tests/unit/test_losses.cpp.
#include "vlpar/kernels/cross_entropy.hpp"

#include <cstdint>

#include "../cpu_impl.hpp"
#include "vlpar/core/checks.hpp"

namespace vlpar {
namespace {

/// Labels i32/i64 [n] on the CPU, each in [0, vocab) or ignore_index.
Status check_labels(const char* op, const TensorView& labels, int64_t n, int64_t vocab, int64_t ignore) {
  VLPAR_RETURN_IF_ERROR(check_index_vector(op, "labels", labels, n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = index_at(labels, i);
    VLPAR_CHECK(y == ignore || (y >= 0 && y < vocab),
                "{}: label {} at row {} is outside [0, {}) and is not ignore_index {}", op, y, i, vocab, ignore);
  }
  return Status::Ok();
}

/// The whole vocabulary in one block (the fused and plain forwards need every logit of a row).
Status check_whole_vocab(const char* op, const CrossEntropyDesc& desc, int64_t V) {
  VLPAR_CHECK(desc.block.begin == 0 && desc.block.full(V) == V,
              "{}: the logits hold ids [{}, {}) of {}; a vocab block needs the vocab_shard_* ops", op,
              desc.block.begin, desc.block.begin + V, desc.block.full(V));
  return Status::Ok();
}

/// The block inside its vocabulary; labels checked against the whole vocabulary.
Status check_block_labels(const char* op, const TensorView& labels, int64_t n, int64_t V,
                          const CrossEntropyDesc& desc) {
  const int64_t vocab = desc.block.full(V);
  VLPAR_CHECK(desc.block.begin >= 0 && desc.block.vocab >= 0 && desc.block.begin + V <= vocab,
              "{}: the vocab block [{}, {}) is not inside a vocabulary of {} ids", op, desc.block.begin,
              desc.block.begin + V, vocab);
  return check_labels(op, labels, n, vocab, desc.ignore_index);
}

/// logits [N, V_blk] with a contiguous last dim, a float storage dtype, on the CPU.
Status check_logits(const char* op, const TensorView& logits) {
  VLPAR_CHECK(logits.ndim() == 2 && logits.stride(1) == 1, "{}: logits must be [N, V] with contiguous V, got {}",
              op, logits.to_string());
  return check_cpu_float(logits, op);
}

/// sums [2, n] f32 on the CPU, contiguous (row 0 Σ exp, row 1 the target logits).
Status check_sums(const char* op, const TensorView& sums, int64_t n) {
  VLPAR_CHECK(sums.dtype == DType::kF32 && sums.is_contiguous() && sums.shape == Shape({2, n}) && sums.device.is_cpu(),
              "{}: sums must be a contiguous f32 CPU [2, {}], got {}", op, n, sums.to_string());
  return Status::Ok();
}

}  // namespace

Result<CrossEntropyResult> cross_entropy_forward(const Context& ctx, TensorView lse, TensorView logits,
                                                 TensorView labels, const CrossEntropyDesc& desc) {
  const char* op = "cross_entropy_forward";
  VLPAR_RETURN_IF_ERROR(check_logits(op, logits));
  const int64_t N = logits.size(0), V = logits.size(1);
  VLPAR_RETURN_IF_ERROR(check_whole_vocab(op, desc, V));
  VLPAR_RETURN_IF_ERROR(check_labels(op, labels, N, V, desc.ignore_index));
  if (!lse.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "lse", lse, N, DType::kF32));
  return cpu_impl::cross_entropy_forward(ctx, lse, logits, labels, desc);
}

Status cross_entropy_backward(const Context& ctx, TensorView dlogits, TensorView logits, TensorView labels,
                              TensorView lse, const CrossEntropyDesc& desc, int64_t num_valid, float grad_loss) {
  const char* op = "cross_entropy_backward";
  VLPAR_CHECK(logits.ndim() == 2 && logits.stride(1) == 1, "{}: logits must be [N, V], got {}", op,
              logits.to_string());
  VLPAR_CHECK(dlogits.ndim() == 2 && dlogits.shape == logits.shape && dlogits.stride(1) == 1 &&
                  dlogits.dtype == logits.dtype,
              "{}: dlogits {} must match logits {}", op, dlogits.to_string(), logits.to_string());
  VLPAR_RETURN_IF_ERROR(check_cpu_float(logits, op));
  const int64_t N = logits.size(0), V = logits.size(1);
  VLPAR_RETURN_IF_ERROR(check_block_labels(op, labels, N, V, desc));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "lse", lse, N, DType::kF32));
  return cpu_impl::cross_entropy_backward(ctx, dlogits, logits, labels, lse, desc, num_valid, grad_loss);
}

Status vocab_shard_row_max(const Context& ctx, TensorView row_max, TensorView logits) {
  const char* op = "vocab_shard_row_max";
  VLPAR_RETURN_IF_ERROR(check_logits(op, logits));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "row_max", row_max, logits.size(0), DType::kF32));
  return cpu_impl::vocab_shard_row_max(ctx, row_max, logits);
}

Status vocab_shard_sums(const Context& ctx, TensorView sums, TensorView logits, TensorView row_max,
                        TensorView labels, const CrossEntropyDesc& desc) {
  const char* op = "vocab_shard_sums";
  VLPAR_RETURN_IF_ERROR(check_logits(op, logits));
  const int64_t N = logits.size(0);
  VLPAR_RETURN_IF_ERROR(check_vector(op, "row_max", row_max, N, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_sums(op, sums, N));
  VLPAR_RETURN_IF_ERROR(check_block_labels(op, labels, N, logits.size(1), desc));
  return cpu_impl::vocab_shard_sums(ctx, sums, logits, row_max, labels, desc);
}

Result<CrossEntropyResult> vocab_shard_loss(const Context& ctx, TensorView lse, TensorView row_max, TensorView sums,
                                            TensorView labels, const CrossEntropyDesc& desc) {
  const char* op = "vocab_shard_loss";
  const int64_t N = row_max.numel();
  VLPAR_RETURN_IF_ERROR(check_vector(op, "row_max", row_max, N, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "lse", lse, N, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_sums(op, sums, N));
  VLPAR_RETURN_IF_ERROR(check_labels(op, labels, N, INT64_MAX, desc.ignore_index));
  return cpu_impl::vocab_shard_loss(ctx, lse, row_max, sums, labels, desc);
}

Result<CrossEntropyResult> linear_cross_entropy(const Context& ctx, TensorView dhidden, TensorView dweight,
                                                TensorView hidden, TensorView weight, TensorView labels,
                                                const CrossEntropyDesc& desc, float grad_loss) {
  const char* op = "linear_cross_entropy";
  VLPAR_CHECK(hidden.ndim() == 2 && weight.ndim() == 2 && hidden.size(1) == weight.size(1),
              "{}: hidden [N, Hd] {} and weight [V, Hd] {} disagree", op, hidden.to_string(), weight.to_string());
  VLPAR_CHECK(hidden.stride(1) == 1 && weight.stride(1) == 1, "{}: hidden and weight need a contiguous last dim", op);
  VLPAR_RETURN_IF_ERROR(check_cpu_float(hidden, op));
  VLPAR_RETURN_IF_ERROR(check_cpu_float(weight, op));
  VLPAR_RETURN_IF_ERROR(check_whole_vocab(op, desc, weight.size(0)));
  VLPAR_RETURN_IF_ERROR(check_labels(op, labels, hidden.size(0), weight.size(0), desc.ignore_index));
  if (!dhidden.empty())
    VLPAR_CHECK(dhidden.shape == hidden.shape && dhidden.dtype == DType::kF32 && dhidden.is_contiguous(),
                "{}: dhidden {} must be contiguous f32 shaped like hidden {}", op, dhidden.to_string(),
                hidden.to_string());
  if (!dweight.empty())
    VLPAR_CHECK(dweight.shape == weight.shape && dweight.dtype == DType::kF32 && dweight.is_contiguous(),
                "{}: dweight {} must be contiguous f32 shaped like weight {}", op, dweight.to_string(),
                weight.to_string());
  VLPAR_CHECK(desc.chunk_tokens >= 0, "{}: chunk_tokens must be >= 0", op);
  return cpu_impl::linear_cross_entropy(ctx, dhidden, dweight, hidden, weight, labels, desc, grad_loss);
}

Status shift_labels_for_causal_lm(TensorView out, TensorView labels, TensorView cu_seqlens, int64_t ignore_index) {
  const char* op = "shift_labels_for_causal_lm";
  const int64_t n = labels.numel();
  VLPAR_CHECK(labels.dtype == DType::kI32 || labels.dtype == DType::kI64, "{}: labels must be i32 or i64", op);
  VLPAR_RETURN_IF_ERROR(check_vector(op, "labels", labels, n, labels.dtype));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "out", out, n, labels.dtype));
  VLPAR_CHECK(cu_seqlens.ndim() == 1 && cu_seqlens.size(0) >= 2, "{}: cu_seqlens must be [B+1] with B >= 1", op);
  VLPAR_RETURN_IF_ERROR(check_vector(op, "cu_seqlens", cu_seqlens, cu_seqlens.size(0), DType::kI32));
  const int32_t* cu = cu_seqlens.ptr<int32_t>();
  const int64_t B = cu_seqlens.size(0) - 1;
  VLPAR_CHECK(cu[0] == 0 && cu[B] == n, "{}: cu_seqlens must start at 0 and end at {} tokens, got {} .. {}", op, n,
              cu[0], cu[B]);
  for (int64_t b = 0; b < B; ++b)
    VLPAR_CHECK(cu[b + 1] >= cu[b], "{}: cu_seqlens decreases at entry {} ({} -> {})", op, b + 1, cu[b], cu[b + 1]);
  return cpu_impl::shift_labels_for_causal_lm(out, labels, cu_seqlens, ignore_index);
}

}  // namespace vlpar
