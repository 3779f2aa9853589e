#!/usr/bin/env bash
# Builds vlpar's libFuzzer targets (fuzz/, preset sanitize: clang, ASan + UBSan without recovery, the whole tree
# instrumented for coverage) and runs each one over its committed corpus fuzz/corpus/<target>/ (new inputs go to a
# scratch copy under build/sanitize/fuzz/, never into the tree). Any finding (a sanitizer report, a crash, a broken
# property, a timeout of 10 s or 2 GiB of memory for one input) fails the script; its input is kept as
# build/sanitize/fuzz/<target>-crash-*; add it to fuzz/corpus/<target>/ as a regression seed once fixed.
# libFuzzer's `Done N runs in S second(s)` line is printed for every target.
#   scripts/fuzz.sh [--seconds S | --runs N] [target...]   (default: every target for 10 s)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-max_total_time=10)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    --runs) limit=(-runs="$2"); shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
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
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus-$t"
  log=$out/$t.log
  if build/sanitize/fuzz/"$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$out/$t-" "$out/corpus-$t" "fuzz/corpus/$t" > "$log" 2>&1; then
    echo "$t: $(grep -E '^Done [0-9]+ runs' "$log")"
  else
    tail -60 "$log"
    echo "$t: FINDING (log $log, input $out/$t-*)" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found defects in: ${failed[*]}" >&2
  exit 1
fi
