#pragma once
// The single-process backend of vlpar::comm::Communicator: a group of size 1 on the CPU or any CUDA device.
// Every collective is the identity or a copy (all_gather, reduce_scatter and all_to_all copy in -> out; all_reduce
// and broadcast leave inout as is), and completes before the call returns. send/recv have no peer and fail.
// Arguments are checked exactly as in the MPI backend, so code tested at size 1 fails the same way at size N.
// Test: tests/unit/test_single_communicator.cpp (ctest --preset cpu -R single_communicator).
#include <memory>

#include "vlpar/comm/communicator.hpp"

namespace vlpar::comm {

class SingleCommunicator final : public Communicator {
 public:
  /// @param device where the tensors live (CPU by default); copies go through vlpar::copy_.
  explicit SingleCommunicator(CommOptions options = {}, Device device = Device::cpu())
      : options_(std::move(options)), device_(device) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  Backend backend() const override { return Backend::kSingle; }
  const CommOptions& options() const override { return options_; }

  Result<WorkHandle> iall_reduce(TensorView inout, ReduceOp op) override;
  Result<WorkHandle> iall_gather(TensorView out, TensorView in) override;
  Result<WorkHandle> ireduce_scatter(TensorView out, TensorView in, ReduceOp op) override;
  Result<WorkHandle> ibroadcast(TensorView inout, int root) override;
  Result<WorkHandle> iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                 std::span<const int64_t> send_rows) override;
  Result<WorkHandle> isend(TensorView t, int peer, int tag) override;
  Result<WorkHandle> irecv(TensorView t, int peer, int tag) override;
  Status barrier() override { return Status::Ok(); }
  /// A new size-1 group with `options` (any color and key).
  Result<std::unique_ptr<Communicator>> split(int color, int key, CommOptions options) override;

 private:
  CommOptions options_;
  Device device_;
};

}  // namespace vlpar::comm
