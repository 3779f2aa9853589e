#pragma once
// Communication as conjugate forward/backward pairs (Megatron-Core "mappings"), the only way tensor- and
// sequence-parallel layers talk to their group (STYLE §22). Each pair is a struct with
//   static Status forward(Communicator& c, TensorView out, TensorView in);
//   static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);
// where backward is the gradient of forward: grad_out has forward's `out` shape, grad_in forward's `in` shape.
// The group is passed explicitly (usually the tp group from ProcessGroups); there is no global state.
//
//   pair                     forward                               backward
//   CopyToRegion             identity                              all-reduce (sum)
//   ReduceFromRegion         all-reduce (sum)                      identity
//   ScatterToRegion          split last dim, keep own chunk        all-gather last dim
//   GatherFromRegion         all-gather last dim                   split last dim, keep own chunk
//   ScatterToSequence        split dim 0, keep own chunk           all-gather dim 0
//   GatherFromSequence       all-gather dim 0                      reduce-scatter dim 0 (sum)
//   ReduceScatterToSequence  reduce-scatter dim 0 (sum)            all-gather dim 0
//   AllToAll                 rows to peers by counts               the inverse exchange (counts swapped)
//
// Shapes, n = c.size(), [..] = any leading dims (identical in out and in), H divisible by n where split:
//   region ops (last dim):   full [.., H]  <->  chunk [.., H/n]      (rank r owns columns [r·H/n, (r+1)·H/n))
//   sequence ops (dim 0):    full [n·S, ..] <->  chunk [S, ..]        (rank r owns rows [r·S, (r+1)·S))
// In place: identity/all-reduce steps accept out == in; dim-0 steps accept the collectives' in-place layouts
// (the chunk is this rank's block of the full tensor, see communicator.hpp). Last-dim steps must not overlap.
// Last-dim steps re-layout on the host and take CPU tensors (kNotSupported for CUDA views for now); everything
// else works with any backend. bf16/f16 sums accumulate in f32 and round once (communicator.hpp).
// Test: tests/mpi/test_conjugate.cpp (ctest --preset cpu -R test_conjugate; mpirun -np 2 and -np 4).
#include <cstdint>
#include <span>

#include "vlpar/comm/communicator.hpp"

namespace vlpar::comm {

/// Enter a tensor-parallel region: every rank uses the full activation; gradients are summed over the group.
struct CopyToRegion {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // out, in: [.., H]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // Σ over ranks
};

/// Leave a tensor-parallel region with partial sums (row-parallel linear output): sum over the group.
struct ReduceFromRegion {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // Σ over ranks, [.., H]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // identity
};

/// Split the last dim: out [.., H/n] = in[.., rank·H/n : (rank+1)·H/n].
struct ScatterToRegion {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // out [.., H/n], in [.., H]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // [.., H] <- [.., H/n]
};

/// Concatenate the last dim over ranks: out [.., H] = concat_r in_r [.., H/n].
struct GatherFromRegion {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // out [.., H], in [.., H/n]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // [.., H/n] <- [.., H]
};

/// Split dim 0 (sequence parallel): out [S, ..] = in[rank·S : (rank+1)·S].
struct ScatterToSequence {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // out [S, ..], in [n·S, ..]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // [n·S, ..] <- [S, ..]
};

/// Concatenate dim 0 over ranks (sequence-parallel input to a column-parallel linear).
struct GatherFromSequence {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // out [n·S, ..], in [S, ..]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // reduce-scatter (sum)
};

/// Sum over ranks and keep this rank's dim-0 block (row-parallel linear output into sequence parallel).
struct ReduceScatterToSequence {
  static Status forward(Communicator& c, TensorView out, TensorView in);             // out [S, ..], in [n·S, ..]
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out);  // all-gather dim 0
};

/// Row exchange by per-peer counts (expert / context parallel). `send_rows[p]` rows of forward's `in` go to rank p,
/// `recv_rows[p]` rows of forward's `out` come from rank p; backward sends the gradients back the same way.
struct AllToAll {
  struct Counts {
    std::span<const int64_t> send_rows;  // [n], Σ = rows of forward's in
    std::span<const int64_t> recv_rows;  // [n], Σ = rows of forward's out
  };
  static Status forward(Communicator& c, TensorView out, TensorView in, const Counts& counts);
  static Status backward(Communicator& c, TensorView grad_in, TensorView grad_out, const Counts& counts);
};

}  // namespace vlpar::comm
