// bench_comm: collective bandwidth of a vlpar Communicator (MPI backend), as an nccl-tests-style table (STYLE §17).
//   mpirun -np 2 ./build/cpu/bench/bench_comm [-b 16] [-e 64M] [-f 4] [-n 20] [-w 5] [-d f32|bf16|f16|f64|i32|i64]
//                                           [-o all_reduce,all_gather,reduce_scatter,broadcast,all_to_all]
//                                           [-c 1] [-j results.json]
// (as root or with more ranks than cores: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
//  OMPI_MCA_rmaps_base_oversubscribe=1, see bench/README.md)
//
// Columns, per size, out-of-place then in-place (nccl-tests):
//   size(B)      bytes of the op's buffer: all_reduce, broadcast: the tensor; all_gather: the gathered output
//                (n x input); reduce_scatter: the input (n x output); all_to_all: what one rank sends (n blocks).
//   count(elts)  size / element size (a multiple of n for the ops that split it).
//   time(us)     mean time of one blocking op over -n iterations (after -w warmups), the maximum over ranks.
//   algbw(GB/s)  size / time (1 GB = 1e9 B).
//   busbw(GB/s)  algbw x factor, the bytes each rank must move over its link for an optimal algorithm, so numbers
//                are comparable across ops and rank counts, and with the hardware's link bandwidth:
//                  all_reduce       2(n-1)/n   (reduce-scatter then all-gather: each byte leaves a rank twice)
//                  all_gather       (n-1)/n    (every rank receives the n-1 blocks it does not have)
//                  reduce_scatter   (n-1)/n    (every rank sends n-1 blocks it does not keep)
//                  broadcast        1          (every byte crosses every link of a pipelined chain once)
//                  all_to_all       (n-1)/n    (ours: the bytes that actually cross ranks; the block a rank sends to
//                                               itself never leaves it)
//   #wrong       elements that differ from the expected rank-encoded result (one checked run per size and
//                placement, summed over ranks; -c 0 skips it). Any #wrong > 0 makes the run fail.
// "-" marks a placement the Communicator interface has no form for (all_reduce and broadcast are in-place only,
// all_to_all out-of-place only). In place means: all_gather's input is this rank's block of the output,
// reduce_scatter's output is this rank's block of the input (communicator.hpp).
//
// Gate: with VLPAR_MIN_BUSBW=<GB/s> set, the run fails (exit 1) if any op's average busbw over all its rows is
// below 90% of it (nccl-tests' check on "Avg bus bandwidth"). JSON (-j) holds every row plus the averages.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "vlpar/core/cli.hpp"
#include "vlpar/comm/mpi_communicator.hpp"
#include "vlpar/core/tensor.hpp"

namespace {

using vlpar::DType;
using vlpar::Status;
using vlpar::TensorView;
using vlpar::comm::Communicator;
using vlpar::comm::ReduceOp;

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };
constexpr Op kAllOps[] = {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kBroadcast, Op::kAllToAll};

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kBroadcast: return "broadcast";
    case Op::kAllToAll: return "all_to_all";
  }
  return "?";
}
/// Bus-bandwidth factor (see the file header).
double bus_factor(Op op, int n) {
  switch (op) {
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kBroadcast: return 1.0;
    default: return double(n - 1) / n;
  }
}
bool has_placement(Op op, bool in_place) {
  if (op == Op::kAllReduce || op == Op::kBroadcast) return in_place;
  if (op == Op::kAllToAll) return !in_place;
  return true;
}
/// The count must split evenly over ranks for these.
bool splits(Op op) { return op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllToAll; }

struct Options {
  size_t min_bytes = 16, max_bytes = size_t(64) << 20;
  double factor = 4;
  int iters = 20, warmup = 5;
  DType dtype = DType::kF32;
  std::vector<Op> ops{std::begin(kAllOps), std::end(kAllOps)};
  bool check = true;
  std::string json;
};

