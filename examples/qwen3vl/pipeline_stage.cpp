// Qwen3-VL as pipeline stages. See pipeline_stage.hpp.
#include "pipeline_stage.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "vlpar/core/dispatch.hpp"
#include "vlpar/core/log.hpp"

namespace qwen3vl {
namespace {

using vlpar::DType;
using vlpar::Shape;
namespace pipeline = vlpar::pipeline;

// RouterAuxStats as [2E + 4] f64: counts, prob sums, rows, top_k, z_sum, seq_aux_sum (exact: counts are small
// integers, rows < 2^53, the sums travel as the doubles they are).
void encode_aux(TensorView out, const vlpar::RouterAuxStats& s, int64_t E) {
  double* p = out.ptr<double>();
  std::fill(p, p + 2 * E + 4, 0.0);
  for (size_t e = 0; e < s.counts.size() && int64_t(e) < E; ++e) p[e] = s.counts[e], p[E + int64_t(e)] = s.prob_sum[e];
  p[2 * E] = double(s.rows);
  p[2 * E + 1] = double(s.top_k);
  p[2 * E + 2] = s.z_sum;
  p[2 * E + 3] = s.seq_aux_sum;
}

/// A poisoned micro-batch's statistics (and gradient) are NaN: the marker a stage checks first.
bool poisoned_aux(TensorView in, int64_t E) { return std::isnan(in.ptr<double>()[2 * E]); }

/// NaN in every element of a host tensor of any float dtype (a boundary is f32 or bf16, the statistics f64).
Status fill_nan(TensorView t) {
  if (t.dtype == DType::kF64) {
    std::fill(t.ptr<double>(), t.ptr<double>() + t.numel(), std::numeric_limits<double>::quiet_NaN());
    return Status::Ok();
  }
  VLPAR_FLOAT_SWITCH(t.dtype, T, "fill_nan", {
    std::fill(t.ptr<T>(), t.ptr<T>() + t.numel(), vlpar::from_float<T>(std::numeric_limits<float>::quiet_NaN()));
  });
  return Status::Ok();
}

// The inverse; before any MoE layer ran (top_k 0) the statistics stay empty, as in one process.
vlpar::RouterAuxStats decode_aux(TensorView in, int64_t E) {
  const double* p = in.ptr<double>();
  vlpar::RouterAuxStats s;
  s.rows = int64_t(p[2 * E]);
  s.top_k = int(p[2 * E + 1]);
  s.z_sum = p[2 * E + 2];
  s.seq_aux_sum = p[2 * E + 3];
  if (s.top_k == 0) return s;
  s.counts.assign(p, p + E);
  s.prob_sum.assign(p + E, p + 2 * E);
  return s;
}

}  // namespace

Result<PipelineStage> PipelineStage::create(const Model& model, const pipeline::Layout& layout, int stage) {
  const Config& c = model.config();
  const int L = c.text.layers, S = layout.num_stages();
  VLPAR_CHECK(layout.num_layers() == L, "pipeline layout '{}' holds {} decoder layers, the model has {}",
              layout.to_string(), layout.num_layers(), L);
  VLPAR_CHECK(stage >= 0 && stage < S, "pipeline stage {} outside the layout's {} stages", stage, S);
  const int n_ds = std::min(L, int(c.vision.deepstack_indexes.size()));
  VLPAR_CHECK(layout.bounds[1] >= n_ds, "pipeline layout '{}': stage 0 holds {} decoder layers but the deepstack "
              "features are added after layers 0 … {} (the vision tower's output, on stage 0): give stage 0 at least "
              "{} layers", layout.to_string(), layout.bounds[1], n_ds - 1, n_ds);
  const int first = layout.bounds[size_t(stage)], last = layout.bounds[size_t(stage) + 1];
  const PipelinePart& part = model.part();
  for (int l = first; l < last; ++l)
    VLPAR_CHECK(part.holds(l), "pipeline stage {}: the model part does not hold its decoder layer {} (build the "
                "Model with PipelineStage::part_for(layout, this rank's stages))", stage, l);
  VLPAR_CHECK(stage != 0 || part.vision_and_embedding, "pipeline stage 0: the model part holds no vision tower and "
              "embedding");
  VLPAR_CHECK(stage != S - 1 || part.head, "pipeline stage {} (the last): the model part holds no LM head", stage);
  return PipelineStage(model, stage, S, first, last);
}

PipelinePart PipelineStage::part_for(const pipeline::Layout& layout, std::span<const int> stages) {
  PipelinePart part = PipelinePart::of({}, false, false);
  for (int s : stages) {
    part.layers.emplace_back(layout.bounds[size_t(s)], layout.bounds[size_t(s) + 1]);
    part.vision_and_embedding = part.vision_and_embedding || s == 0;
    part.head = part.head || s == layout.num_stages() - 1;
  }
  return part;
}

Status PipelineStage::set_step(std::vector<Batch> micro, std::vector<double> weights) {
  VLPAR_CHECK(micro.size() == weights.size(), "pipeline stage: {} micro-batches but {} loss weights", micro.size(),
              weights.size());
  micro_ = std::move(micro);
  weights_ = std::move(weights);
  losses_.assign(micro_.size(), StepLoss{});
  last_logits_.assign(micro_.size(), {});
  expert_load_.assign(moe() ? size_t(model_->config().text.layers) * expert_load_width(model_->config().text) : 0,
                      0.0);
  return Status::Ok();
}

Status PipelineStage::check_j(int j) const {
  VLPAR_CHECK(j >= 0 && size_t(j) < micro_.size(), "pipeline stage {}: micro-batch {} of a step of {} (set_step)",
              stage_, j, micro_.size());
  return Status::Ok();
}

pipeline::Port PipelineStage::boundary(int j) const {
  const int64_t N = j >= 0 && size_t(j) < micro_.size() ? micro_[size_t(j)].input_ids.numel() : 0;
  const int64_t n_loc = model_->tensor_parallel().local_tokens(N);  // this tp rank's rows under SP
  pipeline::Port p;
  p.act.push_back({Shape{n_loc, model_->config().text.hidden}, model_->config().dtype});
  p.grad.push_back(p.act.back());
  if (moe()) {
    const pipeline::TensorSpec aux{Shape{2 * model_->config().text.num_experts + 4}, DType::kF64};
    p.act.push_back(aux);
    p.grad.push_back(aux);
  }
  return p;
}

pipeline::Port PipelineStage::input_port(int j) const { return stage_ == 0 ? pipeline::Port{} : boundary(j); }
pipeline::Port PipelineStage::output_port(int j) const { return is_last() ? pipeline::Port{} : boundary(j); }

int64_t PipelineStage::stash_bytes(int j) const {
  if (!check_j(j).ok()) return 0;
  const int64_t N = micro_[size_t(j)].input_ids.numel();
  const int64_t layers = model_->decoder_layers(first_, last_, vlpar::nn::MoeLoss{}).stash_bytes(N);
  // Stage 0 keeps the whole embeddings [N, H] (layer 0's input is its tp rank's rows of them under SP).
  const int64_t rows = stage_ == 0 ? N : model_->tensor_parallel().local_tokens(N);
  return layers + rows * model_->config().text.hidden * int64_t(vlpar::dtype_size(model_->config().dtype));
}

Status PipelineStage::forward(const Context& ctx, std::span<const TensorView> out, std::span<const TensorView> in,
                              int j, Stash& st) {
  VLPAR_RETURN_IF_ERROR(check_j(j));
  const Batch& batch = micro_[size_t(j)];
  const int64_t E = model_->config().text.num_experts;
  VLPAR_RETURN_IF_ERROR(model_->prepare(ctx, batch, st.model));
  TensorView x;
  st.poisoned = false;
  if (stage_ == 0) {
    VLPAR_RETURN_IF_ERROR(model_->embed(ctx, batch, st.model));
    x = st.model.x0;
  } else {
    x = in[0];
    if (moe() && poisoned_aux(in[1], E))
      return poison(j, out, st, VLPAR_STATUS(vlpar::StatusCode::kNonFinite, "an earlier stage's router logits"));
    if (moe()) st.model.aux = decode_aux(in[1], E);
  }
  Result<TensorView> layers = model_->forward_layers(ctx, x, first_, last_, st.model);
  if (!layers.ok() && layers.status().code() == vlpar::StatusCode::kNonFinite)
    return poison(j, out, st, layers.status());
  VLPAR_ASSIGN_OR_RETURN(TensorView y, std::move(layers));
  for (size_t i = 0; i < expert_load_.size(); ++i) expert_load_[i] += st.model.expert_load[i];
  if (is_last()) {
    VLPAR_ASSIGN_OR_RETURN(losses_[size_t(j)], model_->forward_head(ctx, y, st.model));
    if (keep_last_logits_) return keep_last_logits(ctx, j, st);
    return Status::Ok();
  }
  VLPAR_RETURN_IF_ERROR(vlpar::copy_(out[0], y));
  if (moe()) encode_aux(out[1], st.model.aux, E);
  return Status::Ok();
}

Status PipelineStage::backward(const Context& ctx, std::span<const TensorView> din, std::span<const TensorView> dout,
                               int j, Stash& st) {
  VLPAR_RETURN_IF_ERROR(check_j(j));
  const int64_t N = model_->tensor_parallel().local_tokens(micro_[size_t(j)].input_ids.numel());
  const int64_t H = model_->config().text.hidden, E = model_->config().text.num_experts;
  const auto w = float(weights_[size_t(j)]);
  if (st.poisoned || (!is_last() && moe() && poisoned_aux(dout[1], E))) {  // NaN upstream, no layer runs
    st.poisoned = true;
    for (size_t k = 0; stage_ != 0 && k < din.size(); ++k) VLPAR_RETURN_IF_ERROR(fill_nan(din[k]));
    // A wide vision group's peers (other data-parallel batches) still meet this micro-batch's vision backward.
    if (stage_ == 0) VLPAR_RETURN_IF_ERROR(model_->release_vision(ctx, st.model));
    return Status::Ok();
  }
  Tensor head_grad, embed_grad;
  TensorView dx;
  if (is_last()) {
    VLPAR_ASSIGN_OR_RETURN(head_grad, Tensor::empty(*ctx.allocator, Shape{N, H}, model_->config().dtype));
    VLPAR_RETURN_IF_ERROR(model_->backward_head(ctx, head_grad, st.model, w, {}));
    dx = head_grad;
  } else {
    dx = dout[0];
    if (moe()) st.model.aux = decode_aux(dout[1], E);  // the totals over every MoE layer
  }
  TensorView dinput = stage_ == 0 ? TensorView{} : din[0];
  if (stage_ == 0) {
    VLPAR_ASSIGN_OR_RETURN(embed_grad, Tensor::empty(*ctx.allocator, Shape{N, H}, model_->config().dtype));
    dinput = embed_grad;
  }
  VLPAR_RETURN_IF_ERROR(model_->backward_layers(ctx, dinput, dx, st.model, w, {}));
  if (stage_ == 0) return model_->backward_embed(ctx, micro_[size_t(j)], dinput, st.model, {});
  if (moe()) encode_aux(din[1], st.model.aux, E);
  return Status::Ok();
}

Status PipelineStage::poison(int j, std::span<const TensorView> out, Stash& st, const Status& why) {
  st.poisoned = true;
  qwen3vl::Stash kept;  // a wide vision group's passes: their backward exchange is still owed (release_vision)
  if (stage_ == 0 && model_->vision_spans_batches()) {
    kept.image = std::move(st.model.image);
    kept.video = std::move(st.model.video);
    kept.embeds = std::move(st.model.embeds);
  }
  st.model = std::move(kept);
  if (is_last()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    losses_[size_t(j)] = StepLoss{};
    losses_[size_t(j)].loss = losses_[size_t(j)].ce_loss = nan;
    vlpar::log_warn("pipeline stage {}: micro-batch {}: {}; its loss is NaN (the step will be skipped)", stage_, j,
                    why.message());
    return Status::Ok();
  }
  for (const TensorView& t : out) VLPAR_RETURN_IF_ERROR(fill_nan(t));
  return Status::Ok();
}

// The last position's logits over the whole vocabulary (Model::last_logits, as Generator::prefill reads them).
Status PipelineStage::keep_last_logits(const Context& ctx, int j, const Stash& st) {
  const int64_t rows = model_->registry().value(model_->lm_head_param_index()).size(0);
  const int64_t V = model_->config().text.vocab;
  VLPAR_CHECK(rows == V, "pipeline stage {}: the last position's logits need the whole LM head on this rank "
              "(tensor parallelism splits it: {} of {} rows)", stage_, rows, V);
  std::vector<float>& out = last_logits_[size_t(j)];
  out.assign(size_t(V), 0.f);
  return model_->last_logits(ctx, st.model, TensorView(out.data(), DType::kF32, Shape{1, V}));
}

Status PipelineStage::backward_input(const Context& ctx, std::span<const TensorView> din,
                                     std::span<const TensorView> dout, int j, Stash& st) {
  VLPAR_CHECK(st.weight_grads.empty(), "pipeline stage {}: micro-batch {}'s backward_input ran twice before its "
              "backward_weight", stage_, j);
  Context ictx = ctx;
  ictx.weight_grads = &st.weight_grads;
  const Status s = backward(ictx, din, dout, j, st);
  if (!s.ok()) st.weight_grads.clear();  // a failed I leaves no half-queued W behind
  st.model = qwen3vl::Stash{};  // only the queue's operands stay for W
  return s;
}

Status PipelineStage::backward_weight(const Context& ctx, int j, Stash& st) {
  VLPAR_RETURN_IF_ERROR(check_j(j));
  return st.weight_grads.run(ctx);
}

int64_t PipelineStage::weight_stash_bytes(int j) const {
  if (!check_j(j).ok()) return 0;
  const int64_t N = micro_[size_t(j)].input_ids.numel();
  const vlpar::nn::LayerStack<vlpar::nn::DecoderLayer> layers =
      model_->decoder_layers(first_, last_, vlpar::nn::MoeLoss{});
  int64_t bytes = 0;
  for (size_t l = 0; l < layers.size(); ++l) bytes += layers.layer(l).weight_stash_bytes(N);
  return bytes;
}

}  // namespace qwen3vl
