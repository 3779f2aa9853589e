#pragma once
// Learned position embedding of the Qwen3-VL vision tower (spec qwen3vl.md §3.2): bilinear interpolation
// (align_corners=True) of a [G², Hv] table onto each image/video grid, exactly as HF v4.57
// Qwen3VLVisionModel.fast_pos_embed_interpolate computes it for an fp32 table.
//   forward : pe[p, :] = ((w0·T[i0] + w1·T[i1]) + w2·T[i2]) + w3·T[i3]   every product and sum rounded to fp32
//   backward: dT[i_k, :] += w_k · dpe[p, :]                               the index_add of the 4 corners
// Patch order (shared by every vision op, spec §2.1): grids back to back; inside a grid frame by frame (the
// embedding is the same for every frame); inside a frame merge-window order (block_row, block_col, in_row,
// in_col), so the m×m patches of one merge window are contiguous.
//
// Corner indices and weights (VLPAR_HD, so a CUDA kernel reuses them and CPU tests cover them):
//   hi = linspace(0, G−1, h) in fp32 with torch's CPU rounding (LinspaceRounding), f = trunc(hi),
//   c = min(f+1, G−1), dh = hi − f; same for columns; corners (f_h,f_w), (f_h,c_w), (c_h,f_w), (c_h,c_w) with
//   weights (1−dh)(1−dw), (1−dh)dw, dh(1−dw), dh·dw, each an fp32 product.
// Storage: table and pe f32, bf16 or f16, the arithmetic f32 in HF's order (a 16-bit table widened exactly, a 16-bit
// pe rounded once; HF v4.57's bf16 path would round the weights and every step to bf16), dtable f32.
// The backward is deterministic: threads own column ranges of dT and add patches in a fixed order.
// Reference: include/vlpar/reference/pos_embed.hpp. Test: tests/unit/test_pos_embed.cpp (fixture
// tests/fixtures/vision/pos_embed_interp.txt from HF, made by make_pos_embed_fixture.py next to it).
#include <cmath>
#include <cstdint>
#include <span>

#include "vlpar/core/batch.hpp"  // VisionGrid
#include "vlpar/core/context.hpp"
#include "vlpar/core/macros.hpp"
#include "vlpar/core/tensor.hpp"

namespace vlpar {

/// @brief Raster (row, col) of the q-th patch of a frame of width w in merge-window order:
/// q = ((block_row·(w/m) + block_col)·m + in_row)·m + in_col, row = block_row·m + in_row, col = block_col·m + in_col.
VLPAR_HD inline void merge_window_coords(int64_t q, int64_t w, int64_t m, int64_t& row, int64_t& col) {
  const int64_t in_col = q % m, in_row = (q / m) % m, block = q / (m * m);
  const int64_t blocks_per_row = w / m;
  row = (block / blocks_per_row) * m + in_row;
  col = (block % blocks_per_row) * m + in_col;
}

/// How torch's CPU linspace rounds the second half, end − step·(n−1−i). Its AVX2/AVX512 builds (what
/// every current x86 CPU runs, hence the HF goldens) fuse it into one FMA; the scalar "default" build
/// (ATEN_CPU_CAPABILITY=default) rounds the product first. The two differ by 1 ulp at some entries.
enum class LinspaceRounding : uint8_t { kFused = 0, kSeparate = 1 };

struct PosEmbedDesc {
  int64_t side = 48;  // G = sqrt(num_position_embeddings); the table is [G², Hv], entry (r, c) at row r·G + c
  int64_t merge = 2;  // m, spatial_merge_size
  LinspaceRounding linspace = LinspaceRounding::kFused;
};

/// @brief a·b rounded to fp32 and kept from being fused into a following add or subtract. GCC's C++ default
/// (-ffp-contract=fast) and nvcc's --fmad=true would otherwise turn p0 + w1·t1 into an FMA, which rounds once
/// instead of twice and breaks bit parity with torch's separate mul and add kernels. (Evaluating in double and
/// narrowing does not help: GCC narrows the double ops back to float and then fuses them.) On the host an empty
/// asm the optimiser cannot see through pins the rounded product in a register; CUDA has __fmul_rn.
VLPAR_HD inline float f32_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(p));
#else
  volatile float pinned = p;
  p = pinned;
