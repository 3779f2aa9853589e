// TP region boundaries, built only from the conjugate pairs of comm/conjugate.hpp (STYLE §22).
// See include/vlpar/nn/tensor_parallel.hpp.
#include "vlpar/nn/tensor_parallel.hpp"

#include "vlpar/comm/conjugate.hpp"

namespace vlpar::nn {

Status region_enter_forward(const TensorParallel& tp, TensorView full, TensorView in) {
  if (!tp.active()) return copy_(full, in);
  if (tp.sp()) return comm::GatherFromSequence::forward(*tp.comm, full, in);
  return comm::CopyToRegion::forward(*tp.comm, full, in);
}

Status region_enter_backward(const TensorParallel& tp, TensorView din, TensorView dfull) {
  if (!tp.active()) return copy_(din, dfull);
  if (tp.sp()) return comm::GatherFromSequence::backward(*tp.comm, din, dfull);
  return comm::CopyToRegion::backward(*tp.comm, din, dfull);
}

Status region_exit_forward(const TensorParallel& tp, TensorView out, TensorView partial) {
  if (!tp.active()) return copy_(out, partial);
  if (tp.sp()) return comm::ReduceScatterToSequence::forward(*tp.comm, out, partial);
  return comm::ReduceFromRegion::forward(*tp.comm, out, partial);
}

Status region_exit_backward(const TensorParallel& tp, TensorView dpartial, TensorView dout) {
  if (!tp.active()) return copy_(dpartial, dout);
  if (tp.sp()) return comm::ReduceScatterToSequence::backward(*tp.comm, dpartial, dout);
  return comm::ReduceFromRegion::backward(*tp.comm, dpartial, dout);
}

Status tp_sum_partial_grad(const TensorParallel& tp, TensorView inout) {
  if (!tp.active()) return Status::Ok();
  return tp.comm->all_reduce(inout, comm::ReduceOp::kSum);
}

}  // namespace vlpar::nn
