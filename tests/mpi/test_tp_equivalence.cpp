// Tensor (and sequence) parallelism over the whole world (mpirun -np 2: TP2; -np 4: TP4, where the 2 kv heads are
// replicated on 2 ranks each): the 2-layer decoder stack gives the loss and every gradient (gathered to full
// shape) of the single-process run within kParallelEquivalence (tests/tolerances.hpp), with and without SP, also
// with Qwen3-VL's q/k norm, MRoPE and tied head; the
// TP region boundaries move rank-encoded rows where they should; vocab-parallel cross-entropy equals the
// full-vocab one; the same seed gives the same full weights. VisionTp.*: one Qwen3-VL vision block with its heads
// and MLP split over the world (tp 2 and 4) against the whole block on one rank.
// Run: ctest --preset cpu -L mpi   (or: mpirun -np 2 ./build/cpu/tests/test_tp_equivalence)
#include <gtest/gtest.h>

#include "mpi/mpi_test_util.hpp"
#include "mpi/nn_equivalence.hpp"
#include "vlpar/nn/tensor_parallel.hpp"
#include "vlpar/nn/vision_block.hpp"
#include "vlpar/nn/vocab_parallel.hpp"
#include "vlpar/reference/loss.hpp"

namespace vlpar::test {
namespace {

// Compares every element and reports the first mismatch, without returning early: all ranks must go on issuing
// the same collectives even when one rank's data is wrong (an early ASSERT would desynchronise the group).
template <class Want>
void expect_elements(const std::string& what, const Tensor& got, Want want) {
  int64_t bad = 0, first = -1;
  for (int64_t k = 0; k < got.numel(); ++k)
    if (double(got.ptr<float>()[k]) != want(k) && bad++ == 0) first = k;
  EXPECT_EQ(bad, 0) << what << ": first mismatch at element " << first << ": got "
                    << (first >= 0 ? got.ptr<float>()[first] : 0.f) << ", want " << (first >= 0 ? want(first) : 0.0);
}

// Row i of rank r carries payload(r, i·H + c): after the boundary each row says where it came from.
TEST(TpRegions, BoundariesMoveRankEncodedRows) {
  auto world = world_comm("tp");
  ASSERT_TRUE(world);
  const int tp = world->size(), r = world->rank();
  const int64_t N = 4 * tp, H = 3;
  Allocator alloc;
  for (bool sp : {false, true}) {
    const nn::TensorParallel group{world.get(), sp};
    const int64_t Nl = group.local_tokens(N);
    ASSERT_EQ(Nl, sp ? N / tp : N);
    Tensor in = Tensor::empty(alloc, {Nl, H}, DType::kF32).value();
    for (int64_t k = 0; k < in.numel(); ++k) in.ptr<float>()[k] = float(payload(DType::kF32, r, k));
    // enter: SP all-gathers the token slices in rank order; without SP the input passes unchanged.
    Tensor full = Tensor::empty(alloc, {N, H}, DType::kF32).value();
    ASSERT_TRUE(nn::region_enter_forward(group, full, in).ok());
    const std::string mode = sp ? " (sp)" : " (no sp)";
    expect_elements("enter forward" + mode, full, [&](int64_t k) {
      return sp ? payload(DType::kF32, int(k / (Nl * H)), k % (Nl * H)) : payload(DType::kF32, r, k);
    });
    // exit: every rank contributes payload(q, k) to a [N, H] partial; the sum over ranks lands whole (no SP) or as
    // this rank's token slice (SP).
    Tensor partial = Tensor::empty(alloc, {N, H}, DType::kF32).value();
    for (int64_t k = 0; k < N * H; ++k) partial.ptr<float>()[k] = float(payload(DType::kF32, r, k));
    Tensor out = Tensor::empty(alloc, {Nl, H}, DType::kF32).value();
    ASSERT_TRUE(nn::region_exit_forward(group, out, partial).ok());
    const int64_t first = group.first_local_token(N) * H;
    auto summed = [&](int64_t k) {
      double want = 0;
      for (int q = 0; q < tp; ++q) want += payload(DType::kF32, q, first + k);
      return want;
    };
    expect_elements("exit forward" + mode, out, summed);
    // Conjugates: exit⁻¹ gathers (SP) or passes; enter⁻¹ sums over ranks, scattering the slices under SP.
    Tensor dpartial = Tensor::empty(alloc, {N, H}, DType::kF32).value();
    ASSERT_TRUE(nn::region_exit_backward(group, dpartial, in).ok());
    expect_elements("exit backward" + mode, dpartial, [&](int64_t k) { return double(full.ptr<float>()[k]); });
    for (int64_t k = 0; k < N * H; ++k) partial.ptr<float>()[k] = float(payload(DType::kF32, r, k));  // was scratch
    Tensor din = Tensor::empty(alloc, {Nl, H}, DType::kF32).value();
    ASSERT_TRUE(nn::region_enter_backward(group, din, partial).ok());
    expect_elements("enter backward" + mode, din, summed);
  }
}

TEST(TpEquivalence, SameSeedGivesTheSingleProcessWeights) {
  auto world = world_comm("tp");
  ASSERT_TRUE(world);
  const nn::TransformerConfig cfg = tiny_decoder_config();
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {world.get(), false}, kNnSeed, alloc);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto full = gather_full(cfg, world.get(), false, model->params(), "weights");
  auto single = nn::DecoderModel::create(ctx, cfg, {}, kNnSeed, alloc).value();
  const auto want = views_as<double>(single.params());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(full[i], want[i]) << model->layout()[i].name;
}

// Full-vocab logits on every rank; each rank keeps its vocab block. Labels hit every rank's block and one row
// is ignored. fp64 reference: reference::cross_entropy on the full logits; naive: the same in float.
TEST(TpEquivalence, VocabParallelCrossEntropyEqualsFullVocab) {
  auto world = world_comm("tp");
  ASSERT_TRUE(world);
  const int tp = world->size();
  const int64_t N = 9, V = 64, ignore = -100;
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  // Rows with very different ranges, so each rank's local max differs from the global one.
  Tensor full = random_tensor(alloc, {N, V}, DType::kF32, 77, -4.f, 4.f);
  for (int64_t n = 0; n < N; ++n) full.ptr<float>()[n * V + (n * 7) % V] += float(3 * n);
  std::vector<int64_t> labels(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) labels[size_t(n)] = (n * 13 + 5) % V;
  labels[4] = ignore;
  const Range block = even_shard(V, tp, world->rank());
  Tensor local = Tensor::empty(alloc, {N, block.size()}, DType::kF32).value();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < block.size(); ++j) local.ptr<float>()[n * block.size() + j] = full.ptr<float>()[n * V + block.begin + j];
  Tensor lse = Tensor::empty(alloc, {N}, DType::kF32).value();
  const TensorView lab(labels.data(), DType::kI64, {N});
  auto r = nn::vocab_parallel_cross_entropy_forward(ctx, {world.get(), false}, lse, local, lab, block, ignore);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->num_valid, N - 1);
  ASSERT_TRUE(nn::vocab_parallel_cross_entropy_backward(ctx, {world.get(), false}, local, local, lab, lse, block, ignore,
                                                        r->num_valid, 1.f).ok());
  const std::vector<double> z64 = to_f64(full);
  std::vector<double> dz64(size_t(N * V));
  const double loss64 = reference::cross_entropy(dz64.data(), z64.data(), labels.data(), N, V, ignore, true);
  const std::vector<float> z32 = cast_vec<float>(z64);
  std::vector<float> dz32(size_t(N * V));
  const float loss32 = reference::cross_entropy(dz32.data(), z32.data(), labels.data(), N, V, ignore, true);
  EXPECT_TRUE(close_to_reference("vocab-parallel loss", std::vector<double>{r->loss}, std::vector<double>{loss64},
                                 std::vector<double>{double(loss32)}, Shape{1}, TolOp::kCrossEntropy, DType::kF32));
  std::vector<double> mine64, mine32, got;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < block.size(); ++j) {
      mine64.push_back(dz64[size_t(n * V + block.begin + j)]);
      mine32.push_back(double(dz32[size_t(n * V + block.begin + j)]));
      got.push_back(local.ptr<float>()[n * block.size() + j]);
    }
  EXPECT_TRUE(close_to_reference("vocab-parallel dlogits", got, mine64, mine32, Shape{N, block.size()},
                                 TolOp::kCrossEntropy, DType::kF32));
}

