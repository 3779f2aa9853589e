// Links only vlpar::core, ::kernels, ::comm and ::nn (what a trainer of its own needs for ops, communicators and
// the parameter registry) and uses one of each; exits non-zero on any failure.
#include <cmath>
#include <cstdio>

#include "vlpar/comm/single_communicator.hpp"
#include "vlpar/core/context.hpp"
#include "vlpar/core/cpu_isa.hpp"
#include "vlpar/kernels/norm.hpp"
#include "vlpar/nn/param_registry.hpp"

int main() {
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  ctx.allocator = &alloc;
  vlpar::nn::ParamRegistry reg;
  if (!reg.add(vlpar::make_replicated_param("norm.weight", vlpar::Shape{4}, 0, vlpar::InitRule::ones()), "lm")
           .ok())
    return 1;
  if (!reg.materialize(ctx, alloc, 1).ok()) return 1;
  auto x = vlpar::Tensor::empty(alloc, {2, 4}, vlpar::DType::kF32);
  auto y = vlpar::Tensor::empty(alloc, {2, 4}, vlpar::DType::kF32);
  if (!x.ok() || !y.ok()) return 1;
  for (int i = 0; i < 8; ++i) x.value().ptr<float>()[i] = float(i % 4 + 1);
  vlpar::comm::SingleCommunicator world;
  if (!world.all_reduce(x.value(), vlpar::comm::ReduceOp::kSum).ok()) return 1;  // size 1: unchanged
  const vlpar::Status s = vlpar::rmsnorm_forward(ctx, y.value(), vlpar::TensorView(), x.value(), reg.value(0), 0.f);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  const float want = 1.f / std::sqrt(7.5f);  // rms of (1, 2, 3, 4) is sqrt(7.5)
  if (std::fabs(y.value().ptr<float>()[0] - want) > 1e-6f) return 1;
  std::printf("vlpar core consumer ok (CPU path %s)\n", vlpar::cpu_isa_name(vlpar::cpu_isa_active()));
  return 0;
}
