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
#include "vlpar/core/cli.hpp"
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

struct Options {
  Args args;
  std::string eos;        // "none" or "ID,ID,..."
  bool seen_eos = false;  // --eos given
};

vlpar::cli::Parser parser(Options& o) {
  Args& a = o.args;
  vlpar::cli::Parser p("qwen3vl-generate",
                       "greedy decoding with a KV cache for one sample of a batch file (--input), or held-out VQA "
                       "accuracy (--eval); the model from --model HF_DIR or --checkpoint DIR");
  p.add("model", &a.model, "HF model directory");
  p.add("checkpoint", &a.checkpoint, "qwen3vl-train checkpoint (root or step-<N>)");
  p.add("input", &a.input, "packed batch file (one sample of it is the prompt)");
  p.add("sample", &a.sample, "which sample of the batch (>= 0)");
  p.add("prompt-tokens", &a.prompt_tokens, "truncate the prompt to its first K tokens (0 = all)");
  p.add("max-new-tokens", &a.max_new_tokens, "tokens to generate (>= 1)");
  p.add("max-length", &a.max_length, "KV cache length, prompt + new tokens (0 = prompt + max-new-tokens)");
  p.add("eos", &o.eos, "eos ids ID,ID,... or none (default: generation_config.json / the tokenizer's <|im_end|>)");
  p.add("tokenizer", &a.tokenizer, "tokenizer.json, to print the text");
  p.add("eval", &a.eval, "score held-out questions instead of one prompt");
  p.add("dataset", &a.dataset, "--eval: dataset root");
  p.add("split", &a.split, "--eval: split");
  p.add("limit", &a.limit, "--eval: at most this many questions (0 = all)");
  p.add("min-pixels", &a.min_pixels, "--eval: image processor minimum (0 = default)");
  p.add("max-pixels", &a.max_pixels, "--eval: image processor maximum (0 = default)");
  p.add("threads", &a.threads, "CPU threads (0 = every hardware thread)");
  return p;
}

// The checks across options, and --eos parsed.
vlpar::Status finish(Options& o) {
  Args& a = o.args;
  VLPAR_CHECK(a.model.empty() != a.checkpoint.empty(), "give exactly one of --model and --checkpoint");
  VLPAR_CHECK(a.eval != !a.input.empty(), "give exactly one of --input and --eval");
  VLPAR_CHECK(a.sample >= 0 && a.prompt_tokens >= 0 && a.max_length >= 0 && a.limit >= 0 && a.threads >= 0,
              "--sample, --prompt-tokens, --max-length, --limit and --threads must be >= 0");
  VLPAR_CHECK(a.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got {}", a.max_new_tokens);
  VLPAR_CHECK(a.min_pixels >= 0 && a.max_pixels >= 0, "--min-pixels and --max-pixels must be >= 0");
  if (o.seen_eos) {
    a.eos.emplace();
    if (o.eos != "none") {
      size_t begin = 0;
      while (begin <= o.eos.size()) {
        const size_t end = std::min(o.eos.find(',', begin), o.eos.size());
        int64_t id = -1;
        VLPAR_CHECK(vlpar::cli::assign(&id, std::string_view(o.eos).substr(begin, end - begin)) && id >= 0,
                    "--eos must be ID,ID,... (integers >= 0) or none, got '{}'", o.eos);
        a.eos->push_back(id);
        begin = end + 1;
      }
    }
  }
  return vlpar::Status::Ok();
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
  VLPAR_RETURN_IF_ERROR(qwen3vl::check_model_inputs(pack, model.config().text.vocab, "qwen3vl-generate"));
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
  Options o;
  vlpar::cli::Parser p = parser(o);
  return vlpar::cli::run_main(p, argc, argv, [&]() -> vlpar::Status {
    o.seen_eos = p.seen("eos");
    VLPAR_RETURN_IF_ERROR(finish(o));
    return run(o.args);
  });
}
