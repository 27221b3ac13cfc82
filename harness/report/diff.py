"""The submission diff: one revision against its parent, in the seeds' text format.

The format (reproduced byte for byte from GPU MODE's submission histories, ../shared/seeds):

    submission <id>
    <empty line>
      <unchanged line>
    - <removed line>
    + <added line>
      ⋯ N unchanged lines

How the lines are found:
- Each file is decoded as UTF-8 and split on "\\n" only: a "\\r" or any other whitespace stays part
  of its line, and a file that ends with a newline has an empty last line (so a final newline
  that appears or disappears shows up as an added or removed empty line). An empty file has no
  lines.
- The edit script is the Myers shortest edit script exactly as the `myers` package
  (`myers.diff`) computes it: the same greedy search, the same tie-breaks. Other algorithms
  (difflib, git's heuristics) pick different, equally short scripts; the seeds were made with
  this one. `myers_edit_script` is that function with one change: the package copies each
  path's whole history at every step, so its time grows with the cube of the file length
  (a rewritten file of 300 lines: 1.2 s, of 1,000 lines: 90 s); here paths share their
  histories as linked nodes, which makes it O((N+M)·D) like the textbook algorithm (0.1 s and
  2 s). tests/test_diff.py checks it against `myers.diff` on random inputs.
- That is still quadratic when most lines changed (a 40 KB file with 3,000 changed lines: 29 s
  and 1.7 GB; a file at the 1 MB register limit: hours), so the search stops after
  MAX_SEARCH_STEPS steps (diagonals visited plus lines matched: about a second, and at most one
  history node per step in memory). Past that bound the diff says so in a first `⋯` line and
  shows the lines between the files' common first and last lines as all removed, then all
  added: linear in time and memory. Every seed, and every lineage in candidates/, stays far
  below the bound.

When unchanged lines are collapsed (the rule the seeds follow): an unchanged line is shown when
it is at most CONTEXT_LINES (3) lines away from a changed line; every maximal run of unchanged
lines that are not shown becomes one `  ⋯ N unchanged lines` line, wherever it stands: at the
start of the file (seed 000: 6 unchanged lines before the first change give `⋯ 3` and three
shown), between two changes (seed 000: a run of 8 gives three shown, `⋯ 2`, three shown) or at
the end. A run of 1 reads `⋯ 1 unchanged line`. Two identical files give a single marker.

The text ends without a final newline, and whitespace at its very end is trimmed (seed 000 ends
with a bare `-`: the removed empty last line of a file that lost its final newline).

The rendered text shows control characters as escapes (harness.report.text, the way that keeps
tabs and CRLF line ends): code with an ESC, a lone CR or a bidi override reads `\x1b`, `\r`,
`\u202e` in the diff, where a terminal would act on them. Ordinary text, the seeds' included,
is unchanged byte for byte; the lines are compared as they are in the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import myers

from harness.errors import HarnessError
from harness.report.text import escape_controls

CONTEXT_LINES = 3

MAX_SEARCH_STEPS = 1_000_000

DiffKind = Literal["context", "removed", "added", "skipped", "note"]

_PREFIX: dict[str, str] = {"context": "  ", "removed": "- ", "added": "+ "}


@dataclass(frozen=True)
class DiffLine:
    """One line of a rendered diff.

    `text` is the file line without its prefix (empty for `skipped`; for `note`, what the diff
    could not do); `skipped` counts the unchanged lines a `skipped` line stands for.
    `old_number` / `new_number` are the 1-based
    line numbers in the old and new file (None where the line is not in that file; for a
    `skipped` line, the numbers of its first hidden line).
    """

    kind: DiffKind
    text: str
    old_number: int | None
    new_number: int | None
    skipped: int = 0


def split_lines(content: bytes, which: str = "file") -> list[str]:
    """The lines of a file as the diff sees them: UTF-8, split on "\\n" only, nothing stripped."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"the {which} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return text.split("\n") if text else []


def myers_edit_script(
    old_lines: list[str], new_lines: list[str], max_steps: int | None = None
) -> list[tuple[str, str]] | None:
    """`myers.diff(old_lines, new_lines)`, step for step, with shared path histories.

    Returns (action, line) pairs with the package's actions `myers.KEEP`, `myers.REMOVE` and
    `myers.INSERT`, or None when the search takes more than `max_steps` steps (diagonals
    visited plus lines matched). The loop below is the package's `_myers` with its quirks kept
    (it also walks diagonals outside the edit graph); only the history representation differs:
    a history is None or a node (previous node, action, index in `old_lines`/`new_lines`).
    """
    a, b = old_lines, new_lines
    len_a, len_b = len(a), len(b)
    keep, remove, insert = myers.KEEP, myers.REMOVE, myers.INSERT
    front: dict[int, tuple[int, tuple | None]] = {1: (0, None)}
    steps = 0
    for d in range(len_a + len_b + 1):
        for k in range(-d, d + 1, 2):
            go_down = k == -d or (k != d and front[k - 1][0] < front[k + 1][0])
            if go_down:
                x, history = front[k + 1]
            else:
                x, history = front[k - 1]
                x += 1
            y = x - k
            if go_down and 1 <= y <= len_b:
                history = (history, insert, y - 1)
            elif 1 <= x <= len_a:
                history = (history, remove, x - 1)
            while x < len_a and y < len_b and a[x] == b[y]:
                history = (history, keep, x)
                x += 1
                y += 1
                steps += 1
            if x >= len_a and y >= len_b:
                return _unwind(history, a, b)
            steps += 1
            if max_steps is not None and steps > max_steps:
                return None
            front[k] = x, history
    raise AssertionError("the Myers search ended without reaching both ends")  # pragma: no cover


