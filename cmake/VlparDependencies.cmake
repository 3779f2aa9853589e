# Third-party dependencies, all from Debian packages (scripts/install_deps.sh installs them).
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(Threads REQUIRED)   # the CPU thread pool (core/thread_pool.hpp)
if(VLPAR_GPU_CHECKS_ONLY)  # core + kernels only (bench/gpu/validate.sh): none of the libraries below
  if(VLPAR_BUILD_TESTS)
    find_package(GTest REQUIRED)
  endif()
  return()
endif()
find_package(nlohmann_json 3.10 REQUIRED)   # JSON headers of safetensors, config.json, index files (src/ only)
# data/: JPEG through libjpeg-turbo (libjpeg62-turbo-dev provides libjpeg), PNG through libpng, the tokenizer's
# split regex through PCRE2 (8-bit), Energon's YAML metadata through yaml-cpp. Linked privately (src/data only).
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(yaml-cpp REQUIRED)
# MPI (Open MPI from libopenmpi-dev): the comm layer's CPU backend and the NCCL bootstrap; linked PUBLIC.
# The C API through the CXX component: vlpar (and its consumers) enable only the CXX language, and FindMPI's C
# component demands an enabled C compiler. MPI_CXX_SKIP_MPICXX leaves out the deprecated C++ bindings.
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "vlpar uses the MPI C API only")
find_package(MPI REQUIRED COMPONENTS CXX)
if(VLPAR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(VLPAR_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
