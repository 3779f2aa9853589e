#!/usr/bin/env bash
# The README's test command (and what CI runs): installs missing dependencies, then
#   1. where nvcc exists: the CUDA build of the library and the gpu tests, the ptxas report of every kernel (fails
#      on any spill), the gpu tests (Skipped without a device), and the check that generated instantiation files
#      are up to date;
#   2. CPU-only build (CUDA switched off);
#   3. the installed package: `cmake --install`, then tests/consumer built against it (find_package) and
#      again through add_subdirectory;
#   4. every CPU ctest (labels unit, mpi), last, so the final summary is the run that executes the tests.
# Usage: scripts/test.sh            (from any directory)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
"$(pwd)/scripts/install_deps.sh"
start=$(date +%s)

if command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== CUDA build ($(/usr/local/cuda/bin/nvcc --version | tail -1))"
  python3 tools/gen_instantiations.py --check
  cmake --preset cuda
  # Only what the gpu label needs (the library with its kernels and the gpu tests): the CPU code and its tests are
  # built and run by the CPU stage below, so building them twice would only cost CI time.
  gpu_targets="$(for f in tests/gpu/test_*.cpp; do basename "$f" .cpp; done) test_nccl_communicator"
  # shellcheck disable=SC2086  # one target per word
  cmake --build build/cuda -j"$jobs" --target vlpar $gpu_targets
  cmake --build build/cuda --target ptxas_report
  ctest --preset cuda -j"$jobs" -L gpu
else
  echo "== no nvcc: CUDA build skipped"
fi

echo "== CPU-only build (VLPAR_ENABLE_CUDA=OFF)"
cmake --preset cpu
cmake --build --preset cpu -j"$jobs"

echo "== installed package consumer"
rm -rf build/install build/consumer build/consumer-subdir
cmake --install build/cpu --prefix "$(pwd)/build/install" > /dev/null
cmake -S tests/consumer -B build/consumer -DCMAKE_PREFIX_PATH="$(pwd)/build/install" -DCMAKE_BUILD_TYPE=Release
cmake --build build/consumer -j"$jobs"
./build/consumer/vlpar_consumer
cmake -S tests/consumer -B build/consumer-subdir -DVLPAR_SOURCE_DIR="$(pwd)" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/consumer-subdir -j"$jobs" --target vlpar_consumer
./build/consumer-subdir/vlpar_consumer

echo "== CPU tests (labels unit, mpi; gpu tests report Skipped here)"
ctest --preset cpu -j"$jobs"

echo "== all checks passed in $(( $(date +%s) - start )) s"
