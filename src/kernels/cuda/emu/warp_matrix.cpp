// Emulated warp-level matrix instructions: the results of mma.sync.m16n8k16 and ldmatrix for the 32 lanes of a
// warp, computed by the last lane to arrive (runtime.cpp, collective()), with the PTX ISA's fragment layouts
// (emu/fragment_layout.hpp). ldmatrix: lanes 8j..8j+7 give the 16-byte row addresses of matrix j, each row read
// from the arena with the supplying lane's checks (bounds, initialised, no race, no cp.async in flight).
// Arithmetic: each product of two bf16/f16 values is exact in double; D = C + Σ_k A·B is summed in double in k order
// and rounded to f32 once. The tensor core's internal accumulation order is not documented; tests bound the
// difference as a K-term f32 accumulation (docs/cuda-emulation.md). Test: tests/emu/test_emu_warp_matrix.cpp
#include <fmt/core.h>

#include <cstring>

#include "fragment_layout.hpp"
#include "runtime.hpp"
#include "vlpar/core/dtype.hpp"

namespace vlpar::emu {
namespace {

double half_value(uint32_t bits16, bool is_bf16) {
  if (is_bf16) return double(bf16_to_float(bf16{uint16_t(bits16)}));
  return double(f16_to_float(f16{uint16_t(bits16)}));
}

/// Element i (0-based, in register order) of a lane's fragment of 16-bit values.
uint32_t half_bits(const uint32_t* regs, int i) { return (regs[i / 2] >> (16 * (i % 2))) & 0xFFFFu; }

}  // namespace

void complete_mma(Thread* lanes, bool is_bf16) {
  double a[16][16], b[16][8], c[16][8];
  for (int l = 0; l < 32; ++l) {
    const uint32_t* in = lanes[l].frag_in;
    for (int i = 0; i < 8; ++i) {
      const RowCol rc = mma_a_coord(l, i);
      a[rc.row][rc.col] = half_value(half_bits(in, i), is_bf16);
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol rc = mma_b_coord(l, i);
      b[rc.row][rc.col] = half_value(half_bits(in + 4, i), is_bf16);
    }
    for (int i = 0; i < 4; ++i) {
      float f;
      std::memcpy(&f, &in[6 + i], 4);
      const RowCol rc = mma_c_coord(l, i);
      c[rc.row][rc.col] = double(f);
    }
  }
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      const int m = mma_c_coord(l, i).row, n = mma_c_coord(l, i).col;
      double acc = c[m][n];
      for (int k = 0; k < 16; ++k) acc += a[m][k] * b[k][n];
      const float d = float(acc);
      std::memcpy(&lanes[l].frag_out[i], &d, 4);
    }
  }
}

void complete_ldmatrix(Block& b, Thread* lanes, int count, bool trans, Loc loc) {
  uint16_t m[4][8][8];
  for (int j = 0; j < count; ++j) {
    for (int r = 0; r < 8; ++r) {
      const Thread& src = lanes[8 * j + r];
      const auto addr = reinterpret_cast<uintptr_t>(src.addr);
      if (!b.smem->contains(addr))
        fail_thread(src, "ldmatrix row address outside shared memory",
                    fmt::format("lane {} gives row {} of matrix {} at {}", src.lane, r, j, src.addr), loc);
      if (addr % 16 != 0)
        fail_thread(src, "misaligned ldmatrix row", fmt::format("lane {} gives row address {}, not 16-byte aligned",
                                                                src.lane, src.addr), loc);
      std::string detail;
      if (const char* rule = b.smem->on_access(addr, 16, false, accessor_of(b, src), &detail); *rule != '\0')
        fail_thread(src, rule, detail, loc);
      std::memcpy(m[j][r], src.addr, 16);
    }
  }
  for (int l = 0; l < 32; ++l) {
    for (int j = 0; j < count; ++j) {
      const RowCol lo = ldmatrix_coord(l, 0, trans), hi = ldmatrix_coord(l, 1, trans);
      lanes[l].frag_out[j] = uint32_t(m[j][lo.row][lo.col]) | uint32_t(m[j][hi.row][hi.col]) << 16;
    }
  }
}

void mma_m16n8k16(bool is_bf16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                  const float (&c)[4], Loc loc) {
  Thread& t = current_thread();
  std::memcpy(t.frag_in, a, sizeof a);
  std::memcpy(t.frag_in + 4, b, sizeof b);
  std::memcpy(t.frag_in + 6, c, sizeof c);
  (void)collective(is_bf16 ? CollectiveKind::kMmaBf16 : CollectiveKind::kMmaF16, 0xffffffffu, 0, 0, 32, loc);
  std::memcpy(d, t.frag_out, sizeof d);
}

void ldmatrix(int count, bool trans, uint32_t* regs, const void* row, Loc loc) {
  Thread& t = current_thread();
  if (count != 1 && count != 2 && count != 4)
    fail_thread(t, "invalid ldmatrix", fmt::format(".x{} (1, 2 or 4)", count), loc);
  t.addr = row;
  (void)collective(CollectiveKind::kLdmatrix, 0xffffffffu, 0, 0, 32, loc, count | (trans ? 16 : 0));
  std::memcpy(regs, t.frag_out, size_t(count) * 4);
}

}  // namespace vlpar::emu
