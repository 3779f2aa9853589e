// Qwen3-VL forward and backward over the nn blocks. See model.hpp.
#include "model.hpp"

#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "vlpar/kernels/cross_entropy.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/index_rows.hpp"
#include "vlpar/nn/vocab_parallel.hpp"

namespace qwen3vl {

using vlpar::DType;
using vlpar::InitRule;
using vlpar::Shape;
using vlpar::StatusCode;
namespace nn = vlpar::nn;

namespace {

constexpr size_t kNotHeld = SIZE_MAX;      // the registry index of a parameter this pipeline part does not hold

// Rows of `ids` equal to `pad_id`, in order.
std::vector<int64_t> rows_of(TensorView ids, int64_t pad_id) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (vlpar::index_at(ids, i) == pad_id) rows.push_back(i);
  return rows;
}

// A host index vector as the i64 [n] view the row gather/scatter ops take (kernels/index_rows.hpp).
TensorView index_view(const std::vector<int64_t>& rows) {
  return TensorView(const_cast<int64_t*>(rows.data()), DType::kI64, Shape{int64_t(rows.size())});
}

/// The parameters (and the gradients of the trainable ones) must fit this machine before anything is allocated: a
/// size typo in config.json gets a message naming the sizes instead of an allocation failure.
Status check_fits_in_memory(const nn::ParamRegistry& reg) {
  int64_t bytes = 0, largest = 0;
  size_t big = 0;
  for (size_t i = 0; i < reg.size(); ++i) {
    // The value in its dtype, an f32 gradient and (bf16 values) the optimizer's f32 master when trainable.
    const int64_t value = int64_t(vlpar::dtype_size(reg.entry(i).dtype)), extra = value == 4 ? 4 : 8;
    const int64_t b = reg.entry(i).shard.local_shape().numel() * (value + (reg.frozen(i) ? 0 : extra));
    bytes += b;
    if (b > largest) largest = b, big = i;
  }
  const int64_t memory = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  VLPAR_CHECK_CODE(memory <= 0 || bytes <= memory, StatusCode::kOutOfMemory,
                   "Qwen3-VL: the parameters and their gradients need {:.1f} GB in this process but the machine has "
                   "{:.1f} GB (largest: {} {}, {:.1f} GB); check the config's sizes", double(bytes) / 1e9,
                   double(memory) / 1e9, reg.name(big), reg.entry(big).shard.local_shape().to_string(),
                   double(largest) / 1e9);
  return Status::Ok();
}

/// Under sequence parallelism: every tp rank's rows of `local` [N / tp, H] in rank order, [N, H] (the SP region
/// entry's all-gather, nn::region_enter_forward); without it an empty tensor (`local` is the whole sequence).
Result<Tensor> whole_sequence(const Context& ctx, const nn::TensorParallel& tp, TensorView local) {
  if (!tp.sp()) return Tensor{};
  VLPAR_ASSIGN_OR_RETURN(Tensor whole, Tensor::empty(*ctx.allocator, Shape{local.size(0) * tp.size(), local.size(1)},
                                                     local.dtype, ctx.device));
  VLPAR_RETURN_IF_ERROR(nn::region_enter_forward(tp, whole, local));
  return whole;
}

}  // namespace

vlpar::obs::Span Model::span(std::string_view cat, std::string_view name) const {
  return trace_ != nullptr ? trace_->span(cat, name) : vlpar::obs::Span{};
}

// ---- parameters ------------------------------------------------------------------------------------------

nn::TransformerConfig Model::text_block_config() const {
  const TextConfig& t = cfg_.text;
  nn::TransformerConfig c;
  c.hidden = t.hidden;
  c.heads = t.heads;
  c.kv_heads = t.kv_heads;
  c.head_dim = t.head_dim;
  c.intermediate = t.intermediate;
  c.vocab = t.vocab;
  c.num_layers = t.layers;
  c.eps = float(t.rms_eps);
  c.rope_theta = float(t.rope_theta);
  c.init_std = float(t.initializer_range);
  c.ignore_index = kIgnoreIndex;
  c.qk_norm = true;
  c.rope = nn::RopeKind::kMRoPE;
  c.mrope_section = t.mrope_section;
  c.tie_word_embeddings = t.tie_word_embeddings;
  c.activation = cfg_.dtype;
  return c;
}

