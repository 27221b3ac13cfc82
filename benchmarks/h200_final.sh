#!/usr/bin/env bash
# The last device call of the session: a second tournament with nothing new to do (timed), an
# evolution experiment from seed 99237 with builtin:mutate, the champion's benchmark-shape verdict
# with the reference-noise diagnosis, and the CUDA timing tests. Store: out/harness.sqlite (carried).
set -uo pipefail
mkdir -p "$OUT"
cp out/harness.sqlite "$OUT/harness.sqlite"
export HARNESS_DB="sqlite:///$OUT/harness.sqlite" PYTHONUNBUFFERED=1
h() { python3 -m harness "$@"; }
echo "== second tournament, nothing new"; t0=$(date +%s%N); python3 -m harness tournament --device cuda --mode leaderboard > "$OUT/second.log" 2>&1; echo "second tournament wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"; grep -E "^(test|benchmark|leaderboard):.*revisions" "$OUT/second.log"
echo "== evolve"; timeout 300 python3 -m harness evolve --from 99237 --generations 3 --proposer builtin:mutate --seed 7 --budget 1 --device cuda > "$OUT/evolve.log" 2>&1; tail -15 "$OUT/evolve.log"
h experiments show 1 > "$OUT/experiment.txt" 2>&1; tail -25 "$OUT/experiment.txt"
echo "== champion on the benchmark shapes"; timeout 120 python3 -m harness bench 779812 --device cuda --force --budget 1 > "$OUT/champion.log" 2>&1; grep -iE "off the reference|wrong_answer|mismatch" "$OUT/champion.log" | head -5
echo "== CUDA tests"; timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_timing.py -k cuda 2>&1 | tail -3
h leaderboard --format markdown --out "$OUT/leaderboard.md"; h leaderboard --format html --out "$OUT/leaderboard.html"