// "16", "64M", "1G", "0.5K" -> bytes; false unless the whole text is a size.
bool parse_size(const std::string& s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str()) return false;
  switch (*end) {
    case 'K': case 'k': v *= 1024; ++end; break;
    case 'M': case 'm': v *= 1024 * 1024; ++end; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end != '\0' || !(v >= 1)) return false;
  *out = size_t(v);
  return true;
}

bool parse_dtype(std::string_view s, DType* t) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI32, DType::kI64})
    if (vlpar::dtype_name(d) == s) {
      *t = d;
      return true;
    }
  return false;
}

// The options (vlpar/core/cli.hpp, nccl-tests' one-letter spellings); an error names the option.
vlpar::Result<Options> parse(int argc, char** argv) {
  Options o;
  std::string b = "16", e = "64M", d = "f32", ops;
  int check = 1;
  vlpar::cli::Parser p("bench_comm", "collective bandwidth of the MPI Communicator (nccl-tests table)");
  p.add("b", &b, "smallest size (bytes; K/M/G suffixes)");
  p.add("e", &e, "largest size");
  p.add("f", &o.factor, "size factor between rows (> 1)");
  p.add("n", &o.iters, "timed iterations per size (>= 1)");
  p.add("w", &o.warmup, "warmup iterations");
  p.add("d", &d, "dtype: f32, bf16, f16, f64, i32 or i64");
  p.add("o", &ops, "ops, comma-separated (default all): all_reduce,all_gather,reduce_scatter,broadcast,all_to_all");
  p.add("c", &check, "1: check every result, 0: skip the check");
  p.add("j", &o.json, "write every row as JSON to this file");
  VLPAR_RETURN_IF_ERROR(p.parse(argc, argv));
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    std::exit(0);
  }
  VLPAR_CHECK(parse_size(b, &o.min_bytes), "-b must be a size like 16, 4K or 64M, got '{}'", b);
  VLPAR_CHECK(parse_size(e, &o.max_bytes), "-e must be a size like 16, 4K or 64M, got '{}'", e);
  VLPAR_CHECK(parse_dtype(d, &o.dtype), "-d: unknown dtype '{}'", d);
  VLPAR_CHECK(check == 0 || check == 1, "-c must be 0 or 1, got {}", check);
  o.check = check == 1;
  if (!ops.empty()) {
    o.ops.clear();
    size_t start = 0;
    while (start <= ops.size()) {
      const size_t comma = std::min(ops.find(',', start), ops.size());
      const std::string name = ops.substr(start, comma - start);
      bool found = false;
      for (Op op : kAllOps)
        if (name == op_name(op)) o.ops.push_back(op), found = true;
      VLPAR_CHECK(found, "-o: unknown op '{}'", name);
      start = comma + 1;
    }
  }
  VLPAR_CHECK(o.factor > 1 && o.iters >= 1 && o.warmup >= 0 && o.max_bytes >= o.min_bytes,
              "bad sweep: need -f > 1, -n >= 1, -w >= 0 and -e >= -b");
  return o;
}

// ---- element access and the rank-encoded expectations (exact in every dtype for n <= 8) ----------------------

void set_at(const TensorView& v, int64_t i, double x) {
  switch (v.dtype) {
    case DType::kF32: v.ptr<float>()[i] = float(x); break;
    case DType::kBF16: v.ptr<vlpar::bf16>()[i] = vlpar::float_to_bf16(float(x)); break;
    case DType::kF16: v.ptr<vlpar::f16>()[i] = vlpar::float_to_f16(float(x)); break;
    case DType::kF64: v.ptr<double>()[i] = x; break;
    case DType::kI32: v.ptr<int32_t>()[i] = int32_t(x); break;
    case DType::kI64: v.ptr<int64_t>()[i] = int64_t(x); break;
  }
}
double get_at(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kF32: return v.ptr<float>()[i];
    case DType::kBF16: return vlpar::bf16_to_float(v.ptr<vlpar::bf16>()[i]);
    case DType::kF16: return vlpar::f16_to_float(v.ptr<vlpar::f16>()[i]);
    case DType::kF64: return v.ptr<double>()[i];
    case DType::kI32: return v.ptr<int32_t>()[i];
    case DType::kI64: return double(v.ptr<int64_t>()[i]);
  }
  return 0;
}
/// Reduction input of rank r at element i, and the sum over n ranks: (r+1)·(1 + i mod 4), at most 4·n(n+1)/2.
double red_value(int r, int64_t i) { return double(r + 1) * double(1 + i % 4); }
double red_sum(int n, int64_t i) { return double(n) * (n + 1) / 2 * double(1 + i % 4); }
/// Data-movement payload: (rank, position) in a code below 256, exact in bf16.
double move_value(int r, int64_t i) { return double((r % 16) * 16 + i % 16); }

