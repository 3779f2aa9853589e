// The trainer's TOML configuration. See train_config.hpp.
#include "train_config.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <charconv>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

#include "vlpar/core/cli.hpp"

namespace qwen3vl {

namespace {

using FieldPtr = vlpar::cli::Value;  // the CLI helper's value types: overrides parse exactly as every program's options

struct Field {
  std::string section, key;
  FieldPtr ptr;
  std::string dotted() const { return section + "." + key; }
};

// Every key of every section, bound to `c`: the one table that parsing, overrides and printing share.
std::vector<Field> fields(TrainConfig& c) {
  return {
      {"model", "preset", &c.model.preset},
      {"model", "hf_dir", &c.model.hf_dir},
      {"model", "config_json", &c.model.config_json},
      {"model", "seed", &c.model.seed},
      {"model", "freeze_vision", &c.model.freeze_vision},
      {"model", "freeze_merger", &c.model.freeze_merger},
      {"model", "freeze_language_model", &c.model.freeze_language_model},
      {"data", "train", &c.data.train},
      {"data", "eval", &c.data.eval},
      {"data", "split", &c.data.split},
      {"data", "eval_split", &c.data.eval_split},
      {"data", "tokenizer", &c.data.tokenizer},
      {"data", "mode", &c.data.mode},
      {"data", "workers", &c.data.loader.num_workers},
      {"data", "prefetch", &c.data.loader.prefetch},
      {"data", "token_budget", &c.data.loader.packing.max_tokens},
      {"data", "patch_budget", &c.data.loader.packing.max_patches},
      {"data", "min_pixels", &c.data.min_pixels},
      {"data", "max_pixels", &c.data.max_pixels},
      {"data", "seed", &c.data.stream.seed},
      {"data", "shuffle_buffer", &c.data.stream.shuffle_buffer},
      {"data", "balance_vision", &c.data.balance_vision},
      {"optimizer", "lr", &c.optimizer.adamw.lr},
      {"optimizer", "min_lr_ratio", &c.schedule.min_lr_ratio},
      {"optimizer", "weight_decay", &c.optimizer.adamw.weight_decay},
      {"optimizer", "beta1", &c.optimizer.adamw.beta1},
      {"optimizer", "beta2", &c.optimizer.adamw.beta2},
      {"optimizer", "eps", &c.optimizer.adamw.eps},
      {"schedule", "warmup_steps", &c.schedule.warmup_steps},
      {"schedule", "decay", &c.schedule.decay},
      {"training", "steps", &c.training.steps},
      {"training", "grad_accum", &c.training.grad_accum},
      {"training", "max_grad_norm", &c.optimizer.max_grad_norm},
      {"training", "recompute", &c.training.recompute},
      {"training", "dtype", &c.training.dtype},
      {"training", "max_nonfinite_in_a_row", &c.training.max_nonfinite_in_a_row},
      {"training", "threads", &c.training.threads},
      {"training", "eval_interval", &c.training.eval_interval},
      {"training", "eval_batches", &c.training.eval_batches},
      {"checkpoint", "dir", &c.checkpoint.dir},
      {"checkpoint", "interval", &c.checkpoint.interval},
      {"checkpoint", "keep_last", &c.checkpoint.keep_last},
      {"checkpoint", "resume", &c.checkpoint.resume},
      {"checkpoint", "allow_layout_change", &c.checkpoint.allow_layout_change},
      {"checkpoint", "export_hf", &c.checkpoint.export_hf},
      {"checkpoint", "export_dtype", &c.checkpoint.export_dtype},
      {"metrics", "dir", &c.metrics.dir},
      {"metrics", "log_interval", &c.metrics.log_interval},
      {"metrics", "tensorboard", &c.metrics.tensorboard},
      {"metrics", "trace", &c.metrics.trace},
      {"metrics", "peak_gflops", &c.metrics.peak_gflops},
      {"parallel", "tp", &c.parallel.tp},
      {"parallel", "pp", &c.parallel.pp},
      {"parallel", "ep", &c.parallel.ep},
      {"parallel", "etp", &c.parallel.etp},
      {"parallel", "sequence_parallel", &c.parallel.sequence_parallel},
      {"parallel", "vision_tp", &c.parallel.vision_tp},
      {"parallel", "vpp", &c.parallel.vpp},
      {"parallel", "schedule", &c.parallel.schedule},
      {"parallel", "pipeline_layout", &c.parallel.pipeline_layout},
      {"parallel", "zero1", &c.optimizer.zero1},
      {"parallel", "bucket_mb", &c.parallel.bucket_mb},
      {"moe", "expert_bias_rate", &c.moe.expert_bias_rate},
      {"moe", "z_loss_coef", &c.moe.z_loss_coef},
      {"moe", "seq_aux_coef", &c.moe.seq_aux_coef},
      {"moe", "capacity_factor", &c.moe.capacity_factor},
  };
}

// Assigns a TOML node to a field; false when the node's type does not fit.
bool assign(const Field& f, const toml::node& n) {
  return std::visit(
      [&](auto* v) -> bool {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!n.is_string()) return false;
          *v = *n.value<std::string>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!n.is_boolean()) return false;
          *v = *n.value<bool>();
        } else if constexpr (std::is_floating_point_v<T>) {
          if (!n.is_number()) return false;
          *v = T(*n.value<double>());
        } else {
          if (!n.is_integer()) return false;
          const int64_t x = *n.value<int64_t>();
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x < 0) return false;
          } else if constexpr (std::is_same_v<T, int>) {
            if (x < INT32_MIN || x > INT32_MAX) return false;
          }
          *v = static_cast<T>(x);
        }
        return true;
      },
      f.ptr);
}

