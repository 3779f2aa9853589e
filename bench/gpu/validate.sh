#!/usr/bin/env bash
# GPU day, one command: builds the real CUDA preset (core + kernels + the gpu tests only: VLPAR_GPU_CHECKS_ONLY),
# checks the SASS of every instantiation it compiled (all dtypes; CI compiles f32 and bf16), records the device's
# facts, runs every `gpu` test on the device (the kernels through the public ops, and the PTX
# wrappers' tile kernels of tests/emu/warp_matrix_kernels.cu, which the emulator must match), runs
# compute-sanitizer memcheck, racecheck and synccheck over them, probes what racecheck makes of named barriers
# (bench/gpu/racecheck_named_barrier.cu), runs the CUDA kernel benchmarks, and writes one report,
# bench/gpu/reports/<date>-<device>.md
# (keep the latest in the repository). Works on a bare GPU machine without network or Debian -dev packages: run
# bench/gpu/prepare.sh on a networked machine first and bring bench/gpu/deps/ along. Every step has a 10-minute
# limit; a failed step is reported and the script goes on, exiting non-zero at the end if any step failed.
# compute-sanitizer may refuse virtualised devices ("Device not supported"): reported, not a failure.
# Usage: [VALIDATE_COMMIT=<sha>] bench/gpu/validate.sh [build dir, default build/gpu]
#   (VALIDATE_COMMIT: the commit the tree is at, for copies whose .git is stale, e.g. the device tool's)
set -uo pipefail
cd "$(dirname "$0")/../.."

# ---- steps (each runs as `validate.sh --step <name>` under timeout) -------------------------------------------

