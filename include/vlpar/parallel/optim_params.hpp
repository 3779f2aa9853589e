#pragma once
// What the optimizer needs to know about each trainable parameter, and how to read it from the parameter registry
// (DESIGN §2: gradient reduction and the optimizer keep no list of their own).
//
//   weight_decay  AdamW's decoupled decay applies to matrices only (ndim ≥ 2), never to norms or biases;
//   norm_weight   1 / (ranks of the norm groups that hold a copy of each element): the global gradient norm sums
//                 Σg² over the norm groups of the parameter's replica group (tp for dense parameters), and an
//                 element held by r of those ranks (replicated norms, replicated kv heads) must count once. From
//                 the shard: full / (norm ranks · local) elements.
//   replica       the parameter's replica group (ParamShard::replica): which communicators reduce its gradient.
// Test: tests/mpi/test_distributed_optimizer.cpp (through the optimizer), tests/unit/test_optim_params.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vlpar/core/status.hpp"
#include "vlpar/core/tensor.hpp"
#include "vlpar/nn/param_registry.hpp"
#include "vlpar/parallel/optimizer_groups.hpp"

namespace vlpar::parallel {

struct OptimParam {
  std::string name;
  TensorView value;          // this rank's shard, contiguous CPU, f32 (bf16/f16 need zero1's fp32 master)
  TensorView grad;           // contiguous f32, same element count
  bool weight_decay = true;
  double norm_weight = 1.0;  // 1 / (norm-group ranks holding a copy of each element)
  size_t registry_index = SIZE_MAX;  // its index in the registry it came from (SIZE_MAX: not from a registry)
  ReplicaGroup replica = ReplicaGroup::kDense;
};

/// @brief The trainable parameters of `reg` in `order` (registry indices, e.g. the order the model's backward
/// finishes them: that is the bucket order). Frozen indices in `order` are skipped; a trainable parameter missing
/// from `order`, or an index repeated or out of range, is an error naming it. `groups` gives, per replica group,
/// the norm groups the parameters are sharded over (their sizes set norm_weight).
Result<std::vector<OptimParam>> optim_params_from_registry(const nn::ParamRegistry& reg, std::span<const size_t> order,
                                                           const OptimizerGroups& groups);

/// @brief Registry index → position in `params` (what DistributedOptimizer::grad_ready takes), SIZE_MAX for a
/// parameter the optimizer does not hold (a frozen one). `registry_size` = the registry's size().
std::vector<size_t> optim_slots(std::span<const OptimParam> params, size_t registry_size);

}  // namespace vlpar::parallel
