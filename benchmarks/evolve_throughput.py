#!/usr/bin/env python3
"""Issue 31's evolution measurement: children judged per GPU-hour, with the child shortcuts
(`HARNESS_CHILD_SHORTCUTS`, on by default: a child's caches start as its parent's, its checks stop
at its first failing shape, its timing of a shape stops where it is clearly slower than its
parent) against the same experiment without them, and the verdicts of both side by side.

Both runs start from one store in which the seeds are registered and the starting revision (and
the task's reference) already judged, with a copy each of that store and of its kernel caches;
each runs `harness evolve --from START --proposer P --parallel 1` with the same seed, so that
their children are the same files as long as their verdicts agree (builtin:mutate, the default,
is seeded per step, and benchmarks/scripted_proposer.py's children are scripted by generation;
the parent chosen depends on the verdicts). A step's judging seconds are its wall
(started_at to finished_at in the store) less the proposer's own seconds (elapsed_s): the work
of the GPU and of the harness for that child, which is all a GPU-hour buys; children per GPU-hour
is 3600 times the children judged over the sum of those seconds.

    python benchmarks/evolve_throughput.py --device cuda --workdir .scratch/throughput --from 512023
    python benchmarks/evolve_throughput.py --device cpu --generations 3 --budget 0.2   # a quick try
    python benchmarks/evolve_throughput.py --device cpu --generations 6 --budget 1 \
        --start-file candidates/conv2d_v2_reference.py \
        --proposer "python benchmarks/scripted_proposer.py wrong slow same"   # what each shortcut saves

On the H200 a generation took about 60 s of judging before (2026-12-02); twelve of them, twice,
are longer than one call of the device tool (10 minutes), so a run can be cut and continued as in
benchmarks/evolve_parallel.py: with `--stop-after S` the experiment is interrupted (SIGINT) once
this call has spent S seconds on it, and the next call with the same --workdir (carried) goes on
with `harness evolve --resume` (a step cut in the middle is asked again: its judging seconds are
the finished attempt's). results.json keeps what each call measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evolve_parallel import ROOT, store_env  # a sibling script

RUNS = {"full": "0", "shortcuts": "1"}  # run name -> HARNESS_CHILD_SHORTCUTS
NO_CHILD = ("proposer_failed", "proposer_timeout", "edit_failed", "unchanged", "duplicate")


def environment(store: Path, cache: Path, shortcuts: str) -> dict[str, str]:
    return {**store_env(store), "HARNESS_CACHE_DIR": str(cache), "HARNESS_CHILD_SHORTCUTS": shortcuts}


def harness(env: dict[str, str], *args: object, log: Path) -> int:
    with log.open("a") as out:
        return subprocess.run(
            [sys.executable, "-m", "harness", *(str(arg) for arg in args)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            cwd=ROOT,
        ).returncode


def prepare(
    workdir: Path, start: int | None, lineage: str, device: str, budget: float | None, start_file: Path | None
) -> int:
    """The starting store (workdir/start.sqlite) and caches (workdir/start-cache), made once: the
    seeds registered (and `start_file`, as a lineage of its own: the start), the starting
    revision (default: the last of `lineage`) judged in benchmark mode beside the reference.
    Returns the starting revision's id."""
    store, cache, log = workdir / "start.sqlite", workdir / "start-cache", workdir / "start.log"
    marker = workdir / "start.json"
    if marker.exists():
        return json.loads(marker.read_text())["start"]
    store.unlink(missing_ok=True)
    env = environment(store, cache, "1")
    if harness(env, "seed", log=log) != 0:
        sys.exit(f"harness seed failed: see {log}")
    if start_file is not None:
        lineage = f"{start_file.stem}_start"
        if harness(env, "register", start_file, "--lineage", lineage, log=log) != 0:
            sys.exit(f"harness register {start_file} failed: see {log}")
    db = sqlite3.connect(store)
    ids = [
        row[0]
        for row in db.execute(
            "select r.id from revisions r join lineages l on l.id = r.lineage_id where l.name = ? order by r.number",
            (lineage,),
        )
    ]
    db.close()
    if start is None and not ids:
        sys.exit(f"no lineage {lineage!r} among the seeds")
    start = ids[-1] if start is None else start
    budget_args = ["--budget", budget] if budget is not None else []
    tournament = ["tournament", "--device", device, "--mode", "benchmark", "--only", start, *budget_args]
    if harness(env, *tournament, log=log) != 0:
        sys.exit(f"the starting tournament failed: see {log}")
    marker.write_text(json.dumps({"start": start}))
    return start


