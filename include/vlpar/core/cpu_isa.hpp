#pragma once
// Which CPU path the ops run. vlpar::kernels is built without -march=native: every file of src/kernels/cpu is
// compiled once per path in VLPAR_CPU_ISAS (cmake/VlparCpuIsa.cmake), and each public op calls the path chosen
// here, once per process:
//   kBase    the compiler's default x86-64 (SSE2), runs anywhere
//   kAvx2    x86-64-v3: AVX2, FMA, BMI1/2, F16C (Haswell, Zen 1 and later)
//   kAvx512  x86-64-v4: AVX-512 F/BW/CD/DQ/VL (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4 and later)
// The best path the CPU supports and the build compiled is used; the environment variable VLPAR_CPU_ISA
// (base | avx2 | avx512) selects a lower one (for tests, or to compare paths); asking for a path the CPU lacks
// or the build left out is reported by cpu_isa_status() and the best available one runs instead.
// Results may differ between paths in the last bits (other vector widths, FMA contraction); within one path they
// are bitwise reproducible for a fixed thread count (DESIGN §7).
// Test: tests/unit/test_cpu_isa.cpp; every kernel test also runs under each compiled path (ctest -L isa).
#include <string>
#include <vector>

#include "vlpar/core/status.hpp"

namespace vlpar {

enum class CpuIsa { kBase = 0, kAvx2 = 1, kAvx512 = 2 };

const char* cpu_isa_name(CpuIsa isa);
/// @brief Parses "base", "avx2" or "avx512".
Result<CpuIsa> parse_cpu_isa(std::string_view name);
/// @brief The paths this build compiled, lowest first (always contains kBase).
std::vector<CpuIsa> cpu_isas_compiled();
/// @brief The best path this CPU can run (CPUID), whatever the build compiled.
CpuIsa cpu_isa_supported();
/// @brief The path every op runs: the best compiled and supported one, or VLPAR_CPU_ISA when that is lower.
/// Decided on the first call and fixed for the process.
CpuIsa cpu_isa_active();
/// @brief Ok, or the reason VLPAR_CPU_ISA was not honoured (unknown name, unsupported, not compiled).
Status cpu_isa_status();

struct CpuIsaChoice {
  CpuIsa isa = CpuIsa::kBase;
  Status status;  // why `request` was not followed (Ok when it was, or when there was none)
};
/// @brief The rule cpu_isa_active() applies, as a pure function: the best of `compiled` that `supported` allows,
/// or `request` (a VLPAR_CPU_ISA value; null or empty = none) when it names a compiled path the CPU supports.
CpuIsaChoice choose_cpu_isa(const std::vector<CpuIsa>& compiled, CpuIsa supported, const char* request);

}  // namespace vlpar
