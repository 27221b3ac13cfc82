"""GPU MODE problems in the harness and in GPU MODE's own eval.py, side by side (issue 34).

For each problem directory (GPU MODE's format, kept in the ignored external/ folder):
  1. `harness task add DIR --name NAME`, `harness register submission.py --task NAME`,
     `harness tournament --task NAME --mode benchmark`, `harness leaderboard --format json`;
  2. GPU MODE's eval.py as KernelBot runs it: a temporary directory holding the files that
     task.yml's `files` names (submission.py for @SUBMISSION@), the `tests` and `benchmarks` shapes
     written as eval.py reads them ("k: v; k: v" lines), `POPCORN_FD=3 python eval.py test|benchmark`.
One JSON line per problem in OUT/side_by_side.jsonl, and a markdown table OUT/side_by_side.md.

  python benchmarks/gpumode_side_by_side.py --out $OUT --deadline 520 \
      external/reference-kernels/problems/helion/fp8_quant_py ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from harness import scoring


def sh(
    args: list[str], timeout: float, env: dict | None = None, cwd: str | None = None, pass_fds: tuple = ()
) -> tuple[int | str, str]:
    try:
        proc = subprocess.run(
            args,
            check=False,
            capture_output=True,
            text=True,
            timeout=max(timeout, 1),
            env=env,
            cwd=cwd,
            pass_fds=pass_fds,
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout or b""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return "timeout", out[-2000:]
    return proc.returncode, (proc.stdout + proc.stderr)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def score(means: list[float | None], ranking_by: str) -> float | None:
    """eval.py's per-shape means scored as the harness scores them (harness.scoring.score); None
    when a shape has no mean."""
    if not means or any(m is None or m <= 0 for m in means):
        return None
    return scoring.score(means, ranking_by)


def harness_side(problem: Path, name: str, budget: float, timeout: float, device: str) -> dict:
    h = [sys.executable, "-m", "harness"]
    result: dict = {}
    rc, out = sh(h + ["task", "add", str(problem), "--name", name], 120)
    result["task_add"] = "ok" if rc == 0 else f"exit {rc}: {last_line(out)}"
    if rc != 0:
        return result
    submission = problem / "submission.py"
    if submission.exists():
        rc, out = sh(h + ["register", str(submission), "--task", name, "--lineage", f"{name}_submission"], 60)
        if rc != 0:
            result["register"] = f"exit {rc}: {last_line(out)}"
    start = time.monotonic()
    rc, out = sh(
        h
        + ["tournament", "--task", name, "--device", device, "--mode", "benchmark", "--budget", str(budget)],
        timeout,
        env={**os.environ, "COLUMNS": "200"},
    )
    result["tournament"] = {"exit": rc, "seconds": round(time.monotonic() - start, 1), "last": last_line(out)}
    rc, out = sh(h + ["leaderboard", "--task", name, "--device", device, "--format", "json"], 60)
    if rc != 0:
        result["leaderboard"] = f"exit {rc}: {last_line(out)}"
        return result
    board = json.loads(out[out.index("{") :])
    result["ranking_by"] = board.get("ranking_by")
    result["entries"] = [
        {
            "lineage": e["lineage"],
            "rank": e["rank"],
            "status": e["status"],
            "reason": (e.get("reason") or "")[:240],
            "score_ms": e.get("score_ms"),
            "gpumode_score_ms": e.get("gpumode_score_ms"),
            "means_ms": [b.get("mean_ms") for b in e.get("benchmarks", [])],
        }
        for e in board["entries"]
    ]
    return result


def shapes_file(shapes: list[dict], path: Path) -> None:
    path.write_text("".join("; ".join(f"{k}: {v}" for k, v in shape.items()) + "\n" for shape in shapes))


def popcorn(text: str) -> dict:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def eval_side(
    problem: Path,
    spec: dict,
    timeout: float,
    modes: tuple[str, ...] = ("test", "benchmark"),
    submission: Path | None = None,
) -> dict:
    files = spec.get("files") or []
    main = (spec.get("config") or {}).get("main", "eval.py")
    result: dict = {}
    with tempfile.TemporaryDirectory(prefix="gpumode-eval-") as tmp:
        work = Path(tmp)
        for item in files:
            src = item["source"]
            src_path = (submission or problem / "submission.py") if src == "@SUBMISSION@" else problem / src
            if not src_path.exists():
                result["setup"] = f"missing {src_path}"
                return result
            shutil.copy(src_path, work / item["name"])
        if not (work / main).exists():
            result["setup"] = f"no {main} in task.yml's files"
            return result
        shapes_file(spec.get("tests") or [], work / "tests.txt")
        shapes_file(spec.get("benchmarks") or [], work / "benchmarks.txt")
        for mode, shapes in (("test", "tests.txt"), ("benchmark", "benchmarks.txt"))[: len(modes)]:
            read, write = os.pipe()
            env = {**os.environ, "POPCORN_FD": str(write)}
            start = time.monotonic()
            rc, out = sh([sys.executable, main, mode, shapes], timeout, env=env, cwd=tmp, pass_fds=(write,))
            os.close(write)
            with os.fdopen(read) as reader:
                fields = popcorn(reader.read())
            entry = {"exit": rc, "seconds": round(time.monotonic() - start, 1), "check": fields.get("check")}
            if mode == "test":
                failed = [k for k, v in fields.items() if k.endswith(".status") and v == "fail"]
                entry["failed"] = len(failed)
                entry["count"] = fields.get("test-count")
                errors = [v for k, v in fields.items() if k.endswith(".error")]
                if errors:
                    entry["first_error"] = errors[0][:240]
            else:
                count = int(fields.get("benchmark-count") or 0)
                entry["means_ms"] = [
                    float(fields[f"benchmark.{i}.mean"]) / 1e6 if f"benchmark.{i}.mean" in fields else None
                    for i in range(count)
                ]
                errors = [v for k, v in fields.items() if k.endswith(".error")]
                if errors:
                    entry["first_error"] = errors[0][:240]
            if fields.get("check") is None:
                entry["output"] = last_line(out)
            result[mode] = entry
            if mode == "test" and fields.get("check") != "pass":
                break
    return result


def revision_files(ids: list[int], folder: Path) -> list[Path]:
    """Each stored revision's exact bytes as FOLDER/<id>.py."""
    from harness.store.revisions import get_revision, revision_code
    from harness.store.session import open_store

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    with open_store(read_only=True) as store, store.session() as session:
        for revision_id in ids:
            path = folder / f"{revision_id}.py"
            path.write_bytes(revision_code(get_revision(session, revision_id)))
            files.append(path)
    return files


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--deadline", type=float, default=520)
    parser.add_argument("--budget", type=float, default=0.3)
    parser.add_argument("--harness-timeout", type=float, default=150)
    parser.add_argument("--eval-timeout", type=float, default=100)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-eval", action="store_true")
    parser.add_argument("--no-harness", action="store_true")
    parser.add_argument("--eval-test-only", action="store_true", help="eval.py's test mode only (verdicts)")
    parser.add_argument(
        "--submission",
        nargs="*",
        type=Path,
        default=[],
        help="files eval.py judges in place of each problem's submission.py, one row each (eval.py only: "
        "the seed revisions against `harness tournament --only` them, issue 31)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="problems run at once (their timings then share the GPU: verdicts side by side, times rough)",
    )
    parser.add_argument(
        "--revision",
        nargs="*",
        type=int,
        default=[],
        help="stored revisions (HARNESS_DB) eval.py judges as --submission files, their exact bytes: "
        "`harness seed`, then --revision 2 99237 99238 512024 512025 779808 for the six seed revisions",
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.revision:
        args.submission += revision_files(args.revision, out / "revisions")
    out.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    lock = threading.Lock()
    modes = ("test",) if args.eval_test_only else ("test", "benchmark")

    def one(directory: str, submission: Path | None = None) -> dict | None:
        left = args.deadline - (time.monotonic() - begin)
        if left < 20:
            print(f"deadline: {directory} not run", flush=True)
            return None
        problem = Path(directory)
        name = problem.name.removesuffix("_py").replace("-", "_")
        spec = yaml.safe_load((problem / "task.yml").read_text()) if (problem / "task.yml").exists() else {}
        row = {
            "problem": f"{problem.parent.name}/{problem.name}",
            "name": name,
            "ranking_by": spec.get("ranking_by", "last (KernelBot's default)"),
        }
        if submission is not None:
            row["submission"] = submission.name
            row["eval"] = eval_side(
                problem, spec, min(args.eval_timeout, left / len(modes)), modes, submission
            )
        elif not args.no_harness:
            row["harness"] = harness_side(
                problem, name, args.budget, min(args.harness_timeout, left), args.device
            )
        left = args.deadline - (time.monotonic() - begin)
        if submission is None and not args.no_eval and spec and left > 20:
            row["eval"] = eval_side(problem, spec, min(args.eval_timeout, left / len(modes)), modes)
        with lock:
            with open(out / "side_by_side.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row)[:1500], flush=True)
        return row

    # a set's own eval.py and utils.py, matched by `problems/amd/*`, are no problems
    problems = [directory for directory in args.problems if Path(directory).is_dir()]
    jobs = [(problem, file) for problem in problems for file in args.submission] or [
        (p, None) for p in problems
    ]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = [row for row in pool.map(lambda job: one(*job), jobs) if row is not None]
    table = [
        "| problem | harness: submission.py | harness: reference | eval.py test | eval.py benchmark |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        hs = row.get("harness", {})
        entries = hs.get("entries", [])

        def show(entry):
            if not entry:
                return "-"
            s = entry["status"]
            if entry.get("score_ms"):
                s += f" {entry['score_ms']:.4g} ms"
            elif entry.get("reason"):
                s += f": {entry['reason'][:90]}"
            return s

        sub = next((e for e in entries if e["lineage"].endswith("_submission")), None)
        ref = next((e for e in entries if e["lineage"].endswith("_reference")), None)
        harness_sub = show(sub) if entries else hs.get("task_add", "-")
        ev = row.get("eval", {})
        test = ev.get("test", {})
        bench = ev.get("benchmark", {})
        test_s = (
            "not run"
            if not ev
            else ev.get("setup")
            or (
                f"{test.get('check')} ({test.get('failed')} of {test.get('count')} failed)"
                if test.get("check")
                else f"exit {test.get('exit')}: {test.get('output', '')[:90]}"
            )
        )
        bench_s = "-"
        if bench:
            means = bench.get("means_ms") or []
            ranking = row["ranking_by"] if row["ranking_by"] in ("geom", "mean", "last") else "last"
            value = score(means, ranking)
            bench_s = (
                f"{bench.get('check')} {value:.4g} ms ({ranking})"
                if value
                else f"{bench.get('check')}: {bench.get('first_error', bench.get('output', ''))[:90]}"
            )
        if row.get("submission"):
            seconds = sum(ev[mode]["seconds"] for mode in ("test", "benchmark") if mode in ev)
            harness_sub = f"{row['submission']} (eval.py only, {seconds:.1f} s)"
        table.append(f"| {row['problem']} | {harness_sub} | {show(ref)} | {test_s} | {bench_s} |")
    (out / "side_by_side.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
