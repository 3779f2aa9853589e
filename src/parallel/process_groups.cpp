// ProcessGroups: one Communicator::split per mesh axis. See include/vlpar/parallel/process_groups.hpp.
// Tests: tests/unit/test_mesh.cpp (fake communicator) and tests/mpi/test_process_groups.cpp (mpirun -np 4).
#include "vlpar/parallel/process_groups.hpp"

#include <fmt/format.h>

namespace vlpar::parallel {

Result<ProcessGroups> ProcessGroups::create(comm::Communicator& world, const ParallelConfig& cfg,
                                            const ModelDims& dims) {
  VLPAR_ASSIGN_OR_RETURN(Mesh mesh, Mesh::create(cfg, dims));
  VLPAR_CHECK(world.size() == mesh.world(), "ProcessGroups: the {} communicator has {} ranks but the config says world={}",
              world.options().name, world.size(), mesh.world());
  ProcessGroups pg(std::move(mesh), world.rank());
  for (Axis axis : kAllAxes) {
    const GroupSlot s = pg.mesh_.slot(axis, pg.world_rank_);
    comm::CommOptions opt;
    opt.name = fmt::format("{}[{}]", axis_name(axis), s.group);
    opt.timeout = world.options().timeout;
    VLPAR_ASSIGN_OR_RETURN(auto sub, world.split(s.group, s.index, std::move(opt)));
    // A backend whose split disagrees with the mesh would silently mix up shards: refuse it.
    VLPAR_CHECK_CODE(sub != nullptr && sub->size() == s.size && sub->rank() == s.index, StatusCode::kInternal,
                     "ProcessGroups: split for {} gave rank {} of {} but the mesh expects rank {} of {}",
                     axis_name(axis), sub ? sub->rank() : -1, sub ? sub->size() : -1, s.index, s.size);
    pg.groups_[size_t(axis)] = std::move(sub);
  }
  return pg;
}

}  // namespace vlpar::parallel
