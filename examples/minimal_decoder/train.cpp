// minimal-decoder: a byte-level decoder-only transformer trained on any text file, with vlpar's public API only.
// The worked answer to "link vlpar into my own trainer": every piece a trainer needs, in one readable file.
//
//   nn::DecoderModel                  blocks (attention with q/k norm + rotary, SwiGLU MLP, vocab-parallel LM head)
//                                     over one nn::ParamRegistry
//   parallel::ProcessGroups           the mesh: tp × dp ranks, one communicator per axis
//   parallel::DistributedOptimizer    gradient buckets reduced during the backward, global norm over tp and dp,
//                                     clipping, AdamW; --zero1 shards the optimizer state over dp
//   io::save_checkpoint / load_...    sharded, atomic, resumable (also at another tp × dp layout)
//
//   mpirun -np 4 build/cpu/examples/minimal_decoder/minimal-decoder --tp 2 --zero1 --data README.md --steps 200
//   build/cpu/examples/minimal_decoder/minimal-decoder --data README.md          (one process)
// Test: examples/minimal_decoder/test_minimal_decoder.sh (ctest minimal_decoder.np4: TP2 × DP2 × ZeRO-1, the loss
// falls, and a run resumed from its checkpoint ends on the same loss bit for bit as an uninterrupted one).
#include <fmt/core.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/comm/single_communicator.hpp"
#include "vlpar/core/cli.hpp"
#include "vlpar/io/checkpoint.hpp"
#include "vlpar/nn/decoder.hpp"
#include "vlpar/parallel/distributed_optimizer.hpp"
#include "vlpar/parallel/lr_schedule.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace {

using namespace vlpar;

struct Args {
  std::string data;                       // any file: its bytes are the training text
  std::string out = "runs/minimal_decoder";  // checkpoints in <out>/ckpt
  int tp = 1;
  bool zero1 = false;
  int steps = 100;       // length of the LR schedule
  int stop_after = 0;    // > 0: stop (and checkpoint) after this step, to resume later with the same schedule
  int batch = 8;        // samples per dp rank per step
  int seq = 64;         // bytes per sample
  int save_every = 50;  // steps between checkpoints (and one at the end)
  double lr = 3e-3;
  int threads = 0;      // 0 = all cores
};

// The options (vlpar/core/cli.hpp), bound to `a`.
cli::Parser parser(Args& a) {
  cli::Parser p("minimal-decoder", "train a small byte-level decoder under TP x DP (x ZeRO-1) with checkpoints");
  p.add("data", &a.data, "any file: its bytes are the training text", cli::kRequired);
  p.add("out", &a.out, "run directory (checkpoints in <out>/ckpt)");
  p.add("tp", &a.tp, "tensor-parallel size (world = tp x dp)");
  p.add("zero1", &a.zero1, "shard the optimizer state over dp");
  p.add("steps", &a.steps, "length of the LR schedule");
  p.add("stop-after", &a.stop_after, "stop (and checkpoint) after this step (0 = run all)");
  p.add("batch", &a.batch, "samples per dp rank per step");
  p.add("seq", &a.seq, "bytes per sample");
  p.add("save-every", &a.save_every, "steps between checkpoints");
  p.add("lr", &a.lr, "peak learning rate");
  p.add("threads", &a.threads, "CPU threads (0 = all cores)");
  return p;
}

Status check_args(const Args& a) {
  VLPAR_CHECK(a.tp >= 1 && a.steps >= 1 && a.batch >= 1 && a.seq >= 2 && a.save_every >= 1 && a.lr > 0 &&
                  a.stop_after >= 0 && a.threads >= 0,
              "--tp, --steps, --batch, --save-every must be >= 1, --seq >= 2, --lr > 0, --stop-after and --threads "
              ">= 0");
  return Status::Ok();
}

