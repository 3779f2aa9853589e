// Checkpoints (include/vlpar/io/checkpoint.hpp): bit-exact round trips (f32/bf16/i64, replicated, split along dim 0
// and dim 1, the two-piece fused gate/up layout, an uneven ZeRO-style flat split), resharding with simulated ranks
// (4 ranks as TP2×DP2 saved in one process, loaded at TP1, TP2, TP4 and along another dim), keep_last, incomplete
// and corrupt checkpoints (each error names the directory, file and tensor), deterministic crash points (the save
// process exits at each phase of the protocol), and SIGKILL at random moments of a save loop.
// Tensor contents are random bit patterns (NaN payloads included): every comparison is byte for byte.
// Run: ctest --test-dir build/cpu -R Checkpoint
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "vlpar/core/allocator.hpp"
#include "vlpar/io/checkpoint.hpp"
#include "vlpar/io/safetensors.hpp"
#include "vlpar/core/shard.hpp"

namespace vlpar::io {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             fmt::format("vlpar_ckpt_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name())).string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Random bytes (every bit pattern, NaNs included: checkpoints copy bytes, they never convert).
void fill_bits(TensorView t, uint64_t seed) {
  auto* p = static_cast<unsigned char*>(t.data);
  const size_t n = t.nbytes();
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = splitmix(seed * 0x100000001b3ull + i);
    std::memcpy(p + i, &r, std::min<size_t>(8, n - i));
  }
}

/// Byte equality with the first differing element named.
::testing::AssertionResult same_bytes(TensorView a, TensorView b) {
  if (a.nbytes() != b.nbytes()) return ::testing::AssertionFailure() << a.to_string() << " vs " << b.to_string();
  const size_t es = dtype_size(a.dtype);
  const auto* pa = static_cast<const unsigned char*>(a.data);
  const auto* pb = static_cast<const unsigned char*>(b.data);
  if (a.nbytes() == 0) return ::testing::AssertionSuccess();
  if (std::memcmp(pa, pb, a.nbytes()) == 0) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (std::memcmp(pa + i * es, pb + i * es, es) == 0) ++i;
  size_t diff = 0;
  for (size_t j = 0; j < a.nbytes() / es; ++j) diff += std::memcmp(pa + j * es, pb + j * es, es) != 0;
  return ::testing::AssertionFailure() << "first differing element at flat index " << i << " of " << a.to_string()
                                       << " (" << diff << " elements differ)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<std::string> dir_names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// ---- a decoder-like set of tensors in any (tp, dp) layout ----------------------------------------------------------

enum class Kind { kReplicated, kDim0, kDim1, kGateUp, kZero };

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape full;
  Kind kind;
};

const std::vector<TensorSpec>& model_specs() {
  static const std::vector<TensorSpec> specs = {
      {"model.embed_tokens.weight", DType::kBF16, {16, 6}, Kind::kDim0},           // vocab-parallel
      {"model.layers.0.self_attn.q_proj.weight", DType::kF32, {8, 6}, Kind::kDim0},  // column-parallel
      {"model.layers.0.self_attn.o_proj.weight", DType::kBF16, {6, 8}, Kind::kDim1}, // row-parallel
      {"model.layers.0.mlp.gate_up_proj.weight", DType::kF32, {12, 6}, Kind::kGateUp},
      {"model.layers.0.mlp.down_proj.weight", DType::kF32, {6, 6}, Kind::kDim1},
      {"model.layers.0.input_layernorm.weight", DType::kF32, {6}, Kind::kReplicated},
      {"model.norm.weight", DType::kBF16, {6}, Kind::kReplicated},
      {"optim.step", DType::kI64, {}, Kind::kReplicated},
      {"optim.master", DType::kF32, {53}, Kind::kZero},  // flat, split over every rank, uneven last piece
      {"optim.exp_avg", DType::kF32, {53}, Kind::kZero},
  };
  return specs;
}

struct Layout {
  int tp = 1, dp = 1;
  int world() const { return tp * dp; }
};

/// Tensor `s` as rank `r` of `layout` holds it (tp fastest: tp rank r % tp, dp rank r / tp).
ParamShard shard_of(const TensorSpec& s, Layout layout, int r) {
  const int tr = r % layout.tp;
  switch (s.kind) {
    case Kind::kReplicated: return make_replicated_param(s.name, s.full, 0, {});
    case Kind::kDim0: return make_split_param(s.name, s.full, 0, even_shard(s.full[0], layout.tp, tr), 0, {});
    case Kind::kDim1: return make_split_param(s.name, s.full, 1, even_shard(s.full[1], layout.tp, tr), 0, {});
    case Kind::kGateUp:
      return make_fused_gate_up_param(s.name, s.full[0] / 2, s.full[1],
                                          even_shard(s.full[0] / 2, layout.tp, tr), 0, {});
    case Kind::kZero: {
      const int64_t n = s.full[0], per = (n + layout.world() - 1) / layout.world();
      const int64_t b = std::min(n, per * r), e = std::min(n, per * (r + 1));
      return make_split_param(s.name, s.full, 0, {b, e}, 0, {});
    }
  }
  return {};
}

struct Model {
  Allocator alloc;
  std::map<std::string, Tensor> full;  // the reference full tensors
};

void make_full(Model& m, uint64_t seed) {
  uint64_t i = 0;
  for (const TensorSpec& s : model_specs()) {
    m.full[s.name] = Tensor::empty(m.alloc, s.full, s.dtype).value();
    fill_bits(m.full[s.name], seed + 1000 * ++i);
  }
}

/// Rank r's shards of the full tensors (owned), and the CheckpointTensors describing them.
struct RankState {
  std::vector<Tensor> bufs;
  std::vector<CheckpointTensor> tensors;
};

RankState rank_state(Model& m, Layout layout, int r, bool mark_replicas) {
  RankState st;
  for (const TensorSpec& s : model_specs()) {
    const ParamShard sh = shard_of(s, layout, r);
    Tensor t = Tensor::empty(m.alloc, sh.local_shape(), s.dtype).value();
    EXPECT_TRUE(gather_shard_from_full(t, m.full[s.name], sh).ok());
    // tp shards and replicated tensors have dp copies; the ZeRO pieces are distinct on every rank.
    const int replica = mark_replicas && s.kind != Kind::kZero ? r / layout.tp : 0;
    st.tensors.push_back(sharded_tensor(s.name, t, sh, replica));
    st.bufs.push_back(std::move(t));
  }
  return st;
}

/// Saves the model at `layout` by playing every rank in this process.
Status save_simulated(Model& m, const std::string& root, int64_t step, Layout layout, bool mark_replicas,
                      int keep_last = 0) {
  CheckpointWriteSpec spec;
  spec.root = root;
  spec.step = step;
  spec.world_size = layout.world();
  spec.rank = 0;
  spec.keep_last = keep_last;
  spec.layout_json = fmt::format("{{\"tp\":{},\"dp\":{}}}", layout.tp, layout.dp);
  spec.user_json = fmt::format("{{\"lr\":0.5,\"step\":{},\"rng\":[18446744073709551615,1]}}", step);
  VLPAR_RETURN_IF_ERROR(prepare_checkpoint(spec));
  for (int r = 0; r < layout.world(); ++r) {
    RankState st = rank_state(m, layout, r, mark_replicas);
    spec.rank = r;
    spec.tensors = st.tensors;
    spec.rank_json = fmt::format("{{\"data_pos\":{}}}", 100 + r);
    VLPAR_RETURN_IF_ERROR(write_checkpoint_shard(spec));
  }
  spec.rank = 0;
  spec.tensors.clear();
  return commit_checkpoint(spec);
}

/// Loads every tensor at every rank of `layout` and compares with the reference shards.
void expect_loads(Model& m, const std::string& dir, Layout layout, bool verify_replicas = false) {
  for (int r = 0; r < layout.world(); ++r) {
    RankState want = rank_state(m, layout, r, false);
    std::vector<CheckpointTensor> dst = want.tensors;
    std::vector<Tensor> bufs;
    for (CheckpointTensor& t : dst) {
      bufs.push_back(Tensor::zeros(m.alloc, t.local.shape, t.local.dtype).value());
      t.local = bufs.back();
    }
    std::string user;
    const Status s = load_checkpoint(dir, dst, &user, {.verify_replicas = verify_replicas});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(contains(user, "\"lr\":0.5")) << user;
    for (size_t i = 0; i < dst.size(); ++i)
      EXPECT_TRUE(same_bytes(dst[i].local, want.tensors[i].local))
          << dst[i].name << " at tp=" << layout.tp << " rank " << r;
  }
}

// ---- round trips ------------------------------------------------------------------------------------------------

TEST(Checkpoint, SingleProcessRoundTripIsBitExact) {
  TempDir tmp;
  Model m;
  make_full(m, 7);
  RankState st = rank_state(m, {1, 1}, 0, false);
  CheckpointWriteSpec spec;
  spec.root = tmp.path() + "/ckpt";
  spec.step = 42;
  spec.tensors = st.tensors;
  spec.user_json = R"({"lr_schedule":{"step":42,"lr":3e-4},"rng":[18446744073709551615,0],"name":"ünïcode"})";
  spec.rank_json = R"({"data":{"shard":3,"offset":17}})";
  spec.layout_json = R"({"tp":1})";
  const Status s = save_checkpoint(spec, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();

  auto latest = latest_checkpoint(spec.root);
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  ASSERT_TRUE(latest->has_value());
  const CheckpointInfo& info = *latest.value();
  EXPECT_EQ(info.step, 42);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.dir, spec.root + "/step-42");
  EXPECT_EQ(info.layout_json, R"({"tp":1})");
  EXPECT_EQ(dir_names(info.dir), (std::vector<std::string>{"meta.json", "rank-00000.safetensors"}));
  EXPECT_EQ(dir_names(spec.root), (std::vector<std::string>{"latest", "step-42"}));

  // Fresh destinations, all filled with a different pattern first.
  std::vector<CheckpointTensor> dst = st.tensors;
  std::vector<Tensor> bufs;
  for (CheckpointTensor& t : dst) {
    bufs.push_back(Tensor::empty(m.alloc, t.local.shape, t.local.dtype).value());
    fill_bits(bufs.back(), 999);
    t.local = bufs.back();
  }
  std::string user;
  const Status l = load_checkpoint(info.dir, dst, &user);
  ASSERT_TRUE(l.ok()) << l.to_string();
  for (size_t i = 0; i < dst.size(); ++i) EXPECT_TRUE(same_bytes(dst[i].local, st.tensors[i].local)) << dst[i].name;
  // User state survives as JSON (canonical dump: sorted keys, exact integers, round-tripping doubles).
  EXPECT_EQ(user, R"({"lr_schedule":{"lr":0.0003,"step":42},"name":"ünïcode","rng":[18446744073709551615,0]})");
  EXPECT_EQ(info.user_json, user);
  auto rank_json = read_checkpoint_rank_json(info.dir, 0);
  ASSERT_TRUE(rank_json.ok()) << rank_json.status().to_string();
  EXPECT_EQ(rank_json.value(), R"({"data":{"offset":17,"shard":3}})");

  // The rank file is a standard safetensors file holding the local shards under their names.
  auto f = SafetensorsFile::open(info.dir + "/rank-00000.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->tensors().size(), model_specs().size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Checkpoint, ReshardsSavedTp2Dp2ToAnyLayout) {
  TempDir tmp;
  for (const bool mark_replicas : {true, false}) {
    SCOPED_TRACE(mark_replicas ? "dp replicas skipped at save" : "every replica written");
    Model m;
    make_full(m, 11);
    const std::string root = tmp.path() + (mark_replicas ? "/marked" : "/all");
    const Status s = save_simulated(m, root, 3, {2, 2}, mark_replicas);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const std::string dir = root + "/step-3";
    for (const Layout to : {Layout{1, 1}, Layout{2, 1}, Layout{4, 1}, Layout{2, 2}, Layout{1, 3}}) {
      SCOPED_TRACE(fmt::format("load at tp={} dp={}", to.tp, to.dp));
      expect_loads(m, dir, to, /*verify_replicas=*/!mark_replicas);
    }
    auto rj = read_checkpoint_rank_json(dir, 3);
    ASSERT_TRUE(rj.ok()) << rj.status().to_string();
    EXPECT_EQ(rj.value(), R"({"data_pos":103})");
  }
}

TEST(Checkpoint, LoadsAlongAnotherDimThanSaved) {
  // Saved split along dim 1 over 4 ranks; loaded split along dim 0 over 3 ranks (boxes cut on two dims).
  TempDir tmp;
  Allocator alloc;
  Tensor full = Tensor::empty(alloc, {6, 8, 3}, DType::kF32).value();
  fill_bits(full, 5);
  CheckpointWriteSpec spec;
  spec.root = tmp.path();
  spec.step = 1;
  spec.world_size = 4;
  spec.rank = 0;
  ASSERT_TRUE(prepare_checkpoint(spec).ok());
  std::vector<Tensor> keep;
  for (int r = 0; r < 4; ++r) {
    const ParamShard sh = make_split_param("w", {6, 8, 3}, 1, even_shard(8, 4, r), 0, {});
    keep.push_back(Tensor::empty(alloc, sh.local_shape(), DType::kF32).value());
    ASSERT_TRUE(gather_shard_from_full(keep.back(), full, sh).ok());
    spec.rank = r;
    spec.tensors = {sharded_tensor("w", keep.back(), sh)};
    ASSERT_TRUE(write_checkpoint_shard(spec).ok());
  }
  spec.rank = 0;
  ASSERT_TRUE(commit_checkpoint(spec).ok());
  for (int r = 0; r < 3; ++r) {
    const ParamShard sh = make_split_param("w", {6, 8, 3}, 0, even_shard(6, 3, r), 0, {});
    Tensor got = Tensor::zeros(alloc, sh.local_shape(), DType::kF32).value();
    Tensor want = Tensor::empty(alloc, sh.local_shape(), DType::kF32).value();
    ASSERT_TRUE(gather_shard_from_full(want, full, sh).ok());
    const CheckpointTensor t = sharded_tensor("w", got, sh);
    const Status s = load_checkpoint(tmp.path() + "/step-1", std::span(&t, 1), nullptr);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(same_bytes(got, want)) << "rank " << r;
  }
}

/// Expert weight shards: experts along dim 0 over ep, each expert's [.., 2I] gate/up width over etp (fused halves).
ParamShard expert_shard(int ep, int ep_rank, int etp, int etp_rank) {
  const ParamShard p = make_split_param("experts.gate_up", {4, 3, 12}, 0, even_shard(4, ep, ep_rank), 0, {});
  return etp == 1 ? p : split_inner(p, 2, even_shard(6, etp, etp_rank), /*fused=*/true);
}

/// Saves `full` as world = copies × ep × etp ranks (etp fastest; `skip` drops a rank's tensor: a hole).
Status save_expert_layout(const std::string& root, const Tensor& full, int ep, int etp, int copies, int skip,
                          std::vector<Tensor>& keep, Allocator& alloc) {
  CheckpointWriteSpec spec;
  spec.root = root;
  spec.step = 1;
  spec.world_size = copies * ep * etp;
  spec.rank = 0;
  VLPAR_RETURN_IF_ERROR(prepare_checkpoint(spec));
  for (int r = 0; r < spec.world_size; ++r) {
    const ParamShard sh = expert_shard(ep, (r / etp) % ep, etp, r % etp);
    keep.push_back(Tensor::empty(alloc, sh.local_shape(), DType::kF32).value());
    VLPAR_RETURN_IF_ERROR(gather_shard_from_full(keep.back(), full, sh));
    spec.rank = r;
    spec.tensors.clear();
    if (r != skip) spec.tensors = {sharded_tensor("experts.gate_up", keep.back(), sh)};
    VLPAR_RETURN_IF_ERROR(write_checkpoint_shard(spec));
  }
  spec.rank = 0;
  return commit_checkpoint(spec);
}

TEST(Checkpoint, ExpertWeightsSplitAlongTwoDimsReshardAcrossEpAndEtp) {
  TempDir tmp;
  Allocator alloc;
  Tensor full = Tensor::empty(alloc, {4, 3, 12}, DType::kF32).value();
  fill_bits(full, 8);
  std::vector<Tensor> keep;
  const Status saved = save_expert_layout(tmp.path(), full, 2, 2, /*copies=*/2, /*skip=*/-1, keep, alloc);
  ASSERT_TRUE(saved.ok()) << saved.to_string();
  for (auto [ep, etp] : {std::pair{1, 1}, {2, 2}, {4, 1}, {1, 3}, {2, 6}}) {
    for (int r = 0; r < ep * etp; ++r) {
      SCOPED_TRACE(fmt::format("load at ep={} etp={}, rank {}", ep, etp, r));
      const ParamShard sh = expert_shard(ep, r / etp, etp, r % etp);
      Tensor got = Tensor::zeros(alloc, sh.local_shape(), DType::kF32).value();
      Tensor want = Tensor::empty(alloc, sh.local_shape(), DType::kF32).value();
      ASSERT_TRUE(gather_shard_from_full(want, full, sh).ok());
      const CheckpointTensor t = sharded_tensor("experts.gate_up", got, sh);
      CheckpointLoadOptions opts;
      opts.verify_replicas = true;
      const Status s = load_checkpoint(tmp.path() + "/step-1", std::span(&t, 1), nullptr, opts);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_TRUE(same_bytes(got, want));
    }
  }
}

TEST(Checkpoint, ExpertWeightsWithAMissingBoxAreAHoleNamingTheDims) {
  TempDir tmp;
  Allocator alloc;
  Tensor full = Tensor::empty(alloc, {4, 3, 12}, DType::kF32).value();
  fill_bits(full, 9);
  std::vector<Tensor> keep;
  const Status s = save_expert_layout(tmp.path(), full, 2, 2, /*copies=*/1, /*skip=*/3, keep, alloc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'experts.gate_up' has a hole: the rank files hold 36 of the 4 × 12 index pairs along "
                             "dims 0 × 2"), std::string::npos) << s.to_string();
}

// ---- retention and discovery ---------------------------------------------------------------------------------------

TEST(Checkpoint, KeepLastDeletesOlderCommittedCheckpoints) {
  TempDir tmp;
  Model m;
  make_full(m, 3);
  const std::string root = tmp.path();
  for (int step = 1; step <= 5; ++step) ASSERT_TRUE(save_simulated(m, root, step * 10, {2, 1}, false, 2).ok());
  auto all = list_checkpoints(root);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ(all.value()[0].step, 40);
  EXPECT_EQ(all.value()[1].step, 50);
  EXPECT_EQ(dir_names(root), (std::vector<std::string>{"latest", "step-40", "step-50"}));

  // Resuming an older step of an abandoned run: the new save becomes `latest`; higher steps are left alone.
  ASSERT_TRUE(save_simulated(m, root, 45, {2, 1}, false, 1).ok());
  EXPECT_EQ(dir_names(root), (std::vector<std::string>{"latest", "step-45", "step-50"}));
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(latest.value()->step, 45);
  expect_loads(m, root + "/step-45", {1, 1});

  // Re-saving an existing step swaps the directories atomically.
  make_full(m, 4);
  ASSERT_TRUE(save_simulated(m, root, 45, {1, 1}, false, 1).ok());
  EXPECT_EQ(dir_names(root), (std::vector<std::string>{"latest", "step-45", "step-50"}));
  expect_loads(m, root + "/step-45", {2, 1});
}

TEST(Checkpoint, LatestIgnoresIncompleteAndTemporaryDirectories) {
  TempDir tmp;
  Model m;
  make_full(m, 5);
  const std::string root = tmp.path();
  auto none = latest_checkpoint(root + "/does-not-exist");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(save_simulated(m, root, 1, {2, 1}, false).ok());
  ASSERT_TRUE(save_simulated(m, root, 2, {2, 1}, false).ok());
  // step-2 loses its commit marker; a crashed save left step-3.tmp; a stray step-9 has no meta.json.
  fs::remove(root + "/step-2/meta.json");
  fs::create_directories(root + "/step-3.tmp");
  fs::copy(root + "/step-1/meta.json", root + "/step-3.tmp/meta.json");
  fs::create_directories(root + "/step-9");
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(latest.value()->step, 1);
  const Status s = load_checkpoint(root + "/step-2", {}, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), root + "/step-2") && contains(s.message(), "meta.json")) << s.message();
  // The next save removes the leftover temporary directory.
  ASSERT_TRUE(save_simulated(m, root, 4, {1, 1}, false).ok());
  EXPECT_FALSE(fs::exists(root + "/step-3.tmp"));
  latest = latest_checkpoint(root);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(latest.value()->step, 4);
}

