#!/usr/bin/env python3
"""Issue 19's measurement: the same evolution experiment with `--parallel 1` and `--parallel K`,
a proposer that takes SLEEP seconds per reply (builtin:mutate behind a sleep:
benchmarks/sleepy_mutate.py), and both wall times (the target: K=4 in at most 40 % of K=1's).

Both runs start from the same store: the seeds registered and the lineage's revisions (and the
task's reference) already evaluated, so neither pays for the starting pool; each run gets its own
copy. Each prints the experiment's story to a log beside the store; the table at the end gives
both wall times, their ratio, and each run's best child against its parent, from the interleaved
run that timed them together.

    python benchmarks/evolve_parallel.py --device cuda --workdir out/evolve-parallel
    python benchmarks/evolve_parallel.py --device cpu --generations 3 --sleep 2 --budget 0.2   # a quick try

The serial run alone takes about 12 x (20 s + an evaluation): on one H200 (2026-12-01) about
48 s a generation from seed 001 before (`--from 99238`, no autotuner; 581.6 s in all) and about
80 s over the whole lineage (its autotuned revision's children time in about 89 s): longer than
one call of the device tool (10 minutes). So a run can be cut and
continued: with `--stop-after S` the experiment is interrupted (SIGINT, as Ctrl-C) once this
call has spent S seconds on it, and the next call with the same --workdir (carried) continues it
with `harness evolve --resume`; its wall time is the sum of its segments (each segment's restart
included, which counts against it). results.json keeps what each call measured and the table
shows all:

    python benchmarks/evolve_parallel.py --device cuda --workdir .scratch/evolve --from 99238 --only 1 --stop-after 530
    (again, until it reports `parallel 1: finished`), then the same with --only 4
    (the H200 figures of 2026-12-01, docs/h200/evolve-parallel/results-50c7b9b.json, were taken so)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def store_env(store: Path) -> dict[str, str]:
    """This process's environment with the store and this checkout first on the path."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "HARNESS_DB": f"sqlite:///{store}", "PYTHONPATH": path}


def harness(store: Path, *args: object, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "harness", *(str(arg) for arg in args)]
    env = store_env(store)
    if log is None:
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=ROOT)
    with log.open("w") as out:
        return subprocess.run(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, check=False, cwd=ROOT
        )


def prepare(workdir: Path, lineage: str, start_id: int | None, device: str, budget: float) -> Path:
    """A store with the seeds registered and the starting revisions evaluated: the lineage's, or
    the revision `start_id` alone."""
    store = workdir / "start.sqlite"
    if store.exists():
        return store
    seeded = harness(store, "seed")
    if seeded.returncode != 0:
        sys.exit(f"harness seed failed:\n{seeded.stdout}{seeded.stderr}")
    db = sqlite3.connect(store)
    ids = [
        row[0]
        for row in db.execute(
            "select r.id from revisions r join lineages l on l.id = r.lineage_id where l.name = ?", (lineage,)
        )
    ]
    db.close()
    if start_id is not None:
        ids = [start_id] if start_id in ids else []
    if not ids:
        sys.exit(
            f"no lineage {lineage!r} among the seeds" + (f" with submission {start_id}" if start_id else "")
        )
    only = [arg for revision_id in ids for arg in ("--only", revision_id)]
    done = harness(
        store,
        "tournament",
        "--device",
        device,
        "--mode",
        "benchmark",
        "--budget",
        budget,
        *only,
        log=workdir / "start.log",
    )
    if done.returncode != 0:
        sys.exit(f"the starting tournament failed: see {workdir / 'start.log'}")
    return store