Status Model::register_params() {
  const TextConfig& t = cfg_.text;
  const VisionConfig& v = cfg_.vision;
  const InitRule w = InitRule::normal(0.f, float(t.initializer_range));
  const InitRule wv = InitRule::normal(0.f, float(v.initializer_range));
  const InitRule ones = InitRule::ones(), zeros = InitRule::zeros();
  // Every parameter keeps the id (its Philox init key) it has in the whole model, registered here or not: a
  // pipeline part (PipelinePart) registers only the sections it holds (`keep`), with the values the whole model has.
  uint32_t next_id = 0;
  bool keep = part_.vision_and_embedding;
  // Stored in the training dtype, except the expert biases: routing statistics kept in f32 (moe_block.hpp).
  auto enroll = [&](vlpar::ParamShard shard, const char* group) -> Result<size_t> {
    ++next_id;
    if (!keep) return kNotHeld;
    const bool stat = std::string_view(group) == "expert_bias";
    return reg_.add(std::move(shard), group, stat ? DType::kF32 : cfg_.dtype);
  };
  // Vision and mergers: replicated on every tp rank, reduced over the vision replicas (ReplicaGroup::kVision).
  auto add = [&](std::string name, Shape shape, InitRule init, const char* group) -> Result<size_t> {
    vlpar::ParamShard shard = vlpar::make_replicated_param(std::move(name), shape, next_id, init);
    shard.replica = vlpar::ReplicaGroup::kVision;
    return enroll(std::move(shard), group);
  };
  // Vision tower (HF order of Qwen3VLVisionModel's state dict).
  const int64_t Hv = v.hidden, Iv = v.intermediate, D = v.out_hidden, Hm = 4 * v.hidden;
  // Under vision tp a block's qkv holds its heads' rows of each third, proj and fc2 their columns, fc1 its rows
  // (nn/vision_block.hpp); norms and the proj / fc2 biases stay whole (sharded over ParallelConfig::vision_tp).
  const vlpar::Range vheads = vlpar::even_shard(Hv, vtp_.size(), vtp_.rank());
  const vlpar::Range vwidth = vlpar::even_shard(Iv, vtp_.size(), vtp_.rank());
  auto add_vision_shard = [&](std::string name, Shape shape, InitRule init) -> Result<size_t> {
    const std::string_view n(name);
    vlpar::ParamShard shard;
    if (n.ends_with("attn.qkv.weight") || n.ends_with("attn.qkv.bias")) {
      shard = vlpar::make_split_param(std::move(name), shape, 0, vheads, next_id, init);
      shard.pieces.clear();
      for (int64_t third = 0; third < 3; ++third)
        shard.pieces.push_back({third * vheads.size(), third * Hv + vheads.begin, vheads.size()});
    } else if (n.ends_with("attn.proj.weight")) {
      shard = vlpar::make_split_param(std::move(name), shape, 1, vheads, next_id, init);
    } else if (n.ends_with("linear_fc1.weight") || n.ends_with("linear_fc1.bias")) {
      shard = vlpar::make_split_param(std::move(name), shape, 0, vwidth, next_id, init);
    } else if (n.ends_with("linear_fc2.weight")) {
      shard = vlpar::make_split_param(std::move(name), shape, 1, vwidth, next_id, init);
    } else {
      shard = vlpar::make_replicated_param(std::move(name), shape, next_id, init);
    }
    shard.replica = vlpar::ReplicaGroup::kVision;
    return enroll(std::move(shard), "vision");
  };
  const std::string vp = "model.visual.";
  VLPAR_ASSIGN_OR_RETURN(vis_.patch_w, add(vp + "patch_embed.proj.weight", Shape{Hv, v.patch_dim()}, wv, "vision"));
  VLPAR_ASSIGN_OR_RETURN(vis_.patch_b, add(vp + "patch_embed.proj.bias", Shape{Hv}, zeros, "vision"));
  VLPAR_ASSIGN_OR_RETURN(vis_.pos_embed, add(vp + "pos_embed.weight", Shape{v.num_position_embeddings, Hv}, wv,
                                             "vision"));
  for (int b = 0; b < v.depth; ++b) {
    const std::string p = fmt::format("{}blocks.{}.", vp, b);
    vis_.blocks.push_back(keep ? reg_.size() : kNotHeld);
    const std::pair<const char*, Shape> block[] = {
        {"norm1.weight", Shape{Hv}},       {"norm1.bias", Shape{Hv}},           {"attn.qkv.weight", Shape{3 * Hv, Hv}},
        {"attn.qkv.bias", Shape{3 * Hv}},  {"attn.proj.weight", Shape{Hv, Hv}}, {"attn.proj.bias", Shape{Hv}},
        {"norm2.weight", Shape{Hv}},       {"norm2.bias", Shape{Hv}},           {"mlp.linear_fc1.weight", Shape{Iv, Hv}},
        {"mlp.linear_fc1.bias", Shape{Iv}}, {"mlp.linear_fc2.weight", Shape{Hv, Iv}}, {"mlp.linear_fc2.bias", Shape{Hv}}};
    for (const auto& [name, shape] : block) {
      const std::string_view n(name);
      const InitRule init = n.ends_with("norm1.weight") || n.ends_with("norm2.weight") ? ones
                            : n.ends_with(".bias")                                    ? zeros
                                                                                      : wv;
      VLPAR_RETURN_IF_ERROR((vtp_.active() ? add_vision_shard(p + name, shape, init) : add(p + name, shape, init,
                                                                                             "vision")).status());
    }
  }
  auto add_merger = [&](const std::string& p, int64_t norm_width) -> Result<size_t> {
    const size_t first = keep ? reg_.size() : kNotHeld;
    VLPAR_RETURN_IF_ERROR(add(p + "norm.weight", Shape{norm_width}, ones, "merger").status());
    VLPAR_RETURN_IF_ERROR(add(p + "norm.bias", Shape{norm_width}, zeros, "merger").status());
    VLPAR_RETURN_IF_ERROR(add(p + "linear_fc1.weight", Shape{Hm, Hm}, wv, "merger").status());
    VLPAR_RETURN_IF_ERROR(add(p + "linear_fc1.bias", Shape{Hm}, zeros, "merger").status());
    VLPAR_RETURN_IF_ERROR(add(p + "linear_fc2.weight", Shape{D, Hm}, wv, "merger").status());
    VLPAR_RETURN_IF_ERROR(add(p + "linear_fc2.bias", Shape{D}, zeros, "merger").status());
    return first;
  };
  VLPAR_ASSIGN_OR_RETURN(vis_.merger, add_merger(vp + "merger.", Hv));
  for (size_t j = 0; j < v.deepstack_indexes.size(); ++j) {
    VLPAR_ASSIGN_OR_RETURN(size_t first, add_merger(fmt::format("{}deepstack_merger_list.{}.", vp, j), Hm));
    vis_.deepstack.push_back(first);
  }
  // Language model, in the order each block's parameter indices expect (AttentionBlock::num_params etc.), sharded
  // over tp as the blocks expect (nn/shard.hpp): q/o by query heads, k/v by kv heads (replicated when tp > nKV),
  // the dense SwiGLU by its width, embed_tokens/lm_head by vocab rows; norms, q/k norms and MoE replicated.
  const int64_t H = t.hidden, hd = t.head_dim;
  const int tp = tp_.size(), rank = tp_.rank();
  const vlpar::Range heads = vlpar::even_shard(t.heads, tp, rank), kv = vlpar::kv_head_shard(t.kv_heads, tp, rank);
  const bool kv_summed = vlpar::kv_head_replicas(t.kv_heads, tp) > 1;
  const std::string lp = "model.language_model.";
  auto add_shard = [&](vlpar::ParamShard shard, bool summed) -> Result<size_t> {
    shard.grad_summed_over_tp = summed;
    return enroll(std::move(shard), "language_model");
  };
  auto id = [&]() { return next_id; };
  auto text = [&](std::string name, Shape shape, InitRule init, bool summed = false) {
    return add_shard(vlpar::make_replicated_param(std::move(name), shape, id(), init), summed);
  };
  // Experts: this rank's E / ep of them (dim 0), reduced over the expert replicas; under expert tensor
  // parallelism also this etp rank's block of each expert's width I (gate_up [E, H, 2I]: its gate and its up
  // columns along dim 2; down [E, I, H]: its rows along dim 1), as nn::MoeBlock expects.
  const vlpar::Range experts = vlpar::even_shard(t.num_experts, ep_.size(), ep_.rank());
  const vlpar::Range width = vlpar::even_shard(t.moe_intermediate, ep_.etp_size(), ep_.etp_rank());
  auto expert = [&](std::string name, Shape shape, InitRule init, int width_dim) {
    vlpar::ParamShard shard = vlpar::make_split_param(std::move(name), shape, 0, experts, id(), init);
    if (ep_.etp_size() > 1) shard = vlpar::split_inner(std::move(shard), width_dim, width, /*fused=*/width_dim == 2);
    shard.replica = vlpar::ReplicaGroup::kExpert;
    return add_shard(std::move(shard), false);
  };
  // A tied LM head is embed_tokens itself: the last stage holds it too (its gradient is the two copies' sum).
  keep = part_.vision_and_embedding || (part_.head && t.tie_word_embeddings);
  VLPAR_ASSIGN_OR_RETURN(embed_, add_shard(vlpar::make_split_param(lp + "embed_tokens.weight", Shape{t.vocab, H}, 0,
                                                                vocab_block_, id(), w), false));
  for (int l = 0; l < t.layers; ++l) {
    const std::string p = fmt::format("{}layers.{}.", lp, l);
    keep = part_.holds(l);
    LayerParams lay;
    lay.attn = keep ? reg_.size() : kNotHeld;
    VLPAR_RETURN_IF_ERROR(text(p + "input_layernorm.weight", Shape{H}, ones).status());
    VLPAR_RETURN_IF_ERROR(add_shard(vlpar::make_split_param(p + "self_attn.q_proj.weight", Shape{t.heads * hd, H}, 0,
                                                         {heads.begin * hd, heads.end * hd}, id(), w), false)
                              .status());
    for (const char* kvname : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"})
      VLPAR_RETURN_IF_ERROR(add_shard(vlpar::make_split_param(p + kvname, Shape{t.kv_heads * hd, H}, 0,
                                                           {kv.begin * hd, kv.end * hd}, id(), w), kv_summed)
                                .status());
    // Each rank normalises only its own heads: the [hd] q/k norm gradients are partial sums when tp > 1.
    VLPAR_RETURN_IF_ERROR(text(p + "self_attn.q_norm.weight", Shape{hd}, ones, tp > 1).status());
    VLPAR_RETURN_IF_ERROR(text(p + "self_attn.k_norm.weight", Shape{hd}, ones, tp > 1).status());
    VLPAR_RETURN_IF_ERROR(add_shard(vlpar::make_split_param(p + "self_attn.o_proj.weight", Shape{H, t.heads * hd}, 1,
                                                         {heads.begin * hd, heads.end * hd}, id(), w), false)
                              .status());
    lay.mlp = keep ? reg_.size() : kNotHeld;
    lay.moe = t.is_moe_layer(l);
    VLPAR_RETURN_IF_ERROR(text(p + "post_attention_layernorm.weight", Shape{H}, ones).status());
    if (lay.moe) {
      const int64_t E = t.num_experts, I = t.moe_intermediate;
      VLPAR_RETURN_IF_ERROR(text(p + "mlp.gate.weight", Shape{E, H}, w).status());
      VLPAR_RETURN_IF_ERROR(expert(p + "mlp.experts.gate_up_proj", Shape{E, H, 2 * I}, w, 2).status());
      VLPAR_RETURN_IF_ERROR(expert(p + "mlp.experts.down_proj", Shape{E, I, H}, w, 1).status());
    } else {
      const int64_t I = t.intermediate;
      const vlpar::Range inter = vlpar::even_shard(I, tp, rank);
      VLPAR_RETURN_IF_ERROR(
          add_shard(vlpar::make_fused_gate_up_param(p + "mlp.gate_up_proj.weight", I, H, inter, id(), w), false)
              .status());
      VLPAR_RETURN_IF_ERROR(
          add_shard(vlpar::make_split_param(p + "mlp.down_proj.weight", Shape{H, I}, 1, inter, id(), w), false).status());
    }
    layers_.push_back(lay);
  }
  keep = part_.head;
  VLPAR_ASSIGN_OR_RETURN(final_norm_, text(lp + "norm.weight", Shape{H}, ones));
  if (t.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    VLPAR_ASSIGN_OR_RETURN(lm_head_, add_shard(vlpar::make_split_param("lm_head.weight", Shape{t.vocab, H}, 0,
                                                                    vocab_block_, id(), w), false));
  }
  // The expert biases last, so every block keeps its contiguous parameter range; frozen (group "expert_bias":
  // updated by the trainer's balancing step, never by the optimizer), zeros until a checkpoint fills them.
  for (int l = 0; l < t.layers && t.router_expert_bias; ++l) {
    if (!layers_[size_t(l)].moe) continue;
    keep = part_.holds(l);
    VLPAR_ASSIGN_OR_RETURN(layers_[size_t(l)].expert_bias,
                           enroll(vlpar::make_replicated_param(fmt::format("{}layers.{}.mlp.gate.e_score_correction_bias",
                                                                        lp, l), Shape{t.num_experts}, id(), zeros),
                                  "expert_bias"));
  }
  return Status::Ok();
}

Result<Model> Model::create(const Context& ctx, const Config& cfg, const Freeze& freeze,
                            std::optional<uint64_t> seed, Allocator& alloc, nn::TensorParallel tp, PipelinePart part,
                            nn::ExpertParallel ep, nn::TensorParallel vision_tp, bool vision_spans_batches) {
  VLPAR_RETURN_IF_ERROR(cfg.validate());
  for (const auto& [a, b] : part.layers)
    VLPAR_CHECK(0 <= a && a <= b && b <= cfg.text.layers, "Qwen3-VL pipeline part: layers [{}, {}) outside the "
                "model's [0, {})", a, b, cfg.text.layers);
  VLPAR_CHECK(!ep.active() || cfg.text.num_experts % ep.size() == 0, "Qwen3-VL: expert parallelism over {} ranks "
              "does not divide text_config.num_experts = {}", ep.size(), cfg.text.num_experts);
  VLPAR_CHECK(!ep.active() || !tp.active() || tp.sp(), "Qwen3-VL: expert parallelism (ep {}) with tensor "
              "parallelism (tp {}) needs sequence parallelism: without it the tp ranks hold the same tokens and "
              "would route them twice", ep.size(), tp.size());
  VLPAR_CHECK(ep.etp_size() == 1 || cfg.text.moe_intermediate % ep.etp_size() == 0, "Qwen3-VL: expert tensor "
              "parallelism over {} ranks does not divide text_config.moe_intermediate_size = {}", ep.etp_size(),
              cfg.text.moe_intermediate);
  VLPAR_CHECK(ep.etp_size() == 1 || !tp.active() || tp.sp(), "Qwen3-VL: expert tensor parallelism (etp {}) with "
              "tensor parallelism (tp {}) needs sequence parallelism: the etp ranks must hold different tokens",
              ep.etp_size(), tp.size());
  VLPAR_CHECK(!vision_tp.sequence_parallel, "Qwen3-VL: the vision tower has no sequence parallelism");
  VLPAR_CHECK(!vision_spans_batches || (vision_tp.size() > tp.size() && vision_tp.size() % tp.size() == 0),
              "Qwen3-VL: a vision tp group spanning data-parallel batches must be a multiple of tp wider than it, "
              "got vision tp {} with tp {}", vision_tp.size(), tp.size());
  VLPAR_CHECK(cfg.vision.heads % vision_tp.size() == 0 && cfg.vision.intermediate % vision_tp.size() == 0,
              "Qwen3-VL: vision tp {} does not divide vision_config.num_heads = {} and intermediate_size = {}",
              vision_tp.size(), cfg.vision.heads, cfg.vision.intermediate);
  Model m;
  m.cfg_ = cfg;
  m.tp_ = tp;
  m.ep_ = ep;
  m.vtp_ = vision_tp;
  if (vision_spans_batches) m.slots_ = VisionSlots{vision_tp.comm, tp.size()};
  m.part_ = std::move(part);
  if (m.part_.layers.empty() && m.part_.whole) m.part_.layers = {{0, cfg.text.layers}};
  m.vocab_block_ = vlpar::even_shard(cfg.text.vocab, tp.size(), tp.rank());
  const VisionConfig& v = cfg.vision;
  nn::VisionConfig& vc = m.vision_cfg_;
  vc.hidden = v.hidden;
  vc.heads = v.heads;
  vc.intermediate = v.intermediate;
  vc.depth = v.depth;
  vc.patch = v.patch;
  vc.temporal_patch = v.temporal_patch;
  vc.merge = v.merge;
  vc.in_channels = v.in_channels;
  vc.out_hidden = v.out_hidden;
  vc.num_position_embeddings = v.num_position_embeddings;
  vc.deepstack_indexes = v.deepstack_indexes;
  vc.activation = cfg.dtype;
  VLPAR_RETURN_IF_ERROR(vc.validate());
  VLPAR_RETURN_IF_ERROR(m.text_block_config().validate());
  VLPAR_RETURN_IF_ERROR(m.text_block_config().validate_tp(tp.size()));
  VLPAR_RETURN_IF_ERROR(m.register_params());
  const auto groups = m.reg_.groups();  // a pipeline part may hold no parameter of a group
  auto has = [&](const char* g) { return std::find(groups.begin(), groups.end(), g) != groups.end(); };
  if (freeze.vision && has("vision")) VLPAR_RETURN_IF_ERROR(m.reg_.freeze_group("vision"));
  if (freeze.merger && has("merger")) VLPAR_RETURN_IF_ERROR(m.reg_.freeze_group("merger"));
  if (freeze.language_model && has("language_model"))
    VLPAR_RETURN_IF_ERROR(m.reg_.freeze_group("language_model"));
  if (has("expert_bias")) VLPAR_RETURN_IF_ERROR(m.reg_.freeze_group("expert_bias"));
  VLPAR_RETURN_IF_ERROR(check_fits_in_memory(m.reg_));
  VLPAR_RETURN_IF_ERROR(m.reg_.materialize(ctx, alloc, seed));
  return m;
}

// ---- blocks over registry views ----------------------------------------------------------------------------

nn::AttentionBlock Model::attention(int layer) const {
  const size_t i = layers_[size_t(layer)].attn;
  auto views = [&](auto get) {
    nn::AttentionWeights w;
    w.norm = get(i + 0);
    w.q = get(i + 1);
    w.k = get(i + 2);
    w.v = get(i + 3);
    w.q_norm = get(i + 4);
    w.k_norm = get(i + 5);
    w.o = get(i + 6);
    return w;
  };
  return nn::AttentionBlock(text_block_config(), tp_, views([&](size_t k) { return reg_.value(k); }),
                            views([&](size_t k) { return reg_.grad(k); }), i);
}

nn::MlpBlock Model::mlp(int layer) const {
  const size_t i = layers_[size_t(layer)].mlp;
  return nn::MlpBlock(text_block_config(), tp_,
                      nn::MlpWeights{reg_.value(i), reg_.value(i + 1), reg_.value(i + 2)},
                      nn::MlpWeights{reg_.grad(i), reg_.grad(i + 1), reg_.grad(i + 2)}, i);
}

nn::MoeBlock Model::moe(int layer) const {
  const size_t i = layers_[size_t(layer)].mlp;
  const nn::MoeConfig mc{cfg_.text.num_experts, cfg_.text.top_k, cfg_.text.moe_intermediate,
                         cfg_.text.moe_capacity_factor};
  const size_t b = layers_[size_t(layer)].expert_bias;
  const TensorView bias = b == kNoBias ? TensorView{} : reg_.value(b);
  return nn::MoeBlock(text_block_config(), mc, tp_,
                      nn::MoeWeights{reg_.value(i), reg_.value(i + 1), reg_.value(i + 2), reg_.value(i + 3), bias},
                      nn::MoeWeights{reg_.grad(i), reg_.grad(i + 1), reg_.grad(i + 2), reg_.grad(i + 3)}, i, ep_);
}

nn::LmHead Model::head() const {
  return nn::LmHead(text_block_config(), tp_,
                    nn::LmHeadWeights{reg_.value(final_norm_), reg_.value(lm_head_)},
                    nn::LmHeadWeights{reg_.grad(final_norm_), reg_.grad(lm_head_)}, final_norm_);
}

nn::VisionEncoder Model::vision() const {
  auto views = [&](auto get) {
    nn::VisionEncoderWeights w;
    w.patch_w = get(vis_.patch_w);
    w.patch_b = get(vis_.patch_b);
    w.pos_embed = get(vis_.pos_embed);
    for (size_t b : vis_.blocks)
      w.blocks.push_back(nn::VisionBlockWeights{get(b + 0), get(b + 1), get(b + 2), get(b + 3), get(b + 4),
                                                get(b + 5), get(b + 6), get(b + 7), get(b + 8), get(b + 9),
                                                get(b + 10), get(b + 11)});
    auto merger = [&](size_t m) {
      return nn::PatchMergerWeights{get(m + 0), get(m + 1), get(m + 2), get(m + 3), get(m + 4), get(m + 5)};
    };
    w.merger = merger(vis_.merger);
    for (size_t m : vis_.deepstack) w.deepstack.push_back(merger(m));
    return w;
  };
  return nn::VisionEncoder(vision_cfg_, views([&](size_t k) { return reg_.value(k); }),
                           views([&](size_t k) { return reg_.grad(k); }), vis_.blocks.empty() ? 0 : vis_.blocks[0],
                           vtp_);
}

// ---- forward -----------------------------------------------------------------------------------------------

Status Model::encode(const Context& ctx, TensorView pixels, const std::vector<nn::VisionGrid>& grids,
                     int64_t pad_id, TensorView ids, std::optional<VisionPass>& pass) const {
  std::vector<int64_t> rows = rows_of(ids, pad_id);
  const int64_t merge = cfg_.vision.merge;
  int64_t expected = 0;
  for (const nn::VisionGrid& g : grids) expected += g.t * g.h * g.w / (merge * merge);
  Status counted = Status::Ok();
  if (int64_t(rows.size()) != expected)
    counted = vlpar::Status(StatusCode::kInvalidArgument,
                            fmt::format("the batch has {} tokens with id {} but its {} grids give {} merged vision "
                                        "tokens", rows.size(), pad_id, grids.size(), expected));
  if (slots_.active())  // a wide vision group meets in collectives next: every rank returns, or none
    counted = nn::agree_on_outcome(slots_.group, counted, "vision slots: rank", "have a bad batch");
  VLPAR_RETURN_IF_ERROR(counted);
  if (!slots_.active()) {
    if (grids.empty()) return Status::Ok();
    pass.emplace();
    pass->grids = grids;
    pass->rows = std::move(rows);
    return vision().forward(ctx, pixels, pass->grids, pass->stash, pass->out);
  }
  // A wide vision tp group: the tower on every slot's images, this rank keeping its slot's rows.
  VLPAR_ASSIGN_OR_RETURN(SharedImages all, share_images(ctx, slots_, pixels, grids, cfg_.vision.patch_dim(), merge));
  if (all.grids.empty()) return Status::Ok();  // no slot has any: every rank of the group skips the pass
  pass.emplace();
  pass->grids = std::move(all.grids);
  pass->pixels = std::move(all.pixels);
  pass->slot_tokens = std::move(all.tokens);
  pass->rows = std::move(rows);
  nn::VisionOutput whole;
  VLPAR_RETURN_IF_ERROR(vision().forward(ctx, pass->pixels, pass->grids, pass->stash, whole));
  const int64_t a = pass->slot_tokens[size_t(slots_.slot())], b = pass->slot_tokens[size_t(slots_.slot()) + 1];
  auto mine = [&](const Tensor& t) -> Result<Tensor> {
    VLPAR_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(*ctx.allocator, Shape{b - a, t.shape()[1]}, t.dtype()));
    VLPAR_RETURN_IF_ERROR(vlpar::copy_(out, t.view().slice(0, a, b)));
    return out;
  };
  VLPAR_ASSIGN_OR_RETURN(pass->out.merged, mine(whole.merged));
  for (const Tensor& d : whole.deepstack) {
    VLPAR_ASSIGN_OR_RETURN(Tensor t, mine(d));
    pass->out.deepstack.push_back(std::move(t));
  }
  return Status::Ok();
}

