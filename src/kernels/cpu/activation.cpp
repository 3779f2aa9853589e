// CPU pointwise activations: GELU (tanh, erf), SiLU, SwiGLU, forward and backward (the computation; the public
// ops in src/kernels/ops/activation.cpp check the arguments and call these for CPU views).
// Each op walks RowsViews (strided rows allowed), fp32 math, one rounding to the output dtype.
// Test: tests/unit/test_activation.cpp
#include "vlpar/kernels/activation.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <type_traits>
#include <unsupported/Eigen/SpecialFunctions>

#include "vlpar/core/checks.hpp"
#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// Arguments are checked by the public ops (src/kernels/ops/activation.cpp): CPU views that collapse to rows.
RowsView rows(const TensorView& v) { return as_rows(v, "activation").value(); }

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
  parallel_for(ctx, out.rows, out.cols * 8, [&](int64_t begin, int64_t end) {
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
  VLPAR_FLOAT_SWITCH(x.dtype, T, "gelu_forward",
                     { map_rows<T>(ctx, rows(y), rows(x), nullptr, [kind](MapF o, CMapF a, CMapF) { gelu_fwd_v(o, a, kind); }); });
  return Status::Ok();
}

Status gelu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x, GeluKind kind) {
  const RowsView g = rows(dy);
  VLPAR_FLOAT_SWITCH(x.dtype, T, "gelu_backward", {
    map_rows<T>(ctx, rows(dx), rows(x), &g, [kind](MapF o, CMapF x, CMapF g) { gelu_bwd_v(o, x, g, kind); });
  });
  return Status::Ok();
}

Status silu_forward(const Context& ctx, TensorView y, TensorView x) {
  VLPAR_FLOAT_SWITCH(x.dtype, T, "silu_forward",
                     { map_rows<T>(ctx, rows(y), rows(x), nullptr, [](MapF o, CMapF x, CMapF) { o = x * sigmoid_v(x); }); });
  return Status::Ok();
}

Status silu_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView x) {
  const RowsView g = rows(dy);
  VLPAR_FLOAT_SWITCH(x.dtype, T, "silu_backward",
                     { map_rows<T>(ctx, rows(dx), rows(x), &g, [](MapF o, CMapF x, CMapF g) {
                       const ArrF sg = sigmoid_v(x);
                       o = g * sg * (1.f + x * (1.f - sg));
                     }); });
  return Status::Ok();
}

Status swiglu_forward(const Context& ctx, TensorView y, TensorView gate, TensorView up) {
  const RowsView u = rows(up);
  VLPAR_FLOAT_SWITCH(gate.dtype, T, "swiglu_forward",
                     { map_rows<T>(ctx, rows(y), rows(gate), &u, [](MapF o, CMapF g, CMapF u) { o = g * sigmoid_v(g) * u; }); });
  return Status::Ok();
}

Status swiglu_backward(const Context& ctx, TensorView dgate, TensorView dup, TensorView dy, TensorView gate,
                       TensorView up) {
  VLPAR_FLOAT_SWITCH(gate.dtype, T, "swiglu_backward", {
    const RowsView dg = rows(dgate), du = rows(dup), g = rows(dy), gt = rows(gate), u = rows(up);
    parallel_for(ctx, g.rows, g.cols * 8, [&](int64_t begin, int64_t end) {
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
