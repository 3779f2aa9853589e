// CPU RMSNorm and LayerNorm, forward and backward (fp32 math over any float storage).
// Parameter gradients use per-thread partial sums combined in a fixed order (bitwise reproducible).
// Test: tests/unit/test_norm.cpp
#include "vlpar/kernels/norm.hpp"

#include <cmath>
#include <vector>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

struct NormArgs {
  RowsView x, y;
};

Result<NormArgs> check_norm_io(const char* op, const TensorView& y, const TensorView& x, const TensorView& w) {
  NormArgs a;
  VLPAR_ASSIGN_OR_RETURN(a.x, as_rows(x, op));
  VLPAR_ASSIGN_OR_RETURN(a.y, as_rows(y, op));
  VLPAR_RETURN_IF_ERROR(check_same_rows(op, "output", a.y, "x", a.x));
  VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, "x", x));
  VLPAR_CHECK(y.dtype == x.dtype, "{}: output dtype {} differs from x dtype {}", op, dtype_name(y.dtype),
              dtype_name(x.dtype));
  VLPAR_RETURN_IF_ERROR(check_float_vector(op, "weight", w, a.x.cols));
  return a;
}

/// Adds the per-part partial column sums [parts, H] into acc [H] in part order.
void reduce_partials(float* acc, const std::vector<float>& partial, int64_t parts, int64_t H) {
  for (int64_t p = 0; p < parts; ++p)
    for (int64_t i = 0; i < H; ++i) acc[i] += partial[size_t(p * H + i)];
}

template <class T, class W>
void rmsnorm_fwd_cpu(const Context& ctx, RowsView y, float* rstd, RowsView x, const W* w, float eps) {
  const int64_t H = x.cols;
  parallel_for(ctx, x.rows, [&](int64_t begin, int64_t end) {
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
  const int64_t H = x.cols, parts = num_parts(ctx, x.rows);
  std::vector<float> partial(dw ? size_t(parts * H) : 0, 0.f);
  parallel_for_parts(ctx, x.rows, [&](int64_t part, int64_t begin, int64_t end) {
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
  parallel_for(ctx, x.rows, [&](int64_t begin, int64_t end) {
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
  const int64_t H = x.cols, parts = num_parts(ctx, x.rows);
  std::vector<float> pw(dw ? size_t(parts * H) : 0, 0.f), pb(db ? size_t(parts * H) : 0, 0.f);
  parallel_for_parts(ctx, x.rows, [&](int64_t part, int64_t begin, int64_t end) {
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
  const char* op = "rmsnorm_forward";
  VLPAR_ASSIGN_OR_RETURN(NormArgs a, check_norm_io(op, y, x, w));
  if (!rstd.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, a.x.rows, DType::kF32));
  VLPAR_CHECK(eps >= 0.f, "{}: eps must be non-negative, got {}", op, eps);
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"y", &y}, {"x", &x}, {"weight", &w}, {"rstd", &rstd}}));
  if (x.device.is_cuda()) return cuda_impl::rmsnorm_forward(ctx, y, rstd, x, w, eps);
  VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
    VLPAR_FLOAT_SWITCH(w.dtype, W, op, { rmsnorm_fwd_cpu<T, W>(ctx, a.y, optional_f32(rstd), a.x, w.ptr<W>(), eps); });
  });
  return Status::Ok();
}

Status rmsnorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView dy, TensorView x, TensorView w,
                        TensorView rstd) {
  const char* op = "rmsnorm_backward";
  VLPAR_ASSIGN_OR_RETURN(NormArgs a, check_norm_io(op, dx, x, w));
  VLPAR_ASSIGN_OR_RETURN(RowsView g, as_rows(dy, op));
  VLPAR_RETURN_IF_ERROR(check_same_rows(op, "dy", g, "x", a.x));
  VLPAR_CHECK(dy.dtype == x.dtype, "{}: dy dtype {} differs from x dtype {}", op, dtype_name(dy.dtype),
              dtype_name(x.dtype));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, a.x.rows, DType::kF32));
  if (!dw.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "dw", dw, a.x.cols, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"dx", &dx}, {"dy", &dy}, {"x", &x}, {"weight", &w}, {"rstd", &rstd}, {"dw", &dw}}));
  if (x.device.is_cuda()) return cuda_impl::rmsnorm_backward(ctx, dx, dw, dy, x, w, rstd);
  VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
    VLPAR_FLOAT_SWITCH(w.dtype, W, op, {
      rmsnorm_bwd_cpu<T, W>(ctx, a.y, optional_f32(dw), g, a.x, w.ptr<W>(), rstd.ptr<float>());
    });
  });
  return Status::Ok();
}

Status layernorm_forward(const Context& ctx, TensorView y, TensorView mean, TensorView rstd, TensorView x,
                         TensorView w, TensorView b, float eps) {
  const char* op = "layernorm_forward";
  VLPAR_ASSIGN_OR_RETURN(NormArgs a, check_norm_io(op, y, x, w));
  VLPAR_RETURN_IF_ERROR(check_float_vector(op, "bias", b, a.x.cols));
  VLPAR_CHECK(b.dtype == w.dtype, "{}: bias dtype {} differs from weight dtype {}", op, dtype_name(b.dtype),
              dtype_name(w.dtype));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "mean", mean, a.x.rows, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, a.x.rows, DType::kF32));
  VLPAR_CHECK(eps >= 0.f, "{}: eps must be non-negative, got {}", op, eps);
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"y", &y}, {"x", &x}, {"weight", &w}, {"bias", &b}, {"mean", &mean}, {"rstd", &rstd}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op, x.to_string());
  VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
    VLPAR_FLOAT_SWITCH(w.dtype, W, op, {
      layernorm_fwd_cpu<T, W>(ctx, a.y, mean.ptr<float>(), rstd.ptr<float>(), a.x, w.ptr<W>(), b.ptr<W>(), eps);
    });
  });
  return Status::Ok();
}

Status layernorm_backward(const Context& ctx, TensorView dx, TensorView dw, TensorView db, TensorView dy,
                          TensorView x, TensorView w, TensorView mean, TensorView rstd) {
  const char* op = "layernorm_backward";
  VLPAR_ASSIGN_OR_RETURN(NormArgs a, check_norm_io(op, dx, x, w));
  VLPAR_ASSIGN_OR_RETURN(RowsView g, as_rows(dy, op));
  VLPAR_RETURN_IF_ERROR(check_same_rows(op, "dy", g, "x", a.x));
  VLPAR_CHECK(dy.dtype == x.dtype, "{}: dy dtype differs from x dtype", op);
  VLPAR_RETURN_IF_ERROR(check_vector(op, "mean", mean, a.x.rows, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_vector(op, "rstd", rstd, a.x.rows, DType::kF32));
  if (!dw.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "dw", dw, a.x.cols, DType::kF32));
  if (!db.empty()) VLPAR_RETURN_IF_ERROR(check_vector(op, "db", db, a.x.cols, DType::kF32));
  VLPAR_RETURN_IF_ERROR(check_same_device(op, {{"dx", &dx}, {"dy", &dy}, {"x", &x}, {"weight", &w}, {"mean", &mean}, {"rstd", &rstd}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "{}: no CUDA kernel yet ({})", op, x.to_string());
  VLPAR_FLOAT_SWITCH(x.dtype, T, op, {
    VLPAR_FLOAT_SWITCH(w.dtype, W, op, {
      layernorm_bwd_cpu<T, W>(ctx, a.y, optional_f32(dw), optional_f32(db), g, a.x, w.ptr<W>(), mean.ptr<float>(),
                              rstd.ptr<float>());
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
