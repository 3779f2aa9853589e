// Qwen3-VL config: HF config.json parsing and writing, validation, presets, parameter counts.
// See config.hpp. Where transformers 4.57.1 (the version hub checkpoints were exported with) and the spec differ,
// 4.57.1 wins; the places that matter, checked against the installed package:
//  * Dense text head_dim absent -> 128 (Qwen3VLTextConfig's class default), NOT hidden/heads; only the MoE text
//    config falls back to hidden/heads (`head_dim or hidden_size // num_attention_heads`).
//  * tie_word_embeddings: the model ties lm_head by text_config.tie_word_embeddings alone
//    (PreTrainedModel.tie_embeddings_and_encoder_decoder reads get_text_config(decoder=True)); the top-level flag
//    is ignored. A config whose two flags differ means one thing to 4.57.1 and possibly another to readers, so
//    Config::validate rejects it.
//  * The rotary module reads rope_scaling["rope_type"] (default "default") and rope_scaling["mrope_section"]
//    (default [24,20,20]); rope_scaling = None crashes the model build, and 4.57.1 ignores rope_parameters, so
//    it cannot build a model from a v5-spelling config. We read either spelling.
//  * mrope_interleaved and norm_topk_prob are read by nobody (always interleaved, always renormalised).
//  * apply_interleaved_mrope checks nothing about mrope_section; validate() demands Σ = hd/2 and that the H and
//    W slots fit below hd/2, so that the section really is the number of frequencies per axis.
#include "config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace qwen3vl {

using vlpar::StatusCode;

// ---------------------------------------------------------------------------------------------------------------
// TextConfig

bool TextConfig::is_moe_layer(int l) const {
  for (int d : mlp_only_layers)
    if (d == l) return false;
  return num_experts > 0 && decoder_sparse_step > 0 && (l + 1) % decoder_sparse_step == 0;
}

