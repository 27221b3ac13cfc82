#!/usr/bin/env bash
# One revision's tournament under two versions of the harness, in turn on one GPU (issue 29: whether
# the judge's changes or the kernel's own spread move a score). Each run: a fresh store and caches,
# `harness seed`, `harness tournament --only REVISION` (the task's reference joins the timed phases),
# its leaderboard as JSON and its store under $OUT/ab/. Runs alternate (before, after, before, after)
# while DEADLINE seconds allow, so that each version is seen twice where time permits.
# Usage on the device (after the wheel prelude), with the older tree unpacked here beforehand:
#   git archive dea37c5 | (mkdir -p .scratch/old && tar -x -C .scratch/old)   # carry .scratch/old
#   DEADLINE=300 bash benchmarks/champion_ab.sh .scratch/old [REVISION] [MODE]
# DEVICE=cpu (with SITE pointing at an empty folder, OUT at a scratch one) is a dry run here.
set -uo pipefail
before=$(cd "$1" && pwd); after=$(pwd); revision=${2:-779812}; mode=${3:-benchmark}
deadline=${DEADLINE:-300}; budget=${BUDGET:-1}; device=${DEVICE:-cuda}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2> /dev/null || echo "no nvidia-smi"
mkdir -p "$OUT/ab"
site=${SITE:-/tmp/site}
ab() {  # name dir seconds
  rm -rf "/tmp/ab-$1"; mkdir -p "/tmp/ab-$1"
  ( cd "$2" && export PYTHONPATH="$site:$2" HARNESS_DB="sqlite:////tmp/ab-$1/h.sqlite" HARNESS_CACHE_DIR="/tmp/ab-$1/cache"
    python3 -m harness seed > /dev/null 2>&1
    t0=$SECONDS
    timeout "$3" python3 -m harness tournament --device "$device" --mode "$mode" --budget "$budget" --only "$revision" \
      > "$OUT/ab/$1.log" 2>&1
    echo "== $1 ($2) exit $? in $((SECONDS - t0)) s"
    python3 -m harness leaderboard --format json --out "$OUT/ab/$1.json" > /dev/null 2>&1
    cp "/tmp/ab-$1/h.sqlite" "$OUT/ab/$1.sqlite"
    grep -E "^[a-z]+: $revision " "$OUT/ab/$1.log" | cut -c1-120 )
}
half=$((deadline / 2))
ab before1 "$before" $((half - 5))
ab after1 "$after" $((deadline - SECONDS - 3))
left=$((deadline - SECONDS))
if ((left > half)); then  # time for a second pair
  ab before2 "$before" $((left / 2 - 3))
  ab after2 "$after" $((deadline - SECONDS - 3))
fi
python3 - "$OUT/ab" "$revision" <<'PY'
import json, pathlib, sys
out, revision = pathlib.Path(sys.argv[1]), int(sys.argv[2])
for path in sorted(out.glob("*.json")):
    board = json.loads(path.read_text())
    for entry in board.get("entries", []):
        if entry.get("submission_id") == revision or entry.get("lineage", "").endswith("reference"):
            means = [b.get("mean_ms") and round(b["mean_ms"], 4) for b in entry.get("benchmarks", [])]
            print(f"{path.stem:8} {entry.get('submission_id'):>8} score {entry.get('score_ms')} per shape {means}")
PY
