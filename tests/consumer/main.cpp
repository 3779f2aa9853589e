// Links against vlpar::vlpar and runs one op; exits non-zero on any failure.
#include <cmath>
#include <cstdio>

#include "vlpar/vlpar.hpp"

int main() {
  vlpar::Allocator alloc;
  const vlpar::Context ctx = vlpar::Context::cpu_default();
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
  // rms of (1, 2, 3, 4) is sqrt(7.5): the first output is 1/sqrt(7.5).
  const float want = 1.f / std::sqrt(7.5f);
  if (std::fabs(y.value().ptr<float>()[0] - want) > 1e-6f) return 1;
  std::printf("vlpar consumer ok (CUDA build: %s)\n", vlpar::built_with_cuda() ? "yes" : "no");
  return 0;
}
