#!/usr/bin/env python3
"""How repeatable is a harness score, how often does the judge call identical revisions
different, and how close are its means to `triton.testing.do_bench`?

1. Times the same candidate file COPIES times in one run (default 2), interleaved shape by
   shape (sandboxed children, A B C C' B' A': every shape in two blocks of calls), as a
   tournament would time that many revisions, and prints the first two's per-shape means, both
   scores, their relative difference (target on one H200: within 1 %) and the verdict of
   `harness.scoring.compare` (it should be `same within noise`).
2. An A/A test: with `--rounds T` it does that T times and compares every pair of copies of
   every round, once with the per-call variance alone and once as the harness does (the larger
   of it and the run's pooled block spread, `scoring.block_spread`); every verdict other than
   `same within noise` is false. It prints each round's block spread and both counts.
3. On CUDA, for the reference candidate on each benchmark shape: the mean of that run's first
   timing next to `triton.testing.do_bench(..., return_mode="mean")` in this process (it also
   flushes the L2 before every call) and their relative difference.

    python benchmarks/repeat_score.py [--file candidates/conv2d_v2_reference.py]
        [--device cuda|cpu] [--budget SECONDS] [--task conv2d_v2] [--copies N] [--rounds T]
    python benchmarks/repeat_score.py --device cpu --copies 6 --rounds 12 --budget 0.3   # A/A

On the CPU (the smoke shapes, through the Triton interpreter) part 3 is skipped. On this
repository's 2-core CPU runner (2026-12-01) the reference's A/A with 6 copies and 12 rounds
(180 pairs, `--budget 0.3`) gave 36 false verdicts with the per-call variance alone and none as
the harness judges (block spread 6-14 % per round, 24 degrees of freedom); the same pairs
through 12 CLI runs of `harness tournament --force` gave 54 and none.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path

from harness.config import CANDIDATES_DIR, get_settings
from harness.devices import resolve_device
from harness.environment import probe_environment
from harness.sandbox.evaluation import Evaluation, Evaluator, evaluate_interleaved
from harness.scoring import SAME, BlockSpread, Comparison, block_means, block_spread, blocks_joined, compare
from harness.tasks import TaskSpec, load_reference, load_task
from harness.timing import StoppingRule


def percent(a: float, b: float) -> str:
    return f"{(a - b) / b * 100:+.2f} %"


def shape_label(shape: dict) -> str:
    return ",".join(str(value) for key, value in shape.items() if key != "seed")


def time_copies(
    code: bytes, name: str, task: TaskSpec, device: str, rule: StoppingRule, copies: int = 2
) -> list[Evaluation]:
    evaluators = [Evaluator(code, name, task, device=device, timed=True, rule=rule) for _ in range(copies)]
    evaluations = evaluate_interleaved(evaluators)
    for evaluation in evaluations:
        if evaluation.status != "pass":
            sys.exit(f"{name} did not pass: {evaluation.status}: {evaluation.reason}")
    return evaluations


def judged(a: Evaluation, b: Evaluation, ranking_by: str, spread: BlockSpread | None) -> Comparison:
    """B against A as the harness judges two revisions of one run (`spread`: that run's block
    spread; None: the per-call variance alone)."""
    blocks = [blocks_joined([block_means(shape.check) for shape in e.shapes]) for e in (b, a)]
    return compare(
        [s.times_ms for s in b.shapes],
        [s.times_ms for s in a.shapes],
        ranking_by,
        spread=spread,
        blocks=tuple(blocks),
    )


def run_spread(evaluations: list[Evaluation]) -> BlockSpread:
    return block_spread(block_means(shape.check) for e in evaluations for shape in e.shapes)


def print_repeat(first: Evaluation, second: Evaluation, ranking_by: str, spread: BlockSpread) -> None:
    print(
        f"{'shape':<16} {'A mean ms':>11} {'A err':>9} {'A runs':>6} {'B mean ms':>11} {'B err':>9} {'B runs':>6}  B vs A"
    )
    for a, b in zip(first.shapes, second.shapes):
        print(
            f"{shape_label(a.shape):<16} {a.mean_ms:>11.4f} {a.err_ms:>9.4f} {a.runs:>6} "
            f"{b.mean_ms:>11.4f} {b.err_ms:>9.4f} {b.runs:>6}  {percent(b.mean_ms, a.mean_ms)}"
        )
    verdict = judged(first, second, ranking_by, spread)
    print(
        f"score ({ranking_by}): A {first.score_ms:.4f} ms, B {second.score_ms:.4f} ms, B vs A {percent(second.score_ms, first.score_ms)}"
    )
    print(
        f"verdict: B is {verdict.verdict} than A (z = {verdict.z:.2f})"
        if verdict.verdict != "same within noise"
        else f"verdict: same within noise (z = {verdict.z:.2f})"
    )
    print(f"the run's block spread: {spread.variance**0.5 * 100:.2f} % ({spread.freedom} degrees of freedom)")
    flags = sorted({flag for e in (first, second) for s in e.shapes for flag in s.timing_flags})
    if flags:
        print(f"timing flags: {', '.join(flags)}")


def print_aa(rounds: list[list[Evaluation]], ranking_by: str) -> None:
    """Every pair of copies of every round, judged both ways: the false verdicts."""
    print(
        f"\n{'round':>5} {'block sd':>9} {'dof':>4} {'pairs':>5} {'false, per call':>16} {'false, harness':>15}"
    )
    totals = [0, 0, 0]
    for number, evaluations in enumerate(rounds, start=1):
        spread = run_spread(evaluations)
        pairs = list(itertools.combinations(evaluations, 2))
        alone = sum(judged(a, b, ranking_by, None).verdict != SAME for a, b in pairs)
        harness = sum(judged(a, b, ranking_by, spread).verdict != SAME for a, b in pairs)
        totals = [totals[0] + len(pairs), totals[1] + alone, totals[2] + harness]
        print(
            f"{number:>5} {spread.variance**0.5 * 100:>8.2f}% {spread.freedom:>4} {len(pairs):>5} {alone:>16} {harness:>15}"
        )
    print(f"{'all':>5} {'':>9} {'':>4} {totals[0]:>5} {totals[1]:>16} {totals[2]:>15}")


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
    parser.add_argument("--copies", type=int, default=2, help="copies timed together in one run (at least 2)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of the copies (the A/A test)")
    args = parser.parse_args()
    if args.copies < 2 or args.rounds < 1:
        parser.error("--copies needs at least 2 and --rounds at least 1")

    task = load_task(args.task)
    device = resolve_device(args.device)
    reference_file = CANDIDATES_DIR / task.reference_candidate
    path = args.file or reference_file
    rule = StoppingRule(budget_s=args.budget if args.budget is not None else get_settings().shape_budget_s)
    environment = probe_environment(device)
    print(
        f"{path.name} timed {args.copies} times, interleaved, {args.rounds} round(s), on {device} ({environment.device_name}; "
        f"torch {environment.torch}, triton {environment.triton}, driver {environment.driver_version or '-'}); "
        f"budget {rule.budget_s:g} s per shape"
    )
    rounds = [
        time_copies(path.read_bytes(), path.name, task, device, rule, args.copies) for _ in range(args.rounds)
    ]
    first, second = rounds[0][:2]
    print(f"shapes: {first.shape_set} ({','.join(k for k in first.shapes[0].shape if k != 'seed')})\n")
    print_repeat(first, second, task.ranking_by, run_spread(rounds[0]))
    print_aa(rounds, task.ranking_by)
    if device != "cuda":
        print("\n(do_bench comparison skipped: it needs CUDA)")
        return
    if path.resolve() != reference_file.resolve():
        first = time_copies(reference_file.read_bytes(), reference_file.name, task, device, rule)[0]
    print_do_bench(reference_file, task, first)


if __name__ == "__main__":
    main()