deps() {  # the -dev packages from prepare.sh, unpacked into a private prefix when the machine lacks them
  local prefix=$build/deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  if ls bench/gpu/deps/*.deb > /dev/null 2>&1; then
    for d in bench/gpu/deps/*.deb; do dpkg -x "$d" "$prefix"; done
    echo "unpacked $(ls bench/gpu/deps/*.deb | wc -l) packages into $prefix"
  else
    echo "no bench/gpu/deps (bench/gpu/prepare.sh): using the system's packages"
  fi
}

configure() {
  local cc arch gen=()
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  arch=$cc
  [ "$cc" = "90" ] && arch=90a  # the kernels' sm_90a paths
  command -v ninja > /dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DVLPAR_ENABLE_CUDA=ON -DVLPAR_GPU_CHECKS_ONLY=ON -DVLPAR_WERROR=OFF \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DVLPAR_CUDA_ARCHS="$arch" -DVLPAR_CPU_ISAS= \
    -DCMAKE_PREFIX_PATH="$PWD/$build/deps/usr;$PWD/$build/deps/usr/lib/x86_64-linux-gnu/cmake"
}

gpu_test_bins=(test_cuda_kernels test_cuda_warp_matrix test_cuda_attention test_cuda_grouped_gemm test_cuda_moe_permute)  # tests/gpu/
build_tests() { cmake --build "$build" -j"$(nproc)" --target "${gpu_test_bins[@]}" bench_cuda_attention bench_cuda_moe; }
device_query() { nvcc -o "$build/device_query" bench/gpu/device_query.cu && "$build/device_query"; }
gpu_tests() { ctest --test-dir "$build" -L gpu --output-on-failure --no-tests=error; }

sanitize() {  # sanitize <tool> [gtest filter]: each gpu test binary under compute-sanitizer
  local out rc worst=0 t
  for t in "${gpu_test_bins[@]}"; do
    # VLPAR_DEVICE_CACHE=0: exact-size device blocks, freed at once, so memcheck sees every overrun and late use
    out=$(VLPAR_DEVICE_CACHE=0 compute-sanitizer --tool "$1" --error-exitcode 1 "$build/tests/$t" --gtest_brief=1 \
          --gtest_filter="${2:-*}" 2>&1)
    rc=$?
    echo "-- $t"
    echo "$out" | tail -40
    if echo "$out" | grep -q "Device not supported"; then
      echo "compute-sanitizer $1: device not supported (virtualised GPU?): reported, not a failure"
      continue
    fi
    [ "$rc" -eq 0 ] || worst=$rc
  done
  return $worst
}
memcheck() { sanitize memcheck; }
# racecheck (2025.3.1, H200, 2026-11-26) reports a "potential WAR hazard" where a buffer is reused after the
# readers' bar.arrive and the writers' bar.sync on the same named barrier, which the PTX memory model orders (the
# emulator accepts it): the named-barrier pipeline test is left out here, and step racecheck_probe records what
# racecheck says about that pattern and its variants on the device in hand.
racecheck() { sanitize racecheck '-*NamedBarrier*'; }
synccheck() { sanitize synccheck; }

racecheck_probe() {  # bench/gpu/racecheck_named_barrier.cu under racecheck: fails if the control goes unreported
  local arch m out reported bad=0
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  nvcc -arch=sm_"$arch" -lineinfo -o "$build/racecheck_named_barrier" bench/gpu/racecheck_named_barrier.cu || return 1
  for m in arrive raw-only sync none; do
    out=$(compute-sanitizer --tool racecheck --racecheck-report hazard "$build/racecheck_named_barrier" $m 2>&1)
    reported=$(echo "$out" | grep -o "Potential [A-Z]* hazard" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    echo "$m: $(echo "$out" | grep "wrong values"); racecheck: ${reported:-no hazard}"
    if [ "$m" = none ] && [ -z "$reported" ]; then bad=1; fi        # the control race must be reported
    if [ "$m" = sync ] && [ -n "$reported" ]; then bad=1; fi        # plain bar.sync ordering must be clean
  done
  return $bad
}

sass() {  # every instantiation this build compiled (all dtypes: CI's nvcc build has f32 and bf16 only), checked
  # against its family's promises with the machine's cuobjdump (tools/check_sass.py: HMMA, LDSM, LDGSTS, no spills)
  local cuobjdump
  cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  python3 tools/check_sass.py --cuobjdump "$cuobjdump" \
    --sources 'src/kernels/cuda/*.cuh' 'src/kernels/cuda/*.cu' \
    --objects "$build"/CMakeFiles/vlpar_kernels_cuda.dir/src/kernels/cuda/*.cu.o \
    --table "$build/sass_table.md" --cuda-include "$(dirname "$(dirname "$cuobjdump")")/include"
}

benchmarks() {  # each CUDA kernel benchmark; attention next to torch's flash SDPA, MoE next to torch._grouped_mm
  local b rc=0
  for b in "$build"/bench/bench_cuda_*; do
    [ -x "$b" ] || continue
    if [ "$(basename "$b")" = bench_cuda_attention ] && python3 -c "import torch" 2> /dev/null; then
      python3 bench/gpu/bench_attention_vs_torch.py "$b" || rc=1
    elif [ "$(basename "$b")" = bench_cuda_moe ] && python3 -c "import torch" 2> /dev/null; then
      python3 bench/gpu/bench_moe_vs_torch.py "$b" || rc=1
    else
      "$b" || rc=1
    fi
  done
  return $rc
}

if [ "${1:-}" = "--step" ]; then
  build=$VALIDATE_BUILD
  "$2"
  exit $?
fi

# ---- driver ----------------------------------------------------------------------------------------------------

build=${1:-build/gpu}
export VALIDATE_BUILD=$build
mkdir -p bench/gpu/reports "$build"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '_')
report="bench/gpu/reports/$(date +%F)-${device:-no_gpu}.md"
log="$build/validate.log"
: > "$log"
failed=()

step() {  # step <name>: runs it with a 10-minute limit, appends its output to the log and the report
  local name=$1 t0 rc out
  t0=$(date +%s)
  echo "== $name"
  out=$(timeout 600 "$0" --step "$name" 2>&1)
  rc=$?
  echo "$out" >> "$log"
  echo "== $name: exit $rc in $(( $(date +%s) - t0 )) s"
  { echo "## $name"; echo; echo "exit $rc after $(( $(date +%s) - t0 )) s"; echo; echo '```';
    echo "$out" | tail -200 | sed "s|$PWD/||g"; echo '```'; echo; } >> "$report"  # repo-relative paths
  [ "$rc" -eq 0 ] || failed+=("$name")
}

commit=${VALIDATE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
{ echo "# GPU validation, $(date -u '+%F %T') UTC"; echo; echo "commit $commit"
  echo; echo '```'; nvidia-smi 2>&1 | head -20; nvcc --version 2>&1 | tail -2; echo '```'; echo; } > "$report"
for s in deps configure build_tests sass device_query gpu_tests memcheck racecheck synccheck racecheck_probe benchmarks; do
  step "$s"
done
{ echo "## Summary"; echo; [ ${#failed[@]} -eq 0 ] && echo "every step passed" || echo "failed: ${failed[*]}"; } \
  >> "$report"
echo "report: $report"
[ ${#failed[@]} -eq 0 ]