// ---- corrupt checkpoints and bad requests --------------------------------------------------------------------------

class CheckpointCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    make_full(m_, 21);
    root_ = tmp_.path();
    dir_ = root_ + "/step-7";
    const Status s = save_simulated(m_, root_, 7, {2, 1}, false);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  /// Loads everything at TP1 and returns the status.
  Status load_all(bool verify = false) {
    RankState want = rank_state(m_, {1, 1}, 0, false);
    dst_ = want.tensors;
    bufs_.clear();
    for (CheckpointTensor& t : dst_) {
      bufs_.push_back(Tensor::zeros(m_.alloc, t.local.shape, t.local.dtype).value());
      t.local = bufs_.back();
    }
    return load_checkpoint(dir_, dst_, nullptr, {.verify_replicas = verify});
  }

  TempDir tmp_;
  Model m_;
  std::string root_, dir_;
  std::vector<CheckpointTensor> dst_;
  std::vector<Tensor> bufs_;
};

TEST_F(CheckpointCorrupt, MissingRankFileIsNamed) {
  fs::remove(dir_ + "/rank-00001.safetensors");
  const Status s = load_all();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), dir_) && contains(s.message(), "rank-00001.safetensors") &&
              contains(s.message(), "missing")) << s.message();
}

TEST_F(CheckpointCorrupt, TruncatedRankFileIsNamed) {
  const std::string f = dir_ + "/rank-00000.safetensors";
  fs::resize_file(f, fs::file_size(f) - 3);
  const Status s = load_all();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "rank-00000.safetensors") && contains(s.message(), "truncated")) << s.message();
}

