// qwen3vl-generate: greedy decoding with a KV cache (generate.hpp) for one sample of a batch file, or held-out VQA
// accuracy over a dataset split (vqa_eval.hpp).
//   qwen3vl-generate (--model HF_DIR | --checkpoint DIR) --input BATCH.safetensors [--sample I] [--prompt-tokens K]
//                    [--max-new-tokens N] [--max-length L] [--eos ID,ID,...] [--tokenizer TOKENIZER.json]
//                    [--threads T]
//   qwen3vl-generate (--model HF_DIR | --checkpoint DIR) --eval [--dataset ROOT] [--split val] [--limit N]
//                    [--tokenizer TOKENIZER.json] [--min-pixels P] [--max-pixels P] [--threads T]
// The model: an HF directory, or a qwen3vl-train checkpoint (its root, i.e. the latest committed step, or one
// step-<N> directory; checkpoint_model.hpp). Relative paths stored in a checkpoint's config (model.config_json,
// data.tokenizer, data.train) resolve against the current directory, as they did for the training run.
// One sample: the prompt is sample I of the batch file (format: README.md), truncated to its first K tokens when
// K > 0 (a training batch holds the answer too), with all of that sample's images and videos. eos ids: --eos, else
// the model directory's generation_config.json `eos_token_id` (int or list) when present, else none ("--eos none"
// forces none; with --checkpoint the default is the tokenizer's <|im_end|>). max_length (the KV cache, prompt + new
// tokens) defaults to prompt + N.
// Prints the generated ids on one line ("generated: 1 2 3"), with --tokenizer their text ("text: ...", special
// tokens kept, as HF decode(skip_special_tokens=False)), then the stop reason, prefill time, decode tokens/s,
// the cache size and the allocator's peak.
// --eval: answers every question of the split and prints "eval: accuracy A (c/n) vs chance C" with one line per
// question type. With --checkpoint the dataset (data.eval, else data.train), split (data.eval_split), tokenizer and
// pixel limits default to the training run's; with --model they must be given (pixel limits default to the
// trainer's defaults).
// Exit status 0 on success, 1 with a one-line error otherwise.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "batch_io.hpp"
#include "checkpoint_model.hpp"
#include "data_source.hpp"
#include "generate.hpp"
#include "hf_weights.hpp"
#include "vqa_eval.hpp"
#include "vlpar/data/tokenizer.hpp"

namespace {

struct Args {
  std::string model, checkpoint, input, tokenizer, dataset, split;
  bool eval = false;
  int64_t sample = 0, prompt_tokens = 0, max_new_tokens = 32, max_length = 0, limit = 0, min_pixels = 0,
          max_pixels = 0;
  std::optional<std::vector<int64_t>> eos;  // nullopt: from generation_config.json
  int threads = 0;                          // 0 = every hardware thread
};

constexpr std::string_view kUsage =
    "usage: qwen3vl-generate (--model HF_DIR | --checkpoint DIR) --input BATCH.safetensors [--sample I] "
    "[--prompt-tokens K] [--max-new-tokens N] [--max-length L] [--eos ID,ID,...|none] [--tokenizer TOKENIZER.json] "
    "[--threads T]\n"
    "       qwen3vl-generate (--model HF_DIR | --checkpoint DIR) --eval [--dataset ROOT] [--split S] [--limit N] "
    "[--tokenizer TOKENIZER.json] [--min-pixels P] [--max-pixels P] [--threads T]";

vlpar::Result<int64_t> parse_int(std::string_view flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  VLPAR_CHECK(!v.empty() && end == v.c_str() + v.size() && x >= min, "{} must be an integer >= {}, got '{}'", flag,
              min, v);
  return int64_t(x);
}

vlpar::Result<Args> parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> vlpar::Result<std::string> {
      VLPAR_CHECK(i + 1 < argc, "{} needs a value\n{}", arg, kUsage);
      return std::string(argv[++i]);
    };
    if (arg == "--model") {
      VLPAR_ASSIGN_OR_RETURN(a.model, value());
    } else if (arg == "--checkpoint") {
      VLPAR_ASSIGN_OR_RETURN(a.checkpoint, value());
    } else if (arg == "--eval") {
      a.eval = true;
    } else if (arg == "--dataset") {
      VLPAR_ASSIGN_OR_RETURN(a.dataset, value());
    } else if (arg == "--split") {
      VLPAR_ASSIGN_OR_RETURN(a.split, value());
    } else if (arg == "--input") {
      VLPAR_ASSIGN_OR_RETURN(a.input, value());
    } else if (arg == "--tokenizer") {
      VLPAR_ASSIGN_OR_RETURN(a.tokenizer, value());
    } else if (arg == "--sample" || arg == "--prompt-tokens" || arg == "--max-new-tokens" || arg == "--max-length" ||
               arg == "--threads" || arg == "--limit" || arg == "--min-pixels" || arg == "--max-pixels") {
      VLPAR_ASSIGN_OR_RETURN(std::string v, value());
      const int64_t min = arg == "--max-new-tokens" || arg == "--threads" || arg.ends_with("-pixels") ? 1 : 0;
      VLPAR_ASSIGN_OR_RETURN(int64_t x, parse_int(arg, v, min));
      if (arg == "--sample") a.sample = x;
      if (arg == "--prompt-tokens") a.prompt_tokens = x;
      if (arg == "--max-new-tokens") a.max_new_tokens = x;
      if (arg == "--max-length") a.max_length = x;
      if (arg == "--threads") a.threads = int(x);
      if (arg == "--limit") a.limit = x;
      if (arg == "--min-pixels") a.min_pixels = x;
      if (arg == "--max-pixels") a.max_pixels = x;
    } else if (arg == "--eos") {
      VLPAR_ASSIGN_OR_RETURN(std::string v, value());
      a.eos.emplace();
      if (v != "none") {
        size_t begin = 0;
        while (begin <= v.size()) {
          const size_t end = std::min(v.find(',', begin), v.size());
          VLPAR_ASSIGN_OR_RETURN(int64_t id, parse_int("--eos", v.substr(begin, end - begin), 0));
          a.eos->push_back(id);
          begin = end + 1;
        }
      }
    } else {
      return VLPAR_STATUS(vlpar::StatusCode::kInvalidArgument, "unknown argument '{}'\n{}", arg, kUsage);
    }
  }
  VLPAR_CHECK(a.model.empty() != a.checkpoint.empty(), "give exactly one of --model and --checkpoint\n{}", kUsage);
  VLPAR_CHECK(a.eval != !a.input.empty(), "give exactly one of --input and --eval\n{}", kUsage);
  return a;
}

