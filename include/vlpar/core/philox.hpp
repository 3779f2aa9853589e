#pragma once
// Counter-based Philox-4x32-10 (Salmon et al., SC'11; Random123 constants) and layout-invariant init.
//
// Keying: key = (lo32(seed), hi32(seed)), counter = (lo32(i), hi32(i), param_id, stream) for the global
// element index i of the *full logical* tensor. A value depends only on (seed, param_id, i), never on which
// process or shard computes it, so a tensor-parallel shard equals the slice of the full weight.
// All functions are VLPAR_HD: CPU and CUDA produce the same bits (integer math, then one float conversion).
#include <cmath>
#include <cstdint>

#include "vlpar/core/macros.hpp"

namespace vlpar {

struct Philox4 {
  uint32_t v[4];
};

VLPAR_HD VLPAR_FORCEINLINE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

/// @brief One Philox-4x32 block with 10 rounds. Matches Random123's philox4x32 KAT vectors.
VLPAR_HD inline Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], hi0, lo0);
    philox_mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

/// @brief The 4 random words for element `index` of parameter `param_id` under `seed`.
VLPAR_HD VLPAR_FORCEINLINE Philox4 philox_element(uint64_t seed, uint32_t param_id, uint64_t index,
                                                  uint32_t stream = 0) {
  return philox4x32_10(Philox4{{uint32_t(index), uint32_t(index >> 32), param_id, stream}}, uint32_t(seed),
                       uint32_t(seed >> 32));
}

/// @brief Uniform in (0, 1]: 24 random bits, never 0 (safe for log in Box-Muller).
VLPAR_HD VLPAR_FORCEINLINE float philox_unit(uint32_t x) { return float((x >> 8) + 1u) * (1.0f / 16777216.0f); }

/// @brief Uniform in [lo, hi) for element index.
VLPAR_HD VLPAR_FORCEINLINE float philox_uniform(uint64_t seed, uint32_t param_id, uint64_t index, float lo,
                                               float hi) {
  const Philox4 r = philox_element(seed, param_id, index);
  const float u = float(r.v[0] >> 8) * (1.0f / 16777216.0f);  // [0, 1)
  return lo + (hi - lo) * u;
}

/// @brief Standard normal for element index (Box-Muller on words 0 and 1, computed in double so CPU and GPU
/// agree to the last bit after the final rounding to float).
VLPAR_HD VLPAR_FORCEINLINE float philox_normal(uint64_t seed, uint32_t param_id, uint64_t index) {
  const Philox4 r = philox_element(seed, param_id, index);
  const double u1 = double((r.v[0] >> 8) + 1u) * (1.0 / 16777216.0);  // (0, 1]
  const double u2 = double(r.v[1] >> 8) * (1.0 / 16777216.0);         // [0, 1)
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return float(::sqrt(-2.0 * ::log(u1)) * ::cos(kTwoPi * u2));
}

}  // namespace vlpar
