#pragma once
// Greedy generation through pipeline stages (docs/pipeline.md "Generation"): the forward-only schedule of one
// micro-batch serves decoding when the model is split over pipeline ranks.
//
//   per new token:  every rank sets the sequence so far as the step's one micro-batch → the forward-only engine
//                   runs it through the stages (stage 0: vision tower and embedding; the last stage: final norm,
//                   head and the last position's logits, PipelineStage::set_keep_last_logits) → the last stage's
//                   rank takes the argmax (greedy_token: ties → the lowest id) and broadcasts it over pp → every
//                   rank appends it (label ignored; position n + rope_delta on all three MRoPE rows, rope_delta =
//                   max(prompt positions) + 1 − prompt length, as Generator does)
//   stops:          as Generator::generate (an eos id, max_new_tokens, max_length).
// Each token runs the whole sequence again (no KV cache across stages yet): O(n²) in the generated length, meant
// for short answers (held-out VQA); the numbers are the one-process forward's bit for bit, so the tokens are
// those of a one-process full-forward greedy loop (and of Generator's KV-cache decode wherever its ~1e-6 logit
// difference does not flip an argmax). tp 1 only (the last stage needs the whole LM head). Collective over pp.
// Test: examples/qwen3vl/tests/mpi_pipeline.cpp (np 2 and 4: the HF fixtures' generate.json cases through 2 stages
// give transformers' ids).
#include <span>

#include "generate.hpp"
#include "pipeline_stage.hpp"
#include "vlpar/comm/communicator.hpp"
#include "vlpar/data/packing.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"

namespace qwen3vl {

/// This rank's side of a pipeline for generation: its stage objects, the forward-only engine of one micro-batch
/// over them (pipeline::forward_only(p, 1, placement), lowered), the pp group and the last stage's pipeline rank.
struct PipelineForward {
  std::span<PipelineStage* const> stages;
  vlpar::pipeline::Engine<PipelineStage>* engine = nullptr;
  vlpar::comm::Communicator* pp = nullptr;
  int last_rank = 0;
};

/// @brief Greedy decoding of `prompt` (one sample, as data::sample_of_pack makes it; its pixels are read on stage
/// 0's rank only) through `pipe` (file comment). Every rank returns the same result. Errors: a prompt of several
/// samples, max_new_tokens < 1, a prompt that leaves no room under max_length, and a stage's or the argmax's
/// error (an argmax error on the last stage's rank reaches every rank).
Result<GenerateResult> generate_pipelined(const Context& ctx, const PipelineForward& pipe,
                                          const vlpar::data::PackedBatch& prompt, const GenerateOptions& options,
                                          int64_t max_length);

}  // namespace qwen3vl
