#!/usr/bin/env bash
# Device calls on one lent H200 for issue 5's overhead target (benchmarks/tournament_overhead.py).
# Usage on the device (after the wheel prelude): bash benchmarks/h200_overhead.sh PART
#   PART=cold   the seed tournament instrumented with fresh kernel caches (a user's first run),
#               then again with those caches warm, then GPU checks of the sandbox's transfers
#               (bad candidates on cuda, the CUDA adversarial tests); the caches come back as
#               $OUT/cache.tar for the next call
#   PART=warm   (carry out/cache.tar) the warm run again, with BUDGET seconds per shape
# BUDGET (default 1) is --budget; BUDGET=default runs without --budget (the settings' 10 s).
set -uo pipefail
part=${1:?part}
budget=${BUDGET:-1}
budget_args=(--budget "$budget")
[ "$budget" = default ] && budget_args=()
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
overhead() { timeout "$1" python3 benchmarks/tournament_overhead.py --device cuda --mode benchmark "${budget_args[@]}" --steps first "${@:2}" 2>&1 | tail -16; }
case "$part" in
  cold)
    overhead 330 --out "$OUT/cold"
    overhead 220 --cache-dir "$OUT/cold/cache" --out "$OUT/warm"
    tar -C "$OUT/cold" -cf "$OUT/cache.tar" cache && rm -rf "$OUT/cold/cache"
    export HARNESS_DB="sqlite:///$OUT/bad.sqlite"
    for name in modifies_inputs returns_input_view partial_write caches_output; do
      python3 -m harness register "tests/bad_candidates/$name.py" --lineage "$name" > /dev/null
    done
    python3 -m harness test 1 2 3 4 --device cuda 2>&1 | tail -12
    timeout 300 python3 -m pytest -q -rA -p no:cacheprovider tests/test_adversarial.py -k "cuda or stream" 2>&1 \
      | grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" | tail -12
    ;;
  warm)
    mkdir -p "$OUT/warm-cache" && tar -C "$OUT/warm-cache" -xf out/cache.tar
    overhead 420 --cache-dir "$OUT/warm-cache/cache" --out "$OUT/warm-$budget"
    rm -rf "$OUT/warm-cache"
    ;;
esac
