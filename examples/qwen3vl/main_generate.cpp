// qwen3vl-generate: greedy decoding with a KV cache (generate.hpp) for one sample of a batch file.
//   qwen3vl-generate --model HF_DIR --input BATCH.safetensors [--sample I] [--prompt-tokens K]
//                    [--max-new-tokens N] [--max-length L] [--eos ID,ID,...] [--tokenizer TOKENIZER.json]
//                    [--threads T]
// The prompt is sample I of the batch file (format: README.md), truncated to its first K tokens when K > 0 (a
// training batch holds the answer too), with all of that sample's images and videos. eos ids: --eos, else the
// model directory's generation_config.json `eos_token_id` (int or list) when present, else none ("--eos none"
// forces none). max_length (the KV cache, prompt + new tokens) defaults to prompt + N.
// Prints the generated ids on one line ("generated: 1 2 3"), with --tokenizer their text ("text: ...", special
// tokens kept, as HF decode(skip_special_tokens=False)), then the stop reason, prefill time, decode tokens/s,
// the cache size and the allocator's peak. Exit status 0 on success, 1 with a one-line error otherwise.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "batch_io.hpp"
#include "generate.hpp"
#include "hf_weights.hpp"
#include "vlpar/data/tokenizer.hpp"

namespace {

struct Args {
  std::string model, input, tokenizer;
  int64_t sample = 0, prompt_tokens = 0, max_new_tokens = 32, max_length = 0;
  std::optional<std::vector<int64_t>> eos;  // nullopt: from generation_config.json
  int threads = 0;                          // 0 = every hardware thread
};

constexpr std::string_view kUsage =
    "usage: qwen3vl-generate --model HF_DIR --input BATCH.safetensors [--sample I] [--prompt-tokens K] "
    "[--max-new-tokens N] [--max-length L] [--eos ID,ID,...|none] [--tokenizer TOKENIZER.json] [--threads T]";

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
    } else if (arg == "--input") {
      VLPAR_ASSIGN_OR_RETURN(a.input, value());
    } else if (arg == "--tokenizer") {
      VLPAR_ASSIGN_OR_RETURN(a.tokenizer, value());
    } else if (arg == "--sample" || arg == "--prompt-tokens" || arg == "--max-new-tokens" || arg == "--max-length" ||
               arg == "--threads") {
      VLPAR_ASSIGN_OR_RETURN(std::string v, value());
      const int64_t min = arg == "--max-new-tokens" || arg == "--threads" ? 1 : 0;
      VLPAR_ASSIGN_OR_RETURN(int64_t x, parse_int(arg, v, min));
      if (arg == "--sample") a.sample = x;
      if (arg == "--prompt-tokens") a.prompt_tokens = x;
      if (arg == "--max-new-tokens") a.max_new_tokens = x;
      if (arg == "--max-length") a.max_length = x;
      if (arg == "--threads") a.threads = int(x);
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
  VLPAR_CHECK(!a.model.empty() && !a.input.empty(), "--model and --input are required\n{}", kUsage);
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
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Model model,
                         qwen3vl::load_hf_model(ctx, args.model, qwen3vl::Freeze{true, true, true}, alloc));
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::LoadedBatch lb, qwen3vl::load_batch(args.input, alloc));
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Batch prompt, qwen3vl::prompt_from_batch(lb, args.sample, args.prompt_tokens));
  qwen3vl::GenerateOptions opt;
  opt.max_new_tokens = args.max_new_tokens;
  if (args.eos) {
    opt.eos_ids = *args.eos;
  } else {
    VLPAR_ASSIGN_OR_RETURN(opt.eos_ids, eos_from_generation_config(args.model));
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
