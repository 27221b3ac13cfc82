"""Runs in the store: claimed before the work, written whole after it.

A run is keyed by (revision, task, task version, run kind, environment). A worker first claims the key (a row with
state `claimed`, its name `<host>:<pid>` and a claim expiry), commits, does the work outside any
transaction, and then writes the status, the per-shape results and state `done` in one
transaction. So a run is either complete or visibly in progress; a worker that died leaves a
claim that expires (at once when its process is gone from this host), and the next worker to
claim the key replaces it.

Untimed runs keep their finished shapes as they land (`record_shape`, one transaction each, into
the claimed row): a claim released before its run was written (Ctrl-C, a failed worker) keeps
them as a `partial` row, and the next worker to claim the key resumes from there
(`resumable_outcomes`): only the missing shapes are evaluated, and `record_run` writes the run
whole, the stored shapes with the new ones. A partial row is never a result (readers take
`done` runs only). Timed runs have no partial rows: their timings are compared within one
interleaved run, so a timed run is evaluated whole or not at all. A forced run claims a done row without touching its result (the row
stays `done` with a claim expiry): the old result is replaced only when the new one is written,
and a forced run that never finishes leaves it as it was.

Many writers: the unique key makes a second insert of the same run fail (caught in a savepoint:
the key is taken). Taking over an existing row happens under a lock: SQLite's `BEGIN IMMEDIATE`
(harness.store.session) serializes the writers; on PostgreSQL the row is read with `SELECT ...
FOR UPDATE SKIP LOCKED`, so a worker skips a row that another one is claiming or writing instead
of waiting for it, and `record_run` locks the row before it checks that the claim is still its own.

Run kinds (the `mode` column) are written by the plan (harness.plan.phases): `test` (public
seeds) and `test-leaderboard` (secret seeds, checks only) by the checked phase; `benchmark` and
`leaderboard` by the timed ones.

Every run records the judge that produced it (`judge_version`, harness.judge.JUDGE_VERSION,
written by `record_run`); a run of an older judge is not reused (`reuse_or_claim` claims it
again) and none of its kept shapes is resumed.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from harness.environment import Environment, process_is_gone
from harness.judge import JUDGE_VERSION
from harness.store.models import Run, ShapeResult, utcnow
from harness.tasks import load_task
from harness.verdicts import VERDICTS
from harness.wire import TIMING_STATISTICS, ShapeOutcome, shape_key

if TYPE_CHECKING:
    from harness.tasks import TaskSpec
    from harness.wire import Evaluation


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_is_gone(worker: str) -> bool:
    """Whether `worker` (a `worker_name()`) names a process of this host that no longer exists: its
    claim is void. A process of another host, or a pid now reused, counts as alive."""
    host, _, pid = worker.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and process_is_gone(int(pid))


def _claim_is_live(run: Run, now) -> bool:
    return (
        run.claim_expires_at is not None and run.claim_expires_at > now and not holder_is_gone(run.claimed_by)
    )


def _key(revision_id: int, task: str, mode: str, env_key: str):
    """The run's key; the task's version is the one of its files in use (harness.tasks.load_task)."""
    return (
        Run.revision_id == revision_id,
        Run.task == task,
        Run.task_version == load_task(task).version,
        Run.mode == mode,
        Run.env_key == env_key,
    )


def find_run(session: Session, revision_id: int, task: str, mode: str, env_key: str) -> Run | None:
    """The completed run for this key, with its shapes, or None (a claimed run is not a result)."""
    return session.scalar(
        select(Run)
        .where(*_key(revision_id, task, mode, env_key), Run.state == "done")
        .options(selectinload(Run.shapes))
    )


def passing_shape_means(
    session: Session, revision_id: int, task: str, mode: str, env_key: str
) -> dict[str, float]:
    """The mean of every shape that passed, timed, in the revision's completed run of this key,
    by shape (its parameters and seed, as JSON with sorted keys); empty when there is no such run.
    Flagged timings are left out (never ranked, never a yardstick)."""
    run = find_run(session, revision_id, task, mode, env_key)
    if run is None:
        return {}
    means = {}
    for shape in run.shapes:
        if shape.status == "pass" and shape.mean_ms is not None and not shape.timing_flags:
            means[shape_key(shape.shape)] = shape.mean_ms
    return means


def claim_holder(session: Session, revision_id: int, task: str, mode: str, env_key: str) -> str | None:
    """Who holds the claim on this key (None when nobody does)."""
    return session.scalar(
        select(Run.claimed_by).where(
            *_key(revision_id, task, mode, env_key), Run.claim_expires_at.is_not(None)
        )
    )


def claim_run(
    session: Session,
    revision_id: int,
    task: str,
    mode: str,
    environment: Environment,
    *,
    worker: str,
    ttl_s: float,
    replace_done: bool = False,
) -> Run | None:
    """Claim the run for this key for `worker`, until `ttl_s` from now. Returns the claimed row,
    or None when the key is done (and not `replace_done`) or held by a live claim. A claim whose
    expiry has passed, or whose process is gone from this host, is taken over; a done run is
    claimed as it is when `replace_done` (its result stays until `record_run` replaces it).
    Commit the session before doing the work, so that other workers see the claim."""
    now = utcnow()
    expires = now + timedelta(seconds=ttl_s)
    existing_id = session.scalar(select(Run.id).where(*_key(revision_id, task, mode, environment.env_key)))
    if existing_id is None:
        run = Run(
            revision_id=revision_id,
            task=task,
            task_version=load_task(task).version,
            mode=mode,
            env_key=environment.env_key,
            device=environment.device,
            device_name=environment.device_name,
            environment=environment.model_dump(),
            state="claimed",
            claimed_by=worker,
            claim_expires_at=expires,
            started_at=now,
        )
        try:
            with session.begin_nested():
                session.add(run)
        except IntegrityError:  # another worker inserted the same key first
            return None
        return run
    # Lock the row (PostgreSQL; SQLite's BEGIN IMMEDIATE already holds the write lock) and read its
    # latest committed state. None: another worker is claiming or recording it right now.
    existing = session.scalar(
        select(Run)
        .where(Run.id == existing_id)
        .with_for_update(skip_locked=True)
        .execution_options(populate_existing=True)
    )
    if existing is None:
        return None
    if existing.state == "done" and not replace_done:
        return None
    if _claim_is_live(existing, now):
        return None
    # Take the row over only if nobody else changed it since we read it. A done row keeps its
    # result (record_run replaces it); a claimed one has none.
    values = {"claimed_by": worker, "claim_expires_at": expires}
    if existing.state != "done":  # claimed (its claim expired) or partial: its shapes stay
        values.update(
            state="claimed",
            started_at=now,
            environment=environment.model_dump(),
            device_name=environment.device_name,
        )
    taken = session.execute(
        update(Run)
        .where(
            Run.id == existing.id,
            Run.state == existing.state,
            Run.claimed_by == existing.claimed_by,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if taken.rowcount != 1:
        return None
    session.expire(existing)
    return session.get(Run, existing.id)


@dataclass
class ReuseOrClaim:
    """What `reuse_or_claim` found: a finished run to reuse, a fresh claim, or another worker's."""

    run: Run | None  # the reused run, or the claimed row; None when another worker holds the key
    reused: bool = False
    busy_with: str = ""


