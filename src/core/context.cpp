// Default execution contexts.
#include "vlpar/core/context.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace vlpar {
namespace {

/// The leading positive integer of an environment variable ("4" or OpenMP's list form "4,2"), or 0.
int env_threads(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (end != v && n > 0 && n <= 4096) ? int(n) : 0;
}

}  // namespace

int default_cpu_threads() {
  if (const int n = env_threads("VLPAR_NUM_THREADS")) return n;
  if (const int n = env_threads("OMP_NUM_THREADS")) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

Context Context::cpu_default() {
  Context ctx;
  ctx.device = Device::cpu();
  ctx.num_threads = default_cpu_threads();
  return ctx;
}

}  // namespace vlpar