def seconds(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def steps(store: Path) -> list[dict]:
    """Every step of experiment 1: its generation, outcome, verdict and judging seconds."""
    db = sqlite3.connect(store)
    rows = db.execute(
        "select generation, child_id, status, vs_parent, score_ms, parent_score_ms, started_at, finished_at, "
        "elapsed_s from experiment_steps where experiment_id = 1 order by generation"
    ).fetchall()
    db.close()
    found = []
    for generation, child, status, verdict, score, parent_score, started, finished, proposer_s in rows:
        begun, ended = seconds(started), seconds(finished)
        judging = None
        if begun is not None and ended is not None and status not in NO_CHILD:
            judging = (ended - begun).total_seconds() - (proposer_s or 0.0)
        found.append(
            {
                "generation": generation,
                "child": child,
                "status": status,
                "vs_parent": verdict,
                "score_ms": score,
                "parent_score_ms": parent_score,
                "judging_s": judging,
            }
        )
    return found


def run(name: str, workdir: Path, start: int, args: argparse.Namespace, earlier: dict | None) -> dict:
    """The experiment with HARNESS_CHILD_SHORTCUTS=RUNS[name], or the rest of it (`earlier` says it
    was cut by --stop-after)."""
    store, cache, log = workdir / f"{name}.sqlite", workdir / f"{name}-cache", workdir / f"{name}.log"
    resuming = earlier is not None and earlier.get("state") == "interrupted" and store.exists()
    if resuming:
        arguments: list[object] = ["--resume", 1]
    else:
        store.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
        if (workdir / "start-cache").exists():
            shutil.copytree(workdir / "start-cache", cache, symlinks=True)
        source, target = sqlite3.connect(workdir / "start.sqlite"), sqlite3.connect(store)
        source.backup(target)
        source.close()
        target.close()
        arguments = [
            "--from",
            start,
            "--generations",
            args.generations,
            "--proposer",
            args.proposer,
            "--seed",
            args.seed,
            "--device",
            args.device,
            "--parallel",
            1,
            *(["--budget", args.budget] if args.budget is not None else []),
        ]
    env = environment(store, cache, RUNS[name])
    command = [sys.executable, "-m", "harness", "evolve", *(str(argument) for argument in arguments)]
    with log.open("a") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            code = process.wait(timeout=args.stop_after)
        except subprocess.TimeoutExpired:
            process.send_signal(2)  # SIGINT, as Ctrl-C
            code = process.wait()
    if code not in (0, 130):
        sys.exit(f"{name}: harness evolve failed (exit {code}): see {log}")
    state = "interrupted" if code == 130 else "finished"
    print(f"{name}: {state}")
    return {"name": name, "state": state, "steps": steps(store)}


def rate(result: dict) -> tuple[int, float, float | None]:
    """(children judged, their judging seconds, children per GPU-hour)."""
    judged = [step["judging_s"] for step in result["steps"] if step["judging_s"] is not None]
    total = sum(judged)
    return len(judged), total, (3600 * len(judged) / total if total > 0 else None)


def report(results: dict[str, dict]) -> None:
    def cell(step: dict | None) -> str:
        if step is None:
            return "-"
        judging = f"{step['judging_s']:.1f} s" if step["judging_s"] is not None else "no child"
        verdict = f", {step['vs_parent']}" if step["vs_parent"] else ""
        return f"{step['status']}{verdict} ({judging})"

    full = {step["generation"]: step for step in results.get("full", {}).get("steps", [])}
    fast = {step["generation"]: step for step in results.get("shortcuts", {}).get("steps", [])}
    print(f"{'gen':>4}  {'full (shortcuts off)':<44} {'shortcuts':<44} same verdict")
    agree = compared = 0
    for generation in sorted(set(full) | set(fast)):
        one, other = full.get(generation), fast.get(generation)
        same = ""
        if one is not None and other is not None:
            compared += 1
            equal = (one["status"], one["vs_parent"]) == (other["status"], other["vs_parent"])
            agree += equal
            same = "yes" if equal else "NO"
        print(f"{generation:>4}  {cell(one):<44} {cell(other):<44} {same}")
    for name, result in results.items():
        count, total, per_hour = rate(result)
        figure = f"{per_hour:.0f}" if per_hour is not None else "-"
        print(
            f"{name}: {result['state']}, {count} children judged in {total:.1f} s: {figure} children per GPU-hour"
        )
    rates = {name: rate(result)[2] for name, result in results.items()}
    if rates.get("full") and rates.get("shortcuts"):
        print(
            f"shortcuts / full: {rates['shortcuts'] / rates['full']:.2f}x children per GPU-hour (target: 3x)"
        )
    if compared:
        print(f"verdicts (status and against the parent) the same in {agree} of {compared} generations")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=Path("out/evolve-throughput"))
    parser.add_argument("--lineage", default="conv2d_parallel_oh", help="start from its last revision")
    parser.add_argument("--from", dest="start", type=int, help="start from this revision instead")
    parser.add_argument(
        "--start-file",
        type=Path,
        help="register this file as a lineage of its own and start from it (a child of the reference "
        "lineage would become the task's reference)",
    )
    parser.add_argument("--generations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--proposer",
        default="builtin:mutate",
        help='or a command, e.g. "python benchmarks/scripted_proposer.py wrong slow same" (children '
        "wrong, clearly slower and as fast as their parent, in turn)",
    )
    parser.add_argument("--budget", type=float, help="seconds of timed calls per shape (default: GPU MODE's)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", choices=sorted(RUNS), help="run only this one in this call")
    parser.add_argument("--stop-after", type=float, help="interrupt after S seconds; the next call goes on")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    start = prepare(args.workdir, args.start, args.lineage, args.device, args.budget, args.start_file)
    record = args.workdir / "results.json"
    results = json.loads(record.read_text()) if record.exists() else {}
    for name in [args.only] if args.only else list(RUNS):
        if results.get(name, {}).get("state") == "finished":
            continue
        results[name] = run(name, args.workdir, start, args, results.get(name))
        record.write_text(json.dumps(results, indent=2))
        if results[name]["state"] == "interrupted":
            break  # the next call goes on with it
    report(results)


if __name__ == "__main__":
    main()
