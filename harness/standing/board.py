"""The leaderboard's standing: every revision of a task in one environment, ranked by score
(harness.report.leaderboard renders it: the table, markdown, HTML and JSON).

What it reads, and why:
- Completed runs only (`state == "done"`): a claimed run is work in progress, never a result.
- One environment at a time (a run's `env_key`: device name, driver, torch, triton, harness
  version), by default the environment of the task's most recent completed run. Times from two
  environments are not comparable, so CPU results are never ranked with GPU results.
- Per revision, its runs in that environment, most trusted mode first (leaderboard, benchmark,
  test-leaderboard, test). A failed run in any mode is the revision's status (a leaderboard
  recheck that catches a cached output outranks an earlier pass).
- Both verdicts (harness.verdicts) per revision, over every shape of those runs; the ranking
  verdict (the task's `verdict`, or `--verdict`) must pass for a revision to be ranked. A
  revision that fails it but passes the other one was timed: it is listed, not ranked, with the
  failing verdict's reason.
- One timed mode per board: the most trusted mode that any revision was timed in. Scores, the
  reference's included, come from runs of that mode only, so a benchmark-mode score is never
  compared with a leaderboard-mode one; a revision timed only in another mode is not ranked.
- A flagged timing (harness.timing: the parent's clock disagrees, below the physical floor) is
  never ranked: the revision is listed as `flagged` with its flags.
- The reference (the lineage named after the task's `reference_candidate` file, for conv2d_v2
  `conv2d_v2_reference`) is ranked like any revision, marked in the table, markdown and HTML;
  `reference_ms` is its own score.
- One judge per board (harness.judge): the newest judge version of the environment's runs.
  A revision whose runs there are an older judge's is not ranked (`not_run`, the reason says
  so); the next tournament runs it again.
- `speedup_vs_reference` is each revision's score against the reference timed in the same
  interleaved run as the ranked result (harness.standing.batch: the reference's run of that batch,
  or its retiming there), never against a timing of another run: drift between runs would move
  it while neither score changed. A revision timed without the reference has no speedup;
  `speedup_note` says why (`no reference in its run`), and every format shows `-` with a legend.

- `vs_parent` (faster, slower, same within noise) compares timings from one interleaved run only
  (a job: `Run.batch`): the parent's run of the child's batch, or the parent timed again beside
  the child in it (`retimings`, written by `harness evolve`); the spread between the blocks of
  calls of every revision of that run widens the test (scoring.block_spread); two runs are
  never compared, since drift between runs is in neither variance the test uses.

`Leaderboard.model_dump_json()` is the `--format json` contract of issue 5, field for field; the
per-call times behind `vs_parent` stay out of it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from harness.errors import HarnessError
from harness.judge import JUDGE_VERSION
from harness.scoring import rank_by_score, score
from harness.standing.batch import NO_REFERENCE_IN_RUN, Batches, batches_in, shape_key, timing_flags
from harness.store.models import Revision, Run, ShapeResult
from harness.store.revisions import list_revisions, reference_lineage_name
from harness.tasks import load_task
from harness.tasks.spec import shape_label
from harness.verdicts import VERDICTS, Accuracy, VerdictName

# Most trusted first: timing with secret seeds and every output checked, timing, checks with
# secret seeds, checks with the public seeds (the modes harness.store.runs lists).
MODE_PRIORITY = ("leaderboard", "benchmark", "test-leaderboard", "test")
NOT_RUN = "not_run"
FLAGGED = "flagged"


class VerdictSummary(BaseModel):
    """One verdict of a revision or a shape: `pass`, `fail`, or `not_checked` (no output was
    compared: the run failed before, or was recorded before the verdicts existed)."""

    status: Literal["pass", "fail", "not_checked"]
    reason: str = ""


NOT_CHECKED = VerdictSummary(status="not_checked")


class ShapeTiming(BaseModel):
    """One benchmark shape of a timed run (`shape` as the task file gives it)."""

    shape: dict[str, Any]
    mean_ms: float | None
    err_ms: float | None
    runs: int | None
    verdicts: dict[VerdictName, VerdictSummary] = {}
    accuracy: Accuracy = Accuracy()


class LeaderboardEntry(BaseModel):
    rank: int | None
    submission_id: int
    lineage: str
    revision: int
    parent_id: int | None
    author: str
    status: str
    reason: str
    score_ms: float | None
    speedup_vs_reference: float | None  # against the reference timed in its own run
    vs_parent: str | None
    flags: list[str]
    benchmarks: list[ShapeTiming]
    verdicts: dict[VerdictName, VerdictSummary]
    accuracy: Accuracy
    speedup_note: str | None = None  # why a scored revision has no speedup (NO_REFERENCE_IN_RUN)
    # the same shape means scored as GPU MODE scores them (its task.yml's ranking_by), when that
    # is not the harness's `ranking_by` (added by issue 34)
    gpumode_score_ms: float | None = None


class Leaderboard(BaseModel):
    """Ranked entries first (rank 1 = lowest score), then the unranked in submission order.
    `verdict` is the one that ranks; `mode` the timed mode whose scores are compared."""

    task: str
    device: str | None
    verdict: VerdictName
    exact_answer: bool = True  # False: the task has only GPU MODE's verdict
    mode: str | None
    reference_ms: float | None
    entries: list[LeaderboardEntry]
    judge_version: int = JUDGE_VERSION  # the judge whose results it ranks (harness.judge)
    # how `score_ms` is made of the benchmark shapes' means (geom, mean, last), and how GPU MODE
    # makes its score (`gpumode_score_ms`) when it differs (added by issue 34)
    ranking_by: str = "geom"
    gpumode_ranking_by: str | None = None

    def reference_lineage(self) -> str:
        return reference_lineage_name(self.task)

    def ranked(self) -> list[LeaderboardEntry]:
        return [entry for entry in self.entries if entry.rank is not None]

    def unranked(self) -> list[LeaderboardEntry]:
        return [entry for entry in self.entries if entry.rank is None]

    def shapes(self) -> list[dict[str, Any]]:
        """Every benchmark shape any entry was timed on, in order of first appearance."""
        seen: dict[str, dict[str, Any]] = {}
        for entry in self.entries:
            for timing in entry.benchmarks:
                seen.setdefault(shape_key(timing.shape), timing.shape)
        return list(seen.values())


@dataclass
class _Standing:
    """A revision's standing in the chosen environment, with the timed shapes kept for the
    significance test against its parent."""

    revision: Revision
    env_key: str
    status: str
    reason: str
    score_ms: float | None = None
    timed_shapes: list[ShapeResult] = field(default_factory=list)
    verdicts: dict[VerdictName, VerdictSummary] = field(
        default_factory=lambda: dict.fromkeys(VERDICTS, NOT_CHECKED)
    )
    accuracy: Accuracy = field(default_factory=Accuracy)
    flags: list[str] = field(default_factory=list)
    batch: str | None = None  # the interleaved run its timing came from (Run.batch)


def _most_recent(runs: list[Run]) -> Run:
    return max(runs, key=lambda run: (run.finished_at or run.started_at, run.id))


def _device_label(run: Run) -> str:
    name = run.device_name or run.device
    if run.device == "cpu" and "cpu" not in name.lower():
        return f"cpu ({name})"
    return name


def _choose_environment(runs: list[Run], task: str, device: str | None) -> Run | None:
    """The most recent completed run of the environment asked for (None: no runs at all)."""
    if device is None:
        return _most_recent(runs) if runs else None
    wanted = device.casefold()
    matching = [run for run in runs if wanted in (run.device.casefold(), run.device_name.casefold())]
    if not matching:
        known = sorted({run.device_name or run.device for run in runs} | {run.device for run in runs})
        available = ", ".join(known) if known else "none"
        raise HarnessError(
            f"no completed runs of task {task!r} on device {device!r} (devices with results: {available})"
        )
    return _most_recent(matching)


def _timed_mode(runs: list[Run]) -> str | None:
    """The most trusted mode any of these runs was timed in (None: nothing timed)."""
    timed = {run.mode for run in runs if run.score_ms is not None}
    return next((mode for mode in MODE_PRIORITY if mode in timed), None)


def shape_verdicts(shape: ShapeResult) -> dict[VerdictName, VerdictSummary]:
    """A stored shape's verdicts as the reports show them."""
    verdicts = shape.verdicts
    if verdicts is None:
        return dict.fromkeys(VERDICTS, NOT_CHECKED)
    return {
        name: VerdictSummary(status=v.status, reason=v.reason)
        for name in VERDICTS
        for v in [verdicts.get(name)]
    }