TEST_F(CheckpointCorrupt, TruncatedFileIsCaughtEvenWhenNotRead) {
  // Only rank 0's copy of the replicated norm weight is read, yet a truncated rank 1 file fails the load: a
  // checkpoint is checked whole (every file at the size meta.json recorded), not just the bytes one rank needs.
  const std::string f = dir_ + "/rank-00001.safetensors";
  fs::resize_file(f, fs::file_size(f) - 1);
  Tensor buf = Tensor::zeros(m_.alloc, {6}, DType::kBF16).value();
  const CheckpointTensor t = replicated_tensor("model.norm.weight", buf);
  const Status s = load_checkpoint(dir_, std::span(&t, 1), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "rank-00001.safetensors") && contains(s.message(), "truncated")) << s.message();
}

TEST_F(CheckpointCorrupt, TruncatedFileWithMatchingRecordIsCaughtByTheReader) {
  // Even when meta.json's byte count is edited to match, the safetensors reader rejects the short file.
  const std::string f = dir_ + "/rank-00001.safetensors";
  const uintmax_t size = fs::file_size(f);
  fs::resize_file(f, size - 8);
  std::ifstream in(dir_ + "/meta.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string meta = ss.str();
  const std::string from = fmt::format("\"bytes\": {}", size), to = fmt::format("\"bytes\": {}", size - 8);
  ASSERT_TRUE(contains(meta, from)) << meta.substr(0, 400);
  meta.replace(meta.find(from), from.size(), to);
  std::ofstream(dir_ + "/meta.json", std::ios::trunc) << meta;
  const Status s = load_all();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "rank-00001.safetensors")) << s.message();
}

