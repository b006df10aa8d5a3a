#!/usr/bin/env bash
# The GPU session's checks, shaped by the device tool's limits (../.library/device/README.md):
# 15 minutes of device time a session (the machine's start, about 1-2 minutes, included), 10
# minutes a command, a machine kept warm only 30 s after a call, and no fresh machine started with
# under 4 minutes left. So a session gets one long call and, issued at once while the machine is
# still warm, one short one (docs/gpu.md, "The GPU session's checklist"). Every call
#   - builds first (scripts/gpu/build.sh; a no-op when the machine is still warm with build-gpu/),
#   - runs the stages it names in order, each under a timeout cut to what is left of --budget,
#   - writes $OUT/summary.txt as it goes and refreshes $OUT/gpu-check.tar.gz (every log, run
#     record and JSON) after each stage, so a call cut off by the device time still brings back
#     what its finished stages measured.
#
#   scripts/gpu/check.sh [--budget SECONDS] STAGE...
# Stages:
#   tests       the CUDA tests (Cuda.*), each in its own process (a kernel fault leaves the CUDA
#               context unusable, which in one process would fail every test after it), 4 at a time
#   sanitize    the kernel tests under compute-sanitizer memcheck (out-of-bounds and misaligned accesses)
#   races       batchnorm's and pooling's tests under racecheck and synccheck (shared memory, barriers)
#   suite       the rest of the test suite on the GPU build
#   train       dlperf train runs: graphs on/off, pinned/pageable, on-device, tf32, bf16 NHWC vs NCHW, resnet18 at
#               batch 1024 with cuDNN's workspace capped at 256 MB and at 4 GB (the default); then
#               dlperf plan --against them (predicted vs measured step time, peak memory, energy)
#   recipe      Fashion-MNIST to 93% in under a second (scripts/recipe_fmnist93.sh); the recipe profiled in its second
#               epoch, with each run's cuDNN algorithms; then seeds 1, 2 and 3
#   profile     dlperf profile on the GPU, and what profiling costs there, every step recorded and one in 4
#               (scripts/bench_profile_overhead.sh)
#   layouts     dlperf profile of medium (batch 64) and the recipe's model (256) in bf16 NHWC and NCHW, and fp16 NHWC;
#               large at batch 64 in fp32 and bf16, NCHW and NHWC; large (fp32, bf16), medium fp32 and resnet18 bf16 at batch
#               1024; the convolutions whose faster algorithms the workspace limit ruled out; scripts/gpu/fit_plan.py
#   bench       dlperf bench all and allreduce (--quick), which keep the GPU's ceilings, then bench roofline fp32 and bf16,
#               and bench loader (can the host feed the GPU?)
#   vs-torch    scripts/gpu/bench_vs_torch.py with $VS_TORCH_ARGS (default "--batches 64,1024 --repeats 2":
#               the four models in fp32 and bf16, 16 rows; the whole table, 32 rows of 3, takes three calls)
#   lab         dlperf lab with its GPU rows, $LAB_ARGS (default --quick), into lab-gpu/ (--resume: a
#               second call on a warm machine finishes a lab the first cut short); a copy in the archive
# A session's plan (docs/gpu.md): here, scripts/gpu/fetch_debs.sh once; there, with carry [".deb"],
#   check.sh --budget 450 tests sanitize races profile recipe lab train bench  (timeout_s 480), then at once,
#   VS_TORCH_ARGS="--batches 64,256 --repeats 2" check.sh --budget 330 vs-torch layouts
#                                                          (timeout_s 360; the tool cuts it to what is left),
#   and, if status still shows 200 s, VS_TORCH_ARGS="--batches 16 --images 10000 --repeats 2" check.sh --budget 180 vs-torch
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
budget=570
if [ "${1:-}" = --budget ]; then budget=$2; shift 2; fi
usage() { sed -n '2,/^set /{/^#/p}' "$0"; }  # the comment above
[ $# -gt 0 ] || { usage; exit 2; }
start=$SECONDS
work="out-gpu"
rm -rf "$work"
mkdir -p "$work"
out=${OUT:-$work}
export LD_LIBRARY_PATH=$PWD/.deb/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
data=$PWD/.deb/fashion-mnist
bin=build-gpu/dlperf
tests=build-gpu/tests/dlperf_tests

summary=$out/summary.txt  # in $OUT itself, line by line: it comes back even from a call that was killed
: > "$summary"
pack() {  # the archive of everything so far; after each stage, and at the end whatever happened
  if [ "$out" != "$work" ]; then
    cp "$summary" "$work/" 2>/dev/null  # first, so the archive holds the summary up to this stage
    tar czf "$out/gpu-check.tar.gz.part" -C "$work" . && mv "$out/gpu-check.tar.gz.part" "$out/gpu-check.tar.gz"
  fi
}
# Killed (the call's time limit, or a timeout around this script), bash leaves the stage it was
# running behind: its `timeout` started a process group of its own. Stop it first, so no orphaned
# dlperf keeps running (a rehearsal here left one that slowed the next lab 10x), then pack.
trap 'pkill -TERM -P $$ 2>/dev/null; pack' EXIT
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - (SECONDS - start) - 20)); }  # seconds a stage may still take; 20 s kept for packing
# run_for LIMIT CMD...: CMD under min(LIMIT, what is left); says when it was cut short.
run_for() {
  local limit=$1 t
  shift
  t=$(left)
  [ "$t" -lt "$limit" ] && limit=$t
  if [ "$limit" -le 5 ]; then say "  skipped (budget spent): $*"; return 124; fi
  timeout "$limit" "$@"
  local rc=$?
  [ $rc -eq 124 ] && say "  cut short after ${limit}s: $*"
  return $rc
}
ctest_summary() {  # the totals, the tests that failed, how many skipped (on a GPU none should), the first failures
  grep -E "tests passed|^\s+[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted|Exception)" "$1" |
    head -40 | tee -a "$summary"
  local skipped
  skipped=$(grep -cE "^\s+[0-9]+ - .*\(Skipped\)" "$1")
  [ "$skipped" -eq 0 ] || say "  skipped: $skipped, first $(grep -m1 -oE "Cuda\.\w+ \(Skipped\)" "$1")"
  grep -A3 -E ": Failure$" "$1" | head -40 | tee -a "$summary"
}
# conv_algorithms all|over-limit|own RECORD...: each convolution's cuDNN algorithms from GPU run
# records (gpu_step.conv_algorithms), a line a layer; over-limit: only the faster algorithms the
# workspace limit ruled out; own: only what the own small-channel kernels timed against cuDNN
# (--small-conv auto). Records that are missing or unreadable are passed over.
conv_algorithms() {
  python3 - "$@" <<'PY'
import json, sys
mode, files = sys.argv[1], sys.argv[2:]
for f in files:
    try:
        r = json.load(open(f))
    except (OSError, ValueError):
        continue
    c, step = r.get("config", {}), r.get("gpu_step", {})
    run = f"{c.get('model')} b{c.get('batch_size')} {c.get('precision')} {step.get('layout', '?')}"
    for layer, a in (step.get("conv_algorithms") or {}).items():
        if mode == "all":
            print(f"  {f.split('/')[-2]}: {run} {layer}: {a}")
        elif mode == "over-limit" and "faster over" in a:
            print(f"  {run} {layer}: faster over{a.split('faster over', 1)[1]}")
        elif mode == "own" and "own kernels" in a:
            print(f"  {run} {layer}: own kernels{a.split('own kernels', 1)[1]}")
PY
}
gtest_summary() {  # the totals, the failed tests and where their first failures are
  grep -E "^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ test|^\[  FAILED  \] .*\(" "$1" | tee -a "$summary"
  grep -A3 -E ": Failure$" "$1" | head -40 | tee -a "$summary"
}