def _revision_verdicts(runs: list[Run]) -> tuple[dict[VerdictName, VerdictSummary], Accuracy]:
    """Each verdict over every shape of these runs (the first failure, named by its shape and
    mode, is the reason), and the worst accuracy figures."""
    summary: dict[VerdictName, VerdictSummary] = dict.fromkeys(VERDICTS, NOT_CHECKED)
    accuracy = Accuracy()
    for run in runs:
        for shape in run.shapes:
            accuracy = accuracy.worst(shape.accuracy)
            for name, verdict in shape_verdicts(shape).items():
                if verdict.status == "not_checked" or summary[name].status == "fail":
                    continue
                if verdict.status == "fail":
                    where = f"{run.mode} {shape.set_name}[{shape.index}] ({shape_label(shape.shape)})"
                    summary[name] = VerdictSummary(status="fail", reason=f"{where}: {verdict.reason}")
                else:
                    summary[name] = verdict
    return summary, accuracy


def _standing(
    revision: Revision,
    runs: list[Run],
    environment: Run | None,
    verdict: VerdictName,
    mode: str | None,
    older_judge: int | None = None,
) -> _Standing:
    """`older_judge`: the version of the judge that produced the revision's runs left out (older
    than the board's), when it has such runs."""
    env_key = environment.env_key if environment is not None else ""
    if not runs:
        where = f" on {_device_label(environment)}" if environment is not None else ""
        if older_judge is not None:
            return _Standing(
                revision,
                env_key,
                NOT_RUN,
                f"judged by an older judge (version {older_judge}); no result of this one{where} "
                "yet: the next tournament runs it again",
            )
        return _Standing(revision, env_key, NOT_RUN, f"no completed run{where} yet")
    by_priority = sorted(
        runs, key=lambda run: MODE_PRIORITY.index(run.mode) if run.mode in MODE_PRIORITY else 99
    )
    verdicts, accuracy = _revision_verdicts(by_priority)
    timed_run = next((run for run in by_priority if run.mode == mode and run.score_ms is not None), None)
    timed = (
        [shape for shape in timed_run.shapes if shape.mean_ms is not None] if timed_run is not None else []
    )
    flags = timing_flags(timed)
    batch = timed_run.batch if timed_run is not None else None
    standing = _Standing(revision, env_key, "pass", "", None, timed, verdicts, accuracy, flags, batch)
    failed = next((run for run in by_priority if run.status != "pass"), None)
    if failed is not None:
        standing.status, standing.reason = failed.status or "unknown", failed.reason
    elif verdicts[verdict].status == "fail":
        standing.status, standing.reason = (
            "wrong_answer",
            f"fails the {verdict} verdict: {verdicts[verdict].reason}",
        )
        standing.score_ms = (
            timed_run.score_ms if timed_run is not None else None
        )  # timed: it passes the other
    elif timed_run is None:
        others = sorted({run.mode for run in by_priority if run.score_ms is not None})
        standing.reason = (
            f"timed in {' and '.join(others)} mode only; this board compares {mode}-mode times"
            if others and mode
            else by_priority[0].reason or "passed; not timed yet"
        )
    elif flags:  # every flag a timing can carry (harness.timing) marks it for review
        standing.status = FLAGGED
        standing.reason = f"timing flagged ({', '.join(flags)}): a flagged timing is never ranked"
        standing.score_ms = timed_run.score_ms
    else:
        standing.score_ms = timed_run.score_ms
    return standing


