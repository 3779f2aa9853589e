// The NCCL backend (CUDA builds only; cmake/VlparNccl.cmake adds this file). See
// include/vlpar/comm/nccl_communicator.hpp for bootstrap, streams, the watchdog and the dtype policy.
// Test: tests/mpi/test_nccl_communicator.cpp (ctest --preset cuda -L gpu; skips without a GPU).
#include "vlpar/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm_checks.hpp"
#include "vlpar/comm/mpi_communicator.hpp"

namespace vlpar::comm {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  std::string name;
  int rank = 0, size = 1;
  std::string broken_by;  // site of the op that timed out or failed asynchronously; the comm is then aborted
  void* barrier_buf = nullptr;  // one float on the device for barrier()

  std::string site(const char* op) const {
    return fmt::format("{} on group '{}' (rank {} of {})", op, name, rank, size);
  }
  std::string others() const {
    std::vector<int> g;
    for (int r = 0; r < size; ++r)
      if (r != rank) g.push_back(r);
    return fmt::format("any of ranks {{{}}}", fmt::join(g, ", "));
  }
  void abort_comm(const std::string& why) {
    if (broken_by.empty()) broken_by = why;
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
  ~State() {
    if (comm != nullptr) ncclCommDestroy(comm);
    if (barrier_buf != nullptr) cudaFree(barrier_buf);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace {

using State = NcclCommunicator::State;
using Clock = std::chrono::steady_clock;

#define VLPAR_NCCL_CHECK(expr, site)                                                                       \
  do {                                                                                                     \
    const ncclResult_t vlpar_nccl_err_ = (expr);                                                           \
    if (vlpar_nccl_err_ != ncclSuccess)                                                                    \
      return VLPAR_STATUS(::vlpar::StatusCode::kCommError, "{}: {} failed: {}", (site), #expr,            \
                          ncclGetErrorString(vlpar_nccl_err_));                                            \
  } while (0)

#define VLPAR_CUDA_CHECK_AT(expr, site)                                                                    \
  do {                                                                                                     \
    const cudaError_t vlpar_cuda_err_ = (expr);                                                            \
    if (vlpar_cuda_err_ != cudaSuccess)                                                                    \
      return VLPAR_STATUS(::vlpar::StatusCode::kCudaError, "{}: {} failed: {}", (site), #expr,            \
                          cudaGetErrorString(vlpar_cuda_err_));                                            \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kF64: return ncclFloat64;
  }
  return ncclFloat32;
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

class NcclWork final : public Work {
 public:
  NcclWork(const char* op, std::shared_ptr<State> state, std::chrono::milliseconds timeout, int peer)
      : op_(op), state_(std::move(state)), timeout_(timeout), peer_(peer) {}
  ~NcclWork() override {
    if (event_ != nullptr) cudaEventDestroy(event_);  // safe while pending: the event is released when done
  }

  /// Records the completion event on the comm stream, right after the op was enqueued.
  Status record() {
    const std::string site = state_->site(op_);
    VLPAR_CUDA_CHECK_AT(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), site);
    VLPAR_CUDA_CHECK_AT(cudaEventRecord(event_, state_->stream), site);
    return Status::Ok();
  }

  Status wait() override {
    if (done_) return Status::Ok();
    const auto deadline = Clock::now() + timeout_;
    for (int64_t polls = 0;; ++polls) {
      const cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady)
        return VLPAR_STATUS(StatusCode::kCudaError, "{}: cudaEventQuery failed: {}", state_->site(op_),
                            cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      if (state_->comm != nullptr && ncclCommGetAsyncError(state_->comm, &async) == ncclSuccess &&
          async != ncclSuccess && async != ncclInProgress) {
        const std::string site = state_->site(op_);
        state_->abort_comm(site);
        return VLPAR_STATUS(StatusCode::kCommError, "{}: NCCL reported {}; communicator aborted", site,
                            ncclGetErrorString(async));
      }
      if (Clock::now() >= deadline) {
        const std::string site = state_->site(op_);
        state_->abort_comm(site);  // unblocks the stream; the group is unusable from now on
        const std::string peers = peer_ >= 0 ? fmt::format("rank {}", peer_) : state_->others();
        return VLPAR_STATUS(StatusCode::kTimeout, "{}: timed out after {} ms waiting for {}; ncclCommAbort called",
                            site, timeout_.count(), peers);
      }
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    done_ = true;
    return Status::Ok();
  }

  /// Complete when the op's event has fired; errors are left for wait() to report.
  bool test() override {
    if (!done_ && cudaEventQuery(event_) == cudaSuccess) done_ = true;
    return done_;
  }

 private:
  const char* op_;
  std::shared_ptr<State> state_;
  std::chrono::milliseconds timeout_;
  int peer_;
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
};

/// Sets the comm's device for this thread, checks the group is usable and makes the Work for `op`.
Result<std::unique_ptr<NcclWork>> begin(const char* op, const std::shared_ptr<State>& s, const Communicator& c,
                                        int peer = -1) {
  VLPAR_RETURN_IF_ERROR(detail::check_usable(op, c, s->broken_by));
  VLPAR_CUDA_CHECK_AT(cudaSetDevice(s->device), s->site(op));
  return std::make_unique<NcclWork>(op, s, c.options().timeout, peer);
}

Result<WorkHandle> enqueued(std::unique_ptr<NcclWork> w) {
  VLPAR_RETURN_IF_ERROR(w->record());
  return WorkHandle(std::move(w));
}

Result<std::shared_ptr<State>> new_state(CommOptions const& options, int rank, int size, int device) {
  auto s = std::make_shared<State>();
  s->name = options.name;
  s->rank = rank;
  s->size = size;
  s->device = device;
  const std::string site = fmt::format("create group '{}'", options.name);
  VLPAR_CUDA_CHECK_AT(cudaSetDevice(device), site);
  VLPAR_CUDA_CHECK_AT(cudaStreamCreate(&s->stream), site);  // blocking: ordered with the legacy default stream
  VLPAR_CUDA_CHECK_AT(cudaMalloc(&s->barrier_buf, sizeof(float)), site);
  return s;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<State> state, CommOptions options, int rank, int size, int device)
    : state_(std::move(state)), options_(std::move(options)), rank_(rank), size_(size), device_(device) {}

NcclCommunicator::~NcclCommunicator() = default;

void* NcclCommunicator::stream() const { return state_->stream; }

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(MPI_Comm bootstrap, CommOptions options) {
  const std::string site = fmt::format("create group '{}'", options.name);
  VLPAR_CHECK(options.timeout.count() > 0, "{}: timeout must be positive", site);
  int rank = 0, size = 1, ndev = 0;
  MPI_Comm_rank(bootstrap, &rank);
  MPI_Comm_size(bootstrap, &size);
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  VLPAR_CHECK_CODE(e == cudaSuccess && ndev > 0, StatusCode::kNotSupported, "{}: no CUDA device ({})", site,
                   cudaGetErrorString(e));
  VLPAR_ASSIGN_OR_RETURN(LocalRank local, local_rank(bootstrap));
  VLPAR_CHECK_CODE(local.size <= ndev, StatusCode::kNotSupported,
                   "{}: {} processes on this node but {} CUDA devices (NCCL needs one device per process)", site,
                   local.size, ndev);
  const int device = local.rank % ndev;
  VLPAR_ASSIGN_OR_RETURN(auto state, new_state(options, rank, size, device));
  ncclUniqueId id;
  if (rank == 0) VLPAR_NCCL_CHECK(ncclGetUniqueId(&id), site);
  VLPAR_CHECK_CODE(MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, bootstrap) == MPI_SUCCESS, StatusCode::kCommError,
                   "{}: MPI_Bcast of the NCCL unique id failed", site);
  VLPAR_NCCL_CHECK(ncclCommInitRank(&state->comm, size, id, rank), site);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(state), std::move(options), rank, size, device));
}

Result<WorkHandle> NcclCommunicator::iall_reduce(TensorView inout, ReduceOp op) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("all_reduce", state_, *this));
  VLPAR_RETURN_IF_ERROR(detail::check_all_reduce(*this, inout, Device::cuda(device_)));
  VLPAR_NCCL_CHECK(ncclAllReduce(inout.data, inout.data, size_t(inout.numel()), nccl_type(inout.dtype), nccl_op(op),
                                 state_->comm, state_->stream),
                   state_->site("all_reduce"));
  return enqueued(std::move(w));
}

