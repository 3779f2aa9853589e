// Exposed communication of a data-parallel step: the nn decoder stack (TP1 per rank) with GradBuckets all-reducing
// gradients over the world while the backward runs. Reports, per mode, the step time (forward + backward +
// finish), the time finish() spent blocked in wait() (GradBuckets::exposed_seconds) and their ratio, the
// exposed-communication fraction, the time spent inside the ready hooks (packing buckets and starting their
// MPI_Iallreduce, which GradBuckets does not count as exposed) and the step's excess over compute alone. Modes:
//   no-overlap : backward without the ready hook, every bucket launched and waited in finish() (all comm exposed)
//   overlap    : buckets launched from the backward's ready hook (what the trainer does)
//   overlap+poll: as overlap, and each ready hook also enters the MPI progress engine (MPI_Iprobe), standing in
//                for a GradBuckets::poll(): Open MPI has no asynchronous progress thread, so a non-blocking
//                collective advances only while its process is inside an MPI call
//   compute    : forward + backward alone (no communication), the floor
// Numbers are the median over the measured steps of the slowest rank; the modes run interleaved step by step.
// The last line is the all-reduce of every bucket with no compute (what overlap could hide at most).
// Run: mpirun -np 2 ./build/cpu/bench/bench_dp_overlap [--steps N] [--bucket-mib M]
#include <fmt/core.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "vlpar/core/cli.hpp"
#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/core/philox.hpp"
#include "vlpar/nn/decoder.hpp"
#include "vlpar/parallel/grad_buckets.hpp"

namespace {

using namespace vlpar;
using Clock = std::chrono::steady_clock;

enum class Mode { kNoOverlap, kOverlap, kOverlapPoll, kCompute };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kNoOverlap: return "no-overlap";
    case Mode::kOverlap: return "overlap";
    case Mode::kOverlapPoll: return "overlap+poll";
    case Mode::kCompute: return "compute";
  }
  return "?";
}

