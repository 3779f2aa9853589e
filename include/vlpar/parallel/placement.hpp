#pragma once
// Placements: how one tensor lies on each axis of the mesh (DESIGN §5; the Replicate / Shard / Partial of
// PyTorch's DTensor), and the communication that changes a placement on one axis.
//
//   Replicate   every rank of the axis holds the whole tensor (as far as the other axes leave it whole)
//   Shard{d}    dim d is cut into size(axis) even blocks; the rank with index i in the axis's group holds block i
//   Partial     every rank holds a summand; the tensor is the sum over the axis (a row-parallel linear's output
//               on tp, a weight gradient on dp before its reduction)
//
// A Placements value gives one per mesh axis (Replicate where not set), e.g. a column-parallel weight is
// Placements{}.on(Axis::kTp, Shard{0}), its gradient after one dp rank's backward additionally .on(Axis::kDp,
// Partial{}). local_block() turns placements into the block this rank holds; redistribute() moves a tensor from
// one placement to another on one axis with the conjugate pairs of comm/conjugate.hpp:
//
//   from → to                 communication over the axis's group       shapes (n = group size)
//   Partial → Replicate       all-reduce (sum)                          out = in (may alias)
//   Partial → Shard{0}        reduce-scatter dim 0                      out [S/n, ..] ← in [S, ..]
//   Shard{0} → Replicate      all-gather dim 0                          out [S, ..] ← in [S/n, ..]
//   Shard{last} → Replicate   all-gather last dim                       out [.., H] ← in [.., H/n]
//   Replicate → Shard{0|last} keep this rank's block (no communication)
//   Replicate → Partial       rank 0 keeps the values, the others zero  (the sum is unchanged)
//   p → p                     copy (nothing when out aliases in)
// Other pairs (a middle dim, Shard → Partial) return kNotSupported naming both placements.
// Header-only: the templates take any group source with `comm::Communicator& get(Axis)` (ProcessGroups, or a
// test's fake) or plain size/index functions.
// Test: tests/mpi/test_placement.cpp (mpirun -np 4: a two-layer MLP sharded Shard{0}/Shard{1} on tp, Partial on
// tp and dp, equals the single-process fp64 run; blocks over two axes; bad placements are named errors).
#include <array>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include <fmt/core.h>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/comm/conjugate.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/parallel/mesh.hpp"

namespace vlpar::parallel {

struct Replicate {
  friend bool operator==(const Replicate&, const Replicate&) = default;
};
struct Shard {
  int dim = 0;
  friend bool operator==(const Shard&, const Shard&) = default;
};
struct Partial {
  friend bool operator==(const Partial&, const Partial&) = default;
};
using Placement = std::variant<Replicate, Shard, Partial>;

/// "replicate", "shard(1)", "partial".
inline std::string placement_name(const Placement& p) {
  if (std::holds_alternative<Shard>(p)) return fmt::format("shard({})", std::get<Shard>(p).dim);
  return std::holds_alternative<Partial>(p) ? "partial" : "replicate";
}

/// One tensor's placement on every mesh axis; Replicate where not set.
class Placements {
 public:
  Placements& on(Axis axis, Placement p) {
    p_[size_t(axis)] = p;
    return *this;
  }
  const Placement& at(Axis axis) const { return p_[size_t(axis)]; }
  /// Axes whose placement is not Replicate, in kAllAxes order.
  std::vector<Axis> non_replicated() const {
    std::vector<Axis> out;
    for (Axis a : kAllAxes)
      if (!std::holds_alternative<Replicate>(at(a))) out.push_back(a);
    return out;
  }
  /// "tp: shard(0), dp: partial" (or "replicate" everywhere).
  std::string to_string() const {
    std::string s;
    for (Axis a : non_replicated()) s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", axis_name(a), placement_name(at(a)));
    return s.empty() ? "replicate" : s;
  }
  friend bool operator==(const Placements&, const Placements&) = default;