# The time limits a run is recorded with: a timeout under a shorter one than today's is not final.
TIME_LIMITS = ("startup_timeout_s", "import_timeout_s", "call_timeout_s", "evaluation_timeout_s")


def timed_out_under_shorter_limits(run: Run, limits: dict[str, float] | None) -> bool:
    """Whether `run` ended in a timeout under a time limit shorter than the same limit in
    `limits` (a run recorded before limits were kept counts as final)."""
    recorded = (run.details or {}).get("limits") or {}
    if run.status != "timeout" or not limits or not recorded:
        return False
    return any(
        name in recorded and name in limits and float(recorded[name]) < float(limits[name])
        for name in TIME_LIMITS
    )


def judged_before(run: Run) -> bool:
    """Whether `run` was judged by an older judge than this harness's (harness.judge): its result
    is not reused, nor ranked beside the current judge's."""
    return (run.judge_version or 1) < JUDGE_VERSION


def covers_shapes(run: Run, task: TaskSpec, shape_set: str) -> bool:
    """Whether a stored run covers exactly the task's current shapes of `shape_set` and was judged
    with both verdicts (a changed task file, or a run from before the verdicts, is stale)."""
    current = [(shape_set, i, {**s.parameters, "seed": s.seed}) for i, s in enumerate(task.shapes(shape_set))]
    return [(r.set_name, r.index, r.shape) for r in run.shapes] == current and not _judged_before_verdicts(
        run
    )


def _judged_before_verdicts(run: Run) -> bool:
    """A run whose compared outputs have no verdicts was recorded before the two verdicts existed
    (db/migrations 0003): it is judged again."""
    return any(r.verdicts is None and r.status == "wrong_answer" and r.check.mismatches for r in run.shapes)


