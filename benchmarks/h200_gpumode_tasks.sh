#!/usr/bin/env bash
# Issue 18 on one lent H200: problems of GPU MODE's pmpp_v2 set added as tasks (`harness task add`),
# each with its reference solution and a wrong one from the same directory, through the
# leaderboard-mode tournament; then each task's leaderboard.
#
# GPU MODE's files may not be shipped with the harness: put them in the ignored folder external/,
#   mkdir -p external/reference-kernels && git -C <a clone of gpu-mode/reference-kernels> archive HEAD \
#     problems/pmpp_v2 | tar -x -C external/reference-kernels
# and carry `external` with the call. Usage on the device (after the wheel prelude):
#   TASKS="prefixsum matmul histogram grayscale" bash benchmarks/h200_gpumode_tasks.sh
# The store is $OUT/harness.sqlite; every leaderboard is in $OUT/leaderboards.md.
set -uo pipefail
mkdir -p "$OUT"
export HARNESS_DB="sqlite:///$OUT/harness.sqlite" HARNESS_CACHE_DIR="${HARNESS_CACHE_DIR:-/tmp/harness-cache}" PYTHONUNBUFFERED=1
h() { python3 -m harness "$@"; }
SET=external/reference-kernels/problems/pmpp_v2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for task in ${TASKS:-prefixsum matmul histogram grayscale}; do
  problem="$SET/${task}_py"
  h task add "$problem" || continue
  for file in "$problem"/solutions/correct/*.py "$problem"/solutions/wrong/*.py; do
    kind=$(basename "$(dirname "$file")")
    h register "$file" --task "$task" --lineage "${task}_${kind}_$(basename "$file" .py)"
  done
  t0=$(date +%s)
  h tournament --task "$task" --device cuda --mode leaderboard --budget "${BUDGET:-1}" > "$OUT/tournament-$task.log" 2>&1
  echo "$task: tournament exit $? in $(( $(date +%s) - t0 )) s"
  { echo; h leaderboard --task "$task" --format markdown; } >> "$OUT/leaderboards.md" 2>&1
  COLUMNS=250 h leaderboard --task "$task"
done
h task list
