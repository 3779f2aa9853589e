// Argument checks shared by the communicator backends. See src/comm/comm_checks.hpp.
#include "comm_checks.hpp"

#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

namespace vlpar::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kSingle: return "single";
    case Backend::kMPI: return "mpi";
    case Backend::kNCCL: return "nccl";
  }
  return "?";
}

namespace detail {

Status copy_flat(const TensorView& out, const TensorView& in) {
  if (out.data == in.data || in.numel() == 0) return Status::Ok();
  return copy_(TensorView(out.data, out.dtype, {out.numel()}, out.device),
               TensorView(in.data, in.dtype, {in.numel()}, in.device));
}

}  // namespace detail

namespace detail {

std::string op_site(std::string_view op, const Communicator& c) {
  return fmt::format("{} on group '{}' (rank {} of {})", op, c.options().name, c.rank(), c.size());
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

Status check_usable(std::string_view op, const Communicator& c, const std::string& broken_by) {
  VLPAR_CHECK_CODE(broken_by.empty(), StatusCode::kCommError,
                   "{}: the group is unusable since {} timed out; the job must abort", op_site(op, c), broken_by);
  return Status::Ok();
}

Status check_view(std::string_view op, const Communicator& c, const TensorView& t, const char* what, Device device) {
  VLPAR_CHECK(t.data != nullptr || t.numel() == 0, "{}: {} ({}) has null data", op_site(op, c), what, t.to_string());
  VLPAR_CHECK(t.is_contiguous(), "{}: {} ({}) is not contiguous", op_site(op, c), what, t.to_string());
  VLPAR_CHECK(t.device == device, "{}: {} is on {}, the {} backend takes tensors on {}", op_site(op, c), what,
              t.device.to_string(), backend_name(c.backend()), device.to_string());
  return Status::Ok();
}

namespace {
Status check_same_dtype(std::string_view op, const Communicator& c, const TensorView& out, const TensorView& in) {
  VLPAR_CHECK(out.dtype == in.dtype, "{}: out is {}, in is {} (dtypes must match)", op_site(op, c),
              dtype_name(out.dtype), dtype_name(in.dtype));
  return Status::Ok();
}
Status check_int_count(std::string_view op, const Communicator& c, const char* what, int64_t count) {
  VLPAR_CHECK(count <= INT_MAX, "{}: {} is {} elements, beyond the int range of MPI/NCCL counts (split the tensor)",
              op_site(op, c), what, count);
  return Status::Ok();
}
}  // namespace

Status check_all_reduce(const Communicator& c, const TensorView& inout, Device device) {
  VLPAR_RETURN_IF_ERROR(check_view("all_reduce", c, inout, "inout", device));
  return check_int_count("all_reduce", c, "inout", inout.numel());
}

Status check_all_gather(const Communicator& c, const TensorView& out, const TensorView& in, Device device) {
  constexpr std::string_view op = "all_gather";
  VLPAR_RETURN_IF_ERROR(check_view(op, c, out, "out", device));
  VLPAR_RETURN_IF_ERROR(check_view(op, c, in, "in", device));
  VLPAR_RETURN_IF_ERROR(check_same_dtype(op, c, out, in));
  VLPAR_CHECK(out.numel() == int64_t(c.size()) * in.numel(), "{}: out has {} elements, expected {} x {} = {}",
              op_site(op, c), out.numel(), c.size(), in.numel(), int64_t(c.size()) * in.numel());
  VLPAR_CHECK(all_gather_in_place(c, out, in) || !overlaps(out.data, out.nbytes(), in.data, in.nbytes()),
              "{}: out and in overlap but in is not this rank's block of out (the only in-place layout)",
              op_site(op, c));
  return check_int_count(op, c, "in", in.numel());
}

Status check_reduce_scatter(const Communicator& c, const TensorView& out, const TensorView& in, Device device) {
  constexpr std::string_view op = "reduce_scatter";
  VLPAR_RETURN_IF_ERROR(check_view(op, c, out, "out", device));
  VLPAR_RETURN_IF_ERROR(check_view(op, c, in, "in", device));
  VLPAR_RETURN_IF_ERROR(check_same_dtype(op, c, out, in));
  VLPAR_CHECK(in.numel() == int64_t(c.size()) * out.numel(), "{}: in has {} elements, expected {} x {} = {}",
              op_site(op, c), in.numel(), c.size(), out.numel(), int64_t(c.size()) * out.numel());
  VLPAR_CHECK(reduce_scatter_in_place(c, out, in) || !overlaps(out.data, out.nbytes(), in.data, in.nbytes()),
              "{}: out and in overlap but out is not this rank's block of in (the only in-place layout)",
              op_site(op, c));
  return check_int_count(op, c, "in", in.numel());
}

Status check_broadcast(const Communicator& c, const TensorView& inout, int root, Device device) {
  constexpr std::string_view op = "broadcast";
  VLPAR_RETURN_IF_ERROR(check_view(op, c, inout, "inout", device));
  VLPAR_CHECK(root >= 0 && root < c.size(), "{}: root {} is not a rank of the group [0, {})", op_site(op, c), root,
              c.size());
  return check_int_count(op, c, "inout", inout.numel());
}

int64_t row_elems(const TensorView& t) {
  int64_t n = 1;
  for (int i = 1; i < t.ndim(); ++i) n *= t.size(i);
  return n;
}

namespace {

/// The part all_to_all and all_to_all_rows share: both views, one dtype, rows of one size, one count per rank,
/// counts non-negative and every prefix sum inside the int range of MPI counts. Returns (Σ send_rows, Σ recv_rows).
Result<std::pair<int64_t, int64_t>> check_row_counts(std::string_view op, const Communicator& c,
                                                     const TensorView& out, std::span<const int64_t> recv_rows,
                                                     const TensorView& in, std::span<const int64_t> send_rows,
                                                     Device device) {
  VLPAR_RETURN_IF_ERROR(check_view(op, c, out, "out", device));
  VLPAR_RETURN_IF_ERROR(check_view(op, c, in, "in", device));
  VLPAR_RETURN_IF_ERROR(check_same_dtype(op, c, out, in));
  VLPAR_CHECK(out.ndim() >= 1 && in.ndim() >= 1, "{}: out ({}) and in ({}) need a row dim 0", op_site(op, c),
              out.to_string(), in.to_string());
  VLPAR_CHECK(row_elems(out) == row_elems(in), "{}: rows of out {} have {} elements, rows of in {} have {}",
              op_site(op, c), out.to_string(), row_elems(out), in.to_string(), row_elems(in));
  const auto n = size_t(c.size());
  VLPAR_CHECK(send_rows.size() == n && recv_rows.size() == n,
              "{}: send_rows has {} entries and recv_rows {}, expected one per rank ({})", op_site(op, c),
              send_rows.size(), recv_rows.size(), n);
  int64_t send_total = 0, recv_total = 0;
  for (size_t p = 0; p < n; ++p) {
    VLPAR_CHECK(send_rows[p] >= 0 && recv_rows[p] >= 0, "{}: negative row count for peer {} (send {}, recv {})",
                op_site(op, c), p, send_rows[p], recv_rows[p]);
    // Displacements are the prefix sums; each must fit an int as well as each count.
    VLPAR_CHECK(send_total + send_rows[p] <= INT_MAX && recv_total + recv_rows[p] <= INT_MAX,
                "{}: row counts/displacements for peer {} exceed the int range of MPI counts (send {} at {}, "
                "recv {} at {})",
                op_site(op, c), p, send_rows[p], send_total, recv_rows[p], recv_total);
    send_total += send_rows[p];
    recv_total += recv_rows[p];
  }
  return std::pair{send_total, recv_total};
}

}  // namespace

Status check_all_to_all(const Communicator& c, const TensorView& out, std::span<const int64_t> recv_rows,
                        const TensorView& in, std::span<const int64_t> send_rows, Device device) {
  constexpr std::string_view op = "all_to_all";
  VLPAR_ASSIGN_OR_RETURN(const auto totals, check_row_counts(op, c, out, recv_rows, in, send_rows, device));
  const auto [send_total, recv_total] = totals;
  VLPAR_CHECK(send_total == in.size(0), "{}: send_rows sum to {} but in has {} rows", op_site(op, c), send_total,
              in.size(0));
  VLPAR_CHECK(recv_total == out.size(0), "{}: recv_rows sum to {} but out has {} rows", op_site(op, c), recv_total,
              out.size(0));
  VLPAR_CHECK(!overlaps(out.data, out.nbytes(), in.data, in.nbytes()), "{}: out and in overlap (not supported)",
              op_site(op, c));
  return Status::Ok();
}

Status check_all_to_all_rows(const Communicator& c, const TensorView& out, std::span<const int64_t> recv_rows,
                             std::span<const int32_t> recv_index, const TensorView& in,
                             std::span<const int64_t> send_rows, std::span<const int32_t> send_index, Device device) {
  constexpr std::string_view op = "all_to_all_rows";
  VLPAR_ASSIGN_OR_RETURN(const auto totals, check_row_counts(op, c, out, recv_rows, in, send_rows, device));
  const auto [send_total, recv_total] = totals;
  const int64_t send_len = send_index.empty() ? in.size(0) : int64_t(send_index.size());
  const int64_t recv_len = recv_index.empty() ? out.size(0) : int64_t(recv_index.size());
  VLPAR_CHECK(send_total == send_len && recv_total == recv_len, "{}: send_rows sum to {} for {} rows to send and "
              "recv_rows to {} for {} rows to receive", op_site(op, c), send_total, send_len, recv_total, recv_len);
  const size_t me = size_t(c.rank());
  VLPAR_CHECK(send_rows[me] == recv_rows[me], "{}: this rank sends itself {} rows but receives {} from itself",
              op_site(op, c), send_rows[me], recv_rows[me]);
  for (size_t k = 0; k < send_index.size(); ++k)
    VLPAR_CHECK(send_index[k] >= 0 && send_index[k] < in.size(0), "{}: send_index[{}] = {} outside in's {} rows",
                op_site(op, c), k, send_index[k], in.size(0));
  std::vector<bool> hit(recv_index.empty() ? 0 : size_t(out.size(0)), false);
  for (size_t k = 0; k < recv_index.size(); ++k) {
    const int32_t r = recv_index[k];
    VLPAR_CHECK(r >= 0 && r < out.size(0) && !hit[size_t(r)], "{}: recv_index[{}] = {} is outside out's {} rows or "
                "repeats a row", op_site(op, c), k, r, out.size(0));
    hit[size_t(r)] = true;
  }
  VLPAR_CHECK(!overlaps(out.data, out.nbytes(), in.data, in.nbytes()), "{}: out and in overlap (not supported)",
              op_site(op, c));
  return Status::Ok();
}

Status check_p2p(std::string_view op, const Communicator& c, const TensorView& t, int peer, int tag, Device device) {
  VLPAR_RETURN_IF_ERROR(check_view(op, c, t, "t", device));
  VLPAR_CHECK(peer >= 0 && peer < c.size() && peer != c.rank(), "{}: peer {} is not another rank of the group [0, {})",
              op_site(op, c), peer, c.size());
  VLPAR_CHECK(tag >= 0 && tag <= 32767, "{}: tag {} outside [0, 32767] (the MPI-guaranteed tag range)",
              op_site(op, c), tag);
  return check_int_count(op, c, "t", t.numel());
}

bool all_gather_in_place(const Communicator& c, const TensorView& out, const TensorView& in) {
  return in.numel() > 0 && in.data == static_cast<const char*>(out.data) + size_t(c.rank()) * in.nbytes();
}

bool reduce_scatter_in_place(const Communicator& c, const TensorView& out, const TensorView& in) {
  return out.numel() > 0 && out.data == static_cast<const char*>(in.data) + size_t(c.rank()) * out.nbytes();
}

}  // namespace detail
}  // namespace vlpar::comm