Result<StepLoss> Model::forward(const Context& ctx, const Batch& batch, Stash& stash) const {
  VLPAR_CHECK(part_.whole, "Model::forward needs the whole model; a pipeline part runs its stages' pieces "
              "(pipeline_stage.hpp)");
  VLPAR_RETURN_IF_ERROR(prepare(ctx, batch, stash));
  VLPAR_RETURN_IF_ERROR(embed(ctx, batch, stash));
  VLPAR_ASSIGN_OR_RETURN(TensorView x, forward_layers(ctx, stash.x0, 0, cfg_.text.layers, stash));
  return forward_head(ctx, x, stash);
}

Status Model::prepare(const Context& ctx, const Batch& batch, Stash& stash) const {
  VLPAR_CHECK(ctx.allocator != nullptr, "Model::forward: ctx.allocator must be set");
  const TextConfig& t = cfg_.text;
  VLPAR_RETURN_IF_ERROR(batch.validate());
  const TensorView ids = batch.input_ids;
  const int64_t N = ids.numel();
  for (int64_t i = 0; i < N; ++i) {
    const int64_t id = vlpar::index_at(ids, i);
    VLPAR_CHECK(id >= 0 && id < t.vocab, "input_ids[{}] = {} is outside the vocabulary [0, {})", i, id, t.vocab);
  }
  VLPAR_CHECK(batch.positions.ndim() == 2, "Qwen3-VL needs MRoPE positions [3, {}] in the batch, got {}", N,
              batch.positions.to_string());
  VLPAR_CHECK(!tp_.sp() || N % tp_.size() == 0, "Qwen3-VL: the batch's {} tokens do not split evenly over tp = {} "
              "for sequence parallelism (pad the pack to a multiple of tp: pad_for_sequence_parallel)", N,
              tp_.size());
  // Sample boundaries as i32 (attention), the batch's MRoPE positions, labels shifted within each sample.
  VLPAR_ASSIGN_OR_RETURN(stash.targets, nn::causal_targets(ctx, batch, kIgnoreIndex));
  stash.positions = batch.positions;
  stash.aux = vlpar::RouterAuxStats{};
  stash.expert_load.assign(size_t(t.layers) * expert_load_width(t), 0.0);
  return Status::Ok();
}