Result<WorkHandle> NcclCommunicator::iall_gather(TensorView out, TensorView in) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("all_gather", state_, *this));
  VLPAR_RETURN_IF_ERROR(detail::check_all_gather(*this, out, in, Device::cuda(device_)));
  // NCCL's in-place layout is ours: in == out + rank · count.
  VLPAR_NCCL_CHECK(ncclAllGather(in.data, out.data, size_t(in.numel()), nccl_type(in.dtype), state_->comm,
                                 state_->stream),
                   state_->site("all_gather"));
  return enqueued(std::move(w));
}

Result<WorkHandle> NcclCommunicator::ireduce_scatter(TensorView out, TensorView in, ReduceOp op) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("reduce_scatter", state_, *this));
  VLPAR_RETURN_IF_ERROR(detail::check_reduce_scatter(*this, out, in, Device::cuda(device_)));
  VLPAR_NCCL_CHECK(ncclReduceScatter(in.data, out.data, size_t(out.numel()), nccl_type(in.dtype), nccl_op(op),
                                     state_->comm, state_->stream),
                   state_->site("reduce_scatter"));
  return enqueued(std::move(w));
}

Result<WorkHandle> NcclCommunicator::ibroadcast(TensorView inout, int root) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("broadcast", state_, *this));
  VLPAR_RETURN_IF_ERROR(detail::check_broadcast(*this, inout, root, Device::cuda(device_)));
  VLPAR_NCCL_CHECK(ncclBroadcast(inout.data, inout.data, size_t(inout.numel()), nccl_type(inout.dtype), root,
                                 state_->comm, state_->stream),
                   state_->site("broadcast"));
  return enqueued(std::move(w));
}