// A small Qwen3-style decoder over bytes: 2 layers, width 128, GQA 4:2, q/k RMSNorm, 1D rotary (~0.5 M params).
nn::TransformerConfig model_config() {
  nn::TransformerConfig c;
  c.vocab = 256;
  c.hidden = 128;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 32;
  c.intermediate = 384;
  c.num_layers = 2;
  c.qk_norm = true;
  return c;
}

// One packed micro-batch (DESIGN §4): `batch` samples of `seq` bytes. The labels are the ids (HF convention: the
// model shifts them within each sample, so every byte predicts the next).
struct Batch {
  Tensor ids, positions;
  std::vector<int64_t> cu;  // [B + 1] sample boundaries
  vlpar::Batch view() const {
    vlpar::Batch v;
    v.input_ids = v.labels = ids;
    v.positions = positions;
    v.cu_seqlens = TensorView(const_cast<int64_t*>(cu.data()), DType::kI64, {int64_t(cu.size())});
    v.host_cu_seqlens = cu;
    return v;
  }
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Sample s of step t on dp rank r starts at a position drawn from (t, r, s): deterministic, so a resumed run
// reads exactly the bytes the uninterrupted one would have, and the dp ranks read different windows.
Result<Batch> make_batch(const std::string& text, int64_t step, int dp_rank, const Args& a, Allocator& alloc) {
  const int64_t B = a.batch, S = a.seq, n = int64_t(text.size());
  VLPAR_CHECK(n > S + 1, "--data: the file has {} bytes, fewer than --seq + 2 = {}", n, S + 2);
  Batch b;
  VLPAR_ASSIGN_OR_RETURN(b.ids, Tensor::empty(alloc, {B * S}, DType::kI64));
  VLPAR_ASSIGN_OR_RETURN(b.positions, Tensor::empty(alloc, {B * S}, DType::kI64));
  for (int64_t s = 0; s < B; ++s) {
    const uint64_t key = (uint64_t(step) << 32) ^ (uint64_t(dp_rank) << 16) ^ uint64_t(s);
    const int64_t off = int64_t(splitmix64(key) % uint64_t(n - S - 1));
    for (int64_t i = 0; i < S; ++i) {
      b.ids.ptr<int64_t>()[s * S + i] = static_cast<unsigned char>(text[size_t(off + i)]);
      b.positions.ptr<int64_t>()[s * S + i] = i;
    }
  }
  for (int64_t s = 0; s <= B; ++s) b.cu.push_back(s * S);
  return b;
}

// Linear warmup over 10 steps, cosine to 10 % (the library's schedule).
parallel::LrSchedule lr_schedule(const Args& a) {
  return parallel::LrSchedule{.warmup_steps = std::min(10, a.steps), .total_steps = a.steps, .decay = "cosine",
                              .min_lr_ratio = 0.1};
}

// Every tensor a checkpoint holds: parameters and the AdamW state, each under its parameter's shard description.
// `replica` numbers the ranks holding the same shard (dp replicas, and tp ranks of a replicated tensor), so each
// piece is written once.
std::vector<io::CheckpointTensor> checkpoint_tensors(const nn::DecoderModel& model,
                                                     const parallel::OptimizerState& opt,
                                                     const std::vector<size_t>& slots, int tp_rank, int tp,
                                                     int dp_rank) {
  const nn::ParamRegistry& reg = model.registry();
  auto replica = [&](const vlpar::ParamShard& p) { return io::replica_index(p, tp, tp_rank, dp_rank); };
  std::vector<io::CheckpointTensor> out;
  for (size_t i = 0; i < reg.size(); ++i)
    out.push_back(io::sharded_tensor(reg.name(i), reg.value(i), reg.entry(i).shard, replica(reg.entry(i).shard)));
  for (size_t i = 0; i < reg.size(); ++i) {  // slots[i]: the optimizer's position of registry parameter i
    if (slots[i] == SIZE_MAX) continue;        // frozen: no optimizer state
    const vlpar::ParamShard& p = reg.entry(i).shard;
    out.push_back(io::sharded_tensor("optim.m." + p.name, opt.m[slots[i]], p, replica(p)));
    out.push_back(io::sharded_tensor("optim.v." + p.name, opt.v[slots[i]], p, replica(p)));
  }
  return out;
}

Status train(const Args& a, comm::Communicator& world) {
  // 1. Mesh, model, optimizer.
  parallel::ParallelConfig pc;
  pc.world = world.size();
  pc.tp = a.tp;
  const nn::TransformerConfig mc = model_config();
  parallel::ModelDims dims;
  dims.num_layers = mc.num_layers;
  dims.num_heads = mc.heads;
  dims.num_kv_heads = mc.kv_heads;
  dims.vocab = mc.vocab;
  dims.intermediate = mc.intermediate;
  VLPAR_ASSIGN_OR_RETURN(parallel::ProcessGroups groups, parallel::ProcessGroups::create(world, pc, dims));
  const int tp_rank = groups.tp().rank(), dp_rank = groups.dp().rank(), dp = groups.dp().size();
  const bool lead = world.rank() == 0;

  Allocator alloc;
  Context ctx = Context::cpu_default();
  if (a.threads > 0) ctx.num_threads = a.threads;
  ctx.allocator = &alloc;
  const nn::TensorParallel tp{a.tp > 1 ? &groups.tp() : nullptr, /*sequence_parallel=*/false};
  VLPAR_ASSIGN_OR_RETURN(nn::DecoderModel model, nn::DecoderModel::create(ctx, mc, tp, /*seed=*/1234, alloc));

  parallel::OptimizerConfig oc;
  oc.adamw.weight_decay = 0.1f;
  oc.adamw.beta2 = 0.95f;
  oc.max_grad_norm = 1.0;
  oc.zero1 = a.zero1;
  oc.average_grads = true;  // every rank's loss is a mean over the same number of bytes
  const std::vector<size_t> order = model.backward_order();
  const auto og = parallel::OptimizerGroups::from(groups);  // dense weights: reduced over dp, sharded over tp
  VLPAR_ASSIGN_OR_RETURN(std::vector<parallel::OptimParam> params,
                         parallel::optim_params_from_registry(model.registry(), order, og));
  const std::vector<size_t> slots = parallel::optim_slots(params, model.registry().size());
  VLPAR_ASSIGN_OR_RETURN(parallel::DistributedOptimizer opt,
                         parallel::DistributedOptimizer::create(ctx, og, std::move(params), oc, alloc));

  // 2. Resume from the latest checkpoint, if any (any tp × dp layout loads: pieces are matched by name and shard).
  const std::string ckpt = a.out + "/ckpt";
  int64_t step = 0;
  VLPAR_ASSIGN_OR_RETURN(std::optional<io::CheckpointInfo> latest, io::latest_checkpoint(ckpt));
  if (latest) {
    VLPAR_ASSIGN_OR_RETURN(parallel::OptimizerState state, opt.state(/*gathered=*/false));
    const std::vector<io::CheckpointTensor> t = checkpoint_tensors(model, state, slots, tp_rank, a.tp, dp_rank);
    std::string user;
    VLPAR_RETURN_IF_ERROR(io::load_checkpoint(latest->dir, t, &user));
    VLPAR_RETURN_IF_ERROR(opt.load_state(state));
    step = nlohmann::json::parse(user).at("step").get<int64_t>();
    opt.set_steps_taken(step);
    if (lead) fmt::print("resumed from {} at step {}\n", latest->dir, step);
  }
  auto save = [&](int64_t s) -> Status {
    VLPAR_ASSIGN_OR_RETURN(parallel::OptimizerState state, opt.state(/*gathered=*/true));  // collective (ZeRO)
    io::CheckpointWriteSpec spec;
    spec.root = ckpt;
    spec.step = s;
    spec.tensors = checkpoint_tensors(model, state, slots, tp_rank, a.tp, dp_rank);
    spec.layout_json = nlohmann::json{{"tp", a.tp}, {"dp", dp}}.dump();
    spec.user_json = nlohmann::json{{"step", s}}.dump();
    spec.keep_last = 2;
    return io::save_checkpoint(spec, world.size() > 1 ? &world : nullptr);
  };

  // 3. The loop: data → forward → backward (reporting each finished gradient to the optimizer, whose buckets start
  //    reducing while the backward goes on) → optimizer step → log → checkpoint.
  std::ifstream f(a.data, std::ios::binary);
  VLPAR_CHECK(f.good(), "--data: cannot read {}", a.data);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (lead)
    fmt::print("minimal-decoder: {} bytes of {}, tp {} x dp {}{}, {} params\n", text.size(), a.data, a.tp, dp,
               a.zero1 ? " (ZeRO-1)" : "", model.registry().counts().full_params);
  double loss = 0;
  const int64_t stop = a.stop_after > 0 ? std::min(a.stop_after, a.steps) : a.steps;
  const parallel::LrSchedule schedule = lr_schedule(a);
  for (; step < stop; ++step) {
    VLPAR_ASSIGN_OR_RETURN(Batch batch, make_batch(text, step, dp_rank, a, alloc));
    const vlpar::Batch view = batch.view();
    const double lr = schedule.at(a.lr, step);
    VLPAR_RETURN_IF_ERROR(model.zero_grads());
    nn::DecoderStash stash;
    VLPAR_ASSIGN_OR_RETURN(CrossEntropyResult r, model.forward(ctx, view, stash));
    VLPAR_RETURN_IF_ERROR(model.backward(ctx, view, stash, 1.f, [&](size_t i) { return opt.grad_ready(slots[i]); }));
    VLPAR_ASSIGN_OR_RETURN(parallel::StepReport rep, opt.step(ctx, lr));
    VLPAR_CHECK(rep.applied, "step {}: the gradient norm is {}", step + 1, rep.grad_norm);
    loss = r.loss;  // this dp rank's mean; the mean over dp below
    VLPAR_RETURN_IF_ERROR(groups.dp().all_reduce(TensorView(&loss, DType::kF64, {1}), comm::ReduceOp::kSum));
    loss /= dp;
    if (lead && ((step + 1) % 10 == 0 || step == 0))
      fmt::print("step {:5d}/{}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}\n", step + 1, a.steps, loss, rep.grad_norm,
                 lr);
    if ((step + 1) % a.save_every == 0 || step + 1 == stop) VLPAR_RETURN_IF_ERROR(save(step + 1));
  }
  if (lead) fmt::print("final loss {:.9g} after step {}\n", loss, step);
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  cli::Parser p = parser(args);
  Status parsed = p.parse(argc, argv);
  if (parsed.ok() && p.help_requested()) {
    fmt::print("{}", p.usage());
    return 0;
  }
  if (parsed.ok()) parsed = check_args(args);
  if (!parsed.ok()) return cli::exit_code("minimal-decoder", parsed);
  // Under mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE, MPICH and srun PMI_SIZE) the ranks form the world; otherwise
  // one process, no MPI.
  const char* ws = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (ws == nullptr) ws = std::getenv("PMI_SIZE");
  std::optional<comm::MpiSession> session;
  std::unique_ptr<comm::Communicator> world;
  if (ws != nullptr && std::atoi(ws) > 1) {
    auto s = comm::MpiSession::init(&argc, &argv);
    if (!s.ok()) {
      fmt::print(stderr, "minimal-decoder: {}\n", s.status().message());
      return 1;
    }
    session.emplace(std::move(s).value());
    auto w = session->world();
    if (!w.ok()) comm::MpiSession::abort_job(w.status());
    world = std::move(w).value();
  } else {
    world = std::make_unique<comm::SingleCommunicator>();
  }
  const Status s = train(args, *world);
  if (!s.ok()) {
    fmt::print(stderr, "minimal-decoder: {}\n", s.message());
    if (session) comm::MpiSession::abort_job(s);
    return 1;
  }
  return 0;
}
