#!/usr/bin/env bash
# The kernel benchmarks (the README's main job is scripts/demo.sh): install missing dependencies, build (Release,
# CPU), run the op benchmarks and the attention benchmark, and print where the JSON results are. Side-by-side
# comparisons with PyTorch, HF image processors and HF tokenizers are in tools/bench/ (bench/README.md).
# Usage: scripts/bench.sh [extra Google Benchmark flags, e.g. --benchmark_filter=rmsnorm]
set -euo pipefail
cd "$(dirname "$0")/.."
"$(pwd)/scripts/install_deps.sh"
cmake --preset cpu > /dev/null
cmake --build --preset cpu -j"$(nproc)" --target bench_ops bench_attention
mkdir -p build/bench-results
./build/cpu/bench/bench_ops --benchmark_out=build/bench-results/ops.json --benchmark_out_format=json "$@"
./build/cpu/bench/bench_attention --benchmark_out=build/bench-results/attention.json --benchmark_out_format=json "$@"
echo "results: build/bench-results/ops.json build/bench-results/attention.json"
