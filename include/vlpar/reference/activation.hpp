#pragma once
// fp64 reference (STYLE §9): GELU (tanh, erf), SiLU, SwiGLU, forward and derivative, scalar functions
// templated on S (double reference, float naive baseline).
#include <cmath>

namespace vlpar::reference {

template <class S>
S gelu_tanh(S x) {
  const S k = S(0.7978845608028654);  // sqrt(2/pi)
  return S(0.5) * x * (S(1) + std::tanh(k * (x + S(0.044715) * x * x * x)));
}
template <class S>
S gelu_tanh_grad(S x) {
  const S k = S(0.7978845608028654);
  const S u = k * (x + S(0.044715) * x * x * x);
  const S t = std::tanh(u);
  return S(0.5) * (S(1) + t) + S(0.5) * x * (S(1) - t * t) * k * (S(1) + S(3) * S(0.044715) * x * x);
}
template <class S>
S gelu_erf(S x) {
  return S(0.5) * x * (S(1) + std::erf(x / std::sqrt(S(2))));
}
template <class S>
S gelu_erf_grad(S x) {
  const S pdf = std::exp(-S(0.5) * x * x) / std::sqrt(S(2) * S(3.14159265358979323846));
  return S(0.5) * (S(1) + std::erf(x / std::sqrt(S(2)))) + x * pdf;
}
template <class S>
S sigmoid(S x) {
  return S(1) / (S(1) + std::exp(-x));
}
template <class S>
S silu(S x) {
  return x * sigmoid(x);
}
template <class S>
S silu_grad(S x) {
  const S s = sigmoid(x);
  return s * (S(1) + x * (S(1) - s));
}
/// swiglu(g, u) = silu(g)·u ; ∂/∂g = u·silu'(g) ; ∂/∂u = silu(g)
template <class S>
S swiglu(S g, S u) {
  return silu(g) * u;
}

}  // namespace vlpar::reference
