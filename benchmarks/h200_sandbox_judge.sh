#!/usr/bin/env bash
# Issues 28 and 33 on one lent H200, after the wheel prelude:
#   bash benchmarks/h200_sandbox_judge.sh board     # hostile + honest + reference, leaderboard mode
#   bash benchmarks/h200_sandbox_judge.sh seeds,tests
# board: the task's reference, the hostile set (memoizers, work in the NaN fill, the GPU memory hog,
#   spinners in sessions, terminal writers, the store reader; ALL_HOSTILE=1 adds every timing and output
#   cheat of tests/adversarial/) and the honest corpus (tests/honest/: torch.compile, a CUDA graph, two
#   streams, fresh tensors, odd strides, a negated view, Triton autotune, threads) in `harness tournament`
#   (MODE, default leaderboard; MODES="benchmark leaderboard" runs one of each on the same store, the
#   second reusing the first's phases), ATTEMPTS times (default 2: the second must reuse everything), then
#   the leaderboard. SEEDS=1 adds the seeds; BUDGET, CANDIDATES, BOARD_TIMEOUT (per tournament) and
#   DEADLINE (seconds since the start, for all of them) pick another run. BOARD_DIR=.board keeps the store
#   in the checkout, KEEP_STORE=1 writes it with its caches to $OUT/board.tgz, and RESUME=1 goes on with
#   the store in BOARD_DIR or, failing that, the tarball BOARD_TGZ (default .boardtar/board.tgz, carried):
#   a board too long for one call spans two. CHUNK=N runs one tournament per N revisions (with the
#   reference), so that a cut keeps the finished chunks (a cut group's timed phase is redone whole).
#   DEVICE=cpu tries a part on the CPU.
# isolation: tests/test_isolation.py in this machine's container (cgroup v2 only).
# seeds: benchmarks/tournament_overhead.py, the six seeds in benchmark mode (scores and overhead).
# tests: the CUDA tests of the judge (timing cheats, spinners, hidden work); honest: the honest
#   corpus on CUDA (tests/test_honest.py), on its own limit.
# HARNESS_DEVICE_WINDOWS=auto in the environment runs any part with device windows (opt-in:
#   harness/sandbox/device_memory.py); CUDA_LAUNCH_BLOCKING=1 locates a CUDA error where it happens.
set -uo pipefail
parts=",${1:-board},"
want() { [[ $parts == *",$1,"* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
if want isolation; then
  echo "== tests/test_isolation.py (this container)"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rA tests/test_isolation.py > "$OUT/isolation.log" 2>&1
  echo "exit $?"; grep -E "^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed" "$OUT/isolation.log" | cut -c1-220
fi
if want board; then
  echo "== board: reference + hostile + honest, ${MODES:-${MODE:-leaderboard}} mode, --budget ${BUDGET:-0.5}"
  board=$(realpath -m "${BOARD_DIR:-/tmp/board}")
  export HARNESS_DB="sqlite:///$board/board.sqlite" HARNESS_CACHE_DIR=$board/cache
  # a store carried from an earlier call's KEEP_STORE tarball (board.tgz, named by BOARD_TGZ)
  if [[ -n ${RESUME:-} && ! -f $board/board.sqlite && -f ${BOARD_TGZ:-.boardtar/board.tgz} ]]; then
    mkdir -p "$board" && tar -xzf "${BOARD_TGZ:-.boardtar/board.tgz}" -C "$board"
  fi
  if [[ -n ${RESUME:-} && -f $board/board.sqlite ]]; then
    echo "going on with the store of $board"
  else
    rm -rf "$board" && mkdir -p "$board"
    python3 -m harness register candidates/conv2d_v2_reference.py > /dev/null
    [[ -n ${SEEDS:-} ]] && python3 -m harness seed > /dev/null  # SEEDS=1: the seed revisions too
    hostile="memoizes_by_fingerprint memoizes_by_pointer memoizes_by_shape computes_in_the_fill fills_with_the_answer"
    hostile="$hostile holds_device_memory spins_in_sessions opens_terminals reads_secrets"
    # ALL_HOSTILE=1: every timing and output cheat of tests/adversarial/ too
    [[ -n ${ALL_HOSTILE:-} ]] && hostile="$hostile computes_in_some_fills computes_when_checked patches_timers
      replaces_timing_loop replaces_timing_loop_with_calls skips_the_flush side_stream thread_writes_later
      precomputes_public_seeds reused_allocation searches_memory spins_while_others_run patches_comparison
      computes_in_most_fills computes_in_the_export hides_work_for_a_while"
    default=$(for name in $hostile; do echo "tests/adversarial/$name.py"; done; ls tests/honest/*.py)
    for f in ${CANDIDATES:-$default}; do
      python3 -m harness register "$f" --lineage "$(basename "$f" .py)" > /dev/null || echo "register failed: $f"
    done
  fi
  # MODES="benchmark leaderboard": a benchmark-mode tournament, its leaderboard, then a leaderboard-mode one on
  # the same store (which reuses the test and benchmark phases) and its leaderboard; each tournament's limit is
  # BOARD_TIMEOUT, cut to what is left before DEADLINE (seconds since the script started; default none)
  for mode in ${MODES:-${MODE:-leaderboard}}; do
    for attempt in $(seq "${ATTEMPTS:-2}"); do
      limit=${BOARD_TIMEOUT:-480}
      [[ -n ${DEADLINE:-} ]] && limit=$((DEADLINE - SECONDS < limit ? DEADLINE - SECONDS : limit))
      ((limit > 10)) || { echo "tournament $mode $attempt: no time left before DEADLINE"; break; }
      start=$SECONDS
      # CHUNK=N: one tournament per N revisions in registration order (the reference, the first,
      # in each), so that a cut call keeps every finished chunk's results (a group timed together
      # keeps nothing of a cut timed phase) and RESUME=1 goes on from the first unfinished one
      chunks=("")
      if [[ -n ${CHUNK:-} ]]; then
        mapfile -t chunks < <(python3 -m harness list --format json | python3 -c "
import json, sys
ids = [r['submission_id'] for r in json.load(sys.stdin)]
n = $CHUNK
for k in range(1, len(ids), n):
    print(' '.join(f'--only {i}' for i in [ids[0], *ids[k:k + n]]))")
      fi
      : > "$OUT/board-$mode-$attempt.log"
      for only in "${chunks[@]}"; do
        left=$((limit - (SECONDS - start)))
        ((left > 10)) || { echo "tournament $mode $attempt: no time left for $only"; break; }
        # shellcheck disable=SC2086
        COLUMNS=240 timeout "$left" python3 -m harness tournament --device "${DEVICE:-cuda}" --mode "$mode" $only \
          --budget "${BUDGET:-0.5}" >> "$OUT/board-$mode-$attempt.log" 2>&1
        echo "tournament $mode $attempt ${only:+(${only//--only /})}: exit $? at $((SECONDS - start)) s (limit $limit s)" \
          | tee -a "$OUT/board-walls.txt"
      done
      grep -E "^(test|benchmark|leaderboard) +━" "$OUT/board-$mode-$attempt.log" | tail -3 | cut -c1-100
    done
    COLUMNS=240 python3 -m harness leaderboard --device "${DEVICE:-cuda}" --wide > "$OUT/board-$mode.txt" 2>&1
    grep -v "━" "$OUT/board-$mode.txt" | cut -c1-240
  done
  echo "left in /dev/shm: $(ls /dev/shm | grep -c harness || true); harness cgroups left: $(find /sys/fs/cgroup -maxdepth 3 -name 'harness-*' | wc -l)"
  if [[ -n ${KEEP_STORE:-} ]]; then  # the store and its caches, for a later call's RESUME=1
    tar -czf "$OUT/board.tgz" -C "$board" . && ls -l "$OUT/board.tgz"
    if (($(stat -c %s "$OUT/board.tgz") > 15 * 1024 * 1024)); then  # over what $OUT brings back: the store alone
      tar -czf "$OUT/board.tgz" -C "$board" board.sqlite && ls -l "$OUT/board.tgz"
    fi
  fi
fi
if want seeds; then
  echo "== seeds: benchmark mode, --budget 1, fresh caches (benchmarks/tournament_overhead.py)"
  rm -rf /tmp/seeds-cache
  timeout "${SEEDS_TIMEOUT:-330}" python3 benchmarks/tournament_overhead.py --device cuda --mode benchmark --budget 1 \
    --steps first --cache-dir /tmp/seeds-cache --out /tmp/seeds > "$OUT/seeds.log" 2>&1
  echo "exit $?"; tail -40 "$OUT/seeds.log" | cut -c1-220
  cp /tmp/seeds/report-first.txt "$OUT/seeds-report.txt" 2>/dev/null
  python3 -m harness leaderboard --db sqlite:////tmp/seeds/harness.sqlite --device cuda > "$OUT/seeds-leaderboard.txt" 2>&1
fi
if want honest; then
  # first: at 932b707 the honest corpus's CUDA test came last in `tests` and was cut by its limit
  echo "== the honest corpus on CUDA"
  timeout "${HONEST_TIMEOUT:-300}" python3 -m pytest -q -rA -s -p no:cacheprovider tests/test_honest.py \
    -k "cuda" > "$OUT/cuda-honest.log" 2>&1
  echo "exit $?"
  grep -E "honest on cuda|^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed" "$OUT/cuda-honest.log" | cut -c1-240
fi
if want tests; then
  echo "== CUDA tests of the judge"
  timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -rA -s -p no:cacheprovider tests/test_adversarial.py \
    tests/test_timing.py -k "timing_cheats or spinners or cuda or hidden" > "$OUT/cuda-tests.log" 2>&1
  echo "exit $?"
  grep -E "timing cheat on cuda|^(PASSED|FAILED|SKIPPED|ERROR)|passed|failed" "$OUT/cuda-tests.log" | cut -c1-240
fi
