"""Applying a proposer's reply to the parent's code.

A reply takes one of two forms (prompts/_reply_format.j2 tells the agent the same):

1. SEARCH/REPLACE blocks (the aider / OpenEvolve form), anywhere in the reply, fenced or not:

       <<<<<<< SEARCH
       exact lines of the parent
       =======
       the lines that replace them
       >>>>>>> REPLACE

   Each SEARCH section must match exactly once, as whole lines, in the parent as changed by
   the blocks before it. A block that matches 0 times or several times fails the step with a
   reason naming the block; a malformed block (no `=======`, no `>>>>>>> REPLACE`, an empty
   SEARCH section) fails it too. Nothing is ever dropped silently: either every block applies or
   the step fails.
2. The whole new file in one fenced code block (```python, ```py or a bare ```). The file then
   ends with a newline whatever the parent did: a fence cannot say otherwise.

A reply with SEARCH/REPLACE markers is read as blocks even when it also has fences (agents put
the blocks inside fences). A reply with neither form fails the step.

Lines are split on "\\n" only, as the diff reporter does, so every byte outside the replaced
lines (a "\\r", a missing final newline, trailing spaces) stays as it was. In the reply itself,
"\\r\\n" is read as "\\n".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from harness.evolve.outcomes import EditFailed

_SEARCH = re.compile(r"^<{5,9} ?SEARCH\s*$")
_DIVIDER = re.compile(r"^={5,9}\s*$")
_REPLACE = re.compile(r"^>{5,9} ?REPLACE\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([^\s`]*)")
_CODE_INFO = {"", "python", "py", "python3"}


@dataclass(frozen=True)
class SearchReplaceBlock:
    number: int  # 1-based, in reply order
    reply_line: int  # 1-based line of the `<<<<<<< SEARCH` marker in the reply
    search: list[str]
    replace: list[str]


@dataclass(frozen=True)
class AppliedReply:
    content: str
    form: Literal["whole_file", "search_replace"]
    blocks: int  # SEARCH/REPLACE blocks applied (0 for a whole file)


def apply_reply(parent: str, reply: str) -> AppliedReply:
    """The child's code: `reply` applied to `parent`. Raises `EditFailed` with the reason."""
    reply = reply.replace("\r\n", "\n")
    blocks = parse_search_replace_blocks(reply)
    if blocks:
        return AppliedReply(apply_search_replace(parent, blocks), "search_replace", len(blocks))
    whole_file = extract_whole_file(reply)
    if whole_file is None:
        raise EditFailed(
            "the reply has neither SEARCH/REPLACE blocks nor a fenced ```python block with the whole file"
        )
    return AppliedReply(whole_file, "whole_file", 0)


def parse_search_replace_blocks(reply: str) -> list[SearchReplaceBlock]:
    """Every SEARCH/REPLACE block of the reply, in order. Malformed blocks raise `EditFailed`."""
    blocks: list[SearchReplaceBlock] = []
    lines = reply.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if _REPLACE.match(line):
            raise EditFailed(
                f"reply line {index + 1}: '>>>>>>> REPLACE' without a '<<<<<<< SEARCH' before it"
            )
        if not _SEARCH.match(line):
            index += 1
            continue
        number, start = len(blocks) + 1, index + 1
        search, index = _section(lines, index + 1, _DIVIDER, number, start, "'======='")
        replace, index = _section(lines, index + 1, _REPLACE, number, start, "'>>>>>>> REPLACE'")
        if not search:
            raise EditFailed(
                f"SEARCH/REPLACE block {number} (reply line {start}) has an empty SEARCH section"
            )
        blocks.append(SearchReplaceBlock(number, start, search, replace))
        index += 1
    return blocks


def _section(
    lines: list[str], index: int, end: re.Pattern[str], number: int, start: int, end_name: str
) -> tuple[list[str], int]:
    """The lines from `index` up to the line matching `end`; returns them and that line's index."""
    section: list[str] = []
    while index < len(lines):
        line = lines[index]
        if end.match(line):
            return section, index
        if _SEARCH.match(line) or _DIVIDER.match(line) or _REPLACE.match(line):
            raise EditFailed(
                f"SEARCH/REPLACE block {number} (reply line {start}) is malformed: "
                f"reply line {index + 1} {line.strip()!r} comes before its {end_name}"
            )
        section.append(line)
        index += 1
    raise EditFailed(f"SEARCH/REPLACE block {number} (reply line {start}) has no {end_name} line")


def apply_search_replace(parent: str, blocks: list[SearchReplaceBlock]) -> str:
    """Apply the blocks in order; each must match exactly once, else `EditFailed`."""
    lines = parent.split("\n")
    for block in blocks:
        matches = _find_lines(lines, block.search, strip=False)
        if len(matches) != 1:
            raise EditFailed(_mismatch_reason(block, len(blocks), matches, lines))
        at = matches[0]
        lines[at : at + len(block.search)] = block.replace
    return "\n".join(lines)


def _find_lines(lines: list[str], search: list[str], *, strip: bool) -> list[int]:
    """Start indexes where `search` occurs in `lines` as a run of whole lines (overlaps count)."""
    if strip:
        lines = [line.strip() for line in lines]
        search = [line.strip() for line in search]
    size = len(search)
    return [at for at in range(len(lines) - size + 1) if lines[at : at + size] == search]


def _mismatch_reason(block: SearchReplaceBlock, total: int, matches: list[int], lines: list[str]) -> str:
    where = f"SEARCH/REPLACE block {block.number} of {total} (reply line {block.reply_line})"
    first = block.search[0].strip() or "(an empty line)"
    if matches:
        at = ", ".join(str(m + 1) for m in matches[:5])
        return (
            f"{where} matches the parent {len(matches)} times (at lines {at}); it must match exactly "
            f"once: add lines around it to make it unique"
        )
    loose = _find_lines(lines, block.search, strip=True)
    hint = f" ({len(loose)} times when leading and trailing whitespace is ignored)" if loose else ""
    return (
        f"{where} matches the parent 0 times{hint}; it must match exactly once: "
        f"its first line is {first[:80]!r}"
    )


def extract_whole_file(reply: str) -> str | None:
    """The code of the reply's one fenced Python block; None when it has none.

    Several Python (or bare) fenced blocks are ambiguous and raise `EditFailed`, as does a fence
    that is never closed. A closing fence is a line of at least as many backticks (or tildes) as
    the opening one, as in CommonMark.
    """
    lines = reply.split("\n")
    code_blocks: list[list[str]] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, info = opening.group(1), opening.group(2).lower()
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not _closes(lines[index], fence):
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise EditFailed(f"the fenced block opened at reply line {start + 1} is never closed")
        if info in _CODE_INFO:
            code_blocks.append(body)
        index += 1
    if not code_blocks:
        return None
    if len(code_blocks) > 1:
        raise EditFailed(
            f"the reply has {len(code_blocks)} fenced Python blocks; a whole-file reply has exactly one"
        )
    if not "".join(code_blocks[0]).strip():
        raise EditFailed("the reply's fenced Python block is empty")
    return "\n".join(code_blocks[0]) + "\n"


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}
