#!/usr/bin/env bash
# Fashion-MNIST to 93% test accuracy: the recipe is recipes/fmnist93.json with the flags below
# (5 epochs, batch 256, one-cycle lr 0.2, label smoothing 0.1, SGD with Nesterov momentum).
# On a GPU it runs in bf16 with the dataset on the GPU and CUDA graphs; on a CPU in fp32. It
# prints the final test accuracy and the training + evaluation wall time from the run record
# (start-up excluded, evaluation included), and whether that meets 93% (in under 1 s on a GPU).
#   scripts/recipe_fmnist93.sh                         # the default device (a GPU when there is one)
#   DEVICE=cpu scripts/recipe_fmnist93.sh              # on the CPU (1.5 to 6 minutes on 2 cores, by the CPU)
#   DLPERF=build-gpu/dlperf DATA=.deb/fashion-mnist scripts/recipe_fmnist93.sh   # on the GPU machine
# On the CPU it reached 93.31% (seed 42, with onecycle as PyTorch's; 93.48% and, seed 1, 93.41%
# with onecycle one step later). EPOCHS, BATCH and LR change the epochs, batch size and peak lr
# (for the variants in docs/gpu.md; dlperf takes each flag once). Extra arguments go to dlperf
# train (for example --seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DLPERF:-build/dlperf}
data=${DATA:-fashion-mnist}
runs=${RUNS:-runs/recipe-fmnist93}
device=${DEVICE:-auto}
if [ "$device" = auto ]; then
  if [ -e /dev/nvidia0 ]; then device=cuda; else device=cpu; fi
fi
gpu_flags=()
[ "$device" != cpu ] && gpu_flags=(--precision "${PRECISION:-bf16}" --data-on-device)
mkdir -p "$runs"
before=$(ls "$runs" | wc -l)
# The test set is evaluated once, after the last epoch (--eval-every): that is the accuracy the
# recipe is judged by, and each evaluation cost about 15 ms on the H200 (2026-11-27), 60 ms of a
# 1 s budget for the four epochs before it.
epochs=${EPOCHS:-5}
"$bin" train --model recipes/fmnist93.json --data "$data" --device "$device" --epochs "$epochs" --batch-size "${BATCH:-256}" --lr "${LR:-0.2}" \
  --schedule onecycle --label-smoothing 0.1 --workers 2 --eval-every "$epochs" "${gpu_flags[@]}" --runs-dir "$runs" --no-progress "$@"
record=$(ls -t "$runs"/*.json | head -1)
[ "$(ls "$runs" | wc -l)" -gt "$before" ] || { echo "no new run record in $runs" >&2; exit 1; }
python3 - "$record" "$device" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
on_gpu = sys.argv[2] != "cpu"
t = sum(e["train_s"] + e["eval_s"] for e in r["epochs"])
acc = r["epochs"][-1]["test_acc"]
goal = acc >= 0.93 and (t < 1.0 or not on_gpu)
print(f"\nFashion-MNIST recipe on {r['config'].get('device_used', sys.argv[2])}: {100 * acc:.2f}% test accuracy after "
      f"{t:.3f} s of training and evaluation -> {'meets' if goal else 'misses'} 93%{' in under 1 s' if on_gpu else ''}")
sys.exit(0 if goal else 3)
PY