Status Model::embed(const Context& ctx, const Batch& batch, Stash& stash) const {
  VLPAR_CHECK(part_.vision_and_embedding, "Model::embed: this pipeline part holds no vision tower and embedding");
  Allocator& alloc = *ctx.allocator;
  const TensorView ids = batch.input_ids;
  const int64_t N = ids.numel(), H = cfg_.text.hidden;
  // Vision: images and videos in separate passes, then their merged tokens scattered into the embeddings.
  {
    vlpar::obs::Span s = span(vlpar::obs::trace_cat::kVisionEncoder, "vision_forward");
    VLPAR_RETURN_IF_ERROR(encode(ctx, batch.pixel_values, batch.image_grids, cfg_.image_token_id, ids, stash.image));
    VLPAR_RETURN_IF_ERROR(
        encode(ctx, batch.pixel_values_videos, batch.video_grids, cfg_.video_token_id, ids, stash.video));
  }
  VLPAR_ASSIGN_OR_RETURN(stash.embeds, Tensor::empty(alloc, Shape{N, H}, cfg_.dtype));
  // Whole on every tp rank (an all-reduce, also under SP: the visual rows and deepstack features are scattered by
  // sequence position; each rank then keeps its rows).
  const nn::TensorParallel whole{tp_.comm, false};
  VLPAR_RETURN_IF_ERROR(nn::vocab_parallel_embedding_forward(ctx, whole, stash.embeds, reg_.value(embed_), ids,
                                                             vocab_block_, cfg_.text.vocab));
  for (const std::optional<VisionPass>* pass : {&stash.image, &stash.video})
    if (*pass)
      VLPAR_RETURN_IF_ERROR(vlpar::scatter_rows(ctx, stash.embeds, (*pass)->out.merged, index_view((*pass)->rows)));
  VLPAR_RETURN_IF_ERROR(deepstack_features(ctx, stash));
  const int64_t first = tp_.first_local_token(N);
  stash.x0 = stash.embeds.view().slice(0, first, first + tp_.local_tokens(N));
  return Status::Ok();
}

