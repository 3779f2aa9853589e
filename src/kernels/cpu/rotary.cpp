// CPU rotary embeddings (1D, interleaved MRoPE, vision 2D) on [N_tok, H, D], forward and backward.
// Angles and cos/sin in fp32 (computed once per token and frequency, shared by all heads), rotation in fp32,
// one rounding to the storage dtype. The computation only: the public ops in src/kernels/ops/rotary.cpp check the
// arguments and call these for CPU views. Test: tests/unit/test_rotary.cpp
#include "vlpar/kernels/rotary.hpp"

#include <cmath>
#include <vector>

#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {
namespace {

int64_t position_at(const TensorView& pos, int axis, int64_t t) {
  const int64_t i = pos.ndim() == 1 ? t : axis * pos.stride(0) + t * pos.stride(1);
  return pos.dtype == DType::kI32 ? int64_t(pos.ptr<int32_t>()[i]) : pos.ptr<int64_t>()[i];
}

template <class T>
void rotary_cpu(const Context& ctx, const TensorView& y, const TensorView& x, const TensorView& pos,
                const RotaryDesc& d, float sign) {
  const int half = d.head_dim / 2;
  const int64_t n_tok = x.size(0), H = x.size(1);
  std::vector<RotaryFreq> freq(static_cast<size_t>(half));
  for (int j = 0; j < half; ++j) freq[size_t(j)] = rotary_freq(d, j);
  parallel_for(ctx, n_tok, 4 * H * x.size(2), [&](int64_t begin, int64_t end) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = begin; t < end; ++t) {
      for (int j = 0; j < half; ++j) {
        const float angle = float(position_at(pos, freq[size_t(j)].axis, t)) * freq[size_t(j)].inv_freq;
        c[size_t(j)] = std::cos(angle);
        s[size_t(j)] = sign * std::sin(angle);
      }
      for (int64_t h = 0; h < H; ++h) {
        const T* xr = x.ptr<T>() + t * x.stride(0) + h * d.head_dim;
        T* yr = y.ptr<T>() + t * y.stride(0) + h * d.head_dim;
        for (int j = 0; j < half; ++j) {
          float lo, hi;
          rotate_pair(to_float(xr[j]), to_float(xr[j + half]), c[size_t(j)], s[size_t(j)], lo, hi);
          yr[j] = from_float<T>(lo);  // safe in place: both inputs of the pair were read above
          yr[j + half] = from_float<T>(hi);
        }
      }
    }
  });
}

}  // namespace

Status rotary_forward(const Context& ctx, TensorView y, TensorView x, TensorView positions, const RotaryDesc& desc) {
  VLPAR_FLOAT_SWITCH(x.dtype, T, "rotary_forward", { rotary_cpu<T>(ctx, y, x, positions, desc, 1.f); });
  return Status::Ok();
}

Status rotary_backward(const Context& ctx, TensorView dx, TensorView dy, TensorView positions, const RotaryDesc& desc) {
  VLPAR_FLOAT_SWITCH(dy.dtype, T, "rotary_backward", { rotary_cpu<T>(ctx, dx, dy, positions, desc, -1.f); });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
