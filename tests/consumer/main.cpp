// Links against vlpar::vlpar and runs one op; exits non-zero on any failure.
#include <cstdio>

#include "rmsnorm_once.hpp"
#include "vlpar/vlpar.hpp"

int main() {
  vlpar::Allocator alloc;
  const vlpar::Context ctx = vlpar::Context::cpu_default();
  if (rmsnorm_once(ctx, alloc) != 0) return 1;
  std::printf("vlpar consumer ok (CUDA build: %s)\n", vlpar::built_with_cuda() ? "yes" : "no");
  return 0;
}