void run_tp_equivalence(bool sp, const nn::TransformerConfig& cfg = tiny_decoder_config(), bool mrope = false) {
  auto world = world_comm("tp");
  ASSERT_TRUE(world);
  HostBatch batch = make_host_batch({11, 9}, cfg.vocab, 3, cfg.ignore_index);
  if (mrope) add_mrope_positions(batch);
  const FullRun single = single_process_run(cfg, batch);
  Allocator alloc;
  Context ctx = test_ctx(1);
  ctx.allocator = &alloc;
  auto model = nn::DecoderModel::create(ctx, cfg, {world.get(), sp}, kNnSeed, alloc);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  nn::DecoderStash st;
  const Batch b = batch_views(batch);
  auto r = model->forward(ctx, b, st);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(model->backward(ctx, b, st).ok());
  const std::string what = "tp" + std::to_string(world->size()) + (sp ? "+sp" : "") + (cfg.qk_norm ? " qk_norm" : "") +
                           (mrope ? " mrope" : "") + (cfg.tie_word_embeddings ? " tied" : "");
  const auto grads = gather_full(cfg, world.get(), sp, model->grads(), what);
  expect_matches_single(cfg, single, batch, r->loss, grads, what);
}

TEST(TpEquivalence, MatchesSingleProcess) { run_tp_equivalence(false); }
TEST(TpEquivalence, WithSequenceParallelMatchesSingleProcess) { run_tp_equivalence(true); }

