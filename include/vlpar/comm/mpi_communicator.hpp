#pragma once
// The MPI backend of vlpar::comm::Communicator: CPU tensors, one process per rank, Open MPI (mpirun / srun).
//   MpiSession       : owned by a binary's main(): MPI_Init_thread if MPI is not initialised yet, MPI_Finalize
//                      when it goes out of scope (only if it initialised MPI). Not a global.
//   MpiCommunicator  : one MPI communicator (a dup of world, or a split), every op non-blocking (MPI_I*),
//                      wait() polls MPI_Test under the group's timeout (the watchdog).
// Dtypes: f32, f64, i32, i64 go to MPI as themselves. bf16 and f16 travel as 16-bit words where nothing is
// computed (gather, broadcast, all-to-all, send/recv); their reductions convert to f32 staging buffers, reduce
// in f32 with MPI's built-in ops and round to the storage dtype once at completion (more accurate than a
// user-defined 16-bit MPI_Op, which would round after every partial sum, and no custom op to keep alive).
// all_to_all sends rows as one contiguous MPI datatype, so per-peer counts are row counts (int range checked).
// Tests: tests/mpi/test_collectives.cpp, tests/mpi/test_watchdog.cpp
//   (ctest --preset cpu -L mpi, or mpirun -np 4 ./build/cpu/tests/test_collectives).
#include <mpi.h>

#include <memory>
#include <string>

#include "vlpar/comm/communicator.hpp"

namespace vlpar::comm {

/// @brief MPI lifetime for one binary. Create it first thing in main() and keep it until the end.
class MpiSession {
 public:
  /// @brief Initialises MPI with at least `required` thread support (MPI_THREAD_FUNNELED: only the thread that
  /// initialised MPI calls it), unless MPI is initialised already (then this session will not finalise it).
  static Result<MpiSession> init(int* argc, char*** argv, int required = MPI_THREAD_FUNNELED);
  MpiSession(MpiSession&& o) noexcept : owns_(o.owns_) { o.owns_ = false; }
  MpiSession& operator=(MpiSession&&) = delete;
  MpiSession(const MpiSession&) = delete;
  ~MpiSession();

  /// @brief The whole job as a communicator (a dup of MPI_COMM_WORLD).
  Result<std::unique_ptr<Communicator>> world(CommOptions options = {}) const;
  /// @brief Prints `status` to stderr and aborts every rank of the job (MPI_Abort). For binaries only.
  [[noreturn]] static void abort_job(const Status& status, int exit_code = 1);

 private:
  explicit MpiSession(bool owns) : owns_(owns) {}
  bool owns_ = false;
};

/// This process's place on its node: picks the GPU of a one-process-per-GPU job (spec §8).
struct LocalRank {
  int rank = 0;        // index among the processes of this node
  int size = 1;        // processes on this node
  std::string source;  // where it came from: an environment variable name, or "MPI_Comm_split_type"
};
/// @brief From the launcher's environment (OMPI_COMM_WORLD_LOCAL_RANK/_SIZE, SLURM_LOCALID/SLURM_NTASKS_PER_NODE,
/// MPI_LOCALRANKID/MPI_LOCALNRANKS, LOCAL_RANK/LOCAL_WORLD_SIZE), else portably from
/// MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED) — then it is collective over `comm`.
Result<LocalRank> local_rank(MPI_Comm comm);

class MpiCommunicator final : public Communicator {
 public:
  /// @brief Wraps a dup of `comm` (the caller keeps `comm`); this object frees its dup.
  static Result<std::unique_ptr<MpiCommunicator>> create(MPI_Comm comm, CommOptions options);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kMPI; }
  const CommOptions& options() const override { return options_; }
  /// The underlying MPI communicator (e.g. to bootstrap NCCL over it). Owned by this object.
  MPI_Comm mpi_comm() const { return comm_; }

  Result<WorkHandle> iall_reduce(TensorView inout, ReduceOp op) override;
  Result<WorkHandle> iall_gather(TensorView out, TensorView in) override;
  Result<WorkHandle> ireduce_scatter(TensorView out, TensorView in, ReduceOp op) override;
  Result<WorkHandle> ibroadcast(TensorView inout, int root) override;
  Result<WorkHandle> iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                 std::span<const int64_t> send_rows) override;
  /// MPI_Ialltoallw with one indexed datatype per peer and side: rows move straight from `in` and into `out`.
  Status all_to_all_rows(TensorView out, std::span<const int64_t> recv_rows, std::span<const int32_t> recv_index,
                         TensorView in, std::span<const int64_t> send_rows,
                         std::span<const int32_t> send_index) override;
  Result<WorkHandle> isend(TensorView t, int peer, int tag) override;
  Result<WorkHandle> irecv(TensorView t, int peer, int tag) override;
  Status barrier() override;
  Result<std::unique_ptr<Communicator>> split(int color, int key, CommOptions options) override;

  struct GroupState;  // shared with pending Work: names for messages, and whether a collective timed out

 private:
  MpiCommunicator(MPI_Comm owned_comm, CommOptions options);
  Status check_usable(const char* op) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  CommOptions options_;
  std::shared_ptr<GroupState> state_;
};

}  // namespace vlpar::comm
