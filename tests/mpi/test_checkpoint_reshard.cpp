// Checkpoints across a real multi-process layout (mpirun -np 4): the ranks form TP2×DP2 (ProcessGroups, tp fastest),
// each holds a decoder layer's parameters (column/row-parallel splits, the two-piece fused gate/up weight, a bf16
// row-parallel weight, a vocab-parallel embedding, replicated norms) and per-parameter optimizer moments, all
// initialised layout-invariantly by init_param_shard; save_checkpoint writes them collectively (dp replicas > 0 skip
// their copy). Every rank then loads the checkpoint at TP1 (full tensors), at TP4 and back at TP2 and compares bit for
// bit with init_param_shard of that layout. Also: a rank's error aborts the save on every rank and commits nothing.
// Run: ctest --test-dir build/cpu -R test_checkpoint_reshard   (or: mpirun -np 4 ./build/cpu/tests/test_checkpoint_reshard)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi/mpi_test_util.hpp"
#include "vlpar/io/checkpoint.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/parallel/process_groups.hpp"

namespace vlpar::test {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSeed = 1234;
constexpr int64_t kHidden = 16, kHeadsDim = 16, kKvDim = 8, kInter = 24, kVocab = 32;

enum class Split { kReplicated, kDim0, kDim1, kGateUp };
struct Param {
  std::string name;
  Shape full;
  Split split;
  DType dtype;
  InitRule init;
};

const std::vector<Param>& params() {
  static const std::vector<Param> p = {
      {"model.embed_tokens.weight", {kVocab, kHidden}, Split::kDim0, DType::kF32, InitRule::normal(0.f, 0.02f)},
      {"model.layers.0.input_layernorm.weight", {kHidden}, Split::kReplicated, DType::kF32, InitRule::ones()},
      {"model.layers.0.self_attn.q_proj.weight", {kHeadsDim, kHidden}, Split::kDim0, DType::kF32,
       InitRule::normal(0.f, 0.02f)},
      {"model.layers.0.self_attn.k_proj.weight", {kKvDim, kHidden}, Split::kDim0, DType::kF32,
       InitRule::normal(0.f, 0.02f)},
      {"model.layers.0.self_attn.o_proj.weight", {kHidden, kHeadsDim}, Split::kDim1, DType::kBF16,
       InitRule::normal(0.f, 0.02f)},
      {"model.layers.0.mlp.gate_up_proj.weight", {2 * kInter, kHidden}, Split::kGateUp, DType::kF32,
       InitRule::uniform(-0.1f, 0.1f)},
      {"model.layers.0.mlp.down_proj.weight", {kHidden, kInter}, Split::kDim1, DType::kF32,
       InitRule::normal(0.f, 0.02f)},
      {"model.norm.weight", {kHidden}, Split::kReplicated, DType::kBF16, InitRule::uniform(0.5f, 1.5f)},
  };
  return p;
}

/// Parameter `p` with Philox id `id` as tp rank `tr` of `tp` holds it.
ParamShard shard_of(const Param& p, uint32_t id, int tp, int tr) {
  switch (p.split) {
    case Split::kReplicated: return make_replicated_param(p.name, p.full, id, p.init);
    case Split::kDim0: return make_split_param(p.name, p.full, 0, even_shard(p.full[0], tp, tr), id, p.init);
    case Split::kDim1: return make_split_param(p.name, p.full, 1, even_shard(p.full[1], tp, tr), id, p.init);
    case Split::kGateUp:
      return make_fused_gate_up_param(p.name, kInter, kHidden, even_shard(kInter, tp, tr), id, p.init);
  }
  return {};
}

/// Every checkpoint tensor of the model at tp rank `tr` of `tp`: each parameter and its fp32 "exp_avg" moment, filled
/// by init_param_shard (the same seed gives the same full tensors at any tp). `replica` marks dp copies.
struct Shards {
  Allocator alloc;
  std::vector<Tensor> bufs;
  std::vector<io::CheckpointTensor> tensors;
};

void build(Shards& s, int tp, int tr, int replica, bool zeroed) {
  Context ctx;
  uint32_t id = 0;
  for (const Param& p : params())
    for (const bool moment : {false, true}) {
      ParamShard sh = shard_of(p, ++id, tp, tr);
      const DType dt = moment ? DType::kF32 : p.dtype;
      if (moment) sh.init = InitRule::normal(0.f, 1.f);
      Tensor t = Tensor::zeros(s.alloc, sh.local_shape(), dt).value();
      if (!zeroed) {
        const Status st = init_param_shard(ctx, t, sh, kSeed);
        EXPECT_TRUE(st.ok()) << st.to_string();
      }
      s.tensors.push_back(io::sharded_tensor(moment ? "optim.exp_avg." + p.name : p.name, t, sh, replica));
      s.bufs.push_back(std::move(t));
    }
}

/// Loads `dir` into this rank's shards of layout tp (rank tr) and compares with init_param_shard, bit for bit.
void expect_load(const std::string& dir, int tp, int tr, bool verify_replicas) {
  Shards got, want;
  build(got, tp, tr, 0, /*zeroed=*/true);
  build(want, tp, tr, 0, /*zeroed=*/false);
  std::string user;
  const Status s = io::load_checkpoint(dir, got.tensors, &user, {.verify_replicas = verify_replicas});
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(user, R"({"lr":0.001,"tokens_seen":12345})");
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    const TensorView a = got.tensors[i].local, b = want.tensors[i].local;
    ASSERT_EQ(a.nbytes(), b.nbytes()) << got.tensors[i].name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << got.tensors[i].name << " at tp=" << tp << " rank " << tr;
    bool nonzero = false;  // guard against a vacuous pass (both all-zero)
    for (size_t k = 0; k < a.nbytes(); ++k) nonzero = nonzero || static_cast<const unsigned char*>(a.data)[k] != 0;
    EXPECT_TRUE(nonzero) << got.tensors[i].name;
  }
}

