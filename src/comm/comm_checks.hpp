#pragma once
// Argument checks shared by every communicator backend (internal header, not installed).
// Each check returns kInvalidArgument with a message that names the op, the group and the rank, e.g.
//   "all_gather on group 'tp' (rank 1 of 2): out has 6 elements, expected 2 x 4 = 8"
// and runs before anything is communicated, so a bad call on one rank fails there instead of hanging its peers
// (the peers then meet the watchdog). Tested by tests/mpi/test_collectives.cpp (NamedErrors) and
// tests/unit/test_single_communicator.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "vlpar/comm/communicator.hpp"

namespace vlpar::comm::detail {

/// "all_gather on group 'tp' (rank 1 of 2)"
std::string op_site(std::string_view op, const Communicator& c);

/// Copies in -> out as flat element ranges (same dtype; shapes may differ, the sizes were checked); a no-op when
/// they are the same memory.
Status copy_flat(const TensorView& out, const TensorView& in);

/// Byte ranges [a, a + a_bytes) and [b, b + b_bytes) intersect (empty ranges never do).
bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes);

/// Fails (kCommError) when an earlier collective of this group timed out; `broken_by` is that op's site.
Status check_usable(std::string_view op, const Communicator& c, const std::string& broken_by);

/// One tensor argument: non-null when non-empty, contiguous, on `device`. `what` names the argument.
Status check_view(std::string_view op, const Communicator& c, const TensorView& t, const char* what, Device device);

Status check_all_reduce(const Communicator& c, const TensorView& inout, Device device);
Status check_all_gather(const Communicator& c, const TensorView& out, const TensorView& in, Device device);
Status check_reduce_scatter(const Communicator& c, const TensorView& out, const TensorView& in, Device device);
Status check_broadcast(const Communicator& c, const TensorView& inout, int root, Device device);
/// Also checks count lengths, non-negative counts, Σ counts == rows, equal row sizes and the int range of
/// counts and displacements (in rows), which MPI's int-typed arguments require.
Status check_all_to_all(const Communicator& c, const TensorView& out, std::span<const int64_t> recv_rows,
                        const TensorView& in, std::span<const int64_t> send_rows, Device device);
/// all_to_all_rows: the views as check_all_to_all, the counts against the index lengths (or the rows), every
/// index inside its tensor, no row received twice.
Status check_all_to_all_rows(const Communicator& c, const TensorView& out, std::span<const int64_t> recv_rows,
                             std::span<const int32_t> recv_index, const TensorView& in,
                             std::span<const int64_t> send_rows, std::span<const int32_t> send_index, Device device);
Status check_p2p(std::string_view op, const Communicator& c, const TensorView& t, int peer, int tag, Device device);

/// all_gather in place: `in` is exactly this rank's block of `out`.
bool all_gather_in_place(const Communicator& c, const TensorView& out, const TensorView& in);
/// reduce_scatter in place: `out` is exactly this rank's block of `in`.
bool reduce_scatter_in_place(const Communicator& c, const TensorView& out, const TensorView& in);

/// Elements of one dim-0 row (numel / size(0)); 1 for a 0-d view.
int64_t row_elems(const TensorView& t);

}  // namespace vlpar::comm::detail