def reuse_or_claim(
    session: Session,
    revision_id: int,
    task: TaskSpec,
    mode: str,
    environment: Environment,
    *,
    shape_set: str,
    worker: str,
    ttl_s: float,
    force: bool,
    limits: dict[str, float] | None = None,
) -> ReuseOrClaim:
    """The finished run for this key when it covers the task's current shapes (unless `force`, it
    timed out under a shorter time limit than `limits`, or an older judge produced it); otherwise a claim for `worker`
    (replacing a stale or forced result); or, when another worker holds the key, who does. Commit
    before doing the claimed work."""
    existing = find_run(session, revision_id, task.name, mode, environment.env_key)
    if (
        existing is not None
        and not force
        and not judged_before(existing)
        and covers_shapes(existing, task, shape_set)
        and not timed_out_under_shorter_limits(existing, limits)
    ):
        return ReuseOrClaim(existing, reused=True)
    run = claim_run(
        session,
        revision_id,
        task.name,
        mode,
        environment,
        worker=worker,
        ttl_s=ttl_s,
        replace_done=existing is not None,
    )
    if run is None:
        holder = claim_holder(session, revision_id, task.name, mode, environment.env_key)
        return ReuseOrClaim(None, busy_with=holder or "another worker")
    if run.state == "claimed" and limits:  # what a partial run it leaves ran under (record_shape)
        run.details = {**(run.details or {}), "limits": _limits_of(limits)}
    return ReuseOrClaim(run)


def _limits_of(limits: dict[str, float]) -> dict[str, float]:
    return {name: limits[name] for name in TIME_LIMITS if name in limits}


def estimated_cost(
    session: Session, revision_id: int, task: str, env_key: str, prefer: tuple[str, ...]
) -> float:
    """Seconds the revision's latest finished run in this environment spent in its calls (the
    first call of each shape, with its compilation and autotuning, and the timed calls), its
    import, and one more for the process; from the first mode of `prefer` that has a run, else 1.
    Only to share work out evenly among workers."""
    for mode in prefer:
        run = find_run(session, revision_id, task, mode, env_key)
        if run is None:
            continue
        seconds = 1.0 + (run.compile_s or 0.0)
        for shape in run.shapes:
            seconds += shape.call_s or 0.0
            seconds += shape.warmup_s
            seconds += (shape.runs or 0) * (shape.mean_ms or 0.0) / 1000
        return seconds
    return 1.0


