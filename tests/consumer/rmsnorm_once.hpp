#pragma once
// The one op the find_package and add_subdirectory consumers run (main.cpp, main_subdir.cpp): RMSNorm of a [2, 4]
// tensor whose rows are (1, 2, 3, 4) with unit weights, on the CPU path the kernels picked.
#include <cmath>
#include <cstdio>

#include "vlpar/core/context.hpp"
#include "vlpar/kernels/norm.hpp"

/// 0 when the first output is 1/sqrt(7.5) (the rms of (1, 2, 3, 4) is sqrt(7.5)), else 1 (the error printed).
inline int rmsnorm_once(const vlpar::Context& ctx, vlpar::Allocator& alloc) {
  auto x = vlpar::Tensor::empty(alloc, {2, 4}, vlpar::DType::kF32);
  auto w = vlpar::Tensor::empty(alloc, {4}, vlpar::DType::kF32);
  auto y = vlpar::Tensor::empty(alloc, {2, 4}, vlpar::DType::kF32);
  if (!x.ok() || !w.ok() || !y.ok()) return 1;
  for (int i = 0; i < 8; ++i) x.value().ptr<float>()[i] = float(i % 4 + 1);
  for (int i = 0; i < 4; ++i) w.value().ptr<float>()[i] = 1.f;
  const vlpar::Status s = vlpar::rmsnorm_forward(ctx, y.value(), vlpar::TensorView(), x.value(), w.value(), 0.f);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  const float want = 1.f / std::sqrt(7.5f);
  return std::fabs(y.value().ptr<float>()[0] - want) > 1e-6f ? 1 : 0;
}