def evolve(store: Path, arguments: list[object], log: Path, stop_after: float | None) -> tuple[int, float]:
    """`harness evolve ARGUMENTS` on `store`, interrupted with SIGINT after `stop_after` seconds;
    (exit code, seconds it ran)."""
    command = [sys.executable, "-m", "harness", "evolve", *(str(argument) for argument in arguments)]
    started = time.perf_counter()
    with log.open("a") as out:
        process = subprocess.Popen(
            command, env=store_env(store), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
        try:
            code = process.wait(timeout=stop_after)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            code = process.wait()
    return code, time.perf_counter() - started


def run(workdir: Path, start: Path, parallel: int, args: argparse.Namespace, earlier: dict | None) -> dict:
    """The experiment with `--parallel parallel`, or the rest of it when `earlier` (what results.json
    keeps of this run) says it was cut by --stop-after."""
    store = workdir / f"parallel-{parallel}.sqlite"
    log = workdir / f"parallel-{parallel}.log"
    resuming = earlier is not None and earlier.get("status", [None])[0] == "interrupted" and store.exists()
    if resuming:
        arguments: list[object] = ["--resume", 1]
    else:
        store.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        source, target = sqlite3.connect(start), sqlite3.connect(store)
        source.backup(target)  # WAL included
        source.close()
        target.close()
        proposer = shlex.join(
            [sys.executable, str(ROOT / "benchmarks" / "sleepy_mutate.py"), str(args.sleep)]
        )
        arguments = [
            *(["--from", args.start] if args.start is not None else ["--lineage", args.lineage]),
            "--generations",
            args.generations,
            "--proposer",
            proposer,
            "--seed",
            args.seed,
            "--budget",
            args.budget,
            "--device",
            args.device,
            "--parallel",
            parallel,
        ]
    code, spent_s = evolve(store, arguments, log, args.stop_after)
    segments = (
        [*(earlier or {}).get("segments_s", []), round(spent_s, 1)] if resuming else [round(spent_s, 1)]
    )
    wall_s = round(sum(segments), 1)
    if code == 130:
        print(f"parallel {parallel}: interrupted after {spent_s:.0f} s; run again to continue it")
        return {
            "parallel": parallel,
            "wall_s": wall_s,
            "segments_s": segments,
            "status": ["interrupted", None],
        }
    if code != 0:
        sys.exit(f"evolve --parallel {parallel} failed (exit {code}): see {log}")
    print(f"parallel {parallel}: finished, {wall_s} s in {len(segments)} segment(s)")
    story = harness(store, "experiments", "show", "1")
    (workdir / f"parallel-{parallel}-story.txt").write_text(story.stdout)
    harness(
        store, "experiments", "show", "1", "--format", "html", "--out", workdir / f"parallel-{parallel}.html"
    )
    db = sqlite3.connect(store)
    status = db.execute("select status, reason from experiments where id = 1").fetchone()
    best = db.execute(
        "select generation, child_id, parent_id, score_ms, parent_score_ms, vs_parent, compared_in "
        "from experiment_steps where experiment_id = 1 and status = 'pass' and score_ms is not null "
        "order by score_ms limit 1"
    ).fetchone()
    counts = dict(
        db.execute("select status, count(*) from experiment_steps where experiment_id = 1 group by status")
    )
    db.close()
    return {
        "parallel": parallel,
        "wall_s": wall_s,
        "segments_s": segments,
        "status": status,
        "steps": counts,
        "best": best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("out/evolve-parallel"))
    parser.add_argument("--lineage", default="conv2d_parallel_oh")
    parser.add_argument(
        "--from",
        dest="start",
        type=int,
        help="start from this revision of the lineage alone (harness evolve --from) instead of all of it",
    )
    parser.add_argument("--generations", type=int, default=12)
    parser.add_argument("--sleep", type=float, default=20.0, help="seconds per proposer reply")
    parser.add_argument("--parallel", type=int, default=4, help="K of the parallel run (the other is 1)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", type=int, help="run only this --parallel value (1 or K) in this call")
    parser.add_argument(
        "--stop-after",
        type=float,
        help="interrupt the experiment after S seconds; the next call continues it",
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    start = prepare(args.workdir, args.lineage, args.start, args.device, args.budget)
    record = args.workdir / "results.json"
    recorded = (
        {result["parallel"]: result for result in json.loads(record.read_text())} if record.exists() else {}
    )
    for parallel in [args.only] if args.only else [1, args.parallel]:
        recorded[parallel] = run(args.workdir, start, parallel, args, recorded.get(parallel))
        record.write_text(
            json.dumps(sorted(recorded.values(), key=lambda result: result["parallel"]), indent=2)
        )
    results = sorted(recorded.values(), key=lambda result: result["parallel"])
    print(f"{'parallel':>8} {'wall s':>8}  status / steps / best child against its parent (same run)")
    for result in results:
        steps = result.get("steps", "the rest on the next call")
        print(f"{result['parallel']:>8} {result['wall_s']:>8}  {result['status'][0]}; {steps}")
        if result.get("best"):
            generation, child, parent, score, parent_score, verdict, batch = result["best"]
            against = (
                f"parent {parent} {parent_score:.4g} ms"
                if parent_score is not None
                else f"parent {parent}: no shared run"
            )
            print(
                f"{'':>18}best: generation {generation}, submission {child} {score:.4g} ms vs {against}: {verdict} (run {batch})"
            )
    finished = [result for result in results if result["status"][0] != "interrupted"]
    if len(finished) > 1 and finished[0]["parallel"] == 1:
        serial, parallel = finished[0], finished[-1]
        print(
            f"ratio: {parallel['wall_s'] / serial['wall_s']:.1%} of the serial wall time (target: at most 40 %)"
        )


if __name__ == "__main__":
    main()
