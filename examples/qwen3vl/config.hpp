#pragma once
// Qwen3-VL (dense and MoE) model configuration: typed structs, parsing and writing of Hugging Face config.json,
// validation with one-sentence errors, the published sizes as presets, and parameter counts.
//   TextConfig   : the language model (spec qwen3vl.md §1.2, §1.3)
//   VisionConfig : the ViT, its mergers and deepstack levels (§1.4)
//   Config       : both, plus the special token ids and the architecture (dense / MoE) (§1.1)
// Behaviour follows the installed transformers 4.57.1 wherever it and the spec differ (see config.cpp's notes).
// Test: examples/qwen3vl/tests/test_config.cpp (ctest --test-dir build/<dir> -R Config).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/data/mrope_positions.hpp"

namespace qwen3vl {

using vlpar::Result;
using vlpar::Status;

/// Language model. Sizes use the STYLE §19 vocabulary (V, H, I, L, nH, nKV, hd, E, k).
struct TextConfig {
  int64_t vocab = 0;          // V
  int64_t hidden = 0;         // H
  int64_t intermediate = 0;   // I: dense SwiGLU width (every layer of a dense model; mlp_only layers of a MoE one)
  int layers = 0;             // L
  int heads = 0;              // nH, query heads
  int kv_heads = 0;           // nKV; divides nH (GQA: q head i reads kv head i / (nH/nKV))
  int head_dim = 0;           // hd; explicit in every hub config (32B: 128, not 5120/64)
  double rms_eps = 1e-6;      // every text RMSNorm, q_norm and k_norm included
  double rope_theta = 5e6;    // MRoPE base
  std::array<int, 3> mrope_section = {24, 20, 20};  // frequencies per (T, H, W) axis; Σ = hd/2 (§4.4)
  int64_t max_position_embeddings = 262144;         // metadata only: default RoPE never reads it
  bool tie_word_embeddings = false;  // text-level flag: the one transformers 4.57.1 ties by (Config::validate)
  bool attention_bias = false;       // must be false (no q/k/v/o bias in Qwen3-VL, none implemented)
  int64_t pad_token_id = -1;         // embedding padding_idx (row gets no gradient); -1 = unset, as on the hub
  double initializer_range = 0.02;   // std of the normal init of projections and embeddings
  // MoE (Qwen3VLMoeForConditionalGeneration only; all zero / empty in a dense model)
  int num_experts = 0;                 // E; 0 = dense
  int top_k = 0;                       // k = num_experts_per_tok; 1 ≤ k ≤ E
  int64_t moe_intermediate = 0;        // I_moe, each expert's SwiGLU width
  int decoder_sparse_step = 1;         // layer l is sparse iff (l+1) % step == 0 (and not mlp-only)
  std::vector<int> mlp_only_layers;    // layers forced dense (width `intermediate`)
  double router_aux_loss_coef = 0.001; // loss += coef · aux (spec §5)
  // vlpar extension, not in HF Qwen3-VL-MoE: an fp32 expert bias per MoE layer that steers the router's selection
  // (aux-loss-free balancing; kernels/router.hpp), held as model.language_model.layers.<l>.mlp.gate.
  // e_score_correction_bias (DeepSeek-V3's name). config.json key "router_expert_bias", written only when true.
  bool router_expert_bias = false;
  // vlpar extension: loss += coef · z, the router z-loss (ST-MoE; kernels/router.hpp). config.json key
  // "router_z_loss_coef", written only when > 0. HF has no z-loss: keep 0 for HF parity of the loss.
  double router_z_loss_coef = 0;
  // vlpar extension: loss += coef · the sequence-level aux (DeepSeek-V3, Megatron seq_aux_loss; kernels/router.hpp),
  // config.json key "router_seq_aux_loss_coef", written only when > 0.
  double router_seq_aux_loss_coef = 0;
  // vlpar extension: > 0 caps each expert at ⌈factor · N·K / E⌉ rows of each rank's N tokens per layer, dropping
  // the rest (nn::MoeConfig::capacity_factor; the later tokens of an expert go first). config.json key
  // "moe_capacity_factor", written only when > 0. HF Qwen3-VL-MoE is dropless: keep 0 for HF parity.
  double moe_capacity_factor = 0;

  /// @brief Whether decoder layer l (0-based) has a MoE block instead of the dense MLP (spec §1.3):
  /// l ∉ mlp_only_layers and num_experts > 0 and (l+1) % decoder_sparse_step == 0.
  bool is_moe_layer(int l) const;
  /// Number of MoE layers (0 for a dense model).
  int num_moe_layers() const;

