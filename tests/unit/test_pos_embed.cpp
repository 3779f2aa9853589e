// Qwen3-VL position-embedding interpolation (kernels/pos_embed.hpp): bit parity with HF v4.57
// fast_pos_embed_interpolate (fixture from torch, both linspace roundings); CPU kernel vs the fp64 reference with
// the derived tolerance; the reference backward vs finite differences; the kernel backward vs the reference
// backward (accumulating); determinism across thread counts; patch order; argument errors.
// Run: ./build/cpu/tests/test_pos_embed
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "fd_check.hpp"
#include "test_util.hpp"
#include "vlpar/kernels/pos_embed.hpp"
#include "vlpar/reference/pos_embed.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

// --- HF fixture -----------------------------------------------------------------------------------------------

struct HfFixture {
  int64_t side = 0, hidden = 0;
  std::vector<VisionGrid> grids;
  std::vector<uint32_t> fused;                              // [rows·hidden] fp32 bits, LinspaceRounding::kFused
  std::vector<std::pair<int64_t, uint32_t>> separate_diffs;  // entries where kSeparate differs
};

bool next_data_line(std::istream& in, std::string& line) {
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return true;
  return false;
}

// Format: see tests/fixtures/vision/make_pos_embed_fixture.py.
bool load_fixture(HfFixture& fx) {
  std::ifstream in(std::string(VLPAR_FIXTURES_DIR) + "/vision/pos_embed_interp.txt");
  if (!in) return false;
  std::string line, key;
  int64_t n = 0;
  if (!next_data_line(in, line)) return false;
  std::istringstream(line) >> key >> fx.side >> key >> fx.hidden;
  if (!next_data_line(in, line)) return false;
  std::istringstream(line) >> key >> n;
  for (int64_t i = 0; i < n && next_data_line(in, line); ++i) {
    VisionGrid g;
    std::istringstream(line) >> g.t >> g.h >> g.w;
    fx.grids.push_back(g);
  }
  if (!next_data_line(in, line)) return false;
  std::istringstream(line) >> key >> n;
  for (int64_t r = 0; r < n && next_data_line(in, line); ++r) {
    std::istringstream ss(line);
    for (int64_t d = 0; d < fx.hidden; ++d) {
      std::string hex;
      ss >> hex;
      fx.fused.push_back(uint32_t(std::stoul(hex, nullptr, 16)));
    }
  }
  if (!next_data_line(in, line)) return false;
  std::istringstream(line) >> key >> n;
  for (int64_t i = 0; i < n && next_data_line(in, line); ++i) {
    std::istringstream ss(line);
    int64_t idx = 0;
    std::string hex;
    ss >> idx >> hex;
    fx.separate_diffs.emplace_back(idx, uint32_t(std::stoul(hex, nullptr, 16)));
  }
  return true;
}

// The fixture's table: (((37·i + 11·d) mod 101) − 50) / 16, exact in fp32.
Tensor fixture_table(Allocator& a, int64_t side, int64_t hidden) {
  Tensor t = Tensor::empty(a, {side * side, hidden}, DType::kF32).value();
  for (int64_t i = 0; i < side * side; ++i)
    for (int64_t d = 0; d < hidden; ++d) t.ptr<float>()[i * hidden + d] = float(((37 * i + 11 * d) % 101) - 50) / 16.f;
  return t;
}

