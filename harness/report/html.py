"""The leaderboard rendered: `render_leaderboard` picks the format (table, json, markdown, html);
markdown and HTML come from the jinja2 templates in harness/report/templates.

The HTML is one self-contained page (inline CSS and SVG, no external assets): the ranked table, a
chart of score per revision for each lineage, and each revision's diff against its parent with
added and removed lines coloured.

The chart is plain SVG laid out here (x = revision number, y = score in ms, a line from each
scored parent to its scored child, each point labelled with its submission id where the label
overlaps nothing, the reference as a dashed horizontal line; the legend lists the lineages that
have points). When the scores span more than a factor of ten the y axis is logarithmic, so that a slow first
revision does not flatten every later one into the x axis.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from sqlalchemy.orm import Session

from harness.errors import HarnessError
from harness.report.diff import DiffLine, diff_lines, format_diff_line
from harness.report.history import diff_inputs
from harness.report.leaderboard import (
    ReportFormat,
    board_title,
    format_error_ms,
    format_figure,
    format_ms,
    format_speedup,
    format_timing,
    format_verdict,
    leaderboard_renderable,
    lineage_label,
    speedup_legend,
    verdict_notes,
)
from harness.report.terminal import render_text
from harness.report.text import escape_controls, escape_json_controls, escape_template_value
from harness.standing.batch import shape_key
from harness.standing.board import Leaderboard, LeaderboardEntry, ShapeTiming
from harness.tasks.spec import shape_label

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

UNRANKED_LEGEND = "not ranked (failed or not timed)"
LEGEND_CHAR_PX = 8  # a generous width of one character of the 13px legend font
UNRANKED_MARK_SPACING = 16  # px between the marks of unranked revisions at one revision number
# Colour-blind-safe qualitative palette (Okabe & Ito), cycled when there are more lineages.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#000000")


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    """Templates under harness/report/templates; HTML and SVG autoescaped, markdown not; every
    `{{ ... }}` shown with its control characters escaped (harness.report.text)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html.j2", "svg.j2"), default_for_string=False
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=escape_template_value,
    )
    environment.filters.update(
        ms=format_ms,
        error_ms=format_error_ms,
        speedup=format_speedup,
        timing=format_timing,
        shape_label=shape_label,
        md=_markdown_cell,
        lineage_cell=lambda entry, board: lineage_label(board, entry),
        diff_line=format_diff_line,
        timings=_timings_by_shape,
        verdict=format_verdict,
        figure=format_figure,
        title=board_title,
        speedup_legend=speedup_legend,
    )
    return environment


def _markdown_cell(text: str) -> str:
    """Text (a candidate's reason, a name) as one markdown table cell: HTML-significant characters
    as entities (markdown passes raw HTML through), pipes and line breaks unable to end the cell,
    control characters escaped."""
    text = html.escape(escape_controls(str(text), block=True), quote=False)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _timings_by_shape(entry: LeaderboardEntry, shapes: list[dict[str, Any]]) -> list[ShapeTiming | None]:
    timings = {shape_key(timing.shape): timing for timing in entry.benchmarks}
    return [timings.get(shape_key(shape)) for shape in shapes]


def render_markdown(board: Leaderboard) -> str:
    return (
        template_environment()
        .get_template("leaderboard.md.j2")
        .render(
            board=board,
            ranked=board.ranked(),
            unranked=board.unranked(),
            shapes=board.shapes(),
            notes=verdict_notes(board),
        )
    )


# --- the chart ------------------------------------------------------------------------------


@dataclass
class ChartPoint:
    x: float
    y: float
    label: str
    title: str
    # Where its label goes (place_labels): an offset from the point and the text's anchor;
    # `label_shown` False when no free spot was found (the point's title still names it).
    label_dx: float = 8.0
    label_dy: float = -8.0
    label_anchor: str = "start"
    label_shown: bool = True


@dataclass
class ChartSeries:
    """One lineage's scored revisions, and a line from each parent to its child when both are
    scored (siblings are not joined: each hangs from its parent)."""

    lineage: str
    color: str
    points: list[ChartPoint] = field(default_factory=list)
    edges: list[tuple[ChartPoint, ChartPoint]] = field(default_factory=list)


