"""`harness test`: check stored revisions, record one run per revision per environment (the
table it prints: harness.report.evaluations).

Per revision: a completed run for (revision, task, mode, environment) is reused unless `force`;
otherwise the run is claimed (committed). The claimed revisions are evaluated outside any
transaction on an executor (harness.executors: this process, one worker per GPU, or Ray),
interleaved shape by shape, and each job's results are written in one transaction. A failing or hostile revision is a status in its
run; the next revision is checked all the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import EvaluationRequest, Executor, InProcess, evaluate_and_record
from harness.sandbox.devices import MODES, default_shape_set
from harness.sandbox.supervisor import SandboxLimits, sqlite_directory
from harness.store.models import Revision, Run
from harness.store.revisions import get_or_create_secret, get_revision, revision_code
from harness.store.runs import estimated_cost, reuse_or_claim, worker_name
from harness.store.session import Store
from harness.tasks import load_task, revision_secret

LEADERBOARD_SECRET = "leaderboard_seed"
RUN_MODES = {"test": "test", "leaderboard": "test-leaderboard"}
COST_SOURCES = ("test", "test-leaderboard", "benchmark", "leaderboard")  # earlier runs, to share work out


@dataclass
class CheckedRevision:
    revision_id: int
    label: str  # "lineage rN"
    run: Run | None  # None when another worker holds the claim (or its worker failed)
    reused: bool = False
    busy_with: str = ""
    failed: bool = False  # the worker that evaluated it failed (not the candidate): no result
    run_id: int | None = None  # the run claimed here
    shape_count: int = 0


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
    progress: Callable[[str, int], None] | None = None,
    keep_children: bool = False,
) -> list[CheckedRevision]:
    """Check each revision on `device` (default: cuda if torch sees a GPU, else cpu), on the
    executor (default: this process), the revisions interleaved shape by shape so that each
    shape's reference is computed once. Everything is validated first (device, mode, every id):
    bad input fails before any work or any write. `progress` hears (line, shapes done) per shape
    that ran, and once per revision for the shapes it did not run (stored, busy, stopped).
    `keep_children`: a timed phase follows on the same executor, which may keep the children
    that passed for it (EvaluationRequest.keep_child)."""
    executor = executor or InProcess()
    device = executor.resolve_device(device)
    if mode not in MODES:
        raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(MODES)}")
    with store.session() as session:
        for revision_id in revision_ids:
            revision = get_revision(session, revision_id)
            load_task(revision.task)
    environment = environment or executor.probe(device)
    limits = store_limits(store, limits or SandboxLimits.from_settings())
    worker = worker_name()
    progress = progress or (lambda line, steps: None)
    checked: list[CheckedRevision] = []
    requests: dict[int, EvaluationRequest] = {}
    with store.session() as session:
        for revision_id in dict.fromkeys(revision_ids):
            item, request = _claim_check(session, revision_id, environment, mode, force, limits, worker)
            if request is not None and keep_children and getattr(executor, "keeps_children", False):
                request.keep_child = True
            checked.append(item)
            if request is None:
                progress(f"{item.label}: {_stored_or_busy(item)}", item.shape_count)
            else:
                requests[request.key] = request
    labels = {request.key: request.label for request in requests.values()}
    dispatched = evaluate_and_record(
        store,
        executor,
        environment,
        list(requests.values()),
        worker=worker,
        on_shape=lambda key, outcome: progress(
            f"{labels[key]} {outcome.set_name}[{outcome.index}] {outcome.status}", 1
        ),
        on_recorded=lambda request, evaluation: progress(
            f"{request.label}: {evaluation.status}", sum(s.status == "not_run" for s in evaluation.shapes)
        ),
    )
    for item in checked:
        if item.run_id is None:
            continue
        if item.run_id in dispatched.failed:
            item.busy_with = f"no result: {dispatched.failed[item.run_id]}"
            item.failed = True
            progress(f"{item.label}: worker failed", item.shape_count)
            continue
        item.run = dispatched.recorded.get(item.run_id)
        if item.run is None:
            item.busy_with = "a worker that took over"
    return checked


def _stored_or_busy(item: CheckedRevision) -> str:
    if item.run is None:
        return f"busy ({item.busy_with})"
    return f"{item.run.status} (stored)"


def store_limits(store: Store, limits: SandboxLimits) -> SandboxLimits:
    """`limits` with the store hidden from the child too: a SQLite file's directory, or the unix
    socket directories of a PostgreSQL server (harness.store.session.postgres_socket_directories;
    a socket under /tmp is hidden with /tmp by the supervisor)."""
    from harness.store.session import postgres_socket_directories

    url = store.engine.url
    store_dir = sqlite_directory(url.render_as_string(hide_password=False))
    hidden = [store_dir] if store_dir is not None else postgres_socket_directories(url)
    if not hidden:
        return limits
    return limits.model_copy(update={"hidden_paths": [*limits.hidden_paths, *hidden]})


def leaderboard_seed(session: Session, revision: Revision) -> int:
    """The revision's secret seed for leaderboard mode (the store's secret, combined with its code)."""
    return revision_secret(get_or_create_secret(session, LEADERBOARD_SECRET), revision.code_sha256)


def _claim_check(
    session: Session,
    revision_id: int,
    environment: Environment,
    mode: str,
    force: bool,
    limits: SandboxLimits,
    worker: str,
) -> tuple[CheckedRevision, EvaluationRequest | None]:
    """The revision's stored run, another worker's claim, or a new claim and its request."""
    revision = get_revision(session, revision_id)
    label = f"{revision.lineage.name} r{revision.number}"
    task = load_task(revision.task)
    shape_set = default_shape_set(environment.device)
    shapes = len(task.shapes(shape_set))
    ttl_s = limits.startup_timeout_s + limits.import_timeout_s + limits.call_timeout_s * shapes * 16
    cost = estimated_cost(session, revision_id, task.name, environment.env_key, prefer=COST_SOURCES)
    found = reuse_or_claim(
        session, revision_id, task, RUN_MODES[mode], environment,
        shape_set=shape_set, worker=worker, ttl_s=ttl_s, force=force,
    )
    item = CheckedRevision(revision_id, label, found.run, reused=found.reused, busy_with=found.busy_with)
    item.shape_count = shapes
    if found.run is None or found.reused:
        return item, None
    secret_seed = leaderboard_seed(session, revision) if mode == "leaderboard" else None
    item.run_id, item.run = found.run.id, None
    request = EvaluationRequest.make(
        found.run.id, revision_code(revision), revision.filename, task.name,
        device=environment.device, limits=limits, label=label, mode=mode, secret_seed=secret_seed, cost=cost,
    )
    return item, request
