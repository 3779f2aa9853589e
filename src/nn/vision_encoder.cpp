// Qwen3-VL vision encoder (blocks optionally tensor-parallel). See include/vlpar/nn/vision_encoder.hpp.
#include "vlpar/nn/vision_encoder.hpp"

#include <algorithm>
#include <string>

#include "nn_util.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/pos_embed.hpp"

namespace vlpar::nn {

using detail::check_shape;
using detail::scratch;

namespace {

constexpr const char* kEncoder = "vision encoder";

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

VisionEncoder::VisionEncoder(const VisionConfig& cfg, VisionEncoderWeights w, VisionEncoderWeights grads,
                             size_t first_block_param, TensorParallel tp)
    : cfg_(cfg), w_(std::move(w)), g_(std::move(grads)), tp_(tp), merger_(cfg, false, w_.merger, g_.merger) {
  for (size_t l = 0; l < w_.blocks.size(); ++l)
    layers_.emplace_back(cfg_, w_.blocks[l], block_or_empty(g_.blocks, l),
                         ParamRange{first_block_param + VisionLayer::kNumParams * l, VisionLayer::kNumParams}, tp_);
  for (size_t j = 0; j < w_.deepstack.size(); ++j)
    deepstack_.emplace_back(cfg_, true, w_.deepstack[j], merger_or_empty(g_.deepstack, j));
}

Status VisionEncoder::check_weights() const {
  VLPAR_RETURN_IF_ERROR(cfg_.validate());
  const int64_t Hv = cfg_.hidden, G = cfg_.pos_side();
  VLPAR_CHECK(w_.blocks.size() == size_t(cfg_.depth), "{}: {} block weight sets given for depth {}", kEncoder,
              w_.blocks.size(), cfg_.depth);
  VLPAR_CHECK(g_.blocks.empty() || g_.blocks.size() == size_t(cfg_.depth),
              "{}: {} block gradient sets given for depth {} (give none to freeze every block)", kEncoder,
              g_.blocks.size(), cfg_.depth);
  VLPAR_CHECK(w_.deepstack.size() == cfg_.deepstack_indexes.size(),
              "{}: {} deepstack merger weight sets given for {} deepstack indexes", kEncoder, w_.deepstack.size(),
              cfg_.deepstack_indexes.size());
  VLPAR_CHECK(g_.deepstack.empty() || g_.deepstack.size() == cfg_.deepstack_indexes.size(),
              "{}: {} deepstack merger gradient sets given for {} deepstack indexes", kEncoder, g_.deepstack.size(),
              cfg_.deepstack_indexes.size());
  VLPAR_RETURN_IF_ERROR(detail::check_weight(kEncoder, "patch_embed weight", w_.patch_w, {Hv, cfg_.patch_dim()}));
  VLPAR_RETURN_IF_ERROR(detail::check_weight(kEncoder, "patch_embed bias", w_.patch_b, {Hv}));
  VLPAR_RETURN_IF_ERROR(detail::check_weight(kEncoder, "pos_embed weight", w_.pos_embed, {G * G, Hv}));
  VLPAR_RETURN_IF_ERROR(
        detail::check_grad(kEncoder, "patch_embed weight gradient", g_.patch_w, {Hv, cfg_.patch_dim()}));
  VLPAR_RETURN_IF_ERROR(detail::check_grad(kEncoder, "patch_embed bias gradient", g_.patch_b, {Hv}));
  VLPAR_RETURN_IF_ERROR(detail::check_grad(kEncoder, "pos_embed weight gradient", g_.pos_embed, {G * G, Hv}));
  for (size_t l = 0; l < w_.blocks.size(); ++l) {
    const Status s = VisionBlock(cfg_, w_.blocks[l], block_or_empty(g_.blocks, l), tp_).check_weights();
    VLPAR_CHECK(s.ok(), "{}: block {}: {}", kEncoder, l, s.message());
  }
  VLPAR_RETURN_IF_ERROR(merger_.check_weights());
  for (size_t j = 0; j < deepstack_.size(); ++j) {
    const Status s = deepstack_[j].check_weights();
    VLPAR_CHECK(s.ok(), "{}: deepstack merger {}: {}", kEncoder, j, s.message());
  }
  return Status::Ok();
}

int VisionEncoder::lowest_trainable_stage() const {
  if (!g_.patch_w.empty() || !g_.patch_b.empty() || !g_.pos_embed.empty()) return 0;
  for (size_t l = 0; l < g_.blocks.size(); ++l)
    if (g_.blocks[l].any()) return int(l) + 1;
  return cfg_.depth + 1;
}

std::vector<std::pair<int, int>> VisionEncoder::segments() const {
  std::vector<int> taps(cfg_.deepstack_indexes.begin(), cfg_.deepstack_indexes.end());
  std::sort(taps.begin(), taps.end());
  taps.erase(std::unique(taps.begin(), taps.end()), taps.end());
  std::vector<std::pair<int, int>> cuts;
  int begin = 0;
  for (int t : taps) {
    cuts.emplace_back(begin, t + 1);
    begin = t + 1;
  }
  if (begin < cfg_.depth || cuts.empty()) cuts.emplace_back(begin, cfg_.depth);
  return cuts;
}

VisionStack VisionEncoder::blocks(int a, int b) const {
  return VisionStack(std::vector<VisionLayer>(layers_.begin() + a, layers_.begin() + b));
}

Result<std::pair<size_t, size_t>> VisionEncoder::locate(const VisionStash& st, int l) const {
  VLPAR_CHECK(l >= 0 && l < cfg_.depth, "{}: block {} outside [0, {})", kEncoder, l, cfg_.depth);
  const std::vector<std::pair<int, int>> cuts = segments();
  VLPAR_CHECK(st.segments.size() == cuts.size(), "{}: the stash does not come from a forward of this encoder",
              kEncoder);
  size_t s = 0;
  while (l >= cuts[s].second) ++s;  // cuts cover [0, depth) in order
  const auto i = size_t(l - cuts[s].first);
  VLPAR_CHECK(i < st.segments[s].layer.size() && i + 1 < st.segments[s].inputs.size(),
              "{}: the stash of block {} was consumed by backward", kEncoder, l);
  return std::pair{s, i};
}

Result<TensorView> VisionEncoder::hidden(const VisionStash& st, int k) const {
  VLPAR_CHECK(k >= 0 && k <= cfg_.depth, "{}: hidden state {} outside [0, {}]", kEncoder, k, cfg_.depth);
  if (k == 0) return st.embeds.view();
  VLPAR_ASSIGN_OR_RETURN(const auto at, locate(st, k - 1));
  return st.segments[at.first].inputs[at.second + 1];  // block k − 1's output
}

Result<VisionBlockStash*> VisionEncoder::block_stash(VisionStash& st, int l) const {
  VLPAR_ASSIGN_OR_RETURN(const auto at, locate(st, l));
  return &st.segments[at.first].layer[at.second];
}

Status VisionEncoder::forward(const Context& ctx, TensorView pixels, std::span<const VisionGrid> grids,
                              VisionStash& st, VisionOutput& out) const {
  VLPAR_RETURN_IF_ERROR(check_weights());
  VLPAR_CHECK(!grids.empty(), "{}: no grids given (one {{t, h, w}} per image or video)", kEncoder);
  {
    const Status s = check_vision_grids(cfg_, grids);
    VLPAR_CHECK(s.ok(), "{}: {}", kEncoder, s.message());
  }
  VLPAR_CHECK(ctx.allocator != nullptr, "{}: the context has no allocator for stash and scratch tensors", kEncoder);
  const int64_t np = vision_num_patches(grids), Hv = cfg_.hidden, unit = int64_t(cfg_.merge) * cfg_.merge;
  VLPAR_CHECK(pixels.ndim() == 2 && pixels.size(1) == cfg_.patch_dim(),
              "{}: pixels must be [Np, {}] (C·Tp·P·P = {}·{}·{}·{}), got {}", kEncoder, cfg_.patch_dim(),
              cfg_.in_channels, cfg_.temporal_patch, cfg_.patch, cfg_.patch, pixels.to_string());
  VLPAR_CHECK(pixels.size(0) == np, "{}: pixels has {} rows but the grids hold Σ t·h·w = {} patches", kEncoder,
              pixels.size(0), np);
  VLPAR_RETURN_IF_ERROR(check_shape(kEncoder, "pixels", pixels, {np, cfg_.patch_dim()}, DType::kF32));

  st.grids.assign(grids.begin(), grids.end());
  VLPAR_ASSIGN_OR_RETURN(st.seq, make_vision_seq(*ctx.allocator, cfg_, grids));
  st.pixels = pixels;
  st.deepstack.assign(deepstack_.size(), PatchMergerStash{});

  // Patch embedding plus the interpolated position embedding.
  VLPAR_ASSIGN_OR_RETURN(st.embeds, scratch(ctx, {np, Hv}, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(linear_forward(ctx, st.embeds, pixels, w_.patch_w, w_.patch_b));
  VLPAR_ASSIGN_OR_RETURN(Tensor pe, scratch(ctx, {np, Hv}, cfg_.activation));
  VLPAR_RETURN_IF_ERROR(pos_embed_forward(ctx, pe, w_.pos_embed, grids, pos_desc(cfg_)));
  VLPAR_RETURN_IF_ERROR(add_(ctx, st.embeds, pe));
  pe = Tensor{};

  // The blocks, segment by segment; after each segment the deepstack mergers that read its output.
  const std::vector<std::pair<int, int>> cuts = segments();
  st.segments.assign(cuts.size(), VisionStack::Stash{});
  out.deepstack.assign(deepstack_.size(), Tensor{});
  TensorView x = st.embeds;
  for (size_t k = 0; k < cuts.size(); ++k) {
    VLPAR_ASSIGN_OR_RETURN(x, blocks(cuts[k].first, cuts[k].second).forward(ctx, x, st.seq, st.segments[k]));
    for (size_t j = 0; j < deepstack_.size(); ++j) {
      if (cfg_.deepstack_indexes[j] != cuts[k].second - 1) continue;
      VLPAR_ASSIGN_OR_RETURN(out.deepstack[j], scratch(ctx, {np / unit, cfg_.out_hidden}, cfg_.activation));
      VLPAR_RETURN_IF_ERROR(deepstack_[j].forward(ctx, out.deepstack[j], x, st.deepstack[j]));
    }
  }
  VLPAR_ASSIGN_OR_RETURN(out.merged, scratch(ctx, {np / unit, cfg_.out_hidden}, cfg_.activation));
  return merger_.forward(ctx, out.merged, x, st.merger);
}

Status VisionEncoder::deepstack_into(const Context& ctx, int block, TensorView dh,
                                     std::span<const TensorView> d_deepstack, const VisionStash& st) const {
  Tensor ddeep;
  for (size_t j = 0; j < deepstack_.size(); ++j) {
    if (cfg_.deepstack_indexes[j] != block || j >= d_deepstack.size() || d_deepstack[j].empty()) continue;
    if (!ddeep.defined()) {
      VLPAR_ASSIGN_OR_RETURN(ddeep, scratch(ctx, {dh.size(0), dh.size(1)}, cfg_.activation));
    }
    VLPAR_RETURN_IF_ERROR(deepstack_[j].backward(ctx, ddeep, d_deepstack[j], st.deepstack[j]));
    VLPAR_RETURN_IF_ERROR(add_(ctx, dh, ddeep));
  }
  return Status::Ok();
}

Status VisionEncoder::backward(const Context& ctx, VisionStash& st, TensorView d_merged,
                               std::span<const TensorView> d_deepstack) const {
  const std::vector<std::pair<int, int>> cuts = segments();
  const int64_t np = st.seq.num_patches, Hv = cfg_.hidden, unit = int64_t(cfg_.merge) * cfg_.merge;
  VLPAR_CHECK(st.segments.size() == cuts.size() && st.embeds.defined() && st.deepstack.size() == deepstack_.size(),
              "{}: the stash does not come from a forward of this encoder", kEncoder);
  VLPAR_RETURN_IF_ERROR(check_shape(kEncoder, "d_merged", d_merged, {np / unit, cfg_.out_hidden},
                                          cfg_.activation));
  VLPAR_CHECK(d_deepstack.empty() || d_deepstack.size() == deepstack_.size(),
              "{}: {} deepstack gradients given for {} deepstack outputs (give none or one view each)", kEncoder,
              d_deepstack.size(), deepstack_.size());
  for (size_t j = 0; j < d_deepstack.size(); ++j)
    if (!d_deepstack[j].empty())
      VLPAR_RETURN_IF_ERROR(check_shape(kEncoder, ("d_deepstack[" + std::to_string(j) + "]").c_str(), d_deepstack[j],
                                        {np / unit, cfg_.out_hidden}, cfg_.activation));
  auto d_deep = [&](size_t j) { return j < d_deepstack.size() ? d_deepstack[j] : TensorView{}; };

  // hidden[k] (block k's input; hidden[depth] the last output) needs a gradient iff some trainable parameter reads
  // it directly or indirectly: iff lowest <= k. Block l runs iff its output needs one (l >= lowest - 1).
  const int lowest = lowest_trainable_stage();
  auto needs_grad = [&](int k) { return lowest <= k; };

  // Deepstack mergers whose input needs no gradient: parameter gradients only (if any are trainable).
  for (size_t j = 0; j < deepstack_.size(); ++j)
    if (!needs_grad(cfg_.deepstack_indexes[j] + 1) && !d_deep(j).empty() && j < g_.deepstack.size() &&
        g_.deepstack[j].any())
      VLPAR_RETURN_IF_ERROR(deepstack_[j].backward(ctx, TensorView{}, d_deep(j), st.deepstack[j]));

  const int depth = cfg_.depth;
  Tensor dh, dprev;  // ∂L/∂(the current segment's output), ∂L/∂(its input)
  if (needs_grad(depth)) {
    VLPAR_ASSIGN_OR_RETURN(dh, scratch(ctx, {np, Hv}, cfg_.activation));
  }
  VLPAR_RETURN_IF_ERROR(merger_.backward(ctx, dh, d_merged, st.merger));
  if (!needs_grad(depth)) return Status::Ok();

  for (size_t k = cuts.size(); k-- > 0;) {
    const auto [a, b] = cuts[k];
    VLPAR_RETURN_IF_ERROR(deepstack_into(ctx, b - 1, dh, d_deepstack, st));
    const int first = std::max(a, lowest - 1);  // the lowest block of the segment that runs
    const bool want_dx = first == a && needs_grad(a);
    if (want_dx && !dprev.defined()) {
      VLPAR_ASSIGN_OR_RETURN(dprev, scratch(ctx, {np, Hv}, cfg_.activation));
    }
    VLPAR_RETURN_IF_ERROR(blocks(a, b).backward(ctx, want_dx ? dprev.view() : TensorView{}, dh, st.seq,
                                                st.segments[size_t(k)], {}, size_t(first - a)));
    if (!want_dx) return Status::Ok();
    std::swap(dh, dprev);
  }

  // Embeddings: hidden[0] = pixels · patch_wᵀ + patch_b + interp(pos_embed); pixels need no gradient.
  VLPAR_RETURN_IF_ERROR(linear_backward(ctx, TensorView{}, g_.patch_w, g_.patch_b, dh, st.pixels, w_.patch_w));
  if (!g_.pos_embed.empty())
    VLPAR_RETURN_IF_ERROR(pos_embed_backward(ctx, g_.pos_embed, dh, st.grids, pos_desc(cfg_)));
  return Status::Ok();
}

}  // namespace vlpar::nn
