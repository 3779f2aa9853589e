// CPU path selection. See include/vlpar/core/cpu_isa.hpp.
// Compiled once, for the base path (it must run on any x86-64 CPU to find out which path to take).
#include "vlpar/core/cpu_isa.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <string_view>

#include "vlpar/core/log.hpp"

namespace vlpar {
namespace {

const CpuIsaChoice& choice() {
  // An immutable fact of the process (its CPU and environment), decided once.
  static const CpuIsaChoice c = [] {
    CpuIsaChoice r = choose_cpu_isa(cpu_isas_compiled(), cpu_isa_supported(), std::getenv("VLPAR_CPU_ISA"));
    if (!r.status.ok()) log_warn("{}", r.status.message());
    return r;
  }();
  return c;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kBase: break;
  }
  return "base";
}

Result<CpuIsa> parse_cpu_isa(std::string_view name) {
  for (CpuIsa c : {CpuIsa::kBase, CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (name == cpu_isa_name(c)) return c;
  return VLPAR_STATUS(StatusCode::kInvalidArgument, "VLPAR_CPU_ISA: unknown CPU path '{}' (known: base, avx2, avx512)",
                      name);
}

std::vector<CpuIsa> cpu_isas_compiled() {
  std::vector<CpuIsa> out = {CpuIsa::kBase};
#if defined(VLPAR_CPU_ISA_AVX2)
  out.push_back(CpuIsa::kAvx2);
#endif
#if defined(VLPAR_CPU_ISA_AVX512)
  out.push_back(CpuIsa::kAvx512);
#endif
  return out;
}

CpuIsa cpu_isa_supported() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // F16C and MOVBE from CPUID leaf 1 (ECX): clang 14's __builtin_cpu_supports does not know their names.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool leaf1 = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0;
  const bool f16c_movbe = leaf1 && (ecx & bit_F16C) != 0 && (ecx & bit_MOVBE) != 0;
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && f16c_movbe;
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return v4 ? CpuIsa::kAvx512 : v3 ? CpuIsa::kAvx2 : CpuIsa::kBase;
#else
  return CpuIsa::kBase;
#endif
}

CpuIsaChoice choose_cpu_isa(const std::vector<CpuIsa>& compiled, CpuIsa supported, const char* request) {
  CpuIsa best = CpuIsa::kBase;
  for (CpuIsa c : compiled)
    if (int(c) <= int(supported) && int(c) > int(best)) best = c;
  if (request == nullptr || *request == '\0') return {best, Status::Ok()};
  Result<CpuIsa> want = parse_cpu_isa(request);
  if (!want.ok()) return {best, want.status()};
  bool built = false;
  for (CpuIsa c : compiled) built = built || c == want.value();
  if (!built)
    return {best, VLPAR_STATUS(StatusCode::kInvalidArgument,
                               "VLPAR_CPU_ISA={}: this build did not compile that path (VLPAR_CPU_ISAS); running {}",
                               request, cpu_isa_name(best))};
  if (int(want.value()) > int(supported))
    return {best, VLPAR_STATUS(StatusCode::kInvalidArgument,
                               "VLPAR_CPU_ISA={}: this CPU supports only up to {}; running {}", request,
                               cpu_isa_name(supported), cpu_isa_name(best))};
  return {want.value(), Status::Ok()};
}

CpuIsa cpu_isa_active() { return choice().isa; }
Status cpu_isa_status() { return choice().status; }

}  // namespace vlpar
