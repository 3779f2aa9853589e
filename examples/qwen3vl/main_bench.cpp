// qwen3vl-bench: training-step throughput of a Qwen3-VL model on CPU: forward + backward over one packed batch,
// repeated, with the allocator's peak memory and the FLOP rate of the step (flops.hpp, spec §8 convention).
//   qwen3vl-bench --model DIR --input BATCH.safetensors [--steps 5] [--warmup 1] [--threads N] [--dtype f32|bf16]
//                 [--json]
// The model directory may be an HF export or a random model made by tools/bench/qwen3vl_step_vs_torch.py, which
// also times the same step in PyTorch/transformers and prints the ratio. Output: one line per measured step and a
// summary (median step time, real tokens/s, patches/s, GFLOP/s, peak MiB); --json prints the summary as JSON (with
// the mean and the slowest step: bench/contention/contention.py reads them).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "batch_io.hpp"
#include "flops.hpp"
#include "hf_weights.hpp"
#include "vlpar/core/cli.hpp"

namespace {

struct Args {
  std::string model, input;
  int steps = 5, warmup = 1, threads = 0;
  std::string dtype = "f32";
  bool json = false;
};

vlpar::cli::Parser parser(Args& a) {
  vlpar::cli::Parser p("qwen3vl-bench", "training-step throughput of a Qwen3-VL model over one packed batch");
  p.add("model", &a.model, "HF model directory", vlpar::cli::kRequired);
  p.add("input", &a.input, "packed batch file (BATCH.safetensors)", vlpar::cli::kRequired);
  p.add("steps", &a.steps, "measured steps (> 0)");
  p.add("warmup", &a.warmup, "unmeasured steps first (>= 0)");
  p.add("threads", &a.threads, "CPU threads (0 = every hardware thread)");
  p.add("dtype", &a.dtype, "training precision: f32, or bf16 (bf16 parameters and activations)");
  p.add("json", &a.json, "print the summary as JSON");
  return p;
}

vlpar::Status run(const Args& args) {
  VLPAR_CHECK(args.steps > 0 && args.warmup >= 0 && args.threads >= 0,
              "--steps must be > 0, --warmup and --threads >= 0; got {}, {}, {}", args.steps, args.warmup, args.threads);
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  if (args.threads > 0) ctx.num_threads = args.threads;
  ctx.allocator = &alloc;
  VLPAR_CHECK(args.dtype == "f32" || args.dtype == "bf16", "--dtype must be f32 or bf16, got '{}'", args.dtype);
  const vlpar::DType dtype = args.dtype == "bf16" ? vlpar::DType::kBF16 : vlpar::DType::kF32;
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Model model,
                         qwen3vl::load_hf_model(ctx, args.model, qwen3vl::Freeze{}, alloc, dtype));
  VLPAR_ASSIGN_OR_RETURN(const vlpar::data::PackedBatch pack,
                         qwen3vl::load_batch(args.input, model.config().mrope_desc()));
  VLPAR_RETURN_IF_ERROR(qwen3vl::check_model_inputs(pack, model.config().text.vocab, "qwen3vl-bench"));
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
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / double(seconds.size());
  std::sort(seconds.begin(), seconds.end());
  const double med = seconds[seconds.size() / 2];
  const vlpar::MemoryStats mem = alloc.stats(vlpar::Device::cpu());
  const vlpar::nn::ParamCounts pc = model.registry().counts();
  const double mib = 1.0 / (1024.0 * 1024.0);
  if (args.json) {
    fmt::print("{{\"step_s\": {:.6f}, \"tokens\": {}, \"patches\": {}, \"tokens_per_s\": {:.2f}, \"train_flops\": {:.6e}, "
               "\"gflops_per_s\": {:.3f}, \"peak_mib\": {:.2f}, \"activation_peak_mib\": {:.2f}, \"params\": {}, "
               "\"loss\": {:.7f}, \"threads\": {}, \"step_mean_s\": {:.6f}, \"step_max_s\": {:.6f}, "
               "\"dtype\": \"{}\"}}\n",
               med, flops.tokens, flops.patches, double(flops.tokens) / med, flops.train(), flops.train() / med * 1e-9,
               double(mem.peak_bytes) * mib, double(mem.peak_bytes - base) * mib, pc.full_params, loss, ctx.num_threads,
               mean, seconds.back(), args.dtype);
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
  Args args;
  vlpar::cli::Parser p = parser(args);
  return vlpar::cli::run_main(p, argc, argv, [&] { return run(args); });
}
