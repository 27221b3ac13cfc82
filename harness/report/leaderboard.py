"""The leaderboard: every revision of a task in one environment, ranked by score.

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
  interleaved run as the ranked result (harness.standings: the reference's run of that batch,
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
from rich.console import Group
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from harness.errors import HarnessError
from harness.judge import JUDGE_VERSION
from harness.report.terminal import fit_table, minimum_width, plain_table
from harness.report.text import escape_controls
from harness.scoring import BlockSpread, block_spread, blocks_joined, compare, rank_by_score, score
from harness.standings import (
    NO_REFERENCE_IN_RUN,
    BatchTiming,
    batch_timings,
    reference_in_run,
    shape_key,
    speedup_in_run,
)
from harness.store.models import Revision, Run, ShapeResult
from harness.store.revisions import list_revisions, reference_lineage_name, reference_revision_ids
from harness.tasks import load_task
from harness.tasks.spec import parameter_text, shape_label
from harness.verdicts import VERDICT_WORDS, VERDICTS, Accuracy, VerdictName

# Most trusted first: timing with secret seeds and every output checked, timing, checks with
# secret seeds, checks with the public seeds (the modes harness.store.runs lists).
MODE_PRIORITY = ("leaderboard", "benchmark", "test-leaderboard", "test")
NOT_RUN = "not_run"
FLAGGED = "flagged"
ReportFormat = Literal["table", "json", "markdown", "html"]


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

    def speedup_legend(self) -> str:
        """What a `-` speedup of a ranked revision means, when one has it ("" otherwise)."""
        if not any(entry.speedup_note for entry in self.ranked()):
            return ""
        return (
            f"speedup -: {NO_REFERENCE_IN_RUN} (timed without the reference; "
            "`harness bench --force ID` times it again beside it)"
        )

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


def format_ms(value: float | None) -> str:
    """Four significant digits, trailing zeros kept (`1.000`, `0.7071`, `12.50`)."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:.0f}"
    return f"{value:#.4g}"


def format_error_ms(value: float | None) -> str:
    """A standard error: two significant digits are all it has (`0.050`, `2.8`, `17`, `340`)."""
    if value is None:
        return "-"
    if value >= 9.95:
        return f"{value:.0f}"
    return f"{value:#.2g}"