 private:
  std::array<Placement, kAllAxes.size()> p_{};
};

/// @brief The mesh axis holding the copies of a replica group's parameters (their gradients are reduced over it;
/// ZeRO-1 shards their state over it): dense → dp_cp, expert → edp, vision → vision_dp.
inline Axis replica_axis(ReplicaGroup g) {
  return g == ReplicaGroup::kExpert ? Axis::kEdp : g == ReplicaGroup::kVision ? Axis::kVisionDp : Axis::kDpCp;
}

/// @brief The mesh axes over which a replica group's parameters are cut into pieces (the ranks whose Σg² the norm
/// adds): dense → tp; expert → etp, ep; vision → vision_tp.
inline std::vector<Axis> piece_axes(ReplicaGroup g) {
  if (g == ReplicaGroup::kExpert) return {Axis::kEtp, Axis::kEp};
  return {g == ReplicaGroup::kVision ? Axis::kVisionTp : Axis::kTp};
}

/// @brief A registry parameter's placements: Shard{shard_dim} (Replicate when shard_dim < 0) on its group's
/// tensor-parallel axis (tp or vision_tp), Replicate elsewhere; expert weights are Shard{shard_dim} (the expert
/// dim) on ep and, under expert tensor parallelism, Shard{inner_dim} (the width) on etp. With `gradient`, its
/// gradient as one rank's backward leaves it: additionally Partial on the replica axis (the sum the data-parallel
/// reduction completes). A shard of several pieces (the fused gate/up weight: its gate rows and its up rows) is
/// Shard{0} of each half; local_block() describes single-piece shards exactly, ParamShard::pieces every shard.
inline Placements param_placements(const ParamShard& s, bool gradient = false) {
  Placements p;
  const bool expert = s.replica == ReplicaGroup::kExpert;
  if (s.shard_dim >= 0) p.on(expert ? Axis::kEp : piece_axes(s.replica).front(), Shard{s.shard_dim});
  if (s.inner_dim >= 0) p.on(expert ? Axis::kEtp : piece_axes(s.replica).front(), Shard{s.inner_dim});
  if (gradient) p.on(replica_axis(s.replica), Partial{});
  return p;
}

/// A rectangular block of a tensor: [begin, end) per dim.
struct Block {
  std::vector<Range> dims;
  Shape shape() const {
    Shape s;
    s.ndim = int(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) s.dims[d] = dims[d].size();
    return s;
  }
};

/// @brief The block of a tensor of shape `full` this rank holds under `p`. size_of(axis) and index_of(axis) give
/// the axis's group size and this rank's index in it. Several axes sharding one dim nest in kAllAxes order (the
/// first cuts the dim, the next cuts that block). Errors name the axis, the dim and the sizes.
template <class SizeOf, class IndexOf>
Result<Block> local_block(const Shape& full, const Placements& p, SizeOf size_of, IndexOf index_of) {
  Block b;
  for (int d = 0; d < full.ndim; ++d) b.dims.push_back({0, full.dims[d]});
  for (Axis a : kAllAxes) {
    const Placement& pl = p.at(a);
    if (!std::holds_alternative<Shard>(pl)) continue;
    const int d = std::get<Shard>(pl).dim, n = size_of(a), i = index_of(a);
    VLPAR_CHECK(d >= 0 && d < full.ndim, "placement {} on axis {}: a tensor of shape {} has no dim {}",
                placement_name(pl), axis_name(a), full.to_string(), d);
    Range& r = b.dims[size_t(d)];
    VLPAR_CHECK(n >= 1 && i >= 0 && i < n, "axis {}: index {} outside a group of {}", axis_name(a), i, n);
    VLPAR_CHECK(r.size() % n == 0, "placement {} on axis {}: dim {} of {} holds {} elements here, not divisible "
                                   "by the axis size {}",
                placement_name(pl), axis_name(a), d, full.to_string(), r.size(), n);
    const int64_t len = r.size() / n;
    r = {r.begin + i * len, r.begin + (i + 1) * len};
  }
  return b;
}

/// @brief local_block for this rank of a group source (ProcessGroups, or anything with get(Axis)).
template <class Groups>
Result<Block> local_block(const Shape& full, const Placements& p, const Groups& groups) {
  return local_block(full, p, [&](Axis a) { return groups.get(a).size(); }, [&](Axis a) { return groups.get(a).rank(); });
}

/// @brief Copies block `b` of the contiguous tensor `full` into the contiguous `local` (shaped b.shape()).
inline Status copy_block(TensorView local, TensorView full, const Block& b) {
  VLPAR_CHECK(full.is_contiguous() && local.is_contiguous() && full.dtype == local.dtype &&
                  local.shape == b.shape() && int(b.dims.size()) == full.ndim(),
              "copy_block: local {} must be the contiguous block {} of full {}", local.to_string(),
              b.shape().to_string(), full.to_string());
  const int nd = full.ndim();
  for (int d = 0; d < nd; ++d)
    VLPAR_CHECK(b.dims[size_t(d)].begin >= 0 && b.dims[size_t(d)].begin <= b.dims[size_t(d)].end &&
                    b.dims[size_t(d)].end <= full.shape.dims[d],
                "copy_block: dim {} of the block [{}, {}) is outside the tensor {}", d, b.dims[size_t(d)].begin,
                b.dims[size_t(d)].end, full.to_string());
  const size_t es = dtype_size(full.dtype);
  const int64_t inner = nd > 0 ? b.dims.back().size() : 1;
  const int64_t rows = inner > 0 ? local.numel() / inner : 0;
  const auto* src = static_cast<const char*>(full.data);
  auto* dst = static_cast<char*>(local.data);
  for (int64_t r = 0; r < rows; ++r) {  // each run of the last dim: its full-tensor offset from the row index
    int64_t rem = r, off = 0, stride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = d == nd - 1 ? b.dims[size_t(d)].begin : b.dims[size_t(d)].begin + rem % b.dims[size_t(d)].size();
      if (d < nd - 1) rem /= b.dims[size_t(d)].size();
      off += idx * stride;
      stride *= full.shape.dims[d];
    }
    std::memcpy(dst + size_t(r * inner) * es, src + size_t(off) * es, size_t(inner) * es);
  }
  return Status::Ok();
}

