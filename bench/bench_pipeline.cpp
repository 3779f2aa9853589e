// bench_pipeline: the pipeline bubble measured under mpirun against the simulator's prediction fed with the
// measured action costs (parallel/pipeline_engine.hpp, pipeline_schedule.hpp).
//   mpirun -np 2 ./build/cpu/bench/bench_pipeline [-s gpipe,1f1b,interleaved,zb_h1,zb_v] [-m 8] [-H 256] [-L 8]
//                                                [-r 128] [-n 5] [-w 2] [-p 0,50]
// (as root or with more ranks than cores: the Open MPI variables of bench/README.md)
//
// Model: the toy of tests/pipeline_toy.hpp (L residual GELU layers of width H, r rows in every micro-batch, a
// side value across stages), split evenly over the stages; interleaved and ZB-V use two chunks
// per rank. Per schedule, after -w warm-up steps, -n measured steps:
//   measured    makespan = the slowest rank's step time (each rank starts its clock after a barrier);
//               bubble   = 1 − Σ_r busy_r / (p · makespan), busy = compute time of F/B/I/W without the time spent
//               waiting for receives and sends inside them;
//   simulated   simulate() of the same step with every compute action's measured time as its cost (so noise in
//               one action is in both): `sim` with communication free (spec A1.6), `sim+msg` with each cross-rank
//               hop costing one boundary message's one-way time, measured by a ping-pong before the schedules;
//   ratio       measured / simulated bubble (goal: within 20 %); every column is the median over the steps;
//   progress    EngineOptions::send_progress in µs (-p: the values to compare, one row each, same run).
// All ranks run one thread (OMP_NUM_THREADS, default 1): on a shared 2-core machine np 2 is the honest setting.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "pipeline_toy.hpp"
#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/parallel/pipeline_engine.hpp"

namespace {

using namespace vlpar;
using pipeline::ActionKind;

struct Options {
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb_h1", "zb_v"};
  int microbatches = 8, layers = 8, steps = 5, warmup = 2;
  int64_t hidden = 256, rows = 128;
  std::vector<int> send_progress_us = {0, 50};  // EngineOptions::send_progress values to compare, µs
};

int kind_index(ActionKind k) {
  switch (k) {
    case ActionKind::kF: return 0;
    case ActionKind::kB: return 1;
    case ActionKind::kI: return 2;
    case ActionKind::kW: return 3;
    default: return -1;
  }
}

/// One measured step: the costs of every compute action, the slowest rank's span, every rank's busy time.
struct StepSample {
  std::vector<double> cost;  // [4 · stages · m]: (kind, stage, mb) → seconds of compute (waits excluded)
  double makespan = 0, busy = 0;
};

Result<std::vector<StepSample>> measure(const Options& o, const pipeline::Schedule& s, int progress_us,
                                        comm::Communicator& world) {
  const int rank = world.rank(), S = s.num_stages(), m = o.microbatches;
  Allocator params, acts;
  Context ctx = Context::cpu_default();
  ctx.allocator = &acts;
  const std::vector<int64_t> rows(size_t(m), o.rows);  // equal micro-batches
  test::ToyModel model = test::ToyModel::make(params, o.hidden, o.layers, rows, 1);
  test::ToyRank mine = test::toy_rank(model, s, rank);
  pipeline::EngineOptions eo;
  eo.send_progress = std::chrono::microseconds(progress_us);
  VLPAR_ASSIGN_OR_RETURN(auto engine, pipeline::Engine<test::ToyStage>::create(s, mine.args(), world, eo));
  std::vector<StepSample> out;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    VLPAR_RETURN_IF_ERROR(world.barrier());
    VLPAR_RETURN_IF_ERROR(engine.step(ctx));
    if (step < o.warmup) continue;
    StepSample x;
    x.cost.assign(size_t(4 * S * m) + 1, 0.0);  // + busy
    for (const pipeline::ActionTiming& t : engine.timings()) {
      const int k = kind_index(t.action.kind);
      if (k < 0) continue;
      const double c = t.end - t.start - t.wait;
      x.cost[size_t((k * S + t.action.stage) * m + t.action.mb)] = c;
      x.cost.back() += c;
    }
    std::vector<double> span = {engine.timings().back().end};
    VLPAR_RETURN_IF_ERROR(world.all_reduce(TensorView(span.data(), DType::kF64, {1}), comm::ReduceOp::kMax));
    VLPAR_RETURN_IF_ERROR(world.all_reduce(TensorView(x.cost.data(), DType::kF64, {int64_t(x.cost.size())}),
                                           comm::ReduceOp::kSum));
    x.busy = x.cost.back();
    x.cost.pop_back();
    x.makespan = span[0];
    out.push_back(std::move(x));
  }
  return out;
}

/// One-way time of one boundary message (hidden [rows, H] f32 plus the side value) between ranks 0 and 1: half
/// the mean round trip of 50 ping-pongs after 5 warm-ups; every rank gets the value.
Result<double> message_seconds(const Options& o, comm::Communicator& world) {
  std::vector<float> buf(size_t(o.rows * o.hidden + 2), 1.f);
  const TensorView v(buf.data(), DType::kF32, {int64_t(buf.size())});
  const int rank = world.rank();
  std::vector<double> t = {0};
  VLPAR_RETURN_IF_ERROR(world.barrier());
  for (int it = 0; it < 55 && rank < 2; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
      VLPAR_RETURN_IF_ERROR(world.send(v, 1, 1));
      VLPAR_RETURN_IF_ERROR(world.recv(v, 1, 2));
    } else {
      VLPAR_RETURN_IF_ERROR(world.recv(v, 0, 1));
      VLPAR_RETURN_IF_ERROR(world.send(v, 0, 2));
    }
    if (it >= 5) t[0] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100;
  }
  VLPAR_RETURN_IF_ERROR(world.broadcast(TensorView(t.data(), DType::kF64, {1}), 0));
  return t[0];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// One table row: the medians over the steps of the measured and simulated makespans and bubbles.
