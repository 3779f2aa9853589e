// qwen3vl-convert: loads a Qwen3-VL HF directory into vlpar and writes it back as an HF directory, optionally in
// another storage dtype or shard size (config.json + model.safetensors, or shards + index above --max-shard-mb).
//   qwen3vl-convert --model HF_DIR --out DIR [--dtype f32|bf16|f16] [--max-shard-mb N]
// Round trip of an F32 checkpoint at the default settings is bit-exact (tests/test_hf_weights.cpp);
// tools/golden/check_hf_export.py checks that transformers loads the result.
#include <fmt/core.h>

#include <cstdlib>
#include <string>

#include "hf_weights.hpp"
#include "vlpar/core/cli.hpp"

namespace {

struct Args {
  std::string model, out, dtype = "f32";
  uint64_t shard_mb = 5000;
};

vlpar::cli::Parser parser(Args& a) {
  vlpar::cli::Parser p("qwen3vl-convert", "load a Qwen3-VL HF directory and write it back as an HF directory");
  p.add("model", &a.model, "HF model directory to read", vlpar::cli::kRequired);
  p.add("out", &a.out, "HF directory to write", vlpar::cli::kRequired);
  p.add("dtype", &a.dtype, "storage dtype written: f32, bf16 or f16");
  p.add("max-shard-mb", &a.shard_mb, "shard size above which the weights are split (> 0)");
  return p;
}

vlpar::Status run(const Args& a) {
  const std::string &model = a.model, &out = a.out, &dtype = a.dtype;
  const uint64_t shard_mb = a.shard_mb;
  VLPAR_CHECK(shard_mb > 0, "--max-shard-mb must be > 0");
  const vlpar::DType dt = dtype == "bf16" ? vlpar::DType::kBF16 : dtype == "f16" ? vlpar::DType::kF16 : vlpar::DType::kF32;
  VLPAR_CHECK(dtype == "f32" || dtype == "bf16" || dtype == "f16", "--dtype must be f32, bf16 or f16, got '{}'", dtype);
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  // Inference-only model (every group frozen: no gradients), filled from the HF files with a progress bar.
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Config cfg, qwen3vl::load_hf_config(model));
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Model m, qwen3vl::Model::create(ctx, cfg, qwen3vl::Freeze{true, true, true},
                                                                  std::nullopt, alloc));
  vlpar::obs::ProgressBar::Options po;
  po.bytes = true;
  const int64_t param_bytes = m.registry().counts().full_params * 4;
  {
    vlpar::obs::ProgressBar load("load", param_bytes, po);
    VLPAR_RETURN_IF_ERROR(qwen3vl::load_hf_weights(m, model, &load));
  }
  {
    vlpar::obs::ProgressBar write("write", param_bytes / 4 * int64_t(vlpar::dtype_size(dt)), po);
    VLPAR_RETURN_IF_ERROR(qwen3vl::export_hf(m, out, dt, shard_mb * 1000 * 1000, &write));
  }
  fmt::print("{} -> {} ({}, {:.2f} M parameters)\n", model, out, dtype, double(m.registry().counts().full_params) * 1e-6);
  return vlpar::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  vlpar::cli::Parser p = parser(args);
  return vlpar::cli::run_main(p, argc, argv, [&] { return run(args); });
}