TEST_F(CheckpointCorrupt, WrongDtypeShapeOrNameIsNamed) {
  // Another float dtype loads converted (an f32 master into a bf16 value): the saved values rounded once.
  Tensor buf = Tensor::zeros(m_.alloc, {8, 6}, DType::kBF16).value();
  Tensor f32 = Tensor::zeros(m_.alloc, {8, 6}, DType::kF32).value();
  Tensor want = Tensor::zeros(m_.alloc, {8, 6}, DType::kBF16).value();
  CheckpointTensor t = sharded_tensor("model.layers.0.self_attn.q_proj.weight", buf,
                                      make_replicated_param("q", {8, 6}, 0, {}));
  CheckpointTensor tf = sharded_tensor("model.layers.0.self_attn.q_proj.weight", f32,
                                       make_replicated_param("q", {8, 6}, 0, {}));
  Status s = load_checkpoint(dir_, std::span(&t, 1), nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(load_checkpoint(dir_, std::span(&tf, 1), nullptr).ok());
  ASSERT_TRUE(convert_(want, f32).ok());
  EXPECT_TRUE(test::bitwise_equal("f32 loaded as bf16", buf, want));
  EXPECT_GT(test::max_abs_diff(test::to_f64(f32), std::vector<double>(48, 0.0)), 0.0);
  // A float tensor never loads into an integer destination.
  Tensor ints = Tensor::zeros(m_.alloc, {8, 6}, DType::kI32).value();
  t = sharded_tensor("model.layers.0.self_attn.q_proj.weight", ints, make_replicated_param("q", {8, 6}, 0, {}));
  s = load_checkpoint(dir_, std::span(&t, 1), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "q_proj.weight") && contains(s.message(), "F32") && contains(s.message(), "i32"))
      << s.message();
  Tensor buf2 = Tensor::zeros(m_.alloc, {8, 5}, DType::kF32).value();
  t = sharded_tensor("model.layers.0.self_attn.q_proj.weight", buf2, make_replicated_param("q", {8, 5}, 0, {}));
  s = load_checkpoint(dir_, std::span(&t, 1), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "[8, 6]") && contains(s.message(), "[8, 5]")) << s.message();
  t.name = "model.layers.1.nothing";
  s = load_checkpoint(dir_, std::span(&t, 1), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), dir_) && contains(s.message(), "model.layers.1.nothing")) << s.message();
  // A destination whose view does not match its own shard is rejected before any read.
  t = sharded_tensor("model.layers.0.self_attn.q_proj.weight", buf2,
                     make_split_param("q", {8, 6}, 0, {0, 4}, 0, {}));
  s = load_checkpoint(dir_, std::span(&t, 1), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "[4, 6]")) << s.message();
}