// Qwen3-VL text switches under TP: q_norm/k_norm weight gradients are partial sums over each rank's heads (and, at
// tp 4 > 2 kv heads, over the replicas of a kv head) that backward all-reduces; MRoPE rows; the tied head's
// gradient adds into the vocab-split embedding shard.
TEST(TpEquivalence, Qwen3TextMatchesSingleProcess) {
  run_tp_equivalence(false, tiny_qwen3_config(true), true);
  run_tp_equivalence(true, tiny_qwen3_config(false), true);
}

// bf16 (parameters and activations; gradients f32) under TP and TP + SP against the single-process bf16 run: the
// same triangle rule (kParallelEquivalence) with the single run's own bf16-level error against fp64 as the scale.
// TP moves bf16 roundings (each rank's partial sum is stored in bf16 before the f32 all-reduce rounds once more), so
// the runs differ at that level; a missing reduction or a wrong shard is O(|ref|).
TEST(TpEquivalence, Bf16MatchesSingleProcess) {
  nn::TransformerConfig cfg = tiny_qwen3_config(true);
  cfg.activation = DType::kBF16;
  run_tp_equivalence(false, cfg, true);
  run_tp_equivalence(true, cfg, true);
}

// ---- vision tensor parallelism ----------------------------------------------------------------------------------