def build_leaderboard(
    session: Session, task: str, device: str | None = None, verdict: VerdictName | None = None
) -> Leaderboard:
    """The leaderboard of `task` in one environment, ranked under `verdict` (default: the task's);
    see the module docstring."""
    spec = load_task(task)
    verdict = verdict or spec.verdict
    if verdict not in VERDICTS:
        raise HarnessError(f"unknown verdict {verdict!r} (choose from {', '.join(VERDICTS)})")
    if verdict not in spec.verdicts:
        raise HarnessError(f"task {task} has no exact answer: it has only the gpumode verdict")
    revisions = list_revisions(session, task=task)
    if not revisions:
        raise HarnessError(
            f"no revisions registered for task {task!r} (register some with `harness register`)"
        )
    runs = list(
        session.scalars(
            select(Run)
            .where(Run.task == task, Run.task_version == spec.version, Run.state == "done")
            .options(selectinload(Run.shapes))
        )
    )
    environment = _choose_environment(runs, task, device)

    runs_by_revision: dict[int, list[Run]] = defaultdict(list)
    older: dict[int, int] = {}  # revision id -> the newest older judge version of its runs left out
    env_runs = [run for run in runs if environment is not None and run.env_key == environment.env_key]
    judge = max((run.judge_version for run in env_runs), default=JUDGE_VERSION)
    for run in env_runs:
        if run.judge_version == judge:
            runs_by_revision[run.revision_id].append(run)
        else:
            older[run.revision_id] = max(older.get(run.revision_id, 0), run.judge_version)
    mode = _timed_mode([run for group in runs_by_revision.values() for run in group])
    standings = {
        revision.id: _standing(
            revision, runs_by_revision[revision.id], environment, verdict, mode, older.get(revision.id)
        )
        for revision in revisions
    }
    if spec.exact_answer is None:  # its stored accurate verdict only repeats GPU MODE's
        for standing in standings.values():
            standing.verdicts = {**standing.verdicts, "accurate": NOT_CHECKED}
    batches = batches_in(
        session, task, mode, environment.env_key if environment is not None else "", judge=judge
    )
    reference_name = reference_lineage_name(task)

    reference_scores = [
        standing.score_ms
        for standing in sorted(standings.values(), key=lambda s: s.revision.number)
        if standing.revision.lineage.name == reference_name and standing.score_ms is not None
    ]
    reference_ms = reference_scores[-1] if reference_scores else None  # its latest timed revision

    rankable = sorted(
        (s for s in standings.values() if s.status == "pass" and s.score_ms is not None),
        key=lambda s: s.revision.id,
    )
    ranked = rank_by_score(rankable)
    ranked_ids = {s.revision.id for _rank, s in ranked}
    gpumode_ranking_by = (
        spec.gpumode_ranking_by if spec.gpumode_ranking_by not in (None, spec.ranking_by) else None
    )
    entries = [_entry(s, rank, standings, batches, spec.ranking_by, gpumode_ranking_by) for rank, s in ranked]
    entries += [
        _entry(s, None, standings, batches, spec.ranking_by, gpumode_ranking_by)
        for s in standings.values()
        if s.revision.id not in ranked_ids
    ]
    return Leaderboard(
        task=task,
        device=_device_label(environment) if environment is not None else None,
        verdict=verdict,
        exact_answer=spec.exact_answer is not None,
        mode=mode,
        reference_ms=reference_ms,
        entries=entries,
        judge_version=judge,
        ranking_by=spec.ranking_by,
        gpumode_ranking_by=gpumode_ranking_by,
    )


