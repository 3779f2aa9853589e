// Qwen3-VL patch merger (TP = 1). See include/vlpar/nn/patch_merger.hpp.
#include "vlpar/nn/patch_merger.hpp"

#include <string>

#include "nn_util.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"

namespace vlpar::nn {

using detail::as_shape;
using detail::check_shape;
using detail::scratch;

bool PatchMergerWeights::any() const {
  for (const TensorView* v : {&norm_w, &norm_b, &fc1_w, &fc1_b, &fc2_w, &fc2_b})
    if (!v->empty()) return true;
  return false;
}

PatchMerger::PatchMerger(const VisionConfig& cfg, bool postshuffle, PatchMergerWeights w, PatchMergerWeights grads)
    : cfg_(cfg), postshuffle_(postshuffle), w_(w), g_(grads) {}

Status PatchMerger::check_weights() const {
  const char* name = postshuffle_ ? "deepstack merger" : "patch merger";
  VLPAR_RETURN_IF_ERROR(cfg_.validate());
  const int64_t K = cfg_.merged_hidden(), D = cfg_.out_hidden, Hn = postshuffle_ ? K : cfg_.hidden;
  struct Entry {
    const char* what;
    const TensorView* w;
    const TensorView* g;
    Shape shape;
  };
  const Entry entries[] = {
      {"norm weight", &w_.norm_w, &g_.norm_w, {Hn}}, {"norm bias", &w_.norm_b, &g_.norm_b, {Hn}},
      {"fc1 weight", &w_.fc1_w, &g_.fc1_w, {K, K}},  {"fc1 bias", &w_.fc1_b, &g_.fc1_b, {K}},
      {"fc2 weight", &w_.fc2_w, &g_.fc2_w, {D, K}},  {"fc2 bias", &w_.fc2_b, &g_.fc2_b, {D}},
  };
  for (const Entry& e : entries) {
    VLPAR_RETURN_IF_ERROR(detail::check_weight(name, e.what, *e.w, e.shape));
    VLPAR_RETURN_IF_ERROR(detail::check_grad(name, (std::string(e.what) + " gradient").c_str(), *e.g, e.shape));
  }
  return Status::Ok();
}

Status PatchMerger::forward(const Context& ctx, TensorView out, TensorView x, PatchMergerStash& st) const {
  const char* name = postshuffle_ ? "deepstack merger" : "patch merger";
  VLPAR_RETURN_IF_ERROR(check_weights());
  const int64_t Hv = cfg_.hidden, K = cfg_.merged_hidden(), D = cfg_.out_hidden, unit = int64_t(cfg_.merge) * cfg_.merge;
  VLPAR_CHECK(x.ndim() == 2, "{}: x must be [N, {}], got {}", name, Hv, x.to_string());
  const int64_t N = x.size(0), M = N / unit;
  VLPAR_CHECK(N % unit == 0, "{}: {} patches are not a whole number of {}-patch merge windows", name, N, unit);
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(name, "x", x, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(name, "x", x, {N, Hv}, act));
  VLPAR_RETURN_IF_ERROR(check_shape(name, "out", out, {M, D}, act));

  st.x = x;
  const int64_t stat_rows = postshuffle_ ? M : N;
  VLPAR_ASSIGN_OR_RETURN(st.mean, scratch(ctx, {stat_rows}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.rstd, scratch(ctx, {stat_rows}, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(st.h, scratch(ctx, {M, K}, act));
  VLPAR_ASSIGN_OR_RETURN(st.f1, scratch(ctx, {M, K}, act));
  VLPAR_ASSIGN_OR_RETURN(st.act, scratch(ctx, {M, K}, act));
  // [N, Hv] and [N/m², m²·Hv] are the same contiguous memory: the view is the "shuffle".
  if (postshuffle_)
    VLPAR_RETURN_IF_ERROR(layernorm_forward(ctx, st.h, st.mean, st.rstd, as_shape(x, {M, K}), w_.norm_w, w_.norm_b,
                                            cfg_.eps));
  else
    VLPAR_RETURN_IF_ERROR(layernorm_forward(ctx, as_shape(st.h, {N, Hv}), st.mean, st.rstd, x, w_.norm_w, w_.norm_b,
                                            cfg_.eps));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.f1, st.h, w_.fc1_w, w_.fc1_b));
  VLPAR_RETURN_IF_ERROR(gelu_forward(ctx, st.act, st.f1, GeluKind::kErf));
  return linear_forward(ctx, out, st.act, w_.fc2_w, w_.fc2_b);
}

Status PatchMerger::backward(const Context& ctx, TensorView dx, TensorView dout, const PatchMergerStash& st) const {
  const char* name = postshuffle_ ? "deepstack merger" : "patch merger";
  const int64_t Hv = cfg_.hidden, K = cfg_.merged_hidden(), D = cfg_.out_hidden;
  VLPAR_CHECK(st.h.defined() && st.h.shape()[1] == K && st.h.dtype() == cfg_.activation,
              "{}: the stash does not come from a forward", name);
  const int64_t M = st.h.shape()[0], N = M * cfg_.merge * cfg_.merge;
  VLPAR_ASSIGN_OR_RETURN(const DType act, detail::activation_dtype(name, "dout", dout, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(check_shape(name, "dout", dout, {M, D}, act));
  if (!dx.empty()) VLPAR_RETURN_IF_ERROR(check_shape(name, "dx", dx, {N, Hv}, act));

  const bool need_dx = !dx.empty();
  const bool need_dh = need_dx || !g_.norm_w.empty() || !g_.norm_b.empty();
  const bool need_df1 = need_dh || !g_.fc1_w.empty() || !g_.fc1_b.empty();
  Tensor dact, df1, dh, dxs;
  if (need_df1) {
    VLPAR_ASSIGN_OR_RETURN(dact, scratch(ctx, {M, K}, act));
  }
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dact, g_.fc2_w, g_.fc2_b, dout, st.act, w_.fc2_w));
  if (!need_df1) return Status::Ok();
  VLPAR_ASSIGN_OR_RETURN(df1, scratch(ctx, {M, K}, act));
  VLPAR_RETURN_IF_ERROR(gelu_backward(ctx, df1, dact, st.f1, GeluKind::kErf));
  if (need_dh) {
    VLPAR_ASSIGN_OR_RETURN(dh, scratch(ctx, {M, K}, act));
  }
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, dh, g_.fc1_w, g_.fc1_b, df1, st.h, w_.fc1_w));
  if (!need_dh) return Status::Ok();
  TensorView dxv = dx;
  if (!need_dx) {  // only the norm parameters want this gradient
    VLPAR_ASSIGN_OR_RETURN(dxs, scratch(ctx, {N, Hv}, act));
    dxv = dxs;
  }
  if (postshuffle_)
    return layernorm_backward(ctx, as_shape(dxv, {M, K}), g_.norm_w, g_.norm_b, dh, as_shape(st.x, {M, K}),
                              w_.norm_w, st.mean, st.rstd);
  return layernorm_backward(ctx, dxv, g_.norm_w, g_.norm_b, as_shape(dh, {N, Hv}), st.x, w_.norm_w, st.mean,
                            st.rstd);
}

}  // namespace vlpar::nn
