// bench_expert_dispatch: expert parallelism's token path (nn/expert_dispatch.hpp) against MPI's own all-to-all-v
// of the same bytes, per rank, under mpirun (issue 17's dispatch benchmark).
//   mpirun -np 2 ./build/cpu/bench/bench_expert_dispatch [-t 4096] [-H 1024] [-e 32] [-k 4] [-n 20] [-w 3]
//                                                      [-s 0|1] [-c 1] [-j results.json]
// (as root or with more ranks than cores: the OMPI_* variables of bench/README.md)
//
// One iteration of vlpar = what a MoE layer's forward moves: plan_expert_dispatch (local plan, per-expert count
// exchange, receive bound) + dispatch_rows of the [T, H] f32 token rows to the experts' ranks + combine_rows of the
// experts' [N, H] output rows back to their tokens, weighted and summed in ascending expert order. The baseline moves
// the same bytes with two MPI_Alltoallv calls (there and back) on pre-packed buffers, with the same per-rank counts:
// no planning, no gather into send order, no sort into expert order, no weighted sum. Their time ratio
// (baseline / vlpar) is the dispatcher's efficiency; issue 17's target is >= 0.8.
//   moved(GB/s)  = 2 · T · K · H · 4 bytes (each (token, k) row out and back) / time, per rank (1 GB = 1e9 B)
//   time         = median of -n iterations after -w warmups, each the maximum over ranks; vlpar and the baseline
//                  run alternately and the ratio is the median of the per-round ratios (this machine is shared:
//                  adjacent runs see the same load)
// Routing: K distinct experts per token, uniform (-s 0) or skewed (-s 1: expert e drawn with weight 1/(e+1), the
// first rank's experts take most rows). Before timing, one combine(dispatch(x)) with identity experts is checked
// against x (weights sum to 1): a wrong path fails the run (exit 1) instead of printing a number.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/core/cli.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/expert_dispatch.hpp"