// Deepstack features over the visual rows in sequence order (image rows from the image pass, video rows from the
// video pass), one [n_visual, D] tensor per level.
Status Model::deepstack_features(const Context& ctx, Stash& stash) const {
  const size_t levels = cfg_.vision.deepstack_indexes.size();
  stash.visual_rows.clear();
  stash.deepstack.clear();
  size_t ii = 0, vi = 0;
  const std::vector<int64_t> none;
  const std::vector<int64_t>& ir = stash.image ? stash.image->rows : none;
  const std::vector<int64_t>& vr = stash.video ? stash.video->rows : none;
  if (stash.image) stash.image->visual_index.clear();
  if (stash.video) stash.video->visual_index.clear();
  while (ii < ir.size() || vi < vr.size()) {  // merge the two sorted row lists
    const bool image = vi == vr.size() || (ii < ir.size() && ir[ii] < vr[vi]);
    VisionPass& pass = image ? *stash.image : *stash.video;
    pass.visual_index.push_back(int64_t(stash.visual_rows.size()));
    stash.visual_rows.push_back(image ? ir[ii++] : vr[vi++]);
  }
  // The visual rows this rank adds to (all of them without SP), as rows of its layer outputs, and where each
  // sits in visual_rows.
  const int64_t N = stash.embeds.shape()[0], first = tp_.first_local_token(N), end = first + tp_.local_tokens(N);
  stash.deepstack_rows.clear();
  std::vector<int64_t> pick;
  for (size_t i = 0; i < stash.visual_rows.size(); ++i)
    if (stash.visual_rows[i] >= first && stash.visual_rows[i] < end) {
      stash.deepstack_rows.push_back(stash.visual_rows[i] - first);
      pick.push_back(int64_t(i));
    }
  const auto n_vis = int64_t(stash.visual_rows.size()), n_here = int64_t(pick.size());
  for (size_t j = 0; j < levels && n_vis > 0; ++j) {
    VLPAR_ASSIGN_OR_RETURN(Tensor ds, Tensor::empty(*ctx.allocator, Shape{n_vis, cfg_.text.hidden}, cfg_.dtype,
                                                    ctx.device));
    for (const std::optional<VisionPass>* pass : {&stash.image, &stash.video})
      if (*pass)
        VLPAR_RETURN_IF_ERROR(
            vlpar::scatter_rows(ctx, ds, (*pass)->out.deepstack[j], index_view((*pass)->visual_index)));
    if (n_here < n_vis) {  // sequence parallelism: keep this rank's rows
      VLPAR_ASSIGN_OR_RETURN(Tensor mine, Tensor::empty(*ctx.allocator, Shape{n_here, cfg_.text.hidden},
                                                        cfg_.dtype, ctx.device));
      VLPAR_RETURN_IF_ERROR(vlpar::gather_rows(ctx, mine, ds, index_view(pick)));
      ds = std::move(mine);
    }
    stash.deepstack.push_back(std::move(ds));
  }
  return Status::Ok();
}

