#!/usr/bin/env bash
# Issue 33 item 4 on one H200: the reference and an honest revision checked and timed beside a
# candidate that holds all but 256 MiB of the free GPU memory from its import on
# (tests/adversarial/holds_device_memory.py); the tournament twice on the same store.
# Usage on the device (after the wheel prelude): bash benchmarks/h200_robust.sh
set -u
mkdir -p "$OUT"
export HARNESS_DB="sqlite:///$OUT/robust.sqlite" HARNESS_CACHE_DIR=/tmp/robust-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null || true
python3 -m harness register candidates/conv2d_v2_reference.py > /dev/null
python3 -m harness register candidates/conv2d_tc_tf32x3.py --lineage tf32x3 > /dev/null
python3 -m harness register tests/adversarial/holds_device_memory.py --lineage hog > /dev/null
for attempt in 1 2; do
  echo "== tournament $attempt"
  COLUMNS=250 timeout 280 python3 -m harness tournament --device cuda --mode benchmark --budget 0.5 > "$OUT/t$attempt.log" 2>&1
  echo "exit $?"
  grep -v "━" "$OUT/t$attempt.log" | tail -25 | cut -c1-400
  echo "left in /dev/shm: $(ls /dev/shm | grep -c harness-io)"
done
