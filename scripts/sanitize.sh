#!/usr/bin/env bash
# vlpar's input side under sanitizers, with clang (presets sanitize and tsan: CPU only, the base CPU path, -O0,
# unity builds of the components). What CI runs (stage sanitize, scripts/test.sh) is the default, `ci`:
#   asan   ASan + UBSan without recovery: the tests of core, io and data (the parsers of safetensors, tar,
#          WebDataset/Energon, tokenizer.json, chat JSON, JPEG/PNG, checkpoints, batches, the thread pool, the
#          loader; the list is tests/CMakeLists.txt's vlpar_input_tests) and of the trainer's TOML, each program
#          once, then every libFuzzer target (fuzz/) for a fixed time on its committed corpus (scripts/fuzz.sh:
#          libFuzzer's `Done N runs` line per target). These link only vlpar::core, ::comm, ::io and ::data (and
#          the Qwen3-VL example's input side, qwen3vl_inputs), so the tree compiles no op and no model block.
#   tsan   ThreadSanitizer: the thread pool, the parallel loader, and the communicator's watchdog (mpirun -np 2).
#          vlpar runs no OpenMP, so every thread of vlpar is instrumented.
#   full   asan, then also the Qwen3-VL example's tests of config.json, batch files and HF weights: they build
#          the model to check what they read, so the whole tree under the sanitizers (~10 more minutes cold).
# Any sanitizer report, test failure or fuzzer finding fails the script.
#   scripts/sanitize.sh [ci|asan|tsan|full] [--fuzz-seconds S]    (default: ci = asan + tsan, fuzz 3 s per target)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/pool.sh
jobs=$(nproc)
mode=ci
fuzz_seconds=3
while [ $# -gt 0 ]; do
  case "$1" in
    ci|asan|tsan|full) mode=$1; shift ;;
    --fuzz-seconds) fuzz_seconds=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "usage: scripts/sanitize.sh [ci|asan|tsan|full] [--fuzz-seconds S]" >&2; exit 2 ;;
  esac
done
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(pwd)/tests/sanitizers/tsan.supp

configure() {  # configure <preset>: once per tree (a later run only builds)
  [ -f "build/$1/CMakeCache.txt" ] || cmake --preset "$1" > /dev/null
}

# Left out under the sanitizers (both run in the tests stage): tests whose point is volume or timing, not memory
# safety, and that take minutes or miss their aim at -O0 under ASan:
#   Packer.EfficiencyOnVqaDistribution  packs thousands of synthetic samples to measure the fill (3 s optimized,
#                                       100 s at -O0 here); the packer's paths are the other Packer tests'
#   Loader.ThroughputOnSyntheticJpegs   decodes and processes JPEGs for a throughput figure (6 s optimized, 85 s
#                                       here); the loader's paths are the other Loader tests'
#   CheckpointCrash.SigkillDuringSaves* aims SIGKILLs into checkpoint writes by timing; instrumented, the child's
#                                       start-up outlasts the aim, so too few kills land inside a save
skip='Packer.EfficiencyOnVqaDistribution:Loader.ThroughputOnSyntheticJpegs'
skip+=':CheckpointCrash.SigkillDuringSavesLeavesTheLatestCheckpointLoadable'
# Under TSan also the loader's two resume tests (20 s and 8 s there): their subject is the saved state, and the
# threading they share with the others (workers, reorder window, destruction with busy workers) runs in
# EqualsSerialReference..., SkipsCorrupt..., DestructionNeverHangs and MeasuresWait...
tsan_skip="$skip:Loader.ResumeContinuesWithTheExactNextBatch:Loader.ResumeOverAShuffledSampleStream"

run_tests() {  # run_tests <tree> <gtest filter to leave out> <program...>: each program once, one per core
  test_tree=$1 test_skip=$2
  shift 2
  if ! run_in_pool start_test finish_test "$@"; then
    echo "$test_tree: failed (logs build/$test_tree/<test>.log)" >&2
    return 1
  fi
}
start_test() { "$1" --gtest_brief=1 --gtest_filter="-$test_skip" > "build/$test_tree/$(basename "$1").log" 2>&1; }
finish_test() {  # finish_test <program> <exit status>: its verdict
  local log
  log=build/$test_tree/$(basename "$1").log
  if [ "$2" -eq 0 ]; then
    echo "$test_tree: $(basename "$1") $(grep -E '^\[  PASSED  \]' "$log" | tr -s ' ')"
  else
    tail -80 "$log"
    echo "$test_tree: $(basename "$1") FAILED" >&2
    return 1
  fi
}

asan() {  # asan [full]
  configure sanitize
  local extra=()
  [ "${1:-}" = full ] && extra=(test_config test_batch_io test_hf_weights)
  cmake --build build/sanitize -j"$jobs" --target input_tests fuzzers "${extra[@]}"
  local programs
  mapfile -t programs < build/sanitize/input_tests.txt
  for t in "${extra[@]}"; do programs+=("build/sanitize/examples/qwen3vl/$t"); done
  # The slowest programs under ASan start first (test_loader ~35 s, test_checkpoint and test_tokenizer ~11 s on a
  # 2-core machine): started last, test_loader alone kept one core busy for half a minute after the rest were done.
  local slow=(test_loader test_checkpoint test_tokenizer) ordered=() p
  for t in "${slow[@]}"; do
    for p in "${programs[@]}"; do [ "$(basename "$p")" = "$t" ] && ordered+=("$p"); done
  done
  for p in "${programs[@]}"; do [[ " ${slow[*]} " == *" $(basename "$p") "* ]] || ordered+=("$p"); done
  programs=("${ordered[@]}")
  run_tests sanitize "$skip" "${programs[@]}"
  scripts/fuzz.sh --seconds "$fuzz_seconds"
}

tsan() {
  configure tsan
  cmake --build build/tsan -j"$jobs" --target test_thread_pool test_loader test_watchdog
  run_tests tsan "$tsan_skip" build/tsan/tests/test_thread_pool build/tsan/tests/test_loader
  # The watchdog test ends the job with MPI_Abort on purpose (tests/mpi/test_watchdog.cpp): rank 0's OK line
  # is the verdict. Open MPI itself is not instrumented; the reports that count are in vlpar's code.
  local log=build/tsan/test_watchdog.log
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_hwloc_base_binding_policy=none \
    timeout 60 mpirun -np 2 build/tsan/tests/test_watchdog > "$log" 2>&1 || true
  if grep -q "VLPAR_WATCHDOG_OK" "$log" && ! grep -q "WARNING: ThreadSanitizer" "$log"; then
    echo "tsan: test_watchdog (np 2) $(grep -o 'VLPAR_WATCHDOG_OK.*' "$log" | head -1 | cut -c1-60)..."
  else
    tail -80 "$log"
    echo "tsan: test_watchdog failed (log $log)" >&2
    return 1
  fi
}

case "$mode" in
  ci) asan && tsan ;;
  asan) asan ;;
  tsan) tsan ;;
  full) asan full && tsan ;;
esac