TEST_F(CheckpointCorrupt, DifferingReplicasAreCaughtWhenVerified) {
  // Both ranks wrote the replicated norm weight (no replica marking); flip one byte of rank 1's copy in place.
  auto f = SafetensorsFile::open(dir_ + "/rank-00001.safetensors");
  ASSERT_TRUE(f.ok());
  const TensorInfo* info = f->find("model.norm.weight");
  ASSERT_NE(info, nullptr);
  const uint64_t pos = f->data_start() + info->begin + 3;
  {
    std::fstream io(dir_ + "/rank-00001.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(pos));
    char c = 0;
    io.read(&c, 1);
    c = char(c ^ 0x40);
    io.seekp(std::streamoff(pos));
    io.write(&c, 1);
  }
  ASSERT_TRUE(load_all(false).ok());  // rank 0's copy is the one read
  const Status s = load_all(true);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "model.norm.weight") && contains(s.message(), "rank-00000.safetensors") &&
              contains(s.message(), "rank-00001.safetensors") && contains(s.message(), "differ")) << s.message();
}

TEST(Checkpoint, CommitRejectsHolesOverlapsAndMissingRanks) {
  TempDir tmp;
  Allocator alloc;
  Tensor a = Tensor::zeros(alloc, {4, 3}, DType::kF32).value();
  auto run = [&](const std::string& name, std::vector<std::vector<CheckpointTensor>> ranks, int world) {
    CheckpointWriteSpec spec;
    spec.root = tmp.path() + "/" + name;
    spec.step = 1;
    spec.world_size = world;
    spec.rank = 0;
    EXPECT_TRUE(prepare_checkpoint(spec).ok());
    for (size_t r = 0; r < ranks.size(); ++r) {
      spec.rank = int(r);
      spec.tensors = ranks[r];
      const Status s = write_checkpoint_shard(spec);
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    spec.rank = 0;
    spec.tensors.clear();
    const Status s = commit_checkpoint(spec);
    auto latest = latest_checkpoint(spec.root);
    EXPECT_TRUE(latest.ok() && !latest->has_value()) << "a rejected commit must leave no checkpoint";
    return s;
  };
  auto piece = [&](int64_t b, int64_t e) {
    return sharded_tensor("w", a.view().slice(0, 0, e - b), make_split_param("w", {8, 3}, 0, {b, e}, 0, {}));
  };
  Status s = run("hole", {{piece(0, 4)}, {piece(5, 8)}}, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "'w'") && contains(s.message(), "hole") && contains(s.message(), "[4, 5)"))
      << s.message();
  s = run("overlap", {{piece(0, 4)}, {piece(3, 7)}, {piece(7, 8)}}, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "overlap") && contains(s.message(), "rank-00001.safetensors")) << s.message();
  s = run("missing", {{piece(0, 4)}}, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "rank-00001.safetensors") && contains(s.message(), "missing")) << s.message();
  s = run("mismatch", {{piece(0, 4)}, {sharded_tensor("w", a.view().slice(0, 0, 4),
                                                      make_split_param("w", {9, 3}, 0, {4, 8}, 0, {}))}}, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "'w'") && contains(s.message(), "[9, 3]")) << s.message();
}

