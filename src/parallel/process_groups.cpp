// ProcessGroups: one Communicator::split per mesh axis. See include/vlpar/parallel/process_groups.hpp.
// Tests: tests/unit/test_mesh.cpp (fake communicator) and tests/mpi/test_process_groups.cpp (mpirun -np 4).
#include "vlpar/parallel/process_groups.hpp"

#include <fmt/core.h>

namespace vlpar::parallel {

Result<ProcessGroups> ProcessGroups::create(comm::Communicator& world, const ParallelConfig& cfg,
                                            const ModelDims& dims) {
  VLPAR_ASSIGN_OR_RETURN(Mesh mesh, Mesh::create(cfg, dims));
  VLPAR_CHECK(world.size() == mesh.world(), "ProcessGroups: the {} communicator has {} ranks but the config says world={}",
              world.options().name, world.size(), mesh.world());
  ProcessGroups pg(std::move(mesh), world.rank());
  // Every rank makes the same split calls whatever it finds, and the ranks agree on the outcome at the end, so a
  // disagreement seen on one rank fails create() on all of them instead of leaving the others waiting in a split.
  Status mismatch;
  for (Axis axis : kAllAxes) {
    const GroupSlot s = pg.mesh_.slot(axis, pg.world_rank_);
    comm::CommOptions opt;
    opt.name = fmt::format("{}[{}]", axis_name(axis), s.group);
    opt.timeout = world.options().timeout;
    VLPAR_ASSIGN_OR_RETURN(auto sub, world.split(s.group, s.index, std::move(opt)));
    VLPAR_CHECK_CODE(sub != nullptr, StatusCode::kInternal, "ProcessGroups: split for {} returned no communicator",
                     axis_name(axis));
    // A backend whose split disagrees with the mesh would silently mix up shards: refuse it.
    if (mismatch.ok() && (sub->size() != s.size || sub->rank() != s.index))
      mismatch = VLPAR_STATUS(StatusCode::kInternal,
                              "ProcessGroups: split for {} gave rank {} of {} but the mesh expects rank {} of {}",
                              axis_name(axis), sub->rank(), sub->size(), s.index, s.size);
    pg.groups_[size_t(axis)] = std::move(sub);
  }
  int32_t any_mismatch = mismatch.ok() ? 0 : 1;
  VLPAR_RETURN_IF_ERROR(world.all_reduce(TensorView(&any_mismatch, DType::kI32, {1}), comm::ReduceOp::kMax));
  VLPAR_RETURN_IF_ERROR(mismatch);
  VLPAR_CHECK_CODE(any_mismatch == 0, StatusCode::kInternal,
                   "ProcessGroups: another rank's split disagreed with the mesh (its error names the axis)");
  return pg;
}

}  // namespace vlpar::parallel