int64_t total_patches(const std::vector<VisionGrid>& grids) {
  int64_t n = 0;
  for (const VisionGrid& g : grids) n += g.patches();
  return n;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

::testing::AssertionResult bitwise_vs_fixture(const Tensor& pe, const std::vector<uint32_t>& want, int64_t hidden) {
  if (pe.numel() != int64_t(want.size()))
    return ::testing::AssertionFailure() << "pe has " << pe.numel() << " values, fixture " << want.size();
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < want.size(); ++i) {
    const uint32_t got = bits(pe.ptr<float>()[i]);
    if (got == want[i]) continue;
    if (bad < 10) {
      float w;
      std::memcpy(&w, &want[i], 4);
      first << "\n  at (" << i / size_t(hidden) << ", " << i % size_t(hidden) << "): got " << pe.ptr<float>()[i]
            << " HF " << w;
    }
    ++bad;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " values differ from HF:" << first.str();
}

TEST(PosEmbed, MatchesHfBitwise) {
  HfFixture fx;
  ASSERT_TRUE(load_fixture(fx)) << "cannot read " << VLPAR_FIXTURES_DIR << "/vision/pos_embed_interp.txt";
  ASSERT_EQ(int64_t(fx.fused.size()), total_patches(fx.grids) * fx.hidden);
  ASSERT_FALSE(fx.separate_diffs.empty()) << "the fixture does not tell the two linspace roundings apart";
  Allocator a;
  Context ctx = test_ctx(2);
  const Tensor table = fixture_table(a, fx.side, fx.hidden);
  Tensor pe = Tensor::empty(a, {total_patches(fx.grids), fx.hidden}, DType::kF32).value();
  PosEmbedDesc d;
  d.side = fx.side;
  d.merge = 2;
  d.linspace = LinspaceRounding::kFused;
  ASSERT_TRUE(pos_embed_forward(ctx, pe, table, fx.grids, d).ok());
  EXPECT_TRUE(bitwise_vs_fixture(pe, fx.fused, fx.hidden)) << "(AVX2/AVX512 torch, fused linspace)";

  std::vector<uint32_t> separate = fx.fused;
  for (const auto& [i, v] : fx.separate_diffs) separate[size_t(i)] = v;
  d.linspace = LinspaceRounding::kSeparate;
  ASSERT_TRUE(pos_embed_forward(ctx, pe, table, fx.grids, d).ok());
  EXPECT_TRUE(bitwise_vs_fixture(pe, separate, fx.hidden)) << "(ATEN_CPU_CAPABILITY=default torch)";
}

// --- kernel vs fp64 reference ---------------------------------------------------------------------------------

const std::vector<VisionGrid> kGrids = {{1, 6, 4}, {3, 2, 8}, {1, 10, 12}, {2, 4, 2}};
constexpr int64_t kSide = 8, kHv = 24;

TEST(PosEmbed, ForwardMatchesFp64Reference) {
  Allocator a;
  Context ctx = test_ctx(3);
  const int64_t np = total_patches(kGrids);
  const Tensor table = random_tensor(a, {kSide * kSide, kHv}, DType::kF32, 11);
  Tensor pe = Tensor::empty(a, {np, kHv}, DType::kF32).value();
  PosEmbedDesc d;
  d.side = kSide;
  ASSERT_TRUE(pos_embed_forward(ctx, pe, table, kGrids, d).ok());
  const auto t64 = to_f64(table);
  std::vector<double> ref(size_t(np * kHv));
  reference::pos_embed_forward(ref.data(), t64.data(), kGrids, kSide, kHv, 2);
  std::vector<float> naive(ref.size());
  const auto t32 = cast_vec<float>(t64);
  reference::pos_embed_forward(naive.data(), t32.data(), kGrids, kSide, kHv, 2);
  EXPECT_TRUE(close_to_reference("pos_embed forward", to_f64(pe), ref, to_double(naive), pe.shape(),
                                 TolOp::kEmbedding, DType::kF32));
}

TEST(PosEmbed, ReferenceBackwardMatchesFiniteDifferences) {
  Allocator a;
  const std::vector<VisionGrid> grids = {{2, 4, 6}, {1, 2, 2}};
  const int64_t G = 5, Hv = 3, np = total_patches(grids);
  const auto table = to_f64(random_tensor(a, {G * G, Hv}, DType::kF32, 21));
  const auto Gout = to_f64(random_tensor(a, {np, Hv}, DType::kF32, 22));
  auto loss = [&](const std::vector<double>& t) {
    std::vector<double> pe(size_t(np * Hv));
    reference::pos_embed_forward(pe.data(), t.data(), grids, G, Hv, 2);
    return dot(pe, Gout);
  };
  std::vector<double> dtable(table.size(), 0.0);
  reference::pos_embed_backward(dtable.data(), Gout.data(), grids, G, Hv, 2);
  EXPECT_TRUE(finite_diff_matches("pos_embed dtable", loss, table, dtable));
}

TEST(PosEmbed, BackwardMatchesFp64ReferenceAndAccumulates) {
  Allocator a;
  Context ctx = test_ctx(3);
  const int64_t np = total_patches(kGrids);
  const Tensor dpe = random_tensor(a, {np, kHv}, DType::kF32, 31);
  const Tensor dtable0 = random_tensor(a, {kSide * kSide, kHv}, DType::kF32, 32);  // accumulate onto this
  Tensor dtable = Tensor::empty(a, dtable0.shape(), DType::kF32).value();
  ASSERT_TRUE(copy_(dtable, dtable0).ok());
  PosEmbedDesc d;
  d.side = kSide;
  ASSERT_TRUE(pos_embed_backward(ctx, dtable, dpe, kGrids, d).ok());
  std::vector<double> ref = to_f64(dtable0);
  reference::pos_embed_backward(ref.data(), to_f64(dpe).data(), kGrids, kSide, kHv, 2);
  std::vector<float> naive = cast_vec<float>(to_f64(dtable0));
  const auto dpe32 = cast_vec<float>(to_f64(dpe));
  reference::pos_embed_backward(naive.data(), dpe32.data(), kGrids, kSide, kHv, 2);
  EXPECT_TRUE(close_to_reference("pos_embed dtable", to_f64(dtable), ref, to_double(naive), dtable.shape(),
                                 TolOp::kEmbedding, DType::kF32));
}

TEST(PosEmbed, BitwiseIndependentOfThreadCount) {
  Allocator a;
  const int64_t np = total_patches(kGrids);
  const Tensor table = random_tensor(a, {kSide * kSide, kHv}, DType::kF32, 41);
  const Tensor dpe = random_tensor(a, {np, kHv}, DType::kF32, 42);
  PosEmbedDesc d;
  d.side = kSide;
  std::vector<Tensor> pes, dts;
  for (int threads : {1, 2, 5}) {
    Context ctx = test_ctx(threads);
    pes.push_back(Tensor::empty(a, {np, kHv}, DType::kF32).value());
    dts.push_back(Tensor::zeros(a, {kSide * kSide, kHv}, DType::kF32).value());
    ASSERT_TRUE(pos_embed_forward(ctx, pes.back(), table, kGrids, d).ok());
    ASSERT_TRUE(pos_embed_backward(ctx, dts.back(), dpe, kGrids, d).ok());
  }
  for (size_t i = 1; i < pes.size(); ++i) {
    EXPECT_TRUE(bitwise_equal("pe", pes[0], pes[i]));
    EXPECT_TRUE(bitwise_equal("dtable", dts[0], dts[i]));
  }
}

// Frames of a video share the embedding; the patch order is merge-window order.
TEST(PosEmbed, PatchOrderAndFrames) {
  int64_t r = 0, c = 0;
  const int64_t want[8][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}};
  for (int64_t q = 0; q < 8; ++q) {
    merge_window_coords(q, 4, 2, r, c);
    EXPECT_EQ(r, want[q][0]) << "q=" << q;
    EXPECT_EQ(c, want[q][1]) << "q=" << q;
  }
  merge_window_coords(8, 4, 2, r, c);  // the next block row
  EXPECT_EQ(r, 2);
  EXPECT_EQ(c, 0);

  Allocator a;
  Context ctx = test_ctx(2);
  const std::vector<VisionGrid> video = {{3, 4, 6}};
  const Tensor table = random_tensor(a, {kSide * kSide, 5}, DType::kF32, 51);
  Tensor pe = Tensor::empty(a, {72, 5}, DType::kF32).value();
  PosEmbedDesc d;
  d.side = kSide;
  ASSERT_TRUE(pos_embed_forward(ctx, pe, table, video, d).ok());
  EXPECT_TRUE(bitwise_equal("frame 1", pe.view().slice(0, 0, 24), pe.view().slice(0, 24, 48)));
  EXPECT_TRUE(bitwise_equal("frame 2", pe.view().slice(0, 0, 24), pe.view().slice(0, 48, 72)));
  // Corner patches sit exactly on table corners (align_corners=True): raster (0, 0) is table row 0, raster
  // (0, w−1) is row G−1, (h−1, 0) is row (G−1)·G, the last patch (h−1, w−1) is row G²−1.
  for (int64_t k = 0; k < 5; ++k) {
    EXPECT_EQ(pe.ptr<float>()[0 * 5 + k], table.ptr<float>()[0 * 5 + k]);
    EXPECT_EQ(pe.ptr<float>()[9 * 5 + k], table.ptr<float>()[(kSide - 1) * 5 + k]);  // q=9: block (0,2), in (0,1)
    EXPECT_EQ(pe.ptr<float>()[14 * 5 + k], table.ptr<float>()[(kSide - 1) * kSide * 5 + k]);  // (3, 0)
    EXPECT_EQ(pe.ptr<float>()[23 * 5 + k], table.ptr<float>()[(kSide * kSide - 1) * 5 + k]);
  }
}