TEST(Checkpoint, BadSpecsAreRejectedBeforeWriting) {
  TempDir tmp;
  Allocator alloc;
  Tensor a = Tensor::zeros(alloc, {4, 3}, DType::kF32).value();
  CheckpointWriteSpec spec;
  spec.root = tmp.path();
  spec.step = 1;
  spec.tensors = {replicated_tensor("x", a), replicated_tensor("x", a)};
  Status s = save_checkpoint(spec, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "'x'") && contains(s.message(), "twice")) << s.message();
  spec.tensors = {sharded_tensor("y", a, make_split_param("y", {8, 3}, 0, {2, 7}, 0, {}))};
  s = save_checkpoint(spec, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "'y'") && contains(s.message(), "[5, 3]")) << s.message();
  spec.tensors = {replicated_tensor("z", a)};
  spec.user_json = "{not json";
  s = save_checkpoint(spec, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "user_json")) << s.message();
  spec.user_json = "{}";
  spec.world_size = 2;
  s = save_checkpoint(spec, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "communicator")) << s.message();
  auto latest = latest_checkpoint(tmp.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_FALSE(latest->has_value());
}

// ---- crashes -------------------------------------------------------------------------------------------------------

/// Deterministic contents of "state at step s" for the crash tests: a big f32 matrix split over the ranks along
/// dim 0, a bf16 replicated vector and the step itself. Element i of tensor k: base_k[i] + s · golden (bit pattern).
struct StepState {
  static constexpr int64_t kCols = 4096;
  Allocator alloc;
  Tensor base_big, base_vec;
  Tensor work_big, work_vec;  // what save_step writes (allocated once: the saver's loop is mostly the save itself)

  explicit StepState(int64_t rows) {  // rows · 16 KiB
    base_big = Tensor::empty(alloc, {rows, kCols}, DType::kF32).value();
    base_vec = Tensor::empty(alloc, {1000}, DType::kBF16).value();
    fill_bits(base_big, 77);
    fill_bits(base_vec, 78);
    work_big = Tensor::zeros(alloc, base_big.shape(), DType::kF32).value();
    work_vec = Tensor::zeros(alloc, base_vec.shape(), DType::kBF16).value();
  }
  /// Contents at step s: 64-bit words base + s · golden (sizes are multiples of 8 bytes).
  static void at_step(TensorView dst, TensorView base, int64_t s) {
    const auto* b = static_cast<const uint64_t*>(base.data);
    auto* d = static_cast<uint64_t*>(dst.data);
    const uint64_t add = uint64_t(s) * 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < base.nbytes() / 8; ++i) d[i] = b[i] + add;
  }
};

