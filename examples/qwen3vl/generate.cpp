// Greedy KV-cache decoding for Qwen3-VL. See generate.hpp.
#include "generate.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "vlpar/kernels/embedding.hpp"
#include "vlpar/kernels/gemm.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/rotary.hpp"

namespace qwen3vl {

using vlpar::DType;
using vlpar::Shape;
using vlpar::StatusCode;
namespace nn = vlpar::nn;

namespace {

// A decode step is a chain of ~15 one-token ops per layer. A parallel region per op costs more than it saves
// below a few million weights (on an oversubscribed machine, a scheduler timeslice per region: measured 1.4 vs
// 25 tokens/s on the 100M bench config with 2 threads), so ops touching fewer elements run on one thread.
constexpr int64_t kParallelWork = vlpar::nn::AttentionBlock::kDecodeParallelWork;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- free functions ----------------------------------------------------------------------------------------

Result<int64_t> greedy_token(TensorView logits) {
  VLPAR_CHECK(logits.dtype == DType::kF32 && logits.ndim() == 1 && logits.is_contiguous() && !logits.empty(),
              "greedy_token: logits must be a non-empty contiguous f32 [V] tensor, got {}", logits.to_string());
  const float* l = logits.ptr<float>();
  int64_t best = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    VLPAR_CHECK(!std::isnan(l[i]), "greedy_token: logit {} is NaN", i);
    if (l[i] > l[best]) best = i;  // strict: a tie keeps the lower id
  }
  return best;
}

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kMaxLength: return "max_length";
  }
  return "?";
}

// ---- Generator ---------------------------------------------------------------------------------------------

Result<Generator> Generator::create(const Model& model, int64_t max_length, Allocator& alloc) {
  const TextConfig& t = model.config().text;
  VLPAR_CHECK_CODE(model.tensor_parallel().size() == 1, StatusCode::kNotSupported,
                   "Generator: tensor-parallel models (tp {}) are not supported; load the model with tp 1",
                   model.tensor_parallel().size());
  const nn::ParamRegistry& reg = model.registry();
  for (size_t i = 0; i < reg.size(); ++i)
    VLPAR_CHECK_CODE(reg.entry(i).dtype == DType::kF32 && !reg.value(i).empty(), StatusCode::kNotSupported,
                     "Generator: parameter {} is {} {}; the decode path needs materialised f32 weights",
                     reg.name(i), vlpar::dtype_name(reg.entry(i).dtype), reg.value(i).to_string());
  VLPAR_CHECK(max_length >= 2, "Generator: max_length must be at least 2 (a prompt token and a new one), got {}",
              max_length);

  Generator g;
  g.model_ = &model;
  g.alloc_ = &alloc;
  g.max_length_ = max_length;
  VLPAR_ASSIGN_OR_RETURN(g.cache_, nn::KvCache::create(alloc, t.layers, max_length, int(t.kv_heads), int(t.head_dim)));
  const int64_t H = t.hidden;
  auto f32 = [&](Shape s) { return Tensor::empty(alloc, s, DType::kF32); };
  VLPAR_ASSIGN_OR_RETURN(g.x_, f32(Shape{1, H}));
  VLPAR_ASSIGN_OR_RETURN(g.y_, f32(Shape{1, H}));
  VLPAR_ASSIGN_OR_RETURN(g.h_, f32(Shape{1, H}));
  VLPAR_ASSIGN_OR_RETURN(g.logits_, f32(Shape{1, t.vocab}));
  VLPAR_ASSIGN_OR_RETURN(g.positions_, Tensor::empty(alloc, Shape{3, 1}, DType::kI64));
  VLPAR_ASSIGN_OR_RETURN(g.token_, Tensor::empty(alloc, Shape{1}, DType::kI64));
  return g;
}