int TextConfig::num_moe_layers() const {
  int n = 0;
  for (int l = 0; l < layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------------------------------------------------------
// validate

namespace {

std::string int_list(const std::vector<int>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }
std::string int_list(const std::array<int, 3>& v) { return fmt::format("[{}, {}, {}]", v[0], v[1], v[2]); }

bool is_perfect_square(int64_t n) {
  if (n <= 0) return false;
  auto r = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  while (r * r > n) --r;
  while ((r + 1) * (r + 1) <= n) ++r;
  return r * r == n;
}

// Upper bounds on sizes, checked before any size arithmetic or allocation: far above any released model, and low
// enough that products of them (V·H, E·H·2I, …) stay far from int64 overflow.
constexpr int64_t kMaxWidth = int64_t(1) << 20, kMaxCount = int64_t(1) << 12;
constexpr const char* kSanity = "a sanity bound, far above any released model";

Status at_most(const char* key, int64_t v, int64_t max, const char* why) {
  VLPAR_CHECK(v <= max, "{} {} is out of range: at most {} ({})", key, v, max, why);
  return Status::Ok();
}

Status text_bounds(const TextConfig& t) {
  VLPAR_RETURN_IF_ERROR(at_most("text_config.vocab_size", t.vocab, INT32_MAX, "token ids are 32-bit in the kernels"));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.hidden_size", t.hidden, int64_t(1) << 16, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.intermediate_size", t.intermediate, kMaxWidth, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.moe_intermediate_size", t.moe_intermediate, kMaxWidth, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.num_hidden_layers", t.layers, kMaxCount, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.num_attention_heads", t.heads, kMaxCount, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.num_key_value_heads", t.kv_heads, kMaxCount, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.head_dim", t.head_dim, kMaxCount, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("text_config.num_experts", t.num_experts, int64_t(1) << 14, kSanity));
  return at_most("text_config.max_position_embeddings", t.max_position_embeddings, INT32_MAX,
                 "positions are 32-bit in the kernels");
}

Status vision_bounds(const VisionConfig& v) {
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.depth", v.depth, kMaxCount, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.hidden_size", v.hidden, int64_t(1) << 16, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.intermediate_size", v.intermediate, kMaxWidth, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.num_heads", v.heads, kMaxCount, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.patch_size", v.patch, 1 << 10, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.temporal_patch_size", v.temporal_patch, 64, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.spatial_merge_size", v.merge, 64, kSanity));
  VLPAR_RETURN_IF_ERROR(at_most("vision_config.in_channels", v.in_channels, 64, kSanity));
  return at_most("vision_config.num_position_embeddings", v.num_position_embeddings, int64_t(1) << 24, kSanity);
}

Status validate_text(const TextConfig& t, bool moe) {
  VLPAR_CHECK(t.vocab > 0, "text_config.vocab_size must be positive, got {}", t.vocab);
  VLPAR_CHECK(t.hidden > 0, "text_config.hidden_size must be positive, got {}", t.hidden);
  VLPAR_CHECK(t.layers > 0, "text_config.num_hidden_layers must be positive, got {}", t.layers);
  VLPAR_CHECK(t.heads > 0, "text_config.num_attention_heads must be positive, got {}", t.heads);
  VLPAR_CHECK(t.kv_heads > 0, "text_config.num_key_value_heads must be positive, got {}", t.kv_heads);
  VLPAR_CHECK(t.heads % t.kv_heads == 0,
              "text_config.num_attention_heads {} is not a multiple of num_key_value_heads {}", t.heads, t.kv_heads);
  VLPAR_CHECK(t.head_dim > 0, "text_config.head_dim must be positive, got {}", t.head_dim);
  VLPAR_CHECK(t.head_dim % 2 == 0, "text_config.head_dim {} is odd; rotary pairs dim j with dim j + head_dim/2",
              t.head_dim);
  VLPAR_CHECK(t.rms_eps > 0, "text_config.rms_norm_eps must be positive, got {}", t.rms_eps);
  VLPAR_CHECK(t.rope_theta > 0, "text_config.rope_theta must be positive, got {}", t.rope_theta);
  VLPAR_CHECK(t.max_position_embeddings > 0, "text_config.max_position_embeddings must be positive, got {}",
              t.max_position_embeddings);
  VLPAR_CHECK(t.initializer_range > 0, "text_config.initializer_range must be positive, got {}",
              t.initializer_range);
  VLPAR_CHECK(!t.attention_bias,
              "text_config.attention_bias is true; Qwen3-VL's q/k/v/o projections have no bias and vlpar's do not");
  VLPAR_CHECK(t.pad_token_id >= -1 && t.pad_token_id < t.vocab,
              "text_config.pad_token_id {} is outside the vocabulary of {} ids", t.pad_token_id, t.vocab);

  const auto& s = t.mrope_section;
  const int half = t.head_dim / 2;
  VLPAR_CHECK(s[0] >= 0 && s[1] >= 0 && s[2] >= 0, "text_config mrope_section {} has a negative entry",
              int_list(s));
  VLPAR_CHECK(s[0] + s[1] + s[2] == half, "text_config mrope_section {} sums to {} but head_dim/2 is {}",
              int_list(s), s[0] + s[1] + s[2], half);
  // Interleaved layout: H takes j = 1, 4, ..., 3·s1−2 and W takes j = 2, 5, ..., 3·s2−1; slots ≥ hd/2 would be
  // silently dropped by apply_interleaved_mrope, making the section lie about the per-axis counts.
  VLPAR_CHECK(s[1] == 0 || 3 * s[1] - 2 < half,
              "text_config mrope_section {}: the H axis's {} interleaved frequencies reach index {} but head_dim/2 "
              "is {}", int_list(s), s[1], 3 * s[1] - 2, half);
  VLPAR_CHECK(s[2] == 0 || 3 * s[2] - 1 < half,
              "text_config mrope_section {}: the W axis's {} interleaved frequencies reach index {} but head_dim/2 "
              "is {}", int_list(s), s[2], 3 * s[2] - 1, half);

  if (!moe) {
    VLPAR_CHECK(t.num_experts == 0,
                "text_config.num_experts is {} but Qwen3VLForConditionalGeneration is dense (use the Moe "
                "architecture)", t.num_experts);
    VLPAR_CHECK(t.mlp_only_layers.empty(), "text_config.mlp_only_layers {} is set in a dense model",
                int_list(t.mlp_only_layers));
    VLPAR_CHECK(!t.router_expert_bias, "text_config.router_expert_bias is set in a dense model (no router)");
    VLPAR_CHECK(t.router_z_loss_coef == 0, "text_config.router_z_loss_coef is set in a dense model (no router)");
    VLPAR_CHECK(t.router_seq_aux_loss_coef == 0,
                "text_config.router_seq_aux_loss_coef is set in a dense model (no router)");
    VLPAR_CHECK(t.moe_capacity_factor == 0, "text_config.moe_capacity_factor is set in a dense model (no experts)");
  } else {
    VLPAR_CHECK(t.num_experts >= 0, "text_config.num_experts must not be negative, got {}", t.num_experts);
    VLPAR_CHECK(t.decoder_sparse_step >= 1, "text_config.decoder_sparse_step must be at least 1, got {}",
                t.decoder_sparse_step);
    if (t.num_experts > 0) {
      VLPAR_CHECK(t.top_k >= 1 && t.top_k <= t.num_experts,
                  "text_config.num_experts_per_tok {} is outside [1, num_experts {}]", t.top_k, t.num_experts);
      VLPAR_CHECK(t.moe_intermediate > 0, "text_config.moe_intermediate_size must be positive, got {}",
                  t.moe_intermediate);
    }
    std::set<int> seen;
    for (int l : t.mlp_only_layers) {
      VLPAR_CHECK(l >= 0 && l < t.layers, "text_config.mlp_only_layers entry {} is outside [0, {})", l, t.layers);
      VLPAR_CHECK(seen.insert(l).second, "text_config.mlp_only_layers lists layer {} twice", l);
    }
    VLPAR_CHECK(t.router_aux_loss_coef >= 0, "text_config.router_aux_loss_coef must not be negative, got {}",
                t.router_aux_loss_coef);
    VLPAR_CHECK(std::isfinite(t.router_z_loss_coef) && t.router_z_loss_coef >= 0,
                "text_config.router_z_loss_coef must be finite and not negative, got {}", t.router_z_loss_coef);
    VLPAR_CHECK(std::isfinite(t.router_seq_aux_loss_coef) && t.router_seq_aux_loss_coef >= 0,
                "text_config.router_seq_aux_loss_coef must be finite and not negative, got {}",
                t.router_seq_aux_loss_coef);
    VLPAR_CHECK(std::isfinite(t.moe_capacity_factor) && t.moe_capacity_factor >= 0,
                "text_config.moe_capacity_factor must be finite and not negative (0: dropless), got {}",
                t.moe_capacity_factor);
  }
  // The dense MLP width matters only if some layer is dense (every layer of a dense model).
  if (t.num_moe_layers() < t.layers)
    VLPAR_CHECK(t.intermediate > 0, "text_config.intermediate_size must be positive (layers {} use the dense MLP), "
                "got {}", t.layers - t.num_moe_layers(), t.intermediate);
  return Status::Ok();
}

Status validate_vision(const VisionConfig& v) {
  VLPAR_CHECK(v.depth > 0, "vision_config.depth must be positive, got {}", v.depth);
  VLPAR_CHECK(v.hidden > 0, "vision_config.hidden_size must be positive, got {}", v.hidden);
  VLPAR_CHECK(v.intermediate > 0, "vision_config.intermediate_size must be positive, got {}", v.intermediate);
  VLPAR_CHECK(v.heads > 0, "vision_config.num_heads must be positive, got {}", v.heads);
  VLPAR_CHECK(v.hidden % v.heads == 0, "vision_config.hidden_size {} is not a multiple of num_heads {}", v.hidden,
              v.heads);
  VLPAR_CHECK(v.head_dim() % 4 == 0,
              "vision head_dim {} (hidden_size {} / num_heads {}) is not a multiple of 4; the 2D rotary gives "
              "head_dim/4 frequencies to rows and as many to columns", v.head_dim(), v.hidden, v.heads);
  VLPAR_CHECK(v.patch > 0, "vision_config.patch_size must be positive, got {}", v.patch);
  VLPAR_CHECK(v.temporal_patch > 0, "vision_config.temporal_patch_size must be positive, got {}", v.temporal_patch);
  VLPAR_CHECK(v.merge > 0, "vision_config.spatial_merge_size must be positive, got {}", v.merge);
  VLPAR_CHECK(v.in_channels > 0, "vision_config.in_channels must be positive, got {}", v.in_channels);
  VLPAR_CHECK(v.out_hidden > 0, "vision_config.out_hidden_size must be positive, got {}", v.out_hidden);
  VLPAR_CHECK(is_perfect_square(v.num_position_embeddings),
              "vision_config.num_position_embeddings {} is not a perfect square (the table is a G x G grid)",
              v.num_position_embeddings);
  VLPAR_CHECK(v.hidden_act == "gelu_pytorch_tanh",
              "vision_config.hidden_act '{}' is not supported; Qwen3-VL's ViT uses gelu_pytorch_tanh", v.hidden_act);
  VLPAR_CHECK(v.initializer_range > 0, "vision_config.initializer_range must be positive, got {}",
              v.initializer_range);
  for (size_t j = 0; j < v.deepstack_indexes.size(); ++j) {
    const int b = v.deepstack_indexes[j];
    VLPAR_CHECK(b >= 0 && b < v.depth, "vision_config.deepstack_visual_indexes entry {} is outside [0, depth {})",
                b, v.depth);
    // HF matches blocks to mergers with list.index(block), so an unsorted or repeated list silently reorders or
    // drops levels; require the plain increasing form every published config has.
    VLPAR_CHECK(j == 0 || b > v.deepstack_indexes[j - 1],
                "vision_config.deepstack_visual_indexes {} is not strictly increasing",
                int_list(v.deepstack_indexes));
  }
  return Status::Ok();
}

}  // namespace

Status Config::validate() const {
  VLPAR_RETURN_IF_ERROR(text_bounds(text));
  VLPAR_RETURN_IF_ERROR(vision_bounds(vision));
  VLPAR_RETURN_IF_ERROR(validate_text(text, moe));
  VLPAR_RETURN_IF_ERROR(validate_vision(vision));
  VLPAR_CHECK(vision.out_hidden == text.hidden,
              "vision_config.out_hidden_size {} does not equal text_config.hidden_size {}", vision.out_hidden,
              text.hidden);
  VLPAR_CHECK(static_cast<int>(vision.deepstack_indexes.size()) <= text.layers,
              "vision_config.deepstack_visual_indexes has {} levels but the text model has only {} layers to "
              "inject them into", vision.deepstack_indexes.size(), text.layers);
  VLPAR_CHECK(tie_word_embeddings == text.tie_word_embeddings,
              "tie_word_embeddings is {} at the top level but {} in text_config; transformers 4.57.1 ties by "
              "text_config only, so set both", tie_word_embeddings, text.tie_word_embeddings);
  const std::pair<const char*, int64_t> ids[] = {{"image_token_id", image_token_id},
                                                 {"video_token_id", video_token_id},
                                                 {"vision_start_token_id", vision_start_token_id},
                                                 {"vision_end_token_id", vision_end_token_id}};
  for (size_t i = 0; i < 4; ++i) {
    VLPAR_CHECK(ids[i].second >= 0 && ids[i].second < text.vocab,
                "{} {} is outside the text vocabulary of {} ids (its embedding row is looked up)", ids[i].first,
                ids[i].second, text.vocab);
    for (size_t j = 0; j < i; ++j)
      VLPAR_CHECK(ids[i].second != ids[j].second, "{} and {} are both {}", ids[j].first, ids[i].first,
                  ids[i].second);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------------------
// parse

namespace {

using json = nlohmann::json;

/// Reads typed fields of one JSON object; every error names "<source>: <path>.<key>".
class Reader {
 public:
  Reader(const json& obj, std::string_view source, std::string path)
      : obj_(obj), source_(source), path_(std::move(path)) {}

  /// Absent or null keys leave `out` unchanged (the caller pre-set the transformers class default).
  template <class T>
  Status get(const char* key, T& out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    return convert(*it, key, out);
  }
  bool has(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  Status error(const char* key, std::string_view what) const {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {}{} {}", source_, prefix(), key, what);
  }

 private:
  std::string prefix() const { return path_.empty() ? std::string() : path_ + "."; }
  Status type_error(const char* key, const char* want, const json& v) const {
    return error(key, fmt::format("must be {}, got {}", want, v.dump()));
  }
  Status range_error(const char* key, const char* range, const json& v) const {
    return error(key, fmt::format("{} is out of range ({})", v.dump(), range));
  }
  Status convert(const json& v, const char* key, int64_t& out) const {
    if (!v.is_number_integer()) return type_error(key, "an integer", v);
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return range_error(key, "int64", v);
    out = v.get<int64_t>();
    return Status::Ok();
  }
  Status convert(const json& v, const char* key, int& out) const {
    int64_t x = 0;
    VLPAR_RETURN_IF_ERROR(convert(v, key, x));
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      return range_error(key, "int32", v);
    out = static_cast<int>(x);
    return Status::Ok();
  }
  Status convert(const json& v, const char* key, double& out) const {
    if (!v.is_number()) return type_error(key, "a number", v);
    out = v.get<double>();
    return Status::Ok();
  }
  Status convert(const json& v, const char* key, bool& out) const {
    if (!v.is_boolean()) return type_error(key, "true or false", v);
    out = v.get<bool>();
    return Status::Ok();
  }
  Status convert(const json& v, const char* key, std::string& out) const {
    if (!v.is_string()) return type_error(key, "a string", v);
    out = v.get<std::string>();
    return Status::Ok();
  }
  Status convert(const json& v, const char* key, std::vector<int>& out) const {
    if (!v.is_array()) return type_error(key, "a list of integers", v);
    std::vector<int> r;
    for (const auto& e : v) {
      int x = 0;
      if (!e.is_number_integer()) return type_error(key, "a list of integers", v);
      VLPAR_RETURN_IF_ERROR(convert(e, key, x));
      r.push_back(x);
    }
    out = std::move(r);
    return Status::Ok();
  }
  Status convert(const json& v, const char* key, std::array<int, 3>& out) const {
    std::vector<int> r;
    VLPAR_RETURN_IF_ERROR(convert(v, key, r));
    if (r.size() != 3) return type_error(key, "a list of 3 integers (T, H, W)", v);
    out = {r[0], r[1], r[2]};
    return Status::Ok();
  }

  const json& obj_;
  std::string_view source_;
  std::string path_;
};

Status object_at(const json& root, const char* key, std::string_view source, const json*& out) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {} is missing (a Qwen3-VL config.json has one)", source,
                        key);
  if (!it->is_object())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: {} must be an object, got {}", source, key, it->dump());
  out = &*it;
  return Status::Ok();
}

/// Text config: transformers 4.57.1 class defaults (dense Qwen3VLTextConfig or Qwen3VLMoeTextConfig), then the
/// file's values.
Status parse_text(const json& tj, std::string_view source, bool moe, TextConfig& t) {
  const Reader r(tj, source, "text_config");
  std::string model_type;
  VLPAR_RETURN_IF_ERROR(r.get("model_type", model_type));
  const char* want_type = moe ? "qwen3_vl_moe_text" : "qwen3_vl_text";
  if (!model_type.empty() && model_type != want_type)
    return r.error("model_type", fmt::format("'{}' is not {}", model_type, want_type));

  t = TextConfig{};
  t.vocab = 151936;
  t.hidden = moe ? 2048 : 4096;
  t.intermediate = moe ? 5632 : 22016;
  t.layers = moe ? 24 : 32;
  t.heads = moe ? 16 : 32;
  t.max_position_embeddings = 128000;
  VLPAR_RETURN_IF_ERROR(r.get("vocab_size", t.vocab));
  VLPAR_RETURN_IF_ERROR(r.get("hidden_size", t.hidden));
  VLPAR_RETURN_IF_ERROR(r.get("intermediate_size", t.intermediate));
  VLPAR_RETURN_IF_ERROR(r.get("num_hidden_layers", t.layers));
  VLPAR_RETURN_IF_ERROR(r.get("num_attention_heads", t.heads));
  t.kv_heads = moe ? 16 : 32;  // class default; an explicit null means "= num_attention_heads"
  if (tj.contains("num_key_value_heads") && tj["num_key_value_heads"].is_null()) t.kv_heads = t.heads;
  VLPAR_RETURN_IF_ERROR(r.get("num_key_value_heads", t.kv_heads));
  if (moe) {
    if (t.heads <= 0) return r.error("num_attention_heads", fmt::format("must be positive, got {}", t.heads));
    t.head_dim = static_cast<int>(t.hidden / t.heads);  // `head_dim or hidden_size // num_attention_heads`
  } else {
    t.head_dim = 128;  // Qwen3VLTextConfig default: not hidden/heads
  }
  VLPAR_RETURN_IF_ERROR(r.get("head_dim", t.head_dim));
  VLPAR_RETURN_IF_ERROR(r.get("max_position_embeddings", t.max_position_embeddings));
  VLPAR_RETURN_IF_ERROR(r.get("rms_norm_eps", t.rms_eps));
  VLPAR_RETURN_IF_ERROR(r.get("tie_word_embeddings", t.tie_word_embeddings));
  VLPAR_RETURN_IF_ERROR(r.get("attention_bias", t.attention_bias));
  VLPAR_RETURN_IF_ERROR(r.get("pad_token_id", t.pad_token_id));
  VLPAR_RETURN_IF_ERROR(r.get("initializer_range", t.initializer_range));

  std::string act = "silu";
  VLPAR_RETURN_IF_ERROR(r.get("hidden_act", act));
  if (act != "silu") return r.error("hidden_act", fmt::format("'{}' is not supported; Qwen3-VL uses silu", act));
  double dropout = 0;
  VLPAR_RETURN_IF_ERROR(r.get("attention_dropout", dropout));
  if (dropout != 0)
    return r.error("attention_dropout", fmt::format("{} is not supported (vlpar has no attention dropout)", dropout));

  // RoPE: v4.57 spelling rope_theta + rope_scaling{rope_type, mrope_section, mrope_interleaved}, or v5 spelling
  // rope_parameters{rope_type, rope_theta, mrope_section, ...}. Both may be present if they agree.
  const bool has_scaling = r.has("rope_scaling");
  const bool has_params = r.has("rope_parameters");
  if (!has_scaling && !has_params)
    return r.error("rope_scaling",
                   "is missing (and there is no rope_parameters); transformers 4.57.1 cannot build the rotary "
                   "embedding without rope_scaling.mrope_section");
  bool have_section = false;
  bool have_theta = false;
  double theta = 0;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!r.has(key)) continue;
    if (!tj[key].is_object()) return r.error(key, fmt::format("must be an object, got {}", tj[key].dump()));
    const Reader rr(tj[key], source, fmt::format("text_config.{}", key));
    std::string rope_type = "default";
    VLPAR_RETURN_IF_ERROR(rr.get("rope_type", rope_type));
    if (rope_type != "default")
      return rr.error("rope_type", fmt::format("'{}' is not supported; Qwen3-VL uses 'default'", rope_type));
    std::array<int, 3> section = {24, 20, 20};  // the 4.57.1 rotary module's default when the key is absent
    VLPAR_RETURN_IF_ERROR(rr.get("mrope_section", section));
    if (have_section && section != t.mrope_section)
      return rr.error("mrope_section", fmt::format("{} disagrees with rope_scaling.mrope_section {}",
                                                   int_list(section), int_list(t.mrope_section)));
    t.mrope_section = section;
    have_section = true;
    if (rr.has("rope_theta")) {
      double th = 0;
      VLPAR_RETURN_IF_ERROR(rr.get("rope_theta", th));
      if (have_theta && th != theta)
        return rr.error("rope_theta", fmt::format("{} disagrees with rope_theta {}", th, theta));
      theta = th;
      have_theta = true;
    }
  }
  if (r.has("rope_theta")) {
    double th = 0;
    VLPAR_RETURN_IF_ERROR(r.get("rope_theta", th));
    if (have_theta && th != theta)
      return r.error("rope_theta", fmt::format("{} disagrees with rope_parameters.rope_theta {}", th, theta));
    theta = th;
    have_theta = true;
  }
  if (!have_theta && has_params)
    return r.error("rope_parameters.rope_theta",
                   "is missing; transformers v4.57 would default to 5e6 and v5 to 5e5, so set it explicitly");
  t.rope_theta = have_theta ? theta : 5e6;  // v4.57 class default

  if (moe) {
    t.num_experts = 60;
    t.top_k = 4;
    t.moe_intermediate = 1408;
    t.decoder_sparse_step = 1;
    t.router_aux_loss_coef = 0.001;
    VLPAR_RETURN_IF_ERROR(r.get("num_local_experts", t.num_experts));  // v5 name of the same field
    VLPAR_RETURN_IF_ERROR(r.get("num_experts", t.num_experts));
    VLPAR_RETURN_IF_ERROR(r.get("num_experts_per_tok", t.top_k));
    VLPAR_RETURN_IF_ERROR(r.get("moe_intermediate_size", t.moe_intermediate));
    VLPAR_RETURN_IF_ERROR(r.get("decoder_sparse_step", t.decoder_sparse_step));
    VLPAR_RETURN_IF_ERROR(r.get("mlp_only_layers", t.mlp_only_layers));
    VLPAR_RETURN_IF_ERROR(r.get("router_aux_loss_coef", t.router_aux_loss_coef));
    VLPAR_RETURN_IF_ERROR(r.get("router_expert_bias", t.router_expert_bias));
    VLPAR_RETURN_IF_ERROR(r.get("router_z_loss_coef", t.router_z_loss_coef));
    VLPAR_RETURN_IF_ERROR(r.get("router_seq_aux_loss_coef", t.router_seq_aux_loss_coef));
    VLPAR_RETURN_IF_ERROR(r.get("moe_capacity_factor", t.moe_capacity_factor));
  }
  return Status::Ok();
}

Status parse_vision(const json& vj, std::string_view source, VisionConfig& v) {
  const Reader r(vj, source, "vision_config");
  std::string model_type;
  VLPAR_RETURN_IF_ERROR(r.get("model_type", model_type));
  if (!model_type.empty() && model_type != "qwen3_vl" && model_type != "qwen3_vl_moe" &&
      model_type != "qwen3_vl_vision" && model_type != "qwen3_vl_moe_vision")
    return r.error("model_type", fmt::format("'{}' is not a Qwen3-VL vision config", model_type));
  v = VisionConfig{};
  v.depth = 27;  // Qwen3VLVisionConfig defaults (8B-like tower, out_hidden 3584)
  v.hidden = 1152;
  v.intermediate = 4304;
  v.heads = 16;
  v.out_hidden = 3584;
  v.deepstack_indexes = {8, 16, 24};
  VLPAR_RETURN_IF_ERROR(r.get("depth", v.depth));
  VLPAR_RETURN_IF_ERROR(r.get("hidden_size", v.hidden));
  VLPAR_RETURN_IF_ERROR(r.get("hidden_act", v.hidden_act));
  VLPAR_RETURN_IF_ERROR(r.get("intermediate_size", v.intermediate));
  VLPAR_RETURN_IF_ERROR(r.get("num_heads", v.heads));
  VLPAR_RETURN_IF_ERROR(r.get("in_channels", v.in_channels));
  VLPAR_RETURN_IF_ERROR(r.get("patch_size", v.patch));
  VLPAR_RETURN_IF_ERROR(r.get("spatial_merge_size", v.merge));
  VLPAR_RETURN_IF_ERROR(r.get("temporal_patch_size", v.temporal_patch));
  VLPAR_RETURN_IF_ERROR(r.get("out_hidden_size", v.out_hidden));
  VLPAR_RETURN_IF_ERROR(r.get("num_position_embeddings", v.num_position_embeddings));
  VLPAR_RETURN_IF_ERROR(r.get("deepstack_visual_indexes", v.deepstack_indexes));
  VLPAR_RETURN_IF_ERROR(r.get("initializer_range", v.initializer_range));
  return Status::Ok();
}

}  // namespace

Result<Config> parse_hf_config(std::string_view json_text, std::string_view source_name) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: not valid JSON (byte {}): {}", source_name, e.byte,
                        e.what());
  } catch (const json::exception& e) {  // out_of_range 406: a number beyond double's range (found by fuzz_hf_config)
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: not valid JSON: {}", source_name, e.what());
  }
  if (!root.is_object())
    return VLPAR_STATUS(StatusCode::kInvalidArgument, "{}: the top level must be a JSON object", source_name);
  const Reader r(root, source_name, "");

  std::string model_type;
  VLPAR_RETURN_IF_ERROR(r.get("model_type", model_type));
  if (model_type.empty())
    return r.error("model_type", "is missing; expected qwen3_vl or qwen3_vl_moe");
  if (model_type != "qwen3_vl" && model_type != "qwen3_vl_moe")
    return r.error("model_type", fmt::format("'{}' is not qwen3_vl or qwen3_vl_moe", model_type));
  Config c;
  c.moe = model_type == "qwen3_vl_moe";
  if (r.has("architectures")) {
    if (!root["architectures"].is_array())
      return r.error("architectures", fmt::format("must be a list, got {}", root["architectures"].dump()));
    const char* gen = c.moe ? "Qwen3VLMoeForConditionalGeneration" : "Qwen3VLForConditionalGeneration";
    const char* base = c.moe ? "Qwen3VLMoeModel" : "Qwen3VLModel";
    for (const auto& a : root["architectures"]) {
      if (!a.is_string() || (a.get<std::string>() != gen && a.get<std::string>() != base))
        return r.error("architectures",
                       fmt::format("entry {} is not {} (model_type {})", a.dump(), gen, model_type));
    }
  }

  const json* tj = nullptr;
  const json* vj = nullptr;
  VLPAR_RETURN_IF_ERROR(object_at(root, "text_config", source_name, tj));
  VLPAR_RETURN_IF_ERROR(object_at(root, "vision_config", source_name, vj));
  VLPAR_RETURN_IF_ERROR(parse_text(*tj, source_name, c.moe, c.text));
  VLPAR_RETURN_IF_ERROR(parse_vision(*vj, source_name, c.vision));
  VLPAR_RETURN_IF_ERROR(r.get("image_token_id", c.image_token_id));
  VLPAR_RETURN_IF_ERROR(r.get("video_token_id", c.video_token_id));
  VLPAR_RETURN_IF_ERROR(r.get("vision_start_token_id", c.vision_start_token_id));
  VLPAR_RETURN_IF_ERROR(r.get("vision_end_token_id", c.vision_end_token_id));
  VLPAR_RETURN_IF_ERROR(r.get("tie_word_embeddings", c.tie_word_embeddings));

  Status s = c.validate();
  if (!s.ok()) return Status(s.code(), fmt::format("{}: {}", source_name, s.message()));
  return c;
}

