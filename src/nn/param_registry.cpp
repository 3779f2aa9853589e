// The parameter registry. See include/vlpar/nn/param_registry.hpp.
#include "vlpar/nn/param_registry.hpp"

#include <fmt/ranges.h>

#include <algorithm>

namespace vlpar::nn {

Result<size_t> ParamRegistry::add(ParamShard shard, std::string group, DType dtype) {
  VLPAR_CHECK(!materialized_, "ParamRegistry::add({}): the registry is already materialised", shard.name);
  VLPAR_CHECK(!shard.name.empty(), "ParamRegistry::add: a parameter needs a name");
  VLPAR_CHECK(!by_name_.contains(shard.name), "ParamRegistry::add: parameter {} is registered twice", shard.name);
  VLPAR_CHECK(dtype == DType::kF32 || dtype == DType::kBF16,
              "ParamRegistry::add({}): storage dtype {} is not supported (f32 or bf16)", shard.name, dtype_name(dtype));
  for (int d = 0; d < shard.full_shape.ndim; ++d)
    VLPAR_CHECK(shard.full_shape[d] > 0, "ParamRegistry::add({}): shape {} has an empty dim", shard.name,
                shard.full_shape.to_string());
  const size_t index = entries_.size();
  by_name_.emplace(shard.name, index);
  entries_.push_back(ParamEntry{std::move(shard), std::move(group), dtype, false, {}, {}});
  return index;
}

Status ParamRegistry::freeze_group(std::string_view group) {
  VLPAR_CHECK(!materialized_, "ParamRegistry::freeze_group({}): freeze before materialize()", group);
  bool found = false;
  for (ParamEntry& e : entries_) {
    if (e.group != group) continue;
    e.frozen = true;
    found = true;
  }
  VLPAR_CHECK(found, "ParamRegistry::freeze_group: no parameter belongs to group '{}' (groups: {})", group,
              fmt::join(groups(), ", "));
  return Status::Ok();
}

Status ParamRegistry::materialize(const Context& ctx, Allocator& alloc, std::optional<uint64_t> seed) {
  VLPAR_CHECK(!materialized_, "ParamRegistry::materialize: already materialised");
  for (ParamEntry& e : entries_) {
    const Shape local = e.shard.local_shape();
    if (seed.has_value()) {
      VLPAR_ASSIGN_OR_RETURN(e.value, Tensor::empty(alloc, local, e.dtype, ctx.device));
      VLPAR_RETURN_IF_ERROR(init_param_shard(ctx, e.value, e.shard, *seed));
    } else {
      VLPAR_ASSIGN_OR_RETURN(e.value, Tensor::zeros(alloc, local, e.dtype, ctx.device));
    }
    if (!e.frozen) {
      VLPAR_ASSIGN_OR_RETURN(e.grad, Tensor::zeros(alloc, local, DType::kF32, ctx.device));
    }
  }
  materialized_ = true;
  return Status::Ok();
}

std::optional<size_t> ParamRegistry::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

Result<size_t> ParamRegistry::index_of(std::string_view name) const {
  std::optional<size_t> i = find(name);
  VLPAR_CHECK(i.has_value(), "parameter {} is not in the model", name);
  return *i;
}

std::vector<std::string> ParamRegistry::groups() const {
  std::vector<std::string> out;
  for (const ParamEntry& e : entries_)
    if (std::find(out.begin(), out.end(), e.group) == out.end()) out.push_back(e.group);
  return out;
}

std::vector<size_t> ParamRegistry::trainable() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (!entries_[i].frozen) out.push_back(i);
  return out;
}

std::vector<TensorView> ParamRegistry::trainable_values() const {
  std::vector<TensorView> out;
  for (size_t i : trainable()) out.push_back(value(i));
  return out;
}

std::vector<TensorView> ParamRegistry::trainable_grads() const {
  std::vector<TensorView> out;
  for (size_t i : trainable()) out.push_back(grad(i));
  return out;
}

Status ParamRegistry::zero_grads() {
  for (ParamEntry& e : entries_)
    if (!e.grad.view().empty()) VLPAR_RETURN_IF_ERROR(zero_(e.grad));
  return Status::Ok();
}

ParamCounts ParamRegistry::counts() const {
  ParamCounts c;
  for (const ParamEntry& e : entries_) {
    const int64_t local = e.shard.local_shape().numel();
    c.params += local;
    c.full_params += e.shard.full_shape.numel();
    c.value_bytes += local * int64_t(dtype_size(e.dtype));
    if (!e.frozen) {
      c.trainable += local;
      c.grad_bytes += local * 4;  // f32 whatever the value's dtype
    }
  }
  return c;
}

}  // namespace vlpar::nn
