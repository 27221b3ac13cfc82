"""`harness bench`: time stored revisions together with their task's reference and store the
runs (the timed phase, harness.plan.phases; its tables are harness.report.evaluations).

A run is keyed by (revision, task, run kind, environment); a completed run is reused unless
`force`. The others are claimed (committed), evaluated together in sandboxed children interleaved
shape by shape (`evaluate_interleaved`, so that drift hits every revision alike) on an executor
(harness.executors; with several GPUs each worker times its share, interleaved on its GPU), and
written as each evaluation ends. The task's reference candidate (its lineage, when registered)
joins every bench, so that each revision's speedup against it comes from the same environment.

Modes (harness.plan.phases.TIMED_PHASES): `benchmark` checks each shape with its public seed and
times it on those inputs; `leaderboard` checks with the secret seed, then times with a fresh
secret seed per call and checks every timed call's output.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from harness.config import get_settings
from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import Executor, InProcess
from harness.plan.phases import TIMED_PHASES, PhaseListener, PhaseRun, PlannedRevision, store_limits
from harness.sandbox.limits import SandboxLimits
from harness.scoring import BlockSpread, block_spread, blocks_joined, compare, run_blocks, speedup
from harness.store.models import Run
from harness.store.revisions import get_revision, reference_revision_id
from harness.store.runs import find_run, worker_name
from harness.store.session import Store
from harness.tasks import load_task
from harness.timing import StoppingRule, ms_text


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
) -> list[PlannedRevision]:
    """Time each revision and its task's reference on `device` (default: cuda if torch sees a
    GPU, else cpu), on the executor (default: this process; with several workers the revisions
    are shared out, each worker's interleaved shape by shape); `progress` hears one line per shape.
    Everything is validated first: bad input fails before any work or write."""
    executor = executor or InProcess()
    device = executor.resolve_device(device)
    if mode not in TIMED_PHASES:
        raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(TIMED_PHASES)}")
    if not revision_ids:
        raise HarnessError("no revision to bench")
    with store.session() as session:
        benched = with_references(session, revision_ids)
    environment = environment or executor.probe(device)
    limits = store_limits(store, limits or SandboxLimits.from_settings())
    rule = rule or StoppingRule(budget_s=get_settings().shape_budget(device))
    plan = PhaseRun(store, executor, environment, limits, worker_name(), force=force, rule=rule)
    run_bench(plan, benched, mode, progress)
    return benched


def run_bench(
    plan: PhaseRun,
    benched: list[PlannedRevision],
    mode: str,
    progress: Callable[[str], None] | None = None,
    activity: Callable[[str, str], None] | None = None,
) -> None:
    """The timed phase over `with_references`' items (bench_revisions, the tournament), then
    each item's comparisons with the reference and its parent; `activity` hears (revision label,
    what its evaluation does now)."""
    listener = PhaseListener()
    if activity is not None:
        listener.activity = lambda item, now: activity(item.label, now)
    if progress is not None:

        def shape_done(item, outcome) -> None:
            timing = (
                f": {ms_text(outcome.mean_ms)} ms, {outcome.runs} runs" if outcome.mean_ms is not None else ""
            )
            progress(
                f"{item.revision_id} {item.label} {outcome.set_name}[{outcome.index}] {outcome.status}{timing}"
            )

        listener.shape_done = shape_done
    plan.run(TIMED_PHASES[mode], benched, listener)
    with plan.store.session() as session:
        _compare(session, benched, TIMED_PHASES[mode].run_kind, plan.environment.env_key)


def with_references(session: Session, revision_ids: list[int]) -> list[PlannedRevision]:
    """The revisions asked for, then each task's reference revision (the latest of its lineage)
    when it is registered and not asked for already."""
    benched: list[PlannedRevision] = []
    for revision_id in dict.fromkeys(revision_ids):
        revision = get_revision(session, revision_id)
        load_task(revision.task)
        benched.append(PlannedRevision.of(revision))
    for task in dict.fromkeys(item.task for item in benched):
        reference = reference_revision_id(session, task)
        if reference is None:
            continue
        existing = next((item for item in benched if item.revision_id == reference), None)
        if existing is not None:
            existing.is_reference = True
        else:
            benched.append(PlannedRevision.of(get_revision(session, reference), is_reference=True))
    return benched


def _times(run: Run | None) -> list[list[float]] | None:
    if run is None or run.score_ms is None or not all(shape.times_ms for shape in run.shapes):
        return None
    return [list(shape.times_ms) for shape in run.shapes]


def _verdict(run: Run, other: Run, ranking_by: str, spread: BlockSpread) -> str:
    """`run` against `other` of the same batch, whose pooled block variance is `spread`."""
    return compare(
        _times(run),
        _times(other),
        ranking_by,
        spread=spread,
        blocks=(blocks_joined(run_blocks(run)), blocks_joined(run_blocks(other))),
    ).verdict


def _comparable(a: Run, b: Run) -> bool:
    return [(s.set_name, s.index) for s in a.shapes] == [(s.set_name, s.index) for s in b.shapes]


def _compare(session: Session, benched: list[PlannedRevision], run_kind: str, env_key: str) -> None:
    """Speedup and verdict against the reference, verdict against the parent's stored run of the
    same kind and environment when it comes from the same interleaved run (batch), and the
    timing flags of each revision."""
    references = {item.task: item.run for item in benched if item.is_reference}
    groups: dict[str, list[list[float]]] = {}  # batch -> its block means (scoring.block_spread)
    for item in benched:
        if item.run is not None and item.run.batch is not None:
            groups.setdefault(item.run.batch, []).extend(run_blocks(item.run))
    for item in benched:
        run = item.run
        if run is None:
            continue
        item.flags = sorted({flag for shape in run.shapes for flag in shape.timing_flags})
        if _times(run) is None:
            continue
        ranking_by = load_task(item.task).ranking_by
        spread = block_spread(groups.get(run.batch, []))
        reference = references.get(item.task)
        if reference is not None and _times(reference) is not None and _comparable(run, reference):
            item.speedup = speedup(reference.score_ms, run.score_ms)
            if not item.is_reference:
                item.vs_reference = _verdict(run, reference, ranking_by, spread)
        if item.parent_id is not None:
            parent = find_run(session, item.parent_id, item.task, run_kind, env_key)
            one_run = parent is not None and run.batch is not None and parent.batch == run.batch
            if one_run and _times(parent) is not None and _comparable(run, parent):
                item.vs_parent = _verdict(run, parent, ranking_by, spread)
