#pragma once
// Greedy decoding with a KV cache for a Qwen3-VL model (dense or MoE), one sample at a time.
//
//   prefill(prompt)  : Model::forward over the prompt (vision encoder once, visual scatter, deepstack, MRoPE
//                      positions from data/mrope_positions.hpp); then every layer's k (after k_norm + MRoPE) and v
//                      rows are computed from that layer's input as the attention block does (same kernels, same
//                      shapes: the layer inputs are kept by the forward in every recompute mode, the attention
//                      stash is not under Recompute::kFull) and written to the cache; the stash is dropped and the
//                      last position's logits [V] are returned. rope_delta = max(prompt positions) + 1 − length.
//   step(token)      : the token at sequence index n = length() gets position n + rope_delta on all three MRoPE rows
//                      (HF 4.57.1 Qwen3VLModel.forward: cache_position + rope_deltas cached at prefill; spec §4.5),
//                      so the first generated token sits at max(prompt positions) + 1. Per layer:
//                        h = RMSNorm(x); q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ; q = MRoPE(q_norm(q)); cache[n] = MRoPE(k_norm(k)), v
//                        x = x + o_proj(decode_attention(q, cache[0..n]))          (GQA, scale D^-½, fp32 softmax)
//                        x = MlpBlock / MoeBlock forward on the one token            (the model's own blocks)
//                      then the final RMSNorm and the LM head → logits [V]. Generated tokens are text: no visual
//                      scatter, no deepstack add (HF drops pixel values after prefill, so does this).
//   generate(prompt) : prefill, then argmax (ties → the lowest id, as torch.argmax) and step until an eos id is
//                      produced (it is kept in the output, as HF does), max_new_tokens are produced, or the sequence
//                      reaches max_length (prompt + generated tokens, HF's max_length).
// The cache is preallocated at create(): per layer k and v [max_length, H_kv, D] f32, cache_bytes() in total; the
// prefill's transient peak is one training forward over the prompt (Model::forward keeps its stash until the cache
// is filled). Only single-process models (tp 1) with f32 storage are supported (kNotSupported otherwise).
// Threads: prefill runs on ctx.num_threads. A decode step runs each op on ctx.num_threads only when it touches at
// least 2^22 elements (the LM head, large projections and MLPs) and on one thread otherwise: one-token ops are
// too small to amortise an OpenMP region (and under oversubscription each region can cost a scheduler timeslice).
// Numerics: decode uses the same kernels as the forward (rmsnorm, linear, rotary, embedding, the MLP/MoE block);
// only the one-query attention over the cache is hand-written (fp32 dot products, max-subtracted softmax, fp32
// accumulation), so step logits equal Model::forward + Model::logits over the whole sequence to ~1e-6 relative.
// Tests: examples/qwen3vl/tests/test_generate.cpp (teacher forcing vs the full forward; greedy ids equal HF
// generate, tests/fixtures/qwen3vl/generate.json from tools/golden/make_generate_fixture.py; eos, max length,
// errors; decode_attention vs an fp64 reference).
#include <cstdint>
#include <vector>

#include "batch_io.hpp"
#include "model.hpp"
#include "vlpar/kernels/rotary_math.hpp"

