#!/usr/bin/env bash
# Checks dlperf plan's memory model against measured peaks: trains every preset for two steps
# at batch 16, 64, 256 and 1024 (Fashion-MNIST shapes), then prints predicted vs measured.
# Step times of two-step runs are start-up dominated; for time, use the lab's runs:
#   build/dlperf plan --against reports/lab/runs/*.json
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-reports/plan-validation}
rm -rf "$out/runs"
mkdir -p "$out/runs"
for model in small medium large resnet18 resnet18-imagenet mlp; do
  for batch in 16 64 256 1024; do
    echo "training $model at batch $batch (2 steps)"
    build/dlperf train --model "$model" --batch-size "$batch" --epochs 1 --train-limit $((2 * batch)) \
      --test-limit "$batch" --runs-dir "$out/runs" --no-progress > /dev/null
  done
done
build/dlperf plan --against "$out"/runs/*.json --json "$out/against.json"