/// @brief Moves a tensor from placement `from` to `to` on the axis whose group is `c` (table above).
inline Status redistribute(comm::Communicator& c, const Placement& from, const Placement& to, TensorView out,
                           TensorView in) {
  const auto is_shard = [](const Placement& p, int dim) {
    return std::holds_alternative<Shard>(p) && std::get<Shard>(p).dim == dim;
  };
  const int last = in.ndim() - 1;
  if (from == to) return out.data == in.data ? Status::Ok() : copy_(out, in);
  if (std::holds_alternative<Partial>(from) && std::holds_alternative<Replicate>(to))
    return comm::ReduceFromRegion::forward(c, out, in);
  if (std::holds_alternative<Partial>(from) && is_shard(to, 0)) return comm::ReduceScatterToSequence::forward(c, out, in);
  if (is_shard(from, 0) && std::holds_alternative<Replicate>(to)) return comm::GatherFromSequence::forward(c, out, in);
  if (is_shard(from, last) && std::holds_alternative<Replicate>(to))
    return comm::GatherFromRegion::forward(c, out, in);
  if (std::holds_alternative<Replicate>(from) && is_shard(to, 0)) return comm::ScatterToSequence::forward(c, out, in);
  if (std::holds_alternative<Replicate>(from) && is_shard(to, last)) return comm::ScatterToRegion::forward(c, out, in);
  if (std::holds_alternative<Replicate>(from) && std::holds_alternative<Partial>(to)) {
    if (c.rank() == 0) return out.data == in.data ? Status::Ok() : copy_(out, in);
    return zero_(out);
  }
  return VLPAR_STATUS(StatusCode::kNotSupported, "redistribute on group '{}': {} -> {} of a tensor {} is not supported",
                      c.options().name, placement_name(from), placement_name(to), in.to_string());
}

}  // namespace vlpar::parallel
