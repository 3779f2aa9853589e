// Tensor-parallel SwiGLU MLP block. See include/vlpar/nn/mlp_block.hpp.
#include "vlpar/nn/mlp_block.hpp"

#include "nn_util.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"

namespace vlpar::nn {

using detail::check_grad;
using detail::check_shape;
using detail::check_weight;
using detail::frozen;
using detail::scratch;
using detail::scratch_zeros;

MlpBlock::MlpBlock(const TransformerConfig& cfg, TensorParallel tp, MlpWeights w, MlpWeights grads,
                   size_t first_param)
    : cfg_(cfg), tp_(tp), w_(w), g_(grads), first_param_(first_param), il_(cfg.intermediate / tp.size()) {}

Status MlpBlock::forward(const Context& ctx, TensorView out, TensorView x, int64_t N, MlpStash& st) const {
  const char* kName = "mlp block forward";
  VLPAR_RETURN_IF_ERROR(cfg_.validate_tp(tp_.size()));
  const int64_t Nl = tp_.local_tokens(N), H = cfg_.hidden;
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0, "{}: {} tokens do not split evenly over tp={} for sequence "
              "parallelism", kName, N, tp_.size());
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "x", x, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "x", x, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "out", out, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "norm weight", w_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "gate_up weight", w_.gate_up, {2 * il_, H}));
  VLPAR_RETURN_IF_ERROR(check_weight(kName, "down weight", w_.down, {H, il_}));

  st.x = x;
  VLPAR_ASSIGN_OR_RETURN(st.rstd, scratch(ctx, {Nl}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {N, H}, act));
  VLPAR_ASSIGN_OR_RETURN(st.gu, scratch(ctx, {N, 2 * il_}, act));
  VLPAR_ASSIGN_OR_RETURN(st.act, scratch(ctx, {N, il_}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor hn, scratch(ctx, {Nl, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor partial, scratch(ctx, {N, H}, act));

  VLPAR_RETURN_IF_ERROR(rmsnorm_forward(ctx, hn, st.rstd, x, w_.norm, cfg_.eps));
  VLPAR_RETURN_IF_ERROR(region_enter_forward(tp_, st.h, hn));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.gu, st.h, w_.gate_up, {}));
  const TensorView gate = st.gu.view().slice(1, 0, il_), up = st.gu.view().slice(1, il_, 2 * il_);
  VLPAR_RETURN_IF_ERROR(swiglu_forward(ctx, st.act, gate, up));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, partial, st.act, w_.down, {}));
  VLPAR_RETURN_IF_ERROR(region_exit_forward(tp_, out, partial));
  return add_(ctx, out, x);
}

Status MlpBlock::backward(const Context& ctx, TensorView dx, TensorView dout, int64_t N, const MlpStash& st,
                          const GradReadyFn& ready) const {
  const char* kName = "mlp block backward";
  const int64_t Nl = tp_.local_tokens(N), H = cfg_.hidden;
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(kName, "dout", dout, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dx", dx, {Nl, H}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "dout", dout, {Nl, H}, act));
  VLPAR_CHECK(st.gu.defined() && st.gu.shape() == Shape({N, 2 * il_}) && st.gu.dtype() == act,
              "{}: the stash does not come from a {} forward over {} tokens", kName,
              dtype_name(act), N);
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "norm grad", g_.norm, {H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "gate_up grad", g_.gate_up, {2 * il_, H}));
  VLPAR_RETURN_IF_ERROR(check_grad(kName, "down grad", g_.down, {H, il_}));
  // ready(first_param + k) once that gradient is final; never for a frozen parameter (empty gradient view).
  auto mark = [&](size_t k, const TensorView& grad) {
    return frozen(grad) ? Status::Ok() : detail::mark_ready(ctx, ready, first_param_ + k);
  };

  VLPAR_ASSIGN_OR_RETURN(Tensor dpartial, scratch(ctx, {N, H}, act));
  VLPAR_ASSIGN_OR_RETURN(Tensor dact, scratch(ctx, {N, il_}, act));
  VLPAR_RETURN_IF_ERROR(region_exit_backward(tp_, dpartial, dout));
  VLPAR_RETURN_IF_ERROR(detail::linear_backward_split(ctx, dact, g_.down, {}, dpartial, dpartial, st.act, st.act,
                                                      w_.down));
  VLPAR_RETURN_IF_ERROR(mark(2, g_.down));

  VLPAR_ASSIGN_OR_RETURN(Tensor dgu, scratch(ctx, {N, 2 * il_}, act));
  const TensorView gate = st.gu.view().slice(1, 0, il_), up = st.gu.view().slice(1, il_, 2 * il_);
  VLPAR_RETURN_IF_ERROR(swiglu_backward(ctx, dgu.view().slice(1, 0, il_), dgu.view().slice(1, il_, 2 * il_), dact,
                                        gate, up));
  VLPAR_ASSIGN_OR_RETURN(Tensor dh, scratch(ctx, {N, H}, act));
  VLPAR_RETURN_IF_ERROR(detail::linear_backward_split(ctx, dh, g_.gate_up, {}, dgu, dgu, st.h, st.h, w_.gate_up));
  VLPAR_RETURN_IF_ERROR(mark(1, g_.gate_up));

  VLPAR_RETURN_IF_ERROR(detail::pre_norm_residual_backward(ctx, tp_, dx, g_.norm, dh, dout, st.x, w_.norm, st.rstd));
  return mark(0, g_.norm);
}

}  // namespace vlpar::nn
