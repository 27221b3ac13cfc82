"""`harness test`: check stored revisions, one run per revision per environment (the checked
phase, harness.plan.phases; its table is harness.report.evaluations).

Per revision: a completed run for (revision, task, run kind, environment) is reused unless
`force`; otherwise the run is claimed (committed). The claimed revisions are evaluated outside any
transaction on an executor (harness.executors: this process, one worker per GPU, or Ray),
side by side (settings.check_parallelism), and each evaluation is written as it ends. A failing or
hostile revision is a status in its run; the next revision is checked all the same.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import Executor, InProcess
from harness.plan.phases import CHECK_PHASES, PhaseListener, PhaseRun, PlannedRevision, store_limits
from harness.sandbox.limits import SandboxLimits
from harness.store.revisions import get_revision
from harness.store.runs import worker_name
from harness.store.session import Store
from harness.tasks import load_task

CheckProgress = Callable[[str, int], None]  # (line, shapes done)


def check_revisions(
    store: Store,
    revision_ids: list[int],
    *,
    device: str | None = None,
    mode: str = "test",
    force: bool = False,
    limits: SandboxLimits | None = None,
    environment: Environment | None = None,
    executor: Executor | None = None,
    progress: CheckProgress | None = None,
    keep_children: bool = False,
) -> list[PlannedRevision]:
    """Check each revision on `device` (default: cuda if torch sees a GPU, else cpu), on the
    executor (default: this process), the revisions interleaved shape by shape so that each
    shape's reference is computed once. `mode` is the seed policy: test (public seeds) or
    leaderboard (the secret seed). Everything is validated first (device, mode, every id): bad
    input fails before any work or any write. `progress` hears (line, shapes done) per shape that
    ran, and once per revision for the shapes it did not run (stored, busy, stopped).
    `keep_children`: a timed phase follows on the same executor, which may keep the children
    that passed for it (EvaluationRequest.keep_child)."""
    executor = executor or InProcess()
    device = executor.resolve_device(device)
    if mode not in CHECK_PHASES:
        raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(CHECK_PHASES)}")
    with store.session() as session:
        for revision_id in revision_ids:
            revision = get_revision(session, revision_id)
            load_task(revision.task)
    environment = environment or executor.probe(device)
    limits = store_limits(store, limits or SandboxLimits.from_settings())
    with store.session() as session:
        checked = [PlannedRevision.of(get_revision(session, i)) for i in dict.fromkeys(revision_ids)]
    plan = PhaseRun(store, executor, environment, limits, worker_name(), force=force)
    run_checks(plan, checked, mode, progress, keep_children=keep_children)
    return checked


def run_checks(
    plan: PhaseRun,
    checked: list[PlannedRevision],
    mode: str = "test",
    progress: CheckProgress | None = None,
    *,
    keep_children: bool = False,
    activity: Callable[[str, str], None] | None = None,
) -> None:
    """The checked phase over validated, distinct revisions (check_revisions, the tournament);
    `activity` hears (revision label, what its evaluation does now)."""
    progress = progress or (lambda line, steps: None)
    listener = PhaseListener(
        not_dispatched=lambda item: progress(f"{item.label}: {item.stored_or_busy()}", item.shape_count),
        shape_done=lambda item, outcome: progress(
            f"{item.label} {outcome.set_name}[{outcome.index}] {outcome.status}", 1
        ),
        recorded=lambda item, evaluation: progress(
            f"{item.label}: {evaluation.status}", sum(s.status == "not_run" for s in evaluation.shapes)
        ),
        worker_failed=lambda item: progress(f"{item.label}: worker failed", item.shape_count),
    )
    if activity is not None:
        listener.activity = lambda item, now: activity(item.label, now)
    plan.run(CHECK_PHASES[mode], checked, listener, keep_children=keep_children)