say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
nvidia-smi > "$work/nvidia-smi.txt" 2>&1
t0=$SECONDS
if ! scripts/gpu/build.sh > "$work/build.log" 2>&1; then
  say "build failed:"; tail -40 "$work/build.log" | tee -a "$summary"; exit 1
fi
say "build: $((SECONDS - t0)) s; $(grep -m1 'CUDA backend' "$work/build.log")"
ldd $bin | grep -E "cudnn|cublas|nccl|not found" | tee -a "$summary"

for stage in "$@"; do
  t0=$SECONDS
  say "== $stage"
  case "$stage" in
    tests)
      # ctest runs each test in a process of its own: a kernel that faults (an illegal address)
      # leaves the CUDA context unusable, and in one gtest process every later test would fail
      # with it, hiding what they would have found. Four at a time: none is timed, and the GPU
      # has room for all four.
      if command -v ctest > /dev/null; then
        run_for 300 ctest --test-dir build-gpu -R '^Cuda\.' -j 4 --timeout 150 --output-on-failure \
          > "$work/tests-cuda.log" 2>&1
        ctest_summary "$work/tests-cuda.log"
      else
        say "  no ctest on the PATH: the CUDA tests in one process"
        run_for 300 $tests --gtest_filter='Cuda.*' > "$work/tests-cuda.log" 2>&1
        gtest_summary "$work/tests-cuda.log"
      fi
      # The CPU engine's bf16 path (run on a Zen 4 on 2026-11-22): on this host's CPU too, if it
      # has AVX512-BF16, else they skip.
      say "  host CPU bf16: $(grep -o -m1 -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
      run_for 120 $tests --gtest_filter='CpuBf16.*:Network.Bf16*:Train.Bf16*:CpuF32Copies.*' > "$work/tests-cpu-bf16.log" 2>&1
      gtest_summary "$work/tests-cpu-bf16.log"
      ;;
    sanitize)
      if command -v compute-sanitizer > /dev/null; then
        run_for 300 compute-sanitizer --tool memcheck --error-exitcode 9 $tests \
          --gtest_filter='Cuda.Batchnorm*:Cuda.*Pooling*:Cuda.*Convolution*:Cuda.TrainingSteps*:Cuda.Snapshots*:Cuda.Gemm*' \
          > "$work/sanitize.log" 2>&1
        say "  compute-sanitizer rc $?"
        grep -E "ERROR SUMMARY|Invalid|out of bounds|misaligned" "$work/sanitize.log" | sort | uniq -c | head -20 |
          tee -a "$summary"
      else
        say "  compute-sanitizer not on PATH"
      fi
      ;;
    races)
      # The own kernels' shared memory and barriers: racecheck (shared-memory hazards between
      # threads) and synccheck (a __syncthreads or a full-mask shuffle that some threads miss).
      for tool in racecheck synccheck; do
        run_for 150 compute-sanitizer --tool $tool --error-exitcode 9 $tests --gtest_filter='Cuda.Batchnorm*:Cuda.*Pooling*:Cuda.SmallConvolution*' \
          > "$work/sanitize-$tool.log" 2>&1
        say "  compute-sanitizer $tool rc $?: $(grep -m1 -E "ERROR SUMMARY|RACECHECK SUMMARY" "$work/sanitize-$tool.log")"
      done
      ;;
    suite)
      run_for 300 $tests --gtest_filter='-Cuda.*:Lab.*' > "$work/tests-rest.log" 2>&1
      gtest_summary "$work/tests-rest.log"
      ;;
    train)
      common=(--model medium --data "$data" --device cuda --epochs 2 --no-progress --runs-dir "$work/runs")
      for variant in "" "--no-graphs" "--pin-memory off" "--data-on-device" "--precision tf32 --data-on-device" \
        "--data-on-device --batch-size 1024" "--precision bf16 --data-on-device" \
        "--precision bf16 --data-on-device --layout nchw" "--precision bf16 --data-on-device --batch-size 1024" \
        "--precision bf16 --data-on-device --batch-size 1024 --layout nchw" "--precision fp16 --data-on-device"; do
        echo "== dlperf train ${variant:-(defaults)}" >> "$work/train.txt"
        batch=(--batch-size 64)  # unless the variant gives its own (dlperf refuses a flag given twice)
        [[ $variant == *--batch-size* ]] && batch=()
        run_for 30 $bin train "${common[@]}" "${batch[@]}" $variant >> "$work/train.txt" 2>&1
        # The second epoch's line and the end, or the error.
        say "  ${variant:-(defaults)}: $(grep -E "^ +2 +[0-9]|error" "$work/train.txt" | tail -1)"
      done
      # cuDNN's workspace cap where dlperf trailed PyTorch: resnet18, fp32, batch 1024, at the old
      # default 256 MB and at the default, TensorFlow's 4 GB (PyTorch allows what is free); the second epoch.
      for ws in 256 4096; do
        echo "== dlperf train resnet18 b1024 --conv-workspace $ws" >> "$work/train.txt"
        run_for 60 $bin train --model resnet18 --data "$data" --device cuda --epochs 2 --batch-size 1024 --train-limit 10240 \
          --data-on-device --conv-workspace "$ws" --no-progress --runs-dir "$work/runs" >> "$work/train.txt" 2>&1
        say "  resnet18 b1024 fp32 --conv-workspace $ws: $(grep -E "^ +2 +[0-9]|error" "$work/train.txt" | tail -1)"
      done
      # The planner's predictions (step time, peak memory, energy from NVML) against these runs.
      $bin plan --against "$work"/runs/*.json > "$work/plan-against.txt" 2>&1
      grep -vE "^skipped" "$work/plan-against.txt" | tail -20 | tee -a "$summary"
      ;;
    recipe)
      run_for 120 env DLPERF=$bin DATA="$data" RUNS="$work/recipe" scripts/recipe_fmnist93.sh > "$work/recipe.txt" 2>&1
      tail -2 "$work/recipe.txt" | tee -a "$summary"
      # The recipe profiled in its second epoch (steps 300-339): where its step goes (the step
      # split's idle share says whether the GPU waits), and the cuDNN algorithms each run chose
      # (on the H100, 2026-11-28, one algorithm cuDNN's search put first took two thirds of it).
      run_for 40 env DLPERF=$bin DATA="$data" RUNS="$work/recipe-profiled" EPOCHS=2 scripts/recipe_fmnist93.sh \
        --profile --profile-skip 300 --profile-steps 40 --profile-out "$work/profile-recipe" > "$work/recipe-profiled.txt" 2>&1
      grep -A12 -E "^Profile of" "$work/recipe-profiled.txt" | grep -vE "^-----" | cut -c1-125 | tee -a "$summary"
      # (with the layouts stage's profiles of the recipe's model, where it ran before this stage)
      conv_algorithms all "$work"/recipe/*.json "$work"/recipe-profiled/*.json "$work"/runs/*fmnist93*.json | tee -a "$summary"
      # Three more seeds: one run meeting 93% in under a second may be luck (the accuracy's
      # margin was 0.29 points on the H100; on the CPU five seeds ran 93.33 to 93.68%).
      missed=0
      grep -q -- "-> meets" "$work/recipe.txt" || missed=1
      for seed in 1 2 3; do
        run_for 30 env DLPERF=$bin DATA="$data" RUNS="$work/recipe-seeds" scripts/recipe_fmnist93.sh --seed $seed \
          > "$work/recipe-seed$seed.txt" 2>&1
        [ $? -eq 0 ] || missed=1
        say "  seed $seed: $(tail -1 "$work/recipe-seed$seed.txt")"
      done
      # Where a run missed, the same seeds with a sixth epoch: on the CPU in bf16 it raised the
      # lowest of five seeds from 93.33% to 93.52% (docs/gpu.md), at about 0.85 s on the H100.
      if [ $missed -eq 1 ]; then
        for seed in 42 1 2 3; do
          run_for 30 env DLPERF=$bin DATA="$data" RUNS="$work/recipe-6-epochs" EPOCHS=6 scripts/recipe_fmnist93.sh --seed $seed \
            > "$work/recipe-6-epochs-seed$seed.txt" 2>&1
          say "  6 epochs, seed $seed: $(tail -1 "$work/recipe-6-epochs-seed$seed.txt")"
        done
      fi
      ;;
    profile)
      run_for 60 $bin profile --model medium --data "$data" --device cuda --batch-size 64 --data-on-device \
        --runs-dir "$work/runs" --out "$work/profile-medium" > "$work/profile.txt" 2>&1
      head -30 "$work/profile.txt" | tee -a "$summary"
      # What one clock stamp (and, for comparison, one event record) costs the GPU inside a graph
      # (bench launch), then the overhead with every step recorded and one in 4 (--profile-every 4)
      # in the same rounds: a profiled step takes ~40 stamps, against a step of a few hundred us.
      run_for 30 $bin bench launch --quick > "$work/bench-launch.txt" 2>&1
      grep -A2 "^Kernel launch on GPU" "$work/bench-launch.txt" | tee -a "$summary"
      run_for 120 env DLPERF=$bin ARGS="--device cuda --data-on-device --data $data" REPEATS=5 EPOCHS=2 LIMIT=60000 EVERY="1 4" \
        scripts/bench_profile_overhead.sh > "$work/profile-overhead.txt" 2>&1
      tail -5 "$work/profile-overhead.txt" | tee -a "$summary"
      ;;
    layouts)
      # Where a step's time goes, layout against layout and precision against precision: the
      # per-op tables that auto's layout rule and the kernels' work are to follow. medium at batch
      # 64 in bf16 both ways and fp16; the recipe's model at its batch of 256 (once more with its
      # conv1 in cuDNN, --small-conv cudnn, to say what the own small-channel kernels save);
      # large at batch 64 in fp32 and bf16, both layouts, where bf16 was 1.16x fp32 against the
      # 1.5x aimed at (H200, 13cc5dd; 2.85x at batch 1024 on the H100); and at batch 1024
      # large, medium fp32 and resnet18 in bf16 (1.07x PyTorch on the H100, the closest row), the
      # one preset whose residual adds and the relus after them run as passes of their own. Last,
      # the default layouts the GPU planner's fit (data/gpu-fit, docs/plan.md) had no table of,
      # or only an older one: its two worst runs were medium in tf32 at 64 and in bf16 at 1024.
      for run in "medium 64 bf16 nhwc" "medium 64 bf16 nchw" "medium 64 fp16 nhwc" \
        "recipes/fmnist93.json 256 bf16 nhwc" "recipes/fmnist93.json 256 bf16 nhwc --small-conv cudnn" \
        "recipes/fmnist93.json 256 bf16 nchw" \
        "large 64 fp32 nchw" "large 64 fp32 nhwc" "large 64 bf16 nhwc" "large 64 bf16 nchw" \
        "large 1024 bf16 nhwc" "large 1024 fp32 nhwc" "medium 1024 fp32 nhwc" "resnet18 1024 bf16 nhwc" \
        "medium 64 tf32 nchw" "medium 1024 bf16 nhwc" "medium 1024 fp32 nchw" "large 1024 fp32 nchw" "resnet18 1024 fp32 nchw"; do
        read -r model batch precision layout extra <<< "$run"
        name="profile-$(basename "$model" .json)-b$batch-$precision-$layout${extra:+-${extra##* }}"
        # shellcheck disable=SC2086  # extra: flags, split on purpose
        run_for 40 $bin profile --model "$model" --data "$data" --device cuda --batch-size "$batch" --precision "$precision" \
          --layout "$layout" --data-on-device --steps 40 --runs-dir "$work/runs" --out "$work/$name" $extra > "$work/$name.txt" 2>&1
        say "  $run: $(grep -m1 -E '^Profile of|error' "$work/$name.txt")"
        grep -A9 -E '^name +phase' "$work/$name.txt" | grep -vE '^(name|-----)' | cut -c1-125 | tee -a "$summary"  # the top 8 ops
      done
      # The GPU planner's model of these kernels (src/plan/gpu_step.h) against these tables, per
      # kind of pass and per profile (docs/plan.md; `fit_plan.py --fit` refits it back home).
      python3 scripts/gpu/fit_plan.py "$work"/profile-*.json 2>&1 | grep -v '^ceilings:' | tee -a "$summary"
      # And the refit these tables give (stamps forked off the step since 2026-11-28: nothing to
      # take off), its constants last: what src/plan/gpu_step.h would hold.
      python3 scripts/gpu/fit_plan.py --fit "$work"/profile-*.json 2>/dev/null | grep -E '^step:|^  double' | tee -a "$summary"
      # Convolutions where cuDNN's timed search found a faster algorithm than the 4 GB
      # workspace limit allows (CudnnConv::algorithms): whether the cap costs speed at batch 1024.
      conv_algorithms over-limit "$work"/runs/*.json | sort -u | tee -a "$summary"
      # The first convolutions (1 input channel) where --small-conv auto timed the own kernels
      # against cuDNN's choice: which ran, and how much each pass took.
      conv_algorithms own "$work"/runs/*.json | sort -u | tee -a "$summary"
      ;;
    bench)
      # all: CPU and GPU (copy, launch, gpu-memory, gemm, conv), and the machine profile with the
      # GPU's measured ceilings, which the rooflines after it read.
      for kind in all allreduce; do
        limit=60; [ "$kind" = all ] && limit=150
        run_for $limit $bin bench "$kind" --quick --json "$work/bench-$kind.json" \
          > "$work/bench-$kind.txt" 2>&1
        say "  bench $kind: rc $?, $(wc -l < "$work/bench-$kind.txt") lines"
      done
      cp runs/machine-profile.json "$work/" 2>/dev/null
      grep -A1 "^GPU ceilings" "$work/bench-all.txt" | tee -a "$summary"
      for p in fp32 bf16; do
        run_for 60 $bin bench roofline --device cuda --precision $p --data "$data" --steps 50 > "$work/roofline-$p.txt" 2>&1
        say "  bench roofline $p: rc $?"
        grep "^Roofline on" "$work/roofline-$p.txt" | tee -a "$summary"
      done
      cp runs/roofline-*-cuda-* "$work/" 2>/dev/null
      # Whether the host can feed the GPU: the loader alone, by workers (0, 2, 4, 8 on 16 cores).
      run_for 30 $bin bench loader --data "$data" --json "$work/bench-loader.json" > "$work/bench-loader.txt" 2>&1
      say "  bench loader: rc $?"
      grep -A10 "^Data loader alone" "$work/bench-loader.txt" | tee -a "$summary"
      ;;
    vs-torch)
      read -r -a vs_args <<< "${VS_TORCH_ARGS---batches 64,1024 --repeats 2}"
      run_for 600 python3 scripts/gpu/bench_vs_torch.py --dlperf $bin --data "$data" --json "$work/vs-torch.json" \
        --markdown "$work/vs-torch.md" "${vs_args[@]}" > "$work/vs-torch.txt" 2>&1
      grep -vE "^(model|-----)" "$work/vs-torch.txt" | tail -40 | tee -a "$summary"
      ;;
    lab)
      read -r -a lab_args <<< "${LAB_ARGS:---quick}"
      # Outside $work, which every call clears, and with --resume: a lab cut short by the call's
      # time limit goes on in the next call (while the machine is warm) from the runs it finished.
      run_for 500 $bin lab --data "$data" --out lab-gpu --resume --no-progress "${lab_args[@]}" > "$work/lab.txt" 2>&1
      say "  lab rc $? (rerun the stage to finish a lab that was cut short)"
      cp -r lab-gpu "$work/lab" 2>/dev/null
      grep -E "^## |^- " "$work/lab/README.md" 2>/dev/null | head -60 | tee -a "$summary"  # sections and observations
      ;;
    *)
      say "unknown stage $stage"; sed -n '/^# Stages:/,/^# A session/{/^# A session/!p}' "$0"
      ;;
  esac
  say "  ($stage: $((SECONDS - t0)) s)"
  pack
done
