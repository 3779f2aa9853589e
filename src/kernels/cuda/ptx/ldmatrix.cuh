#pragma once
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 with one call site for both builds (inline PTX under
// __CUDA_ARCH__, sm_75+; the emulator's warp collective under VLPAR_CUDA_EMU, emu/warp_matrix.cpp).
//   ldmatrix<N, kTrans>(regs, row): every lane passes a pointer into shared memory; lanes 8j..8j+7 give the
//   16-byte-aligned rows 0..7 of matrix j (j < N; other lanes' pointers are not used); lane l receives in regs[j]
//   M_j[l>>2][2(l&3) .. +1] — with kTrans, M_j[2(l&3) .. +1][l>>2]. With row-major A in shared memory, .x4 with
//   lanes 0–15 at rows 0–15 of k 0–7 and lanes 16–31 at rows 0–15 of k 8–15 yields the mma A fragment; a B stored
//   K-major loads without .trans, N-major (row-major K×N) with .trans.
// SASS: LDSM.16.M88{,.2,.4} / LDSM.16.MT88{,.2,.4}. Test: tests/emu/test_emu_warp_matrix.cpp (ctest -L emu)
#include "../cuda_compat.cuh"  // first: the prelude of every CUDA source

#include <cstdint>

namespace vlpar::ptx {

template <int N, bool kTrans>
__device__ __forceinline__ void ldmatrix(uint32_t (&regs)[N], const void* row VLPAR_EMU_LOC) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(__CUDA_ARCH__)
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (N == 1 && !kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(regs[0]) : "r"(a));
  } else if constexpr (N == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(regs[0]) : "r"(a));
  } else if constexpr (N == 2 && !kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(regs[0]), "=r"(regs[1]) : "r"(a));
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(regs[0]), "=r"(regs[1]) : "r"(a));
  } else if constexpr (!kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3]) : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3]) : "r"(a));
  }
#elif defined(VLPAR_CUDA_EMU)
  ::vlpar::emu::ldmatrix(N, kTrans, regs, row, loc);
#else
  (void)regs;
  (void)row;
#endif
}

}  // namespace vlpar::ptx
