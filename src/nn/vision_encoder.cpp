// Qwen3-VL vision encoder (TP = 1). See include/vlpar/nn/vision_encoder.hpp.
#include "vlpar/nn/vision_encoder.hpp"

#include <string>

#include "nn_util.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/pos_embed.hpp"

namespace vlpar::nn {

using detail::check_shape;
using detail::scratch;

namespace {

constexpr const char* kName = "vision encoder";

VisionBlockWeights block_or_empty(const std::vector<VisionBlockWeights>& v, size_t i) {
  return i < v.size() ? v[i] : VisionBlockWeights{};
}
PatchMergerWeights merger_or_empty(const std::vector<PatchMergerWeights>& v, size_t i) {
  return i < v.size() ? v[i] : PatchMergerWeights{};
}

PosEmbedDesc pos_desc(const VisionConfig& cfg) {
  PosEmbedDesc d;
  d.side = cfg.pos_side();
  d.merge = cfg.merge;
  d.linspace = cfg.pos_embed_linspace;
  return d;
}

}  // namespace

VisionEncoder::VisionEncoder(const VisionConfig& cfg, VisionEncoderWeights w, VisionEncoderWeights grads)
    : cfg_(cfg), w_(std::move(w)), g_(std::move(grads)), merger_(cfg, false, w_.merger, g_.merger) {
  for (size_t l = 0; l < w_.blocks.size(); ++l) blocks_.emplace_back(cfg_, w_.blocks[l], block_or_empty(g_.blocks, l));
  for (size_t j = 0; j < w_.deepstack.size(); ++j)
    deepstack_.emplace_back(cfg_, true, w_.deepstack[j], merger_or_empty(g_.deepstack, j));
}

Status VisionEncoder::check_weights() const {
  VLPAR_RETURN_IF_ERROR(cfg_.validate());
  const int64_t Hv = cfg_.hidden, G = cfg_.pos_side();
  VLPAR_CHECK(w_.blocks.size() == size_t(cfg_.depth), "{}: {} block weight sets given for depth {}", kName,
              w_.blocks.size(), cfg_.depth);
  VLPAR_CHECK(g_.blocks.empty() || g_.blocks.size() == size_t(cfg_.depth),
              "{}: {} block gradient sets given for depth {} (give none to freeze every block)", kName,
              g_.blocks.size(), cfg_.depth);
  VLPAR_CHECK(w_.deepstack.size() == cfg_.deepstack_indexes.size(),
              "{}: {} deepstack merger weight sets given for {} deepstack indexes", kName, w_.deepstack.size(),
              cfg_.deepstack_indexes.size());
  VLPAR_CHECK(g_.deepstack.empty() || g_.deepstack.size() == cfg_.deepstack_indexes.size(),
              "{}: {} deepstack merger gradient sets given for {} deepstack indexes", kName, g_.deepstack.size(),
              cfg_.deepstack_indexes.size());
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "patch_embed weight", w_.patch_w, {Hv, cfg_.patch_dim()}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "patch_embed bias", w_.patch_b, {Hv}));
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "pos_embed weight", w_.pos_embed, {G * G, Hv}));
  if (!g_.patch_w.empty())
    VLPAR_RETURN_IF_ERROR(check_shape(kName, "patch_embed weight gradient", g_.patch_w, {Hv, cfg_.patch_dim()}));
  if (!g_.patch_b.empty()) VLPAR_RETURN_IF_ERROR(check_shape(kName, "patch_embed bias gradient", g_.patch_b, {Hv}));
  if (!g_.pos_embed.empty())
    VLPAR_RETURN_IF_ERROR(check_shape(kName, "pos_embed weight gradient", g_.pos_embed, {G * G, Hv}));
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Status s = blocks_[l].check_weights();
    VLPAR_CHECK(s.ok(), "{}: block {}: {}", kName, l, s.message());
  }
  VLPAR_RETURN_IF_ERROR(merger_.check_weights());
  for (size_t j = 0; j < deepstack_.size(); ++j) {
    const Status s = deepstack_[j].check_weights();
    VLPAR_CHECK(s.ok(), "{}: deepstack merger {}: {}", kName, j, s.message());
  }
  return Status::Ok();
}