// eos_token_id of DIR/generation_config.json (int or list); empty when the file or the key is absent.
vlpar::Result<std::vector<int64_t>> eos_from_generation_config(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  std::vector<int64_t> ids;
  if (!std::filesystem::exists(path)) return ids;
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  VLPAR_CHECK(!j.is_discarded(), "{} is not valid JSON", path.string());
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return ids;
  const nlohmann::json& e = j["eos_token_id"];
  for (const nlohmann::json& x : e.is_array() ? e : nlohmann::json::array({e})) {
    VLPAR_CHECK(x.is_number_integer(), "{}: eos_token_id must be an integer or a list of integers, got {}",
                path.string(), e.dump());
    ids.push_back(x.get<int64_t>());
  }
  return ids;
}

// --eval: the data settings from the checkpoint's training config, overridden by the flags.
vlpar::Status run_eval(const Args& args, const vlpar::Context& ctx, const qwen3vl::Model& model,
                       const qwen3vl::TrainConfig* trained, vlpar::Allocator& alloc) {
  qwen3vl::DataSection d = trained ? trained->data : qwen3vl::DataSection{};
  if (!args.tokenizer.empty()) d.tokenizer = args.tokenizer;
  if (args.min_pixels > 0) d.min_pixels = args.min_pixels;
  if (args.max_pixels > 0) d.max_pixels = args.max_pixels;
  qwen3vl::VqaEvalOptions o;
  o.dataset = !args.dataset.empty() ? args.dataset : !d.eval.empty() ? d.eval : d.train;
  o.split = !args.split.empty() ? args.split : d.eval_split;
  o.limit = args.limit;
  VLPAR_CHECK(!o.dataset.empty(), "--eval needs --dataset (or a checkpoint whose config names data.eval/data.train)");
  VLPAR_CHECK(!d.tokenizer.empty(), "--eval needs --tokenizer (or a checkpoint whose config names data.tokenizer)");
  VLPAR_ASSIGN_OR_RETURN(auto builder, qwen3vl::make_conversation_builder(d));
  fmt::print("eval: {} split '{}', tokenizer {}, pixels [{}, {}], threads {}\n", o.dataset, o.split, d.tokenizer,
             d.min_pixels, d.max_pixels, ctx.num_threads);
  std::fflush(stdout);
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::VqaEvalReport r, qwen3vl::evaluate_vqa(ctx, model, *builder, o, alloc));
  fmt::print("eval: {}\n", r.to_string());
  return vlpar::Status::Ok();
}

