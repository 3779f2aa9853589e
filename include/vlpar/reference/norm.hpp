#pragma once
// fp64 reference (STYLE §9): RMSNorm and LayerNorm, forward and backward, plain loops over contiguous
// [rows, H] arrays, templated on the scalar S (double for the reference, float for the "naive" baseline).
#include <cmath>
#include <cstdint>

namespace vlpar::reference {

/// y = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps); x, y [rows, H]; w [H]; rstd [rows]
template <class S>
void rmsnorm_forward(S* y, S* rstd, const S* x, const S* w, int64_t rows, int64_t H, S eps) {
  for (int64_t r = 0; r < rows; ++r) {
    S ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += x[r * H + i] * x[r * H + i];
    const S rs = S(1) / std::sqrt(ss / S(H) + eps);
    rstd[r] = rs;
    for (int64_t i = 0; i < H; ++i) y[r * H + i] = x[r * H + i] * rs * w[i];
  }
}

/// dx = rstd·(w⊙dy) − x·rstd³·mean(x ⊙ w ⊙ dy); dw += Σ_rows dy ⊙ x·rstd
template <class S>
void rmsnorm_backward(S* dx, S* dw, const S* dy, const S* x, const S* w, const S* rstd, int64_t rows, int64_t H) {
  for (int64_t r = 0; r < rows; ++r) {
    const S rs = rstd[r];
    S dot = 0;
    for (int64_t i = 0; i < H; ++i) dot += dy[r * H + i] * w[i] * x[r * H + i];
    for (int64_t i = 0; i < H; ++i) {
      dx[r * H + i] = rs * dy[r * H + i] * w[i] - x[r * H + i] * rs * rs * rs * dot / S(H);
      dw[i] += dy[r * H + i] * x[r * H + i] * rs;
    }
  }
}

/// y = (x − mean)·rstd·w + b, rstd = 1/sqrt(var + eps) (biased variance)
template <class S>
void layernorm_forward(S* y, S* mean, S* rstd, const S* x, const S* w, const S* b, int64_t rows, int64_t H, S eps) {
  for (int64_t r = 0; r < rows; ++r) {
    S m = 0;
    for (int64_t i = 0; i < H; ++i) m += x[r * H + i];
    m /= S(H);
    S var = 0;
    for (int64_t i = 0; i < H; ++i) var += (x[r * H + i] - m) * (x[r * H + i] - m);
    var /= S(H);
    const S rs = S(1) / std::sqrt(var + eps);
    mean[r] = m;
    rstd[r] = rs;
    for (int64_t i = 0; i < H; ++i) y[r * H + i] = (x[r * H + i] - m) * rs * w[i] + b[i];
  }
}

/// x̂ = (x−mean)·rstd, g = dy⊙w: dx = rstd·(g − mean(g) − x̂·mean(g⊙x̂)); dw += Σ dy⊙x̂; db += Σ dy
template <class S>
void layernorm_backward(S* dx, S* dw, S* db, const S* dy, const S* x, const S* w, const S* mean, const S* rstd,
                        int64_t rows, int64_t H) {
  for (int64_t r = 0; r < rows; ++r) {
    S mg = 0, mgx = 0;
    for (int64_t i = 0; i < H; ++i) {
      const S xh = (x[r * H + i] - mean[r]) * rstd[r];
      const S g = dy[r * H + i] * w[i];
      mg += g;
      mgx += g * xh;
    }
    mg /= S(H);
    mgx /= S(H);
    for (int64_t i = 0; i < H; ++i) {
      const S xh = (x[r * H + i] - mean[r]) * rstd[r];
      dx[r * H + i] = rstd[r] * (dy[r * H + i] * w[i] - mg - xh * mgx);
      dw[i] += dy[r * H + i] * xh;
      db[i] += dy[r * H + i];
    }
  }
}

}  // namespace vlpar::reference
