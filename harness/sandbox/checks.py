"""`harness test`: check stored revisions, record one run per revision per environment, and the
table it prints.

Per revision: a completed run for (revision, task, mode, environment) is reused unless `force`;
otherwise the run is claimed (committed), the revision is evaluated outside any transaction,
and the result is written in one transaction. A failing or hostile revision is a status in its
run; the next revision is checked all the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from harness.environment import Environment, probe_environment
from harness.errors import HarnessError
from harness.sandbox.evaluation import MODES, default_shape_set, evaluate, resolve_device
from harness.sandbox.supervisor import SandboxLimits, sqlite_directory
from harness.store.models import Run
from harness.store.revisions import get_or_create_secret, get_revision, revision_code
from harness.store.runs import record_run, release_claim, reuse_or_claim, worker_name
from harness.store.session import Store
from harness.tasks import load_task, revision_secret

LEADERBOARD_SECRET = "leaderboard_seed"
RUN_MODES = {"test": "test", "leaderboard": "test-leaderboard"}
STATUS_STYLE = {"pass": "green", "wrong_answer": "red", "unsupported": "yellow"}


@dataclass
class CheckedRevision:
    revision_id: int
    label: str  # "lineage rN"
    run: Run | None  # None when another worker holds the claim
    reused: bool = False
    busy_with: str = ""


def check_revisions(
    store: Store,
    revision_ids: list[int],
    *,
    device: str | None = None,
    mode: str = "test",
    force: bool = False,
    limits: SandboxLimits | None = None,
    environment: Environment | None = None,
) -> list[CheckedRevision]:
    """Check each revision on `device` (default: cuda if torch sees a GPU, else cpu). Everything is
    validated first (device, mode, every id): bad input fails before any work or any write."""
    device = resolve_device(device)
    if mode not in MODES:
        raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(MODES)}")
    with store.session() as session:
        for revision_id in revision_ids:
            revision = get_revision(session, revision_id)
            load_task(revision.task)
    environment = environment or probe_environment(device)
    limits = store_limits(store, limits or SandboxLimits.from_settings())
    return [
        check_revision(store, revision_id, environment=environment, mode=mode, force=force, limits=limits)
        for revision_id in revision_ids
    ]


def store_limits(store: Store, limits: SandboxLimits) -> SandboxLimits:
    """`limits` with the store's own directory (a SQLite file's) hidden from the child too."""
    store_dir = sqlite_directory(store.engine.url.render_as_string(hide_password=False))
    if store_dir is None:
        return limits
    return limits.model_copy(update={"hidden_paths": [*limits.hidden_paths, store_dir]})


def check_revision(
    store: Store, revision_id: int, *, environment: Environment, mode: str, force: bool, limits: SandboxLimits
) -> CheckedRevision:
    worker = worker_name()
    run_mode = RUN_MODES[mode]
    with store.session() as session:
        revision = get_revision(session, revision_id)
        label = f"{revision.lineage.name} r{revision.number}"
        task = load_task(revision.task)
        code, filename = revision_code(revision), revision.filename
        shape_set = default_shape_set(environment.device)
        shapes = len(task.shapes(shape_set))
        ttl_s = limits.startup_timeout_s + limits.import_timeout_s + limits.call_timeout_s * shapes * 16
        found = reuse_or_claim(
            session, revision_id, task, run_mode, environment,
            shape_set=shape_set, worker=worker, ttl_s=ttl_s, force=force,
        )
        if found.run is None or found.reused:
            return CheckedRevision(revision_id, label, found.run, reused=found.reused, busy_with=found.busy_with)
        secret_seed = None
        if mode == "leaderboard":
            secret_seed = revision_secret(
                get_or_create_secret(session, LEADERBOARD_SECRET), revision.code_sha256
            )
        run = found.run
        run_id = run.id
    try:
        evaluation = evaluate(
            code, filename, task, device=environment.device, mode=mode, secret_seed=secret_seed, limits=limits
        )
    except BaseException:
        with store.session() as session:
            release_claim(session, run_id, worker)
        raise
    with store.session() as session:
        recorded = record_run(session, run_id, worker, evaluation)
    return CheckedRevision(
        revision_id, label, recorded, busy_with="" if recorded else "a worker that took over"
    )


def _shape_lines(run: Run) -> str:
    """One line per shape that ran: index, max abs error / relative L2 error (or its status)."""
    lines = []
    for shape in run.shapes:
        status = shape.check.get("status", "")
        if status == "not_run":
            continue
        numbers = "/".join(
            "-" if value is None else f"{value:.1e}"
            for value in (shape.check.get("max_abs_err"), shape.check.get("rel_l2"))
        )
        lines.append(f"{shape.index}: {numbers}" + ("" if status == "pass" else f" {status}"))
    return "\n".join(lines)


def render_checks(checked: list[CheckedRevision]) -> Table:
    """id, lineage rN, status, per shape (max abs error / relative L2 error), reason."""
    table = Table()
    table.add_column("id", no_wrap=True)
    table.add_column("revision", overflow="fold", min_width=12)
    table.add_column("status", no_wrap=True)
    table.add_column("shape: max abs/rel L2", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for item in checked:
        run = item.run
        if run is None:
            table.add_row(str(item.revision_id), item.label, "busy", "", f"claimed by {item.busy_with}")
            continue
        style = STATUS_STYLE.get(run.status or "", "magenta")
        status = f"[{style}]{run.status}[/{style}]" + ("\n(stored)" if item.reused else "")
        table.add_row(str(item.revision_id), item.label, status, _shape_lines(run), run.reason)
    return table


def render_summary(checked: list[CheckedRevision], device: str) -> str:
    """Which device and sandbox the results come from, and how many were stored already."""
    runs = [item.run for item in checked if item.run is not None]
    if not runs:
        return f"device: {device}"
    environment = runs[0].environment
    where = f"{device} ({environment.get('device_name', '')})"
    if device == "cpu":
        where += ", Triton kernels through the interpreter"
    lines = [f"device: {where}; shapes: {runs[0].details.get('shape_set', default_shape_set(device))}"]
    isolation = next((run.details["isolation"] for run in runs if run.details.get("isolation")), "")
    if isolation:
        lines.append(f"sandbox: {isolation}")
    reused = sum(item.reused for item in checked)
    if reused:
        lines.append(f"{reused} of {len(checked)} stored from an earlier check here (--force checks again)")
    return "\n".join(lines)
