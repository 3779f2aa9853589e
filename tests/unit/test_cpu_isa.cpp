// The CPU path selection (include/vlpar/core/cpu_isa.hpp): the rule as a pure function, and the process's
// choice under VLPAR_CPU_ISA. ctest runs this binary and every kernel test once more per lower compiled path
// (label isa), so each path's kernels are checked against the fp64 references with the ops' own tolerances.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "vlpar/core/cpu_isa.hpp"

namespace vlpar {
namespace {

using V = std::vector<CpuIsa>;
const V kAll = {CpuIsa::kBase, CpuIsa::kAvx2, CpuIsa::kAvx512};

TEST(CpuIsa, BestCompiledPathTheCpuSupports) {
  EXPECT_EQ(choose_cpu_isa(kAll, CpuIsa::kAvx512, nullptr).isa, CpuIsa::kAvx512);
  EXPECT_EQ(choose_cpu_isa(kAll, CpuIsa::kAvx2, "").isa, CpuIsa::kAvx2);
  EXPECT_EQ(choose_cpu_isa(kAll, CpuIsa::kBase, nullptr).isa, CpuIsa::kBase);
  EXPECT_EQ(choose_cpu_isa(V{CpuIsa::kBase, CpuIsa::kAvx2}, CpuIsa::kAvx512, nullptr).isa, CpuIsa::kAvx2);
  EXPECT_EQ(choose_cpu_isa(V{CpuIsa::kBase, CpuIsa::kAvx512}, CpuIsa::kAvx2, nullptr).isa, CpuIsa::kBase);
}

TEST(CpuIsa, RequestSelectsALowerPath) {
  const CpuIsaChoice c = choose_cpu_isa(kAll, CpuIsa::kAvx512, "avx2");
  EXPECT_EQ(c.isa, CpuIsa::kAvx2);
  EXPECT_TRUE(c.status.ok());
  EXPECT_EQ(choose_cpu_isa(kAll, CpuIsa::kAvx512, "base").isa, CpuIsa::kBase);
}

TEST(CpuIsa, RequestsThatCannotBeFollowedAreReported) {
  const CpuIsaChoice unsupported = choose_cpu_isa(kAll, CpuIsa::kAvx2, "avx512");
  EXPECT_EQ(unsupported.isa, CpuIsa::kAvx2);
  EXPECT_NE(unsupported.status.message().find("this CPU supports only up to avx2"), std::string::npos)
      << unsupported.status.message();
  const CpuIsaChoice missing = choose_cpu_isa(V{CpuIsa::kBase}, CpuIsa::kAvx512, "avx2");
  EXPECT_EQ(missing.isa, CpuIsa::kBase);
  EXPECT_NE(missing.status.message().find("did not compile"), std::string::npos) << missing.status.message();
  const CpuIsaChoice typo = choose_cpu_isa(kAll, CpuIsa::kAvx512, "avx-512");
  EXPECT_EQ(typo.isa, CpuIsa::kAvx512);
  EXPECT_NE(typo.status.message().find("unknown CPU path 'avx-512'"), std::string::npos) << typo.status.message();
}

// Under ctest's isa variants VLPAR_CPU_ISA names the path this process must run.
TEST(CpuIsa, ThisProcessRunsTheRequestedPath) {
  const char* want = std::getenv("VLPAR_CPU_ISA");
  if (want == nullptr || *want == '\0') {
    EXPECT_EQ(cpu_isa_active(), choose_cpu_isa(cpu_isas_compiled(), cpu_isa_supported(), nullptr).isa);
    return;
  }
  Result<CpuIsa> w = parse_cpu_isa(want);
  ASSERT_TRUE(w.ok()) << w.status().message();
  if (int(w.value()) > int(cpu_isa_supported())) GTEST_SKIP() << "this CPU cannot run " << want;
  EXPECT_TRUE(cpu_isa_status().ok()) << cpu_isa_status().message();
  EXPECT_STREQ(cpu_isa_name(cpu_isa_active()), want);
}

TEST(CpuIsa, ThisBuildCompiledTheConfiguredPaths) {
  // VLPAR_TEST_CPU_ISAS: the build's VLPAR_CPU_ISAS (tests/CMakeLists.txt); base is always compiled.
  V want = {CpuIsa::kBase};
  const std::string configured = VLPAR_TEST_CPU_ISAS;
  for (const char* name : {"avx2", "avx512"})
    if (configured.find(name) != std::string::npos) want.push_back(parse_cpu_isa(name).value());
  EXPECT_EQ(cpu_isas_compiled(), want) << "VLPAR_CPU_ISAS = '" << configured << "'";
}

}  // namespace
}  // namespace vlpar
