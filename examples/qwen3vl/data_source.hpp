#pragma once
// The trainer's micro-batch source over a dataset (data.train): the vlpar data pipeline — sample stream over
// WebDataset/Energon shards (this dp rank's share), decoding, Qwen image processing, chat template, packing under
// data.token_budget / data.patch_budget — as a resumable BatchSource.
#include <memory>

#include "train_config.hpp"
#include "trainer.hpp"

namespace qwen3vl {

/// @brief The data pipeline for `cfg.data` as a BatchSource for data-parallel rank dp_rank of dp_size.
Result<std::unique_ptr<BatchSource>> make_dataset_source(const TrainConfig& cfg, int dp_rank, int dp_size);

}  // namespace qwen3vl
