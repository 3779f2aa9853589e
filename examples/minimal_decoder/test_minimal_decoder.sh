#!/usr/bin/env bash
# ctest minimal_decoder.np4: minimal-decoder at TP2 × DP2 with ZeRO-1 on a text file.
#   1. 40 steps from scratch: the loss falls by more than 1.0 nat from its first logged value (ln 256 ≈ 5.5);
#   2. the same schedule stopped after step 20 (--stop-after), then a second run to 40 that resumes from the step-20 checkpoint: its final loss equals run 1's
#      bit for bit (printed with 9 significant digits), so parameters, AdamW state and data position all resumed.
# Usage: test_minimal_decoder.sh <minimal-decoder> <mpirun> <text file>
set -euo pipefail
bin=$1 mpirun=$2 data=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { "$mpirun" -np 4 "$bin" --tp 2 --zero1 --data "$data" --threads 1 --save-every 10 --steps 40 --out "$@"; }
run "$work/whole" | tee "$work/whole.log"
first=$(awk '/^step +1\//{print $4}' "$work/whole.log")
whole=$(awk '/^final loss/{print $3}' "$work/whole.log")
run "$work/split" --stop-after 20 > "$work/split1.log"
run "$work/split" | tee "$work/split2.log"
grep -q "resumed from .*step-20 at step 20" "$work/split2.log" || { echo "FAIL: the second run did not resume"; exit 1; }
resumed=$(awk '/^final loss/{print $3}' "$work/split2.log")
echo "first logged loss $first, final $whole, final after resume $resumed"
awk -v a="$first" -v b="$whole" 'BEGIN { exit !(a - b > 1.0) }' || { echo "FAIL: the loss did not fall by 1 nat"; exit 1; }
[ "$whole" = "$resumed" ] || { echo "FAIL: resumed run ends at $resumed, uninterrupted at $whole"; exit 1; }
echo "minimal-decoder: OK"