// A value as written in the file, for messages (strings quoted; tables and arrays by their kind).
std::string node_text(const toml::node& n) {
  if (n.is_integer()) return std::to_string(*n.value<int64_t>());
  if (n.is_floating_point()) return fmt::format("{}", *n.value<double>());
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  if (n.is_string()) return fmt::format("\"{}\"", *n.value<std::string>());
  std::ostringstream os;
  os << "a TOML " << n.type();
  return os.str();
}

// Assigns command-line text to a field (vlpar/core/cli.hpp).
bool assign_text(const Field& f, const std::string& text) { return vlpar::cli::assign(f.ptr, text); }

std::string value_text(const FieldPtr& p) {
  return std::visit(
      [](auto* v) -> std::string {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          std::ostringstream os;
          os << toml::value<std::string>(*v);
          return os.str();
        } else if constexpr (std::is_same_v<T, bool>) {
          return *v ? "true" : "false";
        } else if constexpr (std::is_floating_point_v<T>) {
          std::string s = fmt::format("{}", *v);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a TOML float
          return s;
        } else {
          return fmt::format("{}", *v);
        }
      },
      p);
}

bool one_of(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (v == o) return true;
  return false;
}

/// The [parallel] section's checks (and export_hf's, which needs a single-process layout).
Status validate_parallel(const ParallelSection& parallel, const CheckpointSection& checkpoint) {
  VLPAR_CHECK(parallel.tp >= 1, "parallel.tp must be >= 1, got {}", parallel.tp);
  VLPAR_CHECK(parallel.ep >= 1, "parallel.ep must be >= 1, got {}", parallel.ep);
  VLPAR_CHECK(parallel.vision_tp >= 0, "parallel.vision_tp must be >= 1 (or 0: 1, the vision tower whole on every "
              "rank), got {}", parallel.vision_tp);
  VLPAR_CHECK(parallel.vision_tp <= 1 || parallel.tp % parallel.vision_tp == 0 ||
                  parallel.vision_tp % parallel.tp == 0,
              "parallel.vision_tp = {} and parallel.tp = {}: one must divide the other (a vision tp group inside a "
              "tp group holds its images; one spanning whole tp groups exchanges theirs)", parallel.vision_tp,
              parallel.tp);
  VLPAR_CHECK(parallel.etp >= 0, "parallel.etp must be >= 1 (or 0: 1, each expert whole on its rank), got {}",
              parallel.etp);
  VLPAR_CHECK(parallel.etp <= 1 || parallel.tp == 1 || parallel.sequence_parallel, "parallel.etp = {} with "
              "parallel.tp = {} needs parallel.sequence_parallel = true (the etp ranks must hold different tokens)",
              parallel.etp, parallel.tp);
  VLPAR_CHECK(parallel.ep == 1 || parallel.tp == 1 || parallel.sequence_parallel, "parallel.ep = {} with "
              "parallel.tp = {} needs parallel.sequence_parallel = true (without it the tp ranks hold the same tokens "
              "and would route them twice)", parallel.ep, parallel.tp);
  VLPAR_CHECK(parallel.pp >= 1 && parallel.vpp >= 1, "parallel.pp and parallel.vpp must be >= 1, got {} and {}",
              parallel.pp, parallel.vpp);
  VLPAR_CHECK(one_of(parallel.schedule, {"gpipe", "1f1b", "interleaved", "zb_h1", "zb_v"}),
              "parallel.schedule must be gpipe, 1f1b, interleaved, zb_h1 or zb_v, got '{}'", parallel.schedule);
  const int want_vpp = parallel.schedule == "zb_v" ? 2 : 1;
  VLPAR_CHECK(parallel.schedule == "interleaved" ? parallel.vpp > 1 : parallel.vpp == want_vpp,
              "parallel.schedule = '{}' with parallel.vpp = {}: the interleaved schedule needs vpp > 1, zb_v "
              "(two chunks per rank in a V) vpp = 2 and the others vpp = 1", parallel.schedule, parallel.vpp);
  VLPAR_CHECK(checkpoint.export_hf.empty() ||
                  (parallel.tp == 1 && parallel.pp == 1 && parallel.vpp == 1 && parallel.vision_tp <= 1),
              "checkpoint.export_hf needs parallel.tp = 1, parallel.vision_tp = 1 and parallel.pp = 1, got tp {}, "
              "vision_tp {} and pp {} (to export a "
              "parallel run, resume its checkpoint in one process with checkpoint.export_hf set: checkpoints load "
              "at any layout)", parallel.tp, parallel.vision_tp, parallel.pp);
  VLPAR_CHECK(parallel.bucket_mb > 0 && parallel.bucket_mb <= 4096, "parallel.bucket_mb must be in (0, 4096], got {}",
              parallel.bucket_mb);
  return Status::Ok();
}

}  // namespace

