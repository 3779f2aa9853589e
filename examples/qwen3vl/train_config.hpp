#pragma once
// The trainer's configuration: one typed struct per component, mapped one to one from a TOML file (toml++) and
// from `--section.key=value` command-line overrides (precedence: command line > TOML > defaults, as torchtitan).
// Where the library has a config for a component, the section holds it (the optimizer's
// parallel::OptimizerConfig, the lr schedule, the loader's and the sample stream's configs, the parallel layout),
// and the TOML keys are bound to its fields; the table in train_config.cpp lists every key and where it goes.
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
#include "vlpar/data/loader.hpp"
#include "vlpar/data/sample_stream.hpp"
#include "vlpar/parallel/distributed_optimizer.hpp"
#include "vlpar/parallel/lr_schedule.hpp"
#include "vlpar/parallel/parallel_config.hpp"

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

/// The loader's defaults for CPU training: 2 workers, 4 batches ahead, packs of 2048 tokens / 16384 patches.
inline vlpar::data::LoaderConfig default_loader_config() {
  vlpar::data::LoaderConfig c;
  c.num_workers = 2;
  c.prefetch = 4;
  c.packing.max_tokens = 2048;
  c.packing.max_patches = 16384;
  return c;
}

/// Shard order and shuffling: seed 1, a 64-sample shuffle buffer.
inline vlpar::data::SampleStreamConfig default_stream_config() {
  vlpar::data::SampleStreamConfig c;
  c.seed = 1;
  c.shuffle_buffer = 64;
  return c;
}

struct DataSection {
  std::string train;                  // dataset root (WebDataset shards or an Energon-prepared dataset)
  std::string eval;                   // held-out split for --eval (may equal train with another split)
  std::string split = "train";        // Energon split part of `train`
  std::string eval_split = "val";     // Energon split part of `eval`
  std::string tokenizer;              // tokenizer.json
  std::string mode = "sft";           // sft (assistant replies supervised) | caption (all text supervised)
  // data.workers, data.prefetch, data.token_budget, data.patch_budget: the loader's num_workers, prefetch,
  // packing.max_tokens, packing.max_patches (output identical for any worker count)
  vlpar::data::LoaderConfig loader = default_loader_config();
  // data.seed, data.shuffle_buffer: shard order and shuffle buffer (dp_rank/dp_size are set by the trainer)
  vlpar::data::SampleStreamConfig stream = default_stream_config();
  int64_t min_pixels = 3136;          // image processor limits (spec §2.1; small for CPU training)
  int64_t max_pixels = 50176;
  bool balance_vision = true;         // dp > 1: re-deal each step's packs over the dp ranks by vision cost
};

/// The optimizer's defaults of the example: AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.01 (not on
/// norms and biases), clipping at global norm 1.0, 25 MiB buckets.
inline vlpar::parallel::OptimizerConfig default_optimizer_config() {
  vlpar::parallel::OptimizerConfig c;
  c.adamw = vlpar::AdamWConfig{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.01f};
  c.max_grad_norm = 1.0;
  c.zero1 = false;
  c.average_grads = false;  // each micro-batch's backward is scaled by its share of the global label count
  c.bucket_bytes = size_t(25) << 20;
  return c;
}

struct TrainingSection {
  int steps = 100;               // optimizer steps (also the lr schedule's total_steps)
  int grad_accum = 1;            // micro-batches per optimizer step
  std::string recompute = "none";  // activation recompute: none | selective | full
  std::string dtype = "f32";     // f32, or bf16: bf16 parameters and activations, f32 gradients, masters, Adam
                                 // state, statistics and losses (DESIGN §6); checkpoints hold the f32 masters
  int max_nonfinite_in_a_row = 3;  // a non-finite loss or grad norm skips the step; this many in a row abort
  int threads = 0;               // CPU threads (0 = all)
  int eval_interval = 0;         // held-out loss every N steps and at the end (0 = never); data: data.eval (else
                                 // data.train) at data.eval_split, or the --eval-batches files
  int eval_batches = 8;          // micro-batches per evaluation (per data-parallel rank; the same ones each time)
};

struct CheckpointSection {
  std::string dir = "runs/qwen3vl/checkpoints";
  int interval = 0;              // save every N steps (0 = only at the end)
  int keep_last = 2;             // complete checkpoints kept
  bool resume = true;            // continue from the latest checkpoint in dir when there is one
  bool allow_layout_change = false;  // resume a checkpoint saved at another dp size: model and optimizer reshard,
                                     // the data stream restarts (a tp change alone keeps the data position)
  std::string export_hf;         // at the end, also export an HF directory here
  std::string export_dtype = "f32";  // the HF export's storage dtype: f32 or bf16 (the weights the model computes
                                     // with: a bf16 run's bf16 values, widened exactly to f32 when asked)
};

struct MetricsSection {
  std::string dir = "runs/qwen3vl";  // metrics.jsonl, TensorBoard events, trace.json, plot.png
  int log_interval = 1;
  bool tensorboard = true;
  bool trace = true;
  double peak_gflops = 0;        // device peak for MFU; 0 = measure this CPU's GEMM rate at start
};