/// A checkpoint root every rank agrees on (rank 0's pid, broadcast).
std::string shared_root(comm::Communicator& world) {
  int64_t pid = int64_t(::getpid());
  EXPECT_TRUE(world.broadcast(TensorView(&pid, DType::kI64, {1}), 0).ok());
  return (fs::temp_directory_path() / ("vlpar_ckpt_reshard_" + std::to_string(pid))).string();
}

io::CheckpointWriteSpec spec_for(const std::string& root, int64_t step, const Shards& s, int dp_rank) {
  io::CheckpointWriteSpec spec;
  spec.root = root;
  spec.step = step;
  spec.tensors = s.tensors;
  spec.layout_json = R"({"tp":2,"dp":2})";
  spec.user_json = R"({"lr":0.001,"tokens_seen":12345})";
  spec.rank_json = "{\"dp_rank\":" + std::to_string(dp_rank) + "}";
  spec.keep_last = 1;
  return spec;
}

TEST(CheckpointReshard, SavedAtTp2Dp2LoadsAtTp1Tp4AndTp2) {
  auto world = world_comm("world");
  ASSERT_TRUE(world);
  ASSERT_EQ(world->size(), 4) << "this test runs under mpirun -np 4";
  auto pg = parallel::ProcessGroups::create(*world, {.world = 4, .tp = 2});
  ASSERT_TRUE(pg.ok()) << pg.status().to_string();
  const int tp_rank = pg->tp().rank(), dp_rank = pg->dp().rank();
  ASSERT_EQ(pg->tp().size(), 2);
  ASSERT_EQ(pg->dp().size(), 2);
  const std::string root = shared_root(*world);

  Shards mine;
  build(mine, 2, tp_rank, /*replica=*/dp_rank, /*zeroed=*/false);
  for (const int64_t step : {10, 20}) {
    const Status s = io::save_checkpoint(spec_for(root, step, mine, dp_rank), world.get());
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  auto latest = io::latest_checkpoint(root);
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  ASSERT_TRUE(latest->has_value());
  const io::CheckpointInfo info = *latest.value();
  EXPECT_EQ(info.step, 20);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.layout_json, R"({"dp":2,"tp":2})");
  EXPECT_FALSE(fs::exists(root + "/step-10")) << "keep_last 1";
  auto rank_json = io::read_checkpoint_rank_json(info.dir, world->rank());
  ASSERT_TRUE(rank_json.ok()) << rank_json.status().to_string();
  EXPECT_EQ(rank_json.value(), "{\"dp_rank\":" + std::to_string(dp_rank) + "}");

  {
    SCOPED_TRACE("TP1: every rank reads the full tensors");
    expect_load(info.dir, 1, 0, /*verify_replicas=*/false);
  }
  {
    SCOPED_TRACE("TP4: rank r holds tp rank r");
    expect_load(info.dir, 4, world->rank(), false);
  }
  {
    SCOPED_TRACE("TP2, the saving layout");
    expect_load(info.dir, 2, tp_rank, true);
  }

  // A rank whose tensors are wrong makes the save fail on every rank; step 20 stays the latest.
  Shards bad;
  build(bad, 2, tp_rank, dp_rank, false);
  if (world->rank() == 2) bad.tensors[0].shard.full_shape[1] += 1;  // no longer matches its view
  const Status s = io::save_checkpoint(spec_for(root, 30, bad, dp_rank), world.get());
  ASSERT_FALSE(s.ok());
  if (world->rank() == 2)
    EXPECT_NE(s.message().find("model.embed_tokens.weight"), std::string::npos) << s.message();
  else
    EXPECT_NE(s.message().find("rank 2 failed"), std::string::npos) << s.message();
  latest = io::latest_checkpoint(root);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(latest.value()->step, 20);

  ASSERT_TRUE(world->barrier().ok());
  if (world->rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace vlpar::test