/// Saves step `s` of StepState at `world` simulated ranks (world 1: save_checkpoint itself).
Status save_step(StepState& st, const std::string& root, int64_t s, int world, int keep_last,
                 std::function<void(std::string_view)> hook = nullptr) {
  const Tensor& big = st.work_big;
  const Tensor& vec = st.work_vec;
  StepState::at_step(big, st.base_big, s);
  StepState::at_step(vec, st.base_vec, s);
  int64_t step_value = s;
  CheckpointWriteSpec spec;
  spec.root = root;
  spec.step = s;
  spec.keep_last = keep_last;
  spec.user_json = fmt::format("{{\"step\":{}}}", s);
  spec.on_phase = std::move(hook);
  auto tensors_of = [&](int r) {
    const Range rows = even_shard(big.shape()[0], world, r);
    const ParamShard sh = make_split_param("big", big.shape(), 0, rows, 0, {});
    return std::vector<CheckpointTensor>{sharded_tensor("big", big.view().slice(0, rows.begin, rows.end), sh),
                                         replicated_tensor("vec", vec, r),
                                         replicated_tensor("step", TensorView(&step_value, DType::kI64, {}), r)};
  };
  if (world == 1) {
    spec.tensors = tensors_of(0);
    return save_checkpoint(spec, nullptr);
  }
  spec.rank = 0;
  spec.world_size = world;
  VLPAR_RETURN_IF_ERROR(prepare_checkpoint(spec));
  for (int r = 0; r < world; ++r) {
    spec.rank = r;
    spec.tensors = tensors_of(r);
    VLPAR_RETURN_IF_ERROR(write_checkpoint_shard(spec));
  }
  spec.rank = 0;
  return commit_checkpoint(spec);
}

/// Loads `dir` at one rank and checks it holds exactly step `s` of StepState.
::testing::AssertionResult holds_step(StepState& st, const CheckpointInfo& info, int64_t s) {
  Tensor big = Tensor::empty(st.alloc, st.base_big.shape(), DType::kF32).value();
  Tensor vec = Tensor::empty(st.alloc, st.base_vec.shape(), DType::kBF16).value();
  int64_t step_value = -1;
  const std::vector<CheckpointTensor> dst = {replicated_tensor("big", big), replicated_tensor("vec", vec),
                                             replicated_tensor("step", TensorView(&step_value, DType::kI64, {}))};
  std::string user;
  const Status l = load_checkpoint(info.dir, dst, &user);
  if (!l.ok()) return ::testing::AssertionFailure() << "latest checkpoint does not load: " << l.to_string();
  if (info.step != s || step_value != s || user != fmt::format("{{\"step\":{}}}", s))
    return ::testing::AssertionFailure() << "expected step " << s << ", meta says " << info.step << ", tensor says "
                                         << step_value << ", user " << user;
  Tensor want = Tensor::empty(st.alloc, st.base_big.shape(), DType::kF32).value();
  StepState::at_step(want, st.base_big, s);
  if (auto r = same_bytes(big, want); !r) return r << " (big, step " << s << ")";
  Tensor wantv = Tensor::empty(st.alloc, st.base_vec.shape(), DType::kBF16).value();
  StepState::at_step(wantv, st.base_vec, s);
  if (auto r = same_bytes(vec, wantv); !r) return r << " (vec, step " << s << ")";
  return ::testing::AssertionSuccess();
}

std::optional<CheckpointInfo> latest_or_fail(const std::string& root) {
  auto l = latest_checkpoint(root);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? l.value() : std::nullopt;
}

TEST(CheckpointCrash, ProcessExitAtEveryPhaseLeavesALoadableCheckpoint) {
  TempDir tmp;
  StepState st(256);  // 4 MiB
  // Until `latest` names the new checkpoint, the previous one is the latest; afterwards the new one.
  const std::vector<std::pair<std::string, int64_t>> phases = {
      {"prepared", 1}, {"shard_written", 1}, {"verified", 1}, {"meta_written", 1},
      {"renamed", 1},  {"latest_written", 2}, {"pruned", 2}};
  for (const int world : {1, 4}) {
    for (const auto& [phase, expect] : phases) {
      SCOPED_TRACE(fmt::format("exit after '{}' at world {}", phase, world));
      const std::string root = fmt::format("{}/{}-{}", tmp.path(), phase, world);
      ASSERT_TRUE(save_step(st, root, 1, world, 1).ok());
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        const std::string target = phase;
        (void)save_step(st, root, 2, world, 1, [&](std::string_view p) {
          if (p == target) ::_exit(0);
        });
        ::_exit(3);  // the phase never came
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
      auto latest = latest_or_fail(root);
      ASSERT_TRUE(latest.has_value());
      EXPECT_TRUE(holds_step(st, *latest, expect));
      // The run resumes from `latest` and saves step 2 again: leftovers are cleaned, an existing step-2 is replaced.
      ASSERT_TRUE(save_step(st, root, 2, world, 1).ok());
      EXPECT_EQ(dir_names(root), (std::vector<std::string>{"latest", "step-2"}));
      latest = latest_or_fail(root);
      ASSERT_TRUE(latest.has_value());
      EXPECT_TRUE(holds_step(st, *latest, 2));
    }
  }
}

/// Reads one int64 the saver reports after each commit; false after `timeout_ms` without one (or on EOF).
bool read_report(int fd, int64_t& step, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return false;
  return ::read(fd, &step, sizeof step) == ssize_t(sizeof step);
}

