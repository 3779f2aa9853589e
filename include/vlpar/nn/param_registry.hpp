#pragma once
// The one parameter registry (DESIGN §2): every parameter of a model is registered once, with its HF-compatible
// dotted name, full logical shape and this rank's shard (ParamShard: shard dim, pieces, Philox id, init rule),
// storage dtype (f32 or bf16), freeze group and frozen flag. materialize() then allocates each value and — for
// trainable parameters only — a zeroed f32 gradient (DESIGN §6: gradients accumulate in f32 over micro-batches),
// and initialises the values layout-invariantly (init_param_shard; a bf16 value is the f32 init rounded once).
// Initialisation, HF import/export, checkpoints, gradient reduction, the optimizer, freezing and memory reports
// read this registry; none keeps its own list. Order = registration order (the model-wide param index).
//
// Lifecycle:  add(...) × P  →  freeze_group(...)  →  materialize(ctx, alloc, seed)  →  value(i) / grad(i)
// Freezing after materialize() is an error (a frozen parameter must never allocate a gradient).
// Test: tests/unit/test_param_registry.cpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vlpar/core/allocator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/dtype.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/core/shard.hpp"

namespace vlpar::nn {

struct ParamEntry {
  ParamShard shard;          // name, full shape, this rank's pieces, Philox id, init rule
  std::string group;         // freeze unit, e.g. "vision", "merger", "language_model"
  DType dtype = DType::kF32;  // storage dtype of the value (f32 or bf16); the gradient is always f32
  bool frozen = false;
  Tensor value;  // local shard, shaped shard.local_shape()
  Tensor grad;   // same shape; empty when frozen
};

/// Sizes of the registry in elements (this rank's shards) and bytes, for memory reports.
struct ParamCounts {
  int64_t params = 0;           // local elements of every parameter
  int64_t trainable = 0;        // local elements of the trainable ones
  int64_t full_params = 0;      // elements of the full logical tensors (what the model "has")
  int64_t value_bytes = 0;
  int64_t grad_bytes = 0;
};

class ParamRegistry {
 public:
  ParamRegistry() = default;
  ParamRegistry(ParamRegistry&&) = default;
  ParamRegistry& operator=(ParamRegistry&&) = default;

  /// @brief Registers a parameter (names unique, registry not yet materialised). Returns its index.
  Result<size_t> add(ParamShard shard, std::string group, DType dtype = DType::kF32);
  /// @brief Marks every parameter of `group` frozen (no gradient buffer, no weight-gradient GEMM). An unknown
  /// group name is an error (it is almost always a typo).
  Status freeze_group(std::string_view group);
  /// @brief Allocates values and trainable gradients (zeroed) and initialises values from `seed`; without a seed
  /// the values are zero-filled (a checkpoint load overwrites them next, so the Philox init would be wasted).
  Status materialize(const Context& ctx, Allocator& alloc, std::optional<uint64_t> seed);

  size_t size() const { return entries_.size(); }
  bool materialized() const { return materialized_; }
  const ParamEntry& entry(size_t i) const { return entries_.at(i); }
  const std::string& name(size_t i) const { return entries_.at(i).shard.name; }
  bool frozen(size_t i) const { return entries_.at(i).frozen; }
  /// @brief This rank's value shard; the gradient (empty view when frozen).
  TensorView value(size_t i) const { return entries_.at(i).value.view(); }
  TensorView grad(size_t i) const { return entries_.at(i).grad.view(); }
  std::optional<size_t> find(std::string_view name) const;
  /// @brief Index of `name` or an error naming it (for importers).
  Result<size_t> index_of(std::string_view name) const;
  /// @brief The distinct group names in registration order.
  std::vector<std::string> groups() const;
  /// @brief Indices of trainable parameters, in registration order.
  std::vector<size_t> trainable() const;
  /// @brief Value and gradient views of the trainable parameters (what an optimizer steps).
  std::vector<TensorView> trainable_values() const;
  std::vector<TensorView> trainable_grads() const;

  Status zero_grads();
  ParamCounts counts() const;

 private:
  std::vector<ParamEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;
  bool materialized_ = false;
};

}  // namespace vlpar::nn
