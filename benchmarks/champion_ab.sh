#!/usr/bin/env bash
# One revision's tournament under two versions of the harness, in turn on one GPU (issue 29: whether
# the judge's changes or the kernel's own spread move a score). Each run: a fresh store and caches,
# `harness seed`, `harness tournament --only REVISION` (the task's reference joins the timed phases),
# its leaderboard as JSON and its store, packed into $OUT/ab.tar.gz (the device tool brings back at
# most 8 files); the summary printed at the end names each run's score, its means per shape and
# the autotuning configs its store records per shape (read with sqlite3: any version's store).
# Runs alternate (before, after, before, after) while DEADLINE seconds allow, so that each version
# is seen twice where time permits.
# Usage on the device (after the wheel prelude), with the older tree unpacked here beforehand:
#   git archive dea37c5 | (mkdir -p .scratch/old && tar -x -C .scratch/old)   # carry .scratch/old
#   DEADLINE=300 bash benchmarks/champion_ab.sh .scratch/old [REVISION] [MODE]
# DEVICE=cpu (with SITE pointing at an empty folder, OUT at a scratch one) is a dry run here.
set -uo pipefail
before=$(cd "$1" && pwd); after=$(pwd); revision=${2:-779812}; mode=${3:-benchmark}
deadline=${DEADLINE:-300}; budget=${BUDGET:-1}; device=${DEVICE:-cuda}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2> /dev/null || echo "no nvidia-smi"
work=$(mktemp -d); mkdir -p "$work/ab"
site=${SITE:-/tmp/site}
ab() {  # name dir seconds
  rm -rf "/tmp/ab-$1"; mkdir -p "/tmp/ab-$1"
  ( cd "$2" && export PYTHONPATH="$site:$2" HARNESS_DB="sqlite:////tmp/ab-$1/h.sqlite" HARNESS_CACHE_DIR="/tmp/ab-$1/cache"
    python3 -m harness seed > /dev/null 2>&1
    t0=$SECONDS
    timeout "$3" python3 -m harness tournament --device "$device" --mode "$mode" --budget "$budget" --only "$revision" \
      > "$work/ab/$1.log" 2>&1
    echo "== $1 ($2) exit $? in $((SECONDS - t0)) s"
    python3 -m harness leaderboard --format json --out "$work/ab/$1.json" > /dev/null 2>&1
    cp "/tmp/ab-$1/h.sqlite" "$work/ab/$1.sqlite"
    grep -E "^[a-z]+: $revision " "$work/ab/$1.log" | cut -c1-120 )
}
half=$((deadline / 2))
ab before1 "$before" $((half - 5))
ab after1 "$after" $((deadline - SECONDS - 3))
left=$((deadline - SECONDS))
if ((left > half)); then  # time for a second pair
  ab before2 "$before" $((left / 2 - 3))
  ab after2 "$after" $((deadline - SECONDS - 3))
fi
tar -czf "$OUT/ab.tar.gz" -C "$work" ab
python3 - "$work/ab" "$revision" <<'PY'
import json, pathlib, sqlite3, sys
out, revision = pathlib.Path(sys.argv[1]), int(sys.argv[2])
for path in sorted(out.glob("*.json")):
    board = json.loads(path.read_text())
    for entry in board.get("entries", []):
        if entry.get("submission_id") == revision or entry.get("lineage", "").endswith("reference"):
            means = [b.get("mean_ms") and round(b["mean_ms"], 4) for b in entry.get("benchmarks", [])]
            print(f"{path.stem:8} {entry.get('submission_id'):>8} score {entry.get('score_ms')} per shape {means}")
for path in sorted(out.glob("*.sqlite")):
    try:
        rows = sqlite3.connect(path).execute(
            "SELECT r.mode, s.set_name, s.\"index\", s.mean_ms, s.\"check\" FROM shape_results s"
            " JOIN runs r ON r.id = s.run_id JOIN revisions v ON v.id = r.revision_id"
            " WHERE v.id = ? AND s.set_name IN ('benchmarks', 'smoke') ORDER BY r.mode, s.\"index\"",
            (revision,),
        ).fetchall()
    except sqlite3.Error as exc:  # an older store's schema
        print(f"{path.stem:8} no configs read: {exc}")
        continue
    for mode, set_name, index, mean, check in rows:  # the timed phases: the configs they ran
        configs = [c.get("config") for c in (json.loads(check or "{}").get("configs") or [])]
        if mode != "test":
            print(f"{path.stem:8} {mode:11} {set_name}[{index}] {mean and round(mean, 4)} ms configs {configs}"[:300])
PY
