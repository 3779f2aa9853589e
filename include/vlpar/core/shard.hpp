#pragma once
// Tensor-parallel shard arithmetic: pure functions of (size, tp, rank), unit-tested without MPI, and the
// description of one parameter's shard (ParamShard) that init, gradient gathering and the optimizer read.
//   even_shard(n, tp, r)   : block r of [0, n) split into tp equal blocks (column/row-parallel dims, vocab)
//   kv_head_shard(...)     : GQA kv heads a rank keeps: its even block when tp ≤ H_kv, else the one kv head its
//                            query heads read (replicated on tp / H_kv ranks)
//   vocab_owner(...)       : the rank whose vocab block holds a token id (the block's row of an id:
//                            VocabBlock::local, kernels/vocab_block.hpp)
//   ParamShard             : full logical shape, shard dim and the pieces (local range ↔ full range) this rank
//                            holds; the fused gate/up weight has two pieces (its gate rows and its up rows);
//                            a second split dim (inner_dim) for expert weights under expert tensor parallelism
// Test: tests/unit/test_shard.cpp.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vlpar/core/context.hpp"
#include "vlpar/core/init.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end)
  int64_t size() const { return end - begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
  friend bool operator==(const Range&, const Range&) = default;
};

/// @brief Block `rank` of [0, n) cut into tp equal blocks. Callers check tp | n first (TransformerConfig::validate_tp).
inline Range even_shard(int64_t n, int tp, int rank) {
  const int64_t b = n / tp;
  return {b * rank, b * (rank + 1)};
}

/// @brief The kv heads rank `rank` keeps. tp ≤ H_kv: its block of H_kv / tp heads; tp > H_kv (tp a multiple of
/// H_kv): the single head rank·H_kv/tp, which the rank's query heads [rank·heads/tp, (rank+1)·heads/tp) all read.
inline Range kv_head_shard(int kv_heads, int tp, int rank) {
  if (tp <= kv_heads) return even_shard(kv_heads, tp, rank);
  const int64_t h = int64_t(rank) * kv_heads / tp;
  return {h, h + 1};
}

/// @brief Number of ranks holding a copy of each kv head (1 unless tp > H_kv).
inline int kv_head_replicas(int kv_heads, int tp) { return tp > kv_heads ? tp / kv_heads : 1; }

/// @brief The rank whose vocab block holds `id` (vocab split evenly over tp ranks).
inline int vocab_owner(int64_t id, int64_t vocab, int tp) { return int(id / (vocab / tp)); }

/// One contiguous run of a shard along its shard dim: local [local_begin, +length) = full [full_begin, +length).
struct ShardPiece {
  int64_t local_begin = 0;
  int64_t full_begin = 0;
  int64_t length = 0;
  friend bool operator==(const ShardPiece&, const ShardPiece&) = default;
};

/// Which data-parallel replicas hold copies of a parameter: its gradient is reduced (and ZeRO-1 shards its state)
/// over that group of ranks, and its Σg² is summed over the ranks holding its other pieces (DESIGN §5).
///   kDense  : attention / dense MLP / embeddings / norms — replicas over dp (×cp), pieces over tp
///   kExpert : MoE expert weights — replicas over expert-dp, pieces over etp × ep
///   kVision : the vision tower and mergers — replicas over vision-dp, pieces over vision tp
/// The communicators of each are parallel::OptimizerGroups (parallel/optimizer_groups.hpp).
enum class ReplicaGroup : uint8_t { kDense = 0, kExpert = 1, kVision = 2 };
inline constexpr size_t kNumReplicaGroups = 3;
/// "dense", "expert", "vision"
inline const char* replica_group_name(ReplicaGroup g) {
  return g == ReplicaGroup::kExpert ? "expert" : g == ReplicaGroup::kVision ? "vision" : "dense";
}

/// One box of a shard: per dim of the full shape, the full range [full_begin, +length) held at local index
/// local_begin (dims that are not split: 0, 0, full size).
struct ShardBox {
  int64_t local_begin[kMaxDims] = {}, full_begin[kMaxDims] = {}, length[kMaxDims] = {};
};

/// How one parameter is laid out on this rank.
struct ParamShard {
  std::string name;              // HF-style dotted name ("model.layers.0.self_attn.q_proj.weight")
  Shape full_shape;              // logical shape of the unsharded parameter
  int shard_dim = -1;            // dim split over the tp group; −1 = replicated (every rank holds all of it)
  std::vector<ShardPiece> pieces;  // along shard_dim (empty when replicated)
  uint32_t param_id = 0;         // Philox key of the layout-invariant init
  InitRule init;
  /// True when every rank's gradient of this parameter is only a partial sum that backward all-reduces over
  /// the tp group (RMSNorm weights under sequence parallelism, kv projections replicated over tp > H_kv).
  bool grad_summed_over_tp = false;
  ReplicaGroup replica = ReplicaGroup::kDense;  // the ranks holding copies (gradient reduction, ZeRO-1)
  /// A second split dim after shard_dim, or −1: expert weights under expert tensor parallelism are split along
  /// dim 0 by expert (ep) and along the SwiGLU width by etp. The rank holds every (piece, inner piece) box.
  int inner_dim = -1;
  std::vector<ShardPiece> inner_pieces;  // along inner_dim (empty when there is none)

  /// @brief The shape this rank stores.
  Shape local_shape() const;
  /// @brief The boxes this rank holds: one per piece (× inner piece), the whole tensor when replicated.
  std::vector<ShardBox> boxes() const;
};

/// @brief A column-parallel weight [out, in] split along out (dim 0), or a row-parallel one split along in (dim 1).
ParamShard make_split_param(std::string name, Shape full_shape, int shard_dim, Range block, uint32_t param_id,
                            InitRule init);
/// @brief A parameter every rank holds whole.
ParamShard make_replicated_param(std::string name, Shape full_shape, uint32_t param_id, InitRule init);
/// @brief The fused gate/up weight [2I, H]: local rows [0, I/tp) are full gate rows block·, local rows
/// [I/tp, 2I/tp) are full up rows I + block·, so each rank's gate and up halves match.
ParamShard make_fused_gate_up_param(std::string name, int64_t intermediate, int64_t hidden, Range block,
                                    uint32_t param_id, InitRule init);

/// @brief Splits `p` (already split along dim 0 or replicated) along `dim` as well: block `block` of that dim,
/// or with `fused` the gate/up halves of a [..., 2I] width (gate columns block·, up columns I + block·, as
/// make_fused_gate_up_param does along dim 0). Expert weights under etp: gate_up [E, H, 2I] splits dim 2 fused,
/// down [E, I, H] dim 1 plain.
ParamShard split_inner(ParamShard p, int dim, Range block, bool fused);

/// @brief Fills `local` (contiguous, shaped local_shape()) with this rank's slice of the full weight that
/// init_full(seed, param_id) would produce: the same seed gives the same full weights at any tp.
Status init_param_shard(const Context& ctx, TensorView local, const ParamShard& p, uint64_t seed);

/// @brief Copies this rank's shard `local` into its place inside `full` (full_shape, contiguous, f32 or f64).
/// Elements outside this rank's pieces are left alone.
Status scatter_shard_into_full(TensorView full, TensorView local, const ParamShard& p);
/// @brief The inverse: fills this rank's shard `local` from the full tensor (checkpoint import, "convert then
/// split": a full HF tensor is converted to vlpar's full layout first, then each rank takes its pieces).
Status gather_shard_from_full(TensorView local, TensorView full, const ParamShard& p);

}  // namespace vlpar
