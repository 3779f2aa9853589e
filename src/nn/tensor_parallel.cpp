// TP region boundaries. See include/vlpar/nn/tensor_parallel.hpp.
#include "vlpar/nn/tensor_parallel.hpp"

namespace vlpar::nn {

Status region_enter_forward(const TensorParallel& tp, TensorView full, TensorView in) {
  if (!tp.sp()) return copy_(full, in);
  return tp.comm->all_gather(full, in);
}

Status region_enter_backward(const TensorParallel& tp, TensorView din, TensorView dfull) {
  if (!tp.active()) return copy_(din, dfull);
  if (tp.sp()) return tp.comm->reduce_scatter(din, dfull, comm::ReduceOp::kSum);
  VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(dfull, comm::ReduceOp::kSum));
  return copy_(din, dfull);
}

Status region_exit_forward(const TensorParallel& tp, TensorView out, TensorView partial) {
  if (!tp.active()) return copy_(out, partial);
  if (tp.sp()) return tp.comm->reduce_scatter(out, partial, comm::ReduceOp::kSum);
  VLPAR_RETURN_IF_ERROR(tp.comm->all_reduce(partial, comm::ReduceOp::kSum));
  return copy_(out, partial);
}

Status region_exit_backward(const TensorParallel& tp, TensorView dpartial, TensorView dout) {
  if (!tp.sp()) return copy_(dpartial, dout);
  return tp.comm->all_gather(dpartial, dout);
}

Status tp_sum_partial_grad(const TensorParallel& tp, TensorView inout) {
  if (!tp.active()) return Status::Ok();
  return tp.comm->all_reduce(inout, comm::ReduceOp::kSum);
}

}  // namespace vlpar::nn
