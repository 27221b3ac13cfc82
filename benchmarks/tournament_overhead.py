#!/usr/bin/env python3
"""Where the seed tournament's wall time goes, measured on the parent's own clock, then a second
run with nothing new to do, then a `--force` run that must compile nothing again.

    python benchmarks/tournament_overhead.py --device cuda --mode leaderboard --budget 1 --out "$OUT/overhead"
    python benchmarks/tournament_overhead.py --device cpu --mode test        # a dry run on a CPU

`--steps first,noop` then `--steps force` (with --db, --cache-dir and --first-ledger pointing at
the first call's files) splits it in two commands; `--cache-autotuning` runs everything with
HARNESS_CACHE_AUTOTUNING=1.

Steps (each tournament in a fresh process, as `harness tournament` would run):

1. a fresh SQLite store in OUT (and, unless --cache-dir, a fresh kernel cache in OUT/cache),
   `harness seed`, then the tournament, instrumented: every wait of the parent's main thread is
   put in one bucket, so that the buckets add up to the wall time:
   - compile + warm-up: the candidates' imports on the critical path of each group's start (the
     group waits for its slowest child), the warm-up calls before timing, and, where a shape was
     timed, the part of its first (checked) call above the median timed call (JIT compilation,
     autotuning, cuDNN's algorithm search);
   - checked calls: the candidates' calls whose outputs the parent checked (the child's clock),
     less the part counted as compilation above; in the test phase this still includes the
     first call's compilation (no timed call to tell it apart);
   - timed calls: the sum of the timed calls (events on a GPU);
   - harness overhead: everything else, itemized: process starts (early spawns included),
     evaluator setup (isolation probe, child files), reference cases, check I/O (inputs made,
     copied and compared in the child, the output exported, pipes), judging (read back and
     compare), the timing loop around the timed calls (inputs per call, L2 flush,
     synchronization, seeds), the other children stopped and resumed around each timing, the
     inputs copied for the child, the timed output checks, the calibration of the harness's own cost
     per timed shape, child stops, and the rest of the phase
     (store claims and writes, the parent's own torch import, progress);
   and outside the phases: startup (imports, environment probe, store) and the report (with the
   short gaps between phases);
2. the same command again with nothing new to do, timed end to end (`python -m harness`), three
   times, and an anatomy of its start (interpreter, torch import, CUDA probe, environment);
3. the same command with `--force`, instrumented like the first: per revision the import
   (compile_s), the warm-up and the first calls, first run against forced run, and the kernel
   cache's files before and after (no new file: nothing compiled twice).

Writes OUT/report-STEPS.txt (what it prints), OUT/ledger-*.json (the buckets, per evaluation
the startup, import, first calls and warm-up; .log: the command's output, .stderr: its progress),
the store OUT/harness.sqlite and the kernel cache OUT/cache.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPILE = "compile + warm-up"
CHECKED = "checked calls"
TIMED = "timed calls"
MAIN = (COMPILE, CHECKED, TIMED)
CALIBRATION = "overhead: calibration (the harness's no-op child per timed shape)"


# --- one instrumented tournament, in this process -------------------------------------------


class Ledger:
    """Seconds per (part, bucket) on the main thread. A wrapped call's own seconds (less those of
    wrapped calls inside it) go to the buckets its accounting function names."""

    def __init__(self) -> None:
        self.part = "startup"
        self.parts: list[str] = ["startup"]
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.walls: dict[str, float] = {}
        self.stack: list[list[float]] = []
        self.mark = time.perf_counter()
        self.ready_at: dict[int, float] = {}  # id(child) -> monotonic time its wait_ready returned
        self.first_calls: dict[tuple[int, str], float] = {}  # (id(child), where) -> first check seconds
        self.evaluations: list[dict] = []
        self.calibrating = False  # inside Calibrator.harness_ms: its child's timing is harness cost

    def add(self, bucket: str, seconds: float) -> None:
        self.seconds[self.part][bucket] += seconds

    def enter(self, part: str) -> None:
        now = time.perf_counter()
        self.walls[self.part] = self.walls.get(self.part, 0.0) + now - self.mark
        self.mark = now
        self.part = part
        if part not in self.parts:
            self.parts.append(part)

    def close(self) -> None:
        self.enter("done")

    def instrument(self, owner: object, name: str, account) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return original(*args, **kwargs)
            inner = [0.0]
            self.stack.append(inner)
            started = time.perf_counter()
            result = None
            try:
                result = original(*args, **kwargs)
                return result
            finally:
                wall = time.perf_counter() - started
                self.stack.pop()
                if self.stack:
                    self.stack[-1][0] += wall
                account(wall - inner[0], args, kwargs, result)

        setattr(owner, name, wrapper)


def _where(phase: str) -> str:
    """ "call on benchmarks[2] with autotune config 1" -> "benchmarks[2]"."""
    words = phase.split()
    return words[2] if len(words) > 2 else phase


def install(ledger: Ledger) -> None:
    from harness.report import progress
    from harness.sandbox import calibration, evaluation, pool, supervisor

    def bucket(name: str):
        return lambda own, args, kwargs, result: ledger.add(name, own)

    def on_check(own, args, kwargs, reply) -> None:
        seconds = (getattr(reply, "seconds", None) or 0.0) if reply is not None else 0.0
        seconds = min(seconds, own)
        ledger.add(CHECKED, seconds)
        ledger.add("overhead: check I/O (inputs in the child, output export, pipes)", own - seconds)
        ledger.first_calls.setdefault((id(args[0]), _where(kwargs.get("phase", ""))), seconds)

    def on_time(own, args, kwargs, timed_shape) -> None:
        reply = getattr(timed_shape, "reply", None)  # ChildProcess.time returns a TimedShape
        if ledger.calibrating:  # the harness's own no-op child: all of it is harness cost
            ledger.add(CALIBRATION, own)
            return
        if reply is None:
            ledger.add("overhead: timing loop", own)
            return
        warmup = min(reply.compile_s or 0.0, own)
        timed = min(sum(reply.times_ms) / 1e3, own - warmup)
        ledger.add(COMPILE, warmup)
        ledger.add(TIMED, timed)
        ledger.add("overhead: timing loop (inputs per call, L2 flush, sync, seeds)", own - warmup - timed)
        # the first check call's part above the median timed call was compilation/autotuning
        if reply.times_ms:
            median_s = statistics.median(reply.times_ms) / 1e3
            # once per shape: a later pass (Evaluator.time_again) times the same shape again
            first = ledger.first_calls.pop((id(args[0]), ledger.current_where), None)
            if first is not None and first > median_s:
                ledger.add(CHECKED, -(first - median_s))
                ledger.add(COMPILE, first - median_s)

    def on_start(own, args, kwargs, result) -> None:
        evaluators = args[0]
        ready = [(ledger.ready_at.get(id(e.child)), e) for e in evaluators]
        ready = [(at, e) for at, e in ready if at is not None]
        compile_s = 0.0
        if ready:
            _, last = max(ready, key=lambda item: item[0])
            compile_s = last.evaluation.compile_s or 0.0
            if last.evaluation.compile_s is None and last.evaluation.status == "timeout":
                # the import ran out of time: the candidate's own import phase
                compile_s = (
                    ledger.ready_at[id(last.child)] - last.child.started - (last.child.startup_s or 0.0)
                )
        for evaluator in evaluators:
            ledger.ready_at.pop(id(evaluator.child), None)
        compile_s = max(0.0, min(compile_s, own))
        ledger.add(COMPILE, compile_s)
        ledger.add("overhead: process starts (spawn, torch import, CUDA context)", own - compile_s)

    def on_finish(own, args, kwargs, evaluation) -> None:
        ledger.add("overhead: child stops", own)
        child = id(args[0].child)
        for key in [key for key in ledger.first_calls if key[0] == child]:
            del ledger.first_calls[key]
        if evaluation is not None:
            ledger.evaluations.append(
                {
                    "part": ledger.part,
                    "filename": evaluation.filename,
                    "code_sha256": evaluation.code_sha256,
                    "status": evaluation.status,
                    "startup_s": evaluation.startup_s,
                    "compile_s": evaluation.compile_s,
                    "first_call_s": [s.call_s for s in evaluation.shapes],
                    "warmup_s": [s.compile_s for s in evaluation.shapes],
                    "wall_s": evaluation.wall_s,
                }
            )

    original_wait_ready = supervisor.ChildProcess.wait_ready

    def wait_ready(child):
        try:
            return original_wait_ready(child)
        finally:
            ledger.ready_at[id(child)] = time.monotonic()

    supervisor.ChildProcess.wait_ready = wait_ready

    def locate(name: str) -> None:
        """The shape an Evaluator method works on (its first pass, or a later one) becomes the
        ledger's `current_where`."""
        original = getattr(evaluation.Evaluator, name)

        def located(evaluator, index):
            ledger.current_where = f"{evaluator.evaluation.shape_set}[{index}]"
            return original(evaluator, index)

        setattr(evaluation.Evaluator, name, located)

    locate("run_shape")
    locate("time_again")
    ledger.current_where = ""

    ledger.instrument(supervisor.ChildProcess, "check", on_check)
    ledger.instrument(supervisor.ChildProcess, "time", on_time)
    ledger.instrument(evaluation, "start_evaluators", on_start)
    ledger.instrument(evaluation.Evaluator, "finish", on_finish)
    ledger.instrument(
        evaluation.Evaluator, "__init__", bucket("overhead: evaluator setup (isolation probe, files)")
    )
    ledger.instrument(
        pool.CHILD_POOL, "start_early", bucket("overhead: process starts (spawn, torch import, CUDA context)")
    )
    ledger.instrument(evaluation.checking, "reference_case", bucket("overhead: reference cases"))
    ledger.instrument(evaluation, "_judge", bucket("overhead: judging (read back, compare)"))
    ledger.instrument(evaluation.Evaluator, "_timed_output_problem", bucket("overhead: timed output checks"))
    # inside the two above: the parent's inputs and reference per timed call (shared by the
    # revisions timed together: harness.sandbox.timed_cases), and the exact answers in float64
    ledger.instrument(
        evaluation.Evaluator,
        "_timed_case_for",
        bucket("overhead: timed calls' inputs and references (parent)"),
    )
    ledger.instrument(evaluation.checking.ReferenceCase, "exact", bucket("overhead: exact answers (float64)"))
    stops = bucket("overhead: the other children stopped and resumed around a timing")
    ledger.instrument(supervisor.ChildProcess, "stop", stops)
    ledger.instrument(supervisor.ChildProcess, "resume", stops)
    ledger.instrument(supervisor.ChildProcess, "copy_inputs", bucket("overhead: inputs copied for the child"))
    original_harness_ms = calibration.Calibrator.harness_ms

    def harness_ms(calibrator, *args, **kwargs):
        ledger.calibrating = True
        try:
            return original_harness_ms(calibrator, *args, **kwargs)
        finally:
            ledger.calibrating = False

    calibration.Calibrator.harness_ms = harness_ms
    ledger.instrument(calibration.Calibrator, "harness_ms", bucket(CALIBRATION))

    def phase(method: str, enter):
        original = getattr(progress.RichTournamentProgress, method)

        def wrapper(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            enter(*args)
            return result

        setattr(progress.RichTournamentProgress, method, wrapper)

    phase("start_phase", lambda name, *rest: ledger.enter(name))
    phase("end_phase", lambda *rest: ledger.enter("report"))  # with the short gaps between phases


def instrumented_run(args: argparse.Namespace) -> None:
    """One `harness tournament` in this process, with the ledger; writes it as JSON."""
    started = time.perf_counter()
    ledger = Ledger()
    install(ledger)
    from harness import cli

    argv = ["harness", "tournament", *json.loads(args.run_args)]
    sys.argv = argv
    log = Path(args.ledger).with_suffix(".log")
    code = 0
    with open(log, "w", encoding="utf-8") as out, redirect_stdout(out):
        try:
            cli.main()
        except SystemExit as exc:
            # 1: some revision failed (a result, everything else done and stored); other codes end it
            code = exc.code or 0
            if code not in (0, 1):
                raise
    ledger.close()
    total = time.perf_counter() - started
    Path(args.ledger).write_text(
        json.dumps(
            {
                "argv": argv,
                "exit_code": code,
                "wall_s": total,
                "parts": ledger.parts,
                "walls": ledger.walls,
                "seconds": {part: dict(b) for part, b in ledger.seconds.items()},
                "evaluations": ledger.evaluations,
            },
            indent=1,
        )
    )


# --- the driver ----------------------------------------------------------------------------


class Report:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()


def harness_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env["HARNESS_DB"] = args.db
    env["HARNESS_CACHE_DIR"] = str(args.cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    if args.cache_autotuning:
        env["HARNESS_CACHE_AUTOTUNING"] = "1"
    return env


def tournament_args(args: argparse.Namespace, *extra: str) -> list[str]:
    values = ["--task", args.task, "--device", args.device, "--mode", args.mode]
    if args.budget is not None:
        values += ["--budget", str(args.budget)]
    return values + list(extra)


def run_instrumented(args: argparse.Namespace, name: str, *extra: str) -> dict:
    ledger_path = args.out / f"ledger-{name}.json"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_run",
        json.dumps(tournament_args(args, *extra)),
        "--_ledger",
        str(ledger_path),
    ]
    done = subprocess.run(command, env=harness_env(args), stderr=subprocess.PIPE, text=True, check=False)
    (args.out / f"ledger-{name}.stderr").write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(
            f"the {name} tournament failed ({done.returncode}); see {args.out}/ledger-{name}.stderr"
        )
    ledger = json.loads(ledger_path.read_text())
    if ledger.get("exit_code"):
        print(
            f"the {name} tournament: some revision failed (exit {ledger['exit_code']}); see {ledger_path.with_suffix('.log')}"
        )
    return ledger


def split_table(report: Report, ledger: dict) -> None:
    """One row per part: wall, the three kinds of work, overhead; then the overhead's items."""
    header = f"{'part':<13}{'wall s':>8}{'compile+warm-up':>17}{'checked calls':>15}{'timed calls':>13}"
    report(header + f"{'overhead':>10}{'overhead %':>12}")
    totals = defaultdict(float)
    items: dict[str, dict[str, float]] = {}
    parts = [part for part in ledger["parts"] if part in ledger["walls"] and part != "report"]
    for part in parts + (["report"] if "report" in ledger["walls"] else []):
        wall = ledger["walls"][part]
        buckets = ledger["seconds"].get(part, {})
        work = [buckets.get(name, 0.0) for name in MAIN]
        overhead = wall - sum(work)
        totals["wall"] += wall
        for name, value in zip(MAIN, work):
            totals[name] += value
        items[part] = {k: v for k, v in buckets.items() if k not in MAIN}
        named = sum(items[part].values())
        items[part]["rest of the part (store, claims, progress, imports)"] = overhead - named
        percent = overhead / wall * 100 if wall else 0.0
        row = f"{part:<13}{wall:>8.1f}{work[0]:>17.1f}{work[1]:>15.1f}{work[2]:>13.1f}"
        report(row + f"{overhead:>10.1f}{percent:>11.1f}%")
    overhead = totals["wall"] - sum(totals[name] for name in MAIN)
    row = f"{'total':<13}{totals['wall']:>8.1f}{totals[COMPILE]:>17.1f}{totals[CHECKED]:>15.1f}"
    report(row + f"{totals[TIMED]:>13.1f}{overhead:>10.1f}{overhead / totals['wall'] * 100:>11.1f}%")
    report()
    report("harness overhead, itemized (seconds):")
    for part, buckets in items.items():
        shown = {k: v for k, v in sorted(buckets.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.05}
        if shown:
            report(
                f"  {part}: " + "; ".join(f"{k.removeprefix('overhead: ')} {v:.1f}" for k, v in shown.items())
            )


def cache_files(cache_dir: Path) -> dict[str, tuple[int, int]]:
    """(files, bytes) per kind of kernel cache."""
    found = {}
    for kind in ("triton", "torch_extensions", "inductor"):
        files = [p for p in Path(cache_dir, kind).rglob("*") if p.is_file()]
        found[kind] = (len(files), sum(p.stat().st_size for p in files))
    return found


def cache_listing(cache_dir: Path) -> set[str]:
    return {str(p.relative_to(cache_dir)) for p in cache_dir.rglob("*") if p.is_file()}


def noop_anatomy(args: argparse.Namespace) -> str:
    """The start of a no-op tournament, step by step, in a fresh interpreter."""
    code = f"""
import time
t = time.perf_counter()
marks = []
def mark(name):
    global t
    now = time.perf_counter(); marks.append((name, now - t)); t = now
import torch; mark("import torch")
import triton; mark("import triton")
available = torch.cuda.is_available(); mark("torch.cuda.is_available()")
from harness import environment; mark("import harness.environment")
environment.probe_environment({args.device!r})
how = ("; GPU name kept" if environment._names_from_cache else "; GPU name from torch") if {args.device!r} == "cuda" else ""
mark("probe_environment({args.device}" + how + ")")
import harness.cli, harness.plan.tournament, harness.report.progress, harness.report.html; mark("import the CLI's modules")
from harness.store.session import open_store
store = open_store(); mark("open the store"); store.close()
if {args.device!r} == "cuda":
    torch.cuda.get_device_name(); mark("torch.cuda.get_device_name()")
    torch.cuda.synchronize(); mark("CUDA context (synchronize)")
print("; ".join(f"{{n}} {{s:.2f}} s" for n, s in marks))
"""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=harness_env(args), check=False)
    interpreter = time.perf_counter() - started
    done = subprocess.run(
        [sys.executable, "-c", code], env=harness_env(args), capture_output=True, text=True, check=False
    )
    text = done.stdout.strip() or done.stderr.strip().splitlines()[-1:]
    return f"interpreter {interpreter:.2f} s; {text}"


def revision_rows(first: dict, forced: dict) -> list[str]:
    """Per (part, revision): import, warm-up and first calls, first run against forced run."""

    def key(e: dict) -> tuple[str, str]:
        return e["part"], e["code_sha256"]

    before = {key(e): e for e in first["evaluations"]}
    rows = [
        f"{'part':<12}{'revision file':<32}{'import s':>16}{'warm-up s':>16}{'first calls s':>18}",
    ]
    sums = defaultdict(float)
    for e in forced["evaluations"]:
        b = before.get(key(e))
        if b is None:
            continue

        def total(values):
            return sum(v or 0.0 for v in values)

        pairs = [
            (b["compile_s"] or 0.0, e["compile_s"] or 0.0),
            (total(b["warmup_s"]), total(e["warmup_s"])),
            (total(b["first_call_s"]), total(e["first_call_s"])),
        ]
        for name, (x, y) in zip(("import", "warm-up", "first"), pairs):
            sums[name + "0"] += x
            sums[name + "1"] += y
        cells = "".join(f"{f'{x:.2f} -> {y:.2f}':>{w}}" for (x, y), w in zip(pairs, (16, 16, 18)))
        rows.append(f"{e['part']:<12}{e['filename'][:31]:<32}{cells}")
    rows.append(
        f"{'total':<12}{'':<32}"
        + "".join(
            f"{f'{sums[n + chr(48)]:.1f} -> {sums[n + chr(49)]:.1f}':>{w}}"
            for n, w in (("import", 16), ("warm-up", 16), ("first", 18))
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cpu or cuda (default: cuda)")
    parser.add_argument("--mode", default="leaderboard", choices=("test", "benchmark", "leaderboard"))
    parser.add_argument("--budget", type=float, default=None, help="seconds of timed calls per shape")
    parser.add_argument("--task", default="conv2d_v2")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")) / "overhead")
    parser.add_argument("--steps", default="first,noop,force", help="comma-separated: first, noop, force")
    parser.add_argument(
        "--db", default=None, help="store URL (default: OUT/harness.sqlite, fresh for `first`)"
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="kernel cache (default: OUT/cache, fresh for `first`)"
    )
    parser.add_argument(
        "--first-ledger",
        type=Path,
        default=None,
        help="the first run's ledger, for `force` alone (default: OUT's)",
    )
    parser.add_argument("--noop-repeats", type=int, default=3)
    parser.add_argument(
        "--cache-autotuning", action="store_true", help="HARNESS_CACHE_AUTOTUNING=1 for every run"
    )
    parser.add_argument("--_run", dest="run_args", help=argparse.SUPPRESS)
    parser.add_argument("--_ledger", dest="ledger", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_args:
        instrumented_run(args)
        return
    steps = [step.strip() for step in args.steps.split(",") if step.strip()]
    unknown = set(steps) - {"first", "noop", "force"}
    if unknown:
        raise SystemExit(f"unknown steps: {', '.join(sorted(unknown))}")

    args.out.mkdir(parents=True, exist_ok=True)
    args.out = args.out.resolve()
    if args.db is None:
        store = args.out / "harness.sqlite"
        if "first" in steps:
            store.unlink(missing_ok=True)
        args.db = f"sqlite:///{store}"
    if args.cache_dir is None:
        args.cache_dir = args.out / "cache"
        if "first" in steps and args.cache_dir.exists():
            shutil.rmtree(args.cache_dir)
    args.cache_dir = args.cache_dir.resolve()
    report = Report(args.out / f"report-{'-'.join(steps)}.txt")
    report(f"tournament overhead: {' '.join(tournament_args(args))}; store {args.db}; cache {args.cache_dir}")
    report(
        f"python {sys.version.split()[0]}; cores {os.cpu_count()}; steps {', '.join(steps)}; "
        f"device windows {os.environ.get('HARNESS_DEVICE_WINDOWS', 'none')} (HARNESS_DEVICE_WINDOWS)"
    )
    if args.cache_autotuning:
        report("HARNESS_CACHE_AUTOTUNING=1: Triton's autotuning results are kept with the kernels")
    subprocess.run(
        [sys.executable, "-m", "harness", "seed"],
        env=harness_env(args),
        check=True,
        stdout=subprocess.DEVNULL,
    )

    first = None
    if "first" in steps:
        caches = cache_files(args.cache_dir)
        first = run_instrumented(args, "first")
        first["caches_before"], first["caches_after"] = caches, cache_files(args.cache_dir)
        (args.out / "ledger-first.json").write_text(json.dumps(first, indent=1))
        report()
        report(f"== first run: {first['wall_s']:.1f} s (instrumented, in a fresh process)")
        split_table(report, first)

    if "noop" in steps:
        report()
        report("== again, nothing new to do (`python -m harness tournament`, end to end)")
        walls = []
        for _ in range(args.noop_repeats):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "harness", "tournament", *tournament_args(args)],
                env=harness_env(args),
                capture_output=True,
                text=True,
                check=False,
            )
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                report(f"failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
                break
            evaluated = [line for line in done.stdout.splitlines() if " evaluated now" in line]
            if any(" 0 evaluated now" not in line for line in evaluated):
                report("not a no-op: " + " | ".join(evaluated))
        report("walls: " + ", ".join(f"{w:.2f} s" for w in walls) + f"; best {min(walls):.2f} s")
        report("start anatomy: " + noop_anatomy(args))

    if "force" in steps:
        if first is None:
            path = args.first_ledger or args.out / "ledger-first.json"
            if not path.exists():
                raise SystemExit(
                    f"no first run to compare with ({path}): run --steps first (with the same --out) before"
                )
            first = json.loads(path.read_text())
        listing_before = cache_listing(args.cache_dir)
        caches_mid = cache_files(args.cache_dir)
        forced = run_instrumented(args, "forced", "--force")
        caches_after = cache_files(args.cache_dir)
        new_files = sorted(cache_listing(args.cache_dir) - listing_before)
        report()
        report(f"== --force run: {forced['wall_s']:.1f} s (instrumented)")
        split_table(report, forced)
        report()
        if first is not None and "caches_before" in first:
            report(
                "kernel caches (files, MB): before the first run -> after it -> before and after the forced run"
            )
            stages = (first["caches_before"], first["caches_after"], caches_mid, caches_after)
        else:
            report("kernel caches (files, MB): before -> after the forced run")
            stages = (caches_mid, caches_after)
        for kind in caches_mid:
            report(
                f"  {kind:<17}"
                + " -> ".join(f"{stage[kind][0]} files {stage[kind][1] / 1e6:.1f} MB" for stage in stages)
            )
        shown = f" (first: {new_files[:5]})" if new_files else " (nothing compiled twice)"
        report(f"  new cache files in the forced run: {len(new_files)}{shown}")
        if first is not None:
            report()
            report("per revision, first run -> forced run (seconds, on the child's clock):")
            for row in revision_rows(first, forced):
                report("  " + row)
    report()
    report(
        f"written under {args.out}: report-*.txt, ledger-*.json (and .log, .stderr), harness.sqlite, cache/"
    )


if __name__ == "__main__":
    main()