Status TrainConfig::validate() const {
  VLPAR_CHECK(training.steps > 0, "training.steps must be positive, got {}", training.steps);
  VLPAR_CHECK(training.grad_accum > 0, "training.grad_accum must be positive, got {}", training.grad_accum);
  VLPAR_CHECK(optimizer.max_grad_norm >= 0, "training.max_grad_norm must be >= 0 (0 = off), got {}",
              optimizer.max_grad_norm);
  VLPAR_CHECK(one_of(training.recompute, {"none", "selective", "full"}),
              "training.recompute must be none, selective or full, got '{}'", training.recompute);
  VLPAR_CHECK(one_of(training.dtype, {"f32", "bf16"}),
              "training.dtype must be f32 or bf16, got '{}' (f16 would need loss scaling, which the trainer lacks)",
              training.dtype);
  VLPAR_CHECK(one_of(checkpoint.export_dtype, {"f32", "bf16"}), "checkpoint.export_dtype must be f32 or bf16, got "
              "'{}'", checkpoint.export_dtype);
  VLPAR_CHECK(std::isfinite(moe.expert_bias_rate) && moe.expert_bias_rate >= 0,
              "moe.expert_bias_rate must be finite and not negative, got {}", moe.expert_bias_rate);
  VLPAR_CHECK(std::isfinite(moe.z_loss_coef) && moe.z_loss_coef >= 0,
              "moe.z_loss_coef must be finite and not negative, got {}", moe.z_loss_coef);
  VLPAR_CHECK(std::isfinite(moe.seq_aux_coef) && moe.seq_aux_coef >= 0,
              "moe.seq_aux_coef must be finite and not negative, got {}", moe.seq_aux_coef);
  VLPAR_CHECK(std::isfinite(moe.capacity_factor) && moe.capacity_factor >= 0,
              "moe.capacity_factor must be finite and not negative (0: dropless), got {}", moe.capacity_factor);
  VLPAR_CHECK(training.max_nonfinite_in_a_row >= 1, "training.max_nonfinite_in_a_row must be >= 1, got {}",
              training.max_nonfinite_in_a_row);
  VLPAR_CHECK(training.threads >= 0, "training.threads must be >= 0 (0 = all), got {}", training.threads);
  const vlpar::AdamWConfig& adamw = optimizer.adamw;
  VLPAR_CHECK(adamw.lr > 0, "optimizer.lr must be positive, got {}", adamw.lr);
  VLPAR_CHECK(schedule.min_lr_ratio >= 0 && schedule.min_lr_ratio <= 1,
              "optimizer.min_lr_ratio must be in [0, 1], got {}", schedule.min_lr_ratio);
  VLPAR_CHECK(adamw.beta1 >= 0 && adamw.beta1 < 1 && adamw.beta2 >= 0 && adamw.beta2 < 1,
              "optimizer.beta1 and beta2 must be in [0, 1), got {} and {}", adamw.beta1, adamw.beta2);
  VLPAR_CHECK(adamw.eps > 0 && adamw.weight_decay >= 0, "optimizer.eps must be > 0 and weight_decay >= 0");
  VLPAR_CHECK(schedule.warmup_steps >= 0 && schedule.warmup_steps <= training.steps,
              "schedule.warmup_steps {} must be in [0, training.steps = {}]", schedule.warmup_steps, training.steps);
  VLPAR_CHECK(one_of(schedule.decay, {"cosine", "linear", "constant"}),
              "schedule.decay must be cosine, linear or constant, got '{}'", schedule.decay);
  VLPAR_CHECK(one_of(data.mode, {"sft", "caption"}), "data.mode must be sft or caption, got '{}'", data.mode);
  VLPAR_CHECK(data.loader.num_workers >= 1 && data.loader.prefetch >= 1, "data.workers and data.prefetch must be >= 1");
  VLPAR_CHECK(data.loader.packing.max_tokens > 0 && data.loader.packing.max_patches >= 0,
              "data.token_budget must be > 0 and patch_budget >= 0");
  VLPAR_CHECK(data.min_pixels > 0 && data.min_pixels <= data.max_pixels,
              "data.min_pixels {} must be positive and <= data.max_pixels {}", data.min_pixels, data.max_pixels);
  VLPAR_CHECK(data.stream.shuffle_buffer >= 1, "data.shuffle_buffer must be >= 1, got {}", data.stream.shuffle_buffer);
  VLPAR_CHECK(int(!model.hf_dir.empty()) + int(!model.config_json.empty()) <= 1,
              "give at most one of model.hf_dir and model.config_json");
  VLPAR_CHECK(checkpoint.interval >= 0 && checkpoint.keep_last >= 1,
              "checkpoint.interval must be >= 0 and checkpoint.keep_last >= 1");
  VLPAR_CHECK(metrics.log_interval >= 1, "metrics.log_interval must be >= 1, got {}", metrics.log_interval);
  VLPAR_CHECK(metrics.peak_gflops >= 0, "metrics.peak_gflops must be >= 0 (0 = measure), got {}", metrics.peak_gflops);
  VLPAR_CHECK(training.eval_interval >= 0 && training.eval_batches >= 1, "training.eval_interval must be >= 0 and "
              "training.eval_batches >= 1, got {} and {}", training.eval_interval, training.eval_batches);
  VLPAR_RETURN_IF_ERROR(validate_parallel(parallel, checkpoint));
  // The keys mapped onto library configs pass the library's own checks too (with the derived fields).
  TrainConfig derived = *this;
  derived.derive();
  VLPAR_RETURN_IF_ERROR(derived.optimizer.validate());
  VLPAR_RETURN_IF_ERROR(derived.schedule.validate());
  return derived.data.loader.validate();
}

