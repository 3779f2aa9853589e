// qwen3vl-bench: training-step throughput of a Qwen3-VL model on CPU: forward + backward over one packed batch,
// repeated, with the allocator's peak memory and the FLOP rate of the step (flops.hpp, spec §8 convention).
//   qwen3vl-bench --model DIR --input BATCH.safetensors [--steps 5] [--warmup 1] [--threads N] [--json]
// The model directory may be an HF export or a random model made by tools/bench/qwen3vl_step_vs_torch.py, which
// also times the same step in PyTorch/transformers and prints the ratio. Output: one line per measured step and a
// summary (median step time, real tokens/s, patches/s, GFLOP/s, peak MiB); --json prints the summary as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "batch_io.hpp"
#include "flops.hpp"
#include "hf_weights.hpp"

namespace {

struct Args {
  std::string model, input;
  int steps = 5, warmup = 1, threads = 0;
  bool json = false;
};

vlpar::Result<Args> parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--json") {
      a.json = true;
      continue;
    }
    VLPAR_CHECK(has_value, "{} needs a value", arg);
    const std::string v = argv[++i];
    if (arg == "--model") a.model = v;
    else if (arg == "--input") a.input = v;
    else if (arg == "--steps") a.steps = std::atoi(v.c_str());
    else if (arg == "--warmup") a.warmup = std::atoi(v.c_str());
    else if (arg == "--threads") a.threads = std::atoi(v.c_str());
    else return VLPAR_STATUS(vlpar::StatusCode::kInvalidArgument, "unknown argument '{}'", arg);
  }
  VLPAR_CHECK(!a.model.empty() && !a.input.empty() && a.steps > 0 && a.warmup >= 0,
              "usage: qwen3vl-bench --model DIR --input BATCH.safetensors [--steps N>0] [--warmup N] [--threads N] "
              "[--json]");
  return a;
}

vlpar::Status run(const Args& args) {
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  if (args.threads > 0) ctx.num_threads = args.threads;
  ctx.allocator = &alloc;
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Model model, qwen3vl::load_hf_model(ctx, args.model, qwen3vl::Freeze{}, alloc));
  VLPAR_ASSIGN_OR_RETURN(const vlpar::data::PackedBatch pack,
                         qwen3vl::load_batch(args.input, model.config().mrope_desc()));
  const qwen3vl::Batch b = pack.view();
  std::vector<int64_t> lengths;
  for (size_t s = 0; s + 1 < pack.cu_seqlens.size(); ++s) lengths.push_back(pack.cu_seqlens[s + 1] - pack.cu_seqlens[s]);
  std::vector<vlpar::VisionGrid> grids = b.image_grids;
  grids.insert(grids.end(), b.video_grids.begin(), b.video_grids.end());
  const qwen3vl::StepFlops flops = qwen3vl::count_flops(model.config(), lengths, grids);

  std::vector<double> seconds;
  double loss = 0;
  const int64_t base = alloc.stats(vlpar::Device::cpu()).current_bytes;  // parameters, gradients, batch
  alloc.reset_peak(vlpar::Device::cpu());
  for (int step = 0; step < args.warmup + args.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    qwen3vl::Stash stash;
    VLPAR_ASSIGN_OR_RETURN(qwen3vl::StepLoss l, model.forward(ctx, b, stash));
    VLPAR_RETURN_IF_ERROR(model.backward(ctx, b, stash));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss = l.loss;
    if (step >= args.warmup) {
      seconds.push_back(s);
      if (!args.json) fmt::print("step {}: {:.1f} ms, loss {:.5f}\n", step - args.warmup, 1e3 * s, l.loss);
    }
  }
  std::sort(seconds.begin(), seconds.end());
  const double med = seconds[seconds.size() / 2];
  const vlpar::MemoryStats mem = alloc.stats(vlpar::Device::cpu());
  const vlpar::nn::ParamCounts pc = model.registry().counts();
  const double mib = 1.0 / (1024.0 * 1024.0);
  if (args.json) {
    fmt::print("{{\"step_s\": {:.6f}, \"tokens\": {}, \"patches\": {}, \"tokens_per_s\": {:.2f}, \"train_flops\": {:.6e}, "
               "\"gflops_per_s\": {:.3f}, \"peak_mib\": {:.2f}, \"activation_peak_mib\": {:.2f}, \"params\": {}, "
               "\"loss\": {:.7f}, \"threads\": {}}}\n",
               med, flops.tokens, flops.patches, double(flops.tokens) / med, flops.train(), flops.train() / med * 1e-9,
               double(mem.peak_bytes) * mib, double(mem.peak_bytes - base) * mib, pc.full_params, loss, ctx.num_threads);
  } else {
    fmt::print("median step {:.1f} ms over {} steps ({} threads): {:.1f} tokens/s, {:.1f} patches/s, {:.2f} GFLOP/s "
               "(train FLOPs {:.3e}: vision {:.1f}%, decoder {:.1f}%, LM head {:.1f}%); peak {:.1f} MiB ({:.1f} MiB "
               "above parameters, gradients and batch); {:.2f} M parameters\n",
               1e3 * med, seconds.size(), ctx.num_threads, double(flops.tokens) / med, double(flops.patches) / med,
               flops.train() / med * 1e-9, flops.train(), 100 * flops.vision_fwd / flops.total_fwd(),
               100 * flops.llm_fwd / flops.total_fwd(), 100 * flops.lm_head_fwd / flops.total_fwd(),
               double(mem.peak_bytes) * mib, double(mem.peak_bytes - base) * mib, double(pc.full_params) * 1e-6);
  }
  return vlpar::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  vlpar::Result<Args> args = parse(argc, argv);
  vlpar::Status s = args.ok() ? run(args.value()) : args.status();
  if (!s.ok()) {
    fmt::print(stderr, "qwen3vl-bench: {}\n", s.message());
    return 1;
  }
  return 0;
}