Result<Config> load_hf_config(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(dir_or_file);
  if (fs::is_directory(p, ec)) p /= "config.json";
  std::ifstream in(p, std::ios::binary);
  if (!in)
    return VLPAR_STATUS(StatusCode::kIoError, "{}: cannot open (no such file, or not readable)", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return VLPAR_STATUS(StatusCode::kIoError, "{}: read error", p.string());
  return parse_hf_config(ss.str(), p.string());
}

// ---------------------------------------------------------------------------------------------------------------
// write

std::string to_hf_config_json(const Config& c) {
  using ojson = nlohmann::ordered_json;
  const TextConfig& t = c.text;
  const VisionConfig& v = c.vision;
  ojson text;
  text["model_type"] = c.moe ? "qwen3_vl_moe_text" : "qwen3_vl_text";
  text["vocab_size"] = t.vocab;
  text["hidden_size"] = t.hidden;
  text["intermediate_size"] = t.intermediate;
  text["num_hidden_layers"] = t.layers;
  text["num_attention_heads"] = t.heads;
  text["num_key_value_heads"] = t.kv_heads;
  text["head_dim"] = t.head_dim;
  text["hidden_act"] = "silu";
  text["rms_norm_eps"] = t.rms_eps;
  text["rope_theta"] = t.rope_theta;
  text["rope_scaling"] = ojson{{"rope_type", "default"},
                               {"mrope_section", {t.mrope_section[0], t.mrope_section[1], t.mrope_section[2]}},
                               {"mrope_interleaved", true}};
  text["max_position_embeddings"] = t.max_position_embeddings;
  text["attention_bias"] = t.attention_bias;
  text["attention_dropout"] = 0.0;
  text["initializer_range"] = t.initializer_range;
  text["tie_word_embeddings"] = t.tie_word_embeddings;
  if (t.pad_token_id >= 0) text["pad_token_id"] = t.pad_token_id;
  if (c.moe) {
    text["num_experts"] = t.num_experts;
    text["num_experts_per_tok"] = t.top_k;
    text["moe_intermediate_size"] = t.moe_intermediate;
    text["decoder_sparse_step"] = t.decoder_sparse_step;
    text["mlp_only_layers"] = t.mlp_only_layers;
    text["norm_topk_prob"] = true;  // read by nobody: top-k weights are always renormalised
    text["router_aux_loss_coef"] = t.router_aux_loss_coef;
    if (t.router_expert_bias) text["router_expert_bias"] = true;  // vlpar's extensions (HF ignores the keys)
    if (t.router_z_loss_coef > 0) text["router_z_loss_coef"] = t.router_z_loss_coef;
    if (t.router_seq_aux_loss_coef > 0) text["router_seq_aux_loss_coef"] = t.router_seq_aux_loss_coef;
    if (t.moe_capacity_factor > 0) text["moe_capacity_factor"] = t.moe_capacity_factor;
  }
  ojson vision;
  vision["model_type"] = c.moe ? "qwen3_vl_moe" : "qwen3_vl";
  vision["depth"] = v.depth;
  vision["hidden_size"] = v.hidden;
  vision["hidden_act"] = v.hidden_act;
  vision["intermediate_size"] = v.intermediate;
  vision["num_heads"] = v.heads;
  vision["in_channels"] = v.in_channels;
  vision["patch_size"] = v.patch;
  vision["spatial_merge_size"] = v.merge;
  vision["temporal_patch_size"] = v.temporal_patch;
  vision["out_hidden_size"] = v.out_hidden;
  vision["num_position_embeddings"] = v.num_position_embeddings;
  vision["deepstack_visual_indexes"] = v.deepstack_indexes;
  vision["initializer_range"] = v.initializer_range;

  ojson root;
  root["architectures"] = {c.moe ? "Qwen3VLMoeForConditionalGeneration" : "Qwen3VLForConditionalGeneration"};
  root["model_type"] = c.moe ? "qwen3_vl_moe" : "qwen3_vl";
  root["image_token_id"] = c.image_token_id;
  root["video_token_id"] = c.video_token_id;
  root["vision_start_token_id"] = c.vision_start_token_id;
  root["vision_end_token_id"] = c.vision_end_token_id;
  root["tie_word_embeddings"] = c.tie_word_embeddings;
  root["text_config"] = std::move(text);
  root["vision_config"] = std::move(vision);
  root["transformers_version"] = "4.57.1";
  return root.dump(2) + "\n";
}

// ---------------------------------------------------------------------------------------------------------------
// presets

namespace {

Config published(bool moe, int64_t hidden, int layers, int heads, int kv_heads, int64_t intermediate, bool tie,
                 int vdepth, int64_t vhidden, int64_t vinter, std::vector<int> deepstack) {
  Config c;
  c.moe = moe;
  TextConfig& t = c.text;
  t.vocab = 151936;
  t.hidden = hidden;
  t.intermediate = intermediate;
  t.layers = layers;
  t.heads = heads;
  t.kv_heads = kv_heads;
  t.head_dim = 128;
  t.rms_eps = 1e-6;
  t.rope_theta = 5e6;
  t.mrope_section = {24, 20, 20};
  t.max_position_embeddings = 262144;
  t.tie_word_embeddings = tie;
  c.tie_word_embeddings = tie;
  VisionConfig& v = c.vision;
  v.depth = vdepth;
  v.hidden = vhidden;
  v.intermediate = vinter;
  v.heads = 16;
  v.patch = 16;
  v.temporal_patch = 2;
  v.merge = 2;
  v.in_channels = 3;
  v.out_hidden = hidden;
  v.num_position_embeddings = 2304;
  v.deepstack_indexes = std::move(deepstack);
  return c;
}

void set_moe(Config& c, int experts, int top_k, int64_t moe_intermediate) {
  c.text.num_experts = experts;
  c.text.top_k = top_k;
  c.text.moe_intermediate = moe_intermediate;
  c.text.decoder_sparse_step = 1;
  c.text.router_aux_loss_coef = 0.001;
}

/// Debug sizes (spec §12): every constraint of the real model holds, everything is small. Vocabulary 256 with the
/// special ids at 248..252 (same relative layout as the hub's 151652..151656); patch 4 (patch vector 96); 8x8
/// position table; vision head_dim 16 (divisible by 4); text head_dim 32 with mrope_section [6,5,5].
Config tiny(bool moe) {
  Config c;
  c.moe = moe;
  TextConfig& t = c.text;
  t.vocab = 256;
  t.hidden = 64;
  t.intermediate = 96;
  t.layers = 3;
  t.heads = 4;
  t.kv_heads = 2;
  t.head_dim = 32;
  t.rope_theta = 10000.0;  // smaller than the hub's 5e6 so that short test sequences rotate every pair visibly
  t.mrope_section = {6, 5, 5};
  t.max_position_embeddings = 4096;
  t.tie_word_embeddings = !moe;  // tiny-dense exercises the tied head (as 2B/4B), tiny-moe the untied one
  c.tie_word_embeddings = t.tie_word_embeddings;
  if (moe) {
    set_moe(c, 8, 2, 32);
    t.mlp_only_layers = {1};  // layers 0 and 2 are MoE, layer 1 dense
  }
  VisionConfig& v = c.vision;
  v.depth = 3;
  v.hidden = 64;
  v.intermediate = 128;
  v.heads = 4;
  v.patch = 4;
  v.temporal_patch = 2;
  v.merge = 2;
  v.in_channels = 3;
  v.out_hidden = 64;
  v.num_position_embeddings = 64;
  v.deepstack_indexes = {0, 2};
  c.vision_start_token_id = 248;
  c.vision_end_token_id = 249;
  c.image_token_id = 251;
  c.video_token_id = 252;
  return c;
}

}  // namespace

Result<Config> preset(std::string_view name) {
  Config c;
  if (name == "2B") {
    c = published(false, 2048, 28, 16, 8, 6144, true, 24, 1024, 4096, {5, 11, 17});
  } else if (name == "4B") {
    c = published(false, 2560, 36, 32, 8, 9728, true, 24, 1024, 4096, {5, 11, 17});
  } else if (name == "8B") {
    c = published(false, 4096, 36, 32, 8, 12288, false, 27, 1152, 4304, {8, 16, 24});
  } else if (name == "32B") {
    c = published(false, 5120, 64, 64, 8, 25600, false, 27, 1152, 4304, {8, 16, 24});
  } else if (name == "30B-A3B") {
    c = published(true, 2048, 48, 32, 4, 6144, false, 27, 1152, 4304, {8, 16, 24});
    set_moe(c, 128, 8, 768);
  } else if (name == "235B-A22B") {
    c = published(true, 4096, 94, 64, 4, 12288, false, 27, 1152, 4304, {8, 16, 24});
    set_moe(c, 128, 8, 1536);
  } else if (name == "tiny-dense") {
    c = tiny(false);
  } else if (name == "tiny-moe") {
    c = tiny(true);
  } else {
    return VLPAR_STATUS(StatusCode::kInvalidArgument,
                        "unknown Qwen3-VL preset '{}'; known: 2B, 4B, 8B, 32B, 30B-A3B, 235B-A22B, tiny-dense, "
                        "tiny-moe", name);
  }
  VLPAR_RETURN_IF_ERROR(c.validate());
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
// parameter counts (the modules transformers builds; spec §7 lists the tensors)

ParamCounts count_params(const Config& c) {
  const TextConfig& t = c.text;
  const VisionConfig& v = c.vision;
  ParamCounts p;
  const int64_t hv = v.hidden, iv = v.intermediate, d = v.out_hidden, h4 = 4 * v.hidden;
  const int64_t block = 2 * 2 * hv                 // norm1, norm2 (weight + bias)
                        + 3 * hv * hv + 3 * hv     // fused qkv
                        + hv * hv + hv             // proj
                        + iv * hv + iv + hv * iv + hv;  // linear_fc1, linear_fc2
  const int64_t merger_mlp = h4 * h4 + h4 + d * h4 + d;  // linear_fc1, linear_fc2
  p.vision = hv * v.patch_dim() + hv                  // patch_embed (Conv3d with bias)
             + v.num_position_embeddings * hv         // pos_embed
             + v.depth * block                        //
             + 2 * hv + merger_mlp                    // merger (LayerNorm over Hv)
             + int64_t(v.deepstack_indexes.size()) * (2 * h4 + merger_mlp);  // deepstack (LayerNorm over 4Hv)

  const int64_t h = t.hidden, qd = int64_t(t.heads) * t.head_dim, kvd = int64_t(t.kv_heads) * t.head_dim;
  const int64_t attn = h * qd + 2 * h * kvd + qd * h + 2 * t.head_dim;  // q, k, v, o, q_norm, k_norm
  p.text_embedding = t.vocab * h;
  p.lm_head = t.tie_word_embeddings ? 0 : t.vocab * h;
  p.text_layers = h;  // final norm
  for (int l = 0; l < t.layers; ++l) {
    const int64_t mlp = t.is_moe_layer(l)
                            ? int64_t(t.num_experts) * h + int64_t(t.num_experts) * 3 * h * t.moe_intermediate
                            : 3 * h * t.intermediate;
    p.text_layers += 2 * h + attn + mlp;  // input_layernorm, post_attention_layernorm
  }
  return p;
}

}  // namespace qwen3vl
