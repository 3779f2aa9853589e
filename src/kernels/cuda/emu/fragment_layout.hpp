#pragma once
// Fragment layouts of the warp-level matrix instructions, as the PTX ISA states them: which (row, col) of the
// operand a lane's element `i` holds (elements numbered in register order, two 16-bit elements per 32-bit
// register, the lower-indexed one in bits 0..15). The emulator computes with these (emu/warp_matrix.cpp) and
// tests/emu/test_emu_fragment_layouts.cpp compares every (lane, element) with CuTe's MMA_Traits / Copy_Traits,
// an independent encoding of the same tables. g = lane >> 2 (group), t = lane & 3 (thread in group).
//   mma.m16n8k16 A (16×16 M×K, "row"), 8 elements : (g + 8·((i>>1)&1), 2t + (i&1) + 8·(i>>2))
//   mma.m16n8k16 B (16×8 K×N, "col"),  4 elements : (2t + (i&1) + 8·(i>>1), g)
//   mma.m16n8k16 C/D (16×8 M×N, f32),  4 elements : (g + 8·(i>>1), 2t + (i&1))
//   ldmatrix.m8n8, register j, half h : matrix j, (lane>>2, 2·(lane&3) + h); with .trans (2·(lane&3) + h, lane>>2)
// Spec: ../shared/spec/cuda-emulation.md §5, §6.
namespace vlpar::emu {

struct RowCol {
  int row, col;
};

constexpr RowCol mma_a_coord(int lane, int i) {
  return {(lane >> 2) + 8 * ((i >> 1) & 1), 2 * (lane & 3) + (i & 1) + 8 * (i >> 2)};
}
constexpr RowCol mma_b_coord(int lane, int i) { return {2 * (lane & 3) + (i & 1) + 8 * (i >> 1), lane >> 2}; }
constexpr RowCol mma_c_coord(int lane, int i) { return {(lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)}; }

/// Row and column within its 8×8 matrix of the half `h` (0 = bits 0..15) of a lane's ldmatrix register.
constexpr RowCol ldmatrix_coord(int lane, int h, bool trans) {
  return trans ? RowCol{2 * (lane & 3) + h, lane >> 2} : RowCol{lane >> 2, 2 * (lane & 3) + h};
}

}  // namespace vlpar::emu
