// Shard arithmetic and per-parameter shard descriptions. See include/vlpar/core/shard.hpp.
#include "vlpar/core/shard.hpp"

#include <cstring>

#include "vlpar/core/dispatch.hpp"

namespace vlpar {

Shape ParamShard::local_shape() const {
  Shape s = full_shape;
  if (shard_dim < 0) return s;
  int64_t n = 0;
  for (const ShardPiece& p : pieces) n += p.length;
  s[shard_dim] = n;
  return s;
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

Status init_param_shard(const Context& ctx, TensorView local, const ParamShard& p, uint64_t seed) {
  VLPAR_CHECK(local.shape == p.local_shape(), "init_param_shard: {} is {} but its shard is {}", p.name,
              local.shape.to_string(), p.local_shape().to_string());
  int64_t offsets[kMaxDims] = {};
  if (p.shard_dim < 0) return init_shard(ctx, local, p.full_shape, offsets, seed, p.param_id, p.init);
  // A piece along dim 0 is a contiguous slice; along another dim only a single whole-tensor piece is allowed.
  VLPAR_CHECK(p.shard_dim == 0 || p.pieces.size() == 1,
              "init_param_shard: {} has {} pieces along dim {}; only dim 0 may hold several", p.name,
              p.pieces.size(), p.shard_dim);
  for (const ShardPiece& piece : p.pieces) {
    TensorView part = local.slice(p.shard_dim, piece.local_begin, piece.local_begin + piece.length);
    offsets[p.shard_dim] = piece.full_begin;
    VLPAR_RETURN_IF_ERROR(init_shard(ctx, part, p.full_shape, offsets, seed, p.param_id, p.init));
  }
  return Status::Ok();
}

namespace {

enum class ShardCopy { kShardToFull, kFullToShard };

// Copies between this rank's shard `local` and its place inside `full`, piece by piece: both are viewed as
// [outer, dim, inner] around the shard dim, so each piece is `outer` runs of length·inner contiguous elements.
Status copy_shard(TensorView full, TensorView local, const ParamShard& p, ShardCopy dir) {
  VLPAR_CHECK(full.shape == p.full_shape && full.is_contiguous() && local.is_contiguous() &&
                  full.dtype == local.dtype && local.shape == p.local_shape(),
              "{}: full {} / shard {} do not match {} / {}", p.name, full.to_string(), local.to_string(),
              p.full_shape.to_string(), p.local_shape().to_string());
  const size_t esize = dtype_size(full.dtype);
  auto* f = static_cast<char*>(full.data);
  auto* l = static_cast<char*>(local.data);
  if (p.shard_dim < 0) {
    if (dir == ShardCopy::kShardToFull) std::memcpy(f, l, local.nbytes());
    else std::memcpy(l, f, local.nbytes());
    return Status::Ok();
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < p.shard_dim; ++d) outer *= p.full_shape[d];
  for (int d = p.shard_dim + 1; d < p.full_shape.ndim; ++d) inner *= p.full_shape[d];
  const int64_t full_dim = p.full_shape[p.shard_dim], local_dim = local.size(p.shard_dim);
  for (const ShardPiece& piece : p.pieces)
    for (int64_t o = 0; o < outer; ++o) {
      char* fp = f + size_t((o * full_dim + piece.full_begin) * inner) * esize;
      char* lp = l + size_t((o * local_dim + piece.local_begin) * inner) * esize;
      const size_t n = size_t(piece.length * inner) * esize;
      if (dir == ShardCopy::kShardToFull) std::memcpy(fp, lp, n);
      else std::memcpy(lp, fp, n);
    }
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
