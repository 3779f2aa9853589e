// CPU pointwise activations: GELU (tanh, erf), SiLU, SwiGLU, forward and backward.
// Each op walks RowsViews (strided rows allowed), fp32 math, one rounding to the output dtype.
// Test: tests/unit/test_activation.cpp
#include "vlpar/kernels/activation.hpp"

#include <array>
#include <Eigen/Dense>
#include <cmath>
#include <type_traits>
#include <unsupported/Eigen/SpecialFunctions>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"
#include "vlpar/kernels/cuda_ops.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

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

using ArrF = Eigen::Array<float, Eigen::Dynamic, 1>;
using CMapF = Eigen::Map<const ArrF>;
using MapF = Eigen::Map<ArrF>;
constexpr int64_t kChunk = 1024;  // elements per vectorised step: three fp32 chunks stay in L1

/// Pointer to `n` floats of `p`: the row itself for f32, else widened into `scratch`.
template <class T>
const float* load_chunk(const T* p, int64_t n, float* scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return p;
  } else {
    for (int64_t i = 0; i < n; ++i) scratch[i] = to_float(p[i]);
    return scratch;
  }
}

/// Elementwise over rows, vectorised with Eigen arrays in fp32 chunks, one rounding on store.
/// kernel(out, a, b) writes `out` (MapF) from `a`, `b` (CMapF; b aliases a for unary ops).
template <class T, class Kernel>
void map_rows(const Context& ctx, const RowsView& out, const RowsView& a, const RowsView* b, Kernel kernel) {
  parallel_for(ctx, out.rows, [&](int64_t begin, int64_t end) {
    alignas(64) float sa[kChunk], sb[kChunk], so[kChunk];
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c0 = 0; c0 < out.cols; c0 += kChunk) {
        const int64_t n = std::min(kChunk, out.cols - c0);
        const float* pa = load_chunk(a.row<T>(r) + c0, n, sa);
        const float* pb = b ? load_chunk(b->row<T>(r) + c0, n, sb) : pa;
        T* o = out.row<T>(r) + c0;
        if constexpr (std::is_same_v<T, float>) {
          kernel(MapF(o, n), CMapF(pa, n), CMapF(pb, n));
        } else {
          kernel(MapF(so, n), CMapF(pa, n), CMapF(pb, n));
          for (int64_t i = 0; i < n; ++i) o[i] = from_float<T>(so[i]);
        }
      }
    }
  });
}

// Vectorised formulas, fp32, from Eigen's SIMD exp and erf. tanh and its derivative are built from
// e = exp(−2|u|): tanh u = sign(u)·(1−e)/(1+e) and 1 − tanh² u = 4e/(1+e)², which keeps the derivative's tail
// accurate where 1 − t² would cancel (Eigen's own tanh saturates to ±1 and returns exactly 0 there).
ArrF sigmoid_v(const CMapF& x) { return (1.f + (-x).exp()).inverse(); }
struct TanhParts {
  ArrF t, sech2;
};
TanhParts tanh_parts(const ArrF& u) {
  const ArrF e = (-2.f * u.abs()).exp();
  const ArrF inv = (1.f + e).inverse();
  return {u.sign() * (1.f - e) * inv, 4.f * e * inv.square()};
}
void gelu_fwd_v(MapF y, const CMapF& x, GeluKind k) {
  if (k == GeluKind::kErf) y = 0.5f * x * (1.f + (x * kInvSqrt2).erf());
  else y = 0.5f * x * (1.f + tanh_parts(kSqrt2OverPi * (x + kGeluCubic * x.cube())).t);
}
void gelu_bwd_v(MapF dx, const CMapF& x, const CMapF& g, GeluKind k) {
  if (k == GeluKind::kErf) {
    dx = g * (0.5f * (1.f + (x * kInvSqrt2).erf()) + x * kInvSqrt2Pi * (-0.5f * x.square()).exp());
  } else {
    const TanhParts p = tanh_parts(kSqrt2OverPi * (x + kGeluCubic * x.cube()));
    dx = g * (0.5f * (1.f + p.t) + 0.5f * x * p.sech2 * kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x.square()));
  }
}

}  // namespace

Status gelu_forward(const Context& ctx, TensorView y, TensorView x, GeluKind kind) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("gelu_forward", {{"y", &y}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "gelu_forward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "gelu_forward",
                     { map_rows<T>(ctx, r[0], r[1], nullptr, [kind](MapF o, CMapF a, CMapF) { gelu_fwd_v(o, a, kind); }); });
  return Status::Ok();
}

Status gelu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x, GeluKind kind) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("gelu_backward", {{"dx", &dx}, {"dy", &dy}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "gelu_backward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "gelu_backward", {
    map_rows<T>(ctx, r[0], r[2], &r[1], [kind](MapF o, CMapF x, CMapF g) { gelu_bwd_v(o, x, g, kind); });
  });
  return Status::Ok();
}

Status silu_forward(const Context& ctx, TensorView y, TensorView x) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("silu_forward", {{"y", &y}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "silu_forward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "silu_forward",
                     { map_rows<T>(ctx, r[0], r[1], nullptr, [](MapF o, CMapF x, CMapF) { o = x * sigmoid_v(x); }); });
  return Status::Ok();
}

Status silu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("silu_backward", {{"dx", &dx}, {"dy", &dy}, {"x", &x}}));
  VLPAR_CHECK_CODE(x.device.is_cpu(), StatusCode::kNotSupported, "silu_backward: no CUDA kernel yet");
  VLPAR_FLOAT_SWITCH(x.dtype, T, "silu_backward",
                     { map_rows<T>(ctx, r[0], r[2], &r[1], [](MapF o, CMapF x, CMapF g) {
                       const ArrF sg = sigmoid_v(x);
                       o = g * sg * (1.f + x * (1.f - sg));
                     }); });
  return Status::Ok();
}

Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up) {
  VLPAR_ASSIGN_OR_RETURN(auto r, check_pointwise("swiglu_forward", {{"y", &y}, {"gate", &gate}, {"up", &up}}));
  if (gate.device.is_cuda()) return cuda_impl::swiglu_forward(ctx, y, gate, up);
  VLPAR_FLOAT_SWITCH(gate.dtype, T, "swiglu_forward",
                     { map_rows<T>(ctx, r[0], r[1], &r[2], [](MapF o, CMapF g, CMapF u) { o = g * sigmoid_v(g) * u; }); });
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
      alignas(64) float sg[kChunk], sa[kChunk], su[kChunk], odg[kChunk], odu[kChunk];
      for (int64_t row = begin; row < end; ++row) {
        for (int64_t c0 = 0; c0 < g.cols; c0 += kChunk) {
          const int64_t n = std::min(kChunk, g.cols - c0);
          const CMapF dy(load_chunk(g.row<T>(row) + c0, n, sg), n);
          const CMapF a(load_chunk(gt.row<T>(row) + c0, n, sa), n), b(load_chunk(u.row<T>(row) + c0, n, su), n);
          const ArrF s = sigmoid_v(a);
          MapF(odg, n) = dy * b * s * (1.f + a * (1.f - s));  // dy · up · silu'(gate)
          MapF(odu, n) = dy * a * s;                           // dy · silu(gate)
          T* pdg = dg.row<T>(row) + c0;
          T* pdu = du.row<T>(row) + c0;
          for (int64_t i = 0; i < n; ++i) {
            pdg[i] = from_float<T>(odg[i]);
            pdu[i] = from_float<T>(odu[i]);
          }
        }
      }
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
