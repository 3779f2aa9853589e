#!/usr/bin/env bash
# The README main job, shortened for CI (ctest qwen3vl_demo_short): demo VQA data from the Debian photographs
# (600 training and 120 held-out questions), 150 training steps of the demo model (examples/qwen3vl/configs/demo.toml),
# then held-out accuracy by greedy decoding from the checkpoint. Passes when accuracy >= chance + 0.20 (chance is
# 0.458 on these questions; 120 random answers reach chance + 0.20 with probability < 1e-5: binomial tail).
# Exit 77 (ctest: Skipped) when the photographs package is not installed (scripts/install_deps.sh installs it).
# Usage: demo_short.sh VLPAR_DATA QWEN3VL_TRAIN QWEN3VL_GENERATE SOURCE_DIR WORK_DIR [--section.key=value ...]
# (the overrides go to qwen3vl-train: qwen3vl_demo_short_bf16 passes --training.dtype=bf16)
# VLPAR_DEMO_THREADS (default 2): the threads of the data tool, training and evaluation. ctest runs the two demo
# tests with one thread each, side by side (PROCESSORS 1): two 2-thread runs in turn took ~25 % more machine time.
set -euo pipefail
threads=${VLPAR_DEMO_THREADS:-2}
data_tool=$1 train=$2 generate=$3 src=$4 work=$5
shift 5
photos=$(dpkg -L lomiri-wallpapers-16.04 2>/dev/null | grep -iE '\.(jpe?g|png)$' || true)
if [ -z "$photos" ]; then
  echo "SKIPPED: lomiri-wallpapers-16.04 is not installed (scripts/install_deps.sh installs it)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
echo "$photos" | LC_ALL=C sort > "$work/photos.txt"
"$data_tool" make-demo --out "$work/data" --photo-list "$work/photos.txt" --images 600 --val-images 120 \
  --threads "$threads" --no-progress > "$work/make_demo.log"
cd "$src"
"$train" --config examples/qwen3vl/configs/demo.toml --data.train="$work/data" --data.eval="$work/data" \
  --training.steps=150 --schedule.warmup_steps=10 --checkpoint.dir="$work/ckpt" --checkpoint.interval=0 \
  --metrics.dir="$work/metrics" --metrics.log_interval=50 --metrics.trace=false --metrics.tensorboard=false \
  --training.threads="$threads" "$@" \
  > "$work/train.log" 2>&1 || { tail -20 "$work/train.log"; exit 1; }
grep '^step' "$work/train.log" | tail -3
"$generate" --checkpoint "$work/ckpt" --eval --threads "$threads" | tee "$work/eval.txt"
line=$(grep -m1 '^eval: accuracy' "$work/eval.txt")
read -r acc chance < <(echo "$line" | sed -E 's/^eval: accuracy ([0-9.]+) .* vs chance ([0-9.]+).*/\1 \2/')
if awk -v a="$acc" -v c="$chance" 'BEGIN { exit !(a >= c + 0.20) }'; then
  echo "PASS: held-out accuracy $acc >= chance $chance + 0.20"
  rm -rf "$work"
else
  echo "FAIL: held-out accuracy $acc < chance $chance + 0.20"
  exit 1
fi