LABEL_CHAR_PX = 7.5  # a generous width of one character of the 12px bold label font
LABEL_HEIGHT_PX = 13
# Label positions tried in turn: (dx, dy, anchor), then the same further up or down.
LABEL_SPOTS = ((8, -8, "start"), (8, 16, "start"), (-8, -8, "end"), (-8, 16, "end"))


def _label_box(point: ChartPoint, dx: float, dy: float, anchor: str) -> tuple[float, float, float, float]:
    return text_box(point.x + dx, point.y + dy, point.label, anchor)


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


Box = tuple[float, float, float, float]  # left, top, right, bottom in px


def text_box(x: float, baseline: float, text: str, anchor: str, char_px: float = LABEL_CHAR_PX) -> Box:
    """The box a line of text takes (generous: LABEL_CHAR_PX per character, 2 px either side)."""
    width = char_px * len(text) + 4
    left = x - 2 - (width - 4 if anchor == "end" else (width - 4) / 2 if anchor == "middle" else 0)
    return left, baseline - LABEL_HEIGHT_PX + 3, left + width, baseline + 3


def _inside(box: Box, bounds: Box) -> bool:
    return bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]


def _marks(points: list[ChartPoint], edges: list[tuple[ChartPoint, ChartPoint]]) -> list[Box]:
    """The boxes the points and the lines between them take (a line as small boxes along it)."""
    boxes = [(p.x - 6, p.y - 6, p.x + 6, p.y + 6) for p in points]
    for start, end in edges:
        steps = max(1, int(math.hypot(end.x - start.x, end.y - start.y) / 4))
        for step in range(steps + 1):
            x = start.x + (end.x - start.x) * step / steps
            y = start.y + (end.y - start.y) * step / steps
            boxes.append((x - 1.5, y - 1.5, x + 1.5, y + 1.5))
    return boxes


def place_labels(points: list[ChartPoint], taken: list[Box], bounds: Box) -> None:
    """Give each point a label position inside `bounds` that overlaps nothing in `taken` (the
    points, the lines, the other labels: `_marks`) nor another point's label (greedy, in order
    of x then y: the first free spot of LABEL_SPOTS, then those moved away step by step). A
    point with no free spot has no label (`label_shown` False): a label on top of another is
    unreadable."""
    taken = list(taken)
    for point in sorted(points, key=lambda p: (p.x, p.y)):
        spots = [
            (dx, dy + direction * step * LABEL_HEIGHT_PX, anchor)
            for step in range(6)
            for dx, dy, anchor in LABEL_SPOTS
            for direction in ((-1 if dy < 0 else 1),)
        ]
        chosen = next(
            (
                spot
                for spot in spots
                for box in [_label_box(point, *spot)]
                if _inside(box, bounds) and not any(_overlaps(box, other) for other in taken)
            ),
            None,
        )
        if chosen is None:
            point.label_shown = False
            continue
        point.label_dx, point.label_dy, point.label_anchor = chosen
        taken.append(_label_box(point, *chosen))


def _reference_label_spot(text: str, y: float, plot: Box, avoid: list[Box]) -> tuple[float, float, str, Box]:
    """Where the reference line's label goes: above or below the line, at its right or left
    end, the first spot inside the plot that overlaps no point (x, baseline, anchor, box)."""
    left, _top, right, _bottom = plot
    spots = [
        (right - 6, y - 6, "end"),
        (right - 6, y + 16, "end"),
        (left + 6, y - 6, "start"),
        (left + 6, y + 16, "start"),
    ]
    for x, baseline, anchor in spots:
        box = text_box(x, baseline, text, anchor)
        if _inside(box, plot) and not any(_overlaps(box, other) for other in avoid):
            return x, baseline, anchor, box
    x, baseline, anchor = spots[0]
    return x, baseline, anchor, text_box(x, baseline, text, anchor)