  bool operator==(const TextConfig&) const = default;
};

/// Vision tower: patch embed, learned interpolated position table, `depth` pre-norm blocks with 2D RoPE,
/// the final merger and one deepstack merger per entry of deepstack_indexes. Hv = hidden, Iv = intermediate,
/// D = out_hidden, m = merge, P = patch, Tp = temporal_patch.
struct VisionConfig {
  int depth = 0;                          // number of ViT blocks
  int64_t hidden = 0;                     // Hv
  int64_t intermediate = 0;               // Iv
  int heads = 0;                          // head_dim = Hv/heads, a multiple of 4 (2D rotary: row and column halves)
  int patch = 16;                         // P, pixels per patch side
  int temporal_patch = 2;                 // Tp, frames per patch
  int merge = 2;                          // m; m² patches become one LLM token
  int in_channels = 3;                    // C
  int64_t out_hidden = 0;                 // D; equals the text hidden size
  int64_t num_position_embeddings = 2304; // G², a perfect square (G = 48 on the hub)
  std::vector<int> deepstack_indexes;     // 0-based blocks whose output feeds deepstack merger j; increasing
  std::string hidden_act = "gelu_pytorch_tanh";  // block MLP activation; the only one supported
  double initializer_range = 0.02;

  int head_dim() const { return heads > 0 ? int(hidden / heads) : 0; }
  /// Length of one flattened patch vector, C·Tp·P·P (1536 on the hub).
  int64_t patch_dim() const { return int64_t(in_channels) * temporal_patch * patch * patch; }

  bool operator==(const VisionConfig&) const = default;
};

struct Config {
  TextConfig text;
  VisionConfig vision;
  int64_t image_token_id = 151655;         // <|image_pad|>
  int64_t video_token_id = 151656;         // <|video_pad|>
  int64_t vision_start_token_id = 151652;  // <|vision_start|>
  int64_t vision_end_token_id = 151653;    // <|vision_end|>
  // Top-level tie_word_embeddings. transformers 4.57.1 ties lm_head to embed_tokens by the TEXT-level flag only
  // (get_text_config(decoder=True)); validate() demands both agree so a config can never mean two things.
  bool tie_word_embeddings = false;
  bool moe = false;  // Qwen3VLMoeForConditionalGeneration (model_type qwen3_vl_moe); else the dense model
  /// Training precision (DESIGN §6), set by the program, not read from config.json (whose torch_dtype is only how
  /// the file stores weights): f32, or bf16 parameters and activations with f32 gradients, optimizer masters,
  /// statistics, router and loss.
  vlpar::DType dtype = vlpar::DType::kF32;

  /// @brief Checks every size and every cross-constraint; the first conflict comes back as one sentence naming
  /// the field ("text_config.num_attention_heads 6 is not a multiple of num_key_value_heads 4").
  Status validate() const;
  /// The special token ids and merge size that MRoPE positions depend on (data/mrope_positions.hpp).
  vlpar::data::MropeDesc mrope_desc() const {
    return {image_token_id, video_token_id, vision_start_token_id, vision.merge};
  }

  bool operator==(const Config&) const = default;
};

/// @brief Parses a Qwen3VLForConditionalGeneration / Qwen3VLMoeForConditionalGeneration config.json, in the
/// transformers v4.57 spelling (text_config.rope_theta + rope_scaling{mrope_section, mrope_interleaved,
/// rope_type}) or the v5 spelling (text_config.rope_parameters{rope_theta, mrope_section, ...}), applies the
/// transformers 4.57.1 class defaults to absent keys and returns the validated Config.
/// @param json_text   the file's contents
/// @param source_name where it came from, used as the prefix of every error ("ckpt/config.json: ...")
Result<Config> parse_hf_config(std::string_view json_text, std::string_view source_name);

/// @brief parse_hf_config of `dir_or_file`, or of `dir_or_file`/config.json when it is a directory.
Result<Config> load_hf_config(const std::string& dir_or_file);

/// @brief A config.json (v4.57 spelling, both tie flags, every field explicit) that transformers 4.57.1
/// loads with AutoConfig and from which Qwen3VL(Moe)ForConditionalGeneration builds; parse_hf_config of it
/// returns `c` again.
std::string to_hf_config_json(const Config& c);

/// @brief Published sizes (spec §1.5): "2B", "4B", "8B", "32B", "30B-A3B", "235B-A22B"; and debug sizes
/// (spec §12) "tiny-dense" and "tiny-moe" (small vocab with the special ids inside it; MoE with one
/// mlp-only layer so both MLP kinds occur).
Result<Config> preset(std::string_view name);

/// Parameter counts, in elements, of the modules HF builds (norm weights and biases included).
struct ParamCounts {
  int64_t vision = 0;          // model.visual.* (patch embed, pos table, blocks, merger, deepstack mergers)
  int64_t text_embedding = 0;  // embed_tokens, V·H
  int64_t lm_head = 0;         // V·H when untied, 0 when tied
  int64_t text_layers = 0;     // all decoder layers (every expert counted) + final norm
  int64_t text_total() const { return text_embedding + lm_head + text_layers; }  // "LLM total params" (§8)
  int64_t total() const { return vision + text_total(); }
};
ParamCounts count_params(const Config& c);

}  // namespace qwen3vl
