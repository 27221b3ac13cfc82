"""Standing drawn within one run: the timings of the revisions of one interleaved run (a batch:
one job of a timed phase, harness.plan.phases), the speedup against the reference timed there,
and the comparisons (faster, slower, same within noise) with the reference and the parent there.

A speedup or a faster/slower verdict compares timings of one run only: drift between runs (the
clock, the load, the GPU's temperature) is in no variance the comparison uses, and a stored
reference timing from another run once made a byte-different copy of the reference "1.79x the
reference". A revision's timing in a batch is its run of that batch, or its `Retiming` there (a
revision timed again beside others: the reference and the parents that join every job of a timed
phase, an evolution step's parent). Only one judge's results count (by default the current one,
harness.judge.JUDGE_VERSION).

Used by the leaderboard (harness.standing.board, and so `harness history` and evolution) and by
`harness bench` (`compare_in_run`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from harness.judge import JUDGE_VERSION
from harness.scoring import BlockSpread, block_means, block_spread, blocks_joined, compare, speedup
from harness.store.models import Retiming, Run, ShapeResult
from harness.store.revisions import reference_revision_ids
from harness.wire import shape_key

NO_REFERENCE_IN_RUN = "no reference in its run"  # in place of a speedup: the reports' words


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
        {shape_key(item.shape): list(item.times_ms) for item in row.shapes},
        [list(item.means_ms) for item in row.shapes],
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


@dataclass
class Batches:
    """What the comparisons need of the interleaved runs of one task, environment and run kind:
    each batch's timings by revision (runs and retimings), the reference's timing in it, and its
    pooled variance of a block's log mean (scoring.block_spread, over every run and retiming of
    the batch)."""

    timings: dict[str, dict[int, BatchTiming]]
    reference: dict[str, BatchTiming]
    spread: dict[str, BlockSpread]

    def speedup(self, batch: str | None, revision_id: int) -> float | None:
        """`revision_id`'s speedup against the reference timed in `batch` (speedup_in_run)."""
        found = self.timings.get(batch or "", {})
        return speedup_in_run(self.reference.get(batch or ""), found.get(revision_id))

    def verdict(
        self, batch: str, own: BatchTiming, other: BatchTiming, keys: list[str], ranking_by: str
    ) -> str:
        """scoring.compare's verdict of `own` against `other`, both timed in `batch`, on the
        per-call times of the shapes `keys` (in that order), with the batch's pooled block
        variance."""
        return compare(
            [own.times[key] for key in keys],
            [other.times[key] for key in keys],
            ranking_by,
            spread=self.spread.get(batch),
            blocks=(blocks_joined(own.blocks), blocks_joined(other.blocks)),
        ).verdict


def batches_in(
    session: Session,
    task: str,
    mode: str | None,
    env_key: str,
    batches: Iterable[str] | None = None,
    *,
    judge: int = JUDGE_VERSION,
) -> Batches:
    """The batches of `task` in one environment and run kind by the judge of version `judge`
    (`batches`: only these), as batch_timings finds them, with the reference of each."""
    timings = batch_timings(session, task, mode, env_key, batches, judge=judge)
    references = reference_revision_ids(session, task)
    return Batches(
        timings,
        {
            batch: reference
            for batch, found in timings.items()
            for reference in [reference_in_run(found, references)]
            if reference is not None
        },
        {
            batch: block_spread([group for timing in found.values() for group in timing.blocks])
            for batch, found in timings.items()
        },
    )


@dataclass
class RunComparison:
    """A revision against the reference and its parent in the batch of its own run."""

    speedup: float | None = None  # reference score / score
    speedup_note: str | None = None  # why there is no speedup (NO_REFERENCE_IN_RUN)
    vs_reference: str | None = None  # scoring.compare verdict
    vs_parent: str | None = None


def compare_in_run(
    batches: Batches, batch: str | None, revision_id: int, parent_id: int | None, ranking_by: str
) -> RunComparison | None:
    """`harness bench`'s comparisons of `revision_id`, whose run is of `batch`: its speedup and
    verdict against the reference timed there (none there: NO_REFERENCE_IN_RUN; the reference
    itself has no verdict against itself), and its verdict against its parent when the parent
    passed there on the same shapes. None when it has no passing timing there."""
    found = batches.timings.get(batch or "", {})
    own = found.get(revision_id)
    if batch is None or own is None or not own.passed:
        return None
    keys = list(own.times)
    reference = batches.reference.get(batch)
    comparison = RunComparison(speedup=batches.speedup(batch, revision_id))
    if comparison.speedup is None or reference is None:
        comparison.speedup_note = NO_REFERENCE_IN_RUN
    elif reference.revision_id != revision_id:
        comparison.vs_reference = batches.verdict(batch, own, reference, keys, ranking_by)
    parent = found.get(parent_id) if parent_id is not None else None
    if parent is not None and parent.passed and sorted(parent.times) == sorted(own.times):
        comparison.vs_parent = batches.verdict(batch, own, parent, keys, ranking_by)
    return comparison


def timing_flags(shapes: Iterable[ShapeResult]) -> list[str]:
    """Every flag a timing of these shapes carries (harness.timing), sorted: a flagged timing is
    never ranked."""
    return sorted({flag for shape in shapes for flag in shape.timing_flags})


def score_in_batch(session: Session, batch: str | None, revision_id: int, env_key: str) -> float | None:
    """A revision's score in the interleaved run `batch`: its run of that batch, or its retiming
    there."""
    if batch is None:
        return None
    run = session.scalar(select(Run).where(Run.revision_id == revision_id, Run.batch == batch))
    if run is not None:
        return run.score_ms
    retiming = session.scalar(
        select(Retiming).where(
            Retiming.revision_id == revision_id, Retiming.batch == batch, Retiming.env_key == env_key
        )
    )
    return retiming.score_ms if retiming is not None else None