/// The library's parallel layout: parallel.tp, parallel.pp, parallel.ep, parallel.sequence_parallel (world =
/// tp · dp · pp under mpirun; the trainer sets world). ep folds over the tp × dp ranks of a stage: each MoE layer's
/// experts are split over ep ranks, which must hold different tokens, so ep with tp > 1 needs sequence parallelism.
/// parallel.etp splits each expert's width over that many ranks (expert tensor parallelism, folded like ep; with
/// tp > 1 it needs sequence parallelism). parallel.vision_tp splits the vision blocks (dividing tp, or a multiple of
/// it: the group then runs the images of vision_tp / tp data-parallel batches together, vision_slots.hpp). For etp
/// and vision_tp 0 or 1 = whole on every rank, unlike the library's ParallelConfig where 0 means tp. Also the
/// pipeline's schedule and layer split, and the gradient-bucket size in MiB (parallel.bucket_mb; parsing derives
/// optimizer.bucket_bytes).
struct ParallelSection : vlpar::parallel::ParallelConfig {
  double bucket_mb = 25;
  int vpp = 1;                     // virtual stages per pipeline rank (> 1: interleaved; 2: zb_v)
  std::string schedule = "1f1b";   // pipeline schedule: gpipe | 1f1b | interleaved (vpp > 1) | zb_h1 | zb_v
                                   // (vpp = 2); micro-batches per step = training.grad_accum
  std::string pipeline_layout;     // Megatron layout string ("V E t*2 | t*3 L"); "" = the cost-model split
};

/// MoE load balancing beyond the model's own aux loss (text_config.router_aux_loss_coef).
struct MoeSection {
  // Aux-loss-free balancing (DeepSeek-V3; kernels/router.hpp): > 0 gives every MoE router an fp32 expert bias that
  // steers the top-k selection, moved by ± this much after each optimizer step towards the global batch's mean
  // load (Megatron's default rate: 1e-3). 0 = no update (a bias the model already has is kept and used).
  double expert_bias_rate = 0;
  // Router z-loss coefficient (ST-MoE, Megatron --moe-z-loss-coeff; 1e-3 is ST-MoE's): loss += coef · Σ over the
  // MoE layers of mean_t logsumexp(router logits_t)². 0 = the model config's text_config.router_z_loss_coef.
  double z_loss_coef = 0;
  // Sequence-level aux coefficient (DeepSeek-V3 α = 1e-4, Megatron seq_aux_loss): loss += coef · Σ over the MoE
  // layers of the Switch loss per packed sample, averaged over the samples. 0 = the model config's value.
  double seq_aux_coef = 0;
  // Expert capacity factor (GShard/Switch, Megatron --moe-expert-capacity-factor with the "position" drop policy):
  // > 0 caps each expert at ⌈factor · N·K / E⌉ rows of each rank's N tokens per layer; the rest are dropped and
  // counted (moe_dropped in the metrics). 0 = the model config's text_config.moe_capacity_factor (HF: dropless).
  double capacity_factor = 0;
};

struct TrainConfig {
  ModelSection model;
  DataSection data;
  // [optimizer] lr, beta1, beta2, eps, weight_decay -> adamw.*; training.max_grad_norm; parallel.zero1;
  // bucket_bytes = parallel.bucket_mb MiB (set by parsing)
  vlpar::parallel::OptimizerConfig optimizer = default_optimizer_config();
  // [schedule] warmup_steps, decay; optimizer.min_lr_ratio; total_steps = training.steps (set by parsing)
  vlpar::parallel::LrSchedule schedule{.warmup_steps = 10, .total_steps = 100, .decay = "cosine", .min_lr_ratio = 0.1};
  TrainingSection training;
  CheckpointSection checkpoint;
  MetricsSection metrics;
  ParallelSection parallel;
  MoeSection moe;

  /// @brief Cross-field checks, the first conflict as one sentence naming the key.
  Status validate() const;
  /// Sets the fields other keys determine: schedule.total_steps = training.steps, optimizer.bucket_bytes from
  /// parallel.bucket_mb (parsing and the Trainer call it, so editing those keys in code is enough).
  void derive();
  /// @brief The resolved config as TOML (every key, sections in declaration order).
  std::string to_toml() const;
};

/// Bytes of a bucket of `mb` MiB.
size_t bucket_bytes_of(double mb);

/// @brief Parses TOML text, then applies overrides ("--training.steps=100" or "training.steps=100"), then
/// validates. `source` prefixes every error.
Result<TrainConfig> parse_train_config(std::string_view toml_text, std::string_view source,
                                       std::span<const std::string> overrides = {});
/// @brief parse_train_config of a file (empty path = defaults plus overrides).
Result<TrainConfig> load_train_config(const std::string& path, std::span<const std::string> overrides = {});

}  // namespace qwen3vl