Result<TensorView> Generator::prefill(const Context& ctx, const Batch& prompt) {
  VLPAR_CHECK(ctx.allocator != nullptr, "Generator::prefill: ctx.allocator must be set");
  const TensorView ids = prompt.input_ids;
  VLPAR_CHECK(ids.dtype == DType::kI64 && ids.ndim() == 1 && ids.is_contiguous() && ids.numel() >= 1,
              "Generator::prefill: input_ids must be a non-empty contiguous i64 [N] tensor, got {}", ids.to_string());
  const int64_t N = ids.numel();
  const std::span<const int64_t> cu = prompt.host_cu_seqlens;
  VLPAR_CHECK(cu.empty() || (cu.size() == 2 && cu[0] == 0 && cu[1] == N),
              "Generator::prefill: the prompt must be one sample (cu_seqlens [0, {}]), got {} boundaries", N,
              cu.size());
  VLPAR_CHECK(N <= max_length_, "Generator::prefill: the prompt has {} tokens but max_length is {}", N, max_length_);
  prefilled_ = false;
  length_ = 0;

  // One forward over the prompt, no labels (the loss is 0 over 0 tokens; only the stash matters).
  Allocator& alloc = *ctx.allocator;
  const std::array<int64_t, 2> cu_storage = {0, N};
  VLPAR_ASSIGN_OR_RETURN(Tensor labels, Tensor::empty(alloc, Shape{N}, DType::kI64));
  std::fill(labels.ptr<int64_t>(), labels.ptr<int64_t>() + N, kIgnoreIndex);
  Batch b = prompt;
  b.labels = labels;
  b.cu_seqlens = TensorView(const_cast<int64_t*>(cu_storage.data()), DType::kI64, Shape{2});
  b.host_cu_seqlens = cu_storage;
  Stash stash;
  VLPAR_RETURN_IF_ERROR(model_->forward(ctx, b, stash).status());

  // Every layer's k/v rows from the layer's input (embeds, then the previous layer's output: kept by the
  // forward in every recompute mode, unlike the attention stash, which Recompute::kFull drops).
  const TextConfig& t = model_->config().text;
  for (int l = 0; l < t.layers; ++l) {
    VLPAR_ASSIGN_OR_RETURN(const TensorView x, model_->layer_input(stash, l));
    VLPAR_CHECK(x.numel() == N * t.hidden, "Generator::prefill: the forward kept no input for layer {}", l);
    VLPAR_RETURN_IF_ERROR(
        model_->attention_block(l).fill_kv_cache(ctx, x, stash.positions, cache_.k(l), cache_.v(l), 0));
  }
  const int64_t* pos = stash.positions.ptr<int64_t>();
  rope_delta_ = rope_delta_of(std::span<const int64_t>(pos, size_t(3 * N)), N);
  // Last position's logits: final-normed hidden state row N − 1 times the LM head.
  VLPAR_RETURN_IF_ERROR(model_->last_logits(ctx, stash, logits_));
  length_ = N;
  prefilled_ = true;
  return logits_.view().slice(0, 0, 1).reshape(Shape{t.vocab});
}

