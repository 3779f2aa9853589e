#pragma once
// Layout-invariant parameter initialisation (DESIGN §2, issue: Philox keyed by (seed, param id, element)).
// init_shard() fills the block of a full logical tensor that a shard holds; every element gets the value the
// unsharded tensor would have at the same global index, so TP/EP shards are exact slices of the full weight.
#include <cstdint>

#include "vlpar/core/context.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

enum class InitKind : uint8_t { kZeros, kOnes, kConstant, kNormal, kUniform };

struct InitRule {
  InitKind kind = InitKind::kZeros;
  float a = 0.f;  // kConstant: value; kNormal: mean; kUniform: low
  float b = 0.f;  // kNormal: std;  kUniform: high
  static InitRule zeros() { return {InitKind::kZeros, 0.f, 0.f}; }
  static InitRule ones() { return {InitKind::kOnes, 0.f, 0.f}; }
  static InitRule constant(float v) { return {InitKind::kConstant, v, 0.f}; }
  static InitRule normal(float mean, float std) { return {InitKind::kNormal, mean, std}; }
  static InitRule uniform(float lo, float hi) { return {InitKind::kUniform, lo, hi}; }
};

/// @brief Fills `shard` (contiguous, any floating dtype, CPU) with the values of the full logical tensor of
/// shape `full_shape` at the block starting at `offsets` (one offset per dim; shard.shape + offsets must fit).
/// @param seed     run seed
/// @param param_id stable id of the parameter (the registry assigns it)
Status init_shard(const Context& ctx, TensorView shard, const Shape& full_shape, const int64_t* offsets,
                  uint64_t seed, uint32_t param_id, InitRule rule);

/// @brief init_shard for an unsharded tensor.
Status init_full(const Context& ctx, TensorView t, uint64_t seed, uint32_t param_id, InitRule rule);

}  // namespace vlpar