def _entry(
    standing: _Standing,
    rank: int | None,
    standings: dict[int, _Standing],
    batches: Batches,
    ranking_by: str,
    gpumode_ranking_by: str | None = None,
) -> LeaderboardEntry:
    revision = standing.revision
    means = [shape.mean_ms for shape in standing.timed_shapes]
    gpumode_score_ms = None
    if gpumode_ranking_by is not None and standing.score_ms is not None and means and None not in means:
        gpumode_score_ms = score(means, gpumode_ranking_by)
    parent = standings.get(revision.parent_id) if revision.parent_id is not None else None
    speedup_vs_reference, speedup_note = None, None
    if standing.score_ms is not None:
        speedup_vs_reference = batches.speedup(standing.batch, revision.id)
        speedup_note = NO_REFERENCE_IN_RUN if speedup_vs_reference is None else None
    return LeaderboardEntry(
        rank=rank,
        submission_id=revision.id,
        lineage=revision.lineage.name,
        revision=revision.number,
        parent_id=revision.parent_id,
        author=revision.author,
        status=standing.status,
        reason=standing.reason,
        score_ms=standing.score_ms,
        speedup_vs_reference=speedup_vs_reference,
        vs_parent=_compare_with_parent(standing, parent, batches, ranking_by),
        flags=[str(flag) for flag in revision.flags] + standing.flags,
        benchmarks=[
            ShapeTiming(
                shape=shape.shape,
                mean_ms=shape.mean_ms,
                err_ms=shape.err_ms,
                runs=shape.runs,
                verdicts=shape_verdicts(shape),
                accuracy=shape.accuracy,
            )
            for shape in standing.timed_shapes
        ],
        verdicts=standing.verdicts,
        accuracy=standing.accuracy,
        speedup_note=speedup_note,
        gpumode_score_ms=gpumode_score_ms,
    )


def _compare_with_parent(
    standing: _Standing,
    parent: _Standing | None,
    batches: Batches,
    ranking_by: str,
) -> str | None:
    """scoring.compare on the per-call times of the shapes both were timed on, in one
    interleaved run only: the parent's run of the same batch, or the parent timed again in that
    batch beside it (a Retiming), with that batch's pooled block variance. Drift between runs is
    in neither variance the test uses, so two runs are never compared: None then, and when
    either has no timings or they were timed on different shapes."""
    if parent is None or not standing.timed_shapes or standing.batch is None:
        return None
    found = batches.timings.get(standing.batch, {})
    own, other = found.get(standing.revision.id), found.get(parent.revision.id)
    if own is None or other is None or not own.times or not other.times:
        return None
    keys = [shape_key(shape.shape) for shape in standing.timed_shapes]
    if sorted(keys) != sorted(other.times) or sorted(keys) != sorted(own.times):
        return None
    if not all(own.times[key] for key in keys) or not all(other.times.values()):
        return None
    return batches.verdict(standing.batch, own, other, keys, ranking_by)
