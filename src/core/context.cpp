// Default execution contexts.
#include "vlpar/core/context.hpp"

#include <omp.h>

namespace vlpar {

Context Context::cpu_default() {
  Context ctx;
  ctx.device = Device::cpu();
  ctx.num_threads = std::max(1, omp_get_max_threads());
  return ctx;
}

}  // namespace vlpar
