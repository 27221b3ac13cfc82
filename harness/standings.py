"""Standing drawn within one run: the timings of the revisions of one interleaved run (a batch:
one job of a timed phase, harness.plan.phases) and the speedup against the reference timed there.

A speedup or a faster/slower verdict compares timings of one run only: drift between runs (the
clock, the load, the GPU's temperature) is in no variance the comparison uses, and a stored
reference timing from another run once made a byte-different copy of the reference "1.79x the
reference". A revision's timing in a batch is its run of that batch, or its `Retiming` there (a
revision timed again beside others: the reference and the parents that join every job of a timed
phase, an evolution step's parent). Only one judge's results count (by default the current one,
harness.judge.JUDGE_VERSION).

Used by the leaderboard (and so `harness history` and evolution's story) and by `harness bench`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from harness.judge import JUDGE_VERSION
from harness.scoring import block_means, speedup
from harness.store.models import Retiming, Run

NO_REFERENCE_IN_RUN = "no reference in its run"  # in place of a speedup: the reports' words


def shape_key(shape: dict[str, Any]) -> str:
    return json.dumps(shape, sort_keys=True)


@dataclass
class BatchTiming:
    """One revision's timing in one batch: its status and score there, its per-call times by shape
    key (in timing order) and each shape's block means (scoring.block_means)."""

    revision_id: int
    status: str
    score_ms: float | None
    times: dict[str, list[float]] = field(default_factory=dict)
    blocks: list[list[float]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "pass" and self.score_ms is not None and bool(self.times)


def _from_run(run: Run) -> BatchTiming:
    timed = [shape for shape in run.shapes if shape.mean_ms is not None]
    return BatchTiming(
        run.revision_id,
        run.status or "",
        run.score_ms,
        {shape_key(shape.shape): list(shape.times_ms) for shape in timed},
        [block_means(shape.check) for shape in timed],
    )


def _from_retiming(row: Retiming) -> BatchTiming:
    return BatchTiming(
        row.revision_id,
        row.status,
        row.score_ms,
        {shape_key(item["shape"]): list(item["times_ms"]) for item in row.shapes},
        [list(item.get("means_ms") or []) for item in row.shapes],
    )


def batch_timings(
    session: Session,
    task: str,
    mode: str | None,
    env_key: str,
    batches: Iterable[str] | None = None,
    *,
    judge: int = JUDGE_VERSION,
) -> dict[str, dict[int, BatchTiming]]:
    """batch -> revision id -> its timing there, for the done runs and retimings of `task` in one
    environment and run kind by the judge of version `judge` (`batches`: only these). A
    revision's run of a batch is preferred to a retiming there."""
    wanted = None if batches is None else sorted({batch for batch in batches if batch})
    found: dict[str, dict[int, BatchTiming]] = defaultdict(dict)
    if mode is None or wanted == []:
        return found
    retimings = select(Retiming).where(
        Retiming.task == task,
        Retiming.mode == mode,
        Retiming.env_key == env_key,
        Retiming.judge_version == judge,
    )
    runs = (
        select(Run)
        .where(
            Run.task == task,
            Run.mode == mode,
            Run.env_key == env_key,
            Run.state == "done",
            Run.judge_version == judge,
            Run.batch.is_not(None),
        )
        .options(selectinload(Run.shapes))
    )
    if wanted is not None:
        retimings = retimings.where(Retiming.batch.in_(wanted))
        runs = runs.where(Run.batch.in_(wanted))
    for row in session.scalars(retimings):
        found[row.batch][row.revision_id] = _from_retiming(row)
    for run in session.scalars(runs):
        found[run.batch][run.revision_id] = _from_run(run)
    return found


def reference_in_run(timings: dict[int, BatchTiming], reference_ids: list[int]) -> BatchTiming | None:
    """The reference's passing timing among one batch's `timings`: of its lineage's revisions
    (`reference_ids`, oldest first) the latest one timed there."""
    return next(
        (timings[rid] for rid in reversed(reference_ids) if rid in timings and timings[rid].passed), None
    )


def speedup_in_run(reference: BatchTiming | None, own: BatchTiming | None) -> float | None:
    """The reference's score over `own`'s, both of one batch and timed on the same shapes; None
    when there is no such reference timing (NO_REFERENCE_IN_RUN)."""
    if reference is None or own is None or not own.passed or not reference.passed:
        return None
    if sorted(reference.times) != sorted(own.times) or not own.score_ms:
        return None
    return speedup(reference.score_ms, own.score_ms)
