#pragma once
// The trainer's micro-batches from a dataset (data.train): the vlpar data pipeline as a resumable BatchSource.
//
//   dataset root ─► SampleStream (this dp rank's disjoint share; seeded shard order + shuffle buffer; endless epochs)
//     ─► Loader workers: ConversationBuilder (decode, Qwen image processing with data.min/max_pixels, chat
//        template, labels by data.mode) ─► best-fit packing under data.token_budget / data.patch_budget
//     ─► PackedBatch ─► PackedBatch::view() ─► the model
//
// The dataset root is an Energon-prepared dataset (a `.nv-meta/` directory: split part data.split), a directory
// of WebDataset `*.tar` shards (read in name order), or a shard path / brace pattern ("shards/train-{000..009}.tar").
// State (checkpoints): the loader's JSON state (vlpar/data/loader.hpp), so a resumed run continues with exactly
// the micro-batch the uninterrupted run would have trained on next.
// Skipped samples (undecodable image, malformed record, over a budget alone) are counted, warned with their key and
// summarised by summary() at the end of training; they never stop the run.
// Test: examples/qwen3vl/tests/test_data_source.cpp.
#include <memory>
#include <string>

#include "train_config.hpp"
#include "trainer.hpp"
#include "vlpar/data/conversation.hpp"
#include "vlpar/data/sample_stream.hpp"

namespace qwen3vl {

/// @brief The ConversationBuilder of `data`: tokenizer data.tokenizer, labels by data.mode (sft | caption), image
/// and video pixel limits data.min_pixels / data.max_pixels. Errors name the tokenizer file.
Result<std::shared_ptr<const vlpar::data::ConversationBuilder>> make_conversation_builder(const DataSection& data);

/// @brief The shards of a dataset root (file comment) with the Energon split's sample excludes.
struct DatasetShards {
  std::vector<vlpar::data::StreamShard> shards;
  std::set<std::string> excludes;
  std::string kind;  // "energon split 'train'" or "webdataset"
};
Result<DatasetShards> open_dataset_shards(const std::string& root, const std::string& split);

/// @brief The data pipeline for `cfg.data` as a BatchSource for data-parallel rank dp_rank of dp_size: the
/// training data (data.train, split data.split), or with `held_out` the evaluation data (data.eval, else
/// data.train, split data.eval_split; not re-dealt across dp ranks).
Result<std::unique_ptr<BatchSource>> make_dataset_source(const TrainConfig& cfg, int dp_rank, int dp_size,
                                                         bool held_out = false);

}  // namespace qwen3vl
