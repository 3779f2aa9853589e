#pragma once
// The tensor-parallel group a layer runs in, and the two region boundaries every sharded block uses.
// A "TP region" is the stretch between a column-parallel linear (input replicated, output sharded by columns)
// and the row-parallel linear that closes it (output partial sums). Its boundaries are conjugate pairs
// (comm/conjugate.hpp, Megatron mappings):
//                              without sequence parallelism      with sequence parallelism (SP)
//   region_enter  forward      copy_to_region   (identity)        gather_from_sequence (all-gather, dim 0)
//                 backward     copy_to_region   (all-reduce)      gather_from_sequence (reduce-scatter)
//   region_exit   forward      reduce_from_region (all-reduce)    reduce_scatter_to_sequence (reduce-scatter)
//                 backward     reduce_from_region (identity)      reduce_scatter_to_sequence (all-gather)
// With SP the residual stream between regions holds N_tok / tp tokens (rank r: tokens [r·N/tp, (r+1)·N/tp)).
// A null communicator, or one of size 1, is TP1: every boundary is a copy and SP changes nothing.
// Test: tests/mpi/test_tp_equivalence.cpp (mpirun -np 2), tests/unit/test_nn_stack.cpp (TP1).
#include <cstdint>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar::nn {

struct TensorParallel {
  comm::Communicator* comm = nullptr;  // the tp group; nullptr or size 1 = no tensor parallelism
  bool sequence_parallel = false;      // split activations along tokens between TP regions

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  /// SP in effect (SP at TP1 is a no-op).
  bool sp() const { return sequence_parallel && active(); }
  /// Tokens of the residual stream this rank holds for a packed batch of n_tok tokens.
  int64_t local_tokens(int64_t n_tok) const { return sp() ? n_tok / size() : n_tok; }
  /// First token of this rank's residual-stream slice.
  int64_t first_local_token(int64_t n_tok) const { return sp() ? rank() * (n_tok / size()) : 0; }
};

/// @brief Before a column-parallel linear: full [N_tok, H] ← in [N_loc, H] (all-gather with SP, else a copy).
Status region_enter_forward(const TensorParallel& tp, TensorView full, TensorView in);
/// @brief Conjugate: din [N_loc, H] ← Σ over tp of dfull [N_tok, H] (reduce-scatter with SP, else all-reduce).
/// dfull may be used as scratch.
Status region_enter_backward(const TensorParallel& tp, TensorView din, TensorView dfull);
/// @brief After a row-parallel linear: out [N_loc, H] ← Σ over tp of partial [N_tok, H] (reduce-scatter with SP,
/// else all-reduce). partial may be used as scratch.
Status region_exit_forward(const TensorParallel& tp, TensorView out, TensorView partial);
/// @brief Conjugate: dpartial [N_tok, H] ← dout [N_loc, H] (all-gather with SP, else a copy).
Status region_exit_backward(const TensorParallel& tp, TensorView dpartial, TensorView dout);

/// @brief In-place sum over the tp group of a gradient every rank holds only partially (no-op at TP1).
Status tp_sum_partial_grad(const TensorParallel& tp, TensorView inout);

}  // namespace vlpar::nn
