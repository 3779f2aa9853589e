// Final RMSNorm + vocab-parallel LM head + cross-entropy. See include/vlpar/nn/lm_head.hpp.
#include "vlpar/nn/lm_head.hpp"

#include "nn_util.hpp"
#include "vlpar/kernels/norm.hpp"

namespace vlpar::nn {

using detail::check_grad;
using detail::check_shape;
using detail::check_weight;
using detail::frozen;
using detail::scratch;

LmHead::LmHead(const TransformerConfig& cfg, TensorParallel tp, LmHeadWeights w, LmHeadWeights grads,
               size_t norm_param)
    : cfg_(cfg), tp_(tp), w_(w), g_(grads), norm_param_(norm_param),
      vocab_block_(even_shard(cfg.vocab, tp.size(), tp.rank())) {}

Result<CrossEntropyResult> LmHead::forward(const Context& ctx, TensorView x, TensorView labels,
                                           LmHeadStash& st) const {
  const char* kName = "lm head forward";
  VLPAR_RETURN_IF_ERROR(cfg_.validate_tp(tp_.size()));
  const int64_t N = labels.numel(), Nl = tp_.local_tokens(N), H = cfg_.hidden;
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0, "{}: {} tokens do not split evenly over tp={} for sequence "
              "parallelism", kName, N, tp_.size());
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "x", x, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "norm weight", w_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "head weight", w_.weight, {vocab_block_.size(), H}));
  st.x = x;
  VLPAR_ASSIGN_OR_RETURN(st.rstd, scratch(ctx, {Nl}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.hn, scratch(ctx, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(ctx, st.hn, st.rstd, x, w_.norm, cfg_.eps));
  return lm_head_loss_forward(ctx, tp_, st.hn, w_.weight, labels, vocab_block_, cfg_.ignore_index, st.loss);
}

Status LmHead::backward(const Context& ctx, TensorView dx, TensorView labels, LmHeadStash& st, float grad_loss,
                        const GradReadyFn& ready) const {
  const char* kName = "lm head backward";
  const int64_t N = labels.numel(), Nl = tp_.local_tokens(N), H = cfg_.hidden;
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "dx", dx, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dx", dx, {Nl, H}, act));
  VLPAR_CHECK(st.hn.defined() && st.hn.shape() == Shape({Nl, H}) && st.hn.dtype() == act,
              "{}: the stash does not come from a forward over {} tokens", kName, N);
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "norm grad", g_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "head grad", g_.weight, {vocab_block_.size(), H}));
  VLPAR_ASSIGN_OR_RETURN(Tensor dhn, scratch(ctx, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(lm_head_loss_backward(ctx, tp_, dhn, g_.weight, w_.weight, labels, vocab_block_,
                                              cfg_.ignore_index, st.loss, grad_loss));
  // Tied: the weight's gradient is not final yet (the embedding backward adds to it); its owner reports it.
  if (ready && !cfg_.tie_word_embeddings && !frozen(g_.weight)) VLPAR_RETURN_IF_ERROR(ready(norm_param_ + 1));
  VLPAR_RETURN_IF_ERROR(detail::rmsnorm_backward_tp(ctx, tp_, dx, g_.norm, dhn, st.x, w_.norm, st.rstd, tp_.sp()));
  if (ready && !frozen(g_.norm)) VLPAR_RETURN_IF_ERROR(ready(norm_param_));
  return Status::Ok();
}

}  // namespace vlpar::nn
