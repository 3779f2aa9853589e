// qwen3vl-forward: one forward (and, on request, backward) of a Qwen3-VL model from an HF directory over a packed
// batch file, writing logits, losses and gradients under HF names to a safetensors file.
//   qwen3vl-forward --model DIR --input BATCH.safetensors --output OUT.safetensors [--grads] [--threads N]
// OUT holds logits F32 [N, V]; loss, ce_loss, aux_loss F32 []; num_label_tokens I64 []; position_ids I64 [3, N];
// with --grads, grad.<hf name> F32 for every parameter (tied models: the shared weight under embed_tokens).
// The batch format is in README.md (batch_io.hpp). Exit status 0 on success, 1 with a one-line error otherwise.
#include <fmt/core.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "batch_io.hpp"
#include "hf_weights.hpp"
#include "vlpar/core/cli.hpp"
#include "vlpar/io/safetensors.hpp"

namespace {

struct Args {
  std::string model, input, output;
  bool grads = false;
  int threads = 0;  // 0 = every hardware thread
};

// The options, bound to `a`.
vlpar::cli::Parser parser(Args& a) {
  vlpar::cli::Parser p("qwen3vl-forward", "one forward (and backward) of a Qwen3-VL HF model over a packed batch file");
  p.add("model", &a.model, "HF model directory", vlpar::cli::kRequired);
  p.add("input", &a.input, "packed batch file (BATCH.safetensors)", vlpar::cli::kRequired);
  p.add("output", &a.output, "safetensors file to write", vlpar::cli::kRequired);
  p.add("grads", &a.grads, "also run the backward and write every parameter gradient");
  p.add("threads", &a.threads, "CPU threads (0 = every hardware thread)");
  return p;
}

vlpar::Status run(const Args& args) {
  VLPAR_CHECK(args.threads >= 0, "--threads must be >= 0 (0 = every hardware thread), got {}", args.threads);
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  if (args.threads > 0) ctx.num_threads = args.threads;
  ctx.allocator = &alloc;
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::Model model, qwen3vl::load_hf_model(ctx, args.model, qwen3vl::Freeze{}, alloc));
  VLPAR_ASSIGN_OR_RETURN(const vlpar::data::PackedBatch pack,
                         qwen3vl::load_batch(args.input, model.config().mrope_desc()));
  VLPAR_RETURN_IF_ERROR(qwen3vl::check_model_inputs(pack, model.config().text.vocab, "qwen3vl-forward"));
  const qwen3vl::Batch batch = pack.view();
  qwen3vl::Stash stash;
  VLPAR_ASSIGN_OR_RETURN(qwen3vl::StepLoss loss, model.forward(ctx, batch, stash));
  VLPAR_ASSIGN_OR_RETURN(vlpar::Tensor logits, model.logits(ctx, stash, alloc));
  if (args.grads) VLPAR_RETURN_IF_ERROR(model.backward(ctx, batch, stash));

  float scalars[3] = {float(loss.loss), float(loss.ce_loss), float(loss.aux_loss)};
  int64_t count = loss.num_label_tokens;
  std::vector<vlpar::io::NamedTensor> out = {
      {"logits", logits},
      {"loss", vlpar::TensorView(&scalars[0], vlpar::DType::kF32, vlpar::Shape{})},
      {"ce_loss", vlpar::TensorView(&scalars[1], vlpar::DType::kF32, vlpar::Shape{})},
      {"aux_loss", vlpar::TensorView(&scalars[2], vlpar::DType::kF32, vlpar::Shape{})},
      {"num_label_tokens", vlpar::TensorView(&count, vlpar::DType::kI64, vlpar::Shape{})},
      {"position_ids", stash.positions}};
  if (args.grads) {
    VLPAR_ASSIGN_OR_RETURN(std::vector<vlpar::io::NamedTensor> grads,
                           qwen3vl::hf_tensors(model, qwen3vl::HfWhich::kGrads, "grad."));
    out.insert(out.end(), grads.begin(), grads.end());
  }
  VLPAR_RETURN_IF_ERROR(vlpar::io::write_safetensors(args.output, out, {{"program", "qwen3vl-forward"}}));
  fmt::print("loss {:.6f} (ce {:.6f}, aux {:.6f}) over {} label tokens; {} tokens, logits [{}, {}] -> {}\n", loss.loss,
             loss.ce_loss, loss.aux_loss, loss.num_label_tokens, batch.num_tokens(), logits.view().size(0),
             logits.view().size(1), args.output);
  return vlpar::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  vlpar::cli::Parser p = parser(args);
  return vlpar::cli::run_main(p, argc, argv, [&] { return run(args); });
}
