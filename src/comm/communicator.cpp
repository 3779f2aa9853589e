// The Communicator interface's default all_to_all_rows: rows gathered into a host staging buffer in send order, one
// all_to_all, rows scattered from a second staging buffer to their destinations (comm/communicator.hpp). Backends
// with a zero-copy form override it (MPI: derived datatypes, src/comm/mpi_communicator.cpp).
// Test: tests/mpi/test_collectives.cpp (AllToAllRows.*, np 2 and 4, against the plain all_to_all).
#include "vlpar/comm/communicator.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

#include "comm_checks.hpp"

namespace vlpar::comm {

Status Communicator::all_to_all_rows(TensorView out, std::span<const int64_t> recv_rows,
                                     std::span<const int32_t> recv_index, TensorView in,
                                     std::span<const int64_t> send_rows, std::span<const int32_t> send_index) {
  VLPAR_RETURN_IF_ERROR(detail::check_all_to_all_rows(*this, out, recv_rows, recv_index, in, send_rows, send_index,
                                                      Device::cpu()));
  const size_t row_bytes = size_t(detail::row_elems(in)) * dtype_size(in.dtype);
  const int64_t n_send = send_index.empty() ? in.size(0) : int64_t(send_index.size());
  const int64_t n_recv = recv_index.empty() ? out.size(0) : int64_t(recv_index.size());
  std::vector<std::byte> send(send_index.empty() ? 0 : size_t(n_send) * row_bytes);
  std::vector<std::byte> recv(recv_index.empty() ? 0 : size_t(n_recv) * row_bytes);
  const auto* src = static_cast<const std::byte*>(in.data);
  for (size_t k = 0; k < send_index.size(); ++k)
    std::memcpy(send.data() + k * row_bytes, src + size_t(send_index[k]) * row_bytes, row_bytes);
  const int64_t width = detail::row_elems(in);
  auto rows_view = [&](void* data, int64_t rows) {
    return TensorView(data, in.dtype, Shape{rows, width}, Device::cpu());
  };
  const TensorView send_view = send_index.empty() ? rows_view(in.data, n_send) : rows_view(send.data(), n_send);
  const TensorView recv_view = recv_index.empty() ? rows_view(out.data, n_recv) : rows_view(recv.data(), n_recv);
  VLPAR_RETURN_IF_ERROR(all_to_all(recv_view, recv_rows, send_view, send_rows));
  auto* dst = static_cast<std::byte*>(out.data);
  for (size_t k = 0; k < recv_index.size(); ++k)
    std::memcpy(dst + size_t(recv_index[k]) * row_bytes, recv.data() + k * row_bytes, row_bytes);
  return Status::Ok();
}

}  // namespace vlpar::comm
