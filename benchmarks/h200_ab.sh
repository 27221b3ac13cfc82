#!/usr/bin/env bash
# Two versions of the harness side by side on a two-GPU node, in one go: the seed tournament
# (benchmark mode, --budget 1, fresh caches and stores) instrumented by tournament_overhead.py,
# the tree in BEFORE_DIR on GPU 0 and this tree on GPU 1 at the same time.
# Usage on the device (after the wheel prelude, PYTHONPATH without this tree):
#   git archive <rev> | (mkdir -p .before && tar -x -C .before)   # here, before the device call
#   bash benchmarks/h200_ab.sh .before
set -uo pipefail
before=$(cd "$1" && pwd); after=$(pwd)
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
run() {  # name dir gpu
  rm -rf "/tmp/ab-$1"
  (cd "$2" && CUDA_VISIBLE_DEVICES=$3 PYTHONPATH="${PYTHONPATH:-}:$2" timeout 500 python3 benchmarks/tournament_overhead.py \
    --device cuda --mode benchmark --budget 1 --steps first --cache-dir "/tmp/ab-$1/cache" --out "/tmp/ab-$1" \
    > "$OUT/$1.log" 2>&1; echo "$1 exit $?" >> "$OUT/$1.log")
  cp "/tmp/ab-$1/report-first.txt" "$OUT/$1-report.txt" 2>/dev/null
}
run before "$before" 0 & run after "$after" 1 & wait
for name in before after; do echo "== $name ($([ $name = before ] && echo "$before" || echo "$after"))"; tail -22 "$OUT/$name.log"; done