TEST(CheckpointCrash, SigkillDuringSavesLeavesTheLatestCheckpointLoadable) {
  // Each round forks a "trainer" that resumes from the latest checkpoint and saves step after step (4 rank files,
  // keep_last 2), reporting each commit through a pipe. After its first commit the parent waits a random fraction
  // (fixed seed) of one save period, measured on this machine, and SIGKILLs it: the kills land at every point of
  // the save cycle whatever the disk speed. Then the latest checkpoint must load and hold exactly its step.
  TempDir tmp;
  StepState st(2048);  // 32 MiB per checkpoint
  const std::string root = tmp.path() + "/run";
  std::mt19937 rng(20240607);
  std::uniform_real_distribution<double> fraction(0.0, 1.0);
  constexpr int kKills = 12;
  int mid_save = 0;
  int64_t last_step = 0;
  double period_s = 0;  // one save cycle, measured in the first round
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kKills; ++k) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      auto latest = latest_checkpoint(root);
      if (!latest.ok()) ::_exit(2);
      int64_t s = latest->has_value() ? latest.value()->step : 0;
      for (;;) {
        const Status status = save_step(st, root, ++s, 4, 2);
        if (!status.ok()) {
          std::fprintf(stderr, "child: %s\n", status.to_string().c_str());
          ::_exit(1);
        }
        if (::write(fds[1], &s, sizeof s) != ssize_t(sizeof s)) ::_exit(4);
      }
    }
    ::close(fds[1]);
    int64_t reported = 0;
    bool ok = read_report(fds[0], reported, 60000);
    if (ok && period_s == 0) {
      const auto t1 = std::chrono::steady_clock::now();
      ok = read_report(fds[0], reported, 60000);
      period_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    }
    const double f = fraction(rng);
    if (ok) std::this_thread::sleep_for(std::chrono::duration<double>(f * period_s));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    // Commits the saver reported while the parent slept (a save cycle varies): the last one counts.
    for (int64_t more = 0; ok && read_report(fds[0], more, 1000);) reported = more;
    ::close(fds[0]);
    ASSERT_TRUE(ok) << "the saver reported no commit within 60 s (exit status " << status << ")";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the saver died on its own: status " << status;
    // Inside a save = anything but the clean state {latest, step-a, step-b}: a step-*.tmp being written, a
    // step-*.deleting being pruned, a latest.tmp.* being replaced, or `latest` lagging behind a renamed step.
    {
      auto committed = list_checkpoints(root);
      ASSERT_TRUE(committed.ok()) << committed.status().to_string();
      const std::vector<std::string> names = dir_names(root);
      auto l = latest_checkpoint(root);
      const bool clean = l.ok() && l->has_value() && !committed->empty() &&
                         l.value()->step == committed->back().step && names.size() == committed->size() + 1;
      mid_save += clean ? 0 : 1;
    }
    SCOPED_TRACE(fmt::format("kill {} at {:.2f} of a {:.3f} s save cycle after step {}", k, f, period_s, reported));
    auto latest = latest_or_fail(root);
    ASSERT_TRUE(latest.has_value()) << "no loadable checkpoint after the saver committed step " << reported;
    EXPECT_GE(latest->step, reported) << "a reported commit is not the latest";
    EXPECT_LE(latest->step, reported + 1);
    EXPECT_GT(latest->step, last_step) << "no progress";
    last_step = latest->step;
    EXPECT_TRUE(holds_step(st, *latest, latest->step));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d kills in %.1f s (save cycle %.3f s), %d landed inside a save, last committed step %lld\n", kKills,
              secs, period_s, mid_save, static_cast<long long>(last_step));
  EXPECT_GE(mid_save, kKills / 4) << "too few kills landed inside a save: the test checked little";
}

// ---- throughput ----------------------------------------------------------------------------------------------------

TEST(Checkpoint, SaveAndLoad100MBTimings) {
  TempDir tmp;
  Allocator alloc;
  // 100 MB: fp32 master + m + v of ~8.7M parameters, split over 4 simulated ranks along dim 0.
  const Shape shape{2048, 4266};
  std::vector<Tensor> full;
  for (int k = 0; k < 3; ++k) {
    full.push_back(Tensor::empty(alloc, shape, DType::kF32).value());
    fill_bits(full.back(), 100 + uint64_t(k));
  }
  const double mb = 3.0 * double(full[0].view().nbytes()) / 1e6;
  const char* names[] = {"master", "exp_avg", "exp_avg_sq"};
  CheckpointWriteSpec spec;
  spec.root = tmp.path();
  spec.step = 1;
  spec.world_size = 4;
  spec.rank = 0;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(prepare_checkpoint(spec).ok());
  for (int r = 0; r < 4; ++r) {
    spec.rank = r;
    spec.tensors.clear();
    const Range rows = even_shard(shape[0], 4, r);
    for (int k = 0; k < 3; ++k)
      spec.tensors.push_back(sharded_tensor(names[k], full[size_t(k)].view().slice(0, rows.begin, rows.end),
                                            make_split_param(names[k], shape, 0, rows, 0, {})));
    ASSERT_TRUE(write_checkpoint_shard(spec).ok());
  }
  spec.rank = 0;
  ASSERT_TRUE(commit_checkpoint(spec).ok());
  const double save_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<Tensor> got;
  std::vector<CheckpointTensor> dst;
  for (int k = 0; k < 3; ++k) {
    got.push_back(Tensor::empty(alloc, shape, DType::kF32).value());
    dst.push_back(replicated_tensor(names[k], got.back()));
  }
  t0 = std::chrono::steady_clock::now();
  const Status l = load_checkpoint(tmp.path() + "/step-1", dst, nullptr);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(l.ok()) << l.to_string();
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(same_bytes(got[size_t(k)], full[size_t(k)])) << names[k];
  std::printf("%.0f MB state, 4 rank files: save %.3f s (%.0f MB/s incl. fsync), load at 1 rank %.3f s (%.0f MB/s)\n",
              mb, save_s, mb / save_s, load_s, mb / load_s);
}

}  // namespace
}  // namespace vlpar::io
