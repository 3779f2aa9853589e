// One vision block as an nn::Layer. See include/vlpar/nn/vision_layer.hpp.
#include "vlpar/nn/vision_layer.hpp"

namespace vlpar::nn {

VisionLayer::VisionLayer(const VisionConfig& cfg, VisionBlockWeights w, VisionBlockWeights grads, ParamRange params,
                         TensorParallel tp)
    : cfg_(cfg), tp_(tp.size()), block_(cfg, w, grads, tp), params_(params) {
  const TensorView g[kNumParams] = {grads.norm1_w, grads.norm1_b, grads.qkv_w,   grads.qkv_b,
                                    grads.proj_w,  grads.proj_b,  grads.norm2_w, grads.norm2_b,
                                    grads.fc1_w,   grads.fc1_b,   grads.fc2_w,   grads.fc2_b};
  for (size_t i = 0; i < kNumParams; ++i) has_grad_[i] = !g[i].empty();
}

bool VisionLayer::trainable() const {
  for (bool b : has_grad_)
    if (b) return true;
  return false;
}

Status VisionLayer::backward(const Context& ctx, TensorView dx, TensorView dout, const Seq& seq, Stash& st,
                             const GradReadyFn& ready) const {
  VLPAR_RETURN_IF_ERROR(block_.backward(ctx, dx, dout, seq, st));
  if (!ready) return Status::Ok();
  for (size_t i = kNumParams; i-- > 0;)
    if (has_grad_[i]) VLPAR_RETURN_IF_ERROR(ready(params_.first + i));
  return Status::Ok();
}

int64_t VisionLayer::stash_bytes(int64_t tokens, Recompute mode) const {
  if (mode == Recompute::kFull) return 0;
  const int64_t N = tokens, Hv = cfg_.hidden, Iv = cfg_.intermediate / tp_, heads = cfg_.heads / tp_, hv = Hv / tp_;
  // mean1, rstd1, mean2, rstd2 [N]; h1, x1, h2 [N, Hv]; attn [N, Hv/tp]; qkv [N, 3Hv/tp]; lse [heads/tp, N];
  // f1, act [N, Iv/tp]: statistics 4 bytes, activations in the config's activation dtype
  const int64_t a = int64_t(dtype_size(cfg_.activation));
  return 4 * (4 * N + heads * N) + a * (3 * N * Hv + N * hv + 3 * N * hv + 2 * N * Iv);
}

double VisionLayer::flops(const Seq& seq) const {
  const double N = double(seq.num_patches), Hv = double(cfg_.hidden), Iv = double(cfg_.intermediate);
  double f = 2 * N * Hv * 3 * Hv + 2 * N * Hv * Hv + 2 * 2 * N * Hv * Iv;  // qkv, proj, fc1 + fc2
  const std::vector<int32_t>& cu = seq.host_cu_seqlens;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const double len = double(cu[s + 1] - cu[s]);
    f += 4 * Hv * len * len;  // QKᵀ and PV over every pair of the segment, all heads
  }
  return f / double(tp_);  // every term is split over the heads or the MLP width
}

}  // namespace vlpar::nn
