// Vocab-parallel embedding, LM head and cross-entropy. See include/vlpar/nn/vocab_parallel.hpp.
#include "vlpar/nn/vocab_parallel.hpp"

#include "nn_util.hpp"
#include "vlpar/kernels/embedding.hpp"
#include "vlpar/kernels/gemm.hpp"

namespace vlpar::nn {

using detail::check_shape;
using detail::check_weight;
using detail::scratch;

namespace {
/// Ids or labels: a 1D i32/i64 tensor (the ops check the values against the vocabulary).
Result<int64_t> count_ids(const char* op, const char* what, const TensorView& ids) {
  VLPAR_CHECK((ids.dtype == DType::kI32 || ids.dtype == DType::kI64) && ids.ndim() == 1 && ids.is_contiguous(),
              "{}: {} must be a contiguous 1D i32/i64 tensor, got {}", op, what, ids.to_string());
  return ids.numel();
}

VocabBlock vocab_block(Range block, int64_t vocab) { return VocabBlock{block.begin, vocab}; }

/// An activation view's dtype: f32 or bf16 (the blocks' activation dtypes, nn/config.hpp).
Result<DType> activation_of(const char* op, const char* what, const TensorView& v) {
  VLPAR_CHECK(v.dtype == DType::kF32 || v.dtype == DType::kBF16, "{}: {} is {} but activations are f32 or bf16", op,
              what, v.to_string());
  return v.dtype;
}
}  // namespace

Status vocab_parallel_embedding_forward(const Context& ctx, const TensorParallel& tp, TensorView out,
                                        TensorView table, TensorView ids, Range block, int64_t vocab) {
  const char* kName = "vocab_parallel_embedding_forward";
  VLPAR_ASSIGN_OR_RETURN(const int64_t N, count_ids(kName, "ids", ids));
  const int64_t H = table.size(-1);
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "table", table, {block.size(), H}));
  VLPAR_ASSIGN_OR_RETURN(const DType act, activation_of(kName, "out", out));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {tp.local_tokens(N), H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor partial, scratch(ctx, {N, H}, out.dtype));
  VLPAR_RETURN_IF_ERROR(embedding_forward(ctx, partial, table, ids, vocab_block(block, vocab)));
  return region_exit_forward(tp, out, partial);
}

Status vocab_parallel_embedding_backward(const Context& ctx, const TensorParallel& tp, TensorView dtable,
                                         TensorView dout, TensorView ids, Range block, TensorView overwritten,
                                         int64_t padding_idx) {
  const char* kName = "vocab_parallel_embedding_backward";
  if (detail::frozen(dtable)) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(const int64_t N, count_ids(kName, "ids", ids));
  const int64_t H = dtable.size(-1);
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dtable", dtable, {block.size(), H}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(const DType act, activation_of(kName, "dout", dout));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dout", dout, {tp.local_tokens(N), H}, act));
  if (!overwritten.empty()) {
    VLPAR_ASSIGN_OR_RETURN(const int64_t n_skip, count_ids(kName, "overwritten", overwritten));
    VLPAR_CHECK(n_skip == N, "{}: overwritten has {} entries but there are {} tokens", kName, n_skip, N);
  }
  VLPAR_ASSIGN_OR_RETURN(Tensor dpartial, scratch(ctx, {N, H}, dout.dtype));
  VLPAR_RETURN_IF_ERROR(region_exit_backward(tp, dpartial, dout));
  // The whole vocab for the id check: this rank's block inside tp blocks of the same size.
  return embedding_backward(ctx, dtable, dpartial, ids, vocab_block(block, block.size() * tp.size()), overwritten,
                            padding_idx);
}

