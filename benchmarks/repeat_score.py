#!/usr/bin/env python3
"""How repeatable is a harness score, and how close are its means to `triton.testing.do_bench`?

1. Times the same candidate file twice in one run, interleaved shape by shape (two sandboxed
   children, A B A B ...), as a tournament would time two revisions, and prints both per-shape
   means, both scores, their relative difference (target on one H200: within 1 %) and the
   verdict of `harness.scoring.compare` (it should be `same within noise`).
2. On CUDA, for the reference candidate on each benchmark shape: the mean of that run's first
   timing next to `triton.testing.do_bench(..., return_mode="mean")` in this process (it also
   flushes the L2 before every call) and their relative difference.

    python benchmarks/repeat_score.py [--file candidates/conv2d_v2_reference.py]
        [--device cuda|cpu] [--budget SECONDS] [--task conv2d_v2]

On the CPU (the smoke shapes, through the Triton interpreter) only part 1 runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

from harness.config import CANDIDATES_DIR, get_settings
from harness.environment import probe_environment
from harness.sandbox.evaluation import Evaluation, Evaluator, evaluate_interleaved, resolve_device
from harness.scoring import compare
from harness.tasks import TaskSpec, load_reference, load_task
from harness.timing import StoppingRule


def percent(a: float, b: float) -> str:
    return f"{(a - b) / b * 100:+.2f} %"


def shape_label(shape: dict) -> str:
    return ",".join(str(value) for key, value in shape.items() if key != "seed")


def time_twice(code: bytes, name: str, task: TaskSpec, device: str, rule: StoppingRule) -> list[Evaluation]:
    evaluators = [Evaluator(code, name, task, device=device, timed=True, rule=rule) for _ in range(2)]
    evaluations = evaluate_interleaved(evaluators)
    for evaluation in evaluations:
        if evaluation.status != "pass":
            sys.exit(f"{name} did not pass: {evaluation.status}: {evaluation.reason}")
    return evaluations


def print_repeat(first: Evaluation, second: Evaluation, ranking_by: str) -> None:
    print(
        f"{'shape':<16} {'A mean ms':>11} {'A err':>9} {'A runs':>6} {'B mean ms':>11} {'B err':>9} {'B runs':>6}  B vs A"
    )
    for a, b in zip(first.shapes, second.shapes):
        print(
            f"{shape_label(a.shape):<16} {a.mean_ms:>11.4f} {a.err_ms:>9.4f} {a.runs:>6} "
            f"{b.mean_ms:>11.4f} {b.err_ms:>9.4f} {b.runs:>6}  {percent(b.mean_ms, a.mean_ms)}"
        )
    verdict = compare([s.times_ms for s in second.shapes], [s.times_ms for s in first.shapes], ranking_by)
    print(
        f"score ({ranking_by}): A {first.score_ms:.4f} ms, B {second.score_ms:.4f} ms, B vs A {percent(second.score_ms, first.score_ms)}"
    )
    print(
        f"verdict: B is {verdict.verdict} than A (z = {verdict.z:.2f})"
        if verdict.verdict != "same within noise"
        else f"verdict: same within noise (z = {verdict.z:.2f})"
    )
    flags = sorted({flag for e in (first, second) for s in e.shapes for flag in s.timing_flags})
    if flags:
        print(f"timing flags: {', '.join(flags)}")


def load_candidate(path: Path, task: TaskSpec):
    """The candidate's module, imported in this process beside the task's shim (as task.py)."""
    shim_dir = Path(tempfile.mkdtemp(prefix="repeat-score-"))
    (shim_dir / "task.py").write_bytes(task.shim_file.read_bytes())
    sys.path.insert(0, str(shim_dir))
    spec = importlib.util.spec_from_file_location("repeat_score_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, task.entry_point)


def print_do_bench(reference_file: Path, task: TaskSpec, harness_run: Evaluation) -> None:
    import torch
    import triton.testing

    entry = load_candidate(reference_file, task)
    reference = load_reference(task)
    print(f"\n{reference_file.name} on each benchmark shape: harness mean vs triton.testing.do_bench (mean)")
    print(f"{'shape':<16} {'harness ms':>11} {'do_bench ms':>12}  harness vs do_bench")
    for outcome, shape in zip(harness_run.shapes, task.shapes("benchmarks")):
        data = reference.generate_input(**shape.parameters, seed=shape.seed, device="cuda")
        entry(data)
        torch.cuda.synchronize()
        do_bench_ms = triton.testing.do_bench(
            lambda data=data: entry(data), warmup=100, rep=1000, return_mode="mean"
        )
        print(
            f"{shape_label(outcome.shape):<16} {outcome.mean_ms:>11.4f} {do_bench_ms:>12.4f}  {percent(outcome.mean_ms, do_bench_ms)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--file", type=Path, default=None, help="candidate file (default: the task's reference)"
    )
    parser.add_argument("--task", default="conv2d_v2")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is a GPU)")
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds of timed calls per shape (default: settings)"
    )
    args = parser.parse_args()

    task = load_task(args.task)
    device = resolve_device(args.device)
    reference_file = CANDIDATES_DIR / task.reference_candidate
    path = args.file or reference_file
    rule = StoppingRule(budget_s=args.budget if args.budget is not None else get_settings().shape_budget_s)
    environment = probe_environment(device)
    print(
        f"{path.name} timed twice, interleaved, on {device} ({environment.device_name}; torch {environment.torch}, "
        f"triton {environment.triton}, driver {environment.driver_version or '-'}); budget {rule.budget_s:g} s per shape"
    )
    first, second = time_twice(path.read_bytes(), path.name, task, device, rule)
    print(f"shapes: {first.shape_set} ({','.join(k for k in first.shapes[0].shape if k != 'seed')})\n")
    print_repeat(first, second, task.ranking_by)
    if device != "cuda":
        print("\n(do_bench comparison skipped: it needs CUDA)")
        return
    if path.resolve() != reference_file.resolve():
        first = time_twice(reference_file.read_bytes(), reference_file.name, task, device, rule)[0]
    print_do_bench(reference_file, task, first)


if __name__ == "__main__":
    main()
