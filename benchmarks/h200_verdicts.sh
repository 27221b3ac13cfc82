#!/usr/bin/env bash
# Issue 14 on one lent H200: every revision `harness seed` registers, through the leaderboard-mode
# tournament (test, benchmark, leaderboard recheck), then the leaderboard under each verdict.
# Usage on the device (after the wheel prelude): bash benchmarks/h200_verdicts.sh
# The store is $OUT/harness.sqlite (comes back; carry it as out/harness.sqlite to go on with it).
set -uo pipefail
mkdir -p "$OUT"
[ -f out/harness.sqlite ] && cp out/harness.sqlite "$OUT/harness.sqlite"
export HARNESS_DB="sqlite:///$OUT/harness.sqlite" PYTHONUNBUFFERED=1
h() { python3 -m harness "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cudnn', torch.backends.cudnn.version())"
h seed > /dev/null
t0=$(date +%s)
h tournament --device cuda --mode leaderboard --budget "${BUDGET:-1}" > "$OUT/tournament.log" 2>&1
echo "tournament exit $? in $(( $(date +%s) - t0 )) s"
grep -E "^(test|benchmark|leaderboard):" "$OUT/tournament.log"
h leaderboard --format markdown --out "$OUT/leaderboard.md"
h leaderboard --format json --out "$OUT/leaderboard.json"
h leaderboard --format html --out "$OUT/leaderboard.html"
h leaderboard --verdict gpumode --format markdown --out "$OUT/leaderboard-gpumode.md"
h history --rank > "$OUT/history.txt" 2>&1
COLUMNS=250 h leaderboard
