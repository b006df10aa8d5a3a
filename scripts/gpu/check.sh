#!/usr/bin/env bash
# The GPU session's checks, one stage per call (the device tool allows 10 minutes a command and
# keeps build-gpu/ between calls on a warm machine). Logs and results go to $OUT (or out-gpu/).
#   scripts/gpu/check.sh build      # unpack the carried .deb files, build build-gpu/ (scripts/gpu/build.sh)
#   scripts/gpu/check.sh tests      # the CUDA tests, then the rest of the suite on the GPU build
#   scripts/gpu/check.sh bench      # dlperf bench gemm, conv, copy, launch, gpu-memory, allreduce (--quick)
#   scripts/gpu/check.sh recipe     # Fashion-MNIST to 93% in under a second (docs/gpu.md)
#   scripts/gpu/check.sh profile    # dlperf profile on the GPU, and what profiling costs there (docs/profile.md)
#   scripts/gpu/check.sh vs-torch [args]  # scripts/gpu/bench_vs_torch.py, args passed through
#   scripts/gpu/check.sh train      # a few dlperf train runs: graphs on/off, pinned/pageable, on-device, tf32, bf16 NHWC vs NCHW
# Carry .deb (scripts/gpu/fetch_debs.sh made it, with Fashion-MNIST in .deb/fashion-mnist).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-out-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.deb/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
data=$PWD/.deb/fashion-mnist
bin=build-gpu/dlperf
stage=${1:-}
shift || true
case "$stage" in
  build)
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1
    scripts/gpu/build.sh 2>&1 | tail -40 | tee "$out/build.log"
    ;;
  tests)
    build-gpu/tests/dlperf_tests --gtest_filter='Cuda.*' 2>&1 | tee "$out/tests-cuda.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |OK \]|Failure|error" | head -80
    timeout 420 build-gpu/tests/dlperf_tests --gtest_filter='-Cuda.*:Lab.*' > "$out/tests-rest.log" 2>&1; echo "rest of the suite: rc $?"
    grep -E "^\[  (FAILED|PASSED) " "$out/tests-rest.log" | head -20
    ;;
  bench)
    for kind in copy launch gpu-memory gemm conv allreduce; do
      timeout 240 $bin bench "$kind" --quick --json "$out/bench-$kind.json" 2>&1 | tee "$out/bench-$kind.txt" | tail -25
    done
    ;;
  recipe)
    DLPERF=$bin DATA="$data" RUNS="$out/recipe" scripts/recipe_fmnist93.sh 2>&1 | tee "$out/recipe.txt"
    ;;
  profile)
    $bin profile --model medium --data "$data" --device cuda --batch-size 64 --data-on-device --runs-dir "$out/runs" \
      --out "$out/profile-medium" 2>&1 | tee "$out/profile.txt" | head -60
    DLPERF=$bin ARGS="--device cuda --data-on-device --data $data" REPEATS=5 scripts/bench_profile_overhead.sh 2>&1 |
      tee "$out/profile-overhead.txt"
    ;;
  vs-torch)
    python3 scripts/gpu/bench_vs_torch.py --dlperf $bin --data "$data" --json "$out/vs-torch.json" --markdown "$out/vs-torch.md" "$@" 2>&1 |
      tee "$out/vs-torch.txt"
    ;;
  train)
    common=(--model medium --data "$data" --device cuda --epochs 2 --batch-size 64 --no-progress --runs-dir "$out/runs")
    for variant in "" "--no-graphs" "--pin-memory off" "--data-on-device" "--precision tf32" "--data-on-device --batch-size 1024" \
      "--precision bf16 --data-on-device" "--precision bf16 --data-on-device --layout nchw" \
      "--precision bf16 --data-on-device --batch-size 1024" "--precision bf16 --data-on-device --batch-size 1024 --layout nchw"; do
      echo "== dlperf train ${variant:-(defaults)}"
      $bin train "${common[@]}" $variant 2>&1 | tail -6
    done 2>&1 | tee "$out/train.txt"
    ;;
  *)
    sed -n 2,11p "$0"
    exit 2
    ;;
esac
