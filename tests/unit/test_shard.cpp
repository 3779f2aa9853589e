// Tensor-parallel shard arithmetic without MPI: head/kv-head/vocab/intermediate blocks, the fused gate/up
// pieces, vocab ownership, layout-invariant init (the shards of every tp assemble into the TP1 weights bit for
// bit) and TransformerConfig validation messages.
// Run: ./build/cpu/tests/test_shard
#include <gtest/gtest.h>

#include <vector>

#include "nn_reference.hpp"
#include "test_util.hpp"
#include "vlpar/nn/config.hpp"
#include "vlpar/nn/decoder.hpp"
#include "vlpar/kernels/vocab_block.hpp"
#include "vlpar/core/shard.hpp"
#include "vlpar/parallel/placement.hpp"

namespace vlpar::nn {
namespace {

TEST(NnShard, EvenShardTilesTheRange) {
  for (int tp : {1, 2, 3, 4, 6}) {
    int64_t next = 0;
    for (int r = 0; r < tp; ++r) {
      const Range b = even_shard(48, tp, r);
      EXPECT_EQ(b.begin, next) << "tp " << tp << " rank " << r;
      EXPECT_EQ(b.size(), 48 / tp);
      next = b.end;
    }
    EXPECT_EQ(next, 48);
  }
}

// Every query head of a rank must read a kv head the rank holds (GQA: head h reads kv head h / (heads / H_kv)).
TEST(NnShard, KvHeadsCoverTheirQueryHeads) {
  struct Case { int heads, kv, tp, replicas; };
  for (Case c : {Case{4, 2, 1, 1}, Case{4, 2, 2, 1}, Case{4, 2, 4, 2}, Case{8, 1, 4, 4}, Case{8, 4, 2, 1},
                 Case{16, 4, 8, 2}}) {
    EXPECT_EQ(kv_head_replicas(c.kv, c.tp), c.replicas);
    std::vector<int> holders(size_t(c.kv), 0);
    for (int r = 0; r < c.tp; ++r) {
      const Range q = even_shard(c.heads, c.tp, r), kv = kv_head_shard(c.kv, c.tp, r);
      EXPECT_EQ(kv.size(), std::max(1, c.kv / c.tp));
      for (int64_t h = q.begin; h < q.end; ++h) {
        const int64_t need = h / (c.heads / c.kv);
        EXPECT_TRUE(kv.contains(need)) << "heads " << c.heads << " kv " << c.kv << " tp " << c.tp << " rank " << r
                                       << ": query head " << h << " needs kv head " << need;
        // The local GQA map the attention kernel applies: local head i reads local kv head i / (hq / hkv).
        const int64_t local = (h - q.begin) / (q.size() / kv.size());
        EXPECT_EQ(kv.begin + local, need);
      }
      for (int64_t k = kv.begin; k < kv.end; ++k) ++holders[size_t(k)];
    }
    for (int k = 0; k < c.kv; ++k) EXPECT_EQ(holders[size_t(k)], c.replicas) << "kv head " << k;
  }
}

TEST(NnShard, VocabOwnershipAndLocalIndex) {
  const int64_t V = 64;
  for (int tp : {1, 2, 4}) {
    for (int64_t id = 0; id < V; ++id) {
      int owners = 0;
      for (int r = 0; r < tp; ++r) {
        const Range b = even_shard(V, tp, r);
        const int64_t local = VocabBlock{b.begin, V}.local(id, b.size());
        if (local < 0) continue;
        ++owners;
        EXPECT_EQ(r, vocab_owner(id, V, tp));
        EXPECT_EQ(b.begin + local, id);
        EXPECT_LT(local, V / tp);
      }
      EXPECT_EQ(owners, 1) << "id " << id << " tp " << tp;
    }
    // ignore_index never maps to a row.
    EXPECT_EQ((VocabBlock{0, V}.local(-100, V / tp)), -1);
  }
}

TEST(NnShard, FusedGateUpPiecesMatch) {
  const int64_t I = 48, H = 32;
  for (int tp : {1, 2, 4}) {
    std::vector<int> seen(size_t(2 * I), 0);
    for (int r = 0; r < tp; ++r) {
      const ParamShard p = make_fused_gate_up_param("gu", I, H, even_shard(I, tp, r), 0, InitRule::zeros());
      ASSERT_EQ(p.pieces.size(), 2u);
      EXPECT_EQ(p.local_shape(), Shape({2 * I / tp, H}));
      EXPECT_EQ(p.pieces[0].full_begin, r * I / tp);              // gate rows
      EXPECT_EQ(p.pieces[1].full_begin, I + r * I / tp);          // the matching up rows
      EXPECT_EQ(p.pieces[1].local_begin, p.pieces[0].length);     // local layout: gate | up
      for (const ShardPiece& pc : p.pieces)
        for (int64_t i = 0; i < pc.length; ++i) ++seen[size_t(pc.full_begin + i)];
    }
    for (int64_t i = 0; i < 2 * I; ++i) EXPECT_EQ(seen[size_t(i)], 1) << "row " << i << " tp " << tp;
  }
}

// Same seed ⇒ same full weights at any tp: every rank's shard, put in its place, rebuilds the TP1 tensors exactly,
// and the split parameters' pieces cover each full element exactly once.
TEST(NnShard, LayoutInvariantInitAssemblesTheFullWeights) {
  const TransformerConfig cfg = test::tiny_decoder_config();
  Allocator alloc;
  const Context ctx = test::test_ctx(1);  // hundreds of tiny inits: thread start-up would dominate
  const uint64_t seed = 20240611;
  const std::vector<ParamShard> full = DecoderModel::param_layout(cfg, 1, 0, false);
  for (int tp : {2, 4}) {
    ASSERT_TRUE(cfg.validate_tp(tp).ok());
    for (size_t i = 0; i < full.size(); ++i) {
      Tensor want = Tensor::empty(alloc, full[i].full_shape, DType::kF32).value();
      ASSERT_TRUE(init_param_shard(ctx, want, full[i], seed).ok());
      Tensor got = Tensor::zeros(alloc, full[i].full_shape, DType::kF32).value();
      Tensor count = Tensor::zeros(alloc, full[i].full_shape, DType::kF32).value();
      for (int r = 0; r < tp; ++r) {
        const ParamShard p = DecoderModel::param_layout(cfg, tp, r, false)[i];
        EXPECT_EQ(p.name, full[i].name);
        EXPECT_EQ(p.param_id, full[i].param_id);
        Tensor local = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
        ASSERT_TRUE(init_param_shard(ctx, local, p, seed).ok()) << p.name;
        ASSERT_TRUE(scatter_shard_into_full(got, local, p).ok()) << p.name;
        if (p.shard_dim < 0 || p.grad_summed_over_tp) continue;  // replicated: counted once below
        Tensor ones = Tensor::empty(alloc, p.local_shape(), DType::kF32).value();
        ParamShard as_ones = p;
        as_ones.init = InitRule::ones();
        ASSERT_TRUE(init_param_shard(ctx, ones, as_ones, seed).ok());
        Tensor one_full = Tensor::zeros(alloc, p.full_shape, DType::kF32).value();
        ASSERT_TRUE(scatter_shard_into_full(one_full, ones, p).ok());
        for (int64_t k = 0; k < one_full.numel(); ++k) count.ptr<float>()[k] += one_full.ptr<float>()[k];
      }
      EXPECT_TRUE(test::bitwise_equal(full[i].name + " tp" + std::to_string(tp), got, want));
      const bool split_once = full[i].shard_dim >= 0 && kv_head_replicas(cfg.kv_heads, tp) == 1;
      if (split_once) {
        for (int64_t k = 0; k < count.numel(); ++k)
          ASSERT_EQ(count.ptr<float>()[k], 1.f) << full[i].name << " tp " << tp << " element " << k;
      }
    }
  }
}

TEST(NnShard, LayoutMarksPartialGradients) {
  const TransformerConfig cfg = test::tiny_decoder_config();  // kv_heads 2
  for (const ParamShard& p : DecoderModel::param_layout(cfg, 4, 1, true)) {
    const bool norm = p.name.find("norm") != std::string::npos;
    const bool kv = p.name.find("k_proj") != std::string::npos || p.name.find("v_proj") != std::string::npos;
    EXPECT_EQ(p.grad_summed_over_tp, norm || kv) << p.name;  // SP norms, kv heads replicated at tp 4 > 2
  }
  for (const ParamShard& p : DecoderModel::param_layout(cfg, 2, 1, false)) EXPECT_FALSE(p.grad_summed_over_tp) << p.name;
}

// The registry's shards in the placement vocabulary: every single-piece shard of a tp 2 layout is the block that
// local_block() computes from param_placements(); replicated ones are Replicate everywhere; a gradient adds Partial
// on its group's replica axis; expert and vision parameters live on their own axes (experts: the expert dim on ep,
// the width on etp).
TEST(NnShard, ParamPlacementsGiveTheShardsBlock) {
  using parallel::Axis;
  const TransformerConfig cfg = test::tiny_decoder_config();
  for (int rank = 0; rank < 2; ++rank) {
    const auto size_of = [](Axis a) { return a == Axis::kTp ? 2 : 1; };
    const auto index_of = [rank](Axis a) { return a == Axis::kTp ? rank : 0; };
    for (const ParamShard& p : DecoderModel::param_layout(cfg, 2, rank, false)) {
      const parallel::Placements pl = parallel::param_placements(p);
      if (p.shard_dim < 0) {
        EXPECT_EQ(pl, parallel::Placements{}) << p.name;
        continue;
      }
      EXPECT_EQ(pl.at(Axis::kTp), parallel::Placement(parallel::Shard{p.shard_dim})) << p.name;
      if (p.pieces.size() != 1) continue;  // the fused gate/up weight: two pieces, described by ParamShard alone
      auto block = parallel::local_block(p.full_shape, pl, size_of, index_of);
      ASSERT_TRUE(block.ok()) << p.name << ": " << block.status().to_string();
      EXPECT_EQ(block->shape(), p.local_shape()) << p.name;
      EXPECT_EQ(block->dims[size_t(p.shard_dim)].begin, p.pieces[0].full_begin) << p.name;
    }
  }
  ParamShard vision = make_replicated_param("model.visual.blocks.0.norm1.weight", Shape{8}, 0, InitRule::ones());
  vision.replica = ReplicaGroup::kVision;
  EXPECT_EQ(parallel::param_placements(vision, true).to_string(), "vision_dp: partial");
  ParamShard expert = make_split_param("experts.down_proj", Shape{4, 6}, 0, Range{0, 2}, 1, InitRule::ones());
  expert.replica = ReplicaGroup::kExpert;
  EXPECT_EQ(parallel::param_placements(expert, true).to_string(), "ep: shard(0), edp: partial");
  const ParamShard expert_tp = split_inner(expert, 1, Range{3, 6}, false);
  EXPECT_EQ(parallel::param_placements(expert_tp).to_string(), "ep: shard(0), etp: shard(1)");
  auto block = parallel::local_block(
      expert_tp.full_shape, parallel::param_placements(expert_tp), [](Axis) { return 2; },
      [](Axis a) { return a == Axis::kEtp ? 1 : 0; });
  ASSERT_TRUE(block.ok()) << block.status().to_string();
  EXPECT_EQ(block->shape(), expert_tp.local_shape());
  EXPECT_EQ(block->dims[1].begin, 3);
  EXPECT_EQ(parallel::param_placements(make_replicated_param("norm", Shape{8}, 2, InitRule::ones()), true).to_string(),
            "dp_cp: partial");
}

// q_norm/k_norm sit between v_proj and o_proj, replicated [D], their gradient a partial sum at any tp > 1 (each rank
// normalises only its heads); a tied model has no lm_head.weight.
TEST(NnShard, Qwen3LayoutHasQkNormsAndTiesTheHead) {
  for (bool tied : {true, false}) {
    const TransformerConfig cfg = test::tiny_qwen3_config(tied);
    EXPECT_EQ(DecoderModel::params_per_layer(cfg), 10u);
    for (int tp : {1, 2, 4}) {
      const std::vector<ParamShard> l = DecoderModel::param_layout(cfg, tp, tp - 1, false);
      ASSERT_EQ(l.size(), size_t(1 + 10 * cfg.num_layers + (tied ? 1 : 2)));
      for (int layer = 0; layer < cfg.num_layers; ++layer) {
        const size_t b = 1 + 10 * size_t(layer);
        const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
        EXPECT_EQ(l[b + 3].name, p + "v_proj.weight");
        EXPECT_EQ(l[b + 4].name, p + "q_norm.weight");
        EXPECT_EQ(l[b + 5].name, p + "k_norm.weight");
        EXPECT_EQ(l[b + 6].name, p + "o_proj.weight");
        for (size_t k : {b + 4, b + 5}) {
          EXPECT_EQ(l[k].full_shape, Shape({cfg.head_dim}));
          EXPECT_EQ(l[k].local_shape(), Shape({cfg.head_dim}));
          EXPECT_EQ(l[k].shard_dim, -1);
          EXPECT_EQ(l[k].grad_summed_over_tp, tp > 1) << l[k].name << " tp " << tp;
        }
      }
      EXPECT_EQ(l.back().name, tied ? "model.norm.weight" : "lm_head.weight");
      for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l[i].param_id, uint32_t(i));
    }
  }
}

TEST(NnShard, ConfigValidationExplainsInOneSentence) {
  TransformerConfig c = test::tiny_decoder_config();
  EXPECT_TRUE(c.validate_tp(4).ok());
  Status s = c.validate_tp(3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tp=3 does not divide 4 attention heads"), std::string::npos) << s.to_string();
  c.kv_heads = 3;
  s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kv_heads 3 does not divide heads 4"), std::string::npos) << s.to_string();
  c = test::tiny_decoder_config();
  c.vocab = 66;
  s = c.validate_tp(4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not divide vocab 66"), std::string::npos) << s.to_string();
  c = test::tiny_decoder_config();
  c.heads = 8;
  c.kv_heads = 4;
  s = c.validate_tp(8);  // 8 > 4 kv heads but divides: replicated, fine
  EXPECT_TRUE(s.ok()) << s.to_string();
  c.kv_heads = 8;
  c.heads = 24;
  s = c.validate_tp(6);  // 6 and 8 kv heads: neither divides the other
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("one must divide the other"), std::string::npos) << s.to_string();
  // MRoPE sections: only negatives are rejected (transformers 4.57.1 slices whatever it gets; Σ = D/2 is a
  // convention), and only when MRoPE is on.
  c = test::tiny_qwen3_config();
  c.mrope_section = {4, -1, 1};
  s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mrope_section [4, -1, 1] must be non-negative"), std::string::npos) << s.to_string();
  c.rope = RopeKind::k1D;
  EXPECT_TRUE(c.validate().ok());
  c = test::tiny_qwen3_config();
  c.mrope_section = {8, 8, 8};  // Σ 24 > D/2 = 8: accepted, as HF does (the extra indices are dropped)
  EXPECT_TRUE(c.validate().ok());
  c.rope = static_cast<RopeKind>(7);
  s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rope kind 7 is unknown"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace vlpar::nn
