#pragma once
// Held-out VQA accuracy by greedy generation (qwen3vl-generate --eval; the README main job's proof that the vision
// path learns).
//
// For each sample of a dataset split (plan order, no shuffle, one pass), the same ConversationBuilder the trainer
// used builds the full chat (question with its image, the reference answer). The prompt is every token before the
// first supervised label — the "<|im_start|>assistant\n" header included, i.e. HF's add_generation_prompt=True
// prompt — with the sample's images; the reference is the supervised tokens (the answer and its <|im_end|>).
// Greedy decoding with the KV cache (generate.hpp) runs until <|im_end|> or reference length + 2 tokens; a sample
// is correct when the generated ids equal the reference ids exactly (so "left" is right and "left." is wrong).
// Per question type (the record's "question_type", else "all"), chance = 1 / (distinct reference answers of that
// type in the split): the accuracy of guessing uniformly among the answers the split asks for. The overall chance
// is the mean of the samples' chances.
// A sample that fails to build (corrupt image, malformed record) or has no supervised token is skipped and
// counted, never fatal.
// Test: examples/qwen3vl/tests/test_data_source.cpp (a model trained to answer from the pixels scores above chance;
// the scoring itself on hand-made generations).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model.hpp"
#include "vlpar/data/conversation.hpp"

namespace qwen3vl {

struct VqaEvalOptions {
  std::string dataset;        // dataset root (data_source.hpp: Energon, a directory of shards, or a pattern)
  std::string split = "val";  // Energon split part
  int64_t limit = 0;          // samples to evaluate (0 = the whole split)
  int64_t extra_tokens = 2;   // generated tokens allowed beyond the reference length
  int64_t examples = 3;       // "question → generated (reference)" lines kept for the report
};

struct VqaTypeScore {
  int64_t correct = 0;
  int64_t total = 0;
  std::map<std::string, int64_t> answers;  // reference answer text → count
  double accuracy() const { return total > 0 ? double(correct) / double(total) : 0.0; }
  double chance() const { return answers.empty() ? 0.0 : 1.0 / double(answers.size()); }
};

struct VqaEvalReport {
  int64_t correct = 0;
  int64_t total = 0;
  int64_t skipped = 0;                       // samples that failed to build or had nothing to answer
  double chance = 0.0;                       // mean per-sample chance
  std::map<std::string, VqaTypeScore> by_type;
  std::vector<std::string> examples;
  double seconds = 0.0;
  double accuracy() const { return total > 0 ? double(correct) / double(total) : 0.0; }
  /// "accuracy 0.812 (650/800) vs chance 0.458" followed by one line per question type.
  std::string to_string() const;
};

/// @brief Whether the generated ids answer the reference: equal ids (the reference ends with <|im_end|>).
bool vqa_correct(const std::vector<int64_t>& generated, const std::vector<int32_t>& reference);

/// @brief Evaluates `model` on `options.dataset` (file comment). ctx.allocator must be set. Errors: the dataset
/// cannot be opened or read (named), an empty split, a generation error.
Result<VqaEvalReport> evaluate_vqa(const Context& ctx, const Model& model,
                                   const vlpar::data::ConversationBuilder& builder, const VqaEvalOptions& options,
                                   Allocator& alloc);

}  // namespace qwen3vl
