#!/usr/bin/env bash
# One device call on the H200: the seed tournament with the reference, checks of the seeds and of a
# kernel with an out-of-bounds write, the leaderboard, and the timing cross-checks.
# Usage on the device machine (after the wheel prelude): bash benchmarks/h200_verify.sh PHASE
#   PHASE=check      harness test on the `tests` shapes for every revision and an OOB kernel
#   PHASE=benchmark  an OOB kernel registered, harness tournament --mode benchmark (its test phase
#                    checks every revision on the `tests` shapes), leaderboard as markdown/json/html
#   PHASE=leaderboard harness tournament --mode leaderboard (recheck), repeat_score.py
# The store is $OUT/harness.sqlite (comes back with the call; carry it into the next call as
# out/harness.sqlite).
set -uo pipefail
phase=${1:-check}
budget=${BUDGET:-2}
mkdir -p "$OUT"
if [ -f out/harness.sqlite ]; then cp out/harness.sqlite "$OUT/harness.sqlite"; fi
export HARNESS_DB="sqlite:///$OUT/harness.sqlite"
export PYTHONUNBUFFERED=1
h() { python3 -m harness "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
h seed
case "$phase" in
  check)
    h register tests/bad_candidates/oob_write.py --lineage oob_write --author tests
    ids=$(h list --task conv2d_v2 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1}' | tr '\n' ' ')
    echo "ids: $ids"
    # shellcheck disable=SC2086
    h test $ids --device cuda 2>&1 | tee "$OUT/test.log"
    ;;
  benchmark)
    h register tests/bad_candidates/oob_write.py --lineage oob_write --author tests
    h tournament --device cuda --mode benchmark --budget "$budget" 2>&1 | tee "$OUT/tournament.log"
    h leaderboard --format markdown --out "$OUT/leaderboard.md"
    h leaderboard --format json --out "$OUT/leaderboard.json"
    h leaderboard --format html --out "$OUT/leaderboard.html"
    cat "$OUT/leaderboard.md"
    ;;
  leaderboard)
    h tournament --device cuda --mode leaderboard --budget "$budget" 2>&1 | tee "$OUT/tournament-lb.log"
    h leaderboard --format markdown --out "$OUT/leaderboard.md"
    h leaderboard --format json --out "$OUT/leaderboard.json"
    h leaderboard --format html --out "$OUT/leaderboard.html"
    python3 benchmarks/repeat_score.py --device cuda --budget "$budget" 2>&1 | tee "$OUT/repeat_score.log"
    cat "$OUT/leaderboard.md"
    ;;
esac
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