void TrainConfig::derive() {
  schedule.total_steps = training.steps;
  optimizer.bucket_bytes = bucket_bytes_of(parallel.bucket_mb);
}

size_t bucket_bytes_of(double mb) { return size_t(std::max(mb, 0.0) * double(1 << 20)); }

std::string TrainConfig::to_toml() const {
  TrainConfig copy = *this;
  std::string out, section;
  for (const Field& f : fields(copy)) {
    if (f.section != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", f.section);
      section = f.section;
    }
    out += fmt::format("{} = {}\n", f.key, value_text(f.ptr));
  }
  return out;
}

Result<TrainConfig> parse_train_config(std::string_view toml_text, std::string_view source,
                                       std::span<const std::string> overrides) {
  TrainConfig c;
  std::vector<Field> table = fields(c);
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    return VLPAR_STATUS(vlpar::StatusCode::kInvalidArgument, "{}:{}:{}: {}", source, e.source().begin.line,
                        e.source().begin.column, e.description());
  }
  for (auto&& [sec_key, sec_node] : root) {
    const std::string sec(sec_key.str());
    const toml::table* sec_table = sec_node.as_table();
    const bool known_section = std::any_of(table.begin(), table.end(), [&](const Field& f) { return f.section == sec; });
    VLPAR_CHECK(known_section && sec_table != nullptr, "{}:{}: unknown section [{}]", source,
                sec_node.source().begin.line, sec);
    for (auto&& [key, node] : *sec_table) {
      const std::string_view name = key.str();  // a structured binding cannot be captured before C++20 (clang 14)
      auto it = std::find_if(table.begin(), table.end(),
                             [&](const Field& f) { return f.section == sec && f.key == name; });
      VLPAR_CHECK(it != table.end(), "{}:{}: unknown key {}.{}", source, node.source().begin.line, sec, key.str());
      VLPAR_CHECK(assign(*it, node), "{}:{}: {} = {} {}", source, node.source().begin.line, it->dotted(),
                  node_text(node), vlpar::cli::why_not(it->ptr, node_text(node)));
    }
  }
  for (const std::string& o : overrides) {
    std::string_view s = o;
    if (s.starts_with("--")) s.remove_prefix(2);
    const size_t eq = s.find('=');
    VLPAR_CHECK(eq != std::string_view::npos, "override '{}' must look like --section.key=value", o);
    const std::string name(s.substr(0, eq)), value(s.substr(eq + 1));
    auto it = std::find_if(table.begin(), table.end(), [&](const Field& f) { return f.dotted() == name; });
    VLPAR_CHECK(it != table.end(), "override '{}': unknown key {}", o, name);
    VLPAR_CHECK(assign_text(*it, value), "override '{}': {} {}", o, name, vlpar::cli::why_not(it->ptr, value));
  }
  c.derive();
  VLPAR_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<TrainConfig> load_train_config(const std::string& path, std::span<const std::string> overrides) {
  if (path.empty()) return parse_train_config("", "<defaults>", overrides);
  std::ifstream in(path);
  VLPAR_CHECK_CODE(in.good(), vlpar::StatusCode::kIoError, "cannot read the config file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_train_config(ss.str(), path, overrides);
}

}  // namespace qwen3vl
