// CPU RMSNorm and LayerNorm, forward and backward (fp32 math over any float storage): the computation; the public
// ops in src/kernels/ops/norm.cpp check the arguments and call these for CPU views.
// Parameter gradients use per-thread partial sums combined in a fixed order (bitwise reproducible).
// Test: tests/unit/test_norm.cpp
#include "vlpar/kernels/norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

// Arguments are checked by the public ops (src/kernels/ops/norm.cpp): CPU views that collapse to rows. (Named
// apart from activation.cpp's rows(): the unity build puts both in one translation unit.)
RowsView norm_rows(const TensorView& v) { return as_rows(v, "norm").value(); }

/// Adds the per-part partial column sums [parts, H] into acc [H] in part order.
void reduce_partials(float* acc, const std::vector<float>& partial, int64_t parts, int64_t H) {
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t i = 0; i < H; ++i) acc[i] += partial[size_t(p * H + i)];
}

template <class T, class W>
void rmsnorm_fwd_cpu(const Context& ctx, RowsView y, float* rstd, RowsView x, const W* w, float eps) {
  const int64_t H = x.cols;
  parallel_for(ctx, x.rows, 4 * H, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x.row<T>(r);
      float ss = 0.f;
      for (int64_t i = 0; i < H; ++i) ss += to_float(xr[i]) * to_float(xr[i]);
      const float rs = 1.0f / std::sqrt(ss / float(H) + eps);
      if (rstd) rstd[r] = rs;
      T* yr = y.row<T>(r);
      for (int64_t i = 0; i < H; ++i) yr[i] = from_float<T>(to_float(xr[i]) * rs * to_float(w[i]));
    }
  });
}

template <class T, class W>
void rmsnorm_bwd_cpu(const Context& ctx, RowsView dx, float* dw, RowsView dy, RowsView x, const W* w,
                     const float* rstd) {
  // No work estimate here: fp32 partials, and num_threads parts even for small ops (each part's sum is shorter).
  const int64_t H = x.cols, parts = num_parts(ctx, x.rows);
  std::vector<float> partial(dw ? size_t(parts * H) : 0, 0.f);
  parallel_for_n_parts(ctx, x.rows, parts, [&](int64_t part, int64_t begin, int64_t end) {
    float* pdw = dw ? partial.data() + part * H : nullptr;
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x.row<T>(r);
      const T* gr = dy.row<T>(r);
      const float rs = rstd[r];
      float dot = 0.f;
      for (int64_t i = 0; i < H; ++i) dot += to_float(gr[i]) * to_float(w[i]) * to_float(xr[i]);
      const float c = rs * rs * rs * dot / float(H);
      T* dxr = dx.row<T>(r);
      for (int64_t i = 0; i < H; ++i) {
        const float xi = to_float(xr[i]), gi = to_float(gr[i]);
        dxr[i] = from_float<T>(rs * gi * to_float(w[i]) - xi * c);
        if (pdw) pdw[i] += gi * xi * rs;
      }
    }
  });
  if (dw) reduce_partials(dw, partial, parts, H);
}

template <class T, class W>
void layernorm_fwd_cpu(const Context& ctx, RowsView y, float* mean, float* rstd, RowsView x, const W* w, const W* b,
                       float eps) {
  const int64_t H = x.cols;
  parallel_for(ctx, x.rows, 4 * H, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x.row<T>(r);
      float m = 0.f;
      for (int64_t i = 0; i < H; ++i) m += to_float(xr[i]);
      m /= float(H);
      float var = 0.f;  // two-pass variance: no cancellation for large means
      for (int64_t i = 0; i < H; ++i) var += (to_float(xr[i]) - m) * (to_float(xr[i]) - m);
      const float rs = 1.0f / std::sqrt(var / float(H) + eps);
      mean[r] = m;
      rstd[r] = rs;
      T* yr = y.row<T>(r);
      for (int64_t i = 0; i < H; ++i)
        yr[i] = from_float<T>((to_float(xr[i]) - m) * rs * to_float(w[i]) + to_float(b[i]));
    }
  });
}

