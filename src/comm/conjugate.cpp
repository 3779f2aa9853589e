// Conjugate communication pairs over a Communicator. See include/vlpar/comm/conjugate.hpp for the table.
// Test: tests/mpi/test_conjugate.cpp (ctest --preset cpu -R test_conjugate).
#include "vlpar/comm/conjugate.hpp"

#include <cstring>
#include <vector>

#include "comm_checks.hpp"

namespace vlpar::comm {

namespace {

using detail::copy_flat;
using detail::op_site;


Status check_pair_views(const char* op, const Communicator& c, const TensorView& out, const TensorView& in) {
  VLPAR_CHECK(out.dtype == in.dtype, "{}: out is {}, in is {} (dtypes must match)", op_site(op, c),
              dtype_name(out.dtype), dtype_name(in.dtype));
  VLPAR_CHECK(out.is_contiguous() && in.is_contiguous(), "{}: out {} and in {} must be contiguous", op_site(op, c),
              out.to_string(), in.to_string());
  VLPAR_CHECK(out.device == in.device, "{}: out is on {}, in on {}", op_site(op, c), out.device.to_string(),
              in.device.to_string());
  return Status::Ok();
}

/// Same shape: identity and all-reduce steps.
Status check_same_shape(const char* op, const Communicator& c, const TensorView& out, const TensorView& in) {
  VLPAR_RETURN_IF_ERROR(check_pair_views(op, c, out, in));
  VLPAR_CHECK(out.shape == in.shape, "{}: out {} and in {} must have the same shape", op_site(op, c),
              out.shape.to_string(), in.shape.to_string());
  return Status::Ok();
}

/// full [.., H] and chunk [.., H/n]: same leading dims, H == n · chunk's last dim.
Status check_last_dim(const char* op, const Communicator& c, const TensorView& full, const char* full_name,
                      const TensorView& chunk, const char* chunk_name) {
  VLPAR_RETURN_IF_ERROR(check_pair_views(op, c, full, chunk));
  VLPAR_CHECK(full.ndim() >= 1 && full.ndim() == chunk.ndim(), "{}: {} {} and {} {} need the same rank >= 1",
              op_site(op, c), full_name, full.shape.to_string(), chunk_name, chunk.shape.to_string());
  for (int d = 0; d + 1 < full.ndim(); ++d)
    VLPAR_CHECK(full.size(d) == chunk.size(d), "{}: {} {} and {} {} differ in dim {}", op_site(op, c), full_name,
                full.shape.to_string(), chunk_name, chunk.shape.to_string(), d);
  VLPAR_CHECK(full.size(-1) == int64_t(c.size()) * chunk.size(-1),
              "{}: last dim of {} is {}, expected {} x {} = {} (last dim of {} times the group size)", op_site(op, c),
              full_name, full.size(-1), c.size(), chunk.size(-1), int64_t(c.size()) * chunk.size(-1), chunk_name);
  VLPAR_CHECK(full.device.is_cpu(), "{}: last-dim split/gather re-layouts on the host; {} is on {} (not supported yet)",
              op_site(op, c), full_name, full.device.to_string());
  VLPAR_CHECK(!detail::overlaps(full.data, full.nbytes(), chunk.data, chunk.nbytes()), "{}: {} and {} overlap",
              op_site(op, c), full_name, chunk_name);
  return Status::Ok();
}

/// full [n·S, ..] and chunk [S, ..]: same trailing dims, dim 0 of full == n · dim 0 of chunk.
Status check_dim0(const char* op, const Communicator& c, const TensorView& full, const char* full_name,
                  const TensorView& chunk, const char* chunk_name) {
  VLPAR_RETURN_IF_ERROR(check_pair_views(op, c, full, chunk));
  VLPAR_CHECK(full.ndim() >= 1 && full.ndim() == chunk.ndim(), "{}: {} {} and {} {} need the same rank >= 1",
              op_site(op, c), full_name, full.shape.to_string(), chunk_name, chunk.shape.to_string());
  for (int d = 1; d < full.ndim(); ++d)
    VLPAR_CHECK(full.size(d) == chunk.size(d), "{}: {} {} and {} {} differ in dim {}", op_site(op, c), full_name,
                full.shape.to_string(), chunk_name, chunk.shape.to_string(), d);
  VLPAR_CHECK(full.size(0) == int64_t(c.size()) * chunk.size(0),
              "{}: dim 0 of {} is {}, expected {} x {} = {} (dim 0 of {} times the group size)", op_site(op, c),
              full_name, full.size(0), c.size(), chunk.size(0), int64_t(c.size()) * chunk.size(0), chunk_name);
  return Status::Ok();
}

/// chunk [rows, w] = full[rows, rank·w : (rank+1)·w]  (full [rows, n·w]), both host memory.
void split_last_dim(const TensorView& chunk, const TensorView& full, int rank) {
  const size_t es = dtype_size(full.dtype);
  const int64_t w = chunk.size(-1), W = full.size(-1), rows = w ? chunk.numel() / w : 0;
  const auto* src = static_cast<const char*>(full.data);
  auto* dst = static_cast<char*>(chunk.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + size_t(r * w) * es, src + size_t(r * W + rank * w) * es, size_t(w) * es);
}

/// full [rows, n·w] = concat over ranks of the chunks, gathered over the group: an all_gather into a staging
/// buffer [n, rows, w], then each rank's block interleaved into the columns it owns.
Status gather_last_dim(Communicator& c, const TensorView& full, const TensorView& chunk) {
  const size_t es = dtype_size(full.dtype);
  const int n = c.size();
  const int64_t w = chunk.size(-1), W = full.size(-1), rows = w ? chunk.numel() / w : 0;
  if (n == 1) return copy_flat(full, chunk);
  std::vector<char> stage(size_t(full.numel()) * es);
  VLPAR_RETURN_IF_ERROR(c.all_gather(TensorView(stage.data(), full.dtype, {full.numel()}, full.device),
                                     TensorView(chunk.data, chunk.dtype, {chunk.numel()}, chunk.device)));
  auto* dst = static_cast<char*>(full.data);
  for (int p = 0; p < n; ++p)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + size_t(r * W + p * w) * es, stage.data() + size_t((p * rows + r) * w) * es, size_t(w) * es);
  return Status::Ok();
}

/// chunk [S, ..] = full[rank·S : (rank+1)·S]
Status split_dim0(const Communicator& c, const TensorView& chunk, const TensorView& full) {
  const int64_t S = chunk.size(0);
  return copy_flat(chunk, full.slice(0, c.rank() * S, (c.rank() + 1) * S));
}

}  // namespace