def format_speedup(value: float | None) -> str:
    """Two decimals (`1.52x`), or two significant digits below 0.1 (`0.0013x`: the Triton
    interpreter against torch on the CPU), so that no speedup reads `0.00x`."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if value >= 0.095 else f"{value:#.2g}x"


def format_verdict(verdict: VerdictSummary) -> str:
    return {"pass": "pass", "fail": "FAIL"}.get(verdict.status, "-")


def format_figure(value: float | None) -> str:
    """An error figure: two significant digits in scientific notation."""
    return "-" if value is None else f"{value:.1e}"


def verdict_notes(board: Leaderboard) -> list[tuple[LeaderboardEntry, str, str]]:
    """(entry, verdict label, reason) for every ranked entry that fails a verdict other than the
    ranking one: it ranks, and the reports say in words why the other verdict fails it."""
    return [
        (entry, VERDICT_WORDS[name], summary.reason)
        for entry in board.ranked()
        for name, summary in entry.verdicts.items()
        if summary.status == "fail"
    ]


RANKING_WORDS = {"geom": "geometric mean", "mean": "mean", "last": "last shape's mean"}


def board_title(board: Leaderboard) -> str:
    title = f"{board.task} leaderboard on {board.device or 'no device yet'}"
    title += f" ({board.mode + ' mode, ' if board.mode else ''}ranked by the {board.verdict} verdict)"
    title += f" [score: {RANKING_WORDS.get(board.ranking_by, board.ranking_by)} of the shapes' means"
    if board.gpumode_ranking_by is not None:
        words = RANKING_WORDS.get(board.gpumode_ranking_by, board.gpumode_ranking_by)
        title += f"; GPU MODE's score, the {words}, in the GPU MODE ms column"
    title += "]"
    if not board.exact_answer:
        title += " [no exact answer: only GPU MODE's verdict]"
    if board.reference_ms is not None:
        title += f": reference {format_ms(board.reference_ms)} ms"
    if board.judge_version < JUDGE_VERSION:
        title += f" [judge version {board.judge_version}, older than this harness's: the next tournament runs them again]"
    return title


# --- building -------------------------------------------------------------------------------


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
    flags = sorted({flag for shape in timed for flag in shape.timing_flags})
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
    batches = _batches(session, task, mode, environment.env_key if environment is not None else "", judge)
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
    batches: _Batches,
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
        in_run = batches.timings.get(standing.batch or "", {})
        speedup_vs_reference = speedup_in_run(
            batches.reference.get(standing.batch or ""), in_run.get(revision.id)
        )
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


@dataclass
class _Batches:
    """What the comparisons need of the interleaved runs of one environment and mode
    (harness.standings): each batch's timings by revision (runs and retimings), the reference's
    timing in it, and its pooled variance of a block's log mean (scoring.block_spread, over
    every run and retiming of the batch)."""

    timings: dict[str, dict[int, BatchTiming]]
    reference: dict[str, BatchTiming]
    spread: dict[str, BlockSpread]


def _batches(session: Session, task: str, mode: str | None, env_key: str, judge: int) -> _Batches:
    """The batches of one environment and mode, by the board's judge."""
    timings = batch_timings(session, task, mode, env_key, judge=judge)
    references = reference_revision_ids(session, task)
    return _Batches(
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


def _compare_with_parent(
    standing: _Standing,
    parent: _Standing | None,
    batches: _Batches,
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
    return compare(
        [own.times[key] for key in keys],
        [other.times[key] for key in keys],
        ranking_by,
        spread=batches.spread.get(standing.batch),
        blocks=(blocks_joined(own.blocks), blocks_joined(other.blocks)),
    ).verdict


# --- rendering ------------------------------------------------------------------------------


VS_PARENT_STYLES = {"faster": "green", "slower": "red"}
PIPED_REASON_WIDTH = 100


def leaderboard_renderable(
    board: Leaderboard, *, wide: bool | None = False, width: int | None = None
) -> Group:
    """The terminal view: the title, the ranked table, why a ranked revision fails the other
    verdict, then the unranked revisions with status and reason.

    The ranked table shows rank, id, lineage and revision, score, speedup, the comparison with
    the parent and both verdicts; `wide` adds the author, a column per benchmark shape, the
    accuracy figures and the flags (None: wide when that table fits in `width`). Text from the
    store goes in as `Text`, so that brackets in a reason are not read as markup, with its
    control characters escaped (harness.report.text)."""
    if wide is None:
        wide = width is not None and _table_width(_ranked_table(board, wide=True)) <= width
    # `--wide` where the wide table cannot fit without cutting its numbers: the narrow table,
    # then the other columns in tables of their own, each keyed by rank and id (as pandas
    # prints a frame wider than the terminal).
    in_blocks = wide and width is not None and minimum_width(_ranked_table(board, wide=True)) > width
    title = board_title(board)
    parts: list[Table | Text] = [Text(escape_controls(title))]
    if board.ranked():
        # GPU MODE's own score only from 100 columns: under them it cut the verdicts (the JSON and
        # a wider terminal show it)
        gpumode = width is None or width >= 100
        parts.append(_ranked_table(board, wide=wide and not in_blocks, width=width, gpumode=gpumode))
        if in_blocks:
            for block in _detail_tables(board, width):
                parts.extend([Text(""), block])
        if board.speedup_legend():
            parts.append(Text(board.speedup_legend()))
    else:
        parts.append(Text("no revision has a score here yet"))
    for entry, label, reason in verdict_notes(board):
        parts.append(
            Text(
                f"submission {entry.submission_id} ({escape_controls(lineage_label(board, entry))}) "
                f"fails {label}: {escape_controls(reason)}"
            )
        )
    if board.unranked():
        parts.append(Text("\nnot ranked:"))
        entries = board.unranked()

        def unranked_table(hidden: tuple[str, ...]) -> Table:
            """Ids, names, statuses and verdicts whole; the reason wraps at its words (piped,
            unbounded: at PIPED_REASON_WIDTH rather than make a row of hundreds)."""
            with_author = wide and "author" not in hidden
            table = plain_table()
            table.add_column("id", justify="right", no_wrap=True)
            for header in ("revision", "status", "GPU MODE/\naccurate", *(["author"] if with_author else [])):
                table.add_column(header, no_wrap=True)
            table.add_column("reason", overflow="fold", max_width=None if width else PIPED_REASON_WIDTH)
            for entry in entries:
                table.add_row(
                    str(entry.submission_id),
                    Text(escape_controls(lineage_label(board, entry))),
                    Text(entry.status, style="" if entry.status in ("pass", NOT_RUN) else "bold red"),
                    _verdicts_text(entry.verdicts),
                    *([Text(escape_controls(entry.author))] if with_author else []),
                    Text(escape_controls(entry.reason)),
                )
            return table

        unranked, _hidden = fit_table(unranked_table, width, ("author",))
        parts.append(unranked)
    return Group(*parts)


def _table_width(table: Table) -> int:
    from rich.console import Console

    console = Console(width=10_000)
    return console.measure(table).maximum


def _ranked_table(board: Leaderboard, *, wide: bool, width: int | None = None, gpumode: bool = True) -> Table:
    shapes = board.shapes() if wide else []
    gpumode = gpumode and board.gpumode_ranking_by is not None
    ranked = plain_table()
    ranked.add_column("rank", justify="right", no_wrap=True)
    ranked.add_column("id", justify="right", no_wrap=True)
    # Wide enough for every `lineage rN`, so that narrow terminals wrap other columns first.
    names = max(
        (len(escape_controls(f"{entry.lineage} r{entry.revision}")) for entry in board.ranked()), default=8
    )
    ranked.add_column("revision", overflow="fold", min_width=min(names, 30))
    if wide:
        ranked.add_column("author", overflow="fold")
    ranked.add_column("score ms", justify="right", no_wrap=True)
    if gpumode:
        ranked.add_column("GPU MODE\nms", justify="right", no_wrap=True)
    for shape in shapes:
        ranked.add_column(
            "\n".join(f"{key} {parameter_text(value)}" for key, value in shape.items() if key != "seed"),
            justify="right",
        )
    ranked.add_column("speedup", justify="right", no_wrap=True)
    # "same within noise" on two lines in a narrow terminal (rich would crop a later column).
    ranked.add_column("vs parent", max_width=None if wide or width is None or width >= 100 else 11)
    ranked.add_column("GPU MODE/\naccurate", no_wrap=True)
    if wide:
        ranked.add_column("rel L2/\nerr÷scale", justify="right")
        ranked.add_column("flags")
    for entry in board.ranked():
        timings = {shape_key(timing.shape): timing for timing in entry.benchmarks}
        ranked.add_row(
            str(entry.rank),
            str(entry.submission_id),
            Text(escape_controls(lineage_label(board, entry))),
            *([Text(escape_controls(entry.author))] if wide else []),
            format_ms(entry.score_ms),
            *([format_ms(entry.gpumode_score_ms)] if gpumode else []),
            *[format_timing(timings.get(shape_key(shape))) for shape in shapes],
            format_speedup(entry.speedup_vs_reference),
            Text(entry.vs_parent or "-", style=VS_PARENT_STYLES.get(entry.vs_parent or "", "")),
            _verdicts_text(entry.verdicts),
            *(
                [
                    f"{format_figure(entry.accuracy.rel_l2)}/{format_figure(entry.accuracy.max_err_over_scale)}",
                    Text(escape_controls(", ".join(entry.flags))),
                ]
                if wide
                else []
            ),
            style="cyan" if entry.lineage == board.reference_lineage() else None,
        )
    return ranked


def _detail_tables(board: Leaderboard, width: int) -> list[Table]:
    """The wide table's other columns (author, one per benchmark shape, the accuracy figures,
    the flags) in as few tables as fit in `width` without cutting a number, each keyed by rank
    and id; a column too wide on its own (long flags) gets a table of its own and wraps."""
    ranked = board.ranked()
    timings = [{shape_key(timing.shape): timing for timing in entry.benchmarks} for entry in ranked]
    columns: list[tuple[str, dict, list]] = [
        ("author", {"no_wrap": True}, [Text(escape_controls(entry.author)) for entry in ranked])
    ]
    for shape in board.shapes():
        header = "\n".join(f"{key} {parameter_text(value)}" for key, value in shape.items() if key != "seed")
        cells = [format_timing(found.get(shape_key(shape))) for found in timings]
        columns.append((header, {"justify": "right", "no_wrap": True}, cells))
    figures = [
        f"{format_figure(entry.accuracy.rel_l2)}/{format_figure(entry.accuracy.max_err_over_scale)}"
        for entry in ranked
    ]
    columns.append(("rel L2/\nerr÷scale", {"justify": "right", "no_wrap": True}, figures))
    columns.append(
        ("flags", {"overflow": "fold"}, [Text(escape_controls(", ".join(e.flags))) for e in ranked])
    )

    def table(chosen: list[tuple[str, dict, list]]) -> Table:
        block = plain_table()
        block.add_column("rank", justify="right", no_wrap=True)
        block.add_column("id", justify="right", no_wrap=True)
        for header, options, _cells in chosen:
            block.add_column(header, **options)
        for row, entry in enumerate(ranked):
            block.add_row(
                str(entry.rank),
                str(entry.submission_id),
                *(cells[row] for _header, _options, cells in chosen),
                style="cyan" if entry.lineage == board.reference_lineage() else None,
            )
        return block

    blocks: list[list[tuple[str, dict, list]]] = [[]]
    for column in columns:
        if blocks[-1] and minimum_width(table([*blocks[-1], column])) > width:
            blocks.append([])
        blocks[-1].append(column)
    return [table(chosen) for chosen in blocks]


def _verdicts_text(verdicts: dict[VerdictName, VerdictSummary]) -> Text:
    """`pass/FAIL`: GPU MODE's verdict, then the accurate one; a failing one in red."""
    text = Text()
    for position, name in enumerate(VERDICTS):
        verdict = verdicts[name]
        text.append("/" if position else "")
        text.append(format_verdict(verdict), style="bold red" if verdict.status == "fail" else "")
    return text


def lineage_label(board: Leaderboard, entry: LeaderboardEntry) -> str:
    """`conv2d_x r3`, marked when it is the reference."""
    marker = " (reference)" if entry.lineage == board.reference_lineage() else ""
    return f"{entry.lineage} r{entry.revision}{marker}"


def format_timing(timing: ShapeTiming | None) -> str:
    if timing is None or timing.mean_ms is None:
        return "-"
    if timing.err_ms is None:
        return format_ms(timing.mean_ms)
    return f"{format_ms(timing.mean_ms)} ±{format_error_ms(timing.err_ms)}"
