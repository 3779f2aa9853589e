// CPU elementwise ops (the computation; src/kernels/ops/elementwise.cpp checks the arguments). Each element is
// computed by one thread in fp32, so the result does not depend on the thread count.
// Test: tests/unit/test_activation.cpp (Elementwise.*).
#include "vlpar/kernels/elementwise.hpp"

#include "vlpar/core/dispatch.hpp"

#include "isa_namespace.hpp"

namespace vlpar::VLPAR_CPU_ISA_NAMESPACE {

Status add_(const Context& ctx, TensorView dst, TensorView src) {
  VLPAR_FLOAT_SWITCH(dst.dtype, D, "add_", {
    VLPAR_FLOAT_SWITCH(src.dtype, S, "add_", {
      D* d = dst.ptr<D>();
      const S* s = src.ptr<S>();
      parallel_for(ctx, dst.numel(), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] = from_float<D>(to_float(d[i]) + to_float(s[i]));
      });
    });
  });
  return Status::Ok();
}

}  // namespace vlpar::VLPAR_CPU_ISA_NAMESPACE
