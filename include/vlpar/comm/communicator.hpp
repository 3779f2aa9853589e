#pragma once
// The communicator interface: collectives and point-to-point over one process group.
// Backends (one process per rank, never threads pretending to be ranks):
//   MPI    : CPU tensors, Open MPI (mpirun / srun), works across machines      — comm/mpi_communicator.hpp
//   NCCL   : CUDA tensors, unique id broadcast over MPI, device from local rank — comm/nccl_communicator.hpp
//   single : one process, every collective is the identity (or a copy)          — comm/single_communicator.hpp
// Every op validates sizes, dtypes and devices before communicating and fails with a Status naming the op,
// the group and the rank. Non-blocking forms return a Work handle; wait() enforces the group's timeout
// (the watchdog): an op that does not complete in time returns kTimeout naming op, group, rank and peer,
// never hangs. Binaries turn that Status into an abort of the whole job (MPI_Abort), libraries never exit.
// After a collective timed out the group is unusable (its peers may still be inside the op): every later op on
// it fails with kCommError, and the binary must abort. A timed-out recv is cancelled and leaves the group usable.
//
// Conventions shared by every backend:
//   - views are contiguous, non-null when non-empty, of one dtype, on the backend's device (CPU for MPI and
//     single, the communicator's CUDA device for NCCL); f32, bf16, f16, i32, i64, f64 are accepted.
//   - sums of bf16/f16 are accumulated in f32 and rounded to the storage dtype once, at the end (MPI backend;
//     NCCL uses its native 16-bit reductions for now, see nccl_communicator.hpp).
//   - in-place forms: all_reduce and broadcast always; all_gather when `in` is this rank's block of `out`;
//     reduce_scatter when `out` is this rank's block of `in` (then `in` is clobbered). Any other overlap of
//     `out` and `in` is an error, as is any overlap in all_to_all.
//   - all ranks of the group issue the same ops in the same order (MPI/NCCL semantics); row counts must agree
//     pairwise (send_rows[p] on rank r == recv_rows[r] on rank p), which no rank can check locally.
//   - a receive gets exactly its view's element count: a shorter message is kInvalidArgument naming the sender
//     (MPI backend; MPI itself would accept it), a longer one the backend's truncation error.
//   - the Communicator's own buffers are released when its Work completes; a view passed to a pending op must
//     stay alive until wait() returned Ok.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::comm {

enum class ReduceOp : uint8_t { kSum, kMax };
enum class Backend : uint8_t { kSingle, kMPI, kNCCL };
const char* reduce_op_name(ReduceOp op);  // "sum", "max"
const char* backend_name(Backend b);      // "single", "mpi", "nccl"

struct CommOptions {
  std::string name = "world";                             // group name used in every message
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // watchdog limit for any one op
};

/// A pending non-blocking operation. wait() returns when it completed, or kTimeout after the group's timeout;
/// test() never blocks: true once the op completed (wait() then returns its result at once). On the MPI backend
/// test() also drives MPI's progress engine, which moves large messages only while the process is inside MPI:
/// callers that compute between posting a send and waiting for it (the pipeline engine) poke pending ops with it.
class Work {
 public:
  virtual ~Work() = default;
  virtual Status wait() = 0;
  virtual bool test() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  virtual const CommOptions& options() const = 0;

  /// In place: every rank ends with op over all ranks' `inout`.
  virtual Result<WorkHandle> iall_reduce(TensorView inout, ReduceOp op) = 0;
  /// out = concat over ranks (rank order) of `in` along dim 0; out.numel() == size() · in.numel().
  virtual Result<WorkHandle> iall_gather(TensorView out, TensorView in) = 0;
  /// out = this rank's 1/size() block (dim 0) of op over all ranks' `in`.
  virtual Result<WorkHandle> ireduce_scatter(TensorView out, TensorView in, ReduceOp op) = 0;
  virtual Result<WorkHandle> ibroadcast(TensorView inout, int root) = 0;
  /// Rows along dim 0: send_rows[p] rows of `in` go to rank p (in rank order); recv_rows[p] rows arrive from p.
  virtual Result<WorkHandle> iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                         std::span<const int64_t> send_rows) = 0;
  /// all_to_all of indexed rows (blocking; the expert dispatcher's moves without staging copies): the k-th row
  /// sent, in rank order, is in[send_index[k]] (empty index: in's rows in order); the k-th row received, in rank
  /// order, lands in out[recv_index[k]] (empty index: out's rows in order). Σ send_rows = send_index.size() (or
  /// in's rows), Σ recv_rows = recv_index.size() (or out's rows); indices inside the tensors, recv_index without
  /// repeats. The default stages through host buffers (gather, all_to_all, scatter; CPU tensors); the MPI
  /// backend moves the rows straight from and into the tensors with derived datatypes.
  virtual Status all_to_all_rows(TensorView out, std::span<const int64_t> recv_rows,
                                 std::span<const int32_t> recv_index, TensorView in,
                                 std::span<const int64_t> send_rows, std::span<const int32_t> send_index);
  virtual Result<WorkHandle> isend(TensorView t, int peer, int tag) = 0;
  virtual Result<WorkHandle> irecv(TensorView t, int peer, int tag) = 0;
  virtual Status barrier() = 0;
  /// Sub-communicator of the ranks passing the same color, ordered by key (MPI_Comm_split semantics).
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key, CommOptions options) = 0;

  // Blocking forms: start, then wait under the watchdog.
  Status all_reduce(TensorView inout, ReduceOp op) { return finish(iall_reduce(inout, op)); }
  Status all_gather(TensorView out, TensorView in) { return finish(iall_gather(out, in)); }
  Status reduce_scatter(TensorView out, TensorView in, ReduceOp op) { return finish(ireduce_scatter(out, in, op)); }
  Status broadcast(TensorView inout, int root) { return finish(ibroadcast(inout, root)); }
  Status all_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                    std::span<const int64_t> send_rows) {
    return finish(iall_to_all(out, recv_rows, in, send_rows));
  }
  Status send(TensorView t, int peer, int tag) { return finish(isend(t, peer, tag)); }
  Status recv(TensorView t, int peer, int tag) { return finish(irecv(t, peer, tag)); }

 private:
  static Status finish(Result<WorkHandle> w) {
    if (!w.ok()) return w.status();
    return w.value()->wait();
  }
};

}  // namespace vlpar::comm
