#!/usr/bin/env bash
# Device calls on one lent H200 for issue 5's overhead target (benchmarks/tournament_overhead.py).
# Usage on the device (after the wheel prelude): bash benchmarks/h200_overhead.sh PART
#   PART=first    the seed tournament (benchmark mode, --budget 1) instrumented with fresh caches
#                 (a user's first run on a node: kernel caches, isolation level and GPU name
#                 all unknown), then again with those caches, then the sandbox's transfers on
#                 the GPU (bad candidates with `harness test`, the CUDA adversarial tests)
#   PART=default  (right after `first`, on the same machine) the warm run with the settings'
#                 budget (10 s per shape): the README's `harness tournament` as it is
# The caches live in /tmp/ovh-cache on the device machine, for as long as it stays warm.
set -uo pipefail
part=${1:?part}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
cache=/tmp/ovh-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
overhead() { timeout "$1" python3 benchmarks/tournament_overhead.py --device cuda --mode benchmark --steps first --cache-dir "$cache" "${@:2}" 2>&1 | tail -16; }
case "$part" in
  first)
    rm -rf "$cache"
    overhead 330 --budget 1 --out "$OUT/cold"
    overhead 200 --budget 1 --out "$OUT/warm"
    export HARNESS_DB="sqlite:///$OUT/bad.sqlite" HARNESS_CACHE_DIR="$cache"
    for name in modifies_inputs returns_input_view partial_write caches_output; do
      python3 -m harness register "tests/bad_candidates/$name.py" --lineage "$name" > /dev/null
    done
    python3 -m harness test 1 2 3 4 --device cuda 2>&1 | grep -E "modifies|view|partial|caches|input" | cut -c1-160
    timeout 120 python3 -m pytest -q -rA -p no:cacheprovider tests/test_adversarial.py -k "cuda or stream" 2>&1 \
      | grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" | tail -6
    ;;
  default)
    [ -d "$cache" ] || echo "no warm caches here: this run compiles"
    overhead 420 --out "$OUT/default"
    ;;
esac
