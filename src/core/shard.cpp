// Shard arithmetic and per-parameter shard descriptions. See include/vlpar/core/shard.hpp.
#include "vlpar/core/shard.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "vlpar/core/box_walk.hpp"
#include "vlpar/core/dispatch.hpp"

namespace vlpar {

Shape ParamShard::local_shape() const {
  Shape s = full_shape;
  auto length = [](const std::vector<ShardPiece>& pieces) {
    int64_t n = 0;
    for (const ShardPiece& p : pieces) n += p.length;
    return n;
  };
  if (shard_dim >= 0) s[shard_dim] = length(pieces);
  if (inner_dim >= 0) s[inner_dim] = length(inner_pieces);
  return s;
}

std::vector<ShardBox> ParamShard::boxes() const {
  ShardBox whole;
  for (int d = 0; d < full_shape.ndim; ++d) whole.length[d] = full_shape[d];
  // Each split dim's pieces (a dim that is not split: one whole piece); the boxes are their product.
  const auto along = [&](int dim, const std::vector<ShardPiece>& pieces) {
    return dim < 0 ? std::vector<ShardPiece>{ShardPiece{0, 0, 0}} : pieces;
  };
  std::vector<ShardBox> out;
  for (const ShardPiece& p : along(shard_dim, pieces))
    for (const ShardPiece& q : along(inner_dim, inner_pieces)) {
      ShardBox b = whole;
      for (const auto& [dim, piece] : {std::pair{shard_dim, p}, std::pair{inner_dim, q}}) {
        if (dim < 0) continue;
        b.local_begin[dim] = piece.local_begin;
        b.full_begin[dim] = piece.full_begin;
        b.length[dim] = piece.length;
      }
      out.push_back(b);
    }
  return out;
}

ParamShard make_split_param(std::string name, Shape full_shape, int shard_dim, Range block, uint32_t param_id,
                            InitRule init) {
  ParamShard p;
  p.name = std::move(name);
  p.full_shape = full_shape;
  p.shard_dim = shard_dim;
  p.pieces = {ShardPiece{0, block.begin, block.size()}};
  p.param_id = param_id;
  p.init = init;
  return p;
}

ParamShard make_replicated_param(std::string name, Shape full_shape, uint32_t param_id, InitRule init) {
  ParamShard p;
  p.name = std::move(name);
  p.full_shape = full_shape;
  p.param_id = param_id;
  p.init = init;
  return p;
}

ParamShard make_fused_gate_up_param(std::string name, int64_t intermediate, int64_t hidden, Range block,
                                    uint32_t param_id, InitRule init) {
  ParamShard p;
  p.name = std::move(name);
  p.full_shape = Shape{2 * intermediate, hidden};
  p.shard_dim = 0;
  p.pieces = {ShardPiece{0, block.begin, block.size()},
              ShardPiece{block.size(), intermediate + block.begin, block.size()}};
  p.param_id = param_id;
  p.init = init;
  return p;
}

ParamShard split_inner(ParamShard p, int dim, Range block, bool fused) {
  p.inner_dim = dim;
  const int64_t half = p.full_shape[dim] / 2;
  p.inner_pieces = {ShardPiece{0, block.begin, block.size()}};
  if (fused) p.inner_pieces.push_back(ShardPiece{block.size(), half + block.begin, block.size()});
  return p;
}

namespace {

enum class ShardCopy { kShardToFull, kFullToShard };

/// Row-major element strides of a shape.
void strides_of(const Shape& s, int64_t* out) {
  int64_t acc = 1;
  for (int d = s.ndim - 1; d >= 0; --d) {
    out[d] = acc;
    acc *= s[d];
  }
}

/// Calls fn(local_element_offset, full_element_offset, elements) for each contiguous run of box `b` (core/
/// box_walk.hpp with the full tensor as source and the shard as destination).
template <class F>
void walk_box(const ShardBox& b, const Shape& full, const Shape& local, F&& fn) {
  vlpar::walk_box(full.ndim, b.length, full.dims, b.full_begin, local.dims, b.local_begin, fn);
}

}  // namespace

Status init_param_shard(const Context& ctx, TensorView local, const ParamShard& p, uint64_t seed) {
  VLPAR_CHECK(local.shape == p.local_shape() && local.is_contiguous() && local.device.is_cpu(), "init_param_shard: {} "
              "is {} but its shard is a contiguous host {} (initialise on the host, then copy_)", p.name,
              local.to_string(), p.local_shape().to_string());
  const Shape ls = p.local_shape();
  const size_t es = dtype_size(local.dtype);
  int64_t lstr[kMaxDims] = {};
  strides_of(ls, lstr);
  for (const ShardBox& b : p.boxes()) {
    Shape bs = p.full_shape;
    for (int d = 0; d < bs.ndim; ++d) bs[d] = b.length[d];
    if (bs.numel() == 0) continue;
    // init_shard fills a contiguous block: a box contiguous in the local layout (whole in every dim after the
    // first) is filled in place, any other through a box-shaped staging buffer.
    bool in_place = true;
    for (int d = 1; d < bs.ndim; ++d) in_place = in_place && bs[d] == ls[d];
    auto* base = static_cast<char*>(local.data);
    if (in_place) {
      int64_t at = 0;
      for (int d = 0; d < bs.ndim; ++d) at += b.local_begin[d] * lstr[d];
      VLPAR_RETURN_IF_ERROR(init_shard(ctx, TensorView(base + size_t(at) * es, local.dtype, bs), p.full_shape,
                                       b.full_begin, seed, p.param_id, p.init));
      continue;
    }
    std::vector<char> staging(size_t(bs.numel()) * es);
    VLPAR_RETURN_IF_ERROR(init_shard(ctx, TensorView(staging.data(), local.dtype, bs), p.full_shape, b.full_begin,
                                     seed, p.param_id, p.init));
    ShardBox within = b;  // the staging buffer is the box itself, as a "full" tensor of shape bs
    for (int d = 0; d < bs.ndim; ++d) within.full_begin[d] = 0;
    walk_box(within, bs, ls, [&](int64_t lo, int64_t so, int64_t n) {
      std::memcpy(base + size_t(lo) * es, staging.data() + size_t(so) * es, size_t(n) * es);
    });
  }
  return Status::Ok();
}

namespace {

// Copies between this rank's shard `local` and its place inside `full`, box by box.
Status copy_shard(TensorView full, TensorView local, const ParamShard& p, ShardCopy dir) {
  VLPAR_CHECK(full.shape == p.full_shape && full.is_contiguous() && local.is_contiguous() &&
                  full.dtype == local.dtype && local.shape == p.local_shape(),
              "{}: full {} / shard {} do not match {} / {}", p.name, full.to_string(), local.to_string(),
              p.full_shape.to_string(), p.local_shape().to_string());
  const size_t es = dtype_size(full.dtype);
  auto* f = static_cast<char*>(full.data);
  auto* l = static_cast<char*>(local.data);
  for (const ShardBox& b : p.boxes())
    walk_box(b, p.full_shape, local.shape, [&](int64_t lo, int64_t fo, int64_t n) {
      if (dir == ShardCopy::kShardToFull) std::memcpy(f + size_t(fo) * es, l + size_t(lo) * es, size_t(n) * es);
      else std::memcpy(l + size_t(lo) * es, f + size_t(fo) * es, size_t(n) * es);
    });
  return Status::Ok();
}

}  // namespace

Status scatter_shard_into_full(TensorView full, TensorView local, const ParamShard& p) {
  return copy_shard(full, local, p, ShardCopy::kShardToFull);
}

Status gather_shard_from_full(TensorView local, TensorView full, const ParamShard& p) {
  return copy_shard(full, local, p, ShardCopy::kFullToShard);
}

}  // namespace vlpar