template <class T, class W>
void layernorm_bwd_cpu(const Context& ctx, RowsView dx, float* dw, float* db, RowsView dy, RowsView x, const W* w,
                       const float* mean, const float* rstd) {
  // No work estimate here: fp32 partials, and num_threads parts even for small ops (each part's sum is shorter).
  const int64_t H = x.cols, parts = num_parts(ctx, x.rows);
  std::vector<float> pw(dw ? size_t(parts * H) : 0, 0.f), pb(db ? size_t(parts * H) : 0, 0.f);
  parallel_for_n_parts(ctx, x.rows, parts, [&](int64_t part, int64_t begin, int64_t end) {
    float* pdw = dw ? pw.data() + part * H : nullptr;
    float* pdb = db ? pb.data() + part * H : nullptr;
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x.row<T>(r);
      const T* gr = dy.row<T>(r);
      const float m = mean[r], rs = rstd[r];
      float mg = 0.f, mgx = 0.f;
      for (int64_t i = 0; i < H; ++i) {
        const float g = to_float(gr[i]) * to_float(w[i]);
        mg += g;
        mgx += g * (to_float(xr[i]) - m) * rs;
      }
      mg /= float(H);
      mgx /= float(H);
      T* dxr = dx.row<T>(r);
      for (int64_t i = 0; i < H; ++i) {
        const float xh = (to_float(xr[i]) - m) * rs, gi = to_float(gr[i]);
        dxr[i] = from_float<T>(rs * (gi * to_float(w[i]) - mg - xh * mgx));
        if (pdw) pdw[i] += gi * xh;
        if (pdb) pdb[i] += gi;
      }
    }
  });
  if (dw) reduce_partials(dw, pw, parts, H);
  if (db) reduce_partials(db, pb, parts, H);
}

float* optional_f32(const TensorView& v) { return v.empty() ? nullptr : v.ptr<float>(); }

}  // namespace

Status rmsnorm_forward(const Context& ctx, TensorView y, TensorView rstd, TensorView x, TensorView w, float eps) {
  VLPAR_FLOAT_SWITCH(x.dtype, T, "rmsnorm_forward", {
    VLPAR_FLOAT_SWITCH(w.dtype, W, "rmsnorm_forward",
                       { rmsnorm_fwd_cpu<T, W>(ctx, norm_rows(y), optional_f32(rstd), norm_rows(x), w.ptr<W>(),
                                               eps); });
  });
  return Status::Ok();
}

Status rmsnorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dy, TensorView x, TensorView w,
                        TensorView rstd) {
  VLPAR_FLOAT_SWITCH(x.dtype, T, "rmsnorm_backward", {
    VLPAR_FLOAT_SWITCH(w.dtype, W, "rmsnorm_backward", {
      rmsnorm_bwd_cpu<T, W>(ctx, norm_rows(dx), optional_f32(dw), norm_rows(dy), norm_rows(x), w.ptr<W>(),
                            rstd.ptr<float>());
    });
  });
  return Status::Ok();
}

Status rmsnorm_weight_grad(const Context& ctx, TensorView dw, TensorView dy, TensorView x, TensorView rstd) {
  constexpr int64_t kChunkRows = 64;  // fixed: the sum order never depends on the thread count
  const RowsView xr = norm_rows(x), gr = norm_rows(dy);
  const int64_t N = xr.rows, H = xr.cols, chunks = (N + kChunkRows - 1) / kChunkRows;
  std::vector<float> partial(static_cast<size_t>(chunks * H), 0.f);
  VLPAR_FLOAT_SWITCH(x.dtype, T, "rmsnorm_weight_grad", {
    parallel_for_dynamic(ctx, chunks, [&](int64_t c) {
      float* acc = partial.data() + c * H;
      for (int64_t t = c * kChunkRows; t < std::min(N, (c + 1) * kChunkRows); ++t) {
        const T* g = static_cast<const T*>(gr.data) + t * gr.row_stride;
        const T* xt = static_cast<const T*>(xr.data) + t * xr.row_stride;
        const float rs = rstd.ptr<float>()[t];
        for (int64_t i = 0; i < H; ++i) acc[i] += to_float(g[i]) * to_float(xt[i]) * rs;
      }
    });
  });
  float* out = dw.ptr<float>();
  for (int64_t i = 0; i < H; ++i) {
    float s = 0.f;
    for (int64_t c = 0; c < chunks; ++c) s += partial[size_t(c * H + i)];
    out[i] += s;
  }
  return Status::Ok();
}

Status layernorm_forward(const Context& ctx, TensorView y, TensorView mean, TensorView rstd, TensorView x,
                         TensorView w, TensorView b, float eps) {
  VLPAR_FLOAT_SWITCH(x.dtype, T, "layernorm_forward", {
    VLPAR_FLOAT_SWITCH(w.dtype, W, "layernorm_forward", {
      layernorm_fwd_cpu<T, W>(ctx, norm_rows(y), mean.ptr<float>(), rstd.ptr<float>(), norm_rows(x), w.ptr<W>(),
                              b.ptr<W>(), eps);
    });
  });
  return Status::Ok();
}

Status layernorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dy,
                          TensorView x, TensorView w, TensorView mean, TensorView rstd) {
  VLPAR_FLOAT_SWITCH(x.dtype, T, "layernorm_backward", {
    VLPAR_FLOAT_SWITCH(w.dtype, W, "layernorm_backward", {
      layernorm_bwd_cpu<T, W>(ctx, norm_rows(dx), optional_f32(dw), optional_f32(db), norm_rows(dy), norm_rows(x),
                              w.ptr<W>(), mean.ptr<float>(), rstd.ptr<float>());
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
