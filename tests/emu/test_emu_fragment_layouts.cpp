// Independent cross-check of the emulator's fragment layouts (src/kernels/cuda/emu/fragment_layout.hpp) against
// CuTe, which encodes the same PTX tables as (thread, value) → index layouts: MMA_Traits of
// SM80_16x8x16_F32{BF16BF16,F16F16}F32_TN (A, B, C) and Copy_Traits of the ldmatrix atoms SM75_U32x{1,2,4}_LDSM_N
// and SM75_U16x{2,4,8}_LDSM_T. Every (lane, element) of every variant is compared. CuTe's headers come from the
// PyPI wheel nvidia-cutlass (tools/fetch_test_tools.py cute); used by this test only, never by the library.
// Reading CuTe's layouts (../shared/spec/cuda-emulation.md §8): MMA operands are indexed column-major
// (A: m + 16k, B: n + 8k, C: m + 16n); ldmatrix layouts are in bits of the stacked row-major 8×8 b16 matrices that
// the address lanes supply (lanes 8j..8j+7 = rows of matrix j), 1024 bits per matrix.
#include <cute/atom/copy_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm80.hpp>
#include <cute/tensor.hpp>
#include <gtest/gtest.h>

#include "emu/fragment_layout.hpp"

namespace vlpar {
namespace {

using emu::RowCol;

template <class Mma>
void expect_mma_layouts_match(const char* what) {
  using Traits = cute::MMA_Traits<Mma>;
  const typename Traits::ALayout a{};
  const typename Traits::BLayout b{};
  const typename Traits::CLayout c{};
  static_assert(decltype(cute::size(a))::value == 32 * 8 && decltype(cute::size(b))::value == 32 * 4 &&
                decltype(cute::size(c))::value == 32 * 4);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const int idx = a(lane, i);
      const RowCol e = emu::mma_a_coord(lane, i);
      EXPECT_EQ(e.row, idx % 16) << what << " A lane " << lane << " element " << i;
      EXPECT_EQ(e.col, idx / 16) << what << " A lane " << lane << " element " << i;
    }
    for (int i = 0; i < 4; ++i) {
      const int ib = b(lane, i), ic = c(lane, i);
      const RowCol eb = emu::mma_b_coord(lane, i), ec = emu::mma_c_coord(lane, i);
      EXPECT_EQ(eb.row, ib / 8) << what << " B (k) lane " << lane << " element " << i;
      EXPECT_EQ(eb.col, ib % 8) << what << " B (n) lane " << lane << " element " << i;
      EXPECT_EQ(ec.row, ic % 16) << what << " C (m) lane " << lane << " element " << i;
      EXPECT_EQ(ec.col, ic / 16) << what << " C (n) lane " << lane << " element " << i;
    }
  }
}

TEST(EmuFragmentLayouts, MmaM16n8k16MatchesCute) {
  expect_mma_layouts_match<cute::SM80_16x8x16_F32BF16BF16F32_TN>("bf16");
  expect_mma_layouts_match<cute::SM80_16x8x16_F32F16F16F32_TN>("f16");
}

/// Lane l, register j, half h of an ldmatrix with `count` matrices: the bit CuTe's DstLayout gives for the first
/// bit of that half, as (matrix, row, col) of the source matrices, against fragment_layout.hpp.
template <class Op>
void expect_ldmatrix_layout_matches(int count, bool trans) {
  const typename cute::Copy_Traits<Op>::DstLayout dst{};
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < count; ++j)
      for (int h = 0; h < 2; ++h) {
        const int bit = dst(lane, j * 32 + h * 16);  // the value mode counts the lane's register bits
        const int element = bit / 16, matrix = element / 64;
        const RowCol e = emu::ldmatrix_coord(lane, h, trans);
        EXPECT_EQ(bit % 16, 0);
        EXPECT_EQ(matrix, j) << "x" << count << (trans ? ".trans" : "") << " lane " << lane << " reg " << j;
        EXPECT_EQ(e.row, (element % 64) / 8) << "x" << count << (trans ? ".trans" : "") << " lane " << lane
                                             << " reg " << j << " half " << h;
        EXPECT_EQ(e.col, element % 8) << "x" << count << (trans ? ".trans" : "") << " lane " << lane << " reg "
                                      << j << " half " << h;
      }
}

TEST(EmuFragmentLayouts, LdmatrixMatchesCute) {
  expect_ldmatrix_layout_matches<cute::SM75_U32x1_LDSM_N>(1, false);
  expect_ldmatrix_layout_matches<cute::SM75_U32x2_LDSM_N>(2, false);
  expect_ldmatrix_layout_matches<cute::SM75_U32x4_LDSM_N>(4, false);
  expect_ldmatrix_layout_matches<cute::SM75_U16x2_LDSM_T>(1, true);
  expect_ldmatrix_layout_matches<cute::SM75_U16x4_LDSM_T>(2, true);
  expect_ldmatrix_layout_matches<cute::SM75_U16x8_LDSM_T>(4, true);
}

}  // namespace
}  // namespace vlpar