vlpar::Status run(const Args& args) {
  std::optional<vlpar::data::Tokenizer> tok;
  if (!args.tokenizer.empty()) {
    VLPAR_ASSIGN_OR_RETURN(vlpar::data::Tokenizer t, vlpar::data::Tokenizer::from_file(args.tokenizer));
    tok.emplace(std::move(t));
  }
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  if (args.threads > 0) ctx.num_threads = args.threads;
  ctx.allocator = &alloc;
  // Every group frozen: inference allocates no gradients.
  const qwen3vl::Freeze frozen{true, true, true};
  std::optional<qwen3vl::CheckpointModel> ckpt;
  std::optional<qwen3vl::Model> hf;
  if (!args.checkpoint.empty()) {
    VLPAR_ASSIGN_OR_RETURN(qwen3vl::CheckpointModel c, qwen3vl::load_checkpoint_model(ctx, args.checkpoint, frozen, alloc));
    fmt::print("model: {} (step {})\n", c.dir, c.step);
    ckpt.emplace(std::move(c));
  } else {
    VLPAR_ASSIGN_OR_RETURN(qwen3vl::Model m, qwen3vl::load_hf_model(ctx, args.model, frozen, alloc));
    hf.emplace(std::move(m));
  }
  const qwen3vl::Model& model = ckpt ? ckpt->model : *hf;
  if (args.eval) return run_eval(args, ctx, model, ckpt ? &ckpt->config : nullptr, alloc);
  VLPAR_ASSIGN_OR_RETURN(vlpar::data::PackedBatch pack, qwen3vl::load_batch(args.input, model.config().mrope_desc()));
  VLPAR_ASSIGN_OR_RETURN(vlpar::data::PackedBatch one,
                         vlpar::data::sample_of_pack(pack, args.sample, args.prompt_tokens));
  const qwen3vl::Batch prompt = one.view();
  qwen3vl::GenerateOptions opt;
  opt.max_new_tokens = args.max_new_tokens;
  if (args.eos) {
    opt.eos_ids = *args.eos;
  } else if (!args.model.empty()) {
    VLPAR_ASSIGN_OR_RETURN(opt.eos_ids, eos_from_generation_config(args.model));
  } else {
    // A training checkpoint: the chat template's end of turn, from its tokenizer (--tokenizer or data.tokenizer).
    // The --tokenizer already loaded is reused; the checkpoint's only looks up the id (no text is printed then).
    std::optional<vlpar::data::Tokenizer> ckpt_tok;
    if (!tok && !ckpt->config.data.tokenizer.empty()) {
      VLPAR_ASSIGN_OR_RETURN(vlpar::data::Tokenizer t, vlpar::data::Tokenizer::from_file(ckpt->config.data.tokenizer));
      ckpt_tok.emplace(std::move(t));
    }
    if (const vlpar::data::Tokenizer* t = tok ? &*tok : ckpt_tok ? &*ckpt_tok : nullptr) {
      if (const std::optional<int32_t> id = t->token_to_id("<|im_end|>")) opt.eos_ids = {*id};
    }
  }
  const int64_t n = prompt.input_ids.numel();
  const int64_t max_length = args.max_length > 0 ? args.max_length : n + args.max_new_tokens;
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Generator gen, qwen3vl::Generator::create(model, max_length, alloc));
  const int64_t weights_bytes = alloc.stats(vlpar::Device::cpu()).current_bytes;
  alloc.reset_peak(vlpar::Device::cpu());
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::GenerateResult r, gen.generate(ctx, prompt, opt));

  fmt::print("generated: {}\n", fmt::join(r.tokens, " "));
  if (tok) {
    const std::vector<int32_t> ids(r.tokens.begin(), r.tokens.end());
    VLPAR_ASSIGN_OR_RETURN(std::string text, tok->decode(ids));
    fmt::print("text: {}\n", text);
  }
  const vlpar::MemoryStats mem = alloc.stats(vlpar::Device::cpu());
  const double mib = 1.0 / (1024.0 * 1024.0);
  fmt::print("prompt {} tokens ({} images, {} videos), {} new tokens, stop: {}{}\n", n, prompt.image_grids.size(),
             prompt.video_grids.size(), r.tokens.size(), qwen3vl::to_string(r.stop),
             opt.eos_ids.empty() ? std::string(" (no eos ids)") : fmt::format(" (eos ids {})", fmt::join(opt.eos_ids, ",")));
  fmt::print("prefill {:.3f} s ({:.1f} tokens/s); decode {} steps in {:.3f} s = {:.2f} tokens/s; threads {}\n",
             r.prefill_seconds, double(n) / r.prefill_seconds, r.decode_steps, r.decode_seconds,
             r.decode_steps > 0 ? double(r.decode_steps) / r.decode_seconds : 0.0, ctx.num_threads);
  fmt::print("memory: KV cache {:.2f} MiB (max_length {}), weights+cache {:.1f} MiB, peak during generation "
             "{:.1f} MiB\n", double(gen.cache_bytes()) * mib, max_length, double(weights_bytes) * mib,
             double(mem.peak_bytes) * mib);
  return vlpar::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  vlpar::Result<Args> args = parse(argc, argv);
  vlpar::Status s = args.ok() ? run(args.value()) : args.status();
  if (!s.ok()) {
    fmt::print(stderr, "qwen3vl-generate: {}\n", s.message());
    return 1;
  }
  return 0;
}