Result<TensorView> Model::forward_layers(const Context& ctx, TensorView x, int a, int b, Stash& stash) const {
  VLPAR_CHECK(0 <= a && a <= b && b <= cfg_.text.layers, "Model::forward_layers: layers [{}, {}) outside [0, {})",
              a, b, cfg_.text.layers);
  for (int l = a; l < b; ++l)
    VLPAR_CHECK(part_.holds(l), "Model::forward_layers: this pipeline part does not hold decoder layer {}", l);
  const std::vector<std::pair<int, int>> cuts = segments(a, b);
  // Decoder layers, segment by segment; the deepstack features of level j are added to layer j's output.
  const nn::PackedSeq seq{stash.targets.cu_seqlens, stash.positions};
  stash.layers = {a, b};
  stash.segments.assign(cuts.size(), DecoderStack::Stash{});
  vlpar::obs::Span decoder_span = span(vlpar::obs::trace_cat::kDecoder, "decoder_forward");
  for (size_t k = 0; k < cuts.size(); ++k) {
    const DecoderStack stack =
        decoder_layers(cuts[k].first, cuts[k].second, nn::MoeLoss{&stash.aux, 0.f}, stash.expert_load.data());
    VLPAR_ASSIGN_OR_RETURN(x, stack.forward(ctx, x, seq, stash.segments[k]));
    const auto level = size_t(cuts[k].first);  // segments below the deepstack level count are single layers
    if (level < stash.deepstack.size())
      VLPAR_RETURN_IF_ERROR(
          vlpar::scatter_add_rows(ctx, x, stash.deepstack[level], index_view(stash.deepstack_rows)));
  }
  return x;
}

Result<StepLoss> Model::forward_head(const Context& ctx, TensorView x, Stash& stash) const {
  VLPAR_CHECK(part_.head, "Model::forward_head: this pipeline part holds no LM head");
  const TextConfig& t = cfg_.text;
  vlpar::obs::Span loss_span = span(vlpar::obs::trace_cat::kLoss, "loss_forward");
  VLPAR_ASSIGN_OR_RETURN(vlpar::CrossEntropyResult ce, head().forward(ctx, x, stash.targets.labels, stash.head));
  loss_span.end();
  StepLoss out;
  out.ce_loss = ce.loss;
  out.num_label_tokens = ce.num_valid;
  if (t.num_moe_layers() > 0) {
    VLPAR_ASSIGN_OR_RETURN(out.aux_loss, vlpar::router_aux_loss(stash.aux));
    out.z_loss = stash.aux.z_sum;
    out.seq_aux_loss = stash.aux.seq_aux_sum;
  }
  out.loss = out.ce_loss + t.router_aux_loss_coef * out.aux_loss + t.router_z_loss_coef * out.z_loss +
             t.router_seq_aux_loss_coef * out.seq_aux_loss;
  stash.loss = out;
  return out;
}

Result<Tensor> Model::logits(const Context& ctx, const Stash& stash, Allocator& alloc) const {
  const TensorView hn = stash.head.hn;
  VLPAR_CHECK(!hn.empty(), "Model::logits: run forward first");
  VLPAR_CHECK(!tp_.sp(), "Model::logits: under sequence parallelism each rank holds 1/{} of the positions; run "
              "without it", tp_.size());
  VLPAR_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(alloc, Shape{hn.size(0), vocab_block_.size()}, DType::kF32));
  VLPAR_RETURN_IF_ERROR(vlpar::linear_forward(ctx, out, hn, reg_.value(lm_head_), TensorView{}));
  return out;
}

