#!/usr/bin/env python3
"""The cold tournament of issue 17: the six seed revisions in benchmark mode on a fresh store with
empty kernel caches, with the checks side by side (settings.check_parallelism, automatic) and then
with serial phases (HARNESS_CHECK_PARALLELISM=1), each run in a fresh process as a user would.

    python benchmarks/cold_tournament.py --device cuda --out "$OUT/cold"           # the H200 run
    python benchmarks/cold_tournament.py --device cpu --mode test --out /tmp/cold  # a dry run
    python benchmarks/cold_tournament.py --device cuda --gpus 2 --runs side-by-side --out "$OUT/x2"

Per run it prints the wall time of `harness tournament` and where it went, from what the store
recorded (each evaluation's `started_at`/`ended_at`, startup, import, per-shape call and timing
figures):
- building: wall time while any child was starting or importing its candidate (a union of spans:
  side-by-side imports count once);
- checking: wall time while any test-phase evaluation was past its import (a union of spans), plus
  the benchmark phase's checked calls;
- timing: the benchmark phase's warm-up and timed calls (they run one at a time);
- harness overhead: the rest of the wall time (the CLI's start, claims and writes, the parent's
  reference cases and judging where they do not overlap a child's work, stops, the report).
And the GPU's exclusive work (issue 31): the timing (warm-up, which holds the autotuning, and the
timed calls) and every checked call's seconds (the first call's compilation included: an upper
bound), summed; the wall as a multiple of it (the target: at most 1.15x), the rest being what
could overlap it (starts, imports, the parent's work, the store).
Then each revision's score in both runs and `scoring.compare` of the two (`same within noise`
expected for every one). Writes OUT/<run>/harness.sqlite, OUT/<run>/cache, OUT/<run>/stdout.txt
and OUT/report.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.scoring import compare

SEED_REVISIONS = [2, 99237, 99238, 512024, 512025, 779808]
RUNS = {"side-by-side": "0", "serial": "1"}  # HARNESS_CHECK_PARALLELISM


def union_s(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def run_once(label: str, parallelism: str, args: argparse.Namespace, out: Path) -> dict:
    where = out / label
    where.mkdir(parents=True, exist_ok=True)
    store = where / "harness.sqlite"
    store.unlink(missing_ok=True)
    env = {
        **os.environ,
        "HARNESS_DB": f"sqlite:///{store}",
        "HARNESS_CACHE_DIR": str(where / "cache"),
        "HARNESS_CHECK_PARALLELISM": parallelism,
    }
    harness = [sys.executable, "-m", "harness"]
    seeded = subprocess.run([*harness, "seed"], env=env, capture_output=True, text=True, check=False)
    if seeded.returncode != 0:
        sys.exit(f"harness seed failed: {seeded.stderr.strip()}")
    command = [
        *harness,
        "tournament",
        "--device",
        args.device,
        "--mode",
        args.mode,
        *(["--budget", str(args.budget)] if args.budget is not None else []),
    ]
    for revision in args.only:
        command += ["--only", str(revision)]
    if args.gpus:
        command += ["--gpus", args.gpus]
    started = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall_s = time.time() - started
    (where / "stdout.txt").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    if done.returncode != 0:
        sys.exit(f"{label}: harness tournament exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return {"label": label, "wall_s": wall_s, **measure(store)}


def measure(store: Path) -> dict:
    connection = sqlite3.connect(store)
    runs = connection.execute(
        "select id, revision_id, mode, status, score_ms, details, compile_s from runs"
    ).fetchall()
    shapes: dict[int, list[tuple[float, float, list]]] = {}
    for run_id, call_s, warmup_s, times in connection.execute(
        "select run_id, call_s, json_extract(\"check\", '$.timing.compile_s'), times_ms from shape_results"
    ):
        shapes.setdefault(run_id, []).append((call_s or 0.0, warmup_s or 0.0, json.loads(times or "[]")))
    connection.close()
    building, checking = [], []
    benchmark_checks_s = timing_s = test_calls_s = 0.0
    scores, times_per_revision = {}, {}
    for run_id, revision_id, mode, status, score_ms, details_json, import_s in runs:
        details = json.loads(details_json or "{}")
        started, ended = details.get("started_at"), details.get("ended_at")
        if started is not None and ended is not None:
            # the child's start and import (nothing for a child kept from the test phase)
            ready = min(ended, started + (details.get("startup_s") or 0.0) + (import_s or 0.0))
            building.append((started, ready))
            if mode == "test":
                checking.append((ready, ended))
        for call_s, warmup_s, times in shapes.get(run_id, []):
            if mode == "benchmark":
                benchmark_checks_s += call_s
                timing_s += warmup_s + sum(times) / 1e3
            else:
                test_calls_s += call_s
        if mode == "benchmark":
            scores[revision_id] = (status, score_ms)
            times_per_revision[revision_id] = [times for _, _, times in shapes.get(run_id, [])]
    building_s, checking_s = union_s(building), union_s(checking) + benchmark_checks_s
    return {
        "building_s": building_s,
        "checking_s": checking_s,
        "timing_s": timing_s,
        # issue 31: what must have the GPU to itself (timing's warm-up, which holds the first
        # call's autotuning, and timed calls; every checked call, its first one's compilation and
        # autotuning included: an upper bound), summed, whatever overlapped
        "exclusive_s": timing_s + benchmark_checks_s + test_calls_s,
        "scores": scores,
        "times": times_per_revision,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--mode", default="benchmark")
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds of timed calls per shape (default: the settings', GPU MODE's 10 s; the figures "
        "before 2026-12-06 took 1)",
    )
    parser.add_argument(
        "--only", type=int, nargs="*", default=SEED_REVISIONS, help="[] for every seed revision"
    )
    parser.add_argument("--gpus", help="passed to `harness tournament --gpus` (one worker per GPU)")
    parser.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--out", type=Path, default=Path("cold-tournament"))
    args = parser.parse_args()
    results = [run_once(label, RUNS[label], args, args.out) for label in args.runs]
    lines = []
    for result in results:
        accounted = result["building_s"] + result["checking_s"] + result["timing_s"]
        overhead = max(0.0, result["wall_s"] - accounted)
        lines.append(
            f"{result['label']:>12}: wall {result['wall_s']:7.1f} s | building {result['building_s']:6.1f} s, "
            f"checking {result['checking_s']:6.1f} s, timing {result['timing_s']:6.1f} s | harness overhead "
            f"{overhead:6.1f} s ({100 * overhead / result['wall_s']:.1f} %)"
        )
        exclusive = result["exclusive_s"]
        lines.append(
            f"{'':>12}  the GPU's exclusive work {exclusive:7.1f} s (timing, and every checked call), "
            f"everything else {max(0.0, result['wall_s'] - exclusive):7.1f} s: wall = "
            f"{result['wall_s'] / exclusive if exclusive else float('nan'):.2f}x the exclusive work "
            "(issue 31's target: at most 1.15x)"
        )
    if len(results) == 2 and args.mode != "test":
        first, second = results
        lines.append(f"\nscores (ms): {first['label']} vs {second['label']}")
        for revision in args.only:
            a, b = first["scores"].get(revision), second["scores"].get(revision)
            verdict = ""
            if a and b and a[1] and b[1]:
                verdict = compare(first["times"][revision], second["times"][revision]).verdict
            lines.append(f"  {revision:>7}: {a} vs {b}  {verdict}")
    report = "\n".join(lines)
    print(report)
    (args.out / "report.txt").write_text(report + "\n")


if __name__ == "__main__":
    main()
