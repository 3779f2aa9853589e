// Exposed communication of a data-parallel step: the nn decoder stack (TP1 per rank) with GradBuckets all-reducing
// gradients over the world while the backward runs. Reports, per mode, the step time (forward + backward +
// finish), the time finish() spent blocked in wait() (GradBuckets::exposed_seconds) and their ratio, the
// exposed-communication fraction. Modes:
//   no-overlap : backward without the ready hook, every bucket launched and waited in finish() (all comm exposed)
//   overlap    : buckets launched from the backward's ready hook (what the trainer does)
//   overlap+poll: as overlap, and each ready hook also enters the MPI progress engine (MPI_Iprobe), standing in
//                for a GradBuckets::poll(): Open MPI has no asynchronous progress thread, so a non-blocking
//                collective advances only while its process is inside an MPI call
//   compute    : forward + backward alone (no communication), the floor
// Numbers are the median over the measured steps of the slowest rank.
// Run: mpirun -np 2 ./build/cpu/bench/bench_dp_overlap [steps] [bucket_MiB]
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

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
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  const size_t bucket_mib = argc > 2 ? size_t(std::atoi(argv[2])) : 4;
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
  std::vector<int64_t> ids, labels, positions;
  std::vector<int32_t> cu = {0};
  for (int len : {300, 212}) {
    const int64_t t0 = int64_t(ids.size());
    for (int i = 0; i < len; ++i) {
      ids.push_back(int64_t(philox_element(17 + uint64_t(dp.rank()), 0, uint64_t(t0 + i)).v[0] % uint32_t(cfg.vocab)));
      positions.push_back(i);
    }
    for (int i = 0; i < len; ++i) labels.push_back(i + 1 < len ? ids[size_t(t0 + i + 1)] : cfg.ignore_index);
    cu.push_back(int32_t(ids.size()));
  }
  const int64_t N = int64_t(ids.size());
  nn::DecoderBatch batch{TensorView(ids.data(), DType::kI64, {N}), TensorView(labels.data(), DType::kI64, {N}),
                         TensorView(positions.data(), DType::kI64, {N}),
                         TensorView(cu.data(), DType::kI32, {int64_t(cu.size())})};

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
  auto buckets_r = parallel::GradBuckets::create(dp, grads, {.bucket_bytes = bucket_mib << 20}, alloc);
  if (!buckets_r.ok()) comm::MpiSession::abort_job(buckets_r.status());
  parallel::GradBuckets& buckets = buckets_r.value();
  const size_t last = model.num_params() - 1;
  if (dp.rank() == 0)
    fmt::print("# dp={} tokens/rank={} params={:.2f}M grads={:.1f} MiB buckets={} x {} MiB threads/rank={}\n",
               dp.size(), N, double(numel) / 1e6, double(numel) * 4 / (1 << 20), buckets.num_buckets(), bucket_mib,
               ctx.num_threads);
  if (dp.rank() == 0)
    fmt::print("{:<14}{:>12}{:>14}{:>12}{:>12}\n", "mode", "step(ms)", "exposed(ms)", "exposed%", "steps");

  for (Mode mode : {Mode::kCompute, Mode::kNoOverlap, Mode::kOverlap, Mode::kOverlapPoll}) {
    std::vector<double> step_s, exposed_s;
    for (int s = 0; s < steps + 1; ++s) {  // step 0 warms up
      check(model.zero_grads());
      check(dp.barrier());
      const auto t0 = Clock::now();
      nn::DecoderStash st;
      auto r = model.forward(ctx, batch, st);
      if (!r.ok()) comm::MpiSession::abort_job(r.status());
      nn::GradReadyFn ready;
      if (mode == Mode::kOverlap) ready = [&](size_t i) { return buckets.mark_ready(last - i); };
      if (mode == Mode::kOverlapPoll)
        ready = [&](size_t i) {
          VLPAR_RETURN_IF_ERROR(buckets.mark_ready(last - i));
          int flag = 0;
          MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
          return Status::Ok();
        };
      check(model.backward(ctx, batch, st, 1.f, ready));
      if (mode != Mode::kCompute) check(buckets.finish());
      double times[2] = {std::chrono::duration<double>(Clock::now() - t0).count(),
                         mode == Mode::kCompute ? 0.0 : buckets.exposed_seconds()};
      check(dp.all_reduce(TensorView(times, DType::kF64, {2}), comm::ReduceOp::kMax));  // the slowest rank
      if (s == 0) continue;
      step_s.push_back(times[0]);
      exposed_s.push_back(times[1]);
    }
    const double step = median(step_s), exposed = median(exposed_s);
    if (dp.rank() == 0)
      fmt::print("{:<14}{:>12.2f}{:>14.2f}{:>11.1f}%{:>12}\n", mode_name(mode), step * 1e3, exposed * 1e3,
                 100.0 * exposed / step, steps);
  }
  return 0;
}
