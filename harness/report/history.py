"""The submission history: every revision as `harness diff` shows it, each under one line with its
status, score and comparison with its parent, in submission order or best first.

Plain text, written as is: the diffs keep the exact bytes of the code lines (trailing blanks,
tabs, non-ASCII), so nothing here wraps or styles them. Control characters are escaped
(harness.report.text): in a diff as `render_diff` does, in a header line all of them, line
breaks too, so that a reason, a name or an author stays on its line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy.orm import Session

from harness.errors import HarnessError
from harness.report.diff import render_diff
from harness.report.leaderboard import format_ms, format_speedup
from harness.report.text import escape_controls
from harness.scoring import SAME
from harness.standing.board import LeaderboardEntry, build_leaderboard
from harness.store.revisions import get_revision, list_revisions, revision_code
from harness.verdicts import VERDICT_WORDS, VerdictName


def diff_inputs(
    session: Session, submission_id: int, against: int | None = None
) -> tuple[bytes | None, bytes]:
    """(old bytes, new bytes) of a revision's diff: against `against`, else against its parent;
    a first revision is diffed against nothing (every line added)."""
    revision = get_revision(session, submission_id)
    base = get_revision(session, against) if against is not None else revision.parent
    return (revision_code(base) if base is not None else None), revision_code(revision)


def revision_diff(session: Session, submission_id: int, against: int | None = None) -> str:
    """`harness diff`: the seeds' format (no final newline)."""
    return render_diff(*diff_inputs(session, submission_id, against), submission_id)


@dataclass
class HistoryItem:
    entry: LeaderboardEntry
    diff: str


def build_history(
    session: Session,
    task: str,
    lineage: str | None = None,
    *,
    rank: bool = False,
    device: str | None = None,
    verdict: VerdictName | None = None,
) -> list[HistoryItem]:
    """The task's revisions (of one lineage, if given) with their leaderboard standing in one
    environment (as `build_leaderboard` picks it) and their diffs against their parents.

    Order: submission order (registration time, then id), or with `rank` the leaderboard's order
    (ranked best first, then the unranked in submission order).
    """
    board = build_leaderboard(session, task, device, verdict)
    entries = board.entries
    if lineage is not None:
        known = {entry.lineage for entry in entries}
        if lineage not in known:
            choices = ", ".join(sorted(known))
            raise HarnessError(f"no lineage {lineage!r} in task {task!r} (lineages: {choices})")
        entries = [entry for entry in entries if entry.lineage == lineage]
    if not rank:
        submitted = {
            revision.id: position for position, revision in enumerate(list_revisions(session, task=task))
        }
        entries = sorted(entries, key=lambda entry: submitted[entry.submission_id])
    return [HistoryItem(entry, revision_diff(session, entry.submission_id)) for entry in entries]


def history_header(entry: LeaderboardEntry) -> str:
    """One line: rank, status (with the reason when it is not a pass), the verdicts it fails,
    score, speedup, comparison with the parent, lineage and author.

    `== #2 · pass · fails GPU MODE · 1.234 ms · 1.52x reference · faster than parent 17 · conv2d_x r2 · alice`
    """
    parts = [f"#{entry.rank}" if entry.rank is not None else "unranked", entry.status]
    if entry.status != "pass" and entry.reason:
        parts[-1] = f"{entry.status}: {entry.reason}"
    parts += [f"fails {VERDICT_WORDS[name]}" for name, v in entry.verdicts.items() if v.status == "fail"]
    if entry.score_ms is not None:
        parts.append(f"{format_ms(entry.score_ms)} ms")
        if entry.speedup_vs_reference is not None:
            parts.append(f"{format_speedup(entry.speedup_vs_reference)} reference")
    elif entry.reason and entry.status == "pass":
        parts[-1] = f"{entry.status}: {entry.reason}"
    if entry.parent_id is None:
        parts.append("first revision")
    elif entry.vs_parent == SAME:
        parts.append(f"same as parent {entry.parent_id} within noise")
    elif entry.vs_parent is not None:
        parts.append(f"{entry.vs_parent} than parent {entry.parent_id}")
    else:
        parts.append(f"not compared with parent {entry.parent_id} in one run")
    parts.append(f"{entry.lineage} r{entry.revision}")
    if entry.author:
        parts.append(entry.author)
    return "== " + escape_controls(" · ".join(parts))


def render_history(items: list[HistoryItem]) -> str:
    """The items, each a header line above its diff, separated by an empty line; no final newline."""
    return "\n\n".join(f"{history_header(item.entry)}\n{item.diff}" for item in items)


def history_json(items: list[HistoryItem]) -> str:
    """`harness history --format json`: each revision's leaderboard entry with its diff."""
    return (
        json.dumps([{**item.entry.model_dump(mode="json"), "diff": item.diff} for item in items], indent=2)
        + "\n"
    )