/// Views over the two big buffers for one (op, placement, count). A: input (or inout), B: output.
struct Views {
  TensorView in, out;
};
Views views_for(Op op, bool in_place, const vlpar::Tensor& a, const vlpar::Tensor& b, int64_t count, int rank,
                int n) {
  auto flat = [](const vlpar::Tensor& t, int64_t k) { return TensorView(t.view().data, t.dtype(), {k}); };
  const int64_t per = count / n;
  switch (op) {
    case Op::kAllReduce:
    case Op::kBroadcast: return {flat(a, count), flat(a, count)};
    case Op::kAllGather: {
      TensorView out = flat(b, count);
      return {in_place ? out.slice(0, rank * per, (rank + 1) * per) : flat(a, per), out};
    }
    case Op::kReduceScatter: {
      TensorView in = flat(a, count);
      return {in, in_place ? in.slice(0, rank * per, (rank + 1) * per) : flat(b, per)};
    }
    case Op::kAllToAll: return {flat(a, count), flat(b, count)};
  }
  return {};
}

Status run_once(Communicator& c, Op op, const Views& v, const std::vector<int64_t>& rows) {
  switch (op) {
    case Op::kAllReduce: return c.all_reduce(v.in, ReduceOp::kSum);
    case Op::kAllGather: return c.all_gather(v.out, v.in);
    case Op::kReduceScatter: return c.reduce_scatter(v.out, v.in, ReduceOp::kSum);
    case Op::kBroadcast: return c.broadcast(v.in, 0);
    case Op::kAllToAll: return c.all_to_all(v.out, rows, v.in, rows);
  }
  return Status::Ok();
}

/// One checked run: fill the inputs with rank-encoded values, run, count wrong elements on this rank.
int64_t check_once(Communicator& c, Op op, const Views& v, const std::vector<int64_t>& rows) {
  const int r = c.rank(), n = c.size();
  const int64_t per = op == Op::kAllGather ? v.in.numel() : v.in.numel() / n;
  auto rounded = [&](double x) {  // the expectation as the dtype stores it
    double tmp_storage[1];
    TensorView tmp(tmp_storage, v.out.dtype, {1});
    set_at(tmp, 0, x);
    return get_at(tmp, 0);
  };
  for (int64_t i = 0; i < v.in.numel(); ++i) {
    switch (op) {
      case Op::kAllReduce:
      case Op::kReduceScatter: set_at(v.in, i, red_value(r, i)); break;
      case Op::kAllGather:
      case Op::kBroadcast: set_at(v.in, i, move_value(r, i)); break;
      case Op::kAllToAll: set_at(v.in, i, move_value(r, i / per * 4 + i % per)); break;  // block p = i / per
    }
  }
  if (const Status s = run_once(c, op, v, rows); !s.ok()) vlpar::comm::MpiSession::abort_job(s);
  int64_t wrong = 0;
  for (int64_t i = 0; i < v.out.numel(); ++i) {
    double want = 0;
    switch (op) {
      case Op::kAllReduce: want = red_sum(n, i); break;
      case Op::kReduceScatter: want = red_sum(n, r * per + i); break;
      case Op::kAllGather: want = move_value(int(i / per), i % per); break;
      case Op::kBroadcast: want = move_value(0, i); break;
      case Op::kAllToAll: want = move_value(int(i / per), r * 4 + i % per); break;  // block from p = i / per
    }
    wrong += get_at(v.out, i) != rounded(want);
  }
  return wrong;
}