Result<WorkHandle> NcclCommunicator::iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                                 std::span<const int64_t> send_rows) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("all_to_all", state_, *this));
  VLPAR_RETURN_IF_ERROR(detail::check_all_to_all(*this, out, recv_rows, in, send_rows, Device::cuda(device_)));
  const std::string site = state_->site("all_to_all");
  const size_t row = size_t(detail::row_elems(in)), es = dtype_size(in.dtype);
  const ncclDataType_t t = nccl_type(in.dtype);
  // One group: every send/recv pair is posted before any may block, so no ordering between peers can deadlock.
  VLPAR_NCCL_CHECK(ncclGroupStart(), site);
  size_t sd = 0, rd = 0;  // row displacements
  ncclResult_t err = ncclSuccess;
  for (int p = 0; p < size_ && err == ncclSuccess; ++p) {
    const size_t ns = size_t(send_rows[size_t(p)]), nr = size_t(recv_rows[size_t(p)]);
    if (ns > 0) err = ncclSend(static_cast<char*>(in.data) + sd * row * es, ns * row, t, p, state_->comm, state_->stream);
    if (err == ncclSuccess && nr > 0)
      err = ncclRecv(static_cast<char*>(out.data) + rd * row * es, nr * row, t, p, state_->comm, state_->stream);
    sd += ns;
    rd += nr;
  }
  const ncclResult_t end = ncclGroupEnd();
  VLPAR_NCCL_CHECK(err, site);
  VLPAR_NCCL_CHECK(end, site);
  return enqueued(std::move(w));
}

Result<WorkHandle> NcclCommunicator::isend(TensorView t, int peer, int tag) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("send", state_, *this, peer));
  VLPAR_RETURN_IF_ERROR(detail::check_p2p("send", *this, t, peer, tag, Device::cuda(device_)));
  // NCCL has no tags: sends to one peer match receives from it in issue order. `tag` is checked, not used.
  VLPAR_NCCL_CHECK(ncclSend(t.data, size_t(t.numel()), nccl_type(t.dtype), peer, state_->comm, state_->stream),
                   state_->site("send"));
  return enqueued(std::move(w));
}

Result<WorkHandle> NcclCommunicator::irecv(TensorView t, int peer, int tag) {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("recv", state_, *this, peer));
  VLPAR_RETURN_IF_ERROR(detail::check_p2p("recv", *this, t, peer, tag, Device::cuda(device_)));
  VLPAR_NCCL_CHECK(ncclRecv(t.data, size_t(t.numel()), nccl_type(t.dtype), peer, state_->comm, state_->stream),
                   state_->site("recv"));
  return enqueued(std::move(w));
}

Status NcclCommunicator::barrier() {
  VLPAR_ASSIGN_OR_RETURN(auto w, begin("barrier", state_, *this));
  VLPAR_NCCL_CHECK(ncclAllReduce(state_->barrier_buf, state_->barrier_buf, 1, ncclFloat32, ncclSum, state_->comm,
                                 state_->stream),
                   state_->site("barrier"));
  VLPAR_RETURN_IF_ERROR(w->record());
  return w->wait();
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key, CommOptions options) {
  const std::string site = state_->site("split");
  VLPAR_RETURN_IF_ERROR(detail::check_usable("split", *this, state_->broken_by));
  VLPAR_CHECK(color >= 0, "{}: color {} must be >= 0 (every rank joins one sub-group)", site, color);
  VLPAR_CHECK(options.timeout.count() > 0, "{}: timeout of new group '{}' must be positive", site, options.name);
  VLPAR_CUDA_CHECK_AT(cudaSetDevice(device_), site);
  ncclComm_t sub = nullptr;
  VLPAR_NCCL_CHECK(ncclCommSplit(state_->comm, color, key, &sub, nullptr), site);
  int sub_rank = 0, sub_size = 1;
  ncclCommUserRank(sub, &sub_rank);
  ncclCommCount(sub, &sub_size);
  auto s = new_state(options, sub_rank, sub_size, device_);
  if (!s.ok()) {
    ncclCommDestroy(sub);
    return s.status();
  }
  s.value()->comm = sub;
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(std::move(s).value(), std::move(options), sub_rank, sub_size, device_));
}

}  // namespace vlpar::comm
