#pragma once
// A trained model back from a vlpar training checkpoint (io/checkpoint.hpp, written by the trainer), for inference
// and evaluation: the checkpoint's meta.json holds the resolved training config (TOML), which names the model
// (preset, config.json or HF directory) and the data settings (tokenizer, processor pixel limits) the model was
// trained with; the parameters are read from the rank files in any saved layout (TP×DP shards are stitched by
// load_checkpoint), into a single-process model.
// Test: examples/qwen3vl/tests/test_data_source.cpp (train on a dataset, load the checkpoint, same logits).
#include <cstdint>
#include <string>

#include "config.hpp"
#include "model.hpp"
#include "train_config.hpp"

namespace qwen3vl {

/// @brief The model config a ModelSection names: hf_dir's config.json, else config_json, else the preset.
Result<Config> model_config_of(const ModelSection& m);

struct CheckpointModel {
  std::string dir;     // the step directory that was loaded
  int64_t step = 0;
  TrainConfig config;  // the training run's resolved config
  Model model;
};

/// @brief Loads `path` — a checkpoint root (its latest committed checkpoint) or one step-<N> directory — into a
/// single-process model with the given freeze (all frozen for inference: no gradients allocated). Errors name the
/// directory: no committed checkpoint, a config that no longer parses, a parameter missing or misshapen.
Result<CheckpointModel> load_checkpoint_model(const Context& ctx, const std::string& path, const Freeze& freeze,
                                              Allocator& alloc);

}  // namespace qwen3vl