struct Row {
  Op op;
  size_t bytes;
  int64_t count;
  bool in_place;
  double time_us, algbw, busbw;
  int64_t wrong;
};

Row measure(Communicator& c, const Options& o, Op op, bool in_place, const vlpar::Tensor& a, const vlpar::Tensor& b,
            int64_t count) {
  const int n = c.size();
  const Views v = views_for(op, in_place, a, b, count, c.rank(), n);
  const std::vector<int64_t> rows(size_t(n), count / n);  // all_to_all: equal blocks, one element per row
  Row row{op, size_t(count) * vlpar::dtype_size(o.dtype), count, in_place, 0, 0, 0, 0};
  if (o.check) {
    int64_t wrong = check_once(c, op, v, rows);
    MPI_Allreduce(&wrong, &row.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  }
  for (int i = 0; i < o.warmup; ++i)
    if (const Status s = run_once(c, op, v, rows); !s.ok()) vlpar::comm::MpiSession::abort_job(s);
  // Small messages are latency-bound: run more of them so the timer sees at least ~1 MiB of traffic per size.
  const int iters = std::max<int>(o.iters, int(std::min<size_t>(1000, (size_t(1) << 20) / std::max<size_t>(row.bytes, 1))));
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i)
    if (const Status s = run_once(c, op, v, rows); !s.ok()) vlpar::comm::MpiSession::abort_job(s);
  double dt = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  row.time_us = dt * 1e6;
  row.algbw = double(row.bytes) / dt / 1e9;
  row.busbw = row.algbw * bus_factor(op, n);
  return row;
}

void print_cell(const Row* r) {
  if (r == nullptr) {
    std::printf("  %9s %7s %7s %6s", "-", "-", "-", "-");
    return;
  }
  std::printf("  %9.2f %7.2f %7.2f %6lld", r->time_us, r->algbw, r->busbw, static_cast<long long>(r->wrong));
}

}  // namespace

