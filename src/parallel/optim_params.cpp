// Optimizer parameters read from the registry. See include/vlpar/parallel/optim_params.hpp.
#include "vlpar/parallel/optim_params.hpp"

namespace vlpar::parallel {

Result<std::vector<OptimParam>> optim_params_from_registry(const nn::ParamRegistry& reg, std::span<const size_t> order,
                                                           const OptimizerGroups& groups) {
  VLPAR_CHECK(reg.materialized(), "optim_params_from_registry: the registry is not materialised");
  std::vector<bool> seen(reg.size(), false);
  std::vector<OptimParam> out;
  for (size_t i : order) {
    VLPAR_CHECK(i < reg.size(), "optim_params_from_registry: index {} is out of range (the registry has {})", i,
                reg.size());
    VLPAR_CHECK(!seen[i], "optim_params_from_registry: parameter {} '{}' appears twice in the order", i, reg.name(i));
    seen[i] = true;
    if (reg.frozen(i)) continue;
    const ParamShard& s = reg.entry(i).shard;
    OptimParam p;
    p.name = s.name;
    p.value = reg.value(i);
    p.grad = reg.grad(i);
    p.weight_decay = s.full_shape.ndim >= 2;
    const int pieces = groups[s.replica].norm_ranks();
    const double holders = double(s.local_shape().numel()) * pieces / double(s.full_shape.numel());
    VLPAR_CHECK(holders >= 1.0 - 1e-9,
                "optim_params_from_registry: parameter {} '{}' holds {} of {} elements, less than 1/{} (the {} "
                "group's norm ranks): it is split over ranks the gradient norm would not sum over",
                i, s.name, s.local_shape().numel(), s.full_shape.numel(), pieces, replica_group_name(s.replica));
    p.norm_weight = 1.0 / holders;
    p.registry_index = i;
    p.replica = s.replica;
    out.push_back(std::move(p));
  }
  for (size_t i = 0; i < reg.size(); ++i) {
    VLPAR_CHECK(seen[i] || reg.frozen(i),
                "optim_params_from_registry: trainable parameter {} '{}' is missing from the order", i, reg.name(i));
  }
  return out;
}

std::vector<size_t> optim_slots(std::span<const OptimParam> params, size_t registry_size) {
  std::vector<size_t> slot(registry_size, SIZE_MAX);
  for (size_t k = 0; k < params.size(); ++k)
    if (params[k].registry_index < registry_size) slot[params[k].registry_index] = k;
  return slot;
}

}  // namespace vlpar::parallel