void check(const Status& s) {
  if (!s.ok()) comm::MpiSession::abort_job(s);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  auto session = comm::MpiSession::init(&argc, &argv);
  if (!session.ok()) {
    fmt::print(stderr, "{}\n", session.status().to_string());
    return 1;
  }
  int steps = 5;
  int64_t bucket_mib = 4;
  cli::Parser p("bench_dp_overlap", "exposed data-parallel communication of a decoder step, with and without polling");
  p.add("steps", &steps, "timed steps (>= 1)");
  p.add("bucket-mib", &bucket_mib, "gradient bucket size in MiB (>= 1)");
  Status parsed = p.parse(argc, argv);
  if (parsed.ok() && p.help_requested()) {
    fmt::print("{}", p.usage());
    return 0;
  }
  if (parsed.ok() && (steps < 1 || bucket_mib < 1))
    parsed = Status(StatusCode::kInvalidArgument, "--steps and --bucket-mib must be >= 1");
  if (!parsed.ok()) comm::MpiSession::abort_job(parsed);
  auto world_r = session->world(comm::CommOptions{"dp", std::chrono::minutes(2)});
  if (!world_r.ok()) comm::MpiSession::abort_job(world_r.status());
  comm::Communicator& dp = *world_r.value();

  nn::TransformerConfig cfg;
  cfg.hidden = 256;
  cfg.heads = 8;
  cfg.kv_heads = 4;
  cfg.head_dim = 32;
  cfg.intermediate = 1024;
  cfg.vocab = 8192;
  cfg.num_layers = 4;
  // A packed batch of two samples (300 + 212 tokens), different ids on every rank.
  std::vector<int64_t> ids, positions, cu = {0};
  for (int len : {300, 212}) {
    const int64_t t0 = int64_t(ids.size());
    for (int i = 0; i < len; ++i) {
      ids.push_back(int64_t(philox_element(17 + uint64_t(dp.rank()), 0, uint64_t(t0 + i)).v[0] % uint32_t(cfg.vocab)));
      positions.push_back(i);
    }
    cu.push_back(int64_t(ids.size()));
  }
  const int64_t N = int64_t(ids.size());
  Batch batch;  // HF labels = the ids (the model shifts them within each sample)
  batch.input_ids = batch.labels = TensorView(ids.data(), DType::kI64, {N});
  batch.positions = TensorView(positions.data(), DType::kI64, {N});
  batch.cu_seqlens = TensorView(cu.data(), DType::kI64, {int64_t(cu.size())});
  batch.host_cu_seqlens = cu;

  Allocator alloc;
  Context ctx;
  ctx.num_threads = 1;  // one core per rank on the 2-core CI machine; set OMP_NUM_THREADS to match
  if (const char* t = std::getenv("OMP_NUM_THREADS")) ctx.num_threads = std::max(1, std::atoi(t));
  ctx.allocator = &alloc;
  auto model_r = nn::DecoderModel::create(ctx, cfg, {}, 1, alloc);
  if (!model_r.ok()) comm::MpiSession::abort_job(model_r.status());
  nn::DecoderModel& model = model_r.value();
  std::vector<TensorView> grads = model.grads();
  std::reverse(grads.begin(), grads.end());
  int64_t numel = 0;
  for (const TensorView& g : grads) numel += g.numel();
  auto buckets_r = parallel::GradBuckets::create(dp, grads, {.bucket_bytes = size_t(bucket_mib) << 20}, alloc);
  if (!buckets_r.ok()) comm::MpiSession::abort_job(buckets_r.status());
  parallel::GradBuckets& buckets = buckets_r.value();
  const size_t last = model.num_params() - 1;
  if (dp.rank() == 0)
    fmt::print("# dp={} tokens/rank={} params={:.2f}M grads={:.1f} MiB buckets={} x {} MiB threads/rank={}\n",
               dp.size(), N, double(numel) / 1e6, double(numel) * 4 / (1 << 20), buckets.num_buckets(), bucket_mib,
               ctx.num_threads);
  if (dp.rank() == 0)
    fmt::print("{:<14}{:>10}{:>13}{:>10}{:>12}{:>15}\n", "mode", "step(ms)", "exposed(ms)", "exposed%",
               "launch(ms)", "step-compute");

  // Modes interleaved step by step, so machine noise (other processes on the cores) hits them alike.
  const Mode modes[] = {Mode::kCompute, Mode::kNoOverlap, Mode::kOverlap, Mode::kOverlapPoll};
  std::vector<double> step_s[4], exposed_s[4], launch_s[4], comm_s;
  for (int s = 0; s < steps + 1; ++s) {  // step 0 warms up
    for (int mi = 0; mi < 4; ++mi) {
      const Mode mode = modes[mi];
      check(model.zero_grads());
      check(dp.barrier());
      const auto t0 = Clock::now();
      nn::DecoderStash st;
      auto r = model.forward(ctx, batch, st);
      if (!r.ok()) comm::MpiSession::abort_job(r.status());
      nn::GradReadyFn ready;
      double launch = 0.0;  // time inside the ready hook: packing a bucket and starting its MPI_Iallreduce
      if (mode == Mode::kOverlap || mode == Mode::kOverlapPoll)
        ready = [&](size_t i) {
          const auto l0 = Clock::now();
          VLPAR_RETURN_IF_ERROR(buckets.mark_ready(last - i));
          if (mode == Mode::kOverlapPoll) {
            int flag = 0;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
          }
          launch += std::chrono::duration<double>(Clock::now() - l0).count();
          return Status::Ok();
        };
      check(model.backward(ctx, batch, st, 1.f, ready));
      if (mode != Mode::kCompute) check(buckets.finish());
      double times[3] = {std::chrono::duration<double>(Clock::now() - t0).count(),
                         mode == Mode::kCompute ? 0.0 : buckets.exposed_seconds(), launch};
      check(dp.all_reduce(TensorView(times, DType::kF64, {3}), comm::ReduceOp::kMax));  // the slowest rank
      if (s == 0) continue;
      step_s[mi].push_back(times[0]);
      exposed_s[mi].push_back(times[1]);
      launch_s[mi].push_back(times[2]);
    }
    // The communication alone: every bucket launched and waited with no compute in between.
    check(dp.barrier());
    const auto t0 = Clock::now();
    check(buckets.finish());
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    check(dp.all_reduce(TensorView(&t, DType::kF64, {1}), comm::ReduceOp::kMax));
    if (s > 0) comm_s.push_back(t);
  }
  if (dp.rank() == 0) {
    const double compute = median(step_s[0]);
    for (int mi = 0; mi < 4; ++mi) {
      const double step = median(step_s[mi]), exposed = median(exposed_s[mi]), launch = median(launch_s[mi]);
      fmt::print("{:<14}{:>10.2f}{:>13.2f}{:>9.1f}%{:>12.2f}{:>15.2f}\n", mode_name(modes[mi]), step * 1e3,
                 exposed * 1e3, 100.0 * exposed / step, launch * 1e3, (step - compute) * 1e3);
    }
    fmt::print("# {} measured steps per mode\n", steps);
    fmt::print("# all-reduce of every bucket alone (no compute): {:.2f} ms\n", median(comm_s) * 1e3);
  }
  return 0;
}