namespace qwen3vl {

/// @brief Attention of one query token over the first `len` rows of a KV cache (causal by construction: every
/// cached row precedes the query). GQA: query head i reads kv head i / (Hq / H_kv). Scores and softmax in fp32
/// (max-subtracted), output accumulated in fp32. Parallel over query heads (no cross-head sums: deterministic).
/// @param out     [Hq, D] f32 written
/// @param q       [Hq, D] f32
/// @param k_cache [capacity, H_kv, D] f32, rows [0, len) read
/// @param v_cache [capacity, H_kv, D] f32
/// @param len     1 ≤ len ≤ capacity
Status decode_attention(const Context& ctx, TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                        int64_t len);

/// @brief The greedy token: argmax of logits [V] f32, ties → the lowest id (torch.argmax). A NaN logit is an
/// error naming its index.
Result<int64_t> greedy_token(TensorView logits);

/// @brief Sample `sample` of a packed batch file as a prompt: its input_ids, truncated to the first
/// `prompt_tokens` when > 0, and its images and videos (views into `lb`; cu_seqlens and labels left empty). A pack
/// of several samples needs images_per_sample / videos_per_sample (when it has images / videos). Errors name the
/// defect (sample out of range, prompt_tokens larger than the sample, per-sample counts missing or inconsistent).
/// Truncation keeps every vision input of the sample: cutting through or before a vision span makes the pads and
/// grids disagree, which prefill reports.
Result<Batch> prompt_from_batch(const LoadedBatch& lb, int64_t sample, int64_t prompt_tokens = 0);

enum class StopReason {
  kEos,           // the last generated token is one of the eos ids
  kMaxNewTokens,  // max_new_tokens were generated
  kMaxLength,     // prompt + generated tokens reached the generator's max_length
};
const char* to_string(StopReason r);

struct GenerateOptions {
  int64_t max_new_tokens = 32;   // ≥ 1
  std::vector<int64_t> eos_ids;  // generation stops after producing any of these (may be empty)
};

struct GenerateResult {
  std::vector<int64_t> tokens;  // generated ids, prompt excluded, the eos id included when it stopped on one
  StopReason stop = StopReason::kMaxNewTokens;
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;      // step() calls (tokens fed back): tokens.size() − 1
  double prefill_seconds = 0.0;  // prefill including the vision encoder and the first logits
  double decode_seconds = 0.0;   // all step() calls and argmaxes after the first token
};

class Generator {
 public:
  /// @brief A generator for `model` (which must outlive it) whose cache holds `max_length` tokens (prompt +
  /// generated). The cache and the per-step buffers come from `alloc` (which must outlive the generator).
  static Result<Generator> create(const Model& model, int64_t max_length, Allocator& alloc);

  /// @brief Starts a new sequence: runs the model over `prompt` (one sample, the model's Batch contract: input_ids
  /// i64 [N] with its images/videos, cu_seqlens empty or [0, N]; labels ignored) and fills the cache.
  /// ctx.allocator must be set (the forward's scratch). Errors: more than one sample, N > max_length, and every
  /// error of Model::forward (e.g. image pads that do not match the grids).
  /// @return logits [V] f32 of the last prompt position (a view of a buffer the next call overwrites)
  Result<TensorView> prefill(const Context& ctx, const Batch& prompt);
  /// @brief Appends `token` at sequence index length() (position length() + rope_delta()).
  /// Errors: no prefill yet, the cache full (length() == max_length), token outside [0, V).
  /// @return logits [V] f32 predicting the next token (overwritten by the next call)
  Result<TensorView> step(const Context& ctx, int64_t token);
  /// @brief prefill + greedy steps (see the file comment). Errors: max_new_tokens < 1, a prompt of max_length
  /// tokens or more (no room for a new token), and those of prefill/step.
  Result<GenerateResult> generate(const Context& ctx, const Batch& prompt, const GenerateOptions& options);

  int64_t length() const { return length_; }          // tokens in the cache (0 before prefill)
  int64_t max_length() const { return max_length_; }  // cache capacity in tokens
  int64_t rope_delta() const { return rope_delta_; }  // position − sequence index of every generated token
  int64_t cache_bytes() const;                        // k and v of every layer, preallocated

 private:
  Generator() = default;
  /// Rows [row0, row0 + n) of layer `layer`'s cache from the layer's normed input h [n, H] at positions [3, n];
  /// k_raw, k_normed: [n, H_kv·D] scratch.
  Status write_kv(const Context& ctx, int layer, TensorView h, TensorView positions, int64_t row0, TensorView k_raw,
                  TensorView k_normed);

  const Model* model_ = nullptr;
  Allocator* alloc_ = nullptr;
  vlpar::RotaryDesc rope_;
  int64_t max_length_ = 0, length_ = 0, rope_delta_ = 0;
  bool prefilled_ = false;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer [max_length, H_kv, D]
  // Per-step buffers (one token): x, y, h [1, H]; q_raw, q, attn [1, Hq·D]; k_raw, k_normed [1, H_kv·D];
  // positions i64 [3, 1]; token i64 [1]; logits [1, V].
  Tensor x_, y_, h_, q_raw_, q_, attn_, k_raw_, k_normed_, positions_, token_, logits_;
};

}  // namespace qwen3vl
