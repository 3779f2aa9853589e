// The add_subdirectory consumer: links only vlpar::core and vlpar::kernels (so CI compiles no more of vlpar than
// those two a second time) and runs one op on the CPU path the kernels picked; exits non-zero on any failure.
#include <cstdio>

#include "rmsnorm_once.hpp"
#include "vlpar/core/cpu_isa.hpp"

int main() {
  vlpar::Allocator alloc;
  vlpar::Context ctx = vlpar::Context::cpu_default();
  ctx.allocator = &alloc;
  if (rmsnorm_once(ctx, alloc) != 0) return 1;
  std::printf("vlpar subdirectory consumer ok (CPU path %s)\n", vlpar::cpu_isa_name(vlpar::cpu_isa_active()));
  return 0;
}
