// Greedy generation through pipeline stages. See pipeline_generate.hpp.
#include "pipeline_generate.hpp"

#include <algorithm>
#include <chrono>

namespace qwen3vl {
namespace {

double elapsed_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `seq` with `token` appended at sequence index n (position n + rope_delta on the three MRoPE rows; no label).
void append_token(vlpar::data::PackedBatch& seq, int64_t token, int64_t rope_delta) {
  const int64_t n = int64_t(seq.input_ids.size());
  std::vector<int64_t> pos;
  pos.reserve(size_t(3 * (n + 1)));
  for (int64_t row = 0; row < 3; ++row) {
    pos.insert(pos.end(), seq.positions.begin() + row * n, seq.positions.begin() + (row + 1) * n);
    pos.push_back(n + rope_delta);
  }
  seq.positions = std::move(pos);
  seq.input_ids.push_back(token);
  seq.labels.push_back(kIgnoreIndex);
  seq.cu_seqlens.back() = n + 1;
  seq.real_tokens = n + 1;
}

// The stages keep their last-position logits while one generation runs (switched off again on every return).
class KeepLastLogits {
 public:
  explicit KeepLastLogits(std::span<PipelineStage* const> stages) : stages_(stages) {
    for (PipelineStage* st : stages_) st->set_keep_last_logits(true);
  }
  ~KeepLastLogits() {
    for (PipelineStage* st : stages_) st->set_keep_last_logits(false);
  }
  KeepLastLogits(const KeepLastLogits&) = delete;
  KeepLastLogits& operator=(const KeepLastLogits&) = delete;

 private:
  std::span<PipelineStage* const> stages_;
};

// The next token: the argmax on the last stage's rank, broadcast over pp (−1 there: its argmax failed).
Result<int64_t> next_token(const PipelineForward& pipe) {
  int64_t tok = -1;
  Status mine = Status::Ok();
  if (pipe.pp->rank() == pipe.last_rank) {
    for (PipelineStage* st : pipe.stages) {
      if (st->last_logits(0).empty()) continue;
      const std::vector<float>& l = st->last_logits(0);
      const Result<int64_t> t = greedy_token(TensorView(const_cast<float*>(l.data()), vlpar::DType::kF32,
                                                        vlpar::Shape{int64_t(l.size())}));
      if (t.ok()) tok = t.value();
      else mine = t.status();
    }
  }
  VLPAR_RETURN_IF_ERROR(pipe.pp->broadcast(TensorView(&tok, vlpar::DType::kI64, vlpar::Shape{1}), pipe.last_rank));
  VLPAR_RETURN_IF_ERROR(mine);
  VLPAR_CHECK(tok >= 0, "generation: the last stage's rank {} found no next token (its error is in its log)",
              pipe.last_rank);
  return tok;
}

}  // namespace

Result<GenerateResult> generate_pipelined(const Context& ctx, const PipelineForward& pipe,
                                          const vlpar::data::PackedBatch& prompt, const GenerateOptions& options,
                                          int64_t max_length) {
  VLPAR_CHECK(pipe.engine != nullptr && pipe.pp != nullptr, "generate_pipelined: no engine or pipeline group");
  VLPAR_CHECK(options.max_new_tokens >= 1, "generate_pipelined: max_new_tokens must be at least 1, got {}",
              options.max_new_tokens);
  const int64_t N = int64_t(prompt.input_ids.size());
  VLPAR_CHECK(prompt.cu_seqlens.size() == 2 && N >= 1, "generate_pipelined: the prompt must be one non-empty sample, "
              "got {} boundaries and {} tokens", prompt.cu_seqlens.size(), N);
  VLPAR_CHECK(N < max_length, "generate_pipelined: the prompt has {} tokens, which leaves no room for a new token "
              "under max_length {}", N, max_length);
  VLPAR_CHECK(int64_t(prompt.positions.size()) == 3 * N, "generate_pipelined: the prompt has {} positions, MRoPE "
              "needs 3 · {}", prompt.positions.size(), N);
  const int64_t rope_delta = rope_delta_of(prompt.positions, N);
  const KeepLastLogits keep(pipe.stages);
  vlpar::data::PackedBatch seq = prompt;
  GenerateResult r;
  r.prompt_tokens = N;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    for (PipelineStage* st : pipe.stages) VLPAR_RETURN_IF_ERROR(st->set_step({seq.view()}, {0.0}));
    VLPAR_RETURN_IF_ERROR(pipe.engine->step(ctx));
    VLPAR_ASSIGN_OR_RETURN(const int64_t tok, next_token(pipe));
    if (r.tokens.empty()) {
      r.prefill_seconds = elapsed_since(t0);
      t0 = std::chrono::steady_clock::now();
    } else {
      ++r.decode_steps;
    }
    r.tokens.push_back(tok);
    if (const std::optional<StopReason> stop = stop_after(r.tokens, N, options, max_length)) {
      r.stop = *stop;
      break;
    }
    append_token(seq, tok, rope_delta);
  }
  r.decode_seconds = elapsed_since(t0);
  return r;
}

}  // namespace qwen3vl