int main(int argc, char** argv) {
  auto session = vlpar::comm::MpiSession::init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const vlpar::Result<Options> parsed = parse(argc, argv);
  if (!parsed.ok()) {
    if (world_rank == 0) std::fprintf(stderr, "bench_comm: %s\n", parsed.status().message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const Options& o = parsed.value();
  auto comm_r = session.value().world(vlpar::comm::CommOptions{"bench", std::chrono::seconds(120)});
  if (!comm_r.ok()) vlpar::comm::MpiSession::abort_job(comm_r.status());
  Communicator& c = *comm_r.value();
  const int n = c.size();
  const size_t es = vlpar::dtype_size(o.dtype);

  vlpar::Allocator alloc;
  const int64_t max_count = int64_t(o.max_bytes / es) + n;
  auto a = vlpar::Tensor::zeros(alloc, {max_count}, o.dtype);
  auto b = vlpar::Tensor::zeros(alloc, {max_count}, o.dtype);
  if (!a.ok() || !b.ok()) vlpar::comm::MpiSession::abort_job(a.ok() ? b.status() : a.status());

  const bool root = c.rank() == 0;
  if (root) {
    std::printf("# bench_comm: vlpar %s backend, %d ranks, dtype %s, sum, root 0, iters %d (>= 1 MiB per size), "
                "warmup %d\n",
                vlpar::comm::backend_name(c.backend()), n, std::string(vlpar::dtype_name(o.dtype)).c_str(), o.iters,
                o.warmup);
    std::printf("# busbw factors: all_reduce 2(n-1)/n, all_gather (n-1)/n, reduce_scatter (n-1)/n, broadcast 1, "
                "all_to_all (n-1)/n (bytes crossing ranks)\n");
  }
  std::vector<Row> all_rows;
  std::vector<std::pair<Op, double>> averages;
  int64_t total_wrong = 0;
  for (Op op : o.ops) {
    if (root) {
      std::printf("#\n# %s\n", op_name(op));
      std::printf("# %12s %12s %5s  %-32s  %-32s\n", "", "", "", "out-of-place", "in-place");
      std::printf("# %12s %12s %5s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "size(B)", "count(elts)", "type", "time(us)",
                  "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw", "#wrong");
      std::printf("# %12s %12s %5s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "", "", "", "", "(GB/s)", "(GB/s)", "", "",
                  "(GB/s)", "(GB/s)", "");
    }
    double bw_sum = 0;
    int bw_rows = 0;
    int64_t op_wrong = 0;
    for (double bytes = double(o.min_bytes); bytes <= double(o.max_bytes) * 1.0000001; bytes *= o.factor) {
      int64_t count = int64_t(bytes) / int64_t(es);
      if (splits(op)) count -= count % n;
      if (count < (splits(op) ? n : 1)) continue;
      Row cells[2];
      bool have[2] = {false, false};
      for (int ip = 0; ip < 2; ++ip) {
        if (!has_placement(op, ip == 1)) continue;
        cells[ip] = measure(c, o, op, ip == 1, a.value(), b.value(), count);
        have[ip] = true;
        all_rows.push_back(cells[ip]);
        bw_sum += cells[ip].busbw;
        ++bw_rows;
        total_wrong += cells[ip].wrong;
        op_wrong += cells[ip].wrong;
      }
      if (root) {
        std::printf("  %12zu %12lld %5s", size_t(count) * es, static_cast<long long>(count),
                    std::string(vlpar::dtype_name(o.dtype)).c_str());
        print_cell(have[0] ? &cells[0] : nullptr);
        print_cell(have[1] ? &cells[1] : nullptr);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
    const double avg = bw_rows ? bw_sum / bw_rows : 0;
    averages.emplace_back(op, avg);
    if (root) std::printf("# %s: #wrong %lld, avg bus bandwidth %.3f GB/s\n", op_name(op),
                          static_cast<long long>(op_wrong), avg);
  }

  int rc = 0;
  if (total_wrong > 0) {
    if (root) std::printf("# FAILED: %lld wrong elements\n", static_cast<long long>(total_wrong));
    rc = 1;
  }
  if (const char* gate = std::getenv("VLPAR_MIN_BUSBW"); gate != nullptr && *gate) {
    const double min_bw = std::atof(gate);
    for (const auto& [op, avg] : averages) {
      if (avg < 0.9 * min_bw) {
        if (root) std::printf("# FAILED: %s avg busbw %.3f GB/s is below 90%% of VLPAR_MIN_BUSBW=%.3f GB/s\n",
                              op_name(op), avg, min_bw);
        rc = 1;
      }
    }
    if (root && rc == 0) std::printf("# busbw gate passed: every op >= 90%% of VLPAR_MIN_BUSBW=%.3f GB/s\n", min_bw);
  }
  if (root && !o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "bench_comm: cannot write %s\n", o.json.c_str());
      rc = 1;
    } else {
      std::fprintf(f, "{\"backend\": \"%s\", \"ranks\": %d, \"dtype\": \"%s\", \"rows\": [\n",
                   vlpar::comm::backend_name(c.backend()), n, std::string(vlpar::dtype_name(o.dtype)).c_str());
      for (size_t i = 0; i < all_rows.size(); ++i) {
        const Row& r = all_rows[i];
        std::fprintf(f,
                     "  {\"op\": \"%s\", \"placement\": \"%s\", \"size_bytes\": %zu, \"count\": %lld, \"time_us\": "
                     "%.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %lld}%s\n",
                     op_name(r.op), r.in_place ? "in-place" : "out-of-place", r.bytes,
                     static_cast<long long>(r.count), r.time_us, r.algbw, r.busbw, static_cast<long long>(r.wrong),
                     i + 1 < all_rows.size() ? "," : "");
      }
      std::fprintf(f, "], \"avg_busbw_gbps\": {");
      for (size_t i = 0; i < averages.size(); ++i)
        std::fprintf(f, "%s\"%s\": %.4f", i ? ", " : "", op_name(averages[i].first), averages[i].second);
      std::fprintf(f, "}, \"wrong\": %lld, \"passed\": %s}\n", static_cast<long long>(total_wrong),
                   rc == 0 ? "true" : "false");
      std::fclose(f);
    }
  }
  return rc;
}