Status Model::last_logits(const Context& ctx, const Stash& stash, TensorView out) const {
  const TensorView hn = stash.head.hn;
  VLPAR_CHECK(!hn.empty(), "Model::last_logits: run forward first");
  VLPAR_CHECK(!tp_.sp(), "Model::last_logits: under sequence parallelism the last position is on the last tp rank "
              "only; run without it");
  const int64_t N = hn.size(0);
  return vlpar::linear_forward(ctx, out, hn.slice(0, N - 1, N), reg_.value(lm_head_), TensorView{});
}

// ---- backward ----------------------------------------------------------------------------------------------

std::vector<std::pair<int, int>> Model::segments(int a, int b) const {
  const int n_ds = std::min(cfg_.text.layers, int(cfg_.vision.deepstack_indexes.size()));
  std::vector<std::pair<int, int>> cuts;
  for (int j = a; j < std::min(b, n_ds); ++j) cuts.emplace_back(j, j + 1);
  if (std::max(a, n_ds) < b) cuts.emplace_back(std::max(a, n_ds), b);
  return cuts;
}

DecoderStack Model::decoder_layers(int a, int b, nn::MoeLoss moe_loss, double* expert_load) const {
  std::vector<nn::DecoderLayer> layers;
  for (int l = a; l < b; ++l) {
    const LayerParams& p = layers_.at(size_t(l));
    if (p.moe) {
      const nn::ParamRange range{p.attn, p.mlp - p.attn + nn::MoeBlock::kNumParams};
      nn::MoeLoss ml = moe_loss;
      if (expert_load) {
        ml.load = expert_load + int64_t(l) * int64_t(expert_load_width(cfg_.text));
        ml.dropped = ml.load + cfg_.text.num_experts;
      }
      layers.emplace_back(text_block_config(), tp_, attention(l), moe(l), range, ml);
    } else {
      const nn::ParamRange range{p.attn, p.mlp - p.attn + nn::MlpBlock::num_params(text_block_config())};
      layers.emplace_back(text_block_config(), tp_, attention(l), mlp(l), range);
    }
  }
  return DecoderStack(std::move(layers), recompute_);
}

Result<TensorView> Model::layer_input(const Stash& stash, int layer) const {
  const std::vector<std::pair<int, int>> cuts = segments(stash.layers.first, stash.layers.second);
  VLPAR_CHECK(!stash.segments.empty() && stash.segments.size() == cuts.size(), "Model::layer_input: run forward first");
  for (size_t k = 0; k < cuts.size(); ++k)
    if (layer >= cuts[k].first && layer < cuts[k].second) {
      const DecoderStack::Stash& seg = stash.segments[k];
      const auto i = size_t(layer - cuts[k].first);
      VLPAR_CHECK(i < seg.inputs.size(), "Model::layer_input: the stash of layer {} was consumed by backward", layer);
      return seg.inputs[i];
    }
  return vlpar::Status(StatusCode::kInvalidArgument,
                       fmt::format("Model::layer_input: layer {} outside the stash's layers [{}, {})", layer,
                                   stash.layers.first, stash.layers.second));
}

Status Model::vision_backward(const Context& ctx, VisionPass& pass, TensorView d_embeds,
                              const std::vector<Tensor>& d_deepstack) const {
  Allocator& alloc = *ctx.allocator;
  const int64_t n = int64_t(pass.rows.size()), D = cfg_.vision.out_hidden;
  VLPAR_ASSIGN_OR_RETURN(Tensor d_merged, Tensor::empty(alloc, Shape{n, D}, cfg_.dtype, ctx.device));
  VLPAR_RETURN_IF_ERROR(vlpar::gather_rows(ctx, d_merged, d_embeds, index_view(pass.rows)));
  // This pass's rows of each deepstack level's gradient (d_deepstack rows follow stash.visual_rows); zeros where
  // there is none (no visual rows on this rank: a wide vision group's empty slot, or a released micro-batch).
  std::vector<Tensor> d_ds;
  std::vector<TensorView> d_ds_views;
  for (size_t j = 0; j < cfg_.vision.deepstack_indexes.size(); ++j) {
    const bool given = j < d_deepstack.size() && d_deepstack[j].defined();
    VLPAR_ASSIGN_OR_RETURN(Tensor mine, given ? Tensor::empty(alloc, Shape{n, D}, cfg_.dtype, ctx.device)
                                              : Tensor::zeros(alloc, Shape{n, D}, cfg_.dtype, ctx.device));
    if (given) VLPAR_RETURN_IF_ERROR(vlpar::gather_rows(ctx, mine, d_deepstack[j], index_view(pass.visual_index)));
    d_ds_views.push_back(mine);
    d_ds.push_back(std::move(mine));
  }
  if (!slots_.active()) return vision().backward(ctx, pass.stash, d_merged, d_ds_views);
  // A wide vision tp group: every slot's gradients of its rows, in slot order, for the tower's backward.
  const int64_t total = pass.slot_tokens.back();
  auto whole = [&](TensorView mine) -> Result<Tensor> {
    VLPAR_ASSIGN_OR_RETURN(Tensor all, Tensor::empty(alloc, Shape{total, D}, cfg_.dtype, ctx.device));
    VLPAR_RETURN_IF_ERROR(share_rows(slots_, pass.slot_tokens, all, mine));
    return all;
  };
  VLPAR_ASSIGN_OR_RETURN(const Tensor d_all, whole(d_merged));
  std::vector<Tensor> d_ds_all;
  std::vector<TensorView> d_ds_all_views;
  for (const TensorView& v : d_ds_views) {
    VLPAR_ASSIGN_OR_RETURN(Tensor t, whole(v));
    d_ds_all_views.push_back(t);
    d_ds_all.push_back(std::move(t));
  }
  return vision().backward(ctx, pass.stash, d_all, d_ds_all_views);
}

Status Model::release_vision(const Context& ctx, Stash& stash) const {
  if (!slots_.active()) return Status::Ok();
  const int64_t N = stash.embeds.defined() ? stash.embeds.shape()[0] : 0;
  VLPAR_ASSIGN_OR_RETURN(Tensor zeros, Tensor::zeros(*ctx.allocator, Shape{N, cfg_.text.hidden}, cfg_.dtype));
  for (std::optional<VisionPass>* pass : {&stash.image, &stash.video})
    if (*pass) VLPAR_RETURN_IF_ERROR(vision_backward(ctx, **pass, zeros, {}));  // zero deepstack gradients
  return Status::Ok();
}

