// The NCCL communicator in builds without NCCL (CPU-only): create() answers kNotSupported, so code that picks a
// backend at runtime links and reports clearly. CUDA builds compile src/comm/nccl_communicator.cpp instead
// (VLPAR_WITH_NCCL), and this file is empty there.
#ifndef VLPAR_WITH_NCCL
#include "vlpar/comm/nccl_communicator.hpp"

namespace vlpar::comm {

struct NcclCommunicator::State {};

namespace {
Status unsupported(const char* what) {
  return VLPAR_STATUS(StatusCode::kNotSupported, "{}: this build of vlpar has no NCCL (configure with CUDA)", what);
}
}  // namespace

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(MPI_Comm, CommOptions options) {
  return unsupported(fmt::format("NcclCommunicator::create for group '{}'", options.name).c_str());
}
NcclCommunicator::~NcclCommunicator() = default;
void* NcclCommunicator::stream() const { return nullptr; }
Result<WorkHandle> NcclCommunicator::iall_reduce(TensorView, ReduceOp) { return unsupported("all_reduce"); }
Result<WorkHandle> NcclCommunicator::iall_gather(TensorView, TensorView) { return unsupported("all_gather"); }
Result<WorkHandle> NcclCommunicator::ireduce_scatter(TensorView, TensorView, ReduceOp) {
  return unsupported("reduce_scatter");
}
Result<WorkHandle> NcclCommunicator::ibroadcast(TensorView, int) { return unsupported("broadcast"); }
Result<WorkHandle> NcclCommunicator::iall_to_all(TensorView, std::span<const int64_t>, TensorView,
                                                 std::span<const int64_t>) {
  return unsupported("all_to_all");
}
Result<WorkHandle> NcclCommunicator::isend(TensorView, int, int) { return unsupported("send"); }
Result<WorkHandle> NcclCommunicator::irecv(TensorView, int, int) { return unsupported("recv"); }
Status NcclCommunicator::barrier() { return unsupported("barrier"); }
Result<std::unique_ptr<Communicator>> NcclCommunicator::split(int, int, CommOptions) { return unsupported("split"); }

}  // namespace vlpar::comm
#endif
