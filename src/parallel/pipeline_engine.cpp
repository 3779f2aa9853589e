// The pipeline engine's non-template parts (include/vlpar/parallel/pipeline_engine.hpp, pipeline_stage.hpp).
// Test: tests/unit/test_pipeline_engine.cpp, tests/mpi/test_pipeline_ranks.cpp
#include "vlpar/parallel/pipeline_engine.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <set>

namespace vlpar::pipeline {

std::string to_string(std::span<const TensorSpec> specs) {
  std::string s = "[";
  for (size_t i = 0; i < specs.size(); ++i)
    s += fmt::format("{}{}{}", i ? ", " : "", dtype_name(specs[i].dtype), specs[i].shape.to_string());
  return s + "]";
}

namespace detail {

int message_tag(bool backward, int recv_stage, int mb, int tensor, int num_stages) {
  const int64_t t = ((int64_t(mb) * num_stages + recv_stage) * 2 + (backward ? 1 : 0)) * kMaxPortTensors + tensor;
  return int(t % 32768);  // the MPI-guaranteed tag range (comm_checks.cpp); order per rank pair is validated
}

Status check_engine_setup(const Schedule& s, const comm::Communicator& pp, std::span<const int> local_stages,
                          bool split_backward) {
  VLPAR_RETURN_IF_ERROR(validate(s, /*lowered=*/true));
  VLPAR_CHECK(pp.size() == s.num_ranks(), "pipeline engine: the schedule has {} ranks, the pipeline group '{}' {}",
              s.num_ranks(), pp.options().name, pp.size());
  std::set<int> want, got(local_stages.begin(), local_stages.end());
  for (int st = 0; st < s.num_stages(); ++st)
    if (s.stage_rank[size_t(st)] == pp.rank()) want.insert(st);
  VLPAR_CHECK(got.size() == local_stages.size(), "pipeline engine: rank {} was given a stage twice", pp.rank());
  for (int st : got)
    VLPAR_CHECK(st >= 0 && st < s.num_stages() && want.count(st), "pipeline engine: rank {} was given stage {}, "
                "which the schedule places on {}", pp.rank(), st,
                st >= 0 && st < s.num_stages() ? fmt::format("rank {}", s.stage_rank[size_t(st)]) : "no rank");
  for (int st : want)
    VLPAR_CHECK(got.count(st), "pipeline engine: the schedule runs stage {} on rank {}, which was not given it", st,
                pp.rank());
  if (!split_backward) {
    for (size_t r = 0; r < s.ranks.size(); ++r)
      for (const Action& a : s.ranks[r])
        VLPAR_CHECK_CODE(a.kind != ActionKind::kI && a.kind != ActionKind::kW, StatusCode::kNotSupported,
                         "pipeline engine: the schedule splits the backward (r{}: {}) but the stage type has no "
                         "backward_input/backward_weight (pipeline::SplitStage); use a schedule with full B",
                         r, to_string(a));
  }
  return Status::Ok();
}

Status check_buffers(const char* what, const Action& a, std::span<const Tensor> got, std::span<const TensorSpec> want) {
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < got.size(); ++i)
    same = got[i].shape() == want[i].shape && got[i].dtype() == want[i].dtype;
  if (same) return Status::Ok();
  std::vector<TensorSpec> have;
  for (const Tensor& t : got) have.push_back({t.shape(), t.dtype()});
  const bool fwd = std::string_view(what) == "inputs";
  return VLPAR_STATUS(StatusCode::kInvalidArgument, "{} of stage {} for micro-batch {}: the neighbouring stage {} "
                      "gives {}, stage {}'s port wants {} (each stage's output_port must equal the next stage's "
                      "input_port, both derived from the micro-batch)", what, a.stage, a.mb,
                      fwd ? a.stage - 1 : a.stage + 1, to_string(have), a.stage, to_string(want));
}

Status at_action(const Status& s, int rank, const Action& a, size_t pos, size_t n) {
  return Status(s.code(), fmt::format("pipeline rank {}, action {} (#{} of {}): {}", rank, to_string(a), pos, n,
                                      s.message()));
}

std::vector<TensorView> views(std::span<const Tensor> ts) {
  std::vector<TensorView> v;
  v.reserve(ts.size());
  for (const Tensor& t : ts) v.push_back(t.view());
  return v;
}

}  // namespace detail
}  // namespace vlpar::pipeline
