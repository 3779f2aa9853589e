# How vlpar's test programs compile (tests/, examples/*/tests, tools/*/test_*): cheaper than the library, because
# the CI build stage is mostly test front ends (a cold emu build at e5bf226 measured 926 of 2048 CPU-seconds in 116
# test objects, ~5 s of each spent parsing GoogleTest and the standard library; the library's objects 693).
#   VLPAR_TEST_OPT_FLAGS  the tests' own sources compile with these instead of the build type's -O3 (the library and
#                         every kernel a test calls keep -O3: only test bodies and their fp64 references change).
#                         GCC's ISO mode keeps -ffp-contract=off at every level, so results are the same bits.
#                         -Og, not -O1: test_moe.cpp compiles in 7.1 s instead of 9.8 s (one idle core; the 96
#                         test objects of the emu tree 403 CPU-seconds at 25a5a3c), the suite runs 164 s instead
#                         of 151 s (ctest -j2 -LE long): ~75 s less CI on 2 cores.
#                         GCC 12 at -O1 (and -Og) reports -Warray-bounds and -Wstringop-overflow false positives inside
#                         libstdc++'s std::string (a literal appended to a fresh string, the same 11 test files:
#                         GCC bug 105651): both off for the tests' own sources only; the library keeps them,
#                         and the ASan build checks the tests' bounds for real.
#   VLPAR_TEST_PCH        one precompiled header (GoogleTest, the standard library, fmt, nlohmann_json) built once
#                         and reused by every test (REUSE_FROM: the compiler checks that the flags agree;
#                         -Winvalid-pch under -Werror turns a mismatch into an error, never a silent reparse).
#                         It holds no vlpar header: those depend on macros that differ between test targets.
#                         The header check (tests/CMakeLists.txt) has its own, of the standard library only.
set(VLPAR_TEST_OPT_FLAGS "-Og" CACHE STRING "Optimisation flags of the tests' own sources (empty: the build type's)")
option(VLPAR_TEST_PCH "Precompiled headers: one shared by every test program, one for the header check" ON)

# vlpar_test_pch(): the target whose precompiled header the tests reuse (tests/CMakeLists.txt, before any test).
function(vlpar_test_pch)
  if(NOT VLPAR_TEST_PCH OR VLPAR_GPU_CHECKS_ONLY)  # a GPU day builds the gpu tests only, as before
    return()
  endif()
  add_library(vlpar_test_pch OBJECT ${PROJECT_SOURCE_DIR}/tests/test_pch.cpp)
  # vlpar::core only (the language level, fmt): linking all of vlpar would make a test of one component wait for
  # every component (the sanitizer tree builds just the input side). A test that links more gets more -D and -I
  # than this header was made with; none of them touches the headers below.
  target_link_libraries(vlpar_test_pch PRIVATE vlpar::core GTest::gtest nlohmann_json::nlohmann_json)
  # An object library would compile with -fPIC; the test programs compile with -fPIE, and a precompiled header
  # must be made with the same setting as its users.
  set_target_properties(vlpar_test_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(vlpar_test_pch PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${CMAKE_CXX_COMPILE_OPTIONS_PIE}>)
  vlpar_test_flags(vlpar_test_pch)
  target_precompile_headers(vlpar_test_pch PRIVATE
    <gtest/gtest.h> <fmt/format.h> <nlohmann/json.hpp>
    <algorithm> <array> <atomic> <chrono> <cmath> <cstdint> <cstdio> <cstdlib> <cstring> <filesystem> <fstream>
    <functional> <limits> <map> <memory> <numeric> <optional> <random> <set> <span> <sstream> <string>
    <string_view> <thread> <tuple> <unordered_map> <utility> <vector>)
endfunction()

function(vlpar_test_flags target)
  vlpar_use_warnings(${target})
  if(VLPAR_TEST_OPT_FLAGS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${VLPAR_TEST_OPT_FLAGS}>
                                             $<$<CXX_COMPILER_ID:GNU>:-Wno-array-bounds -Wno-stringop-overflow>)
  endif()
endfunction()

# vlpar_test_target(<target>): the warnings, optimisation and precompiled header of a test program.
function(vlpar_test_target target)
  vlpar_test_flags(${target})
  if(TARGET vlpar_test_pch)
    target_precompile_headers(${target} REUSE_FROM vlpar_test_pch)
  endif()
endfunction()
