#pragma once
// Shared pieces of the parallel-equivalence tests (tests/mpi/test_tp_equivalence.cpp, test_data_parallel.cpp,
// test_tp_dp.cpp): the single-process run every rank computes for itself (TP1 on the whole batch, same seed), the
// fp64 reference on its weights, and the gathering of a tensor-parallel model's gradient shards into full shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nn_reference.hpp"
#include "test_util.hpp"
#include "vlpar/comm/communicator.hpp"
#include "vlpar/nn/decoder.hpp"

namespace vlpar::test {

inline constexpr uint64_t kNnSeed = 424242;

/// What a run yields, in full shapes and fp64, DecoderModel param order.
struct FullRun {
  double loss = 0;
  int64_t num_valid = 0;
  std::vector<std::vector<double>> grads;
  std::vector<std::vector<double>> weights;
};

/// The single-process run: TP1 (no communicator) on `batch`, computed locally on every rank.
inline FullRun single_process_run(const nn::TransformerConfig& cfg, HostBatch batch) {
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  FullRun out;
  auto model = nn::DecoderModel::create(ctx, cfg, {}, kNnSeed, alloc);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return out;
  nn::DecoderStash st;
  const Batch b = batch_views(batch);
  auto r = model->forward(ctx, b, st);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return out;
  const Status s = model->backward(ctx, b, st);
  EXPECT_TRUE(s.ok()) << s.to_string();
  out.loss = r->loss;
  out.num_valid = r->num_valid;
  out.grads = views_as<double>(model->grads());
  out.weights = views_as<double>(model->params());
  return out;
}

/// @brief Full-shape fp64 copies of `local` (one view per parameter, this rank's shards) assembled over the tp
/// group: all-gather the shards, put rank q's shard where param_layout(cfg, tp, q) says. Elements held by several
/// ranks (replicated params, replicated kv heads) must agree bit for bit across them, else the test fails.
inline std::vector<std::vector<double>> gather_full(const nn::TransformerConfig& cfg, comm::Communicator* tp_comm,
                                                    bool sp, const std::vector<TensorView>& local,
                                                    const std::string& what) {
  Allocator alloc;
  const int tp = tp_comm ? tp_comm->size() : 1;
  std::vector<std::vector<ParamShard>> layouts;
  for (int q = 0; q < tp; ++q) layouts.push_back(nn::DecoderModel::param_layout(cfg, tp, q, sp));
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < local.size(); ++i) {
    const int64_t n = local[i].numel();
    Tensor all = Tensor::empty(alloc, {tp * n}, DType::kF32).value();
    if (tp > 1) {
      const Status s = tp_comm->all_gather(all, local[i]);
      EXPECT_TRUE(s.ok()) << s.to_string();
    } else {
      EXPECT_TRUE(copy_(TensorView(all.view().data, DType::kF32, local[i].shape), local[i]).ok());
    }
    const ParamShard& p0 = layouts[0][i];
    Tensor full = Tensor::zeros(alloc, p0.full_shape, DType::kF32).value();
    Tensor written = Tensor::zeros(alloc, p0.full_shape, DType::kF32).value();
    for (int q = 0; q < tp; ++q) {
      const ParamShard& p = layouts[size_t(q)][i];
      TensorView shard(all.ptr<float>() + q * n, DType::kF32, p.local_shape());
      Tensor mine = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
      Tensor mark = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
      Tensor ones = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
      for (int64_t k = 0; k < ones.numel(); ++k) ones.ptr<float>()[k] = 1.f;
      EXPECT_TRUE(scatter_shard_into_full(mine, shard, p).ok());
      EXPECT_TRUE(scatter_shard_into_full(mark, ones, p).ok());
      for (int64_t k = 0; k < full.numel(); ++k) {
        if (mark.ptr<float>()[k] == 0.f) continue;
        if (written.ptr<float>()[k] != 0.f && full.ptr<float>()[k] != mine.ptr<float>()[k]) {
          ADD_FAILURE() << what << " " << p.name << ": element " << coords(p.full_shape, k) << " differs between "
                        << "ranks holding it: " << full.ptr<float>()[k] << " vs rank " << q << "'s "
                        << mine.ptr<float>()[k];
          break;
        }
        full.ptr<float>()[k] = mine.ptr<float>()[k];
        written.ptr<float>()[k] = 1.f;
      }
    }
    for (int64_t k = 0; k < written.numel(); ++k)
      if (written.ptr<float>()[k] == 0.f) {
        ADD_FAILURE() << what << " " << p0.name << ": element " << coords(p0.full_shape, k) << " held by no rank";
        break;
      }
    out.push_back(to_f64(full));
  }
  return out;
}

/// @brief True on every rank iff `ok` on every rank: lets a test stop a loop of collectives on all ranks together
/// (one rank returning early would leave its peers waiting in the next collective until the watchdog fires).
inline bool all_ranks_ok(comm::Communicator& c, bool ok) {
  int32_t bad = ok ? 0 : 1;
  EXPECT_TRUE(c.all_reduce(TensorView(&bad, DType::kI32, {1}), comm::ReduceOp::kSum).ok());
  return bad == 0;
}

/// @brief Loss and every gradient of a parallel run against the single-process run (kParallelEquivalence).
inline void expect_matches_single(const nn::TransformerConfig& cfg, const FullRun& single, const HostBatch& batch,
                                  double par_loss, const std::vector<std::vector<double>>& par_grads,
                                  const std::string& what) {
  const auto ref = reference_decoder<double>(cfg, single.weights, batch);
  const auto layout = nn::DecoderModel::param_layout(cfg, 1, 0, false);
  EXPECT_TRUE(matches_single_process(what + " loss", std::vector<double>{par_loss}, std::vector<double>{single.loss},
                                     std::vector<double>{ref.loss}, Shape{1}));
  ASSERT_EQ(par_grads.size(), layout.size());
  for (size_t i = 0; i < layout.size(); ++i)
    EXPECT_TRUE(matches_single_process(what + " grad " + layout[i].name, par_grads[i], single.grads[i], ref.grads[i],
                                       layout[i].full_shape));
}

}  // namespace vlpar::test