int VisionEncoder::lowest_trainable_stage() const {
  if (!g_.patch_w.empty() || !g_.patch_b.empty() || !g_.pos_embed.empty()) return 0;
  for (size_t l = 0; l < g_.blocks.size(); ++l)
    if (g_.blocks[l].any()) return int(l) + 1;
  return cfg_.depth + 1;
}

Status VisionEncoder::forward(const Context& ctx, TensorView pixels, std::span<const VisionGrid> grids,
                              VisionStash& st, VisionOutput& out) const {
  VLPAR_RETURN_IF_ERROR(check_weights());
  VLPAR_CHECK(!grids.empty(), "{}: no grids given (one {{t, h, w}} per image or video)", kName);
  {
    const Status s = check_vision_grids(cfg_, grids);
    VLPAR_CHECK(s.ok(), "{}: {}", kName, s.message());
  }
  VLPAR_CHECK(ctx.allocator != nullptr, "{}: the context has no allocator for stash and scratch tensors", kName);
  const int64_t np = vision_num_patches(grids), Hv = cfg_.hidden, unit = int64_t(cfg_.merge) * cfg_.merge;
  VLPAR_CHECK(pixels.ndim() == 2 && pixels.size(1) == cfg_.patch_dim(),
              "{}: pixels must be [Np, {}] (C·Tp·P·P = {}·{}·{}·{}), got {}", kName, cfg_.patch_dim(),
              cfg_.in_channels, cfg_.temporal_patch, cfg_.patch, cfg_.patch, pixels.to_string());
  VLPAR_CHECK(pixels.size(0) == np, "{}: pixels has {} rows but the grids hold Σ t·h·w = {} patches", kName,
              pixels.size(0), np);
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "pixels", pixels, {np, cfg_.patch_dim()}));

  st.grids.assign(grids.begin(), grids.end());
  VLPAR_ASSIGN_OR_RETURN(st.seq, make_vision_seq(*ctx.allocator, cfg_, grids));
  st.pixels = pixels;
  st.hidden.assign(size_t(cfg_.depth) + 1, Tensor{});
  st.blocks.assign(size_t(cfg_.depth), VisionBlockStash{});
  st.deepstack.assign(deepstack_.size(), PatchMergerStash{});
  for (Tensor& h : st.hidden) {
    VLPAR_ASSIGN_OR_RETURN(h, scratch(ctx, {np, Hv}));
  }

  // Patch embedding plus the interpolated position embedding.
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.hidden[0], pixels, w_.patch_w, w_.patch_b));
  VLPAR_ASSIGN_OR_RETURN(Tensor pe, scratch(ctx, {np, Hv}));
  VLPAR_RETURN_IF_ERROR(pos_embed_forward(ctx, pe, w_.pos_embed, grids, pos_desc(cfg_)));
  VLPAR_RETURN_IF_ERROR(detail::add_(ctx, st.hidden[0], pe));

  out.deepstack.assign(deepstack_.size(), Tensor{});
  for (int l = 0; l < cfg_.depth; ++l) {
    VLPAR_RETURN_IF_ERROR(
        blocks_[size_t(l)].forward(ctx, st.hidden[size_t(l) + 1], st.hidden[size_t(l)], st.seq, st.blocks[size_t(l)]));
    for (size_t j = 0; j < deepstack_.size(); ++j) {
      if (cfg_.deepstack_indexes[j] != l) continue;
      VLPAR_ASSIGN_OR_RETURN(out.deepstack[j], scratch(ctx, {np / unit, cfg_.out_hidden}));
      VLPAR_RETURN_IF_ERROR(deepstack_[j].forward(ctx, out.deepstack[j], st.hidden[size_t(l) + 1], st.deepstack[j]));
    }
  }
  VLPAR_ASSIGN_OR_RETURN(out.merged, scratch(ctx, {np / unit, cfg_.out_hidden}));
  return merger_.forward(ctx, out.merged, st.hidden.back(), st.merger);
}