def release_claim(session: Session, run_id: int, worker: str) -> None:
    """Drop a claim that will not be completed (interrupted, or the worker itself failed), if it is
    still ours: a claimed row with finished shapes (`record_shape`) stays as a `partial` row for
    the next worker to resume, one without goes; a done row being replaced keeps its result."""
    has_shapes = select(ShapeResult.id).where(ShapeResult.run_id == run_id).exists()
    session.execute(
        update(Run)
        .where(Run.id == run_id, Run.state == "claimed", Run.claimed_by == worker, has_shapes)
        .values(state="partial", claim_expires_at=None, finished_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.execute(delete(Run).where(Run.id == run_id, Run.state == "claimed", Run.claimed_by == worker))
    session.execute(
        update(Run)
        .where(Run.id == run_id, Run.state == "done", Run.claimed_by == worker)
        .values(claim_expires_at=None)
        .execution_options(synchronize_session=False)
    )


def _verdict_columns(outcome) -> dict:
    """The shape's verdicts and accuracy figures as ShapeResult columns."""
    columns: dict = {
        "rel_l2": outcome.accuracy.rel_l2,
        "max_err_over_scale": outcome.accuracy.max_err_over_scale,
    }
    if outcome.verdicts is not None:
        for name in VERDICTS:
            verdict = outcome.verdicts.get(name)
            columns |= {
                f"{name}_status": verdict.status,
                f"{name}_failures": verdict.failures,
                f"{name}_reason": verdict.reason,
            }
    return columns


def _shape_result(outcome: ShapeOutcome) -> ShapeResult:
    """A shape outcome as its stored row (`stored_outcome` reads it back)."""
    return ShapeResult(
        set_name=outcome.set_name,
        index=outcome.index,
        shape=outcome.shape,
        status=outcome.status,
        reason=outcome.reason,
        call_s=outcome.call_s,
        passed=outcome.passed,
        check=outcome.check.model_copy(deep=True),
        times_ms=list(outcome.times_ms),
        **{name: getattr(outcome, name) for name in TIMING_STATISTICS},
        **_verdict_columns(outcome),
    )


def stored_outcome(result: ShapeResult) -> ShapeOutcome:
    """A stored shape as the outcome it was written from (`_shape_result`), untimed fields only:
    what a resumed evaluation takes over (`resumable_outcomes`)."""
    return ShapeOutcome(
        set_name=result.set_name,
        index=result.index,
        shape=result.shape,
        status=result.status,
        passed=result.passed,
        reason=result.reason,
        check=result.check.model_copy(deep=True),
        call_s=result.call_s,
        verdicts=result.verdicts,
        accuracy=result.accuracy,
    )


# The shape statuses kept as they land: an evaluation goes on after them. A shape that ends it
# (a crash, a timeout, an exception) is written with the whole run only; so is a shape killed
# by an interruption.
RESUMABLE_STATUSES = ("pass", "wrong_answer")


def record_shape(session: Session, run_id: int, worker: str, outcome: ShapeOutcome) -> bool:
    """Keep one finished untimed shape in the run `worker` claimed, in the caller's transaction,
    so that an interruption loses it not (`release_claim` keeps it as a partial row). Nothing is
    written (False) for a status that ends the evaluation, a shape stored already, a claim that
    is no longer this worker's, or a done run being replaced (`force`: its old result stays until
    `record_run`)."""
    if outcome.status not in RESUMABLE_STATUSES:
        return False
    run = session.get(Run, run_id, with_for_update=True, populate_existing=True)
    if run is None or run.state != "claimed" or run.claimed_by != worker or run.claim_expires_at is None:
        return False
    stored = session.scalar(
        select(ShapeResult.id).where(
            ShapeResult.run_id == run_id,
            ShapeResult.set_name == outcome.set_name,
            ShapeResult.index == outcome.index,
        )
    )
    if stored is not None:
        return False
    row = _shape_result(outcome)
    row.run_id = run_id
    session.add(row)
    session.flush()
    return True


def resumable_outcomes(session: Session, run: Run, task: TaskSpec, shape_set: str) -> list[ShapeOutcome]:
    """The shapes a claimed run kept from an interrupted evaluation (`record_shape`) that still
    stand: of the task's current shapes of `shape_set`, with a status an evaluation goes on after,
    judged with both verdicts by this judge. [] for a done run (a forced one is evaluated whole)."""
    if run.state != "claimed" or judged_before(run):
        return []
    current = {i: {**s.parameters, "seed": s.seed} for i, s in enumerate(task.shapes(shape_set))}
    results = session.scalars(
        select(ShapeResult).where(ShapeResult.run_id == run.id).order_by(ShapeResult.index)
    )
    return [
        stored_outcome(result)
        for result in results
        if result.set_name == shape_set
        and current.get(result.index) == result.shape
        and result.status in RESUMABLE_STATUSES
        and result.verdicts is not None
    ]


def discard_shapes(session: Session, run: Run) -> None:
    """Drop the shapes an interrupted evaluation kept in a claimed run (a forced run, or one of an
    older judge, starts over under this judge); a done run's shapes are its result, left to
    `record_run`."""
    if run.state == "claimed":
        session.execute(delete(ShapeResult).where(ShapeResult.run_id == run.id))
        run.judge_version = JUDGE_VERSION


def new_batch() -> str:
    """A fresh id for one interleaved run (a job's revisions evaluated together)."""
    return uuid.uuid4().hex[:16]


def record_run(
    session: Session,
    run_id: int,
    worker: str,
    evaluation: Evaluation,
    *,
    score_ms: float | None = None,
    batch: str | None = None,
    limits: dict[str, float] | None = None,
) -> Run | None:
    """Write the evaluation into the claimed run and mark it done, in the caller's transaction;
    `batch` names the interleaved run it came from (new_batch, one per job).
    Returns None (and writes nothing) when the claim is no longer this worker's: its claim expired
    and another worker took the key over, whose result counts instead."""
    run = session.get(
        Run, run_id, options=[selectinload(Run.shapes)], with_for_update=True, populate_existing=True
    )
    if run is None or run.claimed_by != worker or run.claim_expires_at is None:
        return None
    if run.shapes:  # a forced run's old result, gone only now, in the same transaction as the new one
        run.shapes.clear()
        session.flush()
    run.status = evaluation.status
    run.reason = evaluation.reason
    run.compile_s = evaluation.compile_s
    run.wall_s = evaluation.wall_s
    run.score_ms = score_ms
    run.batch = batch
    run.judge_version = JUDGE_VERSION
    run.details = {
        "filename": evaluation.filename,
        "code_sha256": evaluation.code_sha256,
        "shape_set": evaluation.shape_set,
        "startup_s": evaluation.startup_s,
        "child_reused": evaluation.child_reused,
        "started_at": evaluation.started_at,
        "ended_at": evaluation.ended_at,
        "isolation": evaluation.isolation,
        "autotuners": [tuner.model_dump() for tuner in evaluation.autotuners],
        "log_tail": evaluation.log_tail,
        **({"resumed_shapes": evaluation.resumed_shapes} if evaluation.resumed_shapes else {}),
        **({"limits": _limits_of(limits)} if limits else {}),
    }
    run.shapes = [_shape_result(outcome) for outcome in evaluation.shapes]
    run.state = "done"
    run.claim_expires_at = None
    run.finished_at = utcnow()
    session.flush()
    return run
