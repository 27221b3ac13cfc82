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
- The edit script is the Myers shortest edit script of the `myers` package. Other algorithms
  (difflib, git's heuristics) pick different, equally short scripts; the seeds were made with
  this one.

When unchanged lines are collapsed (the rule the seeds follow): an unchanged line is shown when
it is at most CONTEXT_LINES (3) lines away from a changed line; every maximal run of unchanged
lines that are not shown becomes one `  ⋯ N unchanged lines` line, wherever it stands: at the
start of the file (seed 000: 6 unchanged lines before the first change give `⋯ 3` and three
shown), between two changes (seed 000: a run of 8 gives three shown, `⋯ 2`, three shown) or at
the end. A run of 1 reads `⋯ 1 unchanged line`. Two identical files give a single marker.

The text ends without a final newline, and whitespace at its very end is trimmed (seed 000 ends
with a bare `-`: the removed empty last line of a file that lost its final newline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import myers

from harness.errors import HarnessError

CONTEXT_LINES = 3

DiffKind = Literal["context", "removed", "added", "skipped"]

_PREFIX: dict[str, str] = {"context": "  ", "removed": "- ", "added": "+ "}


@dataclass(frozen=True)
class DiffLine:
    """One line of a rendered diff.

    `text` is the file line without its prefix (empty for `skipped`); `skipped` counts the
    unchanged lines a `skipped` line stands for. `old_number` / `new_number` are the 1-based
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


def _edit_script(old_lines: list[str], new_lines: list[str]) -> list[DiffLine]:
    """Every line of both files, in the order of the Myers edit script, numbered."""
    script: list[DiffLine] = []
    old_number = new_number = 0
    for action, line in myers.diff(old_lines, new_lines):
        if action == myers.KEEP:
            old_number += 1
            new_number += 1
            script.append(DiffLine("context", line, old_number, new_number))
        elif action == myers.REMOVE:
            old_number += 1
            script.append(DiffLine("removed", line, old_number, None))
        elif action == myers.INSERT:
            new_number += 1
            script.append(DiffLine("added", line, None, new_number))
        else:  # pragma: no cover - myers.diff emits OMIT only when asked for context
            raise AssertionError(f"unexpected myers action {action!r}")
    return script


def _collapse(script: list[DiffLine], context: int) -> list[DiffLine]:
    """Hide unchanged lines more than `context` lines from a change; one marker per hidden run."""
    change_positions = [i for i, line in enumerate(script) if line.kind != "context"]
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
    return _PREFIX[line.kind] + line.text


def render_diff(old: bytes | None, new: bytes, submission_id: int) -> str:
    """The seeds' text: `submission <id>`, an empty line, the collapsed Myers diff.

    No final newline; whitespace at the very end is trimmed.
    """
    body = [format_diff_line(line) for line in diff_lines(old, new)]
    return "\n".join([f"submission {submission_id}", "", *body]).rstrip()