Status CopyToRegion::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_same_shape("copy_to_region.forward", c, out, in));
  return copy_flat(out, in);
}
Status CopyToRegion::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(check_same_shape("copy_to_region.backward", c, grad_in, grad_out));
  VLPAR_RETURN_IF_ERROR(copy_flat(grad_in, grad_out));
  return c.all_reduce(grad_in, ReduceOp::kSum);
}

Status ReduceFromRegion::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_same_shape("reduce_from_region.forward", c, out, in));
  VLPAR_RETURN_IF_ERROR(copy_flat(out, in));
  return c.all_reduce(out, ReduceOp::kSum);
}
Status ReduceFromRegion::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(check_same_shape("reduce_from_region.backward", c, grad_in, grad_out));
  return copy_flat(grad_in, grad_out);
}

Status ScatterToRegion::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_last_dim("scatter_to_region.forward", c, in, "in", out, "out"));
  split_last_dim(out, in, c.rank());
  return Status::Ok();
}
Status ScatterToRegion::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(check_last_dim("scatter_to_region.backward", c, grad_in, "grad_in", grad_out, "grad_out"));
  return gather_last_dim(c, grad_in, grad_out);
}

Status GatherFromRegion::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_last_dim("gather_from_region.forward", c, out, "out", in, "in"));
  return gather_last_dim(c, out, in);
}
Status GatherFromRegion::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(check_last_dim("gather_from_region.backward", c, grad_out, "grad_out", grad_in, "grad_in"));
  split_last_dim(grad_in, grad_out, c.rank());
  return Status::Ok();
}

Status ScatterToSequence::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_dim0("scatter_to_sequence.forward", c, in, "in", out, "out"));
  return split_dim0(c, out, in);
}
Status ScatterToSequence::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(check_dim0("scatter_to_sequence.backward", c, grad_in, "grad_in", grad_out, "grad_out"));
  return c.all_gather(grad_in, grad_out);
}

Status GatherFromSequence::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_dim0("gather_from_sequence.forward", c, out, "out", in, "in"));
  return c.all_gather(out, in);
}
Status GatherFromSequence::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(check_dim0("gather_from_sequence.backward", c, grad_out, "grad_out", grad_in, "grad_in"));
  return c.reduce_scatter(grad_in, grad_out, ReduceOp::kSum);
}

Status ReduceScatterToSequence::forward(Communicator& c, TensorView out, TensorView in) {
  VLPAR_RETURN_IF_ERROR(check_dim0("reduce_scatter_to_sequence.forward", c, in, "in", out, "out"));
  return c.reduce_scatter(out, in, ReduceOp::kSum);
}
Status ReduceScatterToSequence::backward(Communicator& c, TensorView grad_in, TensorView grad_out) {
  VLPAR_RETURN_IF_ERROR(
      check_dim0("reduce_scatter_to_sequence.backward", c, grad_in, "grad_in", grad_out, "grad_out"));
  return c.all_gather(grad_in, grad_out);
}

Status AllToAll::forward(Communicator& c, TensorView out, TensorView in, const Counts& counts) {
  return c.all_to_all(out, counts.recv_rows, in, counts.send_rows);
}
Status AllToAll::backward(Communicator& c, TensorView grad_in, TensorView grad_out, const Counts& counts) {
  // The gradient of row r of forward's out goes back to the rank that sent row r: counts swap roles.
  return c.all_to_all(grad_in, counts.send_rows, grad_out, counts.recv_rows);
}

}  // namespace vlpar::comm