def _unwind(history: tuple | None, a: list[str], b: list[str]) -> list[tuple[str, str]]:
    steps: list[tuple[str, str]] = []
    while history is not None:
        history, action, index = history
        steps.append((action, b[index] if action == myers.INSERT else a[index]))
    steps.reverse()
    return steps


def _replace_between_common_ends(old_lines: list[str], new_lines: list[str]) -> list[tuple[str, str]]:
    """The fallback past MAX_SEARCH_STEPS: the common first and last lines kept, every line
    between them removed, then added."""
    start = 0
    while start < min(len(old_lines), len(new_lines)) and old_lines[start] == new_lines[start]:
        start += 1
    end = 0
    while end < min(len(old_lines), len(new_lines)) - start and old_lines[-1 - end] == new_lines[-1 - end]:
        end += 1
    return [
        *((myers.KEEP, line) for line in old_lines[:start]),
        *((myers.REMOVE, line) for line in old_lines[start : len(old_lines) - end]),
        *((myers.INSERT, line) for line in new_lines[start : len(new_lines) - end]),
        *((myers.KEEP, line) for line in old_lines[len(old_lines) - end :]),
    ]


def _edit_script(old_lines: list[str], new_lines: list[str]) -> list[DiffLine]:
    """Every line of both files, in the order of the Myers edit script (or of the fallback past
    MAX_SEARCH_STEPS, under a `note` line that says so), numbered."""
    script: list[DiffLine] = []
    actions = myers_edit_script(old_lines, new_lines, MAX_SEARCH_STEPS)
    if actions is None:
        actions = _replace_between_common_ends(old_lines, new_lines)
        note = (
            f"no shortest diff: the files differ too much to search within {MAX_SEARCH_STEPS:,} steps; "
            "the lines between their common first and last lines are shown all removed, then all added"
        )
        script.append(DiffLine("note", note, None, None))
    old_number = new_number = 0
    for action, line in actions:
        if action == myers.KEEP:
            old_number += 1
            new_number += 1
            script.append(DiffLine("context", line, old_number, new_number))
        elif action == myers.REMOVE:
            old_number += 1
            script.append(DiffLine("removed", line, old_number, None))
        else:
            new_number += 1
            script.append(DiffLine("added", line, None, new_number))
    return script


def _collapse(script: list[DiffLine], context: int) -> list[DiffLine]:
    """Hide unchanged lines more than `context` lines from a change; one marker per hidden run."""
    change_positions = [i for i, line in enumerate(script) if line.kind in ("removed", "added")]
    shown = [line.kind != "context" for line in script]
    for position in change_positions:
        for i in range(max(0, position - context), min(len(script), position + context + 1)):
            shown[i] = True

    result: list[DiffLine] = []
    hidden_run: list[DiffLine] = []
    for line, is_shown in zip(script, shown):
        if not is_shown:
            hidden_run.append(line)
            continue
        if hidden_run:
            result.append(_skipped(hidden_run))
            hidden_run = []
        result.append(line)
    if hidden_run:
        result.append(_skipped(hidden_run))
    return result


def _skipped(run: list[DiffLine]) -> DiffLine:
    first = run[0]
    return DiffLine("skipped", "", first.old_number, first.new_number, skipped=len(run))


def diff_lines(old: bytes | None, new: bytes, context: int = CONTEXT_LINES) -> list[DiffLine]:
    """The diff of `new` against `old` as structured lines (the HTML report renders these).

    `old=None` means `new` is a first revision: every line is added.
    """
    old_lines = [] if old is None else split_lines(old, "old revision")
    new_lines = split_lines(new, "new revision")
    return _collapse(_edit_script(old_lines, new_lines), context)


def format_diff_line(line: DiffLine) -> str:
    """One line of the text format, without a newline."""
    if line.kind == "skipped":
        noun = "line" if line.skipped == 1 else "lines"
        return f"  ⋯ {line.skipped} unchanged {noun}"
    if line.kind == "note":
        return f"  ⋯ {line.text}"
    return _PREFIX[line.kind] + line.text


def render_diff(old: bytes | None, new: bytes, submission_id: int) -> str:
    """The seeds' text: `submission <id>`, an empty line, the collapsed Myers diff.

    No final newline; whitespace at the very end is trimmed; control characters escaped.
    """
    body = [format_diff_line(line) for line in diff_lines(old, new)]
    return escape_controls("\n".join([f"submission {submission_id}", "", *body]).rstrip(), block=True)
