#pragma once
// The trainer's configuration: one typed struct per component, mapped one to one from a TOML file (toml++) and
// from `--section.key=value` command-line overrides (precedence: command line > TOML > defaults, as torchtitan).
// Unknown sections or keys are errors naming the file and line ("train.toml:12: unknown key training.stpes");
// values of the wrong type too. validate() checks cross-field constraints in one sentence each. to_toml() prints
// the resolved config (the trainer prints it at start and saves it with every checkpoint).
// Test: examples/qwen3vl/tests/test_train_config.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"

namespace qwen3vl {

using vlpar::Result;
using vlpar::Status;

struct ModelSection {
  std::string preset = "tiny-dense";  // config.hpp preset, used when hf_dir is empty (random init from seed)
  std::string hf_dir;                 // initialise from an HF directory (config.json + safetensors) instead
  std::string config_json;            // or a config.json with random init (e.g. a demo model)
  uint64_t seed = 1234;               // Philox seed of the random init
  bool freeze_vision = false;         // patch embed, position table, ViT blocks
  bool freeze_merger = false;         // final and deepstack mergers
  bool freeze_language_model = false; // embeddings, decoder, final norm, LM head
};

struct DataSection {
  std::string train;                  // dataset root (WebDataset shards or an Energon-prepared dataset)
  std::string eval;                   // held-out split for --eval (may equal train with another split)
  std::string split = "train";        // Energon split part of `train`
  std::string eval_split = "val";     // Energon split part of `eval`
  std::string tokenizer;              // tokenizer.json
  std::string mode = "sft";           // sft (assistant replies supervised) | caption (all text supervised)
  int workers = 2;                    // loader worker threads (output identical for any count)
  int prefetch = 4;                   // micro-batches queued ahead
  int64_t token_budget = 2048;        // tokens per packed micro-batch
  int64_t patch_budget = 16384;       // vision patches per packed micro-batch
  int64_t min_pixels = 3136;          // image processor limits (spec §2.1; small for CPU training)
  int64_t max_pixels = 50176;
  uint64_t seed = 1;                  // shard order and shuffle buffer
  int shuffle_buffer = 64;
  bool balance_vision = true;         // dp > 1: re-deal each step's packs over the dp ranks by vision cost
};

struct OptimizerSection {
  double lr = 1e-3;            // peak learning rate
  double min_lr_ratio = 0.1;   // cosine floor as a fraction of lr
  double weight_decay = 0.01;  // decoupled (AdamW); not applied to norms and biases
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

struct ScheduleSection {
  int warmup_steps = 10;         // linear warmup from lr/warmup_steps to lr
  std::string decay = "cosine";  // cosine | linear | constant, from warmup end to training.steps
};

struct TrainingSection {
  int steps = 100;               // optimizer steps
  int grad_accum = 1;            // micro-batches per optimizer step
  double max_grad_norm = 1.0;    // global-norm clipping; 0 = off
  std::string recompute = "none";  // activation recompute: none | selective | full
  std::string dtype = "f32";     // parameter storage: f32 (bf16 storage is not implemented by the CPU blocks)
  int max_nonfinite_in_a_row = 3;  // a non-finite loss or grad norm skips the step; this many in a row abort
  int threads = 0;               // CPU threads (0 = all)
};

struct CheckpointSection {
  std::string dir = "runs/qwen3vl/checkpoints";
  int interval = 0;              // save every N steps (0 = only at the end)
  int keep_last = 2;             // complete checkpoints kept
  bool resume = true;            // continue from the latest checkpoint in dir when there is one
  bool allow_layout_change = false;  // resume a checkpoint saved at another dp size: model and optimizer reshard,
                                     // the data stream restarts (a tp change alone keeps the data position)
  std::string export_hf;         // at the end, also export an HF directory here
};

struct MetricsSection {
  std::string dir = "runs/qwen3vl";  // metrics.jsonl, TensorBoard events, trace.json, plot.png
  int log_interval = 1;
  bool tensorboard = true;
  bool trace = true;
  double peak_gflops = 0;        // device peak for MFU; 0 = measure this CPU's GEMM rate at start
};

struct ParallelSection {
  int tp = 1;                    // tensor parallel size (world = tp · dp under mpirun)
  bool zero1 = false;            // shard the fp32 optimizer state over the dp ranks (ZeRO-1)
  double bucket_mb = 25;         // gradient-reduction bucket size (MiB of fp32), started during the backward
};

struct TrainConfig {
  ModelSection model;
  DataSection data;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  TrainingSection training;
  CheckpointSection checkpoint;
  MetricsSection metrics;
  ParallelSection parallel;

  /// @brief Cross-field checks, the first conflict as one sentence naming the key.
  Status validate() const;
  /// @brief The resolved config as TOML (every key, sections in declaration order).
  std::string to_toml() const;
};

/// @brief Parses TOML text, then applies overrides ("--training.steps=100" or "training.steps=100"), then
/// validates. `source` prefixes every error.
Result<TrainConfig> parse_train_config(std::string_view toml_text, std::string_view source,
                                       std::span<const std::string> overrides = {});
/// @brief parse_train_config of a file (empty path = defaults plus overrides).
Result<TrainConfig> load_train_config(const std::string& path, std::span<const std::string> overrides = {});

}  // namespace qwen3vl