Status VisionEncoder::backward(const Context& ctx, const VisionStash& st, TensorView d_merged,
                               std::span<const TensorView> d_deepstack) const {
  const int64_t np = st.seq.num_patches, Hv = cfg_.hidden, unit = int64_t(cfg_.merge) * cfg_.merge;
  VLPAR_CHECK(st.hidden.size() == size_t(cfg_.depth) + 1 && st.blocks.size() == size_t(cfg_.depth) &&
                  st.hidden.back().defined() && st.deepstack.size() == deepstack_.size(),
              "{}: the stash does not come from a forward of this encoder", kName);
  VLPAR_RETURN_IF_ERROR(check_shape(kName, "d_merged", d_merged, {np / unit, cfg_.out_hidden}));
  VLPAR_CHECK(d_deepstack.empty() || d_deepstack.size() == deepstack_.size(),
              "{}: {} deepstack gradients given for {} deepstack outputs (give none or one view each)", kName,
              d_deepstack.size(), deepstack_.size());
  for (size_t j = 0; j < d_deepstack.size(); ++j)
    if (!d_deepstack[j].empty())
      VLPAR_RETURN_IF_ERROR(check_shape(kName, ("d_deepstack[" + std::to_string(j) + "]").c_str(), d_deepstack[j],
                                        {np / unit, cfg_.out_hidden}));
  auto d_deep = [&](size_t j) { return j < d_deepstack.size() ? d_deepstack[j] : TensorView{}; };

  // hidden[k] needs a gradient iff some trainable parameter reads it directly or indirectly: iff lowest ≤ k.
  const int lowest = lowest_trainable_stage();
  auto needs_grad = [&](int k) { return lowest <= k; };

  // Deepstack mergers whose input needs no gradient: parameter gradients only (if any are trainable).
  for (size_t j = 0; j < deepstack_.size(); ++j)
    if (!needs_grad(cfg_.deepstack_indexes[j] + 1) && !d_deep(j).empty() && j < g_.deepstack.size() &&
        g_.deepstack[j].any())
      VLPAR_RETURN_IF_ERROR(deepstack_[j].backward(ctx, TensorView{}, d_deep(j), st.deepstack[j]));

  const int depth = cfg_.depth;
  Tensor dh;  // ∂L/∂hidden[k] for the current k
  if (needs_grad(depth)) {
    VLPAR_ASSIGN_OR_RETURN(dh, scratch(ctx, {np, Hv}));
  }
  VLPAR_RETURN_IF_ERROR(merger_.backward(ctx, dh, d_merged, st.merger));
  if (!needs_grad(depth)) return Status::Ok();

  Tensor ddeep, dprev;
  for (int l = depth - 1; l >= 0; --l) {
    // dh is ∂L/∂hidden[l+1] from above; add the deepstack mergers that read hidden[l+1].
    for (size_t j = 0; j < deepstack_.size(); ++j) {
      if (cfg_.deepstack_indexes[j] != l || d_deep(j).empty()) continue;
      if (!ddeep.defined()) {
        VLPAR_ASSIGN_OR_RETURN(ddeep, scratch(ctx, {np, Hv}));
      }
      VLPAR_RETURN_IF_ERROR(deepstack_[j].backward(ctx, ddeep, d_deep(j), st.deepstack[j]));
      VLPAR_RETURN_IF_ERROR(detail::add_(ctx, dh, ddeep));
    }
    const bool below = needs_grad(l);  // does anything at or below hidden[l] train?
    if (below && !dprev.defined()) {
      VLPAR_ASSIGN_OR_RETURN(dprev, scratch(ctx, {np, Hv}));
    }
    VLPAR_RETURN_IF_ERROR(blocks_[size_t(l)].backward(ctx, below ? dprev.view() : TensorView{}, dh, st.seq,
                                                      st.blocks[size_t(l)]));
    if (!below) return Status::Ok();
    std::swap(dh, dprev);
  }

  // Embeddings: hidden[0] = pixels · patch_wᵀ + patch_b + interp(pos_embed); pixels need no gradient.
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, TensorView{}, g_.patch_w, g_.patch_b, dh, st.pixels, w_.patch_w));
  if (!g_.pos_embed.empty())
    VLPAR_RETURN_IF_ERROR(pos_embed_backward(ctx, g_.pos_embed, dh, st.grids, pos_desc(cfg_)));
  return Status::Ok();
}

}  // namespace vlpar::nn