def _tick_every(slot_px: float, labels: list[str]) -> int:
    """Label every n-th revision (n = 1, 2, 5, 10, 20, 50, ...) so that tick labels are apart."""
    needed = LABEL_CHAR_PX * max((len(label) for label in labels), default=1) + 8
    steps = (m * 10**power for power in range(7) for m in (1, 2, 5))
    return next(step for step in steps if step * slot_px >= needed or step >= len(labels))


@dataclass
class ChartTick:
    position: float
    label: str


@dataclass
class Chart:
    """An SVG chart laid out in pixels: the plot area is [left, right] x [top, bottom]."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    log_scale: bool
    x_ticks: list[ChartTick]
    y_ticks: list[ChartTick]
    series: list[ChartSeries]
    unranked: list[ChartPoint]
    reference_y: float | None
    reference_label: str
    reference_label_x: float = 0.0
    reference_label_y: float = 0.0
    reference_label_anchor: str = "end"


def _nice_step(span: float, target_ticks: int = 6) -> float:
    raw = span / target_ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        if multiple * magnitude >= raw:
            return multiple * magnitude
    return 10 * magnitude


def _y_scale(values: list[float]) -> tuple[bool, float, float, list[float]]:
    """(log scale?, low, high, tick values) covering every value: a log scale when the values
    span more than a factor of ten, else a linear scale from zero."""
    low, high = min(values), max(values)
    if high / low > 10:
        low_exp, high_exp = math.floor(math.log10(low)), math.ceil(math.log10(high))
        ticks = [
            m * 10**e
            for e in range(low_exp, high_exp + 1)
            for m in (1, 2, 5)
            if low <= m * 10**e * 1.0001 and m * 10**e <= high * 1.5
        ]
        lower = min([low, *ticks]) / 1.15
        upper = max([high, *ticks]) * 1.15
        return True, lower, upper, ticks
    step = _nice_step(high)  # linear axes start at zero, so that bar-like heights compare honestly
    ticks = [i * step for i in range(math.ceil(high * 1.05 / step) + 1)]  # headroom above the top point
    return False, 0.0, ticks[-1], ticks


def build_chart(board: Leaderboard, width: int = 1100, height: int = 440) -> Chart | None:
    """Score per revision number, one series per lineage; None when nothing has a score."""
    reference = board.reference_lineage()
    scored = [entry for entry in board.ranked() if entry.lineage != reference and entry.score_ms]
    values = [entry.score_ms for entry in scored if entry.score_ms]
    if board.reference_ms:
        values.append(board.reference_ms)
    if not values:
        return None
    log_scale, y_low, y_high, y_tick_values = _y_scale(values)
    lineages = sorted({entry.lineage for entry in scored})  # the legend lists lineages with points
    legend_chars = max(len(label) for label in [*lineages, reference, UNRANKED_LEGEND])
    left, right, top, bottom = 80, width - 60 - LEGEND_CHAR_PX * legend_chars, 30, height - 60
    max_revision = max([entry.revision for entry in board.entries if entry.lineage != reference] or [1])

    def x_of(revision: int) -> float:
        return left + (revision - 0.5) / max_revision * (right - left)

    def y_of(value: float) -> float:
        if log_scale:
            fraction = (math.log(value) - math.log(y_low)) / (math.log(y_high) - math.log(y_low))
        else:
            fraction = (value - y_low) / (y_high - y_low)
        return bottom - fraction * (bottom - top)

    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(lineages)}
    points: dict[str, list[tuple[int, ChartPoint]]] = defaultdict(list)
    point_of: dict[int, ChartPoint] = {}
    for entry in scored:
        assert entry.score_ms is not None
        title = f"{entry.lineage} r{entry.revision}: submission {entry.submission_id}, {format_ms(entry.score_ms)} ms"
        point = ChartPoint(x_of(entry.revision), y_of(entry.score_ms), str(entry.submission_id), title)
        points[entry.lineage].append((entry.revision, point))
        point_of[entry.submission_id] = point
    series = [
        ChartSeries(
            name,
            colors[name],
            [point for _, point in sorted(points[name], key=lambda item: item[0])],
            [
                (point_of[entry.parent_id], point_of[entry.submission_id])
                for entry in scored
                if entry.lineage == name and entry.parent_id in point_of
            ],
        )
        for name in lineages
    ]
    all_points = [point for item in series for point in item.points]
    reference_y = y_of(board.reference_ms) if board.reference_ms else None
    reference_label = f"reference {format_ms(board.reference_ms)} ms" if board.reference_ms else ""
    plot = (left, top, right, bottom)
    taken = _marks(all_points, [edge for item in series for edge in item.edges])
    spot = (0.0, 0.0, "end")
    if reference_y is not None:
        *spot, box = _reference_label_spot(reference_label, reference_y, plot, taken)
        taken.append(box)
    unranked: list[ChartPoint] = []
    for entry in board.unranked():  # each mark at the lowest row where it overlaps nothing drawn
        if entry.lineage == reference:
            continue
        x = x_of(entry.revision)
        text = f"× {entry.submission_id}"
        row = 0
        while bottom - UNRANKED_MARK_SPACING * (row + 1) > top and any(
            _overlaps(text_box(x, bottom - 6 - UNRANKED_MARK_SPACING * row, text, "middle"), box)
            for box in taken
        ):
            row += 1
        y = bottom - UNRANKED_MARK_SPACING * row
        taken.append(text_box(x, y - 6, text, "middle"))
        title = f"{entry.lineage} r{entry.revision}: {entry.status}"
        unranked.append(ChartPoint(x, y, str(entry.submission_id), title))
    place_labels(all_points, taken, plot)
    tick_labels = [f"r{n}" for n in range(1, max_revision + 1)]
    every = _tick_every((right - left) / max_revision, tick_labels)
    return Chart(
        width=width,
        height=height,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        log_scale=log_scale,
        x_ticks=[
            ChartTick(x_of(n), f"r{n}")
            for n in range(1, max_revision + 1)
            if n == 1 or (n % every == 0 and n > every)
        ],
        y_ticks=[ChartTick(y_of(value), f"{value:g}") for value in y_tick_values if y_low <= value <= y_high],
        series=series,
        unranked=unranked,
        reference_y=reference_y,
        reference_label=reference_label,
        reference_label_x=spot[0],
        reference_label_y=spot[1],
        reference_label_anchor=spot[2],
    )


# --- the page -------------------------------------------------------------------------------


@dataclass
class RevisionDiff:
    entry: LeaderboardEntry
    against: int | None
    lines: list[DiffLine]


def revision_diffs(session: Session, board: Leaderboard) -> list[RevisionDiff]:
    """Each entry's diff against its parent (a first revision: every line added)."""
    return [
        RevisionDiff(entry, entry.parent_id, diff_lines(*diff_inputs(session, entry.submission_id)))
        for entry in board.entries
    ]


