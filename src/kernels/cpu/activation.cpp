// CPU pointwise activations: GELU (tanh, erf), SiLU, SwiGLU, forward and backward.
// Each op walks RowsViews (strided rows allowed), fp32 math, one rounding to the output dtype.
// Test: tests/unit/test_activation.cpp
#include "vlpar/kernels/activation.hpp"

#include <array>
#include <cmath>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

namespace vlpar {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

inline float gelu_f(float x, GeluKind k) {
  if (k == GeluKind::kErf) return 0.5f * x * (1.f + std::erf(x * kInvSqrt2));
  return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}
inline float gelu_grad_f(float x, GeluKind k) {
  if (k == GeluKind::kErf) return 0.5f * (1.f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
  const float t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
}
inline float sigmoid_f(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float silu_f(float x) { return x * sigmoid_f(x); }
inline float silu_grad_f(float x) {
  const float s = sigmoid_f(x);
  return s * (1.f + x * (1.f - s));
}

/// Checks that every view collapses to the same rows × cols with one float dtype and one device.
Result<std::array<RowsView, 5>> check_pointwise(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> views) {
  std::array<RowsView, 5> rows{};
  size_t i = 0;
  const TensorView* first = views.begin()->second;
  for (const auto& [name, v] : views) {
    VLPAR_ASSIGN_OR_RETURN(rows[i], as_rows(*v, op));
    VLPAR_RETURN_IF_ERROR(check_storage_dtype(op, name, *v));
    VLPAR_CHECK(v->dtype == first->dtype, "{}: {} is {} but {} is {}", op, name, dtype_name(v->dtype),
                views.begin()->first, dtype_name(first->dtype));
    VLPAR_CHECK(v->data != nullptr || v->numel() == 0, "{}: {} has null data", op, name);
    if (i > 0) VLPAR_RETURN_IF_ERROR(check_same_rows(op, name, rows[i], views.begin()->first, rows[0]));
    ++i;
  }
  VLPAR_RETURN_IF_ERROR(check_same_device(op, views));
  return rows;
}

/// out = f(in...) elementwise over rows; Fn maps (float...) -> float.
template <class T, class Fn>
void map_rows(const Context& ctx, const RowsView& out, const RowsView& a, const RowsView* b, Fn fn) {
  parallel_for(ctx, out.rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* o = out.row<T>(r);
      const T* pa = a.row<T>(r);
      const T* pb = b ? b->row<T>(r) : nullptr;
      for (int64_t i = 0; i < out.cols; ++i) o[i] = from_float<T>(fn(to_float(pa[i]), pb ? to_float(pb[i]) : 0.f));
    }
  });
}

}  // namespace

Status gelu_forward(const Context& ctx, TensorView y, TensorView x, GeluKind kind) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("gelu_forward", {{"y", &y}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "gelu_forward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "gelu_forward",
                     { map_rows<T>(ctx, r[0], r[1], nullptr, [kind](float v, float) { return gelu_f(v, kind); }); });
  return Status::Ok();
}

Status gelu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x, GeluKind kind) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("gelu_backward", {{"dx", &dx}, {"dy", &dy}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "gelu_backward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "gelu_backward", {
    map_rows<T>(ctx, r[0], r[2], &r[1], [kind](float v, float g) { return g * gelu_grad_f(v, kind); });
  });
  return Status::Ok();
}

Status silu_forward(const Context& ctx, TensorView y, TensorView x) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("silu_forward", {{"y", &y}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "silu_forward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "silu_forward",
                     { map_rows<T>(ctx, r[0], r[1], nullptr, [](float v, float) { return silu_f(v); }); });
  return Status::Ok();
}

Status silu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("silu_backward", {{"dx", &dx}, {"dy", &dy}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "silu_backward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "silu_backward",
                     { map_rows<T>(ctx, r[0], r[2], &r[1], [](float v, float g) { return g * silu_grad_f(v); }); });
  return Status::Ok();
}

Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("swiglu_forward", {{"y", &y}, {"gate", &gate}, {"up", &up}}));
  if (gate.device.is_cuda()) return cuda_impl::swiglu_forward(ctx, y, gate, up);
  VLPAR_FLOAT_SWITCH(gate.dtype, T, "swiglu_forward",
                     { map_rows<T>(ctx, r[0], r[1], &r[2], [](float g, float u) { return silu_f(g) * u; }); });
  return Status::Ok();
}

Status swiglu_backward(const Context& ctx, TensorView dgate, TensorView dup, TensorView dy, TensorView gate,
                       TensorView up) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("swiglu_backward", {{"dgate", &dgate}, {"dup", &dup}, {"dy", &dy},
                                                                     {"gate", &gate}, {"up", &up}}));
  if (gate.device.is_cuda()) return cuda_impl::swiglu_backward(ctx, dgate, dup, dy, gate, up);
  VLPAR_FLOAT_SWITCH(gate.dtype, T, "swiglu_backward", {
    const RowsView dg = r[0], du = r[1], g = r[2], gt = r[3], u = r[4];
    parallel_for(ctx, g.rows, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        T* pdg = dg.row<T>(row);
        T* pdu = du.row<T>(row);
        const T* pg = g.row<T>(row);
        const T* pgt = gt.row<T>(row);
        const T* pu = u.row<T>(row);
        for (int64_t i = 0; i < g.cols; ++i) {
          const float gi = to_float(pg[i]), a = to_float(pgt[i]), b = to_float(pu[i]);
          pdg[i] = from_float<T>(gi * b * silu_grad_f(a));
          pdu[i] = from_float<T>(gi * silu_f(a));
        }
      }
    });
  });
  return Status::Ok();
}

}  // namespace vlpar
