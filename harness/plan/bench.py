"""`harness bench`: time stored revisions together with their task's reference and store the
runs (the timed phase, harness.plan.phases; its tables are harness.report.evaluations).

A run is keyed by (revision, task, run kind, environment); a completed run is reused unless
`force`. The others are claimed (committed), evaluated together in sandboxed children interleaved
shape by shape (`evaluate_interleaved`, so that drift hits every revision alike) on an executor
(harness.executors; with several GPUs each worker times its share, interleaved on its GPU), and
written as each evaluation ends. The task's reference candidate (its lineage, when registered)
joins every bench, and when anything is timed, the reference and the parents of the revisions
timed join every interleaved run of it (a stored one timed again: harness.plan.phases), so that
each speedup and comparison comes from one run (harness.standing.batch): a result reused from an
earlier run is compared within that run only, never with a timing of another.

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
from harness.standing.batch import batches_in, compare_in_run, timing_flags
from harness.store.revisions import get_revision, reference_revision_id
from harness.store.runs import worker_name
from harness.store.session import Store
from harness.store.tasks import register_missing_reference
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
    progress: Callable[..., None] | None = None,
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
        benched = with_references(session, revision_ids, progress)
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
    progress: Callable[[str, int], None] | None = None,
    activity: Callable[[str, str], None] | None = None,
    steps: Callable[[int], None] | None = None,
    *,
    listener: PhaseListener | None = None,
) -> None:
    """The timed phase over `with_references`' items (bench_revisions, the tournament, an
    experiment's children), then each item's comparisons with the reference and its parent;
    `activity` hears (revision label, what its evaluation does now), `steps` how many shapes
    `progress` will hear of (the companions timed beside them included); `listener`: the
    caller's own (`progress`, `activity` and `steps` replace its hooks when given)."""
    listener = listener or PhaseListener()
    if steps is not None:
        listener.dispatching = steps
    if activity is not None:
        listener.activity = lambda item, now: activity(item.label, now)
    if progress is not None:
        reported: set[tuple[int, str, int]] = set()

        def shape_done(item, outcome) -> None:
            """A shape is reported after each of its passes (its second block, a flagged timing
            timed again, a retry after running out of memory): `progress` hears every report and
            advances (its second argument, 1 or 0) on a shape's first only, so that a bar counts
            shapes (`steps`), not passes (a board's bar read 137/70 when its run was cut,
            2026-12-06)."""
            timing = (
                f": {ms_text(outcome.mean_ms)} ms, {outcome.runs} runs" if outcome.mean_ms is not None else ""
            )
            shape = (item.revision_id, outcome.set_name, outcome.index)
            first = shape not in reported
            reported.add(shape)
            progress(
                f"{item.revision_id} {item.label} {outcome.set_name}[{outcome.index}] {outcome.status}{timing}",
                int(first),
            )

        listener.shape_done = shape_done
    plan.run(TIMED_PHASES[mode], benched, listener)
    with plan.store.session() as session:
        _compare(session, benched, TIMED_PHASES[mode].run_kind, plan.environment.env_key)


def with_references(
    session: Session, revision_ids: list[int], notice: Callable[[str], None] | None = None
) -> list[PlannedRevision]:
    """The revisions asked for, then each task's reference revision (the latest of its lineage)
    when not asked for already. A store without it (fresh, before `harness seed`) gets the
    task's reference candidate registered first (harness.store.tasks.register_missing_reference),
    and `notice` hears one line saying so; a task without one is timed without a reference."""
    benched: list[PlannedRevision] = []
    for revision_id in dict.fromkeys(revision_ids):
        revision = get_revision(session, revision_id)
        load_task(revision.task)
        benched.append(PlannedRevision.of(revision))
    for task in dict.fromkeys(item.task for item in benched):
        reference = reference_revision_id(session, task)
        if reference is None:
            registered = register_missing_reference(session, task)
            if registered is None:
                continue
            reference = registered.revision.id
            if notice is not None:
                notice(
                    f"task {task} had no reference in the store: registered its reference candidate as "
                    f"submission {reference} ({registered.revision.lineage.name} r{registered.revision.number}) "
                    "to time it beside them"
                )
        existing = next((item for item in benched if item.revision_id == reference), None)
        if existing is not None:
            existing.is_reference = True
        else:
            benched.append(PlannedRevision.of(get_revision(session, reference), is_reference=True))
    return benched


def _compare(session: Session, benched: list[PlannedRevision], run_kind: str, env_key: str) -> None:
    """Each item's speedup and verdict against the reference, and its verdict against its parent,
    from the interleaved run (batch) its result came from only (harness.standing.batch: the
    reference and the parent timed in that run, by their runs or retimings there; none there,
    no comparison), and the timing flags of each revision."""
    batches = {item.run.batch for item in benched if item.run is not None and item.run.batch is not None}
    for task in dict.fromkeys(item.task for item in benched):
        spec = load_task(task)
        found = batches_in(session, task, run_kind, env_key, batches)
        for item in benched:
            run = item.run
            if item.task != task or run is None:
                continue
            item.flags = timing_flags(run.shapes)
            comparison = compare_in_run(found, run.batch, item.revision_id, item.parent_id, spec.ranking_by)
            if comparison is not None:
                item.speedup, item.speedup_note = comparison.speedup, comparison.speedup_note
                item.vs_reference, item.vs_parent = comparison.vs_reference, comparison.vs_parent