def render_leaderboard(
    session: Session,
    board: Leaderboard,
    fmt: ReportFormat,
    *,
    color: bool = False,
    width: int | None = None,
    wide: bool | None = False,
) -> str:
    """The leaderboard as text in one of the formats, ending with a newline. `color`, `width`
    (None: unbounded) and `wide` (the per-shape columns; None: when they fit) apply to the
    table (ANSI colours for a terminal, plain text without trailing blanks otherwise)."""
    if fmt == "json":
        return escape_json_controls(board.model_dump_json(indent=2)) + "\n"
    if fmt == "markdown":
        return render_markdown(board)
    if fmt == "html":
        return render_html(session, board)
    if fmt != "table":
        raise HarnessError(f"unknown format {fmt!r} (choose from table, json, markdown, html)")
    return render_text(leaderboard_renderable(board, wide=wide, width=width), width=width, color=color)


def render_html(session: Session, board: Leaderboard) -> str:
    return (
        template_environment()
        .get_template("leaderboard.html.j2")
        .render(
            board=board,
            ranked=board.ranked(),
            unranked=board.unranked(),
            shapes=board.shapes(),
            chart=build_chart(board),
            unranked_legend=UNRANKED_LEGEND,
            notes=verdict_notes(board),
            diffs=revision_diffs(session, board),
        )
    )
