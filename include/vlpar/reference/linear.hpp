#pragma once
// fp64 reference (STYLE §9): GEMM and linear layer, plain triple loops over contiguous row-major arrays.
#include <cstdint>

namespace vlpar::reference {

/// C[M, N] = alpha · op(A) · op(B) + beta · C; A is [M, K] (or [K, M] if ta), B is [K, N] (or [N, K] if tb).
template <class S>
void gemm(S* C, const S* A, const S* B, int64_t M, int64_t N, int64_t K, bool ta, bool tb, S alpha, S beta) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      S acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
      C[m * N + n] = alpha * acc + (beta == S(0) ? S(0) : beta * C[m * N + n]);
    }
}

/// y[N, out] = x[N, in] · W[out, in]ᵀ + b[out] (b may be null)
template <class S>
void linear_forward(S* y, const S* x, const S* W, const S* b, int64_t N, int64_t in, int64_t out) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      S acc = b ? b[o] : S(0);
      for (int64_t i = 0; i < in; ++i) acc += x[n * in + i] * W[o * in + i];
      y[n * out + o] = acc;
    }
}

/// dx = dy·W ; dW += dyᵀ·x ; db += Σ_n dy
template <class S>
void linear_backward(S* dx, S* dW, S* db, const S* dy, const S* x, const S* W, int64_t N, int64_t in, int64_t out) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < in; ++i) {
      S acc = 0;
      for (int64_t o = 0; o < out; ++o) acc += dy[n * out + o] * W[o * in + i];
      dx[n * in + i] = acc;
    }
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      S acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += dy[n * out + o] * x[n * in + i];
      dW[o * in + i] += acc;
    }
    if (db)
      for (int64_t n = 0; n < N; ++n) db[o] += dy[n * out + o];
  }
}

}  // namespace vlpar::reference
