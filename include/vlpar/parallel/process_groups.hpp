#pragma once
// ProcessGroups: this rank's communicator on every mesh axis, built once from the world communicator and passed
// explicitly (`const ProcessGroups&`) to every component that communicates. No global state, no fallback.
//
// create() is collective over the world: every rank calls it with the same config, and it calls
// world.split(color = group index, key = index in group) once per axis in kAllAxes order, so the sub-communicator
// of axis A holds exactly Mesh::groups(A)[group], ranked by the mesh's order. Axes of size 1 still get a (size-1)
// communicator, so callers never special-case them. A const ProcessGroups fixes which groups exist; the
// communicators it hands out are used (non-const) for communication.
// Tests: tests/unit/test_mesh.cpp (ProcessGroupsFake.*, no MPI) and tests/mpi/test_process_groups.cpp
//        (mpirun -np 4: tp2×dp2, membership checked by all-reducing rank-encoded values).
#include <array>
#include <memory>

#include "vlpar/comm/communicator.hpp"
#include "vlpar/core/status.hpp"
#include "vlpar/parallel/mesh.hpp"

namespace vlpar::parallel {

class ProcessGroups {
 public:
  /// @brief Validates cfg against dims (errors as ParallelConfig::validate), checks world.size() == cfg.world,
  /// then splits `world` once per axis. Sub-communicators are named "<axis>[<group>]" (e.g. "dp_cp[1]") and
  /// inherit the world's watchdog timeout. A split that disagrees with the mesh on any rank fails create() on
  /// every rank (one i32 max all-reduce over the world at the end). `world` need not outlive the result.
  static Result<ProcessGroups> create(comm::Communicator& world, const ParallelConfig& cfg,
                                      const ModelDims& dims = {});

  const Mesh& mesh() const { return mesh_; }
  int world_rank() const { return world_rank_; }
  /// @brief This rank's group on `axis`; its rank() is Mesh::slot(axis, world_rank()).index.
  comm::Communicator& get(Axis axis) const { return *groups_[size_t(axis)]; }

  comm::Communicator& tp() const { return get(Axis::kTp); }
  comm::Communicator& cp() const { return get(Axis::kCp); }
  comm::Communicator& dp() const { return get(Axis::kDp); }
  comm::Communicator& pp() const { return get(Axis::kPp); }
  comm::Communicator& dp_cp() const { return get(Axis::kDpCp); }
  comm::Communicator& tp_cp() const { return get(Axis::kTpCp); }
  comm::Communicator& ep() const { return get(Axis::kEp); }
  comm::Communicator& etp() const { return get(Axis::kEtp); }
  comm::Communicator& edp() const { return get(Axis::kEdp); }
  comm::Communicator& vision_tp() const { return get(Axis::kVisionTp); }
  comm::Communicator& vision_dp() const { return get(Axis::kVisionDp); }

 private:
  ProcessGroups(Mesh mesh, int world_rank) : mesh_(std::move(mesh)), world_rank_(world_rank) {}

  Mesh mesh_;
  int world_rank_ = 0;
  std::array<std::unique_ptr<comm::Communicator>, kAllAxes.size()> groups_;  // indexed by Axis
};

}  // namespace vlpar::parallel
