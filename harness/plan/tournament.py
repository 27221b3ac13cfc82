"""The tournament: every registered revision of a task that has no result in this environment yet,
correctness first, then timing for those that pass, then the leaderboard recheck.

Phases by mode: `test` checks only; `benchmark` checks, then times the passing revisions with the
task's reference, interleaved shape by shape (harness.plan.bench); `leaderboard` adds the
recheck with secret seeds, a fresh seed per timed call and every timed output checked.

Work runs on an executor (harness.executors): this process, one worker per GPU (`--gpus`), or Ray
tasks (`--executor ray`); the parent alone writes to the store. When the benchmark phase follows,
a revision that passed its checks keeps its sandboxed child (ready, its candidate imported) for
its benchmark run on the same process: no second start, torch import and candidate import. The
leaderboard recheck always starts fresh children. Each (revision, phase) is a run in
the store, claimed before the work and written whole after it
(harness.store.runs), so an interrupted tournament leaves no half result: Ctrl-C releases its
claims at once, a killed process's claims expire, and the next tournament reuses every finished
run and does the rest. The test phase's finished shapes survive too (a partial run: the next
tournament checks only its missing shapes); a timed phase is redone whole, as its timings are
compared within one run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.config import get_settings
from harness.devices import default_shape_set
from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import Executor, InProcess
from harness.plan.bench import run_bench, with_references
from harness.plan.checks import run_checks
from harness.plan.phases import PhaseListener, PhaseRun, PlannedRevision, store_limits
from harness.sandbox.limits import SandboxLimits
from harness.store.revisions import get_revision, list_revisions
from harness.store.runs import worker_name
from harness.store.session import Store
from harness.tasks import load_task
from harness.timing import StoppingRule

if TYPE_CHECKING:
    from harness.wire import ShapeOutcome

PHASES = {
    "test": ("test",),
    "benchmark": ("test", "benchmark"),
    "leaderboard": ("test", "benchmark", "leaderboard"),
}


@dataclass
class PhaseResult:
    phase: str
    revision_ids: list[int]
    evaluated: int = 0  # revisions evaluated now (not reused from the store)
    resumed_shapes: int = 0  # of those, shapes kept from an interrupted evaluation, not run again
    reused: int = 0
    busy: int = 0  # held by another worker's claim
    passed: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # evaluations whose worker failed


@dataclass
class TournamentResult:
    task: str
    device: str
    mode: str
    environment: Environment
    phases: list[PhaseResult] = field(default_factory=list)


class TournamentProgress:
    """What the tournament tells its caller: a phase starts with a number of steps, steps end."""

    def start_phase(self, phase: str, steps: int) -> None: ...

    def step(self, description: str, advance: int = 1) -> None: ...

    def set_steps(self, steps: int) -> None:
        """The phase's steps as dispatched, when they differ from its start's estimate: revisions
        reused drop out, the revisions timed again beside the new ones join."""

    def activity(self, label: str, activity: str) -> None:
        """What a revision's evaluation does now: building, checking, timing, waiting (for its
        turn, interleaved) or done."""

    def end_phase(self) -> None: ...


def tournament_revisions(store: Store, task: str, only: list[int] | None) -> list[int]:
    """The task's revisions in registration order (`only`: just these, each checked to exist and
    to belong to the task)."""
    with store.session() as session:
        ids = [revision.id for revision in list_revisions(session, task=task)]
    if not only:
        return ids
    unknown = [revision_id for revision_id in only if revision_id not in ids]
    if unknown:
        raise HarnessError(f"no revision {unknown[0]} of task {task} in the store")
    return list(dict.fromkeys(only))


def run_tournament(
    store: Store,
    *,
    task: str = "conv2d_v2",
    device: str | None = None,
    mode: str = "benchmark",
    only: list[int] | None = None,
    force: bool = False,
    limits: SandboxLimits | None = None,
    rule: StoppingRule | None = None,
    progress: TournamentProgress | None = None,
    executor: Executor | None = None,
    stop_at_failure: bool = False,
) -> TournamentResult:
    """Run the tournament's phases for `mode` on `device` (default: cuda when a GPU is there) on
    the executor (default: this process). When a worker fails (not a candidate: a lost process or
    node), the phase's other results are stored, the failed ones stay to do, and HarnessError
    says so after the phase. `stop_at_failure`: each revision's checks stop at its first shape
    that fails (`run_children`)."""
    if mode not in PHASES:
        raise HarnessError(f"unknown mode {mode!r}: use {', '.join(PHASES)}")
    executor = executor or InProcess()
    spec = load_task(task)
    revision_ids = tournament_revisions(store, spec.name, only)
    if not revision_ids:
        raise HarnessError(
            f"no revisions of task {spec.name} registered: run `harness seed` or `harness register`"
        )
    device = executor.resolve_device(device)
    progress = progress or TournamentProgress()
    environment = executor.probe(device)
    limits = store_limits(store, limits or SandboxLimits.from_settings())
    result = TournamentResult(task=spec.name, device=device, mode=mode, environment=environment)

    rule = rule or StoppingRule(budget_s=get_settings().shape_budget(device))
    plan = PhaseRun(
        store,
        executor,
        environment,
        limits,
        worker_name(),
        force=force,
        rule=rule,
        stop_at_failure=stop_at_failure,
    )

    candidates = revision_ids
    for phase in PHASES[mode]:
        if not candidates:
            break
        keep = phase == "test" and len(PHASES[mode]) > 1  # the benchmark phase may adopt the passing children
        outcome = _run_phase(plan, phase, candidates, progress, keep_children=keep)
        result.phases.append(outcome)
        if outcome.failures:
            raise HarnessError(
                f"{phase}: {len(outcome.failures)} evaluations got no result ({outcome.failures[0]}); "
                "the others are stored: run the tournament again to do the rest"
            )
        candidates = outcome.passed
    return result


def _run_phase(
    plan: PhaseRun, phase: str, revision_ids: list[int], progress: TournamentProgress, *, keep_children: bool
) -> PhaseResult:
    """One phase: the checked one (`test`) or a timed one (the task's reference joins), its steps
    the shapes of every revision in it."""
    outcome = PhaseResult(phase, revision_ids)
    timed = phase != "test"
    shape_set = default_shape_set(plan.environment.device, timed=timed)
    with plan.store.session() as session:
        if timed:
            items = with_references(session, revision_ids)
        else:
            items = [PlannedRevision.of(get_revision(session, revision_id)) for revision_id in revision_ids]
    progress.start_phase(phase, sum(len(load_task(item.task).shapes(shape_set)) for item in items))
    if timed:
        run_bench(plan, items, phase, progress.step, progress.activity, steps=progress.set_steps)
    else:
        run_checks(
            plan, items, "test", progress.step, keep_children=keep_children, activity=progress.activity
        )
    for item in items:
        _count(outcome, item)
    progress.end_phase()
    return outcome


def _count(outcome: PhaseResult, item: PlannedRevision) -> None:
    if item.run is None:
        if item.failed:
            outcome.failures.append(f"{item.revision_id} {item.label}: {item.busy_with}")
        else:
            outcome.busy += 1
        return
    if item.reused:
        outcome.reused += 1
    else:
        outcome.evaluated += 1
        outcome.resumed_shapes += item.resumed
    if item.run.status == "pass" and item.revision_id not in outcome.passed:
        outcome.passed.append(item.revision_id)


def run_children(
    store: Store,
    children: list[tuple[int, int]],
    *,
    task: str,
    device: str | None,
    rule: StoppingRule,
    landed: Callable[[list[int]], None],
    progress: Callable[[int, str], None] = lambda revision_id, state: None,
    executor: Executor | None = None,
) -> None:
    """An experiment's (child, parent) pairs (harness.evolve.judging): the test phase over the
    children, then the timed phase (`benchmark`) over those that passed, each beside its parent
    and the task's reference (harness.plan.phases: the same claims, limits and records as a
    tournament's; a parent's children share one job). `landed` hears the children whose
    evaluation is complete: the failing ones after the checks, the others as the job that timed
    them is recorded (their parent's timing there included), or as found stored; `progress`
    hears (child id, what its evaluation does now)."""
    child_ids = [child for child, _ in children]
    parent_of = dict(children)
    shortcuts = get_settings().child_shortcuts
    for child in child_ids:
        progress(child, "checking")
    with store.session() as session:
        label_of = {}
        for child in child_ids:
            revision = get_revision(session, child)
            label_of[revision.label] = child

    class CheckProgress(TournamentProgress):
        def step(self, description: str, advance: int = 1) -> None:
            for label, child in label_of.items():
                if description.startswith(label):
                    progress(child, f"checking: {description[len(label) :].lstrip(': ')}")

    own_executor = executor is None
    executor = executor or InProcess()
    items: list[PlannedRevision] = []
    try:
        checked = run_tournament(
            store,
            task=task,
            device=device,
            mode="test",
            only=child_ids,
            executor=executor,
            progress=CheckProgress(),
            stop_at_failure=shortcuts,  # a child's checks cost what its change needs (issue 31)
        )
        passed = [child for child in child_ids if checked.phases and child in checked.phases[0].passed]
        landed([child for child in child_ids if child not in passed])
        if not passed:
            return
        limits = store_limits(store, SandboxLimits.from_settings())
        # a child clearly slower than its parent on a shape stops timing it early (issue 31)
        plan = PhaseRun(
            store, executor, checked.environment, limits, worker_name(), rule=rule, stop_when_slower=shortcuts
        )
        with store.session() as session:
            items = with_references(session, passed)
        for item in items:
            item.parent_id = parent_of.get(item.revision_id, item.parent_id)

        def children_of(found: list[PlannedRevision]) -> list[int]:
            return [item.revision_id for item in found if item.revision_id in parent_of]

        def shape_done(item: PlannedRevision, outcome: ShapeOutcome) -> None:
            timing = f" {outcome.mean_ms:.4g} ms" if outcome.mean_ms is not None else ""
            state = f"{outcome.set_name}[{outcome.index}] {outcome.status}{timing}"
            progress(item.revision_id, f"timing beside its parent: {state}")

        listener = PhaseListener(
            not_dispatched=lambda item: landed(children_of([item])),  # stored already, or busy elsewhere
            shape_done=shape_done,
            job_recorded=lambda found: landed(children_of(found)),
        )
        run_bench(plan, items, "benchmark", listener=listener)
    finally:
        if own_executor:
            executor.close()
    failures = [item.busy_with for item in items if item.failed]
    if failures:
        raise HarnessError(f"timing the children beside their parents failed: {failures[0]}")
