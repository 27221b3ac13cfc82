"""Printing rich renderables so that they fit where they go.

- Width: COLUMNS when it is set, else the terminal's width; a pipe without COLUMNS gets whole
  rows (nothing cut, nothing wrapped that need not be).
- A terminal gets colour; a pipe or a file gets plain text: no escape codes, no trailing blanks.
- Tables are drawn in one plain style (`plain_table`): a rule under the header, no frame, so that
  more columns fit in 80.
- A text longer than the screen goes through the pager as git sends it there: `$PAGER` (empty:
  none), else `less`, with `LESS=FRX` when LESS is unset, so that less shows the colours
  (R) instead of their codes, leaves a short text on the screen (F) and does not clear it (X).
- Text from a candidate or its registration goes in escaped (harness.report.text), so that it
  lays out at the width it is shown at; `render_text` escapes whatever control character is
  still in the text it prints as well (the colour codes come from the styles and stay).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from harness.report.text import escape_controls, has_controls

UNBOUNDED_WIDTH = 1000  # a pipe without COLUMNS: as wide as the widest row needs
TRAILING_BLANKS = re.compile(r"(?:\s|\x1b\[[0-9;]*m)+$")  # blanks at the end, among any colour codes
COLOUR_CODE = re.compile(r"\x1b\[[0-9;]*m")


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def output_width() -> int | None:
    """COLUMNS when set to a number, else the terminal's width, else None (a pipe: unbounded)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if stdout_is_terminal():
        return shutil.get_terminal_size().columns
    return None


def plain_table(**options) -> Table:
    """A rule under the header, two blanks between columns, no frame."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), **options)


def minimum_width(table: Table) -> int:
    """The fewest columns the table takes without cutting a word: its no-wrap columns whole,
    the others as wide as their longest word (rich's own minimum wraps every column)."""
    console = Console(width=UNBOUNDED_WIDTH)
    widest = console.measure(table).maximum  # every column at its widest, with the padding
    for column in table.columns:
        cells = [Measurement.get(console, console.options, cell) for cell in [column.header, *column.cells]]
        low, high = max(m.minimum for m in cells), max(m.maximum for m in cells)
        need = high if column.no_wrap else low
        if column.max_width is not None:
            high, need = min(high, column.max_width), min(need, column.max_width)
        if column.min_width is not None:
            high, need = max(high, column.min_width), max(need, column.min_width)
        widest -= high - need
    return widest


def fit_table(
    build: Callable[[tuple[str, ...]], Table], width: int | None, droppable: Sequence[str]
) -> tuple[Table, tuple[str, ...]]:
    """`build(hidden)` with as few of the `droppable` columns hidden (in that order) as make it
    fit in `width` without cutting a word (None: unbounded, nothing hidden); returns the table
    and the columns hidden. When even all of them hidden it does not fit, rich lays it out."""
    hidden: tuple[str, ...] = ()
    table = build(hidden)
    for column in droppable:
        if width is None or minimum_width(table) <= width:
            break
        hidden += (column,)
        table = build(hidden)
    return table, hidden


def render_text(renderable: RenderableType, *, width: int | None = None, color: bool = False) -> str:
    """The renderable as text, `width` columns at most (None: unbounded), each line without
    trailing blanks, ending with a newline."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or UNBOUNDED_WIDTH,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
    )
    console.print(ControlsEscaped(renderable))
    lines = buffer.getvalue().splitlines()
    return "".join(_without_trailing_blanks(line) + "\n" for line in lines)


class ControlsEscaped:
    """A renderable printed with the control characters of its text escaped: the last guard
    before the terminal, after layout (text escaped before it, as every caller does, keeps
    the columns aligned). Control segments (cursor moves of a live display) are rich's own."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.renderable, options):
            if segment.control or not has_controls(segment.text, block=True):
                yield segment
            else:
                yield Segment(escape_controls(segment.text, block=True), segment.style)


def _without_trailing_blanks(line: str) -> str:
    """The line without blanks at its end; the colour codes among them are kept (they close
    the line's styles)."""
    tail = TRAILING_BLANKS.search(line)
    return line if tail is None else line[: tail.start()] + "".join(COLOUR_CODE.findall(tail.group()))


def print_renderable(renderable: RenderableType) -> None:
    """Print to stdout at its width, in colour only on a terminal."""
    sys.stdout.write(render_text(renderable, width=output_width(), color=stdout_is_terminal()))
    sys.stdout.flush()


DIFF_LINE_STYLES = (("+ ", "green"), ("- ", "red"), ("== ", "bold"), ("submission ", "bold"), ("  ⋯", "dim"))


def colored_diff(text: str) -> Text:
    """A diff or history text for a terminal: added lines green, removed red, headers bold.
    The characters are the text's own (no markup is read from it), control characters escaped."""
    colored = Text()
    for number, line in enumerate(escape_controls(text, block=True).split("\n")):
        if number:
            colored.append("\n")
        style = next((style for prefix, style in DIFF_LINE_STYLES if line.startswith(prefix)), "")
        colored.append(line, style=style)
    return colored


def page(text: str) -> None:
    """Show `text` (with its colour codes) through the pager: `$PAGER` run by the shell, else
    `less`, with `LESS=FRX` (and `LV=-c`) when unset, as git does; an empty PAGER, or no `less`
    on this machine, prints it as it is. Quitting the pager early is no error, and Ctrl-C goes
    to the pager (less uses it to stop a search), not to this process."""
    command = os.environ.get("PAGER", "less").strip()
    if not command or (command == "less" and shutil.which("less") is None):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    environment = {**os.environ}
    environment.setdefault("LESS", "FRX")
    environment.setdefault("LV", "-c")
    sys.stdout.flush()
    pager = subprocess.Popen(
        command, shell=True, stdin=subprocess.PIPE, env=environment
    )  # the user's own PAGER, run by the shell as git runs it
    try:
        with pager.stdin as pipe:
            pipe.write(text.encode("utf-8"))
    except (BrokenPipeError, KeyboardInterrupt):  # the pager quit before reading it all
        pass
    while True:
        try:
            pager.wait()
            return
        except KeyboardInterrupt:
            continue