Status report(const std::string& name, int progress, const pipeline::Schedule& s, const std::vector<StepSample>& steps,
              double msg, const comm::Communicator& world) {
  const int S = s.num_stages(), m = s.num_microbatches, p = world.size();
  std::vector<double> col[8];  // measured ms, sim ms, sim+msg ms, bubbles (same order), ratios
  for (const StepSample& x : steps) {
    pipeline::SimCosts costs;
    costs.action = [&](const pipeline::Action& a) {
      return x.cost[size_t((kind_index(a.kind) * S + a.stage) * m + a.mb)];
    };
    VLPAR_ASSIGN_OR_RETURN(pipeline::SimResult free_comm, pipeline::simulate(s, costs));
    costs.message = msg;
    VLPAR_ASSIGN_OR_RETURN(pipeline::SimResult with_msg, pipeline::simulate(s, costs));
    const double bubble = 1 - x.busy / (p * x.makespan);
    const double row[8] = {1e3 * x.makespan, 1e3 * free_comm.makespan, 1e3 * with_msg.makespan, bubble,
                           free_comm.bubble, with_msg.bubble, bubble / free_comm.bubble, bubble / with_msg.bubble};
    for (int c = 0; c < 8; ++c) col[c].push_back(row[c]);
  }
  if (world.rank() == 0)
    std::printf("%-12s %6d %8d | %11.2f %9.2f %9.2f | %8.3f %8.3f %8.3f | %9.2f %9.2f\n", name.c_str(), S, progress,
                median(col[0]), median(col[1]), median(col[2]), median(col[3]), median(col[4]), median(col[5]),
                median(col[6]), median(col[7]));
  return Status::Ok();
}

Status run(const Options& o, comm::Communicator& world) {
  const int p = world.size();
  if (world.rank() == 0) {
    std::printf("# bench_pipeline: np %d, m %d, L %d, H %lld, rows %lld, %d steps after %d warm-up (medians)\n", p,
                o.microbatches, o.layers, (long long)o.hidden, (long long)o.rows, o.steps, o.warmup);
  }
  VLPAR_ASSIGN_OR_RETURN(const double msg, message_seconds(o, world));
  if (world.rank() == 0) {
    std::printf("# one boundary message (%lld bytes): %.1f us one way\n", (long long)(4 * (o.rows * o.hidden + 2)),
                1e6 * msg);
    std::printf("%-12s %6s %8s | %11s %9s %9s | %8s %8s %8s | %9s %9s\n", "schedule", "stages", "progress",
                "measured_ms", "sim_ms", "sim+msg", "bubble", "sim", "sim+msg", "ratio", "ratio+msg");
  }
  for (const std::string& name : o.schedules) {
    VLPAR_ASSIGN_OR_RETURN(pipeline::Schedule compute, pipeline::generate(name, p, o.microbatches));
    VLPAR_ASSIGN_OR_RETURN(pipeline::Schedule s, pipeline::lower(compute));
    for (int progress : o.send_progress_us) {
      VLPAR_ASSIGN_OR_RETURN(std::vector<StepSample> steps, measure(o, s, progress, world));
      VLPAR_RETURN_IF_ERROR(report(name, progress, s, steps, msg, world));
    }
  }
  return Status::Ok();
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "-s") {
      o.schedules.clear();
      for (size_t a = 0, b; a <= v.size(); a = b + 1) {
        b = std::min(v.find(',', a), v.size());
        o.schedules.push_back(v.substr(a, b - a));
      }
    } else if (flag == "-m") o.microbatches = std::atoi(v.c_str());
    else if (flag == "-L") o.layers = std::atoi(v.c_str());
    else if (flag == "-H") o.hidden = std::atoll(v.c_str());
    else if (flag == "-r") o.rows = std::atoll(v.c_str());
    else if (flag == "-n") o.steps = std::atoi(v.c_str());
    else if (flag == "-w") o.warmup = std::atoi(v.c_str());
    else if (flag == "-p") {
      o.send_progress_us.clear();
      for (size_t a = 0, b; a <= v.size(); a = b + 1) {
        b = std::min(v.find(',', a), v.size());
        o.send_progress_us.push_back(std::atoi(v.substr(a, b - a).c_str()));
      }
    }
    else return false;
  }
  return argc % 2 == 1 && o.microbatches > 0 && o.layers > 0 && o.hidden > 0 && o.rows > 1 && o.steps > 0 &&
         o.warmup >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Options o;
  int rc = 0;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: bench_pipeline [-s names] [-m mbs] [-L layers] [-H hidden] [-r rows] [-n steps] "
                         "[-w warmup] [-p progress_us,...]\n");
    rc = 2;
  } else {
    auto world = comm::MpiCommunicator::create(MPI_COMM_WORLD, comm::CommOptions{"pp", std::chrono::minutes(5)});
    const Status s = world.ok() ? run(o, *world.value()) : world.status();
    if (!s.ok()) {
      std::fprintf(stderr, "bench_pipeline: %s\n", s.to_string().c_str());
      rc = 1;
    }
  }
  MPI_Finalize();
  return rc;
}
