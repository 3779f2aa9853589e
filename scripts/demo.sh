#!/usr/bin/env bash
# The README main job: on a fresh Debian machine, install what is missing, build the three programs, prepare the
# demo VQA data from real photographs, train a tiny Qwen3-VL from scratch on CPU, and report held-out accuracy next
# to chance with the paths of the checkpoint, metrics, plot and trace.
# Usage: scripts/demo.sh [--section.key=value ...]     (overrides for qwen3vl-train, e.g. --training.steps=100;
#        the outputs stay in runs/demo, so do not override checkpoint.dir or metrics.dir here)
# Environment: VLPAR_DEMO_DATA (default runs/demo_data) is reused when it already holds a complete dataset made with
# the same options (demo_meta.json present); VLPAR_DEMO_IMAGES (default 2000) training questions.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

stamp "dependencies"
"$(pwd)/scripts/install_deps.sh"

stamp "build (Release, CPU): vlpar-data qwen3vl-train qwen3vl-generate"
cmake --preset cpu > /dev/null
cmake --build --preset cpu -j"$(nproc)" --target vlpar-data qwen3vl-train qwen3vl-generate

data="${VLPAR_DEMO_DATA:-runs/demo_data}"
images="${VLPAR_DEMO_IMAGES:-2000}"
demo_args="make-demo --images $images --val-images 200 (seed 0)"
if [ -f "$data/.nv-meta/.info.json" ] && [ "$(cat "$data/.demo_args" 2>/dev/null)" = "$demo_args" ]; then
  stamp "demo data: reusing $data ($demo_args)"
else
  stamp "demo data -> $data"
  rm -f "$data/.demo_args"
  scripts/make_demo_data.sh "$data" --images "$images" --val-images 200
  echo "$demo_args" > "$data/.demo_args"
fi

stamp "train (examples/qwen3vl/configs/demo.toml $*)"
rm -rf runs/demo
./build/cpu/examples/qwen3vl/qwen3vl-train --config examples/qwen3vl/configs/demo.toml --data.train="$data" \
  --data.eval="$data" "$@"

stamp "held-out evaluation (greedy decoding with the KV cache)"
./build/cpu/examples/qwen3vl/qwen3vl-generate --checkpoint runs/demo/checkpoints --eval --threads 2 | tee runs/demo/eval.txt

stamp "done"
acc=$(grep -m1 '^eval: accuracy' runs/demo/eval.txt)
echo "held-out ${acc#eval: }"
echo "checkpoint: runs/demo/checkpoints/$(cat runs/demo/checkpoints/latest)"
echo "metrics:    runs/demo/metrics.jsonl   (TensorBoard: runs/demo/tb)"
echo "plot:       runs/demo/plot.png"
echo "trace:      runs/demo/trace.json       (open in https://ui.perfetto.dev or chrome://tracing)"