Result<CrossEntropyResult> vocab_parallel_cross_entropy_forward(const Context& ctx, const TensorParallel& tp,
                                                                TensorView lse, TensorView logits, TensorView labels,
                                                                Range block, int64_t ignore_index) {
  const char* kName = "vocab_parallel_cross_entropy_forward";
  VLPAR_ASSIGN_OR_RETURN(const int64_t N, count_ids(kName, "labels", labels));
  const int64_t Vl = block.size();
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "logits", logits, {N, Vl}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "lse", lse, {N}, DType::kF32));
  CrossEntropyDesc desc;
  desc.ignore_index = ignore_index;
  desc.block = vocab_block(block, Vl * tp.size());
  // 1. Row max over the full vocab: the block's max, then all-reduce (max).
  VLPAR_ASSIGN_OR_RETURN(Tensor row_max, scratch(ctx, {N}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(vocab_shard_row_max(ctx, row_max, logits));
  if (tp.active()) VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(row_max, comm::ReduceOp::kMax));
  // 2. Σ exp(z − max) and the target logit (only its owner contributes), one all-reduce (sum) of [2, N].
  VLPAR_ASSIGN_OR_RETURN(Tensor sums, scratch(ctx, {2, N}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(vocab_shard_sums(ctx, sums, logits, row_max, labels, desc));
  if (tp.active()) VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(sums, comm::ReduceOp::kSum));
  // 3. lse and the loss, the same on every rank.
  return vocab_shard_loss(ctx, lse, row_max, sums, labels, desc);
}

Status vocab_parallel_cross_entropy_backward(const Context& ctx, const TensorParallel& tp, TensorView dlogits,
                                             TensorView logits, TensorView labels, TensorView lse, Range block,
                                             int64_t ignore_index, int64_t num_valid, float grad_loss) {
  const char* kName = "vocab_parallel_cross_entropy_backward";
  VLPAR_ASSIGN_OR_RETURN(const int64_t N, count_ids(kName, "labels", labels));
  const int64_t Vl = block.size();
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "logits", logits, {N, Vl}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dlogits", dlogits, {N, Vl}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "lse", lse, {N}, DType::kF32));
  CrossEntropyDesc desc;
  desc.ignore_index = ignore_index;
  desc.block = vocab_block(block, Vl * tp.size());
  return cross_entropy_backward(ctx, dlogits, logits, labels, lse, desc, num_valid, grad_loss);
}

Result<CrossEntropyResult> lm_head_loss_forward(const Context& ctx, const TensorParallel& tp, TensorView x,
                                                TensorView weight, TensorView labels, Range block,
                                                int64_t ignore_index, LmHeadLossStash& st) {
  const char* kName = "lm_head_loss_forward";
  const int64_t N = labels.numel(), H = x.size(-1);
  VLPAR_ASSIGN_OR_RETURN(const DType act, activation_of(kName, "x", x));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {tp.local_tokens(N), H}, act));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "weight", weight, {block.size(), H}));
  // Logits, their gradient (in place) and lse in f32 whatever the activation dtype (HF upcasts logits for the loss).
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {N, H}, x.dtype));
  VLPAR_ASSIGN_OR_RETURN(st.logits, scratch(ctx, {N, block.size()}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.lse, scratch(ctx, {N}, DType::kF32));
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
  VLPAR_ASSIGN_OR_RETURN(const DType act, activation_of("lm_head_loss_backward", "dx", dx));
  VLPAR_RETURN_IF_ERROR(check_shape("lm_head_loss_backward", "dx", dx, {tp.local_tokens(N), H}, act));
  VLPAR_CHECK(st.logits.defined() && st.logits.shape() == Shape({N, block.size()}) && st.h.dtype() == dx.dtype,
              "lm_head_loss_backward: the stash does not come from a forward over {} tokens", N);
  VLPAR_RETURN_IF_ERROR(vocab_parallel_cross_entropy_backward(ctx, tp, st.logits, st.logits, labels, st.lse, block,
                                                              ignore_index, st.num_valid, grad_loss));
  VLPAR_ASSIGN_OR_RETURN(Tensor dh, scratch(ctx, {N, H}, dx.dtype));
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dh, dweight, {}, st.logits, st.h, weight));
  return region_enter_backward(tp, dx, dh);
}

}  // namespace vlpar::nn