#endif
  return p;
#endif
}

/// @brief torch.linspace(0, end, n)[i] in fp32 on the CPU: step = end/(n−1); i < n/2: step·i;
/// otherwise end − step·(n−1−i), fused or not per `rounding`. n == 1 gives 0 (torch returns start).
VLPAR_HD inline float torch_linspace_f32(int64_t i, int64_t n, float end, LinspaceRounding rounding) {
  if (n <= 1) return 0.f;
  const float step = end / float(n - 1);
  if (i < n / 2) return f32_mul(step, float(i));
  const float k = float(n - 1 - i);
  return rounding == LinspaceRounding::kFused ? ::fmaf(-step, k, end) : end - f32_mul(step, k);
}

/// One axis of the interpolation: the two table coordinates and the fraction toward the upper one.
struct PosEmbedAxis {
  int32_t lo = 0;    // trunc(linspace value)
  int32_t hi = 0;    // min(lo + 1, G − 1)
  float frac = 0.f;  // value − lo (exact in fp32)
};

/// @brief Axis entry i of an axis of n patches over a table of side G.
VLPAR_HD inline PosEmbedAxis pos_embed_axis(int64_t i, int64_t n, int64_t side, LinspaceRounding rounding) {
  const float v = torch_linspace_f32(i, n, float(side - 1), rounding);
  PosEmbedAxis a;
  a.lo = int32_t(v);  // torch .int(): truncation, v ≥ 0
  a.hi = a.lo + 1 < side ? a.lo + 1 : int32_t(side - 1);
  a.frac = v - float(a.lo);
  return a;
}

/// The four table rows one patch reads and their bilinear weights, in HF's summation order.
struct PosEmbedCorners {
  int32_t index[4];
  float weight[4];
};

/// @brief Corners of the patch at (row axis entry, col axis entry) over a table of side G.
VLPAR_HD inline PosEmbedCorners pos_embed_corners(const PosEmbedAxis& r, const PosEmbedAxis& c, int64_t side) {
  const int32_t G = int32_t(side);
  const float dh = r.frac, dw = c.frac, omh = 1.f - dh, omw = 1.f - dw;
  PosEmbedCorners k;
  k.index[0] = r.lo * G + c.lo;
  k.index[1] = r.lo * G + c.hi;
  k.index[2] = r.hi * G + c.lo;
  k.index[3] = r.hi * G + c.hi;
  k.weight[0] = f32_mul(omh, omw);
  k.weight[1] = f32_mul(omh, dw);
  k.weight[2] = f32_mul(dh, omw);
  k.weight[3] = f32_mul(dh, dw);
  return k;
}

/// @brief Checks a list of grids against a merge size: t, h, w ≥ 1, h and w multiples of m, Σ t·h·w fits
/// i32 (vision cu_seqlens are i32). The message names `who`, the grid index and the defect.
Status check_vision_grids(const char* who, std::span<const VisionGrid> grids, int64_t merge);

/// @brief pe = interpolated table rows for every patch of `grids` (see the file comment).
/// @param pe    [Np, Hv] f32, bf16 or f16 written, Np = Σ t·h·w
/// @param table [G², Hv] f32, bf16 or f16 (pos_embed.weight)
Status pos_embed_forward(const Context& ctx, TensorView pe, TensorView table, std::span<const VisionGrid> grids,
                         const PosEmbedDesc& desc);

/// @brief dtable += Σ_patches Σ_k w_k · dpe[p] at row i_k (deterministic; bitwise the same for any thread count).
/// @param dtable [G², Hv] f32 accumulated
/// @param dpe    [Np, Hv] f32, bf16 or f16
Status pos_embed_backward(const Context& ctx, TensorView dtable, TensorView dpe, std::span<const VisionGrid> grids,
                          const PosEmbedDesc& desc);

}  // namespace vlpar
