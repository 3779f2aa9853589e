// Gradients of parameters tied across pipeline stages. See vlpar/parallel/pipeline_tied.hpp.
#include "vlpar/parallel/pipeline_tied.hpp"

#include "vlpar/kernels/elementwise.hpp"

namespace vlpar::pipeline {

Status sum_tied_gradient(const Context& ctx, comm::Communicator& pp, TensorView grad, int first, int second, int tag) {
  const int me = pp.rank();
  VLPAR_CHECK(first >= 0 && first < second && second < pp.size(), "sum_tied_gradient: ranks {} and {} of a pipeline "
              "group of {} (the first must be the lower)", first, second, pp.size());
  VLPAR_CHECK(me == first || me == second, "sum_tied_gradient: pipeline rank {} holds no copy (the copies are on "
              "ranks {} and {})", me, first, second);
  VLPAR_CHECK(grad.dtype == DType::kF32 && grad.is_contiguous(), "sum_tied_gradient: the gradient must be contiguous "
              "f32, got {} {}", dtype_name(grad.dtype), grad.is_contiguous() ? "contiguous" : "strided");
  VLPAR_CHECK(ctx.allocator != nullptr, "sum_tied_gradient: ctx.allocator must be set");
  const int peer = me == first ? second : first;
  VLPAR_ASSIGN_OR_RETURN(Tensor other, Tensor::empty(*ctx.allocator, grad.shape, DType::kF32));
  VLPAR_ASSIGN_OR_RETURN(comm::WorkHandle recv, pp.irecv(other, peer, tag));
  VLPAR_ASSIGN_OR_RETURN(comm::WorkHandle send, pp.isend(grad, peer, tag));
  VLPAR_RETURN_IF_ERROR(send->wait());
  VLPAR_RETURN_IF_ERROR(recv->wait());
  // Each rank adds the other's copy to its own: first + second on one, second + first on the other, the same bits
  // (IEEE addition is commutative; the kernel adds element by element).
  return add_(ctx, grad, other);
}

}  // namespace vlpar::pipeline