std::vector<size_t> Model::backward_order() const {
  std::vector<size_t> order;
  for (size_t i = reg_.size(); i-- > 0;)
    if (i != embed_) order.push_back(i);
  if (embed_ != kNotHeld) order.push_back(embed_);
  return order;
}

Status Model::backward(const Context& ctx, const Batch& batch, Stash& stash, float grad_loss,
                       const nn::GradReadyFn& ready) const {
  VLPAR_CHECK(ctx.allocator != nullptr, "Model::backward: ctx.allocator must be set");
  VLPAR_CHECK(part_.whole, "Model::backward needs the whole model (see forward)");
  VLPAR_CHECK(!stash.segments.empty(), "Model::backward: run forward first");
  const int64_t N = tp_.local_tokens(batch.input_ids.numel()), H = cfg_.text.hidden;
  VLPAR_ASSIGN_OR_RETURN(Tensor dx, Tensor::empty(*ctx.allocator, Shape{N, H}, cfg_.dtype));
  VLPAR_ASSIGN_OR_RETURN(Tensor dembeds, Tensor::empty(*ctx.allocator, Shape{N, H}, cfg_.dtype));
  VLPAR_RETURN_IF_ERROR(backward_head(ctx, dx, stash, grad_loss, ready));
  VLPAR_RETURN_IF_ERROR(backward_layers(ctx, dembeds, dx, stash, grad_loss, ready));
  return backward_embed(ctx, batch, dembeds, stash, ready);
}

Status Model::backward_head(const Context& ctx, TensorView dx, Stash& stash, float grad_loss,
                            const nn::GradReadyFn& ready) const {
  vlpar::obs::Span s = span(vlpar::obs::trace_cat::kLoss, "loss_backward");
  return head().backward(ctx, dx, stash.targets.labels, stash.head, grad_loss, ready);
}

Status Model::backward_layers(const Context& ctx, TensorView din, TensorView dout, Stash& stash, float grad_loss,
                              const nn::GradReadyFn& ready) const {
  const auto [a, b] = stash.layers;
  const std::vector<std::pair<int, int>> cuts = segments(a, b);
  VLPAR_CHECK(stash.segments.size() == cuts.size(), "Model::backward_layers: run forward_layers first");
  const int64_t H = cfg_.text.hidden;
  const nn::PackedSeq seq{stash.targets.cu_seqlens, stash.positions};
  const float grad_aux = float(cfg_.text.router_aux_loss_coef) * grad_loss;
  const float grad_z = float(cfg_.text.router_z_loss_coef) * grad_loss;
  const float grad_seq = float(cfg_.text.router_seq_aux_loss_coef) * grad_loss;
  if (cuts.empty()) return copy_(din, dout);
  vlpar::obs::Span decoder_span = span(vlpar::obs::trace_cat::kDecoder, "decoder_backward");
  // The gradient alternates between din and a scratch so that the last segment (layer a's) writes din.
  Tensor scratch;
  if (cuts.size() > 1) {
    VLPAR_ASSIGN_OR_RETURN(scratch, Tensor::empty(*ctx.allocator, dout.shape, dout.dtype, ctx.device));
  }
  stash.d_deepstack.resize(stash.deepstack.size());
  TensorView cur = dout;
  for (size_t k = cuts.size(); k-- > 0;) {
    const auto level = size_t(cuts[k].first);
    if (level < stash.deepstack.size()) {
      // The deepstack add after layer `level`: its input gradient is the gradient at the visual rows.
      VLPAR_ASSIGN_OR_RETURN(stash.d_deepstack[level],
                             Tensor::empty(*ctx.allocator, Shape{int64_t(stash.visual_rows.size()), H}, cfg_.dtype,
                                           ctx.device));
      VLPAR_ASSIGN_OR_RETURN(const Tensor whole, whole_sequence(ctx, tp_, cur));
      const TensorView all = whole.defined() ? whole.view() : cur;
      VLPAR_RETURN_IF_ERROR(vlpar::gather_rows(ctx, stash.d_deepstack[level], all, index_view(stash.visual_rows)));
    }
    const TensorView next = k % 2 == 0 ? din : scratch.view();
    const DecoderStack stack =
        decoder_layers(cuts[k].first, cuts[k].second, nn::MoeLoss{&stash.aux, grad_aux, grad_z, grad_seq});
    VLPAR_RETURN_IF_ERROR(stack.backward(ctx, next, cur, seq, stash.segments[k], ready));
    stash.segments[k] = DecoderStack::Stash{};
    cur = next;
  }
  return Status::Ok();
}

Status Model::backward_embed(const Context& ctx, const Batch& batch, TensorView dx, Stash& stash,
                             const nn::GradReadyFn& ready) const {
  // Embedding: the rows overwritten by visual tokens give embed_tokens nothing (masked_scatter, spec §4.1);
  // their gradient goes to the vision passes instead. Under SP both need every position's gradient.
  VLPAR_ASSIGN_OR_RETURN(const Tensor whole, whole_sequence(ctx, tp_, dx));
  if (whole.defined()) dx = whole.view();
  vlpar::obs::Span vision_span = span(vlpar::obs::trace_cat::kVisionEncoder, "vision_backward");
  if (stash.image) VLPAR_RETURN_IF_ERROR(vision_backward(ctx, *stash.image, dx, stash.d_deepstack));
  if (stash.video) VLPAR_RETURN_IF_ERROR(vision_backward(ctx, *stash.video, dx, stash.d_deepstack));
  vision_span.end();
  if (ready) {  // the vision tower and mergers (both passes done), in reverse registration order
    for (size_t i = embed_; i-- > 0;)
      if (!reg_.frozen(i)) VLPAR_RETURN_IF_ERROR(ready(i));
  }
  if (!reg_.grad(embed_).empty()) {
    VLPAR_RETURN_IF_ERROR(vlpar::zero_rows(ctx, dx, index_view(stash.visual_rows)));
    // text_config.pad_token_id is nn.Embedding's padding_idx in transformers: its row never gets a gradient.
    const nn::TensorParallel whole{tp_.comm, false};  // dx holds every position (as the forward's output did)
    VLPAR_RETURN_IF_ERROR(nn::vocab_parallel_embedding_backward(ctx, whole, reg_.grad(embed_), dx, batch.input_ids,
                                                                vocab_block_, TensorView{}, cfg_.text.pad_token_id));
    if (ready) VLPAR_RETURN_IF_ERROR(ready(embed_));
  }
  return Status::Ok();
}

}  // namespace qwen3vl
