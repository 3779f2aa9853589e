#pragma once
// Greedy decoding with a KV cache for a Qwen3-VL model (dense or MoE), one sample at a time.
//
//   prefill(prompt)  : Model::forward over the prompt (vision encoder once, visual scatter, deepstack, MRoPE
//                      positions from data/mrope_positions.hpp); then every layer's attention block writes its k
//                      (after k_norm + MRoPE) and v rows from the layer's input (AttentionBlock::fill_kv_cache: the
//                      layer inputs are kept by the forward in every recompute mode, the attention stash is not
//                      under Recompute::kFull); the stash is dropped and the last position's logits [V] are
//                      returned. rope_delta = max(prompt positions) + 1 − length.
//   step(token)      : the token at sequence index n = length() gets position n + rope_delta on all three MRoPE rows
//                      (HF 4.57.1 Qwen3VLModel.forward: cache_position + rope_deltas cached at prefill; spec §4.5),
//                      so the first generated token sits at max(prompt positions) + 1. Per layer, the model's own
//                      blocks (nn/attention_block.hpp, nn/kv_cache.hpp):
//                        x = AttentionBlock::forward_decode(x)   (cache[n] = MRoPE(k_norm(k)), v; attention over
//                                                                 cache[0..n] by kv_cache_attention_forward)
//                        x = MlpBlock / MoeBlock forward on the one token
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
// too small to amortise a parallel region (and under oversubscription each region can cost a scheduler timeslice).
// Numerics: decode uses the same kernels as the forward (rmsnorm, linear, rotary, embedding, the MLP/MoE block);
// only the attention over the cache is another kernel (kv_cache_attention_forward: two-pass fp32 softmax), so step
// logits equal Model::forward + Model::logits over the whole sequence to ~1e-6 relative.
// Tests: examples/qwen3vl/tests/test_generate.cpp (teacher forcing vs the full forward; greedy ids equal HF
// generate, tests/fixtures/qwen3vl/generate.json from tools/golden/make_generate_fixture.py; eos, max length,
// errors); the cache attention: tests/unit/test_kv_cache_attention.cpp.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "batch_io.hpp"
#include "model.hpp"
#include "vlpar/nn/kv_cache.hpp"

namespace qwen3vl {

/// @brief The greedy token: argmax of logits [V] f32, ties → the lowest id (torch.argmax). A NaN logit is an
/// error naming its index.
Result<int64_t> greedy_token(TensorView logits);

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

/// @brief position − sequence index of every generated token after a prompt of n tokens with MRoPE positions
/// [3, n] (non-empty): max(positions) + 1 − n (HF's rope_deltas, cached at prefill).
int64_t rope_delta_of(std::span<const int64_t> positions, int64_t n);

/// @brief Why generation stops after `tokens` (the generated ids so far, after a prompt of prompt_tokens), in this
/// order: the last token is an eos id, max_new_tokens reached, prompt + tokens reached max_length; nullopt: go on.
std::optional<StopReason> stop_after(const std::vector<int64_t>& tokens, int64_t prompt_tokens,
                                     const GenerateOptions& options, int64_t max_length);

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
  /// i64 [N] with its images/videos and MRoPE positions [3, N]; cu_seqlens empty or [0, N]; labels ignored) and
  /// fills the cache. A sample of a pack is data::sample_of_pack(pack, s, prompt_tokens).view(); truncation keeps
  /// every vision input of the sample, so cutting through or before a vision span makes the pads and grids
  /// disagree, which prefill reports.
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
  int64_t cache_bytes() const { return cache_.bytes(); }  // k and v of every layer, preallocated

 private:
  Generator() = default;
  const Model* model_ = nullptr;
  Allocator* alloc_ = nullptr;
  int64_t max_length_ = 0, length_ = 0, rope_delta_ = 0;
  bool prefilled_ = false;
  vlpar::nn::KvCache cache_;  // per layer [max_length, H_kv, D]
  // Per-step buffers (one token): x, y, h [1, H]; positions i64 [3, 1]; token i64 [1]; logits [1, V].
  Tensor x_, y_, h_, positions_, token_, logits_;
};

}  // namespace qwen3vl
