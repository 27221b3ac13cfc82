"""`harness bench`: time stored revisions together with their task's reference, store the runs,
and the tables it prints.

A run is keyed by (revision, task, mode, environment); a completed run is reused unless `force`.
The others are claimed (committed), evaluated together in sandboxed children interleaved shape by
shape (`evaluate_interleaved`, so that drift hits every revision alike) on an executor
(harness.executors; with several GPUs each worker times its share, interleaved on its GPU), and
written one transaction per job. The task's reference candidate (its lineage, when registered) joins every bench, so
that each revision's speedup against it comes from the same environment.

Modes: `benchmark` checks each shape with its public seed and times it on those inputs;
`leaderboard` checks with the secret seed, then times with a fresh secret seed per call and checks
every timed call's output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.config import get_settings
from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import EvaluationRequest, Executor, InProcess, evaluate_and_record
from harness.report.leaderboard import reference_lineage_name
from harness.sandbox.checks import leaderboard_seed, store_limits
from harness.sandbox.devices import default_shape_set
from harness.sandbox.supervisor import SandboxLimits
from harness.scoring import compare, speedup
from harness.store.models import Lineage, Revision, Run
from harness.store.revisions import get_revision, revision_code
from harness.store.runs import estimated_cost, find_run, reuse_or_claim, worker_name
from harness.store.session import Store
from harness.tasks import load_task
from harness.timing import StoppingRule

if TYPE_CHECKING:
    from harness.sandbox.evaluation import ShapeOutcome

BENCH_MODES = {"benchmark": "test", "leaderboard": "leaderboard"}  # run mode -> the evaluation's seeds
STATISTICS = ("runs", "mean_ms", "median_ms", "std_ms", "err_ms", "min_ms", "max_ms")


@dataclass
class BenchedRevision:
    revision_id: int
    label: str  # "lineage rN"
    task: str
    parent_id: int | None
    is_reference: bool
    run: Run | None = None  # None when another worker holds the claim
    reused: bool = False
    busy_with: str = ""
    failed: bool = False  # the worker that evaluated it failed (not the candidate): no result
    speedup: float | None = None  # reference score / score
    vs_reference: str | None = None  # scoring.compare verdict
    vs_parent: str | None = None
    flags: list[str] = field(default_factory=list)


def bench_revisions(
    store: Store,
    revision_ids: list[int],
    *,
    device: str | None = None,
    mode: str = "benchmark",
    force: bool = False,
    limits: SandboxLimits | None = None,
    rule: StoppingRule | None = None,
    environment: Environment | None = None,
    executor: Executor | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[BenchedRevision]:
    """Time each revision and its task's reference on `device` (default: cuda if torch sees a
    GPU, else cpu), on the executor (default: this process; with several workers the revisions
    are shared out, each worker's interleaved shape by shape); `progress` hears one line per shape.
    Everything is validated first: bad input fails before any work or write."""
    executor = executor or InProcess()
    device = executor.resolve_device(device)
    if mode not in BENCH_MODES:
        raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(BENCH_MODES)}")
    if not revision_ids:
        raise HarnessError("no revision to bench")
    with store.session() as session:
        benched = with_references(session, revision_ids)
    environment = environment or executor.probe(device)
    limits = store_limits(store, limits or SandboxLimits.from_settings())
    rule = rule or StoppingRule(budget_s=get_settings().shape_budget(device))
    worker = worker_name()

    requests: list[EvaluationRequest] = []
    items: dict[int, BenchedRevision] = {}

    def on_shape(key: int, outcome: ShapeOutcome) -> None:
        item = items[key]
        timing = f": {_ms(outcome.mean_ms)} ms, {outcome.runs} runs" if outcome.mean_ms is not None else ""
        progress(
            f"{item.revision_id} {item.label} {outcome.set_name}[{outcome.index}] {outcome.status}{timing}"
        )

    with store.session() as session:
        for item in benched:
            request = _claim(session, item, mode, environment, force, limits, rule, worker)
            if request is not None:
                requests.append(request)
                items[request.key] = item
    dispatched = evaluate_and_record(
        store, executor, environment, requests, worker=worker, on_shape=on_shape if progress else None
    )
    for key, item in items.items():
        if key in dispatched.failed:
            item.busy_with, item.failed = f"no result: {dispatched.failed[key]}", True
            continue
        item.run = dispatched.recorded.get(key)
        if item.run is None:
            item.busy_with = "a worker that took over"
    with store.session() as session:
        _compare(session, benched, mode, environment.env_key)
    return benched


def with_references(session: Session, revision_ids: list[int]) -> list[BenchedRevision]:
    """The revisions asked for, then each task's reference revision (the latest of its lineage)
    when it is registered and not asked for already."""
    benched: list[BenchedRevision] = []
    for revision_id in dict.fromkeys(revision_ids):
        revision = get_revision(session, revision_id)
        load_task(revision.task)
        benched.append(_benched(revision, is_reference=False))
    for task in dict.fromkeys(item.task for item in benched):
        lineage = reference_lineage_name(task)
        reference = session.scalar(
            select(Revision.id)
            .join(Revision.lineage)
            .where(Lineage.name == lineage, Revision.task == task)
            .order_by(Revision.number.desc())
            .limit(1)
        )
        if reference is None:
            continue
        existing = next((item for item in benched if item.revision_id == reference), None)
        if existing is not None:
            existing.is_reference = True
        else:
            benched.append(_benched(get_revision(session, reference), is_reference=True))
    return benched


def _benched(revision: Revision, *, is_reference: bool) -> BenchedRevision:
    return BenchedRevision(
        revision_id=revision.id,
        label=f"{revision.lineage.name} r{revision.number}",
        task=revision.task,
        parent_id=revision.parent_id,
        is_reference=is_reference,
    )


def _claim(
    session: Session,
    item: BenchedRevision,
    mode: str,
    environment: Environment,
    force: bool,
    limits: SandboxLimits,
    rule: StoppingRule,
    worker: str,
) -> EvaluationRequest | None:
    """Reuse the stored run, or claim the key and make the item's request (its key: the run's
    id); None when there is nothing to evaluate (reused, or another worker holds the claim)."""
    task = load_task(item.task)
    revision = get_revision(session, item.revision_id)
    shape_set = default_shape_set(environment.device, timed=True)
    per_shape_s = limits.call_timeout_s * 16 + rule.budget_s
    ttl_s = limits.startup_timeout_s + limits.import_timeout_s + per_shape_s * len(task.shapes(shape_set)) * 4
    sources = (mode, "benchmark", "test") if mode == "leaderboard" else (mode, "test")
    cost = estimated_cost(session, item.revision_id, task.name, environment.env_key, prefer=sources)
    found = reuse_or_claim(
        session, item.revision_id, task, mode, environment,
        shape_set=shape_set, worker=worker, ttl_s=ttl_s, force=force,
    )
    if found.run is None or found.reused:
        item.run, item.reused, item.busy_with = found.run, found.reused, found.busy_with
        return None
    secret_seed = leaderboard_seed(session, revision) if mode == "leaderboard" else None
    return EvaluationRequest.make(
        found.run.id, revision_code(revision), revision.filename, task.name,
        device=environment.device, limits=limits, label=item.label, mode=BENCH_MODES[mode],
        timed=True, secret_seed=secret_seed, rule=rule, cost=cost,
    )


def _times(run: Run | None) -> list[list[float]] | None:
    if run is None or run.score_ms is None or not all(shape.times_ms for shape in run.shapes):
        return None
    return [list(shape.times_ms) for shape in run.shapes]


def _comparable(a: Run, b: Run) -> bool:
    return [(s.set_name, s.index) for s in a.shapes] == [(s.set_name, s.index) for s in b.shapes]


def _compare(session: Session, benched: list[BenchedRevision], mode: str, env_key: str) -> None:
    """Speedup and verdict against the reference, verdict against the parent's stored run of the
    same mode and environment when it comes from the same interleaved run (batch), and the
    timing flags of each revision."""
    references = {item.task: item.run for item in benched if item.is_reference}
    for item in benched:
        run = item.run
        if run is None:
            continue
        item.flags = sorted(
            {flag for shape in run.shapes for flag in shape.check.get("timing", {}).get("flags", [])}
        )
        own = _times(run)
        if own is None:
            continue
        ranking_by = load_task(item.task).ranking_by
        reference = references.get(item.task)
        if reference is not None and _times(reference) is not None and _comparable(run, reference):
            item.speedup = speedup(reference.score_ms, run.score_ms)
            if not item.is_reference:
                item.vs_reference = compare(own, _times(reference), ranking_by).verdict
        if item.parent_id is not None:
            parent = find_run(session, item.parent_id, item.task, mode, env_key)
            one_run = parent is not None and run.batch is not None and parent.batch == run.batch
            if one_run and _times(parent) is not None and _comparable(run, parent):
                item.vs_parent = compare(own, _times(parent), ranking_by).verdict


# --- rendering ------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}" if value < 100 else f"{value:.1f}"


def shape_table(item: BenchedRevision) -> Table:
    """One revision's per-shape statistics (ms), titled with its status, score and comparisons."""
    run = item.run
    title = f"{item.revision_id} {item.label}" + (" (reference)" if item.is_reference else "")
    if run is None:
        what = item.busy_with if item.failed else f"busy, claimed by {item.busy_with}"
        table = Table(title=Text(f"{title}: {what}"), title_justify="left")
        return table
    facts = [run.status]
    if run.reason:
        facts.append(run.reason)
    if run.score_ms is not None:
        facts.append(f"score {_ms(run.score_ms)} ms")
        warmup_s = sum(shape.check.get("timing", {}).get("compile_s", 0.0) for shape in run.shapes)
        facts.append(f"import {run.compile_s or 0:.1f} s, warm-up {warmup_s:.1f} s")
    if item.speedup is not None and not item.is_reference:
        facts.append(f"{item.speedup:.2f}x the reference ({item.vs_reference})")
    if item.vs_parent is not None:
        facts.append(f"vs parent: {item.vs_parent}")
    if item.flags:
        facts.append(f"flags: {', '.join(item.flags)}")
    if item.reused:
        facts.append("stored result")
    heading = Text(f"{title}: ")
    heading.append(facts[0], "bold")
    heading.append("".join(f"; {fact}" for fact in facts[1:]))
    table = Table(title=heading, title_justify="left")
    keys = shape_keys(run)
    table.add_column("shape", no_wrap=True)
    for name in STATISTICS:
        table.add_column(name.removesuffix("_ms") + (" ms" if name.endswith("_ms") else ""), justify="right")
    for shape in run.shapes:
        label = ",".join(str(shape.shape.get(key, "")) for key in keys)
        status = shape.check.get("status", "")
        if shape.mean_ms is None:
            table.add_row(label, status or "-", *[""] * (len(STATISTICS) - 1))
            continue
        table.add_row(label, str(shape.runs), *[_ms(getattr(shape, name)) for name in STATISTICS[1:]])
    return table


def shape_keys(run: Run) -> list[str]:
    return [key for key in (run.shapes[0].shape if run.shapes else {}) if key != "seed"]


def render_bench(benched: list[BenchedRevision], environment: Environment) -> Group:
    """The device line, the shape legend, then one table per revision."""
    device = f"{environment.device} ({environment.device_name})"
    if environment.device == "cpu":
        device += ": host clock, Triton through the interpreter; never ranked with GPU results"
    lines = [f"device: {device}"]
    keys = next((shape_keys(item.run) for item in benched if item.run is not None and item.run.shapes), [])
    if keys:
        lines.append(f"shape: {','.join(keys)}; times in ms")
    return Group(*(Text(line) for line in lines), *[shape_table(item) for item in benched])