TEST(PosEmbed, LinspaceEndpointsExact) {
  for (int64_t n : {2, 3, 7, 46, 47, 48, 49, 101, 1000})
    for (LinspaceRounding r : {LinspaceRounding::kFused, LinspaceRounding::kSeparate}) {
      EXPECT_EQ(torch_linspace_f32(0, n, 47.f, r), 0.f);
      EXPECT_EQ(torch_linspace_f32(n - 1, n, 47.f, r), 47.f);
      const PosEmbedAxis last = pos_embed_axis(n - 1, n, 48, r);
      EXPECT_EQ(last.lo, 47);
      EXPECT_EQ(last.hi, 47);  // clipped to G − 1
      EXPECT_EQ(last.frac, 0.f);
    }
}

TEST(PosEmbed, BadInputsNameTheProblem) {
  Allocator a;
  Context ctx = test_ctx();
  PosEmbedDesc d;
  d.side = kSide;
  const Tensor table = random_tensor(a, {kSide * kSide, 4}, DType::kF32, 61);
  Tensor pe = Tensor::empty(a, {24, 4}, DType::kF32).value();
  auto msg = [&](const VisionGrid& g, TensorView p, TensorView t) {
    const std::vector<VisionGrid> grids(1, g);
    const Status s = pos_embed_forward(ctx, p, t, grids, d);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  const VisionGrid odd_w{1, 6, 5}, odd_h{1, 3, 8}, no_t{0, 4, 6}, small_grid{1, 4, 4}, ok{1, 4, 6};
  EXPECT_NE(msg(odd_w, pe, table).find("w=5 is not divisible by the merge size 2"), std::string::npos);
  EXPECT_NE(msg(odd_h, pe, table).find("h=3 is not divisible"), std::string::npos);
  EXPECT_NE(msg(no_t, pe, table).find("grid 0 is (0, 4, 6): every side must be >= 1"), std::string::npos);
  const VisionGrid wraps{int64_t{1} << 32, 1 << 16, 1 << 16};  // t·h·w = 2^64: 0 after wrapping
  EXPECT_NE(msg(wraps, pe, table).find("t·h·w is out of range"), std::string::npos);
  const std::vector<VisionGrid> two_large{{1, 1 << 15, 1 << 15}, {1, 1 << 15, 1 << 15}};  // 2^31 in all
  EXPECT_NE(pos_embed_forward(ctx, pe, table, two_large, d).message().find("more than 2147483647 patches in all"),
            std::string::npos);
  EXPECT_NE(msg(small_grid, pe, table).find("pe must be [16, 4]"), std::string::npos);
  const Tensor small = random_tensor(a, {kSide * kSide - 1, 4}, DType::kF32, 62);
  EXPECT_NE(msg(ok, pe, small).find("table must be [64, 4]"), std::string::npos);
  const Tensor i32 = Tensor::zeros(a, {kSide * kSide, 4}, DType::kI32).value();
  EXPECT_NE(msg(ok, pe, i32).find("table must be f32, bf16 or f16"), std::string::npos);
  Tensor dt = Tensor::zeros(a, {kSide * kSide, 4}, DType::kF32).value();
  const std::vector<VisionGrid> grids(1, ok);
  Tensor dt16 = Tensor::zeros(a, {kSide * kSide, 4}, DType::kBF16).value();
  EXPECT_NE(pos_embed_backward(ctx, dt16, pe, grids, d).message().find("dtable must be f32 (gradients"),
            std::string::npos);
  const Status s = pos_embed_backward(ctx, dt, pe.view().slice(0, 0, 20), grids, d);
  EXPECT_NE(s.message().find("dpe must be [24, 4]"), std::string::npos) << s.message();
}

// A bf16 table: the f32 interpolation of the widened table, rounded once into a bf16 output (not rounded into an
// f32 one); the backward from a bf16 dpe equals the f32 backward from the widened dpe. Bitwise (the same f32
// arithmetic).
TEST(PosEmbed, Bf16IsTheRoundedF32Interpolation) {
  Allocator a;
  const Context ctx = test_ctx(2);
  PosEmbedDesc d;
  d.side = kSide;
  d.merge = 2;
  const std::vector<VisionGrid> grids = {{2, 4, 6}, {1, 10, 8}};
  const int64_t np = 2 * 24 + 80, hv = 6;
  const Tensor table = random_tensor(a, {kSide * kSide, hv}, DType::kBF16, 3);
  Tensor wide = Tensor::empty(a, table.shape(), DType::kF32).value();
  ASSERT_TRUE(convert_(wide, table).ok());
  Tensor pe = Tensor::empty(a, {np, hv}, DType::kBF16).value();
  Tensor pe32 = Tensor::empty(a, {np, hv}, DType::kF32).value();
  ASSERT_TRUE(pos_embed_forward(ctx, pe, table, grids, d).ok());
  ASSERT_TRUE(pos_embed_forward(ctx, pe32, wide, grids, d).ok());
  Tensor want = Tensor::empty(a, {np, hv}, DType::kBF16).value();
  ASSERT_TRUE(convert_(want, pe32).ok());
  EXPECT_TRUE(bitwise_equal("bf16 pe", pe, want));
  Tensor pe_mixed = Tensor::empty(a, {np, hv}, DType::kF32).value();  // a bf16 table into an f32 pe: no rounding
  ASSERT_TRUE(pos_embed_forward(ctx, pe_mixed, table, grids, d).ok());
  EXPECT_TRUE(bitwise_equal("f32 pe of a bf16 table", pe_mixed, pe32));
  const Tensor dpe = random_tensor(a, {np, hv}, DType::kBF16, 4);
  Tensor dpe32 = Tensor::empty(a, {np, hv}, DType::kF32).value();
  ASSERT_TRUE(convert_(dpe32, dpe).ok());
  Tensor dt = Tensor::zeros(a, table.shape(), DType::kF32).value();
  Tensor dt32 = Tensor::zeros(a, table.shape(), DType::kF32).value();
  ASSERT_TRUE(pos_embed_backward(ctx, dt, dpe, grids, d).ok());
  ASSERT_TRUE(pos_embed_backward(ctx, dt32, dpe32, grids, d).ok());
  EXPECT_TRUE(bitwise_equal("dtable from a bf16 dpe", dt, dt32));
}

}  // namespace
}  // namespace vlpar
