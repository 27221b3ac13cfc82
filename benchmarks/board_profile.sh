#!/usr/bin/env bash
# Where a board's wall time goes: a small board (the reference, six cheats, four honest revisions)
# in one benchmark-mode tournament under py-spy, every process sampled (the parent and each
# sandboxed child), idle threads included, as folded stacks in $OUT/prof.txt, and the
# tournament's log with seconds since its start in $OUT/prof-board.log. On a lent GPU (after the
# wheel prelude, with py-spy's wheel in .whl: `pip download py-spy --no-deps -d .whl`):
#   PROF_S=220 bash benchmarks/board_profile.sh
# DEVICE=cpu tries it here (py-spy on the PATH). 2026-12-06 on an H100 it showed 77 s and 68 s of
# the benchmark phase in two cheats' warm-ups (docs/h100/board-profile-5da7ee5).
set -uo pipefail
export PYTHONUNBUFFERED=1 COLUMNS=200
mkdir -p "$OUT"
pyspy=$(command -v py-spy || echo /tmp/site/bin/py-spy)
board=/tmp/pboard; rm -rf $board; mkdir -p $board
export HARNESS_DB="sqlite:///$board/b.sqlite" HARNESS_CACHE_DIR=$board/cache
python3 -m harness register candidates/conv2d_v2_reference.py >/dev/null
for f in memoizes_by_fingerprint memoizes_by_pointer computes_in_the_fill fills_with_the_answer \
  precomputes_public_seeds side_stream; do
  python3 -m harness register "tests/adversarial/$f.py" --lineage "$f" >/dev/null
done
for f in compiled cuda_graph two_streams fresh_tensor; do
  python3 -m harness register "tests/honest/$f.py" --lineage "$f" >/dev/null
done
start=$SECONDS
"$pyspy" record --subprocesses --nonblocking --idle --threads -r 20 -f raw -o "$OUT/prof.txt" -- \
  timeout -s TERM "${PROF_S:-230}" python3 -m harness tournament --device "${DEVICE:-cuda}" --mode benchmark \
  --budget 0.1 2>&1 | while IFS= read -r line; do printf '%4d %s\n' $((SECONDS - start)) "$line"; done \
  | grep -v "━" > "$OUT/prof-board.log"
echo "board: $((SECONDS - start)) s"
tail -25 "$OUT/prof-board.log" | cut -c1-180
