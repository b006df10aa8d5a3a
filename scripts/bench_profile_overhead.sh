#!/usr/bin/env bash
# What profiling costs: trains MODEL at batch BATCH (medium at 64 unless told; EPOCHS epochs of LIMIT
# images, 1 x 12,800 unless told) with and without recording the last epoch (dlperf train --profile
# --profile-skip <the earlier epochs' steps> --profile-steps 0), alternating, REPEATS times each,
# and prints the median images/s of that last epoch of both and their ratio. EVERY lists how
# densely to record: "1" (the default) records every step; "1 4" also times a recording of one
# step in 4 (--profile-every 4), in the same rounds. On a GPU take two epochs, so the timed one
# has no first eager step or graph capture in it (the profiled run's capture of its second,
# event-recording graph is a cost of profiling and stays in):
#   DLPERF=build-gpu/dlperf ARGS="--device cuda --data-on-device" EPOCHS=2 LIMIT=60000 EVERY="1 4" scripts/bench_profile_overhead.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${REPEATS:-5}
dlperf=${DLPERF:-build/dlperf}
read -r -a extra <<< "${ARGS:-}"
read -r -a everies <<< "${EVERY:-1}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rate() {  # images/s of the last epoch's row (epoch, time s, img/s, ...)
  "$dlperf" train --model "${MODEL:-medium}" --batch-size "$batch" --epochs "$epochs" --train-limit "${LIMIT:-12800}" --test-limit 100 \
    --runs-dir "$tmp" --no-progress "${extra[@]}" "$@" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9.]+$/ {r = $3} END {print r}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
epochs=${EPOCHS:-1}
batch=${BATCH:-64}
skip=$(((epochs - 1) * (${LIMIT:-12800} / batch)))  # the steps of the epochs before the last (training drops a partial batch)
off=()
declare -A on
for ((i = 0; i < repeats; i++)); do
  off+=("$(rate)")
  for n in "${everies[@]}"; do
    on[$n]+="$(rate --profile --profile-skip "$skip" --profile-steps 0 --profile-every "$n" --profile-out "$tmp/p") "
  done
done
m_off=$(printf '%s\n' "${off[@]}" | median)
echo "profiling off: ${off[*]} img/s (median $m_off)"
for n in "${everies[@]}"; do
  # shellcheck disable=SC2086  # the rates, one word each
  m_on=$(printf '%s\n' ${on[$n]} | median)
  how=$([ "$n" = 1 ] && echo "every step" || echo "one step in $n")
  echo "profiling on ($how): ${on[$n]}img/s (median $m_on)"
  awk -v a="$m_off" -v b="$m_on" -v how="$how" 'BEGIN {printf "step time with profiling on (%s): %+.1f%% (ratio %.3f)\n", how, 100 * (a / b - 1), a / b}'
done
