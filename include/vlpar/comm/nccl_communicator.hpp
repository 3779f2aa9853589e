#pragma once
// The NCCL backend of vlpar::comm::Communicator: CUDA tensors, one process per GPU (spec §8).
// Bootstrap (collective over an MPI communicator): rank 0 calls ncclGetUniqueId, MPI_Bcast sends the id, every
// rank selects device local_rank % device_count (comm::local_rank: launcher environment, else
// MPI_Comm_split_type) before ncclCommInitRank. split() uses ncclCommSplit.
// Streams: each communicator owns one CUDA stream created as a *blocking* stream, so its work is ordered after
// kernels on the legacy default stream and vice versa. Each op enqueues on that stream and records an event;
// Work::wait() polls the event (and ncclCommGetAsyncError) under the group's timeout and, on a timeout, calls
// ncclCommAbort (the group is then unusable, communicator.hpp) and returns kTimeout naming op, group, rank and
// peers. all_to_all is one ncclGroupStart/End of ncclSend/ncclRecv pairs.
// Dtypes: NCCL's own f32, bf16, f16, i32, i64, f64. bf16/f16 sums use NCCL's native 16-bit reduction (float
// arithmetic, rounded to 16 bits after each step), unlike the MPI backend's single rounding.
// TODO(issue "Parallel runtime"): f32-staged 16-bit reductions on the GPU, to match the MPI backend bit for bit.
// Only built with CUDA (VLPAR_WITH_NCCL); in CPU-only builds create() returns kNotSupported.
// Test: tests/mpi/test_nccl_communicator.cpp (CUDA builds: ctest --preset cuda -L gpu; skips without a GPU).
#include <mpi.h>

#include <memory>

#include "vlpar/comm/communicator.hpp"

namespace vlpar::comm {

class NcclCommunicator final : public Communicator {
 public:
  /// @brief Collective over `bootstrap`: one NCCL rank per MPI rank, same rank order. Selects the CUDA device.
  static Result<std::unique_ptr<NcclCommunicator>> create(MPI_Comm bootstrap, CommOptions options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kNCCL; }
  const CommOptions& options() const override { return options_; }
  /// CUDA ordinal the tensors must live on.
  int device() const { return device_; }
  /// The communicator's cudaStream_t (as void*, so this header needs no CUDA headers).
  void* stream() const;

  Result<WorkHandle> iall_reduce(TensorView inout, ReduceOp op) override;
  Result<WorkHandle> iall_gather(TensorView out, TensorView in) override;
  Result<WorkHandle> ireduce_scatter(TensorView out, TensorView in, ReduceOp op) override;
  Result<WorkHandle> ibroadcast(TensorView inout, int root) override;
  Result<WorkHandle> iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                 std::span<const int64_t> send_rows) override;
  Result<WorkHandle> isend(TensorView t, int peer, int tag) override;
  Result<WorkHandle> irecv(TensorView t, int peer, int tag) override;
  Status barrier() override;
  Result<std::unique_ptr<Communicator>> split(int color, int key, CommOptions options) override;

  struct State;  // NCCL comm, stream, names; shared with pending Work so a timeout can abort the comm

 private:
  NcclCommunicator(std::shared_ptr<State> state, CommOptions options, int rank, int size, int device);

  std::shared_ptr<State> state_;
  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
  int device_ = 0;
};

}  // namespace vlpar::comm