// One vision block (8 heads of 8, MLP 48, three images as segments) with its shards on each rank: out and dx are
// the single-rank block's within 1e-5 (the proj / fc2 partial sums and the qkv / fc1 input-gradient parts are
// added over tp), each rank's weight-gradient shard equals the same rows / columns of the single-rank gradient,
// and the replicated norms' and biases' gradients are whole on every rank.
TEST(VisionTp, BlockMatchesOneRank) {
  auto tp = world_comm("vision_tp");
  ASSERT_TRUE(tp);
  const int P = tp->size(), r = tp->rank();
  nn::VisionConfig cfg;
  cfg.hidden = 64;
  cfg.heads = 8;
  cfg.intermediate = 48;
  cfg.depth = 1;
  cfg.patch = 2;
  cfg.temporal_patch = 2;
  cfg.merge = 2;
  cfg.out_hidden = 16;
  cfg.num_position_embeddings = 16;
  cfg.deepstack_indexes = {};
  const int64_t Hv = cfg.hidden, Iv = cfg.intermediate, hv = Hv / P, iv = Iv / P;
  Allocator alloc;
  Context ctx;
  ctx.allocator = &alloc;
  const std::vector<VisionGrid> grids = {{1, 2, 4}, {1, 4, 4}, {2, 2, 2}};
  auto seq = nn::make_vision_seq(alloc, cfg, grids);
  ASSERT_TRUE(seq.ok()) << seq.status().to_string();
  const int64_t N = seq.value().num_patches;
  // Full weights (the same on every rank) and their gradients, in the order of VisionBlockWeights.
  const std::vector<Shape> shapes = {{Hv}, {Hv}, {3 * Hv, Hv}, {3 * Hv}, {Hv, Hv}, {Hv},
                                     {Hv}, {Hv}, {Iv, Hv},     {Iv},     {Hv, Iv}, {Hv}};
  std::vector<Tensor> w, g, wl, gl;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bool norm_w = i == 0 || i == 6;
    w.push_back(random_tensor(alloc, shapes[i], DType::kF32, 100 + i, norm_w ? 0.5f : -0.3f, norm_w ? 1.5f : 0.3f));
    g.push_back(Tensor::zeros(alloc, shapes[i], DType::kF32).value());
  }
  // This rank's shards: qkv rows of its heads in each third, proj / fc2 columns, fc1 rows (bias alike).
  auto rows = [&](const Tensor& t, int64_t per_third, int thirds) {
    const int64_t cols = t.view().ndim() == 2 ? t.view().size(1) : 1;
    const Shape shape = t.view().ndim() == 2 ? Shape{per_third * thirds, cols} : Shape{per_third * thirds};
    Tensor out = Tensor::empty(alloc, shape, DType::kF32).value();
    const int64_t full_third = t.view().size(0) / thirds;
    for (int k = 0; k < thirds; ++k)
      std::memcpy(out.ptr<float>() + k * per_third * cols, t.ptr<float>() + (k * full_third + r * per_third) * cols,
                  size_t(per_third * cols) * sizeof(float));
    return out;
  };
  auto cols = [&](const Tensor& t, int64_t width) {
    const int64_t R = t.view().size(0), C = t.view().size(1);
    Tensor out = Tensor::empty(alloc, {R, width}, DType::kF32).value();
    for (int64_t i = 0; i < R; ++i)
      std::memcpy(out.ptr<float>() + i * width, t.ptr<float>() + i * C + r * width, size_t(width) * sizeof(float));
    return out;
  };
  auto shard = [&](const std::vector<Tensor>& v) {
    return std::vector<Tensor>{v[0], v[1], rows(v[2], hv, 3), rows(v[3], hv, 3), cols(v[4], hv), v[5],
                               v[6], v[7], rows(v[8], iv, 1), rows(v[9], iv, 1), cols(v[10], iv), v[11]};
  };
  wl = shard(w);
  for (const Tensor& t : shard(g)) gl.push_back(Tensor::zeros(alloc, t.shape(), DType::kF32).value());
  auto views = [](std::vector<Tensor>& v) {
    return nn::VisionBlockWeights{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]};
  };
  const Tensor x = random_tensor(alloc, {N, Hv}, DType::kF32, 7);
  const Tensor dout = random_tensor(alloc, {N, Hv}, DType::kF32, 8);
  auto run = [&](const nn::VisionBlock& b, Tensor& out, Tensor& dx) {
    out = Tensor::empty(alloc, {N, Hv}, DType::kF32).value();
    dx = Tensor::empty(alloc, {N, Hv}, DType::kF32).value();
    nn::VisionBlockStash st;
    Status s = b.forward(ctx, out, x, seq.value(), st);
    ASSERT_TRUE(s.ok()) << s.to_string();
    s = b.backward(ctx, dx, dout, seq.value(), st);
    ASSERT_TRUE(s.ok()) << s.to_string();
  };
  Tensor out1, dx1, out2, dx2;
  run(nn::VisionBlock(cfg, views(w), views(g)), out1, dx1);
  run(nn::VisionBlock(cfg, views(wl), views(gl), nn::TensorParallel{tp.get(), false}), out2, dx2);
  auto near = [](const char* what, const Tensor& a, const Tensor& b) {
    const std::vector<double> av = to_f64(a), bv = to_f64(b);
    ASSERT_EQ(av.size(), bv.size()) << what;
    double scale = 0;
    for (double v : bv) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0) << what;
    for (size_t i = 0; i < av.size(); ++i) ASSERT_NEAR(av[i], bv[i], 1e-5 * scale) << what << " element " << i;
  };
  near("out", out2, out1);
  near("dx", dx2, dx1);
  const std::vector<Tensor> want = shard(g);  // the single-rank gradients cut like the weights
  const char* names[] = {"norm1 w", "norm1 b", "qkv w", "qkv b", "proj w", "proj b",
                         "norm2 w", "norm2 b", "fc1 w", "fc1 b", "fc2 w", "fc2 b"};
  for (size_t i = 0; i < want.size(); ++i) near(names[i], gl[i], want[i]);
}

}  // namespace
}  // namespace vlpar::test