Result<TensorView> Generator::step(const Context& ctx, int64_t token) {
  VLPAR_CHECK(ctx.allocator != nullptr, "Generator::step: ctx.allocator must be set");
  VLPAR_CHECK(prefilled_, "Generator::step: call prefill first");
  VLPAR_CHECK(length_ < max_length_, "Generator::step: the KV cache is full ({} tokens = max_length)", length_);
  const TextConfig& t = model_->config().text;
  VLPAR_CHECK(token >= 0 && token < t.vocab, "Generator::step: token {} is outside the vocabulary [0, {})", token,
              t.vocab);
  const nn::ParamRegistry& reg = model_->registry();
  const int64_t n = length_;
  const float eps = float(t.rms_eps);
  Context serial = ctx;
  serial.num_threads = 1;
  auto ctx_for = [&](int64_t work) -> const Context& { return work >= kParallelWork ? ctx : serial; };

  token_.ptr<int64_t>()[0] = token;
  for (int a = 0; a < 3; ++a) positions_.ptr<int64_t>()[a] = n + rope_delta_;
  VLPAR_RETURN_IF_ERROR(vlpar::embedding_forward(serial, x_, reg.value(model_->embed_param_index()), token_));

  for (int l = 0; l < t.layers; ++l) {
    const Model::LayerParamIndex p = model_->layer_param_index(l);
    // Attention with its residual: x_ → y_, this token's k/v appended to the cache at row n.
    VLPAR_RETURN_IF_ERROR(
        model_->attention_block(l).forward_decode(ctx, y_, x_, positions_, cache_.k(l), cache_.v(l), n));
    // Feed-forward: y_ → x_ (the block adds its own residual).
    // (the block's largest weight decides: gate_up [2I, H] dense; one expert's [H, 2I] slice for MoE, since a
    // token reads only its top-k experts)
    if (p.moe) {
      nn::MoeStash st;
      const TensorView gu = reg.value(p.mlp + 2);  // [E, H, 2I]
      VLPAR_RETURN_IF_ERROR(model_->moe_block(l).forward(ctx_for(gu.numel() / gu.size(0)), x_, y_, 1, st));
    } else {
      nn::MlpStash st;
      VLPAR_RETURN_IF_ERROR(model_->mlp_block(l).forward(ctx_for(reg.value(p.mlp + 1).numel()), x_, y_, 1, st));
    }
  }
  VLPAR_RETURN_IF_ERROR(
      vlpar::rmsnorm_forward(serial, h_, TensorView{}, x_, reg.value(model_->final_norm_param_index()), eps));
  const TensorView head = reg.value(model_->lm_head_param_index());
  VLPAR_RETURN_IF_ERROR(vlpar::linear_forward(ctx_for(head.numel()), logits_, h_, head, TensorView{}));
  length_ = n + 1;
  return logits_.view().slice(0, 0, 1).reshape(Shape{t.vocab});
}

int64_t rope_delta_of(std::span<const int64_t> positions, int64_t n) {
  return *std::max_element(positions.begin(), positions.end()) + 1 - n;
}

std::optional<StopReason> stop_after(const std::vector<int64_t>& tokens, int64_t prompt_tokens,
                                     const GenerateOptions& options, int64_t max_length) {
  if (tokens.empty()) return std::nullopt;
  if (std::find(options.eos_ids.begin(), options.eos_ids.end(), tokens.back()) != options.eos_ids.end())
    return StopReason::kEos;
  if (int64_t(tokens.size()) == options.max_new_tokens) return StopReason::kMaxNewTokens;
  if (prompt_tokens + int64_t(tokens.size()) == max_length) return StopReason::kMaxLength;
  return std::nullopt;
}

Result<GenerateResult> Generator::generate(const Context& ctx, const Batch& prompt, const GenerateOptions& options) {
  VLPAR_CHECK(options.max_new_tokens >= 1, "Generator::generate: max_new_tokens must be at least 1, got {}",
              options.max_new_tokens);
  const int64_t N = prompt.input_ids.numel();
  VLPAR_CHECK(N < max_length_, "Generator::generate: the prompt has {} tokens, which leaves no room for a new "
              "token under max_length {}", N, max_length_);
  GenerateResult r;
  r.prompt_tokens = N;
  auto t0 = std::chrono::steady_clock::now();
  VLPAR_ASSIGN_OR_RETURN(TensorView logits, prefill(ctx, prompt));
  VLPAR_ASSIGN_OR_RETURN(int64_t tok, greedy_token(logits));
  r.prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (;;) {
    r.tokens.push_back(tok);
    if (const std::optional<StopReason> stop = stop_after(r.tokens, N, options, max_length_)) {
      r.stop = *stop;
      break;
    }
    VLPAR_ASSIGN_OR_RETURN(logits, step(ctx, tok));
    VLPAR_ASSIGN_OR_RETURN(tok, greedy_token(logits));
    ++r.decode_steps;
  }
  r.decode_seconds = seconds_since(t0);
  return r;
}

}  // namespace qwen3vl
