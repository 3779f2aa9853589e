#!/usr/bin/env bash
# Builds vlpar's libFuzzer targets (fuzz/, preset sanitize: clang, ASan + UBSan without recovery, vlpar's libraries
# instrumented for coverage) and runs each one over its committed corpus fuzz/corpus/<target>/ (new inputs go to a
# scratch copy under build/sanitize/fuzz/, never into the tree). Any finding (a sanitizer report, a crash, a broken
# property, a timeout of 10 s or 2 GiB of memory for one input) fails the script; its input is kept as
# build/sanitize/fuzz/<target>-crash-*; add it to fuzz/corpus/<target>/ as a regression seed once fixed.
# libFuzzer's `Done N runs in S second(s)` line is printed for every target; as many targets run at once as
# there are cores.
#   scripts/fuzz.sh [--seconds S | --runs N] [target...]   (default: every target for 10 s)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/pool.sh
limit=(-max_total_time=10)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ! -f build/sanitize/CMakeCache.txt ] || ! grep -q "VLPAR_BUILD_FUZZERS:BOOL=ON" build/sanitize/CMakeCache.txt; then
  cmake --preset sanitize > /dev/null
fi
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz && ls fuzz_*.cpp | sed 's/[.]cpp$//')
fi
cmake --build build/sanitize -j"$(nproc)" --target "${targets[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
out=build/sanitize/fuzz
fuzz_one() {  # fuzz_one <target>: exit status 0 when libFuzzer finished clean
  mkdir -p "$out/corpus-$1"
  build/sanitize/fuzz/"$1" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$1-" "$out/corpus-$1" "fuzz/corpus/$1" > "$out/$1.log" 2>&1
}
finish_fuzz() {  # finish_fuzz <target> <exit status>: libFuzzer's summary, or the finding
  if [ "$2" -eq 0 ]; then
    echo "$1: $(grep -E '^Done [0-9]+ runs' "$out/$1.log")"
  else
    tail -60 "$out/$1.log"
    echo "$1: FINDING (log $out/$1.log, input $out/$1-*)" >&2
    return 1
  fi
}
if ! run_in_pool fuzz_one finish_fuzz "${targets[@]}"; then  # one target per core at a time
  echo "fuzzing found defects (above)" >&2
  exit 1
fi