namespace {

using vlpar::DType;
using vlpar::Shape;
using vlpar::Status;
using vlpar::Tensor;
using vlpar::TensorView;

struct Options {
  int64_t tokens = 4096, hidden = 1024;
  int experts = 32, top_k = 4, iters = 20, warmup = 3, skewed = 0, threads = 1;
  std::string json;
};

/// [T, K] i32 routing with K distinct experts per token, and [T, K] f32 weights summing to 1 per token.
void route(const Options& o, int rank, Tensor& idx, Tensor& w) {
  std::mt19937_64 rng(1234 + uint64_t(rank));
  std::vector<double> weight(size_t(o.experts));
  for (int e = 0; e < o.experts; ++e) weight[size_t(e)] = o.skewed ? 1.0 / (e + 1) : 1.0;
  for (int64_t t = 0; t < o.tokens; ++t) {
    std::vector<double> left = weight;
    for (int k = 0; k < o.top_k; ++k) {
      std::discrete_distribution<int> pick(left.begin(), left.end());
      const int e = pick(rng);
      left[size_t(e)] = 0;  // distinct experts per token
      idx.ptr<int32_t>()[t * o.top_k + k] = e;
      w.ptr<float>()[t * o.top_k + k] = 1.f / float(o.top_k);
    }
  }
}

double max_over_ranks(double v) {
  double m = 0;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/// One call of f, in ms, the slowest rank's (every rank starts together).
template <class F>
double one_ms(const F& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return max_over_ranks(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class F>
double time_ms(int iters, int warmup, const F& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) t.push_back(one_ms(f));
  return median(t);
}

/// `a` and `b` run alternately (after `warmup` rounds of both), so that both see the same load on this shared
/// machine: the medians of their times and the median of the per-round ratios b / a (adjacent runs paired).
struct Paired {
  double a_ms = 0, b_ms = 0, ratio = 0;
};
template <class A, class B>
Paired paired_ms(int iters, int warmup, const A& a, const B& b) {
  for (int i = 0; i < warmup; ++i) a(), b();
  std::vector<double> ta, tb, r;
  for (int i = 0; i < iters; ++i) {
    ta.push_back(one_ms(a));
    tb.push_back(one_ms(b));
    r.push_back(tb.back() / ta.back());
  }
  return {median(ta), median(tb), median(r)};
}

void check(const Status& s, const char* what) {
  if (!s.ok()) vlpar::comm::MpiSession::abort_job(vlpar::Status(s.code(), std::string(what) + ": " + s.message()));
}

/// MPI_Alltoallv of `bytes_to[p]` bytes to each rank p (and what the others send here), on pre-packed buffers.
struct RawAllToAll {
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  std::vector<char> send, recv;
  RawAllToAll(const std::vector<int64_t>& bytes_to, int P) : send_counts(size_t(P)), send_displs(size_t(P)),
      recv_counts(size_t(P)), recv_displs(size_t(P)) {
    for (int p = 0; p < P; ++p) send_counts[size_t(p)] = int(bytes_to[size_t(p)]);
    MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int s = 0, r = 0;
    for (int p = 0; p < P; ++p) {
      send_displs[size_t(p)] = s, recv_displs[size_t(p)] = r;
      s += send_counts[size_t(p)], r += recv_counts[size_t(p)];
    }
    send.assign(size_t(s), 1), recv.assign(size_t(r), 0);
  }
  void there() {
    MPI_Alltoallv(send.data(), send_counts.data(), send_displs.data(), MPI_BYTE, recv.data(), recv_counts.data(),
                  recv_displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  }
  void back() {  // the same bytes in the reverse direction
    MPI_Alltoallv(recv.data(), recv_counts.data(), recv_displs.data(), MPI_BYTE, send.data(), send_counts.data(),
                  send_displs.data(), MPI_BYTE, MPI_COMM_WORLD);
  }
};

int run(const Options& o, vlpar::comm::Communicator& ep) {
  const int P = ep.size(), rank = ep.rank();
  const int64_t T = o.tokens, H = o.hidden, K = o.top_k;
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  ctx.num_threads = o.threads;
  ctx.allocator = &alloc;
  Tensor idx = Tensor::empty(alloc, {T, K}, DType::kI32).value(), w = Tensor::empty(alloc, {T, K}, DType::kF32).value();
  route(o, rank, idx, w);
  Tensor x = Tensor::empty(alloc, {T, H}, DType::kF32).value(), y = Tensor::empty(alloc, {T, H}, DType::kF32).value();
  for (int64_t i = 0; i < T * H; ++i) x.ptr<float>()[i] = float((i * 7 + rank) % 101) / 101.f;
  auto planned = vlpar::nn::plan_expert_dispatch(ctx, &ep, idx, o.experts);
  check(planned.status(), "plan");
  const vlpar::nn::ExpertDispatch d = std::move(planned).value();
  Tensor rows = Tensor::empty(alloc, {d.received(), H}, DType::kF32).value();
  // Correctness first: identity experts, weights summing to 1 → y = x (to fp32 rounding of Σ w·x).
  check(vlpar::nn::dispatch_rows(ctx, &ep, d, rows, x), "dispatch");
  check(vlpar::nn::combine_rows(ctx, &ep, d, y, rows, w), "combine");
  double worst = 0;
  for (int64_t i = 0; i < T * H; ++i) worst = std::max(worst, double(std::fabs(y.ptr<float>()[i] - x.ptr<float>()[i])));
  if (max_over_ranks(worst) > 1e-5) {
    if (rank == 0) std::fprintf(stderr, "bench_expert_dispatch: combine(dispatch(x)) differs from x by %g\n", worst);
    return 1;
  }
  std::vector<int64_t> bytes_to(static_cast<size_t>(P));
  for (int p = 0; p < P; ++p) bytes_to[size_t(p)] = d.send_rows[size_t(p)] * H * 4;
  RawAllToAll raw(bytes_to, P);
  const Paired both = paired_ms(o.iters, o.warmup, [&] {
    auto p = vlpar::nn::plan_expert_dispatch(ctx, &ep, idx, o.experts);
    check(p.status(), "plan");
    check(vlpar::nn::dispatch_rows(ctx, &ep, p.value(), rows, x), "dispatch");
    check(vlpar::nn::combine_rows(ctx, &ep, p.value(), y, rows, w), "combine");
  }, [&] {
    raw.there();
    raw.back();
  });
  const double vlpar_ms = both.a_ms, mpi_ms = both.b_ms;
  // The parts alone (the same plan reused for dispatch and combine).
  const double plan_ms = time_ms(o.iters, o.warmup, [&] {
    check(vlpar::nn::plan_expert_dispatch(ctx, &ep, idx, o.experts).status(), "plan");
  });
  const double dispatch_ms = time_ms(o.iters, o.warmup, [&] {
    check(vlpar::nn::dispatch_rows(ctx, &ep, d, rows, x), "dispatch");
  });
  const double combine_ms = time_ms(o.iters, o.warmup, [&] {
    check(vlpar::nn::combine_rows(ctx, &ep, d, y, rows, w), "combine");
  });
  const double moved = 2.0 * double(T * K * H) * 4;  // bytes per rank, out and back
  int64_t recv_max = d.received();
  MPI_Allreduce(MPI_IN_PLACE, &recv_max, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("# bench_expert_dispatch: %d ranks, %lld tokens x %lld f32 per rank, %d experts (%d per rank), top-%d, "
                "%s routing, %d thread(s) per rank, iters %d, warmup %d\n", P, static_cast<long long>(T), static_cast<long long>(H),
                o.experts, o.experts / P, o.top_k, o.skewed ? "skewed" : "uniform", o.threads, o.iters, o.warmup);
    std::printf("%-28s %10s %12s\n", "what", "time(ms)", "moved(GB/s)");
    std::printf("%-28s %10.3f %12.2f\n", "vlpar plan+dispatch+combine", vlpar_ms, moved / vlpar_ms * 1e-6);
    std::printf("%-28s %10.3f %12.2f\n", "MPI_Alltoallv x2 (same bytes)", mpi_ms, moved / mpi_ms * 1e-6);
    std::printf("%-28s %10.3f\n%-28s %10.3f %12.2f\n%-28s %10.3f %12.2f\n", "  of which: plan", plan_ms,
                "  dispatch_rows", dispatch_ms, moved / 2 / dispatch_ms * 1e-6, "  combine_rows (weighted)",
                combine_ms, moved / 2 / combine_ms * 1e-6);
    std::printf("ratio (MPI / vlpar, median of paired rounds): %.2f   most rows received by a rank: %lld (of %lld "
                "sent per rank)\n", both.ratio, static_cast<long long>(recv_max), static_cast<long long>(T * K));
    if (!o.json.empty()) {
      if (std::FILE* f = std::fopen(o.json.c_str(), "w")) {
        std::fprintf(f, "{\"ranks\": %d, \"tokens\": %lld, \"hidden\": %lld, \"experts\": %d, \"top_k\": %d, "
                     "\"skewed\": %d, \"vlpar_ms\": %.6f, \"mpi_ms\": %.6f, \"ratio\": %.4f}\n", P,
                     static_cast<long long>(T), static_cast<long long>(H), o.experts, o.top_k, o.skewed, vlpar_ms,
                     mpi_ms, both.ratio);
        std::fclose(f);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto session = vlpar::comm::MpiSession::init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  Options o;
  vlpar::cli::Parser p("bench_expert_dispatch", "expert-parallel dispatch + combine vs MPI all-to-all-v, per rank");
  p.add("t", &o.tokens, "tokens per rank");
  p.add("H", &o.hidden, "row width (f32 elements)");
  p.add("e", &o.experts, "experts (a multiple of the rank count)");
  p.add("k", &o.top_k, "experts per token");
  p.add("n", &o.iters, "timed iterations");
  p.add("w", &o.warmup, "warmup iterations");
  p.add("s", &o.skewed, "1: skewed routing (expert e with weight 1/(e+1)), 0: uniform");
  p.add("c", &o.threads, "CPU threads per rank for the permutes (the MPI baseline has none)");
  p.add("j", &o.json, "write the result as JSON to this file");
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const Status parsed = p.parse(argc, argv);
  if (p.help_requested()) {
    if (world_rank == 0) std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  auto comm = session.value().world(vlpar::comm::CommOptions{"ep", std::chrono::seconds(120)});
  if (!comm.ok()) vlpar::comm::MpiSession::abort_job(comm.status());
  const int P = comm.value()->size();
  Status valid = parsed;
  if (valid.ok() && !(o.tokens > 0 && o.hidden > 0 && o.top_k >= 1 && o.top_k <= o.experts && o.experts % P == 0 &&
                      o.iters >= 1 && o.warmup >= 0 && (o.skewed == 0 || o.skewed == 1) && o.threads >= 1))
    valid = VLPAR_STATUS(vlpar::StatusCode::kInvalidArgument, "need -t, -H > 0, 1 <= -k <= -e, -e a multiple of the "
                         "{} ranks, -n >= 1, -w >= 0, -s 0 or 1, -c >= 1", P);
  if (!valid.ok()) {
    if (world_rank == 0) std::fprintf(stderr, "bench_expert_dispatch: %s\n", valid.message().c_str());
    return 2;
  }
  return run(o, *comm.value());
}
