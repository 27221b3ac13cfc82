#!/usr/bin/env bash
# Device calls on the lent nvidia-h200-x2 (two H200s): the seed tournament on 1 GPU against 2 GPUs
# (benchmarks/gpu_scaling.py), then the overhead figures, the no-op second run, a --force run that
# must reuse the compile caches, and the CUDA-only adversarial and timing tests.
# Usage on the device (after the wheel prelude): bash benchmarks/h200_x2.sh PART
#   PART=scale1   warm the caches (a test-mode tournament on a scratch store), then 1 GPU
#   PART=scale2   (warm-up again if the machine is fresh), then 2 GPUs, then the no-op second
#                 run, a --force test phase on 2 GPUs against the warm caches, the CUDA tests
# Figures go to $OUT (carrying `out` brings earlier figures along, not needed).
set -uo pipefail
part=${1:?part}
budget=${BUDGET:-1}
mkdir -p "$OUT" out
export PYTHONUNBUFFERED=1
h() { python3 -m harness "$@"; }
cp out/*.jsonl out/*.sqlite "$OUT/" 2>/dev/null
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv
seeded="$OUT/seeded.sqlite"
if [ ! -f "$seeded" ]; then HARNESS_DB="sqlite:///$seeded" h seed > /dev/null; fi
warm() {
  if [ -d "${HOME:-/root}/.cache/harness" ] && [ -f "$OUT/.warm" ]; then echo "caches warm"; return; fi
  cp "$seeded" "$OUT/warmup.sqlite"
  t0=$(date +%s)
  HARNESS_DB="sqlite:///$OUT/warmup.sqlite" h tournament --device cuda --gpus all --mode test > "$OUT/warmup.log" 2>&1
  echo "warm-up (test mode, all GPUs): exit $? in $(( $(date +%s) - t0 )) s"; touch "$OUT/.warm"
}
profile() { HARNESS_DB="sqlite:///$OUT/scaling-$1gpu.sqlite" python3 benchmarks/tournament_profile.py | tee "$OUT/profile-$1gpu.txt"; }
case "$part" in
  scale1) warm; python3 benchmarks/gpu_scaling.py --seeded "$seeded" --gpus 1 --budget "$budget" --record "$OUT/scaling.jsonl"; profile 1 ;;
  scale2)
    warm; python3 benchmarks/gpu_scaling.py --seeded "$seeded" --gpus 2 --budget "$budget" --record "$OUT/scaling.jsonl"; profile 2
    export HARNESS_DB="sqlite:///$OUT/scaling-2gpu.sqlite"
    for i in 1 2 3; do t0=$(date +%s%N); h tournament --device cuda > "$OUT/second.log" 2>&1; echo "second run $i, nothing new: exit $? in $(( ($(date +%s%N) - t0) / 1000000 )) ms"; done
    grep -E "revisions, " "$OUT/second.log"
    python3 -m cProfile -o "$OUT/noop.prof" -m harness tournament --device cuda > /dev/null 2>&1
    python3 -c "import pstats,sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(18)" "$OUT/noop.prof" | tail -30
    if [ "${FORCE:-1}" = 1 ]; then
      cache="${HOME:-/root}/.cache/harness"; before=$(find "$cache" -type f 2>/dev/null | wc -l)
      t0=$(date +%s); h tournament --device cuda --gpus all --mode test --force > "$OUT/force.log" 2>&1; echo "--force test phase: exit $? in $(( $(date +%s) - t0 )) s"
      echo "cache files under $cache: $before before --force, $(find "$cache" -type f 2>/dev/null | wc -l) after"
      python3 benchmarks/compile_reuse.py "$OUT/warmup.sqlite" "$OUT/scaling-2gpu.sqlite" 2>&1 | tail -20
    fi
    timeout 300 python3 -m pytest -q -rA -p no:cacheprovider tests/test_adversarial.py -k "cuda or stream" 2>&1 | grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" | tail -12
    h leaderboard --format markdown --out "$OUT/leaderboard-x2.md"; head -30 "$OUT/leaderboard-x2.md"
    ;;
esac
