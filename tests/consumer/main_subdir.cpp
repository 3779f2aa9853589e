// The add_subdirectory consumer: links only vlpar::core and vlpar::kernels (so CI compiles no more of vlpar than
// those two a second time) and runs one op on the CPU path the kernels picked; exits non-zero on any failure.
#include <cmath>
#include <cstdio>

#include "vlpar/core/context.hpp"
#include "vlpar/kernels/cpu_isa.hpp"
#include "vlpar/kernels/norm.hpp"

int main() {
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  ctx.allocator = &alloc;
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
  const float want = 1.f / std::sqrt(7.5f);  // rms of (1, 2, 3, 4) is sqrt(7.5)
  if (std::fabs(y.value().ptr<float>()[0] - want) > 1e-6f) return 1;
  std::printf("vlpar subdirectory consumer ok (CPU path %s)\n", vlpar::cpu_isa_name(vlpar::cpu_isa_active()));
  return 0;
}
