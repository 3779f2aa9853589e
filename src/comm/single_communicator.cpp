// The single-process communicator: collectives over a group of one. See include/vlpar/comm/single_communicator.hpp.
// Test: tests/unit/test_single_communicator.cpp.
#include "vlpar/comm/single_communicator.hpp"

#include "comm_checks.hpp"

namespace vlpar::comm {

namespace {
class DoneWork final : public Work {
 public:
  Status wait() override { return Status::Ok(); }
  bool test() override { return true; }
};
WorkHandle done() { return std::make_unique<DoneWork>(); }

}  // namespace

using detail::copy_flat;

Result<WorkHandle> SingleCommunicator::iall_reduce(TensorView inout, ReduceOp) {
  VLPAR_RETURN_IF_ERROR(detail::check_all_reduce(*this, inout, device_));
  return done();
}

Result<WorkHandle> SingleCommunicator::iall_gather(TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(detail::check_all_gather(*this, out, in, device_));
  VLPAR_RETURN_IF_ERROR(copy_flat(out, in));
  return done();
}

Result<WorkHandle> SingleCommunicator::ireduce_scatter(TensorView out, TensorView in, ReduceOp) {
  VLPAR_RETURN_IF_ERROR(detail::check_reduce_scatter(*this, out, in, device_));
  VLPAR_RETURN_IF_ERROR(copy_flat(out, in));
  return done();
}

Result<WorkHandle> SingleCommunicator::ibroadcast(TensorView inout, int root) {
  VLPAR_RETURN_IF_ERROR(detail::check_broadcast(*this, inout, root, device_));
  return done();
}

Result<WorkHandle> SingleCommunicator::iall_to_all(TensorView out, std::span<const int64_t> recv_rows, TensorView in,
                                                   std::span<const int64_t> send_rows) {
  VLPAR_RETURN_IF_ERROR(detail::check_all_to_all(*this, out, recv_rows, in, send_rows, device_));
  VLPAR_CHECK(send_rows[0] == recv_rows[0], "{}: sends {} rows to itself but expects {}",
              detail::op_site("all_to_all", *this), send_rows[0], recv_rows[0]);
  VLPAR_RETURN_IF_ERROR(copy_flat(out, in));
  return done();
}

Result<WorkHandle> SingleCommunicator::isend(TensorView t, int peer, int tag) {
  VLPAR_RETURN_IF_ERROR(detail::check_p2p("send", *this, t, peer, tag, device_));
  return VLPAR_STATUS(StatusCode::kInternal, "unreachable: check_p2p accepts no peer in a group of one");
}

Result<WorkHandle> SingleCommunicator::irecv(TensorView t, int peer, int tag) {
  VLPAR_RETURN_IF_ERROR(detail::check_p2p("recv", *this, t, peer, tag, device_));
  return VLPAR_STATUS(StatusCode::kInternal, "unreachable: check_p2p accepts no peer in a group of one");
}

Result<std::unique_ptr<Communicator>> SingleCommunicator::split(int, int, CommOptions options) {
  return std::unique_ptr<Communicator>(new SingleCommunicator(std::move(options), device_));
}

}  // namespace vlpar::comm
