// CUDA RMSNorm, SwiGLU and rotary kernels, called through the public ops with CUDA views, checked against the
// fp64 references (include/vlpar/reference/) with the derived rule of tests/tolerances.hpp, twice: once with the
// float reference as the naive baseline and once with the CPU kernel of the same op as the baseline (the GPU may
// be at most 2x less accurate than the CPU, plus output rounding). f32 and bf16 (+ f32 weights with bf16
// activations); vectorised and scalar paths (aligned, odd and misaligned sizes); warp- and block-per-row RMSNorm;
// strided row views (halves of fused tensors); bitwise determinism of the RMSNorm dw reduction across two
// workspace sources; rotary in place. Every GPU test skips ("no CUDA device") where there is no GPU.
// CpuOnlyBuild.*: in a build without CUDA, CUDA views give a Status (kNotSupported) and never touch memory.
// Run: ctest --test-dir build/cuda -L gpu   (or ./build/cuda/tests/test_cuda_kernels)
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "test_util.hpp"
#include "vlpar/core/device.hpp"
#include "vlpar/kernels/activation.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/kernels/rotary.hpp"
#include "vlpar/reference/activation.hpp"
#include "vlpar/reference/norm.hpp"
#include "vlpar/reference/rotary.hpp"

namespace vlpar {
namespace {
using namespace vlpar::test;

// ---- RMSNorm ---------------------------------------------------------------------------------------------

enum class Layout { kContiguous, kHalfOfFused, kMisaligned };

/// Full buffer shape for a [rows, H] view in `layout`.
Shape full_shape(int64_t rows, int64_t H, Layout layout) {
  switch (layout) {
    case Layout::kHalfOfFused: return {rows, 2 * H};
    case Layout::kMisaligned: return {rows, H + 1};
    default: return {rows, H};
  }
}
/// [rows, H] view of a full buffer: all of it, its first half (row stride 2H), or columns 1..H (every row
/// starts one element past an aligned address, which forces the scalar kernels).
TensorView layout_view(const Tensor& full, Layout layout, int64_t H) {
  switch (layout) {
    case Layout::kHalfOfFused: return full.view().slice(1, 0, H);
    case Layout::kMisaligned: return full.view().slice(1, 1, H + 1);
    default: return full.view();
  }
}

struct RmsCase {
  int64_t rows, H;
  DType dtype, w_dtype;
  Layout layout;
};

std::string rms_case_name(const RmsCase& c) {
  static const char* layouts[] = {"contig", "fusedhalf", "misaligned"};
  return fmt::format("r{}_h{}_{}_w{}_{}", c.rows, c.H, dtype_name(c.dtype), dtype_name(c.w_dtype),
                     layouts[int(c.layout)]);
}

class VLPAR_SUITE(RmsNorm) : public ::testing::TestWithParam<RmsCase> {};

VLPAR_TEST_P(VLPAR_SUITE(RmsNorm), ForwardBackwardMatchReferenceAndCpu) {
  VLPAR_REQUIRE_GPU();
  const RmsCase c = GetParam();
  const int64_t R = c.rows, H = c.H;
  const float eps = 1e-6f;
  Allocator a;
  const Context g = gpu_ctx();
  const Context cpu = test_ctx(2);
  const Shape fs = full_shape(R, H, c.layout);
  Tensor x = random_tensor(a, fs, c.dtype, 101, -2.f, 2.f), dy = random_tensor(a, fs, c.dtype, 102);
  Tensor w = random_tensor(a, {H}, c.w_dtype, 103, 0.5f, 1.5f);
  Tensor dw0 = random_tensor(a, {H}, DType::kF32, 104);  // dw accumulates: start from non-zero values

  // GPU through the public ops.
  Tensor xd = upload(a, x), dyd = upload(a, dy), wd = upload(a, w), dwd = upload(a, dw0);
  Tensor yd = Tensor::zeros(a, fs, c.dtype, Device::cuda(0)).value();
  Tensor dxd = Tensor::zeros(a, fs, c.dtype, Device::cuda(0)).value();
  Tensor rstdd = Tensor::zeros(a, {R}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(
      rmsnorm_forward(g, layout_view(yd, c.layout, H), rstdd, layout_view(xd, c.layout, H), wd, eps));
  VLPAR_ASSERT_OK_OR_SKIP(rmsnorm_backward(g, layout_view(dxd, c.layout, H), dwd, layout_view(dyd, c.layout, H),
                                           layout_view(xd, c.layout, H), wd, rstdd));
  const auto y_gpu = gather_f64(layout_view(download(a, yd), c.layout, H));
  const auto dx_gpu = gather_f64(layout_view(download(a, dxd), c.layout, H));
  const auto rstd_gpu = to_f64(download(a, rstdd)), dw_gpu = to_f64(download(a, dwd));

  // CPU kernel of the same ops.
  Tensor y = Tensor::zeros(a, fs, c.dtype).value(), dx = Tensor::zeros(a, fs, c.dtype).value();
  Tensor rstd = Tensor::zeros(a, {R}, DType::kF32).value(), dw = Tensor::empty(a, {H}, DType::kF32).value();
  ASSERT_TRUE(copy_(dw, dw0).ok());
  ASSERT_TRUE(rmsnorm_forward(cpu, layout_view(y, c.layout, H), rstd, layout_view(x, c.layout, H), w, eps).ok());
  ASSERT_TRUE(rmsnorm_backward(cpu, layout_view(dx, c.layout, H), dw, layout_view(dy, c.layout, H),
                               layout_view(x, c.layout, H), w, rstd)
                  .ok());

  // fp64 reference and the float "naive" baseline on the same rounded inputs.
  const auto x64 = gather_f64(layout_view(x, c.layout, H)), g64 = gather_f64(layout_view(dy, c.layout, H));
  const auto w64 = to_f64(w);
  const size_t n = size_t(R * H);
  std::vector<double> y64(n), r64(static_cast<size_t>(R)), dx64(n), dw64 = to_f64(dw0);
  reference::rmsnorm_forward(y64.data(), r64.data(), x64.data(), w64.data(), R, H, double(eps));
  reference::rmsnorm_backward(dx64.data(), dw64.data(), g64.data(), x64.data(), w64.data(), r64.data(), R, H);
  const auto xf = cast_vec<float>(x64), gf = cast_vec<float>(g64), wf = cast_vec<float>(w64);
  std::vector<float> yf(n), rf(static_cast<size_t>(R)), dxf(n), dwf = cast_vec<float>(to_f64(dw0));
  reference::rmsnorm_forward(yf.data(), rf.data(), xf.data(), wf.data(), R, H, eps);
  reference::rmsnorm_backward(dxf.data(), dwf.data(), gf.data(), xf.data(), wf.data(), rf.data(), R, H);

  const Shape rh{R, H};
  expect_gpu_close("rmsnorm_y", y_gpu, gather_f64(layout_view(y, c.layout, H)), y64, to_double(yf), rh, TolOp::kRmsNorm,
                   c.dtype);
  expect_gpu_close("rmsnorm_rstd", rstd_gpu, to_f64(rstd), r64, to_double(rf), Shape{R}, TolOp::kRmsNorm, DType::kF32);
  expect_gpu_close("rmsnorm_dx", dx_gpu, gather_f64(layout_view(dx, c.layout, H)), dx64, to_double(dxf), rh,
                   TolOp::kRmsNorm, c.dtype);
  expect_gpu_close("rmsnorm_dw", dw_gpu, to_f64(dw), dw64, to_double(dwf), Shape{H}, TolOp::kRmsNorm, DType::kF32);
  // The padding of the fused/misaligned buffers is never written.
  if (c.layout != Layout::kContiguous) {
    const auto y_full = to_f64(download(a, yd));
    double pad = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t col = 0; col < fs[1]; ++col) {
        const bool in_view = c.layout == Layout::kHalfOfFused ? col < H : col >= 1;
        if (!in_view) pad += std::fabs(y_full[size_t(r * fs[1] + col)]);
      }
    EXPECT_EQ(pad, 0.0) << "rmsnorm wrote outside its strided output view";
  }
}

VLPAR_INSTANTIATE(Shapes, VLPAR_SUITE(RmsNorm),
    ::testing::Values(
        // warp per row (H ≤ 1024): q/k-norm head rows, vectorised
        RmsCase{256, 128, DType::kF32, DType::kF32, Layout::kContiguous},
        RmsCase{256, 128, DType::kBF16, DType::kBF16, Layout::kContiguous},
        // warp per row, scalar: odd H, and misaligned rows
        RmsCase{37, 1001, DType::kBF16, DType::kBF16, Layout::kContiguous},
        RmsCase{41, 96, DType::kF32, DType::kF32, Layout::kMisaligned},
        // block per row: hidden sizes, f32 master weights with bf16 activations, strided rows
        RmsCase{33, 4096, DType::kBF16, DType::kF32, Layout::kContiguous},
        RmsCase{19, 2048, DType::kF32, DType::kF32, Layout::kHalfOfFused},
        RmsCase{7, 1536, DType::kBF16, DType::kBF16, Layout::kMisaligned},
        // dw accumulators beyond the default 48 KiB of shared memory (opt-in path)
        RmsCase{8, 16384, DType::kF32, DType::kF32, Layout::kContiguous},
        // many rows: the backward grid reaches its cap, blocks own uneven multi-row chunks
        RmsCase{20011, 32, DType::kF32, DType::kF32, Layout::kContiguous},
        RmsCase{5003, 256, DType::kBF16, DType::kBF16, Layout::kHalfOfFused}),
    [](const auto& info) { return rms_case_name(info.param); });

/// One small case per compiled kernel instantiation: every (x dtype, weight dtype) pair the launchers take, each
/// vectorised and scalar (misaligned rows), each warp-per-row (H = 64) and block-per-row (H = 1536). The
/// emulated CI run must launch every kernel of the real build (tools/check_emu_coverage.py).
std::vector<RmsCase> every_rmsnorm_instantiation() {
  std::vector<RmsCase> cases;
  const std::pair<DType, DType> types[] = {{DType::kF32, DType::kF32},  {DType::kBF16, DType::kBF16},
                                           {DType::kBF16, DType::kF32}, {DType::kF16, DType::kF16},
                                           {DType::kF16, DType::kF32}};
  for (const auto& [x, w] : types)
    for (int64_t H : {64, 1536})
      for (Layout layout : {Layout::kContiguous, Layout::kMisaligned}) cases.push_back(RmsCase{5, H, x, w, layout});
  return cases;
}

VLPAR_INSTANTIATE(EveryInstantiation, VLPAR_SUITE(RmsNorm), ::testing::ValuesIn(every_rmsnorm_instantiation()),
                  [](const auto& info) { return rms_case_name(info.param); });

VLPAR_TEST(VLPAR_SUITE(RmsNormProps), BackwardIsBitwiseDeterministicAcrossWorkspaceSources) {
  VLPAR_REQUIRE_GPU();
  const int64_t R = 3001, H = 2048;
  Allocator a;
  Tensor x = upload(a, random_tensor(a, {R, H}, DType::kBF16, 7, -2.f, 2.f));
  Tensor dy = upload(a, random_tensor(a, {R, H}, DType::kBF16, 8));
  Tensor w = upload(a, random_tensor(a, {H}, DType::kBF16, 9, 0.5f, 1.5f));
  Tensor y = Tensor::empty(a, {R, H}, DType::kBF16, Device::cuda(0)).value();
  Tensor rstd = Tensor::empty(a, {R}, DType::kF32, Device::cuda(0)).value();
  Context g = gpu_ctx();
  VLPAR_ASSERT_OK_OR_SKIP(rmsnorm_forward(g, y, rstd, x, w, 1e-6f));
  std::vector<Tensor> dx, dw;
  for (int run = 0; run < 2; ++run) {
    g.allocator = run == 0 ? nullptr : &a;  // cudaMallocAsync on the stream, then the caller's allocator
    dx.push_back(Tensor::empty(a, {R, H}, DType::kBF16, Device::cuda(0)).value());
    dw.push_back(Tensor::zeros(a, {H}, DType::kF32, Device::cuda(0)).value());
    ASSERT_TRUE(rmsnorm_backward(g, dx.back(), dw.back(), dy, x, w, rstd).ok());
  }
  EXPECT_TRUE(bitwise_equal("rmsnorm dw, two runs", download(a, dw[0]), download(a, dw[1])));
  EXPECT_TRUE(bitwise_equal("rmsnorm dx, two runs", download(a, dx[0]), download(a, dx[1])));
  EXPECT_GT(max_abs(to_f64(download(a, dw[0]))), 0.0) << "vacuous: dw is all zero";
  EXPECT_EQ(a.stats(Device::cuda(0)).num_allocs, 9) << "the allocator's workspace was not returned";
}

VLPAR_TEST(VLPAR_SUITE(RmsNormProps), FrozenWeightAndRstdNotStashed) {
  VLPAR_REQUIRE_GPU();
  const int64_t R = 64, H = 512;
  Allocator a;
  Tensor xh = random_tensor(a, {R, H}, DType::kF32, 21), wh = random_tensor(a, {H}, DType::kF32, 22, 0.5f, 1.5f);
  Tensor x = upload(a, xh), w = upload(a, wh), dy = upload(a, random_tensor(a, {R, H}, DType::kF32, 23));
  Tensor y1 = Tensor::empty(a, {R, H}, DType::kF32, Device::cuda(0)).value();
  Tensor y2 = Tensor::empty(a, {R, H}, DType::kF32, Device::cuda(0)).value();
  Tensor rstd = Tensor::empty(a, {R}, DType::kF32, Device::cuda(0)).value();
  Tensor dx = Tensor::empty(a, {R, H}, DType::kF32, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(rmsnorm_forward(gpu_ctx(), y1, rstd, x, w, 1e-6f));
  ASSERT_TRUE(rmsnorm_forward(gpu_ctx(), y2, TensorView{}, x, w, 1e-6f).ok());
  EXPECT_TRUE(bitwise_equal("y with and without rstd", download(a, y1), download(a, y2)));
  ASSERT_TRUE(rmsnorm_backward(gpu_ctx(), dx, TensorView{}, dy, x, w, rstd).ok());
  EXPECT_GT(max_abs(to_f64(download(a, dx))), 0.0);
}

// ---- SwiGLU ----------------------------------------------------------------------------------------------

struct SwiCase {
  int64_t N, I;
  DType dtype;
};

class VLPAR_SUITE(Swiglu) : public ::testing::TestWithParam<SwiCase> {};

VLPAR_TEST_P(VLPAR_SUITE(Swiglu), FusedHalvesForwardBackwardMatchReferenceAndCpu) {
  VLPAR_REQUIRE_GPU();
  const auto [N, I, dt] = GetParam();
  Allocator a;
  const Context g = gpu_ctx();
  // gate | up as the halves of one fused [N, 2I] projection output; dgate | dup likewise.
  Tensor gu = random_tensor(a, {N, 2 * I}, dt, 31, -4.f, 4.f), dy = random_tensor(a, {N, I}, dt, 32);
  auto gate_of = [I = I](const Tensor& t) { return t.view().slice(1, 0, I); };
  auto up_of = [I = I](const Tensor& t) { return t.view().slice(1, I, 2 * I); };

  Tensor gud = upload(a, gu), dyd = upload(a, dy);
  Tensor yd = Tensor::zeros(a, {N, I}, dt, Device::cuda(0)).value();
  Tensor dgud = Tensor::zeros(a, {N, 2 * I}, dt, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(swiglu_forward(g, yd, gate_of(gud), up_of(gud)));
  VLPAR_ASSERT_OK_OR_SKIP(swiglu_backward(g, gate_of(dgud), up_of(dgud), dyd, gate_of(gud), up_of(gud)));
  const Tensor dgu_h = download(a, dgud);
  const auto y_gpu = to_f64(download(a, yd)), dg_gpu = gather_f64(gate_of(dgu_h)), du_gpu = gather_f64(up_of(dgu_h));

  const Context cpu = test_ctx(2);
  Tensor y = Tensor::zeros(a, {N, I}, dt).value(), dgu = Tensor::zeros(a, {N, 2 * I}, dt).value();
  ASSERT_TRUE(swiglu_forward(cpu, y, gate_of(gu), up_of(gu)).ok());
  ASSERT_TRUE(swiglu_backward(cpu, gate_of(dgu), up_of(dgu), dy, gate_of(gu), up_of(gu)).ok());

  const auto g64 = gather_f64(gate_of(gu)), u64 = gather_f64(up_of(gu)), dy64 = to_f64(dy);
  const size_t n = g64.size();
  std::vector<double> y64(n), dg64(n), du64(n), yf(n), dgf(n), duf(n);
  for (size_t i = 0; i < n; ++i) {
    y64[i] = reference::swiglu(g64[i], u64[i]);
    dg64[i] = dy64[i] * u64[i] * reference::silu_grad(g64[i]);
    du64[i] = dy64[i] * reference::silu(g64[i]);
    const float gf = float(g64[i]), uf = float(u64[i]), df = float(dy64[i]);
    yf[i] = reference::swiglu(gf, uf);
    dgf[i] = df * uf * reference::silu_grad(gf);
    duf[i] = df * reference::silu(gf);
  }
  const Shape s{N, I};
  expect_gpu_close("swiglu_y", y_gpu, to_f64(y), y64, yf, s, TolOp::kActivation, dt);
  expect_gpu_close("swiglu_dgate", dg_gpu, gather_f64(gate_of(dgu)), dg64, dgf, s, TolOp::kActivation, dt);
  expect_gpu_close("swiglu_dup", du_gpu, gather_f64(up_of(dgu)), du64, duf, s, TolOp::kActivation, dt);
}

VLPAR_INSTANTIATE(Shapes, VLPAR_SUITE(Swiglu),
                         ::testing::Values(SwiCase{37, 768, DType::kF32},    // vectorised
                                           SwiCase{37, 768, DType::kBF16},   // vectorised
                                           SwiCase{29, 100, DType::kBF16},   // I % 8 != 0: scalar
                                           SwiCase{13, 257, DType::kF32},    // odd I: scalar
                                           SwiCase{11, 64, DType::kF16},     // vectorised
                                           SwiCase{11, 63, DType::kF16}),    // scalar
                         [](const auto& info) {
                           return fmt::format("n{}_i{}_{}", info.param.N, info.param.I, dtype_name(info.param.dtype));
                         });

// ---- Rotary ----------------------------------------------------------------------------------------------

struct RotCase {
  RotaryKind kind;
  int head_dim;
  float theta;
  DType dtype;
  DType pos_dtype;
};

std::string rot_case_name(const RotCase& c) {
  static const char* kinds[] = {"rope1d", "mrope", "vision2d"};
  return fmt::format("{}_hd{}_{}_pos{}", kinds[int(c.kind)], c.head_dim, dtype_name(c.dtype), dtype_name(c.pos_dtype));
}

class VLPAR_SUITE(Rotary) : public ::testing::TestWithParam<RotCase> {};

VLPAR_TEST_P(VLPAR_SUITE(Rotary), ForwardBackwardInPlaceMatchReferenceAndCpu) {
  VLPAR_REQUIRE_GPU();
  const RotCase c = GetParam();
  const RotaryDesc d{c.kind, c.head_dim, c.theta, {24, 20, 20}};
  const int64_t N = 67, H = 4, H_kv = 2, D = c.head_dim, axes = d.num_axes();
  Allocator a;
  const Context g = gpu_ctx();
  // q is the first H heads of a fused [N, H + 2·H_kv, D] qkv buffer: token stride (H + 2·H_kv)·D.
  Tensor qkv = random_tensor(a, {N, H + 2 * H_kv, D}, c.dtype, 41);
  auto q_of = [H = H](const Tensor& t) { return t.view().slice(1, 0, H); };
  // Positions up to 3e4 stress fp32 angles; 1D RoPE also takes a plain [N_tok] position vector.
  Tensor pos = c.kind == RotaryKind::k1D ? integer_tensor(a, {N}, c.pos_dtype, 42, 0, 30000)
                                         : integer_tensor(a, {axes, N}, c.pos_dtype, 42, 0, 30000);

  Tensor qkvd = upload(a, qkv), posd = upload(a, pos);
  Tensor yd = Tensor::empty(a, {N, H, D}, c.dtype, Device::cuda(0)).value();
  Tensor backd = Tensor::empty(a, {N, H, D}, c.dtype, Device::cuda(0)).value();
  VLPAR_ASSERT_OK_OR_SKIP(rotary_forward(g, yd, q_of(qkvd), posd, d));
  VLPAR_ASSERT_OK_OR_SKIP(rotary_backward(g, backd, yd, posd, d));
  const Tensor y_h = download(a, yd);
  const auto y_gpu = to_f64(y_h), back_gpu = to_f64(download(a, backd));
  // In place on the strided q view: same bits as out of place, k and v untouched.
  VLPAR_ASSERT_OK_OR_SKIP(rotary_forward(g, q_of(qkvd), q_of(qkvd), posd, d));
  const Tensor qkv_after = download(a, qkvd);
  EXPECT_TRUE(all_close("rotary_in_place_vs_out_of_place", gather_f64(q_of(qkv_after)), y_gpu, Shape{N, H, D}, 0.0));
  EXPECT_TRUE(all_close("rotary_in_place_leaves_kv", gather_f64(qkv_after.view().slice(1, H, H + 2 * H_kv)),
                        gather_f64(qkv.view().slice(1, H, H + 2 * H_kv)), Shape{N, 2 * H_kv, D}, 0.0));

  const Context cpu = test_ctx(2);
  Tensor y = Tensor::empty(a, {N, H, D}, c.dtype).value(), back = Tensor::empty(a, {N, H, D}, c.dtype).value();
  ASSERT_TRUE(rotary_forward(cpu, y, q_of(qkv), pos, d).ok());
  ASSERT_TRUE(rotary_backward(cpu, back, y_h, pos, d).ok());  // the CPU's backward of the GPU's y, as the GPU's

  std::vector<int64_t> pos64(size_t(axes * N));
  const auto pv = to_f64(pos);
  for (size_t i = 0; i < pos64.size(); ++i) pos64[i] = int64_t(pv[i]);
  const auto x64 = gather_f64(q_of(qkv));
  std::vector<double> r64(x64.size()), rinv64(x64.size());
  reference::rotary_apply(r64.data(), x64.data(), pos64.data(), N, H, d, +1);
  reference::rotary_apply(rinv64.data(), y_gpu.data(), pos64.data(), N, H, d, -1);
  const auto xf = cast_vec<float>(x64), yf_in = cast_vec<float>(y_gpu);
  std::vector<float> rf(x64.size()), rinvf(x64.size());
  reference::rotary_apply(rf.data(), xf.data(), pos64.data(), N, H, d, +1);
  reference::rotary_apply(rinvf.data(), yf_in.data(), pos64.data(), N, H, d, -1);
  const Shape s{N, H, D};
  expect_gpu_close("rotary_fwd", y_gpu, to_f64(y), r64, to_double(rf), s, TolOp::kRotary, c.dtype);
  expect_gpu_close("rotary_bwd", back_gpu, to_f64(back), rinv64, to_double(rinvf), s, TolOp::kRotary, c.dtype);
}

VLPAR_INSTANTIATE(Kinds, VLPAR_SUITE(Rotary),
    ::testing::Values(RotCase{RotaryKind::k1D, 128, 1e6f, DType::kF32, DType::kI64},
                      RotCase{RotaryKind::k1D, 64, 1e4f, DType::kBF16, DType::kI32},
                      RotCase{RotaryKind::kMRoPE, 128, 5e6f, DType::kF32, DType::kI32},
                      RotCase{RotaryKind::kMRoPE, 128, 5e6f, DType::kBF16, DType::kI64},
                      RotCase{RotaryKind::kVision2D, 72, 1e4f, DType::kF32, DType::kI64},
                      RotCase{RotaryKind::kVision2D, 80, 1e4f, DType::kBF16, DType::kI32},
                      RotCase{RotaryKind::k1D, 64, 1e4f, DType::kF16, DType::kI32}),
    [](const auto& info) { return rot_case_name(info.param); });

// ---- builds without CUDA -----------------------------------------------------------------------------------

TEST(CpuOnlyBuild, CudaViewsGiveAStatusWithoutTouchingMemory) {
  if (built_with_cuda()) GTEST_SKIP() << "this build has CUDA kernels";
  // A non-null address that would fault if dereferenced: the ops must refuse before touching it.
  void* fake = reinterpret_cast<void*>(uintptr_t{0x1000});
  const Device cu = Device::cuda(0);
  Context ctx = test_ctx(1);
  ctx.device = cu;
  const int64_t R = 4, H = 8;
  TensorView x(fake, DType::kF32, {R, H}, cu), y(fake, DType::kF32, {R, H}, cu), w(fake, DType::kF32, {H}, cu);
  TensorView rstd(fake, DType::kF32, {R}, cu), dw(fake, DType::kF32, {H}, cu);
  TensorView q(fake, DType::kF32, {R, 2, 8}, cu), pos(fake, DType::kI32, {R}, cu);
  const RotaryDesc d{RotaryKind::k1D, 8, 1e4f, {0, 0, 0}};
  const std::pair<const char*, Status> results[] = {
      {"rmsnorm_forward", rmsnorm_forward(ctx, y, rstd, x, w, 1e-6f)},
      {"rmsnorm_backward", rmsnorm_backward(ctx, y, dw, x, x, w, rstd)},
      {"swiglu_forward", swiglu_forward(ctx, y, x, x)},
      {"swiglu_backward", swiglu_backward(ctx, y, y, x, x, x)},
      {"rotary_forward", rotary_forward(ctx, q, q, pos, d)},
      {"rotary_backward", rotary_backward(ctx, q, q, pos, d)},
  };
  for (const auto& [op, s] : results) {
    EXPECT_TRUE(s.code() == StatusCode::kNotSupported || s.code() == StatusCode::kInvalidArgument)
        << op << ": " << s.to_string();
    if (s.code() == StatusCode::kNotSupported) {
      EXPECT_NE(s.message().find("no CUDA kernels"), std::string::npos) << op << ": " << s.message();
    }
  }
}

}  // namespace
}  // namespace vlpar
