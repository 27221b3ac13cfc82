#!/usr/bin/env bash
# Issue 15 on one lent H200: the seed tournament instrumented (scores and harness overhead, fresh
# caches), the CUDA timing cheats, and the output file replaced by a link or a FIFO on CUDA.
# Usage on the device (after the wheel prelude): bash benchmarks/h200_judge.sh [PARTS]
# PARTS: a comma-separated choice of overhead, tests, io (default: all three, in that order).
set -uo pipefail
parts=",${1:-overhead,tests,io},"
want() { [[ $parts == *",$1,"* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cache=/tmp/judge-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
if want overhead; then
  echo "== seed tournament, benchmark mode, --budget 1, fresh caches (benchmarks/tournament_overhead.py)"
  rm -rf "$cache"
  timeout 320 python3 benchmarks/tournament_overhead.py --device cuda --mode benchmark --budget 1 --steps first \
    --cache-dir "$cache" --out "$OUT/overhead" > "$OUT/overhead.log" 2>&1
  echo "exit $?"; tail -32 "$OUT/overhead.log"
fi
if want tests; then
  echo "== CUDA timing cheats"
  timeout 200 python3 -m pytest -q -rA -s -p no:cacheprovider tests/test_adversarial.py tests/test_timing.py \
    -k "timing_cheats or spinners or cuda or hidden" > "$OUT/cuda-tests.log" 2>&1
  grep -E "timing cheat on cuda|spinner|^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed" "$OUT/cuda-tests.log" | cut -c1-260
fi
if want io; then
  echo "== the output file replaced by a link or a FIFO, on CUDA"
  export HARNESS_DB="sqlite:///$OUT/io.sqlite" HARNESS_CACHE_DIR="$cache"
  for name in links_output fifo_output; do python3 -m harness register "tests/adversarial/$name.py" --lineage "$name" > /dev/null; done
  COLUMNS=200 timeout 60 python3 -m harness test 1 2 --device cuda 2>&1 | tail -12
  ls /dev/shm | grep -c harness-io || true
fi
